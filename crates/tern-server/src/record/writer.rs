//! The `RecordWriter` thread: every recording's file IO, off the media path and off the
//! threads that package (RTMP connections, the tap thread).
//!
//! It receives parts over a bounded queue ([`Job`]) and appends each with one `write` as it
//! arrives, so that the kernel holds every completed fragment and a killed process leaves a
//! file that plays to its last fragment. A part with a new segment number starts a new file
//! (`segment_s`, or a discontinuity such as a new codec configuration). A clean stop
//! finishes the file: the duration written into the `mvhd`/`mehd` in place, an `mfra`
//! appended, `fdatasync`. A failed write (a full disk, an unwritable path) stops that
//! recording alone, with `recording.stopped` naming the error.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use tern_pool::PoolCounter;
use tern_rtc::hls::TakenPart;
use tern_rtc::hls::file::{file_init, finished_init, mfra, parse_head, part_times, rebase_part};
use tracing::{info, warn};

use super::files::{expand, free_name, rfc3339};
use crate::config::RecordConfig;
use crate::media::EngineStats;
use crate::snapshot::EventKind;

/// Finished-file notifications waiting for the webhook thread; past this they are dropped
/// and counted (a webhook that stopped answering must not hold the writer).
const HOOK_QUEUE: usize = 256;
/// Time allowed for a segment webhook's answer.
pub(super) const HOOK_TIMEOUT: Duration = Duration::from_secs(5);

/// What the writer is asked to do.
pub(super) enum Job {
    /// A recording begins: files are opened from its first part on.
    Start {
        rec: u64,
        id: String,
        app: String,
        stream: String,
        cfg: RecordConfig,
        /// Set by the writer when the recording failed; the packaging side then drops it.
        failed: Arc<AtomicBool>,
    },
    /// A part to append; `accounted` bytes are booked in the `recordings` pool.
    Part {
        rec: u64,
        part: TakenPart,
        accounted: usize,
    },
    /// The recording ends cleanly: its file is finished.
    Stop { rec: u64, reason: &'static str },
}

/// Counters, for `/metrics` and the benchmarks.
#[derive(Debug, Default)]
pub struct WriterCounters {
    /// Bytes written to files.
    pub bytes: AtomicU64,
    /// Parts written.
    pub parts: AtomicU64,
    /// Parts written more than one part length after they completed (the writer was
    /// behind).
    pub late_parts: AtomicU64,
    /// Files finished.
    pub files: AtomicU64,
    /// Recordings stopped by a write error.
    pub failures: AtomicU64,
    /// Segment webhook calls dropped (queue full) or failed.
    pub hooks_failed: AtomicU64,
}

struct OpenFile {
    f: File,
    path: PathBuf,
    /// The init bytes at the start of the file (rewritten with the duration on finish).
    init: Vec<u8>,
    msn: u64,
    offset: u64,
    bytes: u64,
    start_ms: u64,
    codecs: String,
    /// Driver track and its timescale.
    driver: (u32, u32),
    /// Per track: what its tfdt loses in this file.
    bases: Vec<(u32, u64)>,
    /// End of the driver track, rebased, in its timescale.
    end: u64,
    /// `mfra` entries: (rebased time of a part starting with a keyframe, moof offset).
    index: Vec<(u64, u64)>,
}

struct Rec {
    id: String,
    app: String,
    stream: String,
    cfg: RecordConfig,
    failed: Arc<AtomicBool>,
    file: Option<OpenFile>,
    /// Files opened so far.
    files: u32,
}

/// A finished file, as the webhook and `recording.segment` give it.
fn segment_json(r: &Rec, f: &OpenFile) -> serde_json::Value {
    serde_json::json!({
        "app": r.app,
        "stream": r.stream,
        "path": f.path.to_string_lossy(),
        "start": rfc3339(f.start_ms),
        "duration_s": duration_s(f),
        "bytes": f.bytes,
    })
}

fn duration_s(f: &OpenFile) -> f64 {
    let s = f.end as f64 / f64::from(f.driver.1.max(1));
    (s * 1000.0).round() / 1000.0
}

fn rec_json(rec: u64, r: &Rec, error: Option<&str>) -> String {
    let mut v = serde_json::json!({
        "rec": rec,
        "id": r.id,
        "app": r.app,
        "stream": r.stream,
    });
    if let Some(f) = &r.file {
        v["path"] = f.path.to_string_lossy().into();
        v["start"] = rfc3339(f.start_ms).into();
        v["duration_s"] = duration_s(f).into();
        v["bytes"] = f.bytes.into();
        v["codecs"] = f.codecs.clone().into();
    }
    if let Some(e) = error {
        v["error"] = e.into();
    }
    v.to_string()
}

/// The writer's state; [`Writer::run`] is the thread's loop.
pub(super) struct Writer {
    rx: Receiver<Job>,
    recs: std::collections::HashMap<u64, Rec>,
    counter: PoolCounter,
    queued: Arc<AtomicU64>,
    stats: Arc<EngineStats>,
    counters: Arc<WriterCounters>,
    hooks: Sender<(String, serde_json::Value)>,
    /// Paths being written, for the `delete_after_s` sweep to leave alone.
    open: Arc<std::sync::Mutex<Vec<PathBuf>>>,
}

impl Writer {
    pub(super) fn new(
        rx: Receiver<Job>,
        counter: PoolCounter,
        queued: Arc<AtomicU64>,
        stats: Arc<EngineStats>,
        counters: Arc<WriterCounters>,
        open: Arc<std::sync::Mutex<Vec<PathBuf>>>,
        outbound: crate::outbound::Outbound,
    ) -> std::io::Result<Writer> {
        let (hooks, hook_rx) = crossbeam_channel::bounded(HOOK_QUEUE);
        let c = counters.clone();
        std::thread::Builder::new()
            .name("RecordHook".into())
            .spawn(move || run_hooks(hook_rx, c, &outbound))?;
        Ok(Writer {
            rx,
            recs: std::collections::HashMap::new(),
            counter,
            queued,
            stats,
            counters,
            hooks,
            open,
        })
    }

