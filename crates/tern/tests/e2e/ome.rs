//! OvenMediaEngine-compatible WebSocket signalling against a real `tern demo`:
//! request_offer → offer → answer → media to a lean client over UDP; stop; malformed and
//! out-of-order commands (an OME-shaped error, then a close, and the server keeps serving);
//! a socket closed mid-handshake leaves no session behind (checked through the
//! `ome_signalling` pool of `GET /v1/memory`, the engine's viewer count in
//! `GET /v1/stats/current`, and the engine itself: the viewer's ICE credentials stop being
//! answered on the media port).

use std::io;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tern_proto::codec::MediaKind;
use tern_proto::sdp::SessionDescription;
use tern_proto::stun;
use tern_rtc::client::{Client, ClientOffer, ClientState, answer_offer};
use tern_rtc::viewer::DtlsContext;
use tungstenite::{Message, WebSocket};

use crate::common;
use common::{Child, Server, http_get};

type Ws = WebSocket<TcpStream>;

fn connect(http: SocketAddr, path: &str) -> Ws {
    let tcp = TcpStream::connect_timeout(&http, Duration::from_secs(5)).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let (ws, resp) =
        tungstenite::client(format!("ws://{http}{path}"), tcp).expect("WebSocket handshake");
    assert_eq!(resp.status().as_u16(), 101);
    ws
}

fn send(ws: &mut Ws, v: &Value) {
    ws.send(Message::text(v.to_string())).expect("send");
}

/// The next text frame as JSON; `None` when the server closed the socket.
fn recv(ws: &mut Ws) -> Option<Value> {
    loop {
        match ws.read() {
            Ok(Message::Text(t)) => {
                return Some(serde_json::from_str(t.as_str()).expect("frame is JSON"));
            }
            Ok(Message::Close(_)) => return None,
            Ok(_) => continue,
            Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => {
                return None;
            }
            // The server dropped the connection without a close frame (an abusive socket
            // closed mid-frame, under load): closed all the same.
            Err(tungstenite::Error::Protocol(
                tungstenite::error::ProtocolError::ResetWithoutClosingHandshake,
            )) => return None,
            Err(tungstenite::Error::Io(e)) if e.kind() != io::ErrorKind::WouldBlock => {
                return None;
            }
            Err(e) => panic!("reading the socket: {e}"),
        }
    }
}

/// Expects `{"code":code,"error":...}` and then the server closing the socket.
fn expect_error(ws: &mut Ws, code: u64, contains: &str, what: &str) {
    let v = recv(ws).unwrap_or_else(|| panic!("{what}: socket closed without an error message"));
    assert_eq!(v["code"], code, "{what}: {v}");
    let e = v["error"].as_str().unwrap_or_default();
    assert!(
        e.contains(contains),
        "{what}: error {e:?} lacks {contains:?}"
    );
    assert!(
        recv(ws).is_none(),
        "{what}: socket not closed after the error"
    );
}

/// A parsed offer message plus what a test needs from it.
struct Offer {
    id: i64,
    sdp: String,
    candidates: Vec<String>,
    ufrag: String,
    pwd: String,
}

fn request_offer(ws: &mut Ws) -> Offer {
    send(ws, &json!({"command": "request_offer"}));
    let v = recv(ws).expect("an offer");
    assert_eq!(v["command"], "offer", "{v}");
    assert_eq!(v["code"], 200);
    assert_eq!(v["peer_id"], 0);
    assert_eq!(v["sdp"]["type"], "offer");
    let id = v["id"].as_i64().expect("integer id");
    assert!((1..=i64::from(i32::MAX)).contains(&id));
    let sdp = v["sdp"]["sdp"].as_str().expect("sdp string").to_string();
    let candidates: Vec<String> = v["candidates"]
        .as_array()
        .expect("candidates array")
        .iter()
        .map(|c| c["candidate"].as_str().expect("candidate").to_string())
        .collect();
    let sd = SessionDescription::parse(&sdp).expect("offer parses");
    let m = &sd.media()[0];
    Offer {
        id,
        ufrag: m.ice_ufrag().expect("ufrag").to_string(),
        pwd: m.ice_pwd().expect("pwd").to_string(),
        sdp,
        candidates,
    }
}

