//! Publishers that hold a stream without doing their part are ended and free it, against a
//! real `tern serve`: a WHIP offer whose sender never does ICE (`publisher_connect_timeout`)
//! and an RTMP encoder that stalls with its connection open (`publisher_timeout`). Each ends
//! with a `publisher.left` event giving the reason and a log line, and the next publisher
//! takes the stream.

use crate::common;

use std::time::{Duration, Instant};

use common::{Child, Ffmpeg, http_get, http_post, silent_offer};

type Events = tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<std::net::TcpStream>>;

/// The server's publisher events for `live/cam`.
fn events(server: &Child) -> Events {
    let (ws, _) = tungstenite::connect(format!(
        "ws://{}/v1/events?type=publisher.joined,publisher.left&stream=live/cam",
        server.http
    ))
    .expect("event stream");
    if let tungstenite::stream::MaybeTlsStream::Plain(s) = ws.get_ref() {
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
    }
    ws
}

/// The next event (type and reason).
fn next_event(ws: &mut Events) -> (String, String) {
    loop {
        if let tungstenite::Message::Text(t) = ws.read().expect("event") {
            let v: serde_json::Value = serde_json::from_str(t.as_str()).expect("json");
            let field = |k: &str| v[k].as_str().unwrap_or_default().to_string();
            return (field("type"), field("reason"));
        }
    }
}

fn post_offer(server: &Child, offer: &str) -> u16 {
    http_post(
        server.http,
        "/live/cam/whip",
        "application/sdp",
        offer.as_bytes(),
    )
    .expect("POST")
    .status
}

#[test]
fn a_whip_offer_that_never_connects_frees_its_stream_after_the_connect_timeout() {
    let _slot = crate::common::slot();
    let cfg = common::config_file(
        "whip",
        "[server]\npublisher_connect_timeout = 2\n\n[[app]]\nname = \"live\"\nstreams = [\"cam\"]\n",
    );
    // A process: the test reads its log.
    let (server, _) = Child::serve_rtmp(&cfg);
    let mut ws = events(&server);
    let offer = silent_offer();
    let posted = Instant::now();
    assert_eq!(post_offer(&server, &offer), 201);
    assert_eq!(next_event(&mut ws).0, "publisher.joined");
    // While it waits for ICE the stream is taken, as before.
    assert_eq!(
        post_offer(&server, &offer),
        409,
        "the slot is held while connecting"
    );

    assert_eq!(
        next_event(&mut ws),
        ("publisher.left".to_string(), "connect timeout".to_string())
    );
    let held = posted.elapsed();
    assert!(
        held >= Duration::from_millis(1900) && held < Duration::from_secs(6),
        "ended after {held:?}, the timeout is 2 s"
    );
    assert_eq!(
        http_get(server.http, "/v1/streams/live/cam/publisher")
            .expect("GET")
            .status,
        404
    );
    assert_eq!(post_offer(&server, &offer), 201, "the stream was freed");
    let log = server.log_tail(50);
    assert!(
        log.contains("publisher of live/cam ended: ICE and DTLS did not complete within 2s"),
        "no log line:\n{log}"
    );
    server.stop();
}

#[test]
fn an_rtmp_encoder_that_stalls_is_ended_after_the_media_timeout() {
    let _slot = crate::common::slot();
    let cfg = common::config_file(
        "rtmp",
        "[server]\npublisher_timeout = 2\n\n[[app]]\nname = \"live\"\nstreams = [\"cam\"]\n",
    );
    // A process: the test reads its log.
    let (server, rtmp) = Child::serve_rtmp(&cfg);
    let mut ws = events(&server);
    let url = format!("rtmp://{rtmp}/live/cam");
    let mut first = Ffmpeg::push(&url, 60);
    assert_eq!(next_event(&mut ws).0, "publisher.joined");
    // Media flows for a while, longer than the timeout: a live publisher is not ended.
    std::thread::sleep(Duration::from_secs(3));
    assert!(first.running(), "ffmpeg stopped:\n{}", first.log_tail());
    assert_eq!(
        http_get(server.http, "/v1/streams/live/cam/publisher")
            .expect("GET")
            .status,
        200,
        "a sending publisher keeps its stream"
    );

    // The encoder stalls with its TCP connection open (SIGSTOP): RTMP's own idle timeout is
    // 20 s, the media timeout ends it after 2.
    first.pause();
    let stalled = Instant::now();
    assert_eq!(
        next_event(&mut ws),
        ("publisher.left".to_string(), "media timeout".to_string())
    );
    let held = stalled.elapsed();
    assert!(
        held >= Duration::from_millis(1500) && held < Duration::from_secs(8),
        "ended {held:?} after the stall, the timeout is 2 s"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let log = server.log_tail(50);
        if log.contains("publisher of live/cam ended: no media for 2s")
            && log.contains("connection closed: publisher removed by the server")
        {
            break;
        }
        assert!(Instant::now() < deadline, "no log lines:\n{log}");
        std::thread::sleep(Duration::from_millis(100));
    }

    // The next encoder takes the stream.
    let _second = Ffmpeg::push(&url, 30);
    assert_eq!(next_event(&mut ws).0, "publisher.joined");
    server.stop();
}
