//! Writing SDP: the ICE-lite, DTLS-passive answer for a negotiated offer, and the recvonly
//! offer of a lean test client.

use std::fmt::{self, Write as _};
use std::net::IpAddr;

use super::model::{
    ABS_CAPTURE_TIME_URI, ABS_SEND_TIME_URI, MediaDescription, SessionDescription, TRANSPORT_CC_URI,
};
use super::negotiate::{Negotiated, NegotiatedMedia, OPUS_FMTP};
use super::parse::pt_of;

/// Our side of the answer.
#[derive(Debug, Clone)]
pub struct AnswerParams<'a> {
    /// Our ICE username fragment.
    pub ice_ufrag: &'a str,
    /// Our ICE password.
    pub ice_pwd: &'a str,
    /// SHA-256 of our DTLS certificate.
    pub fingerprint_sha256: &'a [u8; 32],
    /// Addresses of our host candidates, most preferred first (one per configured address,
    /// all on the same port; at least one).
    pub candidate_ips: &'a [IpAddr],
    /// Port of our host candidates.
    pub candidate_port: u16,
    /// SSRC of the video we send.
    pub video_ssrc: u32,
    /// SSRC of the audio we send.
    pub audio_ssrc: u32,
    /// Our RTX SSRC for video (used when the video's RTX payload type was negotiated).
    pub rtx_ssrc: u32,
    /// RTCP CNAME.
    pub cname: &'a str,
    /// The o= line session id.
    pub session_id: u64,
}

/// One of our host candidates as an ICE candidate attribute value (`candidate:...`, no `a=`):
/// the `index`-th configured address gets foundation `index + 1` and a local preference one
/// below the previous, so a peer that can reach several tries them in the configured order
/// (RFC 8445 §5.1.2.1: type preference 126 for host, component 1).
#[derive(Debug, Clone, Copy)]
pub struct HostCandidate {
    index: usize,
    ip: IpAddr,
    port: u16,
}

impl HostCandidate {
    /// The `index`-th host candidate (0 = most preferred) at `ip`:`port`.
    pub fn new(index: usize, ip: IpAddr, port: u16) -> Self {
        HostCandidate { index, ip, port }
    }

    /// Its priority: type preference 126, local preference 65535 − index, component 1.
    pub fn priority(&self) -> u32 {
        let local = 65535u32.saturating_sub(u32::try_from(self.index).unwrap_or(u32::MAX));
        (126 << 24) | (local << 8) | 255
    }
}

impl fmt::Display for HostCandidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "candidate:{} 1 udp {} {} {} typ host",
            self.index + 1,
            self.priority(),
            self.ip,
            self.port
        )
    }
}

/// An SDP body being written, CRLF line ends.
pub(super) struct Out(pub(super) String);

impl Out {
    pub(super) fn line(&mut self, args: fmt::Arguments<'_>) {
        // Writing into a String cannot fail.
        let _ = self.0.write_fmt(args);
        self.0.push_str("\r\n");
    }
}

macro_rules! sdp_line {
    ($o:expr, $($t:tt)*) => { $o.line(format_args!($($t)*)) };
}
pub(super) use sdp_line;

/// `AA:BB:...` uppercase hex.
pub(super) fn fingerprint_hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 3);
    for (i, x) in b.iter().enumerate() {
        if i > 0 {
            s.push(':');
        }
        let _ = write!(s, "{x:02X}");
    }
    s
}

pub(super) fn transport_lines(o: &mut Out, ufrag: &str, pwd: &str, fp: &[u8], setup: &str) {
    sdp_line!(o, "a=ice-ufrag:{ufrag}");
    sdp_line!(o, "a=ice-pwd:{pwd}");
    sdp_line!(o, "a=fingerprint:sha-256 {}", fingerprint_hex(fp));
    sdp_line!(o, "a=setup:{setup}");
}

/// Writes the answer to `offer` for what [`negotiate`] agreed.
///
/// The server is ICE-lite with one host candidate, DTLS passive, and sends only. Accepted
/// sections echo the offer's mid, proto, chosen payload type (H264 with the offer's fmtp,
/// Opus with `minptime=10;useinbandfec=1`), the nack / nack pli / ccm fir feedback and the
/// abs-capture-time extension when offered, and `a=rtcp-rsize` when offered. Every other
/// section is rejected: port 0, its first format, `a=inactive`.
pub fn write_answer(offer: &SessionDescription, neg: &Negotiated, p: &AnswerParams<'_>) -> String {
    let mut o = Out(String::with_capacity(2048));
    sdp_line!(o, "v=0");
    sdp_line!(o, "o=- {} 2 IN IP4 127.0.0.1", p.session_id);
    sdp_line!(o, "s=-");
    sdp_line!(o, "t=0 0");
    if neg.bundle {
        let mids: Vec<&str> = neg.accepted().map(|m| m.mid.as_str()).collect();
        sdp_line!(o, "a=group:BUNDLE {}", mids.join(" "));
    }
    sdp_line!(o, "a=ice-lite");
    sdp_line!(o, "a=msid-semantic: WMS tern");
    for (i, m) in offer.media.iter().enumerate() {
        let accepted = [(neg.video(), p.video_ssrc), (neg.audio(), p.audio_ssrc)]
            .into_iter()
            .find_map(|(n, ssrc)| n.filter(|n| n.index == i).map(|n| (n, ssrc)));
        match accepted {
            Some((n, ssrc)) => write_accepted(&mut o, m, n, ssrc, p),
            None => write_rejected(&mut o, m, p),
        }
    }
    o.0
}

