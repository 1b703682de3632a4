//! Tests of the SDP subset: real browser offers, negotiation rules, answers, round trips,
//! error lines, trickle fragments and random input.

use super::negotiate::{OPUS_FMTP, h264_ok};
use super::*;
use std::net::{IpAddr, Ipv4Addr};

mod answer;
mod bundle_only;

const FP: &str = "A1:B2:C3:D4:E5:F6:07:18:29:3A:4B:5C:6D:7E:8F:90:01:12:23:34:45:56:67:78:89:9A:AB:BC:CD:DE:EF:F0";

/// A Chrome recvonly WHEP offer (two transceivers plus a data channel), as Chrome 12x
/// writes it, with the abs-capture-time extension enabled and two candidates (one mDNS).
fn chrome_offer() -> String {
    format!(
        "v=0\r
o=- 4215775240449105457 2 IN IP4 127.0.0.1\r
s=-\r
t=0 0\r
a=group:BUNDLE 0 1 2\r
a=extmap-allow-mixed\r
a=msid-semantic: WMS\r
m=video 9 UDP/TLS/RTP/SAVPF 96 97 98 99 100 101 102 103 104 105 106 107 108 109 127 125 39 40 45 46 112 113 114\r
c=IN IP4 0.0.0.0\r
a=rtcp:9 IN IP4 0.0.0.0\r
a=candidate:1467250027 1 udp 2122260223 192.168.1.10 56143 typ host generation 0 network-id 1\r
a=candidate:3598475 1 udp 2122194687 4b2a6e35-8c4f-4d6a-9f3e-2a1b3c4d5e6f.local 55000 typ host generation 0 network-id 2\r
a=ice-ufrag:Kq2u\r
a=ice-pwd:ZUxUn1kGyk5ZRTQ9ZB0f4SDt\r
a=ice-options:trickle\r
a=fingerprint:sha-256 {FP}\r
a=setup:actpass\r
a=mid:0\r
a=extmap:1 urn:ietf:params:rtp-hdrext:toffset\r
a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time\r
a=extmap:3 urn:3gpp:video-orientation\r
a=extmap:4 http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01\r
a=extmap:5 http://www.webrtc.org/experiments/rtp-hdrext/playout-delay\r
a=extmap:6 http://www.webrtc.org/experiments/rtp-hdrext/video-content-type\r
a=extmap:7 http://www.webrtc.org/experiments/rtp-hdrext/video-timing\r
a=extmap:8 http://www.webrtc.org/experiments/rtp-hdrext/color-space\r
a=extmap:9 urn:ietf:params:rtp-hdrext:sdes:mid\r
a=extmap:10 urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id\r
a=extmap:11 urn:ietf:params:rtp-hdrext:sdes:repaired-rtp-stream-id\r
a=extmap:13 http://www.webrtc.org/experiments/rtp-hdrext/abs-capture-time\r
a=recvonly\r
a=rtcp-mux\r
a=rtcp-rsize\r
a=rtpmap:96 VP8/90000\r
a=rtcp-fb:96 goog-remb\r
a=rtcp-fb:96 transport-cc\r
a=rtcp-fb:96 ccm fir\r
a=rtcp-fb:96 nack\r
a=rtcp-fb:96 nack pli\r
a=rtpmap:97 rtx/90000\r
a=fmtp:97 apt=96\r
a=rtpmap:98 VP9/90000\r
a=rtcp-fb:98 goog-remb\r
a=rtcp-fb:98 transport-cc\r
a=rtcp-fb:98 ccm fir\r
a=rtcp-fb:98 nack\r
a=rtcp-fb:98 nack pli\r
a=fmtp:98 profile-id=0\r
a=rtpmap:99 rtx/90000\r
a=fmtp:99 apt=98\r
a=rtpmap:100 VP9/90000\r
a=rtcp-fb:100 goog-remb\r
a=rtcp-fb:100 transport-cc\r
a=rtcp-fb:100 ccm fir\r
a=rtcp-fb:100 nack\r
a=rtcp-fb:100 nack pli\r
a=fmtp:100 profile-id=2\r
a=rtpmap:101 rtx/90000\r
a=fmtp:101 apt=100\r
a=rtpmap:102 H264/90000\r
a=rtcp-fb:102 goog-remb\r
a=rtcp-fb:102 transport-cc\r
a=rtcp-fb:102 ccm fir\r
a=rtcp-fb:102 nack\r
a=rtcp-fb:102 nack pli\r
a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42001f\r
a=rtpmap:103 rtx/90000\r
a=fmtp:103 apt=102\r
a=rtpmap:104 H264/90000\r
a=rtcp-fb:104 goog-remb\r
a=rtcp-fb:104 transport-cc\r
a=rtcp-fb:104 ccm fir\r
a=rtcp-fb:104 nack\r
a=rtcp-fb:104 nack pli\r
a=fmtp:104 level-asymmetry-allowed=1;packetization-mode=0;profile-level-id=42001f\r
a=rtpmap:105 rtx/90000\r
a=fmtp:105 apt=104\r
a=rtpmap:106 H264/90000\r
a=rtcp-fb:106 goog-remb\r
a=rtcp-fb:106 transport-cc\r
a=rtcp-fb:106 ccm fir\r
a=rtcp-fb:106 nack\r
a=rtcp-fb:106 nack pli\r
a=fmtp:106 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f\r
a=rtpmap:107 rtx/90000\r
a=fmtp:107 apt=106\r
a=rtpmap:108 H264/90000\r
a=rtcp-fb:108 goog-remb\r
a=rtcp-fb:108 transport-cc\r
a=rtcp-fb:108 ccm fir\r
a=rtcp-fb:108 nack\r
a=rtcp-fb:108 nack pli\r
a=fmtp:108 level-asymmetry-allowed=1;packetization-mode=0;profile-level-id=42e01f\r
a=rtpmap:109 rtx/90000\r
a=fmtp:109 apt=108\r
a=rtpmap:127 H264/90000\r
a=rtcp-fb:127 goog-remb\r
a=rtcp-fb:127 transport-cc\r
a=rtcp-fb:127 ccm fir\r
a=rtcp-fb:127 nack\r
a=rtcp-fb:127 nack pli\r
a=fmtp:127 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=4d001f\r
a=rtpmap:125 rtx/90000\r
a=fmtp:125 apt=127\r
a=rtpmap:39 H264/90000\r
a=rtcp-fb:39 goog-remb\r
a=rtcp-fb:39 transport-cc\r
a=rtcp-fb:39 ccm fir\r
a=rtcp-fb:39 nack\r
a=rtcp-fb:39 nack pli\r
a=fmtp:39 level-asymmetry-allowed=1;packetization-mode=0;profile-level-id=4d001f\r
a=rtpmap:40 rtx/90000\r
a=fmtp:40 apt=39\r
a=rtpmap:45 AV1/90000\r
a=rtcp-fb:45 goog-remb\r
a=rtcp-fb:45 transport-cc\r
a=rtcp-fb:45 ccm fir\r
a=rtcp-fb:45 nack\r
a=rtcp-fb:45 nack pli\r
a=fmtp:45 level-idx=5;profile=0;tier=0\r
a=rtpmap:46 rtx/90000\r
a=fmtp:46 apt=45\r
a=rtpmap:112 H264/90000\r
a=rtcp-fb:112 goog-remb\r
a=rtcp-fb:112 transport-cc\r
a=rtcp-fb:112 ccm fir\r
a=rtcp-fb:112 nack\r
a=rtcp-fb:112 nack pli\r
a=fmtp:112 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=640c1f\r
a=rtpmap:113 rtx/90000\r
a=fmtp:113 apt=112\r
a=rtpmap:114 red/90000\r
a=rtpmap:115 rtx/90000\r
a=fmtp:115 apt=114\r
m=audio 9 UDP/TLS/RTP/SAVPF 111 63 9 0 8 13 110 126\r
c=IN IP4 0.0.0.0\r
a=rtcp:9 IN IP4 0.0.0.0\r
a=ice-ufrag:Kq2u\r
a=ice-pwd:ZUxUn1kGyk5ZRTQ9ZB0f4SDt\r
a=ice-options:trickle\r
a=fingerprint:sha-256 {FP}\r
a=setup:actpass\r
a=mid:1\r
a=extmap:14 urn:ietf:params:rtp-hdrext:ssrc-audio-level\r
a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time\r
a=extmap:4 http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01\r
a=extmap:9 urn:ietf:params:rtp-hdrext:sdes:mid\r
a=recvonly\r
a=rtcp-mux\r
a=rtcp-rsize\r
a=rtpmap:111 opus/48000/2\r
a=rtcp-fb:111 transport-cc\r
a=fmtp:111 minptime=10;useinbandfec=1\r
a=rtpmap:63 red/48000/2\r
a=fmtp:63 111/111\r
a=rtpmap:9 G722/8000\r
a=rtpmap:0 PCMU/8000\r
a=rtpmap:8 PCMA/8000\r
a=rtpmap:13 CN/8000\r
a=rtpmap:110 telephone-event/48000\r
a=rtpmap:126 telephone-event/8000\r
m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r
c=IN IP4 0.0.0.0\r
a=ice-ufrag:Kq2u\r
a=ice-pwd:ZUxUn1kGyk5ZRTQ9ZB0f4SDt\r
a=ice-options:trickle\r
a=fingerprint:sha-256 {FP}\r
a=setup:actpass\r
a=mid:2\r
a=sctp-port:5000\r
a=max-message-size:262144\r
"
    )
}

