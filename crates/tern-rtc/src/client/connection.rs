//! The lean client's connection: ICE checks and consent, the DTLS handshake, SRTP/SRTCP,
//! received media counted per track, receiver reports and NACKs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dimpl::Dtls;
use tern_proto::codec::MediaKind;
use tern_proto::rtcp::{self, ReportBlock, RtcpPacket};
use tern_proto::rtp;
use tern_proto::srtp::{self, RtcpCipher, RtpCipher, SrtpProfile};
use tern_proto::stun;

use crate::viewer::{DtlsContext, sha256};

use super::offer::ClientParams;
use super::track::{Missing, Track, TrackStats};

/// Interval between ICE consent refreshes (RFC 7675 §5.1: 5 s on average; browsers use
/// about that). Well inside the server's 30 s consent lifetime.
pub const CONSENT_INTERVAL: Duration = Duration::from_secs(5);
/// Interval of ICE connectivity checks until the first success (RFC 8445 Ta is 50 ms).
const CHECK_INTERVAL: Duration = Duration::from_millis(50);
/// Interval between receiver reports.
const RR_INTERVAL: Duration = Duration::from_secs(1);
/// Delay before a gap is NACKed: long enough to absorb loopback reordering.
const NACK_DELAY: Duration = Duration::from_millis(5);
/// Interval between NACKs for the same missing packet.
const NACK_RETRY: Duration = Duration::from_millis(100);
/// NACKs per missing packet before giving up.
const NACK_TRIES: u8 = 3;
/// Missing packets tracked per track for NACK; older ones are given up.
const NACK_QUEUE: usize = 256;

/// Where the client is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientState {
    /// Sending connectivity checks.
    Checking,
    /// ICE up, DTLS handshake in progress.
    Handshaking,
    /// SRTP keys derived.
    Connected,
    /// Gave up or was refused.
    Failed(&'static str),
}

struct ClientSrtp {
    rtp_rx: RtpCipher,
    rtcp_rx: RtcpCipher,
    rtcp_tx: RtcpCipher,
}

/// Timings of the connection, from creation.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConnectTimes {
    /// First successful binding response.
    pub ice: Option<Duration>,
    /// SRTP keys derived.
    pub dtls: Option<Duration>,
    /// First media packet.
    pub first_packet: Option<Duration>,
    /// First complete keyframe.
    pub first_frame: Option<Duration>,
}

/// A media packet as received (decrypted and new: no duplicate), for a caller that forwards
/// media (an edge pulling a stream from its origin); load testers ignore it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// Video or audio.
    pub kind: MediaKind,
    /// Extended sequence number.
    pub seq: u64,
    /// Extended RTP timestamp.
    pub rtp_ts: u64,
    /// RTP marker bit.
    pub marker: bool,
    /// Capture time as NTP (abs-capture-time, else from the sender's last SR).
    pub capture_ntp: Option<u64>,
    /// Where the payload lies in the buffer given to [`Client::handle_input`].
    pub payload: std::ops::Range<usize>,
}

/// The client. Drive it with [`Client::handle_input`], [`Client::handle_timeout`] and
/// [`Client::poll_timeout`]; datagrams to send come out of [`Client::drain`].
pub struct Client {
    p: ClientParams,
    dtls_ctx: Arc<DtlsContext>,
    state: ClientState,
    created: Instant,
    tid: [u8; 12],
    tid_counter: u64,
    next_check: Instant,
    next_consent: Option<Instant>,
    dtls: Option<Box<Dtls>>,
    dtls_timeout: Option<Instant>,
    srtp: Option<ClientSrtp>,
    ssrc: u32,
    tracks: Vec<Track>,
    next_rr: Option<Instant>,
    times: ConnectTimes,
    out: Vec<Vec<u8>>,
    /// SR packets received.
    pub sender_reports: u64,
    /// Whether the server ended the session with a DTLS close_notify alert.
    pub close_notify: bool,
    /// Datagrams that could not be used (bad STUN, failed SRTCP, unknown).
    pub dropped: u64,
    /// 1: every RTP packet is authenticated and decrypted; N: 1 in N (see
    /// [`Client::set_verify_every`]).
    verify_every: u32,
    /// RTP packets received (the sampling's count).
    rtp_in: u64,
}

