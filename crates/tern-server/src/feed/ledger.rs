//! The heap a frame publisher's thread holds, measured for its memory pool (`rtmp_ingest`,
//! `srt_ingest`, `rtsp_ingest`): the [`Ledger`] measures it with the counting allocator,
//! the [`Booking`] keeps it in the pool.

use tern_pool::{CountingAlloc, PoolCounter};

/// Heap a `[u8]` of `len` bytes takes in an `Arc` (two counters in front, padded to 8):
/// the packets handed to the engine leave this thread's ledger.
pub fn arc_bytes(len: usize) -> i64 {
    ((2 * std::mem::size_of::<usize>() + len).next_multiple_of(8)) as i64
}

/// What a frame publisher's thread (RTMP's, an SRT publisher's, an RTSP session's) holds:
/// the thread's net allocations since the connection began, less what it handed to other
/// threads (packets, the publisher slot). The engine frees the packets on its own thread,
/// so without the `skip`s they would count here.
pub struct Ledger {
    last: i64,
    held: i64,
}

impl Ledger {
    /// Starts measuring on this thread, from now.
    pub fn start() -> Self {
        Ledger {
            last: CountingAlloc::thread_net_bytes(),
            held: 0,
        }
    }

    /// `bytes` allocated here since the last mark belong to someone else.
    pub fn skip(&mut self, bytes: i64) {
        self.held -= bytes;
    }

    /// The bytes held now. Allocations between a mark and the next call go uncounted only
    /// if skipped; the channel to the engine is left outside marks on purpose (its blocks
    /// are allocated by senders and freed by the receiver).
    pub fn mark(&mut self) -> usize {
        let now = CountingAlloc::thread_net_bytes();
        self.held += now - self.last;
        self.last = now;
        usize::try_from(self.held).unwrap_or(0)
    }

    /// Restarts the measurement here (after a section that is not ours).
    pub fn resume(&mut self) {
        self.last = CountingAlloc::thread_net_bytes();
    }
}

/// One connection's line in an ingest pool: an item while it lives, with the bytes its
/// [`Ledger`] last measured; both given back when it is dropped.
pub struct Booking {
    pool: PoolCounter,
    bytes: usize,
}

impl Booking {
    /// Books one item, of no bytes yet, in `pool`.
    pub fn open(pool: PoolCounter) -> Self {
        pool.add(1, 0);
        Booking { pool, bytes: 0 }
    }

    /// The item holds `bytes` now.
    pub fn set(&mut self, bytes: usize) {
        self.pool.sub(0, self.bytes);
        self.pool.add(0, bytes);
        self.bytes = bytes;
    }
}

impl Drop for Booking {
    fn drop(&mut self) {
        self.pool.sub(1, self.bytes);
    }
}
