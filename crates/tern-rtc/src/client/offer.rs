//! The client half of offer/answer: what the lean client needs from the exchange
//! ([`ClientParams`]), read from the server's answer to the client's own offer (WHEP,
//! [`client_params`]) or written as the client's answer to a server offer
//! (OvenMediaEngine-style signalling, [`answer_offer`]).

use std::net::SocketAddr;
use std::time::Instant;

use tern_proto::codec::VideoCodec;
use tern_proto::sdp::{self, SessionDescription, Setup};

/// What the client needs from the offer/answer exchange.
#[derive(Debug, Clone)]
pub struct ClientParams {
    /// Our ICE ufrag (as in our offer).
    pub local_ufrag: String,
    /// Our ICE password.
    pub local_pwd: String,
    /// The server's ICE ufrag (from the answer).
    pub remote_ufrag: String,
    /// The server's ICE password.
    pub remote_pwd: String,
    /// SHA-256 fingerprint of the server's certificate (from the answer).
    pub remote_fingerprint: [u8; 32],
    /// The server's media address (from the answer's candidate).
    pub server: SocketAddr,
    /// Payload type of the video in the answer.
    pub video_pt: Option<u8>,
    /// The video codec of that payload type (H264 when the answer does not say).
    pub video_codec: VideoCodec,
    /// Payload type of Opus audio in the answer.
    pub audio_pt: Option<u8>,
    /// Extmap id of abs-capture-time in the answer.
    pub abs_capture_time_ext: Option<u8>,
    /// Send RTCP receiver reports and NACKs (a browser does).
    pub rtcp: bool,
    /// NTP time (RFC 5905 64-bit) of `ntp_base.0`, to turn instants into wall-clock time
    /// for latency: the caller maps its clock once.
    pub ntp_base: (Instant, u64),
    /// We are the DTLS client: the server's SDP said `a=setup:passive` (or `actpass`, or
    /// nothing). False when it said `active`: the server connects and we answer.
    pub dtls_active: bool,
}