fn fp_bytes() -> [u8; 32] {
    let v: Vec<u8> = FP
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    v.try_into().unwrap()
}

const OUR_FP: [u8; 32] = [0xAB; 32];
const OUR_IP: [IpAddr; 1] = [IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7))];

fn answer_params() -> AnswerParams<'static> {
    AnswerParams {
        ice_ufrag: "srvufrag",
        ice_pwd: "srvpasswordsrvpassword12",
        fingerprint_sha256: &OUR_FP,
        candidate_ips: &OUR_IP,
        candidate_port: 10000,
        video_ssrc: 0x1234_5678,
        audio_ssrc: 0x9abc_def0,
        rtx_ssrc: 0x0bad_cafe,
        cname: "tern",
        session_id: 42,
    }
}

fn line_err(s: &str) -> (usize, &'static str) {
    match SessionDescription::parse(s) {
        Err(SdpError::Line { line, problem }) => (line, problem),
        other => panic!("expected a line error, got {other:?}"),
    }
}

#[test]
fn parses_chrome_offer() {
    let sd = SessionDescription::parse(&chrome_offer()).unwrap();
    assert_eq!(sd.bundle(), ["0", "1", "2"]);
    assert!(!sd.ice_lite());
    let [v, a, d] = sd.media() else {
        panic!("three sections")
    };
    assert_eq!((v.kind(), v.mid(), v.port()), ("video", Some("0"), 9));
    assert_eq!(v.proto(), "UDP/TLS/RTP/SAVPF");
    assert_eq!(v.formats().len(), 23);
    assert_eq!(v.formats()[..3], [96, 97, 98]);
    assert_eq!(v.direction(), Direction::RecvOnly);
    assert_eq!(v.ice_ufrag(), Some("Kq2u"));
    assert_eq!(v.ice_pwd(), Some("ZUxUn1kGyk5ZRTQ9ZB0f4SDt"));
    let (algo, bytes) = v.fingerprint().unwrap();
    assert_eq!((algo, bytes.as_slice()), ("sha-256", &fp_bytes()[..]));
    assert_eq!(v.setup(), Some(Setup::ActPass));
    assert!(v.rtcp_mux() && v.rtcp_rsize());
    assert_eq!(v.extmap_id(ABS_CAPTURE_TIME_URI), Some(13));
    assert_eq!(v.extmaps().len(), 12);
    // The mDNS candidate is skipped.
    assert_eq!(
        v.candidates(),
        [Candidate {
            foundation: "1467250027".into(),
            component: 1,
            transport: "udp".into(),
            priority: 2_122_260_223,
            ip: "192.168.1.10".parse().unwrap(),
            port: 56143,
            typ: "host".into(),
        }]
    );
    // 115 has an rtpmap but is not on the m-line.
    assert!(v.payload(115).is_none());
    let h = v.payload(102).unwrap();
    assert_eq!(
        (h.codec.as_str(), h.clock_rate, h.channels),
        ("H264", 90000, None)
    );
    assert_eq!(h.fmtp_param("profile-level-id"), Some("42001f"));
    assert_eq!(h.fmtp_param("PACKETIZATION-MODE"), Some("1"));
    assert!(h.has_fb("nack") && h.has_fb("nack pli") && h.has_fb("ccm fir"));
    assert_eq!(h.rtcp_fb.len(), 5);
    let rtx = v.payload(97).unwrap();
    assert_eq!(rtx.fmtp.as_deref(), Some("apt=96"));

    assert_eq!((a.kind(), a.mid()), ("audio", Some("1")));
    let o = a.payload(111).unwrap();
    assert_eq!(
        (o.codec.as_str(), o.clock_rate, o.channels),
        ("opus", 48000, Some(2))
    );
    assert_eq!(a.payload(0).unwrap().codec, "PCMU");
    assert_eq!(a.extmap_id(ABS_CAPTURE_TIME_URI), None);

    assert_eq!((d.kind(), d.mid()), ("application", Some("2")));
    assert!(d.formats().is_empty());
    assert_eq!(d.fmt_tokens(), ["webrtc-datachannel"]);
}

