//! RTSP cameras (issue 37) against a real camera: GStreamer's RTSP server
//! (`tests/rtsp/camera.py`, Debian's `gir1.2-gst-rtsp-server-1.0` and `python3-gi`) serving a
//! live H264 picture and AAC tone behind basic authentication, pulled by a real
//! `tern serve` with `[[app.source]]`, played by tern bench's WebRTC viewers (H264 and
//! Opus) and by LL-HLS. On demand: no connection to the camera before the first request,
//! the first frame within 3 s of it; the camera killed and started again: the same
//! viewers resume within 5 s of its return; a wrong password, an unreachable camera and a
//! picture size change (a new SPS) mid-stream are each handled; the password is found in
//! no API answer and not in the log. RTSPS (issue 56): the same server behind TLS with a
//! self-signed certificate, pulled over `rtsps://` with `tls_verify = false` or with the
//! certificate in `server.ca_file`, and refused when it is not trusted.
//!
//! Traffic stays on loopback. The tests run one at a time (x264 encoders and viewers on a
//! small machine).

use crate::common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::bench::viewers;
use common::{Child, Running, Server, free_tcp_port, http_get, http_request};
use serde_json::Value;
use tern_rtc::client::TrackStats;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Holds the cameras' lock: one test with a camera at a time (they share the machine's
/// encoders).
pub(crate) fn one_at_a_time() -> crate::common::Serial {
    crate::common::serial(&ONE_AT_A_TIME)
}

/// The camera's password: it must show up nowhere tern answers or logs.
const PASSWORD: &str = "Pw-0f-the-c4mera";

/// The GStreamer RTSP server of `tests/rtsp/camera.py` on a loopback port; killed on drop.
pub(crate) struct Camera {
    child: std::process::Child,
    port: u16,
    log: PathBuf,
    args: Vec<String>,
}

