//! The memory behind buffers: a heap allocation or a chunk of an anonymous mapping (normal,
//! transparent huge or reserved huge pages), made in batches and prefaulted on request.

use std::hint::black_box;

use crate::config::PoolConfig;
use crate::sys::{Backing, Chunk, map_chunks};

/// Page size assumed when prefaulting heap buffers (the smallest page on tern's targets).
const PAGE: usize = 4096;
/// Smallest batch (in bytes) worth its own anonymous mapping; smaller prefaulted batches are
/// heap buffers touched page by page. A mapping costs a syscall and rounds up to whole pages.
const REGION_MIN_BYTES: usize = 64 * 1024;

/// What the buffers allocated by [`BufferPool::new`](super::BufferPool::new) live in.
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
pub(super) enum Storage {
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
    pub(super) fn as_slice(&self) -> &[u8] {
        match self {
            Storage::Heap(b) => b,
            Storage::Chunk(c) => c.as_slice(),
        }
    }

    #[inline]
    pub(super) fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            Storage::Heap(b) => b,
            Storage::Chunk(c) => c.as_mut_slice(),
        }
    }

    pub(super) fn is_heap(&self) -> bool {
        matches!(self, Storage::Heap(_))
    }

    /// One heap buffer of `len` zeroed bytes, every page touched if `prefault`.
    pub(super) fn heap(len: usize, prefault: bool) -> Storage {
        let mut b = vec![0u8; len].into_boxed_slice();
        if prefault {
            touch_pages(&mut b);
        }
        Storage::Heap(b)
    }

    /// `n` pooled buffers: carved from one anonymous mapping when `prefault` (and the batch is
    /// at least [`REGION_MIN_BYTES`]) or `huge_pages`, else (or if mapping fails) one heap
    /// allocation each.
    pub(super) fn batch(cfg: &PoolConfig, n: usize) -> (Vec<Storage>, PoolBacking) {
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
