//! A source's state, last error and counters: what its snapshot, its events
//! (`source.changed`, `source.error`) and the `tern_source_*` metrics show. The URL appears
//! only without its credentials.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::clock::unix_ms;
use crate::config::SourceConfig;
use crate::metrics::{Exposition, Kind, Millis};
use crate::snapshot::Snapshots;

/// Where a source is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceState {
    /// Not pulled (on demand, nobody watching).
    Idle,
    /// Connecting to the camera, or waiting for its first keyframe.
    Connecting,
    /// Media flows.
    Live,
    /// The last attempt failed; the next one is due after the backoff.
    Retrying,
}

impl SourceState {
    /// The state as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceState::Idle => "idle",
            SourceState::Connecting => "connecting",
            SourceState::Live => "live",
            SourceState::Retrying => "retrying",
        }
    }

    const ALL: [SourceState; 4] = [
        SourceState::Idle,
        SourceState::Connecting,
        SourceState::Live,
        SourceState::Retrying,
    ];
}

/// Why a session with the camera failed, in a few words (the event's `reason`, the
/// metric's label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The camera refused the credentials (401).
    Auth,
    /// No TCP connection, or no answer in time.
    Unreachable,
    /// No video the engine takes (H264), or no stream at all.
    Unsupported,
    /// Anything else the camera did wrong (an error status, garbage, a dropped connection).
    Camera,
    /// The camera stopped sending media.
    Silent,
}

impl Failure {
    /// The reason as events and metrics spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Failure::Auth => "auth failed",
            Failure::Unreachable => "unreachable",
            Failure::Unsupported => "unsupported codec",
            Failure::Camera => "camera error",
            Failure::Silent => "no media",
        }
    }

    const ALL: [Failure; 5] = [
        Failure::Auth,
        Failure::Unreachable,
        Failure::Unsupported,
        Failure::Camera,
        Failure::Silent,
    ];
}

#[derive(Debug)]
struct Inner {
    state: SourceState,
    last_error: Option<(Failure, String, u64)>,
    video: Option<String>,
    audio: Option<String>,
}

/// One source's state and counters.
#[derive(Debug)]
pub struct SourceStatus {
    key: String,
    url: String,
    on_demand: bool,
    transport: &'static str,
    inner: Mutex<Inner>,
    /// RTSP sessions started (DESCRIBE sent).
    pub connects: AtomicU64,
    /// Failed sessions by [`Failure`] (in `Failure::ALL`'s order).
    failures: [AtomicU64; 5],
    /// Video frames taken.
    pub video_frames: AtomicU64,
    /// Audio frames taken.
    pub audio_frames: AtomicU64,
    /// Media bytes taken (video and audio frames).
    pub bytes: AtomicU64,
    /// Milliseconds from the last wake of an idle source to its first keyframe.
    pub first_frame_ms: AtomicU64,
}

impl SourceStatus {
    /// An idle source.
    pub(crate) fn new(key: &str, cfg: &SourceConfig) -> Self {
        SourceStatus {
            key: key.to_string(),
            url: cfg.shown_url(),
            on_demand: cfg.on_demand,
            transport: cfg.transport.as_str(),
            inner: Mutex::new(Inner {
                state: SourceState::Idle,
                last_error: None,
                video: None,
                audio: None,
            }),
            connects: AtomicU64::new(0),
            failures: Default::default(),
            video_frames: AtomicU64::new(0),
            audio_frames: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            first_frame_ms: AtomicU64::new(0),
        }
    }

    /// The current state.
    pub fn state(&self) -> SourceState {
        self.inner.lock().map_or(SourceState::Idle, |i| i.state)
    }

    /// The last error, as shown.
    pub fn last_error(&self) -> Option<String> {
        let i = self.inner.lock().ok()?;
        i.last_error
            .as_ref()
            .map(|(f, m, _)| format!("{}: {m}", f.as_str()))
    }

    /// Failed sessions for `f`.
    pub fn failures(&self, f: Failure) -> u64 {
        let i = Failure::ALL.iter().position(|x| *x == f).unwrap_or(0);
        self.failures[i].load(Ordering::Relaxed)
    }

    /// The source's snapshot (no credentials in it).
    pub fn json(&self) -> serde_json::Value {
        let Ok(i) = self.inner.lock() else {
            return serde_json::Value::Null;
        };
        let err = i
            .last_error
            .as_ref()
            .map(|(f, m, at)| serde_json::json!({"reason": f.as_str(), "message": m, "at_ms": at}));
        serde_json::json!({
            "stream": self.key,
            "protocol": "rtsp",
            "url": self.url,
            "on_demand": self.on_demand,
            "transport": self.transport,
            "state": i.state.as_str(),
            "last_error": err,
            "video": i.video,
            "audio": i.audio,
        })
    }

    /// Moves to `state`: snapshot and `source.changed` event when it changed.
    pub(crate) fn set(&self, state: SourceState, snaps: &Snapshots) {
        let changed = match self.inner.lock() {
            Ok(mut i) => std::mem::replace(&mut i.state, state) != state,
            Err(_) => false,
        };
        if changed {
            self.publish(snaps, None);
        }
    }