    /// Until every sender is gone; recordings still open are then finished.
    pub(super) fn run(mut self) {
        while let Ok(job) = self.rx.recv() {
            self.job(job);
        }
        let recs: Vec<u64> = self.recs.keys().copied().collect();
        for rec in recs {
            self.stop(rec, "server stopping");
        }
    }

    fn job(&mut self, job: Job) {
        match job {
            Job::Start {
                rec,
                id,
                app,
                stream,
                cfg,
                failed,
            } => {
                let r = Rec {
                    id,
                    app,
                    stream,
                    cfg,
                    failed,
                    file: None,
                    files: 0,
                };
                self.stats.snapshots.recording(
                    EventKind::RecordingStarted,
                    &format!("{}/{}", r.app, r.stream),
                    rec_json(rec, &r, None),
                    None,
                );
                self.recs.insert(rec, r);
            }
            Job::Part {
                rec,
                part,
                accounted,
            } => {
                let written = part.data.len();
                if let Err(e) = self.part(rec, part) {
                    self.fail(rec, &e);
                }
                self.counter.sub(1, written);
                self.counter.unreserve(accounted);
                self.queued.fetch_sub(accounted as u64, Ordering::Relaxed);
            }
            Job::Stop { rec, reason } => self.stop(rec, reason),
        }
    }

