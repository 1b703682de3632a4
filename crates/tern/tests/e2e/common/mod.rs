//! Helpers shared by the integration tests: a closed port, a tiny blocking HTTP/1.1 client,
//! tern servers in this process ([`Server`]) and as child processes ([`Child`]), and the
//! kernel's UDP receive-overrun counters (so loss can be attributed to the right side of a
//! loopback test).

#![allow(dead_code)]

pub mod bench;
pub mod hook;
pub mod rsa;
mod server;
mod slot;

pub use server::{Running, Server};
pub use slot::{Serial, serial, slot};

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Writes `body` to a configuration file for this test process, named by `name`.
pub fn config_file(name: &str, body: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("tern-test-{}-{name}.toml", std::process::id()));
    std::fs::write(&p, body).expect("write config");
    p
}

/// A TCP port on 127.0.0.1 that was free a moment ago, for a process that is not tern (tern
/// reports the ports it bound; use those): redis-server, restarted on the same port.
pub fn free_tcp_port() -> u16 {
    use rand::Rng;
    let mut rng = rand::rng();
    // Below Linux's ephemeral range (32768-60999), so the client sockets a load test opens
    // cannot take it between this check and redis-server's bind.
    for _ in 0..1000 {
        let p = rng.random_range(20000..32768);
        if TcpListener::bind(("127.0.0.1", p)).is_ok() {
            return p;
        }
    }
    panic!("no free port found in 20000-32767 after 1000 tries");
}

/// A loopback TCP address that refuses every connection for as long as this value lives: a
/// socket bound to it that never listens, so no other process can take the port meanwhile.
pub struct ClosedPort {
    socket: socket2::Socket,
}

impl ClosedPort {
    /// Binds 127.0.0.1:0 without listening.
    pub fn new() -> ClosedPort {
        use socket2::{Domain, Socket, Type};
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("tcp socket");
        let any: std::net::SocketAddr = "127.0.0.1:0".parse().expect("address");
        socket.bind(&any.into()).expect("bind 127.0.0.1:0");
        ClosedPort { socket }
    }

    /// The address, e.g. `127.0.0.1:40123`.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.socket
            .local_addr()
            .expect("local address")
            .as_socket()
            .expect("an IP address")
    }
}

/// A parsed HTTP/1.1 response.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// Status code, e.g. 201.
    pub status: u16,
    /// Header fields in order, names as sent.
    pub headers: Vec<(String, String)>,
    /// The body (chunked transfer coding removed).
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The first header with this name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as UTF-8 text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One blocking HTTP/1.1 request with `Connection: close`.
pub fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> io::Result<HttpResponse> {
    http_request_with(addr, method, path, &[], content_type, body)
}

/// [`http_request`] with extra header lines (`("Authorization", "Bearer x")`).
pub fn http_request_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    extra: &[(&str, &str)],
    content_type: Option<&str>,
    body: &[u8],
) -> io::Result<HttpResponse> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(15)))?;
    s.set_write_timeout(Some(Duration::from_secs(15)))?;
    s.set_nodelay(true)?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(ct) = content_type {
        req.push_str(&format!("Content-Type: {ct}\r\n"));
    }
    for (k, v) in extra {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let mut msg = req.into_bytes();
    msg.extend_from_slice(body);
    s.write_all(&msg)?;
    s.flush()?;

    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = find(&raw, b"\r\n\r\n") {
            break i;
        }
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Err(bad("connection closed before the end of the response head"));
        }
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let mut rest = raw[head_end + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| bad(&format!("bad status line {status_line:?}")))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut resp = HttpResponse {
        status,
        headers,
        body: Vec::new(),
    };
    let no_body = method.eq_ignore_ascii_case("HEAD")
        || status == 204
        || status == 304
        || (100..200).contains(&status);
    if no_body {
        return Ok(resp);
    }
    let chunked = resp
        .header("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    let length = resp
        .header("content-length")
        .and_then(|v| v.parse::<usize>().ok());
    if let (false, Some(len)) = (chunked, length) {
        while rest.len() < len {
            let n = s.read(&mut buf)?;
            if n == 0 {
                return Err(bad("connection closed before the end of the body"));
            }
            rest.extend_from_slice(&buf[..n]);
        }
        rest.truncate(len);
        resp.body = rest;
        return Ok(resp);
    }
    // Chunked or close-delimited: read to EOF (we asked for Connection: close).
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => rest.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break,
            Err(e) => return Err(e),
        }
    }
    resp.body = if chunked { dechunk(&rest)? } else { rest };
    Ok(resp)
}

