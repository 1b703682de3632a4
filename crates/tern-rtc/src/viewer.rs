//! The lean viewer session: ICE-lite, a transient DTLS handshake, SRTP, and RTCP.
//!
//! A viewer is driven by its owner (a stream worker) with explicit time:
//! [`Viewer::handle_stun`], [`Viewer::handle_dtls`], [`Viewer::handle_rtcp`],
//! [`Viewer::handle_timeout`] and [`Viewer::poll_timeout`]. Media goes out through
//! [`Viewer::write_media`], which writes one SRTP packet into a caller-owned buffer: the
//! viewer copies nothing else and keeps no per-packet history (NACKs are answered from the
//! stream's ring, see [`crate::stream`]).
//!
//! What a connected viewer keeps (the point of this crate): ICE credentials inline, the
//! selected 5-tuple, a send-only SRTP context for media (one expanded AES-GCM key, the only
//! per-viewer heap block once connected), SRTCP session keys in both directions that are
//! expanded per RTCP packet (about one a second), the replay windows of the viewer's RTCP
//! senders, and per track a handful of integers (ssrc, offsets, counters). The DTLS engine
//! and everything the handshake needs live in a separately boxed [`Handshake`] that is
//! dropped as soon as the peer has proven it holds the SRTP keys (its first authenticated
//! SRTCP packet), or a short linger after the handshake completes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dimpl::{Dtls, DtlsCertificate};
use tern_proto::codec::MediaKind;
use tern_proto::rtcp::{self, RtcpPacket};
use tern_proto::rtp::{self, HeaderOut};
use tern_proto::srtp::{self, RtcpReceiver, RtcpSender, RtpSender, SrtpProfile};
use tern_proto::{stun, twcc};

pub mod adapt;
mod budget;
mod bytes;
mod estimate;
mod resend;
mod track;

pub(crate) use bytes::sha256;
use bytes::{CloseAlert, write_padding};

use crate::stream::RingPacket;
pub use budget::{MIN_RESEND_GAP_MS, RETRANSMIT_SHARE, ViewerLive};
use budget::{Resend, Rtt};
use estimate::Bwe;
pub use track::TrackParams;
use track::{PrevLayers, Track};

/// Length of the ICE username fragment tern mints (RFC 8445 §5.3 requires ≥ 4 characters).
pub const UFRAG_LEN: usize = 8;
/// Length of the ICE password tern mints (RFC 8445 §5.3 requires ≥ 22 characters).
pub const PWD_LEN: usize = 24;

/// Timeouts and cadences of a viewer session.
#[derive(Debug, Clone, Copy)]
pub struct ViewerTimeouts {
    /// Time from creation to a completed DTLS handshake before the session is dropped.
    /// Default 30 s: Chromium gives up ICE after ~30 s without a pair.
    pub connect: Duration,
    /// Consent lifetime: with no valid binding request for this long the session ends.
    /// Default 30 s (RFC 7675 §5.1 consent expiry).
    pub consent: Duration,
    /// How long the DTLS engine is kept after the handshake if the peer sends no SRTCP
    /// (which would prove it holds the keys). Default 5 s: covers several retransmissions of
    /// the peer's final flight (DTLS initial RTO 1 s, RFC 6347 §4.2.4.1).
    pub handshake_linger: Duration,
    /// Interval between RTCP sender reports. Default 1 s (RFC 3550 §6.2 minimum is 5 s at
    /// low bandwidth, but browsers use SR for A/V sync and testers for latency: send often).
    pub sr_interval: Duration,
}

impl Default for ViewerTimeouts {
    fn default() -> Self {
        ViewerTimeouts {
            connect: Duration::from_secs(30),
            consent: Duration::from_secs(30),
            handshake_linger: Duration::from_secs(5),
            sr_interval: Duration::from_secs(1),
        }
    }
}

/// tern's SRTP protection profile preference as a DTLS server: AES-128-GCM seals a packet
/// ~10 % cheaper than AES-256-GCM (10 AES rounds against 14; BENCHMARKS.md) with the same
/// 16-byte tag, and every browser offers it; AES-256-GCM next, AES128_CM_HMAC_SHA1_80 last
/// (peers without GCM).
pub const DEFAULT_SRTP_PROFILES: [SrtpProfile; 3] = [
    SrtpProfile::AeadAes128Gcm,
    SrtpProfile::AeadAes256Gcm,
    SrtpProfile::Aes128CmHmacSha1_80,
];

/// Shared DTLS material: one certificate for every session of the server.
pub struct DtlsContext {
    pub(crate) config: Arc<dimpl::Config>,
    pub(crate) cert: DtlsCertificate,
    fingerprint: [u8; 32],
}

