//! A viewer↔client pair on simulated time: tern-rtc's lean server-side [`Viewer`] against
//! tern-rtc's lean receiving [`Client`], in one process, with datagrams carried in memory.
//!
//! The pair is what quinn-proto's `Pair` (`src/tests/util.rs`) and str0m's
//! `tests/common.rs` (`progress()`) are for those stacks: both ends, one clock that only the
//! test moves, and a network the test shapes (latency, loss, chosen drops). Nothing here
//! opens a socket or sleeps; the real clock is read once, for the base [`Instant`] every
//! simulated instant is an offset of.
//!
//! How the pair drives the two ends mirrors their real drivers, so that what the tests see
//! is what the server and the load tester see:
//!
//! - the viewer as tern-server's stream worker does (`media/worker/viewers.rs`,
//!   `media/worker/timers.rs`): STUN answered to the sender's address, DTLS and RTCP taken
//!   only from the nominated address, NACKs answered from the stream's ring through
//!   [`Viewer::may_retransmit`], kept NACKs offered again on each sweep
//!   ([`Viewer::due_resends`]), timers run when [`Viewer::poll_timeout`] says, each followed
//!   by [`Viewer::poll_sender_report`], and, once connected, the video started at the
//!   latest keyframe of its layer still in the ring (the keyframe cache);
//! - the client as tern-bench's worker does (`tern-bench/src/worker.rs`):
//!   [`Client::handle_input`] for every datagram, [`Client::handle_timeout`] when
//!   [`Client::poll_timeout`] is due, and [`Client::drain`] for what it sends.
//!
//! The offer/answer is the WHEP one: the client's `sdp::write_offer`, the server's
//! `sdp::negotiate` and `session::accept`, the client's `client::client_params`, with every
//! minted credential, SSRC and offset drawn from a seeded generator.
//!
//! Media comes from a [`Stream`] the test publishes into ([`Pair::frame`], [`Pair::play`]):
//! each payload carries its layer and source sequence number, so the test can tell which
//! source packet every received one was ([`Got`]).

#![allow(dead_code)]
#![allow(clippy::unwrap_used)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_pool::{BufferPool, PoolConfig};
use tern_proto::codec::MediaKind;
use tern_proto::sdp::{self, SessionDescription};
use tern_proto::{rtp, stun};
use tern_rtc::client::{Client, ClientOffer, ClientState, TrackStats, client_params};
use tern_rtc::session::{self, LocalInfo};
use tern_rtc::stream::{RingPacket, Stream};
use tern_rtc::viewer::{
    CloseReason, DtlsContext, PWD_LEN, UFRAG_LEN, Viewer, ViewerEvent, ViewerState, ViewerTimeouts,
};

/// The server's media address (TEST-NET-1, RFC 5737): the answer's host candidate.
pub const SERVER: SocketAddr = SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1)),
    10_000,
);
/// The client's address (TEST-NET-2).
pub const CLIENT: SocketAddr = SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(198, 51, 100, 7)),
    40_000,
);
/// The stream's RTCP CNAME.
pub const CNAME: &str = "tern-pair";
/// Time between two frames of [`Pair::play`] (30 frames a second).
pub const FRAME: Duration = Duration::from_millis(33);
/// RTP clock ticks per frame (90 kHz at 30 frames a second).
pub const FRAME_TICKS: u32 = 3_000;
/// tern-server's sweep (`media/worker.rs` `SWEEP`): how often kept NACKs are offered again.
pub const SWEEP: Duration = Duration::from_millis(20);
/// What tern-server adds to a payload's length when it asks a viewer's budget about a
/// retransmission (`media/worker/timers.rs` `RTP_OVERHEAD`).
const RTP_OVERHEAD: usize = 12 + 16 + 16 + 28;
/// NTP time (RFC 5905) of the base instant: 2023-11-14, any fixed value does.
const NTP_BASE: u64 = (3_908_900_000u64) << 32;
/// Steps at one instant before the pair calls it a livelock.
const MAX_STEPS_PER_INSTANT: u32 = 10_000;
/// Payload length of every published packet (its tag and filler).
const PAYLOAD: usize = 120;
/// H264 NAL headers the payloads start with: an IDR slice (the client counts a keyframe)
/// and a non-IDR slice.
const NAL_IDR: u8 = 0x65;
const NAL_SLICE: u8 = 0x41;

