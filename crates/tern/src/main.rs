//! The tern command line: `serve`, `demo`, `lab`, `config check`.

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