impl DtlsContext {
    /// Generates a fresh self-signed ECDSA P-256 certificate; as a server it picks SRTP
    /// profiles in [`DEFAULT_SRTP_PROFILES`] order.
    pub fn generate() -> Result<Self, ViewerError> {
        Self::generate_with(&DEFAULT_SRTP_PROFILES)
    }

    /// Like [`Self::generate`], with `profiles` as the server's preference (first = most
    /// preferred; the ones left out are never picked).
    pub fn generate_with(profiles: &[SrtpProfile]) -> Result<Self, ViewerError> {
        let cert = dimpl::certificate::generate_self_signed_certificate()
            .map_err(|e| ViewerError::Dtls(format!("certificate: {e:?}")))?;
        Self::from_certificate(cert.certificate, cert.private_key, profiles)
    }

    /// A context over a given certificate (DER) and private key (PKCS#8 or PKCS#1 DER, or
    /// PEM): ECDSA P-256/P-384 or RSA 2048-8192 bits.
    pub fn from_certificate(
        certificate: Vec<u8>,
        private_key: Vec<u8>,
        profiles: &[SrtpProfile],
    ) -> Result<Self, ViewerError> {
        let config = dimpl::Config::builder()
            .srtp_profiles(&dimpl_profiles(profiles))
            .build()
            .map_err(|e| ViewerError::Dtls(format!("config: {e}")))?;
        // Fail here, not in the first handshake, on a key dimpl cannot sign with.
        config
            .crypto_provider()
            .key_provider
            .load_private_key(&private_key)
            .map_err(|e| ViewerError::Dtls(format!("private key: {e}")))?;
        Ok(DtlsContext {
            fingerprint: sha256(&certificate),
            config: Arc::new(config),
            cert: DtlsCertificate {
                certificate,
                private_key,
            },
        })
    }

    /// SHA-256 fingerprint of the certificate, for `a=fingerprint`.
    pub fn fingerprint(&self) -> &[u8; 32] {
        &self.fingerprint
    }
}

/// Everything needed to create a viewer.
#[derive(Debug, Clone)]
pub struct ViewerParams {
    /// Our ICE ufrag (exactly [`UFRAG_LEN`] ASCII characters).
    pub local_ufrag: [u8; UFRAG_LEN],
    /// Our ICE password (exactly [`PWD_LEN`] ASCII characters).
    pub local_pwd: [u8; PWD_LEN],
    /// The viewer's ICE ufrag from its offer.
    pub remote_ufrag: Box<str>,
    /// SHA-256 fingerprint of the viewer's DTLS certificate from its offer.
    pub remote_fingerprint: [u8; 32],
    /// Video track, if negotiated.
    pub video: Option<TrackParams>,
    /// Audio track, if negotiated.
    pub audio: Option<TrackParams>,
    /// The simulcast layer the viewer is pinned to (`?layer=`), if any.
    pub pin: Option<u8>,
    /// Timeouts.
    pub timeouts: ViewerTimeouts,
}

/// Where a viewer is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewerState {
    /// Waiting for a valid ICE binding request.
    New,
    /// ICE is up, DTLS in progress.
    Handshaking,
    /// SRTP keys derived: media flows.
    Connected,
    /// Ended; the owner should remove it.
    Closed(CloseReason),
}

/// Why a viewer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// No completed handshake within [`ViewerTimeouts::connect`].
    ConnectTimeout,
    /// No consent refresh within [`ViewerTimeouts::consent`].
    ConsentExpired,
    /// DTLS failed (bad record, bad fingerprint, alert).
    DtlsFailed,
    /// The peer closed DTLS (close_notify) or sent RTCP BYE.
    PeerClosed,
    /// The owner closed it (DELETE, kick, shutdown).
    Local,
}

/// Errors from a viewer's entry points. A packet that causes one is dropped and counted by
/// the caller; only [`ViewerError::Dtls`] during a handshake ends the session.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ViewerError {
    /// A STUN message that is not a binding request for this session.
    #[error("stun: {0}")]
    Stun(&'static str),
    /// The DTLS engine failed.
    #[error("dtls: {0}")]
    Dtls(String),
    /// SRTP/SRTCP protection failed (bad tag, replay, unsupported profile).
    #[error("srtp: {0}")]
    Srtp(String),
    /// A packet arrived in a state where it cannot be used.
    #[error("unexpected packet in state {0:?}")]
    State(ViewerState),
    /// The output buffer is too small.
    #[error("output buffer too small")]
    BufferTooSmall,
}

/// What a viewer's RTCP asks of its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewerEvent {
    /// Retransmit this source packet (from the stream ring) to this viewer.
    Nack {
        /// Track kind.
        kind: MediaKind,
        /// The video layer whose ring holds it (0 for audio).
        layer: u8,
        /// Source extended sequence number.
        seq: u64,
        /// The sequence number the viewer NACKed (its numbering): give it back to
        /// [`Viewer::may_retransmit`].
        out: u16,
    },
    /// The viewer asked for a keyframe (PLI or FIR).
    KeyframeRequest,
}

