//! SRTP/SRTCP unprotect on arbitrary input with fixed keys: must never panic, and nothing
//! unauthenticated may be accepted. The first byte picks the profile.
//!
//! The same input is also read as a sequence of operations on a sender/receiver pair (send
//! with sequence jumps across rollovers, deliver any earlier packet again or out of order):
//! the receiver must never accept an index twice and must only return the original plaintext.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tern_proto::srtp::{RtcpCipher, RtcpReceiver, RtpCipher, RtpSender, SrtpKeys, SrtpProfile};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, data)) = data.split_first() else {
        return;
    };
    let profile = match selector % 3 {
        0 => SrtpProfile::Aes128CmHmacSha1_80,
        1 => SrtpProfile::AeadAes128Gcm,
        _ => SrtpProfile::AeadAes256Gcm,
    };
    let key = [0x42u8; 32];
    let salt = [0x24u8; 14];
    let keys =
        SrtpKeys::new(&key[..profile.key_len()], &salt[..profile.salt_len()]).expect("fixed keys");
    let mut rtp = RtpCipher::new(profile, &keys).expect("rtp cipher");
    let mut rtcp = RtcpCipher::new(profile, &keys).expect("rtcp cipher");

    // Extra room at the end, and a length past the buffer, must be handled.
    let mut buf = data.to_vec();
    buf.extend_from_slice(&[0u8; 32]);
    let mut rtcp_rx = RtcpReceiver::new(profile, &keys).expect("rtcp receiver");
    for len in [data.len(), data.len() + 1, buf.len() + 1] {
        let _ = rtp.unprotect(&mut buf.clone(), len);
        let _ = rtcp.unprotect(&mut buf.clone(), len);
        let _ = rtcp_rx.unprotect(&mut buf.clone(), len);
    }

    // A packet that was genuinely protected decrypts back; flipping one byte is rejected.
    if data.len() >= 12 {
        let mut plain = data.to_vec();
        plain[0] = (plain[0] & 0x3f) | 0x80;
        plain[0] &= !0x30; // no extension, no padding: header is 12 + 4*CC
        let header_len = 12 + 4 * usize::from(plain[0] & 0x0f);
        if header_len <= plain.len() {
            let len = plain.len();
            let mut wire = plain.clone();
            wire.resize(len + rtp.overhead(), 0);
            let n = rtp.protect(&mut wire, len, header_len, 0).expect("protect");
            let mut rx = RtpCipher::new(profile, &keys).expect("rtp cipher");
            let mut tampered = wire.clone();
            tampered[n - 1] ^= 1;
            assert!(rx.unprotect(&mut tampered, n).is_err());
            let m = rx.unprotect(&mut wire, n).expect("round trip");
            assert_eq!(wire[..m], plain[..]);
            // The send-only type, encrypting out of place, writes the same packet.
            let sender = RtpSender::new(profile, &keys).expect("rtp sender");
            let mut out = vec![0u8; len + sender.overhead()];
            out[..header_len].copy_from_slice(&plain[..header_len]);
            let k = sender
                .protect_payload(&mut out, header_len, &plain[header_len..], 0)
                .expect("protect_payload");
            let mut again = plain.clone();
            again.resize(len + sender.overhead(), 0);
            let j = sender
                .protect(&mut again, len, header_len, 0)
                .expect("protect");
            assert_eq!(out[..k], again[..j]);
        }
    }

    sequence(profile, &keys, data);
});

fn sequence(profile: SrtpProfile, keys: &SrtpKeys, ops: &[u8]) {
    let mut tx = RtpCipher::new(profile, keys).expect("rtp cipher");
    let mut rx = RtpCipher::new(profile, keys).expect("rtp cipher");
    let mut ext: u64 = 0;
    // (extended seq, plaintext, protected packet)
    let mut sent: Vec<(u64, Vec<u8>, Vec<u8>)> = Vec::new();
    let mut accepted = std::collections::HashSet::new();
    for op in ops.chunks_exact(3).take(512) {
        match op[0] % 4 {
            0 | 1 => {
                ext += 1 + u64::from(op[1] % 4);
                if op[0] % 4 == 1 {
                    ext += u64::from(u16::from_be_bytes([op[1], op[2]]) >> 1);
                }
                let mut plain = vec![0x80, 96, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, op[1], op[2]];
                plain[2..4].copy_from_slice(&(ext as u16).to_be_bytes());
                let len = plain.len();
                let mut wire = plain.clone();
                wire.resize(len + tx.overhead(), 0);
                let n = tx
                    .protect(&mut wire, len, 12, (ext >> 16) as u32)
                    .expect("protect");
                wire.truncate(n);
                if sent.len() == 64 {
                    sent.remove(0);
                }
                sent.push((ext, plain, wire));
            }
            _ => {
                if sent.is_empty() {
                    continue;
                }
                let i = usize::from(op[1]) % sent.len();
                let (e, plain, wire) = &sent[i];
                let mut b = wire.clone();
                if let Ok(m) = rx.unprotect(&mut b, wire.len()) {
                    assert_eq!(&b[..m], &plain[..]);
                    assert!(accepted.insert(*e), "index {e} accepted twice");
                }
            }
        }
    }
}
