//! DTLS 1.3 with RSA certificates (RSA-PSS CertificateVerify in both
//! directions) and the server's SRTP profile preference.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dimpl::certificate::generate_self_signed_certificate;
use dimpl::{Config, Dtls, DtlsCertificate, ProtocolVersion, SrtpProfile};
use openssl::asn1::Asn1Time;
use openssl::bn::BigNum;
use openssl::hash::MessageDigest;
use openssl::pkey::PKey;
use openssl::rsa::Rsa;
use openssl::x509::{X509, X509Name};

use super::common::*;

fn rsa_certificate(bits: u32) -> DtlsCertificate {
    let pkey = PKey::from_rsa(Rsa::generate(bits).unwrap()).unwrap();
    let mut name = X509Name::builder().unwrap();
    name.append_entry_by_text("CN", "WebRTC").unwrap();
    let name = name.build();
    let mut b = X509::builder().unwrap();
    b.set_version(2).unwrap();
    b.set_serial_number(&BigNum::from_u32(9).unwrap().to_asn1_integer().unwrap())
        .unwrap();
    b.set_subject_name(&name).unwrap();
    b.set_issuer_name(&name).unwrap();
    b.set_pubkey(&pkey).unwrap();
    b.set_not_before(&Asn1Time::days_from_now(0).unwrap())
        .unwrap();
    b.set_not_after(&Asn1Time::days_from_now(30).unwrap())
        .unwrap();
    b.sign(&pkey, MessageDigest::sha256()).unwrap();
    DtlsCertificate {
        certificate: b.build().to_der().unwrap(),
        // PKCS#1 "RSA PRIVATE KEY" DER, as `openssl genrsa -traditional` writes it.
        private_key: pkey.rsa().unwrap().private_key_to_der().unwrap(),
    }
}

/// Returns (cert the client saw, cert the server saw, client profile, server profile).
fn handshake(
    client_cert: DtlsCertificate,
    server_cert: DtlsCertificate,
    server_config: Arc<Config>,
) -> (Vec<u8>, Vec<u8>, SrtpProfile, SrtpProfile) {
    let mut now = Instant::now();
    let mut client = Dtls::new_13(dtls13_config(), client_cert, now);
    client.set_active(true);
    let mut server = Dtls::new_13(server_config, server_cert, now);
    server.set_active(false);
    let (mut cc, mut sc, mut cp, mut sp) = (None, None, None, None);
    for _ in 0..40 {
        client.handle_timeout(now).unwrap();
        server.handle_timeout(now).unwrap();
        let c = drain_outputs(&mut client);
        let s = drain_outputs(&mut server);
        cc = cc.or(c.peer_cert);
        sc = sc.or(s.peer_cert);
        cp = cp.or(c.keying_material.map(|k| k.1));
        sp = sp.or(s.keying_material.map(|k| k.1));
        for p in &c.packets {
            server
                .handle_packet(p)
                .expect("server handles client packet");
        }
        for p in &s.packets {
            client
                .handle_packet(p)
                .expect("client handles server packet");
        }
        if cp.is_some() && sp.is_some() {
            break;
        }
        now += Duration::from_millis(10);
    }
    assert_eq!(client.protocol_version(), Some(ProtocolVersion::DTLS1_3));
    (
        cc.expect("client saw server cert"),
        sc.expect("server saw client cert"),
        cp.expect("client keys"),
        sp.expect("server keys"),
    )
}

#[test]
fn dtls13_rsa_client_certificate_pss() {
    for bits in [2048, 4096] {
        let client = rsa_certificate(bits);
        let der = client.certificate.clone();
        let (_, seen, _, _) = handshake(
            client,
            generate_self_signed_certificate().unwrap(),
            dtls13_config(),
        );
        assert_eq!(seen, der, "RSA-{bits}");
    }
}

#[test]
fn dtls13_rsa_server_certificate_pss() {
    let server = rsa_certificate(2048);
    let der = server.certificate.clone();
    let (seen, _, _, _) = handshake(
        generate_self_signed_certificate().unwrap(),
        server,
        dtls13_config(),
    );
    assert_eq!(seen, der);
}

#[test]
fn dtls13_server_srtp_preference() {
    let run = |config| {
        let (_, _, cp, sp) = handshake(
            generate_self_signed_certificate().unwrap(),
            generate_self_signed_certificate().unwrap(),
            config,
        );
        assert_eq!(cp, sp);
        sp
    };
    // Default unchanged: the client's first (dimpl offers AES-256-GCM first).
    assert_eq!(run(dtls13_config()), SrtpProfile::AEAD_AES_256_GCM);
    let config = Config::builder()
        .srtp_profiles(&[
            SrtpProfile::AEAD_AES_128_GCM,
            SrtpProfile::AEAD_AES_256_GCM,
            SrtpProfile::AES128_CM_SHA1_80,
        ])
        .build()
        .unwrap();
    assert_eq!(run(Arc::new(config)), SrtpProfile::AEAD_AES_128_GCM);
}