impl Camera {
    pub(crate) fn start(port: u16, args: &[&str]) -> Camera {
        let log = std::env::temp_dir().join(format!(
            "tern-rtsp-camera-{}-{port}.log",
            std::process::id()
        ));
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/rtsp/camera.py");
        let file = std::fs::File::create(&log).expect("camera log");
        let child = Command::new("/usr/bin/python3")
            .arg(script)
            .arg(port.to_string())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(file.try_clone().expect("log")))
            .stderr(Stdio::from(file))
            .spawn()
            .expect("spawn the camera (scripts/install-deps.sh installs python3-gi)");
        let cam = Camera {
            child,
            port,
            log,
            args: args.iter().map(|s| s.to_string()).collect(),
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        while !cam.text().contains("ready") {
            assert!(Instant::now() < deadline, "camera: {}", cam.text());
            std::thread::sleep(Duration::from_millis(50));
        }
        cam
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// RTSP connections the camera has accepted.
    fn connections(&self) -> usize {
        self.text().matches("client-connected").count()
    }

    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The same camera started again on its port.
    fn restart(mut self) -> Camera {
        self.kill();
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        Camera::start(self.port, &args)
    }
}

impl Drop for Camera {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A configuration with app `cams` and its sources (stream, URL, more keys).
fn config(name: &str, sources: &[(&str, String, &str)]) -> PathBuf {
    let mut body = String::from("[[app]]\nname = \"cams\"\nidle_grace_s = 2\n");
    for (stream, url, more) in sources {
        body.push_str(&format!(
            "\n[[app.source]]\nstream = \"{stream}\"\nurl = \"{url}\"\n{more}\n"
        ));
    }
    common::config_file(name, &body)
}

fn get_json(server: &impl Running, path: &str) -> (String, Value) {
    let r = http_get(server.http(), path).unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let text = r.text();
    let v = serde_json::from_str(&text).unwrap_or(Value::Null);
    (text, v)
}

/// The stream's `source` object in `GET /v1/streams/cams/{stream}`.
fn source(server: &impl Running, stream: &str) -> Value {
    get_json(server, &format!("/v1/streams/cams/{stream}")).1["source"].clone()
}

/// Waits (at most `limit`) until the source is in `state`; how long it took.
fn wait_state(server: &impl Running, stream: &str, state: &str, limit: Duration) -> Duration {
    let t0 = Instant::now();
    loop {
        let s = source(server, stream);
        if s["state"] == state {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < limit,
            "{stream} not {state} within {limit:?}: {s}\n{}",
            server.log_tail(20)
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// One `tern bench` viewer of `cams/{stream}` for 5 s, which must connect: its audio
/// track's figures, and the bench's output with the server's log for failure messages.
fn audio_of_one_viewer(server: &impl Running, stream: &str) -> (TrackStats, String) {
    let whep = format!("http://{}/cams/{stream}/whep", server.http());
    let (o, text) = viewers(format!(
        "-url {whep} -n 1 -cint 20 -life 5 -sint 5000 --json"
    ))
    .join()
    .expect("bench");
    let ctx = format!("{text}\n{}", server.log_tail(30));
    assert_eq!((o.summary.connected, o.summary.failed), (1, 0), "{ctx}");
    let a = o.clients[0].audio.clone().expect("audio");
    (a, ctx)
}

/// A metric's value (`name` with its labels, as it appears before the value).
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

/// Every API answer a client or operator reads, and the log: none holds the password.
fn assert_password_nowhere(server: &Child) {
    for path in [
        "/v1/streams",
        "/v1/streams/cams/door",
        "/v1/publishers",
        "/v1/apps",
        "/metrics",
    ] {
        let (text, _) = get_json(server, path);
        assert!(!text.contains(PASSWORD), "{path}: {text}");
    }
    let log = std::fs::read_to_string(&server.log).expect("log");
    assert!(
        !log.contains(PASSWORD),
        "the log holds the password:\n{log}"
    );
    assert!(log.contains("rtsp://***@127.0.0.1"), "{log}");
}

/// Acceptance: an on-demand camera (H264 + AAC, basic auth) is not connected before the
/// first request; WebRTC viewers get video and Opus audio, the first frame within 3 s of
/// the request; the camera is killed and started again and the same viewers resume within
/// 5 s of its return, with no loss in the stream's numbering; the pull stops after the
/// idle grace; LL-HLS plays it; the password is nowhere.
#[test]
fn an_on_demand_camera_plays_resumes_after_a_restart_and_stops_when_unwatched() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    let port = free_tcp_port();
    let mut cam = Camera::start(port, &["--user", "viewer", "--password", PASSWORD]);
    let url = format!("rtsp://viewer:{PASSWORD}@127.0.0.1:{port}/cam");
    // A process: the test reads its log (the password must not be in it).
    let server = Child::serve(&config("rtsp-door", &[("door", url, "")]));
    // On demand: nothing asked for it, nothing connects.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(cam.connections(), 0, "{}", cam.text());
    let s = source(&server, "door");
    assert_eq!(s["state"], "idle", "{s}");
    assert_eq!(s["protocol"], "rtsp", "{s}");
    assert_eq!(s["url"], format!("rtsp://***@127.0.0.1:{port}/cam"), "{s}");
    // A publisher on the camera's stream is refused.
    let whip = http_request(
        server.http,
        "POST",
        "/cams/door/whip",
        Some("application/sdp"),
        b"v=0\r\n",
    )
    .expect("WHIP POST");
    assert_eq!(whip.status, 409, "{}", whip.text());

    let whep = format!("http://{}/cams/door/whep", server.http);
    let bench = viewers(format!(
        "-url {whep} -n 2 -cint 20 -life 16 -sint 5000 --json"
    ));
    wait_state(&server, "door", "live", Duration::from_secs(5));
    // Both viewers connected and watching: the session's heap is one `rtsp_ingest` item,
    // bounded and steady.
    std::thread::sleep(Duration::from_secs(2));
    let (items, first) = common::pool_line(server.http, "rtsp_ingest");
    std::thread::sleep(Duration::from_secs(1));
    let (_, later) = common::pool_line(server.http, "rtsp_ingest");
    println!("rtsp_ingest: {items} session, {first} then {later} bytes");
    assert_eq!(items, 1);
    assert!(
        first > 10_000 && first < 8 << 20,
        "rtsp_ingest {first} bytes"
    );
    assert!(
        later.abs_diff(first) < 256 << 10,
        "{first} then {later} bytes"
    );
    // The camera goes away for 2 s.
    cam.kill();
    wait_state(&server, "door", "retrying", Duration::from_secs(5));
    std::thread::sleep(Duration::from_secs(2));
    let cam = cam.restart();
    let back = wait_state(&server, "door", "live", Duration::from_secs(5));
    let (o, text) = bench.join().expect("bench thread");
    let ctx = format!("{text}\n{}", server.log_tail(30));
    let s = &o.summary;
    assert_eq!((s.connected, s.failed), (2, 0), "{ctx}");
    for c in &o.clients {
        let first = c.signalling + c.times.first_frame.unwrap_or(Duration::MAX / 2);
        let v = c.video.as_ref().expect("video");
        let a = c.audio.as_ref().expect("audio");
        // About 16 s at 30 fps, less the camera's absence and its way back.
        assert!(
            v.frames > 7 * 30,
            "client_{}: {} frames\n{ctx}",
            c.id,
            v.frames
        );
        assert!(
            a.packets > 7 * 50,
            "client_{}: {} audio\n{ctx}",
            c.id,
            a.packets
        );
        // The returning camera continues the stream's numbering: nothing looks lost.
        assert_eq!(v.lost(), 0, "client_{}\n{ctx}", c.id);
        if c.id == 0 {
            assert!(
                first < Duration::from_secs(3),
                "first frame after {first:?}\n{ctx}"
            );
        }
    }
    println!("back live {back:?} after the camera's return");
    // The viewers resumed on the same sessions: the engine saw 2 viewers in all.
    let m = http_get(server.http, "/metrics").expect("metrics").text();
    assert!(
        metric(&m, "tern_source_connects_total{stream=\"cams/door\"}") >= 2.0,
        "{m}"
    );
    assert!(
        metric(
            &m,
            "tern_source_errors_total{stream=\"cams/door\",reason=\"camera error\"}"
        ) + metric(
            &m,
            "tern_source_errors_total{stream=\"cams/door\",reason=\"no media\"}"
        ) >= 1.0,
        "{m}"
    );
    // Unwatched for the idle grace (2 s): the pull stops, the camera is let go, and its
    // session's line is given back.
    wait_state(&server, "door", "idle", Duration::from_secs(6));
    assert_eq!(common::pool_line(server.http, "rtsp_ingest"), (0, 0));

    // LL-HLS wakes it too: the playlist comes once the camera's first keyframe is in.
    let t0 = Instant::now();
    let r = http_get(server.http, "/cams/door/index.m3u8").expect("playlist");
    assert_eq!(r.status, 200, "{}\n{}", r.text(), server.log_tail(20));
    assert!(r.text().contains("#EXTM3U"), "{}", r.text());
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    assert_password_nowhere(&server);
    drop(cam);
    server.stop();
}

/// A wrong password, an unreachable camera: each a `source.error` with its reason in the
/// snapshot and the metrics, the viewer's request answered 503 after the 5 s wait, the
/// retry going on; a camera whose picture size (SPS) changes mid-stream plays on.
#[test]
fn wrong_password_unreachable_camera_and_a_new_sps_are_handled() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    let port = free_tcp_port();
    let _cam = Camera::start(
        port,
        &[
            "--user",
            "viewer",
            "--password",
            PASSWORD,
            "--sps-change",
            "3",
        ],
    );
    let closed = common::ClosedPort::new();
    // A process: the test reads its log (the password must not be in it).
    let server = Child::serve(&config(
        "rtsp-errors",
        &[
            (
                "door",
                format!("rtsp://viewer:not-{PASSWORD}@127.0.0.1:{port}/cam"),
                "",
            ),
            ("gone", format!("rtsp://{}/cam", closed.addr()), ""),
            (
                "sps",
                format!("rtsp://viewer:{PASSWORD}@127.0.0.1:{port}/cam"),
                "",
            ),
        ],
    ));
    let (mut events, _) = tungstenite::connect(format!(
        "ws://{}/v1/events?type=source.error,source.changed&stream=cams/door",
        server.http
    ))
    .expect("event stream");
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = events.get_ref() {
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
    }
    for (stream, reason) in [("door", "auth failed"), ("gone", "unreachable")] {
        let t0 = Instant::now();
        let r = http_get(server.http, &format!("/cams/{stream}/index.m3u8")).expect("GET");
        assert_eq!(r.status, 503, "{stream}: {}", r.text());
        assert!(r.text().contains(reason), "{stream}: {}", r.text());
        assert!(t0.elapsed() < Duration::from_secs(7), "{:?}", t0.elapsed());
        let s = source(&server, stream);
        assert_eq!(s["last_error"]["reason"], reason, "{s}");
        assert!(
            ["retrying", "connecting"].contains(&s["state"].as_str().unwrap_or("")),
            "{s}"
        );
        let m = http_get(server.http, "/metrics").expect("metrics").text();
        let n = metric(
            &m,
            &format!("tern_source_errors_total{{stream=\"cams/{stream}\",reason=\"{reason}\"}}"),
        );
        // Tried at once, then after 1 s and 2 s of backoff, within the 5 s wait.
        assert!((2.0..=4.0).contains(&n), "{stream}: {n} attempts\n{m}");
    }
    // The camera's events: connecting, then the failed session, its reason and no password.
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|(t, _): &(String, String)| t == "source.error")
    {
        if let tungstenite::Message::Text(t) = events.read().expect("an event") {
            let v: Value = serde_json::from_str(t.as_str()).expect("event JSON");
            assert!(!t.as_str().contains(PASSWORD), "{t}");
            seen.push((
                v["type"].as_str().unwrap_or_default().to_string(),
                v["reason"].as_str().unwrap_or_default().to_string(),
            ));
        }
    }
    assert!(
        seen.contains(&("source.changed".into(), String::new())),
        "{seen:?}"
    );
    assert!(
        seen.contains(&("source.error".into(), "auth failed".into())),
        "{seen:?}"
    );
    // The new SPS: the picture goes from 640x360 to 320x240 after 3 s; viewers play on.
    let whep = format!("http://{}/cams/sps/whep", server.http);
    let (o, text) = viewers(format!(
        "-url {whep} -n 1 -cint 20 -life 8 -sint 5000 --json"
    ))
    .join()
    .expect("bench");
    let ctx = format!("{text}\n{}", server.log_tail(30));
    assert_eq!((o.summary.connected, o.summary.failed), (1, 0), "{ctx}");
    let v = o.clients[0].video.as_ref().expect("video");
    assert!(v.frames > 6 * 30, "{} frames\n{ctx}", v.frames);
    assert!(v.keyframes >= 6, "{} keyframes\n{ctx}", v.keyframes);
    let s = source(&server, "sps");
    assert_eq!(s["state"], "live", "{s}");
    assert!(s["last_error"].is_null(), "{s}");
    assert_password_nowhere(&server);
    server.stop();
}

/// An H265 camera with PCMU audio, over UDP: its video is passed through (a WHEP offer with H265 is
/// answered in H265; the stream's video is H265), its audio becomes Opus. An H264 camera
/// with PCMA audio: WebRTC viewers get its audio as Opus.
#[test]
fn h265_is_passed_through_g711_becomes_opus_and_opus_passes() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    let (p265, p711, popus) = (free_tcp_port(), free_tcp_port(), free_tcp_port());
    let _hevc = Camera::start(p265, &["--video", "h265", "--audio", "pcmu"]);
    let alaw = Camera::start(p711, &["--audio", "pcma"]);
    // Digest authentication (the others' is basic).
    let opus_args = [
        "--audio",
        "opus",
        "--user",
        "viewer",
        "--password",
        PASSWORD,
        "--digest",
    ];
    let _opus = Camera::start(popus, &opus_args);
    let server = Server::serve(&config(
        "rtsp-codecs",
        &[
            (
                "hevc",
                format!("rtsp://127.0.0.1:{p265}/cam"),
                "transport = \"udp\"",
            ),
            (
                "alaw",
                format!("rtsp://127.0.0.1:{p711}/cam"),
                "on_demand = false",
            ),
            (
                "opus",
                format!("rtsp://viewer:{PASSWORD}@127.0.0.1:{popus}/cam"),
                "on_demand = false",
            ),
        ],
    ));
    let offer = common::whep_offer_with(true);
    let r = http_request(
        server.http,
        "POST",
        "/cams/hevc/whep",
        Some("application/sdp"),
        offer.as_bytes(),
    )
    .expect("WHEP POST");
    assert_eq!(r.status, 201, "{}\n{}", r.text(), server.log_tail(20));
    let answer = r.text();
    assert!(answer.contains("H265/90000"), "{answer}");
    assert!(!answer.contains("H264/90000"), "{answer}");
    assert!(answer.contains("opus/48000"), "{answer}");
    // The pull notes the stream live at its next look (within 200 ms).
    wait_state(&server, "hevc", "live", Duration::from_secs(2));
    let (_, v) = get_json(&server, "/v1/streams/cams/hevc");
    assert_eq!(v["video"]["codec"], "H265", "{v}");
    assert_eq!(v["source"]["video"], "H265", "{v}");
    assert_eq!(v["source"]["audio"], "PCMU (to Opus)", "{v}");
    assert_eq!(v["source"]["transport"], "udp", "{v}");

