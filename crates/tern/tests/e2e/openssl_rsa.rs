//! DTLS 1.2 between dimpl and real OpenSSL with RSA certificates (issue 40), on 127.0.0.1,
//! each certificate made by `openssl req -x509 -newkey rsa:N`:
//!
//! - `openssl s_server -dtls1_2 -use_srtp SRTP_AEAD_AES_128_GCM` with RSA-2048 and RSA-4096
//!   certificates, and a dimpl client (the crate's API over a std `UdpSocket`) that negotiates
//!   an `ECDHE_RSA` suite and verifies the ServerKeyExchange signature: RSA-PSS when OpenSSL
//!   picks it from the client's list, PKCS#1 v1.5 when `-sigalgs` leaves only that.
//! - `openssl s_client -dtls1_2` with an RSA client certificate against a dimpl server with an
//!   RSA certificate, which signs ServerKeyExchange with PKCS#1 v1.5, or with RSA-PSS for a
//!   client whose `-sigalgs` offers only that; s_client names what it verified.
//!
//! Each run proves the handshake by the SRTP keying material (OpenSSL's `-keymatexport`
//! equals dimpl's), and the record layer by a line each way.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use dimpl::{Config, Dtls, DtlsCertificate, Output, SrtpProfile};

use crate::common;

use common::rsa::openssl;

/// An `openssl` child (`s_server` or `s_client`), killed when dropped; its stdout and stderr
/// arrive line by line.
struct Openssl {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Openssl {
    /// `openssl <args> -use_srtp SRTP_AEAD_AES_128_GCM -keymatexport ... -cert -key <extra>`.
    fn start(args: &[&str], cert: &Path, key: &Path, extra: &[&str]) -> Openssl {
        let mut child = Command::new("openssl")
            .args(args)
            .args(["-use_srtp", "SRTP_AEAD_AES_128_GCM"])
            .args([
                "-keymatexport",
                "EXTRACTOR-dtls_srtp",
                "-keymatexportlen",
                "56",
            ])
            .arg("-cert")
            .arg(cert)
            .arg("-key")
            .arg(key)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start openssl");
        let (tx, lines) = channel();
        let forward = |r: Box<dyn Read + Send>, tx: std::sync::mpsc::Sender<String>| {
            std::thread::spawn(move || {
                for line in BufReader::new(r).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            })
        };
        forward(Box::new(child.stdout.take().expect("stdout")), tx.clone());
        forward(Box::new(child.stderr.take().expect("stderr")), tx);
        let stdin = child.stdin.take().expect("stdin");
        Openssl {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        }
    }

    /// Types a line into the child: s_server and s_client send it to their peer.
    fn type_line(&mut self, line: &str) {
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .expect("openssl stdin");
        self.stdin.flush().expect("flush");
    }

