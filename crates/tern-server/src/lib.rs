//! tern's IO driver: the media engine threads on the shared UDP port, the HTTP server
//! (WHEP, WHIP, OvenMediaEngine-style WebSocket signalling, pages, API), RTMP ingest, the
//! TURN server's sockets, configuration and start-up/shutdown.
//!
//! The protocol work happens in the sans-IO crates (`tern-proto`, `tern-rtc`); this crate
//! owns sockets, threads and the clock.
//!
//! # Module map
//!
//! | where | what |
//! | --- | --- |
//! | `session/` | may this client publish or play? names and dynamic streams, the app token, admission, per-address limits, the cluster claim and edge pull, lifetimes: one grant or one `Refusal` for every surface (`Core` is the state they share) |
//! | `http/` | the HTTP surfaces: `router.rs` (every route) over `whep.rs`, `whip.rs`, `ome.rs`, `hls.rs`, `api.rs`, `metrics.rs`, `openapi.rs`, `pages.rs`, `memory.rs`, `cluster.rs`, `recordings.rs`; below them `state.rs` (the WHEP session table over `Core`), `extract.rs`, `error.rs` (`HttpError`), `reply.rs`, `trickle.rs`, `listener.rs`; `server.rs` starts and stops it all (the runtime, the listeners, serving, the grace) |
//! | `rtmp.rs` | RTMP ingest: the listener and one thread per connection; a surface over `session/` |
//! | `srt/` | SRT ingest: the listener thread over `srt-protocol` (behind a `Transport` trait), stream IDs, one publisher thread per caller feeding MPEG-TS through `tern_rtc::ts_publisher`; a surface over `session/` |
//! | `rtsp/` | RTSP cameras (`[[app.source]]`): one `RtspPull` thread per source on `retina`, on demand or always, retried with backoff; its frames through `tern_rtc::av::AvPipeline`; state, events, metrics |
//! | `feed/` | after the grant: `Publish::attach` → a `PublisherSlot` whose `Drop` removes the publisher, for every kind (WHIP, RTMP, SRT, RTSP, edge pull); `FrameSink`, the one way a frame publisher's `AvEvent`s go in (packets to the engine, samples to the packagers, the B-frame watch, the ingest pools' ledger) |
//! | `tap.rs` | the media tap: one `MediaTap` thread over the ring packets of streams being packaged, and the samples of frame publishers, to its subscribers (LL-HLS, recordings), each answering `wanted(stream)`; they depacketize with `tern_rtc::package` |
//! | `media/` | the media path. `engine.rs` starts the threads and is the HTTP side's handle; `worker.rs` is an app or stream worker's loop, its state in typed parts (`Seat`, `Links`, `Shared`, `Streams`) and owned ones (`table.rs`: the viewer table; `worker/fanout.rs`, `worker/deadlines.rs`, `worker/outbox.rs`, `worker/adaptation.rs`) and its work in `worker/viewers.rs`, `worker/publishers.rs`, `worker/timers.rs` (RTCP, sweep), `worker/layers.rs` (runs `tern_rtc::viewer::adapt::LayerChooser`); `socket.rs` receives and routes datagrams (its `sys` holds the raw `sendmmsg`, the crate's only `unsafe`); `batch.rs` sends with `sendmmsg`, each viewer's run of equal-size packets one UDP GSO message; `ingest.rs` holds the publisher slots; `link.rs` the messages and ids every thread speaks; `table.rs`, `ledger.rs`, `stats.rs` |
//! | `forward/` | forwards (restreaming): a subscriber of the tap feeding one `tern_rtc::outlet::Outlet` per stream (H264 and AAC on one timeline, Opus encoded to AAC once), one thread per forward (`link.rs`: RTMP/RTMPS through `tern_proto::rtmp::client`, SRT through `srt/caller.rs`, retried with backoff), `entry.rs` what they share, configured ones started as streams go live; `http/forwards.rs` is its API |
//! | `hls.rs` | LL-HLS sessions and packagers, a subscriber of the tap (`http/hls.rs` serves them); `hls/ladder.rs`: the lower video layers' variants, aligned with the top's |
//! | `record/` | recordings, a subscriber of the tap: packaging as LL-HLS does, the `RecordWriter` thread (`writer.rs`), the path template, listing and sweep (`files.rs`); `http/recordings.rs` is its API |
//! | `cluster/` | the Redis registry and origin map, the edge's upstream pull |
//! | `turn.rs` | the TURN server's sockets and thread around `tern_rtc::turn`; `turn/setup.rs` starts it as `[turn]` says and puts a reload's users, secret and peer lists in force |
//! | `reload.rs` | changing a running server: SIGHUP, `POST /v1/config/reload`, the file watcher and the config API's edits, checked whole and put in force part by part (apps, cameras, admission, slates, recording, limits, TURN's credentials); `http/config.rs` is its API |
//! | `snapshot.rs` | cached snapshots and the event bus |
//! | `limits.rs` | limits per client address |
//! | `clock.rs` | wall-clock and NTP time for the threads (sans-IO code takes `now` instead) |
//! | `drain.rs` | draining for an upgrade: no new sessions, open ones until they end or a deadline, then exit |
//! | `directory.rs` | the streams: declared ones and those publishers make, in spare engine slots |
//! | `admission.rs` | JWT and the admission webhook, close notifications |
//! | `jwt.rs` | signed tokens: an app's keys (HS256 secret, PEM public key, JWKS fetched and refreshed) and the check of one token |
//! | `outbound.rs` | calling out: the one TLS client configuration (system roots, `server.ca_file`) and the async and blocking clients made from it |
//! | `thumbs.rs` | thumbnails: a stream's latest keyframe, decoded once and served as JPEG, tapped on demand |
//! | `metrics.rs` | what the parts report in `/metrics`, held per server: the `Expose` trait a part registers, and `Exposition`, the one Prometheus text writer |
//! | `reclaim.rs` | gives freed memory back to the system after a burst |
//! | `start.rs` | what a part's start function reports when it fails (`StartError`: a socket not bound, a thread not started) |
//!
//! The configuration (the TOML file, one file per section, each with its `Default` and its own
//! check; reload and the file's edits) is the crate `tern-config` (`crates/tern-config`),
//! re-exported here as [`config`]: a leaf the parts read their settings from, built apart so
//! that the fuzz target `config_app` need not build the server.
//!
//! Imports point one way: surfaces (`http/`, `rtmp.rs`, `srt/`, `rtsp/`) stand on `feed/`
//! and `session/`, which stands
//! on `media`, `admission`, `cluster`, `directory` and `limits`; no ingest surface imports
//! `http/`, `media` never imports a surface; inside each folder nothing imports what imports
//! it. `crates/tern/tests/e2e/house.rs` checks all three, and that this map names every module.
//! [`Server::start`] starts the parts in dependency order, each by its own start function
//! (`Engine::start`, `turn::start`, `http::bind`, `rtmp::start`, ...), and reports the
//! addresses it bound; [`Server::shutdown`] stops them in the reverse order.
//!
//! # One packet, from ingest to socket
//!
//! 1. A publisher's packet arrives: a frame publisher's thread (`rtmp.rs`, `srt/`, `rtsp/`,
//!    an edge pull) hands it through its `feed::FrameSink` over the bounded data queue
//!    ([`media::link`]), a WHIP datagram comes from a socket worker (`media/socket.rs`), a
//!    clip source produces it in place.
//! 2. The stream's app worker runs it through `media/ingest.rs` (keyframe wait, sequence and
//!    timestamp rewriting into the stream's numbering).
//! 3. `worker/publishers.rs` copies the payload once into a pooled buffer, pushes the packet
//!    into the stream's ring (`tern_rtc::stream`) and hands it to every stream worker.
//! 4. Each worker rewrites the header per viewer and SRTP-protects it straight into a slot of
//!    its send batch (`worker/viewers.rs`, `tern_rtc::viewer`).
//! 5. `media/batch.rs` sends the batch with one `sendmmsg` on the shared UDP port, each
//!    viewer's run of equal-size packets one UDP GSO message.

