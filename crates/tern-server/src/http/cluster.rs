//! The cluster's HTTP side: the node's report to the registry, WHEP routing (`307` to the
//! least-loaded node), and what `/v1/cluster` and `/metrics` show. The Redis side is
//! [`crate::cluster`]; the edge pull and the publish-time claim belong to every surface
//! and live in [`crate::session`].

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::cluster::{Cluster, Local, LocalStream, NodeRecord, NodeSide, ROUTED_PARAM};
use crate::http::reply::cors;
use crate::http::state::AppState;
use crate::media::{Command, ViewerId};
use crate::metrics::{Exposition, Kind};

/// Starts the node's refresh (record, claims, view) on the current runtime.
pub fn start(st: &Arc<AppState>) {
    let Some(cluster) = st.cluster.clone() else {
        return;
    };
    tokio::spawn(cluster.run(Side {
        st: st.clone(),
        meter: Meter::default(),
    }));
}

/// The node's side of the cluster refresh.
struct Side {
    st: Arc<AppState>,
    meter: Meter,
}

impl NodeSide for Side {
    fn local(&mut self) -> Local {
        local(&self.st, &mut self.meter)
    }

    fn lost(&mut self, cluster: &Arc<Cluster>, key: &str, winner: &str) {
        let st = &self.st;
        let Some(index) = st.streams.get(key).map(|i| i.index) else {
            return;
        };
        let Some(id) = st.forget_publisher_of(index) else {
            // Live without a publisher: a clip of the same stream on both nodes (a
            // configuration matter), or the publisher already left.
            tracing::warn!(
                "stream {key}: live here with no publisher to end; edges pull it from {winner}"
            );
            return;
        };
        tracing::warn!("stream {key}: publisher ended, node {winner} is its origin");
        let _ = st.engine.send(Command::RemovePublisher(id));
        // The edges this node served look the origin up again and find the winner; their
        // viewers keep their sessions.
        let served = cluster.take_served(key);
        for id in &served {
            let _ = st
                .engine
                .send(Command::RemoveViewer(ViewerId::from_raw(*id)));
        }
        let own = st
            .engine
            .stats
            .snapshots
            .viewers(Some(key))
            .iter()
            .filter(|v| !served.contains(&v.id))
            .count();
        if own > 0 {
            let rt = tokio::runtime::Handle::current();
            if let Err(e) = cluster.start_pull(key, index, st.engine.clone(), rt) {
                tracing::warn!("stream {key}: cannot pull it from {winner}: {e}");
            }
        }
    }
}

/// CPU time and bytes sent at the last report, for per-second rates.
#[derive(Default)]
struct Meter {
    last: Option<(Instant, u64, u64)>,
}

/// This process's CPU time in clock ticks (`/proc/self/stat` utime + stime; USER_HZ is
/// 100 on Linux), or 0 where there is no procfs.
fn cpu_ticks() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0;
    };
    // Fields after the command name (which may hold spaces) start at field 3.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    n(11) + n(12)
}

/// What this node reports this second.
fn local(st: &AppState, meter: &mut Meter) -> Local {
    let stats = &st.engine.stats;
    let now = Instant::now();
    let (ticks, bytes) = (cpu_ticks(), stats.bytes_out.load(Ordering::Relaxed));
    let (egress, cpu) = match meter.last {
        Some((at, t0, b0)) => {
            let secs = now.duration_since(at).as_secs_f64().max(0.001);
            (
                (bytes.saturating_sub(b0) as f64 * 8.0 / secs) as u64,
                ticks.saturating_sub(t0) as f64 / 100.0 / secs,
            )
        }
        None => (0, 0.0),
    };
    meter.last = Some((now, ticks, bytes));
    let streams = st
        .streams
        .list()
        .into_iter()
        .map(|(key, index)| {
            let app = key.split_once('/').map_or("", |(a, _)| a);
            let grace = st
                .config()
                .app(app)
                .map_or(crate::config::DEFAULT_IDLE_GRACE_S, |a| a.idle_grace_s);
            let c = stats.stream(index);
            LocalStream {
                // A publisher here, or a live built-in clip (a pulled stream is live too,
                // but the refresh never claims what it pulls).
                publishing: c.is_some_and(|c| {
                    c.publishing.load(Ordering::Relaxed) || c.live.load(Ordering::Relaxed)
                }),
                grace: Duration::from_secs(grace),
                key,
            }
        })
        .collect();
    Local {
        record: record(st, egress, (cpu * 1000.0).round() / 1000.0),
        streams,
    }
}

