//! What answers say beyond the Chrome offer's: the stream's own H264 profile, and REMB
//! with abs-send-time for a viewer without transport-wide feedback.

use super::*;

#[test]
fn h264_answer_states_the_streams_own_profile_when_its_sps_is_known() {
    let sd = SessionDescription::parse(&chrome_offer()).unwrap();
    // A High 4.0 stream (x264's default): the offer's High payload type, with the stream's
    // profile-level-id, not the Baseline one.
    let n = negotiate_for(&sd, StreamVideo::h264(Some([0x64, 0x00, 0x28]))).unwrap();
    let v = n.video().unwrap();
    assert_eq!(v.pt, 112, "{v:?}");
    assert_eq!(
        v.fmtp,
        "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=640028"
    );
    let text = write_answer(&sd, &n, &answer_params());
    assert!(text.contains("a=fmtp:112 "), "{text}");
    assert!(text.contains("profile-level-id=640028"), "{text}");
    assert!(!text.contains("42001f"), "{text}");
    // A Constrained Baseline 3.1 stream (Chromium's encoder): the first Baseline payload
    // type, its fmtp saying 42e01f.
    let n = negotiate_for(&sd, StreamVideo::h264(Some([0x42, 0xe0, 0x1f]))).unwrap();
    assert_eq!(n.video().unwrap().pt, 102);
    assert!(n.video().unwrap().fmtp.ends_with("profile-level-id=42e01f"));
    // A viewer that offers no High profile keeps the Baseline rule and its own fmtp.
    let baseline_only =
        chrome_offer().replace("profile-level-id=640c1f", "profile-level-id=42e01f");
    let sd = SessionDescription::parse(&baseline_only).unwrap();
    let n = negotiate_for(&sd, StreamVideo::h264(Some([0x64, 0x00, 0x28]))).unwrap();
    assert_eq!(n.video().unwrap().pt, 102);
    assert!(n.video().unwrap().fmtp.ends_with("profile-level-id=42001f"));
    // Unknown SPS: as before.
    assert_eq!(
        negotiate(&sd).unwrap(),
        negotiate_for(&sd, StreamVideo::default()).unwrap()
    );
}

#[test]
fn a_viewer_with_remb_and_no_transport_cc_gets_abs_send_time() {
    // Chrome's offer says goog-remb too, and abs-send-time at 2; with transport-cc the
    // answer keeps to it (above). Without transport-cc (aiortc offers only goog-remb and
    // abs-send-time), the answer takes goog-remb and abs-send-time, and RTX for the probes.
    let offer: String = chrome_offer()
        .split_inclusive('\n')
        .filter(|l| !l.contains("transport-cc") && !l.contains("transport-wide-cc"))
        .collect();
    let sd = SessionDescription::parse(&offer).unwrap();
    let n = negotiate(&sd).unwrap();
    let v = n.video().unwrap();
    assert_eq!(
        (v.transport_cc_ext, v.abs_send_time_ext, v.rtx_pt),
        (None, Some(2), Some(103))
    );
    assert_eq!(n.audio().unwrap().abs_send_time_ext, None, "video only");
    let text = write_answer(&sd, &n, &answer_params());
    assert!(text.contains("a=rtcp-fb:102 goog-remb\r\n"));
    assert!(
        text.contains("a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time\r\n")
    );
    assert!(!text.contains("transport-cc"));
    let ans = SessionDescription::parse(&text).unwrap();
    assert_eq!(ans.media()[0].extmap_id(ABS_SEND_TIME_URI), Some(2));
    // Without goog-remb offered, no abs-send-time: nothing would read it.
    let offer = offer.replace("goog-remb", "x-none");
    let n = negotiate(&SessionDescription::parse(&offer).unwrap()).unwrap();
    assert_eq!(n.video().unwrap().abs_send_time_ext, None);
    assert_eq!(n.video().unwrap().rtx_pt, None, "no RTX: nothing to probe");
}