// `unsafe` is denied everywhere but in `media/socket.rs`'s `sys` (the raw `sendmmsg` with
// UDP GSO control messages); `crates/tern/tests/e2e/house.rs` checks that no other file allows it.
#![deny(unsafe_code)]

pub mod admission;
pub mod clock;
pub mod cluster;
/// The configuration file and its checks: the crate `tern-config`, under the path
/// (`tern_server::config`) the server's parts and the command line use.
pub use tern_config as config;
pub mod directory;
pub mod drain;
pub mod feed;
pub mod forward;
pub mod hls;
pub mod http;
pub mod jwt;
pub mod limits;
pub mod media;
pub mod metrics;
pub mod outbound;
pub mod reclaim;
pub mod record;
pub mod reload;
pub mod rtmp;
pub mod rtsp;
pub mod session;
pub mod snapshot;
pub mod srt;
pub mod start;
pub mod tap;
pub mod thumbs;
pub mod turn;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::Receiver;
use tern_rtc::clip::{Clip, ClipSource};
use tern_rtc::stream::Stream;
use tern_rtc::viewer::DtlsContext;
use tracing::info;

use crate::cluster::Cluster;
use crate::config::Config;
use crate::media::{Engine, EngineStream, EngineThreads, TapPacket};
use crate::session::Core;
use crate::start::StartError;

