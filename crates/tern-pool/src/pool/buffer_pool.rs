//! [`BufferPool`]: the handle users hold: allocation, refill, warnings, statistics.

use std::fmt;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};
use std::time::Instant;

use crate::config::{PoolConfig, PoolError};
use crate::registry::{MemoryRegistry, MemorySource, PoolReport};

use super::buf::Buf;
use super::inner::*;
use super::stats::PoolStats;
use super::storage::{PoolBacking, Storage};

/// A pool of equally sized packet buffers (spead2 `memory_pool` semantics).
///
/// - Requests of `lower..=upper` bytes get an `upper`-byte buffer, the most recently freed one
///   first (LIFO, so it is likely still in cache).
/// - Requests outside that range are still served, with a heap buffer of exactly the requested
///   length that is freed, not pooled, when dropped; they count as misses (and `bypasses`).
///   A jumbo datagram is never lost to the pool.
/// - `initial` buffers are allocated (and with `prefault`, faulted in) by
///   [`BufferPool::new`], in one anonymous mapping when `prefault` or `huge_pages` is set
///   (see [`PoolBacking`]).
/// - A freed buffer goes back to the system if `max_free` buffers are already free.
/// - When the free count drops below `low_water` the pool sets
///   [`BufferPool::needs_refill`]; [`BufferPool::refill`], run off the packet path (by
///   [`BufferPool::maintain`]), tops the free count back up to `low_water`.
/// - [`BufferPool::trim`], on a housekeeping tick, gives back the free heap buffers a burst
///   left once it has passed, so an idle pool returns to `initial`.
/// - An `alloc` that finds the pool dry still serves, with a new heap buffer that joins the
///   pool when freed. It counts a miss and, on the first dry miss since buffers were last
///   available, an empty event, and calls the warn hook (by default a line on stderr) at most
///   once per [`WARN_INTERVAL`] of the pool clock.
///
/// The pool never reads the clock: the caller advances it through
/// [`BufferPool::maintain`] or [`BufferPool::set_clock`]. (If nobody does, the warning fires
/// once and then stays quiet.)
///
/// # Fast path
///
/// Each thread keeps up to [`THREAD_CACHE`] free buffers per pool in a thread-local LIFO
/// stack; the shared free list's lock is taken only to move [`BATCH`] buffers at a time.
/// A hit or a free costs the thread-local lookup and a few plain loads and stores: no lock,
/// no locked instruction, no reference count (the buffer's reference to the pool travels
/// with the free buffer). The in-use count and the `max_free` budget are kept per thread and
/// settled with the pool a batch at a time (see `Inner` in the source): `free <= max_free`
/// holds at every moment, but a thread may keep up to `2 * max(1, min(max_free / 16, BATCH))`
/// units of the `max_free` budget in reserve, so a pool shared by many threads can free a
/// buffer a little before `max_free` is reached.
///
/// On the common paths (the thread's cache for this pool was the last one it used; a buffer
/// at hand, or room for one) an allocation or a free is one compare of the thread's
/// unsettled count with precomputed bounds plus the list operation; the high-water marks and
/// the low-water check run when that count reaches a new high since the thread last settled
/// it, and at every settle (see [`PoolStats::high_water`]). Each buffer carries a small
/// descriptor (its memory and its pool reference, boxed once when the buffer is made, not
/// counted in `allocated_bytes`), so a [`Buf`] is two words and free lists move one pointer.
///
/// Buffers cached by a thread that then stops using the pool stay counted as free; they
/// return to the shared list when the thread exits or calls
/// [`BufferPool::flush_thread_cache`].
///
/// # Lifetime
///
/// Dropping the last `BufferPool` clone closes the pool: free buffers on the shared list and
/// in this thread's cache are freed at once, buffers still handed out are freed (not pooled)
/// when dropped, and buffers cached by other threads are freed when those threads exit,
/// return a buffer of this pool, or first use another pool.
///
/// Cloning is cheap (an `Arc`); clones share the pool.
#[derive(Clone)]
pub struct BufferPool {
    pub(super) handle: Arc<Handle>,
}

impl fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferPool")
            .field("config", &self.handle.inner.cfg)
            .field("backing", &self.handle.inner.backing)
            .field("stats", &self.handle.inner.stats())
            .finish()
    }
}

impl BufferPool {
    /// Validate `cfg`, allocate (and prefault, if asked) `initial` buffers, and register the
    /// pool in the [global memory registry](MemoryRegistry::global).
    pub fn new(cfg: PoolConfig) -> Result<BufferPool, PoolError> {
        Self::new_in(MemoryRegistry::global(), cfg)
    }