impl Client {
    /// A client that starts checking at once. `seed` makes transaction ids and our SSRC
    /// differ between clients.
    pub fn new(p: ClientParams, dtls_ctx: Arc<DtlsContext>, now: Instant, seed: u64) -> Self {
        let mut c = Client {
            p,
            dtls_ctx,
            state: ClientState::Checking,
            created: now,
            tid: [0; 12],
            tid_counter: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            next_check: now,
            next_consent: None,
            dtls: None,
            dtls_timeout: None,
            srtp: None,
            ssrc: (seed as u32) | 1,
            tracks: Vec::with_capacity(2),
            next_rr: None,
            times: ConnectTimes::default(),
            out: Vec::new(),
            sender_reports: 0,
            close_notify: false,
            dropped: 0,
            verify_every: 1,
            rtp_in: 0,
        };
        c.send_check(now);
        c
    }

    /// A client that is connected from the start, with SRTP keys from `keying_material` (as
    /// DTLS would export it for `profile`; the server's write keys per `p.dtls_active`): no
    /// checks, no handshake, no consent. For measuring the receive path on its own (`udp-blaster
    /// --into-bench`), where the sender seals packets with the same keys and no server runs.
    pub fn keyed(
        p: ClientParams,
        dtls_ctx: Arc<DtlsContext>,
        now: Instant,
        seed: u64,
        profile: SrtpProfile,
        keying_material: &[u8],
    ) -> Result<Self, srtp::SrtpError> {
        let srtp = make_client_srtp(profile, keying_material, p.dtls_active)?;
        let mut c = Client::new(p, dtls_ctx, now, seed);
        c.out.clear();
        c.srtp = Some(srtp);
        c.state = ClientState::Connected;
        c.times.ice = Some(Duration::ZERO);
        c.times.dtls = Some(Duration::ZERO);
        c.next_rr = c.p.rtcp.then_some(now);
        Ok(c)
    }

    /// Current state.
    pub fn state(&self) -> ClientState {
        self.state
    }

    /// The video codec the server answered.
    pub fn video_codec(&self) -> tern_proto::codec::VideoCodec {
        self.p.video_codec
    }

    /// Connection timings.
    pub fn times(&self) -> ConnectTimes {
        self.times
    }

    /// Statistics of the track of `kind`, once a packet of it arrived.
    pub fn track(&self, kind: MediaKind) -> Option<&TrackStats> {
        self.tracks
            .iter()
            .find(|t| t.kind == kind)
            .map(|t| &t.stats)
    }

    /// The server's media address.
    pub fn server(&self) -> SocketAddr {
        self.p.server
    }

    /// Hands every queued datagram to `send` (all go to [`Client::server`]).
    pub fn drain(&mut self, send: &mut dyn FnMut(&[u8])) {
        for d in self.out.drain(..) {
            send(&d);
        }
    }

