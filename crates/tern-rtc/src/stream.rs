//! The stream: one ring of RTP payloads per media kind, shared by every viewer.
//!
//! A packet's payload is stored once, in a pooled [`SharedBuf`], whatever the number of
//! viewers. Viewers hold no packet copies and no per-packet history: a NACK is answered by
//! looking the source sequence number up here, and a new viewer starts from the latest
//! keyframe still in the video ring (the keyframe cache).
//!
//! A simulcast stream has one video ring per layer (RFC 8853: up to [`MAX_LAYERS`] encodings
//! of the same picture, each with its own sequence space and keyframes); a viewer reads one
//! layer at a time and moves between them at keyframes.

use std::time::{Duration, Instant};

use tern_pool::SharedBuf;
use tern_proto::codec::MediaKind;

/// One packet as the stream stores it: payload plus the few fields a viewer needs to write
/// its own RTP header.
#[derive(Clone)]
pub struct RingPacket {
    /// Audio or video.
    pub kind: MediaKind,
    /// Simulcast layer of a video packet (its index among the publisher's RIDs); 0 for
    /// audio and for a stream without simulcast.
    pub layer: u8,
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
    /// Slots holding a packet: counted as they fill, since the worker's sweep reads it 50
    /// times a second and a scan of every slot showed in the egress profile.
    held: usize,
}

impl Ring {
    /// A ring holding the last `capacity` packets (at least 1).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Ring {
            slots: (0..capacity).map(|_| None).collect(),
            head: None,
            last_keyframe: None,
            held: 0,
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
        if self.slots[idx].replace(pkt).is_none() {
            self.held += 1;
        }
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

    /// Packets currently held (for accounting).
    pub fn len(&self) -> usize {
        self.held
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
        self.held = 0;
    }
}

/// Most simulcast layers a stream takes (RFC 8853 allows more; encoders send 2 or 3).
pub const MAX_LAYERS: usize = 3;

/// Seconds a layer's rate spans ([`Stream::tick`] counts once a second). Over one second a
/// keyframe reads as the layer's rate, and a layer move asks for one: Chromium's top H264
/// layer (~530 kbit/s) measured over 860 kbit/s in the second of the keyframe an aiortc
/// viewer's up-move asked for, and the viewer (REMB 861 kbit/s) was moved straight back
/// down by it, every time.
pub const RATE_SECONDS: usize = 3;

/// The measured rate of each video layer of a stream (bit/s over the last
/// [`RATE_SECONDS`]; 0 for a layer that sent nothing in the last second), and the choices
/// made from them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LayerRates(pub [u32; MAX_LAYERS]);

impl LayerRates {
    /// A layer's rate (bit/s; 0 for one not sending or beyond [`MAX_LAYERS`]).
    pub fn rate(&self, layer: u8) -> u32 {
        self.0.get(usize::from(layer)).copied().unwrap_or(0)
    }

    /// The layers sending now, highest rate first (layer 0 alone when none is measured:
    /// a new stream, or one without simulcast).
    pub fn ranked(&self) -> impl Iterator<Item = u8> + '_ {
        let mut order = [0u8, 1, 2];
        order.sort_by_key(|&l| std::cmp::Reverse(self.rate(l)));
        let any = self.0.iter().any(|&r| r > 0);
        order
            .into_iter()
            .filter(move |&l| if any { self.rate(l) > 0 } else { l == 0 })
    }

    /// The layer a viewer with `budget` bit/s should read: the highest-rate layer sending
    /// now whose rate fits, else the lowest-rate one (`None`: the best).
    pub fn pick(&self, budget: Option<u32>) -> u8 {
        let mut last = 0;
        for l in self.ranked() {
            if budget.is_none_or(|b| self.rate(l) <= b) {
                return l;
            }
            last = l;
        }
        last
    }

    /// The next layer down from `layer`: the highest-rate one sending slower, if any.
    pub fn next_below(&self, layer: u8) -> Option<u8> {
        let ceiling = self.rate(layer);
        self.ranked().find(|&l| self.rate(l) < ceiling)
    }

    /// The next layer up from `layer`: the lowest-rate one sending faster, if any.
    pub fn next_above(&self, layer: u8) -> Option<u8> {
        let floor = self.rate(layer);
        self.ranked().filter(|&l| self.rate(l) > floor).last()
    }
}

