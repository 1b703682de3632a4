//! Recording (issue 38) against a real server, ffmpeg and ffprobe: an RTMP push, an SRT push
//! and an RTSP camera (each H264 + AAC, through the one frame sink, issue 51) recorded to
//! files that ffprobe and ffmpeg read whole; a killed server's file playing to its last
//! fragment; start, stop, list and serve (with `Range`) through the API and its token;
//! `delete_after_s`; a full disk that stops the recording alone while viewers lose
//! nothing.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant, SystemTime};

use clap::Parser;
use common::{Child, Ffmpeg, Running, Server, http_get, http_request_with};
use serde_json::Value;
use tern_bench::BenchArgs;

/// The tests push real-time media and decode files: one at a time keeps their timing
/// honest on a two-core machine.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A fresh directory for this test's files.
fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tern-rec-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("test dir");
    d
}

fn get_json(http: SocketAddr, path: &str, token: Option<&str>) -> Value {
    let auth = token.map(|t| format!("Bearer {t}"));
    let extra: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| vec![("Authorization", a)])
        .unwrap_or_default();
    let r = http_request_with(http, "GET", path, &extra, None, &[]).expect("GET");
    assert_eq!(r.status, 200, "GET {path}: {}", r.text());
    serde_json::from_slice(&r.body).expect("JSON")
}

/// ffprobe's format duration and `(codec_type, codec_name)` of each stream.
fn ffprobe(path: &Path) -> (f64, Vec<(String, String)>) {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-show_entries"])
        .args([
            "format=duration:stream=codec_type,codec_name",
            "-of",
            "json",
        ])
        .arg(path)
        .output()
        .expect("run ffprobe");
    assert!(out.status.success(), "ffprobe {}", path.display());
    let v: Value = serde_json::from_slice(&out.stdout).expect("ffprobe JSON");
    let duration = v["format"]["duration"]
        .as_str()
        .and_then(|d| d.parse().ok())
        .expect("a duration");
    let streams = v["streams"]
        .as_array()
        .expect("streams")
        .iter()
        .map(|s| {
            (
                s["codec_type"].as_str().unwrap_or("").to_string(),
                s["codec_name"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    (duration, streams)
}

/// Decodes every stream of the file: (ffmpeg's success, its error output, video frames
/// decoded).
fn decode(path: &Path) -> (bool, String, usize) {
    let out = Command::new("ffmpeg")
        .args(["-hide_banner", "-nostdin", "-v", "error", "-i"])
        .arg(path)
        .args(["-f", "null", "-"])
        .output()
        .expect("run ffmpeg");
    let frames = Command::new("ffmpeg")
        .args(["-hide_banner", "-nostdin", "-v", "error", "-i"])
        .arg(path)
        .args(["-map", "0:v:0", "-f", "framemd5", "-"])
        .output()
        .expect("run ffmpeg");
    let n = String::from_utf8_lossy(&frames.stdout)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .count();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        n,
    )
}

/// The `.mp4` files under `d`.
fn mp4s(d: &Path) -> Vec<PathBuf> {
    fn walk(d: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "mp4") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(d, &mut out);
    out.sort();
    out
}

/// Recording events off `/v1/events`, collected on a thread.
fn events(http: SocketAddr, token: Option<&str>) -> mpsc::Receiver<Value> {
    let mut req = tungstenite::client::IntoClientRequest::into_client_request(format!(
        "ws://{http}/v1/events?type=recording.started,recording.segment,recording.stopped"
    ))
    .expect("request");
    if let Some(t) = token {
        req.headers_mut().insert(
            "Authorization",
            format!("Bearer {t}").parse().expect("header"),
        );
    }
    let (mut ws, _) = tungstenite::connect(req).expect("event stream");
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_ref() {
        s.set_read_timeout(Some(Duration::from_secs(120)))
            .expect("timeout");
    }
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        while let Ok(m) = ws.read() {
            if let tungstenite::Message::Text(t) = m
                && let Ok(v) = serde_json::from_str::<Value>(&t)
                && tx.send(v).is_err()
            {
                return;
            }
        }
    });
    rx
}

/// Waits for an event of type `kind` (others are collected into `seen`).
fn wait_event(
    rx: &mpsc::Receiver<Value>,
    kind: &str,
    limit: Duration,
    seen: &mut Vec<Value>,
) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let e = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no {kind} event within {limit:?}; saw {seen:?}"));
        seen.push(e.clone());
        if e["type"] == kind {
            return e;
        }
    }
}

