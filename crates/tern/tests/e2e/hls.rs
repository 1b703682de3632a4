//! LL-HLS egress (issue 23) against a real `tern demo` (the clip stream: H264 and Opus from
//! the stream's ring, the WHIP path): the session flow, blocking reload, fMP4 bytes, the
//! refusals, admission by signed token, and packaging stopping (its memory freed) when the
//! last session goes. The RTMP path, ffmpeg reading the playlist and hls.js in Chromium are
//! in tests/browser/hls.test.mjs.

use crate::common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{Child, Server, config_file, http_get, http_request_with, jwt};
use serde_json::Value;

/// The top-level boxes of an MP4 byte string: (type, size).
fn boxes(mut b: &[u8]) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    while b.len() >= 8 {
        let size = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
        let kind = String::from_utf8_lossy(&b[4..8]).into_owned();
        assert!(
            size >= 8 && size <= b.len(),
            "box {kind} of size {size} in {} bytes",
            b.len()
        );
        out.push((kind, size));
        b = &b[size..];
    }
    assert!(b.is_empty(), "{} trailing bytes", b.len());
    out
}

/// The URI of the media playlist in a multivariant playlist.
fn variant(multivariant: &str) -> String {
    let mut lines = multivariant.lines();
    assert_eq!(lines.next(), Some("#EXTM3U"), "{multivariant}");
    let inf = lines
        .clone()
        .position(|l| l.starts_with("#EXT-X-STREAM-INF:BANDWIDTH="))
        .unwrap_or_else(|| panic!("no EXT-X-STREAM-INF: {multivariant}"));
    let uri = lines.nth(inf + 1).expect("a URI after EXT-X-STREAM-INF");
    assert!(uri.starts_with("media.m3u8?session="), "{uri}");
    uri.to_string()
}

/// The value of attribute `name` in a tag line.
pub(crate) fn attr<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let at = line.find(&format!("{name}="))? + name.len() + 1;
    let rest = &line[at..];
    Some(match rest.strip_prefix('"') {
        Some(q) => &q[..q.find('"')?],
        None => rest.split(',').next()?,
    })
}

