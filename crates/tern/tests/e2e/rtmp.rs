//! RTMP ingest against a real `tern serve --rtmp`: Debian's ffmpeg pushes `testsrc` (H264
//! baseline) and `sine` (AAC) over RTMP, tern bench's viewers receive them over WebRTC (H264
//! RTP, Opus); a malformed connection, a second publisher and a wrong token are refused
//! alone; a publisher leaves and another arrives while the viewers stay connected; RTMPS.
//!
//! The tests here run one at a time (each runs x264 encoders and viewers on a small machine).

use crate::common;

use std::net::{SocketAddr, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::bench::viewers;
use common::{Child, Ffmpeg, Running, Server, http_get, rtmp_handshake as handshake};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn wait_live(url: &str, server: &impl Running) {
    let whep = tern_bench::signal::Whep::new(url, Duration::from_secs(2));
    let deadline = Instant::now() + Duration::from_secs(15);
    while !whep.live() {
        assert!(
            Instant::now() < deadline,
            "{url} did not go live; server log:\n{}",
            server.log_tail(30)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Acceptance: ffmpeg's RTMP push (H264 + AAC) reaches WebRTC viewers as H264 and Opus,
/// with zero loss and keyframes; the connection is accounted in `rtmp_ingest` while it
/// lasts and given back when it ends.
#[test]
fn ffmpeg_rtmp_push_reaches_webrtc_viewers() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    let cfg = common::config_file("push", "[[app]]\nname = \"live\"\nstreams = [\"cam\"]\n");
    let (server, rtmp) = Server::serve_rtmp(&cfg);
    let whep = format!("http://{}/live/cam/whep", server.http);
    let mut ff = Ffmpeg::push(&format!("rtmp://{rtmp}/live/cam"), 13);
    wait_live(&whep, &server);
    let bench = viewers(format!(
        "-url {whep} -n 10 -cint 20 -life 8 -sint 5000 --json"
    ));
    std::thread::sleep(Duration::from_secs(2));
    let (items, first) = common::pool_line(server.http, "rtmp_ingest");
    std::thread::sleep(Duration::from_secs(3));
    let (_, later) = common::pool_line(server.http, "rtmp_ingest");
    let (o, text) = bench.join().expect("bench thread");
    assert!(ff.running(), "ffmpeg ended early:\n{}", ff.log_tail());

    let s = &o.summary;
    assert_eq!(s.connected, 10, "{text}\n{}", server.log_tail(20));
    assert_eq!(s.failed, 0, "{text}");
    assert_eq!(s.total_losses, 0, "{text}");
    for c in &o.clients {
        let v = c.video.as_ref().expect("video");
        let au = c.audio.as_ref().expect("audio");
        // ~8 s at 30 fps with a keyframe every second.
        assert!(v.frames > 180, "client_{}: {} frames", c.id, v.frames);
        assert!(
            v.keyframes >= 6,
            "client_{}: {} keyframes",
            c.id,
            v.keyframes
        );
        // 20 ms Opus frames: 50 a second.
        assert!(
            au.packets > 300,
            "client_{}: {} audio packets",
            c.id,
            au.packets
        );
        assert!(v.latency_n > 0, "client_{}: no capture-time latency", c.id);
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

    eprintln!("rtmp_ingest: {items} connection, {first} then {later} bytes");
    // One connection in the pool, its heap steady while it streams (no per-packet growth).
    assert_eq!(items, 1);
    assert!(
        first > 64 * 1024 && first < 8 << 20,
        "rtmp_ingest {first} bytes"
    );
    assert!(
        later.abs_diff(first) < 256 * 1024,
        "{first} -> {later} bytes"
    );
    assert_eq!(
        ff.wait(Duration::from_secs(15)),
        Some(true),
        "{}",
        ff.log_tail()
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while common::pool_line(server.http, "rtmp_ingest") != (0, 0) {
        assert!(Instant::now() < deadline, "rtmp_ingest not given back");
        std::thread::sleep(Duration::from_millis(100));
    }
    server.stop();
}

/// RTMPS (issue 52, point 5): `server.rtmps` serves RTMP over TLS with the `tls_cert`
/// certificate; ffmpeg's push to `rtmps://` reaches WebRTC viewers as a plain one does, and
/// a client that speaks plain RTMP to the RTMPS port is closed.
#[test]
fn an_rtmps_push_reaches_webrtc_viewers() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    let dir = crate::https::temp_dir("rtmps");
    let (cert, key) = crate::https::write_pair(&dir, "rtmps");
    let cfg = common::config_file(
        "rtmps",
        &format!(
            "[server]\nrtmps = \"127.0.0.1:0\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n\n[[app]]\nname = \"live\"\nstreams = [\"cam\"]\n",
            cert.display(),
            key.display()
        ),
    );
    let server = Server::serve(&cfg);
    let rtmps = server.rtmps.expect("the server reports its RTMPS address");
    // A plain RTMP handshake to the TLS port is not TLS: the connection is closed.
    let mut plain = TcpStream::connect(rtmps).expect("connect");
    use std::io::Write;
    plain.write_all(&[3u8; 1537]).expect("C0+C1");
    assert!(closed_by_server(&mut plain, Duration::from_secs(5)));

    let whep = format!("http://{}/live/cam/whep", server.http);
    let mut ff = Ffmpeg::push(&format!("rtmps://{rtmps}/live/cam"), 10);
    wait_live(&whep, &server);
    let bench = viewers(format!(
        "-url {whep} -n 3 -cint 20 -life 5 -sint 5000 --json"
    ));
    let (o, text) = bench.join().expect("bench thread");
    let s = &o.summary;
    assert_eq!(s.connected, 3, "{text}\n{}", server.log_tail(20));
    assert_eq!(s.total_losses, 0, "{text}");
    for c in &o.clients {
        let v = c.video.as_ref().expect("video");
        let au = c.audio.as_ref().expect("audio");
        assert!(v.frames > 100 && v.keyframes >= 3, "client_{}: {v:?}", c.id);
        assert!(
            au.packets > 150,
            "client_{}: {} audio packets",
            c.id,
            au.packets
        );
    }
    assert_eq!(
        ff.wait(Duration::from_secs(15)),
        Some(true),
        "{}",
        ff.log_tail()
    );
    server.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Reads from `s` until the server closes it (EOF or reset), at most `limit`.
fn closed_by_server(s: &mut TcpStream, limit: Duration) -> bool {
    use std::io::Read;
    let deadline = Instant::now() + limit;
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => {}
        }
    }
    false
}

/// Acceptance: garbage after a good handshake closes only that connection, with a logged
/// reason; a second publisher to a live stream and a publisher without the app's token are
/// refused with a clear error; the live publisher and its viewers carry on without a loss.
#[test]
fn malformed_and_refused_publishers_affect_nobody_else() {
    use std::io::Write;
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    let cfg = common::config_file(
        "refuse",
        "[[app]]\nname = \"live\"\nstreams = [\"cam\"]\n\
         [[app]]\nname = \"sec\"\ntoken = \"s3cret\"\nstreams = [\"cam\"]\n",
    );
    // A process: the test reads its log.
    let (server, rtmp) = Child::serve_rtmp(&cfg);
    let whep = format!("http://{}/live/cam/whep", server.http);
    let mut a = Ffmpeg::push(&format!("rtmp://{rtmp}/live/cam"), 20);
    wait_live(&whep, &server);
    let bench = viewers(format!(
        "-url {whep} -n 5 -cint 20 -life 9 -sint 5000 --json"
    ));
    std::thread::sleep(Duration::from_secs(1));

    // Garbage after a good handshake: a chunk header of a 16 MiB message on chunk stream 3,
    // then random bytes.
    let mut bad = handshake(rtmp);
    let mut junk = vec![0x03, 0, 0, 0, 0xff, 0xff, 0xff, 0x14, 0, 0, 0, 0];
    let mut x = 0x1234_5678u32;
    junk.extend((0..4096).map(|_| {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x as u8
    }));
    let _ = bad.write_all(&junk);
    assert!(
        closed_by_server(&mut bad, Duration::from_secs(5)),
        "the malformed connection stays open"
    );

    // A second publisher on live/cam, and one without the token on sec/cam.
    let mut second = Ffmpeg::push(&format!("rtmp://{rtmp}/live/cam"), 3);
    let mut untokened = Ffmpeg::push(&format!("rtmp://{rtmp}/sec/cam"), 3);
    assert_eq!(
        second.wait(Duration::from_secs(15)),
        Some(false),
        "{}",
        second.log_tail()
    );
    assert_eq!(untokened.wait(Duration::from_secs(15)), Some(false));
    // With the token, sec/cam is published (the push runs to its end).
    let mut tokened = Ffmpeg::push(&format!("rtmp://{rtmp}/sec/cam?token=s3cret"), 2);
    assert_eq!(
        tokened.wait(Duration::from_secs(15)),
        Some(true),
        "{}",
        tokened.log_tail()
    );

    let (o, text) = bench.join().expect("bench thread");
    assert!(
        a.running(),
        "the first publisher was cut:\n{}",
        a.log_tail()
    );
    let s = &o.summary;
    assert_eq!(s.connected, 5, "{text}");
    assert_eq!(s.total_losses, 0, "{text}");
    for c in &o.clients {
        let v = c.video.as_ref().expect("video");
        assert!(v.frames > 200, "client_{}: {} frames", c.id, v.frames);
        assert!(
            v.max_gap < Duration::from_millis(500),
            "client_{}: {:?}",
            c.id,
            v.max_gap
        );
        assert!(
            c.audio.as_ref().expect("audio").packets > 350,
            "client_{}",
            c.id
        );
    }
    // Every refusal and close is logged with its reason.
    let log = std::fs::read_to_string(&server.log).unwrap_or_default();
    for want in [
        "connection closed: malformed RTMP stream",
        "NetStream.Publish.BadName): stream live/cam already has a publisher",
        "NetStream.Publish.Unauthorized): missing or wrong token for app sec",
        "publishing sec/cam",
    ] {
        assert!(log.contains(want), "no {want:?} in the server log:\n{log}");
    }
    // The API lists the publisher as RTMP and kicks it: its connection closes.
    let r = http_get(server.http, "/v1/streams/live/cam/publisher").expect("publisher");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("\"rtmp\""), "{}", r.text());
    let r = common::http_delete(server.http, "/v1/streams/live/cam/publisher").expect("kick");
    assert_eq!(r.status, 204, "{}", r.text());
    assert!(
        a.wait(Duration::from_secs(10)).is_some(),
        "ffmpeg still pushing after the kick"
    );
    let log = std::fs::read_to_string(&server.log).unwrap_or_default();
    assert!(
        log.contains("connection closed: publisher removed by the server"),
        "{log}"
    );
    server.stop();
}

/// Acceptance: the RTMP publisher's encoder dies and another connects; the viewers stay
/// connected and resume within one GOP of the new publisher, without renegotiation: the
/// same SSRCs and sequence numbers without a gap (no loss counted), on both tracks.
#[test]
fn rtmp_publisher_reconnects_and_viewers_resume() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    let cfg = common::config_file("again", "[[app]]\nname = \"live\"\nstreams = [\"cam\"]\n");
    // A process: the test reads its log.
    let (server, rtmp) = Child::serve_rtmp(&cfg);
    let whep = format!("http://{}/live/cam/whep", server.http);
    let url = format!("rtmp://{rtmp}/live/cam");
    let mut first = Ffmpeg::push(&url, 30);
    wait_live(&whep, &server);
    let bench = viewers(format!(
        "-url {whep} -n 10 -cint 20 -life 12 -sint 20000 --json"
    ));
    // The first encoder dies (SIGKILL: no unpublish, the TCP connection just ends).
    std::thread::sleep(Duration::from_secs(4));
    assert!(first.running(), "{}", first.log_tail());
    first.kill();
    std::thread::sleep(Duration::from_secs(1));
    let mut second = Ffmpeg::push(&url, 12);
    let (o, text) = bench.join().expect("bench thread");
    assert!(second.running(), "{}", second.log_tail());
    let s = &o.summary;
    assert_eq!(s.connected, 10, "{text}");
    for c in &o.clients {
        let v = c.video.as_ref().expect("video");
        let au = c.audio.as_ref().expect("audio");
        assert_eq!(v.lost(), 0, "client_{}", c.id);
        assert_eq!(au.lost(), 0, "client_{}", c.id);
        // The longest silence: the 1 s without a publisher, ffmpeg's start-up, and at most a
        // GOP (1 s; the first keyframe of the new publisher is its first frame).
        assert!(
            v.max_gap < Duration::from_millis(2600),
            "client_{}: video froze for {:?}",
            c.id,
            v.max_gap
        );
        assert!(v.max_gap > Duration::from_millis(900), "the gap was seen");
        assert!(v.frames > 250, "client_{}: {} frames", c.id, v.frames);
        assert!(
            v.keyframes >= 8,
            "client_{}: {} keyframes",
            c.id,
            v.keyframes
        );
        assert!(
            au.packets > 400,
            "client_{}: {} audio packets",
            c.id,
            au.packets
        );
    }
    let gaps = common::video_gaps_ms(&o);
    eprintln!("longest video gap per viewer across the reconnect (ms): {gaps:?}");
    let log = std::fs::read_to_string(&server.log).unwrap_or_default();
    assert_eq!(log.matches("publishing live/cam").count(), 2, "{log}");
    assert!(
        log.contains("connection closed: closed by the client"),
        "{log}"
    );
    server.stop();
}

/// One abusive connection: what it sends after connecting, and the reason the server must
/// log when it closes it.
struct Abuse {
    what: &'static str,
    handshake: bool,
    bytes: Vec<u8>,
    reason: &'static str,
}

/// An AMF0 command message (`connect`, transaction 1) whose argument is `arg` (raw AMF0).
fn command(arg: &[u8]) -> Vec<u8> {
    use tern_proto::rtmp::amf0::{Value, encode};
    let mut payload = Vec::new();
    encode(&Value::String("connect".into()), &mut payload).expect("encode");
    encode(&Value::Number(1.0), &mut payload).expect("encode");
    payload.extend_from_slice(arg);
    let mut out = Vec::new();
    tern_proto::rtmp::chunk::ChunkWriter::new()
        .write(3, 0, 20, 0, &payload, &mut out)
        .expect("chunk");
    out
}

/// A Set Chunk Size message (protocol control, chunk stream 2) announcing `size`.
fn set_chunk_size(size: u32) -> Vec<u8> {
    let mut out = Vec::new();
    tern_proto::rtmp::chunk::ChunkWriter::new()
        .write(2, 0, 1, 0, &size.to_be_bytes(), &mut out)
        .expect("chunk");
    out
}

/// Acceptance (hardening): chunk sizes of 0 and 2^31, a huge AMF string, AMF nested
/// 1,000 deep, a message header claiming 16 MiB, and connections that go silent before or
/// after the handshake are each closed with a logged reason within a bounded time, while a
/// live publisher's viewers lose nothing.
#[test]
fn rtmp_abuse_closes_only_the_abusive_connection() {
    use std::io::Write;
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    let cfg = common::config_file("abuse", "[[app]]\nname = \"live\"\nstreams = [\"cam\"]\n");
    // A process: the test reads its log.
    let (server, rtmp) = Child::serve_rtmp(&cfg);
    let whep = format!("http://{}/live/cam/whep", server.http);
    let mut publisher = Ffmpeg::push(&format!("rtmp://{rtmp}/live/cam"), 30);
    wait_live(&whep, &server);
    let bench = viewers(format!(
        "-url {whep} -n 5 -cint 20 -life 20 -sint 5000 --json"
    ));
    std::thread::sleep(Duration::from_secs(1));

    // A long string (AMF0 type 0x0c) that claims 2^31 - 1 bytes and brings 16.
    let mut huge_string = vec![0x0c, 0x7f, 0xff, 0xff, 0xff];
    huge_string.extend_from_slice(&[b'x'; 16]);
    // An object holding an object holding ... 1,000 deep.
    let mut deep = Vec::new();
    for _ in 0..1000 {
        deep.extend_from_slice(&[0x03, 0x00, 0x01, b'a']);
    }
    deep.push(0x05);
    let cases = [
        Abuse {
            what: "chunk size 0",
            handshake: true,
            bytes: set_chunk_size(0),
            reason: "malformed RTMP stream: invalid chunk size 0",
        },
        Abuse {
            what: "chunk size 2^31",
            handshake: true,
            bytes: set_chunk_size(0x8000_0000),
            reason: "malformed RTMP stream: invalid chunk size 2147483648",
        },
        Abuse {
            what: "an AMF string claiming 2 GiB",
            handshake: true,
            bytes: command(&huge_string),
            reason: "malformed RTMP stream: command: AMF0 value truncated",
        },
        Abuse {
            what: "AMF nested 1,000 deep",
            handshake: true,
            bytes: command(&deep),
            reason: "malformed RTMP stream: command: AMF0 values nested too deeply",
        },
        Abuse {
            what: "a 16 MiB message header",
            handshake: true,
            bytes: vec![0x03, 0, 0, 0, 0xff, 0xff, 0xff, 0x14, 0, 0, 0, 0],
            reason: "malformed RTMP stream: message of 16777215 bytes is too large",
        },
        Abuse {
            what: "silence after the handshake",
            handshake: true,
            bytes: Vec::new(),
            reason: "no publish within 15s",
        },
        Abuse {
            what: "silence after connecting",
            handshake: false,
            bytes: Vec::new(),
            reason: "no publish within 15s",
        },
    ];
    let started = Instant::now();
    let mut conns = Vec::new();
    for case in &cases {
        let mut s = if case.handshake {
            handshake(rtmp)
        } else {
            TcpStream::connect(rtmp).expect("connect")
        };
        s.write_all(&case.bytes).expect("send");
        conns.push(s);
    }
    // The silent ones wait out the 15 s publish timeout; the rest go at once.
    for (case, s) in cases.iter().zip(&mut conns) {
        let limit = Duration::from_secs(20).saturating_sub(started.elapsed());
        assert!(
            closed_by_server(s, limit),
            "{}: the connection is still open after {:?}",
            case.what,
            started.elapsed()
        );
    }
    let log = std::fs::read_to_string(&server.log).unwrap_or_default();
    for (case, s) in cases.iter().zip(&conns) {
        let me = s.local_addr().expect("local address");
        let want = format!("rtmp {me}: connection closed: {}", case.reason);
        assert!(log.contains(&want), "{}: no `{want}` in the log", case.what);
    }

    let (o, text) = bench.join().expect("bench thread");
    assert!(
        publisher.running(),
        "the publisher was cut:\n{}",
        publisher.log_tail()
    );
    assert_eq!(o.summary.connected, 5, "{text}");
    assert_eq!(o.summary.total_losses, 0, "{text}");
    server.stop();
}

/// Acceptance (hardening): one address holds at most `limits.rtmp_connections_per_ip` RTMP
/// connections; the next is closed at once with a logged reason, and a place comes back
/// when a connection ends.
#[test]
fn rtmp_connections_are_limited_per_address() {
    let _one = crate::common::serial(&ONE_AT_A_TIME);
    let cfg = common::config_file(
        "per-ip",
        "[limits]\nexempt = []\nrtmp_connections_per_ip = 2\n\n[[app]]\nname = \"live\"\nstreams = [\"cam\"]\n",
    );
    // A process: the test reads its log.
    let (server, rtmp) = Child::serve_rtmp(&cfg);
    let first = handshake(rtmp);
    let _second = handshake(rtmp);
    let mut third = TcpStream::connect(rtmp).expect("connect");
    assert!(
        closed_by_server(&mut third, Duration::from_secs(5)),
        "a third connection from the same address is let in"
    );
    let me = third.local_addr().expect("local address");
    let log = std::fs::read_to_string(&server.log).unwrap_or_default();
    let want =
        format!("rtmp {me}: refused: too many RTMP connections from this address (at most 2)");
    assert!(log.contains(&want), "no `{want}` in the log:\n{log}");

    // The first goes away; its place is given back.
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if handshake_or_refused(rtmp).is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "the place did not come back");
        std::thread::sleep(Duration::from_millis(100));
    }
    server.stop();
}

/// A handshake on a new connection, or None when the server closes it instead.
fn handshake_or_refused(rtmp: SocketAddr) -> Option<TcpStream> {
    use std::io::{Read, Write};
    use tern_proto::rtmp::{HANDSHAKE_SIZE, VERSION};
    let mut s = TcpStream::connect(rtmp).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut c0c1 = vec![VERSION];
    c0c1.extend(std::iter::repeat_n(7u8, HANDSHAKE_SIZE));
    s.write_all(&c0c1).ok()?;
    let mut s0s1s2 = vec![0u8; 1 + 2 * HANDSHAKE_SIZE];
    s.read_exact(&mut s0s1s2).ok()?;
    Some(s)
}
