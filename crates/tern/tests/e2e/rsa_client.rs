//! RSA client certificates (issue 40): Debian's `openssl` makes an RSA-2048 and an RSA-4096
//! self-signed certificate (the keys in PKCS#8 and in PKCS#1 form, as tools write them),
//! tern's lean WebRTC client offers each one's fingerprint to a real `tern demo` over WHEP
//! and handshakes with it (DTLS 1.2: its CertificateVerify is RSA PKCS#1 v1.5, which the
//! server must verify), then receives SRTP media. The viewer snapshot names the SRTP
//! profile, AES-128-GCM by tern's default preference.

use crate::common;

use std::io::ErrorKind;
use std::net::UdpSocket;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::rsa::{openssl, self_signed};
use common::{Server, http_delete, http_get, http_post};
use tern_proto::codec::MediaKind;
use tern_proto::sdp;
use tern_rtc::client::{Client, ClientOffer, ClientState, client_params};
use tern_rtc::viewer::{DEFAULT_SRTP_PROFILES, DtlsContext};

/// A fresh self-signed RSA certificate (DER) and its key (DER; PKCS#1 when `pkcs1`).
fn rsa_certificate(dir: &Path, bits: u32, pkcs1: bool) -> (Vec<u8>, Vec<u8>) {
    let (key_pem, cert) = self_signed(dir, "rsa-client", bits, "DER");
    let key = dir.join(format!("rsa-client-{bits}-key.der"));
    let (key_pem, key_der) = (key_pem.to_string_lossy(), key.to_string_lossy());
    if pkcs1 {
        openssl(&[
            "rsa",
            "-in",
            &key_pem,
            "-traditional",
            "-outform",
            "DER",
            "-out",
            &key_der,
        ]);
    } else {
        openssl(&["pkey", "-in", &key_pem, "-outform", "DER", "-out", &key_der]);
    }
    // openssl's own description: this really is an RSA key of `bits` bits.
    let text = Command::new("openssl")
        .args(["x509", "-inform", "DER", "-noout", "-text", "-in"])
        .arg(&cert)
        .output()
        .expect("openssl x509");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("rsaEncryption"), "{text}");
    assert!(text.contains(&format!("({bits} bit)")), "{text}");
    let cert = std::fs::read(cert).expect("cert");
    (cert, std::fs::read(key).expect("key"))
}

/// Plays `live/demo` with `ctx`'s certificate until `frames` video packets arrived (≤ 15 s);
/// returns the packets received and the viewer snapshot's `connection.srtp`.
fn play(server: &Server, ctx: Arc<DtlsContext>, seed: u64) -> (u64, String) {
    let (ufrag, pwd) = (format!("rsa{seed}"), format!("rsaClientPassword{seed:07}"));
    let offer = sdp::write_offer(&sdp::OfferParams {
        ice_ufrag: &ufrag,
        ice_pwd: &pwd,
        fingerprint_sha256: ctx.fingerprint(),
        video: true,
        audio: true,
        abs_capture_time: true,
        all_video: false,
    });
    let r = http_post(
        server.http,
        "/live/demo/whep",
        "application/sdp",
        offer.as_bytes(),
    )
    .expect("WHEP POST");
    assert_eq!(r.status, 201, "{}", r.text());
    let location = r.header("location").expect("Location").to_string();
    let now = Instant::now();
    let params = client_params(
        &r.text(),
        &ClientOffer {
            ufrag,
            pwd,
            rtcp: true,
            ntp_base: (now, 0),
        },
    )
    .expect("answer");
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    sock.set_nonblocking(true).expect("nonblocking");
    let mut client = Client::new(params, ctx, now, seed);
    let mut buf = vec![0u8; 2048];
    let mut video = 0u64;
    let end = now + Duration::from_secs(15);
    while Instant::now() < end && video < 100 {
        let now = Instant::now();
        client.handle_timeout(now);
        let server_addr = client.server();
        client.drain(&mut |d| {
            let _ = sock.send_to(d, server_addr);
        });
        loop {
            let n = match sock.recv_from(&mut buf) {
                Ok((n, _)) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("recv: {e}"),
            };
            if let Some(p) = client.handle_input(now, &mut buf[..n]) {
                video += u64::from(p.kind == MediaKind::Video);
            }
        }
        if let ClientState::Failed(why) = client.state() {
            panic!("client failed: {why}\n{}", server.log_tail(30));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        client.state(),
        ClientState::Connected,
        "{}",
        server.log_tail(30)
    );
    let viewers = http_get(server.http, "/v1/streams/live/demo/viewers")
        .expect("viewers")
        .text();
    let v: serde_json::Value = serde_json::from_str(&viewers).expect("json");
    let list = v
        .as_array()
        .cloned()
        .or_else(|| v["viewers"].as_array().cloned())
        .unwrap_or_default();
    assert_eq!(list.len(), 1, "{viewers}");
    let srtp = list[0]["connection"]["srtp"]
        .as_str()
        .unwrap_or_else(|| panic!("no srtp in {viewers}"))
        .to_string();
    let gone = http_delete(server.http, &location).expect("DELETE");
    assert!(
        matches!(gone.status, 200 | 204),
        "DELETE {location}: {}",
        gone.status
    );
    (video, srtp)
}

#[test]
fn rsa_2048_and_4096_client_certificates_handshake_with_tern() {
    let _slot = crate::common::slot();
    let dir = std::env::temp_dir().join(format!("tern-rsa-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let server = Server::demo();
    for (bits, pkcs1, seed) in [(2048, false, 1), (4096, true, 2)] {
        let (cert, key) = rsa_certificate(&dir, bits, pkcs1);
        let ctx = Arc::new(
            DtlsContext::from_certificate(cert, key, &DEFAULT_SRTP_PROFILES)
                .unwrap_or_else(|e| panic!("RSA-{bits} context: {e}")),
        );
        let (video, srtp) = play(&server, ctx, seed);
        assert!(video >= 100, "RSA-{bits}: {video} video packets");
        assert_eq!(srtp, "SRTP_AEAD_AES_128_GCM", "RSA-{bits}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
