//! The packet buffer pool: spead2 `memory_pool` semantics, per-thread caches, statistics.

use std::cell::RefCell;
use std::fmt;
use std::hint::black_box;
use std::io::Write as _;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant};

use crate::config::{PoolConfig, PoolError};
use crate::registry::{MemoryRegistry, MemorySource, PoolReport};
use crate::sys::{Backing, Chunk, map_chunks};

/// Most free buffers one thread keeps cached per pool before spilling a batch to the shared
/// list.
pub const THREAD_CACHE: usize = 32;
/// Buffers moved at once between a thread cache and the shared list (under its lock).
pub const BATCH: usize = 16;
/// Minimum time, on the pool clock, between two empty-pool warnings of one pool.
pub const WARN_INTERVAL: Duration = Duration::from_secs(1);

const WARN_INTERVAL_MS: u64 = WARN_INTERVAL.as_millis() as u64;
const NEVER: u64 = u64::MAX;
/// Page size assumed when prefaulting heap buffers (the smallest page on tern's targets).
const PAGE: usize = 4096;
/// Smallest batch (in bytes) worth its own anonymous mapping; smaller prefaulted batches are
/// heap buffers touched page by page. A mapping costs a syscall and rounds up to whole pages.
const REGION_MIN_BYTES: usize = 64 * 1024;

static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);

/// The hook called with the pool name and a statistics snapshot when a pool runs dry.
pub type WarnHook = dyn Fn(&str, &PoolStats) + Send + Sync;

/// What the buffers allocated by [`BufferPool::new`] live in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PoolBacking {
    /// One heap allocation per buffer (no `prefault` or `huge_pages`, a batch below 64 KiB,
    /// or mapping failed).
    Heap,
    /// One anonymous mapping of normal pages.
    Pages,
    /// One anonymous mapping advised for transparent huge pages (`MADV_HUGEPAGE`).
    TransparentHugePages,
    /// One anonymous mapping of reserved huge pages (`MAP_HUGETLB`).
    HugeTlbPages,
}

impl From<Backing> for PoolBacking {
    fn from(b: Backing) -> Self {
        match b {
            Backing::HugeTlb => PoolBacking::HugeTlbPages,
            Backing::Transparent => PoolBacking::TransparentHugePages,
            Backing::Normal => PoolBacking::Pages,
        }
    }
}

/// Memory behind one buffer.
enum Storage {
    Heap(Box<[u8]>),
    Chunk(Chunk),
}

impl Default for Storage {
    fn default() -> Self {
        Storage::Heap(Box::default())
    }
}

impl Storage {
    #[inline]
    fn as_slice(&self) -> &[u8] {
        match self {
            Storage::Heap(b) => b,
            Storage::Chunk(c) => c.as_slice(),
        }
    }

    #[inline]
    fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            Storage::Heap(b) => b,
            Storage::Chunk(c) => c.as_mut_slice(),
        }
    }

    fn is_heap(&self) -> bool {
        matches!(self, Storage::Heap(_))
    }

    /// One heap buffer of `len` zeroed bytes, every page touched if `prefault`.
    fn heap(len: usize, prefault: bool) -> Storage {
        let mut b = vec![0u8; len].into_boxed_slice();
        if prefault {
            touch_pages(&mut b);
        }
        Storage::Heap(b)
    }

    /// `n` pooled buffers: carved from one anonymous mapping when `prefault` (and the batch is
    /// at least [`REGION_MIN_BYTES`]) or `huge_pages`, else (or if mapping fails) one heap
    /// allocation each.
    fn batch(cfg: &PoolConfig, n: usize) -> (Vec<Storage>, PoolBacking) {
        let region =
            cfg.huge_pages || (cfg.prefault && n.saturating_mul(cfg.upper) >= REGION_MIN_BYTES);
        if region
            && n > 0
            && let Some((chunks, backing)) = map_chunks(cfg.upper, n, cfg.prefault, cfg.huge_pages)
        {
            return (
                chunks.into_iter().map(Storage::Chunk).collect(),
                backing.into(),
            );
        }
        let bufs = (0..n)
            .map(|_| Storage::heap(cfg.upper, cfg.prefault))
            .collect();
        (bufs, PoolBacking::Heap)
    }
}

