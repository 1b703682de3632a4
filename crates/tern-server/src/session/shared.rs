//! [`Core`]: the state every surface shares, and the checks that read only it (the app's
//! static token, the viewer capacity, the per-address limit on pending sessions).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tern_pool::{MemoryRegistry, PoolCounter};

use crate::admission::{Action, Admission, Ask, Protocol, Verdict};
use crate::config::Config;
use crate::directory::{Directory, StreamInfo};
use crate::limits::{AddrPermit, PerAddress};
use crate::media::{EngineHandle, PublisherId};
use crate::session::refusal::Refusal;

/// Where clients reach the built-in TURN server, and the secret its REST credentials are
/// minted with: WHEP/WHIP answers announce it in `Link` headers, OME offers in
/// `iceServers`.
#[derive(Debug, Clone)]
pub struct TurnLinks {
    /// Host clients reach the TURN server at.
    pub host: IpAddr,
    /// Its port (UDP and TCP).
    pub port: u16,
    /// The REST secret credentials are minted with (a reload may change it).
    pub secret: Arc<std::sync::RwLock<String>>,
    /// Credential lifetime, seconds.
    pub lifetime: u64,
    /// TURN over TLS, when on: the host for `turns:` URLs (as it goes into a URL) and the
    /// TLS port.
    pub tls: Option<(String, u16)>,
}

/// Fresh TURN REST credentials and the host to put in a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnCredentials {
    /// The host as it goes into a `turn:` URL (an IPv6 address in brackets).
    pub host: String,
    /// The TURN port.
    pub port: u16,
    /// REST username (`expiry:kind`).
    pub username: String,
    /// REST password (HMAC of the username).
    pub credential: String,
    /// TURN over TLS, when on: host and port for a `turns:` URL.
    pub tls: Option<(String, u16)>,
}

impl TurnCredentials {
    /// The `turns:HOST:PORT?transport=tcp` URL, when TURN over TLS is on.
    pub fn turns_url(&self) -> Option<String> {
        self.tls
            .as_ref()
            .map(|(host, port)| format!("turns:{host}:{port}?transport=tcp"))
    }
}

impl TurnLinks {
    /// Credentials valid for [`TurnLinks::lifetime`] from now; `kind` names the surface
    /// that hands them out (`whep`, `ome`) in the username.
    pub fn credentials(&self, kind: &str) -> TurnCredentials {
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let (username, credential) = tern_rtc::turn::rest_credentials(
            &self.secret.read().unwrap_or_else(|e| e.into_inner()),
            kind,
            unix + self.lifetime,
        );
        let host = match self.host {
            IpAddr::V4(ip) => ip.to_string(),
            IpAddr::V6(ip) => format!("[{ip}]"),
        };
        TurnCredentials {
            host,
            port: self.port,
            username,
            credential,
            tls: self.tls.clone(),
        }
    }
}

/// The memory lines of the ingest surfaces, in the server's own registry
/// ([`Core::memory`]): one item per connection, its bytes the heap that connection's thread
/// holds, measured with the counting allocator (`feed::Ledger`). Not included: what
/// libopus and libavcodec malloc themselves.
#[derive(Debug, Clone)]
pub struct IngestPools {
    /// `rtmp_ingest`: an RTMP connection's socket buffer, chunk streams and partial
    /// messages, AVC configuration, AAC decoder, resampler and Opus buffers.
    pub rtmp: PoolCounter,
    /// `srt_ingest`: an SRT publisher thread's TS demuxer PES buffers, AAC decoder,
    /// resampler and Opus buffers (not the listener's SRT state, in `srt-protocol`).
    pub srt: PoolCounter,
    /// `rtsp_ingest`: a camera session's retina session and depacketizers, AAC decoder,
    /// resampler and Opus buffers.
    pub rtsp: PoolCounter,
}

impl IngestPools {
    fn new(memory: &MemoryRegistry) -> Self {
        IngestPools {
            rtmp: memory.counter("rtmp_ingest", 0),
            srt: memory.counter("srt_ingest", 0),
            rtsp: memory.counter("rtsp_ingest", 0),
        }
    }
}

