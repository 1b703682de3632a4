//! Acceptance test of the core issue: many WebRTC viewers of one stream over loopback, each
//! an independent client (str0m as offerer, RTP mode), every viewer decrypts every packet
//! and sees no sequence gaps.
//!
//! One thread drives all viewers: each has its own UDP socket (with a raised `SO_RCVBUF`),
//! registered with one `mio::Poll`; every datagram goes through `Rtc::handle_input` followed
//! by a `poll_output` loop. HTTP (WHEP POST) runs on connector threads in batches.
//!
//! What is checked, per viewer and per received SSRC:
//! - **decrypted**: every RTP datagram that reached the socket after `Connected` (by SSRC and
//!   sequence number, RTX payload types aside) comes out of str0m as `Event::RtpPacket`;
//!   str0m drops packets that fail SRTP authentication without an event, so this is the
//!   SRTP-failure check.
//! - **no gaps**: between the first and the last sequence number received by the end of the
//!   streaming window, every sequence number arrives by the end of a short grace period
//!   (retransmissions count).
//! - **rate**: video ≥ 20 packets/s and audio ≥ 45 packets/s over the window.
//!
//! `TERN_VIEWERS` and `TERN_SECONDS` override 200 viewers / 30 s for the big test.

use crate::common;

use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Mutex;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::UdpSocket as MioUdpSocket;
use mio::{Events, Interest, Poll, Token};
use socket2::{Domain, Protocol as SockProtocol, Socket, Type};
use str0m::change::{SdpAnswer, SdpPendingOffer};
use str0m::media::{Direction, MediaKind};
use str0m::net::{Protocol, Receive};
use str0m::rtp::{Extension, RtpPacket};
use str0m::{Candidate, Event, IceConnectionState, Input, Output, Rtc, RtcConfig};

use common::{Server, http_delete, http_post};

/// The WHEP endpoint of the demo stream.
const WHEP_PATH: &str = "/live/demo/whep";
/// Viewers started together, and the pause between batches.
const BATCH: usize = 20;
const BATCH_INTERVAL: Duration = Duration::from_millis(100);
/// Every viewer must be connected this long after the first POST.
const CONNECT_DEADLINE: Duration = Duration::from_secs(20);
/// After the streaming window: time for retransmissions of late losses to arrive.
const GRACE: Duration = Duration::from_millis(1500);
/// Receive buffer requested per client socket (the kernel caps it at `rmem_max`).
const RCVBUF: usize = 1 << 20;
/// Minimum packet rates over the window.
const MIN_VIDEO_PPS: u64 = 20;
const MIN_AUDIO_PPS: u64 = 45;
/// `abs-capture-time` extension id in our offer (free in str0m's standard map).
const ABS_CAPTURE_TIME_ID: u8 = 12;

/// The two tests must not load the machine at the same time.
static SERIAL: Mutex<()> = Mutex::new(());

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "200 str0m clients need an optimized build: cargo test --release"
)]
fn viewers_200_for_30s_decrypt_every_packet_without_gaps() {
    let _serial = crate::common::serial(&SERIAL);
    let viewers = env_bounded("TERN_VIEWERS", 200, 1, 1000);
    let seconds = env_bounded("TERN_SECONDS", 30, 1, 600);
    let server = Server::demo();
    let outcome = run_viewers(&Plan {
        http: server.http,
        media: Some(server.media),
        viewers,
        seconds,
        check_answer: false,
    });
    let failure = outcome.failure.clone();
    if failure.is_some() {
        eprintln!("server log tail:\n{}", server.log_tail(30));
    }
    server.stop();
    if let Some(f) = failure {
        panic!("{f}");
    }
}

#[test]
fn one_viewer_for_5s_decrypts_every_packet_without_gaps() {
    let _serial = crate::common::serial(&SERIAL);
    let server = Server::demo();
    let outcome = run_viewers(&Plan {
        http: server.http,
        media: Some(server.media),
        viewers: 1,
        seconds: 5,
        check_answer: true,
    });
    let failure = outcome.failure.clone();
    if failure.is_some() {
        eprintln!("server log tail:\n{}", server.log_tail(30));
    }
    server.stop();
    if let Some(f) = failure {
        panic!("{f}");
    }
}

fn env_bounded(name: &str, default: usize, min: usize, max: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse::<usize>()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number"))
            .clamp(min, max),
        Err(_) => default,
    }
}

