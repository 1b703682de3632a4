//! WHIP ingest against a real `tern serve`: str0m publishers (tern bench's) push the clip,
//! tern bench's viewers receive it; a publisher leaves and another arrives while viewers
//! stay connected; the HTTP status codes of WHIP.

use crate::common;

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use clap::Parser;
use common::Server;
use tern_bench::BenchArgs;
use tern_rtc::clip::Clip;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

fn args(line: &str) -> BenchArgs {
    let argv =
        std::iter::once("bench".to_string()).chain(line.split_whitespace().map(String::from));
    Cli::parse_from(tern_bench::normalize_args(argv)).bench
}

fn config(body: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!(
        "tern-ingest-{}-{}.toml",
        std::process::id(),
        body.len()
    ));
    std::fs::write(&p, body).expect("write config");
    p
}

const LOCAL: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

fn wait_live(url: &str) {
    let whep = tern_bench::signal::Whep::new(url, Duration::from_secs(2));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !whep.live() {
        assert!(Instant::now() < deadline, "{url} did not go live");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn whip_publisher_feeds_viewers() {
    let _slot = crate::common::slot();
    let cfg = config("[[app]]\nname = \"live\"\nstreams = [\"cam\"]\n");
    let server = Server::serve(&cfg);
    let url = format!("http://{}/live/cam/whep", server.http);
    let a = args(&format!(
        "-url {url} --publish 1 -n 20 -cint 20 -life 10 -sint 5000 --json"
    ));
    let mut out = Vec::new();
    let o = tern_bench::run(&a, Arc::new(AtomicBool::new(false)), &mut out).expect("bench");
    let text = String::from_utf8_lossy(&out);
    let s = &o.summary;
    assert_eq!(s.connected, 20, "{text}\n{}", server.log_tail(20));
    assert_eq!(s.failed, 0, "{text}");
    assert_eq!(s.total_losses, 0, "{text}");
    for c in &o.clients {
        let v = c.video.as_ref().expect("video");
        let au = c.audio.as_ref().expect("audio");
        assert!(
            v.keyframes >= 5,
            "client_{}: {} keyframes",
            c.id,
            v.keyframes
        );
        assert!(
            au.packets > 200,
            "client_{}: {} audio packets",
            c.id,
            au.packets
        );
        // Latency from the publisher's capture time, carried through the server.
        assert!(v.latency_n > 0, "client_{}: no latency", c.id);
    }
    let d = o.server.expect("server counters");
    let unique: u64 = o
        .clients
        .iter()
        .flat_map(|c| [&c.video, &c.audio])
        .flatten()
        .map(|t| t.packets)
        .sum();
    // Exact but for an invisible first-packet socket drop (see tests/bench.rs).
    let sent_once = d.packets_out - d.retransmits;
    assert!(unique <= sent_once && sent_once - unique <= (sent_once / 100_000).max(2));
    server.stop();
}

#[test]
fn viewers_stay_when_the_publisher_leaves_and_resume_with_the_next() {
    let _slot = crate::common::slot();
    let cfg = config("[[app]]\nname = \"live\"\nstreams = [\"cam\", \"other\"]\n");
    let server = Server::serve(&cfg);
    let whep = format!("http://{}/live/cam/whep", server.http);
    let whip = format!("http://{}/live/cam/whip", server.http);
    let clip = Arc::new(Clip::builtin_lite().expect("clip"));
    let mut first = tern_bench::publish::start(&whip, LOCAL, clip.clone()).expect("publisher A");
    wait_live(&whep);
    // A second publisher on a live stream is refused; another stream is free.
    let err = tern_bench::publish::start(&whip, LOCAL, clip.clone())
        .err()
        .expect("second publisher refused");
    assert!(err.contains("HTTP 409"), "{err}");
    let other = format!("http://{}/live/other/whip", server.http);
    let mut third = tern_bench::publish::start(&other, LOCAL, clip.clone()).expect("other stream");
    third.stop();

    let a = args(&format!(
        "-url {whep} -n 10 -cint 20 -life 12 -sint 20000 --json"
    ));
    let bench = std::thread::spawn(move || {
        let mut out = Vec::new();
        let o = tern_bench::run(&a, Arc::new(AtomicBool::new(false)), &mut out).expect("bench");
        (o, String::from_utf8_lossy(&out).into_owned())
    });
    std::thread::sleep(Duration::from_secs(4));
    first.stop();
    std::thread::sleep(Duration::from_secs(1));
    let mut second = tern_bench::publish::start(&whip, LOCAL, clip).expect("publisher B");
    let (o, text) = bench.join().expect("bench thread");
    second.stop();
    let s = &o.summary;
    assert_eq!(s.connected, 10, "{text}");
    for c in &o.clients {
        let v = c.video.as_ref().expect("video");
        // The same SSRC and an unbroken sequence: nothing lost, no renegotiation.
        assert_eq!(v.lost(), 0, "client_{}", c.id);
        assert_eq!(
            c.audio.as_ref().expect("audio").lost(),
            0,
            "client_{}",
            c.id
        );
        // Video resumed within one GOP (1 s) of the new publisher: the longest silence is
        // the 1 s without a publisher plus at most a GOP and the handshake.
        assert!(
            v.max_gap < Duration::from_millis(2600),
            "client_{}: video froze for {:?}",
            c.id,
            v.max_gap
        );
        assert!(v.max_gap > Duration::from_millis(900), "the gap was seen");
        // About 11 s of 30 fps video less the gap.
        assert!(v.frames > 250, "client_{}: {} frames", c.id, v.frames);
        assert!(
            v.keyframes >= 8,
            "client_{}: {} keyframes",
            c.id,
            v.keyframes
        );
    }
    server.stop();
}

/// One HTTP/1.1 request with extra headers; returns the status and body.
fn req(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).expect("write");
    s.write_all(body).expect("write");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map_or("", |x| x.1).to_string();
    (status, body)
}

#[test]
fn whip_errors() {
    let _slot = crate::common::slot();
    let cfg = config(
        "[[app]]\nname = \"live\"\ntoken = \"s3cret\"\nstreams = [\"cam\"]\n\n\
         [[app]]\nname = \"closed\"\ndynamic = false\nstreams = [\"cam\"]\n",
    );
    let server = Server::serve(&cfg);
    let a = server.http;
    let path = "/live/cam/whip";
    let auth = ("Authorization", "Bearer s3cret");
    let sdp = ("Content-Type", "application/sdp");
    let (st, _) = req(a, "POST", path, &[sdp], b"v=0\r\n");
    assert_eq!(st, 401, "no token");
    let (st, _) = req(
        a,
        "POST",
        path,
        &[sdp, ("Authorization", "Bearer wrong")],
        b"v=0\r\n",
    );
    assert_eq!(st, 401, "wrong token");
    let (st, body) = req(a, "POST", path, &[auth, sdp], b"this is not sdp");
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("SDP"), "{body}");
    let (st, _) = req(
        a,
        "POST",
        path,
        &[auth, ("Content-Type", "text/plain")],
        b"v=0",
    );
    assert_eq!(st, 415);
    let (st, _) = req(a, "POST", "/nope/cam/whip", &[auth, sdp], b"v=0");
    assert_eq!(st, 404, "no such app");
    let (st, body) = req(a, "POST", "/closed/other/whip", &[sdp], b"v=0");
    assert_eq!(st, 404, "dynamic = false keeps the declared list: {body}");
    // An offer with only a data channel: nothing to publish.
    let dc = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n\
              m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\nc=IN IP4 0.0.0.0\r\n\
              a=ice-ufrag:abcd\r\na=ice-pwd:abcdefghijklmnopqrstuvwx\r\n\
              a=fingerprint:sha-256 00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF\r\n\
              a=setup:actpass\r\na=mid:0\r\na=sctp-port:5000\r\n";
    let (st, body) = req(a, "POST", path, &[auth, sdp], dc.as_bytes());
    assert_eq!(st, 422, "{body}");
    // Video tern cannot pass through (VP9 profile 2, H264 packetization-mode 0): refused
    // naming what was offered and what tern takes, holding nothing (the stream stays free
    // for the next offer).
    let vp8 = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0 1\r\n\
               m=video 9 UDP/TLS/RTP/SAVPF 96 97 98\r\nc=IN IP4 0.0.0.0\r\n\
               a=ice-ufrag:abcd\r\na=ice-pwd:abcdefghijklmnopqrstuvwx\r\n\
               a=fingerprint:sha-256 00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF\r\n\
               a=setup:actpass\r\na=mid:0\r\na=sendonly\r\na=rtcp-mux\r\n\
               a=rtpmap:96 VP9/90000\r\na=fmtp:96 profile-id=2\r\n\
               a=rtpmap:97 rtx/90000\r\na=fmtp:97 apt=96\r\n\
               a=rtpmap:98 H264/90000\r\na=fmtp:98 packetization-mode=0\r\n\
               m=audio 9 UDP/TLS/RTP/SAVPF 111\r\nc=IN IP4 0.0.0.0\r\n\
               a=ice-ufrag:abcd\r\na=ice-pwd:abcdefghijklmnopqrstuvwx\r\n\
               a=fingerprint:sha-256 00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF\r\n\
               a=setup:actpass\r\na=mid:1\r\na=sendonly\r\na=rtcp-mux\r\n\
               a=rtpmap:111 opus/48000/2\r\n";
    let (st, body) = req(a, "POST", path, &[auth, sdp], vp8.as_bytes());
    assert_eq!(st, 422, "{body}");
    assert!(
        body.contains("video section has VP9, H264 (packetization-mode=0);")
            && body.contains("tern takes H264 (packetization-mode=1), VP8, VP9 (profile 0)"),
        "{body}"
    );
    let (st, _) = req(a, "PATCH", "/live/cam/whip/1", &[auth], b"");
    assert_eq!(st, 415, "a PATCH body must be a trickle-ice-sdpfrag");
    let frag = ("Content-Type", "application/trickle-ice-sdpfrag");
    let (st, body) = req(
        a,
        "PATCH",
        "/live/cam/whip/1",
        &[auth, frag],
        b"a=ice-ufrag:abcd\r\n",
    );
    assert_eq!(st, 404, "{body}");
    assert!(body.contains("no such WHIP session"), "{body}");
    let (st, _) = req(a, "DELETE", "/live/cam/whip/999", &[auth], b"");
    assert_eq!(st, 404);
    let (st, _) = req(a, "OPTIONS", path, &[], b"");
    assert_eq!(st, 204);
    server.stop();
}

