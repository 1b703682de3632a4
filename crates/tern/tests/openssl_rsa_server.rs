//! A DTLS 1.2 client against a real OpenSSL server with an RSA certificate (issue 40):
//! Debian's `openssl s_server -dtls1_2 -use_srtp SRTP_AEAD_AES_128_GCM` on 127.0.0.1 with an
//! RSA-2048 and an RSA-4096 certificate made by `openssl req -x509 -newkey rsa:N`, and a
//! dimpl client (the crate's API over a std `UdpSocket`) that negotiates an `ECDHE_RSA`
//! suite and verifies the ServerKeyExchange signature: RSA-PSS when OpenSSL picks it from
//! the client's list, PKCS#1 v1.5 when `-sigalgs` leaves only that. Each run proves the
//! handshake by the SRTP keying material (OpenSSL's `-keymatexport` equals the client's),
//! and the record layer by a line each way.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::UdpSocket;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use dimpl::{Config, Dtls, Output, SrtpProfile};

fn openssl(args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `openssl s_server`, killed when dropped; its stdout and stderr arrive line by line.
struct SServer {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl SServer {
    fn start(cert: &Path, key: &Path, extra: &[&str]) -> SServer {
        let mut child = Command::new("openssl")
            .args([
                "s_server",
                "-dtls1_2",
                "-accept",
                "127.0.0.1:0",
                "-naccept",
                "1",
            ])
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
            .expect("start openssl s_server");
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
        SServer {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        }
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

impl Drop for SServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

/// One handshake with `s_server` (RSA-`bits`, `extra` flags), expecting `cipher`.
fn run(dir: &Path, bits: u32, extra: &[&str], cipher: &str) {
    let name = |n: &str| dir.join(format!("{bits}-{n}"));
    let (key, cert, cert_der) = (name("key.pem"), name("cert.pem"), name("cert.der"));
    let s = |p: &Path| p.to_string_lossy().into_owned();
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        &format!("rsa:{bits}"),
        "-nodes",
        "-sha256",
        "-days",
        "2",
        "-subj",
        "/CN=tern-rsa-server",
        "-keyout",
        &s(&key),
        "-out",
        &s(&cert),
    ]);
    openssl(&[
        "x509",
        "-in",
        &s(&cert),
        "-outform",
        "DER",
        "-out",
        &s(&cert_der),
    ]);
    let cert_der = std::fs::read(cert_der).expect("cert");

    let mut server = SServer::start(&cert, &key, extra);
    let accept = server
        .wait_for(
            |l| l.starts_with("ACCEPT "),
            Instant::now() + Duration::from_secs(10),
        )
        .unwrap_or_else(|| panic!("s_server did not listen: {:?}", server.seen));
    let port: u16 = accept
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("port in {accept:?}"));

    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    sock.connect(("127.0.0.1", port)).expect("connect");
    sock.set_read_timeout(Some(Duration::from_millis(10)))
        .expect("timeout");
    let cert = dimpl::certificate::generate_self_signed_certificate().expect("client cert");
    let mut client = Dtls::new_12(Arc::new(Config::default()), cert, Instant::now());
    client.set_active(true);

    let ours = format!("hello from dimpl, RSA-{bits}");
    let (mut peer, mut keys, mut connected, mut received) = (None, None, false, String::new());
    let mut sent = false;
    let mut buf = vec![0u8; 4096];
    let mut out = vec![0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        client
            .handle_timeout(Instant::now())
            .expect("client timeout");
        loop {
            match client.poll_output(&mut out) {
                Output::Packet(p) => {
                    sock.send(p).expect("send");
                }
                Output::PeerCert(c) => peer = Some(c.to_vec()),
                Output::KeyingMaterial(km, profile) => keys = Some((km.to_vec(), profile)),
                Output::Connected => connected = true,
                Output::ApplicationData(d) => received.push_str(&String::from_utf8_lossy(d)),
                Output::Timeout(_) => break,
                _ => {}
            }
        }
        if connected && !sent {
            client
                .send_application_data(format!("{ours}\n").as_bytes())
                .expect("send application data");
            server
                .stdin
                .write_all(b"hello from openssl\n")
                .expect("s_server stdin");
            server.stdin.flush().expect("flush");
            sent = true;
            continue;
        }
        server.drain();
        if received.contains("hello from openssl") && server.seen.contains(&ours) {
            break;
        }
        match sock.recv(&mut buf) {
            Ok(n) => client
                .handle_packet(&buf[..n])
                .unwrap_or_else(|e| panic!("RSA-{bits}: client refused a packet: {e}")),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("recv: {e}"),
        }
    }
    server.drain();
    let log = server.seen.join("\n");
    assert!(connected, "RSA-{bits}: no handshake; s_server said:\n{log}");
    assert_eq!(
        peer.as_ref(),
        Some(&cert_der),
        "RSA-{bits}: server certificate"
    );
    let (km, profile) = keys.expect("keying material");
    assert_eq!(profile, SrtpProfile::AEAD_AES_128_GCM, "RSA-{bits}");
    assert!(
        log.contains("SRTP Extension negotiated, profile=SRTP_AEAD_AES_128_GCM"),
        "RSA-{bits}: {log}"
    );
    assert!(
        server.seen.contains(&format!("CIPHER is {cipher}")),
        "RSA-{bits}: expected {cipher}: {log}"
    );
    assert!(
        log.contains(&format!("Keying material: {}", hex(&km))),
        "RSA-{bits}: OpenSSL's SRTP keying material differs from {}: {log}",
        hex(&km)
    );
    assert!(
        server.seen.contains(&ours),
        "RSA-{bits}: s_server did not print our line: {log}"
    );
    assert!(
        received.contains("hello from openssl"),
        "RSA-{bits}: got {received:?}"
    );
}

#[test]
fn dimpl_client_handshakes_with_openssl_rsa_2048_and_4096_servers() {
    let dir = std::env::temp_dir().join(format!("tern-rsa-server-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    // RSA-2048: OpenSSL signs ServerKeyExchange with RSA-PSS (the first RSA scheme the
    // client lists); the suite is the first ECDHE_RSA one the client offers.
    run(&dir, 2048, &[], "ECDHE-RSA-AES128-GCM-SHA256");
    // PKCS#1 v1.5 with SHA-384 only, and the ChaCha20 suite.
    run(
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
    run(
        &dir,
        4096,
        &["-cipher", "ECDHE-RSA-AES256-GCM-SHA384"],
        "ECDHE-RSA-AES256-GCM-SHA384",
    );
    let _ = std::fs::remove_dir_all(&dir);
}