fn write_accepted(
    o: &mut Out,
    m: &MediaDescription,
    n: &NegotiatedMedia,
    ssrc: u32,
    p: &AnswerParams<'_>,
) {
    let pt = n.pt;
    match n.rtx_pt {
        Some(rtx) => sdp_line!(o, "m={} 9 {} {pt} {rtx}", m.kind, m.proto),
        None => sdp_line!(o, "m={} 9 {} {pt}", m.kind, m.proto),
    }
    sdp_line!(o, "c=IN IP4 0.0.0.0");
    if let Some(mid) = &m.mid {
        sdp_line!(o, "a=mid:{mid}");
    }
    transport_lines(o, p.ice_ufrag, p.ice_pwd, p.fingerprint_sha256, "passive");
    sdp_line!(o, "a=sendonly");
    sdp_line!(o, "a=rtcp-mux");
    if m.rtcp_rsize {
        sdp_line!(o, "a=rtcp-rsize");
    }
    if let Some(pl) = m.payload(pt) {
        match pl.channels {
            Some(c) => sdp_line!(o, "a=rtpmap:{pt} {}/{}/{c}", pl.codec, pl.clock_rate),
            None => sdp_line!(o, "a=rtpmap:{pt} {}/{}", pl.codec, pl.clock_rate),
        }
    }
    if !n.fmtp.is_empty() {
        sdp_line!(o, "a=fmtp:{pt} {}", n.fmtp);
    }
    if n.nack {
        sdp_line!(o, "a=rtcp-fb:{pt} nack");
    }
    if n.pli {
        sdp_line!(o, "a=rtcp-fb:{pt} nack pli");
    }
    if n.fir {
        sdp_line!(o, "a=rtcp-fb:{pt} ccm fir");
    }
    if let Some(id) = n.abs_capture_time_ext {
        sdp_line!(o, "a=extmap:{id} {ABS_CAPTURE_TIME_URI}");
    }
    if let Some(id) = n.transport_cc_ext {
        sdp_line!(o, "a=rtcp-fb:{pt} transport-cc");
        sdp_line!(o, "a=extmap:{id} {TRANSPORT_CC_URI}");
    }
    if let Some(id) = n.abs_send_time_ext {
        sdp_line!(o, "a=rtcp-fb:{pt} goog-remb");
        sdp_line!(o, "a=extmap:{id} {ABS_SEND_TIME_URI}");
    }
    if let Some(rtx) = n.rtx_pt {
        sdp_line!(o, "a=rtpmap:{rtx} rtx/90000");
        sdp_line!(o, "a=fmtp:{rtx} apt={pt}");
    }
    sdp_line!(o, "a=msid:tern {}", m.kind);
    if n.rtx_pt.is_some() {
        sdp_line!(o, "a=ssrc-group:FID {ssrc} {}", p.rtx_ssrc);
    }
    sdp_line!(o, "a=ssrc:{ssrc} cname:{}", p.cname);
    if n.rtx_pt.is_some() {
        sdp_line!(o, "a=ssrc:{} cname:{}", p.rtx_ssrc, p.cname);
    }
    for (i, ip) in p.candidate_ips.iter().enumerate() {
        sdp_line!(o, "a={}", HostCandidate::new(i, *ip, p.candidate_port));
    }
    sdp_line!(o, "a=end-of-candidates");
}

fn write_rejected(o: &mut Out, m: &MediaDescription, p: &AnswerParams<'_>) {
    let fmt = m.fmt.first().map_or("0", String::as_str);
    sdp_line!(o, "m={} 0 {} {fmt}", m.kind, m.proto);
    sdp_line!(o, "c=IN IP4 0.0.0.0");
    if let Some(mid) = &m.mid {
        sdp_line!(o, "a=mid:{mid}");
    }
    transport_lines(o, p.ice_ufrag, p.ice_pwd, p.fingerprint_sha256, "passive");
    sdp_line!(o, "a=inactive");
    if let Some(pl) = pt_of(fmt).and_then(|pt| m.payload(pt)) {
        match pl.channels {
            Some(c) => sdp_line!(o, "a=rtpmap:{} {}/{}/{c}", pl.pt, pl.codec, pl.clock_rate),
            None => sdp_line!(o, "a=rtpmap:{} {}/{}", pl.pt, pl.codec, pl.clock_rate),
        }
    }
}