/// What every surface shares: the configuration, the streams, the engine's handle,
/// admission, the per-address limits, the cluster, what ICE candidates and TURN announce,
/// and the publisher table.
pub struct Core {
    /// The configuration in force: replaced whole by a reload ([`Core::set_config`]); each
    /// reader takes the current one ([`Core::config`]) and keeps it for what it decides.
    live_config: std::sync::RwLock<Arc<Config>>,
    /// `app/stream` → stream: declared ones and those publishers made.
    pub streams: Directory,
    /// Who may publish and play (JWT, admission webhook), per app.
    pub admission: Admission,
    /// The async runtime (RTMP connection threads block on it for admission; lifetimes are
    /// timed on it).
    pub runtime: std::sync::OnceLock<tokio::runtime::Handle>,
    /// The media engine.
    pub engine: EngineHandle,
    /// Our DTLS certificate fingerprint.
    pub fingerprint: [u8; 32],
    /// Addresses announced in ICE candidates, most preferred first (at least one).
    pub candidate_ips: Vec<IpAddr>,
    /// Media port announced in the ICE candidates.
    pub candidate_port: u16,
    /// The TURN server clients are told about, when TURN is on.
    pub turn: Option<TurnLinks>,
    /// Publishers by session id (a WHIP resource id, an RTMP connection id).
    pub(crate) publishers: Mutex<HashMap<String, PublisherSession>>,
    /// Sessions (WHEP, WHIP, OME) each client address has that have not finished ICE and
    /// DTLS (`limits.pending_sessions_per_ip`); the engine drops a session's permit when it
    /// connects or ends.
    pub pending: Arc<PerAddress>,
    /// Open OME signalling sockets per client address (`limits.ome_connections_per_ip`).
    pub ome_sockets: Arc<PerAddress>,
    /// LL-HLS sessions and packagers.
    pub hls: Arc<crate::hls::Hls>,
    /// Recordings and their writer.
    pub record: Arc<crate::record::Recorder>,
    /// Streams' thumbnails (`GET /{app}/{stream}/thumb.jpg`).
    pub thumbs: Arc<crate::thumbs::Thumbs>,
    /// Forwards: streams sent on to other servers (restreaming).
    pub forwards: Arc<crate::forward::Forwards>,
    /// The media tap: LL-HLS, recordings, thumbnails, forwards and WHIP publishers'
    /// renditions, the takers of streams' media.
    pub tap: Arc<crate::tap::MediaTap>,
    /// Renditions of WHIP publishers that send one video layer (`[app] renditions`).
    pub whip_renditions: Arc<crate::feed::WhipRenditions>,
    /// This node's part in a cluster (`[cluster]`), if any.
    pub cluster: Option<Arc<crate::cluster::Cluster>>,
    /// str0m's crypto for WHIP publishers, with `tunables.srtp_profiles` (built once).
    pub publisher_dtls: tern_rtc::publisher_dtls::PublisherDtls,
    /// The pulled sources (RTSP cameras, `crate::rtsp`), set once they are started: a play
    /// request for a source's stream wakes its pull ([`Core::wake_source`]).
    pub sources: std::sync::OnceLock<Arc<dyn SourcePulls>>,
    /// This server's own memory lines (the process-wide ones are in
    /// [`MemoryRegistry::global`]): `GET /v1/memory` lists both.
    pub memory: MemoryRegistry,
    /// The ingest surfaces' lines in [`Core::memory`].
    pub pools: IngestPools,
    /// The parts' `/metrics` families, registered as they start.
    pub exposed: crate::metrics::Exposed,
    /// Whether the node is draining for an upgrade ([`crate::drain`]).
    pub drain: Arc<crate::drain::Drain>,
    /// Every per-address limiter, by the key it follows (a reload sets them).
    pub limiters: crate::limits::Limiters,
}

/// Starts reading the event stream for admitted sessions' ends (close notifications to
/// webhooks) once an app asks a webhook: at start, and after a reload that adds one.
pub fn watch_session_ends(core: &Arc<Core>) {
    if !core.admission.watch_closes() {
        return;
    }
    let Some(rt) = core.runtime() else {
        return;
    };
    let events = core.engine.stats.snapshots.subscribe();
    let c = core.clone();
    rt.spawn(async move { c.admission.close_notifications(events).await });
}

/// What the session layer asks of the pulled sources (implemented in `crate::rtsp`, which
/// stands on this module, so it is a trait here).
pub trait SourcePulls: Send + Sync {
    /// A viewer wants `app/stream`: if a source feeds it, its pull is started (or kept
    /// running) and true is returned; false if no source feeds it.
    fn wake(&self, key: &str) -> bool;
    /// Why the source of `key` last failed (its URL without credentials), if it did.
    fn last_error(&self, key: &str) -> Option<String>;
}