/// A one-shot HTTP server for the segment webhook: the body of the first POST.
fn hook() -> (SocketAddr, mpsc::Receiver<Value>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let Ok((mut s, _)) = l.accept() else { return };
        let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
        let mut raw = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let Ok(n) = s.read(&mut buf) else { return };
            if n == 0 {
                return;
            }
            raw.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&raw).into_owned();
            let Some((head, body)) = text.split_once("\r\n\r\n") else {
                continue;
            };
            let len = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if body.len() >= len {
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
                let _ = tx.send(serde_json::from_str(&body[..len]).unwrap_or(Value::Null));
                return;
            }
        }
    });
    (addr, rx)
}

fn wait_live(http: SocketAddr, key: &str, server: &impl Running) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // WHEP's liveness probe: 200 once the stream has media.
        let s =
            common::http_request(http, "HEAD", &format!("/{key}/whep"), None, &[]).expect("HEAD");
        if s.status == 200 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{key} not live; log:\n{}",
            server.log_tail(30)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Acceptance: 30 s of ffmpeg's RTMP push (H264 + AAC) with `record.enabled`: one file whose
/// duration is within 1 s of the push, with a video and an audio track, that ffmpeg decodes
/// without an error; `recording.started`, `.segment` and `.stopped` (reason) on the event
/// stream; the segment webhook's JSON; the listing; the file served whole and by range;
/// the `recordings` pool in `/v1/memory`.
#[test]
fn rtmp_push_is_recorded_to_a_file_that_plays() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    let d = dir("push");
    let (hook_addr, hook_rx) = hook();
    let cfg = common::config_file(
        "rec-push",
        &format!(
            "[[app]]\nname = \"live\"\n[app.record]\nenabled = true\npath = \"{}/%app/%stream/%Y-%m-%d_%H-%M-%S\"\non_segment_url = \"http://{hook_addr}/segment\"\n",
            d.display()
        ),
    );
    // A process: the test reads `recordings` in /v1/memory, which every server in a
    // process shares.
    let (server, rtmp) = Child::serve_rtmp(&cfg);
    let ev = events(server.http, None);
    let mut ff = Ffmpeg::push(&format!("rtmp://{rtmp}/live/cam"), 30);
    let mut seen = Vec::new();
    let started = wait_event(&ev, "recording.started", Duration::from_secs(20), &mut seen);
    assert_eq!(started["stream"], "live/cam");
    // While it records: the pool line, and parts on disk already (crash safety).
    std::thread::sleep(Duration::from_secs(5));
    let mem = get_json(server.http, "/v1/memory", None);
    let pool = mem["pools"]
        .as_array()
        .expect("pools")
        .iter()
        .find(|p| p["name"] == "recordings")
        .cloned()
        .expect("a recordings pool line");
    assert!(pool["peak_bytes"].as_u64().unwrap_or(0) > 0, "{pool}");
    let growing = mp4s(&d);
    assert_eq!(growing.len(), 1, "{growing:?}");
    assert!(std::fs::metadata(&growing[0]).expect("file").len() > 50_000);
    assert_eq!(
        ff.wait(Duration::from_secs(45)),
        Some(true),
        "{}",
        ff.log_tail()
    );

    let seg = wait_event(&ev, "recording.segment", Duration::from_secs(10), &mut seen);
    let stopped = wait_event(&ev, "recording.stopped", Duration::from_secs(10), &mut seen);
    assert_eq!(stopped["reason"], "stream ended", "{stopped}");
    let files = mp4s(&d);
    assert_eq!(files.len(), 1, "{files:?}");
    let file = &files[0];
    assert_eq!(seg["snapshot"]["path"], file.to_string_lossy().as_ref());

    // The webhook's object, exactly the documented keys.
    let h = hook_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("segment webhook");
    let mut keys: Vec<&str> = h
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["app", "bytes", "duration_s", "path", "start", "stream"]
    );
    assert_eq!(h["app"], "live");
    assert_eq!(h["stream"], "cam");
    let size = std::fs::metadata(file).expect("file").len();
    assert_eq!(h["bytes"].as_u64(), Some(size));

    let (duration, streams) = ffprobe(file);
    eprintln!(
        "recorded {}: {duration:.3} s, {size} bytes, {streams:?}",
        file.display()
    );
    assert!((duration - 30.0).abs() <= 1.0, "duration {duration}");
    assert!(
        streams.contains(&("video".into(), "h264".into())),
        "{streams:?}"
    );
    assert!(
        streams.contains(&("audio".into(), "aac".into())),
        "{streams:?}"
    );
    let (ok, errors, frames) = decode(file);
    assert!(ok && errors.trim().is_empty(), "decode errors:\n{errors}");
    assert!(frames >= 29 * 30, "{frames} frames");

    // The listing and the file through the API.
    let list = get_json(server.http, "/v1/recordings?app=live&stream=cam", None);
    let list = list.as_array().expect("list");
    assert_eq!(list.len(), 1, "{list:?}");
    let e = &list[0];
    assert_eq!(e["path"], file.to_string_lossy().as_ref());
    assert_eq!(e["bytes"].as_u64(), Some(size));
    let listed = e["duration_s"].as_f64().expect("duration_s");
    assert!((listed - 30.0).abs() <= 1.0, "{e}");
    let codecs = e["codecs"].as_str().expect("codecs");
    assert!(
        codecs.contains("avc1.") && codecs.contains("mp4a.40.2"),
        "{codecs}"
    );
    assert!(e["start"].as_str().is_some_and(|s| s.ends_with('Z')), "{e}");
    assert_eq!(
        get_json(server.http, "/v1/recordings?stream=other", None),
        Value::Array(Vec::new())
    );
    let url = e["url"].as_str().expect("url");
    let bytes = std::fs::read(file).expect("read file");
    let whole = http_get(server.http, url).expect("GET file");
    assert_eq!(whole.status, 200);
    assert_eq!(whole.header("accept-ranges"), Some("bytes"));
    assert_eq!(whole.header("content-type"), Some("video/mp4"));
    assert!(whole.body == bytes, "the whole file served");
    let part = http_request_with(
        server.http,
        "GET",
        url,
        &[("Range", "bytes=1000-1999")],
        None,
        &[],
    )
    .expect("GET range");
    assert_eq!(part.status, 206);
    assert_eq!(
        part.header("content-range"),
        Some(format!("bytes 1000-1999/{size}").as_str())
    );
    assert!(part.body == bytes[1000..2000]);
    let tail = http_request_with(
        server.http,
        "GET",
        url,
        &[("Range", "bytes=-100")],
        None,
        &[],
    )
    .expect("GET suffix");
    assert_eq!(tail.status, 206);
    assert!(tail.body == bytes[bytes.len() - 100..]);
    let past = format!("bytes={size}-");
    let bad = http_request_with(
        server.http,
        "GET",
        url,
        &[("Range", past.as_str())],
        None,
        &[],
    )
    .expect("GET past the end");
    assert_eq!(bad.status, 416);
    assert_eq!(
        http_get(server.http, "/v1/recordings/live/cam/nope.mp4")
            .expect("GET")
            .status,
        404
    );
    server.stop();
    let _ = std::fs::remove_dir_all(&d);
}

