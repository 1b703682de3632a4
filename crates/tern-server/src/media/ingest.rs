//! Ingest inside the media engine: WHIP publisher sessions on the shared media port, frame
//! publishers (RTMP, SRT, RTSP cameras and edge pulls, which run on threads of their own
//! and whose commands arrive through [`Ingest::frames`]; see [`crate::feed`]), and the
//! rewriting that keeps each stream continuous for its viewers across publishers of any
//! kind.
//!
//! A stream has at most one publisher. Its packets are renumbered into the stream's own
//! sequence and timestamp space, so when a publisher leaves and another arrives the viewers
//! see one unbroken RTP stream (same SSRC, sequence numbers without a jump, timestamps
//! advanced by the wall-clock gap) and need no renegotiation; video resumes at the new
//! publisher's first keyframe, which is requested at once.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use tern_proto::codec::{MediaKind, VideoCodec};
use tern_rtc::publisher::{IngestPacket, Publisher, PublisherEvent};
use tern_rtc::stream::MAX_LAYERS;
use tokio::sync::oneshot;

use crate::config::{DEFAULT_PUBLISHER_TIMEOUT_S, ServerConfig};
use crate::limits::AddrPermit;

/// Keyframe requests to a publisher are coalesced to one per this interval.
const PLI_INTERVAL: Duration = Duration::from_millis(500);

/// How long a publisher may hold its stream without doing its part: the `[server]` keys
/// `publisher_connect_timeout` and `publisher_timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublisherTimeouts {
    /// From a WHIP offer's answer to the end of ICE and DTLS. A session that never connects
    /// (an offer the encoder could not use, a bare `curl`) would otherwise keep the stream's
    /// slot, and the real encoder would get 409 all that time.
    pub connect: Duration,
    /// From the last media packet (or from connecting, or from an RTMP `publish`): a
    /// publisher that stops sending is ended and frees its stream.
    pub media: Duration,
}

impl Default for PublisherTimeouts {
    /// [`DEFAULT_PUBLISHER_TIMEOUT_S`] each (10 s; the reason is there).
    fn default() -> Self {
        PublisherTimeouts {
            connect: Duration::from_secs(DEFAULT_PUBLISHER_TIMEOUT_S),
            media: Duration::from_secs(DEFAULT_PUBLISHER_TIMEOUT_S),
        }
    }
}

impl From<&ServerConfig> for PublisherTimeouts {
    /// The `[server]` keys `publisher_connect_timeout` and `publisher_timeout`.
    fn from(s: &ServerConfig) -> Self {
        PublisherTimeouts {
            connect: Duration::from_secs(s.publisher_connect_timeout),
            media: Duration::from_secs(s.publisher_timeout),
        }
    }
}

/// Why a publisher ended (the `reason` of its `publisher.left` event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeftReason {
    /// WHIP DELETE, the RTMP connection closed, a kick, or the session closed.
    Ended,
    /// ICE and DTLS did not complete within [`PublisherTimeouts::connect`].
    ConnectTimeout,
    /// No media for [`PublisherTimeouts::media`].
    MediaTimeout,
    /// The server is stopping.
    Shutdown,
    /// Its stream was removed (by a reload: its app or its camera source).
    Removed(EndReason),
}

impl LeftReason {
    /// The reason as events and logs give it.
    pub fn as_str(self) -> &'static str {
        match self {
            LeftReason::Ended => "ended",
            LeftReason::ConnectTimeout => "connect timeout",
            LeftReason::MediaTimeout => "media timeout",
            LeftReason::Shutdown => "server shutdown",
            LeftReason::Removed(r) => r.as_str(),
        }
    }
}

/// Why a stream's sessions end when it is removed (`Command::UnbindStream`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// A publisher-made stream had no publisher for its grace: "closed by server".
    Idle,
    /// A reload removed its app: `app_removed`.
    AppRemoved,
    /// A reload removed its camera source: `source_removed`.
    SourceRemoved,
}

impl EndReason {
    /// The reason as viewers' and publishers' `left` events give it.
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Idle => "closed by server",
            EndReason::AppRemoved => "app_removed",
            EndReason::SourceRemoved => "source_removed",
        }
    }
}

/// Handle of a publisher (stream index and a serial number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublisherId {
    /// Stream index.
    pub stream: usize,
    /// Serial, unique in the process.
    pub serial: u64,
}

/// Why a publisher could not be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AddError {
    /// The stream already has a publisher or is fed by a built-in source.
    #[error("stream already has a publisher")]
    Busy,
}

/// Where a stream's publisher comes from: its kind in snapshots, events and admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// A WHIP session on the media port.
    Whip,
    /// An RTMP connection ([`crate::rtmp`]).
    Rtmp,
    /// An SRT caller ([`crate::srt`]).
    Srt,
    /// An RTSP camera pulled by the server ([`crate::rtsp`]).
    Rtsp,
    /// An edge's upstream session from the stream's origin node ([`crate::cluster`]).
    Edge,
}

