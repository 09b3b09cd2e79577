//! A background thread's scheduling priority: its nice value (Linux gives each thread its
//! own), so work that can wait (the span exporter's batches) yields the core to the workers.

/// Raise the calling thread's nice value to `nice` (lower its priority); only this thread's.
#[cfg(target_os = "linux")]
pub fn lower_current_thread(nice: i32) -> std::io::Result<()> {
    // SAFETY: plain system calls on the calling thread's own id; no memory is passed.
    #[allow(unsafe_code)]
    let done = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS as _, tid as libc::id_t, nice)
    };
    if done == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Elsewhere the thread keeps its priority.
#[cfg(not(target_os = "linux"))]
pub fn lower_current_thread(_nice: i32) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread's nice value (field 19 of its stat, counted after the command's `)`).
    fn nice_of(tid: i64) -> i64 {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        after.split(' ').nth(16).unwrap().parse().unwrap()
    }

    fn own_tid() -> i64 {
        #[allow(unsafe_code)]
        // SAFETY: no arguments; returns the caller's thread id.
        let tid = unsafe { libc::gettid() };
        i64::from(tid)
    }

    #[test]
    fn only_the_calling_thread_is_lowered() {
        let main_tid = own_tid();
        let before = nice_of(main_tid);
        if before >= 10 {
            return; // already as low: nothing to see
        }
        let lowered = std::thread::spawn(|| {
            lower_current_thread(10).unwrap();
            nice_of(own_tid())
        })
        .join()
        .unwrap();
        assert_eq!(lowered, 10);
        assert_eq!(nice_of(main_tid), before, "the calling thread's only");
    }
}