    /// The first line (already seen or arriving before `deadline`) that `want` accepts.
    fn wait_for(&mut self, want: impl Fn(&str) -> bool, deadline: Instant) -> Option<String> {
        loop {
            if let Some(l) = self.seen.iter().find(|l| want(l)) {
                return Some(l.clone());
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            match self.lines.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Takes the lines printed so far, without waiting.
    fn drain(&mut self) {
        while let Ok(l) = self.lines.try_recv() {
            self.seen.push(l);
        }
    }
}

impl Drop for Openssl {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

/// A fresh self-signed RSA-`bits` certificate: (PEM certificate, PEM key, DER certificate).
fn rsa_certificate(dir: &Path, name: &str, bits: u32) -> (PathBuf, PathBuf, Vec<u8>) {
    let (key, cert) = common::rsa::self_signed(dir, name, bits, "PEM");
    let der = dir.join(format!("{name}-{bits}-cert.der"));
    let s = |p: &Path| p.to_string_lossy().into_owned();
    openssl(&[
        "x509",
        "-in",
        &s(&cert),
        "-outform",
        "DER",
        "-out",
        &s(&der),
    ]);
    let der = std::fs::read(der).expect("certificate");
    (cert, key, der)
}

/// What the dimpl side saw.
#[derive(Default)]
struct Seen {
    peer_cert: Option<Vec<u8>>,
    keys: Option<(Vec<u8>, SrtpProfile)>,
    connected: bool,
    received: String,
}

/// Runs `dtls` over `sock` against `ossl` (at `peer`, or the first address heard from) for
/// up to 20 s: once both sides finished the handshake, dimpl sends `ours` and OpenSSL types
/// `theirs`; it stops when each has arrived.
fn pump(
    dtls: &mut Dtls,
    sock: &UdpSocket,
    mut peer: Option<SocketAddr>,
    ossl: &mut Openssl,
    ours: &str,
    theirs: &str,
) -> Seen {
    sock.set_read_timeout(Some(Duration::from_millis(10)))
        .expect("timeout");
    let mut seen = Seen::default();
    let (mut sent, mut buf, mut out) = (false, vec![0u8; 4096], vec![0u8; 4096]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        dtls.handle_timeout(Instant::now()).expect("dimpl timeout");
        loop {
            match dtls.poll_output(&mut out) {
                Output::Packet(p) => {
                    let to = peer.expect("dimpl sends only after hearing its peer");
                    sock.send_to(p, to).expect("send");
                }
                Output::PeerCert(c) => seen.peer_cert = Some(c.to_vec()),
                Output::KeyingMaterial(km, profile) => seen.keys = Some((km.to_vec(), profile)),
                Output::Connected => seen.connected = true,
                Output::ApplicationData(d) => seen.received.push_str(&String::from_utf8_lossy(d)),
                Output::Timeout(_) => break,
                _ => {}
            }
        }
        ossl.drain();
        // s_server prints "CIPHER is", s_client "Cipher is", once their handshake is done.
        let ossl_done = ossl
            .seen
            .iter()
            .any(|l| l.to_ascii_lowercase().contains("cipher is "));
        if seen.connected && ossl_done && !sent {
            dtls.send_application_data(format!("{ours}\n").as_bytes())
                .expect("send application data");
            ossl.type_line(theirs);
            sent = true;
            continue;
        }
        if seen.received.contains(theirs) && ossl.seen.iter().any(|l| l == ours) {
            break;
        }
        match sock.recv_from(&mut buf) {
            Ok((n, from)) => {
                peer.get_or_insert(from);
                dtls.handle_packet(&buf[..n])
                    .unwrap_or_else(|e| panic!("dimpl refused a packet: {e}"));
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("recv: {e}"),
        }
    }
    ossl.drain();
    seen
}

/// The checks both directions share: the handshake, the peer certificate, SRTP AES-128-GCM,
/// the suite, keying material equal to OpenSSL's export, a line each way.
fn check(what: &str, seen: &Seen, ossl: &Openssl, peer_der: &[u8], cipher: &str, ours: &str) {
    let log = ossl.seen.join("\n");
    assert!(seen.connected, "{what}: no handshake; openssl said:\n{log}");
    assert_eq!(
        seen.peer_cert.as_deref(),
        Some(peer_der),
        "{what}: peer cert"
    );
    let (km, profile) = seen.keys.as_ref().expect("keying material");
    assert_eq!(*profile, SrtpProfile::AEAD_AES_128_GCM, "{what}");
    assert!(
        log.contains("SRTP Extension negotiated, profile=SRTP_AEAD_AES_128_GCM"),
        "{what}: {log}"
    );
    assert!(
        ossl.seen.iter().any(|l| l
            .to_ascii_lowercase()
            .ends_with(&format!("cipher is {}", cipher.to_ascii_lowercase()))),
        "{what}: expected {cipher}: {log}"
    );
    assert!(
        log.contains(&format!("Keying material: {}", hex(km))),
        "{what}: OpenSSL's SRTP keying material differs from {}: {log}",
        hex(km)
    );
    assert!(
        ossl.seen.iter().any(|l| l == ours),
        "{what}: openssl did not print our line: {log}"
    );
}

/// A dimpl client against `s_server` (RSA-`bits`, `extra` flags), expecting `cipher`.
fn dimpl_client(dir: &Path, bits: u32, extra: &[&str], cipher: &str) {
    let (cert, key, der) = rsa_certificate(dir, "rsa-server", bits);
    let mut server = Openssl::start(
        &[
            "s_server",
            "-dtls1_2",
            "-accept",
            "127.0.0.1:0",
            "-naccept",
            "1",
        ],
        &cert,
        &key,
        extra,
    );
    let accept = server
        .wait_for(
            |l| l.starts_with("ACCEPT "),
            Instant::now() + Duration::from_secs(10),
        )
        .unwrap_or_else(|| panic!("s_server did not listen: {:?}", server.seen));
    let addr: SocketAddr = accept["ACCEPT ".len()..]
        .parse()
        .unwrap_or_else(|_| panic!("address in {accept:?}"));

    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let cert = dimpl::certificate::generate_self_signed_certificate().expect("client cert");
    let mut client = Dtls::new_12(Arc::new(Config::default()), cert, Instant::now());
    client.set_active(true);
    let ours = format!("hello from the dimpl client, RSA-{bits}");
    let seen = pump(
        &mut client,
        &sock,
        Some(addr),
        &mut server,
        &ours,
        "hello from s_server",
    );
    let what = format!("s_server RSA-{bits} {extra:?}");
    check(&what, &seen, &server, &der, cipher, &ours);
    assert!(
        seen.received.contains("hello from s_server"),
        "{what}: {:?}",
        seen.received
    );
}

/// `s_client` with an RSA-2048 client certificate (and `extra` flags) against a dimpl server
/// with an RSA-`bits` certificate; s_client must report `signature` as the server's.
fn dimpl_server(dir: &Path, bits: u32, extra: &[&str], cipher: &str, signature: &str) {
    let (_, _, server_der) = rsa_certificate(dir, "dimpl-server", bits);
    let server_key = std::fs::read(dir.join(format!("dimpl-server-{bits}-key.pem"))).expect("key");
    let (cert, key, client_der) = rsa_certificate(dir, "rsa-client", 2048);
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let port = sock.local_addr().expect("addr").port();
    let mut server = Dtls::new_12(
        Arc::new(Config::default()),
        DtlsCertificate {
            certificate: server_der.clone(),
            private_key: server_key,
        },
        Instant::now(),
    );
    server.set_active(false);
    let connect = format!("127.0.0.1:{port}");
    let mut client = Openssl::start(
        &["s_client", "-dtls1_2", "-connect", &connect],
        &cert,
        &key,
        extra,
    );
    let ours = format!("hello from the dimpl server, RSA-{bits}");
    let seen = pump(
        &mut server,
        &sock,
        None,
        &mut client,
        &ours,
        "hello from s_client",
    );
    let what = format!("s_client to an RSA-{bits} server {extra:?}");
    check(&what, &seen, &client, &client_der, cipher, &ours);
    assert!(
        seen.received.contains("hello from s_client"),
        "{what}: {:?}",
        seen.received
    );
    assert!(
        client
            .seen
            .iter()
            .any(|l| *l == format!("Peer signature type: {signature}")),
        "{what}: expected {signature}: {}",
        client.seen.join("\n")
    );
}

#[test]
fn dimpl_client_handshakes_with_openssl_rsa_2048_and_4096_servers() {
    let _slot = crate::common::slot();
    let dir = std::env::temp_dir().join(format!("tern-rsa-server-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    // RSA-2048: OpenSSL signs ServerKeyExchange with RSA-PSS (the first RSA scheme the
    // client lists); the suite is the first ECDHE_RSA one the client offers.
    dimpl_client(&dir, 2048, &[], "ECDHE-RSA-AES128-GCM-SHA256");
    // PKCS#1 v1.5 with SHA-384 only, and the ChaCha20 suite.
    dimpl_client(
        &dir,
        2048,
        &[
            "-sigalgs",
            "rsa_pkcs1_sha384",
            "-cipher",
            "ECDHE-RSA-CHACHA20-POLY1305",
        ],
        "ECDHE-RSA-CHACHA20-POLY1305",
    );
    // RSA-4096 with the SHA-384 suite.
    dimpl_client(
        &dir,
        4096,
        &["-cipher", "ECDHE-RSA-AES256-GCM-SHA384"],
        "ECDHE-RSA-AES256-GCM-SHA384",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn openssl_client_handshakes_with_dimpl_rsa_2048_and_4096_servers() {
    let _slot = crate::common::slot();
    let dir = std::env::temp_dir().join(format!("tern-rsa-dimpl-server-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    // s_client's defaults: dimpl signs PKCS#1 v1.5 and takes the client's first RSA suite.
    dimpl_server(&dir, 2048, &[], "ECDHE-RSA-AES256-GCM-SHA384", "RSA");
    // A client that offers RSA only as PSS (its own CertificateVerify is PSS too).
    dimpl_server(
        &dir,
        4096,
        &["-sigalgs", "rsa_pss_rsae_sha256:rsa_pss_rsae_sha384"],
        "ECDHE-RSA-AES256-GCM-SHA384",
        "RSA-PSS",
    );
    let _ = std::fs::remove_dir_all(&dir);
}
