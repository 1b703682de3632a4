//! Negotiation: what the server can send for an offer (the stream's video codec and Opus
//! audio, send-only), and why not when it cannot.

use super::model::{
    ABS_CAPTURE_TIME_URI, ABS_SEND_TIME_URI, Direction, MediaDescription, PayloadType,
    SessionDescription, Setup, TRANSPORT_CC_URI,
};
use crate::codec::VideoCodec;

/// Why the server cannot serve an offer. Display is a sentence for the HTTP error body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NegotiateError {
    /// No usable section has an ICE username fragment.
    #[error("offer has no a=ice-ufrag")]
    NoIceUfrag,
    /// No usable section has an ICE password.
    #[error("offer has no a=ice-pwd")]
    NoIcePwd,
    /// No SHA-256 DTLS fingerprint.
    #[error("offer has no sha-256 a=fingerprint")]
    NoFingerprint,
    /// A usable section lacks `a=rtcp-mux`.
    #[error("offer's media has no a=rtcp-mux")]
    NoRtcpMux,
    /// `a=setup:passive` (or holdconn) leaves the server, which is DTLS-passive, no role.
    #[error("offer's a=setup must be actpass or active")]
    Setup,
    /// Audio/video sections with a usable codec exist, but none wants to receive.
    #[error("offer's media must be recvonly or sendrecv")]
    Direction,
    /// No video section with H264 packetization-mode=1 and no audio section with Opus.
    #[error("offer has no H264 packetization-mode=1 or Opus payload")]
    NoCodec,
    /// The stream's video is in a codec the offer's video section does not take.
    #[error("the stream's video is {stream}; the offer's video section has {offered}")]
    StreamCodec {
        /// The stream's codec.
        stream: VideoCodec,
        /// The video codecs offered, e.g. `H264, VP8`.
        offered: String,
    },
}

/// What a stream's video is, as far as negotiation cares: its codec and, for H264, the
/// profile-level-id of its SPS once one was seen. The default (H264, profile unknown) is
/// what a stream without a publisher yet is served as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamVideo {
    /// The codec the publisher sends.
    pub codec: VideoCodec,
    /// The H264 SPS's profile-level-id, when known.
    pub h264_profile: Option<[u8; 3]>,
}

impl StreamVideo {
    /// An H264 stream with this SPS profile-level-id (if known).
    pub fn h264(profile: Option<[u8; 3]>) -> StreamVideo {
        StreamVideo {
            codec: VideoCodec::H264,
            h264_profile: profile,
        }
    }
}

/// Whether payload type `p` carries `codec` as tern forwards it: H264 with
/// packetization-mode 1 (any profile), VP8, VP9 profile 0, AV1 profile 0 (main), H265; each
/// at 90 kHz. A missing VP9 `profile-id` or AV1 `profile` means 0 (RFC 9628 §6, AV1 RTP
/// §7.2).
pub fn carries(codec: VideoCodec, p: &PayloadType) -> bool {
    if p.clock_rate != 90_000 || VideoCodec::from_sdp_name(&p.codec) != Some(codec) {
        return false;
    }
    match codec {
        VideoCodec::H264 => p.fmtp_param("packetization-mode") == Some("1"),
        VideoCodec::Vp9 => p.fmtp_param("profile-id").is_none_or(|v| v == "0"),
        VideoCodec::Av1 => p.fmtp_param("profile").is_none_or(|v| v == "0"),
        VideoCodec::Vp8 | VideoCodec::H265 => true,
    }
}

/// The video codecs of `payloads` (repair formats left out), for error messages.
pub(crate) fn offered_video(payloads: &[PayloadType]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for p in payloads {
        let n = p.codec.as_str();
        let repair = ["rtx", "red", "ulpfec", "flexfec-03"];
        if !repair.iter().any(|r| n.eq_ignore_ascii_case(r)) && !names.contains(&n) {
            names.push(n);
        }
    }
    if names.is_empty() {
        "no codec".into()
    } else {
        names.join(", ")
    }
}