/// Errors reading a server's answer (or, with [`answer_offer`], its offer) on the client
/// side.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    /// The answer is not valid SDP.
    #[error("malformed answer: {0}")]
    Sdp(String),
    /// The answer lacks something a client needs.
    #[error("answer has no {0}")]
    Missing(&'static str),
    /// The server's offer cannot be answered by the lean client.
    #[error("offer: {0}")]
    Offer(&'static str),
}

/// The client's own offer credentials and options.
#[derive(Debug, Clone)]
pub struct ClientOffer {
    /// Our ufrag.
    pub ufrag: String,
    /// Our password.
    pub pwd: String,
    /// Send RR and NACK.
    pub rtcp: bool,
    /// NTP time of an instant, for latency.
    pub ntp_base: (Instant, u64),
}

/// Reads the server's answer into [`ClientParams`].
pub fn client_params(answer: &str, offer: &ClientOffer) -> Result<ClientParams, AnswerError> {
    let sd = SessionDescription::parse(answer).map_err(|e| AnswerError::Sdp(e.to_string()))?;
    let mut remote_ufrag = None;
    let mut remote_pwd = None;
    let mut fingerprint = None;
    let mut server = None;
    let mut video_pt = None;
    let mut video_codec = VideoCodec::H264;
    let mut audio_pt = None;
    let mut abs = None;
    let mut setup = None;
    for m in sd.media() {
        if m.port() == 0 {
            continue;
        }
        remote_ufrag = remote_ufrag.or_else(|| m.ice_ufrag().map(str::to_string));
        remote_pwd = remote_pwd.or_else(|| m.ice_pwd().map(str::to_string));
        if fingerprint.is_none()
            && let Some((algo, bytes)) = m.fingerprint()
            && algo.eq_ignore_ascii_case("sha-256")
            && let Ok(fp) = <[u8; 32]>::try_from(bytes.as_slice())
        {
            fingerprint = Some(fp);
        }
        for c in m.candidates() {
            if server.is_none() && c.transport.eq_ignore_ascii_case("udp") {
                server = Some(SocketAddr::new(c.ip, c.port));
            }
        }
        let pt = m.formats().first().copied();
        match m.kind() {
            "video" if video_pt.is_none() => {
                video_pt = pt;
                if let Some(c) = pt
                    .and_then(|pt| m.payload(pt))
                    .and_then(|p| VideoCodec::from_sdp_name(&p.codec))
                {
                    video_codec = c;
                }
            }
            "audio" => audio_pt = audio_pt.or(pt),
            _ => {}
        }
        abs = abs.or_else(|| m.extmap_id(sdp::ABS_CAPTURE_TIME_URI));
        setup = setup.or(m.setup());
    }
    Ok(ClientParams {
        dtls_active: !matches!(setup, Some(sdp::Setup::Active)),
        local_ufrag: offer.ufrag.clone(),
        local_pwd: offer.pwd.clone(),
        remote_ufrag: remote_ufrag.ok_or(AnswerError::Missing("a=ice-ufrag"))?,
        remote_pwd: remote_pwd.ok_or(AnswerError::Missing("a=ice-pwd"))?,
        remote_fingerprint: fingerprint.ok_or(AnswerError::Missing("sha-256 a=fingerprint"))?,
        server: server.ok_or(AnswerError::Missing("UDP candidate"))?,
        video_pt,
        video_codec,
        audio_pt,
        abs_capture_time_ext: abs,
        rtcp: offer.rtcp,
        ntp_base: offer.ntp_base,
    })
}

/// The lean client's answer to a server offer.
#[derive(Debug, Clone)]
pub struct ClientAnswer {
    /// The SDP answer to send back.
    pub answer: String,
    /// Parameters for [`crate::client::Client::new`].
    pub params: ClientParams,
}

/// Answers a server offer for the lean client (the WebSocket-signalling mode of the load
/// tester): `offer_sdp` is the offer's SDP and `candidates` the `candidate:...` strings the
/// signalling sent beside it (candidates inside the SDP are used too). `client.ufrag`,
/// `client.pwd` and `fingerprint` (the client's DTLS certificate) go into the answer.
///
/// Roles: the offer must say `a=setup:actpass` (or passive) and the answer says
/// `a=setup:active`, so the client is the DTLS client, which is what
/// [`crate::client::Client`] is; against an ICE-lite offer it is the controlling ICE agent.
/// The first video section with H264 (packetization-mode=1) and the first audio section with
/// Opus are accepted (nack / pli / fir feedback only when `client.rtcp`), the rest rejected.
pub fn answer_offer(
    offer_sdp: &str,
    candidates: &[&str],
    client: &ClientOffer,
    fingerprint: &[u8; 32],
) -> Result<ClientAnswer, AnswerError> {
    let sd = SessionDescription::parse(offer_sdp).map_err(|e| AnswerError::Sdp(e.to_string()))?;
    let (answer, choice) = sdp::write_client_answer(
        &sd,
        &sdp::ClientAnswerParams {
            ice_ufrag: &client.ufrag,
            ice_pwd: &client.pwd,
            fingerprint_sha256: fingerprint,
            rtcp_feedback: client.rtcp,
            abs_capture_time: true,
        },
    );
    let t = choice
        .transport_index
        .and_then(|i| sd.media().get(i))
        .ok_or(AnswerError::Offer(
            "no H264 (packetization-mode=1) or Opus section to receive",
        ))?;
    if matches!(t.setup(), Some(Setup::Active | Setup::HoldConn)) {
        return Err(AnswerError::Offer(
            "a=setup must be actpass or passive (the client is the DTLS client)",
        ));
    }
    let remote_fingerprint = t
        .fingerprint()
        .filter(|(algo, _)| algo.eq_ignore_ascii_case("sha-256"))
        .and_then(|(_, b)| <[u8; 32]>::try_from(b.as_slice()).ok())
        .ok_or(AnswerError::Offer("no sha-256 a=fingerprint"))?;
    let udp = |c: &sdp::Candidate| {
        (c.transport.eq_ignore_ascii_case("udp") && c.component == 1)
            .then(|| SocketAddr::new(c.ip, c.port))
    };
    let server = sd
        .media()
        .iter()
        .flat_map(|m| m.candidates())
        .find_map(udp)
        .or_else(|| {
            candidates
                .iter()
                .filter_map(|c| sdp::parse_candidate_line(c).ok().flatten())
                .find_map(|c| udp(&c))
        })
        .ok_or(AnswerError::Offer(
            "no UDP candidate, in the SDP or beside it",
        ))?;
    Ok(ClientAnswer {
        answer,
        params: ClientParams {
            // Our answer says a=setup:active.
            dtls_active: true,
            local_ufrag: client.ufrag.clone(),
            local_pwd: client.pwd.clone(),
            remote_ufrag: t
                .ice_ufrag()
                .ok_or(AnswerError::Offer("no a=ice-ufrag"))?
                .to_string(),
            remote_pwd: t
                .ice_pwd()
                .ok_or(AnswerError::Offer("no a=ice-pwd"))?
                .to_string(),
            remote_fingerprint,
            server,
            video_pt: choice.video_pt,
            video_codec: VideoCodec::H264,
            audio_pt: choice.audio_pt,
            abs_capture_time_ext: choice.abs_capture_time_ext,
            rtcp: client.rtcp,
            ntp_base: client.ntp_base,
        },
    })
}
