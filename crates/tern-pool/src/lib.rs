//! Buffer pools, session slabs and memory accounting for tern.
//!
//! Every allocation class of the server is named and accounted, so `GET /v1/memory` and
//! `tern mem` can print one line per class (used, allocated, utilization, peak), like pjsua's
//! `dd`, next to the process-wide truth from the counting allocator:
//!
//! - [`BufferPool`]: packet buffers with spead2 `memory_pool` semantics (a size range,
//!   `initial` buffers prefaulted at start, LIFO reuse, `max_free`, a `low_water` refill off
//!   the hot path, a rate-limited warning when dry) plus the statistics spead2 lacks.
//!   [`Buf::freeze`] turns a filled buffer into a [`SharedBuf`] that every viewer of a stream
//!   shares; the storage returns to the pool when the last clone drops.
//! - [`Slab`]: a typed slab with generation-checked [`SlabId`]s for sessions and handshakes.
//! - [`PoolCounter`]: a named counter for any other class (rings, snapshots).
//! - [`MemoryRegistry`]: where pools, slabs and counters register; [`format_dd`] prints it.
//! - [`CountingAlloc`]: a global allocator that counts live and peak bytes and calls; with
//!   the `aws-lc` feature, `count_crypto_allocations` routes the crypto library's C heap
//!   through it too.
//!
//! # Invariants
//!
//! - Nothing here reads the clock: the pool's warning rate limit runs on the time given to
//!   [`BufferPool::maintain`] (the refill thread's tick).
//! - `alloc` never fails, never blocks on the refill thread and takes no lock on a hit; a dry
//!   pool or an out-of-range length is served from the heap and counted.
//! - Counters are exact once quiescent: `hits + misses` = `alloc` calls, `in_use` = buffers
//!   not yet dropped, `free <= max_free`.
//! - All `unsafe` code lives in one module (the allocator and the `mmap`/`madvise` calls),
//!   each block with its `SAFETY:` argument.

mod config;
mod pool;
mod registry;
mod shard;
mod shrink;
mod slab;
mod sys;

pub use config::{HUGE_PAGE_BYTES, PoolConfig, PoolError};
pub use pool::{
    BATCH, Buf, BufferPool, PoolBacking, PoolStats, SharedBuf, THREAD_CACHE, WARN_INTERVAL,
    WarnHook,
};
pub use registry::{MemoryRegistry, PoolCounter, PoolReport, format_dd};
pub use shrink::{shrink_map, shrink_vec};
pub use slab::{Slab, SlabId};
#[cfg(feature = "aws-lc")]
pub use sys::count_crypto_allocations;
pub use sys::{AllocStats, CountingAlloc, release_free_memory, set_mmap_threshold};
