//! The tern command line: `serve`, `demo`, `lab`, `config check`.

#![forbid(unsafe_code)]

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

mod lab;
mod malloc;
use tern_server::{ServeError, ServeOptions, Server, load_config};

/// The process-wide counting allocator: live bytes, peak and allocation count for the
/// memory report and benchmarks.
#[global_allocator]
static ALLOC: tern_pool::CountingAlloc = tern_pool::CountingAlloc::new();

#[derive(Parser)]
#[command(name = "tern", version, about = "A lean WebRTC streaming server")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the server with the configured streams.
    Serve(ServeArgs),
    /// Run the server with the built-in demo clip as live/demo.
    Demo(ServeArgs),
    /// In-process measurements of the viewer path: heap at lifecycle checkpoints,
    /// handshakes per second, fan-out cost (see bench/core.sh).
    Lab(lab::LabArgs),
    /// Load-test a server with N WebRTC viewers (OvenRtcTester's flags and output; its
    /// single-dash spellings `-url -n -cint -life -sint` work too).
    Bench(tern_bench::BenchArgs),
    /// Print a running server's memory pools, one line per pool (like pjsua's `dd`).
    Mem {
        /// Base URL of the server's HTTP listener.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        url: String,
        /// Also list every viewer session: its engine slot, engine heap and HTTP-side bytes.
        #[arg(long)]
        sessions: bool,
    },
    /// Validate a configuration file and exit.
    Config {
        #[command(subcommand)]
        cmd: ConfigCmd,
    },
}

#[derive(Subcommand)]
enum ConfigCmd {
    /// Check a config file: prints the first error naming the key, or "ok".
    Check {
        /// The TOML file.
        file: PathBuf,
    },
}

#[derive(Args)]
struct ServeArgs {
    /// HTTP listener (WHEP, pages, API) [default: 0.0.0.0:8080]
    #[arg(long)]
    http: Option<SocketAddr>,
    /// The one UDP port for all WebRTC media [default: 0.0.0.0:10000]
    #[arg(long)]
    media: Option<SocketAddr>,
    /// Host address announced in ICE candidates; repeat it for one candidate per address
    /// (e.g. an IPv4 and an IPv6 address with --media [::]:10000)
    #[arg(long)]
    candidate: Vec<IpAddr>,
    /// TOML configuration file
    #[arg(long)]
    config: Option<PathBuf>,
    /// RTMP ingest listener, or `none`; `--rtmp` alone listens on 0.0.0.0:1935
    /// [default: `server.rtmp` in the config, else 0.0.0.0:1935 when that port is free]
    #[arg(long, value_name = "ADDR|none", num_args = 0..=1,
          default_missing_value = tern_server::config::DEFAULT_RTMP,
          value_parser = parse_rtmp)]
    rtmp: Option<RtmpBind>,
    /// SRT ingest listener (UDP), or `none`; `--srt` alone listens on 0.0.0.0:8890
    /// [default: `server.srt` in the config, else off]
    #[arg(long, value_name = "ADDR|none", num_args = 0..=1,
          default_missing_value = tern_server::config::DEFAULT_SRT,
          value_parser = parse_srt)]
    srt: Option<RtmpBind>,
    /// Built-in clip for `tern demo`: standard (~1.1 Mbit/s) or lite (~300 kbit/s)
    #[arg(long, value_enum, default_value_t = tern_server::DemoClip::Standard)]
    clip: tern_server::DemoClip,
    /// Run the built-in STUN/TURN server on this address, UDP and TCP (e.g. 0.0.0.0:3478)
    #[arg(long, value_name = "ADDR")]
    turn: Option<SocketAddr>,
    /// Add a long-term TURN user (repeatable)
    #[arg(long, value_name = "NAME:PASSWORD")]
    turn_user: Vec<String>,
    /// Shared secret for TURN REST credentials (coturn's use-auth-secret format)
    #[arg(long, value_name = "SECRET")]
    turn_secret: Option<String>,
    /// Address TURN relay sockets bind to and announce
    #[arg(long, value_name = "IP")]
    turn_relay_ip: Option<IpAddr>,
    /// Socket workers on the media port (OvenMediaEngine's WorkerCount) [default: 1]
    #[arg(long, value_name = "N")]
    worker_count: Option<usize>,
    /// App workers: per-stream work (AppWorkerCount) [default: 1]
    #[arg(long, value_name = "N")]
    app_worker_count: Option<usize>,
    /// Stream workers: per-viewer SRTP and sends (StreamWorkerCount; 0 = app workers send) [default: 1]
    #[arg(long, value_name = "N")]
    stream_worker_count: Option<usize>,
    /// HTTPS listener: everything the HTTP listener serves, over TLS (h2 and http/1.1);
    /// needs --tls-cert and --tls-key [default: `server.https`, else none]
    #[arg(long, value_name = "ADDR")]
    https: Option<SocketAddr>,
    /// Certificate chain for --https, PEM (watched: a renewed file is picked up)
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// Private key for --tls-cert, PEM
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,
}

