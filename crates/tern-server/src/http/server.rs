//! The HTTP side's start and stop: [`bind`] starts the runtime and binds the listeners
//! (`server.http`, and `server.https` with the certificate [`load_tls`] loaded), [`serve`]
//! serves them with the runtime's background work, and [`Serving::stop`] ends it all with
//! a grace for open connections.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::runtime::Runtime;
use tokio::sync::{oneshot, watch};
use tokio::task::{JoinError, JoinHandle};
use tracing::{info, warn};

use crate::cluster::Cluster;
use crate::config::{Config, ServerConfig};
use crate::http::listener::{LimitedListener, Peer};
use crate::http::router::{redirect_router, router};
use crate::http::state::AppState;
use crate::http::tls::{CertStore, TlsError, TlsListener};
use crate::limits::PerAddress;
use crate::session::{self, Core};
use crate::start::StartError;

/// How long open HTTP connections get to finish after SIGTERM/SIGINT before they are cut:
/// short enough that the whole process stops within 5 s (the media threads take under a
/// second), long enough for a WHEP POST or DELETE in flight to finish.
pub const GRACE: Duration = Duration::from_secs(2);

/// How long a stopping node waits for its cluster leave (Redis).
const LEAVE_WAIT: Duration = Duration::from_secs(1);

/// The server's certificate (`server.tls_cert`, `server.tls_key`): for the HTTPS listener
/// and TURN over TLS, one store watched for renewals.
pub struct Tls {
    /// The HTTPS listener's address and rustls configuration, when HTTPS is on.
    https: Option<(SocketAddr, Arc<rustls::ServerConfig>)>,
    store: Arc<CertStore>,
}

impl Tls {
    /// The certificate store, for the other TLS listeners (TURN over TLS).
    pub fn store(&self) -> &Arc<CertStore> {
        &self.store
    }

    /// A rustls configuration over the same certificate (reloaded with it), without ALPN:
    /// for RTMPS, whose encoders name no application protocol.
    pub fn plain_config(&self) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        self.store.config_with_alpn(Vec::new())
    }
}

/// Loads the certificate and key (`server.tls_cert`, `server.tls_key`) when `server.https`,
/// `server.rtmps` or `turn_tls` (TURN over TLS) needs them; `None` when none is on.
pub fn load_tls(server: &ServerConfig, turn_tls: bool) -> Result<Option<Tls>, TlsError> {
    let (Some(cert), Some(key)) = (&server.tls_cert, &server.tls_key) else {
        return Ok(None);
    };
    if server.https.is_none() && server.rtmps.is_none() && !turn_tls {
        return Ok(None);
    }
    let store = CertStore::load(cert, key)?;
    let https = match server.https {
        Some(addr) => Some((addr, store.server_config()?)),
        None => None,
    };
    Ok(Some(Tls { https, store }))
}

/// The HTTP side bound but not serving yet: its runtime and listeners.
pub struct Bound {
    rt: Runtime,
    http: TcpListener,
    https: Option<(TcpListener, Arc<rustls::ServerConfig>)>,
    /// The certificate store to watch, when any listener serves TLS.
    certs: Option<Arc<CertStore>>,
    per_ip: Arc<PerAddress>,
    redirect_http: bool,
    /// The HTTP listener's address.
    pub http_addr: SocketAddr,
    /// The HTTPS listener's address, if HTTPS is on.
    pub https_addr: Option<SocketAddr>,
}

