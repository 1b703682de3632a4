//! Command-line arguments, with OvenRtcTester's single-dash spellings accepted.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

/// `tern bench`: N WebRTC viewers against a server, with OvenRtcTester's flags and output.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Stream URL: `http(s)://HOST/APP/STREAM/whep` (WHEP) or `ws(s)://HOST/APP/STREAM`
    /// (OvenMediaEngine signalling). Also spelled `-url`.
    #[arg(long)]
    pub url: String,
    /// Number of clients. Also `-n`.
    #[arg(short = 'n', long = "clients", default_value_t = 1)]
    pub clients: usize,
    /// Milliseconds between client connections. Also `-cint`.
    #[arg(long, default_value_t = 100)]
    pub cint: u64,
    /// Seconds to run, counted from the start; 0 runs until Ctrl-C. Also `-life`.
    #[arg(long, default_value_t = 0)]
    pub life: u64,
    /// Milliseconds between summaries. Also `-sint`.
    #[arg(long, default_value_t = 5000)]
    pub sint: u64,
    /// Send no RTCP receiver reports and no NACKs (OvenRtcTester's behaviour).
    #[arg(long)]
    pub no_rtcp: bool,
    /// Media threads (each owns a share of the clients' sockets).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Receive with `UDP_GRO`: a server's GSO message arrives whole and is cut into its
    /// datagrams here (each still counted and checked alone). `--gro false`: the kernel
    /// cuts it and queues the datagrams one by one.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub gro: bool,
    /// Which RTP packets a viewer authenticates and decrypts: `all`, or `sample:N` (1 in N;
    /// every packet is still counted for loss, order and duplicates from its header, which
    /// SRTP leaves in the clear). The summary says which on every print.
    #[arg(long, default_value_t = Verify::All)]
    pub verify: Verify,
    /// Seconds a client may take from its first ICE check to SRTP keys before it is failed.
    #[arg(long, default_value_t = 10)]
    pub connect_timeout: u64,
    /// Print summaries and client details as JSON lines instead of text.
    #[arg(long)]
    pub json: bool,
    /// Write an HTML report with plots over time and CDFs to this file.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Read the server's GET /v1/memory at lifecycle checkpoints and print the heap table.
    #[arg(long)]
    pub heap_report: bool,
    /// Print the per-client detail block at the end (on by default for up to 100 clients).
    #[arg(long)]
    pub details: Option<bool>,
    /// WHIP publishers to start before the viewers, each sending the built-in clip:
    /// publisher 0 to the stream of `-url`, publisher i to stream `{stream}{i}` (declared
    /// on the server). The WHIP URL is `-url` with `/whep` replaced by `/whip`.
    #[arg(long, default_value_t = 0)]
    pub publish: usize,
    /// The clip publishers send: `standard` (~1.1 Mbit/s), `lite` (~300 kbit/s), or the path
    /// of an MP4 file (H264 or H265 without B-frames, AAC or Opus), published in its codec
    /// and looped.
    #[arg(long, default_value = "standard")]
    pub publish_clip: String,
    /// Viewers reach the server only through its TURN server over UDP (credentials from the
    /// WHEP answer's `Link: rel="ice-server"` headers), like browsers with
    /// `iceTransportPolicy: 'relay'`. WHEP only.
    #[arg(long)]
    pub relay: bool,
    /// Offer every video codec tern plays (H264, VP8, VP9, AV1, H265) instead of H264
    /// alone, so a stream in another codec (an H265 camera or encoder) is answered in it.
    /// The codec answered is in each client's details. WHEP only.
    #[arg(long)]
    pub all_video: bool,
    /// Local IP the clients' UDP sockets bind to.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind: std::net::IpAddr,
    /// `viewer`: one UDP socket per viewer. `thread`: one per media thread, each viewer
    /// with its own loopback address on it (`127.16+T.x.y`), so a thread reads many
    /// viewers' datagrams per system call. `thread` needs a server on IPv4 loopback and no
    /// `--relay` or `--bind`. `auto` (the default): `thread` for a viewer whose server media
    /// address is on IPv4 loopback, when neither `--relay` nor `--bind` is given, and
    /// `viewer` otherwise (a thread's socket cost the tester 0.70-0.82 of a socket per
    /// viewer per packet; BENCHMARKS.md, issue 59).
    #[arg(long, value_enum, default_value_t = Sockets::Auto)]
    pub sockets: Sockets,
}

