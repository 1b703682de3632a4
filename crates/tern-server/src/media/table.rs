//! A worker's viewer session table: slots addressed by [`ViewerId`] (index + generation, so
//! a stale id never reaches a reused slot), each holding one lean viewer and its bookkeeping.

use std::net::SocketAddr;

use tern_rtc::viewer::Viewer;
use tern_rtc::viewer::adapt::LayerChooser;

use crate::media::link::ViewerId;

/// One slot of the table.
pub(super) struct Slot {
    /// Bumped each time the slot is freed.
    pub(super) generation: u32,
    /// The viewer it holds, if any.
    pub(super) entry: Option<Entry>,
}

/// A viewer and what its worker keeps about it.
pub(super) struct Entry {
    pub(super) viewer: Viewer,
    pub(super) stream: usize,
    /// Position in the stream's viewer list (for O(1) removal).
    pub(super) pos: usize,
    pub(super) handshaking: bool,
    /// Heap bytes this viewer holds (see [`SessionMemory::heap_bytes`]).
    pub(super) heap: usize,
    /// What is currently added to the pools for it: (in "handshakes", heap bytes).
    pub(super) booked: (bool, usize),
    /// The highest total of its receiver reports' cumulative-lost fields seen.
    pub(super) reported_lost: i64,
    /// While it catches up from the keyframe cache: the source sequence number of the next
    /// video packet to send it from the ring (live video waits until the cursor passes the
    /// head). `None` once it is live.
    pub(super) catchup: Option<u64>,
    /// Layer choice and probing of a viewer of a simulcast stream (see `worker/layers.rs`).
    pub(super) layers: LayerChooser,
}

/// Bytes of one slot of the session table.
pub(super) const SLOT_BYTES: usize = std::mem::size_of::<Slot>();

/// The viewer `id` if `from` is its confirmed address (DTLS and RTCP come only from it).
pub(super) fn confirmed(slots: &mut [Slot], id: ViewerId, from: SocketAddr) -> Option<&mut Entry> {
    let e = entry_in(slots, id)?;
    (e.viewer.remote_addr() == Some(from)).then_some(e)
}

/// The viewer in `id`'s slot, if the slot still holds it.
pub(super) fn entry_in(slots: &mut [Slot], id: ViewerId) -> Option<&mut Entry> {
    let slot = slots.get_mut(id.index())?;
    if slot.generation != id.generation() {
        return None;
    }
    slot.entry.as_mut()
}
