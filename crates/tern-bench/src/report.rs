//! Summaries, per-client details and the HTML report, from client samples.
//!
//! The text keeps OvenRtcTester's lines and spelling first (so existing parsers and eyes
//! work), then adds tern's own lines: true latency, reordering, duplicates, NACK recovery,
//! jitter, connect-time percentiles, failure reasons and CPU per packet.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tern_rtc::client::TrackStats;

use crate::worker::{Sample, State};

/// One summary's figures.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Seconds since the start.
    pub running_secs: f64,
    /// Clients started (signalling begun).
    pub clients: usize,
    /// Clients in signalling.
    pub new: usize,
    /// Clients sending ICE checks.
    pub checking: usize,
    /// Connected clients (ICE done, including those in the DTLS handshake).
    pub connected: usize,
    /// Of `connected`, those still in the DTLS handshake.
    pub handshaking: usize,
    /// Connected clients that received nothing for 5 s.
    pub disconnected: usize,
    /// Failed clients.
    pub failed: usize,
    /// OvenRtcTester's video delay (RTP drift), ms: avg, max, min over clients.
    pub video_delay: Stat,
    /// OvenRtcTester's audio delay (RTP drift), ms.
    pub audio_delay: Stat,
    /// Video frames per second over the interval, over clients.
    pub fps: Stat,
    /// Bits per second over the interval, over clients.
    pub bps: Stat,
    /// Payload bytes received, all clients.
    pub total_bytes: u64,
    /// Distinct RTP packets received, all clients.
    pub total_packets: u64,
    /// Packets never received, all clients.
    pub total_losses: u64,
    /// End-to-end video latency from capture time, ms (per-client mean over the run).
    pub video_latency: Stat,
    /// End-to-end audio latency from capture time, ms.
    pub audio_latency: Stat,
    /// Packets captured before their client connected (a keyframe cache replayed at join),
    /// kept out of the latency figures.
    pub catchup_packets: u64,
    /// Duplicate packets.
    pub duplicates: u64,
    /// Packets arriving after a later one.
    pub reordered: u64,
    /// Packets recovered after a NACK.
    pub recovered: u64,
    /// NACKed sequence numbers (each try).
    pub nacks: u64,
    /// Packets failing SRTP authentication.
    pub srtp_failures: u64,
    /// RTP packets authenticated and decrypted (all of them unless `--verify sample:N`).
    pub verified: u64,
    /// `--verify`: which packets are checked.
    pub verify: crate::args::Verify,
    /// Video jitter, ms.
    pub jitter_ms: Stat,
    /// Datagrams received, all clients (everything, before checks).
    pub datagrams: u64,
    /// Of those, the datagrams that came inside `UDP_GRO` messages of several.
    pub coalesced: u64,
    /// Bench CPU time per received datagram, µs (since the previous summary).
    pub cpu_us_per_packet: Option<f64>,
    /// Bench CPU use over the interval, in cores.
    pub cpu_cores: Option<f64>,
    /// Failures by reason.
    pub failures: BTreeMap<String, usize>,
    /// Clients whose session the server ended with a DTLS close_notify.
    pub closed_by_server: usize,
}

/// Average, maximum and minimum over clients.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stat {
    /// Mean.
    pub avg: f64,
    /// Largest.
    pub max: f64,
    /// Smallest.
    pub min: f64,
    /// Values counted.
    pub n: usize,
}

impl Stat {
    /// Over `values`; all zero when empty.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Stat {
        let mut s = Stat::default();
        let mut sum = 0.0;
        for v in values {
            if s.n == 0 {
                s.max = v;
                s.min = v;
            }
            s.max = s.max.max(v);
            s.min = s.min.min(v);
            sum += v;
            s.n += 1;
        }
        if s.n > 0 {
            s.avg = sum / s.n as f64;
        }
        s
    }

    fn json(&self) -> Value {
        json!({"avg": self.avg, "max": self.max, "min": self.min, "n": self.n})
    }
}

/// Cumulative per-client figures at the previous summary, for interval rates.
#[derive(Debug, Clone, Copy, Default)]
pub struct Prev {
    bytes: u64,
    frames: u64,
    at: Option<Instant>,
}