#[test]
fn negotiates_chrome_offer() {
    let sd = SessionDescription::parse(&chrome_offer()).unwrap();
    let n = negotiate(&sd).unwrap();
    assert_eq!(n.remote_ufrag, "Kq2u");
    assert_eq!(n.remote_pwd, "ZUxUn1kGyk5ZRTQ9ZB0f4SDt");
    assert_eq!(n.remote_fingerprint, fp_bytes());
    let v = n.video().unwrap();
    assert_eq!(
        v,
        &NegotiatedMedia {
            mid: "0".into(),
            index: 0,
            pt: 102,
            nack: true,
            pli: true,
            fir: true,
            abs_capture_time_ext: Some(13),
            transport_cc_ext: Some(4),
            abs_send_time_ext: None,
            rtx_pt: Some(103),
            vp8: false,
            fmtp: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42001f".into(),
        }
    );
    let a = n.audio().unwrap();
    assert_eq!((a.mid.as_str(), a.index, a.pt), ("1", 1, 111));
    assert!(!a.nack && !a.pli && !a.fir);
    assert_eq!(a.abs_capture_time_ext, None);
    assert_eq!(a.fmtp, "minptime=10;useinbandfec=1");
}

#[test]
fn answer_to_chrome_offer() {
    let sd = SessionDescription::parse(&chrome_offer()).unwrap();
    let n = negotiate(&sd).unwrap();
    let p = answer_params();
    let text = write_answer(&sd, &n, &p);
    assert!(text.ends_with("\r\n"));
    assert!(text.contains("a=group:BUNDLE 0 1\r\n"));
    assert!(text.contains("a=ice-lite\r\n"));
    assert!(text.contains("m=video 9 UDP/TLS/RTP/SAVPF 102 103\r\n"));
    assert!(text.contains(
        "a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42001f\r\n"
    ));
    assert!(
        text.contains(
            "a=extmap:13 http://www.webrtc.org/experiments/rtp-hdrext/abs-capture-time\r\n"
        )
    );
    assert!(text.contains("m=application 0 UDP/DTLS/SCTP webrtc-datachannel\r\n"));
    assert!(text.contains("a=ssrc:305419896 cname:tern\r\n"));
    // Transport-wide feedback for the bandwidth estimate, and RTX for its probes.
    assert!(text.contains("a=rtcp-fb:102 transport-cc\r\n"));
    assert!(text.contains(
        "a=extmap:4 http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01\r\n"
    ));
    assert!(text.contains("a=rtpmap:103 rtx/90000\r\na=fmtp:103 apt=102\r\n"));
    assert!(text.contains("a=ssrc-group:FID 305419896 195939070\r\n"));
    let ans = SessionDescription::parse(&text).unwrap();
    assert!(ans.ice_lite());
    assert_eq!(ans.bundle(), ["0", "1"]);
    let [v, a, d] = ans.media() else {
        panic!("three sections")
    };
    assert_eq!(
        (v.port(), v.formats(), v.mid()),
        (9, &[102, 103][..], Some("0"))
    );
    assert_eq!(v.direction(), Direction::SendOnly);
    assert_eq!(v.setup(), Some(Setup::Passive));
    assert_eq!(v.ice_ufrag(), Some("srvufrag"));
    assert_eq!(v.ice_pwd(), Some("srvpasswordsrvpassword12"));
    assert_eq!(v.fingerprint().unwrap().1.as_slice(), &OUR_FP[..]);
    assert_eq!(v.ssrcs(), [0x1234_5678, 0x0bad_cafe]);
    assert_eq!(v.ssrc_cname(0x1234_5678), Some("tern"));
    assert_eq!(v.candidates()[0].ip, p.candidate_ips[0]);
    assert_eq!(v.candidates()[0].port, 10000);
    assert!(v.end_of_candidates() && v.rtcp_mux());
    let vp = v.payload(102).unwrap();
    assert!(vp.has_fb("nack") && vp.has_fb("nack pli") && vp.has_fb("ccm fir"));
    assert_eq!((a.port(), a.formats()), (9, &[111][..]));
    assert_eq!(a.payload(111).unwrap().fmtp.as_deref(), Some(OPUS_FMTP));
    assert_eq!(a.ssrcs(), [0x9abc_def0]);
    assert_eq!(
        (d.port(), d.mid(), d.direction()),
        (0, Some("2"), Direction::Inactive)
    );
}

