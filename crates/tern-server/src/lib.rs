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
//! | `http/` | the HTTP surfaces: `router.rs` (every route) over `whep.rs`, `whip.rs`, `ome.rs`, `hls.rs`, `api.rs`, `metrics.rs`, `openapi.rs`, `pages.rs`, `memory.rs`, `cluster.rs`, `recordings.rs`; below them `state.rs` (the WHEP session table over `Core`), `extract.rs`, `error.rs` (`HttpError`), `reply.rs`, `trickle.rs`, `listener.rs` |
//! | `rtmp.rs` | RTMP ingest: the listener and one thread per connection; a surface over `session/` |
//! | `srt/` | SRT ingest: the listener thread over `srt-protocol` (behind a `Transport` trait), stream IDs, one publisher thread per caller feeding MPEG-TS through `tern_rtc::ts_publisher`; a surface over `session/` |
//! | `rtsp/` | RTSP cameras (`[[app.source]]`): one `RtspPull` thread per source on `retina`, on demand or always, retried with backoff; its frames through `tern_rtc::av::AvPipeline`; state, events, metrics |
//! | `feed/` | after the grant: `Publish::attach` → a `PublisherSlot` whose `Drop` removes the publisher, for every kind (WHIP, RTMP, SRT, RTSP, edge pull); `FrameSink`, the one way a frame publisher's `AvEvent`s go in (packets to the engine, samples to the packagers, the B-frame watch, the ingest pools' ledger) |
//! | `tap.rs` | the media tap: one `MediaTap` thread over the ring packets of streams being packaged, and the samples of frame publishers, to its subscribers (LL-HLS, recordings), each answering `wanted(stream)`; they depacketize with `tern_rtc::package` |
//! | `media/` | the media path. `engine.rs` starts the threads and is the HTTP side's handle; `worker.rs` is an app or stream worker's loop, its state in owned parts (`table.rs`: the viewer table; `worker/fanout.rs`, `worker/deadlines.rs`, `worker/outbox.rs`, `worker/adaptation.rs`) and its work in `worker/viewers.rs`, `worker/publishers.rs`, `worker/timers.rs` (RTCP, sweep), `worker/layers.rs` (runs `tern_rtc::viewer::adapt::LayerChooser`); `socket.rs` receives and routes datagrams (its `sys` holds the raw `sendmmsg`, the crate's only `unsafe`); `batch.rs` sends with `sendmmsg`, each viewer's run of equal-size packets one UDP GSO message; `ingest.rs` holds the publisher slots; `link.rs` the messages and ids every thread speaks; `table.rs`, `ledger.rs`, `stats.rs`, `clock.rs` |
//! | `hls.rs` | LL-HLS sessions and packagers, a subscriber of the tap (`http/hls.rs` serves them) |
//! | `record/` | recordings, a subscriber of the tap: packaging as LL-HLS does, the `RecordWriter` thread (`writer.rs`), the path template, listing and sweep (`files.rs`); `http/recordings.rs` is its API |
//! | `cluster/` | the Redis registry and origin map, the edge's upstream pull |
//! | `turn.rs` | the TURN server's sockets and thread around `tern_rtc::turn` |
//! | `snapshot.rs` | cached snapshots and the event bus |
//! | `limits.rs` | limits per client address |
//! | `directory.rs` | the streams: declared ones and those publishers make, in spare engine slots |
//! | `admission.rs` | JWT and the admission webhook, close notifications |
//! | `reclaim.rs` | gives freed memory back to the system after a burst |
//! | `config/` | the TOML configuration: one file per section, each with its `Default` and its own check |
//!
//! Imports point one way: surfaces (`http/`, `rtmp.rs`, `srt/`, `rtsp/`) stand on `feed/`
//! and `session/`, which stands
//! on `media`, `admission`, `cluster`, `directory` and `limits`; no ingest surface imports
//! `http/`, `media` never imports a surface; inside each folder nothing imports what imports
//! it. `crates/tern/tests/e2e/house.rs` checks all three, and that this map names every module.
//! [`Server::start`] puts them together and reports the addresses it bound.
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
pub mod cluster;
pub mod config;
pub mod directory;
pub mod feed;
pub mod hls;
pub mod http;
pub mod limits;
pub mod media;
pub mod reclaim;
pub mod record;
pub mod rtmp;
pub mod rtsp;
pub mod session;
pub mod snapshot;
pub mod srt;
pub mod tap;
pub mod turn;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use tern_pool::{BufferPool, PoolConfig};
use tern_rtc::clip::{Clip, ClipSource};
use tern_rtc::stream::Stream;
use tern_rtc::viewer::DtlsContext;
use tracing::info;

