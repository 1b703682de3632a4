//! Stopping and restarting a real `tern serve`: SIGTERM ends the process within 5 s even with
//! long-lived connections open (an event WebSocket, an OME signalling socket, a request half
//! sent, an RTMP publisher, WebRTC viewers); viewers and the WHIP publisher get a DTLS
//! close_notify and RTMP connections an orderly close (FIN, not a reset). After SIGKILL a new process binds the same HTTP, media,
//! RTMP and TURN ports at once, although the killed one left connections behind.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use clap::Parser;
use common::{Child, Ffmpeg, http_get, rtmp_handshake};
use tern_bench::BenchArgs;
use tern_rtc::clip::Clip;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    bench: BenchArgs,
}

fn config() -> PathBuf {
    let p = std::env::temp_dir().join(format!("tern-shutdown-{}.toml", std::process::id()));
    std::fs::write(
        &p,
        "[[app]]\nname = \"live\"\nstreams = [\"cam\", \"desk\"]\n",
    )
    .expect("write config");
    p
}

/// `tern demo` with RTMP and TURN on the given ports (HTTP and media too).
fn start(ports: &Ports) -> Child {
    let cfg = config();
    // A process: the tests send it SIGTERM or SIGKILL and read its log.
    Child::start_on(
        &[
            "demo",
            "--config",
            cfg.to_str().expect("utf-8 path"),
            "--candidate",
            "127.0.0.1",
            "--rtmp",
            &ports.rtmp.to_string(),
            "--turn",
            &ports.turn.to_string(),
            "--turn-user",
            "u:p",
            "--turn-relay-ip",
            "127.0.0.1",
        ],
        &ports.http.to_string(),
        &ports.media.to_string(),
    )
}

struct Ports {
    http: SocketAddr,
    media: SocketAddr,
    rtmp: SocketAddr,
    turn: SocketAddr,
}

impl Ports {
    /// Any ports: the server binds what the kernel gives.
    fn any() -> Ports {
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        Ports {
            http: any,
            media: any,
            rtmp: any,
            turn: any,
        }
    }

    /// The ports `server` reports it bound.
    fn of(server: &Child) -> Ports {
        Ports {
            http: server.http,
            media: server.media,
            rtmp: server.rtmp.expect("RTMP is on"),
            turn: server.turn.expect("TURN is on"),
        }
    }
}

