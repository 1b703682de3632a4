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
//! | `media/` | the media path. `engine.rs` starts the threads and is the HTTP side's handle; `worker.rs` is an app or stream worker's loop, with `worker/viewers.rs`, `worker/publishers.rs`, `worker/timers.rs` (RTCP, sweep); `socket.rs` receives and routes datagrams; `batch.rs` sends with `sendmmsg`; `ingest.rs` holds the publisher slots; `link.rs` the messages and ids every thread speaks; `table.rs`, `ledger.rs`, `stats.rs`, `clock.rs` |
//! | `http/` | `router.rs` (every route) over the surfaces `whep.rs`, `whip.rs`, `ome.rs`, `api.rs`, `pages.rs`, `memory.rs`, which share `state.rs` (AppState, sessions, lookup) and `reply.rs` |
//! | `rtmp.rs` | the RTMP listener and one thread per connection |
//! | `turn.rs` | the TURN server's sockets and thread around `tern_rtc::turn` |
//! | `snapshot.rs` | cached snapshots and the event bus |
//! | `limits.rs` | limits per client address |
//! | `directory.rs` | the streams: declared ones and those publishers make, in spare engine slots |
//! | `admission.rs` | who may publish and play: JWT and the admission webhook, close notifications |
//! | `config.rs` | the TOML configuration and its validation |
//!
//! Imports point one way: `http` and `rtmp` use `media` through its re-exports, `media`
//! never uses `http`; inside each folder, surfaces sit above shared state and nothing
//! imports what imports it (`crates/tern/tests/house.rs` checks this).
//!
//! # One packet, from ingest to socket
//!
//! 1. A publisher's packet arrives: an RTMP connection's thread (`rtmp.rs`) hands it over
//!    the bounded data queue ([`media::link`]), a WHIP datagram comes from a socket worker
//!    (`media/socket.rs`), a clip source produces it in place.
//! 2. The stream's app worker runs it through `media/ingest.rs` (keyframe wait, sequence and
//!    timestamp rewriting into the stream's numbering).
//! 3. `worker/publishers.rs` copies the payload once into a pooled buffer, pushes the packet
//!    into the stream's ring (`tern_rtc::stream`) and hands it to every stream worker.
//! 4. Each worker rewrites the header per viewer and SRTP-protects it straight into a slot of
//!    its send batch (`worker/viewers.rs`, `tern_rtc::viewer`).
//! 5. `media/batch.rs` sends the batch with one `sendmmsg` on the shared UDP port.

#![forbid(unsafe_code)]

pub mod admission;
pub mod cluster;
pub mod config;
pub mod directory;
pub mod hls;
pub mod http;
pub mod limits;
pub mod media;
pub mod reclaim;
pub mod rtmp;
pub mod snapshot;
pub mod turn;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
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
    /// Anything else that stops start-up.
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
    /// `--candidate`, overriding the config.
    pub candidate: Option<IpAddr>,
    /// `--config`.
    pub config: Option<PathBuf>,
    /// `--rtmp` (`Some(None)`: `--rtmp none`), overriding the config.
    pub rtmp: Option<Option<SocketAddr>>,
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
    if let Some(ip) = opts.candidate {
        cfg.server.candidate = Some(ip);
    }
    if let Some(r) = opts.rtmp {
        cfg.server.rtmp = Some(r);
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
    // Command-line values pass the same checks as the file's, named by their config key.
    cfg.validate()?;
    Ok(cfg)
}

