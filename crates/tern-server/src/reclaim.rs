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
//! 2. calls [`release_free_memory`] when the pool gave buffers back, when the heap has shrunk
//!    by [`RELEASE_AFTER_BYTES`] or more since the last release, or when it has shrunk at all
//!    and then stayed quiet (it never rose above its previous pass's reading for a whole
//!    period): `malloc_trim` walks the arenas and later allocations fault the returned pages
//!    in again, so it runs when a burst is over, not on every dip of a steady load. Without
//!    the quiet rule the last few hundred KiB a wave frees after the big release stayed
//!    unreturned, and with them 1-2 MiB of RSS (measured, `bench/soak.sh 2 500 40`: +1.9 MiB
//!    after the load; one more `malloc_trim` took it to +12 KiB).
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

use crate::start::StartError;

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
    /// The heap at the last pass, and the highest reading since.
    last_pass: usize,
    period_peak: usize,
}

/// What one pass decided: packet buffers to trim was always done; the rest are the reasons
/// to return free heap pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Release {
    /// The heap fell by [`RELEASE_AFTER_BYTES`] or more since the last release.
    burst: bool,
    /// It fell, and never rose above the last pass's reading during this period.
    quiet: bool,
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
            // No pass yet: the first one cannot call the heap quiet.
            last_pass: 0,
            period_peak: 0,
        })
    }

    /// Notes a heap reading; on a due pass, says whether to return free pages (and starts
    /// the next period).
    fn observe(&mut self, heap: usize, now: Instant) -> Option<Release> {
        self.heap_peak = self.heap_peak.max(heap);
        self.period_peak = self.period_peak.max(heap);
        if now < self.next {
            return None;
        }
        self.next = now + self.every;
        let shrunk = self.heap_peak.saturating_sub(heap);
        let release = Release {
            burst: shrunk >= RELEASE_AFTER_BYTES,
            quiet: shrunk > 0 && self.period_peak <= self.last_pass,
        };
        self.last_pass = heap;
        self.period_peak = heap;
        Some(release)
    }

    /// After pages were returned (or tried): the next shrink counts from here.
    fn released(&mut self, heap: usize) {
        self.heap_peak = heap;
        self.period_peak = self.period_peak.max(heap);
    }

    /// Run the pass if it is due. Returns the packet buffers given back and whether the
    /// allocator released memory.
    pub fn tick(&mut self, now: Instant) -> (usize, bool) {
        let heap = CountingAlloc::stats().live_bytes;
        let Some(why) = self.observe(heap, now) else {
            return (0, false);
        };
        let buffers = self.pool.trim();
        if buffers == 0 && !why.burst && !why.quiet {
            return (0, false);
        }
        let shrunk = self.heap_peak.saturating_sub(heap);
        let released = release_free_memory();
        self.released(CountingAlloc::stats().live_bytes);
        debug!(
            buffers,
            heap_shrunk_bytes = shrunk,
            burst = why.burst,
            quiet = why.quiet,
            released,
            "gave back what a burst left (packet buffers above the pool's idle size, free heap pages)"
        );
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

/// Starts the pass over the packet pool `pool` every `every_s` seconds
/// (`tunables.pool_trim_s`) on its thread; `None` when `every_s` is 0.
pub fn start(pool: &BufferPool, every_s: u64) -> Result<Option<ReclaimThread>, StartError> {
    Reclaimer::new(pool.clone(), every_s, Instant::now())
        .map(|r| r.spawn().map_err(StartError::thread("reclaim")))
        .transpose()
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

#[cfg(test)]
mod tests {
    use super::*;
    use tern_pool::{MemoryRegistry, PoolConfig};

    fn reclaimer(now: Instant) -> Reclaimer {
        let reg = Box::leak(Box::new(MemoryRegistry::new()));
        let pool = BufferPool::new_in(reg, PoolConfig::packets("reclaim-test")).expect("pool");
        Reclaimer::new(pool, 2, now).expect("every 2 s")
    }

    /// Feeds one reading a second for `secs` seconds from `*t`; the decisions of due passes.
    fn run(r: &mut Reclaimer, t: &mut Instant, readings: &[usize]) -> Vec<Release> {
        let mut out = Vec::new();
        for &heap in readings {
            *t += Duration::from_secs(1);
            if let Some(why) = r.observe(heap, *t) {
                if why.burst || why.quiet {
                    r.released(heap);
                }
                out.push(why);
            }
        }
        out
    }

    const MB: usize = 1 << 20;

    #[test]
    fn a_burst_releases_at_once_and_the_tail_of_it_once_the_heap_is_quiet() {
        let mut t = Instant::now();
        let mut r = reclaimer(t);
        let idle = 10 * MB;
        // Load: the heap grows and wobbles; passes at 2 s and 4 s see it rising.
        let load = run(&mut r, &mut t, &[idle, 12 * MB, 13 * MB, 13 * MB + 4096]);
        assert!(load.iter().all(|w| !w.burst && !w.quiet), "{load:?}");
        // The wave ends: 3 MB freed at once (burst), then 300 KB more trickles out.
        let end = run(&mut r, &mut t, &[10 * MB + 300_000, 10 * MB + 300_000]);
        assert_eq!(end.len(), 1);
        assert!(end[0].burst, "{end:?}");
        let tail = run(&mut r, &mut t, &[idle, idle]);
        // The tail is below the burst's threshold; the quiet rule returns it.
        assert_eq!(
            tail,
            [Release {
                burst: false,
                quiet: true
            }]
        );
        // Nothing more to return: no release while idle.
        let idle_passes = run(&mut r, &mut t, &[idle, idle, idle, idle]);
        assert!(
            idle_passes.iter().all(|w| !w.burst && !w.quiet),
            "{idle_passes:?}"
        );
    }

    #[test]
    fn a_steady_load_that_dips_and_rises_is_not_trimmed_on_every_dip() {
        let mut t = Instant::now();
        let mut r = reclaimer(t);
        let base = 20 * MB;
        // Sessions come and go: each period the heap dips below and then rises above the
        // previous pass's reading.
        let mut readings = vec![base];
        for _ in 0..10 {
            readings.extend([base - 200_000, base + 100_000]);
        }
        let passes = run(&mut r, &mut t, &readings);
        assert!(passes.len() >= 5);
        assert!(passes.iter().all(|w| !w.quiet && !w.burst), "{passes:?}");
    }
}