/// A live stream's media: one ring per video layer and one for audio.
pub struct Stream {
    /// Video packets of layer 0 (the only layer without simulcast).
    pub video: Ring,
    /// Video rings of layers 1.., made when their first packet arrives.
    upper: Vec<Ring>,
    /// Audio packets.
    pub audio: Ring,
    /// Payload bytes pushed per layer.
    bytes: [u64; MAX_LAYERS],
    /// When the last [`RATE_SECONDS`] ticks were, with the counts then: slot `ticks %
    /// RATE_SECONDS` is the next to take (and, once all are taken, the oldest).
    marks: [Option<(Instant, [u64; MAX_LAYERS])>; RATE_SECONDS],
    ticks: usize,
    /// Each layer's rate over the marks' span.
    rates: LayerRates,
}

impl Stream {
    /// A stream with rings of the given lengths (packets); a layer above 0 gets a video
    /// ring of the same length when it first sends.
    pub fn new(video_ring: usize, audio_ring: usize) -> Self {
        Stream {
            video: Ring::new(video_ring),
            upper: Vec::new(),
            audio: Ring::new(audio_ring),
            bytes: [0; MAX_LAYERS],
            marks: [None; RATE_SECONDS],
            ticks: 0,
            rates: LayerRates::default(),
        }
    }

    /// The ring of a media kind (layer 0 for video).
    pub fn ring(&self, kind: MediaKind) -> &Ring {
        match kind {
            MediaKind::Video => &self.video,
            MediaKind::Audio => &self.audio,
        }
    }

    /// The ring a packet of `kind` and `layer` is stored in, if that layer has sent.
    pub fn ring_of(&self, kind: MediaKind, layer: u8) -> Option<&Ring> {
        match (kind, layer) {
            (MediaKind::Audio, _) => Some(&self.audio),
            (MediaKind::Video, 0) => Some(&self.video),
            (MediaKind::Video, l) => self.upper.get(usize::from(l) - 1),
        }
    }

    /// Stores a packet in the ring of its kind and layer (a layer beyond [`MAX_LAYERS`] is
    /// refused).
    pub fn push(&mut self, pkt: RingPacket) -> bool {
        let layer = usize::from(pkt.layer);
        let len = pkt.payload.len() as u64;
        let ring = match (pkt.kind, layer) {
            (MediaKind::Audio, _) => return self.audio.push(pkt),
            (MediaKind::Video, 0) => &mut self.video,
            (MediaKind::Video, l) if l < MAX_LAYERS => {
                while self.upper.len() < l {
                    self.upper.push(Ring::new(self.video.capacity()));
                }
                &mut self.upper[l - 1]
            }
            _ => return false,
        };
        let ok = ring.push(pkt);
        if ok {
            self.bytes[layer] += len;
        }
        ok
    }

    /// Video layers that have sent (1 without simulcast, before any packet too).
    pub fn layers(&self) -> usize {
        1 + self.upper.len()
    }

    /// Updates each layer's rate from the bytes pushed over the last [`RATE_SECONDS`]
    /// (fewer while the stream is younger); a layer that sent nothing in the last second
    /// is not sending (rate 0). Call as often as convenient: it updates once a second.
    pub fn tick(&mut self, now: Instant) {
        let slot = self.ticks % RATE_SECONDS;
        let newest = self.marks[(slot + RATE_SECONDS - 1) % RATE_SECONDS];
        if let Some((at, last)) = newest {
            if now.saturating_duration_since(at) < Duration::from_secs(1) {
                return;
            }
            // The oldest mark: the one this tick replaces, or the first while not all are
            // taken.
            let (from, then) = self.marks[slot].or(self.marks[0]).unwrap_or((at, last));
            let secs = now.saturating_duration_since(from).as_secs_f64();
            for l in 0..MAX_LAYERS {
                self.rates.0[l] = if self.bytes[l] == last[l] {
                    0
                } else {
                    let d = self.bytes[l] - then[l];
                    ((d * 8) as f64 / secs).min(f64::from(u32::MAX)) as u32
                };
            }
        }
        self.marks[slot] = Some((now, self.bytes));
        self.ticks = self.ticks.wrapping_add(1);
    }

