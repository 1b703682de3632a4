//! H264 RTP payloads (RFC 6184) as they come from publishers: keyframe detection, the SPS's
//! profile-level-id (whole or in a STAP-A), and depacketizing a run of packets cut from the
//! input (2-byte length prefix each, one flag byte for the marker bit).
#![no_main]
use libfuzzer_sys::fuzz_target;
use tern_proto::h264;

fuzz_target!(|data: &[u8]| {
    let _ = h264::is_keyframe(data);
    if let Some(id) = h264::sps_profile_level_id(data) {
        // The three bytes come from inside the input.
        assert!(data.windows(3).any(|w| w == id));
    }
    let mut d = h264::Depacketizer::new();
    let mut rest = data;
    let mut seq = 0u16;
    while rest.len() >= 3 {
        let n = usize::from(u16::from_be_bytes([rest[0], rest[1]])).min(rest.len() - 3);
        let marker = rest[2] & 1 == 1;
        let payload = &rest[3..3 + n];
        if let Ok(Some(au)) = d.push(seq, u32::from(seq / 4), marker, payload) {
            for nal in h264::nal_units(au) {
                assert!(!nal.is_empty());
            }
        }
        seq = seq.wrapping_add(1);
        rest = &rest[3 + n..];
    }
    assert!(d.keyframes() <= d.frames());
});
