//! The server-offer direction, as OvenMediaEngine's WebSocket signalling uses it: the server
//! writes the offer, the player answers.
//!
//! - [`write_server_offer`] writes the server's sendonly offer: ICE-lite, `a=setup:passive`
//!   (see below), H264 and Opus, one BUNDLE transport, no candidates (the signalling sends them
//!   beside the SDP, as OME does).
//!
//! The DTLS role. OME offers `a=setup:actpass` (RFC 5763 §5) and browsers answer `active`.
//! tern's viewer is a DTLS server only, so its offer says `passive`, which every answerer must
//! meet with `active` (RFC 8842 §5.3). actpass would be wrong here: tern's offer is ICE-lite,
//! which makes the answerer the controlling ICE agent, and pion (OvenRtcTester's WebRTC stack,
//! v3.0.x) then takes the DTLS *server* role for an actpass offer while its answer still says
//! `active`, so both ends wait for a ClientHello. Chromium and pion both answer `passive` with
//! `active` and act on it.
//! - [`negotiate_answer`] reads the player's answer to that offer into the same
//!   [`Negotiated`] a WHEP offer gives, so both directions end in the same viewer.
//! - [`write_client_answer`] is the other end, for the lean test/load client: it answers a
//!   server offer as a browser would (recvonly, `a=setup:active`).
//! - [`parse_candidate_line`] reads one trickled candidate (`candidate:...`).

use std::fmt::Write as _;

use super::model::{
    ABS_CAPTURE_TIME_URI, Candidate, Direction, MediaDescription, PayloadType, SdpError,
    SessionDescription, Setup,
};
use super::negotiate::{Negotiated, NegotiatedMedia, OPUS_FMTP, StreamVideo, is_srtp};
use super::parse::parse_candidate;
use super::write::{Out, sdp_line, transport_lines};
use crate::codec::VideoCodec;

/// Payload type of H264 in a server offer.
pub const SERVER_VIDEO_PT: u8 = 96;
/// Payload type of Opus in a server offer.
pub const SERVER_AUDIO_PT: u8 = 111;
/// Extension id of abs-capture-time in a server offer (one-byte header form, 1–14).
pub const SERVER_ABS_CAPTURE_TIME_ID: u8 = 4;
/// The H264 format the server offers when the stream's SPS is not known yet: Constrained
/// Baseline level 3.1, non-interleaved (the demo clip, see scripts/make-clip.sh; what every
/// WebRTC browser decodes).
const SERVER_H264_FMTP: &str =
    "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f";
/// Mid of the video section in a server offer (audio is "1", or "0" without video).
const fn server_mid(index: usize) -> &'static str {
    if index == 0 { "0" } else { "1" }
}

/// What the server puts in its offer.
#[derive(Debug, Clone)]
pub struct ServerOfferParams<'a> {
    /// Our ICE username fragment.
    pub ice_ufrag: &'a str,
    /// Our ICE password.
    pub ice_pwd: &'a str,
    /// SHA-256 of our DTLS certificate.
    pub fingerprint_sha256: &'a [u8; 32],
    /// SSRC of the video we send; `None` leaves the video section out.
    pub video_ssrc: Option<u32>,
    /// SSRC of the audio we send; `None` leaves the audio section out.
    pub audio_ssrc: Option<u32>,
    /// RTCP CNAME.
    pub cname: &'a str,
    /// The o= line session id.
    pub session_id: u64,
    /// The stream's video codec and, for H264, the profile-level-id of its SPS when known
    /// (the offer states it instead of Constrained Baseline 3.1).
    pub video: StreamVideo,
}

/// The sections of a server offer in m-line order: (kind, payload type, ssrc).
fn server_sections(video: Option<u32>, audio: Option<u32>) -> Vec<(&'static str, u8, u32)> {
    let mut v = Vec::with_capacity(2);
    if let Some(s) = video {
        v.push(("video", SERVER_VIDEO_PT, s));
    }
    if let Some(s) = audio {
        v.push(("audio", SERVER_AUDIO_PT, s));
    }
    v
}