    // `on_demand = false`: pulled from start-up, before any viewer; its session is a
    // publisher with protocol `rtsp`.
    wait_state(&server, "alaw", "live", Duration::from_secs(5));
    assert_eq!(alaw.connections(), 1, "{}", alaw.text());
    let (_, p) = get_json(&server, "/v1/publishers");
    let list = p.as_array().cloned().unwrap_or_default();
    let me = list
        .iter()
        .find(|p| p["identity"]["stream"] == "cams/alaw")
        .unwrap_or_else(|| panic!("cams/alaw in {p}"));
    assert_eq!(me["identity"]["protocol"], "rtsp", "{me}");
    let (a, ctx) = audio_of_one_viewer(&server, "alaw");
    // 50 Opus frames a second from the 8 kHz A-law.
    assert!(
        a.packets > 4 * 50 * 8 / 10,
        "{} audio packets\n{ctx}",
        a.packets
    );
    assert_eq!(source(&server, "alaw")["audio"], "PCMA (to Opus)");

    // An Opus camera's audio is passed through (retina's Opus depacketizer is tern's
    // patch, vendor/retina/PATCHES.md): 50 packets a second of opusenc's 20 ms frames.
    wait_state(&server, "opus", "live", Duration::from_secs(5));
    let (a, ctx) = audio_of_one_viewer(&server, "opus");
    assert!(
        a.packets > 4 * 50 * 8 / 10,
        "{} audio packets\n{ctx}",
        a.packets
    );
    assert_eq!(a.lost(), 0, "{ctx}");
    let src = source(&server, "opus");
    assert_eq!(
        (&src["video"], &src["audio"]),
        (&"H264".into(), &"Opus".into()),
        "{src}"
    );
    let m = http_get(server.http, "/metrics").expect("metrics").text();
    assert!(
        metric(
            &m,
            "tern_source_frames_total{stream=\"cams/hevc\",kind=\"video\"}"
        ) > 30.0,
        "{m}"
    );
    server.stop();
}

/// An app with a token: a request without it is refused and wakes no camera; with it, the
/// camera is pulled and the stream plays. An app with JWT admission: a request without a
/// valid JWT is refused by admission before the camera is dialled; with one it plays.
#[test]
fn a_camera_is_woken_only_for_a_client_with_the_apps_token() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    let port = free_tcp_port();
    let cam = Camera::start(port, &[]);
    let body = format!(
        "[[app]]\nname = \"cams\"\ntoken = \"T0K3N\"\n\n[[app.source]]\nstream = \"door\"\nurl = \"rtsp://127.0.0.1:{port}/cam\"\n\n\
         [[app]]\nname = \"jcams\"\njwt_secret = \"s3cret\"\n\n[[app.source]]\nstream = \"gate\"\nurl = \"rtsp://127.0.0.1:{port}/cam\"\n"
    );
    let server = Server::serve(&common::config_file("rtsp-token", &body));
    let r = http_get(server.http, "/cams/door/index.m3u8").expect("GET");
    assert_eq!(r.status, 401, "{}", r.text());
    // JWT: none, another stream's, and an expired one are refused with no camera dialled.
    let other = common::jwt("s3cret", "jcams/other", "play", 60);
    let expired = common::jwt("s3cret", "jcams/gate", "play", -10);
    for query in [
        String::new(),
        format!("?token={other}"),
        format!("?token={expired}"),
    ] {
        let r = http_get(server.http, &format!("/jcams/gate/index.m3u8{query}")).expect("GET");
        assert!(
            r.status == 401 || r.status == 403,
            "{query}: {} {}",
            r.status,
            r.text()
        );
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(cam.connections(), 0, "{}", cam.text());
    assert_eq!(source(&server, "door")["state"], "idle");
    let gate = get_json(&server, "/v1/streams/jcams/gate").1;
    assert_eq!(gate["source"]["state"], "idle", "{gate}");
    let r = common::http_request_with(
        server.http,
        "GET",
        "/cams/door/index.m3u8",
        &[("Authorization", "Bearer T0K3N")],
        None,
        b"",
    )
    .expect("GET with the token");
    assert_eq!(r.status, 200, "{}\n{}", r.text(), server.log_tail(20));
    assert_eq!(cam.connections(), 1, "{}", cam.text());
    let good = common::jwt("s3cret", "jcams/gate", "play", 60);
    let r = http_get(server.http, &format!("/jcams/gate/index.m3u8?token={good}")).expect("GET");
    assert_eq!(r.status, 200, "{}\n{}", r.text(), server.log_tail(20));
    assert_eq!(cam.connections(), 2, "{}", cam.text());
    server.stop();
}

/// A camera behind TLS (`camera.py --tls`: GStreamer's `RTSPAuth` TLS certificate, a
/// self-signed one for 127.0.0.1, with basic authentication inside): pulled over `rtsps://`
/// with `tls_verify = false`, a WHEP viewer gets its video and its audio (as Opus), and the
/// server warns of the unverified source once; the same camera with `tls_verify` left true
/// is a `camera error` naming the certificate, never live; trusted through `server.ca_file`
/// it plays with verification on.
#[test]
fn an_rtsps_camera_plays_unverified_or_through_ca_file_and_not_when_untrusted() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    let dir = crate::https::temp_dir("rtsps");
    let (cert, key) = crate::https::write_pair(&dir, "camera");
    let pem = dir.join("camera-cert-and-key.pem");
    let both = [&cert, &key]
        .map(|p| std::fs::read_to_string(p).expect("read PEM"))
        .concat();
    std::fs::write(&pem, both).expect("write PEM");
    let port = free_tcp_port();
    let cam = Camera::start(
        port,
        &[
            "--tls",
            pem.to_str().expect("utf-8"),
            "--user",
            "viewer",
            "--password",
            PASSWORD,
        ],
    );
    let url = format!("rtsps://viewer:{PASSWORD}@127.0.0.1:{port}/cam");
    // A process: the test reads its log (the warning, no password).
    let server = Child::serve(&config(
        "rtsps",
        &[
            ("tls", url.clone(), "tls_verify = false"),
            ("strict", url.clone(), ""),
        ],
    ));
    let s = source(&server, "tls");
    assert_eq!(s["url"], format!("rtsps://***@127.0.0.1:{port}/cam"), "{s}");

