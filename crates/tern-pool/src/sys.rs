//! The crate's only `unsafe` code: the counting global allocator and the anonymous memory
//! regions that prefaulted and huge-page buffer pools are carved from.
//!
//! Everything here is small on purpose; the safe rest of the crate only sees [`CountingAlloc`],
//! [`AllocStats`] and the crate-private `Chunk` (one buffer's disjoint slice of a region).
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, AtomicU64, AtomicUsize, Ordering::Relaxed};

use crate::shard::{SHARDS, thread_net, thread_net_add, thread_shard};

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
/// Bytes currently mapped by buffer regions (memory the allocator never sees).
static MAPPED: AtomicUsize = AtomicUsize::new(0);

#[inline]
fn record(bytes: isize, allocations: u64, frees: u64) {
    thread_net_add(bytes);
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
    /// Bytes of anonymous memory currently mapped by this crate's buffer pools (prefaulted and
    /// huge-page regions), which bypass the allocator and so are not in `live_bytes`. Counted
    /// whether or not a `CountingAlloc` is installed.
    pub mapped_bytes: usize,
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
/// ```
/// #[global_allocator]
/// static A: tern_pool::CountingAlloc = tern_pool::CountingAlloc::new();
///
/// let v = vec![0u8; 4096];
/// assert!(tern_pool::CountingAlloc::stats().live_bytes >= v.len());
/// ```
///
/// Counters are sharded: each thread is assigned one of 32 cache-line-padded shards on first
/// use (a `const`-initialised thread-local `Cell`, which needs no heap and no destructor), so
/// an allocation costs two uncontended atomic adds on top of `System`. Reads sum the shards.
/// The counters are process-wide statics: if no `CountingAlloc` is installed they stay zero
/// (except [`AllocStats::mapped_bytes`], which this crate's pools keep themselves).
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
            mapped_bytes: MAPPED.load(Relaxed),
        }
    }

    /// Bytes the calling thread has allocated minus the bytes it has freed, since it started.
    ///
    /// Exact and unaffected by other threads, so a single-threaded owner (the media engine)
    /// can attribute its heap to what it does: read it before and after a call, and the
    /// difference is what the call allocated and kept (memory freed here that another
    /// thread allocated counts negative).
    pub fn thread_net_bytes() -> i64 {
        thread_net() as i64
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

/// Routes aws-lc's heap (`OPENSSL_malloc`, used by the crypto library for cipher contexts,
/// keys and DTLS state) through [`CountingAlloc`], so the counters are the process-wide truth
/// and not only Rust's share of it. Returns `false` if aws-lc's memory functions were already
/// set.
///
/// Call it first thing in `main`, before anything uses aws-lc. Blocks keep aws-lc's own
/// layout (the requested size in the 8 bytes before the pointer, on a `malloc`ed block), so
/// a block aws-lc allocated before this call is still freed correctly: only the counters are
/// then off by its size. Freed blocks are zeroed first, as aws-lc's own `OPENSSL_free` does.
#[cfg(feature = "aws-lc")]
pub fn count_crypto_allocations() -> bool {
    // SAFETY: the three functions have the signatures aws-lc expects and implement malloc,
    // realloc and free on one layout (see `crypto_mem`); setting them is a plain store.
    unsafe {
        aws_lc_sys::CRYPTO_set_mem_functions(
            Some(crypto_mem::malloc),
            Some(crypto_mem::realloc),
            Some(crypto_mem::free),
        ) == 1
    }
}

/// aws-lc memory functions on top of [`CountingAlloc`] (see [`count_crypto_allocations`]).
#[cfg(feature = "aws-lc")]
mod crypto_mem {
    use std::alloc::{GlobalAlloc, Layout};
    use std::ffi::{c_char, c_int, c_void};

    use super::CountingAlloc;

    /// Bytes before each block holding its requested size (aws-lc's `OPENSSL_MALLOC_PREFIX`).
    const PREFIX: usize = 8;

    fn layout(size: usize) -> Option<Layout> {
        Layout::from_size_align(size.checked_add(PREFIX)?, PREFIX).ok()
    }

    pub(super) unsafe extern "C" fn malloc(size: usize, _: *const c_char, _: c_int) -> *mut c_void {
        let Some(l) = layout(size) else {
            return std::ptr::null_mut();
        };
        // SAFETY: `l` has a non-zero size (at least PREFIX).
        let base = unsafe { CountingAlloc.alloc(l) };
        if base.is_null() {
            return std::ptr::null_mut();
        }
        // SAFETY: `base` is valid for `size + PREFIX` bytes and aligned to 8 for the usize.
        unsafe {
            base.cast::<usize>().write(size);
            base.add(PREFIX).cast()
        }
    }

    pub(super) unsafe extern "C" fn free(ptr: *mut c_void, _: *const c_char, _: c_int) {
        if ptr.is_null() {
            return;
        }
        // SAFETY: aws-lc only frees pointers its malloc returned: `PREFIX` bytes into a block
        // whose first word is the requested size, allocated by `System` (directly, or through
        // `CountingAlloc`, which forwards to it) with the alignment `layout` gives.
        unsafe {
            let base = ptr.cast::<u8>().sub(PREFIX);
            let size = base.cast::<usize>().read();
            let Some(l) = layout(size) else { return };
            std::ptr::write_bytes(base, 0, l.size());
            std::hint::black_box(base);
            CountingAlloc.dealloc(base, l);
        }
    }

    pub(super) unsafe extern "C" fn realloc(
        ptr: *mut c_void,
        size: usize,
        file: *const c_char,
        line: c_int,
    ) -> *mut c_void {
        // SAFETY: as in `malloc` and `free`; the old block's size is in its prefix, and the
        // copy stays within both blocks. Like aws-lc's own realloc, it moves the data and
        // zeroes the old block.
        unsafe {
            let new = malloc(size, file, line);
            if ptr.is_null() || new.is_null() {
                return new;
            }
            let old = ptr.cast::<u8>().sub(PREFIX).cast::<usize>().read();
            std::ptr::copy_nonoverlapping(ptr.cast::<u8>(), new.cast::<u8>(), old.min(size));
            free(ptr, file, line);
            new
        }
    }
}

/// Ask the C allocator to give freed memory back to the system: on glibc, `malloc_trim(0)`,
/// which returns the free pages inside every arena as well as the top of the heap. Freed
/// memory otherwise stays in the process (and in its RSS) after a burst of sessions.
///
/// Returns whether any memory was released. Elsewhere (musl, other systems) it does nothing
/// and returns `false`. It walks the allocator's free lists under its locks, so call it from a
/// housekeeping task after something large was freed, not on a packet path.
pub fn release_free_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `malloc_trim` takes no pointers and only rearranges glibc's own free lists;
        // it is safe to call from any thread at any time.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Serve allocations of `bytes` or more from mappings of their own, unmapped when freed
/// (glibc's `M_MMAP_THRESHOLD`). Setting it also stops glibc from raising the threshold each
/// time a mapped block is freed: after a burst of large frees that sliding threshold moves
/// later large blocks (handshake state, grown tables) into the arenas, where a few live
/// objects keep their pages resident, and RSS creeps up round after round of the same load.
///
/// Returns whether the allocator took the setting; elsewhere it does nothing and returns
/// `false`. Call it once at start-up, before the threads that allocate most are spawned.
pub fn set_mmap_threshold(bytes: usize) -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let Ok(bytes) = libc::c_int::try_from(bytes) else {
            return false;
        };
        // SAFETY: `mallopt` takes two integers and only changes glibc's own tuning; glibc
        // documents it as safe to call at any time.
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, bytes) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = bytes;
        false
    }
}