/// Line `name` of `GET /v1/memory` (an ingest pool: `rtmp_ingest`, `srt_ingest`,
/// `rtsp_ingest`): (items in use, used bytes); (0, 0) while the pool does not exist yet.
pub fn pool_line(http: SocketAddr, name: &str) -> (u64, u64) {
    let r = http_get(http, "/v1/memory").expect("GET /v1/memory");
    let v: serde_json::Value = serde_json::from_slice(&r.body).expect("memory JSON");
    let pools = v["pools"].as_array().cloned().unwrap_or_default();
    pools
        .iter()
        .find(|p| p["name"] == name)
        .map_or((0, 0), |p| {
            (
                p["items_in_use"].as_u64().expect("items"),
                p["used_bytes"].as_u64().expect("bytes"),
            )
        })
}

/// `GET path`.
pub fn http_get(addr: SocketAddr, path: &str) -> io::Result<HttpResponse> {
    http_request(addr, "GET", path, None, &[])
}

/// `POST path` with a body of the given content type.
pub fn http_post(
    addr: SocketAddr,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> io::Result<HttpResponse> {
    http_request(addr, "POST", path, Some(content_type), body)
}

/// `DELETE path`.
pub fn http_delete(addr: SocketAddr, path: &str) -> io::Result<HttpResponse> {
    http_request(addr, "DELETE", path, None, &[])
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn bad(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

fn dechunk(mut data: &[u8]) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = find(data, b"\r\n").ok_or_else(|| bad("chunk size line"))?;
        let size_txt = String::from_utf8_lossy(&data[..eol]);
        let size_txt = size_txt.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_txt, 16).map_err(|_| bad("chunk size"))?;
        data = &data[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if data.len() < size + 2 {
            return Err(bad("truncated chunk"));
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// A running `tern` child process (`target/release/tern serve|demo`), for a test that needs
/// a process of its own: it signals or kills it, reads its pid or `/proc`, sets its
/// environment, reads its log or its process-wide memory figures (see [`Server`] for the
/// rest). Killed (SIGKILL) on drop if not stopped.
pub struct Child {
    child: Option<std::process::Child>,
    /// The HTTP listener (WHEP, pages).
    pub http: SocketAddr,
    /// The one UDP media port.
    pub media: SocketAddr,
    /// The RTMP listener, if RTMP is on.
    pub rtmp: Option<SocketAddr>,
    /// The SRT listener (UDP), if SRT is on.
    pub srt: Option<SocketAddr>,
    /// The TURN listener, if TURN is on.
    pub turn: Option<SocketAddr>,
    /// The HTTPS listener, if HTTPS is on.
    pub https: Option<SocketAddr>,
    /// The TURN-over-TLS listener, if on.
    pub turns: Option<SocketAddr>,
    /// Where the server's stderr goes.
    pub log: PathBuf,
}

/// Any port: the server binds what the kernel gives and reports it.
const ANY: &str = "127.0.0.1:0";
/// RTMP on a loopback port.
const WITH_RTMP: [&str; 2] = ["--rtmp", ANY];
/// SRT (and no RTMP) on a loopback UDP port.
const WITH_SRT: [&str; 4] = ["--rtmp", "none", "--srt", ANY];

/// `serve --config CONFIG --candidate 127.0.0.1`, then `more`: the command line a child
/// ([`Child`]) and an in-process server ([`Server`]) both start from.
fn serve_args<'a>(config: &'a std::path::Path, more: &[&'a str]) -> Vec<&'a str> {
    let config = config.to_str().expect("utf-8 path");
    let mut args = vec!["serve", "--config", config, "--candidate", "127.0.0.1"];
    args.extend_from_slice(more);
    args
}

impl Child {
    /// Start `tern demo` on loopback ports the kernel chooses and wait (≤ 20 s) until it
    /// reports them.
    pub fn demo() -> Child {
        Child::demo_announcing("127.0.0.1")
    }

    /// Like [`Child::demo`], announcing `candidate` in ICE candidates (for a relay in
    /// between).
    pub fn demo_announcing(candidate: &str) -> Child {
        Child::start(&["demo", "--candidate", candidate])
    }

    /// `tern demo --config FILE` on loopback ports, announcing 127.0.0.1.
    pub fn demo_config(config: &std::path::Path) -> Child {
        let config = config.to_str().expect("utf-8 path");
        Child::start(&["demo", "--config", config, "--candidate", "127.0.0.1"])
    }

    /// `tern serve --config FILE` on loopback ports, announcing 127.0.0.1.
    pub fn serve(config: &std::path::Path) -> Child {
        Child::start(&serve_args(config, &[]))
    }

    /// `tern serve --config CFG` with RTMP on a loopback port, announcing 127.0.0.1;
    /// returns the server and its RTMP address.
    pub fn serve_rtmp(config: &std::path::Path) -> (Child, SocketAddr) {
        let server = Child::start(&serve_args(config, &WITH_RTMP));
        let rtmp = server.rtmp.expect("the server reports its RTMP address");
        (server, rtmp)
    }

    /// `tern serve --config CFG` with SRT (and no RTMP) on a loopback UDP port, announcing
    /// 127.0.0.1; returns the server and its SRT address.
    pub fn serve_srt(config: &std::path::Path) -> (Child, SocketAddr) {
        let server = Child::start(&serve_args(config, &WITH_SRT));
        let srt = server.srt.expect("the server reports its SRT address");
        (server, srt)
    }

    /// Runs `tern ARGS --http ... --media ...` on loopback ports the kernel chooses and
    /// waits (≤ 20 s) until it reports them.
    pub fn start(args: &[&str]) -> Child {
        Child::start_on(args, ANY, ANY)
    }

    /// Runs `tern ARGS --http HTTP --media MEDIA` (`127.0.0.1:0` for any port) and waits
    /// (≤ 20 s) for the line in which it reports every address it bound.
    pub fn start_on(args: &[&str], http: &str, media: &str) -> Child {
        Child::start_env(args, http, media, &[])
    }

    /// As [`Child::start_on`], with variables `env` added to the server's environment.
    pub fn start_env(args: &[&str], http: &str, media: &str, env: &[(&str, &str)]) -> Child {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static STARTED: AtomicUsize = AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, Ordering::Relaxed);
        let base = std::env::temp_dir().join(format!("tern-test-{}-{n}", std::process::id()));
        let log = base.with_extension("log");
        let out = base.with_extension("out");
        let log_file = File::create(&log).expect("create the server log file");
        let out_file = File::create(&out).expect("create the server stdout file");
        let child = Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(args)
            .args(["--http", http, "--media", media])
            .env(
                "RUST_LOG",
                std::env::var("TERN_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::from(out_file))
            .stderr(Stdio::from(log_file))
            .spawn()
            .expect("spawn the tern binary");
        let unset: SocketAddr = ([0, 0, 0, 0], 0).into();
        let mut server = Child {
            child: Some(child),
            http: unset,
            media: unset,
            rtmp: None,
            srt: None,
            turn: None,
            https: None,
            turns: None,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = std::fs::read_to_string(&out).unwrap_or_default();
            if let Some(line) = text.lines().find(|l| l.starts_with("listening ")) {
                server.take_addresses(line);
                break;
            }
            let exited = server
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(st) = exited {
                panic!("tern exited early with {st}; log:\n{}", server.log_tail(40));
            }
            if Instant::now() > deadline {
                panic!(
                    "tern did not report its addresses within 20 s; log:\n{}",
                    server.log_tail(40)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_file(&out);
        server
    }

    /// Reads `listening http=A media=A rtmp=A|- srt=A|- turn=A|- https=A|- turns=A|-`.
    fn take_addresses(&mut self, line: &str) {
        for kv in line.split_whitespace().skip(1) {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            let addr = v.parse::<SocketAddr>().ok();
            match k {
                "http" => self.http = addr.expect("an HTTP address"),
                "media" => self.media = addr.expect("a media address"),
                "rtmp" => self.rtmp = addr,
                "srt" => self.srt = addr,
                "turn" => self.turn = addr,
                "https" => self.https = addr,
                "turns" => self.turns = addr,
                _ => {}
            }
        }
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(std::process::Child::id)
    }

    /// The last `n` lines of the server's stderr.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// SIGTERM, then wait up to 10 s for the exit status.
    pub fn terminate(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid fits in i32"));
        kill(pid, Signal::SIGTERM).expect("send SIGTERM to tern");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(st)) = child.try_wait() {
                return Some(st);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits up to `limit` for the process to exit by itself (a drain's end): its status,
    /// or `None` if it still runs (then it is left running).
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                return Some(st);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL, and reap the process.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and assert a successful exit within 10 s.
    pub fn stop(mut self) {
        match self.terminate() {
            Some(st) => assert!(
                st.success(),
                "tern exited with {st} after SIGTERM; log:\n{}",
                self.log_tail(40)
            ),
            None => panic!(
                "tern did not exit within 10 s of SIGTERM (killed); log:\n{}",
                self.log_tail(40)
            ),
        }
    }
}

impl Running for Child {
    fn http(&self) -> SocketAddr {
        self.http
    }

    fn log_tail(&self, n: usize) -> String {
        Child::log_tail(self, n)
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
            if std::thread::panicking() {
                eprintln!(
                    "server log ({}), last lines:\n{}",
                    self.log.display(),
                    self.log_tail(40)
                );
            }
        }
    }
}

/// A number no other call in this process returned.
fn unique() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// `Udp: RcvbufErrors` from `/proc/net/snmp`: datagrams the kernel dropped because a
/// socket's receive buffer was full (whole host, all UDP sockets).
pub fn udp_rcvbuf_errors() -> Option<u64> {
    snmp_udp_field("RcvbufErrors")
}

/// Any field of the `Udp:` lines of `/proc/net/snmp`.
pub fn snmp_udp_field(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let mut udp = text.lines().filter(|l| l.starts_with("Udp:"));
    let names = udp.next()?;
    let values = udp.next()?;
    let i = names.split_whitespace().position(|n| n == field)?;
    values.split_whitespace().nth(i)?.parse().ok()
}

/// Per-socket drop counters from `/proc/net/udp` (IPv4), keyed by local port, for the
/// sockets bound on 127.0.0.1. A socket's counter grows when the kernel drops a datagram
/// addressed to it (receive buffer full).
pub fn udp_socket_drops() -> HashMap<u16, u64> {
    let mut out = HashMap::new();
    let Ok(text) = std::fs::read_to_string("/proc/net/udp") else {
        return out;
    };
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        // sl local rem st tx:rx tr:when retrnsmt uid timeout inode ref pointer drops
        let (Some(local), Some(drops)) = (f.get(1), f.last()) else {
            continue;
        };
        let Some((ip, port)) = local.split_once(':') else {
            continue;
        };
        if ip != "0100007F" {
            continue;
        }
        if let (Ok(port), Ok(drops)) = (u16::from_str_radix(port, 16), drops.parse::<u64>()) {
            out.insert(port, drops);
        }
    }
    out
}

/// An ffmpeg pushing `seconds` of 320x240/30 fps `testsrc` (H264 baseline, a keyframe every
/// 30 frames) and a 440 Hz `sine` at 44.1 kHz (AAC) to `url` in real time. x264 runs with
/// `-tune zerolatency` so that its look-ahead does not hold the first second back.
pub struct Ffmpeg {
    child: std::process::Child,
    log: PathBuf,
}

impl Ffmpeg {
    /// Pushes `testsrc` (H264 baseline, GOP 30) and a sine (AAC) to `url` for `seconds`.
    pub fn push(url: &str, seconds: u32) -> Ffmpeg {
        Ffmpeg::push_as(url, seconds, "flv", &[])
    }

    /// The same media as MPEG-TS to an `srt://` URL (or any URL ffmpeg's mpegts muxer
    /// writes to), with `extra` encoder options after the defaults (e.g. `-bf 2`).
    pub fn push_ts(url: &str, seconds: u32, extra: &[&str]) -> Ffmpeg {
        Ffmpeg::push_as(url, seconds, "mpegts", extra)
    }

    /// [`Ffmpeg::push_ts`] run through `wrapper` (e.g. `ip netns exec NAME`).
    pub fn push_ts_via(wrapper: &[&str], url: &str, seconds: u32) -> Ffmpeg {
        Ffmpeg::push_with(wrapper, url, seconds, "mpegts", &[])
    }

    fn push_as(url: &str, seconds: u32, format: &str, extra: &[&str]) -> Ffmpeg {
        Ffmpeg::push_with(&[], url, seconds, format, extra)
    }

    fn push_with(
        wrapper: &[&str],
        url: &str,
        seconds: u32,
        format: &str,
        extra: &[&str],
    ) -> Ffmpeg {
        let log = std::env::temp_dir().join(format!(
            "tern-rtmp-ffmpeg-{}-{}.log",
            std::process::id(),
            unique()
        ));
        let file = std::fs::File::create(&log).expect("ffmpeg log");
        let t = seconds.to_string();
        let (program, pre) = match wrapper.split_first() {
            Some((p, rest)) => (*p, [rest, &["ffmpeg"]].concat()),
            None => ("ffmpeg", Vec::new()),
        };
        let child = Command::new(program)
            .args(pre)
            .args(["-hide_banner", "-nostdin", "-loglevel", "info"])
            .args(["-re", "-f", "lavfi", "-i", "testsrc=size=320x240:rate=30"])
            .args([
                "-re",
                "-f",
                "lavfi",
                "-i",
                "sine=frequency=440:sample_rate=44100",
            ])
            .args(["-t", &t, "-c:v", "libx264", "-profile:v", "baseline"])
            .args(["-tune", "zerolatency", "-pix_fmt", "yuv420p", "-g", "30"])
            .args(extra)
            .args(["-c:a", "aac", "-f", format, url])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(file))
            .spawn()
            .expect("spawn ffmpeg (scripts/install-deps.sh installs it)");
        Ffmpeg { child, log }
    }

    /// Waits (at most `limit`) for ffmpeg to exit; its success, or None if still running.
    pub fn wait(&mut self, limit: Duration) -> Option<bool> {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st.success());
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether ffmpeg is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills ffmpeg at once (an encoder that dies: its TCP connection closes abruptly).
    pub fn kill(&mut self) {
        self.child.kill().expect("kill ffmpeg");
        let _ = self.child.wait();
    }

    /// Stops ffmpeg without ending it (SIGSTOP): its TCP connection stays open and it sends
    /// nothing, as a stalled encoder does.
    pub fn pause(&self) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGSTOP);
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
}

impl Drop for Ffmpeg {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A good plain handshake (C0 C1, S0 S1 S2, C2) on a new connection.
pub fn rtmp_handshake(rtmp: SocketAddr) -> std::net::TcpStream {
    use std::io::{Read, Write};
    use tern_proto::rtmp::{HANDSHAKE_SIZE, VERSION};
    let mut s = std::net::TcpStream::connect(rtmp).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut c0c1 = vec![VERSION];
    c0c1.extend((0..HANDSHAKE_SIZE).map(|i| (i * 7) as u8));
    s.write_all(&c0c1).expect("C0 C1");
    let mut s0s1s2 = vec![0u8; 1 + 2 * HANDSHAKE_SIZE];
    s.read_exact(&mut s0s1s2).expect("S0 S1 S2");
    assert_eq!(s0s1s2[0], VERSION);
    // S2 echoes C1.
    assert_eq!(&s0s1s2[1 + HANDSHAKE_SIZE..], &c0c1[1..]);
    s.write_all(&s0s1s2[1..1 + HANDSHAKE_SIZE]).expect("C2");
    s
}

/// A real WHIP offer (str0m: H264 and Opus, send-only) from a peer that will never answer
/// a connectivity check.
pub fn silent_offer() -> String {
    use str0m::media::{Direction, MediaKind};
    use str0m::{Candidate, RtcConfig};
    let mut rtc = RtcConfig::new()
        .clear_codecs()
        .enable_h264(true)
        .enable_opus(true, false)
        .build(std::time::Instant::now());
    let addr: SocketAddr = ([127, 0, 0, 1], 9).into();
    rtc.add_local_candidate(Candidate::host(addr, "udp").expect("candidate"));
    let mut api = rtc.sdp_api();
    api.add_media(MediaKind::Video, Direction::SendOnly, None, None, None);
    api.add_media(MediaKind::Audio, Direction::SendOnly, None, None, None);
    let (offer, _pending) = api.apply().expect("an offer");
    offer.to_sdp_string()
}

/// A WHEP offer (video and audio, receive-only) as tern bench's clients make it.
pub fn whep_offer() -> String {
    whep_offer_with(false)
}

/// `POST path` with a [`whep_offer`] (H264 and Opus) as `application/sdp`.
pub fn post_whep(addr: SocketAddr, path: &str) -> HttpResponse {
    http_post(addr, path, "application/sdp", whep_offer().as_bytes()).expect("POST whep")
}

/// [`whep_offer`], offering every video codec tern takes when `all_video` (as
/// `tern bench --all-video`), else H264 only.
pub fn whep_offer_with(all_video: bool) -> String {
    tern_proto::sdp::write_offer(&tern_proto::sdp::OfferParams {
        ice_ufrag: "cliU",
        ice_pwd: "clientPasswordClientPw",
        fingerprint_sha256: &[3u8; 32],
        video: true,
        audio: true,
        abs_capture_time: true,
        all_video,
    })
}

/// An HS256 JWT signed with `secret` for stream `sub` (`app/stream`), action `act`
/// (`play`/`publish`), expiring `exp_in` seconds from now (negative: already expired).
pub fn jwt(secret: &str, sub: &str, act: &str, exp_in: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &serde_json::json!({"sub": sub, "act": act, "exp": now + exp_in}),
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
    )
    .expect("encode")
}

/// The longest video gap of each of a bench run's viewers, in ms.
pub fn video_gaps_ms(o: &tern_bench::Outcome) -> Vec<u128> {
    o.clients
        .iter()
        .filter_map(|c| c.video.as_ref().map(|v| v.max_gap.as_millis()))
        .collect()
}