/// Write one byte per page so the kernel backs the whole buffer now, not on the first packet.
/// (`vec![0; n]` uses `calloc`, whose pages may still be unmapped zero pages.)
fn touch_pages(buf: &mut [u8]) {
    // An opaque zero: the compiler cannot prove the stores redundant and drop them.
    let z = black_box(0u8);
    for i in (0..buf.len()).step_by(PAGE) {
        buf[i] = z;
    }
    if let Some(last) = buf.last_mut() {
        *last = z;
    }
    black_box(buf);
}

/// Keeps a value on its own cache lines, away from counters written by other threads.
#[repr(align(128))]
#[derive(Default)]
struct Padded<T>(T);

impl<T> Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Per-thread counters of one pool, written by their thread only (a plain load and store, no
/// locked instruction) and summed by `stats` from any thread.
#[repr(align(128))]
#[derive(Default)]
struct ThreadCounters {
    hits: AtomicU64,
    /// Mirror of `LocalCache::unflushed`.
    unflushed: AtomicIsize,
}

/// A free pooled buffer, together with the strong reference to its pool that the [`Buf`] it
/// becomes will carry. Handing a buffer out or taking it back moves that reference along, so
/// the hot path updates no reference count.
///
/// Free entries therefore keep their pool alive; [`Handle`]'s drop (the last [`BufferPool`]
/// clone going away) closes the pool and drops the shared list to break that cycle.
struct Entry {
    storage: Storage,
    pool: Arc<Inner>,
}

impl Entry {
    fn is_heap(&self) -> bool {
        self.storage.is_heap()
    }
}

/// The shared free list, and whether the pool was closed (after which nothing may join it).
struct SharedList {
    /// LIFO: the top is the most recently freed buffer.
    bufs: Vec<Entry>,
    closed: bool,
}

/// The pool proper, shared by its handle, its free entries and every outstanding [`Buf`].
///
/// # Accounting without a shared counter on the hot path
///
/// - *In use*: each thread counts the pooled buffers it hands out minus those it takes back
///   in a local `unflushed` delta (published in its [`ThreadCounters`]) and folds it into
///   `in_use` once it reaches [`BATCH`] either way. The exact count is `in_use` plus every
///   thread's delta; `stats` sums them.
/// - *`max_free`*: the right to hold a free buffer is a unit of `budget`. Invariant:
///   `free + budget + (units reserved by threads) == max_free`, so `free <= max_free` always.
///   A thread reserves `chunk` units at a time when it returns buffers, earns one back per
///   buffer it takes, and gives a chunk back once it holds more than two. A return finding no
///   unit frees the buffer. Threads can hold at most `2 * chunk` unused units each, which only
///   ever makes the pool free a buffer early, never keep one too many.
struct Inner {
    id: u64,
    cfg: PoolConfig,
    backing: PoolBacking,
    /// Units of `budget` a thread reserves at once: `max_free / 16`, at least 1, at most
    /// [`BATCH`].
    chunk: usize,
    /// Free buffers not in any thread cache.
    shared: Padded<Mutex<SharedList>>,
    /// Counters of the threads that have a cache for this pool.
    threads: Mutex<Vec<Arc<ThreadCounters>>>,
    /// Pooled buffers handed out, as of each thread's last flush (may dip below zero while
    /// frees on one thread are flushed before the allocations on another).
    in_use: Padded<AtomicIsize>,
    /// Free-buffer units not reserved by any thread (see above).
    budget: Padded<AtomicUsize>,
    // Read on every alloc, written rarely.
    /// Mirrors `SharedList::closed` for checks that don't take the lock.
    closed: AtomicBool,
    /// Pooled buffers in existence: free (shared or thread-cached) plus in use.
    total: AtomicUsize,
    /// Fallback (heap, unpooled) buffers handed out, and their bytes.
    fallback_in_use: AtomicUsize,
    fallback_bytes: AtomicUsize,
    /// Peak of the number of buffers handed out (pooled and fallback).
    high_water: AtomicUsize,
    peak_used_bytes: AtomicUsize,
    /// Set by a dry miss, cleared by a hit or a refill: counts empty *events*.
    dry: AtomicBool,
    needs_refill: AtomicBool,
    // Cold counters.
    /// Hits of threads that exited, and hits made without a thread cache.
    retired_hits: AtomicU64,
    misses: AtomicU64,
    bypasses: AtomicU64,
    empty_events: AtomicU64,
    warnings: AtomicU64,
    warnings_suppressed: AtomicU64,
    refills: AtomicU64,
    refilled_buffers: AtomicU64,
    released: AtomicU64,
    clock_base: OnceLock<Instant>,
    clock_ms: AtomicU64,
    last_warn_ms: AtomicU64,
    hook: RwLock<Arc<WarnHook>>,
}

/// One pool's buffers and counts on one thread.
struct LocalCache {
    id: u64,
    pool: Weak<Inner>,
    /// LIFO: the top is the most recently freed buffer.
    bufs: Vec<Entry>,
    /// Budget units reserved and not yet used (see [`Inner`]).
    allowance: usize,
    /// Pooled buffers this thread handed out minus those it took back, not yet in
    /// `Inner::in_use`.
    unflushed: isize,
    counters: Arc<ThreadCounters>,
}

impl LocalCache {
    fn is_closed(&self) -> bool {
        self.pool.upgrade().is_none_or(|p| p.closed.load(Relaxed))
    }

    /// Count `n` buffers handed out (or taken back, if negative); returns the local delta.
    #[inline]
    fn count_out(&mut self, pool: &Inner, n: isize) -> isize {
        self.unflushed += n;
        if self.unflushed.unsigned_abs() >= BATCH {
            pool.in_use.fetch_add(self.unflushed, Relaxed);
            self.unflushed = 0;
        }
        self.counters.unflushed.store(self.unflushed, Relaxed);
        self.unflushed
    }

    /// Give everything back to the pool: buffers to the shared list, budget units, the
    /// in-use delta.
    fn flush(&mut self, pool: &Inner) {
        pool.push_shared(self.bufs.drain(..));
        pool.budget
            .fetch_add(std::mem::take(&mut self.allowance), Relaxed);
        pool.in_use
            .fetch_add(std::mem::take(&mut self.unflushed), Relaxed);
        self.counters.unflushed.store(0, Relaxed);
    }
}

impl Drop for LocalCache {
    fn drop(&mut self) {
        // Thread exit (or a closed pool pruned): hand everything back (cached buffers are freed
        // if the pool is closed) and fold this thread's hits into the pool's.
        if let Some(pool) = self.pool.upgrade() {
            let mut threads = pool.threads.lock().unwrap_or_else(PoisonError::into_inner);
            self.flush(&pool);
            threads.retain(|t| !Arc::ptr_eq(t, &self.counters));
            pool.retired_hits
                .fetch_add(self.counters.hits.load(Relaxed), Relaxed);
        }
    }
}

thread_local! {
    static LOCAL: RefCell<Vec<LocalCache>> = const { RefCell::new(Vec::new()) };
}

/// This thread's cache for `pool`, created on first use (closed pools' caches are pruned
/// then).
fn local_entry<'a>(caches: &'a mut Vec<LocalCache>, pool: &Arc<Inner>) -> &'a mut LocalCache {
    let pos = match caches.iter().position(|c| c.id == pool.id) {
        Some(pos) => pos,
        None => {
            caches.retain(|c| !c.is_closed());
            let counters = Arc::new(ThreadCounters::default());
            pool.threads
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(Arc::clone(&counters));
            caches.push(LocalCache {
                id: pool.id,
                pool: Arc::downgrade(pool),
                bufs: Vec::with_capacity(THREAD_CACHE),
                allowance: 0,
                unflushed: 0,
                counters,
            });
            caches.len() - 1
        }
    };
    &mut caches[pos]
}