    /// The codecs of the session that went live.
    pub(crate) fn set_codecs(&self, video: Option<String>, audio: Option<String>) {
        if let Ok(mut i) = self.inner.lock() {
            i.video = video;
            i.audio = audio;
        }
    }

    /// A failed session: counted, kept as the last error, told in a `source.error` event
    /// (and the state moves to retrying). `message` must hold no credentials.
    pub(crate) fn failed(&self, f: Failure, message: String, snaps: &Snapshots) {
        if let Some(i) = Failure::ALL.iter().position(|x| *x == f) {
            self.failures[i].fetch_add(1, Ordering::Relaxed);
        }
        if let Ok(mut i) = self.inner.lock() {
            i.last_error = Some((f, message, unix_ms()));
            i.state = SourceState::Retrying;
        }
        self.publish(snaps, Some(f.as_str()));
    }

    /// Builds the snapshot; `error` names the failure for a `source.error` event, else it
    /// is a `source.changed`.
    pub(crate) fn publish(&self, snaps: &Snapshots, error: Option<&'static str>) {
        snaps.source_state(&self.key, self.json(), error);
    }
}

/// `tern_source_*` for `sources`, in their order.
pub(super) fn write_metrics<'a>(
    sources: impl Iterator<Item = &'a SourceStatus> + Clone,
    o: &mut Exposition,
) {
    let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let mut f = o.family(
        "tern_source_state",
        "Camera sources by state (1 for the source's current state).",
        Kind::Gauge,
    );
    for s in sources.clone() {
        let now = s.state();
        for st in SourceState::ALL {
            f.sample(
                &[("stream", &s.key), ("state", &st.as_str())],
                u8::from(st == now),
            );
        }
    }
    let mut f = o.family(
        "tern_source_connects_total",
        "RTSP sessions started with each camera.",
        Kind::Counter,
    );
    for s in sources.clone() {
        f.sample(&[("stream", &s.key)], l(&s.connects));
    }
    let mut f = o.family(
        "tern_source_errors_total",
        "Failed RTSP sessions by reason.",
        Kind::Counter,
    );
    for s in sources.clone() {
        for (why, n) in Failure::ALL.iter().zip(&s.failures) {
            f.sample(&[("stream", &s.key), ("reason", &why.as_str())], l(n));
        }
    }
    let mut f = o.family(
        "tern_source_frames_total",
        "Frames taken from each camera.",
        Kind::Counter,
    );
    for s in sources.clone() {
        for (kind, n) in [("video", &s.video_frames), ("audio", &s.audio_frames)] {
            f.sample(&[("stream", &s.key), ("kind", &kind)], l(n));
        }
    }
    let mut f = o.family(
        "tern_source_bytes_total",
        "Media bytes taken from each camera.",
        Kind::Counter,
    );
    for s in sources.clone() {
        f.sample(&[("stream", &s.key)], l(&s.bytes));
    }
    let mut f = o.family(
        "tern_source_first_frame_seconds",
        "Time from the last wake of an idle source to its first keyframe.",
        Kind::Gauge,
    );
    for s in sources {
        f.sample(&[("stream", &s.key)], Millis(l(&s.first_frame_ms)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SourceTransport;

    #[test]
    fn failures_are_counted_and_shown_without_credentials() {
        let cfg = SourceConfig {
            stream: "door".into(),
            url: "rtsp://admin:hunter2@192.0.2.10/s1".into(),
            on_demand: true,
            transport: SourceTransport::Tcp,
            tls_verify: true,
        };
        let snaps = Snapshots::default();
        let mut events = snaps.subscribe();
        let s = SourceStatus::new("cams/door", &cfg);
        s.set(SourceState::Connecting, &snaps);
        s.set(SourceState::Connecting, &snaps);
        s.failed(Failure::Auth, "401 response to DESCRIBE".into(), &snaps);
        assert_eq!(s.state(), SourceState::Retrying);
        assert_eq!(s.failures(Failure::Auth), 1);
        assert_eq!(
            s.last_error().as_deref(),
            Some("auth failed: 401 response to DESCRIBE")
        );
        // One event per change (the repeated state is none), the failure a source.error.
        let a = events.try_recv().expect("changed");
        let b = events.try_recv().expect("error");
        assert!(events.try_recv().is_err());
        assert_eq!(
            (a.kind.name(), b.kind.name()),
            ("source.changed", "source.error")
        );
        assert_eq!(b.reason, Some("auth failed"));
        let text = b.json();
        assert!(text.contains("rtsp://***@192.0.2.10/s1"), "{text}");
        assert!(
            !text.contains("hunter2") && !text.contains("admin"),
            "{text}"
        );
        let mut m = Exposition::default();
        write_metrics([&s].into_iter(), &mut m);
        let m = m.into_string();
        assert!(m.contains("tern_source_state{stream=\"cams/door\",state=\"retrying\"} 1"));
        assert!(
            m.contains("tern_source_errors_total{stream=\"cams/door\",reason=\"auth failed\"} 1")
        );
        assert!(!m.contains("hunter2"));
    }
}