/// Start-up errors.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// A socket could not be bound.
    #[error("cannot bind {what} on {addr}: {source}")]
    Bind {
        /// Which listener.
        what: &'static str,
        /// Address.
        addr: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
    /// The packet pool could not be made (its memory could not be reserved).
    #[error("packet pool: {0}")]
    Pool(#[from] tern_pool::PoolError),
    /// The built-in demo clip does not parse.
    #[error("demo clip: {0}")]
    Clip(#[from] tern_rtc::clip::ClipError),
    /// The DTLS certificate could not be made.
    #[error("DTLS certificate: {0}")]
    Dtls(#[from] tern_rtc::viewer::ViewerError),
    /// The cluster's Redis address is unusable.
    #[error("config key `cluster.redis`: {0}")]
    Cluster(String),
    /// A thread (or the HTTP runtime) could not be started.
    #[error("cannot start the {what} thread: {source}")]
    Thread {
        /// Which thread.
        what: &'static str,
        /// Cause.
        source: std::io::Error,
    },
    /// The HTTP server failed while serving.
    #[error("http server: {0}")]
    Http(std::io::Error),
    /// The HTTPS certificate or key does not load.
    #[error("config keys `server.tls_cert`/`server.tls_key`: {0}")]
    Tls(http::tls::TlsError),
    /// `server.ca_file` does not load.
    #[error("config key `server.ca_file`: {0}")]
    CaFile(outbound::OutboundError),
    /// Anything else that stops the server.
    #[error("{0}")]
    Other(String),
}

impl From<StartError> for ServeError {
    /// A part's [`StartError`] as the same variant here.
    fn from(e: StartError) -> Self {
        match e {
            StartError::Bind { what, addr, source } => ServeError::Bind { what, addr, source },
            StartError::Thread { what, source } => ServeError::Thread { what, source },
        }
    }
}

/// What the command line asks for: the flags of `tern serve` and `tern demo`, each
/// overriding its config key ([`ServeOptions::apply`]). A flag's doc comment is its
/// `--help` text.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServeOptions {
    /// HTTP listener (WHEP, pages, API) [default: 0.0.0.0:8080]
    #[arg(long)]
    pub http: Option<SocketAddr>,
    /// The one UDP port for all WebRTC media [default: 0.0.0.0:10000]
    #[arg(long)]
    pub media: Option<SocketAddr>,
    /// Host address announced in ICE candidates; repeat it for one candidate per address
    /// (e.g. an IPv4 and an IPv6 address with --media [::]:10000)
    #[arg(long)]
    pub candidate: Vec<IpAddr>,
    /// TOML configuration file
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// RTMP ingest listener, or `none`; `--rtmp` alone listens on 0.0.0.0:1935
    /// [default: `server.rtmp` in the config, else 0.0.0.0:1935 when that port is free]
    #[arg(long, value_name = "ADDR|none", num_args = 0..=1,
          default_missing_value = config::DEFAULT_RTMP,
          value_parser = ListenArg::rtmp)]
    pub rtmp: Option<ListenArg>,
    /// RTMPS ingest listener (RTMP over TLS, e.g. 0.0.0.0:1936), with the --tls-cert
    /// certificate [default: `server.rtmps`, else none]
    #[arg(long, value_name = "ADDR")]
    pub rtmps: Option<SocketAddr>,
    /// SRT ingest listener (UDP), or `none`; `--srt` alone listens on 0.0.0.0:8890
    /// [default: `server.srt` in the config, else off]
    #[arg(long, value_name = "ADDR|none", num_args = 0..=1,
          default_missing_value = config::DEFAULT_SRT,
          value_parser = ListenArg::srt)]
    pub srt: Option<ListenArg>,
    /// Serve the built-in clip as `live/demo`: set by `tern demo`, not a flag.
    #[arg(skip)]
    pub demo: bool,
    /// Built-in clip for `tern demo`: standard (~1.1 Mbit/s) or lite (~300 kbit/s)
    #[arg(long, value_enum, default_value_t = DemoClip::Standard)]
    pub clip: DemoClip,
    /// Run the built-in STUN/TURN server on this address, UDP and TCP (e.g. 0.0.0.0:3478)
    #[arg(long, value_name = "ADDR")]
    pub turn: Option<SocketAddr>,
    /// Also serve TURN over TLS (`turns:`) on this address, with the --tls-cert certificate
    #[arg(long = "turn-tls", value_name = "ADDR")]
    pub turn_tls: Option<SocketAddr>,
    /// Add a long-term TURN user (repeatable)
    #[arg(long = "turn-user", value_name = "NAME:PASSWORD")]
    pub turn_users: Vec<String>,
    /// Shared secret for TURN REST credentials (coturn's use-auth-secret format)
    #[arg(long, value_name = "SECRET")]
    pub turn_secret: Option<String>,
    /// Address TURN relay sockets bind to and announce
    #[arg(long, value_name = "IP")]
    pub turn_relay_ip: Option<IpAddr>,
    /// Socket workers on the media port (OvenMediaEngine's WorkerCount) [default: 1]
    #[arg(long, value_name = "N")]
    pub worker_count: Option<usize>,
    /// App workers: per-stream work (AppWorkerCount) [default: 1]
    #[arg(long, value_name = "N")]
    pub app_worker_count: Option<usize>,
    /// Stream workers: per-viewer SRTP and sends (StreamWorkerCount; 0 = app workers send) [default: 1]
    #[arg(long, value_name = "N")]
    pub stream_worker_count: Option<usize>,
    /// HTTPS listener: everything the HTTP listener serves, over TLS (h2 and http/1.1);
    /// needs --tls-cert and --tls-key [default: `server.https`, else none]
    #[arg(long, value_name = "ADDR")]
    pub https: Option<SocketAddr>,
    /// Certificate chain for --https, PEM (watched: a renewed file is picked up)
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// Private key for --tls-cert, PEM
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
}