/// How viewers get their UDP sockets (`--sockets`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Sockets {
    /// A thread's socket where the server is on IPv4 loopback, else one per viewer.
    Auto,
    /// One per viewer.
    Viewer,
    /// One per media thread.
    Thread,
}

impl Sockets {
    /// Whether the media threads open a shared socket: with `thread`, and with `auto`
    /// unless `relay` (TURN needs a viewer's own socket) or a `bind` address is given.
    pub fn threads_share(self, relay: bool, bind: std::net::IpAddr) -> bool {
        match self {
            Sockets::Thread => true,
            Sockets::Viewer => false,
            Sockets::Auto => !relay && bind.is_unspecified(),
        }
    }
}

impl BenchArgs {
    /// The connection interval.
    pub fn cint(&self) -> Duration {
        Duration::from_millis(self.cint)
    }

    /// The summary interval (at least 100 ms).
    pub fn sint(&self) -> Duration {
        Duration::from_millis(self.sint.max(100))
    }

    /// The run time, if bounded.
    pub fn life(&self) -> Option<Duration> {
        (self.life > 0).then(|| Duration::from_secs(self.life))
    }

    /// Checks the values clap cannot: names the flag at fault.
    pub fn validate(&self) -> Result<(), String> {
        if self.clients == 0 {
            return Err("-n must be at least 1".into());
        }
        if self.threads == 0 || self.threads > 64 {
            return Err("--threads must be in 1..=64".into());
        }
        if !(self.url.starts_with("http://")
            || self.url.starts_with("https://")
            || self.url.starts_with("ws://")
            || self.url.starts_with("wss://"))
        {
            return Err(format!(
                "-url must be http(s):// (WHEP) or ws(s):// (OvenMediaEngine), got {:?}",
                self.url
            ));
        }
        if !matches!(self.publish_clip.as_str(), "standard" | "lite")
            && !std::path::Path::new(&self.publish_clip).is_file()
        {
            return Err(format!(
                "--publish-clip must be standard, lite or an MP4 file, got {:?}",
                self.publish_clip
            ));
        }
        if self.publish > 0 && !self.url.ends_with("/whep") {
            return Err("--publish needs a WHEP -url ending in /whep".into());
        }
        if self.all_video && !self.url.starts_with("http") {
            return Err("--all-video needs a WHEP (http) -url".into());
        }
        if self.relay && !self.url.starts_with("http") {
            return Err("--relay needs a WHEP (http) -url".into());
        }
        if self.sockets == Sockets::Thread && (self.relay || !self.bind.is_unspecified()) {
            return Err(
                "--sockets thread gives each viewer a loopback address of its own: \
                        it goes with neither --relay nor --bind"
                    .into(),
            );
        }
        if self.connect_timeout == 0 {
            return Err("--connect-timeout must be at least 1 s".into());
        }
        Ok(())
    }
}

