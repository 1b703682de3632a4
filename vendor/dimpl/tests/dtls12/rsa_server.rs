//! DTLS 1.2 with an RSA *server* certificate: the `ECDHE_RSA_*` cipher suites,
//! a ServerKeyExchange signed with the server's RSA key and verified by the
//! client, and a tampered signature refused.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dimpl::certificate::generate_self_signed_certificate;
use dimpl::crypto::Dtls12CipherSuite;
use dimpl::{Config, CryptoError, Dtls, DtlsCertificate, Error, SrtpProfile};

use super::common::*;
use super::rsa::rsa_certificate;
use crate::ossl_helper::{DtlsCertOptions, DtlsEvent, DtlsPKeyType, OsslDtlsCert};

/// What one side of a connection saw.
#[derive(Default)]
struct Seen {
    peer_cert: Option<Vec<u8>>,
    keys: Option<(Vec<u8>, SrtpProfile)>,
    app_data: Vec<Vec<u8>>,
}

impl Seen {
    fn take(&mut self, out: DrainedOutputs) -> Vec<Vec<u8>> {
        if out.peer_cert.is_some() {
            self.peer_cert = out.peer_cert;
        }
        if out.keying_material.is_some() {
            self.keys = out.keying_material;
        }
        self.app_data.extend(out.app_data);
        out.packets
    }
}

/// Handshake a dimpl client and server (bounded: 40 rounds of simulated time),
/// then send one message each way.
fn connect_and_exchange(
    client_config: Arc<Config>,
    client_cert: DtlsCertificate,
    server_cert: DtlsCertificate,
) -> (Seen, Seen) {
    let mut now = Instant::now();
    let mut client = Dtls::new_12(client_config, client_cert, now);
    client.set_active(true);
    let mut server = Dtls::new_12(dtls12_config(), server_cert, now);
    server.set_active(false);
    let (mut c, mut s) = (Seen::default(), Seen::default());
    let mut sent = false;
    for _ in 0..40 {
        client.handle_timeout(now).expect("client timeout");
        server.handle_timeout(now).expect("server timeout");
        let to_server = c.take(drain_outputs(&mut client));
        let to_client = s.take(drain_outputs(&mut server));
        for p in &to_server {
            server
                .handle_packet(p)
                .expect("server handles client packet");
        }
        for p in &to_client {
            client
                .handle_packet(p)
                .expect("client handles server packet");
        }
        if c.keys.is_some() && s.keys.is_some() && !sent {
            client.send_application_data(b"from the client").unwrap();
            server.send_application_data(b"from the server").unwrap();
            sent = true;
        }
        if !c.app_data.is_empty() && !s.app_data.is_empty() {
            break;
        }
        now += Duration::from_millis(20);
    }
    (c, s)
}

#[test]
fn dtls12_rsa_server_each_ecdhe_rsa_suite() {
    let server_cert = rsa_certificate(2048);
    let server_der = server_cert.certificate.clone();
    for suite in [
        Dtls12CipherSuite::ECDHE_RSA_AES128_GCM_SHA256,
        Dtls12CipherSuite::ECDHE_RSA_AES256_GCM_SHA384,
        Dtls12CipherSuite::ECDHE_RSA_CHACHA20_POLY1305_SHA256,
    ] {
        // The client offers this suite only, so completing proves it was used.
        let config = Config::builder()
            .dtls12_cipher_suites(&[suite])
            .build()
            .unwrap();
        let (c, s) = connect_and_exchange(
            Arc::new(config),
            generate_self_signed_certificate().unwrap(),
            server_cert.clone(),
        );
        assert_eq!(c.peer_cert.as_ref(), Some(&server_der), "{suite:?}");
        let (ckm, cprof) = c.keys.expect("client keying material");
        let (skm, sprof) = s.keys.expect("server keying material");
        assert_eq!(cprof, sprof, "{suite:?}");
        assert_eq!(ckm, skm, "{suite:?}: exported SRTP keys differ");
        assert_eq!(s.app_data, [b"from the client".to_vec()], "{suite:?}");
        assert_eq!(c.app_data, [b"from the server".to_vec()], "{suite:?}");
    }
}

#[test]
fn dtls12_rsa_server_default_configs_and_rsa_client() {
    env_logger::try_init().ok();
    // Default configs (the client offers the ECDSA suites first), an RSA
    // client certificate too, RSA-2048 and RSA-4096 servers.
    for bits in [2048, 4096] {
        let server_cert = rsa_certificate(bits);
        let client_cert = rsa_certificate(2048);
        let (server_der, client_der) = (
            server_cert.certificate.clone(),
            client_cert.certificate.clone(),
        );
        let (c, s) = connect_and_exchange(dtls12_config(), client_cert, server_cert);
        assert_eq!(c.peer_cert, Some(server_der), "RSA-{bits}");
        assert_eq!(s.peer_cert, Some(client_der), "RSA-{bits}");
        assert_eq!(c.keys.expect("client keys"), s.keys.expect("server keys"));
        assert_eq!(s.app_data, [b"from the client".to_vec()]);
        assert_eq!(c.app_data, [b"from the server".to_vec()]);
    }
}

