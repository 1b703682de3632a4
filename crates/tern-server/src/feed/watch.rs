//! The B-frame watch of a frame publisher's media pipeline
//! ([`tern_rtc::av::AvPipeline`]): it turns the transcoder on while the stream has viewers
//! and reports what it finds.

use std::time::{Duration, Instant};

use tern_rtc::av::{AvPipeline, VideoNotice};
use tracing::{info, warn};

use crate::config::TranscodeSetting;
use crate::media::EngineHandle;

/// How long a B-frame stream keeps being transcoded after its last viewer left (a viewer
/// reloading the page should not restart the transcoder).
const TRANSCODE_GRACE: Duration = Duration::from_secs(5);

/// What the connection's thread knows and says about its publisher's video: B-frames, and
/// whether the transcoder should run (the stream has viewers).
#[derive(Default)]
pub struct VideoWatch {
    /// `app/stream`, once publishing.
    pub key: String,
    /// The app's `transcode`.
    pub mode: TranscodeSetting,
    /// The publisher's id (its snapshot's).
    pub publisher: Option<u64>,
    /// When the stream was last seen with a viewer.
    last_viewer: Option<Instant>,
    next_check: Option<Instant>,
}

impl VideoWatch {
    /// Once a second, for a B-frame stream: tell the publisher whether viewers want it.
    pub fn tick(&mut self, engine: &EngineHandle, p: &mut AvPipeline, now: Instant) {
        if !p.has_b_frames() || self.next_check.is_some_and(|t| now < t) {
            return;
        }
        self.next_check = Some(now + Duration::from_secs(1));
        if !engine.stats.snapshots.viewers(Some(&self.key)).is_empty() {
            self.last_viewer = Some(now);
        }
        p.set_viewers(self.last_viewer.is_some_and(|t| now - t < TRANSCODE_GRACE));
    }

    /// Logs a notice and puts it in the publisher's snapshot, with a `publisher.warning`.
    pub fn notice(&mut self, engine: &EngineHandle, p: &AvPipeline, n: &VideoNotice) {
        let key = &self.key;
        let mode = match self.mode {
            TranscodeSetting::Auto => "auto",
            TranscodeSetting::Never => "never",
        };
        let (reason, transcoding, stats) = match n {
            VideoNotice::BFrames if self.mode == TranscodeSetting::Never => {
                warn!(
                    "publisher of {key} sends B-frames and transcode = \"never\": WebRTC viewers will stutter (turn B-frames off in the encoder, e.g. -bf 0, or set transcode = \"auto\")"
                );
                ("b-frames", false, None)
            }
            VideoNotice::BFrames => {
                warn!(
                    "publisher of {key} sends B-frames: its video is transcoded to Constrained Baseline while it has viewers (transcode = \"auto\"); turn B-frames off in the encoder (-bf 0) to spare the CPU"
                );
                ("b-frames", false, None)
            }
            VideoNotice::TranscodeStarted => {
                info!("{key}: transcoding B-frame video for its viewers");
                ("transcode-started", true, None)
            }
            VideoNotice::TranscodeStopped(s) => {
                info!(
                    "{key}: transcoding stopped (no viewer for {TRANSCODE_GRACE:?}): {} frames in, {} out, {}x{}, latency mean {:?} max {:?}",
                    s.frames_in, s.frames_out, s.width, s.height, s.mean_latency, s.max_latency
                );
                ("transcode-stopped", false, Some(*s))
            }
            VideoNotice::TranscodeFailed(e) => {
                warn!("{key}: {e}; its video passes through as it is");
                ("transcode-failed", false, None)
            }
        };
        let Some(id) = self.publisher else {
            return;
        };
        // Figures for a finished run only (what a running one did so far is in the log).
        let video = serde_json::json!({
            "b_frames": p.has_b_frames(),
            "transcode": mode,
            "transcoding": transcoding,
            "transcoded_frames": stats.map(|s| s.frames_out),
            "transcode_latency_ms": stats.map(|s| s.mean_latency.as_secs_f64() * 1e3),
        });
        engine.stats.snapshots.publisher_video(id, video, reason);
    }
}