/// Rewrites OvenRtcTester's single-dash long flags (`-url`, `-cint`, `-life`, `-sint`, also
/// as `-flag=value`) into clap's double-dash form. `-n` is a clap short flag already.
pub fn normalize_args(args: impl IntoIterator<Item = String>) -> Vec<String> {
    const OME: [&str; 4] = ["url", "cint", "life", "sint"];
    args.into_iter()
        .map(|a| {
            if let Some(rest) = a.strip_prefix('-')
                && !rest.starts_with('-')
            {
                let name = rest.split('=').next().unwrap_or(rest);
                if OME.contains(&name) {
                    return format!("-{a}");
                }
            }
            a
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_dash_flags_become_long_flags() {
        let v = normalize_args(
            [
                "tern",
                "bench",
                "-url",
                "ws://h/a/s",
                "-n",
                "5",
                "-cint=10",
                "--life",
                "3",
            ]
            .map(String::from),
        );
        assert_eq!(
            v,
            [
                "tern",
                "bench",
                "--url",
                "ws://h/a/s",
                "-n",
                "5",
                "--cint=10",
                "--life",
                "3"
            ]
        );
    }

    #[test]
    fn sockets_thread_refuses_relay_and_bind() {
        use clap::Parser;
        #[derive(Parser)]
        struct W {
            #[command(flatten)]
            a: BenchArgs,
        }
        let parse = |extra: &str| {
            let mut v = vec!["bench", "--url", "http://127.0.0.1:1/live/demo/whep"];
            v.extend(extra.split_whitespace());
            W::try_parse_from(v).expect("parses").a.validate()
        };
        assert_eq!(parse("--sockets thread"), Ok(()));
        assert_eq!(parse("--sockets viewer --relay"), Ok(()));
        for bad in [
            "--sockets thread --relay",
            "--sockets thread --bind 127.0.0.5",
        ] {
            let e = parse(bad).expect_err(bad);
            assert!(e.contains("--sockets thread"), "{bad}: {e}");
        }
        // `auto` (the default) goes with both, and shares a thread's socket without them.
        assert_eq!(parse("--relay"), Ok(()));
        assert_eq!(parse("--bind 127.0.0.5"), Ok(()));
        let share = |extra: &str| {
            let mut v = vec!["bench", "--url", "http://127.0.0.1:1/live/demo/whep"];
            v.extend(extra.split_whitespace());
            let a = W::try_parse_from(v).expect("parses").a;
            a.sockets.threads_share(a.relay, a.bind)
        };
        assert!(share(""));
        assert!(!share("--relay"));
        assert!(!share("--bind 127.0.0.5"));
        assert!(!share("--sockets viewer"));
        assert!(share("--sockets thread"));
    }

    #[test]
    fn values_are_left_alone() {
        // A value that looks like a flag name is only rewritten when it is one.
        let v = normalize_args(["-x", "-5", "-urlx"].map(String::from));
        assert_eq!(v, ["-x", "-5", "-urlx"]);
    }
}

/// Which RTP packets a viewer authenticates and decrypts (`--verify`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Verify {
    /// Every one.
    #[default]
    All,
    /// 1 in N (N ≥ 2).
    Sample(u32),
}

impl Verify {
    /// 1 in how many.
    pub fn every(self) -> u32 {
        match self {
            Verify::All => 1,
            Verify::Sample(n) => n,
        }
    }
}

impl std::fmt::Display for Verify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verify::All => f.write_str("all"),
            Verify::Sample(n) => write!(f, "sample:{n}"),
        }
    }
}

impl std::str::FromStr for Verify {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "all" {
            return Ok(Verify::All);
        }
        let n = s
            .strip_prefix("sample:")
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|n| (2..=1_000_000).contains(n))
            .ok_or_else(|| {
                format!("--verify takes all or sample:N (N in 2..=1000000), got {s:?}")
            })?;
        Ok(Verify::Sample(n))
    }
}

#[cfg(test)]
mod verify_tests {
    use super::Verify;

    #[test]
    fn verify_parses_all_and_sample() {
        assert_eq!("all".parse::<Verify>(), Ok(Verify::All));
        assert_eq!("sample:16".parse::<Verify>(), Ok(Verify::Sample(16)));
        assert_eq!(Verify::Sample(16).to_string(), "sample:16");
        assert_eq!(Verify::Sample(16).every(), 16);
        assert_eq!(Verify::All.every(), 1);
        for bad in [
            "sample:1",
            "sample:0",
            "sample:",
            "sample:x",
            "some",
            "sample:-3",
        ] {
            let e = bad.parse::<Verify>().expect_err(bad);
            assert!(e.contains("--verify"), "{e}");
        }
    }
}