/// What to run.
struct Plan {
    http: SocketAddr,
    /// The server's media address, when the answer's candidate must point at it.
    media: Option<SocketAddr>,
    viewers: usize,
    seconds: usize,
    /// Check the first answer's SDP against the WHEP contract.
    check_answer: bool,
}

/// The result: `failure` is the assertion message, if any.
struct Outcome {
    failure: Option<String>,
}

/// What the answer's payload types carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Video,
    Audio,
    Rtx,
    Other,
}

/// A viewer that has POSTed its offer and applied the answer.
struct Joined {
    rtc: Rtc,
    socket: UdpSocket,
    local: SocketAddr,
    location: String,
    offer: String,
    answer: String,
    post_time: Duration,
}

/// Extends 16-bit sequence numbers to 64 bits (nearest to the highest seen so far).
#[derive(Default)]
struct Extender {
    max: Option<u64>,
}

impl Extender {
    fn extend(&mut self, seq: u16) -> u64 {
        let ext = match self.max {
            None => u64::from(seq) + (1 << 16),
            Some(max) => {
                let roc = max >> 16;
                [roc.saturating_sub(1), roc, roc + 1]
                    .into_iter()
                    .map(|r| (r << 16) | u64::from(seq))
                    .min_by_key(|c| c.abs_diff(max))
                    .unwrap_or(max)
            }
        };
        self.max = Some(self.max.map_or(ext, |m| m.max(ext)));
        ext
    }
}

/// A set of extended sequence numbers (bitset from a movable base).
#[derive(Default)]
struct SeqSet {
    base: u64,
    words: Vec<u64>,
    len: u64,
    min: Option<u64>,
    max: Option<u64>,
}

impl SeqSet {
    /// Inserts; false if already present.
    fn insert(&mut self, seq: u64) -> bool {
        if self.words.is_empty() {
            self.base = (seq & !63).saturating_sub(64 * 64);
        }
        if seq < self.base {
            let new_base = (seq & !63).saturating_sub(64 * 64);
            let extra = ((self.base - new_base) / 64) as usize;
            self.words.splice(0..0, std::iter::repeat_n(0, extra));
            self.base = new_base;
        }
        let off = seq - self.base;
        let (w, b) = ((off / 64) as usize, off % 64);
        if w >= self.words.len() {
            self.words.resize(w + 1, 0);
        }
        let bit = 1u64 << b;
        if self.words[w] & bit != 0 {
            return false;
        }
        self.words[w] |= bit;
        self.len += 1;
        self.min = Some(self.min.map_or(seq, |m| m.min(seq)));
        self.max = Some(self.max.map_or(seq, |m| m.max(seq)));
        true
    }

    fn contains(&self, seq: u64) -> bool {
        if seq < self.base {
            return false;
        }
        let off = seq - self.base;
        self.words
            .get((off / 64) as usize)
            .is_some_and(|w| w & (1 << (off % 64)) != 0)
    }

    /// Sequence numbers in `lo..=hi` that are absent: count and the first few.
    fn missing(&self, lo: u64, hi: u64) -> (u64, Vec<u64>) {
        let mut n = 0;
        let mut first = Vec::new();
        for s in lo..=hi {
            if !self.contains(s) {
                n += 1;
                if first.len() < 5 {
                    first.push(s);
                }
            }
        }
        (n, first)
    }

    fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.words.iter().enumerate().flat_map(move |(i, &w)| {
            (0..64)
                .filter(move |b| w & (1 << b) != 0)
                .map(move |b| self.base + i as u64 * 64 + b)
        })
    }
}

/// One received SSRC as str0m delivers it.
struct Track {
    kind: Kind,
    ext: Extender,
    got: SeqSet,
    /// Packets that arrived below the highest sequence number seen (reordered/repaired).
    late: u64,
    dups: u64,
    /// Highest sequence number at the end of the streaming window.
    check_hi: Option<u64>,
}

/// One SSRC as seen on the wire (before str0m).
#[derive(Default)]
struct WireTrack {
    ext: Extender,
    seen: SeqSet,
}