/// The default warn hook: one line on stderr (the pool crate has no logging dependency).
fn warn_to_stderr(name: &str, s: &PoolStats) {
    // Never panic on the packet path if stderr is gone.
    let _ = writeln!(
        std::io::stderr().lock(),
        "tern-pool: buffer pool `{name}` ran dry, allocating from the heap \
         ({} in use, high water {}, {} misses, {} empty events); raise `initial` or `low_water`",
        s.in_use,
        s.high_water,
        s.misses,
        s.empty_events,
    );
}

impl Inner {
    fn lock_shared(&self) -> MutexGuard<'_, SharedList> {
        // A panic while holding the lock cannot leave a Vec of buffers inconsistent.
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Put free entries on the shared list, or free them if the pool is closed. The caller
    /// holds a strong reference of its own, so dropping entries never drops `self`.
    fn push_shared(&self, bufs: impl Iterator<Item = Entry>) {
        let mut list = self.lock_shared();
        if list.closed {
            drop(list);
            bufs.for_each(drop);
        } else {
            list.bufs.extend(bufs);
        }
    }

    /// Take up to `want` units of `budget`; returns how many were taken.
    fn reserve(&self, want: usize) -> usize {
        // A compare-exchange loop rather than `fetch_update`, which newer toolchains deprecate
        // under a name older ones lack.
        let mut b = self.budget.load(Relaxed);
        loop {
            let got = b.min(want);
            if got == 0 {
                return 0;
            }
            match self
                .budget
                .compare_exchange_weak(b, b - got, Relaxed, Relaxed)
            {
                Ok(_) => return got,
                Err(now) => b = now,
            }
        }
    }