/// Which kind of pages back a region of pool buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backing {
    /// Reserved huge pages (`MAP_HUGETLB`).
    HugeTlb,
    /// Normal pages advised for transparent huge pages (`MADV_HUGEPAGE`).
    Transparent,
    /// Normal pages.
    Normal,
}

pub(crate) use region::{Chunk, map_chunks};

/// Anonymous memory regions (Linux: `mmap`, `MAP_POPULATE`, `MAP_HUGETLB`, `madvise`).
#[cfg(target_os = "linux")]
mod region {
    use std::ptr::NonNull;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    use super::{Backing, MAPPED};

    /// Cache-line size that region chunks are aligned to, so two buffers never share a line.
    const CHUNK_ALIGN: usize = 64;

    /// One anonymous private mapping, shared by the [`Chunk`]s carved from it and unmapped when
    /// the last of them drops.
    struct Region {
        ptr: NonNull<u8>,
        /// Bytes mapped (a multiple of `page`).
        mapped: usize,
        /// Page size of the mapping (the huge page size for `MAP_HUGETLB`).
        page: usize,
    }

    // SAFETY: a `Region` is only an owner token for the mapping: it never reads or writes the
    // memory itself. Access goes through `Chunk`s, each of which owns a disjoint byte range.
    unsafe impl Send for Region {}
    // SAFETY: as above; `&Region` exposes no access to the memory.
    unsafe impl Sync for Region {}