/// Acceptance: the server is SIGKILLed 20 s into a recording; the file it leaves decodes
/// without an error for at least 18 s, and a new server lists it with its duration read
/// from the fragments.
#[test]
fn a_killed_server_leaves_a_file_that_plays_to_its_last_fragment() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    let d = dir("kill");
    let cfg = common::config_file(
        "rec-kill",
        &format!(
            "[[app]]\nname = \"live\"\n[app.record]\nenabled = true\npart_s = 1\npath = \"{}/%stream-%Y%m%d%H%M%S\"\n",
            d.display()
        ),
    );
    // A process: the test kills it (SIGKILL).
    let (mut server, rtmp) = Child::serve_rtmp(&cfg);
    let mut ff = Ffmpeg::push(&format!("rtmp://{rtmp}/live/cam"), 40);
    wait_live(server.http, "live/cam", &server);
    std::thread::sleep(Duration::from_secs(20));
    server.kill();
    ff.kill();
    let files = mp4s(&d);
    assert_eq!(files.len(), 1, "{files:?}");
    let (ok, errors, frames) = decode(&files[0]);
    eprintln!(
        "after SIGKILL at 20 s: {} bytes, {frames} frames decoded",
        std::fs::metadata(&files[0]).map_or(0, |m| m.len())
    );
    assert!(ok && errors.trim().is_empty(), "decode errors:\n{errors}");
    assert!(frames >= 18 * 30, "only {frames} frames (30 fps) decode");
    let (duration, streams) = ffprobe(&files[0]);
    assert!(duration >= 18.0, "ffprobe duration {duration}");
    assert_eq!(streams.len(), 2, "{streams:?}");

    // A new server finds it, its duration read from the fragments.
    let server = Server::serve(&cfg);
    let list = get_json(server.http, "/v1/recordings?app=live", None);
    let e = &list.as_array().expect("list")[0];
    let listed = e["duration_s"].as_f64().expect("duration_s");
    assert!((18.0..=21.0).contains(&listed), "{e}");
    assert_eq!(e["stream"], "cam");
    server.stop();
    let _ = std::fs::remove_dir_all(&d);
}

