//! Deployable on the open internet (issue 39), against a real `tern demo`: HTTPS with HTTP/2
//! and HTTP/1.1 (curl), the certificate replaced on disk while viewers play (openssl reads
//! what the server presents), SIGHUP, a renewal that does not load; and real client
//! addresses behind a real nginx (`server.trusted_proxies`).

use crate::common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use common::hook::Hook;
use common::{Child, Server, config_file, free_tcp_port, http_get};
use serde_json::json;
use tern_bench::BenchArgs;

/// A fresh directory for a test's files.
pub(crate) fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tern-https-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// Writes a self-signed pair for localhost and 127.0.0.1 as `name.crt` and `name.key`.
pub(crate) fn write_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let c = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
        .expect("rcgen");
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    std::fs::write(
        &cert,
        pem::encode(&pem::Pem::new("CERTIFICATE", c.cert.der().to_vec())),
    )
    .expect("write cert");
    let key_der = c.signing_key.serialize_der();
    std::fs::write(&key, pem::encode(&pem::Pem::new("PRIVATE KEY", key_der))).expect("write key");
    (cert, key)
}

/// Runs `sh -c SCRIPT` and returns its stdout (trimmed).
fn sh(script: &str) -> String {
    let out = Command::new("sh")
        .args(["-c", script])
        .output()
        .expect("run sh");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The SHA-256 fingerprint of a PEM certificate file.
fn file_fingerprint(cert: &Path) -> String {
    sh(&format!(
        "openssl x509 -noout -fingerprint -sha256 -in {}",
        cert.display()
    ))
}

/// The SHA-256 fingerprint of the certificate `addr` presents to a new connection.
fn served_fingerprint(addr: SocketAddr) -> String {
    sh(&format!(
        "openssl s_client -connect {addr} -servername localhost </dev/null 2>/dev/null \
         | openssl x509 -noout -fingerprint -sha256"
    ))
}

/// `curl` over HTTPS, trusting `ca`: "STATUS HTTP_VERSION".
fn curl(ca: &Path, url: &str, version_flag: &str) -> String {
    sh(&format!(
        "curl -sS {version_flag} --max-time 20 --cacert {} -o /dev/null \
         -w '%{{http_code}} %{{http_version}}' '{url}'",
        ca.display()
    ))
}

/// A metric's value from `/metrics` (plain HTTP).
fn metric(http: SocketAddr, name: &str) -> Option<f64> {
    let r = http_get(http, "/metrics").expect("GET /metrics");
    String::from_utf8_lossy(&r.body)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

/// tern bench's WebRTC viewers, on a thread.
fn viewers(line: String) -> std::thread::JoinHandle<tern_bench::Outcome> {
    std::thread::spawn(move || {
        let argv =
            std::iter::once("bench".to_string()).chain(line.split_whitespace().map(String::from));
        let args = Cli::parse_from(tern_bench::normalize_args(argv)).bench;
        let mut out = Vec::new();
        tern_bench::run(&args, Arc::new(AtomicBool::new(false)), &mut out).expect("bench")
    })
}

/// HTTPS serves what HTTP serves with h2 and http/1.1; a certificate replaced on disk is in
/// use for new connections within 10 s while open connections, viewers and the process stay;
/// SIGHUP reloads; a renewal that does not load leaves the previous pair in use.
#[test]
fn https_serves_h2_and_reloads_its_certificate_under_viewers() {
    let _slot = crate::common::slot();
    let dir = temp_dir("reload");
    let (cert, key) = write_pair(&dir, "live");
    let first = file_fingerprint(&cert);
    assert!(
        first.contains("Fingerprint"),
        "openssl reads the pair: {first:?}"
    );
    // A process: the test sends it SIGHUP and checks that the same process serves
    // throughout and exits cleanly.
    let mut server = Child::start(&[
        "demo",
        "--https",
        "127.0.0.1:0",
        "--tls-cert",
        cert.to_str().expect("utf-8"),
        "--tls-key",
        key.to_str().expect("utf-8"),
    ]);
    let https = server.https.expect("the server reports its HTTPS address");
    let pid = server.pid().expect("running");

    // Everything plain HTTP serves: the API, LL-HLS, the pages; h2 by ALPN, h1.1 too.
    let base = format!("https://127.0.0.1:{}", https.port());
    for path in ["/v1/streams", "/live/demo/index.m3u8", "/live/demo"] {
        assert_eq!(
            curl(&cert, &format!("{base}{path}"), "--http2"),
            "200 2",
            "{path} over h2"
        );
    }
    assert_eq!(
        curl(&cert, &format!("{base}/v1/streams"), "--http1.1"),
        "200 1.1"
    );
    assert_eq!(served_fingerprint(https), first);
    let left = metric(server.http, "tern_tls_certificate_expiry_seconds").expect("expiry");
    assert!(
        left > 86_400.0 * 365.0,
        "rcgen's certificates run for years: {left}"
    );
    // The same end as a Unix time (alerts compare it with `time()`).
    let not_after = metric(server.http, "tern_tls_cert_not_after_seconds").expect("notAfter");
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    assert!(
        (not_after - now - left).abs() < 5.0,
        "notAfter {not_after} is not now ({now}) + the seconds left ({left})"
    );

    // Viewers play (signalling over plain HTTP, media over UDP) through the renewal.
    let line = format!(
        "-url http://{}/live/demo/whep -n 5 -cint 50 -life 12 -sint 60000 --json",
        server.http
    );
    let bench = viewers(line);
    // A connection opened before the renewal, used after it.
    let mut open = Command::new("openssl")
        .args(["s_client", "-quiet", "-connect", &https.to_string()])
        .args(["-servername", "localhost"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("openssl s_client");
    std::thread::sleep(Duration::from_secs(2));

    // The renewal: both files replaced, as certbot and cert-manager do.
    let (c2, k2) = write_pair(&dir, "next");
    let second = file_fingerprint(&c2);
    assert_ne!(first, second);
    std::fs::rename(&k2, &key).expect("replace key");
    std::fs::rename(&c2, &cert).expect("replace cert");
    let renewed = Instant::now();
    while served_fingerprint(https) != second {
        assert!(
            renewed.elapsed() < Duration::from_secs(10),
            "the new certificate is not served 10 s after the files changed:\n{}",
            server.log_tail(20)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "https: new certificate served {:?} after the files changed",
        renewed.elapsed()
    );

    // The old connection still serves.
    let mut stdin = open.stdin.take().expect("stdin");
    stdin
        .write_all(b"GET /v1/streams HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .expect("write on the old connection");
    let mut stdout = open.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while !reader.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = open.kill();
    let _ = open.wait();
    drop(stdin);
    let answer = reader.join().expect("reader");
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "the connection opened before the renewal: {answer:?}"
    );

    let o = bench.join().expect("bench thread");
    let s = &o.summary;
    assert_eq!(s.connected, 5, "every viewer connected");
    assert_eq!(s.failed, 0);
    assert_eq!(
        s.total_losses, 0,
        "no viewer lost a packet over the renewal"
    );

    // SIGHUP re-reads the files even when unchanged; the process stays.
    let reloads = metric(server.http, "tern_tls_certificate_reloads_total").expect("reloads");
    assert_eq!(reloads, 1.0);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .expect("SIGHUP");
    let deadline = Instant::now() + Duration::from_secs(5);
    while metric(server.http, "tern_tls_certificate_reloads_total") != Some(2.0) {
        assert!(Instant::now() < deadline, "SIGHUP did not reload");
        std::thread::sleep(Duration::from_millis(100));
    }

    // A renewal that does not load: logged, counted, the previous pair kept.
    std::fs::write(
        dir.join("broken.key"),
        "-----BEGIN PRIVATE KEY-----\nAAAA\n",
    )
    .expect("w");
    std::fs::rename(dir.join("broken.key"), &key).expect("replace key");
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(server.http, "tern_tls_certificate_reload_failures_total") != Some(1.0) {
        assert!(Instant::now() < deadline, "the broken key was not noticed");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(served_fingerprint(https), second, "the previous pair stays");
    assert_eq!(
        curl(&cert, &format!("{base}/v1/streams"), "--http2"),
        "200 2"
    );

    assert_eq!(server.pid(), Some(pid), "the same process throughout");
    let status = server.terminate().expect("exit status");
    assert!(status.success(), "{status:?}\n{}", server.log_tail(20));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `server.redirect_http`: the plain listener answers with a 308 to the HTTPS URL.
#[test]
fn plain_http_redirects_to_https_when_asked() {
    let _slot = crate::common::slot();
    let dir = temp_dir("redirect");
    let (cert, key) = write_pair(&dir, "a");
    let cfg = config_file(
        "redirect",
        &format!(
            "[server]\nhttps = \"127.0.0.1:0\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\nredirect_http = true\n",
            cert.display(),
            key.display()
        ),
    );
    let server = Server::start(&["demo", "--config", cfg.to_str().expect("utf-8")]);
    let https = server.https.expect("https");
    let r = http_get(server.http, "/live/demo?x=1").expect("GET");
    assert_eq!(r.status, 308);
    let location = r
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("location"))
        .map(|(_, v)| v.clone());
    assert_eq!(
        location.as_deref(),
        Some(format!("https://127.0.0.1:{}/live/demo?x=1", https.port()).as_str())
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A real nginx in front, passing `X-Forwarded-For`.
struct Nginx {
    child: std::process::Child,
    addr: SocketAddr,
}

impl Nginx {
    fn start(dir: &Path, upstream: SocketAddr) -> Nginx {
        let port = free_tcp_port();
        let conf = dir.join("nginx.conf");
        let d = dir.display();
        std::fs::write(
            &conf,
            format!(
                "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
                 events {{ worker_connections 64; }}\n\
                 http {{\n  access_log {d}/access.log;\n  client_body_temp_path {d}/body;\n  \
                 proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  \
                 scgi_temp_path {d}/scgi;\n  server {{\n    listen 127.0.0.1:{port};\n    location / {{\n      \
                 proxy_pass http://{upstream};\n      proxy_http_version 1.1;\n      \
                 proxy_set_header Host $host;\n      \
                 proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n    }}\n  }}\n}}\n"
            ),
        )
        .expect("write nginx.conf");
        let child = Command::new("nginx")
            .args(["-p", &d.to_string(), "-c", conf.to_str().expect("utf-8")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx (scripts/install-deps.sh installs nginx-light)");
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "nginx did not listen on {addr}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Nginx { child, addr }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `curl` from source address `from` to `url`, with extra `-H` headers: the status code.
fn curl_from(from: &str, url: &str, headers: &[&str]) -> String {
    let h: String = headers.iter().map(|h| format!(" -H '{h}'")).collect();
    sh(&format!(
        "curl -sS --max-time 20 --interface {from}{h} -o /dev/null -w '%{{http_code}}' '{url}'"
    ))
}

/// Behind nginx, each client is counted by its own address (one HLS session per address
/// here) and the admission webhook sees it; the same header sent straight to tern by an
/// untrusted client changes nothing.
#[test]
fn behind_nginx_limits_and_admission_see_the_real_client() {
    let _slot = crate::common::slot();
    let dir = temp_dir("proxy");
    let hook = Hook::start(|_| json!({"allow": true}));
    let cfg = config_file(
        "proxy",
        &format!(
            "[server]\ntrusted_proxies = [\"127.0.0.1/32\"]\n\n[limits]\nexempt = []\n\n\
             [hls]\nsessions_per_ip = 1\n\n[[app]]\nname = \"live\"\n\n[app.admission]\nurl = \"{}\"\n",
            hook.url()
        ),
    );
    let server = Server::start(&["demo", "--config", cfg.to_str().expect("utf-8")]);
    let nginx = Nginx::start(&dir, server.http);
    let via = format!("http://{}/live/demo/index.m3u8", nginx.addr);
    let direct = format!("http://{}/live/demo/index.m3u8", server.http);

    // Through nginx: 127.0.0.2 gets its one session, then is refused; 127.0.0.3 is another
    // client (all of them reach tern from nginx's 127.0.0.1).
    assert_eq!(curl_from("127.0.0.2", &via, &[]), "200");
    assert_eq!(curl_from("127.0.0.2", &via, &[]), "429");
    // A client's own X-Forwarded-For is left of the address nginx appends: not believed.
    assert_eq!(
        curl_from("127.0.0.2", &via, &["X-Forwarded-For: 127.0.0.77"]),
        "429"
    );
    assert_eq!(curl_from("127.0.0.3", &via, &[]), "200");
    // Straight to tern from an untrusted address: the header is ignored.
    assert_eq!(
        curl_from("127.0.0.4", &direct, &["X-Forwarded-For: 127.0.0.5"]),
        "200"
    );
    assert_eq!(
        curl_from("127.0.0.4", &direct, &["X-Forwarded-For: 127.0.0.6"]),
        "429"
    );

    let asked: Vec<String> = hook
        .seen()
        .iter()
        .filter(|v| v["action"] == "play" && v["protocol"] == "hls")
        .filter_map(|v| v["client"]["address"].as_str().map(String::from))
        .collect();
    let ips: Vec<&str> = asked
        .iter()
        .map(|a| a.rsplit_once(':').map_or(a.as_str(), |(ip, _)| ip))
        .collect();
    eprintln!("proxy: the webhook saw {asked:?}");
    for want in ["127.0.0.2", "127.0.0.3", "127.0.0.4"] {
        assert!(ips.contains(&want), "webhook never saw {want}: {asked:?}");
    }
    for never in ["127.0.0.1", "127.0.0.5", "127.0.0.6", "127.0.0.77"] {
        assert!(!ips.contains(&never), "webhook saw {never}: {asked:?}");
    }
    drop(nginx);
    let _ = std::fs::remove_dir_all(&dir);
}

/// IPv6: an RTMP publisher (ffmpeg) and WHEP viewers (tern bench) over `::1`, HTTP, media,
/// RTMP and the ICE candidate all IPv6.
#[test]
fn an_rtmp_publisher_and_whep_viewers_over_ipv6() {
    let _slot = crate::common::slot();
    let cfg = config_file("v6", "[[app]]\nname = \"live\"\nstreams = [\"cam\"]\n");
    let server = Server::start_on(
        &[
            "serve",
            "--config",
            cfg.to_str().expect("utf-8"),
            "--candidate",
            "::1",
            "--rtmp",
            "[::1]:0",
        ],
        "[::1]:0",
        "[::1]:0",
    );
    assert!(server.http.is_ipv6() && server.media.is_ipv6());
    let rtmp = server.rtmp.expect("rtmp");
    assert!(rtmp.is_ipv6());
    let mut ff = common::Ffmpeg::push(&format!("rtmp://{rtmp}/live/cam"), 20);
    let whep = format!("http://{}/live/cam/whep", server.http);
    let probe = tern_bench::signal::Whep::new(&whep, Duration::from_secs(2));
    let deadline = Instant::now() + Duration::from_secs(15);
    while !probe.live() {
        assert!(
            Instant::now() < deadline,
            "not live over IPv6:\n{}\n{}",
            ff.log_tail(),
            server.log_tail(20)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = viewers(format!(
        "-url {whep} -n 3 -cint 100 -life 6 -sint 60000 --json"
    ))
    .join()
    .expect("bench");
    let s = &o.summary;
    assert_eq!(s.connected, 3, "{}", server.log_tail(20));
    assert_eq!(s.total_losses, 0);
    for c in &o.clients {
        let v = c.video.as_ref().expect("video");
        let a = c.audio.as_ref().expect("audio");
        assert!(
            v.frames > 120,
            "client_{}: {} frames over 6 s",
            c.id,
            v.frames
        );
        assert!(
            a.packets > 200,
            "client_{}: {} audio packets",
            c.id,
            a.packets
        );
    }
    assert!(
        ff.running(),
        "the publisher ended early:\n{}",
        ff.log_tail()
    );
}

/// One media socket on `[::]` serves both families, with a host candidate for each announced
/// address (default for `[::]`: `127.0.0.1` then `::1`): the WHEP answer lists both in that
/// order, and WHEP viewers over IPv4 and over IPv6 play the same RTMP stream from the one port.
#[test]
fn a_dual_stack_media_socket_announces_a_candidate_per_address() {
    let _slot = crate::common::slot();
    let cfg = config_file("dual", "[[app]]\nname = \"live\"\nstreams = [\"cam\"]\n");
    let server = Server::start_on(
        &[
            "serve",
            "--config",
            cfg.to_str().expect("utf-8"),
            "--rtmp",
            "127.0.0.1:0",
        ],
        "127.0.0.1:0",
        "[::]:0",
    );
    let port = server.media.port();
    let mut ff = common::Ffmpeg::push(
        &format!("rtmp://{}/live/cam", server.rtmp.expect("rtmp")),
        20,
    );
    let whep = format!("http://{}/live/cam/whep", server.http);
    let probe = tern_bench::signal::Whep::new(&whep, Duration::from_secs(2));
    let deadline = Instant::now() + Duration::from_secs(15);
    while !probe.live() {
        assert!(Instant::now() < deadline, "not live:\n{}", ff.log_tail());
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = common::http_request_with(
        server.http,
        "POST",
        "/live/cam/whep",
        &[],
        Some("application/sdp"),
        common::whep_offer().as_bytes(),
    )
    .expect("WHEP POST");
    assert_eq!(r.status, 201, "{}", r.text());
    let answer = r.text();
    let lines: Vec<&str> = answer
        .lines()
        .filter(|l| l.starts_with("a=candidate:"))
        .collect();
    let per_section = [
        format!("a=candidate:1 1 udp 2130706431 127.0.0.1 {port} typ host"),
        format!("a=candidate:2 1 udp 2130706175 ::1 {port} typ host"),
    ];
    assert!(
        !lines.is_empty() && lines.chunks(2).all(|c| c == per_section),
        "every media section has the IPv4 then the IPv6 candidate:\n{answer}"
    );
    // `--bind` picks the family: the bench takes the server's candidate of its own family (a
    // socket bound to ::1 reaches only an IPv6 address).
    let v4 = viewers(format!(
        "-url {whep} -n 2 -cint 100 -life 6 -sint 60000 --json --bind 127.0.0.1"
    ));
    let v6 = viewers(format!(
        "-url {whep} -n 2 -cint 100 -life 6 -sint 60000 --json --bind ::1"
    ));
    for (family, o) in [("IPv4", v4), ("IPv6", v6)] {
        let o = o.join().expect("bench");
        let s = &o.summary;
        assert_eq!(s.connected, 2, "{family}: {}", server.log_tail(20));
        assert_eq!(s.total_losses, 0, "{family}");
        for c in &o.clients {
            let frames = c.video.as_ref().map_or(0, |v| v.frames);
            let audio = c.audio.as_ref().map_or(0, |a| a.packets);
            assert!(
                frames > 120 && audio > 200,
                "{family} client_{}: {frames} frames, {audio} audio packets over 6 s",
                c.id
            );
        }
    }
    assert!(
        ff.running(),
        "the publisher ended early:\n{}",
        ff.log_tail()
    );
}