fn get(http: SocketAddr, path: &str) -> common::HttpResponse {
    http_get(http, path).unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

fn memory_line(http: SocketAddr, name: &str) -> Option<Value> {
    let v: Value = serde_json::from_slice(&get(http, "/v1/memory").body).expect("JSON");
    v["pools"]
        .as_array()
        .expect("pools")
        .iter()
        .find(|p| p["name"] == name)
        .cloned()
}

#[test]
fn the_clip_is_served_as_ll_hls_with_blocking_reload() {
    let _slot = crate::common::slot();
    let cfg = config_file("hls", "[hls]\nsession_timeout_s = 5\n");
    // A process: the test reads its log, and `hls_segments` in /v1/memory, which every
    // server in a process shares, going back to 0.
    let server = Child::start(&["demo", "--config", cfg.to_str().expect("utf-8")]);
    let http = server.http;
    let base = "/live/demo";

    // Refusals first: no session, an unknown one, a missing stream, a bad resource.
    let r = get(http, &format!("{base}/media.m3u8"));
    assert_eq!(r.status, 403, "{}", r.text());
    let r = get(http, &format!("{base}/media.m3u8?session=nosuch"));
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.text().contains("load index.m3u8 again"), "{}", r.text());
    assert_eq!(get(http, "/live/nosuch/index.m3u8").status, 404);
    assert_eq!(get(http, &format!("{base}/x.ts")).status, 404);

    let r = get(http, &format!("{base}/index.m3u8"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("content-type"),
        Some("application/vnd.apple.mpegurl")
    );
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    assert_eq!(r.header("cache-control"), Some("no-cache"));
    let media = variant(&r.text());
    let session = media.split("session=").nth(1).expect("token").to_string();

    // The first media playlist waits for the first part (a keyframe was requested).
    let t0 = Instant::now();
    let r = get(http, &format!("{base}/{media}"));
    assert_eq!(r.status, 200, "{}", r.text());
    let first = t0.elapsed();
    let pl = r.text();
    for tag in [
        "#EXT-X-VERSION:9",
        "#EXT-X-TARGETDURATION:2",
        "#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=1.500",
        "#EXT-X-PART-INF:PART-TARGET=0.500",
        "#EXT-X-MEDIA-SEQUENCE:0",
        "#EXT-X-PROGRAM-DATE-TIME:",
        "#EXT-X-PRELOAD-HINT:TYPE=PART,URI=",
    ] {
        assert!(pl.contains(tag), "no {tag} in\n{pl}");
    }
    println!("first playlist after {first:?}");

    // The init segment and the first part, as CMAF boxes.
    let map = pl
        .lines()
        .find(|l| l.starts_with("#EXT-X-MAP:"))
        .expect("EXT-X-MAP");
    let init = get(http, &format!("{base}/{}", attr(map, "URI").expect("URI")));
    assert_eq!(init.status, 200);
    assert_eq!(init.header("content-type"), Some("video/mp4"));
    let kinds: Vec<String> = boxes(&init.body).into_iter().map(|b| b.0).collect();
    assert_eq!(kinds, ["ftyp", "moov"], "init segment boxes");
    let part = pl
        .lines()
        .find(|l| l.starts_with("#EXT-X-PART:"))
        .expect("a part");
    assert!(part.contains("INDEPENDENT=YES"), "{part}");
    let r = get(http, &format!("{base}/{}", attr(part, "URI").expect("URI")));
    assert_eq!(r.status, 200);
    let kinds: Vec<String> = boxes(&r.body).into_iter().map(|b| b.0).collect();
    assert_eq!(kinds, ["moof", "mdat"], "part boxes");
    assert!(
        r.header("cache-control")
            .is_some_and(|c| c.contains("max-age")),
        "parts are cacheable"
    );

    // Blocking reload: the hinted part, then a whole segment later.
    let hint = pl
        .lines()
        .find(|l| l.starts_with("#EXT-X-PRELOAD-HINT:"))
        .expect("hint");
    let uri = attr(hint, "URI").expect("URI");
    let (msn, rest) = uri.split_once('.').expect("msn.part");
    let p: u32 = rest.split('.').next().expect("part").parse().expect("n");
    let want = format!("URI=\"{msn}.{p}.m4s?session={session}\"");
    let r = get(
        http,
        &format!("{base}/media.m3u8?session={session}&_HLS_msn={msn}&_HLS_part={p}"),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains(&want), "{want} not in\n{}", r.text());
    assert!(
        r.header("cache-control")
            .is_some_and(|c| c.starts_with("public, max-age=")),
        "a blocking answer is cacheable"
    );
    // The hinted part itself, asked for before it exists, is answered once made.
    let next_hint = r
        .text()
        .lines()
        .find(|l| l.starts_with("#EXT-X-PRELOAD-HINT:"))
        .map(|l| attr(l, "URI").expect("URI").to_string())
        .expect("hint");
    let r = get(http, &format!("{base}/{next_hint}"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(boxes(&r.body)[0].0, "moof");
    // Too far ahead: 400.
    let far: u64 = msn.parse::<u64>().expect("msn") + 10;
    let r = get(
        http,
        &format!("{base}/media.m3u8?session={session}&_HLS_msn={far}"),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    // A whole segment: its parts concatenated.
    let seg = get(http, &format!("{base}/{msn}.m4s?session={session}"));
    assert_eq!(seg.status, 200, "{}", seg.text());
    let b = boxes(&seg.body);
    assert!(b.len() >= 4 && b.len().is_multiple_of(2), "{b:?}");
    assert!(b.chunks(2).all(|c| c[0].0 == "moof" && c[1].0 == "mdat"));

    // The metrics count the session, the packaged stream and what was served.
    let metrics = get(http, "/metrics").text();
    for line in [
        "tern_hls_sessions 1",
        "tern_hls_streams_packaged 1",
        "tern_hls_sessions_opened_total 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line:?} in /metrics"
        );
    }
    let served = metrics
        .lines()
        .find_map(|l| l.strip_prefix("tern_hls_media_total "))
        .and_then(|v| v.parse::<u64>().ok())
        .expect("tern_hls_media_total");
    assert!(served >= 4, "{served} parts, segments and inits served");
    // The packaged bytes are in the memory report while the session lasts...
    let line = memory_line(http, "hls_segments").expect("hls_segments line");
    assert!(
        line["used_bytes"].as_u64().expect("used") > 10_000,
        "{line}"
    );
    // ...and the packaging stops with the last session (5 s idle, then 5 s more).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let used = memory_line(http, "hls_segments")
            .and_then(|l| l["used_bytes"].as_u64())
            .unwrap_or(0);
        if used == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "still {used} bytes packaged");
        std::thread::sleep(Duration::from_millis(500));
    }
    let r = get(http, &format!("{base}/{media}"));
    assert_eq!(r.status, 403, "the idle session ended: {}", r.text());
    assert!(server.log_tail(50).contains("HLS packaging of stream"));
    server.stop();
}

#[test]
fn the_first_playlist_is_admitted_like_whep_and_hls_can_be_off() {
    let _slot = crate::common::slot();
    let cfg = config_file(
        "hls-jwt",
        "[[app]]\nname = \"live\"\njwt_secret = \"s3cret\"\n",
    );
    let server = Server::start(&["demo", "--config", cfg.to_str().expect("utf-8")]);
    let http = server.http;
    let r = get(http, "/live/demo/index.m3u8");
    assert_eq!(r.status, 401, "{}", r.text());
    assert!(r.text().contains("a signed token (JWT) is required"));
    let r = get(
        http,
        &format!(
            "/live/demo/index.m3u8?token={}",
            jwt("s3cret", "live/other", "play", 60)
        ),
    );
    assert_eq!(r.status, 403, "{}", r.text());
    // A Bearer header works as for WHEP.
    let auth = format!("Bearer {}", jwt("s3cret", "live/demo", "play", 60));
    let r = http_request_with(
        http,
        "GET",
        "/live/demo/index.m3u8",
        &[("Authorization", auth.as_str())],
        None,
        b"",
    )
    .expect("GET");
    assert_eq!(r.status, 200, "{}", r.text());
    // The session in the URIs needs no token after that.
    let media = variant(&r.text());
    let r = get(http, &format!("/live/demo/{media}"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("#EXT-X-PART:"));
    // The session is for this stream only.
    let r = get(http, &format!("/live/other/{media}"));
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(r.text().contains("another stream"), "{}", r.text());
    server.stop();

    let cfg = config_file("hls-off", "[hls]\nenabled = false\n");
    let server = Server::start(&["demo", "--config", cfg.to_str().expect("utf-8")]);
    let r = get(server.http, "/live/demo/index.m3u8");
    assert_eq!(r.status, 404, "{}", r.text());
    assert!(r.text().contains("hls.enabled = false"));
    server.stop();
}

/// Cold start for every HLS player (issue 39): `ffmpeg -i index.m3u8` as the very first
/// request to a live RTMP stream, nobody having read it before, so packaging starts with that
/// request. Players without LL-HLS read only complete segments; the first media playlist waits
/// for one (at most three segment targets) instead of answering with parts only. ffmpeg must
/// decode 10 s of video and audio with no error.
#[test]
fn ffmpeg_as_the_first_reader_of_a_live_stream_decodes_10_s() {
    let _slot = crate::common::slot();
    let cfg = config_file("cold", "[[app]]\nname = \"live\"\nstreams = [\"cam\"]\n");
    // A process: the test asserts that `hls_segments` in /v1/memory, which every server in
    // a process shares, is 0.
    let (server, rtmp) = Child::serve_rtmp(&cfg);
    let mut ff = common::Ffmpeg::push(&format!("rtmp://{rtmp}/live/cam"), 40);
    // Live is read through WHEP's HEAD, which starts no HLS packaging.
    let whep = format!("http://{}/live/cam/whep", server.http);
    let probe = tern_bench::signal::Whep::new(&whep, Duration::from_secs(2));
    let deadline = Instant::now() + Duration::from_secs(15);
    while !probe.live() {
        assert!(Instant::now() < deadline, "not live:\n{}", ff.log_tail());
        std::thread::sleep(Duration::from_millis(50));
    }
    let packaged = memory_line(server.http, "hls_segments")
        .and_then(|p| p["used_bytes"].as_u64())
        .unwrap_or(0);
    assert_eq!(
        packaged, 0,
        "nothing read the stream over HLS before ffmpeg"
    );

    let index = format!("http://{}/live/cam/index.m3u8", server.http);
    let out = std::process::Command::new("timeout")
        .args(["40", "ffmpeg", "-hide_banner", "-nostdin", "-v", "error"])
        .args(["-i", &index, "-map", "0:v:0", "-map", "0:a:0", "-t", "10"])
        .args(["-f", "framemd5", "-"])
        .output()
        .expect("run ffmpeg");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let frames = |stream: &str| {
        stdout
            .lines()
            .filter(|l| l.split(',').next().map(str::trim) == Some(stream))
            .count()
    };
    let (video, audio) = (frames("0"), frames("1"));
    eprintln!("cold start: {video} video and {audio} audio frames decoded; stderr: {stderr}");
    assert!(
        out.status.success(),
        "ffmpeg -i {index}: {}\n{stderr}\n{}",
        out.status,
        server.log_tail(20)
    );
    assert!(stderr.trim().is_empty(), "ffmpeg reported errors: {stderr}");
    // 10 s of 30 fps video and 44.1 kHz AAC (1024 samples a frame, ~430 in 10 s).
    assert!(video >= 280, "{video} video frames from 10 s at 30 fps");
    assert!(audio >= 400, "{audio} audio frames from 10 s of AAC");
    assert!(
        ff.running(),
        "the publisher ended early:\n{}",
        ff.log_tail()
    );
}
