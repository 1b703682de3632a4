//! Origin and edge nodes over Redis: the node registry, the origin map, routing and edge
//! pull. Without `[cluster]` none of this runs and tern works alone.
//!
//! Every node writes its record (url, media address, viewers, publishers, egress, CPU,
//! version) to Redis each second under a key with a TTL of `cluster.ttl_s`, and claims each
//! stream whose publisher is here (refreshed while live and for its app's grace after, as
//! the stream itself is kept). The same refresh reads every record and claim into a
//! [`View`], cached and replaced only when something changed; HTTP handlers route and look
//! up origins from it without a Redis round trip. A WHEP request for a stream claimed by
//! another node starts one upstream pull ([`upstream`]) for every local viewer of it.
//!
//! When Redis cannot be reached the node keeps serving what it has (its publishers, its
//! viewers, its running pulls), logs the change once, retries after 1 s and then every 2 s
//! (a failed attempt costs Redis nothing, and the node is back within about 2 s of Redis'
//! return: with 8 s between attempts the cluster took up to 7 s to recover after a 6 s
//! outage, bench/cluster-faults.sh) and refuses what needs the map (new pulls: 503; no
//! redirects).
//!
//! A split brain (two nodes let a publisher of one stream in while Redis was away) is
//! settled when Redis answers again: each claim carries its age, and the older claim takes
//! the stream ([`store::Claimed`]); the other node hears it lost ([`NodeSide::lost`]): its
//! publisher is ended, the upstreams it served to edges are closed so that those edges look
//! the origin up again, and its own viewers are fed from the winner by a pull, keeping their
//! sessions. A node that did not run for longer than its claims live (stopped by the
//! kernel, suspended) counts its claims as new when it wakes: another node may have taken
//! the stream meanwhile, and a claim it could not keep must not win by age.
//!
//! Files: `store.rs` (keys and commands), `view.rs` (the cached view, routing),
//! `upstream.rs` (edge pull); the `[cluster]` section is the configuration's
//! (`crate::config::ClusterSection`).

mod store;
mod upstream;
mod view;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tern_rtc::viewer::DtlsContext;
use tracing::{info, warn};

pub use crate::config::{ClusterSection, RELAY_HEADER, ROUTED_PARAM, SECRET_HEADER};
pub use store::{BORN_PREFIX, Claimed, NODE_PREFIX, ORIGIN_PREFIX, SENIORITY_MARGIN_MS};
pub use view::{NodeRecord, View};

use crate::media::EngineHandle;
use crate::outbound::Outbound;
use store::Store;

/// How long an ended pull's stream is still treated as pulled.
const PULL_MEMORY: Duration = Duration::from_secs(3);
/// Longest wait between refreshes while Redis is unreachable.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct ClusterCounters {
    /// WHEP requests answered with a redirect to another node.
    pub redirects: AtomicU64,
    /// Edge pulls started.
    pub pulls: AtomicU64,
    /// Upstream sessions that ended for the origin's sake and were looked up again.
    pub upstream_retries: AtomicU64,
    /// Refreshes that failed (Redis unreachable or erroring).
    pub refresh_errors: AtomicU64,
    /// Publishers refused because another node holds the stream.
    pub claims_refused: AtomicU64,
    /// Publishers that waited for a dead node's claim to lapse and took the stream.
    pub handovers: AtomicU64,
    /// Edge pulls that went to a relay (another edge) because their origin went silent.
    pub relays: AtomicU64,
    /// Split brains settled: claims this node took from a younger claim, and claims it lost
    /// to an older one (its publisher ended).
    pub split_won: AtomicU64,
    /// See `split_won`.
    pub split_lost: AtomicU64,
    /// Times the refresh ran so late that this node's claims may have lapsed meanwhile (the
    /// process was stopped or starved), and were counted as new.
    pub stalls: AtomicU64,
}

/// A claim not refreshed for this long belongs to a node that stopped (live nodes refresh
/// every second).
const ABANDONED_AFTER: Duration = Duration::from_millis(1500);