/// A small, seeded generator (SplitMix64): every minted value and every random loss comes
/// from it, so one seed replays a run.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// How the pair is set up.
#[derive(Debug, Clone)]
pub struct Config {
    /// Seeds the offer/answer's minted values, the client's transaction ids and SSRC, and
    /// random loss.
    pub seed: u64,
    /// One-way latency of each direction.
    pub latency: Duration,
    /// The viewer's timeouts (consent, connect, linger, SR cadence).
    pub timeouts: ViewerTimeouts,
    /// The simulcast layer the viewer is pinned to from its offer (`?layer=`), if any.
    pub pin: Option<u8>,
    /// Packets each video ring holds (every layer's has this length).
    pub video_ring: usize,
    /// Packets the audio ring holds.
    pub audio_ring: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            seed: 1,
            latency: Duration::from_millis(10),
            timeouts: ViewerTimeouts::default(),
            pin: None,
            video_ring: 512,
            audio_ring: 128,
        }
    }
}

/// What a datagram is, by its first octet (RFC 7983 demultiplexing) and, for RTP, its
/// clear header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Datagram {
    /// A STUN message (binding request or response).
    Stun,
    /// A DTLS record.
    Dtls,
    /// An SRTP packet: its SSRC and 16-bit sequence number (in the clear).
    Rtp {
        /// SSRC.
        ssrc: u32,
        /// Sequence number.
        seq: u16,
    },
    /// An SRTCP compound packet.
    Rtcp,
    /// Anything else.
    Other,
}

impl Datagram {
    /// Classifies `d`.
    pub fn of(d: &[u8]) -> Self {
        match d.first() {
            Some(0..=3) => Datagram::Stun,
            Some(20..=63) => Datagram::Dtls,
            Some(128..=191) if rtp::is_rtcp(d) => Datagram::Rtcp,
            Some(128..=191) => match rtp::parse_header_unpadded(d) {
                Ok(h) => Datagram::Rtp {
                    ssrc: h.ssrc,
                    seq: h.sequence,
                },
                Err(_) => Datagram::Other,
            },
            _ => Datagram::Other,
        }
    }
}

/// A datagram on its way.
struct InFlight {
    at: Instant,
    from: SocketAddr,
    to: SocketAddr,
    data: Vec<u8>,
}

/// Decides whether to drop a datagram (true: dropped).
pub type DropRule = Box<dyn FnMut(&[u8]) -> bool>;

/// One direction of the emulated network: a constant latency (so it keeps the order),
/// random loss drawn from the pair's seeded generator, and an optional rule that drops the
/// datagrams it picks.
pub struct Link {
    /// One-way latency.
    pub latency: Duration,
    /// Fraction of datagrams lost at random (0: none).
    pub loss: f64,
    /// Drops the datagrams it returns true for.
    pub drop: Option<DropRule>,
    queue: VecDeque<InFlight>,
    /// Datagrams put on the link.
    pub sent: u64,
    /// Datagrams the link dropped (random loss and the rule).
    pub dropped: u64,
}

impl Link {
    fn new(latency: Duration) -> Self {
        Link {
            latency,
            loss: 0.0,
            drop: None,
            queue: VecDeque::new(),
            sent: 0,
            dropped: 0,
        }
    }

    /// Sends `data`, unless the rule or the random loss takes it.
    fn send(&mut self, now: Instant, from: SocketAddr, to: SocketAddr, data: &[u8], rng: &mut Rng) {
        self.sent += 1;
        let dropped_by_rule = self.drop.as_mut().is_some_and(|f| f(data));
        if dropped_by_rule || (self.loss > 0.0 && rng.unit() < self.loss) {
            self.dropped += 1;
            return;
        }
        self.queue.push_back(InFlight {
            at: now + self.latency,
            from,
            to,
            data: data.to_vec(),
        });
    }

    fn next_at(&self) -> Option<Instant> {
        self.queue.front().map(|d| d.at)
    }

    fn pop_due(&mut self, now: Instant) -> Option<InFlight> {
        if self.queue.front().is_some_and(|d| d.at <= now) {
            self.queue.pop_front()
        } else {
            None
        }
    }
}

/// A media packet as the client took it (new: not a duplicate), with the source packet it
/// was made from (read from the payload's tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Got {
    /// When it arrived.
    pub at: Instant,
    /// Video or audio.
    pub kind: MediaKind,
    /// The SSRC it came on.
    pub ssrc: u32,
    /// The client's extended sequence number for it.
    pub seq: u64,
    /// The client's extended RTP timestamp for it.
    pub rtp_ts: u64,
    /// RTP marker bit.
    pub marker: bool,
    /// The source layer (from the tag).
    pub layer: u8,
    /// The source sequence number (from the tag).
    pub src: u64,
    /// The payload starts an IDR slice.
    pub keyframe: bool,
}

/// One NACKed sequence number, as the viewer mapped it and the pair answered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nacked {
    /// When the NACK was read.
    pub at: Instant,
    /// Track kind.
    pub kind: MediaKind,
    /// The ring's layer.
    pub layer: u8,
    /// Source sequence number.
    pub src: u64,
    /// Still in the ring when asked.
    pub in_ring: bool,
    /// The viewer's budget allowed it and it was written again.
    pub resent: bool,
}

