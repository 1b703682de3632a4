//! What a source's thread and its sessions share: the source's entry (configuration,
//! status, whether its thread runs), the thread's job, and the idle rule of on-demand
//! sources.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::status::SourceStatus;
use crate::config::SourceConfig;
use crate::session::Core;

/// One configured source.
pub(super) struct Entry {
    /// `app/stream`.
    pub key: String,
    /// Its configuration.
    pub cfg: SourceConfig,
    /// The TLS client configuration of an `rtsps://` source (`tls.rs`), decided at start.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// How long an on-demand pull outlives the last viewer (the app's `idle_grace_s`).
    pub grace: std::time::Duration,
    /// State, last error, counters.
    pub status: SourceStatus,
    /// Whether its thread runs, and the wakes it has had.
    pub run: Mutex<Run>,
    /// A reload removed or replaced it: its thread stops.
    pub retired: AtomicBool,
}

impl Entry {
    /// Whether `other` (a reload's entry for the same key) pulls the same way.
    pub fn same_as(&self, other: &Entry) -> bool {
        self.cfg == other.cfg && self.grace == other.grace
    }
}

/// Whether a source's thread runs, and how many wakes it has had.
#[derive(Debug, Default)]
pub(super) struct Run {
    pub running: bool,
    pub wakes: u64,
}

/// What a source's thread needs.
pub(super) struct Job {
    pub core: Arc<Core>,
    pub entry: Arc<Entry>,
    pub stop: Arc<AtomicBool>,
}

impl Job {
    /// Whether the thread is to stop: the server stops, or a reload retired its source.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.entry.retired.load(Ordering::Relaxed)
    }
}

/// Whether the source has a viewer: a WebRTC viewer, or LL-HLS packaging for players.
pub(super) fn watched(core: &Core, key: &str) -> bool {
    let stats = &core.engine.stats;
    let hls = core
        .streams
        .get(key)
        .and_then(|i| stats.stream(i.index))
        .is_some_and(|c| c.hls_wanted.load(Ordering::Relaxed));
    hls || !stats.snapshots.viewers(Some(key)).is_empty()
}

/// Tells when an on-demand source has been unwatched for its grace.
pub(super) struct Idle {
    on_demand: bool,
    /// The app's `idle_grace_s`.
    pub(super) grace: Duration,
    since: Option<Instant>,
    wakes: u64,
}

impl Idle {
    pub(super) fn new(job: &Job) -> Self {
        Idle {
            on_demand: job.entry.cfg.on_demand,
            grace: job.entry.grace,
            since: None,
            wakes: job.entry.run.lock().map_or(0, |r| r.wakes),
        }
    }

    /// Whether the pull should end now: unwatched for the grace with no wake since.
    pub(super) fn over(&mut self, job: &Job, now: Instant) -> bool {
        if !self.on_demand {
            return false;
        }
        let wakes = job.entry.run.lock().map_or(0, |r| r.wakes);
        if wakes != self.wakes || watched(&job.core, &job.entry.key) {
            self.wakes = wakes;
            self.since = None;
            return false;
        }
        let since = *self.since.get_or_insert(now);
        now.duration_since(since) >= self.grace
    }

    /// Ends the pull unless a wake came in meanwhile (then the pull goes on): under the
    /// entry's lock, so that a wake either sees the thread running or starts a new one.
    pub(super) fn finish(&mut self, job: &Job) -> bool {
        let Ok(mut run) = job.entry.run.lock() else {
            return true;
        };
        if run.wakes != self.wakes && !job.stopping() {
            self.wakes = run.wakes;
            self.since = None;
            return false;
        }
        run.running = false;
        true
    }
}