#[test]
fn dtls12_ecdsa_server_unchanged_for_rsa_client() {
    // An ECDSA server still selects an ECDHE_ECDSA suite: a client offering
    // only ECDHE_RSA finds no common suite.
    let config = Config::builder()
        .dtls12_cipher_suites(&[Dtls12CipherSuite::ECDHE_RSA_AES128_GCM_SHA256])
        .build()
        .unwrap();
    let now = Instant::now();
    let mut client = Dtls::new_12(Arc::new(config), rsa_certificate(2048), now);
    client.set_active(true);
    let mut server = Dtls::new_12(
        dtls12_config(),
        generate_self_signed_certificate().unwrap(),
        now,
    );
    server.set_active(false);
    client.handle_timeout(now).unwrap();
    server.handle_timeout(now).unwrap();
    let mut refused = None;
    for _ in 0..4 {
        for p in drain_outputs(&mut client).packets {
            if let Err(e) = server.handle_packet(&p) {
                refused = Some(e);
            }
        }
        deliver_packets(&drain_outputs(&mut server).packets, &mut client);
    }
    let refused = refused.expect("the server refuses");
    assert!(
        format!("{refused}").contains("cipher suite"),
        "unexpected error: {refused}"
    );
}

/// Flip the last byte of the ServerKeyExchange (its signature) in a datagram
/// of the server's first flight. Returns whether it was found.
fn tamper_ske_signature(datagram: &mut [u8]) -> bool {
    let mut i = 0;
    while i + 13 <= datagram.len() {
        let ctype = datagram[i];
        let len = u16::from_be_bytes([datagram[i + 11], datagram[i + 12]]) as usize;
        let end = (i + 13 + len).min(datagram.len());
        let mut j = i + 13;
        while ctype == 22 && j + 12 <= end {
            let be24 = |b: &[u8]| u32::from_be_bytes([0, b[0], b[1], b[2]]) as usize;
            let msg_type = datagram[j];
            let msg_len = be24(&datagram[j + 1..j + 4]);
            let frag_off = be24(&datagram[j + 6..j + 9]);
            let frag_len = be24(&datagram[j + 9..j + 12]);
            if msg_type == 12 && frag_len > 0 && frag_off + frag_len == msg_len {
                datagram[j + 12 + frag_len - 1] ^= 0x01;
                return true;
            }
            j += 12 + frag_len;
        }
        i = end;
    }
    false
}

#[test]
fn dtls12_tampered_rsa_server_key_exchange_is_refused() {
    let now = Instant::now();
    let mut client = Dtls::new_12(
        dtls12_config(),
        generate_self_signed_certificate().unwrap(),
        now,
    );
    client.set_active(true);
    let mut server = Dtls::new_12(dtls12_config(), rsa_certificate(2048), now);
    server.set_active(false);
    client.handle_timeout(now).unwrap();
    server.handle_timeout(now).unwrap();
    let (mut tampered, mut refused) = (false, None);
    for _ in 0..6 {
        let c = drain_outputs(&mut client);
        assert!(c.keying_material.is_none(), "client must not derive keys");
        deliver_packets(&c.packets, &mut server);
        for mut p in drain_outputs(&mut server).packets {
            tampered |= tamper_ske_signature(&mut p);
            if let Err(e) = client.handle_packet(&p) {
                refused = Some(e);
            }
        }
        if refused.is_some() {
            break;
        }
    }
    assert!(tampered, "the server's flight carried a ServerKeyExchange");
    let refused = refused.expect("the client refuses the ServerKeyExchange");
    assert!(
        matches!(
            refused,
            Error::CryptoError(CryptoError::RsaSignatureVerificationFailed { .. })
        ),
        "unexpected error: {refused}"
    );
}

/// OpenSSL as the RSA-2048 server (it signs ServerKeyExchange with the first
/// RSA scheme of the client's list: RSA-PSS), a dimpl client.
#[test]
fn dtls12_dimpl_client_to_ossl_rsa_server() {
    env_logger::try_init().ok();
    let server_cert = OsslDtlsCert::new(DtlsCertOptions {
        pkey_type: DtlsPKeyType::Rsa2048,
        ..Default::default()
    });
    let server_der = server_cert.x509.to_der().unwrap();
    let mut server = server_cert.new_dtls_impl().expect("openssl server");
    server.set_active(false);
    let mut now = Instant::now();
    let mut client = Dtls::new_12(
        dtls12_config(),
        generate_self_signed_certificate().unwrap(),
        now,
    );
    client.set_active(true);

    let mut events = VecDeque::new();
    let (mut c, mut server_keys) = (Seen::default(), None);
    for _ in 0..40 {
        client.handle_timeout(now).unwrap();
        for p in c.take(drain_outputs(&mut client)) {
            server.handle_receive(&p, &mut events).unwrap();
        }
        while let Some(d) = server.poll_datagram() {
            client
                .handle_packet(&d)
                .expect("client handles openssl packet");
        }
        while let Some(e) = events.pop_front() {
            if let DtlsEvent::SrtpKeyingMaterial(km, p) = e {
                server_keys = Some((km, p));
            }
        }
        if c.keys.is_some() && server_keys.is_some() {
            break;
        }
        now += Duration::from_millis(20);
    }
    assert_eq!(c.peer_cert, Some(server_der));
    let (ckm, cp) = c.keys.expect("dimpl keys");
    let (skm, sp) = server_keys.expect("openssl keys");
    assert_eq!(format!("{cp:?}"), format!("{sp:?}"));
    assert_eq!(ckm, skm, "exported SRTP keys differ");
}