/// Writes the server's offer: ICE-lite, `a=setup:passive`, sendonly, `a=rtcp-mux` and
/// `a=rtcp-rsize`, one BUNDLE group; video in the stream's codec (H264/90000 unless
/// [`ServerOfferParams::video`] says otherwise) pt 96 ([`SERVER_VIDEO_PT`]; nack,
/// nack pli, ccm fir), audio opus/48000/2 pt 111 (`minptime=10;useinbandfec=1`); the
/// abs-capture-time extension as id 4 in both; `a=msid` and `a=ssrc` lines so that a
/// browser puts both tracks in one MediaStream. Mids are "0" and "1" in that order.
pub fn write_server_offer(p: &ServerOfferParams<'_>) -> String {
    let sections = server_sections(p.video_ssrc, p.audio_ssrc);
    let mut o = Out(String::with_capacity(1536));
    sdp_line!(o, "v=0");
    sdp_line!(o, "o=- {} 2 IN IP4 127.0.0.1", p.session_id);
    sdp_line!(o, "s=-");
    sdp_line!(o, "t=0 0");
    if !sections.is_empty() {
        let mids: Vec<&str> = (0..sections.len()).map(server_mid).collect();
        sdp_line!(o, "a=group:BUNDLE {}", mids.join(" "));
    }
    sdp_line!(o, "a=ice-lite");
    sdp_line!(o, "a=msid-semantic: WMS tern");
    for (i, (kind, pt, ssrc)) in sections.into_iter().enumerate() {
        sdp_line!(o, "m={kind} 9 UDP/TLS/RTP/SAVPF {pt}");
        sdp_line!(o, "c=IN IP4 0.0.0.0");
        sdp_line!(o, "a=mid:{}", server_mid(i));
        transport_lines(
            &mut o,
            p.ice_ufrag,
            p.ice_pwd,
            p.fingerprint_sha256,
            "passive",
        );
        sdp_line!(o, "a=sendonly");
        sdp_line!(o, "a=rtcp-mux");
        sdp_line!(o, "a=rtcp-rsize");
        sdp_line!(
            o,
            "a=extmap:{SERVER_ABS_CAPTURE_TIME_ID} {ABS_CAPTURE_TIME_URI}"
        );
        if kind == "video" {
            sdp_line!(o, "a=rtpmap:{pt} {}/90000", p.video.codec.sdp_name());
            match (p.video.codec, p.video.h264_profile) {
                (VideoCodec::H264, Some([a, b, c])) => sdp_line!(
                    o,
                    "a=fmtp:{pt} level-asymmetry-allowed=1;packetization-mode=1;profile-level-id={a:02x}{b:02x}{c:02x}"
                ),
                (VideoCodec::H264, None) => sdp_line!(o, "a=fmtp:{pt} {SERVER_H264_FMTP}"),
                (VideoCodec::Vp9, _) => sdp_line!(o, "a=fmtp:{pt} profile-id=0"),
                (VideoCodec::Av1, _) => sdp_line!(o, "a=fmtp:{pt} profile=0"),
                (VideoCodec::Vp8 | VideoCodec::H265, _) => {}
            }
            sdp_line!(o, "a=rtcp-fb:{pt} nack");
            sdp_line!(o, "a=rtcp-fb:{pt} nack pli");
            sdp_line!(o, "a=rtcp-fb:{pt} ccm fir");
        } else {
            sdp_line!(o, "a=rtpmap:{pt} opus/48000/2");
            sdp_line!(o, "a=fmtp:{pt} {OPUS_FMTP}");
        }
        sdp_line!(o, "a=msid:tern {kind}");
        sdp_line!(o, "a=ssrc:{ssrc} cname:{}", p.cname);
        sdp_line!(o, "a=ssrc:{ssrc} msid:tern {kind}");
    }
    o.0
}

