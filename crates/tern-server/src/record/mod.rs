//! Recording streams to fragmented MP4 files (issue 38).
//!
//! A recording is a [`Packager`] (the LL-HLS one, configured with `record.part_s` parts and
//! `record.segment_s` segments) whose parts are taken out as they complete
//! ([`Packager::take_parts`]) and handed to the `RecordWriter` thread ([`writer`]), which
//! appends them to the file of the segment they belong to. The packaging is fed as LL-HLS
//! is, through the media tap ([`crate::tap`]) of which [`Recorder`] is a subscriber while
//! [`crate::media::StreamCounters::record_wanted`] is set: frames as the encoder sent them
//! from RTMP, SRT and RTSP-H264 publishers (H264 with its B-frames and AAC, untouched),
//! ring packets of every other stream, depacketized by the stream's
//! [`tern_rtc::package::Feed`]. It stores the codecs of
//! the codecs table ([`tern_rtc::codecs`]) (and Opus and AAC), as LL-HLS does.
//!
//! The media path never waits on a recording: parts queued for the writer are booked in
//! the `recordings` memory pool and bounded by [`MAX_QUEUED_BYTES`]; a recording whose parts
//! would pass it stops (`recording.stopped`, reason `writer behind`), as one whose file
//! cannot be written does (reason `write error`, the error in the snapshot). Recordings
//! start through the API or, with `record.enabled`, when a stream gets a publisher
//! ([`Recorder::housekeep`]), and stop through the API or when the stream has neither a
//! publisher nor media.
//!
//! `files.rs` holds the path template, the listing and the `delete_after_s` sweep.

pub mod files;
mod writer;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::Sender;
use tern_pool::PoolCounter;
use tern_rtc::av::Sample;
use tern_rtc::hls::{AudioConfig, HlsConfig, Packager, TakenPart, VideoConfig};
use tern_rtc::package::{Feed, Unit};
use tokio::sync::broadcast;
use tracing::info;

use crate::clock::unix_ms;
use crate::config::{AppConfig, RecordConfig};
use crate::directory::Directory;
use crate::media::{EngineStats, TapPacket};
use crate::snapshot::EventKind;
use crate::tap::Subscriber;
pub use writer::WriterCounters;
use writer::{Job, Writer};

/// Bytes of parts queued for the writer, all recordings together: 64 MiB is over a second
/// of 100 streams at 4 Mbit/s. A disk that falls further behind stops recordings rather
/// than grow memory.
pub const MAX_QUEUED_BYTES: u64 = 64 << 20;
/// Jobs the writer's queue holds (a part a second per recording, and starts and stops).
const JOB_QUEUE: usize = 4096;

/// Why a recording could not start.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StartError {
    /// A recording with that id runs on the stream.
    #[error("recording {0} exists")]
    Exists(String),
    /// The writer thread is gone (shutting down).
    #[error("the recorder is stopped")]
    Stopped,
    /// The stream's video codec is not packaged ([`crate::tap::refusal`]).
    #[error("{0}")]
    Codec(String),
}

/// One running recording of a stream.
struct Active {
    rec: u64,
    id: String,
    /// Started by `record.enabled` (stopped when the stream ends), not the API.
    auto: bool,
    packager: Packager,
    failed: Arc<AtomicBool>,
}