    /// When [`Client::handle_timeout`] must next run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if matches!(self.state, ClientState::Failed(_)) {
            return None;
        }
        let mut t = if self.state == ClientState::Checking {
            Some(self.next_check)
        } else {
            self.next_consent
        };
        for c in [self.dtls_timeout, self.next_rr] {
            t = match (t, c) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        if let Some(tr) = self.tracks.iter().find(|t| !t.missing.is_empty())
            && let Some(m) = tr.missing.first()
        {
            let due = m.last_nack.map_or(m.since + NACK_DELAY, |l| l + NACK_RETRY);
            t = Some(t.map_or(due, |x| x.min(due)));
        }
        t
    }

    /// Runs timers: connectivity checks, consent, DTLS retransmission, RR and NACK.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.state {
            ClientState::Failed(_) => return,
            ClientState::Checking => {
                if now.duration_since(self.created) > Duration::from_secs(30) {
                    self.state = ClientState::Failed("ICE timed out");
                    return;
                }
                if now >= self.next_check {
                    self.send_check(now);
                }
            }
            _ => {}
        }
        if let Some(t) = self.next_consent
            && now >= t
        {
            self.send_check(now);
        }
        if let Some(t) = self.dtls_timeout
            && now >= t
            && let Some(d) = self.dtls.as_mut()
        {
            self.dtls_timeout = None;
            if d.handle_timeout(now).is_err() {
                self.state = ClientState::Failed("DTLS timed out");
                return;
            }
            self.drain_dtls(now);
        }
        if self.p.rtcp && self.srtp.is_some() {
            if self.next_rr.is_some_and(|t| now >= t) {
                self.send_rr(now);
                self.next_rr = Some(now + RR_INTERVAL);
            }
            self.send_nacks(now);
        }
    }

    fn next_tid(&mut self) -> [u8; 12] {
        self.tid_counter = self.tid_counter.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.tid_counter;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        let mut tid = [0u8; 12];
        tid[..8].copy_from_slice(&z.to_le_bytes());
        tid[8..].copy_from_slice(&(z >> 17).to_le_bytes()[..4]);
        tid
    }

    fn send_check(&mut self, now: Instant) {
        self.tid = self.next_tid();
        let user = format!("{}:{}", self.p.remote_ufrag, self.p.local_ufrag);
        let mut buf = [0u8; 256];
        let tiebreaker = self.tid_counter;
        if let Ok(n) = stun::write_binding_request(
            &mut buf,
            &self.tid,
            user.as_bytes(),
            self.p.remote_pwd.as_bytes(),
            // Host candidate priority (RFC 8445 §5.1.2.1: type pref 126, local pref 65535).
            (126 << 24) | (65535 << 8) | 255,
            Some(tiebreaker),
            true,
        ) {
            self.out.push(buf[..n].to_vec());
        }
        if self.state == ClientState::Checking {
            self.next_check = now + CHECK_INTERVAL;
        } else {
            self.next_consent = Some(now + CONSENT_INTERVAL);
        }
    }

    /// Feeds a datagram from the server (decrypted in place when it is SRTP); a new media
    /// packet is also returned, its payload left in `data`.
    pub fn handle_input(&mut self, now: Instant, data: &mut [u8]) -> Option<Received> {
        match data.first() {
            Some(0..=3) => self.handle_stun(now, data),
            Some(20..=63) => self.handle_dtls(now, data),
            Some(128..=191) => {
                if rtp::is_rtcp(data) {
                    self.handle_rtcp(now, data);
                } else {
                    return self.handle_rtp(now, data);
                }
            }
            _ => self.dropped += 1,
        }
        None
    }

    /// Authenticates and decrypts 1 RTP packet in `n` (1, the default: every one). The
    /// others are counted from their header, which SRTP leaves in the clear: sequence
    /// (loss, order, duplicates, NACKs), timestamp (jitter, frames), marker,
    /// abs-capture-time (latency). What only the payload tells (keyframes, the payload's
    /// exact length when padded) comes from the verified packets alone, and a forged or
    /// corrupted packet among the others goes unnoticed: a tester that samples must say so
    /// ([`TrackStats::verified`] counts the packets checked). Every packet is verified until
    /// the first video frame has been seen whole, so the first keyframe is found.
    pub fn set_verify_every(&mut self, n: u32) {
        self.verify_every = n.max(1);
    }

    /// Asks the server for a keyframe (RTCP PLI on the video track), as a decoder that lost
    /// its reference does. Nothing is sent before the first video packet.
    pub fn request_keyframe(&mut self) {
        let Some(media) = self
            .tracks
            .iter()
            .find(|t| t.kind == MediaKind::Video)
            .map(|t| t.stats.ssrc)
        else {
            return;
        };
        let mut buf = [0u8; 64];
        if let Ok(len) = rtcp::write_pli(&mut buf, self.ssrc, media) {
            self.send_rtcp(&mut buf, len);
        }
    }

    fn handle_stun(&mut self, now: Instant, data: &[u8]) {
        let Ok(msg) = stun::Message::parse(data) else {
            self.dropped += 1;
            return;
        };
        // A full-ICE server checks the pair too (RFC 8445 §7.3): answer its binding
        // requests, as a browser does, with the address we reach it from as the mapped one
        // (the server's own view of us is not known here; the check only needs a signed
        // success with its transaction id).
        if msg.class() == stun::Class::Request && msg.method() == stun::BINDING {
            if !msg.check_integrity(self.p.local_pwd.as_bytes()) {
                self.dropped += 1;
                return;
            }
            let mut buf = [0u8; 128];
            if let Ok(n) = stun::write_binding_success(
                &mut buf,
                msg.transaction_id(),
                self.p.server,
                self.p.local_pwd.as_bytes(),
            ) {
                self.out.push(buf[..n].to_vec());
            }
            return;
        }
        if msg.class() != stun::Class::Success
            || msg.transaction_id() != &self.tid
            || !msg.check_integrity(self.p.remote_pwd.as_bytes())
        {
            self.dropped += 1;
            return;
        }
        if self.state != ClientState::Checking {
            return;
        }
        self.times.ice = Some(now - self.created);
        self.state = ClientState::Handshaking;
        self.next_consent = Some(now + CONSENT_INTERVAL);
        let ctx = &self.dtls_ctx;
        let mut d = Dtls::new_12(ctx.config.clone(), ctx.cert.clone(), now);
        d.set_active(self.p.dtls_active);
        if d.handle_timeout(now).is_err() {
            self.state = ClientState::Failed("DTLS could not start");
            return;
        }
        self.dtls = Some(Box::new(d));
        self.drain_dtls(now);
    }

    fn handle_dtls(&mut self, now: Instant, data: &[u8]) {
        let Some(d) = self.dtls.as_mut() else {
            self.dropped += 1;
            return;
        };
        let _ = d.handle_timeout(now);
        if d.handle_packet(data).is_err() {
            if self.srtp.is_none() {
                self.state = ClientState::Failed("DTLS handshake failed");
            }
            return;
        }
        self.drain_dtls(now);
    }

    fn drain_dtls(&mut self, now: Instant) {
        let Some(d) = self.dtls.as_mut() else {
            return;
        };
        let mut buf = [0u8; 1500];
        let mut keys = None;
        let mut bad_cert = false;
        loop {
            match d.poll_output(&mut buf) {
                dimpl::Output::Packet(p) => self.out.push(p.to_vec()),
                dimpl::Output::Timeout(t) => {
                    self.dtls_timeout = Some(t);
                    break;
                }
                dimpl::Output::PeerCert(der) if sha256(der) != self.p.remote_fingerprint => {
                    bad_cert = true;
                }
                dimpl::Output::KeyingMaterial(km, profile) => {
                    keys = Some((km.to_vec(), profile));
                }
                dimpl::Output::CloseNotify => self.close_notify = true,
                dimpl::Output::BufferTooSmall { .. } => {
                    bad_cert = true;
                    break;
                }
                _ => {}
            }
        }
        if bad_cert {
            self.state = ClientState::Failed("server certificate does not match fingerprint");
            return;
        }
        let Some((km, profile)) = keys else { return };
        let Some(profile) = crate::viewer::srtp_profile(profile) else {
            self.state = ClientState::Failed("unsupported SRTP profile");
            return;
        };
        match make_client_srtp(profile, &km, self.p.dtls_active) {
            Ok(s) => {
                self.srtp = Some(s);
                self.state = ClientState::Connected;
                self.times.dtls = Some(now - self.created);
                // The first SRTCP proves we hold the keys; send one at once, as browsers
                // do with their first RR.
                self.next_rr = Some(now);
            }
            Err(_) => self.state = ClientState::Failed("SRTP key setup failed"),
        }
    }

    fn handle_rtp(&mut self, now: Instant, data: &mut [u8]) -> Option<Received> {
        let Some(srtp) = self.srtp.as_mut() else {
            self.dropped += 1;
            return None;
        };
        let len = data.len();
        self.rtp_in += 1;
        let verify = self.verify_every <= 1
            || self.times.first_frame.is_none()
            || self.rtp_in.is_multiple_of(u64::from(self.verify_every));
        let (data, h) = if verify {
            let plain = match srtp.rtp_rx.unprotect(data, len) {
                Ok(n) => n,
                // SRTP's replay window refuses a repeated index before authenticating: a
                // duplicate of a packet already received.
                Err(srtp::SrtpError::Replay) => {
                    // The packet is still encrypted: `parse_header` would read the padding count
                    // from the auth tag's last octet, and refuse one in 256 padded packets whose
                    // tag ends in 0 (a duplicate then went uncounted).
                    let ssrc = rtp::parse_header_unpadded(data).map(|h| h.ssrc);
                    match self.tracks.iter_mut().find(|t| Ok(t.stats.ssrc) == ssrc) {
                        Some(t) => t.stats.duplicates += 1,
                        None => self.dropped += 1,
                    }
                    return None;
                }
                Err(_) => {
                    if let Some(t) = self.tracks.first_mut() {
                        t.stats.bad += 1;
                    } else {
                        self.dropped += 1;
                    }
                    return None;
                }
            };
            let data = &data[..plain];
            let Ok(h) = rtp::parse_header(data) else {
                self.dropped += 1;
                return None;
            };
            (data, h)
        } else {
            // Not checked: the header is read as it came (a padding count would be in the
            // encrypted payload), the payload is what precedes the tag.
            let data = &data[..len.saturating_sub(srtp.rtp_rx.overhead())];
            let Ok(h) = rtp::parse_header_unpadded(data) else {
                self.dropped += 1;
                return None;
            };
            (data, h)
        };
        let kind = if Some(h.payload_type) == self.p.video_pt {
            MediaKind::Video
        } else if Some(h.payload_type) == self.p.audio_pt {
            MediaKind::Audio
        } else {
            self.dropped += 1;
            return None;
        };
        let idx = match self.tracks.iter().position(|t| t.stats.ssrc == h.ssrc) {
            Some(i) => i,
            None => {
                self.tracks.push(Track::new(kind, h.ssrc));
                self.tracks.len() - 1
            }
        };
        if self.times.first_packet.is_none() {
            self.times.first_packet = Some(now - self.created);
        }
        let ntp_now = self.ntp(now);
        let connected = self.times.dtls.map(|d| self.ntp(self.created + d));
        let capture = self
            .p
            .abs_capture_time_ext
            .and_then(|id| h.extension(data, id))
            .and_then(rtp::abs_capture_time);
        let payload = data
            .get(h.header_len..h.header_len + h.payload_len)
            .unwrap_or(&[]);
        let is_key = verify && kind == MediaKind::Video && self.p.video_codec.is_keyframe(payload);
        let payload_at = h.header_len..h.header_len + payload.len();
        let t = &mut self.tracks[idx];
        let seq = t.unwrap.unwrap(h.sequence);
        if t.stats.packets > 0 && t.seen(seq) {
            t.stats.duplicates += 1;
            return None;
        }
        let mut recovered = false;
        if let Some(pos) = t.missing.iter().position(|m| m.seq == seq) {
            let m = t.missing.remove(pos);
            recovered = m.last_nack.is_some();
        }
        if recovered {
            t.stats.recovered += 1;
        } else if t.stats.packets > 0 && seq < t.stats.max_seq {
            t.stats.reordered += 1;
        }
        // Like Chrome, only video is NACKed (our offer asks for `nack` on video only).
        if t.stats.packets > 0
            && seq > t.stats.max_seq + 1
            && self.p.rtcp
            && kind == MediaKind::Video
        {
            for s in t.stats.max_seq + 1..seq {
                if t.missing.len() >= NACK_QUEUE {
                    t.missing.remove(0);
                }
                t.missing.push(Missing {
                    seq: s,
                    since: now,
                    last_nack: None,
                    tries: 0,
                });
            }
        }
        t.mark(seq);
        let st = &mut t.stats;
        st.packets += 1;
        st.verified += u64::from(verify);
        st.bytes += payload.len() as u64;
        st.first_at.get_or_insert(now);
        if let Some(last) = st.last_at {
            st.max_gap = st.max_gap.max(now.saturating_duration_since(last));
        }
        st.last_at = Some(now);
        // RFC 3550 A.8 jitter from arrival vs RTP timestamp.
        let clock = f64::from(kind.clock_rate());
        let arrival = (ntp_now as f64 / 4_294_967_296.0) * clock;
        let transit = arrival - f64::from(h.timestamp);
        if let Some(prev) = t.transit {
            let d = (transit - prev).abs();
            // Timestamps wrap; a jump of more than an hour of clock is a wrap, not jitter.
            if d < clock * 3600.0 {
                st.jitter += (d - st.jitter) / 16.0;
            }
        }
        t.transit = Some(transit);
        let ts_ext = if st.packets == 1 {
            i64::from(h.timestamp)
        } else {
            t.last_ts.1 + i64::from(h.timestamp.wrapping_sub(t.last_ts.0) as i32)
        };
        t.last_ts = (h.timestamp, ts_ext);
        match t.rtp_origin {
            None => t.rtp_origin = Some((now, ts_ext)),
            Some((at, ts0)) => {
                let wall = now.duration_since(at).as_secs_f64() * 1000.0;
                st.drift_ms = wall - (ts_ext - ts0) as f64 / clock * 1000.0;
            }
        }
        let capture = capture.or_else(|| {
            let (sr_ntp, sr_ts, _) = t.last_sr?;
            let d = h.timestamp.wrapping_sub(sr_ts) as i32;
            let secs = f64::from(d) / clock;
            Some(sr_ntp.wrapping_add((secs * 4_294_967_296.0) as i64 as u64))
        });
        if let Some(c) = capture {
            let ms = (ntp_now.wrapping_sub(c) as i64) as f64 / 4_294_967_296.0 * 1000.0;
            if connected.is_some_and(|at| (at.wrapping_sub(c) as i64) > 0) {
                st.catchup_packets += 1;
            } else if ms.abs() < 60_000.0 {
                if st.latency_n == 0 {
                    st.latency_min = ms;
                    st.latency_max = ms;
                }
                st.latency_n += 1;
                st.latency_sum += ms;
                st.latency_min = st.latency_min.min(ms);
                st.latency_max = st.latency_max.max(ms);
                st.latency_last = ms;
            }
        }
        let received = Received {
            kind,
            seq,
            rtp_ts: ts_ext.max(0) as u64,
            marker: h.marker,
            capture_ntp: capture,
            payload: payload_at,
        };
        if kind == MediaKind::Video {
            t.frame_key |= is_key;
            if h.marker {
                st.frames += 1;
                if t.frame_key {
                    st.keyframes += 1;
                    if self.times.first_frame.is_none() {
                        self.times.first_frame = Some(now - self.created);
                    }
                }
                t.frame_key = false;
            }
        } else {
            st.frames += 1;
        }
        Some(received)
    }

    fn handle_rtcp(&mut self, now: Instant, data: &mut [u8]) {
        let Some(srtp) = self.srtp.as_mut() else {
            self.dropped += 1;
            return;
        };
        let len = data.len();
        let Ok(plain) = srtp.rtcp_rx.unprotect(data, len) else {
            self.dropped += 1;
            return;
        };
        for pkt in rtcp::iter_compound(&data[..plain]) {
            let Ok(pkt) = pkt else {
                self.dropped += 1;
                break;
            };
            if let RtcpPacket::SenderReport(sr) = pkt {
                self.sender_reports += 1;
                if let Some(t) = self.tracks.iter_mut().find(|t| t.stats.ssrc == sr.ssrc) {
                    t.last_sr = Some((sr.ntp, sr.rtp_ts, now));
                }
            }
        }
    }

    fn ntp(&self, now: Instant) -> u64 {
        let (base, ntp) = self.p.ntp_base;
        let d = now.saturating_duration_since(base);
        let frac = (u64::from(d.subsec_nanos()) << 32) / 1_000_000_000;
        ntp.wrapping_add(d.as_secs() << 32).wrapping_add(frac)
    }

    fn send_rr(&mut self, now: Instant) {
        let mut blocks = [ReportBlock::default(); 2];
        let mut n = 0;
        for t in self.tracks.iter_mut().take(2) {
            let st = &t.stats;
            let expected = st.expected();
            let exp_int = expected - t.prior_expected;
            let rec_int = st.packets - t.prior_received;
            t.prior_expected = expected;
            t.prior_received = st.packets;
            let lost_int = exp_int.saturating_sub(rec_int);
            let fraction = (lost_int << 8)
                .checked_div(exp_int)
                .map_or(0, |f| f.min(255) as u8);
            let (lsr, dlsr) = t.last_sr.map_or((0, 0), |(ntp, _, at)| {
                let d = now.saturating_duration_since(at);
                let dlsr = (d.as_secs_f64() * 65536.0) as u32;
                ((ntp >> 16) as u32, dlsr)
            });
            blocks[n] = ReportBlock {
                ssrc: st.ssrc,
                fraction_lost: fraction,
                cumulative_lost: st.lost().min(0x7f_ffff) as i32,
                highest_seq: st.max_seq as u32,
                jitter: st.jitter as u32,
                lsr,
                dlsr,
            };
            n += 1;
        }
        let mut buf = [0u8; 256];
        let Ok(len) = rtcp::write_rr(&mut buf, self.ssrc, &blocks[..n]) else {
            return;
        };
        self.send_rtcp(&mut buf, len);
    }

    fn send_nacks(&mut self, now: Instant) {
        let mut lost = [0u16; 64];
        for i in 0..self.tracks.len() {
            let t = &mut self.tracks[i];
            let mut n = 0;
            t.missing.retain_mut(|m| {
                let due = m.last_nack.map_or(m.since + NACK_DELAY, |l| l + NACK_RETRY);
                if now < due {
                    return true;
                }
                if m.tries >= NACK_TRIES {
                    return false; // given up: it will count as lost
                }
                if n < lost.len() {
                    lost[n] = m.seq as u16;
                    n += 1;
                    m.tries += 1;
                    m.last_nack = Some(now);
                }
                true
            });
            if n == 0 {
                continue;
            }
            t.stats.nacks_sent += n as u64;
            let media = t.stats.ssrc;
            let mut buf = [0u8; 1200];
            let Ok(len) = rtcp::write_nack(&mut buf, self.ssrc, media, &lost[..n]) else {
                continue;
            };
            self.send_rtcp(&mut buf, len);
        }
    }

    fn send_rtcp(&mut self, buf: &mut [u8], len: usize) {
        let Some(srtp) = self.srtp.as_mut() else {
            return;
        };
        if let Ok(n) = srtp.rtcp_tx.protect(buf, len) {
            self.out.push(buf[..n].to_vec());
        }
    }
}