/// The value of `--rtmp` and `--srt`: the listener's address, or `None` for `none` (off).
/// A type of its own because clap reads an `Option<Option<_>>` field its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenArg(pub Option<SocketAddr>);

impl ListenArg {
    /// `--rtmp ADDR|none`.
    fn rtmp(s: &str) -> Result<ListenArg, String> {
        config::parse_rtmp(s).map(ListenArg)
    }

    /// `--srt ADDR|none` (the same shape as `--rtmp`).
    fn srt(s: &str) -> Result<ListenArg, String> {
        config::parse_srt(s).map(ListenArg)
    }
}

impl ServeOptions {
    /// Puts the flags given over `cfg` (the file's values or the defaults): each replaces
    /// its config key (`--candidate`, repeated, the whole `server.candidate` list), but
    /// `--turn-user` adds to `turn.users`. `--config`, `--clip` and `demo` are not keys.
    pub fn apply(&self, cfg: &mut Config) {
        let server = &mut cfg.server;
        if let Some(a) = self.http {
            server.http = a;
        }
        if let Some(a) = self.media {
            server.media = a;
        }
        if !self.candidate.is_empty() {
            server.candidate = self.candidate.clone();
        }
        if let Some(r) = self.rtmp {
            server.rtmp = Some(r.0);
        }
        if let Some(a) = self.rtmps {
            server.rtmps = Some(a);
        }
        if let Some(s) = self.srt {
            server.srt = s.0;
        }
        if let Some(n) = self.worker_count {
            server.worker_count = n;
        }
        if let Some(n) = self.app_worker_count {
            server.app_worker_count = n;
        }
        if let Some(n) = self.stream_worker_count {
            server.stream_worker_count = n;
        }
        if let Some(a) = self.https {
            server.https = Some(a);
        }
        if let Some(p) = &self.tls_cert {
            server.tls_cert = Some(p.clone());
        }
        if let Some(p) = &self.tls_key {
            server.tls_key = Some(p.clone());
        }
        let turn = &mut cfg.turn;
        if let Some(a) = self.turn {
            turn.listen = Some(a);
        }
        if let Some(a) = self.turn_tls {
            turn.tls_listen = Some(a);
        }
        turn.users.extend(self.turn_users.iter().cloned());
        if let Some(s) = &self.turn_secret {
            turn.secret = Some(s.clone());
        }
        if let Some(ip) = self.turn_relay_ip {
            turn.relay_ip = Some(ip);
        }
    }
}