/// What a lean test client puts in its offer.
#[derive(Debug, Clone)]
pub struct OfferParams<'a> {
    /// Our ICE username fragment.
    pub ice_ufrag: &'a str,
    /// Our ICE password.
    pub ice_pwd: &'a str,
    /// SHA-256 of our DTLS certificate.
    pub fingerprint_sha256: &'a [u8; 32],
    /// Offer a video section.
    pub video: bool,
    /// Offer an audio section.
    pub audio: bool,
    /// Offer the abs-capture-time extension (id 4).
    pub abs_capture_time: bool,
    /// Offer every video codec tern forwards, not only H264 Baseline: H264 in its
    /// Baseline, Main and High profiles (pt 96-98), VP8 (100), VP9 (101), AV1 (102) and
    /// H265 (103). An edge pulling a stream from its origin offers this, so the origin
    /// answers in whatever its stream carries.
    pub all_video: bool,
}

/// Video payload types of an offer with [`OfferParams::all_video`]: pt, encoding name,
/// fmtp.
const ALL_VIDEO: [(u8, &str, Option<&str>); 7] = [
    (
        96,
        "H264",
        Some("level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f"),
    ),
    (
        97,
        "H264",
        Some("level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=4d001f"),
    ),
    (
        98,
        "H264",
        Some("level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=64001f"),
    ),
    (100, "VP8", None),
    (101, "VP9", Some("profile-id=0")),
    (102, "AV1", None),
    (103, "H265", None),
];

/// Writes a recvonly offer: H264 pt 96 (packetization-mode=1, profile-level-id=42e01f,
/// nack / nack pli / ccm fir), or every codec of [`OfferParams::all_video`], and Opus
/// pt 111, BUNDLE, rtcp-mux, `a=setup:actpass`, mids "0" and "1" in order. [`negotiate`]
/// accepts it.
pub fn write_offer(p: &OfferParams<'_>) -> String {
    let mut o = Out(String::with_capacity(1536));
    let mut mids = Vec::new();
    if p.video {
        mids.push(("video", mids.len()));
    }
    if p.audio {
        mids.push(("audio", mids.len()));
    }
    sdp_line!(o, "v=0");
    sdp_line!(o, "o=- 1 2 IN IP4 127.0.0.1");
    sdp_line!(o, "s=-");
    sdp_line!(o, "t=0 0");
    if !mids.is_empty() {
        let list: Vec<String> = mids.iter().map(|(_, i)| i.to_string()).collect();
        sdp_line!(o, "a=group:BUNDLE {}", list.join(" "));
    }
    sdp_line!(o, "a=msid-semantic: WMS");
    let video_pts: &[(u8, &str, Option<&str>)] = if p.all_video {
        &ALL_VIDEO
    } else {
        &ALL_VIDEO[..1]
    };
    for (kind, mid) in mids {
        let pts = if kind == "video" {
            let list: Vec<String> = video_pts.iter().map(|v| v.0.to_string()).collect();
            list.join(" ")
        } else {
            "111".to_string()
        };
        sdp_line!(o, "m={kind} 9 UDP/TLS/RTP/SAVPF {pts}");
        sdp_line!(o, "c=IN IP4 0.0.0.0");
        sdp_line!(o, "a=mid:{mid}");
        transport_lines(
            &mut o,
            p.ice_ufrag,
            p.ice_pwd,
            p.fingerprint_sha256,
            "actpass",
        );
        sdp_line!(o, "a=recvonly");
        sdp_line!(o, "a=rtcp-mux");
        sdp_line!(o, "a=rtcp-rsize");
        if p.abs_capture_time {
            sdp_line!(o, "a=extmap:4 {ABS_CAPTURE_TIME_URI}");
        }
        if kind == "video" {
            for (pt, name, fmtp) in video_pts {
                sdp_line!(o, "a=rtpmap:{pt} {name}/90000");
                sdp_line!(o, "a=rtcp-fb:{pt} nack");
                sdp_line!(o, "a=rtcp-fb:{pt} nack pli");
                sdp_line!(o, "a=rtcp-fb:{pt} ccm fir");
                if let Some(f) = fmtp {
                    sdp_line!(o, "a=fmtp:{pt} {f}");
                }
            }
        } else {
            sdp_line!(o, "a=rtpmap:111 opus/48000/2");
            sdp_line!(o, "a=fmtp:111 {OPUS_FMTP}");
        }
    }
    o.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_candidates_fall_in_priority_in_the_configured_order() {
        let v4: IpAddr = "203.0.113.7".parse().expect("ip");
        let v6: IpAddr = "2001:db8::7".parse().expect("ip");
        assert_eq!(
            HostCandidate::new(0, v4, 10000).to_string(),
            "candidate:1 1 udp 2130706431 203.0.113.7 10000 typ host"
        );
        assert_eq!(
            HostCandidate::new(1, v6, 10000).to_string(),
            "candidate:2 1 udp 2130706175 2001:db8::7 10000 typ host"
        );
        // Each line parses back as what it says.
        let line = HostCandidate::new(1, v6, 10000).to_string();
        let c = super::super::parse_candidate_line(&line)
            .expect("parses")
            .expect("not mDNS");
        assert_eq!((c.ip, c.port, c.priority), (v6, 10000, 2_130_706_175));
        assert!(HostCandidate::new(7, v4, 1).priority() < HostCandidate::new(6, v4, 1).priority());
    }
}
