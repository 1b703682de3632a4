//! The stream: one ring of RTP payloads per media kind, shared by every viewer.
//!
//! A packet's payload is stored once, in a pooled [`SharedBuf`], whatever the number of
//! viewers. Viewers hold no packet copies and no per-packet history: a NACK is answered by
//! looking the source sequence number up here, and a new viewer starts from the latest
//! keyframe still in the video ring (the keyframe cache).

use tern_pool::SharedBuf;

use crate::clip::MediaKind;

/// One packet as the stream stores it: payload plus the few fields a viewer needs to write
/// its own RTP header.
#[derive(Clone)]
pub struct RingPacket {
    /// Audio or video.
    pub kind: MediaKind,
    /// The source's extended sequence number (never wraps).
    pub seq: u64,
    /// The source's RTP timestamp.
    pub rtp_ts: u32,
    /// RTP marker bit (last packet of a video frame).
    pub marker: bool,
    /// First packet of a keyframe access unit.
    pub keyframe: bool,
    /// Capture time as a 64-bit NTP timestamp (for abs-capture-time and RTCP SR).
    pub capture_ntp: u64,
    /// The RTP payload (no header), shared by all viewers.
    pub payload: SharedBuf,
}

/// A fixed-capacity ring of packets addressed by source sequence number.
pub struct Ring {
    slots: Box<[Option<RingPacket>]>,
    /// Sequence number of the newest packet, if any.
    head: Option<u64>,
    /// Sequence number of the first packet of the newest keyframe still in the ring.
    last_keyframe: Option<u64>,
}

impl Ring {
    /// A ring holding the last `capacity` packets (at least 1).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Ring {
            slots: (0..capacity).map(|_| None).collect(),
            head: None,
            last_keyframe: None,
        }
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Stores a packet, dropping the oldest one in its slot. Packets must arrive with
    /// increasing sequence numbers; an older or duplicate packet is ignored and `false` is
    /// returned.
    pub fn push(&mut self, pkt: RingPacket) -> bool {
        if self.head.is_some_and(|h| pkt.seq <= h) {
            return false;
        }
        let seq = pkt.seq;
        if pkt.keyframe {
            self.last_keyframe = Some(seq);
        }
        let idx = self.index(seq);
        self.slots[idx] = Some(pkt);
        self.head = Some(seq);
        if let Some(k) = self.last_keyframe
            && !self.contains(k)
        {
            self.last_keyframe = None;
        }
        true
    }

    fn index(&self, seq: u64) -> usize {
        (seq % self.slots.len() as u64) as usize
    }

    fn contains(&self, seq: u64) -> bool {
        self.get(seq).is_some()
    }

    /// The packet with source sequence number `seq`, if it is still in the ring.
    pub fn get(&self, seq: u64) -> Option<&RingPacket> {
        self.slots[self.index(seq)]
            .as_ref()
            .filter(|p| p.seq == seq)
    }

    /// Sequence number of the newest packet.
    pub fn head(&self) -> Option<u64> {
        self.head
    }

    /// Sequence number of the newest keyframe start still held.
    pub fn last_keyframe(&self) -> Option<u64> {
        self.last_keyframe
    }

    /// Packets from `from` to the head inclusive that are still held, in order.
    pub fn range_from(&self, from: u64) -> impl Iterator<Item = &RingPacket> {
        let head = self.head.unwrap_or(0);
        let end = if self.head.is_some() { head + 1 } else { 0 };
        (from..end).filter_map(move |s| self.get(s))
    }

    /// Packets currently held (for accounting; O(capacity)).
    pub fn len(&self) -> usize {
        self.slots.iter().flatten().count()
    }

    /// Whether the ring holds no packet.
    pub fn is_empty(&self) -> bool {
        self.head.is_none()
    }

    /// Heap bytes of the ring itself: its slot array plus the shared-buffer header of each
    /// packet held (the payloads are counted by the packet buffer pool). Returns
    /// (used, allocated): used counts occupied slots only.
    pub fn memory(&self) -> (usize, usize) {
        let slot = std::mem::size_of::<Option<RingPacket>>();
        // `SharedBuf` is an `Arc<Buf>`: two counters and the `Buf` per packet.
        let header = 2 * std::mem::size_of::<usize>() + std::mem::size_of::<tern_pool::Buf>();
        let n = self.len();
        (n * (slot + header), self.capacity() * slot + n * header)
    }

    /// Payload bytes currently held (for accounting).
    pub fn payload_bytes(&self) -> usize {
        self.slots.iter().flatten().map(|p| p.payload.len()).sum()
    }

    /// Drops every packet.
    pub fn clear(&mut self) {
        for s in self.slots.iter_mut() {
            *s = None;
        }
        self.head = None;
        self.last_keyframe = None;
    }
}

/// A live stream's media: one ring per kind.
pub struct Stream {
    /// Video packets.
    pub video: Ring,
    /// Audio packets.
    pub audio: Ring,
}

impl Stream {
    /// A stream with rings of the given lengths (packets).
    pub fn new(video_ring: usize, audio_ring: usize) -> Self {
        Stream {
            video: Ring::new(video_ring),
            audio: Ring::new(audio_ring),
        }
    }

    /// The ring of a media kind.
    pub fn ring(&self, kind: MediaKind) -> &Ring {
        match kind {
            MediaKind::Video => &self.video,
            MediaKind::Audio => &self.audio,
        }
    }

    /// Stores a packet in the ring of its kind.
    pub fn push(&mut self, pkt: RingPacket) -> bool {
        match pkt.kind {
            MediaKind::Video => self.video.push(pkt),
            MediaKind::Audio => self.audio.push(pkt),
        }
    }
}