/// A chosen loss: the next `times` transmissions of a source packet to the client are
/// lost (first sends and retransmissions alike).
#[derive(Debug, Clone, Copy)]
struct Lose {
    kind: MediaKind,
    layer: u8,
    src: u64,
    times: u32,
}

/// The ICE side of a client, driven by the pair apart from [`Client`]: binding requests
/// with the credentials it is given, every `interval`, from `from`, with USE-CANDIDATE.
/// [`Client`] has no way to change its ICE credentials (no ICE restart), so a test of a
/// restart uses this for the checks with the new ones, as the client's agent would.
pub struct IceAgent {
    /// USERNAME: the server's ufrag, `:`, ours.
    pub user: String,
    /// The server's password (signs our requests and its responses).
    pub pwd: String,
    /// Where the requests come from.
    pub from: SocketAddr,
    /// Time between requests.
    pub interval: Duration,
    next: Instant,
    tid: [u8; 12],
    counter: u64,
    /// Requests sent.
    pub sent: u64,
    /// Signed success responses to our latest request.
    pub answered: u64,
    /// Responses to our transaction that failed their integrity check.
    pub bad: u64,
    /// When the latest request was sent.
    pub last_sent: Option<Instant>,
}

impl IceAgent {
    /// An agent that sends its first request at `now`.
    pub fn new(
        user: String,
        pwd: String,
        from: SocketAddr,
        interval: Duration,
        now: Instant,
    ) -> Self {
        IceAgent {
            user,
            pwd,
            from,
            interval,
            next: now,
            tid: [0; 12],
            counter: 0,
            sent: 0,
            answered: 0,
            bad: 0,
            last_sent: None,
        }
    }

    fn request(&mut self, now: Instant, rng: &mut Rng) -> Vec<u8> {
        self.counter += 1;
        let r = rng.next_u64();
        self.tid[..8].copy_from_slice(&r.to_le_bytes());
        self.tid[8..].copy_from_slice(&(self.counter as u32).to_le_bytes());
        let mut buf = [0u8; 256];
        let n = stun::write_binding_request(
            &mut buf,
            &self.tid,
            self.user.as_bytes(),
            self.pwd.as_bytes(),
            (126 << 24) | (65_535 << 8) | 255,
            Some(r),
            true,
        )
        .unwrap();
        self.sent += 1;
        self.last_sent = Some(now);
        self.next = now + self.interval;
        buf[..n].to_vec()
    }

    /// Whether `d` is a response to our latest request; counts it.
    fn take_response(&mut self, d: &[u8]) -> bool {
        let Ok(msg) = stun::Message::parse(d) else {
            return false;
        };
        if msg.class() == stun::Class::Request || msg.transaction_id() != &self.tid {
            return false;
        }
        if msg.class() == stun::Class::Success && msg.check_integrity(self.pwd.as_bytes()) {
            self.answered += 1;
        } else {
            self.bad += 1;
        }
        true
    }
}

/// The ICE credentials of both ends, as the offer/answer set them.
#[derive(Debug, Clone)]
pub struct Credentials {
    /// The server's (viewer's) ufrag.
    pub server_ufrag: String,
    /// The server's password.
    pub server_pwd: String,
    /// The client's ufrag.
    pub client_ufrag: String,
    /// The client's password.
    pub client_pwd: String,
}

impl Credentials {
    /// USERNAME of a binding request from the client (RFC 8445 §7.2.2: the receiver's ufrag
    /// first).
    pub fn user(&self) -> String {
        format!("{}:{}", self.server_ufrag, self.client_ufrag)
    }
}