/// Why a player's answer does not fit the server's offer. Display is a sentence for the
/// signalling error message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AnswerMismatch {
    /// The answer has another number of m= sections than the offer (RFC 3264 §6).
    #[error("answer has {answer} m= sections, the offer had {offer}")]
    SectionCount {
        /// Sections in the answer.
        answer: usize,
        /// Sections in the offer.
        offer: usize,
    },
    /// An m= section of the answer is not of the kind the offer had there.
    #[error("answer's m= section {0} is not {1}")]
    Kind(usize, &'static str),
    /// An accepted section does not carry the payload type the offer had.
    #[error("answer's {0} section does not accept the offered payload type")]
    Payload(&'static str),
    /// Every section is rejected, inactive or sendonly.
    #[error("answer accepts no media (every section is rejected, inactive or sendonly)")]
    NoMedia,
    /// No ICE username fragment.
    #[error("answer has no a=ice-ufrag")]
    NoIceUfrag,
    /// No ICE password.
    #[error("answer has no a=ice-pwd")]
    NoIcePwd,
    /// No SHA-256 DTLS fingerprint.
    #[error("answer has no sha-256 a=fingerprint")]
    NoFingerprint,
    /// An accepted section lacks `a=rtcp-mux`.
    #[error("answer's media has no a=rtcp-mux")]
    NoRtcpMux,
    /// The answer does not take the DTLS client role: the server's viewer is DTLS server
    /// only, so it needs `a=setup:active` (or no a=setup, which RFC 4145 reads as active).
    #[error("answer's a=setup must be active (the server is the DTLS server)")]
    Setup,
}

/// Reads the player's answer to a server offer written with video (`video`) and audio
/// (`audio`) sections, into the same [`Negotiated`] that [`super::negotiate`] gives for a
/// WHEP offer.
///
/// A section is accepted when its port is not 0, it is recvonly or sendrecv and it keeps the
/// offered payload type; the nack / nack pli / ccm fir feedback and the abs-capture-time id
/// are taken from the answer (what the player agreed to). When both sections are accepted
/// but not bundled, only the first is kept (one transport per viewer).
pub fn negotiate_answer(
    answer: &SessionDescription,
    video: bool,
    audio: bool,
) -> Result<Negotiated, AnswerMismatch> {
    let offered: Vec<(&'static str, u8)> = server_sections(video.then_some(0), audio.then_some(0))
        .into_iter()
        .map(|(k, pt, _)| (k, pt))
        .collect();
    if answer.media.len() != offered.len() {
        return Err(AnswerMismatch::SectionCount {
            answer: answer.media.len(),
            offer: offered.len(),
        });
    }
    let mut got_video = None;
    let mut got_audio = None;
    for (index, (m, &(kind, pt))) in answer.media.iter().zip(&offered).enumerate() {
        if m.kind != kind {
            return Err(AnswerMismatch::Kind(index, kind));
        }
        if m.port == 0
            || !is_srtp(&m.proto)
            || !matches!(m.direction(), Direction::RecvOnly | Direction::SendRecv)
        {
            continue;
        }
        if !m.formats.contains(&pt) {
            return Err(AnswerMismatch::Payload(kind));
        }
        let fb = |v: &str| m.payload(pt).is_some_and(|p| p.has_fb(v));
        let is_video = kind == "video";
        let n = NegotiatedMedia {
            mid: m
                .mid
                .clone()
                .unwrap_or_else(|| server_mid(index).to_string()),
            index,
            pt,
            nack: fb("nack"),
            pli: is_video && fb("nack pli"),
            fir: is_video && fb("ccm fir"),
            abs_capture_time_ext: m.extmap_id(ABS_CAPTURE_TIME_URI).filter(|&id| id <= 14),
            transport_cc_ext: None,
            abs_send_time_ext: None,
            rtx_pt: None,
            vp8: false,
            fmtp: if is_video {
                SERVER_H264_FMTP.to_string()
            } else {
                OPUS_FMTP.to_string()
            },
        };
        if is_video {
            got_video = Some(n);
        } else {
            got_audio = Some(n);
        }
    }
    let in_bundle =
        |m: &Option<NegotiatedMedia>| m.as_ref().is_none_or(|m| answer.bundle.contains(&m.mid));
    let bundle = in_bundle(&got_video) && in_bundle(&got_audio) && !answer.bundle.is_empty();
    if !bundle && got_video.is_some() && got_audio.is_some() {
        // One transport only: video comes first in the offer.
        got_audio = None;
    }
    let first = match (&got_video, &got_audio) {
        (None, None) => return Err(AnswerMismatch::NoMedia),
        (Some(m), _) | (None, Some(m)) => m.index,
    };
    let Some(t) = answer.media.get(first) else {
        return Err(AnswerMismatch::NoMedia);
    };
    let remote_ufrag = t.ice_ufrag().ok_or(AnswerMismatch::NoIceUfrag)?.to_string();
    let remote_pwd = t.ice_pwd().ok_or(AnswerMismatch::NoIcePwd)?.to_string();
    let remote_fingerprint = t
        .fingerprint()
        .filter(|(algo, _)| *algo == "sha-256")
        .and_then(|(_, b)| <[u8; 32]>::try_from(b.as_slice()).ok())
        .ok_or(AnswerMismatch::NoFingerprint)?;
    if !matches!(t.setup(), None | Some(Setup::Active)) {
        return Err(AnswerMismatch::Setup);
    }
    for m in got_video.iter().chain(got_audio.iter()) {
        if !answer.media.get(m.index).is_some_and(|s| s.rtcp_mux) {
            return Err(AnswerMismatch::NoRtcpMux);
        }
    }
    Ok(Negotiated {
        remote_ufrag,
        remote_pwd,
        remote_fingerprint,
        video: got_video,
        audio: got_audio,
        bundle,
    })
}

/// The lean client's side of an answer to a server offer.
#[derive(Debug, Clone)]
pub struct ClientAnswerParams<'a> {
    /// Our ICE username fragment.
    pub ice_ufrag: &'a str,
    /// Our ICE password.
    pub ice_pwd: &'a str,
    /// SHA-256 of our DTLS certificate.
    pub fingerprint_sha256: &'a [u8; 32],
    /// Accept the offered nack / nack pli / ccm fir feedback (the client sends RTCP).
    pub rtcp_feedback: bool,
    /// Accept the abs-capture-time extension when offered.
    pub abs_capture_time: bool,
}

/// What [`write_client_answer`] accepted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientChoice {
    /// H264 payload type of the accepted video section.
    pub video_pt: Option<u8>,
    /// Opus payload type of the accepted audio section.
    pub audio_pt: Option<u8>,
    /// abs-capture-time extension id, when accepted.
    pub abs_capture_time_ext: Option<u8>,
    /// Index of the first accepted section (its ICE and DTLS parameters are the
    /// transport's), if any.
    pub transport_index: Option<usize>,
}

