//! A pool's statistics: a snapshot of its atomics.

/// Statistics of one [`BufferPool`]: a snapshot of atomics, each exact once the pool is
/// quiescent (while threads allocate, fields are read one by one and may disagree slightly).
///
/// [`BufferPool`]: super::BufferPool
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
    /// [`BufferPool::refill`](super::BufferPool::refill) calls that added buffers.
    pub refills: u64,
    /// Buffers handed out and not yet dropped (pooled and fallback).
    pub in_use: usize,
    /// Highest `in_use` seen: checked whenever an allocation takes its thread's count of
    /// buffers not yet settled with the pool to a new high since the thread last settled
    /// (every [`BATCH`] buffers net, either way), at every settle, and exactly at every
    /// `stats` call. Other threads' unsettled counts (under [`BATCH`] each) are not seen by
    /// a check, so a brief peak may be missed by up to [`BATCH`] buffers per other thread;
    /// allocations that only return a thread to a count it already reached since it last
    /// settled are not checked (they cannot raise its own part of the peak).
    ///
    /// [`BATCH`]: super::BATCH
    pub high_water: usize,
    /// Free pooled buffers (shared list plus every thread's cache).
    pub free: usize,
    /// Bytes held by the pool: every pooled buffer (`upper` bytes each, free or in use) plus
    /// fallback buffers in use.
    pub allocated_bytes: usize,
    /// Bytes of the buffers in use (capacity, not the requested lengths).
    pub used_bytes: usize,
    /// Highest `used_bytes` seen (checked like `high_water`).
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