use crate::config::Config;
use crate::http::AppState;
use crate::media::{Engine, EngineConfig, EngineStream, WorkerCounts};
use crate::session::Core;

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
    /// Anything else that stops the server.
    #[error("{0}")]
    Other(String),
}

/// What the command line asks for.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// `--http`, overriding the config.
    pub http: Option<SocketAddr>,
    /// `--media`, overriding the config.
    pub media: Option<SocketAddr>,
    /// `--candidate` (repeatable), overriding the config when given.
    pub candidate: Vec<IpAddr>,
    /// `--config`.
    pub config: Option<PathBuf>,
    /// `--rtmp` (`Some(None)`: `--rtmp none`), overriding the config.
    pub rtmp: Option<Option<SocketAddr>>,
    /// `--srt` (`Some(None)`: `--srt none`), overriding the config.
    pub srt: Option<Option<SocketAddr>>,
    /// Serve the built-in clip as `live/demo`.
    pub demo: bool,
    /// Which built-in clip `demo` serves.
    pub clip: DemoClip,
    /// `--turn`: the STUN/TURN listen address, overriding `turn.listen`.
    pub turn: Option<SocketAddr>,
    /// `--turn-user NAME:PASSWORD` (repeatable), added to `turn.users`.
    pub turn_users: Vec<String>,
    /// `--turn-secret`, overriding `turn.secret`.
    pub turn_secret: Option<String>,
    /// `--turn-relay-ip`, overriding `turn.relay_ip`.
    pub turn_relay_ip: Option<IpAddr>,
    /// `--worker-count`, overriding `server.worker_count`.
    pub worker_count: Option<usize>,
    /// `--app-worker-count`, overriding `server.app_worker_count`.
    pub app_worker_count: Option<usize>,
    /// `--stream-worker-count`, overriding `server.stream_worker_count`.
    pub stream_worker_count: Option<usize>,
    /// `--https`, overriding `server.https`.
    pub https: Option<SocketAddr>,
    /// `--tls-cert`, overriding `server.tls_cert`.
    pub tls_cert: Option<PathBuf>,
    /// `--tls-key`, overriding `server.tls_key`.
    pub tls_key: Option<PathBuf>,
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

/// Loads the configuration and applies command-line overrides.
pub fn load_config(opts: &ServeOptions) -> Result<Config, ServeError> {
    let mut cfg = match &opts.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    if let Some(a) = opts.http {
        cfg.server.http = a;
    }
    if let Some(a) = opts.media {
        cfg.server.media = a;
    }
    if !opts.candidate.is_empty() {
        cfg.server.candidate = opts.candidate.clone();
    }
    if let Some(r) = opts.rtmp {
        cfg.server.rtmp = Some(r);
    }
    if let Some(s) = opts.srt {
        cfg.server.srt = s;
    }
    if let Some(a) = opts.turn {
        cfg.turn.listen = Some(a);
    }
    cfg.turn.users.extend(opts.turn_users.iter().cloned());
    if let Some(s) = &opts.turn_secret {
        cfg.turn.secret = Some(s.clone());
    }
    if let Some(ip) = opts.turn_relay_ip {
        cfg.turn.relay_ip = Some(ip);
    }
    if let Some(n) = opts.worker_count {
        cfg.server.worker_count = n;
    }
    if let Some(n) = opts.app_worker_count {
        cfg.server.app_worker_count = n;
    }
    if let Some(n) = opts.stream_worker_count {
        cfg.server.stream_worker_count = n;
    }
    if let Some(a) = opts.https {
        cfg.server.https = Some(a);
    }
    if let Some(p) = &opts.tls_cert {
        cfg.server.tls_cert = Some(p.clone());
    }
    if let Some(p) = &opts.tls_key {
        cfg.server.tls_key = Some(p.clone());
    }
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
    /// The SRT listener (UDP), if SRT is on.
    pub srt: Option<SocketAddr>,
    /// The STUN/TURN listener (UDP and TCP), if TURN is on.
    pub turn: Option<SocketAddr>,
}