/// A stream of this node, as the refresh sees it.
#[derive(Debug, Clone)]
pub struct LocalStream {
    /// `app/stream`.
    pub key: String,
    /// It has a publisher here (WHIP, RTMP) or is a live clip; an edge pull is excluded
    /// by the refresh.
    pub publishing: bool,
    /// How long its claim outlives its publisher (the app's `idle_grace_s`).
    pub grace: Duration,
}

/// What the node reports each second.
#[derive(Debug, Clone)]
pub struct Local {
    /// Its record.
    pub record: NodeRecord,
    /// Its streams.
    pub streams: Vec<LocalStream>,
}

/// The node's side of the refresh (the HTTP state implements it): what it reports, and
/// what it does when it loses a stream.
pub trait NodeSide: Send + 'static {
    /// What the node reports this second.
    fn local(&mut self) -> Local;
    /// Node `winner` holds stream `key`, which had a publisher here (a split brain settled
    /// for the older claim): the local publisher is ended, the upstreams this node served
    /// to edges for `key` are closed, and local viewers, if any, are fed by a pull from the
    /// winner.
    fn lost(&mut self, cluster: &Arc<Cluster>, key: &str, winner: &str);
}

/// A claim this node holds: since when (its age, which settles a split brain), and the
/// last moment the stream had a publisher here.
#[derive(Debug, Clone, Copy)]
struct Held {
    since: Instant,
    last_live: Instant,
}

impl upstream::Origins for Cluster {
    fn origin(&self, key: &str, rt: &tokio::runtime::Handle) -> Option<(String, String)> {
        match rt.block_on(self.origin_of(key)) {
            Ok(Some(node)) if node != self.cfg.node => self
                .view()
                .node(&node)
                .map(|n| (n.name.clone(), n.url.clone())),
            _ => None,
        }
    }

    fn relay(&self, origin: &str) -> Option<(String, String)> {
        let view = self.view();
        let none = HashMap::new();
        let n = view.least_loaded_except(&none, &[origin, &self.cfg.node])?;
        Some((n.name.clone(), n.url.clone()))
    }