/// Starts the HTTP runtime and binds `server.http`, and `server.https` when `tls` is given.
/// The runtime comes first: RTMP connections block on it for the session layer
/// ([`Bound::runtime`]), and the listeners bind on it (a cluster node's default URL needs
/// the HTTP port). Connections per client address are capped by
/// `limits.http_connections_per_ip`, counting the clients behind a trusted proxy.
pub fn bind(cfg: &Config, tls: Option<Tls>) -> Result<Bound, StartError> {
    // A trusted proxy carries many clients over its connections: the per-address limits
    // that matter (viewers, publishers, HLS sessions) count the clients behind it.
    let mut exempt = cfg.limits.exempt_ranges();
    exempt.extend(cfg.server.trusted_proxy_ranges());
    let per_ip = PerAddress::new(
        "HTTP connections",
        cfg.limits.http_connections_per_ip,
        &exempt,
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("HttpWorker")
        .enable_all()
        .build()
        .map_err(StartError::thread("HTTP runtime"))?;
    let listen = |addr| {
        rt.block_on(TcpListener::bind(addr))
            .and_then(|l| l.local_addr().map(|a| (l, a)))
    };
    let http = cfg.server.http;
    let (http, http_addr) = listen(http).map_err(StartError::bind("HTTP", http))?;
    let (certs, https) = match tls {
        Some(t) => (Some(t.store), t.https),
        None => (None, None),
    };
    let (https, https_addr) = match https {
        Some((addr, config)) => {
            let (l, a) = listen(addr).map_err(StartError::bind("HTTPS", addr))?;
            (Some((l, config)), Some(a))
        }
        None => (None, None),
    };
    Ok(Bound {
        rt,
        http,
        https,
        certs,
        per_ip,
        redirect_http: cfg.server.redirect_http,
        http_addr,
        https_addr,
    })
}

impl Bound {
    /// The runtime's handle, for the session layer (`Core::runtime`).
    pub fn runtime(&self) -> tokio::runtime::Handle {
        self.rt.handle().clone()
    }
}

/// Serves the listeners of `bound` on its runtime: every route over `core` ([`router`]) on
/// both, or on HTTP only the redirect to HTTPS (`server.redirect_http`); the certificate
/// file is watched. Starts the runtime's background work with it: the node's cluster report,
/// the stream sweep and LL-HLS housekeeping, the recorder's housekeeping, and admission's
/// close notifications.
pub fn serve(
    bound: Bound,
    core: &Arc<Core>,
    reload: Option<Arc<crate::reload::Reload>>,
) -> Serving {
    let Bound {
        rt,
        http,
        https,
        certs,
        per_ip,
        redirect_http,
        https_addr,
        ..
    } = bound;
    core.limiters
        .register(crate::limits::LimitKey::HttpConnections, &per_ip);
    let state = Arc::new(
        AppState::new(core.clone())
            .with_tls(certs.clone())
            .with_reload(reload),
    );
    let (stop, stopping) = oneshot::channel::<()>();
    let task = rt.spawn(async move {
        spawn_tasks(&state);
        if let Some(c) = &certs {
            c.watch();
        }
        // One stop for both listeners.
        let (stop_all, stop_rx) = watch::channel(false);
        tokio::spawn(async move {
            let _ = stopping.await;
            let _ = stop_all.send(true);
        });
        let stopped = |mut rx: watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let routes = router(state);
        let plain_routes = match https_addr {
            Some(a) if redirect_http => redirect_router(a.port()),
            _ => routes.clone(),
        };
        let plain = axum::serve(
            LimitedListener::new(http, per_ip.clone()),
            plain_routes.into_make_service_with_connect_info::<Peer>(),
        )
        .with_graceful_shutdown(stopped(stop_rx.clone()));
        let Some((l, config)) = https else {
            return plain.await;
        };
        let listener = TlsListener::spawn(l, per_ip, config)?;
        let secure = axum::serve(
            listener,
            routes.into_make_service_with_connect_info::<Peer>(),
        )
        .with_graceful_shutdown(stopped(stop_rx));
        let (a, b) = tokio::join!(plain, secure);
        a.and(b)
    });
    Serving {
        rt,
        stop,
        task: Some(task),
        cluster: core.cluster.clone(),
        core: core.clone(),
    }
}

/// The runtime's background work: the node's cluster report (`super::cluster::start`);
/// once a second the sweep that removes publisher-made streams past their grace, and
/// LL-HLS housekeeping; the recorder's housekeeping; admission (its counters registered
/// with `/metrics`) and, with a webhook, its close notifications (admitted sessions' ends,
/// read off the event stream).
fn spawn_tasks(state: &Arc<AppState>) {
    super::cluster::start(state);
    #[cfg(unix)]
    spawn_sighup(state.clone());
    let st = state.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(crate::directory::SWEEP);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            session::sweep_streams(&st);
            st.hls.housekeep(Instant::now(), &st.admission);
            st.thumbs.housekeep(Instant::now());
        }
    });
    let st = state.clone();
    tokio::spawn(async move { st.record.housekeeping(&st.streams).await });
    let st = state.clone();
    tokio::spawn(async move {
        st.forwards
            .housekeeping(&st.streams, || st.core.config())
            .await;
    });
    state.admission.start(&state.exposed);
    crate::session::watch_session_ends(&state.core);
}