/// What was agreed for one media section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NegotiatedMedia {
    /// The section's mid ("" when the offer gave none).
    pub mid: String,
    /// Index of the section among the offer's m-lines.
    pub index: usize,
    /// The chosen payload type.
    pub pt: u8,
    /// `a=rtcp-fb:<pt> nack` was offered.
    pub nack: bool,
    /// `a=rtcp-fb:<pt> nack pli` was offered.
    pub pli: bool,
    /// `a=rtcp-fb:<pt> ccm fir` was offered.
    pub fir: bool,
    /// Extension id of abs-capture-time, when offered with an id of 1–14.
    pub abs_capture_time_ext: Option<u8>,
    /// Extension id of the transport-wide sequence number (video, when offered with an id
    /// of 1–14 and `a=rtcp-fb:<pt> transport-cc`): the viewer then sends transport-wide
    /// congestion control feedback that tern's bandwidth estimate reads.
    pub transport_cc_ext: Option<u8>,
    /// Extension id of abs-send-time (video, without `transport_cc_ext`, when offered with
    /// an id of 1–14 and `a=rtcp-fb:<pt> goog-remb`): the viewer then estimates its path
    /// from the send times and reports REMB (draft-alvestrand-rmcat-remb), which tern's
    /// layer choice reads as the estimate.
    pub abs_send_time_ext: Option<u8>,
    /// The offer's RTX payload type for the chosen one (`apt=`), taken with
    /// `transport_cc_ext` or `abs_send_time_ext` only: tern sends no retransmissions on
    /// it, only the padding that probes the viewer's path (on the media SSRC, padding would
    /// take sequence numbers from the media). A REMB viewer's estimator counts the padding's
    /// bytes as received, so probes lift its estimate as they lift tern's own.
    pub rtx_pt: Option<u8>,
    /// The chosen payload type is VP8.
    pub vp8: bool,
    /// The fmtp the answer carries: the offer's for H264 (with the stream's own
    /// profile-level-id when its SPS is known), ours for Opus.
    pub fmtp: String,
}

/// The result of [`negotiate`]: the peer's transport parameters and the accepted sections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// The offerer's ICE username fragment.
    pub remote_ufrag: String,
    /// The offerer's ICE password.
    pub remote_pwd: String,
    /// SHA-256 of the offerer's DTLS certificate.
    pub remote_fingerprint: [u8; 32],
    pub(super) video: Option<NegotiatedMedia>,
    pub(super) audio: Option<NegotiatedMedia>,
    /// Whether the answer carries a BUNDLE group.
    pub(super) bundle: bool,
}

impl Negotiated {
    /// The accepted video section.
    pub fn video(&self) -> Option<&NegotiatedMedia> {
        self.video.as_ref()
    }

    /// The accepted audio section.
    pub fn audio(&self) -> Option<&NegotiatedMedia> {
        self.audio.as_ref()
    }

    pub(super) fn accepted(&self) -> impl Iterator<Item = &NegotiatedMedia> {
        let mut v: Vec<&NegotiatedMedia> = self.video.iter().chain(self.audio.iter()).collect();
        v.sort_by_key(|m| m.index);
        v.into_iter()
    }
}

/// Our Opus parameters (RFC 7587): 10 ms minimum packets, in-band FEC.
pub(super) const OPUS_FMTP: &str = "minptime=10;useinbandfec=1";