impl std::fmt::Display for Addresses {
    /// `http=ADDR media=ADDR rtmp=ADDR|- srt=ADDR|- turn=ADDR|- https=ADDR|-`: the line
    /// `tern serve` prints once it listens, for supervisors and tests.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let opt = |a: Option<SocketAddr>| a.map_or("-".to_string(), |a| a.to_string());
        write!(
            f,
            "http={} media={} rtmp={} srt={} turn={} https={}",
            self.http,
            self.media,
            opt(self.rtmp),
            opt(self.srt),
            opt(self.turn),
            opt(self.https)
        )
    }
}

/// A running server: every listener bound, every thread started. [`Server::shutdown`]
/// stops it (as SIGTERM does); dropping it without does the same.
pub struct Server {
    addrs: Addresses,
    core: Arc<Core>,
    rt: Option<tokio::runtime::Runtime>,
    /// Tells the HTTP server to stop accepting and finish what it serves.
    stop_http: Option<tokio::sync::oneshot::Sender<()>>,
    http_task: Option<tokio::task::JoinHandle<Result<(), ServeError>>>,
    rtmp: Option<rtmp::RtmpServer>,
    srt: Option<srt::SrtServer>,
    sources: Option<Arc<rtsp::Sources>>,
    turn: Option<turn::TurnHandle>,
    engine_threads: Option<media::EngineThreads>,
    tap_thread: Option<std::thread::JoinHandle<()>>,
    record_thread: Option<std::thread::JoinHandle<()>>,
    _reclaim: Option<reclaim::ReclaimThread>,
}