    /// A buffer for `alloc`: from this thread's cache (refilled from the shared list a batch
    /// at a time), else a new one. Also whether the pool was dry.
    #[inline]
    fn take(self: &Arc<Self>) -> (Entry, bool) {
        let got = LOCAL.try_with(|caches| {
            let mut caches = caches.try_borrow_mut().ok()?;
            let cache = local_entry(&mut caches, self);
            if cache.bufs.is_empty() {
                let mut shared = self.lock_shared();
                let start = shared.bufs.len().saturating_sub(BATCH);
                // Keeps order: the most recently freed buffer ends on top of the thread cache.
                cache.bufs.extend(shared.bufs.drain(start..));
            }
            let got = match cache.bufs.pop() {
                Some(entry) => {
                    cache.allowance += 1;
                    if cache.allowance > 2 * self.chunk {
                        cache.allowance -= self.chunk;
                        self.budget.fetch_add(self.chunk, Relaxed);
                    }
                    let hits = &cache.counters.hits;
                    hits.store(hits.load(Relaxed) + 1, Relaxed);
                    if self.dry.load(Relaxed) {
                        self.dry.store(false, Relaxed);
                    }
                    (entry, false)
                }
                None => (self.miss(), true),
            };
            let local = cache.count_out(self, 1);
            self.note_out(local);
            Some(got)
        });
        match got {
            Ok(Some(got)) => got,
            // TLS torn down or re-entered: use the shared list directly.
            _ => self.take_without_cache(),
        }
    }

    #[cold]
    fn take_without_cache(self: &Arc<Self>) -> (Entry, bool) {
        let popped = self.lock_shared().bufs.pop();
        let got = match popped {
            Some(entry) => {
                self.budget.fetch_add(1, Relaxed);
                self.retired_hits.fetch_add(1, Relaxed);
                self.dry.store(false, Relaxed);
                (entry, false)
            }
            None => (self.miss(), true),
        };
        self.in_use.fetch_add(1, Relaxed);
        self.note_out(0);
        got
    }