/// The built-in clips.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum DemoClip {
    /// 640x360, ~1 Mbit/s video + 64 kbit/s Opus.
    #[default]
    Standard,
    /// 320x180, ~240 kbit/s video + 64 kbit/s Opus: ~300 kbit/s for load tests.
    Lite,
}

/// Loads the configuration (`--config`, else the defaults), applies the command line over
/// it ([`ServeOptions::apply`]) and validates the result.
pub fn load_config(opts: &ServeOptions) -> Result<Config, ServeError> {
    let mut cfg = match &opts.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    opts.apply(&mut cfg);
    // Command-line values pass the same checks as the file's, named by their config key.
    cfg.validate()?;
    Ok(cfg)
}

/// Every address a running server bound (port 0 in the config becomes the port the
/// kernel chose).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addresses {
    /// The HTTP listener (pages, WHEP, WHIP, OME signalling, LL-HLS, the API).
    pub http: SocketAddr,
    /// The HTTPS listener (the same over TLS), if HTTPS is on.
    pub https: Option<SocketAddr>,
    /// The one UDP port of all WebRTC media.
    pub media: SocketAddr,
    /// The RTMP listener, if RTMP is on.
    pub rtmp: Option<SocketAddr>,
    /// The RTMPS listener, if on.
    pub rtmps: Option<SocketAddr>,
    /// The SRT listener (UDP), if SRT is on.
    pub srt: Option<SocketAddr>,
    /// The STUN/TURN listener (UDP and TCP), if TURN is on.
    pub turn: Option<SocketAddr>,
    /// The TURN-over-TLS listener, if on.
    pub turns: Option<SocketAddr>,
}

impl Addresses {
    /// The HTTP(S), media and TURN (UDP/TCP, TLS) addresses; RTMP and SRT still off.
    fn of(
        bound: &http::Bound,
        media: SocketAddr,
        turn: Option<(SocketAddr, Option<SocketAddr>)>,
    ) -> Addresses {
        Addresses {
            http: bound.http_addr,
            https: bound.https_addr,
            media,
            rtmp: None,
            rtmps: None,
            srt: None,
            turn: turn.map(|t| t.0),
            turns: turn.and_then(|t| t.1),
        }
    }
}

impl std::fmt::Display for Addresses {
    /// `http=ADDR media=ADDR rtmp=ADDR|- srt=ADDR|- turn=ADDR|- https=ADDR|- turns=ADDR|-
    /// rtmps=ADDR|-`:
    /// the line `tern serve` prints once it listens, for supervisors and tests.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let opt = |a: Option<SocketAddr>| a.map_or("-".to_string(), |a| a.to_string());
        write!(
            f,
            "http={} media={} rtmp={} srt={} turn={} https={} turns={} rtmps={}",
            self.http,
            self.media,
            opt(self.rtmp),
            opt(self.srt),
            opt(self.turn),
            opt(self.https),
            opt(self.turns),
            opt(self.rtmps)
        )
    }
}

/// A running server: every listener bound, every thread started. [`Server::shutdown`]
/// stops it (as SIGTERM does); dropping it without does the same.
pub struct Server {
    addrs: Addresses,
    core: Arc<Core>,
    /// The parts, in the order they started.
    parts: Parts,
    /// The HTTP side: the last part to start, kept apart because
    /// [`Server::run_until_signal`] waits on it.
    http: Option<http::Serving>,
}