/// The first payload type of `m` that the lean client takes: H264 with
/// packetization-mode=1 for video, opus/48000 for audio.
fn client_pick(m: &MediaDescription) -> Option<u8> {
    let want = |p: &&PayloadType| match m.kind.as_str() {
        "video" => {
            p.codec.eq_ignore_ascii_case("H264")
                && p.clock_rate == 90_000
                && p.fmtp_param("packetization-mode") == Some("1")
        }
        "audio" => p.codec.eq_ignore_ascii_case("opus") && p.clock_rate == 48_000,
        _ => false,
    };
    m.formats
        .iter()
        .find_map(|&pt| m.payload(pt).filter(want).map(|p| p.pt))
}

/// Answers a server offer as a browser would: the first video section with H264
/// (packetization-mode=1) and the first audio section with Opus are accepted recvonly with
/// `a=setup:active` (the client is the DTLS client), every other section is rejected (port 0).
/// Sections must be sendonly or sendrecv with an SRTP profile to be accepted. When the offer
/// bundles, so does the answer; without a BUNDLE group only the first section is accepted.
pub fn write_client_answer(
    offer: &SessionDescription,
    p: &ClientAnswerParams<'_>,
) -> (String, ClientChoice) {
    let mut choice = ClientChoice::default();
    let mut accepted: Vec<Option<u8>> = Vec::with_capacity(offer.media.len());
    for (i, m) in offer.media.iter().enumerate() {
        let usable = m.port != 0
            && is_srtp(&m.proto)
            && matches!(m.direction(), Direction::SendOnly | Direction::SendRecv);
        let bundled = m.mid.as_ref().is_some_and(|mid| offer.bundle.contains(mid));
        let room = choice.transport_index.is_none() || bundled;
        let slot = match m.kind.as_str() {
            "video" => &mut choice.video_pt,
            "audio" => &mut choice.audio_pt,
            _ => {
                accepted.push(None);
                continue;
            }
        };
        let pick = if usable && room && slot.is_none() {
            client_pick(m)
        } else {
            None
        };
        if let Some(pt) = pick {
            *slot = Some(pt);
            choice.transport_index.get_or_insert(i);
            if p.abs_capture_time && choice.abs_capture_time_ext.is_none() {
                choice.abs_capture_time_ext =
                    m.extmap_id(ABS_CAPTURE_TIME_URI).filter(|&id| id <= 14);
            }
        }
        accepted.push(pick);
    }
    let mut o = Out(String::with_capacity(1536));
    sdp_line!(o, "v=0");
    sdp_line!(o, "o=- 2 2 IN IP4 127.0.0.1");
    sdp_line!(o, "s=-");
    sdp_line!(o, "t=0 0");
    let bundled: Vec<&str> = offer
        .media
        .iter()
        .zip(&accepted)
        .filter(|(_, a)| a.is_some())
        .filter_map(|(m, _)| m.mid.as_deref())
        .filter(|mid| offer.bundle.iter().any(|b| b == mid))
        .collect();
    if !bundled.is_empty() {
        sdp_line!(o, "a=group:BUNDLE {}", bundled.join(" "));
    }
    sdp_line!(o, "a=msid-semantic: WMS");
    for (m, pick) in offer.media.iter().zip(&accepted) {
        let fmt = match pick {
            Some(pt) => pt.to_string(),
            None => m.fmt.first().cloned().unwrap_or_else(|| "0".into()),
        };
        let port = if pick.is_some() { 9 } else { 0 };
        sdp_line!(o, "m={} {port} {} {fmt}", m.kind, m.proto);
        sdp_line!(o, "c=IN IP4 0.0.0.0");
        if let Some(mid) = &m.mid {
            sdp_line!(o, "a=mid:{mid}");
        }
        transport_lines(
            &mut o,
            p.ice_ufrag,
            p.ice_pwd,
            p.fingerprint_sha256,
            "active",
        );
        let Some(pt) = *pick else {
            sdp_line!(o, "a=inactive");
            continue;
        };
        sdp_line!(o, "a=recvonly");
        sdp_line!(o, "a=rtcp-mux");
        if m.rtcp_rsize {
            sdp_line!(o, "a=rtcp-rsize");
        }
        if let Some(id) = choice.abs_capture_time_ext.filter(|_| p.abs_capture_time)
            && m.extmap_id(ABS_CAPTURE_TIME_URI) == Some(id)
        {
            sdp_line!(o, "a=extmap:{id} {ABS_CAPTURE_TIME_URI}");
        }
        if let Some(pl) = m.payload(pt) {
            let mut rtpmap = format!("a=rtpmap:{pt} {}/{}", pl.codec, pl.clock_rate);
            if let Some(c) = pl.channels {
                let _ = write!(rtpmap, "/{c}");
            }
            sdp_line!(o, "{rtpmap}");
            if let Some(f) = &pl.fmtp {
                sdp_line!(o, "a=fmtp:{pt} {f}");
            }
            if p.rtcp_feedback {
                for fb in ["nack", "nack pli", "ccm fir"] {
                    if pl.has_fb(fb) {
                        sdp_line!(o, "a=rtcp-fb:{pt} {fb}");
                    }
                }
            }
        }
    }
    (o.0, choice)
}