/// The pair: a viewer, a client, the network between them, the stream and the clock.
pub struct Pair {
    /// The simulated now.
    pub now: Instant,
    /// The base instant (time zero of the run).
    pub start: Instant,
    /// The server side.
    pub viewer: Viewer,
    /// The client side.
    pub client: Client,
    /// The stream the viewer is sent from.
    pub stream: Stream,
    /// Client → viewer.
    pub to_viewer: Link,
    /// Viewer → client.
    pub to_client: Link,
    /// Where the client is now (a test may move it: a network change).
    pub client_addr: SocketAddr,
    /// The credentials of the offer/answer (not changed by an ICE restart).
    pub creds: Credentials,
    /// A separate ICE agent, if the test runs one (see [`IceAgent`]).
    pub agent: Option<IceAgent>,
    /// Every new media packet the client took, in order.
    pub got: Vec<Got>,
    /// Every NACKed sequence number the viewer mapped, and what became of it.
    pub nacked: Vec<Nacked>,
    /// Keyframe requests: the viewer's (PLI/FIR), and the pair's own on start and on layer
    /// moves (the server asks the publisher then).
    pub keyframe_requests: u64,
    /// Binding requests the viewer refused, with the reason and when.
    pub refused: Vec<(Instant, String)>,
    /// Binding requests the viewer answered, with their source address.
    pub answered: Vec<(Instant, SocketAddr)>,
    /// Binding requests the client itself sent (not its agent's).
    pub client_checks: u64,
    /// DTLS records sent towards the viewer and towards the client.
    pub dtls_to_viewer: u64,
    /// See `dtls_to_viewer`.
    pub dtls_to_client: u64,
    /// SRTCP packets delivered to the viewer, and the sender reports it wrote.
    pub rtcp_to_viewer: u64,
    /// See `rtcp_to_viewer`.
    pub sender_reports: u64,
    /// Datagrams for an address where the client is not (it moved, or ICE points elsewhere).
    pub misdirected: u64,
    /// Media transmissions the chosen losses took.
    pub lost_on_purpose: u64,
    /// When the viewer connected, and when it closed (and why).
    pub connected_at: Option<Instant>,
    /// See `connected_at`.
    pub closed: Option<(Instant, CloseReason)>,
    server_ctx: DtlsContext,
    pool: BufferPool,
    rng: Rng,
    lose: Vec<Lose>,
    /// Next source sequence number of each video layer, and of audio.
    next_video: [u64; 3],
    next_audio: u64,
    /// Frames published by [`Pair::play`] so far (the RTP clock of the source).
    frames: u64,
    /// When kept NACKs are offered again (one sweep after they were kept).
    next_sweep: Option<Instant>,
}

impl Pair {
    /// A pair after offer/answer, before any packet: the client starts checking at once.
    pub fn new(cfg: Config) -> Self {
        // The one read of the real clock: the base every simulated instant is an offset of.
        let start = Instant::now();
        let mut rng = Rng::new(cfg.seed);
        let server_ctx = DtlsContext::generate().unwrap();
        let client_ctx = Arc::new(DtlsContext::generate().unwrap());
        let mut uf = [0u8; 8];
        let mut pw = [0u8; 24];
        session::random_chars(&mut uf, &mut || rng.next_u64());
        session::random_chars(&mut pw, &mut || rng.next_u64());
        let client_ufrag = String::from_utf8(uf.to_vec()).unwrap();
        let client_pwd = String::from_utf8(pw.to_vec()).unwrap();
        let client_offer = ClientOffer {
            ufrag: client_ufrag.clone(),
            pwd: client_pwd.clone(),
            rtcp: true,
            ntp_base: (start, NTP_BASE),
        };
        let offer = sdp::write_offer(&sdp::OfferParams {
            ice_ufrag: &client_ufrag,
            ice_pwd: &client_pwd,
            fingerprint_sha256: client_ctx.fingerprint(),
            video: true,
            audio: true,
            abs_capture_time: true,
            all_video: false,
        });
        let sd = SessionDescription::parse(&offer).unwrap();
        let neg = sdp::negotiate(&sd).unwrap();
        let accepted = session::accept(
            &sd,
            &neg,
            &LocalInfo {
                fingerprint: server_ctx.fingerprint(),
                candidate_ips: &[SERVER.ip()],
                candidate_port: SERVER.port(),
                cname: CNAME,
            },
            &mut || rng.next_u64(),
        );
        let mut vp = accepted.params;
        vp.pin = cfg.pin;
        vp.timeouts = cfg.timeouts;
        let creds = Credentials {
            server_ufrag: String::from_utf8(vp.local_ufrag.to_vec()).unwrap(),
            server_pwd: String::from_utf8(vp.local_pwd.to_vec()).unwrap(),
            client_ufrag,
            client_pwd,
        };
        let cp = client_params(&accepted.answer, &client_offer).unwrap();
        assert_eq!(cp.server, SERVER, "the answer's candidate");
        let viewer = Viewer::new(vp, start);
        let seed = rng.next_u64();
        let client = Client::new(cp, client_ctx, start, seed);
        Pair {
            now: start,
            start,
            viewer,
            client,
            stream: Stream::new(cfg.video_ring, cfg.audio_ring),
            to_viewer: Link::new(cfg.latency),
            to_client: Link::new(cfg.latency),
            client_addr: CLIENT,
            creds,
            agent: None,
            got: Vec::new(),
            nacked: Vec::new(),
            keyframe_requests: 0,
            refused: Vec::new(),
            answered: Vec::new(),
            client_checks: 0,
            dtls_to_viewer: 0,
            dtls_to_client: 0,
            rtcp_to_viewer: 0,
            sender_reports: 0,
            misdirected: 0,
            lost_on_purpose: 0,
            connected_at: None,
            closed: None,
            server_ctx,
            pool: BufferPool::new(PoolConfig::packets("pair")).unwrap(),
            rng,
            lose: Vec::new(),
            next_video: [1_000, 20_000, 40_000],
            next_audio: 60_000,
            frames: 0,
            next_sweep: None,
        }
    }