    /// Like [`BufferPool::new`], registering the pool in `registry` instead (which holds a
    /// weak reference: the pool leaves the report when its last handle and buffer drop).
    pub fn new_in(registry: &MemoryRegistry, cfg: PoolConfig) -> Result<BufferPool, PoolError> {
        cfg.validate()?;
        let (bufs, backing) = Storage::batch(&cfg, cfg.initial);
        let shared = SharedList {
            bufs: Vec::with_capacity(cfg.max_free.saturating_add(BATCH)),
            closed: false,
        };
        let id = NEXT_POOL_ID.fetch_add(1, Relaxed);
        let inner = Inner {
            id,
            key: AtomicU64::new(id),
            backing,
            chunk: (cfg.max_free / 16).clamp(1, BATCH),
            shared: Padded(Mutex::new(shared)),
            threads: Mutex::new(Vec::new()),
            in_use: Padded::default(),
            budget: Padded(AtomicUsize::new(cfg.max_free - cfg.initial)),
            retired_hits: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            total: AtomicUsize::new(cfg.initial),
            fallback_in_use: AtomicUsize::new(0),
            fallback_bytes: AtomicUsize::new(0),
            high_water: AtomicUsize::new(0),
            recent_peak: AtomicUsize::new(0),
            shrink: AtomicUsize::new(0),
            peak_used_bytes: AtomicUsize::new(0),
            dry: AtomicBool::new(false),
            needs_refill: AtomicBool::new(cfg.initial < cfg.low_water),
            misses: AtomicU64::new(0),
            bypasses: AtomicU64::new(0),
            empty_events: AtomicU64::new(0),
            warnings: AtomicU64::new(0),
            warnings_suppressed: AtomicU64::new(0),
            refills: AtomicU64::new(0),
            refilled_buffers: AtomicU64::new(0),
            released: AtomicU64::new(0),
            clock_base: OnceLock::new(),
            clock_ms: AtomicU64::new(0),
            last_warn_ms: AtomicU64::new(NEVER),
            hook: RwLock::new(Arc::new(warn_to_stderr)),
            cfg,
        };
        let inner = Arc::new(inner);
        inner.lock_shared().bufs.extend(
            bufs.into_iter()
                .map(|storage| Head::new(storage, Arc::clone(&inner), true)),
        );
        let pool = BufferPool {
            handle: Arc::new(Handle { inner }),
        };
        let source: Arc<dyn MemorySource> = pool.handle.clone();
        registry.register(&source);
        Ok(pool)
    }

    /// A buffer of length `len`. Contents are unspecified: a reused buffer keeps old bytes.
    ///
    /// Never fails and never waits on the refill thread: a dry pool, or a length outside
    /// `[lower, upper]`, is served from the heap (and counted as a miss).
    #[inline]
    pub fn alloc(&self, len: usize) -> Buf {
        let inner = &self.handle.inner;
        if len < inner.cfg.lower || len > inner.cfg.upper {
            return self.fallback(len);
        }
        Buf {
            entry: ManuallyDrop::new(Some(inner.take())),
            len,
        }
    }

    /// A heap buffer for a request outside `[lower, upper]`.
    #[cold]
    pub(super) fn fallback(&self, len: usize) -> Buf {
        let inner = &self.handle.inner;
        inner.misses.fetch_add(1, Relaxed);
        inner.bypasses.fetch_add(1, Relaxed);
        inner.fallback_in_use.fetch_add(1, Relaxed);
        inner.fallback_bytes.fetch_add(len, Relaxed);
        inner.note_out(0);
        Buf {
            entry: ManuallyDrop::new(Some(Head::new(
                Storage::heap(len, false),
                Arc::clone(inner),
                false,
            ))),
            len,
        }
    }

    /// Top the free count up to `low_water` (never past `max_free`). Returns the number of
    /// buffers added. Allocates (and prefaults) outside the lock; meant for a background
    /// thread, never the packet path. Clears [`BufferPool::needs_refill`].
    ///
    /// Refilled buffers are heap buffers, never a new mapping: [`trim`](Self::trim) can give
    /// a heap buffer back on its own, while a mapping returns its memory only once every
    /// buffer carved from it is freed.
    pub fn refill(&self) -> usize {
        let inner = &self.handle.inner;
        let cfg = &inner.cfg;
        inner.needs_refill.store(false, Relaxed);
        let (in_use, _) = inner.sum_threads();
        let free = inner.total.load(Relaxed).saturating_sub(in_use);
        // Budget units first: the refill can never take the free count past `max_free`.
        let want = inner.reserve(cfg.low_water.saturating_sub(free));
        if want == 0 {
            return 0;
        }
        inner.total.fetch_add(want, Relaxed);
        let fresh: Vec<Storage> = (0..want)
            .map(|_| Storage::heap(cfg.upper, cfg.prefault))
            .collect();
        inner.push_shared(
            fresh
                .into_iter()
                .map(|storage| Head::new(storage, Arc::clone(inner), true)),
        );
        inner.dry.store(false, Relaxed);
        inner.refills.fetch_add(1, Relaxed);
        inner.refilled_buffers.fetch_add(want as u64, Relaxed);
        want
    }