fn record(st: &AppState, egress_bps: u64, cpu: f64) -> NodeRecord {
    let stats = &st.engine.stats;
    let (name, url) = st
        .cluster
        .as_ref()
        .map(|c| (c.config().node.clone(), c.config().base_url().to_string()))
        .unwrap_or_default();
    NodeRecord {
        name,
        url,
        media: std::net::SocketAddr::new(st.candidate_ips[0], st.candidate_port).to_string(),
        viewers: stats.viewers.load(Ordering::Relaxed) as u64,
        publishers: stats.publishers.load(Ordering::Relaxed) as u64,
        egress_bps,
        cpu,
        version: env!("CARGO_PKG_VERSION").to_string(),
        draining: st.drain.is_draining(),
    }
}

/// WHEP routing: with `cluster.redirect`, a viewer's POST goes to the least-loaded live
/// node that is not draining (`307`, the method and body kept; a draining node redirects
/// whether or not `cluster.redirect` is on) unless that is this node, the request comes
/// from a node (`node`, [`AppState::is_node_request`]), or a redirect already chose this node (`tern_node` in the query).
pub(super) fn redirect(
    st: &AppState,
    (app, stream): (&str, &str),
    query: Option<&str>,
    node: bool,
) -> Option<Response> {
    let c = st.cluster.as_ref()?;
    if node {
        return None;
    }
    let routed = query.is_some_and(|q| {
        q.split('&')
            .any(|p| p.split_once('=').is_some_and(|(k, _)| k == ROUTED_PARAM))
    });
    if routed {
        return None;
    }
    // A draining node sends new viewers to one that is not (with no such node, or routed
    // here already, the request goes on to be refused with 503).
    let target = if st.drain.is_draining() {
        c.route_away()?
    } else {
        c.route()?
    };
    if target.name == c.config().node {
        return None;
    }
    c.counters.redirects.fetch_add(1, Ordering::Relaxed);
    let mut q = query.map(|q| format!("{q}&")).unwrap_or_default();
    let _ = write!(q, "{ROUTED_PARAM}={}", target.name);
    let location = format!(
        "{}/{app}/{stream}/whep?{q}",
        target.url.trim_end_matches('/')
    );
    let mut r = (StatusCode::TEMPORARY_REDIRECT, "").into_response();
    cors(r.headers_mut());
    if let Ok(v) = HeaderValue::from_str(&location) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    Some(r)
}

/// An edge asks this node to relay `key` (its origin went silent for it): served only from
/// a stream live here from its publisher or this node's own pull from the origin, never by
/// starting a pull, so relays do not chain.
pub(super) async fn may_relay(
    st: &AppState,
    key: &str,
) -> Result<(), crate::http::error::HttpError> {
    let refuse = |why: &str| {
        Err(crate::http::error::HttpError::Unavailable(
            format!("{key} is not live here from its origin: {why}"),
            None,
        ))
    };
    let Some(info) = st.streams.get(key).filter(|i| st.is_live(*i)) else {
        return refuse("no relay");
    };
    if st.cluster.as_ref().is_some_and(|c| c.pulls_via_relay(key)) {
        return refuse("no relay");
    }
    // The stream must be flowing here: when the origin dies, every edge's pull reads as
    // live until its silence is noticed (2 s), and an edge that relayed a silent pull
    // would hold the asking edge on it.
    let packets = || {
        st.engine
            .stats
            .stream(info.index)
            .map_or(0, |c| c.packets.load(Ordering::Relaxed))
    };
    let before = packets();
    tokio::time::sleep(RELAY_FLOWING).await;
    if packets() == before {
        return refuse("silent here too");
    }
    Ok(())
}

