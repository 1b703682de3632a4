//! SRT ingest (issue 36) against a real `tern serve --srt`: Debian's ffmpeg (libsrt 1.5)
//! publishes `testsrc` (H264) and `sine` (AAC) as MPEG-TS over SRT, with each stream ID form
//! and with a passphrase (pbkeylen 16 and 32); `srt-live-transmit` (Debian's srt-tools)
//! relays a TS; tern bench's WebRTC viewers receive H264 and Opus. Refusals (wrong
//! passphrase, unknown app, malformed stream ID, playback mode, a second publisher) happen
//! at the handshake, are counted, and disturb no viewer; 200 abandoned handshakes from one
//! address are held to the per-address limit and freed after 5 s.
//!
//! Traffic stays on loopback. The tests run one at a time (x264 encoders and viewers on a
//! small machine).

use crate::common;

use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::bench::viewers;
use common::{Child, Ffmpeg, Running, Server, http_get};
use serde_json::Value;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const PASS: &str = "correct horse battery";

fn wait_live(url: &str, server: &impl Running, ff: &mut Ffmpeg) {
    let whep = tern_bench::signal::Whep::new(url, Duration::from_secs(2));
    let deadline = Instant::now() + Duration::from_secs(15);
    while !whep.live() {
        assert!(
            Instant::now() < deadline,
            "{url} did not go live; ffmpeg:\n{}\nserver log:\n{}",
            ff.log_tail(),
            server.log_tail(30)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every viewer connected and got ~`secs` of 30 fps video with keyframes and 50/s Opus.
fn assert_played(o: &tern_bench::Outcome, text: &str, n: usize, secs: u64) {
    let s = &o.summary;
    assert_eq!(s.connected, n, "{text}");
    assert_eq!(s.failed, 0, "{text}");
    assert_eq!(s.total_losses, 0, "{text}");
    for c in &o.clients {
        let v = c.video.as_ref().expect("video");
        let a = c.audio.as_ref().expect("audio");
        assert!(
            v.frames > secs * 30 * 8 / 10,
            "client_{}: {} frames",
            c.id,
            v.frames
        );
        assert!(
            v.keyframes + 1 >= secs,
            "client_{}: {} keyframes",
            c.id,
            v.keyframes
        );
        assert!(
            a.packets > secs * 50 * 8 / 10,
            "client_{}: {} audio packets",
            c.id,
            a.packets
        );
    }
}

/// `/metrics` as text.
fn metrics(server: &impl Running) -> String {
    http_get(server.http(), "/metrics")
        .expect("GET /metrics")
        .text()
}

/// A metric's value (`name` with its labels, as it appears before the value).
fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

/// The publisher snapshots of `GET /v1/publishers`.
fn publishers(server: &impl Running) -> Vec<Value> {
    let r = http_get(server.http(), "/v1/publishers").expect("GET /v1/publishers");
    serde_json::from_slice::<Value>(&r.body)
        .expect("publishers JSON")
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn config() -> std::path::PathBuf {
    common::config_file(
        "srt",
        &format!(
            "[[app]]\nname = \"live\"\n\n[[app]]\nname = \"sec\"\nsrt_passphrase = \"{PASS}\"\nsrt_latency_ms = 200\n\n[[app]]\nname = \"tok\"\ntoken = \"T0K3N\"\n"
        ),
    )
}

/// Acceptance: ffmpeg publishes over SRT with each stream ID form, in the clear and with
/// pbkeylen 16 and 32; each stream plays to WebRTC viewers as H264 and Opus without loss;
/// the publisher snapshot says `srt`, with its figures and key length.
#[test]
fn ffmpeg_publishes_over_srt_in_each_stream_id_form_with_and_without_encryption() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    let (server, srt) = Server::serve_srt(&config());
    let cases = [
        ("live/bare", "streamid=live/bare".to_string(), None::<u64>),
        (
            "sec/ac",
            format!("streamid=#!::r=sec/ac,m=publish,u=enc&passphrase={PASS}&pbkeylen=16"),
            Some(16u64),
        ),
        (
            "sec/mtx",
            format!("streamid=publish:sec/mtx:user:pw&passphrase={PASS}&pbkeylen=32"),
            Some(32u64),
        ),
    ];
    for (key, query, key_len) in cases {
        let mut ff = Ffmpeg::push_ts(&format!("srt://{srt}?{query}"), 9, &[]);
        let whep = format!("http://{}/{key}/whep", server.http);
        wait_live(&whep, &server, &mut ff);
        let bench = viewers(format!(
            "-url {whep} -n 3 -cint 20 -life 4 -sint 5000 --json"
        ));
        let (o, text) = bench.join().expect("bench thread");
        assert_played(&o, &format!("{key}: {text}\n{}", server.log_tail(20)), 3, 4);
        let p = publishers(&server);
        let me = p
            .iter()
            .find(|p| p["identity"]["stream"] == key)
            .unwrap_or_else(|| panic!("{key} in {p:?}"));
        assert_eq!(me["identity"]["protocol"], "srt");
        assert_eq!(me["state"]["state"], "live");
        let s = &me["srt"];
        assert!(s["packets"].as_u64().is_some_and(|n| n > 100), "{me}");
        assert_eq!(s["key_length"].as_u64(), key_len, "{me}");
        assert_eq!(s["packets_undecrypted"], 0, "{me}");
        // The app's srt_latency_ms (sec: 200) or libsrt's 120, whichever is larger.
        let want = if key.starts_with("sec") { 200 } else { 120 };
        assert_eq!(s["latency_ms"].as_u64(), Some(want), "{me}");
        let (items, bytes) = common::pool_line(server.http, "srt_ingest");
        assert_eq!(items, 1, "one publisher thread booked");
        // The TS demuxer and the AAC decoder, resampler and Opus buffers: tens of KiB.
        assert!((1_000..8 << 20).contains(&bytes), "{bytes} bytes");
        assert!(ff.wait(Duration::from_secs(10)).is_some(), "ffmpeg ended");
    }
    // Every publisher gone: the pool is back to nothing.
    let deadline = Instant::now() + Duration::from_secs(5);
    while common::pool_line(server.http, "srt_ingest") != (0, 0) {
        assert!(
            Instant::now() < deadline,
            "{:?}",
            common::pool_line(server.http, "srt_ingest")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let m = metrics(&server);
    assert_eq!(metric(&m, "tern_srt_accepted_total"), 3, "{m}");
    server.stop();
}

/// Starts ffmpeg publishing to `url` and returns whether it was refused (exited with an
/// error within 10 s), and its log.
fn refused(url: &str) -> (bool, String) {
    let mut ff = Ffmpeg::push_ts(url, 5, &[]);
    match ff.wait(Duration::from_secs(10)) {
        Some(ok) => (!ok, ff.log_tail()),
        None => (false, ff.log_tail()),
    }
}

/// Refusals at the handshake: wrong and missing passphrase, unknown app, malformed stream ID,
/// a mode other than publish and request, a second publisher on a live stream. Each is counted under its reject
/// reason; the live stream's viewers lose nothing.
#[test]
fn refusals_happen_at_the_handshake_are_counted_and_disturb_nobody() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    // A process: the test reads its log.
    let (server, srt) = Child::serve_srt(&config());
    let mut live = Ffmpeg::push_ts(&format!("srt://{srt}?streamid=live/cam"), 16, &[]);
    let whep = format!("http://{}/live/cam/whep", server.http);
    wait_live(&whep, &server, &mut live);
    let bench = viewers(format!(
        "-url {whep} -n 2 -cint 20 -life 10 -sint 5000 --json"
    ));
    let cases = [
        (
            "streamid=sec/x&passphrase=wrong-passphrase&pbkeylen=16".to_string(),
            "bad_secret",
        ),
        ("streamid=sec/x".to_string(), "unsecure"),
        ("streamid=nope/x".to_string(), "not_found"),
        ("streamid=tok/x?token=wrong".to_string(), "unauthorized"),
        ("streamid=just-a-name".to_string(), "bad_request"),
        (
            "streamid=#!::r=live/cam,m=bidirectional".to_string(),
            "bad_mode",
        ),
        ("streamid=live/cam".to_string(), "conflict"),
    ];
    for (query, reason) in &cases {
        let (was_refused, log) = refused(&format!("srt://{srt}?{query}"));
        assert!(was_refused, "{query} was not refused:\n{log}");
        let m = metrics(&server);
        let n = metric(
            &m,
            &format!("tern_srt_refused_total{{reason=\"{reason}\"}}"),
        );
        assert_eq!(n, 1, "{query}: {reason}\n{}", server.log_tail(10));
    }
    let log = std::fs::read_to_string(&server.log).expect("log");
    assert!(log.contains("wrong passphrase for app sec"), "{log}");
    assert!(log.contains("is not APP/STREAM"), "{log}");
    assert!(
        log.contains("SRT callers publish (m=publish) or play (m=request)"),
        "{log}"
    );
    // The app's token, as MediaMTX's password and as the access-control form's `s=`.
    let _tokens = [
        Ffmpeg::push_ts(
            &format!("srt://{srt}?streamid=publish:tok/a:user:T0K3N"),
            6,
            &[],
        ),
        Ffmpeg::push_ts(&format!("srt://{srt}?streamid=#!::r=tok/b,s=T0K3N"), 6, &[]),
    ];
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let keys: Vec<Value> = publishers(&server)
            .iter()
            .map(|p| p["identity"]["stream"].clone())
            .collect();
        if keys.contains(&Value::from("tok/a")) && keys.contains(&Value::from("tok/b")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{keys:?}\n{}",
            server.log_tail(10)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (o, text) = bench.join().expect("bench thread");
    assert_played(&o, &text, 2, 10);
    assert!(
        live.running(),
        "the live publisher went on:\n{}",
        live.log_tail()
    );
    let m = metrics(&server);
    assert_eq!(metric(&m, "tern_srt_accepted_total"), 3, "{m}");
    server.stop();
}

/// A handshake induction (SRT v4 form, as libsrt's caller sends it first) from `socket`.
fn induction(socket_id: u32) -> Vec<u8> {
    let mut p = vec![0x80, 0x00, 0x00, 0x00]; // control, type 0 (handshake)
    p.extend([0u8; 4]); // type-specific
    p.extend([0u8; 4]); // timestamp
    p.extend([0u8; 4]); // destination socket 0: a new connection
    p.extend(4u32.to_be_bytes()); // version
    p.extend(0u16.to_be_bytes()); // encryption
    p.extend(2u16.to_be_bytes()); // extension field: SRT magic for an induction
    p.extend(0x1234_5678u32.to_be_bytes()); // initial sequence number
    p.extend(1500u32.to_be_bytes()); // MTU
    p.extend(8192u32.to_be_bytes()); // flow window
    p.extend(1u32.to_be_bytes()); // handshake type: induction
    p.extend(socket_id.to_be_bytes());
    p.extend(0u32.to_be_bytes()); // cookie
    p.extend([127, 0, 0, 1]);
    p.extend([0u8; 12]);
    p
}

/// 200 handshakes started and abandoned from one address: the per-address limit (8) holds
/// the state to 8 callers, the rest are dropped and counted; after the 5 s handshake
/// timeout the 8 are freed and a real encoder from the same address publishes.
#[test]
fn abandoned_handshakes_are_bounded_per_address_and_freed() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    let cfg = common::config_file(
        "srt-limit",
        "[limits]\nexempt = []\nsrt_connections_per_ip = 8\n\n[[app]]\nname = \"live\"\n",
    );
    let (server, srt) = Server::serve_srt(&cfg);
    let mut answered = 0;
    let mut sockets = Vec::new();
    let first_sent = Instant::now();
    // All 200 at once (well within the 5 s a handshake may take), then the answers.
    for i in 0..200u32 {
        let s = UdpSocket::bind("127.0.0.1:0").expect("bind");
        s.send_to(&induction(1000 + i), srt).expect("send");
        sockets.push(s);
    }
    std::thread::sleep(Duration::from_millis(500));
    for s in &sockets {
        s.set_nonblocking(true).expect("nonblocking");
        let mut buf = [0u8; 1500];
        if let Ok((n, _)) = s.recv_from(&mut buf) {
            // An induction response: a handshake control packet.
            assert!(n >= 64 && buf[0] == 0x80, "{n} bytes");
            answered += 1;
        }
    }
    assert!(first_sent.elapsed() < Duration::from_secs(4));
    assert_eq!(answered, 8, "only the per-address limit's worth got state");
    // The listener's figures reach /metrics once a second; the 8 are freed by the handshake
    // timeout (5 s).
    let started = Instant::now();
    let wait_for = |name: &str, want: u64, limit: Duration| loop {
        let m = metrics(&server);
        if metric(&m, name) == want {
            return started.elapsed();
        }
        assert!(started.elapsed() < limit, "{name} is not {want}:\n{m}");
        std::thread::sleep(Duration::from_millis(100));
    };
    wait_for("tern_srt_limited_total", 192, Duration::from_secs(3));
    wait_for(
        "tern_srt_handshake_timeouts_total",
        8,
        Duration::from_secs(8),
    );
    let freed = first_sent.elapsed();
    assert!(freed > Duration::from_secs(5), "freed after {freed:?}");
    drop(sockets);
    let mut ff = Ffmpeg::push_ts(&format!("srt://{srt}?streamid=live/after"), 6, &[]);
    let whep = format!("http://{}/live/after/whep", server.http);
    wait_live(&whep, &server, &mut ff);
    server.stop();
}

/// `srt-live-transmit` (Debian's srt-tools) relays a live TS (ffmpeg to UDP) to tern over
/// SRT; viewers get video and audio.
#[test]
fn srt_live_transmit_relays_a_ts_to_viewers() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    let (server, srt) = Server::serve_srt(&config());
    let udp = UdpSocket::bind("127.0.0.1:0").expect("a free UDP port");
    let port = udp.local_addr().expect("addr").port();
    drop(udp);
    let mut relay = Command::new("srt-live-transmit")
        .args([
            &format!("udp://127.0.0.1:{port}"),
            &format!(
                "srt://{srt}?streamid=#!::r=sec/relay,m=publish&passphrase={PASS}&pbkeylen=24"
            ),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn srt-live-transmit (scripts/install-deps.sh installs srt-tools)");
    std::thread::sleep(Duration::from_millis(300));
    let mut ff = Ffmpeg::push_ts(&format!("udp://127.0.0.1:{port}?pkt_size=1316"), 12, &[]);
    let whep = format!("http://{}/sec/relay/whep", server.http);
    wait_live(&whep, &server, &mut ff);
    let bench = viewers(format!(
        "-url {whep} -n 2 -cint 20 -life 5 -sint 5000 --json"
    ));
    let (o, text) = bench.join().expect("bench thread");
    let _ = relay.kill();
    let _ = relay.wait();
    assert_played(&o, &format!("{text}\n{}", server.log_tail(20)), 2, 5);
    let p = publishers(&server);
    let me = p.iter().find(|p| p["identity"]["stream"] == "sec/relay");
    assert!(me.is_none_or(|m| m["srt"]["key_length"] == 24), "{p:?}");
    server.stop();
}

/// A publisher that leaves and comes back within the stream's grace keeps the viewers:
/// they go on receiving after the second encoder starts (as RTMP's).
#[test]
fn a_returning_srt_publisher_keeps_the_viewers() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    let (server, srt) = Server::serve_srt(&config());
    let url = format!("srt://{srt}?streamid=live/back");
    let mut first = Ffmpeg::push_ts(&url, 5, &[]);
    let whep = format!("http://{}/live/back/whep", server.http);
    wait_live(&whep, &server, &mut first);
    let bench = viewers(format!(
        "-url {whep} -n 2 -cint 20 -life 10 -sint 5000 --json"
    ));
    assert!(
        first.wait(Duration::from_secs(10)).is_some(),
        "first encoder ended"
    );
    std::thread::sleep(Duration::from_millis(500));
    let mut second = Ffmpeg::push_ts(&url, 8, &[]);
    let (o, text) = bench.join().expect("bench thread");
    assert!(second.running() || second.wait(Duration::ZERO) == Some(true));
    let s = &o.summary;
    assert_eq!(s.connected, 2, "{text}");
    assert_eq!(s.failed, 0, "{text}");
    for c in &o.clients {
        let v = c.video.as_ref().expect("video");
        // Both encoders' video: more than the first's 5 s could give.
        assert!(
            v.frames > 7 * 30 * 8 / 10,
            "client_{}: {} frames\n{text}",
            c.id,
            v.frames
        );
    }
    server.stop();
}

/// H264 with B-frames over SRT takes RTMP's path: reported in the publisher snapshot and
/// transcoded to Baseline while viewers watch, who get smooth video without loss.
#[test]
fn b_frame_video_over_srt_is_transcoded_while_watched() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    // A process: the test reads its log.
    let (server, srt) = Child::serve_srt(&config());
    let mut ff = Ffmpeg::push_ts(
        &format!("srt://{srt}?streamid=live/bframes"),
        12,
        &["-profile:v", "main", "-bf", "2"],
    );
    let whep = format!("http://{}/live/bframes/whep", server.http);
    wait_live(&whep, &server, &mut ff);
    let bench = viewers(format!(
        "-url {whep} -n 2 -cint 20 -life 6 -sint 5000 --json"
    ));
    std::thread::sleep(Duration::from_secs(4));
    let p = publishers(&server);
    let me = p
        .iter()
        .find(|p| p["identity"]["stream"] == "live/bframes")
        .unwrap_or_else(|| panic!("{p:?}"));
    assert_eq!(me["video"]["b_frames"], true, "{me}");
    let (o, text) = bench.join().expect("bench thread");
    assert_played(&o, &format!("{text}\n{}", server.log_tail(20)), 2, 5);
    let log = std::fs::read_to_string(&server.log).expect("log");
    assert!(log.contains("sends B-frames"), "{log}");
    server.stop();
}

/// H265 in MPEG-TS (ffmpeg's libx265, stream type 0x24) with AAC over SRT is passed through
/// as a WHIP or RTSP publisher's H265: viewers that offer H265 are answered in it and get
/// every frame, keyframes led by the parameter sets, and the AAC as Opus; the stream's
/// snapshot says H265; a viewer that offers H264 alone is refused with the reason (422),
/// as for any H265 stream; its LL-HLS is `hvc1` CMAF that ffmpeg decodes as HEVC at its
/// size (issue 54); its thumbnail is a JPEG at its size.
#[test]
fn h265_over_srt_is_passed_through_to_viewers_that_offer_it() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    // A process: the test reads its log.
    let (server, srt) = Child::serve_srt(&config());
    let hevc = [
        "-c:v",
        "libx265",
        "-profile:v",
        "main",
        "-preset",
        "ultrafast",
        "-x265-params",
        "bframes=0:log-level=error",
    ];
    let mut ff = Ffmpeg::push_ts(&format!("srt://{srt}?streamid=live/hevc"), 12, &hevc);
    let whep = format!("http://{}/live/hevc/whep", server.http);
    wait_live(&whep, &server, &mut ff);
    let bench = viewers(format!(
        "-url {whep} -n 2 -cint 20 -life 5 -sint 5000 --all-video --json"
    ));
    // An H264-only offer (Chromium without H265, tern bench's default) is refused.
    let offer = common::whep_offer();
    let r = common::http_request(
        server.http,
        "POST",
        "/live/hevc/whep",
        Some("application/sdp"),
        offer.as_bytes(),
    )
    .expect("WHEP POST");
    assert_eq!(r.status, 422, "{}", r.text());
    assert!(
        r.text().contains("the stream's video is H265"),
        "{}",
        r.text()
    );
    let r = http_get(server.http, "/live/hevc/index.m3u8").expect("GET playlist");
    assert_eq!(r.status, 200, "{}", r.text());
    // Its thumbnail: a keyframe rebuilt from the H265 packets (RFC 7798) and decoded by
    // libavcodec, as a JPEG at the stream's size.
    let t = http_get(server.http, "/live/hevc/thumb.jpg").expect("GET thumb.jpg");
    assert_eq!(t.status, 200, "{}", t.text());
    assert_eq!(t.header("content-type"), Some("image/jpeg"));
    assert_eq!(crate::thumbs::jpeg_size("hevc", &t.body), (320, 240));
    let (o, text) = bench.join().expect("bench thread");
    let ctx = format!("{text}\n{}", server.log_tail(20));
    assert!(
        o.clients
            .iter()
            .all(|c| c.video_codec == tern_proto::codec::VideoCodec::H265),
        "{ctx}"
    );
    assert!(text.contains("\"video_codec\":\"H265\""), "{ctx}");
    // 30 fps, a keyframe a second (-g 30), 50 Opus frames a second, nothing lost.
    assert_played(&o, &ctx, 2, 5);
    let r = http_get(server.http, "/v1/streams/live/hevc").expect("GET stream");
    let v: Value = serde_json::from_slice(&r.body).expect("stream JSON");
    assert_eq!(v["video"]["codec"], "H265", "{v}");
    let log = std::fs::read_to_string(&server.log).expect("log");
    assert!(log.contains("video is H265"), "{log}");
    // LL-HLS: the playlist names hvc1 once the init segment exists, and ffmpeg decodes it.
    let index = wait_for_segment(&server, "/live/hevc");
    assert!(index.contains("CODECS=\"hvc1.1.6.L"), "{index}");
    let out = Command::new("ffmpeg")
        .args(["-hide_banner", "-nostdin", "-loglevel", "info", "-xerror"])
        .args([
            "-i",
            &format!("http://{}/live/hevc/index.m3u8", server.http),
        ])
        .args(["-t", "3", "-f", "null", "-"])
        .output()
        .expect("run ffmpeg");
    let flog = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{flog}\n{}", server.log_tail(20));
    assert!(flog.contains("Video: hevc"), "{flog}");
    assert!(flog.contains("320x240"), "{flog}");
    server.stop();
}

/// Waits (10 s at most) until the LL-HLS media playlist of `stream` (`/app/name`) lists a
/// whole segment, which ffmpeg's HLS reader wants in its first playlist; returns the
/// multivariant playlist's text then.
fn wait_for_segment(server: &impl common::Running, stream: &str) -> String {
    let index = http_get(server.http(), &format!("{stream}/index.m3u8"))
        .expect("index")
        .text();
    let media = index
        .lines()
        .find(|l| l.starts_with("media.m3u8"))
        .unwrap_or_else(|| panic!("{index}"))
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pl = http_get(server.http(), &format!("{stream}/{media}"))
            .expect("media playlist")
            .text();
        if pl.contains("#EXTINF") {
            assert!(!pl.contains("#EXT-X-DISCONTINUITY"), "{pl}");
            break;
        }
        assert!(Instant::now() < deadline, "no segment:\n{pl}");
        std::thread::sleep(Duration::from_millis(200));
    }
    http_get(server.http(), &format!("{stream}/index.m3u8"))
        .expect("index")
        .text()
}

/// LL-HLS packages an SRT stream: ffmpeg reads its playlist and gets H264 and AAC.
#[test]
fn ll_hls_plays_an_srt_stream() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    let (server, srt) = Server::serve_srt(&config());
    let mut ff = Ffmpeg::push_ts(&format!("srt://{srt}?streamid=live/hls"), 14, &[]);
    let whep = format!("http://{}/live/hls/whep", server.http);
    wait_live(&whep, &server, &mut ff);
    // ffmpeg's HLS reader wants a whole segment in its first playlist: wait for one (the
    // packager starts at the first keyframe after the first request).
    wait_for_segment(&server, "/live/hls");
    let out = Command::new("ffmpeg")
        .args(["-hide_banner", "-nostdin", "-loglevel", "info"])
        .args(["-i", &format!("http://{}/live/hls/index.m3u8", server.http)])
        .args(["-t", "3", "-f", "null", "-"])
        .output()
        .expect("run ffmpeg");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}\n{}", server.log_tail(20));
    assert!(log.contains("Video: h264"), "{log}");
    assert!(log.contains("Audio: aac"), "{log}");
    server.stop();
}