    /// Return a pooled buffer (from `Buf::drop`, on any thread) with the pool reference the
    /// `Buf` carried.
    #[inline]
    fn put(pool: Arc<Inner>, storage: Storage) {
        let mut slot = Some(Entry { storage, pool });
        // Dropped after the thread-local borrow ends: dropping an entry may drop the pool,
        // whose drop looks at this thread's caches.
        let mut freed = None;
        let mut stale = None;
        let _ = LOCAL.try_with(|caches| {
            let Ok(mut caches) = caches.try_borrow_mut() else {
                return;
            };
            let Some(entry) = slot.take() else {
                return;
            };
            if entry.pool.closed.load(Relaxed) {
                // Closed while this buffer was out: free it, and this thread's cache for the
                // pool.
                stale = caches
                    .iter()
                    .position(|c| c.id == entry.pool.id)
                    .map(|i| caches.swap_remove(i));
                slot = Some(entry);
                return;
            }
            let cache = local_entry(&mut caches, &entry.pool);
            let inner: &Inner = &entry.pool;
            cache.count_out(inner, -1);
            if cache.allowance == 0 {
                cache.allowance = inner.reserve(inner.chunk);
            }
            if cache.allowance == 0 {
                // `max_free` buffers are free: this one goes back to the system. Prefer a heap
                // buffer from the cache over a region chunk: dropping a chunk returns only the
                // whole pages inside it (none, for packet-sized buffers) until its whole region
                // is free.
                inner.total.fetch_sub(1, Relaxed);
                inner.released.fetch_add(1, Relaxed);
                let victim = if entry.is_heap() {
                    None
                } else {
                    cache.bufs.iter().rposition(Entry::is_heap)
                };
                freed = Some(match victim {
                    Some(i) => {
                        let heap = cache.bufs.remove(i);
                        cache.bufs.push(entry);
                        heap
                    }
                    None => entry,
                });
                return;
            }
            cache.allowance -= 1;
            if cache.bufs.len() >= THREAD_CACHE {
                // Spill the coldest (bottom) buffers; the hot ones stay on top.
                inner.push_shared(cache.bufs.drain(..BATCH));
            }
            cache.bufs.push(entry);
        });
        drop(freed);
        drop(stale);
        if let Some(entry) = slot {
            Inner::put_without_cache(entry);
        }
    }

    #[cold]
    fn put_without_cache(entry: Entry) {
        let pool = Arc::clone(&entry.pool);
        pool.in_use.fetch_sub(1, Relaxed);
        if pool.reserve(1) == 1 {
            pool.push_shared(std::iter::once(entry));
        } else {
            pool.total.fetch_sub(1, Relaxed);
            pool.released.fetch_add(1, Relaxed);
            drop(entry);
        }
    }

    /// Bookkeeping for a buffer handed out: high-water marks and the low-water flag, from
    /// `in_use` plus this thread's unflushed delta `local` (other threads' deltas, at most
    /// [`BATCH`] each, are not seen here; `stats` folds the exact count in).
    #[inline]
    fn note_out(&self, local: isize) {
        let pooled = usize::try_from(self.in_use.load(Relaxed) + local).unwrap_or(0);
        self.note_peaks(pooled);
        if self.cfg.low_water > 0
            && self.total.load(Relaxed).saturating_sub(pooled) < self.cfg.low_water
            && !self.needs_refill.load(Relaxed)
        {
            self.needs_refill.store(true, Relaxed);
        }
    }

    #[inline]
    fn note_peaks(&self, pooled: usize) {
        let items = pooled + self.fallback_in_use.load(Relaxed);
        if items > self.high_water.load(Relaxed) {
            self.high_water.fetch_max(items, Relaxed);
        }
        let used = pooled
            .saturating_mul(self.cfg.upper)
            .saturating_add(self.fallback_bytes.load(Relaxed));
        if used > self.peak_used_bytes.load(Relaxed) {
            self.peak_used_bytes.fetch_max(used, Relaxed);
        }
    }

    /// The pool was empty: count it and allocate a heap buffer that joins the pool when freed
    /// (unless `max_free` buffers are free by then). The caller then calls `maybe_warn`.
    #[cold]
    fn miss(self: &Arc<Self>) -> Entry {
        self.misses.fetch_add(1, Relaxed);
        self.total.fetch_add(1, Relaxed);
        if !self.dry.load(Relaxed) && !self.dry.swap(true, Relaxed) {
            self.empty_events.fetch_add(1, Relaxed);
        }
        if self.cfg.low_water > 0 {
            self.needs_refill.store(true, Relaxed);
        }
        Entry {
            storage: Storage::heap(self.cfg.upper, false),
            pool: Arc::clone(self),
        }
    }

