//! The pool proper: the shared free list, per-thread caches, the `max_free` budget and
//! in-use accounting, misses and warnings, and the handle the memory registry sees.

use std::cell::RefCell;
use std::io::Write as _;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant};

use super::stats::PoolStats;
use super::storage::{PoolBacking, Storage};
use crate::config::PoolConfig;
use crate::registry::{MemorySource, PoolReport};

/// Most free buffers one thread keeps cached per pool before spilling a batch to the shared
/// list.
pub const THREAD_CACHE: usize = 32;
/// Buffers moved at once between a thread cache and the shared list (under its lock).
pub const BATCH: usize = 16;
/// Minimum time, on the pool clock, between two empty-pool warnings of one pool.
pub const WARN_INTERVAL: Duration = Duration::from_secs(1);

pub(super) const WARN_INTERVAL_MS: u64 = WARN_INTERVAL.as_millis() as u64;
pub(super) const NEVER: u64 = u64::MAX;
pub(super) static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);

/// The hook called with the pool name and a statistics snapshot when a pool runs dry.
pub type WarnHook = dyn Fn(&str, &PoolStats) + Send + Sync;

/// Keeps a value on its own cache lines, away from counters written by other threads.
#[repr(align(128))]
#[derive(Default)]
pub(super) struct Padded<T>(pub(super) T);

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
pub(super) struct ThreadCounters {
    pub(super) hits: AtomicU64,
    /// Mirror of `LocalCache::unflushed`.
    pub(super) unflushed: AtomicIsize,
}

/// One buffer's memory together with the strong reference to its pool: allocated once, when
/// the buffer is made, and moved as one pointer between the free lists, the [`Buf`](super::Buf) it
/// becomes and the [`SharedBuf`](super::SharedBuf) clones it is frozen into. Handing a
/// buffer out or taking it back moves that reference along, so the hot path updates no
/// reference count and moves 8 bytes (a `Buf` is 16, returned in registers); freezing a
/// buffer allocates nothing (the `Arc` around the descriptor is the shared count).
///
/// A packet path that froze a new `Arc` per packet kept thousands of small allocations alive
/// for as long as a stream's ring holds its packets, made while sessions came and went
/// around them: after a burst they pinned the C allocator's pages (measured in the churn
/// soak, `bench/soak.sh`). Descriptors live as long as their buffer.
///
/// Free entries therefore keep their pool alive; [`Handle`]'s drop (the last [`BufferPool`]
/// clone going away) closes the pool and drops the shared list to break that cycle.
pub(super) struct Head {
    pub(super) storage: Storage,
    pub(super) pool: Arc<Inner>,
    /// From the pool (returns to it), as opposed to a fallback for an out-of-range length.
    pub(super) pooled: bool,
    /// Frozen into shared clones that have not all been dropped yet. The last clone to drop
    /// normally sees itself alone and returns the descriptor to the pool as it is; when the
    /// last two clones drop at the same moment on two threads, neither does, and the
    /// descriptor's own drop returns the buffer (see `Drop for Head`).
    pub(super) shared: bool,
}

/// A buffer as the free lists, [`Buf`](super::Buf) and [`SharedBuf`](super::SharedBuf) hold it. Unique
/// everywhere but in `SharedBuf` clones.
pub(super) type Entry = Arc<Head>;

impl Head {
    pub(super) fn new(storage: Storage, pool: Arc<Inner>, pooled: bool) -> Entry {
        Arc::new(Head {
            storage,
            pool,
            pooled,
            shared: false,
        })
    }

    pub(super) fn is_heap(&self) -> bool {
        self.storage.is_heap()
    }
}

impl Drop for Head {
    fn drop(&mut self) {
        if !self.pooled {
            // A fallback buffer is dropped exactly once, whoever held it last.
            self.pool.fallback_in_use.fetch_sub(1, Relaxed);
            self.pool
                .fallback_bytes
                .fetch_sub(self.storage.as_slice().len(), Relaxed);
        } else if self.shared {
            // The last two shared clones were dropped at once (see `shared`): the buffer is
            // still handed out, so it goes back now, in a new descriptor. Rare; a free list
            // or a trim dropping a descriptor (not shared) frees the buffer instead.
            let storage = std::mem::take(&mut self.storage);
            Inner::put_slow(Head::new(storage, Arc::clone(&self.pool), true));
        }
    }
}

