//! One source's thread (`RtspPull`): sessions with the camera one after the other, with a
//! backoff of 1 s doubling to 30 s between failed ones (reset once a session went live),
//! until the source is idle (on demand: no viewer for the app's `idle_grace_s`) or the
//! server stops.
//!
//! The thread runs a current-thread tokio runtime of its own for `retina` (its sessions are
//! async); it blocks only on the engine's bounded queue, as an RTMP connection's thread.

use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::camera::{self, End};
use super::entry::{Idle, Job};
use super::status::SourceState;

/// The first wait after a failed session.
pub(super) const BACKOFF_MIN: Duration = Duration::from_secs(1);
/// The longest wait between two sessions.
pub(super) const BACKOFF_MAX: Duration = Duration::from_secs(30);

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
        if job.stopping() {
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
        if job.stopping() || idle.over(job, now) {
            return false;
        }
        std::thread::sleep((until - now).min(Duration::from_millis(50)));
    }
}
