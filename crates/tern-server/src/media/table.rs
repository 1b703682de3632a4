//! A worker's viewer session table: slots addressed by [`ViewerId`] (index + generation, so
//! a stale id never reaches a reused slot), each holding one lean viewer and its
//! bookkeeping; the list of free slots; and what is kept only for viewers still
//! handshaking (their count, and their per-address permits), so that connected viewers cost
//! nothing there.
//!
//! The table owns every slot: the worker reaches a viewer only through an id, and a slot is
//! made, reused, freed and given back (trailing empty slots, after a wave of departures)
//! only here.

use std::collections::HashMap;
use std::net::SocketAddr;

use tern_pool::{shrink_map, shrink_vec};
use tern_rtc::viewer::Viewer;
use tern_rtc::viewer::adapt::LayerChooser;

use crate::limits::AddrPermit;
use crate::media::link::{SessionMemory, ViewerId};

/// Most slots of one table: a [`ViewerId`] holds 24 bits of slot index.
pub(super) const MAX_SLOTS: usize = 1 << 24;

/// One slot of the table.
struct Slot {
    /// Bumped each time the slot is freed.
    generation: u32,
    /// The viewer it holds, if any.
    entry: Option<Entry>,
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

/// A worker's viewers (see the module).
pub(super) struct ViewerTable {
    /// The worker's index, in every id it mints.
    worker: usize,
    slots: Vec<Slot>,
    /// Indices of empty slots below the last occupied one.
    free: Vec<u32>,
    /// Generation given to new slots: above every generation a removed slot had, so an old
    /// [`ViewerId`] never names a viewer in a slot that was freed and made again.
    next_generation: u32,
    /// Per-address permits of viewers still handshaking (dropped when they connect or go):
    /// only pending viewers have an entry.
    pending: HashMap<ViewerId, AddrPermit>,
    /// Viewers here still handshaking.
    handshaking: usize,
}

impl ViewerTable {
    /// An empty table of worker `worker`.
    pub(super) fn new(worker: usize) -> Self {
        ViewerTable {
            worker,
            slots: Vec::new(),
            free: Vec::new(),
            next_generation: 0,
            pending: HashMap::new(),
            handshaking: 0,
        }
    }

    /// Whether no viewer can be added (every one of [`MAX_SLOTS`] is taken).
    pub(super) fn is_full(&self) -> bool {
        self.free.is_empty() && self.slots.len() >= MAX_SLOTS
    }

    /// Takes a viewer, with the permit its address holds while it handshakes: its id, or
    /// `None` when the table [`is_full`](Self::is_full) (the entry is dropped).
    pub(super) fn insert(&mut self, entry: Entry, permit: Option<AddrPermit>) -> Option<ViewerId> {
        if self.is_full() {
            return None;
        }
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    generation: self.next_generation,
                    entry: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        let id = ViewerId::new(self.worker, index, slot.generation);
        if entry.handshaking {
            self.handshaking += 1;
            if let Some(p) = permit {
                self.pending.insert(id, p);
            }
        }
        slot.entry = Some(entry);
        Some(id)
    }

    /// Takes viewer `id` out: its slot is free (and will not answer to `id` again), its
    /// permit dropped.
    pub(super) fn remove(&mut self, id: ViewerId) -> Option<Entry> {
        let slot = self.slots.get_mut(id.index())?;
        if slot.generation != id.generation() {
            return None;
        }
        let e = slot.entry.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(id.index() as u32);
        self.pending.remove(&id);
        if e.handshaking {
            self.handshaking -= 1;
        }
        Some(e)
    }

    /// The viewer `id`, if its slot still holds it.
    pub(super) fn get(&mut self, id: ViewerId) -> Option<&mut Entry> {
        let slot = self.slots.get_mut(id.index())?;
        if slot.generation != id.generation() {
            return None;
        }
        slot.entry.as_mut()
    }

