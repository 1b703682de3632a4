//! SRTP tests: RFC 3711 and RFC 7714 vectors, round trips, replay, rollover, errors.

use aws_lc_rs::aead::Aad;

use super::ciphers::*;
use super::keys::*;
use super::packet::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const PROFILES: [SrtpProfile; 3] = [
    SrtpProfile::Aes128CmHmacSha1_80,
    SrtpProfile::AeadAes128Gcm,
    SrtpProfile::AeadAes256Gcm,
];

fn keys(profile: SrtpProfile, seed: u8) -> SrtpKeys {
    let key: Vec<u8> = (0..profile.key_len() as u8).map(|i| i ^ seed).collect();
    let salt: Vec<u8> = (0..profile.salt_len() as u8)
        .map(|i| i.wrapping_mul(7) ^ seed)
        .collect();
    SrtpKeys::new(&key, &salt).unwrap()
}

fn rtp_packet(seq: u16, payload: usize) -> Vec<u8> {
    let mut p = vec![0x80, 96];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&1234u32.to_be_bytes());
    p.extend_from_slice(&0xcafe_babeu32.to_be_bytes());
    p.extend((0..payload).map(|i| i as u8));
    p
}

#[test]
fn profile_constants() {
    use SrtpProfile::*;
    assert_eq!(
        (
            Aes128CmHmacSha1_80.rtp_overhead(),
            Aes128CmHmacSha1_80.rtcp_overhead()
        ),
        (10, 14)
    );
    assert_eq!(
        (AeadAes128Gcm.rtp_overhead(), AeadAes128Gcm.rtcp_overhead()),
        (16, 20)
    );
    assert_eq!(AeadAes256Gcm.key_len(), 32);
    assert_eq!(AeadAes256Gcm.salt_len(), 12);
    assert_eq!(Aes128CmHmacSha1_80.keying_material_len(), 60);
    assert_eq!(AeadAes128Gcm.keying_material_len(), 56);
    for p in PROFILES {
        assert_eq!(SrtpProfile::from_dtls_id(p.dtls_id()), Some(p));
    }
    assert_eq!(SrtpProfile::from_dtls_id(2), None);
}

#[test]
fn split_keying_material_layout() {
    let km: Vec<u8> = (0..60).collect();
    let (c, s) = split_keying_material(SrtpProfile::Aes128CmHmacSha1_80, &km).unwrap();
    assert_eq!(c.key(), &km[0..16]);
    assert_eq!(s.key(), &km[16..32]);
    assert_eq!(c.salt(), &km[32..46]);
    assert_eq!(s.salt(), &km[46..60]);
    let km: Vec<u8> = (0..88).collect();
    let (c, s) = split_keying_material(SrtpProfile::AeadAes256Gcm, &km).unwrap();
    assert_eq!(c.key(), &km[0..32]);
    assert_eq!(s.key(), &km[32..64]);
    assert_eq!(c.salt(), &km[64..76]);
    assert_eq!(s.salt(), &km[76..88]);
    assert_eq!(
        split_keying_material(SrtpProfile::AeadAes128Gcm, &km).unwrap_err(),
        SrtpError::BadKeyingMaterial
    );
    assert!(!format!("{c:?}").contains("20"));
    // Keys of the wrong profile are rejected.
    assert_eq!(
        RtpCipher::new(SrtpProfile::AeadAes128Gcm, &c).unwrap_err(),
        SrtpError::BadKeyingMaterial
    );
}

