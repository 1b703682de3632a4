//! The crate's only `unsafe` code: the counting global allocator and the anonymous memory
//! mapping used for huge-page buffer pools.
//!
//! Everything here is small on purpose; the safe rest of the crate only sees [`CountingAlloc`],
//! [`AllocStats`] and the crate-private `Mapping`.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, AtomicU64, Ordering::Relaxed};

use crate::shard::{SHARDS, thread_shard};

/// How far a shard's unflushed byte delta may drift (either way) before it is folded into the
/// process-wide live count and the peak is updated.
///
/// The peak can therefore miss at most `SHARDS * FLUSH_BYTES` (2 MiB) of a short-lived spike;
/// any single allocation of `FLUSH_BYTES` or more is flushed at once and so always reaches it.
pub(crate) const FLUSH_BYTES: usize = 64 * 1024;

/// One cache line pair per shard, so threads on different shards never share a line.
#[repr(align(128))]
struct Shard {
    allocations: AtomicU64,
    frees: AtomicU64,
    /// Bytes allocated minus bytes freed on this shard since the last flush.
    pending: AtomicIsize,
}

impl Shard {
    const fn new() -> Self {
        Self {
            allocations: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            pending: AtomicIsize::new(0),
        }
    }
}

static COUNTERS: [Shard; SHARDS] = [const { Shard::new() }; SHARDS];
/// Live bytes flushed from the shards; `FLUSHED + sum(pending)` is the exact live count.
static FLUSHED: AtomicIsize = AtomicIsize::new(0);
/// High-water mark of `FLUSHED` (and of the exact count at every [`CountingAlloc::stats`]).
static PEAK: AtomicIsize = AtomicIsize::new(0);

#[inline]
fn record(bytes: isize, allocations: u64, frees: u64) {
    let shard = &COUNTERS[thread_shard()];
    if allocations != 0 {
        shard.allocations.fetch_add(allocations, Relaxed);
    }
    if frees != 0 {
        shard.frees.fetch_add(frees, Relaxed);
    }
    let pending = shard.pending.fetch_add(bytes, Relaxed).wrapping_add(bytes);
    if pending.unsigned_abs() >= FLUSH_BYTES {
        let moved = shard.pending.swap(0, Relaxed);
        let live = FLUSHED.fetch_add(moved, Relaxed).wrapping_add(moved);
        PEAK.fetch_max(live, Relaxed);
    }
}

/// A snapshot of the process-wide allocation counters kept by [`CountingAlloc`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AllocStats {
    /// Bytes currently allocated (requested sizes, not allocator overhead). Exact.
    pub live_bytes: usize,
    /// Highest `live_bytes` observed since start or the last [`CountingAlloc::reset_peak`].
    ///
    /// Updated whenever a shard's unflushed delta reaches 64 KiB and at every
    /// [`CountingAlloc::stats`] call, so it may under-report a brief spike by at most
    /// 32 shards x 64 KiB; it never over-reports.
    pub peak_bytes: usize,
    /// Number of allocations (`alloc`, `alloc_zeroed`, and one per `realloc`). Exact.
    pub allocations: u64,
    /// Number of frees (`dealloc`, and one per `realloc`). Exact.
    pub frees: u64,
}

impl AllocStats {
    /// Allocations not yet freed.
    pub fn live_allocations(&self) -> u64 {
        self.allocations.saturating_sub(self.frees)
    }
}

/// A global allocator wrapping [`System`] that counts bytes and calls.
///
/// Install it in a binary:
///
/// ```ignore
/// #[global_allocator]
/// static A: tern_pool::CountingAlloc = tern_pool::CountingAlloc::new();
/// ```
///
/// Counters are sharded: each thread is assigned one of 32 cache-line-padded shards on first
/// use (a `const`-initialised thread-local `Cell`, which needs no heap and no destructor), so
/// an allocation costs two uncontended atomic adds on top of `System`. Reads sum the shards.
/// The counters are process-wide statics: if no `CountingAlloc` is installed they stay zero.
#[derive(Debug, Default, Clone, Copy)]
pub struct CountingAlloc;

impl CountingAlloc {
    /// A counting allocator, for `#[global_allocator]`.
    pub const fn new() -> Self {
        Self
    }

    /// Current counters (sums the shards; never allocates).
    pub fn stats() -> AllocStats {
        let mut allocations = 0u64;
        let mut frees = 0u64;
        let mut live = FLUSHED.load(Relaxed);
        for shard in &COUNTERS {
            allocations = allocations.wrapping_add(shard.allocations.load(Relaxed));
            frees = frees.wrapping_add(shard.frees.load(Relaxed));
            live = live.wrapping_add(shard.pending.load(Relaxed));
        }
        let peak = PEAK.fetch_max(live, Relaxed).max(live);
        AllocStats {
            live_bytes: usize::try_from(live).unwrap_or(0),
            peak_bytes: usize::try_from(peak).unwrap_or(0),
            allocations,
            frees,
        }
    }

    /// Restart the peak from the current live byte count (e.g. after start-up, before a
    /// benchmark phase).
    pub fn reset_peak() {
        let mut live = FLUSHED.load(Relaxed);
        for shard in &COUNTERS {
            live = live.wrapping_add(shard.pending.load(Relaxed));
        }
        PEAK.store(live, Relaxed);
    }
}

