//! The packet buffer pool: spead2 `memory_pool` semantics, per-thread caches, statistics.
//!
//! Files: `storage.rs` (the memory behind buffers: heap or mapped chunks), `inner.rs` (free
//! lists, per-thread caches, accounting, warnings), `buffer_pool.rs` (the handle users hold:
//! allocation, refill), `buf.rs` (owned and shared buffers), `stats.rs`; this file only
//! declares and re-exports them.

mod buf;
mod buffer_pool;
mod inner;
mod stats;
mod storage;

pub use buf::{Buf, SharedBuf};
pub use buffer_pool::BufferPool;
pub use inner::{BATCH, THREAD_CACHE, WARN_INTERVAL, WarnHook};
pub use stats::PoolStats;
pub use storage::PoolBacking;