/// A stream's recordings and what they share: the feed of its media and its last codec
/// configurations (for a recording that starts mid-stream).
#[derive(Default)]
struct Slot {
    recs: Vec<Active>,
    feed: Feed,
    video_cfg: Option<VideoConfig>,
    audio_cfg: Option<AudioConfig>,
    parts: Vec<TakenPart>,
    /// When a keyframe was last asked of the publisher for this slot's recordings.
    keyframe_asked: Option<Instant>,
    /// Video frames of the stream's ring held until its audio is known (see
    /// [`HOLD_TICKS`]), with their wall-clock ms.
    held: Vec<(Unit<'static>, u64)>,
    /// The `record.enabled` recording failed or overran: not restarted until the stream
    /// ends (a full disk would otherwise start one, and fail it, every second).
    auto_failed: bool,
}

/// Every stream's recordings, and the writer they feed.
pub struct Recorder {
    slots: Vec<Mutex<Slot>>,
    stats: Arc<EngineStats>,
    /// The apps in force: replaced by a reload ([`Recorder::set_apps`]).
    apps: std::sync::RwLock<Arc<[AppConfig]>>,
    tx: Mutex<Option<Sender<Job>>>,
    rx: Mutex<Option<crossbeam_channel::Receiver<Job>>>,
    counter: PoolCounter,
    queued: Arc<AtomicU64>,
    serial: AtomicU64,
    open: Arc<Mutex<Vec<PathBuf>>>,
    /// Writer figures (bytes, parts, late parts, files, failures).
    pub counters: Arc<WriterCounters>,
    /// Recordings stopped because the writer was behind.
    pub overruns: AtomicU64,
    /// Asks stream `i`'s publisher for a keyframe (a WebRTC publisher sends one on PLI
    /// only): a recording starts, or restarts after a codec configuration change, at one.
    request_keyframe: Box<dyn Fn(usize) + Send + Sync>,
}

/// A WebRTC publisher's first audio packet often comes a moment after its first video
/// frame; an audio track known only then would restart the file's timeline at the next
/// keyframe, which a WebRTC encoder sends only when asked. So until audio is seen, video
/// frames are held, for at most this long (90 kHz: one second), then released (the stream
/// has no audio, or it comes later and restarts the timeline after all).
const HOLD_TICKS: i64 = 90_000;
/// Bytes of video held at most (a second of 30 Mbit/s).
const HOLD_BYTES: usize = 4 << 20;

/// Keyframe requests for one stream's recordings, at most this often.
const KEYFRAME_REQUEST_EVERY: Duration = Duration::from_millis(500);

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("streams", &self.slots.len())
            .field("queued", &self.queued.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// A recorder for `streams` engine streams and the configured apps.
    pub fn new(
        apps: &[AppConfig],
        streams: usize,
        stats: Arc<EngineStats>,
        request_keyframe: Box<dyn Fn(usize) + Send + Sync>,
    ) -> Recorder {
        let (tx, rx) = crossbeam_channel::bounded(JOB_QUEUE);
        Recorder {
            slots: (0..streams).map(|_| Mutex::new(Slot::default())).collect(),
            stats,
            apps: std::sync::RwLock::new(apps.into()),
            tx: Mutex::new(Some(tx)),
            rx: Mutex::new(Some(rx)),
            counter: PoolCounter::new("recordings", 0),
            queued: Arc::new(AtomicU64::new(0)),
            serial: AtomicU64::new(1),
            open: Arc::new(Mutex::new(Vec::new())),
            counters: Arc::new(WriterCounters::default()),
            overruns: AtomicU64::new(0),
            request_keyframe,
        }
    }

    /// Asks for a keyframe for stream `stream` unless one was asked for lately.
    fn ask_keyframe(&self, stream: usize, slot: &mut Slot) {
        let now = Instant::now();
        if slot
            .keyframe_asked
            .is_some_and(|t| now.saturating_duration_since(t) < KEYFRAME_REQUEST_EVERY)
        {
            return;
        }
        slot.keyframe_asked = Some(now);
        (self.request_keyframe)(stream);
    }

    /// Starts the `RecordWriter` thread (once), its `on_segment_url` calls going out through
    /// `outbound`; it ends after [`Recorder::shutdown`].
    pub fn spawn(
        &self,
        outbound: &crate::outbound::Outbound,
    ) -> std::io::Result<Option<std::thread::JoinHandle<()>>> {
        let Some(rx) = self.rx.lock().ok().and_then(|mut r| r.take()) else {
            return Ok(None);
        };
        let w = Writer::new(
            rx,
            self.counter.clone(),
            self.queued.clone(),
            self.stats.clone(),
            self.counters.clone(),
            self.open.clone(),
            outbound.clone(),
        )?;
        std::thread::Builder::new()
            .name("RecordWriter".into())
            .spawn(move || w.run())
            .map(Some)
    }

    fn app(&self, name: &str) -> Option<AppConfig> {
        self.apps().iter().find(|a| a.name == name).cloned()
    }

    /// The configured apps (for listings).
    pub fn apps(&self) -> Arc<[AppConfig]> {
        self.apps.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A reload's apps: recordings started from now on take their `[app.record]`; running
    /// ones keep theirs until they end, and a stream whose app no longer records
    /// (`record.enabled`) stops at the next housekeeping tick.
    pub fn set_apps(&self, apps: &[AppConfig]) {
        *self.apps.write().unwrap_or_else(|e| e.into_inner()) = apps.into();
    }

    /// Paths being written now.
    pub fn open_files(&self) -> Vec<PathBuf> {
        self.open.lock().map(|o| o.clone()).unwrap_or_default()
    }

    /// Bytes of parts waiting for the writer.
    pub fn queued_bytes(&self) -> u64 {
        self.queued.load(Ordering::Relaxed)
    }

    /// Recordings running, all streams.
    pub fn active(&self) -> usize {
        self.slots
            .iter()
            .map(|s| s.lock().map_or(0, |s| s.recs.len()))
            .sum()
    }

    /// The ids of stream `stream`'s recordings.
    pub fn ids(&self, stream: usize) -> Vec<String> {
        self.slots.get(stream).map_or(Vec::new(), |s| {
            s.lock()
                .map(|s| s.recs.iter().map(|r| r.id.clone()).collect())
                .unwrap_or_default()
        })
    }

    fn send(&self, job: Job) -> bool {
        let Ok(tx) = self.tx.lock() else { return false };
        tx.as_ref()
            .is_some_and(|tx| tx.send_timeout(job, Duration::from_millis(200)).is_ok())
    }

    fn set_wanted(&self, stream: usize, slot: &Slot) {
        if let Some(c) = self.stats.stream(stream) {
            c.record_wanted
                .store(!slot.recs.is_empty(), Ordering::Relaxed);
        }
    }

    /// Starts recording `id` of stream `stream` (`key` is its `app/stream`). `auto`: by
    /// `record.enabled` rather than the API.
    pub fn start(&self, stream: usize, key: &str, id: &str, auto: bool) -> Result<(), StartError> {
        let (app, name) = key.split_once('/').unwrap_or((key, ""));
        let cfg = self.app(app).map(|a| a.record.clone()).unwrap_or_default();
        let codec = self.stats.video(stream).codec;
        if let Some(why) = crate::tap::refusal(key, codec) {
            return Err(StartError::Codec(why));
        }
        let Some(slot) = self.slots.get(stream) else {
            return Err(StartError::Stopped);
        };
        let Ok(mut s) = slot.lock() else {
            return Err(StartError::Stopped);
        };
        if s.recs.iter().any(|r| r.id == id) {
            return Err(StartError::Exists(id.to_string()));
        }
        let rec = self.serial.fetch_add(1, Ordering::Relaxed);
        let failed = Arc::new(AtomicBool::new(false));
        let started = self.send(Job::Start {
            rec,
            id: id.to_string(),
            app: app.to_string(),
            stream: name.to_string(),
            cfg: cfg.clone(),
            failed: failed.clone(),
        });
        if !started {
            return Err(StartError::Stopped);
        }
        let mut packager = Packager::new(
            HlsConfig {
                part_target: Duration::from_secs(cfg.part_s),
                segment_target: Duration::from_secs(cfg.segment_s),
                window: 1,
                max_free_buffers: 0,
            },
            self.counter.clone(),
        );
        if let Some(v) = s.video_cfg.clone() {
            packager.set_video(v);
        }
        if let Some(a) = s.audio_cfg.clone() {
            packager.set_audio(a);
        }
        s.recs.push(Active {
            rec,
            id: id.to_string(),
            auto,
            packager,
            failed,
        });
        self.set_wanted(stream, &s);
        self.ask_keyframe(stream, &mut s);
        info!(%key, id, auto, "recording started");
        Ok(())
    }

    /// Stops recording `id` of stream `stream` cleanly (its file finished). `false` when
    /// there is no such recording.
    pub fn stop(&self, stream: usize, id: &str, reason: &'static str) -> bool {
        let Some(Ok(mut s)) = self.slots.get(stream).map(|s| s.lock()) else {
            return false;
        };
        let Some(i) = s.recs.iter().position(|r| r.id == id) else {
            return false;
        };
        let mut a = s.recs.remove(i);
        self.set_wanted(stream, &s);
        let mut parts = std::mem::take(&mut s.parts);
        drop(s);
        a.packager.finish();
        self.flush(&mut a, &mut parts);
        self.send(Job::Stop { rec: a.rec, reason });
        true
    }

    /// Sends the parts `a`'s packager completed to the writer; `false` when the recording
    /// must stop (the writer is behind, or it failed).
    fn flush(&self, a: &mut Active, parts: &mut Vec<TakenPart>) -> bool {
        if a.failed.load(Ordering::Relaxed) {
            return false;
        }
        parts.clear();
        a.packager.take_parts(parts);
        for part in parts.drain(..) {
            let len = part.data.len();
            let accounted = part.data.capacity();
            if self.queued.load(Ordering::Relaxed) + accounted as u64 > MAX_QUEUED_BYTES {
                return false;
            }
            self.queued.fetch_add(accounted as u64, Ordering::Relaxed);
            self.counter.add(1, len);
            self.counter.reserve(accounted);
            let job = Job::Part {
                rec: a.rec,
                part,
                accounted,
            };
            let sent = self.tx.lock().ok().is_some_and(|tx| {
                tx.as_ref().is_some_and(|tx| match tx.try_send(job) {
                    Ok(()) => true,
                    Err(e) => {
                        if let Job::Part { part, .. } = e.into_inner() {
                            self.counter.sub(1, part.data.len());
                        }
                        false
                    }
                })
            });
            if !sent {
                self.counter.unreserve(accounted);
                self.queued.fetch_sub(accounted as u64, Ordering::Relaxed);
                return false;
            }
        }
        true
    }

    /// Runs `f` on each recording of stream `stream`, then sends what they completed;
    /// recordings that failed or overran are dropped.
    fn feed(&self, stream: usize, f: impl Fn(&mut Slot, usize)) {
        let Some(Ok(mut s)) = self.slots.get(stream).map(|s| s.lock()) else {
            return;
        };
        if s.recs.is_empty() {
            return;
        }
        for i in 0..s.recs.len() {
            f(&mut s, i);
        }
        let mut parts = std::mem::take(&mut s.parts);
        let mut i = 0;
        while i < s.recs.len() {
            if self.flush(&mut s.recs[i], &mut parts) {
                i += 1;
                continue;
            }
            let a = s.recs.remove(i);
            s.auto_failed |= a.auto;
            if !a.failed.load(Ordering::Relaxed) {
                // The writer is behind: stop, keeping what it has.
                self.overruns.fetch_add(1, Ordering::Relaxed);
                self.send(Job::Stop {
                    rec: a.rec,
                    reason: "writer behind",
                });
            }
        }
        s.parts = parts;
        self.set_wanted(stream, &s);
    }

    /// Whether stream `stream` is being recorded (an RTMP connection then emits samples).
    pub fn wanted(&self, stream: usize) -> bool {
        self.stats
            .stream(stream)
            .is_some_and(|c| c.record_wanted.load(Ordering::Relaxed))
    }

    fn set_video(&self, stream: usize, cfg: VideoConfig) {
        if let Some(Ok(mut s)) = self.slots.get(stream).map(|s| s.lock()) {
            s.video_cfg = Some(cfg.clone());
        }
        self.feed(stream, |s, i| s.recs[i].packager.set_video(cfg.clone()));
    }

    /// One unit of stream `stream` into its recordings. `ring`: it came from the stream's
    /// ring (a WebRTC publisher), whose video is held until the audio is known and whose
    /// recordings ask for keyframes; a frame publisher's configurations come first.
    fn unit(&self, stream: usize, unit: Unit<'_>, wall: u64, ring: bool) {
        match unit {
            Unit::VideoConfig(cfg) => self.set_video(stream, cfg),
            Unit::AudioConfig(cfg) => {
                let Some(Ok(mut s)) = self.slots.get(stream).map(|s| s.lock()) else {
                    return;
                };
                if ring && s.audio_cfg.is_none() {
                    // Audio's arrival after the video started restarts the recordings'
                    // timeline (a new init with an audio track) at the next keyframe: ask
                    // for one.
                    self.ask_keyframe(stream, &mut s);
                }
                s.audio_cfg = Some(cfg.clone());
                let frames = std::mem::take(&mut s.held);
                drop(s);
                self.feed(stream, |s, i| s.recs[i].packager.set_audio(cfg.clone()));
                // Audio is known: the held video goes in, behind the audio track.
                self.push_held(stream, &frames);
            }
            Unit::Video { .. } if ring => self.ring_video(stream, unit.into_owned(), wall),
            unit => self.feed(stream, |s, i| unit.apply(&mut s.recs[i].packager, wall)),
        }
    }

    /// A video frame of the stream's ring: held while the audio is unknown (for at most
    /// [`HOLD_TICKS`] and [`HOLD_BYTES`]), then in with whatever was held.
    fn ring_video(&self, stream: usize, unit: Unit<'static>, wall: u64) {
        let Some(Ok(mut s)) = self.slots.get(stream).map(|s| s.lock()) else {
            return;
        };
        let (Unit::Video { dts, .. }, Some(len)) = (&unit, video_len(&unit)) else {
            return;
        };
        let dts = *dts;
        let held_bytes: usize = s.held.iter().filter_map(|h| video_len(&h.0)).sum();
        let first_held = s.held.first().and_then(|h| match h.0 {
            Unit::Video { dts, .. } => Some(dts),
            _ => None,
        });
        let hold = s.audio_cfg.is_none()
            && first_held.is_none_or(|t| dts - t < HOLD_TICKS)
            && held_bytes + len <= HOLD_BYTES;
        s.held.push((unit, wall));
        if hold {
            return;
        }
        let frames = std::mem::take(&mut s.held);
        drop(s);
        self.push_held(stream, &frames);
        // A recording waiting for a keyframe asks again until one comes (the publisher
        // may not have been able to take the first request).
        if let Some(Ok(mut s)) = self.slots.get(stream).map(|s| s.lock())
            && s.recs.iter().any(|r| !r.packager.in_progress())
        {
            self.ask_keyframe(stream, &mut s);
        }
    }

    /// Held video frames into every recording of stream `stream`.
    fn push_held(&self, stream: usize, frames: &[(Unit<'static>, u64)]) {
        if frames.is_empty() {
            return;
        }
        self.feed(stream, |s, i| {
            let p = &mut s.recs[i].packager;
            for (unit, wall) in frames {
                unit.apply(p, *wall);
            }
        });
    }

    /// Starts `record.enabled` recordings of active streams and stops recordings of streams
    /// no longer active. `streams`: every `(app/stream, index)` of the directory; `active`
    /// whether one has a publisher or media. Once a second and on stream events.
    pub fn housekeep(&self, streams: &[(String, usize)], active: impl Fn(&str, usize) -> bool) {
        for (key, index) in streams {
            let is_live = active(key, *index);
            let Some(Ok(s)) = self.slots.get(*index).map(|s| s.lock()) else {
                continue;
            };
            let ids: Vec<(String, bool)> = s.recs.iter().map(|r| (r.id.clone(), r.auto)).collect();
            let auto_failed = s.auto_failed;
            drop(s);
            if !is_live {
                for (id, _) in &ids {
                    self.stop(*index, id, "stream ended");
                }
                if let Some(Ok(mut s)) = self.slots.get(*index).map(|s| s.lock()) {
                    // The next publisher brings its own configuration.
                    s.video_cfg = None;
                    s.audio_cfg = None;
                    s.feed = Feed::default();
                    s.auto_failed = false;
                    s.held.clear();
                }
                continue;
            }
            let app = key.split('/').next().unwrap_or("");
            let enabled = self.app(app).is_some_and(|a| a.record.enabled);
            if enabled
                && !auto_failed
                && !ids.iter().any(|(_, auto)| *auto)
                && let Err(StartError::Codec(why)) = self.start(*index, key, "auto", true)
            {
                // Not tried again until the stream ends (a new publisher may bring
                // another codec).
                tracing::warn!("{key}: record.enabled, but no recording: {why}");
                if let Some(Ok(mut s)) = self.slots.get(*index).map(|s| s.lock()) {
                    s.auto_failed = true;
                }
            }
        }
    }

    /// Deletes the files past each app's `delete_after_s` (not those being written).
    pub fn sweep(&self) -> Vec<PathBuf> {
        let open = self.open_files();
        let now = SystemTime::now();
        self.apps()
            .iter()
            .flat_map(|a| files::sweep(a, &open, now))
            .collect()
    }

    /// The housekeeping, on the current runtime until the event stream closes:
    /// `record.enabled` recordings start as soon as a stream of `streams` has a publisher (on
    /// its `publisher.joined` event, before its first keyframe; and once a second in case an
    /// event was missed) and stop when it has neither a publisher nor media
    /// ([`Recorder::housekeep`]); every 10 s the `delete_after_s` sweep. The event bus is read
    /// only when some app records by itself (`record.enabled`); API recordings stop on the
    /// tick.
    pub async fn housekeeping(self: &Arc<Self>, streams: &Directory) {
        let mut events = self
            .apps()
            .iter()
            .any(|a| a.record.enabled)
            .then(|| self.stats.snapshots.subscribe());
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut n = 0u64;
        loop {
            tokio::select! {
                e = async {
                    match events.as_mut() {
                        Some(rx) => rx.recv().await,
                        None => std::future::pending().await,
                    }
                } => match e {
                    Ok(e) if !matches!(e.kind, EventKind::StreamChanged
                        | EventKind::PublisherJoined
                        | EventKind::PublisherLeft) => continue,
                    Err(broadcast::error::RecvError::Closed) => return,
                    _ => {}
                },
                _ = tick.tick() => n += 1,
            }
            let published: HashSet<Arc<str>> = self
                .stats
                .snapshots
                .publishers()
                .into_iter()
                .map(|p| p.stream)
                .collect();
            // A stream on its slate is not active: its recording ends as its publisher
            // leaves, and the next publisher starts another.
            self.housekeep(&streams.list(), |key, i| {
                published.contains(key)
                    || self.stats.stream(i).is_some_and(|c| {
                        c.live.load(Ordering::Relaxed) && !c.slate.load(Ordering::Relaxed)
                    })
            });
            // The sweep runs on a blocking thread: spawned only when some app deletes old
            // files, so a server that keeps them does not start (and hold, for tokio's
            // keep-alive) a thread every 10 s.
            if n.is_multiple_of(10) && self.apps().iter().any(|a| a.record.delete_after_s > 0) {
                let rec = self.clone();
                let deleted = tokio::task::spawn_blocking(move || rec.sweep()).await;
                for p in deleted.unwrap_or_default() {
                    info!(path = %p.display(), "recording deleted (delete_after_s)");
                }
            }
        }
    }

    /// Stops every recording (files finished) and lets the writer end.
    pub fn shutdown(&self) {
        for (i, slot) in self.slots.iter().enumerate() {
            let ids: Vec<String> = slot
                .lock()
                .map(|s| s.recs.iter().map(|r| r.id.clone()).collect())
                .unwrap_or_default();
            for id in ids {
                self.stop(i, &id, "server stopping");
            }
        }
        if let Ok(mut tx) = self.tx.lock() {
            *tx = None;
        }
    }

    /// The app's `[app.record]` (the default for an unknown app).
    pub fn config(&self, app: &str) -> RecordConfig {
        self.app(app).map(|a| a.record.clone()).unwrap_or_default()
    }
}

/// The bytes of a video unit.
fn video_len(unit: &Unit<'_>) -> Option<usize> {
    match unit {
        Unit::Video { data, .. } => Some(data.len()),
        _ => None,
    }
}

impl Subscriber for Recorder {
    fn wanted(&self, stream: usize) -> bool {
        Recorder::wanted(self, stream)
    }

    /// A frame from the stream's publisher.
    fn sample(&self, stream: usize, sample: &Sample) {
        let unit = tern_rtc::package::sample_unit(sample);
        self.unit(stream, unit, unix_ms(), false);
    }

    /// A ring packet of the stream (on the tap's thread); the slate's are not recorded.
    fn packet(&self, tap: &TapPacket) {
        if tap.slate {
            return;
        }
        let stream = tap.stream;
        let codec = self.stats.video(stream).codec;
        let wall = unix_ms();
        let mut units = Vec::new();
        if let Some(Ok(mut s)) = self.slots.get(stream).map(|s| s.lock()) {
            s.feed.set_codec(codec);
            s.feed
                .push_rtp(&tap.pkt, &mut |u| units.push(u.into_owned()));
        }
        for u in units {
            self.unit(stream, u, wall, true);
        }
    }
}