/// RFC 3711 Appendix B.3 (AES-128) and RFC 6188 §7.2 (AES-256) key derivation.
#[test]
fn kdf_vectors() {
    let keys = SrtpKeys::new(
        &hex("E1F97A0D3E018BE0D64FA32C06DE4139"),
        &hex("0EC675AD498AFEEBB6960B3AABE6"),
    )
    .unwrap();
    let kdf = Kdf::new(&keys).unwrap();
    let mut k = [0u8; 16];
    kdf.derive(0, &mut k).unwrap();
    assert_eq!(k.to_vec(), hex("C61E7A93744F39EE10734AFE3FF7A087"));
    let mut s = [0u8; 14];
    kdf.derive(2, &mut s).unwrap();
    assert_eq!(s.to_vec(), hex("30CBBC08863D8C85D49DB34A9AE1"));
    let mut a = [0u8; 20];
    kdf.derive(1, &mut a).unwrap();
    assert_eq!(a.to_vec(), hex("CEBE321F6FF7716B6FD4AB49AF256A156D38BAA4"));

    let keys = SrtpKeys::new(
        &hex("f0f04914b513f2763a1b1fa130f10e2998f6f6e43e4309d1e622a0e332b9f1b6"),
        &hex("3b04803de51ee7c96423ab5b78d2"),
    )
    .unwrap();
    let kdf = Kdf::new(&keys).unwrap();
    let mut k = [0u8; 32];
    kdf.derive(0, &mut k).unwrap();
    assert_eq!(
        k.to_vec(),
        hex("5ba1064e30ec51613cad926c5a28ef731ec7fb397f70a960653caf06554cd8c4")
    );
    let mut s = [0u8; 14];
    kdf.derive(2, &mut s).unwrap();
    assert_eq!(s.to_vec(), hex("fa31791685ca444a9e07c6c64e93"));
    let mut a = [0u8; 20];
    kdf.derive(1, &mut a).unwrap();
    assert_eq!(a.to_vec(), hex("fd9c32d39ed5fbb5a9dc96b30818454d1313dc05"));
}

/// RFC 3711 Appendix B.2: AES-CM keystream for SSRC 0, index 0.
#[test]
fn aes_cm_keystream_vector() {
    let key = ctr_key(&hex("2B7E151628AED2A6ABF7158809CF4F3C")).unwrap();
    let mut salt = [0u8; 14];
    salt.copy_from_slice(&hex("F0F1F2F3F4F5F6F7F8F9FAFBFCFD"));
    let mut ks = [0u8; 48];
    aes_ctr(&key, cm_iv(&salt, 0, 0), &mut ks).unwrap();
    assert_eq!(
        ks.to_vec(),
        hex(
            "E03EAD0935C95E80E166B16DD92B4EB4 D23513162B02D0F72A43A2FE4A5F97AB
             41E95B3BB0A2E8DD477901E4FCA894C0"
        )
    );
}

fn gcm_vector_cipher() -> Transform {
    Transform::from_session(
        &hex("000102030405060708090a0b0c0d0e0f"),
        &[],
        &hex("517569642070726f2071756f"),
    )
}

const RFC7714_RTP: &str = "8040f17b 8041f8d3 5501a0b2 47616c6c 69612065 7374206f
    6d6e6973 20646976 69736120 696e2070 61727465 73207472 6573";
const RFC7714_SRTP: &str = "8040f17b 8041f8d3 5501a0b2 f24de3a3 fb34de6c acba861c
    9d7e4bca be633bd5 0d294e6f 42a5f47a 51c7d19b 36de3adf 8833899d 7f27beb1 6a9152cf
    765ee439 0cce";

/// RFC 7714 §16.1: AEAD_AES_128_GCM SRTP encryption and decryption.
#[test]
fn gcm_rtp_vector() {
    let mut c = RtpCipher {
        profile: SrtpProfile::AeadAes128Gcm,
        t: gcm_vector_cipher(),
        streams: Streams::new(),
    };
    let plain = hex(RFC7714_RTP);
    let mut buf = plain.clone();
    buf.resize(plain.len() + 16, 0);
    let n = c.protect(&mut buf, plain.len(), 12, 0).unwrap();
    assert_eq!(buf[..n].to_vec(), hex(RFC7714_SRTP));
    let n = c.unprotect(&mut buf, n).unwrap();
    assert_eq!(buf[..n].to_vec(), plain);
}

const RFC7714_RTCP: &str = "81c8000d 4d617273 4e545031 4e545032 52545020 0000042a
    0000e930 4c756e61 deadbeef deadbeef deadbeef deadbeef deadbeef";
const RFC7714_SRTCP: &str = "81c8000d 4d617273 63e94885 dcdab67c a727d766 2f6b7e99
    7ff5c0f7 6c06f32d c676a5f1 730d6fda 4ce09b46 86303ded 0bb9275b c84aa458 96cf4d2f
    c5abf872 45d9eade 800005d4";