/// Whether an H264 payload type carries what the server sends.
///
/// The rule: H264/90000, `packetization-mode=1`, and a `profile-level-id` whose
/// profile_idc is 0x42 (Baseline; any constraint flags, since a Baseline decoder decodes
/// the Constrained Baseline stream we send) and whose level_idc is at least 31 (level 3.1).
/// A missing `profile-level-id` is accepted: browsers that omit it decode far more than
/// the RFC 6184 default of Baseline level 1.0.
pub(super) fn h264_ok(p: &PayloadType) -> bool {
    if !p.codec.eq_ignore_ascii_case("H264") || p.clock_rate != 90_000 {
        return false;
    }
    if p.fmtp_param("packetization-mode") != Some("1") {
        return false;
    }
    match p.fmtp_param("profile-level-id") {
        None => true,
        Some(id) => {
            let Ok(v) = u32::from_str_radix(id, 16) else {
                return false;
            };
            id.len() == 6 && (v >> 16) == 0x42 && (v & 0xFF) >= 31
        }
    }
}

/// H264/90000 with `packetization-mode=1`, whatever its profile.
fn h264_mode1(p: &PayloadType) -> bool {
    p.codec.eq_ignore_ascii_case("H264")
        && p.clock_rate == 90_000
        && p.fmtp_param("packetization-mode") == Some("1")
}

/// The offered `profile_idc` of an H264 payload type (`None` without a readable
/// `profile-level-id`).
fn offered_profile_idc(p: &PayloadType) -> Option<u8> {
    let id = p.fmtp_param("profile-level-id")?;
    let v = u32::from_str_radix(id, 16).ok().filter(|_| id.len() == 6)?;
    u8::try_from(v >> 16).ok()
}

/// `fmtp` with its `profile-level-id` set to `id` (added when absent).
fn with_profile_level_id(fmtp: &str, id: [u8; 3]) -> String {
    let hex = format!("{:02x}{:02x}{:02x}", id[0], id[1], id[2]);
    let mut parts: Vec<String> = fmtp
        .split(';')
        .map(str::trim)
        .filter(|kv| !kv.is_empty())
        .filter(|kv| {
            !kv.split_once('=')
                .is_some_and(|(k, _)| k.trim().eq_ignore_ascii_case("profile-level-id"))
        })
        .map(str::to_string)
        .collect();
    parts.push(format!("profile-level-id={hex}"));
    parts.join(";")
}

/// The H264 payload type to send on, and the fmtp the answer gives it.
///
/// With the stream's SPS known (`stream`: its profile-level-id), the first offered payload
/// type of the stream's profile (`profile_idc`) is chosen, and the answer states the
/// stream's real profile-level-id (its level too: browsers offer
/// `level-asymmetry-allowed=1`). Otherwise, or when the viewer offers no such profile, the
/// Baseline rule of [`h264_ok`] applies and the offer's fmtp is echoed.
fn pick_h264(payloads: &[PayloadType], stream: Option<[u8; 3]>) -> Option<(&PayloadType, String)> {
    if let Some(id) = stream
        && let Some(p) = payloads
            .iter()
            .find(|p| h264_mode1(p) && offered_profile_idc(p) == Some(id[0]))
    {
        return Some((
            p,
            with_profile_level_id(p.fmtp.as_deref().unwrap_or(""), id),
        ));
    }
    let p = payloads.iter().find(|p| h264_ok(p))?;
    Some((p, p.fmtp.clone().unwrap_or_default()))
}

pub(super) fn opus_ok(p: &PayloadType) -> bool {
    p.codec.eq_ignore_ascii_case("opus") && p.clock_rate == 48_000 && p.channels == Some(2)
}

pub(super) fn is_srtp(proto: &str) -> bool {
    proto.ends_with("RTP/SAVPF") || proto.ends_with("RTP/SAVP")
}

/// [`negotiate_for`] an H264 stream whose SPS is not known yet: Baseline, the offer's fmtp.
pub fn negotiate(offer: &SessionDescription) -> Result<Negotiated, NegotiateError> {
    negotiate_for(offer, StreamVideo::default())
}

