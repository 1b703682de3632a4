//! Forwards (restreaming) against a real receiver: nginx with Debian's RTMP module (the
//! reference RTMP server), read back by ffmpeg.
//!
//! - the built-in clip (H264 from RTP, Opus encoded to AAC) forwarded by `[[app.forward]]`:
//!   ffmpeg pulls H264 + AAC from nginx that decode without an error, for as long as asked;
//! - an RTMP publisher's stream (H264 and AAC as they came) forwarded through the API; its
//!   receiver killed for 5 s and started again: the forward is back within 5 s of its return,
//!   `reconnects` counted, and what ffmpeg then pulls has timestamps that never go back; the
//!   stream key never shows (API, events, log);
//! - a forward to a dead address retries without disturbing the stream's viewers, and 100
//!   forwards added and deleted leave the heap where it was.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{
    Child, ClosedPort, Ffmpeg, config_file, free_tcp_port, http_delete, http_get, http_post,
};

/// nginx with the RTMP module on a loopback port: `application live` takes and plays any
/// stream.
struct NginxRtmp {
    child: std::process::Child,
    dir: PathBuf,
    port: u16,
}

impl NginxRtmp {
    fn start(port: u16) -> NginxRtmp {
        let dir =
            std::env::temp_dir().join(format!("tern-nginx-rtmp-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("nginx dir");
        let conf = dir.join("nginx.conf");
        let d = dir.display();
        std::fs::write(
            &conf,
            format!(
                "load_module /usr/lib/nginx/modules/ngx_rtmp_module.so;\n\
                 daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
                 events {{ worker_connections 64; }}\n\
                 rtmp {{\n  server {{\n    listen 127.0.0.1:{port};\n    chunk_size 4096;\n    \
                 application live {{\n      live on;\n      record off;\n    }}\n  }}\n}}\n"
            ),
        )
        .expect("write nginx.conf");
        let child = Command::new("nginx")
            .args(["-p", &d.to_string(), "-c", conf.to_str().expect("utf-8")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx (scripts/install-deps.sh installs nginx-light and libnginx-mod-rtmp)");
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "nginx-rtmp did not listen on {addr}: {}",
                std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        NginxRtmp { child, dir, port }
    }

    fn url(&self, key: &str) -> String {
        format!("rtmp://127.0.0.1:{}/live/{key}", self.port)
    }
}

impl Drop for NginxRtmp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// ffmpeg reads `url` for `seconds` into an MKV (copied, not decoded): the file.
fn pull(url: &str, seconds: u32, name: &str) -> PathBuf {
    let out = std::env::temp_dir().join(format!("tern-forward-{}-{name}.mkv", std::process::id()));
    let st = Command::new("timeout")
        .args([
            &(seconds + 20).to_string(),
            "ffmpeg",
            "-hide_banner",
            "-nostdin",
        ])
        .args([
            "-loglevel",
            "error",
            "-y",
            "-rw_timeout",
            "10000000",
            "-i",
            url,
        ])
        .args(["-t", &seconds.to_string(), "-c", "copy"])
        .arg(&out)
        .stdin(Stdio::null())
        .output()
        .expect("ffmpeg");
    assert!(
        st.status.success(),
        "ffmpeg could not pull {url}: {}",
        String::from_utf8_lossy(&st.stderr)
    );
    out
}

/// ffprobe's streams of `file`: (codec_name, codec_type).
fn streams(file: &Path) -> Vec<(String, String)> {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-of", "json", "-show_streams"])
        .arg(file)
        .output()
        .expect("ffprobe");
    let v: Value = serde_json::from_slice(&out.stdout).expect("ffprobe json");
    v["streams"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| {
                    (
                        s["codec_name"].as_str().unwrap_or("").to_string(),
                        s["codec_type"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The file's duration (s).
fn duration(file: &Path) -> f64 {
    let out = Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-show_entries",
            "format=duration",
            "-of",
            "csv=p=0",
        ])
        .arg(file)
        .output()
        .expect("ffprobe");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0.0)
}

/// Decodes `file` entirely: ffmpeg's errors (empty when it decodes cleanly).
fn decode_errors(file: &Path) -> String {
    let out = Command::new("ffmpeg")
        .args(["-hide_banner", "-nostdin", "-v", "error", "-i"])
        .arg(file)
        .args(["-f", "null", "-"])
        .output()
        .expect("ffmpeg");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Each stream's packet decode times, in file order: (codec_type, dts in s).
fn packet_times(file: &Path) -> Vec<(String, f64)> {
    let out = Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-show_entries",
            "packet=codec_type,dts_time",
            "-of",
            "csv=p=0",
        ])
        .arg(file)
        .output()
        .expect("ffprobe");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (kind, t) = l.split_once(',')?;
            Some((kind.to_string(), t.trim().parse().ok()?))
        })
        .collect()
}

/// `POST path` with a JSON body.
fn post_json(
    http: SocketAddr,
    path: &str,
    body: &str,
) -> std::io::Result<crate::common::HttpResponse> {
    http_post(http, path, "application/json", body.as_bytes())
}

/// `GET /v1/forwards`.
fn forwards(http: SocketAddr) -> Vec<Value> {
    let r = http_get(http, "/v1/forwards").expect("GET /v1/forwards");
    assert_eq!(r.status, 200, "{}", r.text());
    serde_json::from_str::<Value>(&r.text())
        .expect("json")
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Waits (≤ `limit`) until some forward satisfies `f`; it.
fn wait_forward(http: SocketAddr, limit: Duration, f: impl Fn(&Value) -> bool) -> Option<Value> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = forwards(http).into_iter().find(|v| f(v)) {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The allocator's live bytes (`/v1/memory?format=dd`).
fn live_heap(http: SocketAddr) -> u64 {
    let text = http_get(http, "/v1/memory?format=dd")
        .expect("GET /v1/memory")
        .text();
    text.lines()
        .find_map(|l| l.strip_prefix("allocator: live "))
        .and_then(|r| r.split(' ').next())
        .map(|n| n.replace(',', "").parse().unwrap_or(0))
        .expect("allocator line")
}

/// The clip (H264 rebuilt from RTP, Opus → AAC) forwarded by `[[app.forward]]` to nginx:
/// ffmpeg pulls 6 s of H264 + AAC that decode without an error.
#[test]
fn the_clip_is_forwarded_to_nginx_rtmp_by_the_configuration() {
    let _slot = crate::common::slot();
    let nginx = NginxRtmp::start(free_tcp_port());
    let cfg = config_file(
        "forward-clip",
        &format!(
            "[[app]]\nname = \"live\"\nstreams = [\"demo\"]\n\n[[app.forward]]\nurl = \"rtmp://127.0.0.1:{}/live/%stream-key\"\n",
            nginx.port
        ),
    );
    let server = Child::demo_config(&cfg);
    let fw = wait_forward(server.http, Duration::from_secs(20), |f| {
        f["state"] == "live"
    })
    .unwrap_or_else(|| {
        panic!(
            "no live forward: {:?}\n{}",
            forwards(server.http),
            server.log_tail(30)
        )
    });
    assert_eq!(fw["origin"], "config");
    assert_eq!(fw["stream"], "demo");
    assert_eq!(
        fw["url"],
        format!("rtmp://127.0.0.1:{}/live/***", nginx.port),
        "the key is hidden"
    );
    let file = pull(&nginx.url("demo-key"), 6, "clip");
    let s = streams(&file);
    assert!(s.contains(&("h264".into(), "video".into())), "{s:?}");
    assert!(s.contains(&("aac".into(), "audio".into())), "{s:?}");
    let d = duration(&file);
    assert!((5.0..=7.0).contains(&d), "pulled {d} s of 6");
    let errors = decode_errors(&file);
    assert!(errors.is_empty(), "decode errors:\n{errors}");
    let m = http_get(server.http, "/metrics").expect("metrics").text();
    assert!(
        m.contains("tern_forwards{state=\"live\"} 1"),
        "{}",
        m.lines()
            .filter(|l| l.contains("forward"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(m.contains("tern_aac_encoders 1"), "one Opus → AAC encoder");
    let _ = std::fs::remove_file(file);
    // The configuration changes (the file watcher reloads it): the forward goes, and the
    // new one starts on the live stream.
    std::fs::write(
        &cfg,
        format!(
            "[[app]]\nname = \"live\"\nstreams = [\"demo\"]\n\n[[app.forward]]\nurl = \"rtmp://127.0.0.1:{}/live/second\"\n",
            nginx.port
        ),
    )
    .expect("rewrite the configuration");
    let old = fw["id"].clone();
    let new = wait_forward(server.http, Duration::from_secs(10), |f| {
        f["id"] != old && f["state"] == "live"
    })
    .unwrap_or_else(|| panic!("{:?}\n{}", forwards(server.http), server.log_tail(20)));
    assert_eq!(
        new["url"],
        format!("rtmp://127.0.0.1:{}/live/***", nginx.port)
    );
    assert_eq!(forwards(server.http).len(), 1, "the old forward is gone");
    std::fs::write(&cfg, "[[app]]\nname = \"live\"\nstreams = [\"demo\"]\n").expect("rewrite");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !forwards(server.http).is_empty() {
        assert!(Instant::now() < deadline, "{:?}", forwards(server.http));
        std::thread::sleep(Duration::from_millis(100));
    }
    server.stop();
}

/// An RTMP publisher forwarded through the API; the receiver killed for 5 s and started
/// again: the forward is back within 5 s of its return, and what ffmpeg pulls then decodes,
/// its timestamps never going back. The stream key shows nowhere.
#[test]
fn an_api_forward_comes_back_after_its_receiver_returns() {
    let _slot = crate::common::slot();
    let port = free_tcp_port();
    let nginx = NginxRtmp::start(port);
    let cfg = config_file("forward-api", "[[app]]\nname = \"live\"\n");
    let (server, rtmp) = Child::serve_rtmp(&cfg);
    // H264 and AAC from an encoder: passed as they came.
    let mut ff = Ffmpeg::push(&format!("rtmp://{rtmp}/live/cam"), 60);
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = format!("{{\"url\": \"{}\"}}", nginx.url("sk-live-0123456789"));
    let created = loop {
        let r = post_json(server.http, "/v1/streams/live/cam/forwards", &body).expect("POST");
        if r.status == 201 {
            break r;
        }
        assert!(
            Instant::now() < deadline && (r.status == 404 || r.status == 409),
            "{} {}",
            r.status,
            r.text()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let v: Value = serde_json::from_str(&created.text()).expect("json");
    let id = v["id"].as_str().expect("id").to_string();
    assert_eq!(v["url"], format!("rtmp://127.0.0.1:{port}/live/***"));
    assert!(
        created
            .header("location")
            .is_some_and(|l| l.ends_with(&format!("/forwards/{id}")))
    );
    let live = |f: &Value| f["id"] == id.as_str() && f["state"] == "live";
    wait_forward(server.http, Duration::from_secs(15), live).expect("live");
    let before = pull(&nginx.url("sk-live-0123456789"), 3, "before");
    assert!(decode_errors(&before).is_empty());

    drop(nginx);
    let f = wait_forward(server.http, Duration::from_secs(10), |f| {
        f["id"] == id.as_str() && f["state"] == "retrying"
    })
    .expect("retrying while the receiver is away");
    assert!(
        f["last_error"].as_str().is_some_and(|e| !e.is_empty()),
        "{f}"
    );
    std::thread::sleep(Duration::from_secs(5));
    let back = Instant::now();
    let nginx = NginxRtmp::start(port);
    let f = wait_forward(server.http, Duration::from_secs(5), |f| {
        live(f) && f["reconnects"].as_u64().is_some_and(|n| n >= 1)
    })
    .unwrap_or_else(|| panic!("not back within 5 s: {:?}", forwards(server.http)));
    eprintln!(
        "forward back {} ms after its receiver returned: {f}",
        back.elapsed().as_millis()
    );
    let after = pull(&nginx.url("sk-live-0123456789"), 4, "after");
    let errors = decode_errors(&after);
    assert!(errors.is_empty(), "decode errors:\n{errors}");
    let times = packet_times(&after);
    for kind in ["video", "audio"] {
        let t: Vec<f64> = times
            .iter()
            .filter(|(k, _)| k == kind)
            .map(|(_, t)| *t)
            .collect();
        assert!(t.len() > 30, "{kind}: {} packets", t.len());
        assert!(
            t.windows(2).all(|w| w[1] >= w[0]),
            "{kind} timestamps go back: {t:?}"
        );
    }

    let r =
        http_delete(server.http, &format!("/v1/streams/live/cam/forwards/{id}")).expect("DELETE");
    assert_eq!(r.status, 204, "{}", r.text());
    assert!(forwards(server.http).is_empty());
    let r =
        http_delete(server.http, &format!("/v1/streams/live/cam/forwards/{id}")).expect("DELETE");
    assert_eq!(r.status, 404);
    let m = http_get(server.http, "/metrics").expect("metrics").text();
    let bytes: u64 = m
        .lines()
        .find_map(|l| l.strip_prefix("tern_forward_bytes_total{app=\"live\",stream=\"cam\"} "))
        .and_then(|n| n.trim().parse().ok())
        .expect("tern_forward_bytes_total of live/cam");
    assert!(bytes > 100_000, "{bytes} bytes sent on");
    ff.kill();
    let log = std::fs::read_to_string(&server.log).unwrap_or_default();
    assert!(!log.contains("sk-live-0123456789"), "the key is in the log");
    assert!(
        log.contains("live/***"),
        "the forward is logged with its key hidden"
    );
    let _ = std::fs::remove_file(before);
    let _ = std::fs::remove_file(after);
    server.stop();
}

/// Bad requests get a clear status; a forward to a dead address retries without
/// disturbing the stream's viewers; 100 forwards added and deleted leave the heap where
/// it was.
#[test]
fn a_dead_receiver_and_a_hundred_forwards_cost_the_stream_nothing() {
    let _slot = crate::common::slot();
    let server = Child::demo();
    let http = server.http;
    let path = "/v1/streams/live/demo/forwards";
    for (body, status, says) in [
        ("{\"url\": \"http://x/a/b\"}", 422, "not forwarded"),
        ("{\"url\": \"rtmp://h/onlyapp\"}", 422, "stream key"),
        ("{\"nope\": 1}", 400, "url"),
    ] {
        let r = post_json(http, path, body).expect("POST");
        assert_eq!(r.status, status, "{body}: {}", r.text());
        assert!(r.text().contains(says), "{body}: {}", r.text());
    }
    let r = post_json(
        http,
        "/v1/streams/live/nope/forwards",
        "{\"url\": \"rtmp://h/a/b\"}",
    )
    .expect("POST");
    assert_eq!(r.status, 404);

    let dead = ClosedPort::new();
    let viewers = crate::common::bench::viewers(format!(
        "-url http://{http}/live/demo/whep -n 5 -cint 20 -life 10 -sint 5000"
    ));
    let body = format!("{{\"url\": \"rtmp://{}/live/x\"}}", dead.addr());
    let r = post_json(http, path, &body).expect("POST");
    assert_eq!(r.status, 201, "{}", r.text());
    let f =
        wait_forward(http, Duration::from_secs(5), |f| f["state"] == "retrying").expect("retrying");
    assert!(
        f["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("connect")),
        "{f}"
    );
    let (outcome, printed) = viewers.join().expect("bench");
    assert_eq!(outcome.summary.connected, 5, "{printed}");
    assert_eq!(
        outcome.summary.total_losses, 0,
        "the stream lost nothing:\n{printed}"
    );
    let id = f["id"].as_str().expect("id");
    assert_eq!(
        http_delete(http, &format!("{path}/{id}"))
            .expect("DELETE")
            .status,
        204
    );

    // Warm: one forward added and deleted, then the heap at rest.
    let churn = |n: usize| {
        for _ in 0..n {
            let r = post_json(http, path, &body).expect("POST");
            assert_eq!(r.status, 201, "{}", r.text());
            let v: Value = serde_json::from_str(&r.text()).expect("json");
            let id = v["id"].as_str().expect("id");
            assert_eq!(
                http_delete(http, &format!("{path}/{id}"))
                    .expect("DELETE")
                    .status,
                204
            );
        }
    };
    churn(2);
    std::thread::sleep(Duration::from_millis(300));
    let rest = live_heap(http);
    churn(100);
    std::thread::sleep(Duration::from_millis(300));
    let after = live_heap(http);
    eprintln!("heap: {rest} B at rest, {after} B after 100 forwards added and deleted");
    assert!(
        after < rest + 64 * 1024,
        "100 forwards left {} B behind",
        after.saturating_sub(rest)
    );
    assert!(forwards(http).is_empty());
    server.stop();
}

/// An SRT forward with a passphrase to `srt-live-transmit` in listener mode (libsrt):
/// what it writes out is H264 + AAC MPEG-TS that decodes without an error.
#[test]
fn an_srt_forward_reaches_srt_live_transmit() {
    let _slot = crate::common::slot();
    let port = free_tcp_port();
    let out = std::env::temp_dir().join(format!("tern-forward-{}-srt.ts", std::process::id()));
    let file = std::fs::File::create(&out).expect("output file");
    let mut slt = Command::new("srt-live-transmit")
        .args([
            "-q",
            &format!("srt://127.0.0.1:{port}?mode=listener&passphrase=0123456789abc&latency=120"),
            "file://con",
        ])
        .stdout(Stdio::from(file))
        .stderr(Stdio::null())
        .spawn()
        .expect("srt-live-transmit (scripts/install-deps.sh installs srt-tools)");
    std::thread::sleep(Duration::from_millis(500));
    let server = Child::demo();
    let url = format!("srt://127.0.0.1:{port}?passphrase=0123456789abc&latency=120");
    let r = post_json(
        server.http,
        "/v1/streams/live/demo/forwards",
        &format!("{{\"url\": \"{url}\"}}"),
    )
    .expect("POST");
    assert_eq!(r.status, 201, "{}", r.text());
    let v: Value = serde_json::from_str(&r.text()).expect("json");
    assert_eq!(
        v["url"],
        format!("srt://127.0.0.1:{port}?passphrase=***&latency=120")
    );
    wait_forward(server.http, Duration::from_secs(15), |f| {
        f["state"] == "live"
    })
    .unwrap_or_else(|| panic!("{:?}\n{}", forwards(server.http), server.log_tail(20)));
    std::thread::sleep(Duration::from_secs(6));
    server.stop();
    // srt-live-transmit flushes what it holds on SIGINT (a kill would cut its last write).
    std::thread::sleep(Duration::from_millis(500));
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(slt.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while slt.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = slt.kill();
    let _ = slt.wait();
    let size = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
    assert_eq!(size % 188, 0, "whole TS packets: {size} bytes");
    let s = streams(&out);
    assert!(s.contains(&("h264".into(), "video".into())), "{s:?}");
    assert!(s.contains(&("aac".into(), "audio".into())), "{s:?}");
    let d = duration(&out);
    assert!(d >= 4.0, "{d} s received");
    let errors = decode_errors(&out);
    assert!(errors.is_empty(), "decode errors:\n{errors}");
    let _ = std::fs::remove_file(out);
}

/// An `rtmps://` forward to a second tern's RTMPS listener, whose self-signed certificate
/// the sender trusts through `server.ca_file`: the second tern's WebRTC viewers play it.
#[test]
fn an_rtmps_forward_reaches_another_tern() {
    let _slot = crate::common::slot();
    let dir = crate::https::temp_dir("forward-rtmps");
    let (cert, key) = crate::https::write_pair(&dir, "receiver");
    let receiver_cfg = config_file(
        "forward-rtmps-receiver",
        &format!(
            "[server]\nrtmps = \"127.0.0.1:0\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n\n[[app]]\nname = \"live\"\n",
            cert.display(),
            key.display()
        ),
    );
    let receiver = crate::common::Server::serve(&receiver_cfg);
    let rtmps = receiver.rtmps.expect("RTMPS address");
    let sender_cfg = config_file(
        "forward-rtmps-sender",
        &format!(
            "[server]\nca_file = \"{}\"\n\n[[app]]\nname = \"live\"\nstreams = [\"demo\"]\n\n[[app.forward]]\nurl = \"rtmps://127.0.0.1:{}/live/relayed\"\n",
            cert.display(),
            rtmps.port()
        ),
    );
    let sender = Child::demo_config(&sender_cfg);
    wait_forward(sender.http, Duration::from_secs(20), |f| {
        f["state"] == "live"
    })
    .unwrap_or_else(|| panic!("{:?}\n{}", forwards(sender.http), sender.log_tail(20)));
    let whep = format!("http://{}/live/relayed/whep", receiver.http);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let p = http_get(receiver.http, "/v1/publishers")
            .expect("publishers")
            .text();
        if p.contains("live/relayed") && p.contains("\"state\":\"live\"") {
            break;
        }
        assert!(Instant::now() < deadline, "no live publisher: {p}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let (o, text) = crate::common::bench::viewers(format!(
        "-url {whep} -n 3 -cint 20 -life 5 -sint 5000 --json"
    ))
    .join()
    .expect("bench");
    assert_eq!(o.summary.connected, 3, "{text}");
    assert_eq!(o.summary.total_losses, 0, "{text}");
    for c in &o.clients {
        let v = c.video.as_ref().expect("video");
        assert!(v.frames > 100, "client_{}: {v:?}", c.id);
        assert!(
            c.audio.as_ref().is_some_and(|a| a.packets > 150),
            "client_{}: audio",
            c.id
        );
    }
    sender.stop();
    receiver.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A publisher that leaves and comes back within the grace keeps its forward: the same
/// connection to nginx goes on, and what a player pulls across the change has timestamps
/// that never go back (platforms drop a stream whose clock jumps back).
#[test]
fn a_publisher_that_reconnects_keeps_its_forward_and_its_clock() {
    let _slot = crate::common::slot();
    let nginx = NginxRtmp::start(free_tcp_port());
    let cfg = config_file(
        "forward-reconnect",
        &format!(
            "[[app]]\nname = \"live\"\n\n[[app.forward]]\nurl = \"rtmp://127.0.0.1:{}/live/%stream\"\n",
            nginx.port
        ),
    );
    let (server, rtmp) = Child::serve_rtmp(&cfg);
    let mut first = Ffmpeg::push(&format!("rtmp://{rtmp}/live/cam"), 30);
    let f = wait_forward(server.http, Duration::from_secs(20), |f| {
        f["state"] == "live"
    })
    .unwrap_or_else(|| panic!("{:?}\n{}", forwards(server.http), server.log_tail(20)));
    let id = f["id"].as_str().expect("id").to_string();
    let url = nginx.url("cam");
    let pulling = std::thread::spawn(move || pull(&url, 12, "reconnect"));
    std::thread::sleep(Duration::from_secs(4));
    first.kill();
    std::thread::sleep(Duration::from_millis(800));
    let mut second = Ffmpeg::push(&format!("rtmp://{rtmp}/live/cam"), 30);
    let file = pulling.join().expect("pull");
    let f = forwards(server.http);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0]["id"], id.as_str(), "the same forward");
    assert_eq!(f[0]["reconnects"], 0, "the same connection: {f:?}");
    let times = packet_times(&file);
    for kind in ["video", "audio"] {
        let t: Vec<f64> = times
            .iter()
            .filter(|(k, _)| k == kind)
            .map(|(_, t)| *t)
            .collect();
        assert!(t.len() > 100, "{kind}: {} packets", t.len());
        assert!(
            t.windows(2).all(|w| w[1] >= w[0]),
            "{kind} timestamps go back: {t:?}"
        );
        let span = t.last().copied().unwrap_or(0.0) - t.first().copied().unwrap_or(0.0);
        assert!(span >= 9.0, "{kind}: {span} s of 12 pulled");
    }
    second.kill();
    let _ = std::fs::remove_file(file);
    server.stop();
}