/// RFC 7714 §17.1: AEAD_AES_128_GCM SRTCP with index 0x5d4.
#[test]
fn gcm_rtcp_vector() {
    let mut c = RtcpCipher {
        profile: SrtpProfile::AeadAes128Gcm,
        t: gcm_vector_cipher(),
        next_index: 0,
        streams: Streams::new(),
    };
    c.set_next_index(0x5d4);
    let plain = hex(RFC7714_RTCP);
    let mut buf = plain.clone();
    buf.resize(plain.len() + 20, 0);
    let n = c.protect(&mut buf, plain.len()).unwrap();
    assert_eq!(buf[..n].to_vec(), hex(RFC7714_SRTCP));
    let n = c.unprotect(&mut buf, n).unwrap();
    assert_eq!(buf[..n].to_vec(), plain);
    // Altering the index word breaks authentication.
    let mut wire = hex(RFC7714_SRTCP);
    let l = wire.len();
    wire[l - 1] ^= 1;
    let mut c2 = RtcpCipher {
        profile: SrtpProfile::AeadAes128Gcm,
        t: gcm_vector_cipher(),
        next_index: 0,
        streams: Streams::new(),
    };
    assert_eq!(c2.unprotect(&mut wire, l), Err(SrtpError::AuthFailed));
}

/// libsrtp `srtp_driver` reference packets: SSRC 0xcafebabe, seq 0x1234, 16 bytes of
/// 0xab, SRTCP index 1 (libsrtp's first).
fn libsrtp_reference(profile: SrtpProfile, key: &str, salt: &str, srtp: &str, srtcp: &str) {
    let keys = SrtpKeys::new(&hex(key), &hex(salt)).unwrap();
    let mut tx = RtpCipher::new(profile, &keys).unwrap();
    let mut rx = RtpCipher::new(profile, &keys).unwrap();
    let plain = hex("800f1234decafbadcafebabe abababababababababababababababab");
    let mut buf = plain.clone();
    buf.resize(plain.len() + tx.overhead(), 0);
    let n = tx.protect(&mut buf, plain.len(), 12, 0).unwrap();
    assert_eq!(buf[..n].to_vec(), hex(srtp), "{profile:?} SRTP");
    let m = rx.unprotect(&mut buf, n).unwrap();
    assert_eq!(buf[..m].to_vec(), plain);

    let mut tx = RtcpCipher::new(profile, &keys).unwrap();
    let mut rx = RtcpCipher::new(profile, &keys).unwrap();
    tx.set_next_index(1);
    let plain = hex("81c8000bcafebabe abababababababababababababababab");
    let mut buf = plain.clone();
    buf.resize(plain.len() + tx.overhead(), 0);
    let n = tx.protect(&mut buf, plain.len()).unwrap();
    assert_eq!(buf[..n].to_vec(), hex(srtcp), "{profile:?} SRTCP");
    let m = rx.unprotect(&mut buf, n).unwrap();
    assert_eq!(buf[..m].to_vec(), plain);
}

#[test]
fn libsrtp_reference_aes_cm() {
    libsrtp_reference(
        SrtpProfile::Aes128CmHmacSha1_80,
        "e1f97a0d3e018be0d64fa32c06de4139",
        "0ec675ad498afeebb6960b3aabe6",
        "800f1234decafbadcafebabe 4e55dc4ce79978d88ca4d215949d2402 b78d6acc99ea179b8dbb",
        "81c8000bcafebabe 7128035be487b9bdbef89041f977a5a8 80000001 993e08cd54d6c1230798",
    );
}

/// Also checks the KDF with a 12-byte GCM master salt against libsrtp.
#[test]
fn libsrtp_reference_aes_128_gcm() {
    libsrtp_reference(
        SrtpProfile::AeadAes128Gcm,
        "000102030405060708090a0b0c0d0e0f",
        "a0a1a2a3a4a5a6a7a8a9aaab",
        "800f1234decafbadcafebabe c5002ede04cfdd2eb91159e0880aa06e
         d2976826f796b201df3131a127e8a392",
        "81c8000bcafebabe c98b8b5df0392a55852b6c21ac8e7025
         c52c6fbea2b3b446ea31123ba88ce61e 80000001",
    );
}

