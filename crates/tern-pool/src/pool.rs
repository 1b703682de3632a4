//! The packet buffer pool: spead2 `memory_pool` semantics, per-thread caches, exact statistics.

use std::cell::RefCell;
use std::fmt;
use std::hint::black_box;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock, Weak};
use std::time::Instant;

use crate::config::{PoolConfig, PoolError};
use crate::registry::{MemoryRegistry, MemorySource, PoolReport};
use crate::shard::{SHARDS, thread_shard};
use crate::sys::Mapping;

/// Most buffers one thread keeps cached per pool before spilling a batch to the shared list.
pub const THREAD_CACHE: usize = 32;
/// Buffers moved at once between a thread cache and the shared list (under its lock).
pub const BATCH: usize = 16;
/// Minimum time between two empty-pool warnings of one pool, in pool-clock milliseconds.
pub const WARN_INTERVAL_MS: u64 = 1000;

const NEVER: u64 = u64::MAX;
/// Page size assumed when prefaulting heap buffers (the smallest page on tern's targets).
const PAGE: usize = 4096;

static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);

/// The hook called with the pool name and a statistics snapshot when a pool runs dry.
pub type WarnHook = dyn Fn(&str, &PoolStats) + Send + Sync;

/// Memory behind one buffer.
enum Storage {
    Heap(Box<[u8]>),
    Mapped(Mapping),
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
            Storage::Mapped(m) => m.as_slice(),
        }
    }

    #[inline]
    fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            Storage::Heap(b) => b,
            Storage::Mapped(m) => m.as_mut_slice(),
        }
    }

    /// A pooled buffer of `cfg.upper` bytes, prefaulted if asked.
    fn pooled(cfg: &PoolConfig) -> Storage {
        if cfg.huge_pages
            && let Some(m) = Mapping::new(cfg.upper, cfg.prefault)
        {
            // MAP_POPULATE already faulted the pages in; touching them again is cheap.
            let mut s = Storage::Mapped(m);
            if cfg.prefault {
                prefault(s.as_mut_slice());
            }
            return s;
        }
        let mut b = vec![0u8; cfg.upper].into_boxed_slice();
        if cfg.prefault {
            prefault(&mut b);
        }
        Storage::Heap(b)
    }
}

/// Write one byte per page so the kernel backs the whole buffer now, not on the first packet.
/// (`vec![0; n]` uses `calloc`, whose pages may still be unmapped zero pages.)
fn prefault(buf: &mut [u8]) {
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

/// A counter shard on its own cache lines.
#[repr(align(128))]
#[derive(Default)]
struct HitShard {
    hits: AtomicU64,
}

struct Inner {
    id: u64,
    cfg: PoolConfig,
    /// Free buffers not in any thread cache; LIFO (top = most recently freed).
    shared: Mutex<Vec<Storage>>,
    /// Pooled buffers in existence: free (shared or thread-cached) plus in use.
    total: AtomicUsize,
    /// Pooled buffers handed out and not yet returned.
    in_use: AtomicUsize,
    peak_in_use: AtomicUsize,
    hits: [HitShard; SHARDS],
    misses: AtomicU64,
    empty_events: AtomicU64,
    warnings: AtomicU64,
    warnings_suppressed: AtomicU64,
    refills: AtomicU64,
    refilled_buffers: AtomicU64,
    released: AtomicU64,
    bypasses: AtomicU64,
    bypass_in_use: AtomicUsize,
    bypass_in_use_bytes: AtomicUsize,
    /// Set by a miss, cleared when buffers reach the shared list: counts empty *events*.
    dry: AtomicBool,
    needs_refill: AtomicBool,
    clock_base: OnceLock<Instant>,
    clock_ms: AtomicU64,
    last_warn_ms: AtomicU64,
    hook: RwLock<Option<Arc<WarnHook>>>,
}

/// One pool's buffers cached by one thread.
struct LocalCache {
    id: u64,
    pool: Weak<Inner>,
    bufs: Vec<Storage>,
}

impl Drop for LocalCache {
    fn drop(&mut self) {
        // Thread exit: hand cached buffers back so they stay counted as free.
        if let Some(pool) = self.pool.upgrade() {
            pool.push_shared(self.bufs.drain(..));
        }
    }
}

thread_local! {
    static LOCAL: RefCell<Vec<LocalCache>> = const { RefCell::new(Vec::new()) };
}

/// This thread's cache for `pool`, created on first use (dead pools' caches are pruned then).
fn local_entry<'a>(caches: &'a mut Vec<LocalCache>, pool: &Arc<Inner>) -> &'a mut LocalCache {
    let pos = match caches.iter().position(|c| c.id == pool.id) {
        Some(pos) => pos,
        None => {
            caches.retain(|c| c.pool.strong_count() > 0);
            caches.push(LocalCache {
                id: pool.id,
                pool: Arc::downgrade(pool),
                bufs: Vec::with_capacity(THREAD_CACHE + 1),
            });
            caches.len() - 1
        }
    };
    &mut caches[pos]
}

