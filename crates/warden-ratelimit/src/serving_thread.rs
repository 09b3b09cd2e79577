//! Which gRPC serving thread the current code runs on. The server marks each of its serving
//! threads with an index; the Redis store keys its per-thread connections by it, so that a
//! decision's round trip never leaves the thread that serves the call.

use std::cell::Cell;

thread_local! {
    static INDEX: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Marks the current thread as serving thread `index` (for the rest of its life).
pub(crate) fn mark(index: usize) {
    INDEX.with(|i| i.set(Some(index)));
}

/// The current serving thread's index; `None` on any other thread (control-plane runtime,
/// in-process callers).
pub(crate) fn current() -> Option<usize> {
    INDEX.with(Cell::get)
}