/// Opens what a running service has open: an event WebSocket, an OME signalling socket that
/// asked for an offer, a keep-alive HTTP connection, an RTMP publisher and a TURN TCP
/// connection. Returns what must stay alive.
fn long_lived(server: &Child, ports: &Ports) -> Vec<Box<dyn std::any::Any>> {
    let a = server.http;
    let (events, _) = tungstenite::connect(format!("ws://{a}/v1/events")).expect("events");
    let (mut ome, _) = tungstenite::connect(format!("ws://{a}/live/demo")).expect("ome");
    ome.send(tungstenite::Message::text(r#"{"command":"request_offer"}"#))
        .expect("request_offer");
    let offer = ome.read().expect("offer");
    assert!(offer.to_string().contains("\"offer\""), "{offer}");
    let mut keep_alive = TcpStream::connect(a).expect("http");
    keep_alive
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("request");
    // A client in the middle of sending its request headers (slow, or a slowloris).
    let mut half = TcpStream::connect(a).expect("http");
    half.write_all(b"POST /live/cam/whep HTTP/1.1\r\nHost: x\r\nContent-Le")
        .expect("half a request");
    let turn_tcp = TcpStream::connect(ports.turn).expect("TURN over TCP");
    let ffmpeg = Ffmpeg::push(&format!("rtmp://{}/live/cam", ports.rtmp), 60);
    let whep = format!("http://{a}/live/cam/whep");
    let w = tern_bench::signal::Whep::new(&whep, Duration::from_secs(2));
    let deadline = Instant::now() + Duration::from_secs(15);
    while !w.live() {
        assert!(Instant::now() < deadline, "live/cam did not go live");
        std::thread::sleep(Duration::from_millis(100));
    }
    vec![
        Box::new(events),
        Box::new(ome),
        Box::new(keep_alive),
        Box::new(half),
        Box::new(turn_tcp),
        Box::new(ffmpeg),
    ]
}

#[test]
fn sigterm_stops_the_process_within_5_s_with_connections_open() {
    let _slot = crate::common::slot();
    let mut server = start(&Ports::any());
    let ports = Ports::of(&server);
    let open = long_lived(&server, &ports);
    // A WHIP publisher (str0m) and an RTMP connection past its handshake.
    let clip = Arc::new(Clip::builtin_lite().expect("clip"));
    let whip = format!("http://{}/live/desk/whip", server.http);
    let mut publisher =
        tern_bench::publish::start(&whip, "127.0.0.1".parse().expect("ip"), clip).expect("WHIP");
    let mut rtmp = rtmp_handshake(ports.rtmp);
    // Viewers playing the demo while the signal arrives.
    let line = format!(
        "bench -url http://{}/live/demo/whep -n 10 -cint 10 -life 30 -sint 60000",
        server.http
    );
    let args: BenchArgs = Cli::parse_from(tern_bench::normalize_args(
        line.split_whitespace().map(String::from),
    ))
    .bench;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let bench = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = tern_bench::run(&args, flag, &mut out);
        String::from_utf8_lossy(&out).into_owned()
    });
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        publisher
            .stats
            .connected
            .load(std::sync::atomic::Ordering::Relaxed),
        "the WHIP publisher did not connect:\n{}",
        server.log_tail(30)
    );

    let t = Instant::now();
    let status = server.terminate();
    let took = t.elapsed();
    let log = server.log_tail(30);
    let status = status.unwrap_or_else(|| panic!("no exit within 10 s of SIGTERM:\n{log}"));
    assert!(status.success(), "exit {status}:\n{log}");
    assert!(
        took < Duration::from_secs(5),
        "took {took:?} to exit:\n{log}"
    );
    assert!(log.contains("tern stopped"), "{log}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let report = bench.join().expect("bench thread");
    // Every viewer was told: its DTLS engine accepted the server's close_notify.
    assert!(
        report.contains("Closed by server (DTLS close_notify) : 10"),
        "{report}\n{log}"
    );
    assert!(
        publisher
            .stats
            .closed_by_server
            .load(std::sync::atomic::Ordering::Relaxed),
        "the WHIP publisher got no close_notify:\n{log}"
    );
    publisher.stop();
    // The RTMP connection ended with a FIN: reading gives end-of-file, not a reset.
    rtmp.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let mut buf = [0u8; 4096];
    let end = loop {
        match rtmp.read(&mut buf) {
            Ok(0) => break Ok(()),
            Ok(_) => {}
            Err(e) => break Err(e),
        }
    };
    assert!(end.is_ok(), "RTMP connection not closed cleanly: {end:?}");
    drop(open);
}

#[test]
fn after_sigkill_a_restart_binds_the_same_ports_at_once() {
    let _slot = crate::common::slot();
    let mut first = start(&Ports::any());
    let ports = Ports::of(&first);
    let open = long_lived(&first, &ports);
    first.kill();
    drop(open);
    // The killed process's TCP connections linger in the kernel (TIME_WAIT and friends);
    // the new one must bind the same ports anyway, at once.
    let second = start(&ports);
    assert_eq!(second.http, ports.http);
    assert_eq!(second.media, ports.media);
    assert_eq!(http_get(second.http, "/").expect("GET /").status, 200);
    let log = second.log_tail(30);
    assert!(
        log.contains(&format!("Some({})", ports.rtmp)),
        "RTMP did not come back on its port:\n{log}"
    );
    assert!(
        log.contains(&ports.turn.to_string()),
        "TURN not on its port:\n{log}"
    );
    second.stop();
}
