//! Transport-wide congestion control feedback: any bytes parse or are refused without
//! panicking, the statuses stay within the bound and in sequence order, and what parses
//! writes back to feedback that parses to the same statuses and arrival times (to the
//! 250 µs unit the format carries).
#![no_main]
use libfuzzer_sys::fuzz_target;
use tern_proto::twcc;

fuzz_target!(|data: &[u8]| {
    let Ok(f) = twcc::parse(data) else { return };
    assert!(f.packets.len() <= twcc::MAX_STATUSES);
    for (i, p) in f.packets.iter().enumerate() {
        assert_eq!(p.seq, f.base_seq.wrapping_add(i as u16));
    }
    let mut out = Vec::new();
    twcc::write(&f.packets, f.feedback_count, &mut out);
    let again = twcc::parse(&out).expect("written feedback parses");
    assert_eq!(again.packets.len(), f.packets.len());
    for (a, b) in f.packets.iter().zip(&again.packets) {
        assert_eq!(a.seq, b.seq);
        assert_eq!(a.arrival_us.is_some(), b.arrival_us.is_some());
    }
});