/// The shared free list, and whether the pool was closed (after which nothing may join it).
pub(super) struct SharedList {
    /// LIFO: the top is the most recently freed buffer.
    pub(super) bufs: Vec<Entry>,
    pub(super) closed: bool,
}

/// The pool proper, shared by its handle, its free entries and every outstanding [`Buf`](super::Buf).
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
pub(super) struct Inner {
    pub(super) id: u64,
    /// `id` while the pool is open, 0 (no pool's id) once closed: the fast paths find a
    /// thread cache by it, so one load both finds the cache and checks the pool is open.
    pub(super) key: AtomicU64,
    pub(super) cfg: PoolConfig,
    pub(super) backing: PoolBacking,
    /// Units of `budget` a thread reserves at once: `max_free / 16`, at least 1, at most
    /// [`BATCH`].
    pub(super) chunk: usize,
    /// Free buffers not in any thread cache.
    pub(super) shared: Padded<Mutex<SharedList>>,
    /// Counters of the threads that have a cache for this pool.
    pub(super) threads: Mutex<Vec<Arc<ThreadCounters>>>,
    /// Pooled buffers handed out, as of each thread's last flush (may dip below zero while
    /// frees on one thread are flushed before the allocations on another).
    pub(super) in_use: Padded<AtomicIsize>,
    /// Free-buffer units not reserved by any thread (see above).
    pub(super) budget: Padded<AtomicUsize>,
    // Read on every alloc, written rarely.
    /// Mirrors `SharedList::closed` for checks that don't take the lock.
    pub(super) closed: AtomicBool,
    /// Pooled buffers in existence: free (shared or thread-cached) plus in use.
    pub(super) total: AtomicUsize,
    /// Fallback (heap, unpooled) buffers handed out, and their bytes.
    pub(super) fallback_in_use: AtomicUsize,
    pub(super) fallback_bytes: AtomicUsize,
    /// Peak of the number of buffers handed out (pooled and fallback).
    pub(super) high_water: AtomicUsize,
    /// Peak of the pooled buffers handed out since the last `trim`: what the pool must keep
    /// room for.
    pub(super) recent_peak: AtomicUsize,
    /// Heap buffers `trim` wanted to free but found in use or in a thread cache: each is freed
    /// as it comes back instead of rejoining the pool (the ones cycling through a stream's
    /// ring never sit on the shared list).
    pub(super) shrink: AtomicUsize,
    pub(super) peak_used_bytes: AtomicUsize,
    /// Set by a dry miss, cleared by a hit or a refill: counts empty *events*.
    pub(super) dry: AtomicBool,
    pub(super) needs_refill: AtomicBool,
    // Cold counters.
    /// Hits of threads that exited, and hits made without a thread cache.
    pub(super) retired_hits: AtomicU64,
    pub(super) misses: AtomicU64,
    pub(super) bypasses: AtomicU64,
    pub(super) empty_events: AtomicU64,
    pub(super) warnings: AtomicU64,
    pub(super) warnings_suppressed: AtomicU64,
    pub(super) refills: AtomicU64,
    pub(super) refilled_buffers: AtomicU64,
    pub(super) released: AtomicU64,
    pub(super) clock_base: OnceLock<Instant>,
    pub(super) clock_ms: AtomicU64,
    pub(super) last_warn_ms: AtomicU64,
    pub(super) hook: RwLock<Arc<WarnHook>>,
}