/// Runs the server until SIGINT/SIGTERM.
pub fn serve(opts: ServeOptions) -> Result<(), ServeError> {
    let cfg = load_config(&opts)?;
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
    })
    .map_err(|e| ServeError::Other(format!("packet pool: {e}")))?;
    let _reclaim = match reclaim::Reclaimer::new(pool.clone(), t.pool_trim_s, Instant::now()) {
        Some(r) => Some(
            r.spawn()
                .map_err(|e| ServeError::Other(format!("reclaim thread: {e}")))?,
        ),
        None => None,
    };

    // Streams: the demo clip, then declared streams (not live until a publisher arrives).
    let mut engine_streams = Vec::new();
    let mut infos: HashMap<String, usize> = HashMap::new();
    if opts.demo {
        let clip = match opts.clip {
            DemoClip::Standard => Clip::builtin(),
            DemoClip::Lite => Clip::builtin_lite(),
        }
        .map_err(|e| ServeError::Other(format!("demo clip: {e}")))?;
        let src = ClipSource::new(Arc::new(clip), Instant::now());
        infos.insert("live/demo".to_string(), 0);
        engine_streams.push(EngineStream::new(
            "live/demo".into(),
            Stream::new(t.video_ring, t.audio_ring),
            Some(src),
        ));
    }
    for app in &cfg.apps {
        for s in &app.streams {
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

    // Then the spare slots publishers make streams in: named and given rings when made.
    let spare: Vec<usize> =
        (engine_streams.len()..engine_streams.len() + cfg.limits.dynamic_streams).collect();
    for _ in &spare {
        engine_streams.push(EngineStream::new(String::new(), Stream::new(1, 1), None));
    }
    let directory = directory::Directory::new(infos, spare);

    let dtls = Arc::new(DtlsContext::generate().map_err(|e| ServeError::Other(e.to_string()))?);
    let media = cfg.server.media;
    let (hls_tx, hls_rx) = crossbeam_channel::bounded(media::HLS_TAP_QUEUE);
    let (handle, media_addr, engine_threads) = Engine::spawn(EngineConfig {
        bind: media,
        streams: engine_streams,
        dtls: dtls.clone(),
        pool,
        cname: cfg.server.cname.clone(),
        publisher_timeouts: (&cfg.server).into(),
        rings: (t.video_ring, t.audio_ring),
        hls_tap: cfg.hls.enabled.then_some(hls_tx),
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
    let candidate_ip = cfg
        .server
        .candidate
        .unwrap_or(if media.ip().is_unspecified() {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            media.ip()
        });
    let turn = match cfg.turn.listen {
        Some(listen) => Some(start_turn(
            &cfg,
            listen,
            candidate_ip,
            media_addr.port(),
            handle.stats.clone(),
        )?),
        None => None,
    };
    let links = turn.as_ref().map(|(_, l)| l.clone());
    let http = cfg.server.http;
    let rtmp_bind = cfg.server.rtmp;
    let max_payload = cfg.tunables.max_payload;
    let http_per_ip = limits::PerAddress::new(
        "HTTP connections",
        cfg.limits.http_connections_per_ip,
        &cfg.limits.exempt_ranges(),
    );
    let rtmp_per_ip = limits::PerAddress::new(
        "RTMP connections",
        cfg.limits.rtmp_connections_per_ip,
        &cfg.limits.exempt_ranges(),
    );
    let cluster = match cfg.cluster.clone() {
        Some(c) => Some(Arc::new(cluster::Cluster::new(c, dtls.clone()).map_err(
            |e| ServeError::Other(format!("config key `cluster.redis`: {e}")),
        )?)),
        None => None,
    };
    let state = Arc::new(
        AppState::new(
            cfg,
            directory,
            handle.clone(),
            *dtls.fingerprint(),
            candidate_ip,
            media_addr.port(),
        )
        .with_turn(links)
        .with_cluster(cluster),
    );
    let hls_thread = state
        .hls
        .spawn(hls_rx)
        .map_err(|e| ServeError::Other(format!("HLS thread: {e}")))?;
    let spawn_rtmp =
        |addr| rtmp::RtmpServer::spawn(addr, state.clone(), max_payload, rtmp_per_ip.clone());
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
    let rtmp_addr = rtmp.as_ref().map(|r| r.addr);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("HttpWorker")
        .enable_all()
        .build()
        .map_err(|e| ServeError::Other(format!("tokio runtime: {e}")))?;
    let _ = state.runtime.set(rt.handle().clone());
    let leaving = state.cluster.clone();
    let res = rt.block_on(async move {
        start_service_tasks(&state);
        let listener = tokio::net::TcpListener::bind(http)
            .await
            .map_err(|source| ServeError::Bind {
                what: "HTTP",
                addr: http,
                source,
            })?;
        info!(%http, media = %media_addr, rtmp = ?rtmp_addr, %candidate_ip, "tern listening");
        let app = http::router(state).into_make_service_with_connect_info::<http::Peer>();
        let listener = http::LimitedListener::new(listener, http_per_ip);
        let (stopping, stopped) = tokio::sync::oneshot::channel();
        let graceful = axum::serve(listener, app).with_graceful_shutdown(async move {
            shutdown_signal().await;
            let _ = stopping.send(());
        });
        // Graceful shutdown waits for every open connection; a WebSocket (events, OME
        // signalling) or a slow client would hold the process. Past the grace they are cut
        // (the runtime is dropped below).
        tokio::select! {
            r = graceful => r.map_err(|e| ServeError::Other(format!("http server: {e}"))),
            _ = async {
                if stopped.await.is_ok() {
                    tokio::time::sleep(HTTP_GRACE).await;
                } else {
                    std::future::pending::<()>().await;
                }
            } => {
                tracing::warn!("HTTP connections still open {HTTP_GRACE:?} after the signal: closing them");
                Ok(())
            }
        }
    });
    // A clean stop leaves the cluster at once (the record and claims go from Redis) rather
    // than after their TTL.
    if let Some(c) = leaving {
        rt.block_on(async {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(1), c.leave()).await;
        });
    }
    drop(rt);
    if let Some(r) = rtmp {
        r.stop();
    }
    handle.stop_all();
    engine_threads.join();
    // The workers held the tap's senders: the HLS thread has seen its queue close.
    let _ = hls_thread.join();
    if let Some((t, _)) = turn {
        t.stop();
    }
    info!("tern stopped");
    res
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
            http::sweep_streams(&st);
            st.hls.housekeep(std::time::Instant::now(), &st.admission);
        }
    });
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

/// How long open HTTP connections get to finish after SIGTERM/SIGINT before they are cut:
/// short enough that the whole process stops within 5 s (the media threads take under a
/// second), long enough for a WHEP POST or DELETE in flight to finish.
const HTTP_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Starts the TURN worker; returns it and what WHEP `Link` headers announce.
fn start_turn(
    cfg: &Config,
    listen: SocketAddr,
    candidate_ip: IpAddr,
    media_port: u16,
    stats: Arc<media::EngineStats>,
) -> Result<(turn::TurnHandle, http::TurnLinks), ServeError> {
    let t = &cfg.turn;
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
    let own: Vec<IpAddr> = [listen.ip(), relay_ip, candidate_ip]
        .into_iter()
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
        peers: tern_rtc::peer_policy::PeerPolicy::new(&own, allowed, denied)
            .with_exceptions(vec![SocketAddr::new(candidate_ip, media_port)]),
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
    let links = http::TurnLinks {
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