impl Core {
    /// New shared state.
    pub fn new(
        config: Config,
        streams: Directory,
        engine: EngineHandle,
        fingerprint: [u8; 32],
        candidate_ips: Vec<IpAddr>,
        candidate_port: u16,
        admission: Admission,
    ) -> Self {
        let exempt = config.limits.exempt_ranges();
        let pending = PerAddress::new(
            "pending sessions",
            config.limits.pending_sessions_per_ip,
            &exempt,
        );
        let ome_sockets = PerAddress::new(
            "signalling connections",
            config.limits.ome_connections_per_ip,
            &exempt,
        );
        let limiters = crate::limits::Limiters::default();
        limiters.register(crate::limits::LimitKey::PendingSessions, &pending);
        limiters.register(crate::limits::LimitKey::OmeConnections, &ome_sockets);
        let hls_keyframes = engine.clone();
        let hls = Arc::new(crate::hls::Hls::new(
            &config.hls,
            engine.stats.streams.len(),
            engine.stats.clone(),
            &exempt,
            Box::new(move |i| {
                let _ = hls_keyframes.send(crate::media::Command::RequestLayerKeyframes(i));
            }),
        ));
        let thumb_keyframes = engine.clone();
        let thumbs = Arc::new(crate::thumbs::Thumbs::new(
            engine.stats.streams.len(),
            engine.stats.clone(),
            Box::new(move |i| {
                let _ = thumb_keyframes.send(crate::media::Command::RequestKeyframe(i));
            }),
        ));
        let keyframes = engine.clone();
        let record = Arc::new(crate::record::Recorder::new(
            &config.apps,
            engine.stats.streams.len(),
            engine.stats.clone(),
            Box::new(move |i| {
                let _ = keyframes.send(crate::media::Command::RequestKeyframe(i));
            }),
        ));
        limiters.register(crate::limits::LimitKey::HlsSessions, hls.per_ip());
        let forward_keyframes = engine.clone();
        let forwards = Arc::new(crate::forward::Forwards::new(
            engine.stats.streams.len(),
            engine.stats.clone(),
            Box::new(move |i| {
                let _ = forward_keyframes.send(crate::media::Command::RequestKeyframe(i));
            }),
        ));
        let rendition_keyframes = engine.clone();
        let whip_renditions = Arc::new(crate::feed::WhipRenditions::new(
            engine.clone(),
            config.tunables.max_payload,
            Box::new(move |i| {
                let _ = rendition_keyframes.send(crate::media::Command::RequestKeyframe(i));
            }),
        ));
        let tap = Arc::new(crate::tap::MediaTap::new(vec![
            hls.clone() as Arc<dyn crate::tap::Subscriber>,
            record.clone(),
            thumbs.clone(),
            forwards.clone(),
            whip_renditions.clone(),
        ]));
        let memory = MemoryRegistry::new();
        let pools = IngestPools::new(&memory);
        let exposed = crate::metrics::Exposed::default();
        exposed.add(thumbs.clone());
        Core {
            memory,
            pools,
            exposed,
            drain: Arc::default(),
            limiters,
            record,
            thumbs,
            forwards,
            tap,
            whip_renditions,
            pending,
            ome_sockets,
            hls,
            admission,
            publisher_dtls: tern_rtc::publisher_dtls::PublisherDtls::new(
                &config.tunables.srtp_profiles(),
            ),
            runtime: std::sync::OnceLock::new(),
            live_config: std::sync::RwLock::new(Arc::new(config)),
            streams,
            engine,
            fingerprint,
            candidate_ips,
            candidate_port,
            turn: None,
            cluster: None,
            publishers: Mutex::new(HashMap::new()),
            sources: std::sync::OnceLock::new(),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<Config> {
        self.live_config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Puts `config` in force (a reload, `crate::reload`, after it checked it): the readers
    /// that come next see it.
    pub fn set_config(&self, config: Arc<Config>) {
        *self.live_config.write().unwrap_or_else(|e| e.into_inner()) = config;
    }

    /// Announces the TURN server to clients.
    pub fn with_turn(mut self, turn: Option<TurnLinks>) -> Self {
        self.turn = turn;
        self
    }

    /// Joins a cluster.
    pub fn with_cluster(mut self, cluster: Option<Arc<crate::cluster::Cluster>>) -> Self {
        self.cluster = cluster;
        self
    }

    /// The runtime to spawn on: the one set at start, or the caller's.
    pub(crate) fn runtime(&self) -> Option<tokio::runtime::Handle> {
        self.runtime
            .get()
            .cloned()
            .or_else(|| tokio::runtime::Handle::try_current().ok())
    }

    /// Every memory line this server reports: the process-wide ones, then its own.
    pub fn memory_reports(&self) -> Vec<tern_pool::PoolReport> {
        let mut r = MemoryRegistry::global().reports();
        r.extend(self.memory.reports());
        r
    }

    /// Whether stream `index` has media.
    pub fn is_live(&self, info: StreamInfo) -> bool {
        self.engine
            .stats
            .stream(info.index)
            .is_some_and(|c| c.live.load(Ordering::Relaxed))
    }

    /// Checks the app's static token (`[[app]] token`), if it has one, against `given`.
    pub fn check_app_token(&self, app: &str, given: Option<&str>) -> Result<(), Refusal> {
        match self.config().app(app).and_then(|a| a.token.as_deref()) {
            Some(token) if given != Some(token) => Err(Refusal::Unauthorized {
                app: app.to_string(),
            }),
            _ => Ok(()),
        }
    }

    /// Asks admission (JWT, webhook) whether `client` may do `action` on `app/stream`
    /// through `protocol` as session `session`: the question (kept for the close
    /// notification) and the session's lifetime, or the refusal.
    pub(super) async fn admit(
        &self,
        action: Action,
        protocol: Protocol,
        (app, stream): (String, String),
        client: SocketAddr,
        credentials: Credentials,
        session: String,
    ) -> Result<(Ask, Option<Duration>), Refusal> {
        let ask = Ask {
            action,
            protocol,
            app,
            stream,
            client,
            token: credentials.token,
            query: credentials.query,
            session,
        };
        match self.admission.admit(&ask).await {
            Verdict::Allow { lifetime } => Ok((ask, lifetime)),
            Verdict::Deny { status, reason } => Err(Refusal::Denied { status, reason }),
        }
    }

    /// Sessions held: viewers and publishers (what `GET /v1/health` reports and a drain
    /// waits out).
    pub fn sessions(&self) -> u64 {
        let s = &self.engine.stats;
        (s.viewers.load(Ordering::Relaxed) + s.publishers.load(Ordering::Relaxed)) as u64
    }

    /// Room for one more viewer: under `tunables.max_viewers` viewers and
    /// `tunables.max_handshakes` handshakes in progress.
    pub fn check_capacity(&self) -> Result<(), Refusal> {
        let stats = &self.engine.stats;
        let cfg = self.config();
        let t = &cfg.tunables;
        if stats.handshakes.load(Ordering::Relaxed) >= t.max_handshakes
            || stats.viewers.load(Ordering::Relaxed) >= t.max_viewers
        {
            return Err(Refusal::Capacity);
        }
        Ok(())
    }

    /// A pending-session permit for `ip` (`limits.pending_sessions_per_ip`).
    pub fn pending_permit(&self, ip: IpAddr) -> Result<AddrPermit, Refusal> {
        self.pending.acquire(ip).map_err(Refusal::TooMany)
    }
}

/// What a client offers to prove it may publish or play.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// What it offers for the app's static token (`[[app]] token`): WHIP/WHEP/LL-HLS take
    /// the Bearer token, OME signalling the Bearer token or `?token=`, RTMP `?token=`.
    pub app_token: Option<String>,
    /// What goes to admission (JWT, webhook) as the token.
    pub token: Option<String>,
    /// The request's query string, "" if none (the webhook sees it).
    pub query: String,
}

/// `n` random characters of `[A-Za-z0-9]`: session ids, ETags, ICE credentials.
pub fn random_token(n: usize) -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..n)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// A publisher as the session layer knows it, by session id: a WHIP resource (with its
/// ETag and the encoder's ICE ufrag, for PATCH) or an RTMP connection (both empty).
#[derive(Debug, Clone)]
pub struct PublisherSession {
    /// The publisher in the engine.
    pub id: PublisherId,
    /// The resource's entity tag (`If-Match` of an ICE restart).
    pub etag: String,
    /// The encoder's ICE ufrag: a PATCH with another one is an ICE restart.
    pub remote_ufrag: String,
}