    /// A pair with the default [`Config`] and `seed`, connected (see [`Pair::connect`]).
    pub fn connected(seed: u64) -> Self {
        let mut p = Pair::new(Config {
            seed,
            ..Config::default()
        });
        p.connect();
        p
    }

    /// Runs until ICE and DTLS are done on both ends and the viewer has dropped its DTLS
    /// engine (the client's first SRTCP proved it holds the keys); at most 5 simulated
    /// seconds.
    pub fn connect(&mut self) {
        let done = self.run_until(Duration::from_secs(5), |p| {
            p.viewer.state() == ViewerState::Connected
                && p.client.state() == ClientState::Connected
                && !p.viewer.has_handshake()
        });
        assert!(
            done,
            "not connected: viewer {:?}, client {:?}",
            self.viewer.state(),
            self.client.state()
        );
    }

    /// Simulated time since the start.
    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    /// The client's statistics of its video track.
    pub fn video(&self) -> TrackStats {
        self.client
            .track(MediaKind::Video)
            .cloned()
            .unwrap_or_default()
    }

    /// The video packets the client took.
    pub fn got_video(&self) -> Vec<Got> {
        self.got
            .iter()
            .filter(|g| g.kind == MediaKind::Video)
            .copied()
            .collect()
    }

    /// Makes the next `times` transmissions of source packet (`kind`, `layer`, `src`) to the
    /// client be lost.
    pub fn lose(&mut self, kind: MediaKind, layer: u8, src: u64, times: u32) {
        self.lose.push(Lose {
            kind,
            layer,
            src,
            times,
        });
    }

    /// The source sequence number the next video packet of `layer` will have.
    pub fn next_video_seq(&self, layer: u8) -> u64 {
        self.next_video[usize::from(layer)]
    }

    /// Frames [`Pair::play`] has published so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// NTP time of `at` (the clock the source stamps capture times with).
    pub fn ntp(&self, at: Instant) -> u64 {
        let d = at.saturating_duration_since(self.start);
        let frac = (u64::from(d.subsec_nanos()) << 32) / 1_000_000_000;
        NTP_BASE.wrapping_add(d.as_secs() << 32).wrapping_add(frac)
    }

    /// A ring packet of `kind` and `layer` with source number `seq`, its payload tagged with
    /// both (see [`Got`]) and starting an IDR slice when `idr`; not a frame's last packet
    /// nor a keyframe's first until the caller says so.
    fn packet(&self, kind: MediaKind, layer: u8, seq: u64, rtp_ts: u32, idr: bool) -> RingPacket {
        let mut buf = self.pool.alloc(PAYLOAD);
        buf[0] = match kind {
            MediaKind::Video if idr => NAL_IDR,
            MediaKind::Video => NAL_SLICE,
            MediaKind::Audio => 0xfc,
        };
        buf[1] = layer;
        buf[2..10].copy_from_slice(&seq.to_le_bytes());
        for (i, b) in buf[10..].iter_mut().enumerate() {
            *b = i as u8;
        }
        RingPacket {
            kind,
            layer,
            seq,
            rtp_ts,
            marker: false,
            keyframe: false,
            capture_ntp: self.ntp(self.now),
            payload: buf.freeze(),
        }
    }

    /// Publishes one video frame of `packets` packets on `layer`, stamped `rtp_ts`, now: into
    /// the ring, then to the viewer (as the server's fan-out does). Returns the source
    /// numbers of its packets.
    pub fn frame(&mut self, layer: u8, keyframe: bool, packets: usize, rtp_ts: u32) -> Vec<u64> {
        let mut seqs = Vec::with_capacity(packets);
        for i in 0..packets {
            let seq = self.next_video[usize::from(layer)];
            self.next_video[usize::from(layer)] += 1;
            let mut pkt = self.packet(MediaKind::Video, layer, seq, rtp_ts, keyframe);
            pkt.marker = i + 1 == packets;
            pkt.keyframe = keyframe && i == 0;
            self.publish(pkt);
            seqs.push(seq);
        }
        seqs
    }

    /// Publishes one audio packet stamped `rtp_ts`, now.
    pub fn audio(&mut self, rtp_ts: u32) -> u64 {
        let seq = self.next_audio;
        self.next_audio += 1;
        let mut pkt = self.packet(MediaKind::Audio, 0, seq, rtp_ts, false);
        pkt.marker = true;
        self.publish(pkt);
        seq
    }

    /// Stores `pkt` in the stream and sends it to the viewer, live.
    pub fn publish(&mut self, pkt: RingPacket) {
        assert!(self.stream.push(pkt.clone()), "ring refused {}", pkt.seq);
        self.send_media(&pkt);
        self.settle();
    }

