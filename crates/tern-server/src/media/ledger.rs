//! Memory booking: the engine's named pools (lines of `GET /v1/memory`) and how each thread
//! books what it holds in them, so every byte a viewer costs is counted where it is spent.

use std::collections::HashMap;

use tern_pool::{CountingAlloc, PoolCounter};
use tern_rtc::viewer::Viewer;

use crate::media::table::{Entry, SLOT_BYTES};

/// The engine's named memory pools (lines of `GET /v1/memory`), besides the packet buffers.
pub(super) struct Pools {
    /// `viewer_sessions`: one item per viewer; used = its slot plus the heap of viewers past
    /// the handshake; allocated adds the empty slots of the table.
    pub(super) sessions: PoolCounter,
    /// `handshakes`: viewers still holding DTLS state, and the heap they hold.
    pub(super) handshakes: PoolCounter,
    /// `stream_rings`: ring slot arrays and the shared-buffer header of each packet held.
    pub(super) rings: PoolCounter,
    /// `send_batch`: the send batch's datagram buffers and `sendmmsg` headers, allocated once.
    pub(super) batch: PoolCounter,
    /// `session_index`: the per-stream viewer lists (the socket workers add their
    /// demultiplexing maps, estimated from their capacities: hash table buckets plus one
    /// control byte each).
    pub(super) index: PoolCounter,
    /// Slot table capacity currently reserved in `sessions`.
    pub(super) slots_reserved: usize,
    /// Last (items, used, allocated) booked for `rings` and `index`.
    pub(super) rings_booked: (usize, usize, usize),
    pub(super) index_booked: (usize, usize, usize),
}

impl Pools {
    /// Registers the pools (each name once per process: the registry hands out the live
    /// counter of a name).
    pub(super) fn new() -> Self {
        Pools {
            sessions: PoolCounter::new("viewer_sessions", SLOT_BYTES),
            handshakes: PoolCounter::new("handshakes", 0),
            rings: PoolCounter::new("stream_rings", 0),
            index: PoolCounter::new("session_index", 0),
            batch: PoolCounter::new("send_batch", 0),
            slots_reserved: 0,
            rings_booked: (0, 0, 0),
            index_booked: (0, 0, 0),
        }
    }

    /// Moves a viewer's booked heap to where it belongs now.
    pub(super) fn book(&self, e: &mut Entry) {
        let now = (e.viewer.has_handshake(), e.heap);
        if now == e.booked {
            return;
        }
        let (hs, bytes) = e.booked;
        if hs {
            self.handshakes.sub(1, bytes);
        } else {
            self.sessions.sub(0, bytes);
            self.sessions.unreserve(bytes);
        }
        let (hs, bytes) = now;
        if hs {
            self.handshakes.add(1, bytes);
        } else {
            self.sessions.add(0, bytes);
            self.sessions.reserve(bytes);
        }
        e.booked = now;
    }

    /// Takes a viewer's booked bytes out of the pools (it is being removed).
    pub(super) fn unbook(&self, e: &mut Entry) {
        e.heap = 0;
        let (hs, bytes) = e.booked;
        if hs {
            self.handshakes.sub(1, bytes);
        } else {
            self.sessions.sub(0, bytes);
            self.sessions.unreserve(bytes);
        }
        e.booked = (false, 0);
        self.sessions.sub(1, SLOT_BYTES);
    }
}

/// Replaces what one thread booked in a shared pool counter with `now` (items, used,
/// allocated).
pub(crate) fn book_set(
    counter: &PoolCounter,
    booked: &mut (usize, usize, usize),
    now: (usize, usize, usize),
) {
    counter.sub(booked.0, booked.1);
    counter.unreserve(booked.2);
    counter.add(now.0, now.1);
    counter.reserve(now.2);
    *booked = now;
}

/// Runs `f` on a viewer and adds the heap it allocated and kept on this thread to the
/// viewer's account.
pub(super) fn ledger<T>(e: &mut Entry, f: impl FnOnce(&mut Viewer) -> T) -> T {
    let before = CountingAlloc::thread_net_bytes();
    let r = f(&mut e.viewer);
    let d = CountingAlloc::thread_net_bytes() - before;
    e.heap = usize::try_from(e.heap as i64 + d).unwrap_or(0);
    r
}

/// Approximate heap of a hash map: its buckets (a power of two above capacity / 7 * 8) with
/// one control byte each.
pub(crate) fn map_bytes<K, V>(m: &HashMap<K, V>) -> usize {
    let cap = m.capacity();
    if cap == 0 {
        return 0;
    }
    let buckets = (cap * 8 / 7).next_power_of_two();
    buckets * (std::mem::size_of::<(K, V)>() + 1)
}

/// Heap bytes of a list of datagrams (the outer vector and each one).
pub(super) fn vec_bytes(v: &Vec<Vec<u8>>) -> usize {
    v.capacity() * std::mem::size_of::<Vec<u8>>() + v.iter().map(Vec::capacity).sum::<usize>()
}