    impl Drop for Region {
        fn drop(&mut self) {
            // SAFETY: unmapping exactly the range `map_chunks` mapped. Every `Chunk` holds an
            // `Arc<Region>`, so no chunk (and no slice borrowed from one) outlives this call.
            let _ = unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.mapped) };
            MAPPED.fetch_sub(self.mapped, Relaxed);
        }
    }

    /// One pool buffer: `len` bytes at `offset` in a region, owning `offset..offset + stride`
    /// exclusively (no other chunk overlaps that range).
    pub(crate) struct Chunk {
        region: Arc<Region>,
        offset: usize,
        len: usize,
        stride: usize,
    }

    impl Chunk {
        /// The buffer's bytes.
        #[inline]
        pub(crate) fn as_slice(&self) -> &[u8] {
            // SAFETY: `offset + len <= offset + stride <= region.mapped`, so the range lies in the
            // mapping, which stays mapped while `self.region` lives. Anonymous mappings are
            // zero-filled, hence initialised. The range belongs to this chunk alone and `Chunk`
            // is not `Clone`, so the only mutable access would need `&mut self`, which `&self`
            // excludes.
            unsafe {
                std::slice::from_raw_parts(self.region.ptr.as_ptr().add(self.offset), self.len)
            }
        }

        /// The buffer's bytes, mutably.
        #[inline]
        pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
            // SAFETY: as in `as_slice`; `&mut self` makes this the only access to the range.
            unsafe {
                std::slice::from_raw_parts_mut(self.region.ptr.as_ptr().add(self.offset), self.len)
            }
        }
    }

    impl Drop for Chunk {
        fn drop(&mut self) {
            // A chunk dropped while its region lives on (the pool released it past `max_free`):
            // give the whole pages inside its exclusive range back to the kernel. When this is the
            // last chunk, the region's munmap does that instead.
            if Arc::strong_count(&self.region) <= 1 {
                return;
            }
            let page = self.region.page;
            let start = self.offset.next_multiple_of(page);
            let end = (self.offset + self.stride) / page * page;
            if end > start {
                // SAFETY: `start..end` lies inside this chunk's exclusive range, inside the live
                // mapping; no other chunk's memory is affected. MADV_DONTNEED only makes the pages
                // read back as zero, and nothing reads them again: this chunk is going away.
                // Failure (e.g. EINVAL for unaligned hugetlb ranges) just keeps the pages.
                let _ = unsafe {
                    libc::madvise(
                        self.region.ptr.as_ptr().add(start).cast(),
                        end - start,
                        libc::MADV_DONTNEED,
                    )
                };
            }
        }
    }

    /// The system page size.
    fn page_size() -> usize {
        static PAGE: AtomicUsize = AtomicUsize::new(0);
        let cached = PAGE.load(Relaxed);
        if cached != 0 {
            return cached;
        }
        // SAFETY: sysconf reads a constant of the running system; no memory is involved.
        let raw = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let page = usize::try_from(raw)
            .ok()
            .filter(|p| p.is_power_of_two())
            .unwrap_or(4096);
        PAGE.store(page, Relaxed);
        page
    }

    /// `mmap` an anonymous private read-write region of `len` bytes; `None` on failure.
    fn mmap_anon(len: usize, extra_flags: libc::c_int) -> Option<NonNull<u8>> {
        // SAFETY: an anonymous mapping at a kernel-chosen address (null hint, no MAP_FIXED)
        // cannot alias any existing memory; the remaining arguments are plain integers.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra_flags,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        NonNull::new(ptr.cast::<u8>())
    }

    /// Make the kernel back every page of `region` now: `MADV_POPULATE_WRITE` (Linux 5.14+), else
    /// a write to each page.
    fn populate(region: &Region) {
        // SAFETY: the range is exactly the live mapping; the advice only faults pages in.
        let rc = unsafe {
            libc::madvise(
                region.ptr.as_ptr().cast(),
                region.mapped,
                libc::MADV_POPULATE_WRITE,
            )
        };
        if rc == 0 {
            return;
        }
        // SAFETY: the mapping is `mapped` bytes, zero-initialised, and not yet shared with any
        // chunk (the region is still being built), so this is the only reference to it.
        let bytes = unsafe { std::slice::from_raw_parts_mut(region.ptr.as_ptr(), region.mapped) };
        // A write (not a read, which would map the shared zero page) per page; `black_box` keeps
        // the compiler from dropping stores of the value already there.
        let zero = std::hint::black_box(0u8);
        for i in (0..bytes.len()).step_by(region.page) {
            bytes[i] = zero;
        }
        std::hint::black_box(bytes);
    }

    /// Carve `count` buffers of `len` bytes (each on its own 64-byte-aligned stride) out of one
    /// anonymous mapping.
    ///
    /// `huge` tries reserved huge pages (`MAP_HUGETLB`) first, then normal pages advised with
    /// `MADV_HUGEPAGE`. `prefault` has the kernel fault every page in now (`MAP_POPULATE`, or
    /// `MADV_POPULATE_WRITE`/page writes after the huge-page advice, so the pages that get faulted
    /// in are the huge ones). Returns `None` when nothing could be mapped; the caller falls back to
    /// the heap.
    pub(crate) fn map_chunks(
        len: usize,
        count: usize,
        prefault: bool,
        huge: bool,
    ) -> Option<(Vec<Chunk>, Backing)> {
        if len == 0 || count == 0 {
            return None;
        }
        let stride = len.checked_next_multiple_of(CHUNK_ALIGN)?;
        let bytes = stride.checked_mul(count)?;
        let populate_flag = if prefault { libc::MAP_POPULATE } else { 0 };
        let mut region = None;
        if huge {
            let mapped = bytes.checked_next_multiple_of(crate::config::HUGE_PAGE_BYTES)?;
            if let Some(ptr) = mmap_anon(mapped, libc::MAP_HUGETLB | populate_flag) {
                region = Some((
                    Region {
                        ptr,
                        mapped,
                        page: crate::config::HUGE_PAGE_BYTES,
                    },
                    Backing::HugeTlb,
                ));
            } else if let Some(ptr) = mmap_anon(mapped, 0) {
                // SAFETY: the range is exactly the mapping just created; the advice only changes
                // the kernel's paging policy for it. Failure (THP disabled) is harmless.
                let _ = unsafe { libc::madvise(ptr.as_ptr().cast(), mapped, libc::MADV_HUGEPAGE) };
                let r = Region {
                    ptr,
                    mapped,
                    page: page_size(),
                };
                if prefault {
                    populate(&r);
                }
                region = Some((r, Backing::Transparent));
            }
        }
        let (region, backing) = match region {
            Some(r) => r,
            None => {
                let page = page_size();
                let mapped = bytes.checked_next_multiple_of(page)?;
                let ptr = mmap_anon(mapped, populate_flag)?;
                (Region { ptr, mapped, page }, Backing::Normal)
            }
        };
        MAPPED.fetch_add(region.mapped, Relaxed);
        let region = Arc::new(region);
        let chunks = (0..count)
            .map(|i| Chunk {
                region: Arc::clone(&region),
                offset: i * stride,
                len,
                stride,
            })
            .collect();
        Some((chunks, backing))
    }
}

/// Elsewhere there are no regions: `map_chunks` returns `None` and pools use the heap.
#[cfg(not(target_os = "linux"))]
mod region {
    use super::Backing;

    /// Placeholder: no region support on this platform.
    pub(crate) enum Chunk {}

    impl Chunk {
        pub(crate) fn as_slice(&self) -> &[u8] {
            match *self {}
        }
        pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
            match *self {}
        }
    }

    pub(crate) fn map_chunks(
        _len: usize,
        _count: usize,
        _prefault: bool,
        _huge: bool,
    ) -> Option<(Vec<Chunk>, Backing)> {
        None
    }
}
