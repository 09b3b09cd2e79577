//! Polling for a condition a process or a server reaches on its own time (a port that starts
//! accepting, a counter that moves), bounded so a test fails instead of hanging.

use std::time::{Duration, Instant};

/// Whether `condition` became true within `limit`, checked every 20 ms.
pub fn wait_until(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