impl Source {
    /// The kind as snapshots and events name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Whip => "whip",
            Source::Rtmp => "rtmp",
            Source::Srt => "srt",
            Source::Rtsp => "rtsp",
            Source::Edge => "edge",
        }
    }

    /// Whether packagers (LL-HLS, recordings) take this publisher's frames as it hands them
    /// over ([`tern_rtc::av::Sample`]: H264 with its B-frames, AAC untouched) rather than
    /// the stream's ring packets. Frame publishers demux their container into frames
    /// anyway, but samples are H264's: an SRT publisher's or a camera's H265 is passed
    /// through as RTP (which the thumbnails take), and an edge's upstream is RTP.
    pub fn packages_from_frames(self, codec: VideoCodec) -> bool {
        match self {
            Source::Rtmp => true,
            Source::Srt | Source::Rtsp => codec == VideoCodec::H264,
            Source::Whip | Source::Edge => false,
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a publisher on its own thread (a frame publisher: RTMP, SRT, an RTSP camera, an
/// edge's upstream session) asks of the engine, which hands it to [`Ingest::frames`].
#[derive(Debug)]
pub enum FrameCommand {
    /// Take stream `stream`'s publisher slot; `closed` is set when the engine ends the
    /// publisher (kick, shutdown) and the connection then closes.
    Add {
        /// Stream index.
        stream: usize,
        /// The publisher's kind (snapshots, events, and where packagers take its media).
        source: Source,
        /// The codec of its video packets.
        codec: VideoCodec,
        /// Set by the engine when the publisher is removed.
        closed: Arc<AtomicBool>,
        /// Bit `l` set by the engine when a viewer asks for a keyframe of video layer `l`
        /// (at most once per [`PLI_INTERVAL`] and layer); the connection's transcoder or
        /// the layer's rendition encoder, when one runs, makes one.
        keyframe: Arc<AtomicU8>,
        /// The RIDs of its video layers in layer order (`["h", "m", "l"]` with RTMP
        /// renditions); empty with one layer.
        rids: Vec<Box<str>>,
        /// Its id, or why not.
        reply: oneshot::Sender<Result<PublisherId, AddError>>,
    },
    /// The publisher's video codec, learnt after it took the slot (an SRT publisher's TS
    /// says it in its first video PES): sent before its first media packet of that codec.
    Codec {
        /// The publisher.
        id: PublisherId,
        /// Its video codec from now on.
        codec: VideoCodec,
    },
    /// Media from the publisher, in its own numbering, in order.
    Media {
        /// The publisher.
        id: PublisherId,
        /// Its packets.
        packets: Vec<IngestPacket>,
    },
}

impl FrameCommand {
    /// The stream it concerns.
    pub fn stream(&self) -> usize {
        match self {
            FrameCommand::Add { stream, .. } => *stream,
            FrameCommand::Codec { id, .. } | FrameCommand::Media { id, .. } => id.stream,
        }
    }
}

/// One kind's (or one video layer's) mapping from the publisher's numbering to the
/// stream's.
#[derive(Debug, Default)]
struct KindMap {
    /// Offsets in use for the current publisher (set by its first forwarded packet).
    offsets: Option<(i64, i64)>,
    /// Next sequence number of the stream.
    next_seq: u64,
    /// The stream's last timestamp and when it was sent.
    last: Option<(u32, Instant)>,
    /// The publisher's timestamp of the newest packet mapped.
    last_src_ts: u64,
}

/// What a simulcast layer's first packet is aligned with: another layer of the same
/// publisher already mapped (its timestamp offset, its newest source and stream timestamps
/// and when).
#[derive(Debug, Clone, Copy)]
struct Reference {
    ts_off: i64,
    src_ts: u64,
    ts: u32,
    at: Instant,
}

impl KindMap {
    /// The stream's sequence number and timestamp for a publisher packet. The first packet
    /// of a publisher sets the offsets: aligned with `reference` (another simulcast layer
    /// of the same publisher) when there is one, else continuing this map's own timeline.
    fn map(&mut self, p: &IngestPacket, now: Instant, reference: Option<Reference>) -> (u64, u32) {
        self.map_numbers(p.kind, p.seq, p.rtp_ts, now, reference)
    }

    /// Makes the offsets of a packet already on the stream's clock (a WHIP publisher's
    /// renditions, made from the ring's timestamps): its timestamps are kept, whatever
    /// layer 0's offset.
    fn on_stream_clock(&mut self, p: &IngestPacket) {
        if self.offsets.is_none() {
            self.offsets = Some((self.next_seq as i64 - p.seq as i64, 0));
        }
    }

    /// [`KindMap::map`] for a packet put in front of `p` (same source sequence number):
    /// the numbering moves on by one, so that `p` and what follows come after it.
    fn map_inserted(
        &mut self,
        p: &IngestPacket,
        now: Instant,
        reference: Option<Reference>,
    ) -> (u64, u32) {
        let mapped = self.map(p, now, reference);
        if let Some((seq_off, _)) = &mut self.offsets {
            *seq_off += 1;
        }
        mapped
    }

    /// [`KindMap::map`] on a packet's kind, sequence number and timestamp alone.
    fn map_numbers(
        &mut self,
        kind: MediaKind,
        src_seq: u64,
        src_ts: u64,
        now: Instant,
        reference: Option<Reference>,
    ) -> (u64, u32) {
        let (seq_off, ts_off) = *self.offsets.get_or_insert_with(|| {
            let clock = i64::from(kind.clock_rate());
            let since = |at: Instant| {
                (now.saturating_duration_since(at).as_secs_f64() * clock as f64) as i64
            };
            let ts_off = match (reference, self.last) {
                // Layers of one encoder mostly share a timestamp base: take the other
                // layer's offset when this one's timestamps are within a second of it.
                // Else (a base of its own) align by arrival: the other layer's stream
                // time now, which is off by at most the frames' send spread.
                (Some(r), _) if (src_ts as i64 - r.src_ts as i64).abs() < clock => r.ts_off,
                (Some(r), _) => i64::from(r.ts) + since(r.at) - src_ts as i64,
                // Continue the timeline: the last timestamp plus the wall-clock gap.
                (None, Some((ts, at))) => i64::from(ts) + since(at) + 1 - src_ts as i64,
                (None, None) => -(src_ts as i64),
            };
            (self.next_seq as i64 - src_seq as i64, ts_off)
        });
        let seq = (src_seq as i64 + seq_off).max(0) as u64;
        let ts = (src_ts as i64 + ts_off) as u32;
        if seq >= self.next_seq {
            self.next_seq = seq + 1;
            self.last = Some((ts, now));
            self.last_src_ts = src_ts;
        }
        (seq, ts)
    }

    /// This map as a reference for another layer, once it has mapped a packet of the
    /// current publisher.
    fn reference(&self) -> Option<Reference> {
        let (_, ts_off) = self.offsets?;
        let (ts, at) = self.last?;
        Some(Reference {
            ts_off,
            src_ts: self.last_src_ts,
            ts,
            at,
        })
    }
}

/// Per-stream state that outlives publishers.
#[derive(Debug, Default)]
struct StreamMap {
    /// One map per simulcast layer (layer 0 alone without simulcast).
    video: [KindMap; MAX_LAYERS],
    audio: KindMap,
    /// Per layer: video is dropped until the publisher's first keyframe.
    wait_keyframe: [bool; MAX_LAYERS],
    /// Per layer: the next video packet starts an access unit.
    au_start: [bool; MAX_LAYERS],
    /// The publisher's video codec (how its keyframes are recognised).
    codec: VideoCodec,
    /// H265: the publisher's last VPS, SPS and PPS per layer, put in front of an IRAP
    /// picture that comes without them (boxed: only H265 streams hold it).
    hevc: Option<Box<[[Vec<u8>; 3]; MAX_LAYERS]>>,
}

/// A publisher's session: WHIP ones run here, frame publishers on their own threads.
enum Session {
    Whip(Box<Publisher>),
    /// RTMP, SRT, an RTSP camera or an edge's upstream: its thread reads the flags.
    Frames {
        /// Its kind.
        source: Source,
        /// Its video codec.
        codec: VideoCodec,
        /// Set when the engine ends the publisher (kick, shutdown): the connection closes.
        closed: Arc<AtomicBool>,
        /// Bit `l` set when a viewer wants a keyframe of layer `l` (a transcoder or a
        /// rendition encoder can make one; an RTMP encoder cannot be asked).
        keyframe: Arc<AtomicU8>,
    },
}

struct PubSlot {
    id: PublisherId,
    session: Session,
    /// The session's own next timer (WHIP).
    timeout: Option<Instant>,
    /// When the publisher is ended unless it connects or sends media first.
    watchdog: Instant,
    /// ICE and DTLS done (RTMP publishers are connected when they take the slot).
    connected: bool,
    /// The client address's place among its pending sessions, until it connects.
    permit: Option<AddrPermit>,
    /// When each video layer was last asked for a keyframe.
    last_pli: [Option<Instant>; MAX_LAYERS],
    live: bool,
    /// A WHIP publisher's renditions (`crate::feed::WhipRenditions`): bit `l` set when a
    /// viewer asks for a keyframe of layer `l` > 0, which their encoders answer. Their
    /// packets come in as a frame publisher's ([`FrameCommand::Media`]).
    renditions: Option<Arc<AtomicU8>>,
}

/// What the engine must do after ingest work.
#[derive(Debug)]
pub enum IngestOutput {
    /// Send a datagram.
    Transmit(SocketAddr, Vec<u8>),
    /// A packet for stream `stream`, already mapped into the stream's numbering.
    Media {
        /// Stream index.
        stream: usize,
        /// The packet.
        packet: IngestPacket,
        /// Mapped sequence number.
        seq: u64,
        /// Mapped timestamp.
        ts: u32,
        /// First packet of a keyframe access unit.
        keyframe: bool,
    },
    /// Stream `stream` went live (its publisher connected and sent media).
    Live(usize),
    /// Stream `stream` lost its publisher.
    Gone {
        /// Stream index.
        stream: usize,
        /// Why.
        reason: LeftReason,
    },
}

/// All publishers.
pub struct Ingest {
    slots: Vec<Option<PubSlot>>,
    /// The indices of the slots that hold a publisher, in no order: the worker asks for the
    /// next timeout on every pass of its loop, and a scan of every slot (one per stream,
    /// 1,024 spare ones by default) showed in the egress profile.
    occupied: Vec<usize>,
    maps: Vec<StreamMap>,
    serial: u64,
    timeouts: PublisherTimeouts,
}

impl Ingest {
    /// Room for publishers of `streams` streams, each ended after `timeouts`.
    pub fn new(streams: usize, timeouts: PublisherTimeouts) -> Self {
        Ingest {
            slots: (0..streams).map(|_| None).collect(),
            occupied: Vec::new(),
            maps: (0..streams).map(|_| StreamMap::default()).collect(),
            serial: 0,
            timeouts,
        }
    }

    /// Whether stream `stream`'s publisher hands packagers its frames itself
    /// ([`Source::packages_from_frames`]): its ring packets are then not tapped for them.
    pub fn packages_from_frames(&self, stream: usize) -> bool {
        match self.slots.get(stream) {
            Some(Some(PubSlot {
                session: Session::Frames { source, codec, .. },
                ..
            })) => source.packages_from_frames(*codec),
            _ => false,
        }
    }

    /// The timeouts publishers are ended after.
    pub fn timeouts(&self) -> PublisherTimeouts {
        self.timeouts
    }

    /// Publishers connected or connecting.
    pub fn count(&self) -> usize {
        self.slots.iter().flatten().count()
    }

    /// The publishers connected or connecting.
    pub fn ids(&self) -> Vec<PublisherId> {
        self.slots.iter().flatten().map(|s| s.id).collect()
    }

    /// The publisher of stream `stream`, if any.
    pub fn publisher_of(&self, stream: usize) -> Option<PublisherId> {
        self.slots.get(stream)?.as_ref().map(|s| s.id)
    }

    /// Installs a WHIP publisher on a stream; it has [`PublisherTimeouts::connect`] from
    /// `now` to complete ICE and DTLS.
    pub fn add(
        &mut self,
        stream: usize,
        session: Publisher,
        now: Instant,
        permit: Option<AddrPermit>,
        renditions: Option<Arc<AtomicU8>>,
    ) -> Result<PublisherId, AddError> {
        let id = self.install(stream, Session::Whip(Box::new(session)), now)?;
        if let Some(Some(s)) = self.slots.get_mut(stream) {
            s.permit = permit;
            s.renditions = renditions;
        }
        Ok(id)
    }

    /// ICE restart of WHIP publisher `id` with the encoder's new credentials; returns the
    /// server's new ufrag and password.
    pub fn restart_ice(
        &mut self,
        id: PublisherId,
        ufrag: &str,
        pwd: &str,
    ) -> Result<(String, String), String> {
        match self.slots.get_mut(id.stream) {
            Some(Some(PubSlot {
                id: slot_id,
                session: Session::Whip(p),
                ..
            })) if *slot_id == id => p.restart_ice(ufrag, pwd).map_err(|e| e.to_string()),
            _ => Err("no such WHIP publisher".into()),
        }
    }

    /// Carries out a frame publisher's command on the engine thread; `free` says whether
    /// the command's stream may take a publisher (this worker's, not a built-in source).
    /// Returns the new publisher when one was installed.
    pub fn frames(
        &mut self,
        cmd: FrameCommand,
        free: bool,
        now: Instant,
        out: &mut Vec<IngestOutput>,
    ) -> Option<PublisherId> {
        match cmd {
            FrameCommand::Add {
                stream,
                source,
                codec,
                closed,
                keyframe,
                reply,
                ..
            } => {
                let res = if free {
                    let session = Session::Frames {
                        source,
                        codec,
                        closed,
                        keyframe,
                    };
                    self.install(stream, session, now)
                } else {
                    Err(AddError::Busy)
                };
                let _ = reply.send(res);
                res.ok()
            }
            FrameCommand::Codec { id, codec: new } => {
                if let Some(Some(PubSlot {
                    id: slot_id,
                    session: Session::Frames { codec, .. },
                    ..
                })) = self.slots.get_mut(id.stream)
                    && *slot_id == id
                {
                    *codec = new;
                    self.maps[id.stream].codec = new;
                }
                None
            }
            FrameCommand::Media { id, packets } => {
                self.push_frames(id, now, packets, out);
                None
            }
        }
    }

    /// The kind of the stream's publisher, for snapshots (WHIP when it has none).
    pub fn source(&self, stream: usize) -> Source {
        match self.slots.get(stream) {
            Some(Some(PubSlot {
                session: Session::Frames { source, .. },
                ..
            })) => *source,
            _ => Source::Whip,
        }
    }

    fn install(
        &mut self,
        stream: usize,
        session: Session,
        now: Instant,
    ) -> Result<PublisherId, AddError> {
        let slot = self.slots.get_mut(stream).ok_or(AddError::Busy)?;
        if slot.is_some() {
            return Err(AddError::Busy);
        }
        self.serial += 1;
        let id = PublisherId {
            stream,
            serial: self.serial,
        };
        let connected = matches!(session, Session::Frames { .. });
        let codec = match &session {
            Session::Whip(p) => p.video_codec(),
            Session::Frames { codec, .. } => *codec,
        };
        let wait = if connected {
            self.timeouts.media
        } else {
            self.timeouts.connect
        };
        *slot = Some(PubSlot {
            id,
            session,
            timeout: None,
            watchdog: now + wait,
            connected,
            permit: None,
            last_pli: [None; MAX_LAYERS],
            live: false,
            renditions: None,
        });
        self.occupied.push(stream);
        self.new_timeline(stream);
        let m = &mut self.maps[stream];
        m.wait_keyframe = [true; MAX_LAYERS];
        m.au_start = [true; MAX_LAYERS];
        m.codec = codec;
        // Another publisher's parameter sets would not decode this one's pictures.
        m.hevc = None;
        Ok(id)
    }

    /// The next packet of each kind on `stream`, a new publisher's or the slate's, starts
    /// its own offsets: it continues the stream's numbering and timeline where they are.
    pub fn new_timeline(&mut self, stream: usize) {
        if let Some(m) = self.maps.get_mut(stream) {
            for v in &mut m.video {
                v.offsets = None;
            }
            m.audio.offsets = None;
        }
    }

    /// A slate packet (`[[app]] fallback`, played while `stream` has no publisher) on the
    /// stream's numbering: its sequence number and timestamp, as a publisher's packet gets
    /// them (video as layer 0). Call [`Ingest::new_timeline`] when the slate starts.
    pub fn map_slate(
        &mut self,
        stream: usize,
        kind: MediaKind,
        seq: u64,
        rtp_ts: u32,
        now: Instant,
    ) -> (u64, u32) {
        let m = &mut self.maps[stream];
        let map = match kind {
            MediaKind::Video => &mut m.video[0],
            MediaKind::Audio => &mut m.audio,
        };
        map.map_numbers(kind, seq, u64::from(rtp_ts), now, None)
    }

    /// Ends a publisher (WHIP DELETE, its session closed, a timeout). Returns whether it
    /// existed.
    pub fn remove(
        &mut self,
        id: PublisherId,
        reason: LeftReason,
        out: &mut Vec<IngestOutput>,
    ) -> bool {
        let Some(slot) = self.slots.get_mut(id.stream) else {
            return false;
        };
        if slot.as_ref().is_none_or(|s| s.id != id) {
            return false;
        }
        let session = slot.take().map(|s| s.session);
        if let Some(i) = self.occupied.iter().position(|&s| s == id.stream) {
            self.occupied.swap_remove(i);
            // Nothing kept sized for the last wave of publishers: idle holds no list.
            if self.occupied.len() * 4 <= self.occupied.capacity() {
                self.occupied.shrink_to(self.occupied.len() * 2);
            }
        }
        match session {
            Some(Session::Whip(mut session)) => {
                session.close();
                session.poll(&mut |e| {
                    if let PublisherEvent::Transmit(to, d) = e {
                        out.push(IngestOutput::Transmit(to, d));
                    }
                });
            }
            Some(Session::Frames { closed, .. }) => closed.store(true, Ordering::Relaxed),
            None => {}
        }
        out.push(IngestOutput::Gone {
            stream: id.stream,
            reason,
        });
        true
    }

    /// Feeds a datagram to a stream's publisher and collects what follows.
    pub fn input(
        &mut self,
        stream: usize,
        now: Instant,
        from: SocketAddr,
        buf: &[u8],
        out: &mut Vec<IngestOutput>,
    ) -> bool {
        let Some(Some(PubSlot {
            session: Session::Whip(w),
            ..
        })) = self.slots.get_mut(stream)
        else {
            return false;
        };
        let ok = w.handle_input(now, from, buf);
        self.drain(stream, now, out);
        ok
    }

    /// When a publisher's timer or watchdog is next due.
    pub fn next_timeout(&self) -> Option<Instant> {
        self.occupied
            .iter()
            .filter_map(|&i| self.slots[i].as_ref())
            .map(|s| s.timeout.map_or(s.watchdog, |t| t.min(s.watchdog)))
            .min()
    }

    /// Ends the publishers whose watchdog expired, then runs due session timers.
    pub fn handle_timeouts(&mut self, now: Instant, out: &mut Vec<IngestOutput>) {
        for i in 0..self.slots.len() {
            let Some(&PubSlot {
                id,
                watchdog,
                connected,
                ..
            }) = self.slots[i].as_ref()
            else {
                continue;
            };
            if watchdog <= now {
                let reason = if connected {
                    LeftReason::MediaTimeout
                } else {
                    LeftReason::ConnectTimeout
                };
                self.remove(id, reason, out);
            }
        }
        for i in 0..self.slots.len() {
            let due = self.slots[i].as_ref().is_some_and(|s| {
                matches!(s.session, Session::Whip(_)) && s.timeout.is_none_or(|t| t <= now)
            });
            if due {
                if let Some(PubSlot {
                    session: Session::Whip(w),
                    ..
                }) = self.slots[i].as_mut()
                {
                    w.handle_timeout(now);
                }
                self.drain(i, now, out);
            }
        }
    }

    /// Asks a stream's publisher for a keyframe of a video layer, at most once per
    /// [`PLI_INTERVAL`] and layer: a PLI to a WHIP publisher (for a layer of its renditions,
    /// that layer's bit of their flags: their encoder answers); to an RTMP connection the
    /// layer's bit of its flags, which its transcoder (layer 0, if one runs) or the layer's
    /// rendition encoder answers with an IDR. (An RTMP encoder cannot be asked: without a
    /// transcoder its viewers wait for its next GOP.)
    pub fn request_keyframe(
        &mut self,
        stream: usize,
        layer: u8,
        now: Instant,
        out: &mut Vec<IngestOutput>,
    ) {
        let Some(Some(s)) = self.slots.get_mut(stream) else {
            return;
        };
        let Some(last) = s.last_pli.get_mut(usize::from(layer)) else {
            return;
        };
        if last.is_some_and(|t| now.duration_since(t) < PLI_INTERVAL) {
            return;
        }
        *last = Some(now);
        match (&mut s.session, &s.renditions) {
            (Session::Whip(_), Some(keyframe)) if layer > 0 => {
                keyframe.fetch_or(1 << layer, Ordering::Relaxed);
                return;
            }
            (Session::Whip(w), _) => w.request_keyframe(layer),
            (Session::Frames { keyframe, .. }, _) => {
                // `layer` < MAX_LAYERS (the `last_pli` index above): its bit fits.
                keyframe.fetch_or(1 << layer, Ordering::Relaxed);
                return;
            }
        }
        self.drain(stream, now, out);
    }

    /// Forwards a frame publisher's packets (from [`crate::feed::FrameSink`]) through the same
    /// keyframe wait and rewriting as WHIP packets. Returns false if `id` is no longer the
    /// stream's publisher (it was kicked, or its packets arrived late).
    fn push_frames(
        &mut self,
        id: PublisherId,
        now: Instant,
        packets: Vec<IngestPacket>,
        out: &mut Vec<IngestOutput>,
    ) -> bool {
        let Some(Some(s)) = self.slots.get_mut(id.stream) else {
            return false;
        };
        // A WHIP publisher takes its renditions' layers (1 and up) this way.
        let renditions = matches!(s.session, Session::Whip(_)) && s.renditions.is_some();
        if s.id != id || !(matches!(s.session, Session::Frames { .. }) || renditions) {
            return false;
        }
        // (A WHIP publisher's own packets keep it alive, not its renditions'.)
        if !packets.is_empty() && !renditions {
            s.watchdog = now + self.timeouts.media;
        }
        let map = &mut self.maps[id.stream];
        for p in packets {
            if renditions {
                let layer = usize::from(p.layer);
                if p.kind != MediaKind::Video || layer == 0 || layer >= MAX_LAYERS {
                    continue;
                }
                map.video[layer].on_stream_clock(&p);
            }
            forward(map, &mut s.live, id.stream, p, now, out);
        }
        true
    }

    fn drain(&mut self, stream: usize, now: Instant, out: &mut Vec<IngestOutput>) {
        let Some(Some(s)) = self.slots.get_mut(stream) else {
            return;
        };
        let Session::Whip(w) = &mut s.session else {
            return;
        };
        let map = &mut self.maps[stream];
        let mut closed = false;
        // Bit l: layer l dropped a packet waiting for its keyframe.
        let mut want_key = 0u8;
        let (live, connected, watchdog) = (&mut s.live, &mut s.connected, &mut s.watchdog);
        let permit = &mut s.permit;
        let media = self.timeouts.media;
        s.timeout = w.poll(&mut |e| match e {
            PublisherEvent::Transmit(to, d) => out.push(IngestOutput::Transmit(to, d)),
            PublisherEvent::Connected => {
                *connected = true;
                *permit = None;
                *watchdog = now + media;
            }
            PublisherEvent::Closed => closed = true,
            PublisherEvent::Packet(p) => {
                if *connected {
                    *watchdog = now + media;
                }
                let layer = p.layer;
                if !forward(map, live, stream, p, now, out) {
                    want_key |= 1 << layer;
                }
            }
        });
        if w.is_closed() {
            closed = true;
        }
        if closed {
            let id = s.id;
            self.remove(id, LeftReason::Ended, out);
        } else {
            for layer in 0..MAX_LAYERS as u8 {
                if want_key & 1 << layer != 0 {
                    self.request_keyframe(stream, layer, now, out);
                }
            }
        }
    }
}

/// Sends one publisher packet on: video waits for a keyframe after a publisher change,
/// the first packet makes the stream live, and the numbering is mapped into the stream's.
/// Returns false when the packet was dropped while waiting for a keyframe.
fn forward(
    map: &mut StreamMap,
    live: &mut bool,
    stream: usize,
    p: IngestPacket,
    now: Instant,
    out: &mut Vec<IngestOutput>,
) -> bool {
    let mut keyframe = false;
    let layer = usize::from(p.layer);
    if p.kind == MediaKind::Video {
        if layer >= MAX_LAYERS {
            return true;
        }
        let start = map.au_start[layer];
        map.au_start[layer] = p.marker;
        keyframe = start && map.codec.is_keyframe(&p.payload);
        if map.wait_keyframe[layer] {
            if !keyframe {
                return false;
            }
            map.wait_keyframe[layer] = false;
        }
    }
    if !*live {
        *live = true;
        out.push(IngestOutput::Live(stream));
    }
    if p.kind == MediaKind::Video && map.codec == VideoCodec::H265 {
        keyframe &= !hevc_parameter_sets(map, stream, &p, keyframe, now, out);
    }
    let (seq, ts) = match p.kind {
        MediaKind::Video => {
            let reference = (map.video[layer].offsets.is_none())
                .then(|| map.video.iter().find_map(KindMap::reference))
                .flatten();
            map.video[layer].map(&p, now, reference)
        }
        MediaKind::Audio => map.audio.map(&p, now, None),
    };
    out.push(IngestOutput::Media {
        stream,
        packet: p,
        seq,
        ts,
        keyframe,
    });
    true
}

/// H265: keeps the parameter sets `p` carries, and when `p` starts a keyframe with a bare
/// IRAP slice (an encoder that sends its VPS, SPS and PPS once, or only before IDR
/// pictures, as GStreamer's `rtph265pay` does before CRA ones), sends the last ones in
/// front of it, as single NAL unit packets with its timestamp: a viewer, packager or
/// thumbnail that starts there can decode it (the SRT path does the same for MPEG-TS).
/// Returns whether it did (the first of them then carries the keyframe flag).
fn hevc_parameter_sets(
    map: &mut StreamMap,
    stream: usize,
    p: &IngestPacket,
    keyframe: bool,
    now: Instant,
    out: &mut Vec<IngestOutput>,
) -> bool {
    let layer = usize::from(p.layer);
    for nal in tern_proto::h265::payload_parameter_sets(&p.payload) {
        let i = usize::from(tern_proto::h265::nal_type(nal) - tern_proto::h265::VPS);
        let sets = map.hevc.get_or_insert_with(Default::default);
        if let Some(slot) = sets.get_mut(layer).and_then(|l| l.get_mut(i))
            && slot.as_slice() != nal
        {
            *slot = nal.to_vec();
        }
    }
    if !keyframe || !tern_proto::h265::payload_starts_bare_irap(&p.payload) {
        return false;
    }
    let Some(sets) = map.hevc.as_ref().and_then(|h| h.get(layer)) else {
        return false;
    };
    if sets.iter().any(Vec::is_empty) {
        return false;
    }
    let sets = sets.clone();
    let reference = (map.video[layer].offsets.is_none())
        .then(|| map.video.iter().find_map(KindMap::reference))
        .flatten();
    for (i, nal) in sets.iter().enumerate() {
        let extra = IngestPacket {
            marker: false,
            payload: Arc::from(nal.as_slice()),
            ..p.clone()
        };
        let (seq, ts) = map.video[layer].map_inserted(&extra, now, reference);
        out.push(IngestOutput::Media {
            stream,
            packet: extra,
            seq,
            ts,
            keyframe: i == 0,
        });
    }
    true
}

#[cfg(test)]
mod tests {
    //! Ingest driven on simulated time: publisher handover, the keyframe wait, and the
    //! sequence/timestamp rewriting that keeps a stream continuous across publishers.

    use super::*;

    const IDR: &[u8] = &[0x65, 0x88, 0x84];

    #[test]
    fn an_edge_upstream_is_a_publisher_of_its_own_kind_and_codec() {
        let mut ingest = Ingest::new(1, PublisherTimeouts::default());
        let (reply, mut rx) = oneshot::channel();
        let cmd = FrameCommand::Add {
            stream: 0,
            source: Source::Edge,
            codec: VideoCodec::Vp8,
            closed: Arc::new(AtomicBool::new(false)),
            keyframe: Arc::new(AtomicU8::new(0)),
            rids: Vec::new(),
            reply,
        };
        let mut out = Vec::new();
        assert!(ingest.frames(cmd, true, Instant::now(), &mut out).is_some());
        assert!(rx.try_recv().expect("replied").is_ok());
        assert_eq!(ingest.source(0), Source::Edge);
        assert!(
            !ingest.packages_from_frames(0),
            "an edge is packaged from the ring"
        );
        assert_eq!(ingest.maps[0].codec, VideoCodec::Vp8);
    }
    const SLICE: &[u8] = &[0x41, 0x9a, 0x02];

    /// An RTMP connection learns which layer wants a keyframe: one bit per layer, each
    /// layer coalesced on its own.
    #[test]
    fn rtmp_keyframe_requests_set_the_layer_bit() {
        let mut ingest = Ingest::new(1, PublisherTimeouts::default());
        let keyframe = Arc::new(AtomicU8::new(0));
        let (reply, _rx) = oneshot::channel();
        let cmd = FrameCommand::Add {
            stream: 0,
            source: Source::Rtmp,
            codec: VideoCodec::H264,
            closed: Arc::new(AtomicBool::new(false)),
            keyframe: keyframe.clone(),
            rids: ["h", "m", "l"].map(Box::<str>::from).to_vec(),
            reply,
        };
        let (now, mut out) = (Instant::now(), Vec::new());
        assert!(ingest.frames(cmd, true, now, &mut out).is_some());
        ingest.request_keyframe(0, 2, now, &mut out);
        assert_eq!(keyframe.swap(0, Ordering::Relaxed), 0b100);
        // Again within PLI_INTERVAL: coalesced; another layer is not.
        ingest.request_keyframe(0, 2, now + PLI_INTERVAL / 2, &mut out);
        ingest.request_keyframe(0, 0, now + PLI_INTERVAL / 2, &mut out);
        ingest.request_keyframe(0, 1, now + PLI_INTERVAL / 2, &mut out);
        assert_eq!(keyframe.swap(0, Ordering::Relaxed), 0b011);
        ingest.request_keyframe(0, 2, now + PLI_INTERVAL, &mut out);
        // A layer beyond MAX_LAYERS is ignored.
        ingest.request_keyframe(0, 7, now + PLI_INTERVAL, &mut out);
        assert_eq!(keyframe.load(Ordering::Relaxed), 0b100);
        assert!(out.is_empty(), "{out:?}");
    }

    fn packet(kind: MediaKind, seq: u64, rtp_ts: u64, payload: &[u8]) -> IngestPacket {
        IngestPacket {
            layer: 0,
            kind,
            seq,
            rtp_ts,
            marker: kind == MediaKind::Video,
            payload: payload.into(),
            capture_ntp: None,
        }
    }

    /// Takes stream 0's slot for an RTMP publisher; returns its id (or the refusal) and the
    /// flag the engine sets when it ends the publisher.
    fn add_rtmp(
        ingest: &mut Ingest,
        free: bool,
        now: Instant,
    ) -> (Result<PublisherId, AddError>, Arc<AtomicBool>) {
        let closed = Arc::new(AtomicBool::new(false));
        let (reply, mut rx) = oneshot::channel();
        let cmd = FrameCommand::Add {
            stream: 0,
            source: Source::Rtmp,
            codec: VideoCodec::H264,
            closed: closed.clone(),
            keyframe: Arc::new(AtomicU8::new(0)),
            rids: Vec::new(),
            reply,
        };
        let mut out = Vec::new();
        let installed = ingest.frames(cmd, free, now, &mut out);
        assert!(out.is_empty(), "taking a slot emits nothing: {out:?}");
        let res = rx.try_recv().expect("the reply is sent at once");
        assert_eq!(installed, res.ok());
        (res, closed)
    }

    /// Feeds an RTMP publisher's packets; returns what ingest emitted as (kind, seq, ts,
    /// keyframe) for media and markers for liveness.
    fn media(
        ingest: &mut Ingest,
        id: PublisherId,
        now: Instant,
        packets: Vec<IngestPacket>,
    ) -> Vec<String> {
        let mut out = Vec::new();
        assert_eq!(
            ingest.frames(FrameCommand::Media { id, packets }, true, now, &mut out),
            None
        );
        out.iter()
            .map(|o| match o {
                IngestOutput::Media {
                    stream,
                    packet,
                    seq,
                    ts,
                    keyframe,
                } => format!(
                    "{stream} {:?} seq {seq} ts {ts} key {keyframe}",
                    packet.kind
                ),
                IngestOutput::Live(s) => format!("live {s}"),
                IngestOutput::Gone { stream, reason } => {
                    format!("gone {stream}: {}", reason.as_str())
                }
                IngestOutput::Transmit(to, _) => format!("transmit {to}"),
            })
            .collect()
    }

    fn layer(layer: u8, seq: u64, rtp_ts: u64, payload: &[u8]) -> IngestPacket {
        IngestPacket {
            layer,
            ..packet(MediaKind::Video, seq, rtp_ts, payload)
        }
    }

    /// An H265 publisher that sends its parameter sets once (before its first IDR) gets them
    /// again in front of a later CRA picture that comes bare: three packets with its
    /// timestamp, numbered before it, the first one flagged as the keyframe's start; what
    /// follows is numbered on without a gap, and a keyframe that brings its own is left as it
    /// is.
    #[test]
    fn h265_parameter_sets_go_in_front_of_a_bare_irap_picture() {
        let t0 = Instant::now();
        let mut ingest = Ingest::new(1, PublisherTimeouts::default());
        let (reply, _rx) = oneshot::channel();
        let cmd = FrameCommand::Add {
            stream: 0,
            source: Source::Srt,
            codec: VideoCodec::H265,
            closed: Arc::new(AtomicBool::new(false)),
            keyframe: Arc::new(AtomicU8::new(0)),
            rids: Vec::new(),
            reply,
        };
        let mut out = Vec::new();
        let id = ingest
            .frames(cmd, true, t0, &mut out)
            .expect("the slot is free");
        let (vps, sps, pps) = (
            &[0x40, 0x01, 0x0c][..],
            &[0x42, 0x01, 0x01][..],
            &[0x44, 0x01, 0xc1][..],
        );
        let idr = &[0x26, 0x01, 0xaf][..];
        let cra = &[0x2a, 0x01, 0xaf][..];
        let trail = &[0x02, 0x01, 0xd0][..];
        let unmarked = |seq, ts, payload: &[u8]| IngestPacket {
            marker: false,
            ..packet(MediaKind::Video, seq, ts, payload)
        };
        let mut sent = |now, packets| {
            let mut out = Vec::new();
            ingest.frames(FrameCommand::Media { id, packets }, true, now, &mut out);
            out.iter()
                .filter_map(|o| match o {
                    IngestOutput::Media {
                        packet,
                        seq,
                        ts,
                        keyframe,
                        ..
                    } => Some((packet.payload[0], *seq, *ts, *keyframe)),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        // The first keyframe brings its own: nothing is added.
        let out = sent(
            t0,
            vec![
                unmarked(10, 1000, vps),
                unmarked(11, 1000, sps),
                unmarked(12, 1000, pps),
                packet(MediaKind::Video, 13, 1000, idr),
                packet(MediaKind::Video, 14, 4000, trail),
            ],
        );
        assert_eq!(
            out,
            [
                (0x40, 0, 0, true),
                (0x42, 1, 0, false),
                (0x44, 2, 0, false),
                (0x26, 3, 0, false),
                (0x02, 4, 3000, false),
            ]
        );
        // A bare CRA: the three go in front of it, and the numbering moves on by three.
        let out = sent(
            t0,
            vec![
                packet(MediaKind::Video, 15, 7000, cra),
                packet(MediaKind::Video, 16, 10_000, trail),
            ],
        );
        assert_eq!(
            out,
            [
                (0x40, 5, 6000, true),
                (0x42, 6, 6000, false),
                (0x44, 7, 6000, false),
                (0x2a, 8, 6000, false),
                (0x02, 9, 9000, false),
            ]
        );
    }

    #[test]
    fn simulcast_layers_wait_for_their_own_keyframes_and_share_one_timeline() {
        let t0 = Instant::now();
        let mut ingest = Ingest::new(1, PublisherTimeouts::default());
        let id = add_rtmp(&mut ingest, true, t0).0.expect("free");
        let mut sent = |now, packets| {
            let mut out = Vec::new();
            ingest.frames(FrameCommand::Media { id, packets }, true, now, &mut out);
            out.iter()
                .filter_map(|o| match o {
                    IngestOutput::Media {
                        packet, seq, ts, ..
                    } => Some((packet.layer, *seq, *ts)),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        // Layer 0 starts the timeline; layer 1's slice before its keyframe is dropped;
        // layer 1 shares layer 0's timestamp base (within a second of it): same offset.
        let out = sent(
            t0,
            vec![
                layer(0, 100, 90_000, IDR),
                layer(1, 7, 90_000, SLICE),
                layer(1, 8, 93_000, IDR),
                layer(0, 101, 93_000, SLICE),
            ],
        );
        assert_eq!(out, [(0, 0, 0), (1, 0, 3000), (0, 1, 3000)]);
        // Layer 2 with a base of its own is aligned by arrival: layer 0's newest stream
        // time plus the 100 ms since (9,000 ticks).
        let out = sent(t0 + Duration::from_millis(100), vec![layer(2, 1, 5, IDR)]);
        assert_eq!(out, [(2, 0, 3000 + 9000)]);
        // Each layer keeps its own numbering.
        let out = sent(
            t0 + Duration::from_millis(133),
            vec![layer(2, 2, 3005, SLICE), layer(1, 9, 96_000, SLICE)],
        );
        assert_eq!(out, [(2, 1, 15_000), (1, 1, 6000)]);
    }

    /// Samples are H264's: an SRT or RTSP publisher's H265 reaches the packagers (and the
    /// thumbnails) as ring packets.
    #[test]
    fn packagers_take_frames_from_rtmp_and_from_srt_and_rtsp_in_h264() {
        assert!(Source::Rtmp.packages_from_frames(VideoCodec::H264));
        for s in [Source::Srt, Source::Rtsp] {
            assert!(s.packages_from_frames(VideoCodec::H264), "{s}");
            assert!(!s.packages_from_frames(VideoCodec::H265), "{s}");
        }
        for s in [Source::Whip, Source::Edge] {
            assert!(!s.packages_from_frames(VideoCodec::H264), "{s}");
        }
    }

    #[test]
    fn a_second_publisher_continues_the_numbering_and_the_timeline_after_a_keyframe() {
        let t0 = Instant::now();
        let mut ingest = Ingest::new(1, PublisherTimeouts::default());
        let (a, a_closed) = add_rtmp(&mut ingest, true, t0);
        let a = a.expect("the slot is free");
        assert_eq!(ingest.source(0), Source::Rtmp);
        assert!(ingest.packages_from_frames(0));
        let out = media(
            &mut ingest,
            a,
            t0,
            vec![
                packet(MediaKind::Video, 1000, 500_000, IDR),
                packet(MediaKind::Video, 1001, 503_000, SLICE),
                packet(MediaKind::Audio, 7, 960, &[1, 2]),
            ],
        );
        assert_eq!(
            out,
            [
                "live 0",
                "0 Video seq 0 ts 0 key true",
                "0 Video seq 1 ts 3000 key false",
                "0 Audio seq 0 ts 0 key false",
            ]
        );

        let mut out = Vec::new();
        assert!(ingest.remove(a, LeftReason::Ended, &mut out));
        assert!(
            matches!(
                out[..],
                [IngestOutput::Gone {
                    stream: 0,
                    reason: LeftReason::Ended
                }]
            ),
            "{out:?}"
        );
        assert!(
            a_closed.load(Ordering::Relaxed),
            "the RTMP connection is told to close"
        );
        assert!(
            !ingest.remove(a, LeftReason::Ended, &mut out),
            "removing twice is a no-op"
        );
        assert_eq!(ingest.count(), 0);

        // Two seconds later another publisher arrives with its own numbering.
        let t1 = t0 + Duration::from_secs(2);
        let (b, _) = add_rtmp(&mut ingest, true, t1);
        let b = b.expect("the slot was freed");
        assert_ne!(a, b, "every publisher gets a new serial");
        let out = media(
            &mut ingest,
            b,
            t1,
            vec![
                packet(MediaKind::Video, 50, 10, SLICE),
                packet(MediaKind::Video, 51, 3010, IDR),
                packet(MediaKind::Video, 52, 6010, SLICE),
                packet(MediaKind::Audio, 90, 48_000, &[3]),
            ],
        );
        // Video before the first keyframe is dropped; then sequence numbers go on from
        // the first publisher's and timestamps advance by the wall-clock gap (2 s at
        // 90 kHz video, 48 kHz audio) plus one tick.
        assert_eq!(
            out,
            [
                "live 0",
                "0 Video seq 2 ts 183001 key true",
                "0 Video seq 3 ts 186001 key false",
                "0 Audio seq 1 ts 96001 key false",
            ]
        );
    }

    #[test]
    fn a_stream_takes_one_publisher_and_ignores_a_removed_ones_late_media() {
        let t0 = Instant::now();
        let mut ingest = Ingest::new(1, PublisherTimeouts::default());
        let (a, _) = add_rtmp(&mut ingest, true, t0);
        let a = a.expect("the slot is free");
        let (second, _) = add_rtmp(&mut ingest, true, t0);
        assert_eq!(second, Err(AddError::Busy));
        let (builtin, _) = add_rtmp(&mut ingest, false, t0);
        assert_eq!(
            builtin,
            Err(AddError::Busy),
            "a stream that is not free refuses"
        );

        let mut out = Vec::new();
        ingest.remove(a, LeftReason::Ended, &mut out);
        let (b, _) = add_rtmp(&mut ingest, true, t0);
        let b = b.expect("the slot was freed");
        let late = vec![packet(MediaKind::Video, 1, 0, IDR)];
        assert!(
            media(&mut ingest, a, t0, late).is_empty(),
            "the old publisher's packets are dropped"
        );
        let mine = vec![packet(MediaKind::Video, 9, 0, IDR)];
        assert_eq!(
            media(&mut ingest, b, t0, mine),
            ["live 0", "0 Video seq 0 ts 0 key true"]
        );
        let mut out = Vec::new();
        assert!(
            !ingest.remove(a, LeftReason::Ended, &mut out),
            "a stale id cannot end the new publisher"
        );
        assert_eq!(ingest.count(), 1);
    }

    /// Runs ingest's timers at `now` and describes what they emitted.
    fn timers(ingest: &mut Ingest, now: Instant) -> Vec<String> {
        let mut out = Vec::new();
        ingest.handle_timeouts(now, &mut out);
        out.iter()
            .map(|o| match o {
                IngestOutput::Gone { stream, reason } => {
                    format!("gone {stream}: {}", reason.as_str())
                }
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_publisher_that_stops_sending_media_is_ended_and_frees_its_stream() {
        let t0 = Instant::now();
        let media_timeout = Duration::from_secs(3);
        let timeouts = PublisherTimeouts {
            connect: Duration::from_secs(5),
            media: media_timeout,
        };
        let mut ingest = Ingest::new(1, timeouts);
        assert_eq!(ingest.next_timeout(), None, "no publisher, no timer");
        let (a, closed) = add_rtmp(&mut ingest, true, t0);
        let a = a.expect("the slot is free");
        // An RTMP publisher is connected when it takes the slot: its media clock starts.
        assert_eq!(ingest.next_timeout(), Some(t0 + media_timeout));

        // Media keeps it: each packet pushes the deadline on.
        let t1 = t0 + Duration::from_secs(2);
        media(
            &mut ingest,
            a,
            t1,
            vec![packet(MediaKind::Video, 1, 0, IDR)],
        );
        assert_eq!(ingest.next_timeout(), Some(t1 + media_timeout));
        assert!(
            timers(&mut ingest, t0 + media_timeout).is_empty(),
            "still sending"
        );
        assert_eq!(ingest.count(), 1);

        // Then silence: at the deadline it is ended, its connection told to close, and the
        // stream is free for the next publisher.
        let t2 = t1 + media_timeout;
        assert!(timers(&mut ingest, t2 - Duration::from_millis(1)).is_empty());
        assert_eq!(timers(&mut ingest, t2), ["gone 0: media timeout"]);
        assert!(closed.load(Ordering::Relaxed));
        assert_eq!(ingest.count(), 0);
        assert_eq!(ingest.next_timeout(), None);
        let (b, _) = add_rtmp(&mut ingest, true, t2);
        assert!(b.is_ok(), "the stream was freed");
    }
}