    // Unverified: plays, video and audio.
    let whep = format!("http://{}/cams/tls/whep", server.http);
    let (o, text) = viewers(format!(
        "-url {whep} -n 1 -cint 20 -life 6 -sint 5000 --json"
    ))
    .join()
    .expect("bench");
    let ctx = format!("{text}\n{}", server.log_tail(30));
    assert_eq!((o.summary.connected, o.summary.failed), (1, 0), "{ctx}");
    let c = &o.clients[0];
    let v = c.video.as_ref().expect("video");
    let a = c.audio.as_ref().expect("audio");
    assert!(v.frames > 4 * 30, "{} frames\n{ctx}", v.frames);
    assert!(v.keyframes >= 1, "{} keyframes\n{ctx}", v.keyframes);
    assert!(a.packets > 4 * 50, "{} audio packets\n{ctx}", a.packets);
    let src = source(&server, "tls");
    assert_eq!(
        (&src["video"], &src["audio"]),
        (&"H264".into(), &"AAC (to Opus)".into()),
        "{src}"
    );
    assert!(cam.connections() >= 1, "{}", cam.text());

    // Verified against the system's roots: the self-signed certificate is refused, the
    // viewer's request answered 503 with the reason, the error naming the certificate.
    let r = http_get(server.http, "/cams/strict/index.m3u8").expect("GET");
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("camera error"), "{}", r.text());
    let s = source(&server, "strict");
    assert_eq!(s["last_error"]["reason"], "camera error", "{s}");
    let message = s["last_error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("TLS handshake with RTSP server failed: invalid peer certificate"),
        "{s}"
    );
    assert!(message.contains("UnknownIssuer"), "{s}");
    assert_ne!(s["state"], "live", "{s}");
    let m = http_get(server.http, "/metrics").expect("metrics").text();
    assert_eq!(
        metric(
            &m,
            "tern_source_frames_total{stream=\"cams/strict\",kind=\"video\"}"
        ),
        0.0,
        "{m}"
    );
    let log = std::fs::read_to_string(&server.log).expect("log");
    assert_eq!(
        log.matches("rtsp cams/tls: tls_verify = false").count(),
        1,
        "{log}"
    );
    assert!(!log.contains("rtsp cams/strict: tls_verify"), "{log}");
    assert!(
        !log.contains(PASSWORD),
        "the log holds the password:\n{log}"
    );
    server.stop();

    // Trusted through server.ca_file: verified (chain and the IP SAN 127.0.0.1) and played.
    let body = format!(
        "[server]\nca_file = \"{}\"\n\n[[app]]\nname = \"cams\"\n\n\
         [[app.source]]\nstream = \"trusted\"\nurl = \"{url}\"\non_demand = false\n",
        cert.display()
    );
    let server = Server::serve(&common::config_file("rtsps-ca-file", &body));
    wait_state(&server, "trusted", "live", Duration::from_secs(8));
    let (a, ctx) = audio_of_one_viewer(&server, "trusted");
    assert!(a.packets > 3 * 50, "{} audio packets\n{ctx}", a.packets);
    assert!(source(&server, "trusted")["last_error"].is_null());
    server.stop();
    drop(cam);
    let _ = std::fs::remove_dir_all(&dir);
}