/// The payload type to send `stream`'s video on, and the fmtp the answer gives it: for
/// H264 see [`pick_h264`]; for the other codecs the first offered payload type that
/// [`carries`] it, with the offer's fmtp.
fn pick_video(payloads: &[PayloadType], stream: StreamVideo) -> Option<(&PayloadType, String)> {
    if stream.codec == VideoCodec::H264 {
        return pick_h264(payloads, stream.h264_profile);
    }
    let p = payloads.iter().find(|p| carries(stream.codec, p))?;
    Some((p, p.fmtp.clone().unwrap_or_default()))
}

/// Decides what the server sends for `offer`: the stream's video and Opus audio, sendonly.
/// `stream` is the stream's video codec and, for H264, its SPS's profile-level-id when
/// known. A video section that does not take the stream's codec (a VP8 stream, a viewer
/// offering only H264) is an error naming both, rather than an answer without video.
///
/// For H264: the first video section with an acceptable H264 payload type (with a profile, the first
/// offered payload type of the stream's profile_idc, answered with the stream's own
/// profile-level-id; else the rule on `h264_ok` in the source: Baseline profile_idc 0x42,
/// level ≥ 3.1, packetization-mode=1; the first such payload type in the offer's order
/// wins) and the first audio section with
/// opus/48000/2 are accepted when they are recvonly or sendrecv, have a non-zero port (or
/// port 0 with `a=bundle-only` inside the offer's BUNDLE group: RFC 8843 §6, JSEP §5.2.1,
/// what a `max-bundle` offerer sends for every section after the first) and an SRTP
/// profile. Every other section is rejected in the answer (port 0). When more than one
/// section is accepted they must all be in the offer's BUNDLE group; otherwise only the
/// first is kept, since the server has one ICE/DTLS transport per viewer. A bundled
/// transport's ICE and DTLS attributes and `a=rtcp-mux` are read from the offer's
/// BUNDLE-tag section (the group's first mid), which a bundle-only section need not repeat.
///
/// Errors when nothing is usable, or when the accepted sections lack `a=ice-ufrag`,
/// `a=ice-pwd`, a sha-256 `a=fingerprint` or `a=rtcp-mux`, or offer `a=setup:passive`.
pub fn negotiate_for(
    offer: &SessionDescription,
    stream: StreamVideo,
) -> Result<Negotiated, NegotiateError> {
    let mut video: Option<NegotiatedMedia> = None;
    let mut audio: Option<NegotiatedMedia> = None;
    let mut wrong_direction = false;
    // A usable video section that lacks the stream's codec, when the codec is not H264
    // (H264 keeps its old rule: such a section is left out and audio may still be served).
    let mut codec_missing: Option<String> = None;
    for (index, m) in offer.media.iter().enumerate() {
        if (m.port == 0 && !bundled_only(offer, m)) || !is_srtp(&m.proto) {
            continue;
        }
        let (slot, chosen) = match m.kind.as_str() {
            "video" => (&mut video, pick_video(&m.payloads, stream)),
            "audio" => (
                &mut audio,
                m.payloads
                    .iter()
                    .find(|p| opus_ok(p))
                    .map(|p| (p, OPUS_FMTP.to_string())),
            ),
            _ => continue,
        };
        if slot.is_some() {
            continue;
        }
        let Some((p, fmtp)) = chosen else {
            if m.kind == "video" && stream.codec != VideoCodec::H264 && codec_missing.is_none() {
                codec_missing = Some(offered_video(&m.payloads));
            }
            continue;
        };
        if !matches!(m.direction(), Direction::RecvOnly | Direction::SendRecv) {
            wrong_direction = true;
            continue;
        }
        let is_video = m.kind == "video";
        let transport_cc_ext = m
            .extmap_id(TRANSPORT_CC_URI)
            .filter(|&id| id <= 14 && is_video && p.has_fb("transport-cc"));
        let abs_send_time_ext = m
            .extmap_id(ABS_SEND_TIME_URI)
            .filter(|&id| id <= 14 && is_video && transport_cc_ext.is_none())
            .filter(|_| p.has_fb("goog-remb"));
        *slot = Some(NegotiatedMedia {
            mid: m.mid.clone().unwrap_or_default(),
            index,
            pt: p.pt,
            nack: p.has_fb("nack"),
            pli: is_video && p.has_fb("nack pli"),
            fir: is_video && p.has_fb("ccm fir"),
            abs_capture_time_ext: m.extmap_id(ABS_CAPTURE_TIME_URI).filter(|&id| id <= 14),
            transport_cc_ext,
            abs_send_time_ext,
            rtx_pt: transport_cc_ext.or(abs_send_time_ext).and_then(|_| {
                let apt = p.pt.to_string();
                m.payloads
                    .iter()
                    .find(|r| {
                        r.codec.eq_ignore_ascii_case("rtx") && r.fmtp_param("apt") == Some(&*apt)
                    })
                    .map(|r| r.pt)
            }),
            vp8: p.codec.eq_ignore_ascii_case("VP8"),
            fmtp,
        });
    }
    let in_bundle = |m: &Option<NegotiatedMedia>| {
        m.as_ref()
            .is_none_or(|m| !m.mid.is_empty() && offer.bundle.contains(&m.mid))
    };
    let bundle = in_bundle(&video) && in_bundle(&audio) && !offer.bundle.is_empty();
    if !bundle && let (Some(v), Some(a)) = (&video, &audio) {
        // One transport only: keep the earlier section.
        if v.index < a.index {
            audio = None;
        } else {
            video = None;
        }
    }
    if let (None, Some(offered)) = (&video, codec_missing) {
        return Err(NegotiateError::StreamCodec {
            stream: stream.codec,
            offered,
        });
    }
    let first = match (&video, &audio) {
        (None, None) if wrong_direction => return Err(NegotiateError::Direction),
        (None, None) => return Err(NegotiateError::NoCodec),
        (Some(v), Some(a)) => v.index.min(a.index),
        (Some(m), None) | (None, Some(m)) => m.index,
    };
    // The transport's section: the BUNDLE tag when bundled, else the one accepted.
    let tag = offer
        .bundle
        .first()
        .and_then(|mid| offer.media.iter().find(|m| m.mid.as_ref() == Some(mid)));
    let Some(t) = tag.filter(|_| bundle).or(offer.media.get(first)) else {
        return Err(NegotiateError::NoCodec);
    };
    let remote_ufrag = t.ice_ufrag().ok_or(NegotiateError::NoIceUfrag)?.to_string();
    let remote_pwd = t.ice_pwd().ok_or(NegotiateError::NoIcePwd)?.to_string();
    let remote_fingerprint = t
        .fingerprint()
        .filter(|(algo, _)| *algo == "sha-256")
        .and_then(|(_, b)| <[u8; 32]>::try_from(b.as_slice()).ok())
        .ok_or(NegotiateError::NoFingerprint)?;
    if matches!(t.setup(), Some(Setup::Passive | Setup::HoldConn)) {
        return Err(NegotiateError::Setup);
    }
    for m in video.iter().chain(audio.iter()) {
        let muxed = |s: &MediaDescription| s.rtcp_mux || (bundle && s.bundle_only && t.rtcp_mux);
        if !offer.media.get(m.index).is_some_and(muxed) {
            return Err(NegotiateError::NoRtcpMux);
        }
    }
    Ok(Negotiated {
        remote_ufrag,
        remote_pwd,
        remote_fingerprint,
        video,
        audio,
        bundle,
    })
}

/// Whether `m` is a port-0 section that asks to be bundled (`a=bundle-only`) into the
/// offer's BUNDLE group, which names it.
fn bundled_only(offer: &SessionDescription, m: &MediaDescription) -> bool {
    m.bundle_only && m.mid.as_ref().is_some_and(|mid| offer.bundle.contains(mid))
}