fn bytes_of(s: &Sample) -> u64 {
    s.video.as_ref().map_or(0, |t| t.bytes) + s.audio.as_ref().map_or(0, |t| t.bytes)
}

fn sum_tracks(s: &Sample, f: impl Fn(&TrackStats) -> u64) -> u64 {
    s.video.as_ref().map_or(0, &f) + s.audio.as_ref().map_or(0, &f)
}

/// Builds a summary. `prev` holds each client's totals at the last summary and is updated.
/// Rates are over the interval since the last summary, or over each client's whole
/// reception when `whole_run` (the final report).
#[allow(clippy::too_many_arguments)]
pub fn summarize(
    samples: &[Sample],
    whole_run: bool,
    prev: &mut Vec<Prev>,
    now: Instant,
    start: Instant,
    started: usize,
    signal_failures: &BTreeMap<String, usize>,
    signal_failed: usize,
    cpu: Option<(f64, u64)>,
) -> Summary {
    let mut s = Summary {
        running_secs: now.duration_since(start).as_secs_f64(),
        clients: started,
        failures: signal_failures.clone(),
        ..Summary::default()
    };
    s.failed = signal_failed;
    s.new = started.saturating_sub(samples.len() + signal_failed);
    let mut fps = Vec::new();
    let mut bps = Vec::new();
    let mut vdelay = Vec::new();
    let mut adelay = Vec::new();
    let mut vlat = Vec::new();
    let mut alat = Vec::new();
    let mut jitter = Vec::new();
    for c in samples {
        match c.state {
            State::Checking => s.checking += 1,
            State::Handshaking => {
                s.connected += 1;
                s.handshaking += 1;
            }
            State::Connected => s.connected += 1,
            State::Disconnected => s.disconnected += 1,
            State::Failed => s.failed += 1,
        }
        if let Some(r) = c.failure {
            *s.failures.entry(r.to_string()).or_default() += 1;
        }
        s.closed_by_server += usize::from(c.closed_by_server);
        if prev.len() <= c.id {
            prev.resize(c.id + 1, Prev::default());
        }
        let p = &mut prev[c.id];
        let bytes = bytes_of(c);
        let frames = c.video.as_ref().map_or(0, |t| t.frames);
        if whole_run {
            // The final report: each client's mean over its whole reception.
            let span = c
                .video
                .as_ref()
                .and_then(|t| Some(t.last_at?.duration_since(t.first_at?).as_secs_f64()));
            if let Some(secs) = span.filter(|&s| s > 0.05) {
                fps.push(frames as f64 / secs);
                bps.push(bytes as f64 * 8.0 / secs);
            }
        } else if matches!(c.state, State::Connected | State::Disconnected) {
            let first = c.video.as_ref().and_then(|t| t.first_at);
            let from = match (p.at, first) {
                (Some(a), _) => Some(a),
                (None, f) => f,
            };
            if let Some(from) = from {
                let secs = now.saturating_duration_since(from).as_secs_f64();
                if secs > 0.05 {
                    fps.push((frames - p.frames) as f64 / secs);
                    bps.push((bytes - p.bytes) as f64 * 8.0 / secs);
                }
            }
        }
        *p = Prev {
            bytes,
            frames,
            at: Some(now),
        };
        if let Some(v) = &c.video {
            vdelay.push(v.drift_ms);
            jitter.push(v.jitter / 90.0);
            if let Some(l) = v.latency_avg() {
                vlat.push(l);
            }
        }
        if let Some(a) = &c.audio {
            adelay.push(a.drift_ms);
            if let Some(l) = a.latency_avg() {
                alat.push(l);
            }
        }
        s.total_bytes += bytes;
        s.total_packets += sum_tracks(c, |t| t.packets);
        s.total_losses += sum_tracks(c, TrackStats::lost);
        s.duplicates += sum_tracks(c, |t| t.duplicates);
        s.reordered += sum_tracks(c, |t| t.reordered);
        s.recovered += sum_tracks(c, |t| t.recovered);
        s.nacks += sum_tracks(c, |t| t.nacks_sent);
        s.srtp_failures += sum_tracks(c, |t| t.bad);
        s.verified += sum_tracks(c, |t| t.verified);
        s.catchup_packets += sum_tracks(c, |t| t.catchup_packets);
        s.datagrams += c.datagrams;
        s.coalesced += c.coalesced;
    }
    s.fps = Stat::of(fps);
    s.bps = Stat::of(bps);
    s.video_delay = Stat::of(vdelay);
    s.audio_delay = Stat::of(adelay);
    s.video_latency = Stat::of(vlat);
    s.audio_latency = Stat::of(alat);
    s.jitter_ms = Stat::of(jitter);
    if let Some((cpu_secs, datagrams)) = cpu
        && datagrams > 0
    {
        s.cpu_us_per_packet = Some(cpu_secs * 1e6 / datagrams as f64);
    }
    s
}