    #[cold]
    fn maybe_warn(&self) {
        let now = self.clock_ms.load(Relaxed);
        let last = self.last_warn_ms.load(Relaxed);
        let due = last == NEVER || now.saturating_sub(last) >= WARN_INTERVAL_MS;
        if !due
            || self
                .last_warn_ms
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_err()
        {
            self.warnings_suppressed.fetch_add(1, Relaxed);
            return;
        }
        self.warnings.fetch_add(1, Relaxed);
        let hook = Arc::clone(&self.hook.read().unwrap_or_else(PoisonError::into_inner));
        hook(self.cfg.name, &self.stats());
    }

    /// Exact pooled buffers in use and hits: the flushed counts plus every thread's.
    fn sum_threads(&self) -> (usize, u64) {
        let threads = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
        let mut in_use = self.in_use.load(Relaxed);
        let mut hits = self.retired_hits.load(Relaxed);
        for t in threads.iter() {
            in_use += t.unflushed.load(Relaxed);
            hits += t.hits.load(Relaxed);
        }
        (usize::try_from(in_use).unwrap_or(0), hits)
    }

    fn stats(&self) -> PoolStats {
        let upper = self.cfg.upper;
        let (pooled, hits) = self.sum_threads();
        self.note_peaks(pooled);
        let total = self.total.load(Relaxed);
        let fallback = self.fallback_in_use.load(Relaxed);
        let fallback_bytes = self.fallback_bytes.load(Relaxed);
        PoolStats {
            hits,
            misses: self.misses.load(Relaxed),
            empty_events: self.empty_events.load(Relaxed),
            refills: self.refills.load(Relaxed),
            in_use: pooled + fallback,
            high_water: self.high_water.load(Relaxed),
            free: total.saturating_sub(pooled),
            allocated_bytes: total.saturating_mul(upper).saturating_add(fallback_bytes),
            used_bytes: pooled.saturating_mul(upper).saturating_add(fallback_bytes),
            peak_used_bytes: self.peak_used_bytes.load(Relaxed),
            bypasses: self.bypasses.load(Relaxed),
            fallback_in_use: fallback,
            released: self.released.load(Relaxed),
            refilled_buffers: self.refilled_buffers.load(Relaxed),
            warnings: self.warnings.load(Relaxed),
            warnings_suppressed: self.warnings_suppressed.load(Relaxed),
            needs_refill: self.needs_refill.load(Relaxed),
        }
    }

    fn report(&self) -> PoolReport {
        let s = self.stats();
        PoolReport::new(
            self.cfg.name,
            s.used_bytes,
            s.allocated_bytes,
            s.peak_used_bytes,
            s.in_use,
            s.high_water,
        )
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Forget this thread's (by now empty) cache entry for the pool.
        let id = self.id;
        let _ = LOCAL.try_with(|caches| {
            if let Ok(mut caches) = caches.try_borrow_mut() {
                caches.retain(|c| c.id != id);
            }
        });
    }
}

/// The pool's owner, shared by every [`BufferPool`] clone; what the memory registry sees.
/// Dropping it closes the pool.
struct Handle {
    inner: Arc<Inner>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        let inner = &self.inner;
        // Close under the lock, so no buffer can join the shared list afterwards: free entries
        // hold references to `Inner`, and this breaks the cycle.
        let free = {
            let mut list = inner.lock_shared();
            list.closed = true;
            inner.closed.store(true, Relaxed);
            std::mem::take(&mut list.bufs)
        };
        drop(free);
        // This thread's cached buffers too; other threads free theirs when they exit, return a
        // buffer of this pool, or first use another pool.
        let id = inner.id;
        let _ = LOCAL.try_with(|caches| {
            let stale: Vec<LocalCache> = match caches.try_borrow_mut() {
                Ok(mut caches) => {
                    let (stale, keep) = std::mem::take(&mut *caches)
                        .into_iter()
                        .partition(|c| c.id == id);
                    *caches = keep;
                    stale
                }
                Err(_) => Vec::new(),
            };
            drop(stale);
        });
    }
}