    /// A video layer's payload rate (bit/s; see [`Stream::tick`]).
    pub fn rate(&self, layer: u8) -> u32 {
        self.rates.rate(layer)
    }

    /// Every layer's rate, for choosing between them (see [`LayerRates`]).
    pub fn layer_rates(&self) -> LayerRates {
        self.rates
    }

    /// The layers sending now, highest rate first (see [`LayerRates::ranked`]).
    pub fn ranked(&self) -> impl Iterator<Item = u8> + '_ {
        self.rates.ranked()
    }

    /// The layer a viewer with `budget` bit/s should read (see [`LayerRates::pick`]).
    pub fn pick_layer(&self, budget: Option<u32>) -> u8 {
        self.rates.pick(budget)
    }

    /// Drops every packet; the upper layers' rings go (a new publisher may send fewer).
    pub fn clear(&mut self) {
        self.video.clear();
        self.audio.clear();
        self.upper = Vec::new();
        self.rates = LayerRates::default();
    }

    /// Every ring: the video layers', then audio's (for accounting).
    pub fn rings(&self) -> impl Iterator<Item = &Ring> {
        std::iter::once(&self.video)
            .chain(&self.upper)
            .chain(std::iter::once(&self.audio))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(pool: &tern_pool::BufferPool, seq: u64) -> RingPacket {
        RingPacket {
            kind: MediaKind::Video,
            layer: 0,
            seq,
            rtp_ts: 0,
            marker: false,
            keyframe: seq.is_multiple_of(5),
            capture_ntp: 0,
            payload: pool.alloc(1).freeze(),
        }
    }

    fn scanned(r: &Ring) -> usize {
        r.slots.iter().flatten().count()
    }

    #[test]
    fn the_held_count_follows_the_slots_through_gaps_wraps_refusals_and_clear() {
        let pool =
            tern_pool::BufferPool::new(tern_pool::PoolConfig::packets("test")).expect("pool");
        let mut r = Ring::new(8);
        assert_eq!(r.len(), 0);
        // Gaps leave slots empty; wrapping replaces a held packet; old and repeated
        // sequence numbers are refused.
        for seq in [
            1, 2, 4, 7, 8, 9, 9, 3, 12, 20, 21, 22, 23, 24, 25, 26, 27, 28,
        ] {
            r.push(packet(&pool, seq));
            assert_eq!(r.len(), scanned(&r), "after {seq}");
        }
        assert_eq!(r.len(), 8);
        r.clear();
        assert_eq!((r.len(), scanned(&r)), (0, 0));
        r.push(packet(&pool, 30));
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn a_layers_rate_spans_three_seconds_and_a_silent_layer_reads_zero() {
        let pool =
            tern_pool::BufferPool::new(tern_pool::PoolConfig::packets("test")).expect("pool");
        let mut s = Stream::new(64, 8);
        let t0 = Instant::now();
        let mut seq = 0;
        // One second of layer 0: `kb` packets of 1,000 bytes (8 kbit/s each).
        let mut second = |s: &mut Stream, at: u64, kb: u64| {
            for _ in 0..kb {
                seq += 1;
                let mut p = packet(&pool, seq);
                p.payload = pool.alloc(1_000).freeze();
                s.push(p);
            }
            s.tick(t0 + Duration::from_secs(at));
        };
        second(&mut s, 0, 0);
        // 500 kbit/s, then a keyframe second of 900: over three seconds, 633, not 900.
        second(&mut s, 1, 62);
        assert_eq!(s.rate(0), 496_000);
        second(&mut s, 2, 62);
        second(&mut s, 3, 112);
        assert_eq!(s.rate(0), 1_888_000 / 3);
        // The keyframe second leaves the span after three more.
        second(&mut s, 4, 62);
        second(&mut s, 5, 62);
        second(&mut s, 6, 62);
        assert_eq!(s.rate(0), 496_000);
        // Under a second since the last update: nothing changes.
        s.tick(t0 + Duration::from_millis(6_500));
        assert_eq!(s.rate(0), 496_000);
        // A layer that sent nothing for a second is not sending, whatever came before.
        second(&mut s, 7, 0);
        assert_eq!(s.rate(0), 0);
        assert_eq!(s.layer_rates().ranked().collect::<Vec<_>>(), vec![0]);
    }
}
