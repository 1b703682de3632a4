//! The packet buffer pool: spead2 `memory_pool` semantics, per-thread caches, statistics.
//!
//! Files: `inner.rs` (storage, free lists, per-thread caches, refill), `buffer_pool.rs`
//! (the handle users hold), `buf.rs` (owned and shared buffers), `stats.rs`; this file only
//! declares and re-exports them.

mod buf;
mod buffer_pool;
mod inner;
mod stats;

pub use buf::{Buf, SharedBuf};
pub use buffer_pool::BufferPool;
pub use inner::{BATCH, PoolBacking, THREAD_CACHE, WARN_INTERVAL, WarnHook};
pub use stats::PoolStats;