    /// Publishes `frames` frames at [`FRAME`] intervals, one per layer of `layers` each
    /// time, and runs the pair between them. Frame numbers continue across calls; a layer's
    /// frame `f` is a keyframe when `f >= phase` and `(f - phase) % gop == 0`.
    pub fn play(&mut self, frames: u64, layers: &[LayerPlan]) {
        for _ in 0..frames {
            let f = self.frames;
            let ts = (f as u32).wrapping_mul(FRAME_TICKS);
            for l in layers {
                let key = f >= l.phase && (f - l.phase).is_multiple_of(l.gop);
                self.frame(l.layer, key, l.packets, ts);
            }
            self.frames += 1;
            let next = self.now + FRAME;
            self.run_to(next);
        }
    }

    /// Writes `pkt` for the viewer (nothing when it does not take it) and puts it on the
    /// link, unless a chosen loss takes it.
    fn send_media(&mut self, pkt: &RingPacket) -> bool {
        let Some(to) = self.viewer.remote_addr() else {
            return false;
        };
        let mut out = [0u8; 1500];
        let n = match self.viewer.write_media(pkt, &mut out) {
            Ok(Some(n)) => n,
            Ok(None) => return false,
            Err(e) => panic!("write_media: {e}"),
        };
        if let Some(l) = self
            .lose
            .iter_mut()
            .find(|l| l.times > 0 && l.kind == pkt.kind && l.layer == pkt.layer && l.src == pkt.seq)
        {
            l.times -= 1;
            self.lost_on_purpose += 1;
            return true;
        }
        self.to_client
            .send(self.now, SERVER, to, &out[..n], &mut self.rng);
        true
    }

    /// The viewer's video starts at the latest keyframe of its layer still in the ring, as
    /// tern-server's `start_viewer` does (without its pacing: the whole GOP at once); with
    /// none held it waits for the next one, which is asked for.
    fn start_viewer(&mut self) {
        let layer = self.viewer.target_layer();
        let from = self
            .stream
            .ring_of(MediaKind::Video, layer)
            .and_then(|r| r.last_keyframe());
        let Some(from) = from else {
            self.keyframe_requests += 1;
            return;
        };
        let pkts: Vec<RingPacket> = self
            .stream
            .ring_of(MediaKind::Video, layer)
            .map(|r| r.range_from(from).cloned().collect())
            .unwrap_or_default();
        for p in &pkts {
            self.send_media(p);
        }
    }

    /// Moves the viewer to `layer` at its next keyframe (pinned or not), as tern-server's
    /// `set_layer` does: a keyframe of that layer is asked for when it is not the one sent.
    pub fn set_layer(&mut self, layer: u8, pin: bool) {
        self.viewer.set_layer(layer, pin);
        if self.viewer.video_layer().is_some_and(|l| l != layer) {
            self.keyframe_requests += 1;
        }
    }

    /// A datagram from the client (or its agent) reaches the viewer.
    fn viewer_input(&mut self, d: InFlight) {
        let InFlight { from, mut data, .. } = d;
        match Datagram::of(&data) {
            Datagram::Stun => {
                let Ok(msg) = stun::Message::parse(&data) else {
                    self.refused.push((self.now, "not STUN".into()));
                    return;
                };
                let mut out = [0u8; 256];
                match self.viewer.handle_stun(self.now, &msg, from, &mut out) {
                    Ok(n) => {
                        self.answered.push((self.now, from));
                        self.to_client
                            .send(self.now, SERVER, from, &out[..n], &mut self.rng);
                    }
                    Err(e) => self.refused.push((self.now, e.to_string())),
                }
            }
            // DTLS and RTCP only from the nominated address (the worker's `confirmed`).
            _ if self.viewer.remote_addr() != Some(from) => {}
            Datagram::Dtls => {
                let mut flights: Vec<Vec<u8>> = Vec::new();
                let _ = self
                    .viewer
                    .handle_dtls(self.now, &data, &self.server_ctx, &mut |p| {
                        flights.push(p.to_vec())
                    });
                for f in &flights {
                    self.dtls_to_client += 1;
                    self.to_client
                        .send(self.now, SERVER, from, f, &mut self.rng);
                }
            }
            Datagram::Rtcp => {
                self.rtcp_to_viewer += 1;
                let mut nacks = Vec::new();
                let mut keyframe = false;
                let _ = self
                    .viewer
                    .handle_rtcp(self.now, &mut data, &mut |ev| match ev {
                        ViewerEvent::Nack {
                            kind,
                            layer,
                            seq,
                            out,
                        } => nacks.push((kind, layer, seq, out)),
                        ViewerEvent::KeyframeRequest => keyframe = true,
                    });
                if keyframe {
                    self.keyframe_requests += 1;
                }
                self.retransmit(&nacks);
            }
            Datagram::Rtp { .. } | Datagram::Other => {}
        }
        self.after_io();
    }

