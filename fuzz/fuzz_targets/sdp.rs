//! SDP offer and trickle sdpfrag parsers: arbitrary UTF-8 must never panic, and an answer
//! written for an offer that negotiates (for a stream of unknown or known H264 profile) must
//! parse back.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use tern_proto::sdp;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = sdp::parse_sdpfrag(s);
    let Ok(offer) = sdp::SessionDescription::parse(s) else {
        return;
    };
    for m in offer.media() {
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
        let _ = m.extmap_id(sdp::ABS_CAPTURE_TIME_URI);
    }
    // A stream whose SPS says High 4.0: the profile is chosen, or the Baseline rule applies.
    let _ = sdp::negotiate_for(&offer, sdp::StreamVideo::h264(Some([0x64, 0x00, 0x28])));
    for codec in tern_proto::codec::VideoCodec::ALL {
        let _ = sdp::negotiate_for(
            &offer,
            sdp::StreamVideo {
                codec,
                h264_profile: None,
            },
        );
    }
    let Ok(neg) = sdp::negotiate(&offer) else {
        return;
    };
    let answer = sdp::write_answer(
        &offer,
        &neg,
        &sdp::AnswerParams {
            ice_ufrag: "fuzzufrg",
            ice_pwd: "fuzzpasswordfuzzpassword",
            fingerprint_sha256: &[0x5a; 32],
            candidate_ips: &[IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), IpAddr::V6(Ipv6Addr::LOCALHOST)],
            candidate_port: 10000,
            video_ssrc: 1,
            audio_ssrc: 2,
            rtx_ssrc: 3,
            cname: "fuzz",
            session_id: 7,
        },
    );
    let back = sdp::SessionDescription::parse(&answer).expect("our answer parses");
    assert_eq!(back.media().len(), offer.media().len());
});