/// Acceptance: start, stop and list through the API, behind its token; the errors (401,
/// 400, 404, 409); `delete_after_s` deletes the app's older files and nothing else.
#[test]
fn recordings_start_and_stop_through_the_api_and_old_files_are_deleted() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    let d = dir("api");
    let token = "t0ken";
    let cfg = common::config_file(
        "rec-api",
        &format!(
            "[server]\napi_token = \"{token}\"\n[[app]]\nname = \"live\"\nstreams = [\"cam\"]\n[app.record]\npath = \"{}/%app/%stream/%Y%m%d-%H%M%S\"\ndelete_after_s = 3600\n",
            d.display()
        ),
    );
    let (server, rtmp) = Server::serve_rtmp(&cfg);
    let a = server.http;
    let auth = format!("Bearer {token}");
    let with = [("Authorization", auth.as_str())];
    let post = |path: &str, body: &str, h: &[(&str, &str)]| {
        http_request_with(
            a,
            "POST",
            path,
            h,
            Some("application/json"),
            body.as_bytes(),
        )
        .expect("POST")
    };
    let start = "/v1/streams/live/cam/recordings";
    assert_eq!(post(start, r#"{"id":"r1"}"#, &[]).status, 401);
    assert_eq!(
        post("/v1/streams/live/nope/recordings", r#"{"id":"r1"}"#, &with).status,
        404
    );
    assert_eq!(
        post(start, r#"{"id":"r1"}"#, &with).status,
        409,
        "not live yet"
    );

    let mut ff = Ffmpeg::push(&format!("rtmp://{rtmp}/live/cam"), 30);
    wait_live(a, "live/cam", &server);
    let ev = events(a, Some(token));
    assert_eq!(post(start, r#"{"id":"../x"}"#, &with).status, 400);
    assert_eq!(post(start, "id=r1", &with).status, 400);
    let r = post(start, r#"{"id":"r1"}"#, &with);
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(
        r.header("location"),
        Some("/v1/streams/live/cam/recordings/r1")
    );
    assert_eq!(
        post(start, r#"{"id":"r1"}"#, &with).status,
        409,
        "already running"
    );
    let mut seen = Vec::new();
    let started = wait_event(&ev, "recording.started", Duration::from_secs(5), &mut seen);
    assert_eq!(started["snapshot"]["id"], "r1");
    std::thread::sleep(Duration::from_secs(8));
    let del = |path: &str, h: &[(&str, &str)]| {
        http_request_with(a, "DELETE", path, h, None, &[])
            .expect("DELETE")
            .status
    };
    assert_eq!(del("/v1/streams/live/cam/recordings/r1", &[]), 401);
    assert_eq!(del("/v1/streams/live/cam/recordings/r1", &with), 204);
    assert_eq!(del("/v1/streams/live/cam/recordings/r1", &with), 404);
    let stopped = wait_event(&ev, "recording.stopped", Duration::from_secs(5), &mut seen);
    assert_eq!(stopped["reason"], "stopped by the API");
    assert!(ff.running(), "the publisher is untouched");

    assert_eq!(
        http_request_with(a, "GET", "/v1/recordings", &[], None, &[])
            .expect("GET")
            .status,
        401
    );
    let list = get_json(a, "/v1/recordings?app=live&stream=cam", Some(token));
    let list = list.as_array().expect("list").clone();
    assert_eq!(list.len(), 1, "{list:?}");
    let dur = list[0]["duration_s"].as_f64().expect("duration");
    assert!((6.0..=10.0).contains(&dur), "{dur}");
    let recorded = PathBuf::from(list[0]["path"].as_str().expect("path"));
    let (ok, errors, _) = decode(&recorded);
    assert!(ok && errors.trim().is_empty(), "{errors}");

    // delete_after_s = 3600: a copy of the file made "two hours old" under a name the
    // template makes goes at the next sweep (every 10 s); the fresh file stays, and so
    // does an old file the template does not make.
    let folder = recorded.parent().expect("folder");
    let old = folder.join("20200101-000000.mp4");
    let other = folder.join("notes.mp4");
    for p in [&old, &other] {
        std::fs::copy(&recorded, p).expect("copy");
        let f = std::fs::File::options().write(true).open(p).expect("open");
        f.set_modified(SystemTime::now() - Duration::from_secs(7200))
            .expect("set mtime");
    }
    let deadline = Instant::now() + Duration::from_secs(25);
    while old.exists() {
        assert!(Instant::now() < deadline, "{} not deleted", old.display());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(recorded.exists(), "the fresh recording stays");
    assert!(other.exists(), "a file the template does not make stays");
    ff.kill();
    server.stop();
    let _ = std::fs::remove_dir_all(&d);
}

/// An ffmpeg pushing `seconds` of 640x360 video at a constant `kbps` (H264 baseline, GOP
/// 30) and AAC to `url`.
fn push_cbr(url: &str, seconds: u32, kbps: u32) -> std::process::Child {
    let rate = format!("{kbps}k");
    Command::new("ffmpeg")
        .args(["-hide_banner", "-nostdin", "-loglevel", "error"])
        .args(["-re", "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=30"])
        .args([
            "-re",
            "-f",
            "lavfi",
            "-i",
            "sine=frequency=440:sample_rate=44100",
        ])
        .args([
            "-t",
            &seconds.to_string(),
            "-c:v",
            "libx264",
            "-profile:v",
            "baseline",
        ])
        .args(["-tune", "zerolatency", "-pix_fmt", "yuv420p", "-g", "30"])
        .args([
            "-b:v", &rate, "-minrate", &rate, "-maxrate", &rate, "-bufsize", &rate,
        ])
        .args([
            "-x264-params",
            "nal-hrd=cbr",
            "-c:a",
            "aac",
            "-f",
            "flv",
            url,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn ffmpeg")
}

/// A tmpfs mounted for the test, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// A `size` tmpfs at a fresh directory, or `None` when this process may not mount
    /// (not root): the test then says so and passes without the check.
    fn mount(size: &str) -> Option<Tmpfs> {
        let d = dir("tmpfs");
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&d)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs(d))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

/// Acceptance: a 10 MiB tmpfs as the target fills up: `recording.stopped` with reason
/// `write error` naming the error; the stream's WebRTC viewers lose nothing, and the
/// publisher keeps publishing. (Most of the tmpfs is taken by a filler file first, so that
/// it fills in seconds rather than minutes.)
#[test]
fn a_full_disk_stops_the_recording_and_nothing_else() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    let Some(fs) = Tmpfs::mount("10m") else {
        eprintln!("SKIPPED: cannot mount a tmpfs (needs root); the full-disk check did not run");
        return;
    };
    std::fs::write(fs.0.join("filler"), vec![0u8; 8 << 20]).expect("filler");
    let cfg = common::config_file(
        "rec-full",
        &format!(
            "[[app]]\nname = \"live\"\n[app.record]\nenabled = true\npath = \"{}/%stream-%H%M%S\"\n",
            fs.0.display()
        ),
    );
    let (server, rtmp) = Server::serve_rtmp(&cfg);
    let ev = events(server.http, None);
    let mut ff = push_cbr(&format!("rtmp://{rtmp}/live/cam"), 30, 2000);
    wait_live(server.http, "live/cam", &server);
    let whep = format!("http://{}/live/cam/whep", server.http);
    let line = format!("-url {whep} -n 2 -cint 100 -life 20 -sint 60000 --json");
    let bench = std::thread::spawn(move || {
        let argv =
            std::iter::once("bench".to_string()).chain(line.split_whitespace().map(String::from));
        let a = Cli::parse_from(tern_bench::normalize_args(argv)).bench;
        let mut out = Vec::new();
        let o = tern_bench::run(&a, Arc::new(AtomicBool::new(false)), &mut out).expect("bench");
        (o, String::from_utf8_lossy(&out).into_owned())
    });
    let mut seen = Vec::new();
    let stopped = wait_event(&ev, "recording.stopped", Duration::from_secs(25), &mut seen);
    eprintln!("{stopped}");
    assert_eq!(stopped["reason"], "write error", "{stopped}");
    let error = stopped["snapshot"]["error"].as_str().expect("error named");
    assert!(error.contains("No space left on device"), "{error}");
    // Not restarted (and failed again) while the stream lasts.
    std::thread::sleep(Duration::from_secs(3));
    let again: Vec<Value> = ev.try_iter().collect();
    assert!(again.is_empty(), "events after the failure: {again:?}");
    let (o, text) = bench.join().expect("bench thread");
    assert!(
        matches!(ff.try_wait(), Ok(None)),
        "the publisher keeps publishing"
    );
    let _ = ff.kill();
    let _ = ff.wait();
    let s = &o.summary;
    assert_eq!(s.connected, 2, "{text}");
    assert_eq!(s.failed, 0, "{text}");
    assert_eq!(s.total_losses, 0, "{text}");
    for c in &o.clients {
        let v = c.video.as_ref().expect("video");
        assert!(
            v.frames > 500,
            "client_{}: {} frames in 20 s",
            c.id,
            v.frames
        );
    }
    server.stop();
}

/// A stream fed from the ring (the built-in clip, H264 + Opus packets as a WHIP publisher's
/// arrive) is recorded through the tap: started through the API, stopped, the file has
/// H264 and Opus and decodes without an error.
#[test]
fn ring_streams_h264_and_opus_are_recorded() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    let d = dir("ring");
    let cfg = common::config_file(
        "rec-ring",
        &format!(
            "[[app]]\nname = \"live\"\n[app.record]\npath = \"{}/%stream-%Y%m%d%H%M%S\"\n",
            d.display()
        ),
    );
    let server = Server::start(&["demo", "--config", cfg.to_str().expect("utf-8")]);
    let r = common::http_post(
        server.http,
        "/v1/streams/live/demo/recordings",
        "application/json",
        br#"{"id":"clip"}"#,
    )
    .expect("POST");
    assert_eq!(r.status, 201, "{}", r.text());
    std::thread::sleep(Duration::from_secs(8));
    let del =
        common::http_delete(server.http, "/v1/streams/live/demo/recordings/clip").expect("DELETE");
    assert_eq!(del.status, 204);
    let files = mp4s(&d);
    assert_eq!(files.len(), 1, "{files:?}");
    let (duration, streams) = ffprobe(&files[0]);
    eprintln!("clip recorded: {duration:.3} s, {streams:?}");
    assert!((5.0..=8.5).contains(&duration), "{duration}");
    assert!(
        streams.contains(&("video".into(), "h264".into())),
        "{streams:?}"
    );
    assert!(
        streams.contains(&("audio".into(), "opus".into())),
        "{streams:?}"
    );
    let (ok, errors, frames) = decode(&files[0]);
    assert!(ok && errors.trim().is_empty(), "decode errors:\n{errors}");
    assert!(frames > 100, "{frames} frames");
    server.stop();
    let _ = std::fs::remove_dir_all(&d);
}

/// Checks a recording of a push of `pushed` seconds of H264 + AAC: one file under `d`, with
/// a video and an audio track, its duration within 1 s of the push, decoded without an
/// error.
fn assert_recorded(d: &Path, pushed: f64, what: &str) {
    let files = mp4s(d);
    assert_eq!(files.len(), 1, "{what}: {files:?}");
    let (duration, streams) = ffprobe(&files[0]);
    eprintln!("{what} recorded: {duration:.3} s of {pushed:.3} s, {streams:?}");
    assert!(
        (duration - pushed).abs() <= 1.0,
        "{what}: duration {duration} s, pushed {pushed} s"
    );
    for (kind, codec) in [("video", "h264"), ("audio", "aac")] {
        assert!(
            streams.contains(&(kind.into(), codec.into())),
            "{what}: {streams:?}"
        );
    }
    let (ok, errors, frames) = decode(&files[0]);
    assert!(
        ok && errors.trim().is_empty(),
        "{what}: decode errors:\n{errors}"
    );
    // The video runs the file's length at 30 fps (within half a second): no stretch of the
    // recording lacks its picture.
    assert!(
        frames as f64 / 30.0 >= duration - 0.5,
        "{what}: {frames} frames in {duration} s"
    );
}

/// Acceptance (issue 51): ffmpeg publishing H264 + AAC in MPEG-TS over SRT to an app with
/// `record.enabled` is recorded, as an RTMP push is: one file with video and audio whose
/// duration is within 1 s of the push. (Before the one frame sink, SRT fed LL-HLS alone
/// and the recording held no media.)
#[test]
fn an_srt_push_is_recorded_with_video_and_audio() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    let d = dir("srt");
    let cfg = common::config_file(
        "rec-srt",
        &format!(
            "[[app]]\nname = \"live\"\n[app.record]\nenabled = true\npath = \"{}/%app/%stream-%Y%m%d%H%M%S\"\n",
            d.display()
        ),
    );
    let (server, srt) = Server::serve_srt(&cfg);
    let ev = events(server.http, None);
    // A keyframe every half second: the file starts at the first keyframe after the
    // recording did, so the GOP bounds what the start can miss of the push.
    let mut ff = Ffmpeg::push_ts(&format!("srt://{srt}?streamid=live/cam"), 20, &["-g", "15"]);
    let mut seen = Vec::new();
    let started = wait_event(&ev, "recording.started", Duration::from_secs(20), &mut seen);
    assert_eq!(started["stream"], "live/cam", "{started}");
    assert_eq!(
        ff.wait(Duration::from_secs(40)),
        Some(true),
        "{}",
        ff.log_tail()
    );
    let stopped = wait_event(&ev, "recording.stopped", Duration::from_secs(15), &mut seen);
    assert_eq!(stopped["reason"], "stream ended", "{stopped}");
    assert_recorded(&d, 20.0, "SRT push");
    server.stop();
    let _ = std::fs::remove_dir_all(&d);
}

/// Issue 55: a stream with a slate (`fallback = "clip"`) and `record.enabled` records its
/// publisher alone: nothing while the slate plays before the push, one file of the push's
/// length, ended ("stream ended") when the publisher leaves although the slate goes on.
#[test]
fn a_slate_is_not_recorded() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    let d = dir("slate");
    let cfg = common::config_file(
        "rec-slate",
        &format!(
            "[[app]]\nname = \"live\"\nstreams = [\"cam\"]\nfallback = \"clip\"\n[app.record]\nenabled = true\npath = \"{}/%app/%stream-%Y%m%d%H%M%S\"\n",
            d.display()
        ),
    );
    let (server, srt) = Server::serve_srt(&cfg);
    let ev = events(server.http, None);
    // The slate plays (the stream is live for viewers), and nothing is recorded.
    wait_live(server.http, "live/cam", &server);
    std::thread::sleep(Duration::from_secs(3));
    assert!(mp4s(&d).is_empty(), "{:?}", mp4s(&d));
    let mut ff = Ffmpeg::push_ts(&format!("srt://{srt}?streamid=live/cam"), 8, &["-g", "15"]);
    let mut seen = Vec::new();
    let started = wait_event(&ev, "recording.started", Duration::from_secs(20), &mut seen);
    assert_eq!(started["stream"], "live/cam", "{started}");
    assert_eq!(
        ff.wait(Duration::from_secs(30)),
        Some(true),
        "{}",
        ff.log_tail()
    );
    let stopped = wait_event(&ev, "recording.stopped", Duration::from_secs(15), &mut seen);
    assert_eq!(stopped["reason"], "stream ended", "{stopped}");
    // The slate is back on the stream, and the file holds the push alone.
    let r = common::http_get(server.http, "/v1/streams/live/cam").expect("GET stream");
    let v: Value = serde_json::from_slice(&r.body).expect("stream JSON");
    assert_eq!(v["snapshot"]["source"], "slate", "{v}");
    std::thread::sleep(Duration::from_secs(3));
    assert_recorded(&d, 8.0, "SRT push on a stream with a slate");
    server.stop();
    let _ = std::fs::remove_dir_all(&d);
}

/// Acceptance (issue 51): an RTSP camera (GStreamer's RTSP server, H264 + AAC) pulled always
/// on an app with `record.enabled` is recorded: one file with video and audio whose
/// duration is within 1 s of the time the camera was live, from its first frame to its
/// end. (Before the one frame sink, a camera's H264 reached neither the recorder's frames
/// nor its ring tap.)
#[test]
fn an_rtsp_camera_is_recorded_with_video_and_audio() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    let d = dir("rtsp");
    let port = common::free_tcp_port();
    let mut cam = crate::rtsp::Camera::start(port, &[]);
    let cfg = common::config_file(
        "rec-rtsp",
        &format!(
            "[[app]]\nname = \"cams\"\n[app.record]\nenabled = true\npath = \"{}/%app/%stream-%Y%m%d%H%M%S\"\n\n[[app.source]]\nstream = \"door\"\nurl = \"rtsp://127.0.0.1:{port}/cam\"\non_demand = false\n",
            d.display()
        ),
    );
    let server = Server::serve(&cfg);
    let ev = events(server.http, None);
    let mut seen = Vec::new();
    let started = wait_event(&ev, "recording.started", Duration::from_secs(20), &mut seen);
    assert_eq!(started["stream"], "cams/door", "{started}");
    wait_live(server.http, "cams/door", &server);
    // Live from its first frame (within one part of the recording's first keyframe).
    let live = Instant::now();
    std::thread::sleep(Duration::from_secs(15));
    cam.kill();
    let pushed = live.elapsed().as_secs_f64();
    let stopped = wait_event(&ev, "recording.stopped", Duration::from_secs(20), &mut seen);
    assert_eq!(stopped["reason"], "stream ended", "{stopped}");
    assert_recorded(&d, pushed, "RTSP camera");
    server.stop();
    let _ = std::fs::remove_dir_all(&d);
}
