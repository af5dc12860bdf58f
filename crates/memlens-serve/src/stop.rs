//! Stopping the server cleanly: SIGINT, SIGTERM and SIGHUP end `memlens serve` after its open
//! windows have switched sampling off again where they switched it on (a window killed with the
//! server must not leave a process sampling for ever), with a line saying why.
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// The signal that asked the server to stop (0: none yet).
static SIGNALLED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNALLED.store(sig, Ordering::SeqCst);
}

/// Catch SIGINT, SIGTERM and SIGHUP (only `memlens serve` does: under `memlens run --serve` the
/// program's own signals are `run`'s business). The handler only stores the signal; the accept
/// loop notices it within its poll interval.
pub fn catch_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a handler that only stores to an atomic is async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// The name of the signal that asked us to stop, if one did.
pub fn signalled() -> Option<&'static str> {
    match SIGNALLED.load(Ordering::SeqCst) {
        0 => None,
        libc::SIGINT => Some("SIGINT"),
        libc::SIGTERM => Some("SIGTERM"),
        libc::SIGHUP => Some("SIGHUP"),
        _ => Some("a signal"),
    }
}

/// Whether the server is stopping, and a sleep that ends as soon as it is.
#[derive(Default)]
pub struct Stop {
    stopping: Mutex<bool>,
    cv: Condvar,
}

impl Stop {
    pub fn trigger(&self) {
        *self.stopping.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.cv.notify_all();
    }

    pub fn is_set(&self) -> bool {
        *self.stopping.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sleep for `d`; false when the server started stopping before it was over.
    pub fn sleep(&self, d: Duration) -> bool {
        let end = Instant::now() + d;
        let mut s = self.stopping.lock().unwrap_or_else(|p| p.into_inner());
        while !*s {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            s = self
                .cv
                .wait_timeout(s, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_sleep_ends_when_the_server_stops() {
        let s = Arc::new(Stop::default());
        assert!(s.sleep(Duration::from_millis(10)));
        let s2 = s.clone();
        let t = std::thread::spawn(move || s2.sleep(Duration::from_secs(60)));
        std::thread::sleep(Duration::from_millis(50));
        s.trigger();
        assert!(!t.join().unwrap());
        assert!(s.is_set());
    }
}
