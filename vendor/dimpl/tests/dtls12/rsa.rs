//! DTLS 1.2 with RSA client certificates (PKCS#1 v1.5 and PSS) and the
//! server's SRTP profile preference.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use dimpl::certificate::generate_self_signed_certificate;
use dimpl::{Config, Dtls, DtlsCertificate, Output, SrtpProfile};
use openssl::asn1::Asn1Time;
use openssl::bn::BigNum;
use openssl::hash::MessageDigest;
use openssl::pkey::PKey;
use openssl::rsa::Rsa;
use openssl::x509::{X509, X509Name};

use super::common::*;
use crate::ossl_helper::{DtlsCertOptions, DtlsEvent, DtlsPKeyType, OsslDtlsCert};

/// A self-signed RSA certificate and its PKCS#8 key, as WebRTC stacks make them.
pub fn rsa_certificate(bits: u32) -> DtlsCertificate {
    let rsa = Rsa::generate(bits).expect("rsa key");
    let pkey = PKey::from_rsa(rsa).expect("pkey");
    let mut name = X509Name::builder().expect("name");
    name.append_entry_by_text("CN", "WebRTC").expect("cn");
    let name = name.build();
    let mut b = X509::builder().expect("x509");
    b.set_version(2).expect("version");
    b.set_serial_number(&BigNum::from_u32(7).unwrap().to_asn1_integer().unwrap())
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
        private_key: pkey.private_key_to_pkcs8().unwrap(),
    }
}

/// Drive a dimpl client and server to completion; return each side's
/// (peer certificate, SRTP profile).
fn handshake(
    client_cert: DtlsCertificate,
    server_cert: DtlsCertificate,
    server_config: Arc<Config>,
) -> ((Vec<u8>, SrtpProfile), (Vec<u8>, SrtpProfile)) {
    let mut now = Instant::now();
    let mut client = Dtls::new_12(dtls12_config(), client_cert, now);
    client.set_active(true);
    let mut server = Dtls::new_12(server_config, server_cert, now);
    server.set_active(false);
    let (mut c_cert, mut c_prof, mut s_cert, mut s_prof) = (None, None, None, None);
    for _ in 0..40 {
        client.handle_timeout(now).expect("client timeout");
        server.handle_timeout(now).expect("server timeout");
        let c = drain_outputs(&mut client);
        let s = drain_outputs(&mut server);
        c_cert = c_cert.or(c.peer_cert);
        s_cert = s_cert.or(s.peer_cert);
        c_prof = c_prof.or(c.keying_material.map(|k| k.1));
        s_prof = s_prof.or(s.keying_material.map(|k| k.1));
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
        if c_prof.is_some() && s_prof.is_some() {
            break;
        }
        now += std::time::Duration::from_millis(20);
    }
    (
        (
            c_cert.expect("client saw server cert"),
            c_prof.expect("client keys"),
        ),
        (
            s_cert.expect("server saw client cert"),
            s_prof.expect("server keys"),
        ),
    )
}

#[test]
fn dtls12_rsa_2048_and_4096_client_certificates_verify() {
    for bits in [2048, 4096] {
        let client_cert = rsa_certificate(bits);
        let client_der = client_cert.certificate.clone();
        let server_cert = generate_self_signed_certificate().unwrap();
        let (_, (seen_by_server, _)) = handshake(client_cert, server_cert, dtls12_config());
        assert_eq!(seen_by_server, client_der, "RSA-{bits}");
    }
}