/// Parses one trickled ICE candidate as a WebSocket signalling or `RTCIceCandidate.candidate`
/// carries it: `candidate:<foundation> <component> <transport> <priority> <address> <port>
/// typ <type> ...` (an `a=` prefix is accepted too). `Ok(None)` for a candidate whose address
/// is not an IP (an mDNS `.local` name), which an ICE-lite server has no use for.
pub fn parse_candidate_line(s: &str) -> Result<Option<Candidate>, SdpError> {
    let s = s.trim();
    let s = s.strip_prefix("a=").unwrap_or(s);
    let Some(rest) = s.strip_prefix("candidate:") else {
        return Err(SdpError::Line {
            line: 1,
            problem: "candidate does not start with 'candidate:'",
        });
    };
    parse_candidate(1, Some(rest))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::sdp::{negotiate, write_answer};

    const FP: [u8; 32] = [0xAB; 32];
    const FP2: [u8; 32] = [0xCD; 32];

    fn offer_params(video: bool, audio: bool) -> ServerOfferParams<'static> {
        ServerOfferParams {
            ice_ufrag: "srvUfrag",
            ice_pwd: "srvPasswordSrvPassword12",
            fingerprint_sha256: &FP,
            video_ssrc: video.then_some(1111),
            audio_ssrc: audio.then_some(2222),
            cname: "tern",
            session_id: 42,
            video: StreamVideo::default(),
        }
    }

    fn client_params() -> ClientAnswerParams<'static> {
        ClientAnswerParams {
            ice_ufrag: "cliU",
            ice_pwd: "clientPasswordClientPw",
            fingerprint_sha256: &FP2,
            rtcp_feedback: true,
            abs_capture_time: true,
        }
    }

    #[test]
    fn server_offer_parses_and_reads_back() {
        let sdp = write_server_offer(&offer_params(true, true));
        let sd = SessionDescription::parse(&sdp).unwrap();
        assert!(sd.ice_lite());
        assert_eq!(sd.bundle(), ["0", "1"]);
        let m = sd.media();
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].kind(), "video");
        assert_eq!(m[0].formats(), [SERVER_VIDEO_PT]);
        assert_eq!(m[0].direction(), Direction::SendOnly);
        assert_eq!(m[0].setup(), Some(Setup::Passive));
        assert_eq!(m[0].ice_ufrag(), Some("srvUfrag"));
        assert_eq!(m[0].fingerprint().unwrap().1.as_slice(), FP);
        assert!(m[0].payload(96).unwrap().has_fb("nack pli"));
        assert_eq!(m[0].ssrc_cname(1111), Some("tern"));
        assert_eq!(m[1].kind(), "audio");
        assert_eq!(m[1].payload(111).unwrap().channels, Some(2));
        assert_eq!(m[1].extmap_id(ABS_CAPTURE_TIME_URI), Some(4));
        assert!(m.iter().all(|m| m.rtcp_mux() && m.candidates().is_empty()));
        // Audio only: one section, mid "0".
        let sd =
            SessionDescription::parse(&write_server_offer(&offer_params(false, true))).unwrap();
        assert_eq!(sd.media().len(), 1);
        assert_eq!(sd.media()[0].mid(), Some("0"));
        assert_eq!(sd.media()[0].formats(), [SERVER_AUDIO_PT]);
    }

    #[test]
    fn client_answer_negotiates_back_to_the_server() {
        let offer =
            SessionDescription::parse(&write_server_offer(&offer_params(true, true))).unwrap();
        let (answer, choice) = write_client_answer(&offer, &client_params());
        assert_eq!(choice.video_pt, Some(96));
        assert_eq!(choice.audio_pt, Some(111));
        assert_eq!(choice.abs_capture_time_ext, Some(4));
        assert_eq!(choice.transport_index, Some(0));
        let ans = SessionDescription::parse(&answer).unwrap();
        assert_eq!(ans.media()[0].setup(), Some(Setup::Active));
        assert_eq!(ans.media()[0].direction(), Direction::RecvOnly);
        let neg = negotiate_answer(&ans, true, true).unwrap();
        assert_eq!(neg.remote_ufrag, "cliU");
        assert_eq!(neg.remote_pwd, "clientPasswordClientPw");
        assert_eq!(neg.remote_fingerprint, FP2);
        let v = neg.video().unwrap();
        assert_eq!((v.pt, v.nack, v.pli, v.fir), (96, true, true, true));
        assert_eq!(v.abs_capture_time_ext, Some(4));
        let a = neg.audio().unwrap();
        assert_eq!((a.pt, a.index, a.nack), (111, 1, false));
        assert!(neg.bundle);
    }

    /// Chrome's answer to a server offer (as Chrome 12x writes it for OME-style offers).
    const CHROME_ANSWER: &str = "v=0\r