fn signed(size: usize) -> isize {
    // Layout sizes never exceed isize::MAX.
    isize::try_from(size).unwrap_or(isize::MAX)
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so
// `System`'s guarantees carry over; the bookkeeping only touches atomics and a const
// thread-local `Cell` and never allocates, so it cannot recurse into the allocator.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract (non-zero size), which is
        // `System::alloc`'s contract too.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            record(signed(layout.size()), 1, 0);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as `alloc`, forwarded unchanged.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            record(signed(layout.size()), 1, 0);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was returned by this allocator (hence by `System`) with `layout`, as
        // the caller guarantees.
        unsafe { System.dealloc(ptr, layout) };
        record(-signed(layout.size()), 0, 1);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `ptr`/`layout` came from this allocator (hence from
        // `System`) and that `new_size` is valid for `layout.align()`.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            record(signed(new_size) - signed(layout.size()), 1, 1);
        }
        new
    }
}

/// Anonymous private memory mappings for huge-page pools (Linux on x86-64/aarch64/riscv64;
/// elsewhere `Mapping::new` returns `None` and the pool falls back to the heap).
pub(crate) use map::Mapping;

#[cfg(all(
    target_os = "linux",
    any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "riscv64"
    )
))]
mod map {
    use std::ffi::{c_int, c_long, c_void};
    use std::ptr::NonNull;

    // Values from the generic Linux UAPI headers, shared by the architectures selected above.
    const PROT_READ: c_int = 0x1;
    const PROT_WRITE: c_int = 0x2;
    const MAP_PRIVATE: c_int = 0x02;
    const MAP_ANONYMOUS: c_int = 0x20;
    const MAP_POPULATE: c_int = 0x8000;
    const MAP_HUGETLB: c_int = 0x40000;
    const MADV_HUGEPAGE: c_int = 14;
    /// 2 MiB, the default huge page size on these architectures.
    pub(crate) const HUGE_PAGE: usize = 2 * 1024 * 1024;

    unsafe extern "C" {
        fn mmap(
            addr: *mut c_void,
            len: usize,
            prot: c_int,
            flags: c_int,
            fd: c_int,
            off: c_long,
        ) -> *mut c_void;
        fn munmap(addr: *mut c_void, len: usize) -> c_int;
        fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int;
    }

    /// An owned anonymous mapping of `len` readable, writable, zero-filled bytes.
    pub(crate) struct Mapping {
        ptr: NonNull<u8>,
        /// Bytes exposed to safe code.
        len: usize,
        /// Bytes mapped (rounded up to the page size used).
        mapped: usize,
    }

    // SAFETY: a `Mapping` owns its region exclusively (like a `Box<[u8]>`); access goes through
    // `&self`/`&mut self`, so the usual borrow rules prevent data races.
    unsafe impl Send for Mapping {}
    // SAFETY: as above; shared access only hands out `&[u8]`.
    unsafe impl Sync for Mapping {}

    impl Mapping {
        /// Map `len` bytes, trying `MAP_HUGETLB` first (needs reserved huge pages), then a
        /// normal mapping advised for transparent huge pages. `populate` adds `MAP_POPULATE`
        /// so the kernel faults every page in now. `None` if both fail or `len == 0`.
        pub(crate) fn new(len: usize, populate: bool) -> Option<Mapping> {
            if len == 0 {
                return None;
            }
            let mapped = len.checked_next_multiple_of(HUGE_PAGE)?;
            let populate = if populate { MAP_POPULATE } else { 0 };
            let base = MAP_PRIVATE | MAP_ANONYMOUS | populate;
            for (flags, advise) in [(base | MAP_HUGETLB, false), (base, true)] {
                // SAFETY: an anonymous mapping at a kernel-chosen address touches no existing
                // memory; the arguments are plain integers and a null hint.
                let ptr = unsafe {
                    mmap(
                        std::ptr::null_mut(),
                        mapped,
                        PROT_READ | PROT_WRITE,
                        flags,
                        -1,
                        0,
                    )
                };
                // MAP_FAILED is (void*)-1.
                if ptr as usize == usize::MAX || ptr.is_null() {
                    continue;
                }
                if advise {
                    // SAFETY: `ptr..ptr+mapped` is the mapping just created; madvise only
                    // changes the kernel's paging policy for it. Failure is harmless.
                    let _ = unsafe { madvise(ptr, mapped, MADV_HUGEPAGE) };
                }
                let ptr = NonNull::new(ptr.cast::<u8>())?;
                return Some(Mapping { ptr, len, mapped });
            }
            None
        }

        pub(crate) fn as_slice(&self) -> &[u8] {
            // SAFETY: `ptr` is valid for `len <= mapped` bytes for the mapping's lifetime,
            // initialised (anonymous mappings are zero-filled), and not mutably borrowed
            // while `&self` is held.
            unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
        }

        pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
            // SAFETY: as in `as_slice`, and `&mut self` guarantees exclusive access.
            unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
        }
    }

    impl Drop for Mapping {
        fn drop(&mut self) {
            // SAFETY: unmapping exactly the region `new` mapped; no slice borrowed from it can
            // outlive `self`.
            let _ = unsafe { munmap(self.ptr.as_ptr().cast::<c_void>(), self.mapped) };
        }
    }
}

#[cfg(not(all(
    target_os = "linux",
    any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "riscv64"
    )
)))]
mod map {
    /// Placeholder: no mapping support on this platform; pools use the heap.
    pub(crate) enum Mapping {}

    impl Mapping {
        pub(crate) fn new(_len: usize, _populate: bool) -> Option<Mapping> {
            None
        }
        pub(crate) fn as_slice(&self) -> &[u8] {
            match *self {}
        }
        pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
            match *self {}
        }
    }
}
