//! How many end-to-end tests do their work at once, apart from how many libtest starts.
//!
//! Some tests must not overlap others of their module (they push real-time media or load the
//! machine), and hold that module's lock. Under libtest a test waiting on such a lock still
//! takes one of its `--test-threads`: with three threads, a run of one module's tests left
//! two threads waiting and one working (in CI, 482 s of the cluster tests' reported time was
//! 193 s of work). So every test takes a slot first: `E2E_THREADS` of them (default 3), and
//! libtest may start every test at once (`--test-threads` as high as the number of tests;
//! `scripts/test.sh` does). A test of a serial module takes its module's lock before its
//! slot, so a waiting test holds no slot, and it goes ahead of the tests that hold no lock:
//! the long serial runs start early instead of ending the binary alone.

use std::sync::{Condvar, LazyLock, Mutex, MutexGuard};

/// Slots still free, and how many tests holding a module lock wait for one.
struct State {
    free: usize,
    serial_waiting: usize,
}

static SLOTS: LazyLock<(Mutex<State>, Condvar)> = LazyLock::new(|| {
    let n = std::env::var("E2E_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(3);
    (
        Mutex::new(State {
            free: n,
            serial_waiting: 0,
        }),
        Condvar::new(),
    )
});

fn state() -> MutexGuard<'static, State> {
    SLOTS.0.lock().unwrap_or_else(|e| e.into_inner())
}

/// One of the `E2E_THREADS` slots, given back on drop.
pub struct Slot(());

impl Slot {
    fn take(serial: bool) -> Slot {
        let mut s = state();
        if serial {
            s.serial_waiting += 1;
        }
        // A test without a module lock lets every waiting serial test go first.
        while s.free == 0 || (!serial && s.serial_waiting > 0) {
            s = SLOTS.1.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        if serial {
            s.serial_waiting -= 1;
        }
        s.free -= 1;
        drop(s);
        // Another waiter may be able to go now (a serial one just left the queue).
        SLOTS.1.notify_all();
        Slot(())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        state().free += 1;
        SLOTS.1.notify_all();
    }
}

/// Waits for a slot: the first line of every end-to-end test that holds no module lock.
pub fn slot() -> Slot {
    Slot::take(false)
}

/// A module's lock and then a slot: the first line of a test that must not overlap the
/// others of its module. The slot is given back before the lock.
pub struct Serial {
    _slot: Slot,
    _lock: MutexGuard<'static, ()>,
}

/// Takes `lock` (a poisoned lock is taken all the same: the test that panicked failed on its
/// own), then a slot ahead of the tests without a lock.
pub fn serial(lock: &'static Mutex<()>) -> Serial {
    let lock = lock.lock().unwrap_or_else(|e| e.into_inner());
    Serial {
        _slot: Slot::take(true),
        _lock: lock,
    }
}
