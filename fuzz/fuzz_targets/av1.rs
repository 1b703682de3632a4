//! AV1 RTP payloads (the AOM RTP payload format) as they come from publishers: LEB128
//! sizes, the OBU walk and keyframe detection on a temporal unit, and depacketizing a run
//! of packets cut from the input (2-byte length prefix each, one flag byte for the marker
//! bit) into low-overhead temporal units.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tern_proto::av1;

fuzz_target!(|data: &[u8]| {
    if let Some((value, n)) = av1::read_leb128(data) {
        // The value was read from inside the input, and writes back no longer.
        assert!(n <= av1::MAX_LEB128_LEN && n <= data.len());
        let mut again = Vec::new();
        av1::write_leb128(value, &mut again);
        assert!(again.len() <= n);
        assert_eq!(av1::read_leb128(&again), Some((value, again.len())));
    }
    let _ = av1::obus(data).count();
    let _ = av1::is_keyframe_tu(data);
    let mut d = av1::Depacketizer::new();
    let mut rest = data;
    let mut seq = 0u16;
    while rest.len() >= 3 {
        let n = usize::from(u16::from_be_bytes([rest[0], rest[1]])).min(rest.len() - 3);
        let marker = rest[2] & 1 == 1;
        let payload = &rest[3..3 + n];
        if let Ok(Some(tu)) = d.push(seq, u32::from(seq / 4), marker, payload) {
            // A temporal delimiter first, then OBUs with their sizes, none of the dropped
            // types; nothing passes the bound.
            assert!(tu.starts_with(&av1::TEMPORAL_DELIMITER));
            assert!(tu.len() <= av1::MAX_TEMPORAL_UNIT);
            let mut obus = av1::obus(tu);
            assert!(obus.by_ref().skip(1).all(|o| {
                o.obu_type != av1::OBU_TEMPORAL_DELIMITER && o.obu_type != av1::OBU_TILE_LIST
            }));
            assert!(!obus.malformed());
        }
        seq = seq.wrapping_add(1);
        rest = &rest[3 + n..];
    }
    assert!(d.keyframes() <= d.frames());
});