/// Which timer of a viewer fires next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timer {
    /// Connect deadline.
    Connect,
    /// Consent expiry.
    Consent,
    /// DTLS retransmission.
    Dtls,
    /// End of the handshake linger.
    HandshakeDrop,
    /// Next RTCP sender report.
    SenderReport,
}

/// Transient DTLS state: dropped once the peer has shown it holds the keys.
struct Handshake {
    dtls: Dtls,
    remote_fingerprint: [u8; 32],
    next_timeout: Option<Instant>,
    connected_at: Option<Instant>,
}

/// SRTP state of a connected viewer: only what it uses. One expanded send-only RTP context
/// (the per-packet path) and, for RTCP (about one packet a second each way), session keys
/// that are expanded per packet, plus the replay windows of the viewer's RTCP senders.
struct Srtp {
    rtp_tx: RtpSender,
    rtcp_tx: RtcpSender,
    rtcp_rx: RtcpReceiver,
}

/// Counters of one viewer (read by metrics, never copied into snapshots).
#[derive(Debug, Default, Clone, Copy)]
pub struct ViewerCounters {
    /// RTP packets sent (including retransmissions).
    pub packets_sent: u64,
    /// RTP payload and header bytes sent, before SRTP overhead.
    pub bytes_sent: u64,
    /// Retransmissions sent in answer to NACKs.
    pub retransmits: u64,
    /// NACKed sequence numbers received.
    pub nacks: u64,
    /// PLI and FIR received.
    pub keyframe_requests: u64,
    /// Packets dropped as malformed or unauthenticated.
    pub dropped: u64,
    /// Probe (padding) packets sent.
    pub probes: u64,
}

/// One viewer.
pub struct Viewer {
    local_ufrag: [u8; UFRAG_LEN],
    local_pwd: [u8; PWD_LEN],
    remote_ufrag: Box<str>,
    remote_fingerprint: [u8; 32],
    remote: Option<SocketAddr>,
    state: ViewerState,
    created: Instant,
    last_consent: Instant,
    next_sr: Option<Instant>,
    timeouts: ViewerTimeouts,
    handshake: Option<Box<Handshake>>,
    /// The DTLS close_notify alert, sealed before the handshake state is dropped so that a
    /// connected viewer can still be told the session ends (RFC 6347 §4.1: the alert is one
    /// record of the DTLS connection; without the engine its keys are gone).
    close_alert: CloseAlert,
    /// Inline: a connected viewer always has it, and it is small (no expanded RTCP keys).
    srtp: Option<Srtp>,
    video: Option<Track>,
    audio: Option<Track>,
    /// The video layer was pinned (`?layer=` or the API): estimates do not move it.
    pinned: bool,
    /// The latest REMB (bit/s), for a viewer that sends that rather than transport-wide
    /// feedback; 0 when none came.
    remb_bps: u32,
    /// The latest REMB is below the one before (see [`Viewer::path_usage`]).
    remb_fell: bool,
    bwe: Option<Box<Bwe>>,
    /// The retransmission budget, made at the first NACK (see `resend.rs`).
    resend: Option<Box<Resend>>,
    /// The video layers sent before the last two switches (`track.rs`, `PrevLayers`).
    prev_layers: Option<Box<PrevLayers>>,
    rtt: Rtt,
    counters: ViewerCounters,
}

impl Viewer {
    /// A new session, waiting for ICE.
    pub fn new(p: ViewerParams, now: Instant) -> Self {
        Viewer {
            local_ufrag: p.local_ufrag,
            local_pwd: p.local_pwd,
            remote_ufrag: p.remote_ufrag,
            remote_fingerprint: p.remote_fingerprint,
            remote: None,
            state: ViewerState::New,
            created: now,
            last_consent: now,
            next_sr: None,
            timeouts: p.timeouts,
            handshake: None,
            close_alert: CloseAlert::default(),
            srtp: None,
            video: p.video.map(|v| {
                let mut t = Track::new(v);
                t.target = p.pin.unwrap_or(0);
                t.layer = t.target;
                t
            }),
            pinned: p.pin.is_some(),
            remb_bps: 0,
            remb_fell: false,
            bwe: None,
            resend: None,
            prev_layers: None,
            rtt: Rtt::default(),
            audio: p.audio.map(Track::new),
            counters: ViewerCounters::default(),
        }
    }

    /// Our ICE ufrag.
    pub fn local_ufrag(&self) -> &[u8; UFRAG_LEN] {
        &self.local_ufrag
    }