impl Inner {
    fn lock_shared(&self) -> MutexGuard<'_, Vec<Storage>> {
        // A panic while holding the lock cannot leave a Vec of buffers inconsistent.
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push_shared(&self, bufs: impl Iterator<Item = Storage>) {
        self.lock_shared().extend(bufs);
        if self.dry.load(Relaxed) {
            self.dry.store(false, Relaxed);
        }
    }

    fn free_count(&self) -> usize {
        self.total
            .load(Relaxed)
            .saturating_sub(self.in_use.load(Relaxed))
    }

    /// A free buffer from this thread's cache, refilling the cache from the shared list.
    fn take(self: &Arc<Self>) -> Option<Storage> {
        let got = LOCAL.try_with(|caches| {
            let mut caches = caches.try_borrow_mut().ok()?;
            let cache = local_entry(&mut caches, self);
            if let Some(s) = cache.bufs.pop() {
                return Some(Some(s));
            }
            let mut shared = self.lock_shared();
            let start = shared.len().saturating_sub(BATCH);
            // Keeps order: the most recently freed buffer ends on top of the thread cache.
            cache.bufs.extend(shared.drain(start..));
            drop(shared);
            Some(cache.bufs.pop())
        });
        match got {
            Ok(Some(s)) => s,
            // TLS torn down or re-entered: use the shared list directly.
            _ => self.lock_shared().pop(),
        }
    }

    /// Return a pooled buffer (from `Buf::drop`, on any thread).
    fn put(self: &Arc<Self>, storage: Storage) {
        let in_use = self.in_use.fetch_sub(1, Relaxed) - 1;
        // max_free: release to the system instead of keeping more than `max_free` free.
        let mut total = self.total.load(Relaxed);
        while total.saturating_sub(in_use) > self.cfg.max_free {
            match self
                .total
                .compare_exchange_weak(total, total - 1, Relaxed, Relaxed)
            {
                Ok(_) => {
                    self.released.fetch_add(1, Relaxed);
                    drop(storage);
                    return;
                }
                Err(t) => total = t,
            }
        }
        let mut slot = Some(storage);
        let _ = LOCAL.try_with(|caches| {
            let Ok(mut caches) = caches.try_borrow_mut() else {
                return;
            };
            let cache = local_entry(&mut caches, self);
            if let Some(s) = slot.take() {
                cache.bufs.push(s);
            }
            if cache.bufs.len() > THREAD_CACHE {
                // Spill the coldest (bottom) buffers; the hot ones stay on top.
                self.push_shared(cache.bufs.drain(..BATCH));
            }
        });
        if let Some(s) = slot {
            self.push_shared(std::iter::once(s));
        }
    }

    fn note_out(&self) {
        let in_use = self.in_use.fetch_add(1, Relaxed) + 1;
        if in_use > self.peak_in_use.load(Relaxed) {
            self.peak_in_use.fetch_max(in_use, Relaxed);
        }
        if self.cfg.low_water > 0
            && self.total.load(Relaxed).saturating_sub(in_use) < self.cfg.low_water
            && !self.needs_refill.load(Relaxed)
        {
            self.needs_refill.store(true, Relaxed);
        }
    }