impl Server {
    /// Starts a server on `cfg` (validated, with the command line applied:
    /// [`load_config`]); `opts.demo` and `opts.clip` say whether to serve the demo clip.
    /// The parts start in dependency order, each by its own start function; a part goes on
    /// the list for [`Server::shutdown`] once it runs. Returns once every listener is bound
    /// and the HTTP server accepts; port 0 in the config binds a port the kernel chooses
    /// ([`Server::addrs`] reports it). A failure part-way leaves what already started to
    /// the process's exit (as `tern serve` exits).
    pub fn start(cfg: Config, opts: &ServeOptions) -> Result<Server, ServeError> {
        // Every call out (webhooks, JWKS, an edge's origin) trusts these roots; with the
        // admission gates' key files, read before anything starts, so that a bad file
        // leaves nothing running.
        let outbound =
            outbound::Outbound::load(cfg.server.ca_file.as_deref()).map_err(ServeError::CaFile)?;
        let admission = admission::Admission::new(&cfg.apps, &outbound)?;
        let mut parts = Parts::default();
        let pool = Engine::packet_pool(&cfg.tunables)?;
        parts.add(reclaim::start(&pool, cfg.tunables.pool_trim_s)?);
        let (streams, slates, directory) = streams(&cfg, opts)?;
        let dtls = Arc::new(DtlsContext::generate_with(&cfg.tunables.srtp_profiles())?);
        let (tap_tx, tap_rx) = crossbeam_channel::bounded(media::TAP_QUEUE);
        let (engine, media_addr, engine_threads) =
            Engine::start(&cfg, streams, slates.clone(), dtls.clone(), pool, tap_tx)?;
        let candidates = cfg.server.candidates(cfg.server.media);
        let port = media_addr.port();
        let (tls, rtmps) = tls_listeners(&cfg)?;
        let certs = tls.as_ref().map(http::Tls::store);
        let (mut turn, links) =
            turn::setup::start(&cfg, &candidates, port, &engine.stats, certs)?.unzip();
        let turn_addrs = turn.as_ref().map(|t| (t.addr, t.tls_addr));
        let turn_reload = turn.as_mut().and_then(|t| t.reload.take());
        parts.add(turn);
        let bound = http::bind(&cfg, tls)?;
        let cluster = node_cluster(&cfg, candidates[0], &bound, &dtls, &outbound)?;
        let core = Core::new(
            cfg,
            directory,
            engine,
            *dtls.fingerprint(),
            candidates,
            port,
            admission,
        );
        let core = Arc::new(core.with_turn(links).with_cluster(cluster));
        let _ = core.runtime.set(bound.runtime());
        let media = MediaThreads::start(&core, engine_threads, tap_rx, &outbound)?;
        parts.add(media);
        let reload = sources_and_reload(&mut parts, &core, opts, &outbound, (slates, turn_reload))?;
        let srt = srt::start(&core)?;
        let rtmp = rtmp::start(&core, rtmps)?;
        let addrs = Addresses {
            rtmp: rtmp.addr(),
            rtmps: rtmp.tls_addr(),
            srt: srt.as_ref().map(|s| s.addr),
            ..Addresses::of(&bound, media_addr, turn_addrs)
        };
        parts.add(srt);
        parts.add(rtmp);
        let http = http::serve(bound, &core, Some(reload));
        info!(http = %addrs.http, media = %addrs.media, rtmp = ?addrs.rtmp, srt = ?addrs.srt, candidates = ?core.candidate_ips, "tern listening");
        Ok(Server {
            addrs,
            core,
            parts,
            http: Some(http),
        })
    }

    /// Every address the server bound.
    pub fn addrs(&self) -> Addresses {
        self.addrs
    }

    /// What every surface shares (the session layer's state), for tests and embedders.
    pub fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// Waits for SIGINT or SIGTERM, then [`Server::shutdown`].
    pub fn run_until_signal(mut self) -> Result<(), ServeError> {
        let ended = self.http.as_mut().and_then(http::Serving::until_signal);
        self.shutdown();
        // The HTTP server ending by itself is an error (its listener failed).
        match ended {
            Some(r) => r
                .map_err(|e| ServeError::Other(format!("http server: {e}")))?
                .map_err(ServeError::Http),
            None => Ok(()),
        }
    }