struct Viewer {
    index: usize,
    rtc: Rtc,
    socket: MioUdpSocket,
    local: SocketAddr,
    location: String,
    kinds: HashMap<u8, Kind>,
    next_timeout: Instant,
    connected_at: Option<Instant>,
    joined_at: Instant,
    post_time: Duration,
    tracks: HashMap<u32, Track>,
    wire: HashMap<u32, WireTrack>,
    wire_rtx: u64,
    pre_connect_rtp: u64,
    unparsed: u64,
    send_errors: u64,
    recv_errors: u64,
    /// Datagrams the kernel dropped on this socket (`/proc/net/udp`), read at the end.
    kernel_drops: u64,
    disconnected: bool,
    error: Option<String>,
}

impl Viewer {
    fn drain(&mut self, buf: &mut [u8]) {
        loop {
            match self.socket.recv_from(buf) {
                Ok((n, source)) => {
                    let now = Instant::now();
                    self.on_datagram(now, &buf[..n], source);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.recv_errors += 1;
                    break;
                }
            }
        }
    }

    fn on_datagram(&mut self, now: Instant, data: &[u8], source: SocketAddr) {
        if self.error.is_some() {
            return;
        }
        // RTP (not RTCP): version 2, second byte outside 192..=223 (RFC 5761).
        if data.len() >= 12 && data[0] & 0xC0 == 0x80 && !(192..=223).contains(&data[1]) {
            let pt = data[1] & 0x7F;
            let seq = u16::from_be_bytes([data[2], data[3]]);
            let ssrc = u32::from_be_bytes([data[8], data[9], data[10], data[11]]);
            if self.connected_at.is_none() {
                self.pre_connect_rtp += 1;
            } else if self.kinds.get(&pt) == Some(&Kind::Rtx) {
                self.wire_rtx += 1;
            } else {
                let w = self.wire.entry(ssrc).or_default();
                let ext = w.ext.extend(seq);
                w.seen.insert(ext);
            }
        }
        let input = match Receive::new(Protocol::Udp, source, self.local, data) {
            Ok(r) => Input::Receive(now, r),
            Err(_) => {
                self.unparsed += 1;
                return;
            }
        };
        if let Err(e) = self.rtc.handle_input(input) {
            self.error = Some(format!("handle_input: {e}"));
            return;
        }
        self.drive(now);
    }

    fn on_timeout(&mut self, now: Instant) {
        if self.error.is_some() {
            return;
        }
        if let Err(e) = self.rtc.handle_input(Input::Timeout(now)) {
            self.error = Some(format!("handle_input(timeout): {e}"));
            return;
        }
        self.drive(now);
    }

    /// `poll_output` until str0m asks to be woken later.
    fn drive(&mut self, now: Instant) {
        loop {
            match self.rtc.poll_output() {
                Ok(Output::Transmit(t)) => {
                    if self.socket.send_to(&t.contents, t.destination).is_err() {
                        self.send_errors += 1;
                    }
                }
                Ok(Output::Timeout(t)) => {
                    self.next_timeout = t;
                    return;
                }
                Ok(Output::Event(e)) => self.on_event(now, e),
                Err(e) => {
                    self.error = Some(format!("poll_output: {e}"));
                    self.next_timeout = now + Duration::from_secs(3600);
                    return;
                }
            }
        }
    }

    fn on_event(&mut self, now: Instant, e: Event) {
        match e {
            Event::Connected => {
                self.connected_at.get_or_insert(now);
            }
            Event::IceConnectionStateChange(IceConnectionState::Disconnected) => {
                self.disconnected = true;
            }
            Event::RtpPacket(p) => self.on_rtp(&p),
            _ => {}
        }
    }

    fn on_rtp(&mut self, p: &RtpPacket) {
        let pt = *p.header.payload_type;
        let kind = self.kinds.get(&pt).copied().unwrap_or(Kind::Other);
        let t = self.tracks.entry(*p.header.ssrc).or_insert_with(|| Track {
            kind,
            ext: Extender::default(),
            got: SeqSet::default(),
            late: 0,
            dups: 0,
            check_hi: None,
        });
        let ext = t.ext.extend(p.header.sequence_number);
        if t.got.max.is_some_and(|m| ext < m) {
            t.late += 1;
        }
        if !t.got.insert(ext) {
            t.dups += 1;
        }
    }

