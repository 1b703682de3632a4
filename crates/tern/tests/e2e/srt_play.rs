//! SRT playback: a caller with `m=request` (SRT's access-control form) or MediaMTX's `read:`
//! gets the stream as MPEG-TS, read here by ffmpeg; twenty readers of a WHIP publisher's
//! stream (Opus audio) cost one AAC encoder; OvenMediaEngine's stream ID publishes.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{Child, http_get};

/// `tern demo` with SRT on a loopback port.
fn demo_with_srt() -> (Child, std::net::SocketAddr) {
    let server = Child::start(&["demo", "--candidate", "127.0.0.1", "--srt", "127.0.0.1:0"]);
    let srt = server.srt.expect("the server reports its SRT address");
    (server, srt)
}

/// ffmpeg reads `url` for `seconds` into an MPEG-TS file (copied): whether it succeeded,
/// and its errors.
fn read(url: &str, seconds: u32, out: &Path) -> (bool, String) {
    let o = Command::new("timeout")
        .args([
            &(seconds + 20).to_string(),
            "ffmpeg",
            "-hide_banner",
            "-nostdin",
        ])
        .args(["-v", "error", "-y", "-i", url, "-t", &seconds.to_string()])
        .args(["-c", "copy", "-f", "mpegts"])
        .arg(out)
        .stdin(Stdio::null())
        .output()
        .expect("ffmpeg");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// ffprobe's decoded frames per stream of `file`: (codec_name, codec_type, frames).
fn frames(file: &Path) -> Vec<(String, String, u64)> {
    let out = Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-count_frames",
            "-of",
            "json",
            "-show_streams",
        ])
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
                        s["nb_read_frames"]
                            .as_str()
                            .and_then(|n| n.parse().ok())
                            .unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A metric's value in `/metrics` (the first line that starts with `name `).
fn metric(server: &Child, name: &str) -> Option<u64> {
    let m = http_get(server.http, "/metrics").ok()?.text();
    m.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
}