    /// Give back the free buffers a past burst left, keeping what the period since the last
    /// trim needed: the pool shrinks to `max(initial, peak in use since the last trim +
    /// low_water)` buffers, or as near as it can. Returns the number of buffers freed.
    ///
    /// Only heap buffers (misses and refills) go: the `initial` mapping stays whole. Those on
    /// the shared free list are freed now; for the rest of the excess, as many heap buffers
    /// are freed as they come back from use or leave a thread cache, until the next trim
    /// sets a new count (buffers cycling through a stream's ring never rest on the free
    /// list). Meant for a housekeeping tick every few seconds, off the packet path; the first
    /// call after a burst keeps room for that burst, and a later call with no new peak gives
    /// its buffers back.
    pub fn trim(&self) -> usize {
        let inner = &self.handle.inner;
        let cfg = &inner.cfg;
        let (in_use, _) = inner.sum_threads();
        let peak = inner.recent_peak.swap(in_use, Relaxed).max(in_use);
        let keep = cfg.initial.max(peak.saturating_add(cfg.low_water));
        let excess = inner.total.load(Relaxed).saturating_sub(keep);
        if excess == 0 {
            inner.shrink.store(0, Relaxed);
            return 0;
        }
        let freed: Vec<Entry> = {
            let mut list = inner.lock_shared();
            if list.closed {
                return 0;
            }
            let mut n = 0;
            // The coldest (bottom) heap buffers first.
            list.bufs
                .extract_if(.., |e| {
                    let take = n < excess && e.is_heap();
                    n += usize::from(take);
                    take
                })
                .collect()
        };
        let n = freed.len();
        inner.shrink.store(excess - n, Relaxed);
        // Each buffer leaving the free list hands its unit back to the `max_free` budget.
        inner.total.fetch_sub(n, Relaxed);
        inner.budget.fetch_add(n, Relaxed);
        inner.released.fetch_add(n as u64, Relaxed);
        drop(freed);
        n
    }

    /// Whether the free count fell below `low_water` (or the pool ran dry) since the last
    /// refill.
    pub fn needs_refill(&self) -> bool {
        self.handle.inner.needs_refill.load(Relaxed)
    }

    /// Advance the pool clock used by the warning rate limiter. The first call sets the epoch;
    /// times earlier than the latest one are ignored.
    pub fn set_clock(&self, now: Instant) {
        let base = *self.handle.inner.clock_base.get_or_init(|| now);
        let ms =
            u64::try_from(now.saturating_duration_since(base).as_millis()).unwrap_or(NEVER - 1);
        self.handle.inner.clock_ms.fetch_max(ms, Relaxed);
    }

    /// The background thread's tick (every few milliseconds to a few hundred):
    /// [`set_clock`](Self::set_clock), then [`refill`](Self::refill) if the pool asked for it.
    /// Returns the buffers added.
    pub fn maintain(&self, now: Instant) -> usize {
        self.set_clock(now);
        if self.needs_refill() {
            self.refill()
        } else {
            0
        }
    }

    /// Replace the hook called (on the allocating thread, at most once per [`WARN_INTERVAL`])
    /// when `alloc` finds the pool dry. It receives the pool name and a statistics snapshot;
    /// log from it, don't block in it. The default writes one line to stderr.
    pub fn set_warn_hook(&self, hook: Box<WarnHook>) {
        *self
            .handle
            .inner
            .hook
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::from(hook);
    }

    /// Give this thread's cached free buffers of this pool back to the shared list, with its
    /// reserved share of `max_free` and its unflushed counts (e.g. before a worker thread
    /// parks for a long time). Threads do this on exit anyway.
    pub fn flush_thread_cache(&self) {
        let inner = &self.handle.inner;
        LOCAL.with(|local| {
            if let Ok(mut local) = local.try_borrow_mut()
                && let Some(c) = local.caches.iter_mut().find(|c| c.id == inner.id)
            {
                c.flush(inner);
            }
        });
    }

    /// A statistics snapshot.
    pub fn stats(&self) -> PoolStats {
        self.handle.inner.stats()
    }

    /// The pool's configuration.
    pub fn config(&self) -> &PoolConfig {
        &self.handle.inner.cfg
    }

    /// The pool's name.
    pub fn name(&self) -> &'static str {
        self.handle.inner.cfg.name
    }

    /// What the `initial` buffers were allocated in.
    pub fn backing(&self) -> PoolBacking {
        self.handle.inner.backing
    }

    /// This pool's line of the memory report.
    pub fn report(&self) -> PoolReport {
        self.handle.inner.report()
    }
}