    /// The pool was empty: count it, maybe warn, and allocate a fresh pooled buffer.
    fn miss(&self) -> Storage {
        self.misses.fetch_add(1, Relaxed);
        self.total.fetch_add(1, Relaxed);
        if !self.dry.load(Relaxed) && !self.dry.swap(true, Relaxed) {
            self.empty_events.fetch_add(1, Relaxed);
        }
        self.maybe_warn();
        Storage::pooled(&self.cfg)
    }

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
        let hook = self
            .hook
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(hook) = hook {
            hook(self.cfg.name, &self.stats());
        }
    }

    fn stats(&self) -> PoolStats {
        let upper = self.cfg.upper;
        let in_use = self.in_use.load(Relaxed);
        let total = self.total.load(Relaxed);
        let bypass_bytes = self.bypass_in_use_bytes.load(Relaxed);
        PoolStats {
            hits: self.hits.iter().map(|s| s.hits.load(Relaxed)).sum(),
            misses: self.misses.load(Relaxed),
            empty_events: self.empty_events.load(Relaxed),
            warnings: self.warnings.load(Relaxed),
            warnings_suppressed: self.warnings_suppressed.load(Relaxed),
            refills: self.refills.load(Relaxed),
            refilled_buffers: self.refilled_buffers.load(Relaxed),
            released: self.released.load(Relaxed),
            bypasses: self.bypasses.load(Relaxed),
            in_use_buffers: in_use,
            in_use_bytes: in_use.saturating_mul(upper),
            peak_in_use_buffers: self.peak_in_use.load(Relaxed),
            free_buffers: total.saturating_sub(in_use),
            allocated_bytes: total.saturating_mul(upper),
            bypass_in_use_buffers: self.bypass_in_use.load(Relaxed),
            bypass_in_use_bytes: bypass_bytes,
            needs_refill: self.needs_refill.load(Relaxed),
        }
    }
}

impl MemorySource for Inner {
    fn memory_report(&self) -> PoolReport {
        let s = self.stats();
        PoolReport::new(
            self.cfg.name,
            s.in_use_bytes + s.bypass_in_use_bytes,
            s.allocated_bytes + s.bypass_in_use_bytes,
            s.peak_in_use_buffers.saturating_mul(self.cfg.upper),
            (s.in_use_buffers + s.bypass_in_use_buffers) as u64,
        )
    }
}

/// Statistics of one [`BufferPool`]: a snapshot of atomics, each exact once the pool is
/// quiescent (while threads allocate, fields are read one by one).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct PoolStats {
    /// In-range allocations served from a free buffer.
    pub hits: u64,
    /// In-range allocations that found no free buffer and allocated a new one.
    pub misses: u64,
    /// Times the pool went dry: a miss after buffers had last reached the shared free list.
    /// A run of consecutive misses counts once.
    pub empty_events: u64,
    /// Empty-pool warnings emitted (hook called, if one is set).
    pub warnings: u64,
    /// Misses whose warning the rate limiter swallowed.
    pub warnings_suppressed: u64,
    /// [`BufferPool::refill`] calls that added buffers.
    pub refills: u64,
    /// Buffers added by refills.
    pub refilled_buffers: u64,
    /// Buffers returned to the system because `max_free` buffers were already free.
    pub released: u64,
    /// Requests outside `[lower, upper]`, served by a plain allocation.
    pub bypasses: u64,
    /// Pooled buffers currently handed out.
    pub in_use_buffers: usize,
    /// `in_use_buffers * upper`.
    pub in_use_bytes: usize,
    /// Highest `in_use_buffers` seen (exact: updated on every allocation).
    pub peak_in_use_buffers: usize,
    /// Pooled buffers free (shared list plus every thread cache).
    pub free_buffers: usize,
    /// Bytes of all pooled buffers, free or in use: `(free + in use) * upper`.
    pub allocated_bytes: usize,
    /// Bypass buffers currently handed out.
    pub bypass_in_use_buffers: usize,
    /// Bytes of bypass buffers currently handed out.
    pub bypass_in_use_bytes: usize,
    /// The free count fell below `low_water` (or the pool ran dry) since the last refill.
    pub needs_refill: bool,
}

/// A pool of equally sized packet buffers (spead2 `memory_pool` semantics).
///
/// - Requests of `lower..=upper` bytes get an `upper`-byte buffer, last freed first (LIFO,
///   so it is likely still in cache). Requests outside the range are served by a plain
///   allocation, counted in [`PoolStats::bypasses`] - never an error, so a jumbo datagram
///   is not lost; this includes `len > upper`.
/// - `initial` buffers are allocated and prefaulted by [`BufferPool::new`].
/// - A freed buffer goes back to the system if `max_free` buffers are already free.
/// - When the free count drops below `low_water` the pool sets
///   [`BufferPool::needs_refill`]; [`BufferPool::refill`], run by a background thread
///   (never by `alloc`), tops the free count up to `initial`.
/// - An `alloc` that finds the pool empty still allocates, and reports it through the warn
///   hook at most once per [`WARN_INTERVAL_MS`] of the pool clock, which the caller advances
///   ([`BufferPool::set_clock`] or [`BufferPool::maintain`]); the pool never reads the clock.
///
/// # Fast path
///
/// Each thread keeps up to [`THREAD_CACHE`] free buffers per pool in a thread-local LIFO
/// stack; the shared free list's lock is taken only to move [`BATCH`] buffers at a time.
/// A hit costs the thread-local access, one sharded counter and two shared atomics (buffers
/// in use and the `Arc` held by the buffer), no lock. Buffers cached by a thread that then
/// stops using the pool stay counted as free; they return to the shared list when the thread
/// exits or calls [`BufferPool::flush_thread_cache`].
///
/// Cloning is cheap (an `Arc`); clones share the pool.
#[derive(Clone)]
pub struct BufferPool {
    inner: Arc<Inner>,
}

