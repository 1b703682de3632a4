//! What the encoder surfaces (RTMP in `rtmp.rs`, SRT in `srt/`) share around their media
//! pipeline ([`tern_rtc::av::AvPipeline`]): the B-frame watch, which turns the transcoder on
//! while the stream has viewers and reports what it finds; and the [`Ledger`] that measures
//! the heap a connection's thread holds for its memory pool (`rtmp_ingest`, `srt_ingest`,
//! `rtsp_ingest`), and the [`Booking`] that keeps it there.

use std::time::{Duration, Instant};

use tern_pool::{CountingAlloc, PoolCounter};
use tern_rtc::av::{AvPipeline, VideoNotice};
use tracing::{info, warn};

use crate::config::TranscodeSetting;
use crate::session::Core;

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
    pub fn tick(&mut self, st: &Core, p: &mut AvPipeline, now: Instant) {
        if !p.has_b_frames() || self.next_check.is_some_and(|t| now < t) {
            return;
        }
        self.next_check = Some(now + Duration::from_secs(1));
        if !st
            .engine
            .stats
            .snapshots
            .viewers(Some(&self.key))
            .is_empty()
        {
            self.last_viewer = Some(now);
        }
        p.set_viewers(self.last_viewer.is_some_and(|t| now - t < TRANSCODE_GRACE));
    }

    /// Logs a notice and puts it in the publisher's snapshot, with a `publisher.warning`.
    pub fn notice(&mut self, st: &Core, p: &AvPipeline, n: &VideoNotice) {
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
        st.engine.stats.snapshots.publisher_video(id, video, reason);
    }
}

/// Heap a `[u8]` of `len` bytes takes in an `Arc` (two counters in front, padded to 8):
/// the packets handed to the engine leave this thread's ledger.
pub fn arc_bytes(len: usize) -> i64 {
    ((2 * std::mem::size_of::<usize>() + len).next_multiple_of(8)) as i64
}

/// What an encoder connection's thread (RTMP's, an SRT publisher's) holds: the thread's net allocations since the connection
/// began, less what it handed to other threads (packets, the publisher slot). The engine
/// frees the packets on its own thread, so without the `skip`s they would count here.
pub struct Ledger {
    last: i64,
    held: i64,
}

impl Ledger {
    /// Starts measuring on this thread, from now.
    pub fn start() -> Self {
        Ledger {
            last: CountingAlloc::thread_net_bytes(),
            held: 0,
        }
    }

    /// `bytes` allocated here since the last mark belong to someone else.
    pub fn skip(&mut self, bytes: i64) {
        self.held -= bytes;
    }

    /// The bytes held now. Allocations between a mark and the next call go uncounted only
    /// if skipped; the channel to the engine is left outside marks on purpose (its blocks
    /// are allocated by senders and freed by the receiver).
    pub fn mark(&mut self) -> usize {
        let now = CountingAlloc::thread_net_bytes();
        self.held += now - self.last;
        self.last = now;
        usize::try_from(self.held).unwrap_or(0)
    }

    /// Restarts the measurement here (after a section that is not ours).
    pub fn resume(&mut self) {
        self.last = CountingAlloc::thread_net_bytes();
    }
}

/// One connection's line in an ingest pool: an item while it lives, with the bytes its
/// [`Ledger`] last measured; both given back when it is dropped.
pub struct Booking {
    pool: &'static PoolCounter,
    bytes: usize,
}

impl Booking {
    /// Books one item, of no bytes yet, in `pool`.
    pub fn open(pool: &'static PoolCounter) -> Self {
        pool.add(1, 0);
        Booking { pool, bytes: 0 }
    }

    /// The item holds `bytes` now.
    pub fn set(&mut self, bytes: usize) {
        self.pool.sub(0, self.bytes);
        self.pool.add(0, bytes);
        self.bytes = bytes;
    }
}

impl Drop for Booking {
    fn drop(&mut self) {
        self.pool.sub(1, self.bytes);
    }
}