    /// Unique packets received of this kind, and tracks of this kind.
    fn packets(&self, kind: Kind) -> (u64, usize) {
        self.tracks
            .values()
            .filter(|t| t.kind == kind)
            .fold((0, 0), |(n, c), t| (n + t.got.len, c + 1))
    }

    /// Missing sequence numbers in [first, last-at-window-end], over all tracks.
    fn gaps(&self) -> (u64, Vec<String>) {
        let mut total = 0;
        let mut detail = Vec::new();
        for (ssrc, t) in &self.tracks {
            let (Some(lo), Some(hi)) = (t.got.min, t.check_hi) else {
                continue;
            };
            let (n, first) = t.got.missing(lo, hi);
            if n > 0 {
                total += n;
                detail.push(format!(
                    "{:?} ssrc {ssrc:#x}: {n} missing of {}..={} (first {:?})",
                    t.kind,
                    lo & 0xFFFF,
                    hi & 0xFFFF,
                    first.iter().map(|s| s & 0xFFFF).collect::<Vec<_>>()
                ));
            }
        }
        (total, detail)
    }

    /// RTP datagrams that reached the socket (after Connected) but never came out of str0m.
    fn undelivered(&self) -> u64 {
        let mut n = 0;
        for (ssrc, w) in &self.wire {
            match self.tracks.get(ssrc) {
                Some(t) => n += w.seen.iter().filter(|s| !t.got.contains(*s)).count() as u64,
                None => n += w.seen.len,
            }
        }
        n
    }
}

/// Payload types of the answer: H264 → video, opus → audio, rtx → RTX.
fn answer_kinds(answer: &str) -> HashMap<u8, Kind> {
    let mut out = HashMap::new();
    for line in answer.lines() {
        let Some(rest) = line.trim().strip_prefix("a=rtpmap:") else {
            continue;
        };
        let Some((pt, codec)) = rest.split_once(' ') else {
            continue;
        };
        let Ok(pt) = pt.parse::<u8>() else {
            continue;
        };
        let name = codec
            .split('/')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        let kind = match name.as_str() {
            "h264" => Kind::Video,
            "opus" => Kind::Audio,
            "rtx" => Kind::Rtx,
            _ => Kind::Other,
        };
        out.insert(pt, kind);
    }
    out
}

/// The WHEP answer contract: ice-lite, one host candidate on the media port, passive,
/// sendonly, H264 and Opus, NACK, abs-capture-time echoed.
fn check_answer(offer: &str, answer: &str, media: Option<SocketAddr>) -> Vec<String> {
    let mut problems = Vec::new();
    let lines: Vec<&str> = answer.lines().map(str::trim).collect();
    let has = |p: &str| lines.iter().any(|l| l.starts_with(p));
    if !has("a=ice-lite") {
        problems.push("no a=ice-lite".to_string());
    }
    let mut cands: Vec<&str> = lines
        .iter()
        .filter(|l| l.starts_with("a=candidate:"))
        .copied()
        .collect();
    cands.sort_unstable();
    cands.dedup();
    if cands.len() != 1 {
        problems.push(format!("expected one candidate, got {cands:?}"));
    }
    if let Some(m) = media {
        let want = format!(" {} {} typ host", m.ip(), m.port());
        if !cands.iter().any(|c| c.contains(&want)) {
            problems.push(format!("no host candidate{want}"));
        }
    }
    if !has("a=setup:passive") {
        problems.push("no a=setup:passive".into());
    }
    if !has("a=sendonly") || has("a=sendrecv") || has("a=recvonly") {
        problems.push("media not (only) sendonly".into());
    }
    let kinds = answer_kinds(answer);
    let video: Vec<u8> = kinds
        .iter()
        .filter(|(_, k)| **k == Kind::Video)
        .map(|(pt, _)| *pt)
        .collect();
    if video.is_empty() {
        problems.push("no H264 payload type".into());
    }
    if !kinds.values().any(|k| *k == Kind::Audio) {
        problems.push("no opus payload type".into());
    }
    let nack = video
        .iter()
        .any(|pt| lines.iter().any(|l| *l == format!("a=rtcp-fb:{pt} nack")));
    if !nack {
        problems.push("no a=rtcp-fb:<h264 pt> nack".into());
    }
    if offer.contains("abs-capture-time") && !answer.contains("abs-capture-time") {
        problems.push("abs-capture-time offered but not echoed".into());
    }
    problems
}