/// Bytes as OvenRtcTester prints them ("11.6 MBytes").
pub fn fmt_bytes(b: f64) -> String {
    const U: [&str; 4] = ["Bytes", "KBytes", "MBytes", "GBytes"];
    let mut v = b;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0} {}", U[i])
    } else {
        format!("{v:.1} {}", U[i])
    }
}

/// Bits per second as OvenRtcTester prints them ("4.1 Mbps", "0bps").
pub fn fmt_bps(b: f64) -> String {
    if b <= 0.0 {
        return "0bps".into();
    }
    const U: [&str; 4] = ["bps", "Kbps", "Mbps", "Gbps"];
    let mut v = b;
    let mut i = 0;
    while v >= 1000.0 && i < U.len() - 1 {
        v /= 1000.0;
        i += 1;
    }
    format!("{v:.1} {}", U[i])
}

impl Summary {
    /// The `<Summary>` block: OvenRtcTester's lines, then tern's.
    pub fn text(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "<Summary>");
        if let crate::args::Verify::Sample(n) = self.verify {
            let _ = writeln!(
                o,
                "Verify : sample:{n} (1 in {n} RTP packets authenticated and decrypted: {} of {}; \
                 loss, order and duplicates from every header; SRTP failures and keyframes from \
                 the checked packets only)",
                self.verified, self.total_packets
            );
        }
        let _ = writeln!(o, "Running time : {}s", self.running_secs as u64);
        let _ = writeln!(o, "Number of clients : {}", self.clients);
        let _ = writeln!(
            o,
            "ICE Connection State : New({}), Checking({}) Connected({}) Completed(0) Disconnected({}) Failed({}) Closed(0)",
            self.new, self.checking, self.connected, self.disconnected, self.failed
        );
        for (name, st) in [("Video", &self.video_delay), ("Audio", &self.audio_delay)] {
            let _ = writeln!(
                o,
                "Avg {name} Delay({:.2} ms) Max {name} Delay({:.2} ms) Min {name} Delay({:.2} ms)",
                st.avg, st.max, st.min
            );
        }
        let _ = writeln!(
            o,
            "Avg FPS({:.2}) Max FPS({:.2}) Min FPS({:.2})",
            self.fps.avg, self.fps.max, self.fps.min
        );
        let _ = writeln!(
            o,
            "Avg BPS({}) Max BPS({}) Min BPS({})",
            fmt_bps(self.bps.avg),
            fmt_bps(self.bps.max),
            fmt_bps(self.bps.min)
        );
        let n = self.clients.max(1) as f64;
        let _ = writeln!(
            o,
            "Total Bytes({}) Avg Bytes({})",
            fmt_bytes(self.total_bytes as f64),
            fmt_bytes(self.total_bytes as f64 / n)
        );
        let _ = writeln!(
            o,
            "Total Packets({}) Avg Packets({})",
            self.total_packets,
            self.total_packets / self.clients.max(1) as u64
        );
        let _ = writeln!(
            o,
            "Total Packet Losses({}) Avg Packet Losses({})",
            self.total_losses,
            self.total_losses / self.clients.max(1) as u64
        );
        // tern's lines.
        for (name, st) in [
            ("Video", &self.video_latency),
            ("Audio", &self.audio_latency),
        ] {
            let _ = writeln!(
                o,
                "Avg {name} Latency({:.2} ms) Max {name} Latency({:.2} ms) Min {name} Latency({:.2} ms)",
                st.avg, st.max, st.min
            );
        }
        let _ = writeln!(
            o,
            "Join catch-up packets, captured before their viewer connected and not in the latency({})",
            self.catchup_packets
        );
        let _ = writeln!(
            o,
            "Duplicates({}) Reordered({}) Recovered by NACK({}) NACKs sent({}) SRTP auth failures({})",
            self.duplicates, self.reordered, self.recovered, self.nacks, self.srtp_failures
        );
        let _ = writeln!(
            o,
            "Avg Video Jitter({:.2} ms) Max Video Jitter({:.2} ms)",
            self.jitter_ms.avg, self.jitter_ms.max
        );
        if let Some(us) = self.cpu_us_per_packet {
            let _ = writeln!(
                o,
                "Bench CPU per received packet({us:.2} us) Datagrams received({}) Coalesced by UDP_GRO({})",
                self.datagrams, self.coalesced
            );
        }
        if !self.failures.is_empty() {
            let list: Vec<String> = self
                .failures
                .iter()
                .map(|(r, c)| format!("{r}({c})"))
                .collect();
            let _ = writeln!(o, "Failures : {}", list.join(" "));
        }
        if self.closed_by_server > 0 {
            let _ = writeln!(
                o,
                "Closed by server (DTLS close_notify) : {}",
                self.closed_by_server
            );
        }
        o
    }

    /// The summary as one JSON object.
    pub fn json(&self) -> Value {
        json!({
            "type": "summary",
            "running_secs": self.running_secs,
            "clients": self.clients,
            "states": {
                "new": self.new, "checking": self.checking, "connected": self.connected,
                "handshaking": self.handshaking, "disconnected": self.disconnected,
                "failed": self.failed,
            },
            "video_delay_ms": self.video_delay.json(),
            "audio_delay_ms": self.audio_delay.json(),
            "fps": self.fps.json(),
            "bps": self.bps.json(),
            "total_bytes": self.total_bytes,
            "total_packets": self.total_packets,
            "total_losses": self.total_losses,
            "video_latency_ms": self.video_latency.json(),
            "audio_latency_ms": self.audio_latency.json(),
            "catchup_packets": self.catchup_packets,
            "duplicates": self.duplicates,
            "reordered": self.reordered,
            "recovered": self.recovered,
            "nacks": self.nacks,
            "srtp_failures": self.srtp_failures,
            "verify": self.verify.to_string(),
            "verified": self.verified,
            "video_jitter_ms": self.jitter_ms.json(),
            "datagrams": self.datagrams,
            "coalesced": self.coalesced,
            "cpu_us_per_packet": self.cpu_us_per_packet,
            "failures": self.failures,
            "closed_by_server": self.closed_by_server,
        })
    }
}

