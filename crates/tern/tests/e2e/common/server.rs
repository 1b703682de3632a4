//! A tern server started in this test process ([`tern_server::Server::start`]) from the same
//! command line `tern serve` and `tern demo` take, with the surface the tests read of a
//! [`Child`](super::Child) process: its addresses, `stop`, `log_tail`.
//!
//! Tests run on threads of one process, so an in-process server is for a test that does not
//! need a process of its own: one that neither signals, kills nor inspects it (pid,
//! `/proc`), sets no environment variable for it, reads no line of its log, and asserts no
//! exact figure of the process-wide memory lines (`packet_buffers`, `viewer_sessions`,
//! `whep_sessions`, `hls_segments`, `recordings`, `turn_allocations`, the allocator's
//! totals), which every server in the process shares. What a surface counts (`/metrics`,
//! `/v1/stats/current`) and the ingest and signalling lines (`rtmp_ingest`, `srt_ingest`,
//! `rtsp_ingest`, `ome_signalling`) are each server's own.

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::Once;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tern_server::ServeOptions;

use super::{ANY, WITH_RTMP, WITH_SRT, serve_args};

/// What a test reads of a running server, in this process ([`Server`]) or a child
/// ([`Child`](super::Child)): for helpers that serve both.
pub trait Running {
    /// The HTTP listener.
    fn http(&self) -> SocketAddr;
    /// The last `n` lines of the server's log, for a failure message.
    fn log_tail(&self, n: usize) -> String;
}

/// `tern serve|demo FLAGS`, parsed as the binary parses it.
#[derive(Parser)]
#[command(name = "tern")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    Serve(ServeOptions),
    Demo(ServeOptions),
}

/// Where an in-process server's log goes instead of a file: the test's own output.
const LOG_NOTE: &str = "(the server runs in this test process: its log is in the test's output above; \
     TERN_TEST_LOG sets its filter, default info)";

/// Logs of the in-process servers to the output of the test that started them (shown when
/// it fails, or always with `--nocapture`), filtered by `TERN_TEST_LOG` (default `info`),
/// as a child's log is by `RUST_LOG`. Installed once for the test binary.
fn install_logging() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let filter = std::env::var("TERN_TEST_LOG").unwrap_or_else(|_| "info".into());
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_new(&filter)
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
            )
            .with_ansi(false)
            .with_thread_names(true)
            .with_test_writer()
            .try_init();
    });
}

/// A server running in this test process, stopped on drop if not stopped.
pub struct Server {
    server: Option<tern_server::Server>,
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
    /// The RTMPS listener, if RTMPS is on.
    pub rtmps: Option<SocketAddr>,
}

impl Server {
    /// `tern demo` on loopback ports the kernel chooses, announcing 127.0.0.1.
    pub fn demo() -> Server {
        Server::demo_announcing("127.0.0.1")
    }

    /// Like [`Server::demo`], announcing `candidate` in ICE candidates (for a relay in
    /// between).
    pub fn demo_announcing(candidate: &str) -> Server {
        Server::start(&["demo", "--candidate", candidate])
    }

    /// `tern serve --config FILE` on loopback ports, announcing 127.0.0.1.
    pub fn serve(config: &std::path::Path) -> Server {
        Server::start(&serve_args(config, &[]))
    }

    /// `tern serve --config CFG` with RTMP on a loopback port, announcing 127.0.0.1;
    /// returns the server and its RTMP address.
    pub fn serve_rtmp(config: &std::path::Path) -> (Server, SocketAddr) {
        let server = Server::start(&serve_args(config, &WITH_RTMP));
        let rtmp = server.rtmp.expect("the server reports its RTMP address");
        (server, rtmp)
    }

    /// `tern serve --config CFG` with SRT (and no RTMP) on a loopback UDP port, announcing
    /// 127.0.0.1; returns the server and its SRT address.
    pub fn serve_srt(config: &std::path::Path) -> (Server, SocketAddr) {
        let server = Server::start(&serve_args(config, &WITH_SRT));
        let srt = server.srt.expect("the server reports its SRT address");
        (server, srt)
    }

    /// `tern ARGS --http ... --media ...` on loopback ports the kernel chooses.
    pub fn start(args: &[&str]) -> Server {
        Server::start_on(args, ANY, ANY)
    }

    /// `tern ARGS --http HTTP --media MEDIA` (`127.0.0.1:0` for any port): `ARGS` starts
    /// with `serve` or `demo` and is parsed as the binary parses it. Unlike the binary,
    /// RTMP is off unless `--rtmp` or the config turns it on: the binary's default,
    /// 0.0.0.0:1935 when that port is free, is a fixed port that servers on parallel
    /// threads would race for.
    pub fn start_on(args: &[&str], http: &str, media: &str) -> Server {
        install_logging();
        let line = args.join(" ");
        let argv = ["tern"]
            .into_iter()
            .chain(args.iter().copied())
            .chain(["--http", http, "--media", media]);
        let opts = match Cli::try_parse_from(argv)
            .unwrap_or_else(|e| panic!("tern {line}: {e}"))
            .cmd
        {
            Cmd::Serve(opts) => opts,
            Cmd::Demo(opts) => ServeOptions { demo: true, ..opts },
        };
        let mut cfg =
            tern_server::load_config(&opts).unwrap_or_else(|e| panic!("tern {line}: {e}"));
        cfg.server.rtmp.get_or_insert(None);
        let server = tern_server::Server::start(cfg, &opts)
            .unwrap_or_else(|e| panic!("tern {line} did not start: {e}"));
        let a = server.addrs();
        Server {
            server: Some(server),
            http: a.http,
            media: a.media,
            rtmp: a.rtmp,
            srt: a.srt,
            turn: a.turn,
            https: a.https,
            rtmps: a.rtmps,
        }
    }

    /// Why `tern serve --config CONFIG` on loopback ports does not start: the error
    /// [`tern_server::Server::start`] gives for a config file that loads (a key whose file
    /// does not, say). Panics if it starts.
    pub fn start_error(config: &std::path::Path) -> String {
        let opts = ServeOptions {
            config: Some(config.to_path_buf()),
            http: Some(ANY.parse().expect("addr")),
            media: Some(ANY.parse().expect("addr")),
            ..Default::default()
        };
        let cfg = tern_server::load_config(&opts).expect("the config itself is valid");
        match tern_server::Server::start(cfg, &opts) {
            Ok(_) => panic!("tern started with {}", config.display()),
            Err(e) => e.to_string(),
        }
    }

    /// A note that the log is in the test's output: an in-process server has no log of its
    /// own (for failure messages only; a test that reads the log runs a [`Child`](super::Child)).
    pub fn log_tail(&self, _n: usize) -> String {
        LOG_NOTE.to_string()
    }

    /// Stops it as SIGTERM stops the binary, asserting that it stops within 10 s and gives
    /// its HTTP and media ports back.
    pub fn stop(mut self) {
        let Some(server) = self.server.take() else {
            return;
        };
        let (done, stopped) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            server.shutdown();
            let _ = done.send(());
        });
        stopped
            .recv_timeout(Duration::from_secs(10))
            .expect("the in-process server stops within 10 s");
        TcpListener::bind(self.http).expect("the HTTP port is free after shutdown");
        UdpSocket::bind(self.media).expect("the media port is free after shutdown");
    }
}

impl Running for Server {
    fn http(&self) -> SocketAddr {
        self.http
    }

    fn log_tail(&self, n: usize) -> String {
        Server::log_tail(self, n)
    }
}
