//! Recording's parsers: VP8 and VP9 RTP payloads rebuilt into frames (any payloads, sequence numbers,
//! timestamps and markers), the frames pushed into a recording's packager and its parts
//! taken out; and the recorded-file readers a listing runs on whatever is in the folder
//! (`parse_head`, `moof_end`, `part_times`, `rebase_part`) on any bytes. No panic; every
//! part taken out is a moof then an mdat.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::time::Duration;
use tern_pool::PoolCounter;
use tern_proto::vp8::Depacketizer;
use tern_proto::vp9;
use tern_rtc::hls::file::{moof_end, parse_head, part_times, rebase_part};
use tern_rtc::hls::{HlsConfig, Packager};

fuzz_target!(|data: &[u8]| {
    let _ = parse_head(data);
    let _ = moof_end(data, 1);
    let _ = part_times(data);
    let mut copy = data.to_vec();
    rebase_part(&mut copy, &[(1, 3), (2, u64::MAX)]);

    let mut d = Depacketizer::new();
    let mut d9 = vp9::Depacketizer::new();
    let _ = vp9::frame_info(data);
    let _ = vp9::descriptor(data);
    let mut p = Packager::new(
        HlsConfig {
            part_target: Duration::from_secs(1),
            segment_target: Duration::from_secs(2),
            window: 1,
            max_free_buffers: 0,
        },
        PoolCounter::new("fuzz_record", 0),
    );
    let mut parts = Vec::new();
    let (mut seq, mut ts, mut wall) = (0u16, 0u32, 1_700_000_000_000u64);
    let mut rest = data;
    while let Some((&op, tail)) = rest.split_first() {
        let len = usize::from(op & 0x3f).min(tail.len());
        let (payload, tail) = tail.split_at(len);
        rest = tail;
        seq = seq.wrapping_add(u16::from(op >> 7) + 1);
        if op & 0x40 != 0 {
            ts = ts.wrapping_add(3000);
            wall += 33;
        }
        if let Some(frame) = d.push(seq, ts, op & 0x80 != 0, payload) {
            let frame = frame.to_vec();
            p.push_vp8(i64::from(ts), &frame, wall);
            p.take_parts(&mut parts);
        }
        if let Some(frame) = d9.push(seq, ts, op & 0x80 != 0, payload) {
            let frame = frame.to_vec();
            p.push_vp9(i64::from(ts), &frame, wall);
            p.take_parts(&mut parts);
        }
    }
    p.finish();
    p.take_parts(&mut parts);
    for part in &parts {
        assert_eq!(&part.data[4..8], b"moof");
        let moof = u32::from_be_bytes([part.data[0], part.data[1], part.data[2], part.data[3]]);
        assert_eq!(&part.data[moof as usize + 4..moof as usize + 8], b"mdat");
    }
});