    /// Resends each NACKed packet still in the ring, within the viewer's budget (the
    /// worker's `retransmit`).
    fn retransmit(&mut self, nacks: &[(MediaKind, u8, u64, u16)]) {
        for &(kind, layer, seq, out) in nacks {
            let p = self
                .stream
                .ring_of(kind, layer)
                .and_then(|r| r.get(seq))
                .cloned();
            let size = p.as_ref().map(|p| p.payload.len() + RTP_OVERHEAD);
            let ok = self.viewer.may_retransmit(kind, seq, out, size, self.now);
            let resent = match p.filter(|_| ok) {
                Some(p) => self.send_media(&p),
                None => false,
            };
            self.nacked.push(Nacked {
                at: self.now,
                kind,
                layer,
                src: seq,
                in_ring: size.is_some(),
                resent,
            });
        }
        if self.viewer.has_due_resends() && self.next_sweep.is_none() {
            self.next_sweep = Some(self.now + SWEEP);
        }
    }

    /// After input or timers: a viewer that just connected starts its video; one that
    /// closed is noted.
    fn after_io(&mut self) {
        match self.viewer.state() {
            ViewerState::Connected if self.connected_at.is_none() => {
                self.connected_at = Some(self.now);
                self.start_viewer();
            }
            ViewerState::Closed(reason) if self.closed.is_none() => {
                self.closed = Some((self.now, reason));
            }
            _ => {}
        }
    }

    /// A datagram from the viewer reaches the client's network.
    fn client_input(&mut self, d: InFlight) {
        let InFlight { to, mut data, .. } = d;
        if let Some(a) = self.agent.as_mut()
            && to == a.from
            && a.take_response(&data)
        {
            return;
        }
        if to != self.client_addr {
            self.misdirected += 1;
            return;
        }
        let rtp_ssrc = match Datagram::of(&data) {
            Datagram::Rtp { ssrc, .. } => Some(ssrc),
            _ => None,
        };
        if let Some(r) = self.client.handle_input(self.now, &mut data)
            && let Some(ssrc) = rtp_ssrc
        {
            let payload = &data[r.payload.clone()];
            let src = payload
                .get(2..10)
                .map_or(u64::MAX, |b| u64::from_le_bytes(b.try_into().unwrap()));
            self.got.push(Got {
                at: self.now,
                kind: r.kind,
                ssrc,
                seq: r.seq,
                rtp_ts: r.rtp_ts,
                marker: r.marker,
                layer: payload.get(1).copied().unwrap_or(u8::MAX),
                src,
                keyframe: payload.first() == Some(&NAL_IDR),
            });
        }
    }

    /// Runs the viewer's timers when due, then its sender report (the worker's sweep).
    fn viewer_timers(&mut self) {
        if self.next_sweep.is_some_and(|t| t <= self.now) {
            self.next_sweep = None;
            let mut due = Vec::new();
            self.viewer
                .due_resends(self.now, &mut |kind, layer, seq, out| {
                    due.push((kind, layer, seq, out))
                });
            self.retransmit(&due);
        }
        let due = self
            .viewer
            .poll_timeout()
            .is_some_and(|(t, _)| t <= self.now);
        if !due {
            return;
        }
        let mut flights: Vec<Vec<u8>> = Vec::new();
        self.viewer
            .handle_timeout(self.now, &mut |p| flights.push(p.to_vec()));
        let mut out = [0u8; 512];
        let sr = self.viewer.poll_sender_report(self.now, CNAME, &mut out);
        if let Some(to) = self.viewer.remote_addr() {
            for f in &flights {
                self.dtls_to_client += 1;
                self.to_client.send(self.now, SERVER, to, f, &mut self.rng);
            }
            if let Some(n) = sr {
                self.sender_reports += 1;
                self.to_client
                    .send(self.now, SERVER, to, &out[..n], &mut self.rng);
            }
        }
        self.after_io();
    }

    /// The client's output onto its link.
    fn drain_client(&mut self) {
        let mut out: Vec<Vec<u8>> = Vec::new();
        self.client.drain(&mut |d| out.push(d.to_vec()));
        let from = self.client_addr;
        for d in &out {
            match Datagram::of(d) {
                Datagram::Dtls => self.dtls_to_viewer += 1,
                Datagram::Stun => self.client_checks += 1,
                _ => {}
            }
            self.to_viewer
                .send(self.now, from, SERVER, d, &mut self.rng);
        }
    }