    /// Stops the server, its parts in the reverse order of their start: the HTTP side
    /// (open connections get [`http::GRACE`] to finish; then the cluster membership ends,
    /// at once rather than after the TTL), RTMP, SRT, the RTSP sources, the media engine
    /// with the media tap's thread and the recorder (files finished), TURN and the reclaim
    /// pass.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let Some(http) = self.http.take() else {
            return;
        };
        http.stop();
        self.parts.stop();
        info!("tern stopped");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A started part of the server.
trait Part: Send + Sync {
    /// Stops it and waits for its threads.
    fn stop(self: Box<Self>);
}

/// The parts a server started, in the order they started.
#[derive(Default)]
struct Parts(Vec<Box<dyn Part>>);

impl Parts {
    /// `part` runs: it goes last on the list.
    fn add(&mut self, part: impl Part + 'static) {
        self.0.push(Box::new(part));
    }

    /// Stops every part, the last started first.
    fn stop(&mut self) {
        while let Some(part) = self.0.pop() {
            part.stop();
        }
    }
}

/// A part the configuration may leave off.
impl<P: Part> Part for Option<P> {
    fn stop(self: Box<Self>) {
        if let Some(p) = *self {
            Box::new(p).stop();
        }
    }
}

impl Part for reclaim::ReclaimThread {
    fn stop(self: Box<Self>) {
        // Its `Drop` stops the thread and waits for it.
        drop(self);
    }
}

impl Part for turn::TurnHandle {
    fn stop(self: Box<Self>) {
        turn::TurnHandle::stop(*self);
    }
}

impl Part for rtmp::RtmpServers {
    fn stop(self: Box<Self>) {
        rtmp::RtmpServers::stop(*self);
    }
}

impl Part for srt::SrtServer {
    fn stop(self: Box<Self>) {
        srt::SrtServer::stop(*self);
    }
}

impl Part for reload::Watcher {
    fn stop(self: Box<Self>) {
        reload::Watcher::stop(*self);
    }
}

impl Part for Arc<rtsp::Sources> {
    fn stop(self: Box<Self>) {
        rtsp::Sources::stop(&self);
    }
}

/// The media engine's threads and the two threads it feeds, one part: the media tap's (the
/// app workers hold its queue's senders) and the recorder's writer (the tap and the frame
/// publishers feed it). It runs whole once those two run, after the [`Core`] that owns them,
/// and stops in the order media flows, so that each thread sees its input end.
struct MediaThreads {
    core: Arc<Core>,
    engine: EngineThreads,
    tap: std::thread::JoinHandle<()>,
    record: Option<std::thread::JoinHandle<()>>,
}

impl MediaThreads {
    /// Starts the recorder's writer (its webhooks calling out through `outbound`) and the
    /// tap's thread on `tap`, beside the engine's threads `engine`.
    fn start(
        core: &Arc<Core>,
        engine: EngineThreads,
        tap: Receiver<TapPacket>,
        outbound: &outbound::Outbound,
    ) -> Result<MediaThreads, StartError> {
        let record = core
            .record
            .spawn(outbound)
            .map_err(StartError::thread("recording writer"))?;
        core.forwards
            .set_tls(outbound.tls_config(), outbound.unverified_config());
        let tap = core
            .tap
            .spawn(tap)
            .map_err(StartError::thread("media tap"))?;
        Ok(MediaThreads {
            core: core.clone(),
            engine,
            tap,
            record,
        })
    }
}

impl Part for MediaThreads {
    fn stop(self: Box<Self>) {
        let MediaThreads {
            core,
            engine,
            tap,
            record,
        } = *self;
        // Forwards end first: their receivers see the stream end rather than stall.
        core.forwards.shutdown();
        core.engine.stop_all();
        engine.join();
        // The workers held the tap's senders: the tap's thread has seen its queue close.
        let _ = tap.join();
        // Nothing feeds the recordings any more: their files are finished.
        core.record.shutdown();
        if let Some(h) = record {
            let _ = h.join();
        }
    }
}