/// One pool's buffers and counts on one thread.
///
/// # The fast paths' single check
///
/// An allocation from the cache and a free into it both move the thread's unsettled in-use
/// count `unflushed` and its reserved budget units (the allowance) by one in the same
/// direction, so only `unflushed` and the difference `credit = allowance - unflushed` are
/// stored. Everything that needs more than that one step (a new high of `unflushed`, which
/// checks the pool's peaks and low-water mark; a settle at [`BATCH`]; more than two chunks of
/// units to give back; no unit left for a free) happens exactly when `unflushed` leaves the
/// bounds `down..=up`, recomputed by [`LocalCache::bounds`] whenever `credit`, `high` or the
/// settled base changes. So the fast paths compare `unflushed` with one bound, and fall back
/// to the full bookkeeping (`count_take`, `count_return`) outside it.
pub(super) struct LocalCache {
    pub(super) id: u64,
    pub(super) pool: Weak<Inner>,
    /// LIFO: the top is the most recently freed buffer.
    pub(super) bufs: Vec<Entry>,
    /// Pooled buffers this thread handed out minus those it took back, not yet in
    /// `Inner::in_use`. Always within `-BATCH < unflushed < BATCH` between calls.
    pub(super) unflushed: isize,
    /// Budget units reserved and not yet used (see [`Inner`]), minus `unflushed`.
    credit: isize,
    /// Highest `unflushed` since this thread last settled it with the pool (at least 0): an
    /// allocation taking `unflushed` above it checks the pool's peaks and low-water mark.
    high: isize,
    /// An allocation that keeps `unflushed <= up`, or a free that keeps `unflushed >= down`,
    /// needs no bookkeeping beyond `unflushed` itself.
    up: isize,
    down: isize,
    /// Most budget units kept in reserve: two chunks.
    max_units: isize,
    pub(super) counters: Arc<ThreadCounters>,
}

impl LocalCache {
    pub(super) fn new(pool: &Arc<Inner>, counters: Arc<ThreadCounters>) -> LocalCache {
        let mut cache = LocalCache {
            id: pool.id,
            pool: Arc::downgrade(pool),
            bufs: Vec::with_capacity(THREAD_CACHE),
            unflushed: 0,
            credit: 0,
            high: 0,
            up: 0,
            down: 0,
            max_units: (2 * pool.chunk) as isize,
            counters,
        };
        cache.bounds();
        cache
    }

    pub(super) fn is_closed(&self) -> bool {
        self.pool.upgrade().is_none_or(|p| p.closed.load(Relaxed))
    }

    /// Budget units reserved and not yet used.
    pub(super) fn allowance(&self) -> usize {
        usize::try_from(self.credit + self.unflushed).unwrap_or(0)
    }

    pub(super) fn set_allowance(&mut self, units: usize) {
        self.credit = units as isize - self.unflushed;
        self.bounds();
    }

    /// Recompute the fast paths' bounds (see the type's documentation): an allocation stays
    /// fast while `unflushed` does not pass its high (which is below [`BATCH`]) and the
    /// allowance does not pass `max_units`; a free while a unit is at hand and `unflushed`
    /// stays above `-BATCH`.
    pub(super) fn bounds(&mut self) {
        self.up = self.high.min(self.max_units - self.credit);
        self.down = (-self.credit).max(1 - BATCH as isize);
    }

    /// The fast path of an allocation from the cache: count it if that needs nothing else.
    #[inline]
    fn take_fast(&mut self) -> bool {
        let u = self.unflushed + 1;
        if u > self.up {
            return false;
        }
        self.unflushed = u;
        self.counters.unflushed.store(u, Relaxed);
        true
    }

    /// The fast path of a free into the cache: whether it needs nothing beyond counting
    /// (`return_fast`) and a unit from the allowance (implied).
    #[inline]
    fn can_return_fast(&self) -> bool {
        self.unflushed > self.down
    }

    #[inline]
    fn return_fast(&mut self) {
        let u = self.unflushed - 1;
        self.unflushed = u;
        self.counters.unflushed.store(u, Relaxed);
    }