/// A lossy path between an SRT caller and tern, in user space: every datagram in either
/// direction is dropped with probability `loss` and delivered `delay` + up to `jitter` later
/// (so some arrive out of order). This kernel has no `sch_netem`, so the issue's
/// `tc netem loss 5% delay 40ms` is emulated here; the proxy binds loopback only.
struct LossyPath {
    /// Where the caller sends.
    front: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<(u64, u64)>>,
}

impl LossyPath {
    fn start(to: std::net::SocketAddr, loss: f64, delay: Duration, jitter: Duration) -> LossyPath {
        let front = UdpSocket::bind("127.0.0.1:0").expect("bind front");
        let back = UdpSocket::bind("127.0.0.1:0").expect("bind back");
        back.connect(to).expect("connect back");
        front.set_nonblocking(true).expect("nonblocking");
        back.set_nonblocking(true).expect("nonblocking");
        let addr = front.local_addr().expect("addr");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            // A fixed-seed LCG: the same run drops the same datagrams.
            let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
            let mut rnd = move || {
                seed = seed
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (seed >> 11) as f64 / (1u64 << 53) as f64
            };
            let mut client = None;
            let mut queue: Vec<(Instant, bool, Vec<u8>)> = Vec::new();
            let (mut passed, mut dropped) = (0u64, 0u64);
            let mut buf = vec![0u8; 65536];
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                for up in [true, false] {
                    loop {
                        let got = if up {
                            front.recv_from(&mut buf).map(|(n, a)| {
                                client = Some(a);
                                n
                            })
                        } else {
                            back.recv(&mut buf)
                        };
                        let Ok(n) = got else { break };
                        if rnd() < loss {
                            dropped += 1;
                            continue;
                        }
                        passed += 1;
                        let at = Instant::now() + delay + jitter.mul_f64(rnd());
                        queue.push((at, up, buf[..n].to_vec()));
                    }
                }
                let now = Instant::now();
                let mut i = 0;
                while i < queue.len() {
                    if queue[i].0 <= now {
                        let (_, up, data) = queue.swap_remove(i);
                        if up {
                            let _ = back.send(&data);
                        } else if let Some(c) = client {
                            let _ = front.send_to(&data, c);
                        }
                    } else {
                        i += 1;
                    }
                }
                std::thread::sleep(Duration::from_micros(500));
            }
            (passed, dropped)
        });
        LossyPath {
            front: addr,
            stop,
            thread: Some(thread),
        }
    }

    /// Stops it: (datagrams passed, dropped).
    fn stop(mut self) -> (u64, u64) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