#[test]
fn other_codecs_pick_the_viewers_payload_type_for_the_streams_codec() {
    use crate::codec::VideoCodec;
    let sd = SessionDescription::parse(&chrome_offer()).unwrap();
    let of = |codec| StreamVideo {
        codec,
        h264_profile: None,
    };
    // VP8 → 96, VP9 → 98 (profile-id=0, not 100's profile 2), AV1 → 45.
    for (codec, pt, fmtp) in [
        (VideoCodec::Vp8, 96, ""),
        (VideoCodec::Vp9, 98, "profile-id=0"),
        (VideoCodec::Av1, 45, ""),
    ] {
        let n = negotiate_for(&sd, of(codec)).unwrap();
        let v = n.video().unwrap();
        assert_eq!((v.pt, v.nack, v.pli), (pt, true, true), "{codec}");
        assert!(v.fmtp.starts_with(fmtp), "{codec}: {}", v.fmtp);
        let text = write_answer(&sd, &n, &answer_params());
        assert!(
            text.contains(&format!("a=rtpmap:{pt} {}/90000", codec.sdp_name())),
            "{text}"
        );
        assert!(n.audio().is_some());
    }
    // Chromium offers no H265 here: the error names the stream's codec and what was offered.
    let e = negotiate_for(&sd, of(VideoCodec::H265)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the stream's video is H265; the offer's video section has VP8, VP9, H264, AV1"
    );
    // A viewer offering only H264 cannot watch a VP8 stream.
    let h264_only =
        SessionDescription::parse(&chrome_offer().replace("VP8/90000", "H264/90000")).unwrap();
    assert!(matches!(
        negotiate_for(&h264_only, of(VideoCodec::Vp8)),
        Err(NegotiateError::StreamCodec {
            stream: VideoCodec::Vp8,
            ..
        })
    ));
    // carries(): the profile rules.
    let vp9 = sd.media()[0].payload(100).unwrap();
    assert!(!carries(VideoCodec::Vp9, vp9), "profile 2 is not profile 0");
    assert!(carries(VideoCodec::Vp9, sd.media()[0].payload(98).unwrap()));
    assert!(carries(
        VideoCodec::H264,
        sd.media()[0].payload(112).unwrap()
    ));
    assert!(!carries(
        VideoCodec::Vp8,
        sd.media()[0].payload(98).unwrap()
    ));
}

#[test]
fn h264_choice_follows_the_rule() {
    let base = chrome_offer();
    // Without the 42001f mode-1 entry the constrained-baseline 42e01f one wins; Main and
    // High are skipped even when listed first.
    let sd = base
        .replace("96 97 98 99 100 101 102", "127 112 96 97 98 99 100 101")
        .replace(
            "packetization-mode=1;profile-level-id=42001f",
            "packetization-mode=0;profile-level-id=42001f",
        );
    let n = negotiate(&SessionDescription::parse(&sd).unwrap()).unwrap();
    assert_eq!(n.video().unwrap().pt, 106);
    // Level below 3.1 is refused; level 4.0 is fine.
    let low = base.replace("profile-level-id=42001f", "profile-level-id=42001e");
    let low = low.replace("profile-level-id=42e01f", "profile-level-id=42e028");
    let n = negotiate(&SessionDescription::parse(&low).unwrap()).unwrap();
    assert_eq!(n.video().unwrap().pt, 106);
    // Only High profile: video is rejected, audio still served.
    let high = base
        .replace("profile-level-id=42001f", "profile-level-id=640c1f")
        .replace("profile-level-id=42e01f", "profile-level-id=640c1f");
    let sd = SessionDescription::parse(&high).unwrap();
    let n = negotiate(&sd).unwrap();
    assert!(n.video().is_none());
    assert_eq!(n.audio().unwrap().pt, 111);
    let text = write_answer(&sd, &n, &answer_params());
    assert!(text.contains("m=video 0 UDP/TLS/RTP/SAVPF 96\r\n"));
    assert!(text.contains("a=group:BUNDLE 1\r\n"));
    let ans = SessionDescription::parse(&text).unwrap();
    assert_eq!(ans.media()[0].port(), 0);
    assert_eq!(ans.media()[0].payload(96).unwrap().codec, "VP8");
    // Missing profile-level-id is accepted.
    let p = PayloadType {
        pt: 100,
        codec: "h264".into(),
        clock_rate: 90000,
        channels: None,
        fmtp: Some("packetization-mode=1".into()),
        rtcp_fb: vec![],
    };
    assert!(h264_ok(&p));
    assert!(!h264_ok(&PayloadType {
        fmtp: Some("packetization-mode=1;profile-level-id=42zz1f".into()),
        ..p.clone()
    }));
    assert!(!h264_ok(&PayloadType { fmtp: None, ..p }));
}