    /// Count one pooled buffer handed out: a hit (`earned`: its budget unit comes back to
    /// this thread) or a dry miss (a new buffer, no unit). A new high of
    /// the thread's unsettled count since it last settled checks the pool's peaks and
    /// low-water mark (`note_out`); at [`BATCH`] the count is settled with the pool.
    /// Allocations below that high cannot raise the pool's in-use count past what was
    /// already checked, except by other threads' counts, which those threads check as they
    /// rise or settle.
    #[cold]
    #[inline(never)]
    pub(super) fn count_take(&mut self, pool: &Inner, earned: bool) {
        let mut units = self.allowance() + usize::from(earned);
        if units > 2 * pool.chunk {
            units -= pool.chunk;
            pool.budget.fetch_add(pool.chunk, Relaxed);
        }
        self.unflushed += 1;
        self.credit = units as isize - self.unflushed;
        self.counters.unflushed.store(self.unflushed, Relaxed);
        if self.unflushed >= BATCH as isize {
            self.settle(pool);
        } else {
            if self.unflushed > self.high {
                self.high = self.unflushed;
                pool.note_out(self.unflushed);
            }
            self.bounds();
        }
    }

    /// Count one pooled buffer taken back (its budget unit is the caller's business);
    /// settled with the pool at [`BATCH`].
    pub(super) fn count_return(&mut self, pool: &Inner) {
        self.unflushed -= 1;
        self.credit += 1;
        self.counters.unflushed.store(self.unflushed, Relaxed);
        if self.unflushed <= -(BATCH as isize) {
            self.settle(pool);
        } else {
            self.bounds();
        }
    }

    /// Fold the unsettled count into `Inner::in_use`, then check peaks and low water.
    pub(super) fn settle(&mut self, pool: &Inner) {
        let u = std::mem::take(&mut self.unflushed);
        self.credit += u;
        self.high = 0;
        pool.in_use.fetch_add(u, Relaxed);
        self.counters.unflushed.store(0, Relaxed);
        self.bounds();
        pool.note_out(0);
    }

    /// Give everything back to the pool: buffers to the shared list, budget units, the
    /// in-use delta.
    pub(super) fn flush(&mut self, pool: &Inner) {
        pool.push_shared(self.bufs.drain(..));
        pool.budget.fetch_add(self.allowance(), Relaxed);
        pool.in_use
            .fetch_add(std::mem::take(&mut self.unflushed), Relaxed);
        self.credit = 0;
        self.high = 0;
        self.counters.unflushed.store(0, Relaxed);
        self.bounds();
    }

    /// Bookkeeping for a buffer about to be popped from this cache.
    #[inline]
    fn on_hit(&mut self, pool: &Inner) {
        if !self.take_fast() {
            self.count_take(pool, true);
        }
        self.count_hit(pool);
    }