impl fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferPool")
            .field("config", &self.inner.cfg)
            .field("stats", &self.inner.stats())
            .finish()
    }
}

impl BufferPool {
    /// Validate `cfg` and allocate (and prefault, if asked) `initial` buffers.
    pub fn new(cfg: PoolConfig) -> Result<BufferPool, PoolError> {
        cfg.validate()?;
        let mut shared = Vec::with_capacity(cfg.max_free.saturating_add(BATCH));
        shared.extend((0..cfg.initial).map(|_| Storage::pooled(&cfg)));
        let inner = Inner {
            id: NEXT_POOL_ID.fetch_add(1, Relaxed),
            total: AtomicUsize::new(cfg.initial),
            shared: Mutex::new(shared),
            in_use: AtomicUsize::new(0),
            peak_in_use: AtomicUsize::new(0),
            hits: std::array::from_fn(|_| HitShard::default()),
            misses: AtomicU64::new(0),
            empty_events: AtomicU64::new(0),
            warnings: AtomicU64::new(0),
            warnings_suppressed: AtomicU64::new(0),
            refills: AtomicU64::new(0),
            refilled_buffers: AtomicU64::new(0),
            released: AtomicU64::new(0),
            bypasses: AtomicU64::new(0),
            bypass_in_use: AtomicUsize::new(0),
            bypass_in_use_bytes: AtomicUsize::new(0),
            dry: AtomicBool::new(false),
            needs_refill: AtomicBool::new(false),
            clock_base: OnceLock::new(),
            clock_ms: AtomicU64::new(0),
            last_warn_ms: AtomicU64::new(NEVER),
            hook: RwLock::new(None),
            cfg,
        };
        Ok(BufferPool {
            inner: Arc::new(inner),
        })
    }

    /// Like [`BufferPool::new`], and register the pool in `registry`'s memory report (the
    /// registry holds a weak reference).
    pub fn new_in(registry: &MemoryRegistry, cfg: PoolConfig) -> Result<BufferPool, PoolError> {
        let pool = Self::new(cfg)?;
        let source: Arc<dyn MemorySource> = pool.inner.clone();
        registry.register(&source);
        Ok(pool)
    }

    /// A buffer of length `len` (contents unspecified: a reused buffer keeps old bytes).
    ///
    /// Never fails and never waits on the refill thread: an empty pool allocates.
    #[inline]
    pub fn alloc(&self, len: usize) -> Buf {
        let inner = &self.inner;
        if len < inner.cfg.lower || len > inner.cfg.upper {
            return self.bypass(len);
        }
        let storage = match inner.take() {
            Some(s) => {
                inner.hits[thread_shard()].hits.fetch_add(1, Relaxed);
                s
            }
            None => inner.miss(),
        };
        inner.note_out();
        Buf {
            storage,
            len,
            pool: Arc::clone(inner),
        }
    }

    #[cold]
    fn bypass(&self, len: usize) -> Buf {
        let inner = &self.inner;
        inner.bypasses.fetch_add(1, Relaxed);
        inner.bypass_in_use.fetch_add(1, Relaxed);
        inner.bypass_in_use_bytes.fetch_add(len, Relaxed);
        Buf {
            storage: Storage::Heap(vec![0u8; len].into_boxed_slice()),
            len,
            pool: Arc::clone(inner),
        }
    }

