//! The tern command line: `serve`, `demo`, `lab`, `bench`, `mem`, `health`, `config check`.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    Serve(ServeOptions),
    /// Run the server with the built-in demo clip as live/demo.
    Demo(ServeOptions),
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
    /// Probe a running server: GET /v1/health; exit 0 when it answers 200 (it prints the
    /// body), 1 otherwise. The container image's HEALTHCHECK runs it: no shell or curl there.
    Health {
        /// Base URL of the server's HTTP listener [default: `server.http` of --config, an
        /// unspecified address probed on loopback; else http://127.0.0.1:8080]
        #[arg(long)]
        url: Option<String>,
        /// The server's TOML file: the probe goes to its `server.http`.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Seconds to wait for the connection and the answer.
        #[arg(long, value_name = "S", default_value_t = 5)]
        timeout: u64,
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
    let opts = match cli.cmd {
        Cmd::Serve(opts) => opts,
        Cmd::Demo(opts) => ServeOptions { demo: true, ..opts },
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
        Cmd::Health {
            url,
            config,
            timeout,
        } => return health(url, config, timeout),
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
    let path = format!(
        "/v1/memory?format=dd{}",
        if sessions { "&sessions=1" } else { "" }
    );
    let (status, body) = http_get(url, &path, std::time::Duration::from_secs(10))?;
    if !status.starts_with("HTTP/1.1 200") {
        return Err(format!("server answered: {status}"));
    }
    Ok(body)
}

/// `tern health`: GETs `/v1/health` of `url`, else of `server.http` in `config`, else of
/// 127.0.0.1:8080. Exit 0 on `200` (the body printed), 1 on anything else (what went wrong
/// on stderr), 2 for a config that does not load.
fn health(url: Option<String>, config: Option<PathBuf>, timeout: u64) -> ExitCode {
    let url = match (url, config) {
        (Some(url), _) => url,
        (None, Some(file)) => match tern_server::config::Config::load(&file) {
            Ok(cfg) => probe_url(cfg.server.http),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        },
        (None, None) => "http://127.0.0.1:8080".into(),
    };
    let limit = std::time::Duration::from_secs(timeout.max(1));
    match http_get(&url, "/v1/health", limit) {
        Ok((status, body)) if status.starts_with("HTTP/1.1 200") => {
            println!("{}", body.trim_end());
            ExitCode::SUCCESS
        }
        Ok((status, body)) => {
            eprintln!(
                "unhealthy: {url}/v1/health answered {status}: {}",
                body.trim_end()
            );
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("unhealthy: {url}/v1/health: {e}");
            ExitCode::from(1)
        }
    }
}

/// The URL a probe on this host reaches a listener bound to `addr` at: an unspecified
/// address (`0.0.0.0`, `[::]`) is probed on loopback of its family.
fn probe_url(addr: std::net::SocketAddr) -> String {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("http://{}", SocketAddr::new(ip, addr.port()))
}

/// One plain HTTP/1.1 GET of `path` on the server at `url` (`http://HOST:PORT`), connecting
/// and reading within `limit` each: the status line and the body.
fn http_get(url: &str, path: &str, limit: std::time::Duration) -> Result<(String, String), String> {
    use std::io::{Read, Write};
    use std::net::ToSocketAddrs;
    let rest = url
        .strip_prefix("http://")
        .ok_or("only http:// URLs are supported")?;
    let host = rest.split('/').next().unwrap_or(rest);
    let addr = host
        .to_socket_addrs()
        .map_err(|e| format!("resolve {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("resolve {host}: no address"))?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, limit)
        .map_err(|e| format!("connect {host}: {e}"))?;
    let _ = s.set_read_timeout(Some(limit));
    let _ = s.set_write_timeout(Some(limit));
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| e.to_string())?;
    let (head, body) = out
        .split_once("\r\n\r\n")
        .ok_or("malformed HTTP response")?;
    Ok((
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    ))
}

/// `tern serve` / `tern demo`: starts the server, prints one line with every bound address
/// on stdout (`listening http=ADDR media=ADDR rtmp=ADDR|- srt=ADDR|- turn=ADDR|- https=ADDR|- turns=ADDR|- rtmps=ADDR|-`, for supervisors
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