/// SRTP contexts from the DTLS keying material. RFC 5764 §4.2: the DTLS client's write keys
/// come first; when we were the DTLS server (`dtls_active` false) the roles swap.
fn make_client_srtp(
    profile: SrtpProfile,
    km: &[u8],
    dtls_active: bool,
) -> Result<ClientSrtp, srtp::SrtpError> {
    let (first, second) = srtp::split_keying_material(profile, km)?;
    let (client, server) = if dtls_active {
        (first, second)
    } else {
        (second, first)
    };
    Ok(ClientSrtp {
        rtp_rx: RtpCipher::new(profile, &server)?,
        rtcp_rx: RtcpCipher::new(profile, &server)?,
        rtcp_tx: RtcpCipher::new(profile, &client)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a full-ICE server that answers `a=setup:active` (pion's default): the
    /// client answers the server's signed binding request, then acts as the DTLS server,
    /// and decrypts media sealed with the DTLS client's (the server's) write keys.
    #[test]
    fn answers_binding_requests_and_takes_the_dtls_server_role() {
        let now = Instant::now();
        let server_ctx = DtlsContext::generate().expect("server cert");
        let client_ctx = Arc::new(DtlsContext::generate().expect("client cert"));
        let server: SocketAddr = "127.0.0.1:9".parse().expect("addr");
        let p = ClientParams {
            local_ufrag: "cuf1".into(),
            local_pwd: "client-password-0123456789".into(),
            remote_ufrag: "suf1".into(),
            remote_pwd: "server-password-0123456789".into(),
            remote_fingerprint: *server_ctx.fingerprint(),
            server,
            video_pt: Some(96),
            video_codec: tern_proto::codec::VideoCodec::H264,
            audio_pt: Some(111),
            abs_capture_time_ext: None,
            rtcp: false,
            ntp_base: (now, 0),
            dtls_active: false,
        };
        let mut c = Client::new(p, client_ctx, now, 1);
        let mut out: Vec<Vec<u8>> = Vec::new();
        c.drain(&mut |d| out.push(d.to_vec()));
        // The client's check; the server answers it.
        let check = stun::Message::parse(&out[0]).expect("binding request");
        let mut buf = [0u8; 256];
        let n = stun::write_binding_success(
            &mut buf,
            check.transaction_id(),
            "127.0.0.1:5000".parse().expect("addr"),
            b"server-password-0123456789",
        )
        .expect("success");
        c.handle_input(now, &mut buf[..n]);
        assert_eq!(c.state(), ClientState::Handshaking);
        // The server checks too; the client answers with a signed success.
        let tid = [7u8; 12];
        let n = stun::write_binding_request(
            &mut buf,
            &tid,
            b"cuf1:suf1",
            b"client-password-0123456789",
            1,
            None,
            false,
        )
        .expect("request");
        c.handle_input(now, &mut buf[..n]);
        out.clear();
        c.drain(&mut |d| out.push(d.to_vec()));
        let resp = stun::Message::parse(&out[0]).expect("response");
        assert_eq!(resp.class(), stun::Class::Success);
        assert_eq!(resp.transaction_id(), &tid);
        assert!(resp.check_integrity(b"client-password-0123456789"));
        // The server is the DTLS client.
        let mut d = Dtls::new_12(server_ctx.config.clone(), server_ctx.cert.clone(), now);
        d.set_active(true);
        d.handle_timeout(now).expect("start");
        let mut keys = None;
        for _ in 0..20 {
            let mut pkts = Vec::new();
            let mut b = [0u8; 2048];
            loop {
                match d.poll_output(&mut b) {
                    dimpl::Output::Packet(p) => pkts.push(p.to_vec()),
                    dimpl::Output::KeyingMaterial(km, prof) => keys = Some((km.to_vec(), prof)),
                    dimpl::Output::Timeout(_) => break,
                    _ => {}
                }
            }
            for mut p in pkts {
                c.handle_input(now, &mut p);
            }
            let mut back = Vec::new();
            c.drain(&mut |x| back.push(x.to_vec()));
            for p in back {
                let _ = d.handle_packet(&p);
            }
            if c.state() == ClientState::Connected && keys.is_some() {
                break;
            }
        }
        assert_eq!(c.state(), ClientState::Connected);
        let (km, prof) = keys.expect("server keys");
        let profile = crate::viewer::srtp_profile(prof).expect("profile");
        // RFC 5764: the DTLS client's write keys come first; the server (DTLS client here)
        // seals with them.
        let (client_write, _) = srtp::split_keying_material(profile, &km).expect("split");
        let mut tx = RtpCipher::new(profile, &client_write).expect("cipher");
        let mut pkt = vec![0u8; 256];
        let hdr = rtp::HeaderOut {
            marker: true,
            payload_type: 111,
            sequence: 1,
            timestamp: 960,
            ssrc: 0x1234,
            abs_capture_time: None,
            transport_cc: None,
            abs_send_time: None,
        };
        let h = rtp::write_header(&mut pkt, &hdr).expect("header");
        pkt[h..h + 10].copy_from_slice(&[1; 10]);
        let n = tx.protect(&mut pkt, h + 10, h, 0).expect("protect");
        c.handle_input(now, &mut pkt[..n]);
        let a = c.track(MediaKind::Audio).expect("audio track");
        assert_eq!((a.packets, a.bad), (1, 0));
    }
}
