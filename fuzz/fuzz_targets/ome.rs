//! OvenMediaEngine signalling: the command parser and every body accessor must never panic on
//! any text; an answer SDP found in a message goes through the server-offer negotiation (for
//! every offer layout), and the same text read as a server offer goes through the lean
//! client's answer, which must parse back.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tern_proto::{ome, sdp};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(m) = ome::parse_message(s) {
        let _ = (m.command(), m.id());
        if let Ok(c) = m.candidates() {
            assert!(c.len() <= ome::MAX_CANDIDATES);
        }
        if let Ok(answer) = m.answer_sdp() {
            check_sdp(answer);
        }
        let e = ome::SignalError::bad_request(format!("{:?}", m.command()));
        assert!(e.to_json().starts_with('{'));
    }
    let _ = sdp::parse_candidate_line(s);
    check_sdp(s);
});

fn check_sdp(s: &str) {
    let Ok(sd) = sdp::SessionDescription::parse(s) else {
        return;
    };
    for (video, audio) in [(true, true), (true, false), (false, true), (false, false)] {
        if let Ok(neg) = sdp::negotiate_answer(&sd, video, audio) {
            assert!(neg.video().is_some() || neg.audio().is_some());
            assert!(video || neg.video().is_none());
            assert!(audio || neg.audio().is_none());
        }
    }
    let fp = [7u8; 32];
    let (answer, choice) = sdp::write_client_answer(
        &sd,
        &sdp::ClientAnswerParams {
            ice_ufrag: "fuzz",
            ice_pwd: "fuzzfuzzfuzzfuzzfuzzfuzz",
            fingerprint_sha256: &fp,
            rtcp_feedback: true,
            abs_capture_time: true,
        },
    );
    let back = sdp::SessionDescription::parse(&answer);
    assert!(
        back.is_ok(),
        "client answer does not parse: {back:?}\n{answer}"
    );
    if let (Ok(back), Some(i)) = (back, choice.transport_index) {
        assert_eq!(back.media().len(), sd.media().len());
        assert!(back.media()[i].port() != 0);
    }
}