#[test]
fn dtls12_rsa_client_with_forged_certificate_is_refused() {
    // The key does not match the certificate: CertificateVerify cannot verify.
    let mut client_cert = rsa_certificate(2048);
    client_cert.private_key = rsa_certificate(2048).private_key;
    let server_cert = generate_self_signed_certificate().unwrap();
    let now = Instant::now();
    let mut client = Dtls::new_12(dtls12_config(), client_cert, now);
    client.set_active(true);
    let mut server = Dtls::new_12(dtls12_config(), server_cert, now);
    server.set_active(false);
    let mut refused = false;
    for _ in 0..20 {
        client.handle_timeout(now).unwrap();
        server.handle_timeout(now).unwrap();
        let c = drain_outputs(&mut client);
        let s = drain_outputs(&mut server);
        assert!(s.keying_material.is_none(), "server must not derive keys");
        for p in &c.packets {
            if server.handle_packet(p).is_err() {
                refused = true;
            }
        }
        deliver_packets(&s.packets, &mut client);
        if refused {
            break;
        }
    }
    assert!(
        refused,
        "the server refuses a CertificateVerify that does not verify"
    );
}

#[test]
fn dtls12_server_srtp_preference() {
    let pref =
        |list: &[SrtpProfile]| Arc::new(Config::builder().srtp_profiles(list).build().unwrap());
    let run = |config| {
        let c = generate_self_signed_certificate().unwrap();
        let s = generate_self_signed_certificate().unwrap();
        let ((_, client_profile), (_, server_profile)) = handshake(c, s, config);
        assert_eq!(client_profile, server_profile);
        server_profile
    };
    // Default unchanged: AES-256-GCM first.
    assert_eq!(run(dtls12_config()), SrtpProfile::AEAD_AES_256_GCM);
    let tern = [
        SrtpProfile::AEAD_AES_128_GCM,
        SrtpProfile::AEAD_AES_256_GCM,
        SrtpProfile::AES128_CM_SHA1_80,
    ];
    assert_eq!(run(pref(&tern)), SrtpProfile::AEAD_AES_128_GCM);
    assert_eq!(
        run(pref(&[SrtpProfile::AES128_CM_SHA1_80])),
        SrtpProfile::AES128_CM_SHA1_80
    );
    assert!(Config::builder().srtp_profiles(&[]).build().is_err());
}

/// OpenSSL (what GStreamer's webrtcbin and many gateways use) as the client,
/// with its RSA-2048 certificate, against a dimpl server with an ECDSA one.
#[test]
fn dtls12_ossl_rsa_client_to_dimpl_server() {
    let client_cert = OsslDtlsCert::new(DtlsCertOptions {
        pkey_type: DtlsPKeyType::Rsa2048,
        ..Default::default()
    });
    let client_der = client_cert.x509.to_der().unwrap();
    let mut client = client_cert.new_dtls_impl().expect("openssl client");
    client.set_active(true);
    let mut server = Dtls::new_12(
        dtls12_config(),
        generate_self_signed_certificate().unwrap(),
        Instant::now(),
    );
    server.set_active(false);

    let mut events = VecDeque::new();
    let mut buf = vec![0u8; 4096];
    let (mut server_peer, mut server_keys, mut client_keys) = (None, None, None);
    for _ in 0..40 {
        server.handle_timeout(Instant::now()).unwrap();
        client.handle_handshake(&mut events).unwrap();
        while let Some(d) = client.poll_datagram() {
            server
                .handle_packet(&d)
                .expect("server handles openssl packet");
        }
        loop {
            match server.poll_output(&mut buf) {
                Output::Packet(p) => client.handle_receive(p, &mut events).unwrap(),
                Output::PeerCert(c) => server_peer = Some(c.to_vec()),
                Output::KeyingMaterial(km, p) => server_keys = Some((km.to_vec(), p)),
                Output::Timeout(_) => break,
                _ => {}
            }
        }
        while let Some(e) = events.pop_front() {
            if let DtlsEvent::SrtpKeyingMaterial(km, p) = e {
                client_keys = Some((km, p));
            }
        }
        if server_keys.is_some() && client_keys.is_some() {
            break;
        }
    }
    assert_eq!(server_peer.expect("server saw the RSA cert"), client_der);
    let (skm, sp) = server_keys.expect("server keys");
    let (ckm, cp) = client_keys.expect("openssl keys");
    assert_eq!(format!("{sp:?}"), format!("{cp:?}"));
    assert_eq!(skm.len(), ckm.len());
}