fn ms(d: Option<Duration>) -> Option<f64> {
    d.map(|d| d.as_secs_f64() * 1000.0)
}

fn state_name(s: State) -> &'static str {
    match s {
        State::Checking => "checking",
        State::Handshaking => "handshaking",
        State::Connected => "connected",
        State::Disconnected => "disconnected",
        State::Failed => "failed",
    }
}

/// One client's `[client_N]` detail block (OvenRtcTester's lines, then tern's).
pub fn detail_text(c: &Sample, now: Instant) -> String {
    let mut o = String::new();
    let run = now.duration_since(c.started).as_secs();
    let packets = sum_tracks(c, |t| t.packets);
    let lost = sum_tracks(c, TrackStats::lost);
    let bytes = bytes_of(c);
    let _ = writeln!(o, "[client_{}]", c.id);
    let _ = writeln!(
        o,
        "\trunning_time({run}s) connection_state({}) total_packets({packets}) packet_loss({lost})",
        state_name(c.state)
    );
    let vd = c.video.as_ref().map_or(0.0, |t| t.drift_ms);
    let ad = c.audio.as_ref().map_or(0.0, |t| t.drift_ms);
    let _ = writeln!(
        o,
        "\tlast_video_delay ({vd:.1} ms) last_audio_delay ({ad:.1} ms)"
    );
    let secs = c
        .video
        .as_ref()
        .and_then(|t| Some(t.last_at?.duration_since(t.first_at?).as_secs_f64()))
        .unwrap_or(0.0);
    let avg_bps = if secs > 0.0 {
        bytes as f64 * 8.0 / secs
    } else {
        0.0
    };
    let _ = writeln!(
        o,
        "\ttotal_bytes({}) avg_bps({}) min_bps({}) max_bps({})",
        fmt_bytes(bytes as f64),
        fmt_bps(avg_bps),
        fmt_bps(c.bps.min),
        fmt_bps(c.bps.max)
    );
    let frames = c.video.as_ref().map_or(0, |t| t.frames);
    let avg_fps = if secs > 0.0 {
        frames as f64 / secs
    } else {
        0.0
    };
    let _ = writeln!(
        o,
        "\tvideo_codec({}) total_video_frames({frames}) avg_fps({avg_fps:.2}) min_fps({:.2}) max_fps({:.2})",
        c.video_codec, c.fps.min, c.fps.max
    );
    let lat = |t: &Option<TrackStats>| {
        t.as_ref()
            .and_then(|t| t.latency_avg().map(|a| (a, t.latency_last)))
    };
    let (vl, vll) = lat(&c.video).unwrap_or_default();
    let (al, all) = lat(&c.audio).unwrap_or_default();
    let _ = writeln!(
        o,
        "\tavg_video_latency({vl:.1} ms) last_video_latency({vll:.1} ms) avg_audio_latency({al:.1} ms) last_audio_latency({all:.1} ms)"
    );
    let _ = writeln!(
        o,
        "\tduplicates({}) reordered({}) recovered({}) nacks({}) srtp_failures({}) keyframes({})",
        sum_tracks(c, |t| t.duplicates),
        sum_tracks(c, |t| t.reordered),
        sum_tracks(c, |t| t.recovered),
        sum_tracks(c, |t| t.nacks_sent),
        sum_tracks(c, |t| t.bad),
        c.video.as_ref().map_or(0, |t| t.keyframes),
    );
    let f = |d: Option<f64>| d.map_or("-".to_string(), |v| format!("{v:.1} ms"));
    let _ = writeln!(
        o,
        "\tsignalling({}) ice({}) dtls({}) first_frame({})",
        f(ms(Some(c.signalling))),
        f(ms(c.times.ice)),
        f(ms(c.times.dtls)),
        f(ms(c.times.first_frame)),
    );
    if let Some(r) = c.failure {
        let _ = writeln!(o, "\tfailure({r})");
    }
    o
}