o=- 1651148735539312361 2 IN IP4 127.0.0.1\r
s=-\r
t=0 0\r
a=group:BUNDLE 0 1\r
a=msid-semantic: WMS\r
m=video 9 UDP/TLS/RTP/SAVPF 96\r
c=IN IP4 0.0.0.0\r
a=rtcp:9 IN IP4 0.0.0.0\r
a=ice-ufrag:Q9k+\r
a=ice-pwd:t7V0ZDGzFbWc2LgiLNDZg3m4\r
a=ice-options:trickle\r
a=fingerprint:sha-256 CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD\r
a=setup:active\r
a=mid:0\r
a=extmap:4 http://www.webrtc.org/experiments/rtp-hdrext/abs-capture-time\r
a=recvonly\r
a=rtcp-mux\r
a=rtcp-rsize\r
a=rtpmap:96 H264/90000\r
a=rtcp-fb:96 ccm fir\r
a=rtcp-fb:96 nack\r
a=rtcp-fb:96 nack pli\r
a=fmtp:96 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f\r
m=audio 9 UDP/TLS/RTP/SAVPF 111\r
c=IN IP4 0.0.0.0\r
a=rtcp:9 IN IP4 0.0.0.0\r
a=ice-ufrag:Q9k+\r
a=ice-pwd:t7V0ZDGzFbWc2LgiLNDZg3m4\r
a=ice-options:trickle\r
a=fingerprint:sha-256 CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD:CD\r
a=setup:active\r
a=mid:1\r
a=extmap:4 http://www.webrtc.org/experiments/rtp-hdrext/abs-capture-time\r
a=recvonly\r
a=rtcp-mux\r
a=rtpmap:111 opus/48000/2\r
a=fmtp:111 minptime=10;useinbandfec=1\r
";

    #[test]
    fn chrome_answer() {
        let ans = SessionDescription::parse(CHROME_ANSWER).unwrap();
        let neg = negotiate_answer(&ans, true, true).unwrap();
        assert_eq!(neg.remote_ufrag, "Q9k+");
        assert_eq!(neg.remote_fingerprint, FP2);
        assert!(neg.video().unwrap().nack);
        assert_eq!(neg.audio().unwrap().abs_capture_time_ext, Some(4));
    }

    /// pion (OvenRtcTester) registers codecs without fmtp or feedback, so its answer has an
    /// rtpmap without channels and no a=fmtp / a=rtcp-fb: still a fit.
    #[test]
    fn bare_answer_without_fmtp_or_feedback() {
        let a = CHROME_ANSWER
            .replace("a=rtcp-fb:96 ccm fir\r\n", "")
            .replace("a=rtcp-fb:96 nack\r\n", "")
            .replace("a=rtcp-fb:96 nack pli\r\n", "")
            .replace(
                "a=fmtp:96 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f\r\n",
                "",
            )
            .replace("opus/48000/2", "opus/48000")
            .replace("a=setup:active\r\n", "");
        let neg = negotiate_answer(&SessionDescription::parse(&a).unwrap(), true, true).unwrap();
        let v = neg.video().unwrap();
        assert!(!v.nack && !v.pli);
        assert_eq!(v.fmtp, SERVER_H264_FMTP);
        assert!(neg.audio().is_some());
    }

    #[test]
    fn answers_that_do_not_fit() {
        let parse = |s: &str| SessionDescription::parse(s).unwrap();
        let e = |s: String| negotiate_answer(&parse(&s), true, true).unwrap_err();
        assert_eq!(
            e(CHROME_ANSWER.replace("a=setup:active", "a=setup:passive")),
            AnswerMismatch::Setup
        );
        assert_eq!(
            e(CHROME_ANSWER.replace("a=setup:active", "a=setup:actpass")),
            AnswerMismatch::Setup
        );
        assert_eq!(
            negotiate_answer(&parse(CHROME_ANSWER), true, false).unwrap_err(),
            AnswerMismatch::SectionCount {
                answer: 2,
                offer: 1
            }
        );
        assert_eq!(
            e(CHROME_ANSWER.replace(
                "m=video 9 UDP/TLS/RTP/SAVPF 96",
                "m=video 9 UDP/TLS/RTP/SAVPF 97"
            )),
            AnswerMismatch::Payload("video")
        );
        assert_eq!(
            e(CHROME_ANSWER.replace("a=recvonly", "a=inactive")),
            AnswerMismatch::NoMedia
        );
        assert_eq!(
            e(CHROME_ANSWER.replace("m=video 9", "m=audio 9")),
            AnswerMismatch::Kind(0, "video")
        );
        assert_eq!(
            e(CHROME_ANSWER.replace("a=rtcp-mux\r\n", "")),
            AnswerMismatch::NoRtcpMux
        );
        assert_eq!(
            e(CHROME_ANSWER.replace("a=ice-pwd:t7V0ZDGzFbWc2LgiLNDZg3m4\r\n", "")),
            AnswerMismatch::NoIcePwd
        );
        // Video rejected: audio alone is served.
        let a = CHROME_ANSWER.replace("m=video 9 ", "m=video 0 ");
        let neg = negotiate_answer(&parse(&a), true, true).unwrap();
        assert!(neg.video().is_none());
        assert_eq!(neg.audio().unwrap().index, 1);
        // Not bundled: only the first section (video) is kept.
        let a = CHROME_ANSWER.replace("a=group:BUNDLE 0 1\r\n", "");
        let neg = negotiate_answer(&parse(&a), true, true).unwrap();
        assert!(neg.video().is_some() && neg.audio().is_none());
    }

    /// A WHEP-style offer answered by the server, then the same tracks offered by the server:
    /// both directions end in the same negotiated parameters for the viewer.
    #[test]
    fn both_directions_agree() {
        let client_offer = crate::sdp::write_offer(&crate::sdp::OfferParams {
            ice_ufrag: "cliU",
            ice_pwd: "clientPasswordClientPw",
            fingerprint_sha256: &FP2,
            video: true,
            audio: true,
            abs_capture_time: true,
            all_video: false,
        });
        let o = SessionDescription::parse(&client_offer).unwrap();
        let whep = negotiate(&o).unwrap();
        let _ = write_answer(
            &o,
            &whep,
            &crate::sdp::AnswerParams {
                ice_ufrag: "srvUfrag",
                ice_pwd: "srvPasswordSrvPassword12",
                fingerprint_sha256: &FP,
                candidate_ips: &[std::net::Ipv4Addr::LOCALHOST.into()],
                candidate_port: 1,
                video_ssrc: 1,
                audio_ssrc: 2,
                rtx_ssrc: 3,
                cname: "c",
                session_id: 1,
            },
        );
        let so = SessionDescription::parse(&write_server_offer(&offer_params(true, true))).unwrap();
        let (answer, _) = write_client_answer(&so, &client_params());
        let ome =
            negotiate_answer(&SessionDescription::parse(&answer).unwrap(), true, true).unwrap();
        assert_eq!(whep.remote_ufrag, ome.remote_ufrag);
        assert_eq!(whep.remote_fingerprint, ome.remote_fingerprint);
        for (a, b) in [(whep.video(), ome.video()), (whep.audio(), ome.audio())] {
            let (a, b) = (a.unwrap(), b.unwrap());
            assert_eq!(
                (a.pt, a.nack, a.pli, a.fir, a.index),
                (b.pt, b.nack, b.pli, b.fir, b.index)
            );
        }
    }

    #[test]
    fn client_answer_rejects_what_it_cannot_take() {
        // An offer whose video is VP8 only: video rejected, audio accepted.
        let sdp = write_server_offer(&offer_params(true, true))
            .replace("a=rtpmap:96 H264/90000", "a=rtpmap:96 VP8/90000");
        let (answer, choice) =
            write_client_answer(&SessionDescription::parse(&sdp).unwrap(), &client_params());
        assert_eq!(choice.video_pt, None);
        assert_eq!(choice.audio_pt, Some(111));
        assert_eq!(choice.transport_index, Some(1));
        let ans = SessionDescription::parse(&answer).unwrap();
        assert_eq!(ans.media()[0].port(), 0);
        assert_eq!(ans.bundle(), ["1"]);
    }

    #[test]
    fn candidate_lines() {
        let c = parse_candidate_line("candidate:1 1 UDP 2130706431 127.0.0.1 10000 typ host")
            .unwrap()
            .unwrap();
        assert_eq!((c.port, c.typ.as_str()), (10000, "host"));
        assert!(
            parse_candidate_line("a=candidate:2 1 udp 1 x.local 9 typ host generation 0")
                .unwrap()
                .is_none()
        );
        assert!(parse_candidate_line("").is_err());
        assert!(parse_candidate_line("candidate:1 1 udp").is_err());
        assert!(parse_candidate_line("1 1 udp 1 1.2.3.4 9 typ host").is_err());
    }

    /// The offer names the stream's codec, with the fmtp each needs (none for VP8 and
    /// H265), and a browser-like answer to it still negotiates on the offered payload type.
    #[test]
    fn offer_in_the_streams_codec() {
        for (codec, fmtp) in [
            (VideoCodec::Vp8, None),
            (VideoCodec::Vp9, Some("profile-id=0")),
            (VideoCodec::Av1, Some("profile=0")),
            (VideoCodec::H265, None),
        ] {
            let mut p = offer_params(true, true);
            p.video = StreamVideo {
                codec,
                h264_profile: None,
            };
            let text = write_server_offer(&p);
            let sd = SessionDescription::parse(&text).unwrap();
            let v = sd.media()[0].payload(SERVER_VIDEO_PT).unwrap();
            assert_eq!(v.codec, codec.sdp_name(), "{text}");
            assert_eq!(v.fmtp.as_deref(), fmtp, "{text}");
            assert!(!text.contains("H264"), "{text}");
            assert!(v.has_fb("nack pli"));
        }
    }
}
