//! WHEP status codes against a real `tern demo` process: one assertion per status the
//! server promises (201, 204, 200, 400, 401, 404, 409, 412, 415, 422, 428) plus a
//! malformed SDP that must get a 4xx naming the problem.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tern_proto::sdp::{self, OfferParams};

struct Resp {
    status: u16,
    head: String,
    body: String,
}

impl Resp {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    }
}

fn req(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Resp {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut r = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str("\r\n");
    r.push_str(body);
    s.write_all(r.as_bytes()).expect("write");
    let mut out = Vec::new();
    s.read_to_end(&mut out).expect("read");
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status code");
    Resp {
        status,
        head: head.to_string(),
        body: body.to_string(),
    }
}

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start() -> (Proc, SocketAddr) {
    let dir = std::env::temp_dir().join(format!("tern-whep-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let cfg = dir.join("tern.toml");
    std::fs::write(
        &cfg,
        "[[app]]\nname = \"live\"\nstreams = [\"idle\"]\n\n[[app]]\nname = \"secure\"\ntoken = \"s3cret\"\nstreams = [\"cam\"]\n",
    )
    .expect("write config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["demo", "--http", "127.0.0.1:0", "--media", "127.0.0.1:0"])
        .args(["--candidate", "127.0.0.1", "--rtmp", "none", "--config"])
        .arg(&cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn tern");
    // The server reports the ports it bound: `listening http=ADDR media=ADDR ...`.
    let out = child.stdout.take().expect("stdout");
    let p = Proc(child);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line)
        .expect("read the listening line");
    let http: SocketAddr = line
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("http="))
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no http= in {line:?}"));
    (p, http)
}

fn offer() -> String {
    sdp::write_offer(&OfferParams {
        ice_ufrag: "abcd",
        ice_pwd: "0123456789abcdefghijklmn",
        fingerprint_sha256: &[7u8; 32],
        video: true,
        audio: true,
        abs_capture_time: true,
        all_video: false,
    })
}

const SDP: (&str, &str) = ("Content-Type", "application/sdp");
const FRAG: (&str, &str) = ("Content-Type", "application/trickle-ice-sdpfrag");

#[test]
fn whep_status_codes() {
    let _slot = crate::common::slot();
    let (_p, a) = start();
    let o = offer();

    // 201 with answer, Location, ETag.
    let r = req(a, "POST", "/live/demo/whep", &[SDP], &o);
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.header("content-type").as_deref(), Some("application/sdp"));
    let loc = r.header("location").expect("Location");
    assert!(loc.starts_with("/live/demo/whep/"), "{loc}");
    let etag = r.header("etag").expect("ETag");
    assert!(r.body.contains("a=ice-lite"), "{}", r.body);
    assert!(r.body.contains("a=setup:passive"));
    assert!(r.body.contains("127.0.0.1"));

    // OPTIONS with CORS and Accept-Post; HEAD.
    let r = req(a, "OPTIONS", "/live/demo/whep", &[], "");
    assert!(r.status == 204 || r.status == 200, "OPTIONS {}", r.status);
    assert!(r.header("access-control-allow-origin").is_some());
    assert!(
        r.header("accept-post")
            .is_some_and(|v| v.contains("application/sdp"))
    );
    assert_eq!(req(a, "HEAD", "/live/demo/whep", &[], "").status, 200);

    // PATCH trickle: 204; ICE restart without If-Match: 428; wrong ETag: 412; restart: 200.
    let trickle = "a=ice-ufrag:abcd\r\na=ice-pwd:0123456789abcdefghijklmn\r\nm=video 9 UDP/TLS/RTP/SAVPF 0\r\na=mid:0\r\na=candidate:1 1 udp 2130706431 127.0.0.1 5000 typ host\r\n";
    let r = req(a, "PATCH", &loc, &[FRAG, ("If-Match", &etag)], trickle);
    assert_eq!(r.status, 204, "{}", r.body);
    let restart = "a=ice-ufrag:wxyz\r\na=ice-pwd:zyxwvutsrqponmlkjihgfedc\r\n";
    assert_eq!(req(a, "PATCH", &loc, &[FRAG], restart).status, 428);
    assert_eq!(
        req(a, "PATCH", &loc, &[FRAG, ("If-Match", "\"nope\"")], restart).status,
        412
    );
    let r = req(a, "PATCH", &loc, &[FRAG, ("If-Match", &etag)], restart);
    assert_eq!(r.status, 200, "{}", r.body);
    let new_etag = r.header("etag").expect("new ETag");
    assert_ne!(new_etag, etag);
    assert!(r.body.contains("a=ice-ufrag:"));

    // 415 wrong content type; 400 malformed SDP with a reason; 422 unusable offer.
    let r = req(
        a,
        "POST",
        "/live/demo/whep",
        &[("Content-Type", "text/plain")],
        &o,
    );
    assert_eq!(r.status, 415);
    let r = req(a, "POST", "/live/demo/whep", &[SDP], "v=0\r\nm=video\r\n");
    assert_eq!(r.status, 400);
    assert!(
        r.body.contains("line"),
        "reason must name the line: {}",
        r.body
    );
    let no_ufrag: String = o
        .lines()
        .filter(|l| !l.starts_with("a=ice-ufrag"))
        .map(|l| format!("{l}\r\n"))
        .collect();
    let r = req(a, "POST", "/live/demo/whep", &[SDP], &no_ufrag);
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(r.body.contains("ice-ufrag"), "{}", r.body);

    // 404 unknown stream and app; 409 + Retry-After for a declared stream that is not live.
    assert_eq!(req(a, "POST", "/live/nosuch/whep", &[SDP], &o).status, 404);
    assert_eq!(req(a, "POST", "/nosuch/demo/whep", &[SDP], &o).status, 404);
    let r = req(a, "POST", "/live/idle/whep", &[SDP], &o);
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.header("retry-after").is_some());

    // 401 without or with a wrong token, WWW-Authenticate: Bearer; with the token the
    // request goes through to the stream (not live: 409).
    let r = req(a, "POST", "/secure/cam/whep", &[SDP], &o);
    assert_eq!(r.status, 401);
    assert!(
        r.header("www-authenticate")
            .is_some_and(|v| v.starts_with("Bearer"))
    );
    let bad = req(
        a,
        "POST",
        "/secure/cam/whep",
        &[SDP, ("Authorization", "Bearer x")],
        &o,
    );
    assert_eq!(bad.status, 401);
    let ok = req(
        a,
        "POST",
        "/secure/cam/whep",
        &[SDP, ("Authorization", "Bearer s3cret")],
        &o,
    );
    assert_eq!(ok.status, 409);

    // Memory report: JSON with the packet pool and the allocator; dd text via `tern mem`.
    let r = req(a, "GET", "/v1/memory", &[], "");
    assert_eq!(r.status, 200);
    assert!(r.body.contains("\"packet_buffers\""), "{}", r.body);
    assert!(r.body.contains("\"live_bytes\""), "{}", r.body);
    let mem = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["mem", "--url", &format!("http://{a}")])
        .output()
        .expect("run tern mem");
    assert!(mem.status.success());
    let dd = String::from_utf8_lossy(&mem.stdout);
    assert!(dd.contains("packet_buffers"), "{dd}");

    // DELETE ends the session; a second DELETE finds nothing.
    let r = req(a, "DELETE", &loc, &[], "");
    assert!(r.status == 200 || r.status == 204, "DELETE {}", r.status);
    assert_eq!(req(a, "DELETE", &loc, &[], "").status, 404);
}