/// One client's figures as a JSON object; `ended` is when the run stopped its viewers, so
/// that a freeze still going on then counts in `max_gap_ms`.
pub fn detail_json(c: &Sample, now: Instant, ended: Instant) -> Value {
    let track = |t: &Option<TrackStats>| {
        t.as_ref().map(|t| {
            let trailing = t
                .last_at
                .map_or(Duration::ZERO, |l| ended.saturating_duration_since(l));
            json!({
                "ssrc": t.ssrc, "packets": t.packets, "bytes": t.bytes, "lost": t.lost(),
                "expected": t.expected(), "duplicates": t.duplicates, "reordered": t.reordered,
                "recovered": t.recovered, "nacks": t.nacks_sent, "srtp_failures": t.bad,
                "frames": t.frames, "keyframes": t.keyframes,
                "jitter_rtp": t.jitter, "drift_ms": t.drift_ms,
                "latency_ms": t.latency_avg().map(|a| json!({
                    "avg": a, "min": t.latency_min, "max": t.latency_max,
                    "last": t.latency_last, "n": t.latency_n,
                })),
                "catchup_packets": t.catchup_packets,
                "max_gap_ms": t.max_gap.max(trailing).as_secs_f64() * 1000.0,
            })
        })
    };
    json!({
        "type": "client",
        "id": c.id,
        "name": format!("client_{}", c.id),
        "state": state_name(c.state),
        "failure": c.failure,
        "running_secs": now.duration_since(c.started).as_secs_f64(),
        "signalling_ms": ms(Some(c.signalling)),
        "ice_ms": ms(c.times.ice),
        "dtls_ms": ms(c.times.dtls),
        "first_packet_ms": ms(c.times.first_packet),
        "first_frame_ms": ms(c.times.first_frame),
        "bps": {"min": c.bps.min, "max": c.bps.max},
        "fps": {"min": c.fps.min, "max": c.fps.max},
        "datagrams": c.datagrams,
        "dropped": c.dropped,
        "video_codec": c.video_codec.sdp_name(),
        "video": track(&c.video),
        "audio": track(&c.audio),
    })
}