fn client_socket() -> std::io::Result<UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(SockProtocol::UDP))?;
    s.set_recv_buffer_size(RCVBUF)?;
    s.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// One viewer: socket, offer (recvonly H264 + Opus), POST, answer.
fn join(http: SocketAddr) -> Result<Joined, String> {
    let socket = client_socket().map_err(|e| format!("socket: {e}"))?;
    let local = socket
        .local_addr()
        .map_err(|e| format!("local_addr: {e}"))?;
    let mut rtc = RtcConfig::new()
        .set_rtp_mode(true)
        .clear_codecs()
        .enable_h264(true)
        .enable_opus(true, false)
        .set_extension(ABS_CAPTURE_TIME_ID, Extension::AbsoluteCaptureTime)
        .set_stats_interval(None)
        .build(Instant::now());
    let cand = Candidate::host(local, "udp").map_err(|e| format!("candidate: {e}"))?;
    rtc.add_local_candidate(cand);
    let mut api = rtc.sdp_api();
    api.add_media(MediaKind::Video, Direction::RecvOnly, None, None, None);
    api.add_media(MediaKind::Audio, Direction::RecvOnly, None, None, None);
    let (offer, pending): (_, SdpPendingOffer) = api.apply().ok_or("no offer")?;
    let offer = offer.to_sdp_string();
    let t0 = Instant::now();
    let resp = http_post(http, WHEP_PATH, "application/sdp", offer.as_bytes())
        .map_err(|e| format!("POST {WHEP_PATH}: {e}"))?;
    let post_time = t0.elapsed();
    if resp.status != 201 {
        return Err(format!(
            "POST {WHEP_PATH}: status {} (want 201): {}",
            resp.status,
            resp.text()
        ));
    }
    let location = resp
        .header("location")
        .ok_or("201 without Location")?
        .to_string();
    // Tolerate an absolute URL; the contract is a path.
    let location = match location.split_once("://") {
        Some((_, rest)) => rest
            .find('/')
            .map_or_else(|| "/".to_string(), |i| rest[i..].to_string()),
        None => location,
    };
    if !location.starts_with(&format!("{WHEP_PATH}/")) || location.len() <= WHEP_PATH.len() + 1 {
        return Err(format!("Location {location:?} is not {WHEP_PATH}/<id>"));
    }
    let answer = resp.text();
    let parsed = SdpAnswer::from_sdp_string(&answer)
        .map_err(|e| format!("answer does not parse: {e}\n{answer}"))?;
    rtc.sdp_api()
        .accept_answer(pending, parsed)
        .map_err(|e| format!("accept_answer: {e}\n{answer}"))?;
    Ok(Joined {
        rtc,
        socket,
        local,
        location,
        offer,
        answer,
        post_time,
    })
}

/// A viewer's index and the outcome of its join.
type JoinResult = (usize, Result<Joined, String>);

/// Starts the connector thread: batches of `BATCH` parallel joins every `BATCH_INTERVAL`.
fn spawn_connector(http: SocketAddr, n: usize) -> (mpsc::Receiver<JoinResult>, JoinHandle<()>) {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        let start = Instant::now();
        for (b, first) in (0..n).step_by(BATCH).enumerate() {
            let at = start + BATCH_INTERVAL * b as u32;
            if let Some(d) = at.checked_duration_since(Instant::now()) {
                std::thread::sleep(d);
            }
            std::thread::scope(|s| {
                for i in first..(first + BATCH).min(n) {
                    let tx = tx.clone();
                    s.spawn(move || {
                        let _ = tx.send((i, join(http)));
                    });
                }
            });
        }
    });
    (rx, handle)
}

#[derive(Clone, Copy)]
enum Phase {
    Connecting,
    Streaming { until: Instant },
    Grace { until: Instant },
}

