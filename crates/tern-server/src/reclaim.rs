//! Giving back what a burst left: the housekeeping pass that returns the packet pool to its
//! idle size and the C allocator's free pages to the system.
//!
//! A wave of viewers or a publisher's stream going away frees thousands of packet buffers
//! and sessions at once. The pool keeps up to `pool_max_free` free buffers and glibc keeps
//! freed pages in its arenas; both are right during the wave and wrong an hour after it.
//! Every `tunables.pool_trim_s` seconds this pass:
//!
//! 1. trims the packet pool to what the period since the last pass needed (its peak in use
//!    plus the low-water headroom, at least `pool_initial`; see [`BufferPool::trim`]), so a
//!    burst is given back one quiet period after it ended;
//! 2. calls [`release_free_memory`] when the pool gave buffers back or the heap has shrunk by
//!    [`RELEASE_AFTER_BYTES`] or more since the last release: `malloc_trim` walks the
//!    arenas, so it runs only when there is something worth returning.
//!
//! With reclaiming on, blocks of [`MMAP_THRESHOLD_BYTES`] or more get mappings of their own
//! (see [`set_mmap_threshold`]). Measured with rounds of 1,500 WebRTC viewers on `tern demo`:
//! with glibc's sliding threshold RSS rose by 0.3-0.9 MiB after every round; with the fixed
//! one it stays within 0.1 MiB of where the first round left it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tern_pool::{BufferPool, CountingAlloc, release_free_memory, set_mmap_threshold};
use tracing::debug;

/// Heap shrinkage (from its peak since the last release) worth a `malloc_trim`.
pub const RELEASE_AFTER_BYTES: usize = 1 << 20;

/// Blocks this large or larger are mapped on their own and unmapped when freed. Nothing on a
/// packet path allocates (packets live in the pool); a DTLS handshake's larger buffers and
/// tables grown for a peak are what crosses it.
pub const MMAP_THRESHOLD_BYTES: usize = 32 * 1024;

/// The pass's state, ticked once a second on a thread of its own ([`Reclaimer::spawn`]).
pub struct Reclaimer {
    pool: BufferPool,
    every: Duration,
    next: Instant,
    /// Highest heap reading since the last release.
    heap_peak: usize,
}

impl Reclaimer {
    /// A pass over `pool` every `every_s` seconds, with the allocator's mapping threshold
    /// fixed; `None` (and the allocator left as it is) when `every_s` is 0.
    pub fn new(pool: BufferPool, every_s: u64, now: Instant) -> Option<Reclaimer> {
        let every = Duration::from_secs(every_s);
        if every_s > 0 && !set_mmap_threshold(MMAP_THRESHOLD_BYTES) {
            debug!("the C allocator has no mapping threshold to set; left as it is");
        }
        (every_s > 0).then(|| Reclaimer {
            pool,
            every,
            next: now + every,
            heap_peak: 0,
        })
    }

    /// Run the pass if it is due. Returns the packet buffers given back and whether the
    /// allocator released memory.
    pub fn tick(&mut self, now: Instant) -> (usize, bool) {
        let heap = CountingAlloc::stats().live_bytes;
        self.heap_peak = self.heap_peak.max(heap);
        if now < self.next {
            return (0, false);
        }
        self.next = now + self.every;
        let buffers = self.pool.trim();
        let shrunk = self.heap_peak.saturating_sub(heap);
        let released = (buffers > 0 || shrunk >= RELEASE_AFTER_BYTES) && release_free_memory();
        if buffers > 0 || shrunk >= RELEASE_AFTER_BYTES {
            self.heap_peak = CountingAlloc::stats().live_bytes;
            debug!(
                buffers,
                heap_shrunk_bytes = shrunk,
                released,
                "gave back what a burst left (packet buffers above the pool's idle size, free heap pages)"
            );
        }
        (buffers, released)
    }

    /// Run the pass on a thread of its own, ticked once a second, until the returned handle
    /// is dropped. Not a runtime task: `malloc_trim` can take milliseconds on a large heap,
    /// and `block_in_place` would start a fresh runtime thread each time (whose own
    /// allocations then come and go with the pass). The thread waits with `park_timeout`,
    /// which allocates nothing, so the heap figures it reads are not moved by its waiting.
    pub fn spawn(mut self) -> std::io::Result<ReclaimThread> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("tern-reclaim".into())
            .spawn(move || {
                loop {
                    std::thread::park_timeout(Duration::from_secs(1));
                    if stopping.load(Ordering::Acquire) {
                        return;
                    }
                    self.tick(Instant::now());
                }
            })?;
        Ok(ReclaimThread {
            stop,
            thread: Some(thread),
        })
    }
}

/// The reclaim pass's thread; dropping it stops the thread and waits for it.
pub struct ReclaimThread {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for ReclaimThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}