#[test]
fn the_builtin_clip_stream_takes_no_publisher() {
    let _slot = crate::common::slot();
    let server = Server::demo();
    let whip = format!("http://{}/live/demo/whip", server.http);
    let clip = Arc::new(Clip::builtin_lite().expect("clip"));
    let err = tern_bench::publish::start(&whip, LOCAL, clip)
        .err()
        .expect("refused");
    assert!(err.contains("HTTP 409"), "{err}");
    server.stop();
}

#[test]
fn publisher_snapshots_api_and_events() {
    let _slot = crate::common::slot();
    let cfg = config("[[app]]\nname = \"live\"\nstreams = [\"cam\"]\n\n# snapshots\n");
    let server = Server::serve(&cfg);
    let a = server.http;
    let get = |path: &str| -> (u16, serde_json::Value) {
        let r = common::http_get(a, path).expect("GET");
        let v = serde_json::from_str(&r.text()).unwrap_or(serde_json::Value::Null);
        (r.status, v)
    };
    assert_eq!(get("/v1/publishers").1, serde_json::json!([]));
    assert_eq!(get("/v1/streams/live/cam/publisher").0, 404);
    let (mut ws, _) = tungstenite::connect(format!(
        "ws://{a}/v1/events?type=publisher.joined,publisher.live,publisher.left&stream=live/cam"
    ))
    .expect("event stream");
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_ref() {
        s.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
    }
    let whip = format!("http://{a}/live/cam/whip");
    let clip = Arc::new(Clip::builtin_lite().expect("clip"));
    let mut publisher = tern_bench::publish::start(&whip, LOCAL, clip).expect("publisher");
    wait_live(&format!("http://{a}/live/cam/whep"));
    let (st, list) = get("/v1/publishers");
    assert_eq!(st, 200);
    let p = &list[0];
    assert_eq!(p["identity"]["stream"], "live/cam");
    assert_eq!(p["identity"]["protocol"], "whip");
    assert_eq!(p["state"]["state"], "live");
    let (st, one) = get("/v1/streams/live/cam/publisher");
    assert_eq!(st, 200);
    assert_eq!(one["identity"]["id"], p["identity"]["id"]);
    // Kicked through the API: the publisher's session ends, viewers would stay.
    let r = common::http_request(a, "DELETE", "/v1/streams/live/cam/publisher", None, b"")
        .expect("DELETE");
    assert_eq!(r.status, 204);
    let mut got = Vec::new();
    while got.len() < 3 {
        let msg = ws.read().expect("event");
        if let tungstenite::Message::Text(t) = msg {
            let v: serde_json::Value = serde_json::from_str(t.as_str()).expect("json");
            got.push(v);
        }
    }
    let types: Vec<&str> = got.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(
        types,
        ["publisher.joined", "publisher.live", "publisher.left"]
    );
    // Every event carries the same cached identity; the left event says why.
    for e in &got {
        assert_eq!(e["snapshot"]["identity"], p["identity"]);
    }
    assert_eq!(got[2]["reason"], "ended");
    assert_eq!(get("/v1/publishers").1, serde_json::json!([]));
    assert_eq!(get("/v1/streams/live/cam/publisher").0, 404);
    publisher.stop();
    server.stop();
}