/// How long a relay request watches the stream for packets before it is served.
const RELAY_FLOWING: std::time::Duration = std::time::Duration::from_millis(300);

/// `GET /v1/cluster`: this node, Redis' state, the registry and the origin map.
pub(super) fn json(st: &AppState) -> serde_json::Value {
    let Some(c) = st.cluster.as_ref() else {
        return serde_json::json!({ "enabled": false });
    };
    let view = c.view();
    serde_json::json!({
        "enabled": true,
        "node": c.config().node,
        "redis": if c.redis_up() { "up" } else { "down" },
        "redirect": c.config().redirect,
        "nodes": view.nodes,
        "origins": view.origins.iter().map(|(k, v)| serde_json::json!({"stream": k, "node": v})).collect::<Vec<_>>(),
        "pulling": c.pulled(false),
        "redis_commands": c.redis_commands(),
        "view_builds": c.view_builds(),
    })
}

/// The cluster's families of `/metrics`.
pub(super) fn metrics(st: &AppState, o: &mut Exposition) {
    let Some(c) = st.cluster.as_ref() else {
        return;
    };
    let view = c.view();
    o.gauge(
        "tern_cluster_redis_up",
        "1 when the last exchange with the cluster's Redis worked.",
        u64::from(c.redis_up()),
    );
    o.gauge(
        "tern_cluster_nodes",
        "Live nodes in the registry.",
        view.nodes.len() as u64,
    );
    o.gauge(
        "tern_cluster_origins",
        "Streams in the origin map.",
        view.origins.len() as u64,
    );
    o.gauge(
        "tern_cluster_pulls",
        "Streams this node pulls from their origin.",
        c.pulled(false).len() as u64,
    );
    let k = &c.counters;
    for (name, help, v) in [
        (
            "tern_cluster_redis_commands_total",
            "Redis commands sent.",
            c.redis_commands(),
        ),
        (
            "tern_cluster_redirects_total",
            "WHEP requests redirected to another node.",
            k.redirects.load(Ordering::Relaxed),
        ),
        (
            "tern_cluster_pulls_started_total",
            "Edge pulls started.",
            k.pulls.load(Ordering::Relaxed),
        ),
        (
            "tern_cluster_upstream_retries_total",
            "Upstream sessions ended by their origin and looked up again.",
            k.upstream_retries.load(Ordering::Relaxed),
        ),
        (
            "tern_cluster_refresh_errors_total",
            "Registry refreshes that failed.",
            k.refresh_errors.load(Ordering::Relaxed),
        ),
        (
            "tern_cluster_claims_refused_total",
            "Publishers refused because another node has the stream.",
            k.claims_refused.load(Ordering::Relaxed),
        ),
        (
            "tern_cluster_handovers_total",
            "Publishers held until a dead node's claim lapsed, then given the stream.",
            k.handovers.load(Ordering::Relaxed),
        ),
        (
            "tern_cluster_relays_total",
            "Edge pulls that went to another edge (a relay) because their origin went silent.",
            k.relays.load(Ordering::Relaxed),
        ),
        (
            "tern_cluster_split_brains_won_total",
            "Streams claimed by two nodes (while Redis was away) that this node's older claim kept.",
            k.split_won.load(Ordering::Relaxed),
        ),
        (
            "tern_cluster_split_brains_lost_total",
            "Streams claimed by two nodes that another node's older claim took: the publisher here was ended.",
            k.split_lost.load(Ordering::Relaxed),
        ),
        (
            "tern_cluster_stalls_total",
            "Refreshes so late that this node's claims may have lapsed (the process did not run); its claims then count as new.",
            k.stalls.load(Ordering::Relaxed),
        ),
    ] {
        o.counter(name, help, v);
    }
    let mut f = o.family(
        "tern_cluster_node_viewers",
        "Viewers of each live node, as in the registry.",
        Kind::Gauge,
    );
    for n in &view.nodes {
        f.sample(&[("node", &n.name)], n.viewers);
    }
}