#[test]
fn negotiate_errors_name_the_problem() {
    let base = chrome_offer();
    let e = |s: String| negotiate(&SessionDescription::parse(&s).unwrap()).unwrap_err();
    let no_ufrag = base.replace("a=ice-ufrag:Kq2u\r\n", "");
    assert_eq!(e(no_ufrag).to_string(), "offer has no a=ice-ufrag");
    let no_pwd = base.replace("a=ice-pwd:ZUxUn1kGyk5ZRTQ9ZB0f4SDt\r\n", "");
    assert_eq!(e(no_pwd), NegotiateError::NoIcePwd);
    let no_fp = base.replace(&format!("a=fingerprint:sha-256 {FP}\r\n"), "");
    assert_eq!(e(no_fp).to_string(), "offer has no sha-256 a=fingerprint");
    let sha1 = base.replace("sha-256 A1:B2:C3:D4", "sha-1 A1:B2:C3:D4");
    assert_eq!(e(sha1), NegotiateError::NoFingerprint);
    let no_mux = base.replace("a=rtcp-mux\r\n", "");
    assert_eq!(e(no_mux), NegotiateError::NoRtcpMux);
    let passive = base.replace("a=setup:actpass", "a=setup:passive");
    assert_eq!(e(passive), NegotiateError::Setup);
    let sendonly = base.replace("a=recvonly", "a=sendonly");
    assert_eq!(
        e(sendonly).to_string(),
        "offer's media must be recvonly or sendrecv"
    );
    let no_codec = base
        .replace("H264/90000", "H265/90000")
        .replace("opus/48000/2", "opus/48000/1");
    assert_eq!(
        e(no_codec).to_string(),
        "offer has no H264 packetization-mode=1 or Opus payload"
    );
    let data_only = "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\na=mid:0\r\n";
    assert_eq!(e(data_only.into()), NegotiateError::NoCodec);
}

#[test]
fn session_level_attributes_are_inherited() {
    let s = format!(
        "v=0\no=- 1 1 IN IP4 0.0.0.0\ns=-\nt=0 0\na=ice-ufrag:sess\na=ice-pwd:sesspasswordsesspassword\n\
         a=fingerprint:sha-256 {FP}\na=setup:active\na=recvonly\n\
         a=extmap:5 {ABS_CAPTURE_TIME_URI}\n\
         m=video 9 UDP/TLS/RTP/SAVPF 100\na=rtcp-mux\na=rtpmap:100 H264/90000\n\
         a=fmtp:100 packetization-mode=1;profile-level-id=42e01f\na=rtcp-fb:* nack\n\
         m=audio 9 UDP/TLS/RTP/SAVPF 111\na=ice-ufrag:override\na=rtcp-mux\na=sendrecv\n\
         a=fingerprint:sha-1 00:11\na=fingerprint:sha-256 AA:BB\n\
         a=extmap:1 urn:ietf:params:rtp-hdrext:ssrc-audio-level\n\
         a=rtpmap:111 OPUS/48000/2\n"
    );
    let sd = SessionDescription::parse(&s).unwrap();
    assert_eq!(sd.ice_ufrag(), Some("sess"));
    let [v, a] = sd.media() else { panic!() };
    assert_eq!(v.ice_ufrag(), Some("sess"));
    assert_eq!(a.ice_ufrag(), Some("override"));
    assert_eq!(a.ice_pwd(), Some("sesspasswordsesspassword"));
    assert_eq!(v.direction(), Direction::RecvOnly);
    assert_eq!(a.direction(), Direction::SendRecv);
    assert_eq!(v.setup(), Some(Setup::Active));
    assert_eq!(v.fingerprint().unwrap().1.as_slice(), &fp_bytes()[..]);
    assert_eq!(a.fingerprint().unwrap().1.as_slice(), &[0xAA, 0xBB][..]);
    assert_eq!(sd.fingerprint().unwrap().1.as_slice(), &fp_bytes()[..]);
    assert_eq!(v.extmap_id(ABS_CAPTURE_TIME_URI), Some(5));
    assert_eq!(a.extmap_id(ABS_CAPTURE_TIME_URI), None);
    assert!(v.payload(100).unwrap().has_fb("nack"));
    // No mids, no BUNDLE: only the first usable section is accepted.
    let n = negotiate(&sd).unwrap();
    assert_eq!(n.video().unwrap().pt, 100);
    assert!(n.video().unwrap().nack && !n.video().unwrap().pli);
    assert_eq!(n.video().unwrap().abs_capture_time_ext, Some(5));
    assert!(n.audio().is_none());
    let text = write_answer(&sd, &n, &answer_params());
    assert!(!text.contains("a=group:BUNDLE"));
    assert!(!text.contains("a=mid:"));
    let ans = SessionDescription::parse(&text).unwrap();
    assert_eq!(ans.media()[0].port(), 9);
    assert_eq!(ans.media()[1].port(), 0);
}