    /// The nominated remote address, once ICE has one.
    pub fn remote_addr(&self) -> Option<SocketAddr> {
        self.remote
    }

    /// The SRTP protection profile the handshake negotiated (`None` before keys).
    pub fn srtp_profile(&self) -> Option<SrtpProfile> {
        self.srtp.as_ref().map(|s| s.rtp_tx.profile())
    }

    /// Current state.
    pub fn state(&self) -> ViewerState {
        self.state
    }

    /// Counters.
    pub fn counters(&self) -> &ViewerCounters {
        &self.counters
    }

    /// Whether the transient handshake state is still held.
    pub fn has_handshake(&self) -> bool {
        self.handshake.is_some()
    }

    /// Loss figures from the viewer's latest RR for a track: (fraction lost /256,
    /// cumulative lost, jitter in RTP units).
    pub fn reported_loss(&self, kind: MediaKind) -> Option<(u8, i32, u32)> {
        self.track(kind)
            .map(|t| (t.fraction_lost, t.cumulative_lost, t.jitter))
    }

    fn track(&self, kind: MediaKind) -> Option<&Track> {
        match kind {
            MediaKind::Video => self.video.as_ref(),
            MediaKind::Audio => self.audio.as_ref(),
        }
    }

    fn track_mut(&mut self, kind: MediaKind) -> Option<&mut Track> {
        match kind {
            MediaKind::Video => self.video.as_mut(),
            MediaKind::Audio => self.audio.as_mut(),
        }
    }

    /// Replaces the ICE credentials (ICE restart, RFC 8445 §9). The nominated address is
    /// kept until a request with the new credentials nominates another.
    pub fn restart_ice(
        &mut self,
        local_ufrag: [u8; UFRAG_LEN],
        local_pwd: [u8; PWD_LEN],
        remote_ufrag: Box<str>,
    ) {
        self.local_ufrag = local_ufrag;
        self.local_pwd = local_pwd;
        self.remote_ufrag = remote_ufrag;
    }

    /// Ends the session.
    pub fn close(&mut self, reason: CloseReason) {
        self.state = ViewerState::Closed(reason);
        self.handshake = None;
        self.close_alert = CloseAlert::default();
        self.srtp = None;
    }

    /// Ends the session from our side ([`CloseReason::Local`]: DELETE, kick, shutdown) and
    /// passes the DTLS close_notify alert to `send` when the viewer is connected, so that
    /// it learns at once that the session is over instead of waiting for media to stop.
    pub fn close_locally(&mut self, send: &mut dyn FnMut(&[u8])) {
        if self.state == ViewerState::Connected {
            if self.handshake.is_some() {
                self.seal_close_alert();
            }
            if let Some(rec) = self.close_alert.record() {
                send(rec);
            }
        }
        self.close(CloseReason::Local);
    }

    /// Drops the transient handshake state, keeping only the sealed close_notify alert.
    fn drop_handshake(&mut self) {
        if self.handshake.is_some() {
            self.seal_close_alert();
        }
        self.handshake = None;
    }

    /// Has the DTLS engine seal its close_notify alert (the engine is not used again).
    fn seal_close_alert(&mut self) {
        let Some(hs) = self.handshake.as_mut() else {
            return;
        };
        if hs.connected_at.is_none() || hs.dtls.close().is_err() {
            return;
        }
        let mut buf = [0u8; 256];
        loop {
            match hs.dtls.poll_output(&mut buf) {
                dimpl::Output::Packet(p) => {
                    self.close_alert = CloseAlert::new(p);
                }
                dimpl::Output::Timeout(_) | dimpl::Output::BufferTooSmall { .. } => break,
                _ => {}
            }
        }
    }

    /// Answers a STUN binding request from `from`, writing the success response into `out`
    /// and returning its length. A request with USE-CANDIDATE (or the first valid one)
    /// nominates `from`; every valid request refreshes consent.
    pub fn handle_stun(
        &mut self,
        now: Instant,
        msg: &stun::Message<'_>,
        from: SocketAddr,
        out: &mut [u8],
    ) -> Result<usize, ViewerError> {
        if matches!(self.state, ViewerState::Closed(_)) {
            return Err(ViewerError::State(self.state));
        }
        if msg.class() != stun::Class::Request || msg.method() != stun::BINDING {
            return Err(ViewerError::Stun("not a binding request"));
        }
        let user = msg.username().ok_or(ViewerError::Stun("no USERNAME"))?;
        if !self.username_matches(user) {
            return Err(ViewerError::Stun("USERNAME does not match the session"));
        }
        if !msg.check_integrity(&self.local_pwd) {
            return Err(ViewerError::Stun("bad MESSAGE-INTEGRITY"));
        }
        if msg.attr(stun::FINGERPRINT).is_some() && !msg.check_fingerprint() {
            return Err(ViewerError::Stun("bad FINGERPRINT"));
        }
        if self.remote.is_none() || msg.use_candidate() {
            self.remote = Some(from);
        }
        if self.remote == Some(from) {
            self.last_consent = now;
        }
        if self.state == ViewerState::New {
            self.state = ViewerState::Handshaking;
        }
        stun::write_binding_success(out, msg.transaction_id(), from, &self.local_pwd)
            .map_err(|_| ViewerError::BufferTooSmall)
    }