    /// Handles everything due at `self.now` until nothing more is: datagrams, both ends'
    /// timers, the agent's checks.
    pub fn settle(&mut self) {
        for _ in 0..MAX_STEPS_PER_INSTANT {
            let mut moved = false;
            self.drain_client();
            while let Some(d) = self.to_viewer.pop_due(self.now) {
                self.viewer_input(d);
                moved = true;
            }
            while let Some(d) = self.to_client.pop_due(self.now) {
                self.client_input(d);
                moved = true;
            }
            if self.client.poll_timeout().is_some_and(|t| t <= self.now) {
                self.client.handle_timeout(self.now);
            }
            self.viewer_timers();
            if let Some(a) = self.agent.as_mut()
                && a.next <= self.now
            {
                let req = a.request(self.now, &mut self.rng);
                let from = a.from;
                self.to_viewer
                    .send(self.now, from, SERVER, &req, &mut self.rng);
            }
            self.drain_client();
            let due_now = self.next_event().is_some_and(|t| t <= self.now);
            if !moved && !due_now {
                return;
            }
        }
        panic!(
            "livelock at {:?}: viewer {:?} client {:?}",
            self.elapsed(),
            self.viewer.poll_timeout(),
            self.client.poll_timeout()
        );
    }

    /// The soonest instant something is due: a datagram arrives, a timer of either end
    /// fires, the agent checks, kept NACKs are offered again.
    pub fn next_event(&self) -> Option<Instant> {
        [
            self.to_viewer.next_at(),
            self.to_client.next_at(),
            self.client.poll_timeout(),
            self.viewer.poll_timeout().map(|(t, _)| t),
            self.agent.as_ref().map(|a| a.next),
            self.next_sweep,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// One step (str0m's `progress()`): moves the clock to the next event, if it is not
    /// after `limit`, and handles what is due then. False when nothing is due by `limit`.
    pub fn progress(&mut self, limit: Instant) -> bool {
        match self.next_event() {
            Some(t) if t <= limit => {
                self.now = self.now.max(t);
                self.settle();
                true
            }
            _ => false,
        }
    }

    /// Runs every event up to `t`, then sets the clock to `t`.
    pub fn run_to(&mut self, t: Instant) {
        self.settle();
        while self.progress(t) {}
        self.now = self.now.max(t);
        self.settle();
    }

    /// Runs for `d` of simulated time.
    pub fn run_for(&mut self, d: Duration) {
        let t = self.now + d;
        self.run_to(t);
    }

    /// Runs until `done` holds, checked after each step, for at most `limit` of simulated
    /// time. Returns whether it held.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Pair) -> bool) -> bool {
        let end = self.now + limit;
        self.settle();
        loop {
            if done(self) {
                return true;
            }
            if !self.progress(end) {
                self.now = end;
                self.settle();
                return done(self);
            }
        }
    }

    /// A binding request signed with `pwd` as USERNAME `user`, from `from`, handed to the
    /// viewer at once (not over the link): its answer, or why it was refused.
    pub fn check_now(
        &mut self,
        user: &str,
        pwd: &str,
        from: SocketAddr,
    ) -> Result<Vec<u8>, String> {
        let mut a = IceAgent::new(
            user.into(),
            pwd.into(),
            from,
            Duration::from_secs(1),
            self.now,
        );
        let req = a.request(self.now, &mut self.rng);
        let msg = stun::Message::parse(&req).unwrap();
        let mut out = [0u8; 256];
        self.viewer
            .handle_stun(self.now, &msg, from, &mut out)
            .map(|n| out[..n].to_vec())
            .map_err(|e| e.to_string())
    }

    /// Fresh ICE credentials for the viewer, from the seeded generator.
    pub fn mint_credentials(&mut self) -> ([u8; UFRAG_LEN], [u8; PWD_LEN]) {
        let mut uf = [0u8; UFRAG_LEN];
        let mut pw = [0u8; PWD_LEN];
        let rng = &mut self.rng;
        session::random_chars(&mut uf, &mut || rng.next_u64());
        session::random_chars(&mut pw, &mut || rng.next_u64());
        (uf, pw)
    }

    /// A random number from the pair's seeded generator.
    pub fn random(&mut self) -> u64 {
        self.rng.next_u64()
    }
}

/// One video layer of [`Pair::play`].
#[derive(Debug, Clone, Copy)]
pub struct LayerPlan {
    /// The layer.
    pub layer: u8,
    /// Frames between keyframes.
    pub gop: u64,
    /// The frame of the first keyframe.
    pub phase: u64,
    /// Packets per frame.
    pub packets: usize,
}

impl LayerPlan {
    /// Layer `layer`, a keyframe every `gop` frames from frame `phase`, 2 packets a frame.
    pub const fn new(layer: u8, gop: u64, phase: u64) -> Self {
        LayerPlan {
            layer,
            gop,
            phase,
            packets: 2,
        }
    }
}

/// Whether `got` numbers its packets one after another (no gap, no repeat, in order).
pub fn continuous(got: &[Got]) -> bool {
    got.windows(2).all(|w| w[1].seq == w[0].seq + 1)
}