impl Server {
    /// Starts a server on `cfg` (validated, with the command line applied:
    /// [`load_config`]); `opts.demo` and `opts.clip` say whether to serve the demo clip.
    /// Returns once every listener is bound and the HTTP server accepts; port 0 in the
    /// config binds a port the kernel chooses ([`Server::addrs`] reports it). A failure
    /// part-way leaves what already started to the process's exit (as `tern serve` exits).
    pub fn start(cfg: Config, opts: &ServeOptions) -> Result<Server, ServeError> {
        let t = &cfg.tunables;
        let pool = BufferPool::new(PoolConfig {
            name: "packet_buffers",
            lower: 1,
            upper: t.max_payload,
            initial: t.pool_initial,
            max_free: t.pool_max_free,
            low_water: t.pool_initial / 4,
            prefault: true,
            huge_pages: false,
        })?;
        let reclaim = match reclaim::Reclaimer::new(pool.clone(), t.pool_trim_s, Instant::now()) {
            Some(r) => Some(r.spawn().map_err(|source| ServeError::Thread {
                what: "reclaim",
                source,
            })?),
            None => None,
        };
        let (engine_streams, directory) = streams(&cfg, opts)?;
        let dtls = Arc::new(DtlsContext::generate_with(&t.srtp_profiles())?);
        let media = cfg.server.media;
        let (tap_tx, tap_rx) = crossbeam_channel::bounded(media::TAP_QUEUE);
        let (handle, media_addr, engine_threads) = Engine::spawn(EngineConfig {
            bind: media,
            streams: engine_streams,
            dtls: dtls.clone(),
            pool,
            cname: cfg.server.cname.clone(),
            publisher_timeouts: (&cfg.server).into(),
            rings: (t.video_ring, t.audio_ring),
            // Nothing is sent while no stream is packaged or recorded.
            tap: Some(tap_tx),
            gso: t.gso == config::GsoMode::Auto,
            pause_video: t.pause_video_below_estimate,
            workers: WorkerCounts {
                socket: cfg.server.worker_count,
                app: cfg.server.app_worker_count,
                stream: cfg.server.stream_worker_count,
            },
        })
        .map_err(|source| ServeError::Bind {
            what: "media (UDP)",
            addr: media,
            source,
        })?;
        let candidate_ips = cfg.server.candidates(media);
        // The first is the node's address where one is needed (TURN relay, cluster URL).
        let candidate_ip = candidate_ips[0];
        let turn = match cfg.turn.listen {
            Some(listen) => Some(start_turn(
                &cfg,
                listen,
                &candidate_ips,
                media_addr.port(),
                handle.stats.clone(),
            )?),
            None => None,
        };
        let links = turn.as_ref().map(|(_, l)| l.clone());
        let http = cfg.server.http;
        let rtmp_bind = cfg.server.rtmp;
        let max_payload = cfg.tunables.max_payload;
        // A trusted proxy carries many clients over its connections: the per-address limits
        // that matter (viewers, publishers, HLS sessions) count the clients behind it.
        let mut http_exempt = cfg.limits.exempt_ranges();
        http_exempt.extend(cfg.server.trusted_proxy_ranges());
        let http_per_ip = limits::PerAddress::new(
            "HTTP connections",
            cfg.limits.http_connections_per_ip,
            &http_exempt,
        );
        let redirect_http = cfg.server.redirect_http;
        let tls = match (&cfg.server.https, &cfg.server.tls_cert, &cfg.server.tls_key) {
            (Some(addr), Some(cert), Some(key)) => {
                let store = http::CertStore::load(cert, key).map_err(ServeError::Tls)?;
                Some((*addr, store))
            }
            _ => None,
        };
        let rtmp_per_ip = limits::PerAddress::new(
            "RTMP connections",
            cfg.limits.rtmp_connections_per_ip,
            &cfg.limits.exempt_ranges(),
        );
        let srt_bind = cfg.server.srt;
        let srt_per_ip = limits::PerAddress::new(
            "SRT connections",
            cfg.limits.srt_connections_per_ip,
            &cfg.limits.exempt_ranges(),
        );
        // The runtime first: RTMP connections block on it for the session layer, and the
        // HTTP listener binds on it (a cluster node's default URL needs its port).
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("HttpWorker")
            .enable_all()
            .build()
            .map_err(|source| ServeError::Thread {
                what: "HTTP runtime",
                source,
            })?;
        let listener = rt
            .block_on(tokio::net::TcpListener::bind(http))
            .and_then(|l| l.local_addr().map(|a| (l, a)));
        let (listener, http_addr) = listener.map_err(|source| ServeError::Bind {
            what: "HTTP",
            addr: http,
            source,
        })?;
        let https = match tls {
            Some((addr, store)) => {
                let l = rt
                    .block_on(tokio::net::TcpListener::bind(addr))
                    .and_then(|l| l.local_addr().map(|a| (l, a)));
                let (l, bound) = l.map_err(|source| ServeError::Bind {
                    what: "HTTPS",
                    addr,
                    source,
                })?;
                let config = store.server_config().map_err(ServeError::Tls)?;
                Some((l, bound, store, config))
            }
            None => None,
        };
        let cluster = match cfg.cluster.clone() {
            Some(c) => {
                let c = c.with_default_url(candidate_ip, http_addr);
                Some(Arc::new(
                    cluster::Cluster::new(c, dtls.clone()).map_err(ServeError::Cluster)?,
                ))
            }
            None => None,
        };
        let core = Arc::new(
            Core::new(
                cfg,
                directory,
                handle.clone(),
                *dtls.fingerprint(),
                candidate_ips.clone(),
                media_addr.port(),
            )
            .with_turn(links)
            .with_cluster(cluster),
        );
        let _ = core.runtime.set(rt.handle().clone());
        let record_thread = core.record.spawn().map_err(|source| ServeError::Thread {
            what: "recording writer",
            source,
        })?;
        let tap_thread = core
            .tap
            .spawn(tap_rx)
            .map_err(|source| ServeError::Thread {
                what: "media tap",
                source,
            })?;
        let spawn_rtmp =
            |addr| rtmp::RtmpServer::spawn(addr, core.clone(), max_payload, rtmp_per_ip.clone());
        let rtmp = match rtmp_bind {
            Some(Some(addr)) => Some(spawn_rtmp(addr).map_err(|source| ServeError::Bind {
                what: "RTMP",
                addr,
                source,
            })?),
            Some(None) => None,
            // Not configured: the default port if it is free.
            None => {
                let addr: SocketAddr = config::DEFAULT_RTMP.parse().expect("a valid address");
                match spawn_rtmp(addr) {
                    Ok(r) => Some(r),
                    Err(e) => {
                        tracing::warn!(
                            "RTMP ingest is off: cannot bind the default {addr} ({e}); set server.rtmp or --rtmp"
                        );
                        None
                    }
                }
            }
        };
        let srt = match srt_bind {
            Some(addr) => Some(
                srt::SrtServer::spawn(addr, core.clone(), max_payload, srt_per_ip).map_err(
                    |source| ServeError::Bind {
                        what: "SRT",
                        addr,
                        source,
                    },
                )?,
            ),
            None => None,
        };
        let sources = Some(rtsp::Sources::start(core.clone()));
        let https_addr = https.as_ref().map(|h| h.1);
        let state =
            Arc::new(AppState::new(core.clone()).with_tls(https.as_ref().map(|h| h.2.clone())));
        let (stop_http, stopping) = tokio::sync::oneshot::channel::<()>();
        let http_task = rt.spawn(async move {
            start_service_tasks(&state);
            // One stop for both listeners.
            let (stop_all, stop_rx) = tokio::sync::watch::channel(false);
            tokio::spawn(async move {
                let _ = stopping.await;
                let _ = stop_all.send(true);
            });
            let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
                let _ = rx.wait_for(|s| *s).await;
            };
            let routes = http::router(state);
            let plain_routes = match https_addr {
                Some(a) if redirect_http => http::redirect_router(a.port()),
                _ => routes.clone(),
            };
            let plain = axum::serve(
                http::LimitedListener::new(listener, http_per_ip.clone()),
                plain_routes.into_make_service_with_connect_info::<http::Peer>(),
            )
            .with_graceful_shutdown(stopped(stop_rx.clone()));
            let Some((l, _, store, config)) = https else {
                return plain.await.map_err(ServeError::Http);
            };
            store.watch();
            let tls = http::TlsListener::spawn(l, http_per_ip, config).map_err(ServeError::Http)?;
            let secure = axum::serve(
                tls,
                routes.into_make_service_with_connect_info::<http::Peer>(),
            )
            .with_graceful_shutdown(stopped(stop_rx));
            let (a, b) = tokio::join!(plain, secure);
            a.and(b).map_err(ServeError::Http)
        });
        let addrs = Addresses {
            http: http_addr,
            https: https_addr,
            media: media_addr,
            rtmp: rtmp.as_ref().map(|r| r.addr),
            srt: srt.as_ref().map(|s| s.addr),
            turn: turn.as_ref().map(|(t, _)| t.addr),
        };
        info!(http = %addrs.http, media = %addrs.media, rtmp = ?addrs.rtmp, srt = ?addrs.srt, candidates = ?candidate_ips, "tern listening");
        Ok(Server {
            addrs,
            core,
            rt: Some(rt),
            stop_http: Some(stop_http),
            http_task: Some(http_task),
            rtmp,
            srt,
            sources,
            turn: turn.map(|(t, _)| t),
            engine_threads: Some(engine_threads),
            tap_thread: Some(tap_thread),
            record_thread,
            _reclaim: reclaim,
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
        let served = match (&self.rt, self.http_task.as_mut()) {
            (Some(rt), Some(task)) => rt.block_on(async {
                tokio::select! {
                    () = shutdown_signal() => None,
                    r = task => Some(r),
                }
            }),
            _ => None,
        };
        // The HTTP server ending by itself is an error (its listener failed).
        if let Some(r) = served {
            self.http_task = None;
            let res = r.map_err(|e| ServeError::Other(format!("http server: {e}")))?;
            self.shutdown();
            return res;
        }
        self.shutdown();
        Ok(())
    }

    /// Stops the server: the HTTP listener (open connections get [`HTTP_GRACE`] to
    /// finish), the cluster membership (at once rather than after the TTL), RTMP, SRT, the
    /// media engine, the media tap's thread and TURN, in that order.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let Some(rt) = self.rt.take() else {
            return;
        };
        if let Some(tx) = self.stop_http.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.http_task.take() {
            // Graceful shutdown waits for every open connection; a WebSocket (events, OME
            // signalling) or a slow client would hold the process. Past the grace they
            // are cut (the runtime is dropped below).
            let done = rt.block_on(async { tokio::time::timeout(HTTP_GRACE, task).await });
            if done.is_err() {
                tracing::warn!(
                    "HTTP connections still open {HTTP_GRACE:?} after the stop: closing them"
                );
            }
        }
        if let Some(c) = self.core.cluster.clone() {
            rt.block_on(async {
                let _ = tokio::time::timeout(std::time::Duration::from_secs(1), c.leave()).await;
            });
        }
        drop(rt);
        if let Some(r) = self.rtmp.take() {
            r.stop();
        }
        if let Some(s) = self.srt.take() {
            s.stop();
        }
        if let Some(s) = self.sources.take() {
            s.stop();
        }
        self.core.engine.stop_all();
        if let Some(t) = self.engine_threads.take() {
            t.join();
        }
        // The workers held the tap's senders: the tap's thread has seen its queue close.
        if let Some(h) = self.tap_thread.take() {
            let _ = h.join();
        }
        // Nothing feeds the recordings any more: their files are finished.
        self.core.record.shutdown();
        if let Some(h) = self.record_thread.take() {
            let _ = h.join();
        }
        if let Some(t) = self.turn.take() {
            t.stop();
        }
        info!("tern stopped");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The engine's streams and the directory: the demo clip (with `opts.demo`), then the
/// declared streams (not live until a publisher arrives), then the spare slots
/// publishers make streams in (named and given rings when made).
fn streams(
    cfg: &Config,
    opts: &ServeOptions,
) -> Result<(Vec<EngineStream>, directory::Directory), ServeError> {
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
    Ok((engine_streams, directory::Directory::new(infos, spare)))
}

/// The HTTP side's background work, once a second: the sweep that removes publisher-made
/// streams past their grace; and, with an admission webhook, the close notifications
/// (admitted sessions' ends, read off the event stream).
fn start_service_tasks(state: &Arc<AppState>) {
    http::cluster::start(state);
    let st = state.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            session::sweep_streams(&st);
            st.hls.housekeep(std::time::Instant::now(), &st.admission);
        }
    });
    record_tasks(state);
    if !state.admission.has_webhooks() {
        return;
    }
    state.admission.start();
    let st = state.clone();
    let mut events = state.engine.stats.snapshots.subscribe();
    tokio::spawn(async move {
        use snapshot::{EventKind, SnapshotRef};
        loop {
            match events.recv().await {
                Ok(e) => {
                    let key = match (&e.kind, &e.snapshot) {
                        (EventKind::ViewerLeft, SnapshotRef::Viewer(v)) => {
                            admission::SessionKey::Viewer(v.id)
                        }
                        (EventKind::PublisherLeft, SnapshotRef::Publisher(p)) => {
                            admission::SessionKey::Publisher(p.id)
                        }
                        _ => continue,
                    };
                    st.admission.ended(key, e.reason.unwrap_or("ended"));
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(
                        "admission: {n} session events missed; their close notifications are lost"
                    );
                    st.admission
                        .stats
                        .closes_dropped
                        .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    });
}

/// The recorder's housekeeping on the HTTP runtime: `record.enabled` recordings start as
/// soon as a stream has a publisher (on its `publisher.joined` event, before its first
/// keyframe; and once a second in case an event was missed) and stop when it has neither
/// a publisher nor media; every 10 s the `delete_after_s` sweep. The event bus is read only
/// when some app records by itself (`record.enabled`); API recordings stop on the tick.
fn record_tasks(state: &Arc<AppState>) {
    let st = state.clone();
    let mut events = state
        .record
        .apps()
        .iter()
        .any(|a| a.record.enabled)
        .then(|| state.engine.stats.snapshots.subscribe());
    // The sweep runs on a blocking thread: spawned only when some app deletes old files, so a
    // server that keeps them does not start (and hold, for tokio's keep-alive) a thread every 10 s.
    let sweeps = state
        .record
        .apps()
        .iter()
        .any(|a| a.record.delete_after_s > 0);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut n = 0u64;
        loop {
            tokio::select! {
                e = async {
                    match events.as_mut() {
                        Some(rx) => rx.recv().await,
                        None => std::future::pending().await,
                    }
                } => match e {
                    Ok(e) if !matches!(e.kind, snapshot::EventKind::StreamChanged
                        | snapshot::EventKind::PublisherJoined
                        | snapshot::EventKind::PublisherLeft) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    _ => {}
                },
                _ = tick.tick() => n += 1,
            }
            let streams = st.streams.list();
            let stats = st.engine.stats.clone();
            let published: std::collections::HashSet<Arc<str>> = stats
                .snapshots
                .publishers()
                .into_iter()
                .map(|p| p.stream)
                .collect();
            st.record.housekeep(&streams, |key, i| {
                published.contains(key)
                    || stats
                        .stream(i)
                        .is_some_and(|c| c.live.load(std::sync::atomic::Ordering::Relaxed))
            });
            if sweeps && n.is_multiple_of(10) {
                let rec = st.record.clone();
                let deleted = tokio::task::spawn_blocking(move || rec.sweep()).await;
                for p in deleted.unwrap_or_default() {
                    info!(path = %p.display(), "recording deleted (delete_after_s)");
                }
            }
        }
    });
}

