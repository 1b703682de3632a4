//! RTCP compound parsing: walks every packet and touches every accessor.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tern_proto::rtcp::{self, RtcpPacket};

fuzz_target!(|data: &[u8]| {
    let mut sink = 0u64;
    for pkt in rtcp::iter_compound(data) {
        let Ok(pkt) = pkt else { break };
        match pkt {
            RtcpPacket::SenderReport(sr) => {
                let info = sr.sender_info();
                sink ^= info.ntp ^ u64::from(info.rtp_ts ^ info.packet_count ^ info.octet_count);
                for b in sr.blocks() {
                    sink ^= u64::from(b.ssrc ^ b.highest_seq ^ b.jitter ^ b.lsr ^ b.dlsr);
                    assert!((-(1 << 23)..(1 << 23)).contains(&b.cumulative_lost));
                }
            }
            RtcpPacket::ReceiverReport(rr) => {
                sink ^= u64::from(rr.ssrc);
                assert!(rr.blocks().len() <= 31);
                for b in rr.blocks() {
                    sink ^= u64::from(b.fraction_lost);
                }
            }
            RtcpPacket::Sdes(body) => sink ^= body.len() as u64,
            RtcpPacket::Bye { ssrcs, reason } => {
                assert_eq!(ssrcs.iter().count(), ssrcs.len());
                sink ^= reason.len() as u64;
            }
            RtcpPacket::Nack(n) => {
                sink ^= u64::from(n.sender_ssrc ^ n.media_ssrc);
                let pairs = n.pairs().count();
                assert!(n.lost().count() <= 17 * pairs);
            }
            RtcpPacket::Pli {
                sender_ssrc,
                media_ssrc,
            } => sink ^= u64::from(sender_ssrc ^ media_ssrc),
            RtcpPacket::Fir(f) => {
                sink ^= u64::from(f.sender_ssrc ^ f.media_ssrc);
                for (ssrc, seq) in f.entries() {
                    sink ^= u64::from(ssrc) ^ u64::from(seq);
                }
            }
            RtcpPacket::Remb(r) => {
                sink ^= r.bitrate ^ u64::from(r.sender_ssrc);
                for s in r.ssrcs.iter() {
                    sink ^= u64::from(s);
                }
            }
            RtcpPacket::Other { pt, fmt, body } => {
                sink ^= u64::from(pt) ^ u64::from(fmt) ^ body.len() as u64
            }
            _ => {}
        }
    }
    std::hint::black_box(sink);

    // Writers: NACK packing from arbitrary sequence numbers round-trips as a set.
    if data.len() >= 2 {
        let lost: Vec<u16> = data
            .chunks_exact(2)
            .take(64)
            .map(|c| u16::from_be_bytes([c[0], c[1]]))
            .collect();
        let mut out = [0u8; 12 + 4 * 64];
        let n = rtcp::write_nack(&mut out, 1, 2, &lost).expect("fits");
        let Some(Ok(RtcpPacket::Nack(nack))) = rtcp::iter_compound(&out[..n]).next() else {
            panic!("NACK did not parse")
        };
        let mut got: Vec<u16> = nack.lost().collect();
        got.sort_unstable();
        got.dedup();
        let mut want = lost;
        want.sort_unstable();
        want.dedup();
        assert_eq!(got, want);
    }
});