#[test]
fn parse_errors_name_the_line() {
    assert_eq!(line_err("v=1\r\n"), (1, "first line must be v=0"));
    assert_eq!(
        line_err("\n\no=- 1 1 IN IP4 0.0.0.0\n"),
        (3, "first line must be v=0")
    );
    assert_eq!(SessionDescription::parse(""), Err(SdpError::Empty));
    assert_eq!(SessionDescription::parse("\r\n\r\n"), Err(SdpError::Empty));
    let head = "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n";
    let cases: &[(&str, &str)] = &[
        ("m=video", "m= line has no port"),
        (
            "m=video x UDP/TLS/RTP/SAVPF 96",
            "m= line port is not a number from 0 to 65535",
        ),
        ("m=video 9", "m= line has no transport protocol"),
        ("m=video 9 UDP/TLS/RTP/SAVPF", "m= line has no formats"),
        (
            "m=video 9 UDP/TLS/RTP/SAVPF 96 200",
            "m= line payload type is not a number from 0 to 127",
        ),
        ("this is not sdp", "not a <letter>=<value> line"),
        ("A=b", "not a <letter>=<value> line"),
        (
            "a=fingerprint:sha-256 zz:11",
            "a=fingerprint is not '<hash> <hex>:<hex>:...'",
        ),
        (
            "a=setup:sideways",
            "a=setup is not actpass, active, passive or holdconn",
        ),
        (
            "a=ice-ufrag:has:colon",
            "a=ice-ufrag/a=ice-pwd must be 1-256 visible ASCII characters (no ':' in a ufrag)",
        ),
        (
            "a=ice-pwd:",
            "a=ice-ufrag/a=ice-pwd must be 1-256 visible ASCII characters (no ':' in a ufrag)",
        ),
        ("a=extmap:x urn:foo", "a=extmap id is not a number"),
        ("v=0", "second v= line"),
        ("a=mid:bad\u{7}", "line contains a control character"),
    ];
    for (line, problem) in cases {
        assert_eq!(
            line_err(&format!("{head}{line}\r\n")),
            (5, *problem),
            "{line}"
        );
    }
    let media = "m=video 9 UDP/TLS/RTP/SAVPF 96\r\n";
    let cases: &[(&str, &str)] = &[
        (
            "a=rtpmap:96",
            "a=rtpmap is not '<pt> <codec>/<clock>[/<channels>]'",
        ),
        (
            "a=rtpmap:96 H264",
            "a=rtpmap is not '<pt> <codec>/<clock>[/<channels>]'",
        ),
        (
            "a=rtpmap:96 H264/x",
            "a=rtpmap is not '<pt> <codec>/<clock>[/<channels>]'",
        ),
        (
            "a=rtpmap:300 H264/90000",
            "a=rtpmap is not '<pt> <codec>/<clock>[/<channels>]'",
        ),
        (
            "a=rtpmap:96 opus/48000/2/1",
            "a=rtpmap is not '<pt> <codec>/<clock>[/<channels>]'",
        ),
        ("a=fmtp:abc x=1", "a=fmtp is not '<pt> <parameters>'"),
        ("a=rtcp-fb:96", "a=rtcp-fb is not '<pt|*> <type> [<param>]'"),
        (
            "a=ssrc:-1 cname:x",
            "a=ssrc is not '<ssrc> <attribute>[:<value>]'",
        ),
        ("a=mid:", "a=mid must be 1-64 visible ASCII characters"),
        (
            "a=candidate:1 1 udp 5 1.2.3.4 99999 typ host",
            "a=candidate is not '<foundation> <component> <transport> <priority> <address> <port> typ <type>'",
        ),
        (
            "a=candidate:1 1 udp 5 1.2.3.4 9 host",
            "a=candidate is not '<foundation> <component> <transport> <priority> <address> <port> typ <type>'",
        ),
    ];
    for (line, problem) in cases {
        assert_eq!(
            line_err(&format!("{head}{media}{line}\n")),
            (6, *problem),
            "{line}"
        );
    }
    let many = format!("{head}{}", media.repeat(17));
    assert_eq!(line_err(&many), (21, "more than 16 m= sections"));
    assert!(SessionDescription::parse(&format!("{head}{}", media.repeat(16))).is_ok());
    let big = format!(
        "{head}{}",
        "a=x:yyyyyyyyyyyyyyyyyyyyyyyyyyy\r\n".repeat(3000)
    );
    assert_eq!(
        SessionDescription::parse(&big),
        Err(SdpError::TooLong(big.len()))
    );
    assert_eq!(
        SdpError::Line {
            line: 7,
            problem: "m= line has no port"
        }
        .to_string(),
        "line 7: m= line has no port"
    );
}

#[test]
fn lenient_where_it_costs_nothing() {
    // LF line ends, trailing spaces, a BOM, unknown lines and attributes, blank lines.
    let s = "\u{feff}v=0\no=- 1 1 IN IP4 0.0.0.0 \ns=-\n\nt=0 0\nz=whatever\n\
             a=unknown-thing:1 2 3\nm=audio 9 UDP/TLS/RTP/SAVPF 111 \na=weird\n";
    let sd = SessionDescription::parse(s).unwrap();
    assert_eq!(sd.media()[0].formats(), [111]);
    // Duplicate payload types on the m-line are listed once.
    let s = "v=0\nm=video 9 RTP/SAVPF 96 96 97\n";
    assert_eq!(
        SessionDescription::parse(s).unwrap().media()[0].formats(),
        [96, 97]
    );
}