    /// Top the free count up to `initial` (no-op if it is already there). Returns the number
    /// of buffers added. Allocates and prefaults outside the lock; meant for a background
    /// thread, never the packet path. Clears [`BufferPool::needs_refill`].
    pub fn refill(&self) -> usize {
        let inner = &self.inner;
        inner.needs_refill.store(false, Relaxed);
        let want = inner.cfg.initial.saturating_sub(inner.free_count());
        if want == 0 {
            return 0;
        }
        let fresh: Vec<Storage> = (0..want).map(|_| Storage::pooled(&inner.cfg)).collect();
        inner.total.fetch_add(want, Relaxed);
        inner.push_shared(fresh.into_iter());
        inner.refills.fetch_add(1, Relaxed);
        inner.refilled_buffers.fetch_add(want as u64, Relaxed);
        want
    }

    /// Whether the free count fell below `low_water` (or the pool ran dry) since the last
    /// refill.
    pub fn needs_refill(&self) -> bool {
        self.inner.needs_refill.load(Relaxed)
    }

    /// Advance the pool clock used by the warning rate limiter. The first call sets the epoch;
    /// times earlier than the latest one are ignored.
    pub fn set_clock(&self, now: Instant) {
        let base = *self.inner.clock_base.get_or_init(|| now);
        let ms = u64::try_from(now.saturating_duration_since(base).as_millis()).unwrap_or(NEVER - 1);
        self.inner.clock_ms.fetch_max(ms, Relaxed);
    }

    /// The background thread's tick: [`set_clock`](Self::set_clock), then
    /// [`refill`](Self::refill) if the pool asked for it. Returns the buffers added.
    pub fn maintain(&self, now: Instant) -> usize {
        self.set_clock(now);
        if self.needs_refill() { self.refill() } else { 0 }
    }

    /// Install the hook called (on the allocating thread, at most once per
    /// [`WARN_INTERVAL_MS`]) when `alloc` finds the pool empty. It receives the pool name and
    /// a statistics snapshot; log from it, don't block in it.
    pub fn set_warn_hook(&self, hook: Box<WarnHook>) {
        *self.inner.hook.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::from(hook));
    }

    /// Move this thread's cached free buffers of this pool to the shared list (e.g. before a
    /// worker thread parks for a long time).
    pub fn flush_thread_cache(&self) {
        let inner = &self.inner;
        let _ = LOCAL.try_with(|caches| {
            if let Ok(mut caches) = caches.try_borrow_mut()
                && let Some(c) = caches.iter_mut().find(|c| c.id == inner.id)
            {
                inner.push_shared(c.bufs.drain(..));
            }
        });
    }

    /// A statistics snapshot.
    pub fn stats(&self) -> PoolStats {
        self.inner.stats()
    }

    /// The pool's configuration.
    pub fn config(&self) -> &PoolConfig {
        &self.inner.cfg
    }

    /// The pool's name.
    pub fn name(&self) -> &'static str {
        self.inner.cfg.name
    }

    /// This pool's line of the memory report.
    pub fn report(&self) -> PoolReport {
        self.inner.memory_report()
    }
}

/// An owned, mutable buffer from a [`BufferPool`]; returns to it when dropped, on any thread.
///
/// Dereferences to its current length (`..len()`); [`Buf::as_mut_full`] exposes the whole
/// capacity, e.g. for `recv` before [`Buf::set_len`].
pub struct Buf {
    storage: Storage,
    len: usize,
    pool: Arc<Inner>,
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

    /// Capacity: `upper` for pooled buffers, the requested length for bypass buffers.
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

    /// Whether this buffer came from the pool (as opposed to a bypass allocation).
    #[inline]
    pub fn is_pooled(&self) -> bool {
        // Bypass buffers have a length outside `[lower, upper]`, so never exactly `upper`.
        self.capacity() == self.pool.cfg.upper
    }

    /// Make the buffer immutable and shareable; it returns to the pool when the last clone of
    /// the [`SharedBuf`] drops. Costs one small allocation (the `Arc`).
    pub fn freeze(self) -> SharedBuf {
        SharedBuf(Arc::new(self))
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        let storage = std::mem::take(&mut self.storage);
        let pool = &self.pool;
        if storage.as_slice().len() == pool.cfg.upper {
            pool.put(storage);
        } else {
            pool.bypass_in_use.fetch_sub(1, Relaxed);
            pool.bypass_in_use_bytes
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
            .field("pool", &self.pool.cfg.name)
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
            .field("pool", &self.0.pool.cfg.name)
            .field("len", &self.0.len)
            .field("refs", &Arc::strong_count(&self.0))
            .finish()
    }
}
