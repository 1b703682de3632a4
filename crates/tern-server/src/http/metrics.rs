//! Prometheus `/metrics`: the engine's counters, per stream, the pools, admission, HLS,
//! TURN and the cluster, in the text exposition format. Every line is written by
//! `reply::metric_line` or, for labelled families, next to it here.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::http::reply::metric_line;
use crate::http::state::AppState;

/// `GET /metrics`.
pub(super) async fn metrics(State(st): State<Arc<AppState>>) -> Response {
    let s = &st.engine.stats;
    let mut o = String::with_capacity(4096);
    let mut gauge = |name: &str, help: &str, kind: &str, v: u64| {
        metric_line(&mut o, name, help, kind, v);
    };
    let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    gauge(
        "tern_viewers",
        "Viewer sessions held.",
        "gauge",
        s.viewers.load(Ordering::Relaxed) as u64,
    );
    gauge(
        "tern_turn_peer_refused_total",
        "TURN permissions, channels and Send indications refused by the peer policy.",
        "counter",
        l(&s.turn_peer_refused),
    );
    gauge(
        "tern_turn_rate_limited_total",
        "TURN datagrams dropped by an allocation's bandwidth cap (turn.max_bps).",
        "counter",
        l(&s.turn_rate_limited),
    );
    gauge(
        "tern_turn_quota_refusals_total",
        "TURN allocations refused by a quota (total, per user, per address).",
        "counter",
        l(&s.turn_quota_refusals),
    );
    if let Some(tls) = &st.tls {
        gauge(
            "tern_tls_certificate_reloads_total",
            "HTTPS certificate pairs loaded after the first (file change or SIGHUP).",
            "counter",
            tls.reloads(),
        );
        gauge(
            "tern_tls_certificate_reload_failures_total",
            "HTTPS certificate reloads that failed (the previous pair stayed in use).",
            "counter",
            tls.reload_failures(),
        );
    }
    let h = &st.hls;
    gauge(
        "tern_hls_sessions",
        "LL-HLS sessions open.",
        "gauge",
        h.session_count() as u64,
    );
    gauge(
        "tern_hls_streams_packaged",
        "Streams being packaged for LL-HLS (someone reads them).",
        "gauge",
        h.packaging_count() as u64,
    );
    for (name, help, v) in [
        (
            "tern_hls_sessions_opened_total",
            "LL-HLS sessions opened (admitted index.m3u8 requests).",
            &h.counters.sessions_opened,
        ),
        (
            "tern_hls_playlists_total",
            "LL-HLS playlists answered.",
            &h.counters.playlists,
        ),
        (
            "tern_hls_media_total",
            "LL-HLS parts, segments and init segments answered.",
            &h.counters.media,
        ),
        (
            "tern_hls_media_bytes_total",
            "Bytes of LL-HLS parts, segments and init segments answered.",
            &h.counters.media_bytes,
        ),
        (
            "tern_hls_damaged_frames_total",
            "Access units the LL-HLS packager could not rebuild from a stream's RTP (loss, a full tap queue).",
            &h.counters.damaged_frames,
        ),
        (
            "tern_hls_skipped_frames_total",
            "Video frames LL-HLS left out because their codec is not packaged (H265, AV1 today).",
            &h.counters.skipped_frames,
        ),
        (
            "tern_hls_tap_dropped_total",
            "Ring packets not handed to the LL-HLS packager because its queue was full.",
            &s.hls_tap_dropped,
        ),
    ] {
        gauge(name, help, "counter", l(v));
    }
    gauge(
        "tern_hls_sessions_refused_total",
        "LL-HLS sessions refused by the per-address limit (hls.sessions_per_ip).",
        "counter",
        h.refused_per_ip(),
    );
    let r = &st.record;
    let rc = &r.counters;
    for (name, help, kind, v) in [
        (
            "tern_recordings",
            "Recordings running.",
            "gauge",
            r.active() as u64,
        ),
        (
            "tern_record_queued_bytes",
            "Bytes of fragments waiting for the recording writer.",
            "gauge",
            r.queued_bytes(),
        ),
        (
            "tern_record_bytes_total",
            "Bytes written to recorded files.",
            "counter",
            l(&rc.bytes),
        ),
        (
            "tern_record_parts_total",
            "Fragments written to recorded files.",
            "counter",
            l(&rc.parts),
        ),
        (
            "tern_record_parts_late_total",
            "Fragments written more than a second after their part length past their end.",
            "counter",
            l(&rc.late_parts),
        ),
        (
            "tern_record_files_total",
            "Recorded files finished.",
            "counter",
            l(&rc.files),
        ),
        (
            "tern_record_failures_total",
            "Recordings stopped by a write error.",
            "counter",
            l(&rc.failures),
        ),
        (
            "tern_record_overruns_total",
            "Recordings stopped because the writer was behind.",
            "counter",
            l(&r.overruns),
        ),
        (
            "tern_record_hooks_failed_total",
            "Segment webhook calls dropped or failed.",
            "counter",
            l(&rc.hooks_failed),
        ),
    ] {
        gauge(name, help, kind, v);
    }
    gauge(
        "tern_handshakes_in_progress",
        "DTLS handshakes in progress.",
        "gauge",
        s.handshakes.load(Ordering::Relaxed) as u64,
    );
    gauge(
        "tern_handshakes_completed_total",
        "Handshakes completed.",
        "counter",
        l(&s.handshakes_done),
    );
    gauge(
        "tern_handshakes_failed_total",
        "Handshakes failed or timed out.",
        "counter",
        l(&s.handshakes_failed),
    );
    gauge(
        "tern_packets_out_total",
        "SRTP media packets sent.",
        "counter",
        l(&s.packets_out),
    );
    gauge(
        "tern_bytes_out_total",
        "Bytes sent on the media port.",
        "counter",
        l(&s.bytes_out),
    );
    gauge(
        "tern_retransmits_total",
        "Packets retransmitted on NACK.",
        "counter",
        l(&s.retransmits),
    );
    gauge(
        "tern_keyframe_requests_total",
        "PLI/FIR received from viewers.",
        "counter",
        l(&s.keyframe_requests),
    );
    gauge(
        "tern_packets_in_total",
        "Datagrams received on the media port.",
        "counter",
        l(&s.packets_in),
    );
    gauge(
        "tern_dropped_in_total",
        "Datagrams dropped (malformed, unknown, unauthenticated).",
        "counter",
        l(&s.dropped_in),
    );
    gauge(
        "tern_send_errors_total",
        "Failed sends.",
        "counter",
        l(&s.send_errors),
    );
    gauge(
        "tern_gso_messages_total",
        "UDP GSO messages sent (one viewer's run of equal-size packets each).",
        "counter",
        l(&s.gso_messages),
    );
    gauge(
        "tern_gso_packets_total",
        "Datagrams that left inside UDP GSO messages.",
        "counter",
        l(&s.gso_packets),
    );
    gauge(
        "tern_gso_fallbacks_total",
        "Send batches sent again without GSO after a GSO send failed (GSO is then off).",
        "counter",
        l(&s.gso_fallbacks),
    );
    gauge(
        "tern_queue_full_total",
        "Datagrams or packets dropped because a media worker's queue was full, and RTMP publishers closed because it stayed full.",
        "counter",
        l(&s.queue_full),
    );
    gauge(
        "tern_publishers",
        "Publishers (WHIP, RTMP) connected or connecting.",
        "gauge",
        s.publishers.load(Ordering::Relaxed) as u64,
    );
    gauge(
        "tern_ingest_packets_total",
        "Media packets received from publishers.",
        "counter",
        l(&s.ingest_packets),
    );
    gauge(
        "tern_probe_packets_total",
        "Padding packets sent to probe the path of viewers of simulcast streams.",
        "counter",
        l(&s.probe_packets),
    );
    gauge(
        "tern_snapshot_builds_total",
        "Snapshot segments built.",
        "counter",
        s.snapshots.builds(),
    );
    gauge(
        "tern_event_subscribers",
        "Event stream subscribers.",
        "gauge",
        s.snapshots.subscribers() as u64,
    );
    let keys = st.streams.list();
    let per_stream: [(&str, &str, &str); 9] = [
        ("tern_stream_live", "Whether the stream is live.", "gauge"),
        ("tern_stream_viewers", "Viewers of the stream.", "gauge"),
        (
            "tern_stream_packets_out_total",
            "Media packets sent to the stream's viewers.",
            "counter",
        ),
        (
            "tern_stream_bytes_out_total",
            "Media bytes sent to the stream's viewers.",
            "counter",
        ),
        (
            "tern_stream_nacks_total",
            "Sequence numbers the stream's viewers NACKed.",
            "counter",
        ),
        (
            "tern_stream_keyframe_requests_total",
            "PLI/FIR requests from the stream's viewers.",
            "counter",
        ),
        (
            "tern_stream_reported_lost_total",
            "Packets the stream's viewers reported lost in RTCP receiver reports.",
            "counter",
        ),
        (
            "tern_stream_retransmits_total",
            "Packets retransmitted to the stream's viewers (NACKs answered within budget).",
            "counter",
        ),
        (
            "tern_stream_viewers_video_paused",
            "The stream's viewers whose video is paused (their path's estimate is below the stream's video rate).",
            "gauge",
        ),
    ];
    // Viewers and paused viewers per stream, in one pass over the snapshots.
    let mut viewers: std::collections::HashMap<Arc<str>, (u64, u64)> =
        std::collections::HashMap::new();
    for v in s.snapshots.viewers(None) {
        let n = viewers.entry(v.stream.clone()).or_default();
        n.0 += 1;
        n.1 += u64::from(v.video_paused);
    }
    let count = |key: &str| viewers.get(key).copied().unwrap_or_default();
    for (m, (name, help, kind)) in per_stream.iter().enumerate() {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (key, i) in &keys {
            let c = s.stream(*i);
            let v = match m {
                0 => u64::from(c.is_some_and(|c| c.live.load(Ordering::Relaxed))),
                1 => count(key).0,
                2 => c.map_or(0, |c| l(&c.packets)),
                3 => c.map_or(0, |c| l(&c.bytes)),
                4 => c.map_or(0, |c| l(&c.nacks)),
                5 => c.map_or(0, |c| l(&c.keyframe_requests)),
                6 => c.map_or(0, |c| l(&c.reported_lost)),
                7 => c.map_or(0, |c| l(&c.retransmits)),
                _ => count(key).1,
            };
            let _ = writeln!(o, "{name}{{stream=\"{key}\"}} {v}");
        }
    }
    st.admission.stats.render(&mut o);
    let reports = st.memory_reports();
    for (name, help, f) in [
        (
            "tern_pool_used_bytes",
            "Bytes in use per memory pool.",
            (|r: &tern_pool::PoolReport| r.used_bytes as u64) as fn(&tern_pool::PoolReport) -> u64,
        ),
        (
            "tern_pool_allocated_bytes",
            "Bytes allocated per memory pool.",
            |r| r.allocated_bytes as u64,
        ),
        (
            "tern_pool_peak_bytes",
            "Peak bytes in use per memory pool.",
            |r| r.peak_bytes as u64,
        ),
    ] {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge");
        for r in &reports {
            let _ = writeln!(o, "{name}{{pool=\"{}\"}} {}", r.name, f(r));
        }
    }
    crate::http::cluster::metrics(&st, &mut o);
    st.exposed.write_metrics(&mut o);
    if let Some(sources) = st.core.sources.get() {
        sources.write_metrics(&mut o);
    }
    let a = tern_pool::CountingAlloc::stats();
    let _ = writeln!(
        o,
        "# HELP tern_heap_live_bytes Heap bytes live (counting allocator).\n# TYPE tern_heap_live_bytes gauge\ntern_heap_live_bytes {}",
        a.live_bytes
    );
    if let Some(tls) = &st.tls {
        let _ = writeln!(
            o,
            "# HELP tern_tls_certificate_expiry_seconds Seconds until the HTTPS certificate in use expires (negative once it has).\n# TYPE tern_tls_certificate_expiry_seconds gauge\ntern_tls_certificate_expiry_seconds {}",
            tls.seconds_left()
        );
    }
    let mut r = (StatusCode::OK, o).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    r
}