/// Percentile (nearest rank) of a sorted slice.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Connect-time percentiles: signalling, ICE, DTLS (all from client creation except
/// signalling), first frame.
pub fn connect_text(samples: &[Sample]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "<Connect times> (ms; ICE, DTLS and first frame counted from the answer)"
    );
    type Pick = fn(&Sample) -> Option<f64>;
    let rows: [(&str, Pick); 4] = [
        ("signalling", |s| ms(Some(s.signalling))),
        ("ice", |s| ms(s.times.ice)),
        ("dtls", |s| ms(s.times.dtls)),
        ("first_frame", |s| ms(s.times.first_frame)),
    ];
    for (name, f) in rows {
        let mut v: Vec<f64> = samples.iter().filter_map(f).collect();
        v.sort_by(f64::total_cmp);
        let p = |q| percentile(&v, q).map_or("-".into(), |x| format!("{x:.1}"));
        let _ = writeln!(
            o,
            "{name:<12} n({}) p50({}) p95({}) p99({}) max({})",
            v.len(),
            p(50.0),
            p(95.0),
            p(99.0),
            p(100.0)
        );
    }
    o
}

/// A point of the report's time series.
#[derive(Debug, Clone, Copy)]
pub struct Point {
    /// Seconds since the start.
    pub t: f64,
    /// Connected clients.
    pub connected: f64,
    /// Mean fps.
    pub fps: f64,
    /// Mean bitrate, kbps.
    pub kbps: f64,
    /// Mean video latency, ms.
    pub latency: f64,
    /// Total losses.
    pub losses: f64,
}

impl Point {
    /// From a summary.
    pub fn of(s: &Summary) -> Point {
        Point {
            t: s.running_secs,
            connected: s.connected as f64,
            fps: s.fps.avg,
            kbps: s.bps.avg / 1000.0,
            latency: s.video_latency.avg,
            losses: s.total_losses as f64,
        }
    }
}

fn svg_plot(title: &str, xlabel: &str, series: &[(f64, f64)]) -> String {
    let (w, h, m) = (560.0, 220.0, 40.0);
    let xmax = series.iter().map(|p| p.0).fold(0.0_f64, f64::max).max(1e-9);
    let ymax = series.iter().map(|p| p.1).fold(0.0_f64, f64::max).max(1e-9) * 1.1;
    let pts: Vec<String> = series
        .iter()
        .map(|(x, y)| {
            format!(
                "{:.1},{:.1}",
                m + x / xmax * (w - 2.0 * m),
                h - m - y / ymax * (h - 2.0 * m)
            )
        })
        .collect();
    format!(
        r##"<figure><svg width="{w}" height="{h}" viewBox="0 0 {w} {h}" xmlns="http://www.w3.org/2000/svg">
<rect x="{m}" y="{m}" width="{iw}" height="{ih}" fill="none" stroke="#999"/>
<polyline fill="none" stroke="#2a6" stroke-width="2" points="{pts}"/>
<text x="{m}" y="{ty}" font-size="12">{title}</text>
<text x="{m}" y="{by}" font-size="11">0</text><text x="{xr}" y="{by}" font-size="11" text-anchor="end">{xmax:.1} {xlabel}</text>
<text x="4" y="{ym}" font-size="11">{ymax:.1}</text>
</svg></figure>"##,
        iw = w - 2.0 * m,
        ih = h - 2.0 * m,
        pts = pts.join(" "),
        ty = m - 8.0,
        by = h - m + 14.0,
        xr = w - m,
        ym = m + 4.0,
    )
}

fn cdf(values: &mut [f64]) -> Vec<(f64, f64)> {
    values.sort_by(f64::total_cmp);
    let n = values.len() as f64;
    values
        .iter()
        .enumerate()
        .map(|(i, v)| (*v, (i + 1) as f64 / n))
        .collect()
}

