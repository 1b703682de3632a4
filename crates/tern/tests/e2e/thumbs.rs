//! Thumbnails (issue 55): `GET /{app}/{stream}/thumb.jpg` of the built-in clip is a JPEG that
//! ffprobe reads at the stream's size (or `width`), follows the stream's keyframes, costs at
//! most one decode per keyframe under 100 requests a second, answers `If-None-Match` with
//! `304`, and goes through the play admission with action `thumbnail`.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common;
use common::hook::Hook;
use common::{Server, config_file, http_get, http_request_with};

/// (width, height) of an image or stream file, read by ffprobe.
fn probe_size(path: &std::path::Path) -> (u32, u32) {
    let out = Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-select_streams",
            "v:0",
            "-show_entries",
            "stream=width,height",
            "-of",
            "csv=p=0",
        ])
        .arg(path)
        .output()
        .expect("run ffprobe (Debian package ffmpeg)");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut it = text.trim().split(',').map(|n| n.parse::<u32>().ok());
    match (it.next().flatten(), it.next().flatten()) {
        (Some(w), Some(h)) => (w, h),
        _ => panic!(
            "ffprobe could not read {}: {}{}",
            path.display(),
            text,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// Writes `jpeg` to a temporary file and returns what ffprobe reads of it.
pub(crate) fn jpeg_size(name: &str, jpeg: &[u8]) -> (u32, u32) {
    let p = std::env::temp_dir().join(format!("tern-thumb-{}-{name}.jpg", std::process::id()));
    std::fs::write(&p, jpeg).expect("write jpeg");
    let size = probe_size(&p);
    let _ = std::fs::remove_file(&p);
    size
}

/// `tern_thumbnail_decodes_total` in /metrics.
fn decodes(server: &Server) -> u64 {
    let r = http_get(server.http, "/metrics").expect("GET /metrics");
    let text = r.text();
    text.lines()
        .find_map(|l| l.strip_prefix("tern_thumbnail_decodes_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no tern_thumbnail_decodes_total in /metrics"))
}

#[test]
fn the_demos_thumbnail_is_a_jpeg_that_follows_its_keyframes() {
    let _slot = crate::common::slot();
    let server = Server::demo();
    let clip = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets/clip/demo.h264");
    let (cw, ch) = probe_size(&clip);

    let first = http_get(server.http, "/live/demo/thumb.jpg").expect("GET thumb.jpg");
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(first.header("content-type"), Some("image/jpeg"));
    assert_eq!(
        jpeg_size("full", &first.body),
        (cw, ch),
        "the stream's own size"
    );
    let etag = first.header("etag").expect("an ETag").to_string();
    let cache = first.header("cache-control").expect("Cache-Control");
    assert!(cache.starts_with("max-age="), "{cache}");

    // The same picture again: 304 (unless a new keyframe came meanwhile: then a new ETag).
    let again = http_request_with(
        server.http,
        "GET",
        "/live/demo/thumb.jpg",
        &[("If-None-Match", &etag)],
        None,
        &[],
    )
    .expect("conditional GET");
    match again.status {
        304 => assert!(again.body.is_empty()),
        200 => assert_ne!(again.header("etag"), Some(etag.as_str())),
        s => panic!("conditional GET answered {s}"),
    }

    let small = http_get(server.http, "/live/demo/thumb.jpg?width=160").expect("GET width");
    assert_eq!(small.status, 200);
    let (sw, sh) = jpeg_size("small", &small.body);
    assert_eq!(sw, 160);
    assert!(sh.abs_diff(160 * ch / cw) <= 1, "{sw}x{sh} for {cw}x{ch}");

    // The clip has a keyframe every second: 1.5 s later the picture is another.
    std::thread::sleep(Duration::from_millis(1500));
    let later = http_get(server.http, "/live/demo/thumb.jpg").expect("GET later");
    assert_eq!(later.status, 200);
    assert_ne!(
        later.header("etag"),
        Some(etag.as_str()),
        "a new keyframe, a new ETag"
    );
    assert_ne!(later.body, first.body, "a new keyframe, another picture");

    // 100 requests in one second: at most one decode per keyframe (two in a second).
    let before = decodes(&server);
    let t0 = Instant::now();
    for i in 0..100u32 {
        let r = http_get(server.http, "/live/demo/thumb.jpg").expect("GET");
        assert_eq!(r.status, 200, "request {i}");
        let due = Duration::from_millis(10 * u64::from(i + 1));
        if let Some(wait) = due.checked_sub(t0.elapsed()) {
            std::thread::sleep(wait);
        }
    }
    let spent = t0.elapsed();
    let made = decodes(&server) - before;
    eprintln!("100 thumbnail requests in {spent:?}: {made} decodes");
    assert!(
        made <= 1 + spent.as_secs() + 1,
        "{made} decodes in {spent:?}"
    );

    for (path, status) in [
        ("/live/nope/thumb.jpg", 404),
        ("/live/demo/thumb.jpg?width=abc", 400),
        ("/live/demo/thumb.jpg?width=0", 400),
    ] {
        let r = http_get(server.http, path).expect("GET");
        assert_eq!(r.status, status, "{path}: {}", r.text());
    }
    server.stop();
}

#[test]
fn thumbnails_go_through_the_play_admission() {
    let _slot = crate::common::slot();
    let hook = Hook::start(|v| {
        if v["token"] == "bad" {
            json!({"allow": false, "reason": "not this one"})
        } else {
            json!({"allow": true})
        }
    });
    let cfg = config_file(
        "thumb-admission",
        &format!(
            "[[app]]\nname = \"live\"\nstreams = [\"cam\"]\n\n[app.admission]\nurl = \"{}\"\n",
            hook.url()
        ),
    );
    let server = Server::start(&["demo", "--config", cfg.to_str().expect("utf-8")]);
    let ok = http_get(server.http, "/live/demo/thumb.jpg?token=good").expect("GET");
    assert_eq!(ok.status, 200, "{}", ok.text());
    let asked = hook
        .wait_for(Duration::from_secs(2), |v| v["action"] == "thumbnail")
        .expect("the webhook was asked with action thumbnail");
    assert_eq!(asked["protocol"], "http");
    assert_eq!(asked["stream"], "demo");
    let denied = http_get(server.http, "/live/demo/thumb.jpg?token=bad").expect("GET");
    assert_eq!(denied.status, 403, "{}", denied.text());
    // A declared stream nobody publishes: no picture.
    let idle = http_get(server.http, "/live/cam/thumb.jpg?token=good").expect("GET");
    assert_eq!(idle.status, 404, "{}", idle.text());
    server.stop();
}

/// Waits (≤ 20 s) until `key` plays over WHEP.
fn wait_live(server: &Server, key: &str) {
    let w = tern_bench::signal::Whep::new(
        &format!("http://{}/{key}/whep", server.http),
        Duration::from_secs(2),
    );
    let end = Instant::now() + Duration::from_secs(20);
    while !w.live() {
        assert!(Instant::now() < end, "{key} did not go live");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// An RTMP publisher hands packagers its configurations when samples turn on; a packager
/// that starts reading later must get them too: LL-HLS after a thumbnail (stream a), and a
/// thumbnail (whose AVCC frames need the parameter sets) after LL-HLS (stream b).
#[test]
fn hls_and_thumbnails_of_an_rtmp_stream_in_either_order() {
    let _slot = crate::common::slot();
    let cfg = config_file("thumb-rtmp", "[[app]]\nname = \"live\"\n");
    let (server, rtmp) = Server::serve_rtmp(&cfg);
    let _a = common::Ffmpeg::push(&format!("rtmp://{rtmp}/live/a"), 40);
    let _b = common::Ffmpeg::push(&format!("rtmp://{rtmp}/live/b"), 40);
    wait_live(&server, "live/a");
    wait_live(&server, "live/b");

    let thumb = http_get(server.http, "/live/a/thumb.jpg").expect("GET thumb a");
    assert_eq!(thumb.status, 200, "{}", thumb.text());
    let hls = http_get(server.http, "/live/a/index.m3u8").expect("GET index a");
    assert_eq!(hls.status, 200, "LL-HLS after a thumbnail: {}", hls.text());
    assert!(hls.text().contains("#EXT-X-STREAM-INF"), "{}", hls.text());

    let hls = http_get(server.http, "/live/b/index.m3u8").expect("GET index b");
    assert_eq!(hls.status, 200, "{}", hls.text());
    let thumb = http_get(server.http, "/live/b/thumb.jpg").expect("GET thumb b");
    assert_eq!(
        thumb.status,
        200,
        "a thumbnail after LL-HLS: {}",
        thumb.text()
    );
    let (w, h) = jpeg_size("rtmp-b", &thumb.body);
    assert!(w > 0 && h > 0);
    server.stop();
}