/// The lossy path with the kernel's `tc netem`, when it has `sch_netem`: ffmpeg runs
/// in a network namespace made for the test, joined to this one by a veth pair whose two
/// ends each delay by 40 ms and drop 5 %; tern's SRT listener binds the host end's address.
/// Dropping it deletes the namespace (and the pair with it).
struct NetemPath {
    ns: String,
    /// tern's SRT address (the host end of the pair, port 0).
    listen: String,
}

impl NetemPath {
    /// The namespace and its lossy link, or why not (no `ip`, not root, no `sch_netem`).
    fn start() -> Result<NetemPath, String> {
        let id = std::process::id() % 250 + 1;
        let ns = format!("tern-srt-{}", std::process::id());
        let (host, inner) = (format!("tsh{id}"), format!("tsn{id}"));
        let run = |args: &[&str]| -> Result<(), String> {
            let out = Command::new(args[0])
                .args(&args[1..])
                .output()
                .map_err(|e| format!("{}: {e}", args.join(" ")))?;
            match out.status.success() {
                true => Ok(()),
                false => Err(format!(
                    "{}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                )),
            }
        };
        run(&["ip", "netns", "add", &ns])?;
        let path = NetemPath {
            ns: ns.clone(),
            listen: format!("10.201.{id}.1:0"),
        };
        let (a, b) = (format!("10.201.{id}.1/30"), format!("10.201.{id}.2/30"));
        let netem = ["netem", "loss", "5%", "delay", "40ms"];
        run(&[
            "ip", "link", "add", &host, "type", "veth", "peer", "name", &inner,
        ])?;
        run(&["ip", "link", "set", &inner, "netns", &ns])?;
        run(&["ip", "addr", "add", &a, "dev", &host])?;
        run(&["ip", "link", "set", &host, "up"])?;
        let exec = ["ip", "netns", "exec", &ns];
        run(&[&exec[..], &["ip", "addr", "add", &b, "dev", &inner]].concat())?;
        run(&[&exec[..], &["ip", "link", "set", &inner, "up"]].concat())?;
        run(&[&exec[..], &["ip", "link", "set", "lo", "up"]].concat())?;
        run(&[&["tc", "qdisc", "add", "dev", &host, "root"][..], &netem].concat())?;
        run(&[
            &exec[..],
            &["tc", "qdisc", "add", "dev", &inner, "root"],
            &netem,
        ]
        .concat())?;
        Ok(path)
    }
}

impl Drop for NetemPath {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

/// Acceptance (lossy path): ffmpeg (libsrt) publishes through 5 % loss and 40 ms delay each
/// way at latency 200 ms: with the kernel's `tc netem` when it has it ([`NetemPath`]), else
/// through [`LossyPath`] (the same figures, plus up to 10 ms of jitter that reorders
/// datagrams); the test prints which ran. SRT's retransmissions repair it; the WHEP viewers
/// lose at most 0.5 % of packets and never freeze for over 1 s.
#[test]
fn a_lossy_srt_path_is_repaired_and_viewers_do_not_freeze() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    let query = format!("streamid=sec/lossy&passphrase={PASS}&pbkeylen=16&latency=200000");
    let (server, mut ff, path, netem) = match NetemPath::start() {
        Ok(netem) => {
            eprintln!(
                "lossy path: tc netem loss 5% delay 40ms on a veth pair (namespace {})",
                netem.ns
            );
            let cfg = config();
            let server = Server::start(&[
                "serve",
                "--config",
                cfg.to_str().expect("utf-8 path"),
                "--candidate",
                "127.0.0.1",
                "--rtmp",
                "none",
                "--srt",
                &netem.listen,
            ]);
            let srt = server.srt.expect("the server reports its SRT address");
            let exec = ["ip", "netns", "exec", netem.ns.as_str()];
            let ff = Ffmpeg::push_ts_via(&exec, &format!("srt://{srt}?{query}"), 20);
            (server, ff, None, Some(netem))
        }
        Err(why) => {
            eprintln!(
                "lossy path: user-space proxy (5 % loss, 40 ms delay, 10 ms jitter each way); no tc netem: {why}"
            );
            let (server, srt) = Server::serve_srt(&config());
            let path = LossyPath::start(
                srt,
                0.05,
                Duration::from_millis(40),
                Duration::from_millis(10),
            );
            let ff = Ffmpeg::push_ts(&format!("srt://{}?{query}", path.front), 20, &[]);
            (server, ff, Some(path), None)
        }
    };
    let whep = format!("http://{}/sec/lossy/whep", server.http);
    wait_live(&whep, &server, &mut ff);
    let bench = viewers(format!(
        "-url {whep} -n 2 -cint 20 -life 15 -sint 5000 --json"
    ));
    let (o, text) = bench.join().expect("bench thread");
    let p = publishers(&server);
    let srt_figures = p
        .iter()
        .find(|p| p["identity"]["stream"] == "sec/lossy")
        .map(|p| p["srt"].clone())
        .unwrap_or_default();
    let (passed, dropped) = path.map(LossyPath::stop).unwrap_or_default();
    drop(netem);
    let s = &o.summary;
    assert_eq!(s.connected, 2, "{text}");
    let gaps = common::video_gaps_ms(&o);
    let mut report = format!(
        "proxy: {passed} datagrams passed, {dropped} dropped ({:.1} %); srt: {srt_figures}; viewers: max video gap {gaps:?} ms",
        dropped as f64 * 100.0 / (passed + dropped).max(1) as f64
    );
    let share = s.total_losses as f64 / (s.total_packets + s.total_losses).max(1) as f64;
    report += &format!(
        "; viewers: {} packets, {} lost ({:.3} %)",
        s.total_packets,
        s.total_losses,
        share * 100.0
    );
    for c in &o.clients {
        let v = c.video.as_ref().expect("video");
        report += &format!("; client_{}: {} frames", c.id, v.frames);
        assert!(v.frames > 15 * 30 * 8 / 10, "{report}\n{text}");
    }
    assert!(share <= 0.005, "{report}\n{text}");
    eprintln!("{report}");
    assert!(gaps.iter().all(|&g| g <= 1000), "{report}");
    // The path really lost packets and SRT really repaired them.
    assert!(
        srt_figures["packets_retransmitted"].as_u64() > Some(0),
        "{report}"
    );
    server.stop();
}
