//! `GET /v1/memory` (every named pool and the allocator's totals, as JSON or pjsua's `dd`
//! table, optionally per session), `GET /v1/stats/current` (the engine's counters in
//! OvenMediaEngine's envelope) and `GET /v1/health` (the probe: up, and how many sessions).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::http::error::HttpError;
use crate::http::reply::{json, text};
use crate::http::state::AppState;
use crate::media::SessionMemory;

/// `GET /v1/memory`: every named pool's used/allocated/utilization/peak and the counting
/// allocator's totals, as JSON; `?format=dd` gives the pjsua-`dd`-style text table, and
/// `sessions=1` adds one entry per viewer session (engine slot, engine heap, HTTP-side heap).
pub(super) async fn memory(
    State(st): State<Arc<AppState>>,
    axum::extract::RawQuery(q): axum::extract::RawQuery,
) -> Response {
    let has = |want: &str| {
        q.as_deref()
            .is_some_and(|q| q.split('&').any(|kv| kv == want))
    };
    let sessions = if has("sessions=1") {
        let Ok(list) = st.engine.sessions().await else {
            return HttpError::engine_stopped().into_response();
        };
        let table = st.sessions.lock().ok();
        let rows: Vec<SessionRow> = list
            .into_iter()
            .map(|m| {
                let (sid, http) = table
                    .as_ref()
                    .and_then(|t| t.bytes_of(m.id))
                    .map_or((String::new(), 0), |(k, b)| (k.to_string(), b));
                SessionRow { sid, http, m }
            })
            .collect();
        Some(rows)
    } else {
        None
    };
    let reports = st.memory_reports();
    let alloc = tern_pool::CountingAlloc::stats();
    if has("format=dd") {
        let mut out = tern_pool::format_dd(&reports, &alloc);
        if let Some(rows) = &sessions {
            out.push_str(&format_sessions(rows));
        }
        return text(StatusCode::OK, out);
    }
    let pools: Vec<serde_json::Value> = reports
        .iter()
        .map(|r| {
            serde_json::json!({
                "name": r.name,
                "used_bytes": r.used_bytes,
                "allocated_bytes": r.allocated_bytes,
                "utilization_pct": r.utilization_pct,
                "peak_bytes": r.peak_bytes,
                "items_in_use": r.items_in_use,
                "items_peak": r.items_peak,
            })
        })
        .collect();
    let mut body = serde_json::json!({
        "allocator": {
            "live_bytes": alloc.live_bytes,
            "peak_bytes": alloc.peak_bytes,
            "allocations": alloc.allocations,
            "frees": alloc.frees,
            "mapped_bytes": alloc.mapped_bytes,
        },
        "pools": pools,
    });
    if let Some(rows) = sessions {
        body["sessions"] = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "session": r.sid,
                    "viewer": format!("{:?}", r.m.id),
                    "state": r.m.state,
                    "handshake": r.m.handshake,
                    "engine_inline_bytes": r.m.inline_bytes,
                    "engine_heap_bytes": r.m.heap_bytes,
                    "http_bytes": r.http,
                    "total_bytes": r.m.inline_bytes + r.m.heap_bytes + r.http,
                })
            })
            .collect();
    }
    let mut r = (StatusCode::OK, body.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// `GET /v1/stats/current`: the engine's counters, in the envelope and field names of
/// OvenMediaEngine's `/v1/stats/current` where they exist (`totalConnections`,
/// `totalBytesOut`), plus tern's own (`packetsOut`, `retransmits`, ...). Counters are read
/// live; nothing is built or cached.
pub(super) async fn stats_current(State(st): State<Arc<AppState>>) -> Response {
    let s = &st.engine.stats;
    let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let body = serde_json::json!({
        "statusCode": 200,
        "message": "OK",
        "response": {
            "totalConnections": s.viewers.load(Ordering::Relaxed),
            "handshakesInProgress": s.handshakes.load(Ordering::Relaxed),
            "handshakesDone": n(&s.handshakes_done),
            "handshakesFailed": n(&s.handshakes_failed),
            "totalBytesOut": n(&s.bytes_out),
            "packetsOut": n(&s.packets_out),
            "retransmits": n(&s.retransmits),
            "keyframeRequests": n(&s.keyframe_requests),
            "packetsIn": n(&s.packets_in),
            "droppedIn": n(&s.dropped_in),
            "sendErrors": n(&s.send_errors),
            "publishers": s.publishers.load(Ordering::Relaxed),
            "ingestPackets": n(&s.ingest_packets),
            "snapshotBuilds": s.snapshots.builds(),
        }
    });
    let mut r = (StatusCode::OK, body.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// `GET /v1/health`: `200 {"status": "ok", "sessions": N}` while the server serves, N the
/// viewer and publisher sessions it holds (the counters `/v1/stats/current` reads:
/// `totalConnections` plus `publishers`). For load balancers, orchestrators and the
/// container image's `HEALTHCHECK` (`tern health`); outside the API token, like the stats.
/// A draining node ([`crate::drain`]) answers `503 {"status": "draining", "sessions": N,
/// "deadline_s": S}`, so that a load balancer moves on.
pub(super) async fn health(State(st): State<Arc<AppState>>) -> Response {
    let (draining, body) = super::api::drain_state(&st);
    let status = match draining {
        true => StatusCode::SERVICE_UNAVAILABLE,
        false => StatusCode::OK,
    };
    json(status, body)
}

/// One session's line of the per-session memory report.
struct SessionRow {
    sid: String,
    http: usize,
    m: SessionMemory,
}

/// The per-session table under the `dd` report: one line per viewer session.
fn format_sessions(rows: &[SessionRow]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<24} {:<12} {:>4} {:>8} {:>8} {:>8} {:>8}",
        "session", "state", "dtls", "slot", "heap", "http", "total"
    );
    let (mut slot, mut heap, mut http) = (0, 0, 0);
    for r in rows {
        let _ = writeln!(
            out,
            "{:<24} {:<12} {:>4} {:>8} {:>8} {:>8} {:>8}",
            if r.sid.is_empty() { "-" } else { &r.sid },
            r.m.state,
            if r.m.handshake { "yes" } else { "no" },
            r.m.inline_bytes,
            r.m.heap_bytes,
            r.http,
            r.m.inline_bytes + r.m.heap_bytes + r.http
        );
        slot += r.m.inline_bytes;
        heap += r.m.heap_bytes;
        http += r.http;
    }
    let _ = writeln!(
        out,
        "{:<24} {:<12} {:>4} {:>8} {:>8} {:>8} {:>8}",
        format!("{} sessions", rows.len()),
        "",
        "",
        slot,
        heap,
        http,
        slot + heap + http
    );
    out
}