    /// The hit counter and the dry flag, for a buffer taken from this cache.
    #[inline]
    fn count_hit(&mut self, pool: &Inner) {
        let hits = &self.counters.hits;
        hits.store(hits.load(Relaxed) + 1, Relaxed);
        if pool.dry.load(Relaxed) {
            pool.dry.store(false, Relaxed);
        }
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

/// This thread's caches, one per pool it used; the one used last comes first, so the
/// common case (one pool per thread, or one at a time) finds its cache without a search.
pub(super) struct Local {
    pub(super) caches: Vec<LocalCache>,
}

impl Local {
    /// The cache used last, if it belongs to the pool with this `key` (see `Inner::key`).
    #[inline]
    pub(super) fn hot(&mut self, key: u64) -> Option<&mut LocalCache> {
        self.caches.first_mut().filter(|c| c.id == key)
    }

    /// This thread's cache for `pool`, created on first use (closed pools' caches are pruned
    /// then), moved to the front. `None` once the thread is exiting (its caches are gone).
    pub(super) fn entry(&mut self, pool: &Arc<Inner>) -> Option<&mut LocalCache> {
        let pos = match self.caches.iter().position(|c| c.id == pool.id) {
            Some(pos) => pos,
            None => self.create(pool)?,
        };
        self.caches.swap(0, pos);
        self.caches.first_mut()
    }

    #[cold]
    #[inline(never)]
    fn create(&mut self, pool: &Arc<Inner>) -> Option<usize> {
        // The guard hands the caches back at thread exit; once it has run, no cache may be
        // made (nothing would hand it back).
        GUARD.try_with(|_| ()).ok()?;
        self.caches.retain(|c| !c.is_closed());
        let counters = Arc::new(ThreadCounters::default());
        pool.threads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::clone(&counters));
        self.caches.push(LocalCache::new(pool, counters));
        Some(self.caches.len() - 1)
    }

    /// Remove and return `id`'s cache, if this thread has one.
    pub(super) fn remove(&mut self, id: u64) -> Option<LocalCache> {
        let i = self.caches.iter().position(|c| c.id == id)?;
        Some(self.caches.swap_remove(i))
    }
}

/// Drops this thread's caches (handing their buffers and counts back) when the thread
/// exits. `LOCAL` itself has no destructor, so reaching it needs no check of whether the
/// thread is exiting; this guard is registered when the thread makes its first cache.
pub(super) struct Guard;

impl Drop for Guard {
    fn drop(&mut self) {
        // Dropped after the borrow ends: dropping a cache may drop a pool, whose drop looks
        // at this thread's caches.
        let caches = LOCAL.with(|local| {
            local
                .try_borrow_mut()
                .map(|mut local| std::mem::take(&mut local.caches))
                .unwrap_or_default()
        });
        drop(caches);
    }
}

thread_local! {
    /// This thread's caches. Without drop glue (see [`Guard`]).
    pub(super) static LOCAL: RefCell<ManuallyDrop<Local>> =
        const { RefCell::new(ManuallyDrop::new(Local { caches: Vec::new() })) };
    static GUARD: Guard = const { Guard };
}

/// The default warn hook: one line on stderr (the pool crate has no logging dependency).
pub(super) fn warn_to_stderr(name: &str, s: &PoolStats) {
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
    pub(super) fn lock_shared(&self) -> MutexGuard<'_, SharedList> {
        // A panic while holding the lock cannot leave a Vec of buffers inconsistent.
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Put free entries on the shared list, or free them if the pool is closed. The caller
    /// holds a strong reference of its own, so dropping entries never drops `self`.
    pub(super) fn push_shared(&self, bufs: impl Iterator<Item = Entry>) {
        let mut list = self.lock_shared();
        if list.closed {
            drop(list);
            bufs.for_each(drop);
        } else {
            list.bufs.extend(bufs);
        }
    }

    /// Whether a returning heap buffer is to be freed for a pending trim; counts it freed.
    #[inline]
    pub(super) fn take_shrink(&self) -> bool {
        let mut n = self.shrink.load(Relaxed);
        while n > 0 {
            match self
                .shrink
                .compare_exchange_weak(n, n - 1, Relaxed, Relaxed)
            {
                Ok(_) => {
                    self.total.fetch_sub(1, Relaxed);
                    self.released.fetch_add(1, Relaxed);
                    return true;
                }
                Err(now) => n = now,
            }
        }
        false
    }

    /// Take up to `want` units of `budget`; returns how many were taken.
    pub(super) fn reserve(&self, want: usize) -> usize {
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

    /// A pooled buffer of length `len` for `alloc`: from this thread's cache (refilled from
    /// the shared list a batch at a time), else a new one (then the warn hook may run).
    #[inline]
    pub(super) fn take(self: &Arc<Self>) -> Entry {
        // The common case: the cache used last is this pool's and holds a buffer. The entry
        // (one pointer) moves from the cache to the caller, which wraps it in the `Buf`.
        // (`try_with` rather than `with`: `LOCAL` has no destructor, so it never fails, and it
        // inlines where `with`'s panic path does not.)
        let hit = LOCAL.try_with(|local| {
            let mut local = local.try_borrow_mut().ok()?;
            let cache = local.hot(self.key.load(Relaxed))?;
            if cache.bufs.is_empty() {
                return None;
            }
            // Beyond counting (see `LocalCache`): a cold call, taken by every allocation of
            // a thread whose buffers are freed elsewhere (each one is a new high).
            if !cache.take_fast() {
                cache.count_take(self, true);
            }
            cache.count_hit(self);
            // Nothing above touches `bufs`: the pop succeeds.
            cache.bufs.pop()
        });
        match hit {
            Ok(Some(entry)) => entry,
            _ => self.take_slow(),
        }
    }

    /// `take` when this pool's cache is not the one used last, is empty, or does not exist.
    #[cold]
    #[inline(never)]
    pub(super) fn take_slow(self: &Arc<Self>) -> Entry {
        let got = LOCAL.with(|local| {
            let mut local = local.try_borrow_mut().ok()?;
            let cache = local.entry(self)?;
            if cache.bufs.is_empty() {
                let mut shared = self.lock_shared();
                let start = shared.bufs.len().saturating_sub(BATCH);
                // Keeps order: the most recently freed buffer ends on top of the thread cache.
                cache.bufs.extend(shared.bufs.drain(start..));
            }
            let got = match cache.bufs.pop() {
                Some(entry) => {
                    cache.on_hit(self);
                    (entry, false)
                }
                None => {
                    let entry = self.miss();
                    cache.count_take(self, false);
                    (entry, true)
                }
            };
            Some(got)
        });
        let (entry, dry) = match got {
            Some(got) => got,
            // Thread exiting, or re-entered: use the shared list directly.
            None => self.take_without_cache(),
        };
        if dry {
            // After the bookkeeping, so the hook's snapshot counts this buffer.
            self.maybe_warn();
        }
        entry
    }

    #[cold]
    pub(super) fn take_without_cache(self: &Arc<Self>) -> (Entry, bool) {
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

    /// Return a pooled buffer (from `Buf::drop`, on any thread): the entry (storage and the
    /// pool reference the `Buf` carried) is moved out of the `Buf`, leaving `None`.
    #[inline]
    pub(super) fn put(slot: &mut Option<Entry>) {
        // The common case: an open pool, its cache the one used last, with room and a
        // reserved budget unit, and no trim waiting for this buffer. The entry is moved from
        // the `Buf` straight into the cache.
        let done = LOCAL.try_with(|local| match local.try_borrow_mut() {
            Ok(mut local) => Inner::put_fast(&mut local, slot),
            Err(_) => false,
        });
        if done != Ok(true) {
            Inner::put_other(slot);
        }
    }

    #[inline]
    fn put_fast(local: &mut Local, slot: &mut Option<Entry>) -> bool {
        let Some(entry) = slot.as_ref() else {
            return true;
        };
        let pool: &Inner = &entry.pool;
        if entry.is_heap() && pool.shrink.load(Relaxed) != 0 {
            return false;
        }
        // A closed pool's key is 0, no cache's id: its buffers take the slow path.
        let Some(cache) = local.hot(pool.key.load(Relaxed)) else {
            return false;
        };
        let len = cache.bufs.len();
        // (The capacity is `THREAD_CACHE`; checking it too lets `push` below store in place.)
        if !cache.can_return_fast() || len >= THREAD_CACHE || len == cache.bufs.capacity() {
            return false;
        }
        // The entry moves from the `Buf` straight into the cache (first, so that no store
        // the compiler cannot tell apart from the cache's length or capacity comes between
        // the checks above and the push: it then stores in place).
        if let Some(entry) = slot.take() {
            cache.bufs.push(entry);
        }
        cache.return_fast();
        true
    }

    #[cold]
    #[inline(never)]
    fn put_other(slot: &mut Option<Entry>) {
        if let Some(entry) = slot.take() {
            Inner::put_slow(entry);
        }
    }

    /// `put` off the common case: a closed pool, a pending trim, no cache (or not the one
    /// used last), no budget unit at hand, a full cache, or no usable thread-local state.
    #[cold]
    #[inline(never)]
    pub(super) fn put_slow(entry: Entry) {
        let mut slot = Some(entry);
        // Dropped after the thread-local borrow ends: dropping an entry may drop the pool,
        // whose drop looks at this thread's caches.
        let mut freed = None;
        let mut stale = None;
        LOCAL.with(|local| {
            let Ok(mut local) = local.try_borrow_mut() else {
                return;
            };
            let Some(entry) = slot.take() else {
                return;
            };
            if entry.pool.closed.load(Relaxed) {
                // Closed while this buffer was out: free it, and this thread's cache for the
                // pool.
                stale = local.remove(entry.pool.id);
                slot = Some(entry);
                return;
            }
            let Some(cache) = local.entry(&entry.pool) else {
                // Thread exiting: no cache.
                slot = Some(entry);
                return;
            };
            let inner: &Inner = &entry.pool;
            cache.count_return(inner);
            if entry.is_heap() && inner.take_shrink() {
                freed = Some(entry);
                return;
            }
            if cache.allowance() == 0 {
                cache.set_allowance(inner.reserve(inner.chunk));
            }
            if cache.allowance() == 0 {
                // `max_free` buffers are free: this one goes back to the system. Prefer a heap
                // buffer from the cache over a region chunk: dropping a chunk returns only the
                // whole pages inside it (none, for packet-sized buffers) until its whole region
                // is free.
                inner.total.fetch_sub(1, Relaxed);
                inner.released.fetch_add(1, Relaxed);
                let victim = if entry.is_heap() {
                    None
                } else {
                    cache.bufs.iter().rposition(|e| e.is_heap())
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
            cache.set_allowance(cache.allowance() - 1);
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
    pub(super) fn put_without_cache(entry: Entry) {
        let pool = Arc::clone(&entry.pool);
        pool.in_use.fetch_sub(1, Relaxed);
        if entry.is_heap() && pool.take_shrink() {
            drop(entry);
        } else if pool.reserve(1) == 1 {
            pool.push_shared(std::iter::once(entry));
        } else {
            pool.total.fetch_sub(1, Relaxed);
            pool.released.fetch_add(1, Relaxed);
            drop(entry);
        }
    }

    /// Bookkeeping for buffers handed out: high-water marks and the low-water flag, from
    /// `in_use` plus this thread's unflushed delta `local` (other threads' deltas, at most
    /// [`BATCH`] each, are not seen here; `stats` folds the exact count in). Called when a
    /// thread's delta reaches a new high since it last settled and at every settle (see
    /// `LocalCache::count_take`), not on every allocation.
    #[inline]
    pub(super) fn note_out(&self, local: isize) {
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
    pub(super) fn note_peaks(&self, pooled: usize) {
        if pooled > self.recent_peak.load(Relaxed) {
            self.recent_peak.fetch_max(pooled, Relaxed);
        }
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
    pub(super) fn miss(self: &Arc<Self>) -> Entry {
        self.misses.fetch_add(1, Relaxed);
        self.total.fetch_add(1, Relaxed);
        if !self.dry.load(Relaxed) && !self.dry.swap(true, Relaxed) {
            self.empty_events.fetch_add(1, Relaxed);
        }
        if self.cfg.low_water > 0 {
            self.needs_refill.store(true, Relaxed);
        }
        Head::new(Storage::heap(self.cfg.upper, false), Arc::clone(self), true)
    }

    #[cold]
    pub(super) fn maybe_warn(&self) {
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
    pub(super) fn sum_threads(&self) -> (usize, u64) {
        let threads = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
        let mut in_use = self.in_use.load(Relaxed);
        let mut hits = self.retired_hits.load(Relaxed);
        for t in threads.iter() {
            in_use += t.unflushed.load(Relaxed);
            hits += t.hits.load(Relaxed);
        }
        (usize::try_from(in_use).unwrap_or(0), hits)
    }

    pub(super) fn stats(&self) -> PoolStats {
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

    pub(super) fn report(&self) -> PoolReport {
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
        LOCAL.with(|local| {
            if let Ok(mut local) = local.try_borrow_mut() {
                local.caches.retain(|c| c.id != id);
            }
        });
    }
}

/// The pool's owner, shared by every [`BufferPool`] clone; what the memory registry sees.
/// Dropping it closes the pool.
pub(super) struct Handle {
    pub(super) inner: Arc<Inner>,
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
            inner.key.store(0, Relaxed);
            std::mem::take(&mut list.bufs)
        };
        drop(free);
        // This thread's cached buffers too; other threads free theirs when they exit, return a
        // buffer of this pool, or first use another pool.
        let id = inner.id;
        LOCAL.with(|local| {
            let stale: Vec<LocalCache> = match local.try_borrow_mut() {
                Ok(mut local) => {
                    let (stale, keep) = std::mem::take(&mut local.caches)
                        .into_iter()
                        .partition(|c| c.id == id);
                    local.caches = keep;
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