/// AEAD_AES_256_GCM with the libsrtp reference packet layout (master key 00..1f, salt
/// a0..ab), as published by an independent implementation; exercises the AES-256 PRF.
#[test]
fn reference_aes_256_gcm_rtp() {
    let keys = SrtpKeys::new(
        &hex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"),
        &hex("a0a1a2a3a4a5a6a7a8a9aaab"),
    )
    .unwrap();
    let mut tx = RtpCipher::new(SrtpProfile::AeadAes256Gcm, &keys).unwrap();
    let plain = hex("800f1234decafbadcafebabe abababababababababababababababab");
    let mut buf = plain.clone();
    buf.resize(plain.len() + 16, 0);
    let n = tx.protect(&mut buf, plain.len(), 12, 0).unwrap();
    assert_eq!(
        buf[..n].to_vec(),
        hex("800f1234decafbadcafebabe 0af7f21e8a90bdad7a425c9c31ed4bb1
             d90238917e7390a2793500e1681acaea")
    );
}

#[test]
fn rtp_round_trip_all_profiles() {
    for p in PROFILES {
        let k = keys(p, 3);
        let mut tx = RtpCipher::new(p, &k).unwrap();
        let mut rx = RtpCipher::new(p, &k).unwrap();
        for (seq, size) in [(1u16, 0usize), (2, 1), (3, 100), (4, 1200)] {
            let plain = rtp_packet(seq, size);
            let mut buf = plain.clone();
            buf.resize(plain.len() + tx.overhead(), 0);
            let n = tx.protect(&mut buf, plain.len(), 12, 0).unwrap();
            assert_eq!(n, plain.len() + p.rtp_overhead());
            if size > 16 {
                assert_ne!(buf[12..plain.len()], plain[12..], "{p:?} not encrypted");
            }
            let m = rx.unprotect(&mut buf, n).unwrap();
            assert_eq!(buf[..m], plain[..], "{p:?}");
        }
        // With an extension header: the extension stays in the clear.
        let mut plain = vec![0x90, 96, 0, 9, 0, 0, 0, 1, 0xca, 0xfe, 0xba, 0xbe];
        plain.extend_from_slice(&[0xbe, 0xde, 0, 1, 0x10, 0xaa, 0, 0, 1, 2, 3]);
        let mut buf = plain.clone();
        buf.resize(plain.len() + tx.overhead(), 0);
        let n = tx.protect(&mut buf, plain.len(), 20, 0).unwrap();
        assert_eq!(buf[..20], plain[..20]);
        let m = rx.unprotect(&mut buf, n).unwrap();
        assert_eq!(buf[..m], plain[..]);
    }
}

#[test]
fn rtcp_round_trip_all_profiles() {
    for p in PROFILES {
        let k = keys(p, 9);
        let mut tx = RtcpCipher::new(p, &k).unwrap();
        let mut rx = RtcpCipher::new(p, &k).unwrap();
        let mut plain = [0u8; 64];
        let len = crate::rtcp::write_rr(&mut plain, 0x0bad_cafe, &[Default::default()]).unwrap();
        let len = len + crate::rtcp::write_sdes_cname(&mut plain[len..], 0x0bad_cafe, "x").unwrap();
        for i in 0..3u32 {
            let mut buf = [0u8; 128];
            buf[..len].copy_from_slice(&plain[..len]);
            let n = tx.protect(&mut buf, len).unwrap();
            assert_eq!(n, len + p.rtcp_overhead());
            let idx_at = if p.is_gcm() { n - 4 } else { n - 14 };
            assert_eq!(buf[idx_at..idx_at + 4], (0x8000_0000 | i).to_be_bytes());
            assert_ne!(buf[8..len], plain[8..len]);
            let m = rx.unprotect(&mut buf, n).unwrap();
            assert_eq!(buf[..m], plain[..len], "{p:?}");
        }
    }
}

/// The send-only and receive-only types interoperate with the two-way ciphers, and
/// `protect_payload` (out of place) gives the same bytes as `protect` (in place).
#[test]
fn sender_and_receiver_types_interoperate() {
    for p in PROFILES {
        let k = keys(p, 5);
        let tx = RtpSender::new(p, &k).unwrap();
        let mut rx = RtpCipher::new(p, &k).unwrap();
        for (seq, size) in [(7u16, 0usize), (8, 17), (9, 1188)] {
            let plain = rtp_packet(seq, size);
            let mut a = plain.clone();
            a.resize(plain.len() + tx.overhead(), 0);
            let n = tx.protect(&mut a, plain.len(), 12, 3).unwrap();
            let mut b = vec![0u8; 1500];
            b[..12].copy_from_slice(&plain[..12]);
            let m = tx.protect_payload(&mut b, 12, &plain[12..], 3).unwrap();
            assert_eq!(a[..n], b[..m], "{p:?}");
            // A receiver expects ROC 0 for a new SSRC: decrypt a ROC-0 copy.
            let m = tx.protect_payload(&mut b, 12, &plain[12..], 0).unwrap();
            let d = rx.unprotect(&mut b, m).unwrap();
            assert_eq!(b[..d], plain[..], "{p:?}");
        }
        let mut small = [0u8; 20];
        assert_eq!(
            tx.protect_payload(&mut small, 12, &[0; 8], 0).unwrap_err(),
            SrtpError::BufferTooSmall
        );

        let mut rtcp_tx = RtcpSender::new(p, &k).unwrap();
        let mut rtcp_rx = RtcpReceiver::new(p, &k).unwrap();
        let mut two_way = RtcpCipher::new(p, &k).unwrap();
        let mut plain = [0u8; 64];
        let len = crate::rtcp::write_rr(&mut plain, 0x0bad_cafe, &[Default::default()]).unwrap();
        for _ in 0..3 {
            let mut buf = [0u8; 128];
            buf[..len].copy_from_slice(&plain[..len]);
            let n = rtcp_tx.protect(&mut buf, len).unwrap();
            let mut copy = buf;
            assert_eq!(two_way.unprotect(&mut copy, n).unwrap(), len);
            assert_eq!(copy[..len], plain[..len]);
            assert_eq!(rtcp_rx.unprotect(&mut buf, n).unwrap(), len);
            assert_eq!(buf[..len], plain[..len]);
        }
        // Replay is rejected, tampering fails, and a two-way cipher's output is accepted.
        let mut buf = [0u8; 128];
        buf[..len].copy_from_slice(&plain[..len]);
        two_way.set_next_index(10);
        let n = two_way.protect(&mut buf, len).unwrap();
        let copy = buf;
        assert_eq!(rtcp_rx.unprotect(&mut buf, n).unwrap(), len);
        let mut again = copy;
        assert_eq!(
            rtcp_rx.unprotect(&mut again, n).unwrap_err(),
            SrtpError::Replay
        );
        let mut bad = copy;
        bad[3] ^= 1;
        assert!(rtcp_rx.unprotect(&mut bad, n).is_err());
    }
}

/// Builds an SRTCP packet with the E flag clear by hand and checks it authenticates.
#[test]
fn rtcp_unencrypted_accepted() {
    for p in PROFILES {
        let k = keys(p, 1);
        let tx = RtcpCipher::new(p, &k).unwrap();
        let mut rx = RtcpCipher::new(p, &k).unwrap();
        let mut buf = [0u8; 64];
        let len = crate::rtcp::write_bye(&mut buf, 77).unwrap();
        let trailer = 5u32.to_be_bytes();
        let n = len + p.rtcp_overhead();
        match &tx.t {
            Transform::Cm(cm) => {
                buf[len..len + 4].copy_from_slice(&trailer);
                let (msg, tag) = buf.split_at_mut(len + 4);
                hmac_tag(&cm.auth, &[&*msg], &mut tag[..10]);
            }
            Transform::Gcm { key, salt } => {
                let mut aad = buf[..len].to_vec();
                aad.extend_from_slice(&trailer);
                let tag = key
                    .seal_in_place_separate_tag(
                        gcm_iv(salt, 77, rtcp_gcm_tail(5)),
                        Aad::from(&aad),
                        &mut [],
                    )
                    .unwrap();
                buf[len..len + 16].copy_from_slice(tag.as_ref());
                buf[len + 16..len + 20].copy_from_slice(&trailer);
            }
        }
        assert_eq!(rx.unprotect(&mut buf, n), Ok(len), "{p:?}");
        assert_eq!(buf[..8], [0x81, 203, 0, 1, 0, 0, 0, 77]);
    }
}

#[test]
fn tampering_fails_auth() {
    for p in PROFILES {
        let k = keys(p, 5);
        let mut tx = RtpCipher::new(p, &k).unwrap();
        let plain = rtp_packet(10, 50);
        let mut wire = plain.clone();
        wire.resize(plain.len() + tx.overhead(), 0);
        let n = tx.protect(&mut wire, plain.len(), 12, 0).unwrap();
        for at in [1, 5, 12, 30, n - 1] {
            let mut rx = RtpCipher::new(p, &k).unwrap();
            let mut b = wire.clone();
            b[at] ^= 0x40;
            assert_eq!(
                rx.unprotect(&mut b, n),
                Err(SrtpError::AuthFailed),
                "{p:?} {at}"
            );
            // The failed packet left no state: the genuine one still goes through.
            let mut b = wire.clone();
            assert!(rx.unprotect(&mut b, n).is_ok());
        }
        // Wrong keys.
        let mut rx = RtpCipher::new(p, &keys(p, 6)).unwrap();
        let mut b = wire.clone();
        assert_eq!(rx.unprotect(&mut b, n), Err(SrtpError::AuthFailed));

        let mut tx = RtcpCipher::new(p, &k).unwrap();
        let mut rx = RtcpCipher::new(p, &k).unwrap();
        let mut buf = [0u8; 64];
        let len = crate::rtcp::write_pli(&mut buf, 1, 2).unwrap();
        let n = tx.protect(&mut buf, len).unwrap();
        for at in [0, 4, 9, n - 1, n - 5] {
            let mut b = buf;
            b[at] ^= 1;
            assert_eq!(
                rx.unprotect(&mut b, n),
                Err(SrtpError::AuthFailed),
                "{p:?} {at}"
            );
        }
        assert_eq!(rx.unprotect(&mut buf, n), Ok(len));
    }
}

#[test]
fn replay_rejected() {
    for p in PROFILES {
        let k = keys(p, 7);
        let mut tx = RtpCipher::new(p, &k).unwrap();
        let mut rx = RtpCipher::new(p, &k).unwrap();
        let mut wires = Vec::new();
        for seq in 0..100u16 {
            let plain = rtp_packet(seq, 20);
            let mut buf = plain.clone();
            buf.resize(plain.len() + tx.overhead(), 0);
            let n = tx.protect(&mut buf, plain.len(), 12, 0).unwrap();
            wires.push((buf, n));
        }
        // Deliver out of order: 0..50, then 99, then 60..99.
        for (b, n) in wires[..50].iter().chain(&wires[99..]).chain(&wires[60..99]) {
            let mut b = b.clone();
            rx.unprotect(&mut b, *n).unwrap();
        }
        // Duplicate inside the window.
        let (b, n) = &wires[70];
        assert_eq!(rx.unprotect(&mut b.clone(), *n), Err(SrtpError::Replay));
        // Late but new, inside the window (99 - 55 < 64).
        let (b, n) = &wires[55];
        assert!(rx.unprotect(&mut b.clone(), *n).is_ok());
        // Too old (99 - 20 >= 64).
        let (b, n) = &wires[20];
        assert_eq!(rx.unprotect(&mut b.clone(), *n), Err(SrtpError::Replay));

        let mut tx = RtcpCipher::new(p, &k).unwrap();
        let mut rx = RtcpCipher::new(p, &k).unwrap();
        let mut buf = [0u8; 64];
        let len = crate::rtcp::write_pli(&mut buf, 1, 2).unwrap();
        let n = tx.protect(&mut buf, len).unwrap();
        assert!(rx.unprotect(&mut buf.clone(), n).is_ok());
        assert_eq!(rx.unprotect(&mut buf.clone(), n), Err(SrtpError::Replay));
    }
}

#[test]
fn roc_rollover() {
    for p in PROFILES {
        let k = keys(p, 11);
        let mut tx = RtpCipher::new(p, &k).unwrap();
        let mut rx = RtpCipher::new(p, &k).unwrap();
        let mut send = |ext: u64| {
            let plain = rtp_packet(ext as u16, 30);
            let mut buf = plain.clone();
            buf.resize(plain.len() + tx.overhead(), 0);
            let n = tx
                .protect(&mut buf, plain.len(), 12, (ext >> 16) as u32)
                .unwrap();
            (plain, buf, n)
        };
        let mut held = None;
        // `ext` is the extended sequence number the sender keeps.
        for ext in 65530u64..65542 {
            let (plain, mut buf, n) = send(ext);
            if ext == 65534 {
                held = Some((plain, buf, n)); // reordered across the wrap
            } else {
                let m = rx.unprotect(&mut buf, n).unwrap();
                assert_eq!(buf[..m], plain[..], "{p:?} ext {ext}");
            }
        }
        let (plain, mut buf, n) = held.unwrap();
        let m = rx.unprotect(&mut buf, n).unwrap();
        assert_eq!(buf[..m], plain[..]);
        // A sender that forgot to bump the ROC fails authentication after the wrap.
        let plain = rtp_packet(20, 30);
        let mut buf = plain.clone();
        buf.resize(plain.len() + tx.overhead(), 0);
        let n = tx.protect(&mut buf, plain.len(), 12, 0).unwrap();
        assert_eq!(rx.unprotect(&mut buf, n), Err(SrtpError::AuthFailed));
    }
}

#[test]
fn many_ssrcs_evict_oldest() {
    let p = SrtpProfile::AeadAes128Gcm;
    let k = keys(p, 2);
    let mut tx = RtpCipher::new(p, &k).unwrap();
    let mut rx = RtpCipher::new(p, &k).unwrap();
    let mut wire = |ssrc: u32, seq: u16| {
        let mut plain = rtp_packet(seq, 8);
        plain[8..12].copy_from_slice(&ssrc.to_be_bytes());
        let len = plain.len();
        plain.resize(len + 16, 0);
        let n = tx.protect(&mut plain, len, 12, 0).unwrap();
        (plain, n)
    };
    let first = wire(0, 1);
    rx.unprotect(&mut first.0.clone(), first.1).unwrap();
    for ssrc in 1..=MAX_STREAMS as u32 {
        let (mut b, n) = wire(ssrc, 1);
        rx.unprotect(&mut b, n).unwrap();
    }
    // SSRC 0 was evicted, so its replay state is gone (a fresh stream).
    assert!(rx.streams.get(0).is_none());
    assert!(rx.unprotect(&mut first.0.clone(), first.1).is_ok());
}

#[test]
fn buffer_and_length_errors() {
    for p in PROFILES {
        let k = keys(p, 4);
        let mut c = RtpCipher::new(p, &k).unwrap();
        let plain = rtp_packet(1, 10);
        let mut buf = plain.clone();
        buf.resize(plain.len() + c.overhead() - 1, 0);
        assert_eq!(
            c.protect(&mut buf, plain.len(), 12, 0),
            Err(SrtpError::BufferTooSmall)
        );
        assert_eq!(
            c.protect(&mut buf, plain.len(), 11, 0),
            Err(SrtpError::Malformed)
        );
        assert_eq!(
            c.protect(&mut buf, plain.len(), plain.len() + 1, 0),
            Err(SrtpError::Malformed)
        );
        let too_long = buf.len() + 1;
        assert_eq!(
            c.protect(&mut buf, too_long, 12, 0),
            Err(SrtpError::Malformed)
        );
        assert_eq!(c.unprotect(&mut buf, too_long), Err(SrtpError::Malformed));
        assert_eq!(
            c.unprotect(&mut buf, 12 + c.overhead() - 1),
            Err(SrtpError::Malformed)
        );
        assert_eq!(c.unprotect(&mut buf, 5), Err(SrtpError::Malformed));

        let mut r = RtcpCipher::new(p, &k).unwrap();
        let mut buf = [0u8; 64];
        let len = crate::rtcp::write_pli(&mut buf, 1, 2).unwrap();
        assert_eq!(
            r.protect(&mut buf[..len + r.overhead() - 1], len),
            Err(SrtpError::BufferTooSmall)
        );
        assert_eq!(r.protect(&mut buf, 7), Err(SrtpError::Malformed));
        assert_eq!(
            r.unprotect(&mut buf, 8 + r.overhead() - 1),
            Err(SrtpError::Malformed)
        );
        assert_eq!(r.unprotect(&mut buf, 65), Err(SrtpError::Malformed));
        r.next_index = MAX_SRTCP_INDEX + 1;
        assert_eq!(r.protect(&mut buf, len), Err(SrtpError::IndexExhausted));
    }
}

#[test]
fn random_input_never_panics() {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut ciphers: Vec<_> = PROFILES
        .iter()
        .map(|&p| {
            (
                RtpCipher::new(p, &keys(p, 0)).unwrap(),
                RtcpCipher::new(p, &keys(p, 0)).unwrap(),
            )
        })
        .collect();
    let mut buf = [0u8; 80];
    for _ in 0..5_000 {
        for b in buf.iter_mut() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *b = state as u8;
        }
        buf[0] = (buf[0] & 0x3f) | 0x80;
        let len = (state >> 40) as usize % (buf.len() + 2);
        for (rtp, rtcp) in ciphers.iter_mut() {
            assert!(rtp.unprotect(&mut buf.clone(), len).is_err());
            assert!(rtcp.unprotect(&mut buf.clone(), len).is_err());
        }
    }
}