/// How long open HTTP connections get to finish after SIGTERM/SIGINT before they are cut:
/// short enough that the whole process stops within 5 s (the media threads take under a
/// second), long enough for a WHEP POST or DELETE in flight to finish.
const HTTP_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Starts the TURN worker; returns it and what WHEP `Link` headers announce.
fn start_turn(
    cfg: &Config,
    listen: SocketAddr,
    candidate_ips: &[IpAddr],
    media_port: u16,
    stats: Arc<media::EngineStats>,
) -> Result<(turn::TurnHandle, session::TurnLinks), ServeError> {
    let t = &cfg.turn;
    // The relay's default address: the listen address, else the first candidate of the
    // listen address's family (a relay on 0.0.0.0 cannot announce ::1).
    let v4 = listen.ip().is_ipv4();
    let candidate_ip = candidate_ips
        .iter()
        .copied()
        .find(|ip| ip.to_canonical().is_ipv4() == v4)
        .unwrap_or(candidate_ips[0]);
    let relay_ip = t.relay_ip.unwrap_or(if listen.ip().is_unspecified() {
        candidate_ip
    } else {
        listen.ip()
    });
    // Without a configured secret, a random one lets tern mint REST credentials for its own
    // WHEP answers; nobody else knows it.
    let secret = t.secret.clone().unwrap_or_else(|| {
        use rand::Rng;
        let mut rng = rand::rng();
        (0..32)
            .map(|_| char::from(b'a' + rng.random_range(0..26u8)))
            .collect()
    });
    // The relay never reaches the server's own addresses or internal ranges unless allowed.
    let own: Vec<IpAddr> = [listen.ip(), relay_ip]
        .into_iter()
        .chain(candidate_ips.iter().copied())
        .filter(|ip| !ip.is_unspecified())
        .collect();
    let (allowed, denied) = t.peer_ranges();
    let config = tern_rtc::turn::TurnConfig {
        realm: t.realm.clone(),
        users: t.user_pairs(),
        secret: Some(secret.clone()),
        max_allocations: t.max_allocations,
        max_allocations_per_user: t.max_allocations_per_user,
        // Relayed viewers reach tern's own media port, and only that port of its address.
        peers: tern_rtc::peer_policy::PeerPolicy::new(&own, allowed, denied).with_exceptions(
            candidate_ips
                .iter()
                .map(|ip| SocketAddr::new(*ip, media_port))
                .collect(),
        ),
        max_allocations_per_ip: cfg.limits.turn_allocations_per_ip,
        max_bytes_per_sec: u32::try_from(t.max_bps / 8).unwrap_or(u32::MAX),
        nonce_seed: rand::random(),
        ..tern_rtc::turn::TurnConfig::default()
    };
    let handle = turn::spawn(turn::TurnOptions {
        listen,
        relay_ip,
        relay_ports: (t.relay_port_min, t.relay_port_max),
        config,
        stats: Some(stats),
    })
    .map_err(|source| ServeError::Bind {
        what: "TURN (UDP and TCP)",
        addr: listen,
        source,
    })?;
    let links = session::TurnLinks {
        host: relay_ip,
        port: handle.addr.port(),
        secret,
        lifetime: t.credential_lifetime,
    };
    Ok((handle, links))
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
    info!("shutting down");
}