fn run_viewers(plan: &Plan) -> Outcome {
    let n = plan.viewers;
    let seconds = plan.seconds as u64;
    let rcvbuf_before = common::udp_rcvbuf_errors();
    let server_drops_before = plan
        .media
        .and_then(|m| common::udp_socket_drops().get(&m.port()).copied());

    let mut poll = Poll::new().expect("mio poll");
    let mut events = Events::with_capacity(1024);
    let mut buf = vec![0u8; 2048];
    let mut viewers: Vec<Viewer> = Vec::with_capacity(n);
    let mut join_errors: Vec<String> = Vec::new();
    let mut arrived = 0;
    let mut answer_problems: Vec<String> = Vec::new();

    let start = Instant::now();
    let (rx, connector) = spawn_connector(plan.http, n);
    let mut phase = Phase::Connecting;
    let mut connect_failure: Option<String> = None;
    let mut all_connected_after = Duration::ZERO;
    let mut window_start = start;

    loop {
        let now = Instant::now();
        while let Ok((index, res)) = rx.try_recv() {
            arrived += 1;
            match res {
                Ok(j) => {
                    if plan.check_answer && viewers.is_empty() {
                        answer_problems = check_answer(&j.offer, &j.answer, plan.media);
                    }
                    let token = Token(viewers.len());
                    let mut socket = MioUdpSocket::from_std(j.socket);
                    poll.registry()
                        .register(&mut socket, token, Interest::READABLE)
                        .expect("register socket");
                    let mut v = Viewer {
                        index,
                        rtc: j.rtc,
                        socket,
                        local: j.local,
                        location: j.location,
                        kinds: answer_kinds(&j.answer),
                        next_timeout: now,
                        connected_at: None,
                        joined_at: now,
                        post_time: j.post_time,
                        tracks: HashMap::new(),
                        wire: HashMap::new(),
                        wire_rtx: 0,
                        pre_connect_rtp: 0,
                        unparsed: 0,
                        send_errors: 0,
                        recv_errors: 0,
                        kernel_drops: 0,
                        disconnected: false,
                        error: None,
                    };
                    v.drive(now);
                    v.drain(&mut buf);
                    viewers.push(v);
                }
                Err(e) => join_errors.push(format!("viewer {index}: {e}")),
            }
        }

        match phase {
            Phase::Connecting => {
                let connected = viewers.iter().filter(|v| v.connected_at.is_some()).count();
                if !join_errors.is_empty() && arrived == n {
                    connect_failure = Some(format!(
                        "{} of {n} viewers failed to join: {}",
                        join_errors.len(),
                        join_errors[..join_errors.len().min(5)].join("; ")
                    ));
                    break;
                }
                if connected == n {
                    all_connected_after = now - start;
                    window_start = now;
                    phase = Phase::Streaming {
                        until: now + Duration::from_secs(seconds),
                    };
                } else if now - start > CONNECT_DEADLINE {
                    let stuck: Vec<String> = viewers
                        .iter()
                        .filter(|v| v.connected_at.is_none())
                        .take(5)
                        .map(|v| {
                            format!("viewer {}: {}", v.index, v.error.as_deref().unwrap_or("-"))
                        })
                        .collect();
                    connect_failure = Some(format!(
                        "only {connected} of {n} viewers connected within {CONNECT_DEADLINE:?} \
                         ({} joined, join errors: {:?}; not connected: {stuck:?})",
                        viewers.len(),
                        &join_errors[..join_errors.len().min(5)]
                    ));
                    break;
                }
            }
            Phase::Streaming { until } if now >= until => {
                for v in &mut viewers {
                    for t in v.tracks.values_mut() {
                        t.check_hi = t.got.max;
                    }
                }
                phase = Phase::Grace { until: now + GRACE };
            }
            Phase::Grace { until } if now >= until => break,
            _ => {}
        }

        let tick = match phase {
            Phase::Connecting => Duration::from_millis(5),
            _ => Duration::from_millis(50),
        };
        let mut wake = now + tick;
        for v in &mut viewers {
            if v.next_timeout <= now {
                v.on_timeout(now);
            }
            wake = wake.min(v.next_timeout);
        }
        let timeout = wake.saturating_duration_since(Instant::now());
        if let Err(e) = poll.poll(&mut events, Some(timeout))
            && e.kind() != ErrorKind::Interrupted
        {
            panic!("mio poll: {e}");
        }
        for ev in &events {
            if let Some(v) = viewers.get_mut(ev.token().0) {
                v.drain(&mut buf);
            }
        }
    }
    let streamed = window_start.elapsed();

    // Kernel counters while the client sockets still exist.
    let socket_drops = common::udp_socket_drops();
    for v in &mut viewers {
        v.kernel_drops = socket_drops.get(&v.local.port()).copied().unwrap_or(0);
    }
    let client_drops: u64 = viewers.iter().map(|v| v.kernel_drops).sum();
    let server_drops = match (
        plan.media
            .and_then(|m| socket_drops.get(&m.port()).copied()),
        server_drops_before,
    ) {
        (Some(a), Some(b)) => a.saturating_sub(b),
        _ => 0,
    };
    let rcvbuf_delta = match (common::udp_rcvbuf_errors(), rcvbuf_before) {
        (Some(a), Some(b)) => Some(a.saturating_sub(b)),
        _ => None,
    };

    // Let the connector finish (it may still be posting if connecting failed early).
    drop(rx);
    let _ = connector.join();

    // End the sessions.
    let mut delete_problems = Vec::new();
    for v in &viewers {
        match http_delete(plan.http, &v.location) {
            Ok(r) if r.status == 200 || r.status == 204 => {}
            Ok(r) => delete_problems.push(format!("DELETE {}: status {}", v.location, r.status)),
            Err(e) => delete_problems.push(format!("DELETE {}: {e}", v.location)),
        }
    }

    report(
        plan,
        &viewers,
        Totals {
            connect_failure,
            answer_problems,
            delete_problems,
            all_connected_after,
            streamed,
            rcvbuf_delta,
            client_drops,
            server_drops,
            per_socket: !socket_drops.is_empty(),
        },
    )
}

