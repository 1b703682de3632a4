//! Prometheus `/metrics`: the engine's counters, per stream, HLS, recordings, TURN, TLS,
//! the pools and the cluster, then every part the server registered
//! ([`crate::metrics::Exposed`]: SRT, the RTSP sources, admission), all written through
//! one [`Exposition`].

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::http::state::AppState;
use crate::metrics::{Exposition, Kind};

/// `GET /metrics`.
pub(super) async fn metrics(State(st): State<Arc<AppState>>) -> Response {
    let s = &st.engine.stats;
    let mut o = Exposition::with_capacity(4096);
    let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    o.gauge(
        "tern_viewers",
        "Viewer sessions held.",
        s.viewers.load(Ordering::Relaxed) as u64,
    );
    o.counter(
        "tern_turn_peer_refused_total",
        "TURN permissions, channels and Send indications refused by the peer policy.",
        l(&s.turn_peer_refused),
    );
    o.counter(
        "tern_turn_rate_limited_total",
        "TURN datagrams dropped by an allocation's bandwidth cap (turn.max_bps).",
        l(&s.turn_rate_limited),
    );
    o.counter(
        "tern_turn_quota_refusals_total",
        "TURN allocations refused by a quota (total, per user, per address).",
        l(&s.turn_quota_refusals),
    );
    if st.turn.is_some() {
        o.gauge(
            "tern_turn_allocations",
            "TURN allocations alive.",
            s.snapshots.allocations().len() as u64,
        );
        o.gauge(
            "tern_turn_allocations_max",
            "TURN allocations allowed in total (turn.max_allocations); further ones are refused.",
            st.config().turn.max_allocations as u64,
        );
        let relayed = [
            ("to_peer", &s.turn_to_peer, &s.turn_to_peer_bytes),
            ("to_client", &s.turn_to_client, &s.turn_to_client_bytes),
        ];
        let mut f = o.family(
            "tern_turn_relayed_datagrams_total",
            "Datagrams the TURN relays carried, client to peer and peer to client.",
            Kind::Counter,
        );
        for (direction, n, _) in relayed {
            f.sample(&[("direction", &direction)], l(n));
        }
        let mut f = o.family(
            "tern_turn_relayed_bytes_total",
            "Payload bytes the TURN relays carried, client to peer and peer to client.",
            Kind::Counter,
        );
        for (direction, _, b) in relayed {
            f.sample(&[("direction", &direction)], l(b));
        }
    }
    if let Some(tls) = &st.tls {
        o.counter(
            "tern_tls_certificate_reloads_total",
            "HTTPS certificate pairs loaded after the first (file change or SIGHUP).",
            tls.reloads(),
        );
        o.counter(
            "tern_tls_certificate_reload_failures_total",
            "HTTPS certificate reloads that failed (the previous pair stayed in use).",
            tls.reload_failures(),
        );
    }
    let h = &st.hls;
    o.gauge(
        "tern_hls_sessions",
        "LL-HLS sessions open.",
        h.session_count() as u64,
    );
    o.gauge(
        "tern_hls_streams_packaged",
        "Streams being packaged for LL-HLS (someone reads them).",
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
        o.counter(name, help, l(v));
    }
    o.counter(
        "tern_hls_sessions_refused_total",
        "LL-HLS sessions refused by the per-address limit (hls.sessions_per_ip).",
        h.refused_per_ip(),
    );
    let r = &st.record;
    let rc = &r.counters;
    for (name, help, kind, v) in [
        (
            "tern_recordings",
            "Recordings running.",
            Kind::Gauge,
            r.active() as u64,
        ),
        (
            "tern_record_queued_bytes",
            "Bytes of fragments waiting for the recording writer.",
            Kind::Gauge,
            r.queued_bytes(),
        ),
        (
            "tern_record_bytes_total",
            "Bytes written to recorded files.",
            Kind::Counter,
            l(&rc.bytes),
        ),
        (
            "tern_record_parts_total",
            "Fragments written to recorded files.",
            Kind::Counter,
            l(&rc.parts),
        ),
        (
            "tern_record_parts_late_total",
            "Fragments written more than a second after their part length past their end.",
            Kind::Counter,
            l(&rc.late_parts),
        ),
        (
            "tern_record_files_total",
            "Recorded files finished.",
            Kind::Counter,
            l(&rc.files),
        ),
        (
            "tern_record_failures_total",
            "Recordings stopped by a write error.",
            Kind::Counter,
            l(&rc.failures),
        ),
        (
            "tern_record_overruns_total",
            "Recordings stopped because the writer was behind.",
            Kind::Counter,
            l(&r.overruns),
        ),
        (
            "tern_record_hooks_failed_total",
            "Segment webhook calls dropped or failed.",
            Kind::Counter,
            l(&rc.hooks_failed),
        ),
    ] {
        o.family(name, help, kind).value(v);
    }
    forwards(&mut o, &st);
    o.gauge(
        "tern_handshakes_in_progress",
        "DTLS handshakes in progress.",
        s.handshakes.load(Ordering::Relaxed) as u64,
    );
    o.counter(
        "tern_handshakes_completed_total",
        "Handshakes completed.",
        l(&s.handshakes_done),
    );
    o.counter(
        "tern_handshakes_failed_total",
        "Handshakes failed or timed out.",
        l(&s.handshakes_failed),
    );
    o.counter(
        "tern_packets_out_total",
        "SRTP media packets sent.",
        l(&s.packets_out),
    );
    o.counter(
        "tern_bytes_out_total",
        "Bytes sent on the media port.",
        l(&s.bytes_out),
    );
    o.counter(
        "tern_retransmits_total",
        "Packets retransmitted on NACK.",
        l(&s.retransmits),
    );
    o.counter(
        "tern_keyframe_requests_total",
        "PLI/FIR received from viewers.",
        l(&s.keyframe_requests),
    );
    o.counter(
        "tern_packets_in_total",
        "Datagrams received on the media port.",
        l(&s.packets_in),
    );
    o.counter(
        "tern_dropped_in_total",
        "Datagrams dropped (malformed, unknown, unauthenticated).",
        l(&s.dropped_in),
    );
    o.counter("tern_send_errors_total", "Failed sends.", l(&s.send_errors));
    o.counter(
        "tern_gso_messages_total",
        "UDP GSO messages sent (one viewer's run of equal-size packets each).",
        l(&s.gso_messages),
    );
    o.counter(
        "tern_gso_packets_total",
        "Datagrams that left inside UDP GSO messages.",
        l(&s.gso_packets),
    );
    o.counter(
        "tern_gso_fallbacks_total",
        "Send batches sent again without GSO after a GSO send failed (GSO is then off).",
        l(&s.gso_fallbacks),
    );
    o.counter(
        "tern_queue_full_total",
        "Datagrams or packets dropped because a media worker's queue was full, and RTMP publishers closed because it stayed full.",
        l(&s.queue_full),
    );
    o.gauge(
        "tern_publishers",
        "Publishers (WHIP, RTMP) connected or connecting.",
        s.publishers.load(Ordering::Relaxed) as u64,
    );
    o.counter(
        "tern_ingest_packets_total",
        "Media packets received from publishers.",
        l(&s.ingest_packets),
    );
    o.counter(
        "tern_probe_packets_total",
        "Padding packets sent to probe the path of viewers of simulcast streams.",
        l(&s.probe_packets),
    );
    o.counter(
        "tern_snapshot_builds_total",
        "Snapshot segments built.",
        s.snapshots.builds(),
    );
    o.gauge(
        "tern_event_subscribers",
        "Event stream subscribers.",
        s.snapshots.subscribers() as u64,
    );
    let keys = st.streams.list();
    let per_stream: [(&str, &str, Kind); 9] = [
        (
            "tern_stream_live",
            "Whether the stream is live.",
            Kind::Gauge,
        ),
        ("tern_stream_viewers", "Viewers of the stream.", Kind::Gauge),
        (
            "tern_stream_packets_out_total",
            "Media packets sent to the stream's viewers.",
            Kind::Counter,
        ),
        (
            "tern_stream_bytes_out_total",
            "Media bytes sent to the stream's viewers.",
            Kind::Counter,
        ),
        (
            "tern_stream_nacks_total",
            "Sequence numbers the stream's viewers NACKed.",
            Kind::Counter,
        ),
        (
            "tern_stream_keyframe_requests_total",
            "PLI/FIR requests from the stream's viewers.",
            Kind::Counter,
        ),
        (
            "tern_stream_reported_lost_total",
            "Packets the stream's viewers reported lost in RTCP receiver reports.",
            Kind::Counter,
        ),
        (
            "tern_stream_retransmits_total",
            "Packets retransmitted to the stream's viewers (NACKs answered within budget).",
            Kind::Counter,
        ),
        (
            "tern_stream_viewers_video_paused",
            "The stream's viewers whose video is paused (their path's estimate is below the stream's video rate).",
            Kind::Gauge,
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
    for (m, (name, help, kind)) in per_stream.into_iter().enumerate() {
        let mut f = o.family(name, help, kind);
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
            f.sample(&[("stream", key)], v);
        }
    }
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
        let mut family = o.family(name, help, Kind::Gauge);
        for r in &reports {
            family.sample(&[("pool", &r.name)], f(r));
        }
    }
    crate::http::cluster::metrics(&st, &mut o);
    st.exposed.write_metrics(&mut o);
    o.gauge(
        "tern_heap_live_bytes",
        "Heap bytes live (counting allocator).",
        tern_pool::CountingAlloc::stats().live_bytes,
    );
    if let Some(tls) = &st.tls {
        o.gauge(
            "tern_tls_certificate_expiry_seconds",
            "Seconds until the HTTPS certificate in use expires (negative once it has).",
            tls.seconds_left(),
        );
        o.gauge(
            "tern_tls_cert_not_after_seconds",
            "End of validity (notAfter) of the HTTPS certificate in use, Unix seconds.",
            tls.not_after(),
        );
    }
    let mut r = (StatusCode::OK, o.into_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    r
}

/// Forwards: how many in each state, bytes sent on per stream, Opus → AAC encoders.
fn forwards(o: &mut Exposition, st: &AppState) {
    let fw = &st.forwards;
    let mut f = o.family(
        "tern_forwards",
        "Forwards (streams sent on to other servers) by state.",
        Kind::Gauge,
    );
    for (state, n) in fw.by_state() {
        f.sample(&[("state", &state)], n as u64);
    }
    let mut f = o.family(
        "tern_forward_bytes_total",
        "Bytes forwards sent to their receivers, by stream.",
        Kind::Counter,
    );
    for (key, n) in fw.bytes_by_stream() {
        let (app, stream) = key.split_once('/').unwrap_or((&key, ""));
        f.sample(&[("app", &app), ("stream", &stream)], n);
    }
    o.gauge(
        "tern_aac_encoders",
        "Streams whose Opus audio is being encoded to AAC for their forwards and SRT readers (one encoder per stream, whatever their number).",
        fw.encoders() as u64,
    );
}