/// The HTTP side serving, and everything else on its runtime; [`Serving::stop`] ends it.
pub struct Serving {
    rt: Runtime,
    /// Tells the listeners to stop accepting and finish what they serve.
    stop: oneshot::Sender<()>,
    /// The server's task; `None` once it has ended.
    task: Option<JoinHandle<io::Result<()>>>,
    /// The node's cluster part, whose report runs on this runtime.
    cluster: Option<Arc<Cluster>>,
    /// The session layer, for a drain: its state and the sessions it waits out.
    core: Arc<Core>,
}

impl Serving {
    /// Waits for SIGINT or SIGTERM, or for a drain to run its course (`POST /v1/drain`):
    /// then `None`. With `server.shutdown_drain_s`, SIGTERM first drains the node for that
    /// long (a second signal stops at once). `Some` with the task's outcome if the server
    /// ended by itself, which only a failed listener makes it do.
    pub fn until_signal(&mut self) -> Option<Result<io::Result<()>, JoinError>> {
        let task = self.task.as_mut()?;
        let core = self.core.clone();
        let drain_s = core.config().server.shutdown_drain_s;
        let ended = self.rt.block_on(async {
            let sessions = || core.sessions();
            tokio::select! {
                () = shutdown_signal() => {
                    if drain_s > 0 {
                        core.drain.start(Duration::from_secs(drain_s), core.sessions());
                        tokio::select! {
                            () = core.drain.done(sessions) => {},
                            () = shutdown_signal() => info!("second signal: stopping without waiting for the drain"),
                        }
                    }
                    None
                }
                () = core.drain.done(sessions) => None,
                r = task => Some(r),
            }
        });
        if ended.is_some() {
            self.task = None;
        }
        ended
    }

    /// Stops: the listeners stop accepting and open connections get [`GRACE`] to finish;
    /// the node leaves its cluster (at once rather than after the TTL); then the runtime
    /// is dropped with whatever still runs on it.
    pub fn stop(self) {
        let Serving {
            rt,
            stop,
            task,
            cluster,
            ..
        } = self;
        let _ = stop.send(());
        if let Some(task) = task {
            // Graceful shutdown waits for every open connection; a WebSocket (events, OME
            // signalling) or a slow client would hold the process. Past the grace they
            // are cut (the runtime is dropped below).
            let done = rt.block_on(async { tokio::time::timeout(GRACE, task).await });
            if done.is_err() {
                warn!("HTTP connections still open {GRACE:?} after the stop: closing them");
            }
        }
        if let Some(c) = cluster {
            rt.block_on(async {
                let _ = tokio::time::timeout(LEAVE_WAIT, c.leave()).await;
            });
        }
        drop(rt);
    }
}

/// SIGHUP reloads the configuration file ([`crate::reload`]); what it did is logged.
#[cfg(unix)]
fn spawn_sighup(st: Arc<AppState>) {
    use tokio::signal::unix::{SignalKind, signal};
    tokio::spawn(async move {
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            return;
        };
        while hup.recv().await.is_some() {
            let Some(r) = st.reload.clone() else {
                continue;
            };
            info!("SIGHUP: reloading the configuration");
            let done =
                tokio::task::spawn_blocking(move || r.reload(crate::reload::Trigger::Signal)).await;
            if let Ok(Err(e)) = done {
                tracing::warn!("SIGHUP: configuration not reloaded: {e}");
            }
        }
    });
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