fn cdf_plot(title: &str, values: &mut [f64]) -> String {
    // x is the value, y the fraction: swap axes into (x, y) for the plotter.
    let c = cdf(values);
    svg_plot(title, "ms", &c)
}

/// The HTML report: plots over time and CDFs of connect time and latency.
pub fn html(points: &[Point], samples: &[Sample], title: &str) -> String {
    let series =
        |f: fn(&Point) -> f64| -> Vec<(f64, f64)> { points.iter().map(|p| (p.t, f(p))).collect() };
    let mut connect: Vec<f64> = samples
        .iter()
        .filter_map(|s| Some(s.signalling.as_secs_f64() * 1000.0 + ms(s.times.dtls)?))
        .collect();
    let mut latency: Vec<f64> = samples
        .iter()
        .filter_map(|s| s.video.as_ref()?.latency_avg())
        .collect();
    let mut o = String::new();
    let _ = write!(
        o,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>tern bench: {title}</title>\
         <style>body{{font-family:sans-serif;margin:2em}}figure{{display:inline-block;margin:0.5em}}</style>\
         </head><body><h1>tern bench</h1><p>{title}</p><h2>Over time</h2>"
    );
    o.push_str(&svg_plot(
        "connected clients",
        "s",
        &series(|p| p.connected),
    ));
    o.push_str(&svg_plot("mean fps", "s", &series(|p| p.fps)));
    o.push_str(&svg_plot("mean bitrate (kbps)", "s", &series(|p| p.kbps)));
    o.push_str(&svg_plot(
        "mean video latency (ms)",
        "s",
        &series(|p| p.latency),
    ));
    o.push_str(&svg_plot(
        "packets lost (total)",
        "s",
        &series(|p| p.losses),
    ));
    o.push_str("<h2>Distributions</h2>");
    o.push_str(&cdf_plot(
        "CDF of connect time (signalling + ICE + DTLS)",
        &mut connect,
    ));
    o.push_str(&cdf_plot(
        "CDF of per-client mean video latency",
        &mut latency,
    ));
    o.push_str("</body></html>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `<Summary>` block opens with OvenRtcTester's ten lines in its order (the shape of
    /// its output on OvenMediaEngine's tuning page), so tools that read its output read ours;
    /// tern's own lines come after them.
    #[test]
    fn summary_opens_with_ovenrtctesters_lines_in_order() {
        let s = Summary {
            running_secs: 5.0,
            clients: 5,
            connected: 5,
            total_bytes: 12_163_482,
            total_packets: 13_897,
            ..Summary::default()
        };
        let text = s.text();
        let lines: Vec<&str> = text.lines().collect();
        let prefixes = [
            "<Summary>",
            "Running time : 5s",
            "Number of clients : 5",
            "ICE Connection State : New(0), Checking(0) Connected(5) Completed(0) Disconnected(0) Failed(0) Closed(0)",
            "Avg Video Delay(",
            "Avg Audio Delay(",
            "Avg FPS(",
            "Avg BPS(",
            "Total Bytes(11.6 MBytes) Avg Bytes(",
            "Total Packets(13897) Avg Packets(2779)",
            "Total Packet Losses(0) Avg Packet Losses(0)",
        ];
        for (i, p) in prefixes.iter().enumerate() {
            assert!(
                lines.get(i).is_some_and(|l| l.starts_with(p)),
                "line {i}: want {p:?}, got {:?}\n{text}",
                lines.get(i)
            );
        }
    }

    #[test]
    fn units_print_like_ovenrtctester() {
        assert_eq!(fmt_bps(0.0), "0bps");
        assert_eq!(fmt_bps(4_100_000.0), "4.1 Mbps");
        assert_eq!(fmt_bytes(12_163_482.0), "11.6 MBytes");
        assert_eq!(fmt_bytes(100.0), "100 Bytes");
    }

    #[test]
    fn stats_and_percentiles() {
        let s = Stat::of([3.0, 1.0, 2.0]);
        assert_eq!((s.avg, s.max, s.min, s.n), (2.0, 3.0, 1.0, 3));
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 50.0), Some(2.0));
        assert_eq!(percentile(&v, 100.0), Some(4.0));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