#[test]
fn offer_answer_round_trip() {
    let client_fp = [7u8; 32];
    for (video, audio, abs) in [
        (true, true, true),
        (true, false, false),
        (false, true, true),
    ] {
        let offer = write_offer(&OfferParams {
            ice_ufrag: "cliu",
            ice_pwd: "clientpasswordclientpwd1",
            fingerprint_sha256: &client_fp,
            video,
            audio,
            abs_capture_time: abs,
            all_video: false,
        });
        let sd = SessionDescription::parse(&offer).unwrap();
        assert_eq!(sd.media().len(), usize::from(video) + usize::from(audio));
        let n = negotiate(&sd).unwrap();
        assert_eq!(n.remote_ufrag, "cliu");
        assert_eq!(n.remote_pwd, "clientpasswordclientpwd1");
        assert_eq!(n.remote_fingerprint, client_fp);
        assert_eq!(n.video().is_some(), video);
        assert_eq!(n.audio().is_some(), audio);
        if let Some(v) = n.video() {
            assert_eq!((v.pt, v.nack, v.pli, v.fir), (96, true, true, true));
            assert_eq!(v.abs_capture_time_ext, abs.then_some(4));
            assert_eq!(v.mid, "0");
        }
        if let Some(a) = n.audio() {
            assert_eq!(a.pt, 111);
            assert_eq!(a.mid, if video { "1" } else { "0" });
        }
        let p = answer_params();
        let text = write_answer(&sd, &n, &p);
        let ans = SessionDescription::parse(&text).unwrap();
        assert_eq!(ans.media().len(), sd.media().len());
        for (m, o) in ans.media().iter().zip(sd.media()) {
            assert_eq!(m.port(), 9);
            assert_eq!(m.kind(), o.kind());
            assert_eq!(m.mid(), o.mid());
            assert_eq!(m.ice_ufrag(), Some(p.ice_ufrag));
            assert_eq!(m.ice_pwd(), Some(p.ice_pwd));
            assert_eq!(m.fingerprint().unwrap().1.as_slice(), &OUR_FP[..]);
            assert_eq!(m.setup(), Some(Setup::Passive));
            assert_eq!(m.direction(), Direction::SendOnly);
            assert_eq!(m.formats(), o.formats());
            assert_eq!(m.extmap_id(ABS_CAPTURE_TIME_URI), abs.then_some(4));
            assert_eq!(
                m.candidates()[0],
                Candidate {
                    foundation: "1".into(),
                    component: 1,
                    transport: "udp".into(),
                    priority: 2_130_706_431,
                    ip: p.candidate_ips[0],
                    port: 10000,
                    typ: "host".into(),
                }
            );
            let ssrc = if m.kind() == "video" {
                p.video_ssrc
            } else {
                p.audio_ssrc
            };
            assert_eq!(m.ssrcs(), [ssrc]);
        }
        assert_eq!(ans.bundle(), sd.bundle());
    }
    // No media at all.
    let offer = write_offer(&OfferParams {
        ice_ufrag: "cliu",
        ice_pwd: "clientpasswordclientpwd1",
        fingerprint_sha256: &client_fp,
        video: false,
        audio: false,
        abs_capture_time: false,
        all_video: false,
    });
    let sd = SessionDescription::parse(&offer).unwrap();
    assert_eq!(negotiate(&sd), Err(NegotiateError::NoCodec));
}

#[test]
fn ipv6_candidates() {
    let s = "v=0\nm=audio 9 UDP/TLS/RTP/SAVPF 111\n\
             a=candidate:2 1 UDP 1686052607 2001:db8::5 40000 typ srflx raddr :: rport 0\n";
    let sd = SessionDescription::parse(s).unwrap();
    let c = &sd.media()[0].candidates()[0];
    assert_eq!(c.ip, "2001:db8::5".parse::<IpAddr>().unwrap());
    assert_eq!((c.transport.as_str(), c.typ.as_str()), ("UDP", "srflx"));
    let mut p = answer_params();
    let ip = ["2001:db8::1".parse().unwrap()];
    p.candidate_ips = &ip;
    let offer = write_offer(&OfferParams {
        ice_ufrag: "cliu",
        ice_pwd: "clientpasswordclientpwd1",
        fingerprint_sha256: &[1; 32],
        video: true,
        audio: false,
        abs_capture_time: false,
        all_video: false,
    });
    let sd = SessionDescription::parse(&offer).unwrap();
    let text = write_answer(&sd, &negotiate(&sd).unwrap(), &p);
    let ans = SessionDescription::parse(&text).unwrap();
    assert_eq!(ans.media()[0].candidates()[0].ip, ip[0]);
}

#[test]
fn sdpfrag_parse() {
    // The RFC 9725 (WHIP/WHEP) style PATCH body.
    let body = "a=ice-options:trickle ice2\r\n\
                m=audio 9 RTP/AVP 0\r\n\
                a=mid:0\r\n\
                a=ice-ufrag:EsAw\r\n\
                a=ice-pwd:P2uYro0UCOQ4zxjKXaWCBui1\r\n\
                a=candidate:1387637174 1 udp 2122260223 192.0.2.1 61764 typ host generation 0 ufrag EsAw network-id 1\r\n\
                a=candidate:3471623853 1 udp 2122194687 198.51.100.2 61765 typ host generation 0 ufrag EsAw network-id 2\r\n\
                a=candidate:473322822 1 tcp 1518280447 192.0.2.1 9 typ host tcptype active generation 0 ufrag EsAw network-id 1\r\n\
                a=candidate:9 1 udp 1 abcdef.local 5 typ host\r\n\
                a=end-of-candidates\r\n";
    let f = parse_sdpfrag(body).unwrap();
    assert_eq!(f.ice_ufrag.as_deref(), Some("EsAw"));
    assert_eq!(f.ice_pwd.as_deref(), Some("P2uYro0UCOQ4zxjKXaWCBui1"));
    assert_eq!(f.mids, ["0"]);
    assert_eq!(f.candidates.len(), 3);
    assert_eq!(f.candidates[2].transport, "tcp");
    assert_eq!(f.candidates[1].port, 61765);
    assert!(f.end_of_candidates);
    // Session-level credentials (an ICE restart) and LF line ends.
    let f = parse_sdpfrag("a=ice-ufrag:new1\na=ice-pwd:newpasswordnewpassword1\nm=video 9 UDP/TLS/RTP/SAVPF 0\na=mid:v\n").unwrap();
    assert_eq!(f.ice_ufrag.as_deref(), Some("new1"));
    assert_eq!(f.mids, ["v"]);
    assert!(f.candidates.is_empty() && !f.end_of_candidates);
    assert_eq!(parse_sdpfrag(""), Ok(SdpFrag::default()));
    // Errors carry line numbers too.
    assert_eq!(
        parse_sdpfrag("a=mid:0\na=candidate:1 1 udp\n"),
        Err(SdpError::Line {
            line: 2,
            problem: "a=candidate is not '<foundation> <component> <transport> <priority> <address> <port> typ <type>'"
        })
    );
    assert!(matches!(
        parse_sdpfrag("garbage"),
        Err(SdpError::Line { line: 1, .. })
    ));
    let many = "m=audio 9 RTP/AVP 0\n".repeat(17);
    assert!(matches!(
        parse_sdpfrag(&many),
        Err(SdpError::Line { line: 17, .. })
    ));
    let big = "a=x\n".repeat(20_000);
    assert!(matches!(parse_sdpfrag(&big), Err(SdpError::TooLong(_))));
}