    fn part(&mut self, rec: u64, mut part: TakenPart) -> std::io::Result<()> {
        let Some(r) = self.recs.get_mut(&rec) else {
            return Ok(());
        };
        if r.failed.load(Ordering::Relaxed) {
            return Ok(());
        }
        if r.file.as_ref().is_some_and(|f| f.msn != part.msn) {
            let done = r.file.take();
            let first = r.files == 1;
            if let Some(f) = done {
                // A WebRTC publisher's audio often starts a moment after its first video
                // frame: the new audio track restarts the timeline at once. A first file
                // shorter than a second is that glitch, not a recording: it goes.
                if first && f.end < u64::from(f.driver.1) {
                    self.drop_file(f);
                } else {
                    self.finish_file(rec, f)?;
                }
            }
        }
        let r = self.recs.get_mut(&rec).expect("present above");
        if r.file.is_none() {
            r.file = Some(open_file(r, &part)?);
            r.files += 1;
            if let (Ok(mut o), Some(f)) = (self.open.lock(), &r.file) {
                o.push(f.path.clone());
            }
        }
        let Some(f) = r.file.as_mut() else {
            return Ok(());
        };
        rebase_part(&mut part.data, &f.bases);
        let start = part.start.saturating_sub(
            f.bases
                .iter()
                .find(|b| b.0 == f.driver.0)
                .map_or(0, |b| b.1),
        );
        if part.independent {
            f.index.push((start, f.offset));
        }
        f.f.write_all(&part.data)?;
        f.offset += part.data.len() as u64;
        f.bytes += part.data.len() as u64;
        f.end = f.end.max(start + part.duration);
        self.counters
            .bytes
            .fetch_add(part.data.len() as u64, Ordering::Relaxed);
        self.counters.parts.fetch_add(1, Ordering::Relaxed);
        // A part completes when the first sample after it arrives (that sample's wall
        // time is about the part's end): late when written a part length after that.
        let due = part.segment_pdt_ms
            + (start + part.duration) * 1000 / u64::from(part.timescale.max(1))
            + r.cfg.part_s * 1000;
        if now_ms() > due + 1000 {
            self.counters.late_parts.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Finishes the file: duration in the init, the mfra, fdatasync; `recording.segment`
    /// and the webhook.
    fn finish_file(&mut self, rec: u64, mut f: OpenFile) -> std::io::Result<()> {
        if let Ok(mut o) = self.open.lock() {
            o.retain(|p| *p != f.path);
        }
        let ms = f.end * 1000 / u64::from(f.driver.1.max(1));
        let init = finished_init(&f.init, ms).map_err(std::io::Error::other)?;
        if init.len() == f.init.len() {
            f.f.write_all_at(&init, 0)?;
        }
        let index = mfra(f.driver.0, &f.index).map_err(std::io::Error::other)?;
        f.f.write_all(&index)?;
        f.bytes += index.len() as u64;
        f.f.sync_data()?;
        self.counters.files.fetch_add(1, Ordering::Relaxed);
        let Some(r) = self.recs.get(&rec) else {
            return Ok(());
        };
        let seg = segment_json(r, &f);
        info!(path = %f.path.display(), duration_s = duration_s(&f), bytes = f.bytes, "recording: file finished");
        self.stats.snapshots.recording(
            EventKind::RecordingSegment,
            &format!("{}/{}", r.app, r.stream),
            seg.to_string(),
            None,
        );
        if !r.cfg.on_segment_url.is_empty()
            && self
                .hooks
                .try_send((r.cfg.on_segment_url.clone(), seg))
                .is_err()
        {
            self.counters.hooks_failed.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Removes a file that is not worth keeping (see [`Writer::part`]).
    fn drop_file(&mut self, f: OpenFile) {
        if let Ok(mut o) = self.open.lock() {
            o.retain(|p| *p != f.path);
        }
        info!(path = %f.path.display(), "recording: a first file under a second, before the stream's tracks were all known, removed");
        drop(f.f);
        let _ = std::fs::remove_file(&f.path);
    }

    fn stop(&mut self, rec: u64, reason: &'static str) {
        let Some(mut r) = self.recs.remove(&rec) else {
            return;
        };
        let file = r.file.take();
        let mut error = None;
        if let Some(f) = file {
            // Back in place for finish_file's lookup and the event's snapshot.
            let path = f.path.clone();
            self.recs.insert(rec, Rec { file: None, ..r });
            if let Err(e) = self.finish_file(rec, f) {
                warn!(path = %path.display(), "recording: cannot finish the file: {e}");
                error = Some(e.to_string());
            }
            r = self.recs.remove(&rec).expect("inserted above");
        }
        self.stats.snapshots.recording(
            EventKind::RecordingStopped,
            &format!("{}/{}", r.app, r.stream),
            rec_json(rec, &r, error.as_deref()),
            Some(reason),
        );
    }

    /// A write failed: the recording stops here, its file left as written (it plays to
    /// its last complete fragment), and the packaging side is told to drop it.
    fn fail(&mut self, rec: u64, e: &std::io::Error) {
        let Some(r) = self.recs.remove(&rec) else {
            return;
        };
        r.failed.store(true, Ordering::Relaxed);
        self.counters.failures.fetch_add(1, Ordering::Relaxed);
        if let (Ok(mut o), Some(f)) = (self.open.lock(), &r.file) {
            o.retain(|p| *p != f.path);
        }
        warn!(app = %r.app, stream = %r.stream, "recording stopped: {e}");
        self.stats.snapshots.recording(
            EventKind::RecordingStopped,
            &format!("{}/{}", r.app, r.stream),
            rec_json(rec, &r, Some(&e.to_string())),
            Some("write error"),
        );
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Opens a new file for the recording's part: its path from the template (at the part's
/// wall-clock start), the init written with the start time in it.
fn open_file(r: &Rec, part: &TakenPart) -> std::io::Result<OpenFile> {
    let start_ms = part.segment_pdt_ms.max(1);
    let path = free_name(&expand(&r.cfg.path, &r.app, &r.stream, start_ms / 1000));
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let init = file_init(&part.init, start_ms).map_err(std::io::Error::other)?;
    let head = parse_head(&init).ok_or_else(|| std::io::Error::other("unreadable init"))?;
    // Each track's timeline starts at the earliest sample of the first part (in seconds,
    // the same instant on every track), so that the tracks stay in step.
    let times = part_times(&part.data);
    let ts = |t: u32| {
        head.tracks
            .iter()
            .find(|x| x.0 == t)
            .map_or(1, |x| u64::from(x.1.max(1)))
    };
    let first_ns = times
        .iter()
        .map(|&(t, v)| u128::from(v) * 1_000_000_000 / u128::from(ts(t)))
        .min()
        .unwrap_or(0);
    let bases = head
        .tracks
        .iter()
        .map(|&(t, scale)| {
            (
                t,
                u64::try_from(first_ns * u128::from(scale) / 1_000_000_000).unwrap_or(0),
            )
        })
        .collect();
    let mut f = File::options().write(true).create_new(true).open(&path)?;
    f.write_all(&init)?;
    info!(path = %path.display(), "recording: new file");
    Ok(OpenFile {
        f,
        path,
        offset: init.len() as u64,
        bytes: init.len() as u64,
        init,
        msn: part.msn,
        start_ms,
        codecs: part.codecs.clone(),
        driver: head.driver,
        bases,
        end: 0,
        index: Vec::new(),
    })
}

/// The `RecordHook` thread: POSTs each finished file's JSON to its app's
/// `on_segment_url`, one at a time, through `outbound`'s async client on a runtime of the
/// thread's own (`http://`, or `https://` with HTTP/1.1 or h2 as ALPN picks;
/// [`HOOK_TIMEOUT`] per call, answer included; a status other than 2xx is a failure).
fn run_hooks(
    rx: Receiver<(String, serde_json::Value)>,
    counters: Arc<WriterCounters>,
    outbound: &crate::outbound::Outbound,
) {
    use http_body_util::BodyExt;
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            warn!("recording: no runtime for segment webhooks ({e}); none will be sent");
            return;
        }
    };
    // Made inside the runtime: its pooled connections' tasks run on it while a call runs.
    let client = rt.block_on(async { outbound.client() });
    while let Ok((url, body)) = rx.recv() {
        let sent: Result<(), String> = rt.block_on(async {
            let uri: hyper::Uri = url.parse().map_err(|e| format!("{e}"))?;
            let req = crate::outbound::post_json(&uri, body.to_string().into_bytes());
            tokio::time::timeout(HOOK_TIMEOUT, async {
                let r = client
                    .request(req)
                    .await
                    .map_err(|e| crate::outbound::error_chain(&e))?;
                let status = r.status();
                // Read to the end, so that the connection goes back to the pool.
                r.into_body().collect().await.map_err(|e| e.to_string())?;
                if status.is_success() {
                    Ok(())
                } else {
                    Err(format!("answered {status}"))
                }
            })
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {HOOK_TIMEOUT:?}")))
        });
        if let Err(e) = sent {
            counters.hooks_failed.fetch_add(1, Ordering::Relaxed);
            warn!(%url, "recording: segment webhook failed: {e}");
        }
    }
}