/// The RTSP cameras (started) and the configuration's reloader over them, the slates and
/// TURN's credentials (`turn`), with the file's watcher when `server.watch_config` is on.
fn sources_and_reload(
    parts: &mut Parts,
    core: &Arc<Core>,
    opts: &ServeOptions,
    outbound: &outbound::Outbound,
    (slates, turn): (Arc<media::Slates>, Option<reload::TurnReload>),
) -> Result<Arc<reload::Reload>, ServeError> {
    let sources = rtsp::Sources::start(core.clone(), outbound);
    parts.add(sources.clone());
    let overlay = opts.clone();
    let reload = reload::Reload::new(
        core,
        opts.config.clone(),
        Box::new(move |c| overlay.apply(c)),
        opts.demo.then(|| "live/demo".to_string()),
        reload::Parts {
            slates,
            sources,
            turn,
        },
    );
    parts.add(
        reload
            .watcher()
            .map_err(StartError::thread("config watcher"))?,
    );
    Ok(reload)
}

/// The certificate's listeners: HTTPS and TURN over TLS take the store (`http::Tls`), RTMPS
/// a rustls configuration over it (no ALPN), when `server.rtmps` is on.
fn tls_listeners(
    cfg: &Config,
) -> Result<(Option<http::Tls>, Option<Arc<rustls::ServerConfig>>), ServeError> {
    let tls =
        http::load_tls(&cfg.server, cfg.turn.tls_listen.is_some()).map_err(ServeError::Tls)?;
    let rtmps = match (&tls, cfg.server.rtmps) {
        (Some(t), Some(_)) => Some(t.plain_config().map_err(ServeError::Tls)?),
        _ => None,
    };
    Ok((tls, rtmps))
}

/// This node's cluster, if `[cluster]` is on; the first candidate `host` is the node's
/// address where one is needed (its default cluster URL).
fn node_cluster(
    cfg: &Config,
    host: std::net::IpAddr,
    bound: &http::Bound,
    dtls: &Arc<DtlsContext>,
    outbound: &outbound::Outbound,
) -> Result<Option<Arc<Cluster>>, ServeError> {
    Cluster::for_node(cfg.cluster.as_ref(), host, bound.http_addr, dtls, outbound)
        .map_err(ServeError::Cluster)
}

/// The engine's streams, the apps' slates and the directory: the demo clip (with
/// `opts.demo`), then the declared streams (not live until a publisher arrives, unless
/// their app has a slate), then the spare slots publishers make streams in (named and given
/// rings when made).
fn streams(
    cfg: &Config,
    opts: &ServeOptions,
) -> Result<(Vec<EngineStream>, Arc<media::Slates>, directory::Directory), ServeError> {
    let t = &cfg.tunables;
    let mut engine_streams = Vec::new();
    let mut infos: HashMap<String, usize> = HashMap::new();
    if opts.demo {
        let clip = match opts.clip {
            DemoClip::Standard => Clip::builtin(),
            DemoClip::Lite => Clip::builtin_lite(),
        }?;
        let src = ClipSource::new(Arc::new(clip), Instant::now());
        infos.insert("live/demo".to_string(), 0);
        engine_streams.push(EngineStream::new(
            "live/demo".into(),
            Stream::new(t.video_ring, t.audio_ring),
            Some(src),
        ));
    }
    for app in &cfg.apps {
        // A camera source declares its stream.
        let sources = app.sources.iter().map(|s| &s.stream);
        for s in app.streams.iter().chain(sources) {
            let key = format!("{}/{}", app.name, s);
            if infos.contains_key(&key) {
                continue;
            }
            infos.insert(key.clone(), engine_streams.len());
            engine_streams.push(EngineStream::new(
                key,
                Stream::new(t.video_ring, t.audio_ring),
                None,
            ));
        }
    }
    let spare: Vec<usize> =
        (engine_streams.len()..engine_streams.len() + cfg.limits.dynamic_streams).collect();
    for _ in &spare {
        engine_streams.push(EngineStream::new(String::new(), Stream::new(1, 1), None));
    }
    // Each app's slate (`fallback`), which its streams play while they have no publisher.
    let slates = Arc::new(media::Slates::load(&cfg.apps)?);
    Ok((
        engine_streams,
        slates,
        directory::Directory::new(infos, spare),
    ))
}