/// `--rtmp ADDR|none`.
#[derive(Clone)]
struct RtmpBind(Option<SocketAddr>);

fn parse_rtmp(s: &str) -> Result<RtmpBind, String> {
    tern_server::config::parse_rtmp(s).map(RtmpBind)
}

/// `--srt ADDR|none` (the same shape as `--rtmp`).
fn parse_srt(s: &str) -> Result<RtmpBind, String> {
    tern_server::config::parse_srt(s).map(RtmpBind)
}

fn main() -> ExitCode {
    // The server runs with glibc's thread caches off (see malloc.rs); before any thread starts.
    if matches!(
        std::env::args().nth(1).as_deref(),
        Some("serve") | Some("demo")
    ) {
        malloc::restart_with_tunables();
    }
    // Before anything touches aws-lc: its heap (cipher contexts, DTLS state) is counted too.
    tern_pool::count_crypto_allocations();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse_from(tern_bench::normalize_args(std::env::args()));
    let (args, demo) = match cli.cmd {
        Cmd::Serve(a) => (a, false),
        Cmd::Demo(a) => (a, true),
        Cmd::Mem { url, sessions } => {
            return match fetch_dd(&url, sessions) {
                Ok(t) => {
                    print!("{t}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(1)
                }
            };
        }
        Cmd::Bench(a) => return bench(&a),
        Cmd::Lab(a) => {
            return match lab::run(&a) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(1)
                }
            };
        }
        Cmd::Config {
            cmd: ConfigCmd::Check { file },
        } => {
            return match tern_server::config::Config::load(&file) {
                Ok(_) => {
                    println!("ok");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            };
        }
    };
    let opts = ServeOptions {
        http: args.http,
        media: args.media,
        candidate: args.candidate,
        config: args.config,
        rtmp: args.rtmp.map(|r| r.0),
        srt: args.srt.map(|r| r.0),
        demo,
        clip: args.clip,
        turn: args.turn,
        turn_users: args.turn_user,
        turn_secret: args.turn_secret,
        turn_relay_ip: args.turn_relay_ip,
        worker_count: args.worker_count,
        app_worker_count: args.app_worker_count,
        stream_worker_count: args.stream_worker_count,
        https: args.https,
        tls_cert: args.tls_cert,
        tls_key: args.tls_key,
    };
    match run(opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// Runs `tern bench` until its life ends or Ctrl-C. Exit status: 0 when every client
/// connected and nothing was lost, 3 otherwise, 1 when the bench could not run.
fn bench(a: &tern_bench::BenchArgs) -> ExitCode {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    if let Err(e) =
        ctrlc::set_handler(move || flag.store(true, std::sync::atomic::Ordering::Relaxed))
    {
        eprintln!("error: cannot catch Ctrl-C: {e}");
        return ExitCode::from(1);
    }
    let mut out = std::io::stdout();
    match tern_bench::run(a, stop, &mut out) {
        Ok(o) if o.clean() => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(3),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// GETs `{url}/v1/memory?format=dd` (with `&sessions=1` for the per-session table) over
/// plain HTTP/1.1.
fn fetch_dd(url: &str, sessions: bool) -> Result<String, String> {
    use std::io::{Read, Write};
    let rest = url
        .strip_prefix("http://")
        .ok_or("only http:// URLs are supported")?;
    let host = rest.split('/').next().unwrap_or(rest);
    let mut s = std::net::TcpStream::connect(host).map_err(|e| format!("connect {host}: {e}"))?;
    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(10)));
    write!(
        s,
        "GET /v1/memory?format=dd{} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n",
        if sessions { "&sessions=1" } else { "" }
    )
    .map_err(|e| e.to_string())?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| e.to_string())?;
    let (head, body) = out
        .split_once("\r\n\r\n")
        .ok_or("malformed HTTP response")?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!(
            "server answered: {}",
            head.lines().next().unwrap_or("")
        ));
    }
    Ok(body.to_string())
}

/// `tern serve` / `tern demo`: starts the server, prints one line with every bound address
/// on stdout (`listening http=ADDR media=ADDR rtmp=ADDR|- srt=ADDR|- turn=ADDR|- https=ADDR|-`, for supervisors
/// and tests that bind port 0), and runs until SIGINT/SIGTERM.
fn run(opts: ServeOptions) -> Result<(), ServeError> {
    let cfg = load_config(&opts)?;
    let server = Server::start(cfg, &opts)?;
    {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening {}", server.addrs());
        let _ = out.flush();
    }
    server.run_until_signal()
}
