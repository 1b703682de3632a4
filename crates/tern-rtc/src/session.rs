//! Offer/answer for a viewer: from a negotiated offer to the SDP answer and the
//! [`ViewerParams`] of the lean session, and (for the client side) from an answer to
//! [`ClientParams`].
//!
//! Randomness comes from the caller (`rand` closure) so this stays sans-IO and tests are
//! repeatable.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use tern_proto::sdp::{self, Negotiated, SessionDescription};

use crate::client::ClientParams;
use crate::viewer::{PWD_LEN, TrackParams, UFRAG_LEN, ViewerParams, ViewerTimeouts};

/// Characters of minted ICE credentials (RFC 8445 §15.4 ice-char, minus `+` and `/` so they
/// need no escaping anywhere).
const ALPHABET: &[u8; 62] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// Fills `out` with random credential characters.
pub fn random_chars(out: &mut [u8], rand: &mut dyn FnMut() -> u64) {
    for b in out {
        *b = ALPHABET[(rand() % ALPHABET.len() as u64) as usize];
    }
}

/// What the server side announces about itself.
#[derive(Debug, Clone, Copy)]
pub struct LocalInfo<'a> {
    /// SHA-256 fingerprint of the shared DTLS certificate.
    pub fingerprint: &'a [u8; 32],
    /// Address in the host candidate.
    pub candidate_ip: IpAddr,
    /// Media port in the host candidate.
    pub candidate_port: u16,
    /// RTCP CNAME of the stream.
    pub cname: &'a str,
}

/// The result of accepting an offer.
#[derive(Debug)]
pub struct Accepted {
    /// SDP answer.
    pub answer: String,
    /// Parameters for [`crate::viewer::Viewer::new`].
    pub params: ViewerParams,
}

/// Mints credentials, SSRCs and offsets, and writes the answer for a negotiated offer.
pub fn accept(
    offer: &SessionDescription,
    neg: &Negotiated,
    local: &LocalInfo<'_>,
    rand: &mut dyn FnMut() -> u64,
) -> Accepted {
    let mut ufrag = [0u8; UFRAG_LEN];
    let mut pwd = [0u8; PWD_LEN];
    random_chars(&mut ufrag, rand);
    random_chars(&mut pwd, rand);
    let video_ssrc = rand() as u32;
    let audio_ssrc = (rand() as u32) ^ 1;
    let mut track = |m: &sdp::NegotiatedMedia, ssrc: u32| TrackParams {
        pt: m.pt,
        ssrc,
        abs_capture_time_ext: m.abs_capture_time_ext,
        nack: m.nack,
        // Below 2^15 so the first wrap is far away (a habit from libwebrtc).
        initial_seq: (rand() % 0x8000) as u16,
        ts_offset: rand() as u32,
    };
    let video = neg.video().map(|m| track(m, video_ssrc));
    let audio = neg.audio().map(|m| track(m, audio_ssrc));
    // Credentials are ASCII by construction.
    let ufrag_s = String::from_utf8_lossy(&ufrag).into_owned();
    let pwd_s = String::from_utf8_lossy(&pwd).into_owned();
    let answer = sdp::write_answer(
        offer,
        neg,
        &sdp::AnswerParams {
            ice_ufrag: &ufrag_s,
            ice_pwd: &pwd_s,
            fingerprint_sha256: local.fingerprint,
            candidate_ip: local.candidate_ip,
            candidate_port: local.candidate_port,
            video_ssrc,
            audio_ssrc,
            cname: local.cname,
            session_id: rand() >> 2,
        },
    );
    Accepted {
        answer,
        params: ViewerParams {
            local_ufrag: ufrag,
            local_pwd: pwd,
            remote_ufrag: neg.remote_ufrag.clone().into_boxed_str(),
            remote_fingerprint: neg.remote_fingerprint,
            video,
            audio,
            timeouts: ViewerTimeouts::default(),
        },
    }
}

/// Errors reading a server's answer on the client side.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    /// The answer is not valid SDP.
    #[error("malformed answer: {0}")]
    Sdp(String),
    /// The answer lacks something a client needs.
    #[error("answer has no {0}")]
    Missing(&'static str),
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
    let mut audio_pt = None;
    let mut abs = None;
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
            "video" => video_pt = video_pt.or(pt),
            "audio" => audio_pt = audio_pt.or(pt),
            _ => {}
        }
        abs = abs.or_else(|| m.extmap_id(sdp::ABS_CAPTURE_TIME_URI));
    }
    Ok(ClientParams {
        local_ufrag: offer.ufrag.clone(),
        local_pwd: offer.pwd.clone(),
        remote_ufrag: remote_ufrag.ok_or(AnswerError::Missing("a=ice-ufrag"))?,
        remote_pwd: remote_pwd.ok_or(AnswerError::Missing("a=ice-pwd"))?,
        remote_fingerprint: fingerprint.ok_or(AnswerError::Missing("sha-256 a=fingerprint"))?,
        server: server.ok_or(AnswerError::Missing("UDP candidate"))?,
        video_pt,
        audio_pt,
        abs_capture_time_ext: abs,
        rtcp: offer.rtcp,
        ntp_base: offer.ntp_base,
    })
}