impl MemorySource for Handle {
    fn memory_report(&self) -> PoolReport {
        self.inner.report()
    }
}

/// Statistics of one [`BufferPool`]: a snapshot of atomics, each exact once the pool is
/// quiescent (while threads allocate, fields are read one by one and may disagree slightly).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct PoolStats {
    /// Allocations served from a free pooled buffer.
    pub hits: u64,
    /// Allocations not served from a free buffer: the pool was dry (a heap buffer was
    /// allocated, which joins the pool when freed), or the length was outside
    /// `[lower, upper]` (a heap buffer of exactly that length; see `bypasses`).
    /// `hits + misses` is the number of `alloc` calls.
    pub misses: u64,
    /// Times the pool went dry: a dry miss after the last hit or refill. A run of consecutive
    /// dry misses counts once.
    pub empty_events: u64,
    /// [`BufferPool::refill`] calls that added buffers.
    pub refills: u64,
    /// Buffers handed out and not yet dropped (pooled and fallback).
    pub in_use: usize,
    /// Highest `in_use` seen: checked on every allocation (with other threads' counts as of
    /// their last batch, so a brief peak may be missed by up to [`BATCH`] buffers per other
    /// thread) and exactly at every `stats` call.
    pub high_water: usize,
    /// Free pooled buffers (shared list plus every thread's cache).
    pub free: usize,
    /// Bytes held by the pool: every pooled buffer (`upper` bytes each, free or in use) plus
    /// fallback buffers in use.
    pub allocated_bytes: usize,
    /// Bytes of the buffers in use (capacity, not the requested lengths).
    pub used_bytes: usize,
    /// Highest `used_bytes` seen (sampled like `high_water`).
    pub peak_used_bytes: usize,
    /// Requests with a length outside `[lower, upper]` (included in `misses`).
    pub bypasses: u64,
    /// Fallback buffers for such requests currently handed out (included in `in_use`).
    pub fallback_in_use: usize,
    /// Buffers returned to the system because `max_free` buffers were already free.
    pub released: u64,
    /// Buffers added by refills.
    pub refilled_buffers: u64,
    /// Empty-pool warnings emitted (warn hook calls).
    pub warnings: u64,
    /// Dry misses whose warning the rate limiter swallowed.
    pub warnings_suppressed: u64,
    /// The free count fell below `low_water` (or the pool ran dry) since the last refill.
    pub needs_refill: bool,
}

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
    handle: Arc<Handle>,
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
        let inner = Inner {
            id: NEXT_POOL_ID.fetch_add(1, Relaxed),
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
        inner
            .lock_shared()
            .bufs
            .extend(bufs.into_iter().map(|storage| Entry {
                storage,
                pool: Arc::clone(&inner),
            }));
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
        let (entry, dry) = inner.take();
        if dry {
            // After the bookkeeping, so the hook's snapshot counts this buffer.
            inner.maybe_warn();
        }
        Buf {
            storage: entry.storage,
            len,
            pooled: true,
            pool: Some(entry.pool),
        }
    }

    /// A heap buffer for a request outside `[lower, upper]`.
    #[cold]
    fn fallback(&self, len: usize) -> Buf {
        let inner = &self.handle.inner;
        inner.misses.fetch_add(1, Relaxed);
        inner.bypasses.fetch_add(1, Relaxed);
        inner.fallback_in_use.fetch_add(1, Relaxed);
        inner.fallback_bytes.fetch_add(len, Relaxed);
        inner.note_out(0);
        Buf {
            storage: Storage::heap(len, false),
            len,
            pooled: false,
            pool: Some(Arc::clone(inner)),
        }
    }

    /// Top the free count up to `low_water` (never past `max_free`). Returns the number of
    /// buffers added. Allocates (and prefaults) outside the lock; meant for a background
    /// thread, never the packet path. Clears [`BufferPool::needs_refill`].
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
        let (fresh, _) = Storage::batch(cfg, want);
        inner.push_shared(fresh.into_iter().map(|storage| Entry {
            storage,
            pool: Arc::clone(inner),
        }));
        inner.dry.store(false, Relaxed);
        inner.refills.fetch_add(1, Relaxed);
        inner.refilled_buffers.fetch_add(want as u64, Relaxed);
        want
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
        let _ = LOCAL.try_with(|caches| {
            if let Ok(mut caches) = caches.try_borrow_mut()
                && let Some(c) = caches.iter_mut().find(|c| c.id == inner.id)
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

/// An owned, mutable buffer from a [`BufferPool`]; returns to it when dropped, on any thread.
///
/// Dereferences to its current length (`..len()`); [`Buf::as_mut_full`] exposes the whole
/// capacity, e.g. for `recv` before [`Buf::set_len`].
pub struct Buf {
    storage: Storage,
    len: usize,
    /// From the pool (returns to it), as opposed to a fallback for an out-of-range length.
    pooled: bool,
    /// `Some` until dropped. For a pooled buffer, the reference its free entry carried.
    pool: Option<Arc<Inner>>,
}

impl Buf {
    /// Current length.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the length is zero.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Capacity: `upper` for pooled buffers, the requested length for fallback buffers.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.storage.as_slice().len()
    }

    /// Set the length (bytes between the old and new length keep whatever they held).
    ///
    /// # Panics
    ///
    /// If `len > capacity()`.
    #[inline]
    pub fn set_len(&mut self, len: usize) {
        assert!(
            len <= self.capacity(),
            "Buf::set_len({len}) beyond capacity {}",
            self.capacity()
        );
        self.len = len;
    }

    /// The whole capacity, regardless of the current length.
    #[inline]
    pub fn as_mut_full(&mut self) -> &mut [u8] {
        self.storage.as_mut_slice()
    }

    /// Whether this buffer returns to the pool when dropped (as opposed to a fallback for a
    /// length outside `[lower, upper]`).
    #[inline]
    pub fn is_pooled(&self) -> bool {
        self.pooled
    }

    fn pool_name(&self) -> &'static str {
        self.pool.as_ref().map_or("", |p| p.cfg.name)
    }

    /// Make the buffer immutable and shareable; it returns to the pool when the last clone of
    /// the [`SharedBuf`] drops. Costs one small allocation (the `Arc`).
    pub fn freeze(self) -> SharedBuf {
        SharedBuf(Arc::new(self))
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        let Some(pool) = self.pool.take() else {
            return;
        };
        let storage = std::mem::take(&mut self.storage);
        if self.pooled {
            Inner::put(pool, storage);
        } else {
            pool.fallback_in_use.fetch_sub(1, Relaxed);
            pool.fallback_bytes
                .fetch_sub(storage.as_slice().len(), Relaxed);
        }
    }
}

impl Deref for Buf {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        &self.storage.as_slice()[..self.len]
    }
}

impl DerefMut for Buf {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut self.storage.as_mut_slice()[..len]
    }
}

impl AsRef<[u8]> for Buf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl AsMut<[u8]> for Buf {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl fmt::Debug for Buf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buf")
            .field("pool", &self.pool_name())
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .finish()
    }
}

/// An immutable, reference-counted pool buffer, shared by every viewer a packet fans out to.
/// The buffer returns to its pool when the last clone drops.
#[derive(Clone)]
pub struct SharedBuf(Arc<Buf>);

impl SharedBuf {
    /// Number of live clones (for tests and diagnostics).
    pub fn ref_count(this: &Self) -> usize {
        Arc::strong_count(&this.0)
    }
}

impl Deref for SharedBuf {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl AsRef<[u8]> for SharedBuf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl fmt::Debug for SharedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedBuf")
            .field("pool", &self.0.pool_name())
            .field("len", &self.0.len)
            .field("refs", &Arc::strong_count(&self.0))
            .finish()
    }
}