    /// The viewer `id` if `from` is its confirmed address (DTLS and RTCP come only from it).
    pub(super) fn confirmed(&mut self, id: ViewerId, from: SocketAddr) -> Option<&mut Entry> {
        let e = self.get(id)?;
        (e.viewer.remote_addr() == Some(from)).then_some(e)
    }

    /// Viewer `id` finished its handshake: it is no longer counted as handshaking and its
    /// permit is dropped. False if it was not handshaking (or is gone).
    pub(super) fn connected(&mut self, id: ViewerId) -> bool {
        let Some(e) = self.get(id).filter(|e| e.handshaking) else {
            return false;
        };
        e.handshaking = false;
        self.handshaking -= 1;
        self.pending.remove(&id);
        true
    }

    /// Viewers here still handshaking.
    pub(super) fn handshaking(&self) -> usize {
        self.handshaking
    }

    /// Every viewer's id, in slot order.
    pub(super) fn ids(&self) -> impl Iterator<Item = ViewerId> + '_ {
        let w = self.worker;
        self.slots.iter().enumerate().filter_map(move |(i, s)| {
            s.entry
                .as_ref()
                .map(|_| ViewerId::new(w, i as u32, s.generation))
        })
    }

    /// What each viewer holds, for `GET /v1/memory`.
    pub(super) fn sessions(&self) -> Vec<SessionMemory> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let e = s.entry.as_ref()?;
                Some(SessionMemory {
                    id: ViewerId::new(self.worker, i as u32, s.generation),
                    state: format!("{:?}", e.viewer.state()),
                    handshake: e.viewer.has_handshake(),
                    inline_bytes: SLOT_BYTES,
                    heap_bytes: e.heap,
                })
            })
            .collect()
    }

    /// Gives back what a wave of departed viewers left behind: trailing empty slots (their
    /// generations live on in the next new slot's) and room the lists no longer need.
    pub(super) fn trim(&mut self) {
        while self.slots.last().is_some_and(|s| s.entry.is_none()) {
            if let Some(s) = self.slots.pop() {
                self.next_generation = self.next_generation.max(s.generation.wrapping_add(1));
            }
        }
        let len = self.slots.len();
        self.free.retain(|&i| (i as usize) < len);
        shrink_map(&mut self.pending);
        shrink_vec(&mut self.slots);
        shrink_vec(&mut self.free);
    }

    /// Bytes of the slots allocated (occupied or not).
    pub(super) fn slot_bytes(&self) -> usize {
        self.slots.capacity() * SLOT_BYTES
    }

    /// Bytes of the free list: used and allocated.
    pub(super) fn free_bytes(&self) -> (usize, usize) {
        let index = std::mem::size_of::<u32>();
        (self.free.len() * index, self.free.capacity() * index)
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};
    use std::time::Instant;

    use tern_rtc::viewer::{ViewerParams, ViewerTimeouts};

    use super::*;
    use crate::limits::PerAddress;

    /// A viewer of stream 0 that has not started its handshake.
    fn entry(handshaking: bool) -> Entry {
        let params = ViewerParams {
            local_ufrag: *b"abcdefgh",
            local_pwd: [b'p'; 24],
            remote_ufrag: "peer".into(),
            remote_fingerprint: [0; 32],
            video: None,
            audio: None,
            pin: None,
            timeouts: ViewerTimeouts::default(),
        };
        Entry {
            viewer: Viewer::new(params, Instant::now()),
            stream: 0,
            pos: 0,
            handshaking,
            heap: 0,
            booked: (false, 0),
            reported_lost: 0,
            catchup: None,
            layers: LayerChooser::default(),
        }
    }

    #[test]
    fn what_a_slot_keeps_besides_the_viewer_does_not_grow() {
        // Stream, list position, heap and booking, reported loss, catch-up cursor, the
        // handshaking flag and the layer chooser (6 bytes, as the pass counters it replaced
        // were): 72 bytes at issue 34, so a slot is the viewer plus 80 with its generation.
        let bookkeeping = std::mem::size_of::<Entry>() - std::mem::size_of::<Viewer>();
        assert!(bookkeeping <= 72, "{bookkeeping}");
        assert!(
            SLOT_BYTES <= std::mem::size_of::<Viewer>() + 80,
            "{SLOT_BYTES}"
        );
    }

    #[test]
    fn an_id_reaches_its_viewer_until_it_is_removed_and_never_the_slots_next_viewer() {
        let mut t = ViewerTable::new(3);
        let a = t.insert(entry(true), None).expect("room");
        let b = t.insert(entry(true), None).expect("room");
        assert_eq!((a.worker(), a.index(), b.index()), (3, 0, 1));
        assert!(t.get(a).is_some());
        assert!(t.remove(a).is_some());
        assert!(t.get(a).is_none() && t.remove(a).is_none());
        // The free slot is reused, under a new generation.
        let c = t.insert(entry(true), None).expect("room");
        assert_eq!(c.index(), a.index());
        assert_ne!(c, a);
        assert!(t.get(a).is_none() && t.get(c).is_some());
        assert_eq!(t.ids().collect::<Vec<_>>(), vec![c, b]);
        assert_eq!(t.sessions().len(), 2);
        // An id of a slot past the end, or of another generation, reaches nothing.
        assert!(t.get(ViewerId::new(3, 9, 0)).is_none());
    }

    #[test]
    fn trailing_empty_slots_are_given_back_and_their_generations_never_come_back() {
        let mut t = ViewerTable::new(0);
        let ids: Vec<ViewerId> = (0..64)
            .map(|_| t.insert(entry(false), None).expect("room"))
            .collect();
        let full = t.slot_bytes();
        for &id in &ids[1..] {
            t.remove(id);
        }
        t.trim();
        assert!(t.slot_bytes() < full, "{} of {full}", t.slot_bytes());
        assert_eq!(t.free_bytes().0, 0, "no free slot past the end");
        // A slot made again after it was given back answers none of its old ids.
        let again = t.insert(entry(false), None).expect("room");
        assert_eq!(again.index(), 1);
        assert_ne!(again, ids[1]);
        assert!(t.get(ids[1]).is_none());
        // Everything gone: nothing kept.
        t.remove(ids[0]);
        t.remove(again);
        t.trim();
        assert_eq!((t.slot_bytes(), t.free_bytes()), (0, (0, 0)));
    }

    #[test]
    fn handshaking_viewers_are_counted_and_hold_their_permits_until_they_connect_or_go() {
        let limit = PerAddress::new("viewers", 10, &[]);
        let ip = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
        let permit = || limit.acquire(ip).ok();
        let mut t = ViewerTable::new(0);
        let a = t.insert(entry(true), permit()).expect("room");
        let b = t.insert(entry(true), permit()).expect("room");
        let c = t.insert(entry(false), None).expect("room");
        assert_eq!((t.handshaking(), limit.held(ip)), (2, 2));
        assert!(t.connected(a));
        assert!(!t.connected(a), "once");
        assert!(!t.connected(c), "never handshaking");
        assert_eq!((t.handshaking(), limit.held(ip)), (1, 1));
        assert!(t.get(a).is_some_and(|e| !e.handshaking));
        t.remove(b);
        assert_eq!((t.handshaking(), limit.held(ip)), (0, 0));
        t.remove(a);
        t.remove(c);
        assert_eq!(t.handshaking(), 0);
    }

    #[test]
    fn only_the_confirmed_address_reaches_a_viewer_by_address() {
        let mut t = ViewerTable::new(0);
        let a = t.insert(entry(true), None).expect("room");
        let from = "192.0.2.1:5000".parse().expect("addr");
        // No address is confirmed before ICE.
        assert!(t.confirmed(a, from).is_none());
        assert!(t.get(a).is_some());
    }
}
