//! H265 RTP payloads (RFC 7798) as they come from publishers: keyframe detection on an
//! access unit, and depacketizing a run of packets cut from the input (2-byte length prefix
//! each, one flag byte for the marker bit) into Annex B access units.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tern_proto::h265;

fuzz_target!(|data: &[u8]| {
    let _ = h265::is_keyframe_au(data);
    let mut d = h265::Depacketizer::new();
    let mut rest = data;
    let mut seq = 0u16;
    while rest.len() >= 3 {
        let n = usize::from(u16::from_be_bytes([rest[0], rest[1]])).min(rest.len() - 3);
        let marker = rest[2] & 1 == 1;
        let payload = &rest[3..3 + n];
        if let Ok(Some(au)) = d.push(seq, u32::from(seq / 4), marker, payload) {
            // Every NAL unit comes after a start code; nothing passes the bound.
            assert!(au.starts_with(&[0, 0, 0, 1]));
            assert!(au.len() <= h265::MAX_ACCESS_UNIT);
        }
        seq = seq.wrapping_add(1);
        rest = &rest[3 + n..];
    }
    assert!(d.keyframes() <= d.frames());
});