struct Totals {
    connect_failure: Option<String>,
    answer_problems: Vec<String>,
    delete_problems: Vec<String>,
    all_connected_after: Duration,
    streamed: Duration,
    rcvbuf_delta: Option<u64>,
    client_drops: u64,
    server_drops: u64,
    /// Whether `/proc/net/udp` gave per-socket drop counters.
    per_socket: bool,
}

fn min_max(values: impl Iterator<Item = u64>) -> (u64, u64) {
    values.fold((u64::MAX, 0), |(lo, hi), v| (lo.min(v), hi.max(v)))
}

fn report(plan: &Plan, viewers: &[Viewer], t: Totals) -> Outcome {
    let n = plan.viewers;
    let seconds = plan.seconds as u64;
    let mut problems: Vec<String> = Vec::new();
    if let Some(f) = &t.connect_failure {
        problems.push(f.clone());
    }
    if !t.answer_problems.is_empty() {
        problems.push(format!("answer SDP: {}", t.answer_problems.join("; ")));
    }

    let connect_ms = min_max(viewers.iter().filter_map(|v| {
        v.connected_at
            .map(|c| (c - v.joined_at + v.post_time).as_millis() as u64)
    }));
    let post_ms = min_max(viewers.iter().map(|v| v.post_time.as_millis() as u64));
    println!(
        "viewers: {} of {n} connected, all after {:.2} s; POST {}..{} ms; POST to Connected {}..{} ms; streamed {:.1} s (+{:?} grace)",
        viewers.iter().filter(|v| v.connected_at.is_some()).count(),
        t.all_connected_after.as_secs_f64(),
        post_ms.0,
        post_ms.1,
        connect_ms.0,
        connect_ms.1,
        t.streamed.as_secs_f64() - GRACE.as_secs_f64(),
        GRACE,
    );
    for (kind, min_pps) in [(Kind::Video, MIN_VIDEO_PPS), (Kind::Audio, MIN_AUDIO_PPS)] {
        let per: Vec<(u64, usize)> = viewers.iter().map(|v| v.packets(kind)).collect();
        let total: u64 = per.iter().map(|p| p.0).sum();
        let (lo, hi) = min_max(per.iter().map(|p| p.0));
        let tracks = min_max(per.iter().map(|p| p.1 as u64));
        let late: u64 = viewers
            .iter()
            .flat_map(|v| v.tracks.values())
            .filter(|tr| tr.kind == kind)
            .map(|tr| tr.late)
            .sum();
        let dups: u64 = viewers
            .iter()
            .flat_map(|v| v.tracks.values())
            .filter(|tr| tr.kind == kind)
            .map(|tr| tr.dups)
            .sum();
        println!(
            "{kind:?}: {total} packets, per viewer min {lo} max {hi} (need >= {}), SSRCs per viewer {}..{}, late/repaired {late}, duplicates {dups}",
            min_pps * seconds,
            tracks.0,
            tracks.1,
        );
        if t.connect_failure.is_none() {
            let short: Vec<String> = viewers
                .iter()
                .zip(&per)
                .filter(|(_, p)| p.0 < min_pps * seconds)
                .take(5)
                .map(|(v, p)| format!("viewer {}: {}", v.index, p.0))
                .collect();
            if !short.is_empty() {
                problems.push(format!(
                    "{kind:?}: viewers below {} packets in {seconds} s: {short:?}",
                    min_pps * seconds
                ));
            }
        }
    }

    let mut gap_total = 0;
    let mut gap_viewers = Vec::new();
    let mut undelivered_total = 0;
    let mut undelivered_viewers = Vec::new();
    let mut other_pt = 0;
    for v in viewers {
        let (g, detail) = v.gaps();
        if g > 0 {
            gap_total += g;
            gap_viewers.push(format!(
                "viewer {} (socket drops {}): {}",
                v.index,
                v.kernel_drops,
                detail.join(", ")
            ));
        }
        let u = v.undelivered();
        if u > 0 {
            undelivered_total += u;
            undelivered_viewers.push(format!("viewer {}: {u}", v.index));
        }
        other_pt += v
            .tracks
            .values()
            .filter(|tr| tr.kind == Kind::Other)
            .map(|tr| tr.got.len)
            .sum::<u64>();
        if let Some(e) = &v.error {
            problems.push(format!("viewer {}: str0m error: {e}", v.index));
        }
        if v.disconnected {
            problems.push(format!("viewer {}: ICE disconnected", v.index));
        }
    }
    let wire_rtx: u64 = viewers.iter().map(|v| v.wire_rtx).sum();
    let pre_connect: u64 = viewers.iter().map(|v| v.pre_connect_rtp).sum();
    let unparsed: u64 = viewers.iter().map(|v| v.unparsed).sum();
    let send_errors: u64 = viewers.iter().map(|v| v.send_errors).sum();
    let recv_errors: u64 = viewers.iter().map(|v| v.recv_errors).sum();
    let rcvbuf = t
        .rcvbuf_delta
        .map_or_else(|| "n/a".to_string(), |d| d.to_string());
    println!(
        "gaps: {gap_total} missing seqs in {} viewers; undecrypted/undelivered RTP: {undelivered_total} in {} viewers; RTX on wire {wire_rtx}; RTP before Connected {pre_connect}; other PTs {other_pt}; unparsed {unparsed}; send/recv errors {send_errors}/{recv_errors}",
        gap_viewers.len(),
        undelivered_viewers.len(),
    );
    println!(
        "RcvbufErrors delta: {rcvbuf} (client socket drops {}, server media socket drops {})",
        t.client_drops, t.server_drops
    );

    if gap_total > 0 {
        let grew = t.rcvbuf_delta.is_some_and(|d| d > 0);
        let blame = if t.client_drops > 0 || (grew && !t.per_socket) {
            format!(
                "; Udp RcvbufErrors grew by {rcvbuf} during the run (client sockets dropped {}, \
                 server media socket {}): loss attributed to the client's socket buffers",
                t.client_drops, t.server_drops
            )
        } else if grew {
            format!(
                "; Udp RcvbufErrors grew by {rcvbuf} during the run, but not on the client \
                 sockets (server media socket dropped {}): not the client's socket buffers",
                t.server_drops
            )
        } else {
            format!("; Udp RcvbufErrors did not grow ({rcvbuf}): not a receive-buffer overrun")
        };
        problems.push(format!(
            "{gap_total} sequence numbers never received by {} of {n} viewers{blame}: {}",
            gap_viewers.len(),
            gap_viewers[..gap_viewers.len().min(5)].join("; ")
        ));
    }
    if undelivered_total > 0 {
        problems.push(format!(
            "{undelivered_total} RTP packets reached the client socket but were not decrypted/delivered by str0m (SRTP failure or unmapped SSRC) in {} viewers: {}",
            undelivered_viewers.len(),
            undelivered_viewers[..undelivered_viewers.len().min(5)].join("; ")
        ));
    }
    if !t.delete_problems.is_empty() {
        problems.push(format!(
            "{} DELETEs failed: {}",
            t.delete_problems.len(),
            t.delete_problems[..t.delete_problems.len().min(5)].join("; ")
        ));
    }
    Outcome {
        failure: (!problems.is_empty()).then(|| problems.join("\n")),
    }
}