/// Each request form, read for 10 s: at least 280 H264 frames and AAC audio decode, with
/// no decoder error; while it reads, the reader is a viewer with `signalling: "srt"`.
#[test]
fn srt_readers_get_the_stream_as_mpeg_ts() {
    let _slot = crate::common::slot();
    let (server, srt) = demo_with_srt();
    for (name, sid) in [
        ("access-control", "#!::r=live/demo,m=request"),
        ("mediamtx", "read:live/demo"),
    ] {
        let out =
            std::env::temp_dir().join(format!("tern-srt-read-{}-{name}.ts", std::process::id()));
        let url = format!("srt://{srt}?streamid={sid}&latency=120000");
        let reading = {
            let (url, out) = (url.clone(), out.clone());
            std::thread::spawn(move || read(&url, 10, &out))
        };
        // Meanwhile: the reader in the viewer snapshots.
        let deadline = Instant::now() + Duration::from_secs(8);
        let seen = loop {
            let v: Value = http_get(server.http, "/v1/streams/live/demo/viewers")
                .ok()
                .and_then(|r| serde_json::from_str(&r.text()).ok())
                .unwrap_or(Value::Null);
            let srt_viewer = v
                .as_array()
                .into_iter()
                .flatten()
                .find(|x| x["identity"]["signalling"] == "srt")
                .cloned();
            if srt_viewer.is_some() || Instant::now() > deadline {
                break srt_viewer;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        let (ok, errors) = reading.join().expect("ffmpeg thread");
        assert!(
            ok,
            "{name}: ffmpeg failed: {errors}\n{}",
            server.log_tail(20)
        );
        assert!(
            seen.is_some(),
            "{name}: no SRT viewer in /v1/streams/live/demo/viewers"
        );
        let f = frames(&out);
        let video = f.iter().find(|s| s.1 == "video").expect("a video stream");
        let audio = f.iter().find(|s| s.1 == "audio").expect("an audio stream");
        eprintln!("{name}: {f:?}");
        assert_eq!(video.0, "h264", "{f:?}");
        assert!(video.2 >= 280, "{name}: {} video frames in 10 s", video.2);
        assert_eq!(audio.0, "aac", "{f:?}");
        assert!(audio.2 >= 400, "{name}: {} AAC frames in 10 s", audio.2);
        let o = Command::new("ffmpeg")
            .args(["-hide_banner", "-nostdin", "-v", "error", "-i"])
            .arg(&out)
            .args(["-f", "null", "-"])
            .output()
            .expect("ffmpeg");
        let errors = String::from_utf8_lossy(&o.stderr);
        assert!(errors.trim().is_empty(), "{name}: decode errors:\n{errors}");
        let _ = std::fs::remove_file(out);
    }
    // A reader of a stream that does not exist is refused at the handshake.
    let out = std::env::temp_dir().join(format!("tern-srt-read-{}-none.ts", std::process::id()));
    let (ok, _) = read(&format!("srt://{srt}?streamid=read:live/nope"), 2, &out);
    assert!(!ok, "a reader of live/nope was served");
    let _ = std::fs::remove_file(out);
    let refused = http_get(server.http, "/metrics")
        .expect("metrics")
        .text()
        .lines()
        .any(|l| l.starts_with("tern_srt_refused_total{reason=\"not_found\"} 1"));
    assert!(refused, "{}", server.log_tail(10));
    server.stop();
}

/// Twenty readers of one WHIP publisher's stream (H264 and Opus, tern's own WHIP client):
/// one AAC encoder.
#[test]
fn twenty_srt_readers_of_a_whip_stream_share_one_aac_encoder() {
    let _slot = crate::common::slot();
    let cfg = crate::common::config_file("srt-readers", "[[app]]\nname = \"live\"\n");
    let (server, srt) = Child::serve_srt(&cfg);
    let clip = std::sync::Arc::new(tern_rtc::clip::Clip::builtin().expect("clip"));
    let whip = format!("http://{}/live/cam/whip", server.http);
    let mut publisher =
        tern_bench::publish::start(&whip, std::net::Ipv4Addr::LOCALHOST.into(), clip)
            .expect("WHIP publisher");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let p = http_get(server.http, "/v1/publishers")
            .expect("publishers")
            .text();
        if p.contains("live/cam") && p.contains("\"state\":\"live\"") && p.contains("whip") {
            break;
        }
        assert!(Instant::now() < deadline, "no live WHIP publisher: {p}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let readers: Vec<std::process::Child> = (0..20)
        .map(|_| {
            Command::new("timeout")
                .args(["30", "ffmpeg", "-hide_banner", "-nostdin", "-v", "error"])
                .args(["-i", &format!("srt://{srt}?streamid=read:live/cam")])
                .args(["-t", "12", "-c", "copy", "-f", "null", "-"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("ffmpeg")
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(15);
    while metric(&server, "tern_srt_readers") != Some(20) {
        assert!(
            Instant::now() < deadline,
            "readers: {:?}\n{}",
            metric(&server, "tern_srt_readers"),
            server.log_tail(20)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        metric(&server, "tern_aac_encoders"),
        Some(1),
        "one encoder for 20 readers"
    );
    let before = metric(&server, "tern_srt_reader_messages_total").unwrap_or(0);
    std::thread::sleep(Duration::from_secs(2));
    let after = metric(&server, "tern_srt_reader_messages_total").unwrap_or(0);
    assert!(
        after > before + 20 * 50,
        "messages went out: {before} → {after}"
    );
    assert_eq!(metric(&server, "tern_srt_reader_drops_total"), Some(0));
    for mut r in readers {
        let _ = r.kill();
        let _ = r.wait();
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while metric(&server, "tern_srt_readers") != Some(0) {
        assert!(Instant::now() < deadline, "readers left over");
        std::thread::sleep(Duration::from_millis(200));
    }
    // The outlet stopped with its last reader.
    let deadline = Instant::now() + Duration::from_secs(5);
    while metric(&server, "tern_aac_encoders") != Some(0) {
        assert!(
            Instant::now() < deadline,
            "the encoder outlived its readers"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    publisher.stop();
    server.stop();
}

/// OvenMediaEngine's stream ID (the whole `srt://HOST:PORT/APP/STREAM` URL, percent-encoded,
/// as its users type it into encoders) publishes.
#[test]
fn an_ome_stream_id_publishes() {
    let _slot = crate::common::slot();
    let cfg = crate::common::config_file("srt-ome", "[[app]]\nname = \"live\"\n");
    let (server, srt) = Child::serve_srt(&cfg);
    // Debian's ffmpeg 5.1 passes `streamid` as written.
    let sid = format!("srt%3A%2F%2F127.0.0.1%3A{}%2Flive%2Fomecam", srt.port());
    let mut ff = crate::common::Ffmpeg::push_ts(&format!("srt://{srt}?streamid={sid}"), 10, &[]);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let p = http_get(server.http, "/v1/publishers")
            .expect("publishers")
            .text();
        if p.contains("live/omecam") && p.contains("\"state\":\"live\"") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no live publisher: {p}\n{}\n{}",
            ff.log_tail(),
            server.log_tail(20)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    ff.kill();
    server.stop();
}

/// H265 from an SRT publisher (ffmpeg's libx265) reaches an SRT reader as H265 in MPEG-TS,
/// with its AAC (made Opus on the way in, AAC again on the way out), decoding cleanly.
#[test]
fn an_h265_stream_is_read_over_srt_as_h265() {
    let _slot = crate::common::slot();
    let cfg = crate::common::config_file("srt-hevc-read", "[[app]]\nname = \"live\"\n");
    let (server, srt) = Child::serve_srt(&cfg);
    let hevc = [
        "-c:v",
        "libx265",
        "-profile:v",
        "main",
        "-preset",
        "ultrafast",
        "-x265-params",
        "bframes=0:keyint=30:log-level=error",
    ];
    let mut ff =
        crate::common::Ffmpeg::push_ts(&format!("srt://{srt}?streamid=live/hevc"), 20, &hevc);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let p = http_get(server.http, "/v1/publishers")
            .expect("publishers")
            .text();
        if p.contains("live/hevc") && p.contains("\"state\":\"live\"") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no live publisher: {p}\n{}",
            ff.log_tail()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = std::env::temp_dir().join(format!("tern-srt-read-{}-hevc.ts", std::process::id()));
    let (ok, errors) = read(&format!("srt://{srt}?streamid=read:live/hevc"), 6, &out);
    assert!(ok, "ffmpeg failed: {errors}\n{}", server.log_tail(20));
    let f = frames(&out);
    eprintln!("hevc: {f:?}");
    let video = f.iter().find(|s| s.1 == "video").expect("a video stream");
    let audio = f.iter().find(|s| s.1 == "audio").expect("an audio stream");
    assert_eq!(video.0, "hevc", "{f:?}");
    assert!(video.2 >= 150, "{} video frames in 6 s", video.2);
    assert_eq!(audio.0, "aac", "{f:?}");
    assert!(audio.2 >= 200, "{} AAC frames in 6 s", audio.2);
    let o = Command::new("ffmpeg")
        .args(["-hide_banner", "-nostdin", "-v", "error", "-i"])
        .arg(&out)
        .args(["-f", "null", "-"])
        .output()
        .expect("ffmpeg");
    let errors = String::from_utf8_lossy(&o.stderr);
    assert!(errors.trim().is_empty(), "decode errors:\n{errors}");
    let _ = std::fs::remove_file(out);
    ff.kill();
    server.stop();
}