    /// Whether a USERNAME (`ours:theirs`) belongs to this session.
    fn username_matches(&self, user: &[u8]) -> bool {
        let n = UFRAG_LEN;
        user.len() == n + 1 + self.remote_ufrag.len()
            && user[..n] == self.local_ufrag
            && user[n] == b':'
            && &user[n + 1..] == self.remote_ufrag.as_bytes()
    }

    /// Feeds a DTLS record from the nominated address; records to send back are passed to
    /// `send`.
    pub fn handle_dtls(
        &mut self,
        now: Instant,
        data: &[u8],
        ctx: &DtlsContext,
        send: &mut dyn FnMut(&[u8]),
    ) -> Result<(), ViewerError> {
        match self.state {
            ViewerState::Handshaking => {}
            // Records after the handshake state is gone (a retransmitted final flight)
            // are ignored: the peer has already proven it holds the keys.
            ViewerState::Connected if self.handshake.is_none() => return Ok(()),
            ViewerState::Connected => {}
            s => return Err(ViewerError::State(s)),
        }
        let hs = self.handshake.get_or_insert_with(|| {
            Box::new(Handshake {
                dtls: Dtls::new_auto(ctx.config.clone(), ctx.cert.clone(), now),
                remote_fingerprint: self.remote_fingerprint,
                next_timeout: None,
                connected_at: None,
            })
        });
        // dimpl wants its clock refreshed before input at a new instant.
        let _ = hs.dtls.handle_timeout(now);
        if let Err(e) = hs.dtls.handle_packet(data) {
            self.close(CloseReason::DtlsFailed);
            return Err(ViewerError::Dtls(e.to_string()));
        }
        self.drain_dtls(now, send)
    }