    fn relaying(&self, key: &str, on: bool) {
        if let Ok(mut p) = self.pulls.lock()
            && let Some(e) = p.get_mut(key)
            && e.relay != on
        {
            e.relay = on;
            if on {
                self.counters.relays.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn retried(&self) {
        self.counters
            .upstream_retries
            .fetch_add(1, Ordering::Relaxed);
    }

    fn ended(&self, key: &str) {
        if let Ok(mut p) = self.pulls.lock()
            && let Some(e) = p.get_mut(key)
        {
            e.ended = Some(Instant::now());
        }
    }
}

/// Which streams to claim (or keep claiming), with each claim's age in ms, and which to
/// release this refresh. `claims` holds each claimed stream's [`Held`]: a stream publishing
/// here (not pulled) is claimed; a claim is kept for its stream's grace after its publisher
/// left, and released past it, when its stream is gone, or when it is now pulled.
fn plan_claims(
    claims: &mut HashMap<String, Held>,
    streams: &[LocalStream],
    pulled: &[String],
    now: Instant,
) -> (Vec<(String, u64)>, Vec<String>) {
    for s in streams {
        if s.publishing && !pulled.contains(&s.key) {
            claims
                .entry(s.key.clone())
                .or_insert(Held {
                    since: now,
                    last_live: now,
                })
                .last_live = now;
        }
    }
    // Graces by stream, so that each claim is looked up once, not searched for.
    let graces: HashMap<&str, Duration> =
        streams.iter().map(|s| (s.key.as_str(), s.grace)).collect();
    let mut claim = Vec::new();
    let mut release = Vec::new();
    for (k, held) in claims.iter() {
        let grace = graces.get(k.as_str()).copied();
        match grace {
            Some(g) if now.duration_since(held.last_live) <= g && !pulled.contains(k) => {
                let age = now.duration_since(held.since).as_millis();
                claim.push((k.clone(), u64::try_from(age).unwrap_or(u64::MAX)));
            }
            _ => release.push(k.clone()),
        }
    }
    for k in &release {
        claims.remove(k);
    }
    tern_pool::shrink_map(claims);
    claim.sort();
    release.sort();
    (claim, release)
}

/// A pull's stop flag, when it ended, and whether it comes through a relay now.
struct PullEntry {
    stop: Arc<AtomicBool>,
    ended: Option<Instant>,
    relay: bool,
}

/// This node's part in the cluster.
pub struct Cluster {
    cfg: ClusterSection,
    store: Store,
    view: RwLock<Arc<View>>,
    /// Times the cached view was replaced.
    view_builds: AtomicU64,
    redis_up: AtomicBool,
    /// Viewers redirected to each node since the view was read (a burst of requests
    /// would otherwise all go to the node that was least loaded a second ago).
    sent: Mutex<HashMap<String, u64>>,
    /// Streams this node claims: since when, and when they last had a publisher here.
    claims: Mutex<HashMap<String, Held>>,
    /// Streams lost to another node's claim while live here (warned and reported once, not
    /// every second: a clip of the same stream on two nodes stays live on both).
    conflicts: Mutex<std::collections::HashSet<String>>,
    /// The upstream sessions this node serves to edges (viewers that came with the cluster
    /// secret), by stream: closed when this node loses the stream, so that the edges look
    /// its origin up again.
    served: Mutex<HashMap<String, Vec<u64>>>,
    /// Streams pulled from another node: their stop flags, and when the pull ended (kept
    /// for [`PULL_MEMORY`] so the pull's last moments, live without a pull, never read as
    /// a local publisher to claim).
    pulls: Mutex<HashMap<String, PullEntry>>,
    /// The upstream sessions' DTLS certificate.
    dtls: Arc<DtlsContext>,
    /// The TLS roots of the upstream sessions' WHEP requests to an `https://` origin.
    outbound: Outbound,
    /// Counters for `/metrics`.
    pub counters: ClusterCounters,
}

impl Cluster {
    /// This node's cluster part when `[cluster]` is set (`section`), with `url` defaulting to
    /// the HTTP listener `http` on `host` (the node's first ICE candidate); `None` without.
    /// Not connected until it runs.
    pub fn for_node(
        section: Option<&ClusterSection>,
        host: std::net::IpAddr,
        http: std::net::SocketAddr,
        dtls: &Arc<DtlsContext>,
        outbound: &Outbound,
    ) -> Result<Option<Arc<Cluster>>, String> {
        section
            .map(|c| {
                Cluster::new(
                    c.clone().with_default_url(host, http),
                    dtls.clone(),
                    outbound.clone(),
                )
                .map(Arc::new)
            })
            .transpose()
    }

    /// The cluster part of a node configured with `cfg` (not connected until it runs);
    /// its upstream sessions use the node's own DTLS certificate `dtls`, and sign in at
    /// their origin over HTTP or HTTPS through `outbound`.
    pub fn new(
        cfg: ClusterSection,
        dtls: Arc<DtlsContext>,
        outbound: Outbound,
    ) -> Result<Self, String> {
        let store = Store::new(&cfg.redis, cfg.sentinel_password.as_deref())?;
        Ok(Cluster {
            cfg,
            store,
            view: RwLock::new(Arc::new(View::default())),
            view_builds: AtomicU64::new(0),
            redis_up: AtomicBool::new(false),
            sent: Mutex::new(HashMap::new()),
            claims: Mutex::new(HashMap::new()),
            conflicts: Mutex::new(std::collections::HashSet::new()),
            served: Mutex::new(HashMap::new()),
            pulls: Mutex::new(HashMap::new()),
            dtls,
            outbound,
            counters: ClusterCounters::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ClusterSection {
        &self.cfg
    }

    /// The cluster as last read.
    pub fn view(&self) -> Arc<View> {
        self.view
            .read()
            .map(|v| v.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    /// Times the cached view was rebuilt (it is only when something changed).
    pub fn view_builds(&self) -> u64 {
        self.view_builds.load(Ordering::Relaxed)
    }

    /// Whether the last exchange with Redis worked.
    pub fn redis_up(&self) -> bool {
        self.redis_up.load(Ordering::Relaxed)
    }

    /// Redis commands sent since start.
    pub fn redis_commands(&self) -> u64 {
        self.store.commands.load(Ordering::Relaxed)
    }

    /// Streams this node pulls from others (with `ended`, also those whose pull ended
    /// within [`PULL_MEMORY`]).
    pub fn pulled(&self, ended: bool) -> Vec<String> {
        let mut v: Vec<String> = self
            .pulls
            .lock()
            .map(|m| {
                m.iter()
                    .filter(|(_, p)| ended || p.ended.is_none())
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Whether this node's pull of `key` comes through a relay now (it then relays for no
    /// other edge: relays do not chain).
    pub fn pulls_via_relay(&self, key: &str) -> bool {
        self.pulls
            .lock()
            .is_ok_and(|p| p.get(key).is_some_and(|e| e.ended.is_none() && e.relay))
    }

    /// Whether `value` (the request's [`SECRET_HEADER`]) is the cluster secret. Compared
    /// in time independent of where they differ.
    pub fn authenticates(&self, value: Option<&[u8]>) -> bool {
        let Some(v) = value else {
            return false;
        };
        let s = self.cfg.secret.as_bytes();
        if v.len() != s.len() {
            return false;
        }
        v.iter().zip(s).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }

    /// Runs the refresh every second until the process ends; `side` reports this node and
    /// hears of the streams it lost.
    pub async fn run(self: Arc<Self>, mut side: impl NodeSide) {
        let mut backoff = Duration::from_secs(1);
        // When the next refresh is due: one that runs later than that by more than a
        // claim can outlive its last refresh means this process did not run meanwhile.
        let mut due: Option<Instant> = None;
        let stalled_after = Duration::from_secs(self.cfg.ttl_s.saturating_sub(1).max(1));
        loop {
            let now = Instant::now();
            if let Some(late) = due.and_then(|d| now.checked_duration_since(d))
                && late > stalled_after
            {
                self.counters.stalls.fetch_add(1, Ordering::Relaxed);
                let n = self.renew_claims(now);
                warn!(
                    "cluster: this node did not run for {late:?} (stopped or starved): its {n} claims may have lapsed and count as new"
                );
            }
            let lost = self.refresh(side.local()).await;
            let ok = lost.is_some();
            for (key, winner) in lost.into_iter().flatten() {
                side.lost(&self, &key, &winner);
            }
            let wait = if ok {
                backoff = Duration::from_secs(1);
                Duration::from_secs(1)
            } else {
                let w = backoff;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                w
            };
            due = Some(Instant::now() + wait);
            tokio::time::sleep(wait).await;
        }
    }

    /// Counts every claim of this node as made `now` (after a stall); how many there are.
    fn renew_claims(&self, now: Instant) -> usize {
        self.claims.lock().map_or(0, |mut c| {
            for h in c.values_mut() {
                h.since = now;
            }
            c.len()
        })
    }

    /// One refresh: record, claims, view. Returns `None` when Redis did not answer, else
    /// the streams this node lost with their winner (claims it held while they had a
    /// publisher here, now another node's).
    async fn refresh(&self, local: Local) -> Option<Vec<(String, String)>> {
        let now = Instant::now();
        if let Ok(mut p) = self.pulls.lock() {
            p.retain(|_, p| {
                p.ended
                    .is_none_or(|at| now.duration_since(at) < PULL_MEMORY)
            });
            tern_pool::shrink_map(&mut p);
        }
        let pulled: Vec<String> = self.pulled(true);
        let (claim, release) = match self.claims.lock() {
            Ok(mut claims) => plan_claims(&mut claims, &local.streams, &pulled, now),
            Err(_) => return None,
        };
        let record = serde_json::to_string(&local.record).ok()?;
        let ttl_ms = self.cfg.ttl_s * 1000;
        match self
            .store
            .refresh(&self.cfg.node, &record, ttl_ms, &claim, &release)
            .await
        {
            Ok(r) => {
                let lost = self.settle(&claim, &r);
                self.set_up(true, None);
                let changed = self.view.read().map(|v| **v != r.view).unwrap_or(true);
                if changed {
                    if let Ok(mut v) = self.view.write() {
                        *v = Arc::new(r.view);
                    }
                    self.view_builds.fetch_add(1, Ordering::Relaxed);
                }
                if let Ok(mut s) = self.sent.lock() {
                    s.clear();
                }
                Some(lost)
            }
            Err(e) => {
                self.counters.refresh_errors.fetch_add(1, Ordering::Relaxed);
                self.set_up(false, Some(&e.to_string()));
                None
            }
        }
    }

    /// What the claims of one refresh came to: split brains won are counted and logged;
    /// claims lost are dropped (the stream is the winner's now) and returned with the
    /// winner.
    fn settle(&self, claim: &[(String, u64)], r: &store::Refresh) -> Vec<(String, String)> {
        let mut lost = Vec::new();
        let Ok(mut conflicts) = self.conflicts.lock() else {
            return lost;
        };
        conflicts.retain(|k| claim.iter().any(|(c, _)| c == k));
        for ((k, age), answer) in claim.iter().zip(&r.held) {
            if answer.held() {
                conflicts.remove(k);
            }
            match answer {
                Claimed::Held => {}
                Claimed::TookOver => {
                    self.counters.split_won.fetch_add(1, Ordering::Relaxed);
                    warn!(
                        "cluster: {k} was claimed by another node too (a split brain while Redis was away); this node's claim, {age} ms old, is the older and keeps the stream"
                    );
                }
                Claimed::Lost => {
                    if let Ok(mut c) = self.claims.lock() {
                        c.remove(k);
                    }
                    if !conflicts.insert(k.clone()) {
                        continue;
                    }
                    let winner = r.view.origins.get(k).cloned().unwrap_or_default();
                    self.counters.split_lost.fetch_add(1, Ordering::Relaxed);
                    warn!(
                        "cluster: {k} is live here but claimed by {winner}, whose claim is older than this node's ({age} ms): {winner} is its origin"
                    );
                    lost.push((k.clone(), winner));
                }
            }
        }
        lost
    }

    /// Viewer `id` of stream `key` is an edge's upstream session (it came with the cluster
    /// secret).
    pub fn serving(&self, key: &str, id: u64) {
        if let Ok(mut s) = self.served.lock() {
            let v = s.entry(key.to_string()).or_default();
            // Edges are few; a long list is one of sessions long gone.
            if v.len() >= 64 {
                v.drain(..32);
            }
            v.push(id);
        }
    }

    /// The upstream sessions this node served to edges for `key` (forgotten here).
    pub fn take_served(&self, key: &str) -> Vec<u64> {
        self.served
            .lock()
            .ok()
            .and_then(|mut s| s.remove(key))
            .unwrap_or_default()
    }

    /// Records Redis' state, logging a change once.
    fn set_up(&self, up: bool, err: Option<&str>) {
        if self.redis_up.swap(up, Ordering::Relaxed) != up {
            if up {
                info!(
                    "cluster: Redis at {} reachable: node {} registered",
                    self.cfg.redis, self.cfg.node
                );
            } else {
                warn!(
                    "cluster: Redis at {} unreachable ({}): serving what this node has, new pulls refused, retrying",
                    self.cfg.redis,
                    err.unwrap_or("error")
                );
            }
        }
    }

    /// Takes stream `key` for a publisher arriving here. `Err(owner)` when another node
    /// has it. With Redis unreachable the publisher is let in (the node serves alone) and
    /// the claim is made at the next refresh.
    ///
    /// Hand-over: when the owner has stopped refreshing its claim (its node died: an
    /// encoder moves here the moment its origin goes), the publish is held until the claim
    /// lapses, at most `ttl_s` + 1 s, and then takes it; encoders without retries (ffmpeg,
    /// hardware) would give up on a refusal. A live node refreshes its claims to the full
    /// TTL every second, so a claim is the live node's once it is seen refreshed, and
    /// abandoned once its node record is gone or no refresh came for [`ABANDONED_AFTER`]; a
    /// publish for a live node's stream is refused within about a second.
    ///
    /// `Ok(true)`: the claim stopped a pull of `key` running here, whose publisher may
    /// still hold the stream's slot for a moment (see [`Cluster::hold`]).
    pub async fn claim(&self, key: &str) -> Result<bool, String> {
        let ttl_ms = self.cfg.ttl_s * 1000;
        let started = tokio::time::Instant::now();
        let held_until = started + Duration::from_millis(ttl_ms + 1000);
        let mut last_left: Option<i64> = None;
        let mut abandoned = false;
        let answer = loop {
            let r = self.store.claim(&self.cfg.node, key, ttl_ms, 0).await;
            let Ok(Err(owner)) = &r else {
                break r;
            };
            let Ok((left, node_alive)) = self.store.claim_standing(key, owner).await else {
                break r;
            };
            let silent_ms = ttl_ms as i64 - left;
            if !node_alive || left < 0 || silent_ms > ABANDONED_AFTER.as_millis() as i64 {
                if !abandoned {
                    info!(
                        "cluster: {key} is claimed by {owner}, which stopped refreshing it; holding the publish until the claim lapses"
                    );
                    abandoned = true;
                }
            } else if last_left.is_some_and(|l| left > l) {
                // Refreshed since the last look: the owner is alive.
                break r;
            }
            let now = tokio::time::Instant::now();
            // Not seen refreshed nor silent long enough yet: look again, for at most a
            // refresh interval and a half unless it is known to be abandoned.
            let undecided_too_long = !abandoned && now >= started + ABANDONED_AFTER;
            if now >= held_until || undecided_too_long {
                break r;
            }
            last_left = Some(left);
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let waited = abandoned;
        match answer {
            Ok(Ok(())) => {
                if waited {
                    self.counters.handovers.fetch_add(1, Ordering::Relaxed);
                }
                Ok(self.hold(key))
            }
            Ok(Err(owner)) => {
                self.counters.claims_refused.fetch_add(1, Ordering::Relaxed);
                Err(owner)
            }
            Err(e) => {
                self.set_up(false, Some(&e.to_string()));
                Ok(self.hold(key))
            }
        }
    }

    /// Records a claim of `key` taken now (a returning publisher's claim keeps its age). A
    /// pull of `key` still running here (its origin died and the encoder moved here) is
    /// stopped and forgotten: the stream is this node's now, and a stream that reads as
    /// pulled is never claimed, so the claim would go at the next refresh. Returns whether a
    /// pull was stopped.
    fn hold(&self, key: &str) -> bool {
        let mut stopped = false;
        if let Ok(mut p) = self.pulls.lock()
            && let Some(e) = p.remove(key)
        {
            e.stop.store(true, Ordering::Relaxed);
            stopped = true;
        }
        let now = Instant::now();
        if let Ok(mut c) = self.claims.lock() {
            c.entry(key.to_string())
                .or_insert(Held {
                    since: now,
                    last_live: now,
                })
                .last_live = now;
        }
        stopped
    }

    /// The node that has `key`'s publisher, read from Redis now (a fresh claim may not be
    /// in the view yet). `Err` when Redis cannot be reached.
    pub async fn origin_of(&self, key: &str) -> Result<Option<String>, String> {
        match self.store.origin(key).await {
            Ok(o) => Ok(o),
            Err(e) => {
                self.set_up(false, Some(&e.to_string()));
                Err(e.to_string())
            }
        }
    }

    /// The node a viewer's request should go to (least loaded; counted as sent there), or
    /// `None` when routing is off or the registry is not known.
    pub fn route(&self) -> Option<NodeRecord> {
        if !self.cfg.redirect {
            return None;
        }
        self.pick(&[])
    }

    /// For a draining node: the least-loaded other node that is not draining (counted as
    /// sent there), whether or not routing is on; `None` when there is none or the
    /// registry is not known.
    pub fn route_away(&self) -> Option<NodeRecord> {
        // This node may still read as not draining until its next refresh.
        self.pick(&[&self.cfg.node])
    }

    /// The least-loaded node that is not draining nor in `except`, counted as sent there;
    /// `None` when Redis is down or there is none.
    fn pick(&self, except: &[&str]) -> Option<NodeRecord> {
        if !self.redis_up() {
            return None;
        }
        let view = self.view();
        let mut sent = self.sent.lock().ok()?;
        let n = view.least_loaded_except(&sent, except)?.clone();
        *sent.entry(n.name.clone()).or_default() += 1;
        Some(n)
    }

    /// Starts pulling `key` (engine stream `index`) from its origin unless a pull runs.
    pub fn start_pull(
        self: &Arc<Self>,
        key: &str,
        index: usize,
        engine: EngineHandle,
        runtime: tokio::runtime::Handle,
    ) -> std::io::Result<()> {
        let Ok(mut pulls) = self.pulls.lock() else {
            return Ok(());
        };
        if pulls.get(key).is_some_and(|p| p.ended.is_none()) {
            return Ok(());
        }
        let stop = Arc::new(AtomicBool::new(false));
        let pull = upstream::Pull {
            secret: self.cfg.secret.clone(),
            grace: Duration::from_secs(self.cfg.edge_grace_s),
            dtls: self.dtls.clone(),
            agent: self.outbound.agent(upstream::SIGNAL_TIMEOUT, false),
            key: key.to_string(),
            index,
            engine,
            runtime,
            stop: stop.clone(),
        };
        let me: Arc<dyn upstream::Origins> = self.clone();
        std::thread::Builder::new()
            .name("EdgePull".into())
            .spawn(move || upstream::run(me, pull))?;
        pulls.insert(
            key.to_string(),
            PullEntry {
                stop,
                ended: None,
                relay: false,
            },
        );
        self.counters.pulls.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// A clean leave: pulls stop, the record and claims go from Redis at once.
    pub async fn leave(&self) {
        if let Ok(p) = self.pulls.lock() {
            for e in p.values() {
                e.stop.store(true, Ordering::Relaxed);
            }
        }
        let claims: Vec<String> = self
            .claims
            .lock()
            .map(|c| c.keys().cloned().collect())
            .unwrap_or_default();
        match self.store.leave(&self.cfg.node, &claims).await {
            Ok(()) => info!("cluster: node {} left the registry", self.cfg.node),
            Err(e) => warn!("cluster: could not leave the registry: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(key: &str, publishing: bool) -> LocalStream {
        LocalStream {
            key: key.into(),
            publishing,
            grace: Duration::from_secs(10),
        }
    }

    #[test]
    fn claims_follow_local_publishers_and_their_grace() {
        let t0 = Instant::now();
        let mut claims = HashMap::new();
        let streams = [
            stream("live/a", true),
            stream("live/b", false),
            stream("live/c", true),
        ];
        // live/c is pulled from elsewhere: never ours.
        let pulled = ["live/c".to_string()];
        let (claim, release) = plan_claims(&mut claims, &streams, &pulled, t0);
        assert_eq!((claim, release), (vec![("live/a".to_string(), 0)], vec![]));
        // Its age grows while it is held.
        let streams2 = [stream("live/a", true)];
        let (claim, _) = plan_claims(&mut claims, &streams2, &[], t0 + Duration::from_secs(2));
        assert_eq!(claim, [("live/a".to_string(), 2000)]);
        // The publisher of live/a leaves: kept for the grace (still aging), then released.
        let streams = [stream("live/a", false)];
        let t = t0 + Duration::from_secs(11);
        let (claim, _) = plan_claims(&mut claims, &streams, &[], t);
        assert_eq!(claim, [("live/a".to_string(), 11_000)]);
        let t = t0 + Duration::from_secs(13);
        let (claim, release) = plan_claims(&mut claims, &streams, &[], t);
        assert!(claim.is_empty());
        assert_eq!(release, ["live/a"]);
        assert!(claims.is_empty());
        // A claimed stream that is gone from the directory is released at once.
        plan_claims(&mut claims, &[stream("live/x", true)], &[], t);
        let (claim, release) = plan_claims(&mut claims, &[], &[], t);
        assert_eq!((claim.len(), release), (0, vec!["live/x".to_string()]));
    }
}
