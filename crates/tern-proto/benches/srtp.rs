//! Cost of SRTP protection per profile, for the profile choice (issue 2).
//!
//! `cargo bench -p tern-proto --bench srtp [-- PACKETS]` prints, per profile, ns per packet
//! of a 1188-byte payload with [`RtpSender::protect_payload`] (the viewer path) and the bytes
//! the expanded sender holds. Under `valgrind --tool=callgrind --toggle-collect=*protect_one*`
//! each profile's instruction count per packet is the collected total divided by PACKETS (the
//! bench runs the profiles one at a time when given `--only N`, see `bench/core.sh`).

use std::hint::black_box;
use std::time::Instant;

use tern_proto::srtp::{RtpSender, SrtpKeys, SrtpProfile};

const PROFILES: [SrtpProfile; 3] = [
    SrtpProfile::AeadAes256Gcm,
    SrtpProfile::AeadAes128Gcm,
    SrtpProfile::Aes128CmHmacSha1_80,
];

#[inline(never)]
fn protect_one(tx: &RtpSender, out: &mut [u8], payload: &[u8], seq: u16) -> usize {
    out[2..4].copy_from_slice(&seq.to_be_bytes());
    tx.protect_payload(out, 12, payload, 0).unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let packets: u32 = args
        .iter()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(200_000);
    let only: Option<usize> = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok());
    let payload = vec![0x55u8; 1188];
    let mut out = vec![0u8; 1500];
    out[0] = 0x80;
    out[1] = 96;
    out[8..12].copy_from_slice(&0x1234_5678u32.to_be_bytes());
    println!("SRTP protect_payload, 1188-byte payload, {packets} packets per profile");
    for (i, p) in PROFILES.iter().enumerate() {
        if only.is_some_and(|o| o != i) {
            continue;
        }
        let key = vec![7u8; p.key_len()];
        let salt = vec![9u8; p.salt_len()];
        let keys = SrtpKeys::new(&key, &salt).expect("keys");
        let tx = RtpSender::new(*p, &keys).expect("sender");
        let t = Instant::now();
        let mut total = 0usize;
        for seq in 0..packets {
            total += protect_one(&tx, &mut out, black_box(&payload), seq as u16);
        }
        let ns = t.elapsed().as_nanos() as f64 / f64::from(packets);
        println!(
            "{:<22} {:>7.1} ns/packet  ({} bytes out)  sender inline {} B",
            format!("{p:?}"),
            ns,
            black_box(total) / packets as usize,
            std::mem::size_of::<RtpSender>()
        );
    }
}