/// The lean client's answer to `offer`, and the client ready to run.
fn answer(offer: &Offer, n: u64) -> (String, Client, String) {
    let ctx = Arc::new(DtlsContext::generate().expect("certificate"));
    let ufrag = format!("cl{n:02}");
    let co = ClientOffer {
        ufrag: ufrag.clone(),
        pwd: "leanClientPassword0123456".into(),
        rtcp: true,
        ntp_base: (Instant::now(), 0),
    };
    let cands: Vec<&str> = offer.candidates.iter().map(String::as_str).collect();
    let ca = answer_offer(&offer.sdp, &cands, &co, ctx.fingerprint())
        .expect("the lean client answers the offer");
    let client = Client::new(ca.params, ctx, Instant::now(), n);
    (ca.answer, client, ufrag)
}

fn send_answer(ws: &mut Ws, id: i64, sdp: &str) {
    send(
        ws,
        &json!({"command": "answer", "id": id, "peer_id": 0,
                "sdp": {"type": "answer", "sdp": sdp}}),
    );
}

/// Runs the client over UDP until `done` or the time is up.
fn pump(c: &mut Client, sock: &UdpSocket, limit: Duration, done: impl Fn(&Client) -> bool) {
    let end = Instant::now() + limit;
    let server = c.server();
    let mut buf = vec![0u8; 2048];
    while Instant::now() < end && !done(c) {
        c.handle_timeout(Instant::now());
        c.drain(&mut |d| {
            let _ = sock.send_to(d, server);
        });
        while let Ok((n, _)) = sock.recv_from(&mut buf) {
            c.handle_input(Instant::now(), &mut buf[..n]);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn packets(c: &Client, k: MediaKind) -> u64 {
    c.track(k).map_or(0, |t| t.packets)
}

/// Sends a binding request for the session `server_ufrag:client_ufrag` from a fresh socket
/// (no USE-CANDIDATE, so a live session keeps its path) and says whether the media port
/// answered within a second: whether the engine still holds that session.
fn engine_answers(media: SocketAddr, o: &Offer, client_ufrag: &str) -> bool {
    let sock = UdpSocket::bind("127.0.0.1:0").expect("probe socket");
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let user = format!("{}:{client_ufrag}", o.ufrag);
    let mut req = [0u8; 256];
    let tid = *b"probeprobe01";
    let n = stun::write_binding_request(
        &mut req,
        &tid,
        user.as_bytes(),
        o.pwd.as_bytes(),
        1,
        Some(1),
        false,
    )
    .expect("binding request");
    let mut buf = [0u8; 512];
    for _ in 0..5 {
        sock.send_to(&req[..n], media).expect("send probe");
        if let Ok((len, _)) = sock.recv_from(&mut buf)
            && stun::Message::parse(&buf[..len]).is_ok_and(|m| m.transaction_id() == &tid)
        {
            return true;
        }
    }
    false
}

/// Items and bytes of the `ome_signalling` pool from `GET /v1/memory`.
fn signalling_pool(http: SocketAddr) -> (u64, u64) {
    let r = http_get(http, "/v1/memory").expect("GET /v1/memory");
    assert_eq!(r.status, 200);
    let v: Value = serde_json::from_str(&r.text()).expect("memory JSON");
    v["pools"]
        .as_array()
        .expect("pools")
        .iter()
        .find(|p| p["name"] == "ome_signalling")
        .map_or((0, 0), |p| {
            (
                p["items_in_use"].as_u64().unwrap_or(0),
                p["used_bytes"].as_u64().unwrap_or(0),
            )
        })
}

/// The engine's viewer count (`totalConnections` of `GET /v1/stats/current`).
fn engine_viewers(http: SocketAddr) -> u64 {
    let r = http_get(http, "/v1/stats/current").expect("GET /v1/stats/current");
    assert_eq!(r.status, 200);
    let v: Value = serde_json::from_str(&r.text()).expect("stats JSON");
    v["response"]["totalConnections"]
        .as_u64()
        .expect("totalConnections")
}

/// Waits up to 3 s for the engine to hold `n` viewers.
fn wait_viewers(http: SocketAddr, n: u64) -> u64 {
    let end = Instant::now() + Duration::from_secs(3);
    loop {
        let v = engine_viewers(http);
        if v == n || Instant::now() > end {
            return v;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits up to 3 s for the `ome_signalling` pool to hold `items` sockets.
fn wait_pool(http: SocketAddr, items: u64) -> (u64, u64) {
    let end = Instant::now() + Duration::from_secs(3);
    loop {
        let p = signalling_pool(http);
        if p.0 == items || Instant::now() > end {
            return p;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn udp() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").expect("client socket");
    s.set_nonblocking(true).expect("nonblocking");
    s
}

#[test]
fn offer_answer_plays_then_stop_ends_the_viewer() {
    let _slot = crate::common::slot();
    let server = Server::demo();
    let mut ws = connect(server.http, "/live/demo");
    let offer = request_offer(&mut ws);
    assert!(offer.sdp.contains("a=setup:passive"), "{}", offer.sdp);
    assert!(offer.sdp.contains("a=ice-lite"));
    assert_eq!(offer.candidates.len(), 1);
    assert!(
        offer.candidates[0].ends_with(&format!("127.0.0.1 {} typ host", server.media.port())),
        "{:?}",
        offer.candidates
    );
    let (sdp, mut client, cufrag) = answer(&offer, 1);
    assert!(sdp.contains("a=setup:active"));
    send_answer(&mut ws, offer.id, &sdp);
    // Trickle a candidate as OvenPlayer does (mDNS and host forms): accepted silently.
    send(
        &mut ws,
        &json!({"command": "candidate", "id": offer.id, "peer_id": 0, "candidates": [
            {"candidate": "candidate:1 1 udp 2122260223 127.0.0.1 40000 typ host generation 0",
             "sdpMid": "0", "sdpMLineIndex": 0, "usernameFragment": cufrag},
            {"candidate": "candidate:2 1 udp 2122260223 3f2a.local 40001 typ host",
             "sdpMid": "0", "sdpMLineIndex": 0}]}),
    );
    let sock = udp();
    pump(&mut client, &sock, Duration::from_secs(10), |c| {
        packets(c, MediaKind::Video) >= 150 && packets(c, MediaKind::Audio) >= 100
    });
    assert_eq!(client.state(), ClientState::Connected);
    let (v, a) = (
        packets(&client, MediaKind::Video),
        packets(&client, MediaKind::Audio),
    );
    assert!(v >= 150 && a >= 100, "video {v} audio {a} packets in 10 s");
    let vt = client.track(MediaKind::Video).expect("video track");
    assert_eq!(vt.bad, 0, "SRTP failures");
    assert!(vt.keyframes >= 1, "no keyframe");
    assert_eq!(wait_pool(server.http, 1).0, 1);
    assert_eq!(engine_viewers(server.http), 1);
    assert!(
        engine_answers(server.media, &offer, &cufrag),
        "live session"
    );

    // stop: the viewer goes; the socket stays open and a new offer works on it.
    send(&mut ws, &json!({"command": "stop", "id": offer.id}));
    let end = Instant::now() + Duration::from_secs(3);
    while engine_answers(server.media, &offer, &cufrag) && Instant::now() < end {}
    assert!(
        !engine_answers(server.media, &offer, &cufrag),
        "session still answered after stop"
    );
    // Drain what was in flight before the removal, then watch for more.
    pump(&mut client, &sock, Duration::from_millis(300), |_| false);
    let before = packets(&client, MediaKind::Video);
    pump(&mut client, &sock, Duration::from_millis(500), |_| false);
    let after = packets(&client, MediaKind::Video);
    assert!(
        after - before <= 2,
        "media kept flowing after stop: +{}",
        after - before
    );
    assert_eq!(wait_viewers(server.http, 0), 0, "viewer count after stop");
    // The socket still works: a new offer, with a new id.
    let again = request_offer(&mut ws);
    assert_ne!(again.id, offer.id);
    assert_ne!(again.ufrag, offer.ufrag);
    // The stopped id is no longer valid.
    send(&mut ws, &json!({"command": "stop", "id": offer.id}));
    expect_error(&mut ws, 400, "Invalid ID", "stop after stop");
    assert_eq!(wait_pool(server.http, 0), (0, 0), "pool after close");
    server.stop();
}

#[test]
fn socket_closed_mid_handshake_leaves_no_session() {
    let _slot = crate::common::slot();
    let server = Server::demo();
    assert_eq!(signalling_pool(server.http), (0, 0));

    // Closed after the offer, before the answer: nothing was ever added to the engine.
    let mut ws = connect(server.http, "/live/demo");
    let offer = request_offer(&mut ws);
    let held = wait_pool(server.http, 1);
    assert!(
        held.1 > offer.sdp.len() as u64,
        "pending offer is counted: {held:?}"
    );
    ws.close(None).expect("close");
    let _ = recv(&mut ws);
    assert_eq!(wait_pool(server.http, 0), (0, 0));
    assert_eq!(engine_viewers(server.http), 0);

    // Closed after the answer, before ICE/DTLS: the viewer existed and must be gone.
    let mut ws = connect(server.http, "/live/demo");
    let offer = request_offer(&mut ws);
    let (sdp, _client, cufrag) = answer(&offer, 2);
    send_answer(&mut ws, offer.id, &sdp);
    let end = Instant::now() + Duration::from_secs(3);
    while !engine_answers(server.media, &offer, &cufrag) && Instant::now() < end {}
    assert!(
        engine_answers(server.media, &offer, &cufrag),
        "viewer not added after the answer"
    );
    assert_eq!(wait_viewers(server.http, 1), 1);
    drop(ws); // no close frame: the TCP connection just goes away
    let end = Instant::now() + Duration::from_secs(3);
    while engine_answers(server.media, &offer, &cufrag) && Instant::now() < end {}
    assert!(
        !engine_answers(server.media, &offer, &cufrag),
        "viewer still in the engine after its socket closed"
    );
    assert_eq!(wait_viewers(server.http, 0), 0);
    assert_eq!(wait_pool(server.http, 0), (0, 0));
    server.stop();
}

#[test]
fn malformed_and_out_of_order_commands_get_ome_errors() {
    let _slot = crate::common::slot();
    let server = Server::demo();
    let http = server.http;
    let raw = |frame: Message, code: u64, contains: &str, what: &str| {
        let mut ws = connect(http, "/live/demo");
        ws.send(frame).expect("send");
        expect_error(&mut ws, code, contains, what);
    };
    raw(
        Message::text("not json"),
        400,
        "Invalid request message",
        "not JSON",
    );
    raw(
        Message::text("[1,2]"),
        400,
        "Invalid request message",
        "array",
    );
    raw(
        Message::text("{}"),
        400,
        "Invalid request message",
        "no command",
    );
    raw(
        Message::binary(vec![0xff, 0xfe, 0x00]),
        400,
        "Invalid request message",
        "binary junk",
    );
    raw(
        Message::text(r#"{"command":"answer","sdp":{"type":"answer","sdp":"v=0"}}"#),
        400,
        "Invalid ID",
        "answer before any offer",
    );
    raw(
        Message::text(r#"{"command":"fly","id":1}"#),
        400,
        "Invalid ID",
        "unknown command, wrong id (OME checks the id first)",
    );
    {
        let mut ws = connect(http, "/live/nosuch");
        send(&mut ws, &json!({"command": "request_offer"}));
        expect_error(&mut ws, 404, "Cannot create offer", "unknown stream");
    }

    // With a valid offer id, each bad body.
    let cases: &[(&str, Value, u64, &str)] = &[
        (
            "wrong id",
            json!({"command":"answer","id":-5}),
            400,
            "Invalid ID",
        ),
        (
            "unknown",
            json!({"command":"fly"}),
            400,
            "Unknown command: fly",
        ),
        (
            "p2p",
            json!({"command":"offer_p2p"}),
            400,
            "P2P is not supported",
        ),
        (
            "no sdp",
            json!({"command":"answer"}),
            400,
            "There is no SDP",
        ),
        (
            "sdp type",
            json!({"command":"answer","sdp":{"type":"offer","sdp":"v=0"}}),
            400,
            "Invalid SDP type",
        ),
        (
            "sdp not string",
            json!({"command":"answer","sdp":{"type":"answer","sdp":[]}}),
            400,
            "SDP must be a string",
        ),
        (
            "garbage sdp",
            json!({"command":"answer","sdp":{"type":"answer","sdp":"hello"}}),
            400,
            "Could not parse SDP",
        ),
        (
            "no candidates",
            json!({"command":"candidate"}),
            400,
            "There is no candidate list",
        ),
        (
            "candidates object",
            json!({"command":"candidate","candidates":{}}),
            400,
            "Candidates must be array",
        ),
        (
            "bad candidate",
            json!({"command":"candidate","candidates":[{"candidate":"candidate:x"}]}),
            400,
            "Invalid candidate",
        ),
    ];
    for (what, body, code, contains) in cases {
        let mut ws = connect(http, "/live/demo");
        let offer = request_offer(&mut ws);
        let mut body = body.clone();
        if body.get("id").is_none() {
            body["id"] = json!(offer.id);
        }
        send(&mut ws, &body);
        expect_error(&mut ws, *code, contains, what);
    }

    // An answer that does not fit (DTLS passive) is refused with 403, as OME refuses.
    {
        let mut ws = connect(http, "/live/demo");
        let offer = request_offer(&mut ws);
        let (sdp, _c, _) = answer(&offer, 3);
        send_answer(
            &mut ws,
            offer.id,
            &sdp.replace("a=setup:active", "a=setup:passive"),
        );
        expect_error(&mut ws, 403, "setup", "passive answer");
    }
    // A second answer after the first was applied.
    {
        let mut ws = connect(http, "/live/demo");
        let offer = request_offer(&mut ws);
        let (sdp, _c, _) = answer(&offer, 4);
        send_answer(&mut ws, offer.id, &sdp);
        send_answer(&mut ws, offer.id, &sdp);
        expect_error(&mut ws, 400, "already applied", "second answer");
    }

    // After all that the server still serves: the page, WHEP's neighbour, and a new offer.
    assert_eq!(http_get(http, "/live/demo").expect("page").status, 200);
    let mut ws = connect(http, "/live/demo");
    let _ = request_offer(&mut ws);
    drop(ws);
    assert_eq!(wait_pool(http, 0), (0, 0), "every socket freed");
    assert_eq!(wait_viewers(http, 0), 0, "every viewer freed");
    server.stop();
}

/// `?transport=tcp` with TURN on: the offer carries the TURN-over-TCP server with REST
/// credentials, as `iceServers` (`username`) and OME's older `ice_servers` (`user_name`);
/// without the query, or without TURN, the offer has neither.
#[test]
fn transport_tcp_offers_turn_over_tcp() {
    let _slot = crate::common::slot();
    let plain = Server::demo();
    for path in ["/live/demo", "/live/demo?transport=tcp"] {
        let mut ws = connect(plain.http, path);
        send(&mut ws, &json!({"command": "request_offer"}));
        let v = recv(&mut ws).expect("offer");
        assert_eq!(v["command"], "offer");
        assert!(
            v.get("iceServers").is_none() && v.get("ice_servers").is_none(),
            "TURN is off, {path}: {v}"
        );
    }
    plain.stop();

    let server = Server::start(&[
        "demo",
        "--candidate",
        "127.0.0.1",
        "--turn",
        "127.0.0.1:0",
        "--turn-relay-ip",
        "127.0.0.1",
    ]);
    let mut ws = connect(server.http, "/live/demo");
    send(&mut ws, &json!({"command": "request_offer"}));
    let v = recv(&mut ws).expect("offer");
    assert!(v.get("iceServers").is_none(), "no ?transport=tcp: {v}");
    let mut ws = connect(server.http, "/live/demo?transport=tcp");
    send(&mut ws, &json!({"command": "request_offer"}));
    let v = recv(&mut ws).expect("offer");
    let s = &v["iceServers"][0];
    assert_eq!(
        s["urls"],
        json!([format!(
            "turn:127.0.0.1:{}?transport=tcp",
            server.turn.expect("TURN address").port()
        )]),
        "{v}"
    );
    let user = s["username"].as_str().expect("username");
    let (expiry, name) = user.split_once(':').expect("EXPIRY:NAME");
    assert_eq!(name, "ome");
    assert!(expiry.parse::<u64>().is_ok());
    assert!(!s["credential"].as_str().expect("credential").is_empty());
    assert_eq!(v["ice_servers"][0]["user_name"], s["username"]);
    assert_eq!(v["ice_servers"][0]["credential"], s["credential"]);
    server.stop();
}

/// Acceptance (hardening): a 10 MB frame, and a socket that connects and then says nothing,
/// are each closed with a logged reason within a bounded time (junk JSON is covered above),
/// while WHEP viewers of the same stream lose nothing.
#[test]
fn abusive_signalling_sockets_are_closed_and_nobody_else_notices() {
    let _slot = crate::common::slot();
    // A process: the test reads its log.
    let server = Child::demo();
    let http = server.http;
    let line =
        format!("bench -url http://{http}/live/demo/whep -n 5 -cint 20 -life 16 -sint 60000");
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        bench: tern_bench::BenchArgs,
    }
    let bench = std::thread::spawn(move || {
        let args = <Cli as clap::Parser>::parse_from(tern_bench::normalize_args(
            line.split_whitespace().map(String::from),
        ))
        .bench;
        let mut out = Vec::new();
        let o = tern_bench::run(
            &args,
            Arc::new(std::sync::atomic::AtomicBool::new(false)),
            &mut out,
        )
        .expect("bench");
        (o, String::from_utf8_lossy(&out).into_owned())
    });
    std::thread::sleep(Duration::from_secs(2));

    // 10 MB in one frame: closed at once, without the server buffering it.
    let mut big = connect(http, "/live/demo");
    let t = Instant::now();
    let _ = big.send(Message::text("x".repeat(10 << 20)));
    // Closed (a close frame, or a reset: the server stops reading mid-frame).
    loop {
        match big.read() {
            Ok(Message::Text(t)) => panic!("the socket answered a 10 MB frame: {t}"),
            Ok(Message::Close(_)) | Err(_) => break,
            Ok(_) => {}
        }
    }
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());

    // Connected, then silent: an error and a close after the 10 s idle timeout.
    let mut quiet = connect(http, "/live/demo");
    let t = Instant::now();
    expect_error(&mut quiet, 408, "Request timeout", "silence");
    let took = t.elapsed();
    assert!(
        took >= Duration::from_secs(9) && took < Duration::from_secs(15),
        "closed after {took:?}"
    );

    let log = server.log_tail(200);
    assert!(
        log.contains("OME signalling closed: nothing asked for 10s"),
        "{log}"
    );
    assert!(
        log.matches("OME signalling closed:").count() >= 2,
        "the oversized frame's close is not logged:\n{log}"
    );
    let (o, text) = bench.join().expect("bench thread");
    assert_eq!(o.summary.connected, 5, "{text}");
    assert_eq!(o.summary.total_losses, 0, "{text}");
    server.stop();
}
