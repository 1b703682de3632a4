//! Per-thread shard index for the counting allocator's counters.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Number of counter shards (a power of two).
pub(crate) const SHARDS: usize = 32;

static NEXT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // `const` initialiser and a type without `Drop`: no lazy heap initialisation and no TLS
    // destructor, so this is usable from inside the global allocator.
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
    // Bytes this thread allocated minus bytes it freed (same constraints as `SHARD`).
    static NET: Cell<isize> = const { Cell::new(0) };
}

/// Adds `bytes` to this thread's net allocation count (ignored during TLS teardown).
#[inline]
pub(crate) fn thread_net_add(bytes: isize) {
    let _ = NET.try_with(|n| n.set(n.get().wrapping_add(bytes)));
}

/// This thread's net allocated bytes since it started (0 during TLS teardown).
#[inline]
pub(crate) fn thread_net() -> isize {
    NET.try_with(Cell::get).unwrap_or(0)
}

/// This thread's shard, assigned round-robin on first use (shard 0 during TLS teardown).
#[inline]
pub(crate) fn thread_shard() -> usize {
    SHARD
        .try_with(|s| {
            let v = s.get();
            if v != usize::MAX {
                return v;
            }
            let v = NEXT.fetch_add(1, Relaxed) % SHARDS;
            s.set(v);
            v
        })
        .unwrap_or(0)
}
