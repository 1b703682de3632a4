//! Bundle-only sections (RFC 8843 §6, JSEP §5.2.1): a `max-bundle` offerer (GStreamer's
//! webrtcbin, some WHEP players) sends every section after the first with port 0 and
//! `a=bundle-only`, and without the transport attributes the BUNDLE-tag section carries.
//! Such a section inside the BUNDLE group is accepted into the answer's group; a port-0
//! section without `bundle-only`, or one outside the group, is still rejected.

use super::*;

/// An offer shaped as RFC 8843 §7.2.1 and JSEP §5.2.1 have a `max-bundle` offerer write it:
/// the BUNDLE-tag section (video, mid `v`) with the transport, then audio (mid `a`) with
/// `audio_port`, `bundle-only` when `bundle_only`, in the group `group`.
fn offer(audio_port: u16, bundle_only: bool, group: &str) -> String {
    format!(
        "v=0\r
o=- 1 1 IN IP4 127.0.0.1\r
s=-\r
t=0 0\r
a=group:BUNDLE {group}\r
m=video 9 UDP/TLS/RTP/SAVPF 96\r
c=IN IP4 0.0.0.0\r
a=ice-ufrag:tagU\r
a=ice-pwd:tagpasswordtagpassword12\r
a=fingerprint:sha-256 {FP}\r
a=setup:actpass\r
a=mid:v\r
a=recvonly\r
a=rtcp-mux\r
a=rtpmap:96 H264/90000\r
a=fmtp:96 packetization-mode=1;profile-level-id=42e01f\r
a=rtcp-fb:96 nack pli\r
m=audio {audio_port} UDP/TLS/RTP/SAVPF 111\r
c=IN IP4 0.0.0.0\r
{}a=mid:a\r
a=recvonly\r
a=rtpmap:111 opus/48000/2\r
",
        if bundle_only { "a=bundle-only\r\n" } else { "" }
    )
}

#[test]
fn a_bundle_only_section_in_the_group_is_accepted_into_the_answers_group() {
    let sd = SessionDescription::parse(&offer(0, true, "v a")).unwrap();
    let [_, a] = sd.media() else { panic!() };
    assert!(a.bundle_only() && a.port() == 0 && !a.rtcp_mux());
    let n = negotiate(&sd).unwrap();
    assert!(n.bundle);
    assert_eq!(n.video().map(|v| v.mid.as_str()), Some("v"));
    assert_eq!(n.audio().map(|a| a.mid.as_str()), Some("a"));
    // The transport is the BUNDLE tag's: the audio section repeats none of it.
    assert_eq!(n.remote_ufrag, "tagU");
    let text = write_answer(&sd, &n, &answer_params());
    assert!(text.contains("a=group:BUNDLE v a\r\n"), "{text}");
    assert!(
        text.contains("m=audio 9 UDP/TLS/RTP/SAVPF 111\r\n"),
        "{text}"
    );
    assert!(!text.contains("a=inactive"), "{text}");
    let ans = SessionDescription::parse(&text).unwrap();
    assert_eq!(ans.bundle(), ["v", "a"]);
    let [v, a] = ans.media() else { panic!() };
    // An answer carries no bundle-only (RFC 8843 §7.3.1) and sends in both.
    assert!(!a.bundle_only() && a.port() == 9 && a.rtcp_mux());
    assert_eq!(
        (v.direction(), a.direction()),
        (Direction::SendOnly, Direction::SendOnly)
    );
}

#[test]
fn port_zero_without_bundle_only_or_outside_the_group_is_still_rejected() {
    for (why, text) in [
        ("no bundle-only", offer(0, false, "v a")),
        ("not in the group", offer(0, true, "v")),
    ] {
        let sd = SessionDescription::parse(&text).unwrap();
        let n = negotiate(&sd).unwrap();
        assert!(n.audio().is_none(), "{why}");
        let answer = write_answer(&sd, &n, &answer_params());
        assert!(
            answer.contains("m=audio 0 UDP/TLS/RTP/SAVPF 111\r\n"),
            "{why}: {answer}"
        );
        assert!(answer.contains("a=inactive"), "{why}: {answer}");
    }
}

#[test]
fn a_bundle_only_section_is_served_when_the_tag_section_is_not() {
    // The tag offers only VP8 to an H264 stream: video is rejected, and the bundle-only
    // audio is served on the tag's transport.
    let vp8 = offer(0, true, "v a")
        .replace("a=rtpmap:96 H264/90000", "a=rtpmap:96 VP8/90000")
        .replace(
            "a=fmtp:96 packetization-mode=1;profile-level-id=42e01f\r\n",
            "",
        );
    let sd = SessionDescription::parse(&vp8).unwrap();
    let n = negotiate(&sd).unwrap();
    assert!(n.video().is_none());
    assert_eq!(n.audio().map(|a| a.mid.as_str()), Some("a"));
    assert_eq!(n.remote_ufrag, "tagU");
    let text = write_answer(&sd, &n, &answer_params());
    assert!(text.contains("m=video 0 "), "{text}");
    assert!(text.contains("m=audio 9 "), "{text}");
}

#[test]
fn a_tag_without_rtcp_mux_is_refused_for_its_bundle_only_sections_too() {
    let no_mux = offer(0, true, "v a").replace("a=rtcp-mux\r\n", "");
    let sd = SessionDescription::parse(&no_mux).unwrap();
    assert_eq!(negotiate(&sd).unwrap_err(), NegotiateError::NoRtcpMux);
}