/// xorshift64*, so the test needs no rand crate and replays from its seed.
fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    s.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

fn exercise(s: &str) {
    if let Ok(sd) = SessionDescription::parse(s) {
        for m in sd.media() {
            let _ = (
                m.kind(),
                m.port(),
                m.proto(),
                m.formats(),
                m.mid(),
                m.payloads(),
            );
            let _ = (
                m.ice_ufrag(),
                m.ice_pwd(),
                m.fingerprint(),
                m.setup(),
                m.direction(),
            );
            let _ = (m.candidates(), m.ssrcs(), m.extmaps(), m.rtcp_mux());
            let _ = m.extmap_id(ABS_CAPTURE_TIME_URI);
        }
        if let Ok(n) = negotiate(&sd) {
            let text = write_answer(&sd, &n, &answer_params());
            // Whatever we write, we can read back.
            let ans = SessionDescription::parse(&text).unwrap();
            assert_eq!(ans.media().len(), sd.media().len());
        }
    }
    let _ = parse_sdpfrag(s);
}

#[test]
fn random_input_never_panics() {
    let mut seed = 0x0123_4567_89AB_CDEFu64;
    let offer = chrome_offer();
    let lines: Vec<&str> = offer.lines().collect();
    let alphabet = b"v=0amoc:/ \r\n9612RTP/SAVPFH264opus-.;=*\xff";
    let mut negotiated = 0;
    for round in 0..3000 {
        let s = match round % 3 {
            // Line-level mutations of the Chrome offer: drop, duplicate, swap.
            0 => {
                let mut ls = lines.clone();
                for _ in 0..1 + xorshift(&mut seed) % 4 {
                    let i = (xorshift(&mut seed) % ls.len() as u64) as usize;
                    let j = (xorshift(&mut seed) % ls.len() as u64) as usize;
                    match xorshift(&mut seed) % 3 {
                        0 if ls.len() > 1 => {
                            ls.remove(i);
                        }
                        1 => ls.insert(i, ls[j]),
                        _ => ls.swap(i, j),
                    }
                }
                ls.join("\r\n")
            }
            // Byte-level mutations.
            1 => {
                let mut b = offer.clone().into_bytes();
                for _ in 0..1 + xorshift(&mut seed) % 8 {
                    let i = (xorshift(&mut seed) % b.len() as u64) as usize;
                    b[i] = alphabet[(xorshift(&mut seed) % alphabet.len() as u64) as usize];
                }
                String::from_utf8_lossy(&b).into_owned()
            }
            // Random text from a small alphabet.
            _ => {
                let len = (xorshift(&mut seed) % 400) as usize;
                let b: Vec<u8> = (0..len)
                    .map(|_| alphabet[(xorshift(&mut seed) % alphabet.len() as u64) as usize])
                    .collect();
                format!("v=0\n{}", String::from_utf8_lossy(&b))
            }
        };
        if SessionDescription::parse(&s).is_ok_and(|sd| negotiate(&sd).is_ok()) {
            negotiated += 1;
        }
        exercise(&s);
    }
    assert!(
        negotiated > 200,
        "only {negotiated} mutated offers negotiated"
    );
}

/// An edge's offer (`all_video`) is answered in whatever its origin's stream carries.
#[test]
fn an_offer_of_every_codec_meets_any_stream() {
    use crate::codec::VideoCodec;
    let fp = [7u8; 32];
    let offer = write_offer(&OfferParams {
        ice_ufrag: "edge",
        ice_pwd: "edgepasswordedgepassword",
        fingerprint_sha256: &fp,
        video: true,
        audio: true,
        abs_capture_time: true,
        all_video: true,
    });
    let sd = SessionDescription::parse(&offer).unwrap();
    let pt = |stream: StreamVideo| negotiate_for(&sd, stream).unwrap().video.unwrap().pt;
    assert_eq!(pt(StreamVideo::h264(Some([0x42, 0xe0, 0x1f]))), 96);
    assert_eq!(pt(StreamVideo::h264(Some([0x4d, 0x00, 0x28]))), 97);
    assert_eq!(pt(StreamVideo::h264(Some([0x64, 0x00, 0x28]))), 98);
    for (codec, want) in [
        (VideoCodec::Vp8, 100),
        (VideoCodec::Vp9, 101),
        (VideoCodec::Av1, 102),
        (VideoCodec::H265, 103),
    ] {
        let stream = StreamVideo {
            codec,
            h264_profile: None,
        };
        assert_eq!(pt(stream), want, "{codec}");
    }
}
