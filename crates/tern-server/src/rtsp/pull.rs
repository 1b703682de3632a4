//! One source's thread (`RtspPull`): sessions with the camera one after the other, with a
//! backoff of 1 s doubling to 30 s between failed ones (reset once a session went live),
//! until the source is idle (on demand: no viewer for the app's `idle_grace_s`) or the
//! server stops.
//!
//! The thread runs a current-thread tokio runtime of its own for `retina` (its sessions are
//! async); it blocks only on the engine's bounded queue, as an RTMP connection's thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::Entry;
use super::camera::{self, End};
use super::status::SourceState;
use crate::session::Core;

/// The first wait after a failed session.
pub(super) const BACKOFF_MIN: Duration = Duration::from_secs(1);
/// The longest wait between two sessions.
pub(super) const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// What a source's thread needs.
pub(super) struct Job {
    pub core: Arc<Core>,
    pub entry: Arc<Entry>,
    pub stop: Arc<AtomicBool>,
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
    grace: Duration,
    since: Option<Instant>,
    wakes: u64,
}

impl Idle {
    fn new(job: &Job) -> Self {
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
    fn finish(&mut self, job: &Job) -> bool {
        let Ok(mut run) = job.entry.run.lock() else {
            return true;
        };
        if run.wakes != self.wakes && !job.stop.load(Ordering::Relaxed) {
            self.wakes = run.wakes;
            self.since = None;
            return false;
        }
        run.running = false;
        true
    }
}

/// The thread's body.
pub(super) fn run(job: Job) {
    let key = job.entry.key.clone();
    let snaps = &job.core.engine.stats.snapshots;
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            warn!("rtsp {key}: cannot start its runtime: {e}");
            if let Ok(mut r) = job.entry.run.lock() {
                r.running = false;
            }
            return;
        }
    };
    let mut idle = Idle::new(&job);
    let mut backoff = BACKOFF_MIN;
    let woke = Instant::now();
    let mut first = true;
    info!("rtsp {key}: pulling {}", job.entry.cfg.shown_url());
    loop {
        if job.stop.load(Ordering::Relaxed) {
            break;
        }
        if idle.over(&job, Instant::now()) {
            if idle.finish(&job) {
                job.entry.status.set(SourceState::Idle, snaps);
                info!("rtsp {key}: no viewer for {:?}: pull stopped", idle.grace);
                return;
            }
            continue;
        }
        job.entry.status.set(SourceState::Connecting, snaps);
        let t0 = if first { woke } else { Instant::now() };
        first = false;
        match rt.block_on(camera::session(&job, &mut idle, t0)) {
            End::Stop => break,
            // The loop's next look at `idle` ends the pull (or a wake keeps it).
            End::Idle => continue,
            End::Failed {
                went_live,
                failure,
                message,
            } => {
                if went_live {
                    backoff = BACKOFF_MIN;
                }
                warn!(
                    "rtsp {key}: {}: {message}; retrying in {backoff:?}",
                    failure.as_str()
                );
                job.entry.status.failed(failure, message, snaps);
                if !sleep(&job, &mut idle, backoff) {
                    continue;
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
    idle.finish(&job);
    job.entry.status.set(SourceState::Idle, snaps);
    info!("rtsp {key}: pull stopped");
}

/// Waits `d` unless the server stops or the source goes idle; whether it waited it all.
fn sleep(job: &Job, idle: &mut Idle, d: Duration) -> bool {
    let until = Instant::now() + d;
    loop {
        let now = Instant::now();
        if now >= until {
            return true;
        }
        if job.stop.load(Ordering::Relaxed) || idle.over(job, now) {
            return false;
        }
        std::thread::sleep((until - now).min(Duration::from_millis(50)));
    }
}