    fn drain_dtls(&mut self, now: Instant, send: &mut dyn FnMut(&[u8])) -> Result<(), ViewerError> {
        let Some(hs) = self.handshake.as_mut() else {
            return Ok(());
        };
        let mut buf = [0u8; 1500];
        let mut keys = None;
        let mut bad_cert = false;
        let mut closed = false;
        loop {
            match hs.dtls.poll_output(&mut buf) {
                dimpl::Output::Packet(p) => send(p),
                dimpl::Output::Timeout(t) => {
                    hs.next_timeout = Some(t);
                    break;
                }
                dimpl::Output::Connected => hs.connected_at = Some(now),
                dimpl::Output::PeerCert(der) if sha256(der) != hs.remote_fingerprint => {
                    bad_cert = true;
                }
                dimpl::Output::KeyingMaterial(km, profile) => keys = Some((km, profile)),
                dimpl::Output::CloseNotify => closed = true,
                dimpl::Output::BufferTooSmall { .. } => {
                    // Our records never exceed the MTU-sized buffer; treat it as fatal.
                    bad_cert = true;
                    break;
                }
                _ => {}
            }
        }
        if bad_cert {
            self.close(CloseReason::DtlsFailed);
            return Err(ViewerError::Dtls(
                "peer certificate does not match fingerprint".into(),
            ));
        }
        if closed {
            self.close(CloseReason::PeerClosed);
            return Ok(());
        }
        if let Some((km, profile)) = keys {
            let Some(profile) = srtp_profile(profile) else {
                self.close(CloseReason::DtlsFailed);
                return Err(ViewerError::Srtp("unsupported SRTP profile".into()));
            };
            let srtp = make_srtp(profile, &km).map_err(|e| ViewerError::Srtp(e.to_string()));
            match srtp {
                Ok(s) => {
                    self.srtp = Some(s);
                    self.state = ViewerState::Connected;
                    self.next_sr = Some(now + self.timeouts.sr_interval);
                }
                Err(e) => {
                    self.close(CloseReason::DtlsFailed);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Unprotects and reads an SRTCP compound packet from the viewer (in place). Requests
    /// are passed to `events`. Unknown RTCP types are ignored.
    pub fn handle_rtcp(
        &mut self,
        now: Instant,
        data: &mut [u8],
        events: &mut dyn FnMut(ViewerEvent),
    ) -> Result<(), ViewerError> {
        let Some(srtp) = self.srtp.as_mut() else {
            self.counters.dropped += 1;
            return Err(ViewerError::State(self.state));
        };
        let len = data.len();
        let plain = match srtp.rtcp_rx.unprotect(data, len) {
            Ok(n) => n,
            Err(e) => {
                self.counters.dropped += 1;
                return Err(ViewerError::Srtp(e.to_string()));
            }
        };
        // The peer has proven it holds the keys: the handshake state can go.
        self.drop_handshake();
        for pkt in rtcp::iter_compound(&data[..plain]) {
            let Ok(pkt) = pkt else {
                self.counters.dropped += 1;
                break;
            };
            match pkt {
                RtcpPacket::ReceiverReport(rr) => {
                    for b in rr.blocks() {
                        self.note_report(&b, now);
                    }
                }
                RtcpPacket::SenderReport(sr) => {
                    for b in sr.blocks() {
                        self.note_report(&b, now);
                    }
                }
                RtcpPacket::Nack(n) => {
                    let Some(kind) = self.kind_of(n.media_ssrc) else {
                        continue;
                    };
                    for seq in n.lost() {
                        self.counters.nacks += 1;
                        let Some(t) = self.track(kind) else { continue };
                        if !t.p.nack {
                            continue;
                        }
                        let history = self
                            .prev_layers
                            .as_deref()
                            .filter(|_| kind == MediaKind::Video);
                        match t.src_of(seq, history) {
                            Some((layer, src)) => events(ViewerEvent::Nack {
                                kind,
                                layer,
                                seq: src,
                                out: seq,
                            }),
                            None => self.nack_unmapped(now),
                        }
                    }
                }
                RtcpPacket::Pli { .. } | RtcpPacket::Fir(_) => {
                    self.counters.keyframe_requests += 1;
                    events(ViewerEvent::KeyframeRequest);
                }
                RtcpPacket::Bye { .. } => {
                    self.close(CloseReason::PeerClosed);
                    return Ok(());
                }
                RtcpPacket::Remb(r) => self.on_remb(r.bitrate),
                RtcpPacket::Other {
                    pt: rtcp::PT_RTPFB,
                    fmt: twcc::FMT_TWCC,
                    body,
                } => {
                    if let Some(fci) = body.get(8..) {
                        self.on_transport_feedback(fci, now);
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn kind_of(&self, ssrc: u32) -> Option<MediaKind> {
        if self.video.is_some_and(|t| t.p.ssrc == ssrc) {
            Some(MediaKind::Video)
        } else if self.audio.is_some_and(|t| t.p.ssrc == ssrc) {
            Some(MediaKind::Audio)
        } else {
            None
        }
    }

    fn note_report(&mut self, b: &rtcp::ReportBlock, now: Instant) {
        let Some(kind) = self.kind_of(b.ssrc) else {
            return;
        };
        if kind == MediaKind::Video {
            let ms = self.ms(now);
            self.rtt.on_report(b.lsr, b.dlsr, ms);
        }
        if let Some(t) = self.track_mut(kind) {
            t.fraction_lost = b.fraction_lost;
            t.cumulative_lost = b.cumulative_lost;
            t.jitter = b.jitter;
        }
    }

    /// Whether this viewer wants `pkt` as new media now: connected, track negotiated, and
    /// (for a video track not yet started) `pkt` starts a keyframe.
    pub fn wants(&self, pkt: &RingPacket) -> bool {
        if self.state != ViewerState::Connected {
            return false;
        }
        self.track(pkt.kind).is_some_and(|t| t.takes(pkt))
    }

    /// Whether the track of `kind` has started (received its first packet).
    pub fn started(&self, kind: MediaKind) -> bool {
        self.track(kind).is_some_and(|t| t.src_start.is_some())
    }

    /// Writes `pkt` as an SRTP packet for this viewer into `out` (header rewritten with this
    /// viewer's ssrc, sequence number and timestamp; payload copied; encrypted in place).
    /// Returns the length, or `None` when the viewer does not take this packet (see
    /// [`Viewer::wants`]; a retransmission of an already-sent packet is always taken).
    pub fn write_media(
        &mut self,
        pkt: &RingPacket,
        out: &mut [u8],
    ) -> Result<Option<usize>, ViewerError> {
        self.write_media_padded(pkt, out, 0)
    }

    /// As [`Viewer::write_media`], with `pad` bytes of RTP padding (RFC 3550 §5.1: the P bit
    /// set, `pad - 1` zero bytes and the count byte after the payload, encrypted with it;
    /// 0 for none). The fan-out pads packets of a frame that differ by a few bytes up to one
    /// size, so that they leave as one UDP GSO message.
    pub fn write_media_padded(
        &mut self,
        pkt: &RingPacket,
        out: &mut [u8],
        pad: u8,
    ) -> Result<Option<usize>, ViewerError> {
        if self.state != ViewerState::Connected {
            return Ok(None);
        }
        let (t, history) = match pkt.kind {
            MediaKind::Video => (self.video.as_mut(), Some(&mut self.prev_layers)),
            MediaKind::Audio => (self.audio.as_mut(), None),
        };
        let Some(t) = t else {
            return Ok(None);
        };
        let (started, base) = (t.src_start.is_some(), t.seq_base);
        let Some((out_ext, earlier)) = t.place(pkt, history) else {
            return Ok(None);
        };
        let fresh = earlier.is_none() && (out_ext > t.last_out || t.packets == 0);
        let vp8 = match (t.p.vp8, earlier) {
            (false, _) => None,
            (true, Some(l)) => l.vp8_ids(pkt),
            (true, None) => t.vp8_ids(pkt, started && t.seq_base != base, fresh),
        };
        let ts_offset = earlier.map_or(t.p.ts_offset, |l| l.ts_offset);
        let ts = pkt.rtp_ts.wrapping_add(ts_offset);
        let transport_cc = match (&mut self.bwe, t.p.transport_cc_ext) {
            (Some(b), Some(id)) if pkt.kind == MediaKind::Video => {
                let seq = b.next_seq;
                b.next_seq = seq.wrapping_add(1);
                Some((id, seq))
            }
            _ => None,
        };
        let hdr = HeaderOut {
            marker: pkt.marker,
            payload_type: t.p.pt,
            sequence: out_ext as u16,
            timestamp: ts,
            ssrc: t.p.ssrc,
            abs_capture_time: t.p.abs_capture_time_ext.map(|id| (id, pkt.capture_ntp)),
            transport_cc,
            abs_send_time: t
                .p
                .abs_send_time_ext
                .filter(|_| pkt.kind == MediaKind::Video)
                .map(|id| {
                    let since = Instant::now().saturating_duration_since(self.created);
                    (id, rtp::abs_send_time(since))
                }),
        };
        let Some(srtp) = self.srtp.as_mut() else {
            return Ok(None);
        };
        let hlen = rtp::write_header(out, &hdr).map_err(|_| ViewerError::BufferTooSmall)?;
        let plen = pkt.payload.len();
        let end = hlen + plen;
        let padded = end + usize::from(pad);
        if out.len() < padded + srtp.rtp_tx.overhead() {
            return Err(ViewerError::BufferTooSmall);
        }
        // Encrypted straight from the shared ring into the send batch: no plaintext copy.
        let roc = (out_ext >> 16) as u32;
        let n = match vp8 {
            // Rewritten ids: the payload is copied, patched and encrypted in place.
            Some((ids, pid, tl0)) => {
                out[hlen..end].copy_from_slice(&pkt.payload);
                ids.rewrite(&mut out[hlen..end], pid, tl0);
                write_padding(out, end, pad);
                srtp.rtp_tx.protect(out, padded, hlen, roc)
            }
            None if pad > 0 => {
                out[hlen..end].copy_from_slice(&pkt.payload);
                write_padding(out, end, pad);
                srtp.rtp_tx.protect(out, padded, hlen, roc)
            }
            None => srtp.rtp_tx.protect_payload(out, hlen, &pkt.payload, roc),
        }
        .map_err(|e| ViewerError::Srtp(e.to_string()))?;
        if let (Some((_, seq)), Some(b)) = (transport_cc, self.bwe.as_mut()) {
            let t = b.micros(Instant::now());
            b.est.on_sent(seq, n, t);
        }
        if out_ext > t.last_out || t.packets == 0 {
            t.last_out = out_ext;
            t.last_ts = ts;
            t.last_ntp = pkt.capture_ntp;
            t.packets = t.packets.wrapping_add(1);
            t.octets = t.octets.wrapping_add(plen as u32);
        } else {
            self.counters.retransmits += 1;
        }
        self.counters.packets_sent += 1;
        self.counters.bytes_sent += padded as u64;
        Ok(Some(n))
    }

    /// When the next timer fires, and which.
    pub fn poll_timeout(&self) -> Option<(Instant, Timer)> {
        let mut best: Option<(Instant, Timer)> = None;
        let mut consider = |t: Option<Instant>, which: Timer| {
            if let Some(t) = t
                && best.is_none_or(|(b, _)| t < b)
            {
                best = Some((t, which));
            }
        };
        match self.state {
            ViewerState::Closed(_) => return None,
            ViewerState::New | ViewerState::Handshaking => {
                consider(Some(self.created + self.timeouts.connect), Timer::Connect);
            }
            ViewerState::Connected => consider(self.next_sr, Timer::SenderReport),
        }
        if self.state != ViewerState::New {
            consider(
                Some(self.last_consent + self.timeouts.consent),
                Timer::Consent,
            );
        }
        if let Some(hs) = &self.handshake {
            consider(hs.next_timeout, Timer::Dtls);
            consider(
                hs.connected_at.map(|t| t + self.timeouts.handshake_linger),
                Timer::HandshakeDrop,
            );
        }
        best
    }

    /// Advances timers to `now`. DTLS retransmissions go to `send`; sender reports are
    /// written by [`Viewer::poll_sender_report`].
    pub fn handle_timeout(&mut self, now: Instant, send: &mut dyn FnMut(&[u8])) {
        match self.state {
            ViewerState::Closed(_) => return,
            ViewerState::New | ViewerState::Handshaking
                if now >= self.created + self.timeouts.connect =>
            {
                self.close(CloseReason::ConnectTimeout);
                return;
            }
            _ => {}
        }
        if self.state != ViewerState::New && now >= self.last_consent + self.timeouts.consent {
            self.close(CloseReason::ConsentExpired);
            return;
        }
        let mut drop_hs = false;
        let mut failed = false;
        if let Some(hs) = self.handshake.as_mut() {
            if hs
                .connected_at
                .is_some_and(|t| now >= t + self.timeouts.handshake_linger)
            {
                drop_hs = true;
            } else if hs.next_timeout.is_some_and(|t| now >= t) {
                failed = hs.dtls.handle_timeout(now).is_err();
            }
        }
        if drop_hs {
            self.drop_handshake();
        } else if failed {
            self.close(CloseReason::DtlsFailed);
        } else if self.handshake.is_some() {
            let _ = self.drain_dtls(now, send);
        }
    }

    /// If a sender report is due, writes an SRTCP compound (SR per started track + SDES
    /// CNAME) into `out` and returns its length.
    pub fn poll_sender_report(
        &mut self,
        now: Instant,
        cname: &str,
        out: &mut [u8],
    ) -> Option<usize> {
        if self.state != ViewerState::Connected || self.next_sr.is_none_or(|t| now < t) {
            return None;
        }
        self.next_sr = Some(now + self.timeouts.sr_interval);
        let srtp = self.srtp.as_mut()?;
        let mut len = 0;
        let mut first_ssrc = None;
        for t in [self.video.as_ref(), self.audio.as_ref()]
            .into_iter()
            .flatten()
        {
            if t.src_start.is_none() {
                continue;
            }
            let info = rtcp::SenderInfo {
                ssrc: t.p.ssrc,
                ntp: t.last_ntp,
                rtp_ts: t.last_ts,
                packet_count: t.packets,
                octet_count: t.octets,
            };
            len += rtcp::write_sr(&mut out[len..], &info, &[]).ok()?;
            if first_ssrc.is_none() && self.video.is_some_and(|v| v.p.ssrc == t.p.ssrc) {
                self.rtt.sr_mid = (t.last_ntp >> 16) as u32;
                self.rtt.sr_at_ms = now.saturating_duration_since(self.created).as_millis() as u32;
            }
            first_ssrc.get_or_insert(t.p.ssrc);
        }
        let ssrc = first_ssrc?;
        len += rtcp::write_sdes_cname(&mut out[len..], ssrc, cname).ok()?;
        srtp.rtcp_tx.protect(out, len).ok()
    }
}

/// Maps our SRTP profiles to dimpl's, in order.
pub(crate) fn dimpl_profiles(profiles: &[SrtpProfile]) -> Vec<dimpl::SrtpProfile> {
    profiles
        .iter()
        .map(|p| match p {
            SrtpProfile::AeadAes128Gcm => dimpl::SrtpProfile::AEAD_AES_128_GCM,
            SrtpProfile::AeadAes256Gcm => dimpl::SrtpProfile::AEAD_AES_256_GCM,
            SrtpProfile::Aes128CmHmacSha1_80 => dimpl::SrtpProfile::AES128_CM_SHA1_80,
        })
        .collect()
}

/// Maps dimpl's negotiated SRTP profile to ours.
pub(crate) fn srtp_profile(p: dimpl::SrtpProfile) -> Option<SrtpProfile> {
    match p {
        dimpl::SrtpProfile::AEAD_AES_128_GCM => Some(SrtpProfile::AeadAes128Gcm),
        dimpl::SrtpProfile::AEAD_AES_256_GCM => Some(SrtpProfile::AeadAes256Gcm),
        dimpl::SrtpProfile::AES128_CM_SHA1_80 => Some(SrtpProfile::Aes128CmHmacSha1_80),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

fn make_srtp(profile: SrtpProfile, km: &[u8]) -> Result<Srtp, srtp::SrtpError> {
    let (client, server) = srtp::split_keying_material(profile, km)?;
    Ok(Srtp {
        rtp_tx: RtpSender::new(profile, &server)?,
        rtcp_tx: RtcpSender::new(profile, &server)?,
        rtcp_rx: RtcpReceiver::new(profile, &client)?,
    })
}
