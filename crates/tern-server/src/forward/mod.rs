//! Forwards: a live stream sent on to another server (restreaming to YouTube, Twitch, a CDN
//! ingest, nginx-rtmp, another tern, an SRT listener), configured (`[[app.forward]]`) or
//! added through the API.
//!
//! The media comes through the media tap ([`crate::tap`]), of which [`Forwards`] is a
//! subscriber while some forward of a stream runs
//! ([`crate::media::StreamCounters::forward_wanted`]): a frame publisher's frames (RTMP,
//! SRT, RTSP-H264: H264 with its B-frames, AAC as it came), the ring packets of every other
//! stream (WHIP, the clip, the slate), depacketized once per stream. One
//! [`tern_rtc::outlet::Outlet`] per stream turns them into [`OutFrame`]s on one timeline
//! that never goes back (Opus encoded to AAC once per stream, however many forwards), and
//! every forward of the stream gets each frame as an `Arc` through a bounded queue; a
//! forward whose queue is full misses frames and starts again at the next keyframe, the
//! media path never waits on it.
//!
//! Each forward is a thread of its own (`link.rs`): it connects, publishes (RTMP and RTMPS
//! through [`tern_proto::rtmp::client::ClientSession`], FLV tags), sends until its stream
//! ends or it is deleted, and after a failure connects again with backoff (1 s doubling to
//! 30 s) for as long as the stream is live. A configured forward starts when a stream it
//! covers goes live; every forward stops [`END_GRACE`] after its stream stopped being live
//! (a publisher that reconnects within it keeps the forward and its timeline).
//!
//! `entry.rs` holds what the hub and the threads share (a forward's [`Entry`], the
//! [`OutletReader`], the `Outlets` the hub is to its readers).
//!
//! Stream keys and passphrases are never shown: logs, the API and events carry
//! [`crate::config::redact_forward_url`]'s form.

mod entry;
mod link;

pub use entry::{Entry, OutletReader, State};
use entry::{Origin, Outlets, Status};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, TrySendError};
use tern_proto::codec::{MediaKind, VideoCodec};
use tern_proto::h265;
use tern_proto::rtp::Unwrap32;
use tern_rtc::av::Sample;
use tern_rtc::outlet::{Container, OutFrame, Outlet, carried};
use tern_rtc::package::{Feed, Unit, sample_unit};
use tokio::sync::broadcast;
use tracing::{info, warn};

use crate::clock::unix_ms;
use crate::config::{Config, ForwardUrl, expand_forward_url, redact_forward_url};
use crate::directory::Directory;
use crate::media::{EngineStats, TapPacket};
use crate::snapshot::EventKind;
use crate::tap::Subscriber;

/// How long a forward outlives its stream's end: a publisher back within it continues the
/// same outbound stream.
pub const END_GRACE: Duration = Duration::from_secs(5);
/// Frames a forward's queue holds (about 4 s of 30 fps video and AAC).
const QUEUE: usize = 512;
/// How often a stream that lost a video frame asks its publisher again for the keyframe
/// its forwards wait for.
const KEYFRAME_ASK_EVERY: Duration = Duration::from_secs(1);
/// Forwards at most, all streams together.
pub const MAX_FORWARDS: usize = 1000;

/// A reader's place at its stream's outlet.
struct Sink {
    id: u64,
    tx: Sender<Arc<OutFrame>>,
    /// Set when a frame did not fit its queue.
    overflow: Arc<AtomicBool>,
}

/// One stream's outlet and the forwards it feeds.
#[derive(Default)]
struct Slot {
    outlet: Outlet,
    /// Audio and H264 video out of ring packets.
    feed: Feed,
    /// H265 video out of ring packets, taken before the feed: the outlet sends H265 on in
    /// Annex B (MPEG-TS over SRT), not as the feed's units.
    hevc: h265::Depacketizer,
    hevc_ts: Unwrap32,
    /// The last ring packet was the slate's.
    slate: bool,
    /// A video frame was lost or damaged: the frames after it refer to it, so none goes
    /// out until the next keyframe (asked of the publisher when the loss is seen, and
    /// again every [`KEYFRAME_ASK_EVERY`] until it comes).
    broken: bool,
    /// When a keyframe was last asked for a loss.
    keyframe_asked: Option<Instant>,
    sinks: Vec<Sink>,
}

/// Why a forward could not be added.
#[derive(Debug, thiserror::Error)]
pub enum AddError {
    /// The URL is not one a forward takes.
    #[error("url {0}")]
    Url(String),
    /// The stream is not live.
    #[error("stream {0} is not live: a forward starts on a live stream")]
    NotLive(String),
    /// [`MAX_FORWARDS`] run.
    #[error("{MAX_FORWARDS} forwards run (the server's limit)")]
    Full,
    /// The thread did not start.
    #[error("the forward's thread did not start: {0}")]
    Thread(String),
}

/// Every forward of the server, and the tap subscriber that feeds them.
pub struct Forwards {
    stats: Arc<EngineStats>,
    keyframe: Box<dyn Fn(usize) + Send + Sync>,
    slots: Vec<Mutex<Slot>>,
    entries: Mutex<Vec<Arc<Entry>>>,
    /// Forwards made, ever (their ids).
    serial: AtomicU64,
    /// Readers made, ever (their places at the outlets).
    readers: AtomicU64,
    /// TLS for `rtmps://`: certificates checked, and not (`tls_verify = false`).
    tls: OnceLock<link::Tls>,
    /// Bytes of forwards that ended, by stream (the byte counter stays monotonic).
    ended_bytes: Mutex<HashMap<String, u64>>,
}

impl std::fmt::Debug for Forwards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwards")
            .field("forwards", &self.entries().len())
            .finish()
    }
}

impl Forwards {
    /// Forwards over `streams` engine slots; `keyframe(i)` asks stream `i`'s publisher for a
    /// keyframe.
    pub fn new(
        streams: usize,
        stats: Arc<EngineStats>,
        keyframe: Box<dyn Fn(usize) + Send + Sync>,
    ) -> Forwards {
        Forwards {
            stats,
            keyframe,
            slots: (0..streams).map(|_| Mutex::new(Slot::default())).collect(),
            entries: Mutex::new(Vec::new()),
            serial: AtomicU64::new(0),
            readers: AtomicU64::new(0),
            tls: OnceLock::new(),
            ended_bytes: Mutex::new(HashMap::new()),
        }
    }

    /// The TLS client configurations `rtmps://` forwards use: `verified` (the server's
    /// roots and `ca_file`) and `unverified` (for `tls_verify = false`). Set once at start.
    pub fn set_tls(
        &self,
        verified: Arc<rustls::ClientConfig>,
        unverified: Arc<rustls::ClientConfig>,
    ) {
        let _ = self.tls.set((verified, unverified));
    }

    fn entries(&self) -> MutexGuard<'_, Vec<Arc<Entry>>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn slot(&self, index: usize) -> Option<MutexGuard<'_, Slot>> {
        self.slots
            .get(index)
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Every forward, or those of `app` (and `stream`), as the API shows them.
    pub fn list(&self, app: Option<&str>, stream: Option<&str>) -> Vec<serde_json::Value> {
        self.entries()
            .iter()
            .filter(|e| {
                let (a, s) = e.key.split_once('/').unwrap_or((&e.key, ""));
                app.is_none_or(|x| x == a) && stream.is_none_or(|x| x == s)
            })
            .map(|e| e.json())
            .collect()
    }

    /// Forwards by state, for `/metrics`.
    pub fn by_state(&self) -> Vec<(&'static str, usize)> {
        let entries = self.entries();
        State::ALL
            .iter()
            .map(|s| (s.name(), entries.iter().filter(|e| e.state() == *s).count()))
            .collect()
    }

    /// Bytes sent on, by stream (`app/stream`), ended forwards included.
    pub fn bytes_by_stream(&self) -> Vec<(String, u64)> {
        let mut m = self
            .ended_bytes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for e in self.entries().iter() {
            *m.entry(e.key.clone()).or_default() += e.bytes.load(Ordering::Relaxed);
        }
        let mut v: Vec<(String, u64)> = m.into_iter().collect();
        v.sort();
        v
    }

    /// Streams whose outlet encodes Opus to AAC now.
    pub fn encoders(&self) -> usize {
        (0..self.slots.len())
            .filter(|&i| self.slot(i).is_some_and(|s| s.outlet.encodes_audio()))
            .count()
    }

    /// Adds a forward of stream `key` (engine index `index`) to `url` (`%app`/`%stream`
    /// expanded here); `live`: whether the stream is live now. Returns its entry.
    pub fn add(
        self: &Arc<Self>,
        key: &str,
        index: usize,
        url: &str,
        tls_verify: bool,
    ) -> Result<Arc<Entry>, AddError> {
        self.start(key, index, url, tls_verify, Origin::Api)
    }

    fn start(
        self: &Arc<Self>,
        key: &str,
        index: usize,
        url: &str,
        tls_verify: bool,
        origin: Origin,
    ) -> Result<Arc<Entry>, AddError> {
        let (app, stream) = key.split_once('/').unwrap_or((key, ""));
        let url = expand_forward_url(url, app, stream);
        ForwardUrl::parse(&url).map_err(AddError::Url)?;
        if self.entries().len() >= MAX_FORWARDS {
            return Err(AddError::Full);
        }
        let n = self.serial.fetch_add(1, Ordering::Relaxed) + 1;
        let entry = Arc::new(Entry {
            id: format!("f{n}"),
            key: key.to_string(),
            index,
            shown: redact_forward_url(&url),
            url,
            tls_verify,
            origin,
            status: Mutex::new(Status {
                state: State::Connecting,
                since_ms: unix_ms(),
                last_error: None,
            }),
            bytes: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            not_live: Mutex::new(None),
            thread: Mutex::new(None),
        });
        let reader = self.subscribe(index);
        let tls = self.tls.get().cloned();
        let e = entry.clone();
        let handle = std::thread::Builder::new()
            .name(format!("Forward {}", entry.id))
            .spawn(move || link::run(&e, &reader, tls.as_ref()))
            .map_err(|err| AddError::Thread(err.to_string()))?;
        *entry.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
        self.entries().push(entry.clone());
        info!(forward = %entry.id, stream = %entry.key, url = %entry.shown, "forward added");
        Ok(entry)
    }

    /// Stops and removes forward `id` of stream `key`; whether there was one.
    pub fn remove(&self, key: &str, id: &str, reason: &'static str) -> bool {
        let entry = {
            let mut entries = self.entries();
            let Some(i) = entries.iter().position(|e| e.id == id && e.key == key) else {
                return false;
            };
            entries.remove(i)
        };
        self.finish(&entry, reason);
        true
    }

    /// Stops every forward (the server stops).
    pub fn shutdown(&self) {
        let all: Vec<Arc<Entry>> = std::mem::take(&mut *self.entries());
        for e in all {
            self.finish(&e, "server stopping");
        }
    }

    /// Stops `entry`'s thread and waits for it (its reader leaves the outlet), keeps its
    /// bytes and says so (`forward.stopped`).
    fn finish(&self, entry: &Arc<Entry>, reason: &'static str) {
        entry.stop.store(true, Ordering::Relaxed);
        let handle = entry
            .thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(h) = handle {
            let _ = h.join();
        }
        *self
            .ended_bytes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(entry.key.clone())
            .or_default() += entry.bytes.load(Ordering::Relaxed);
        info!(forward = %entry.id, stream = %entry.key, url = %entry.shown, reason, "forward stopped");
        self.event(EventKind::ForwardStopped, entry, Some(reason));
    }

    /// A reader of stream `index`'s outlet (started with its first reader): the
    /// configurations in force first, then every frame.
    pub fn subscribe(self: &Arc<Self>, index: usize) -> OutletReader {
        let (tx, rx) = crossbeam_channel::bounded(QUEUE);
        let overflow = Arc::new(AtomicBool::new(false));
        let id = self.readers.fetch_add(1, Ordering::Relaxed);
        if let Some(mut slot) = self.slot(index) {
            for f in slot.outlet.configs() {
                let _ = tx.try_send(Arc::new(f));
            }
            slot.sinks.push(Sink {
                id,
                tx,
                overflow: overflow.clone(),
            });
        }
        self.set_wanted(index);
        self.ask_keyframe(index);
        OutletReader {
            rx,
            overflow,
            id,
            index,
            hub: self.clone() as Arc<dyn Outlets>,
        }
    }

    fn set_wanted(&self, index: usize) {
        let on = self.slot(index).is_some_and(|s| !s.sinks.is_empty());
        if let Some(c) = self.stats.stream(index) {
            c.forward_wanted.store(on, Ordering::Relaxed);
        }
    }

    /// After a video packet of stream `stream`; `lost`: it showed a frame lost. From a loss
    /// on, the stream's forwards wait for the next keyframe, which is asked of the publisher
    /// (a WebRTC encoder may send none for minutes unless asked; the publisher's side may
    /// drop a request that follows another closely, so it is asked again every
    /// [`KEYFRAME_ASK_EVERY`] until it comes).
    fn watch_loss(&self, stream: usize, slot: &mut Slot, lost: bool) {
        slot.broken |= lost;
        let now = Instant::now();
        if slot.broken
            && slot
                .keyframe_asked
                .is_none_or(|t| now.saturating_duration_since(t) >= KEYFRAME_ASK_EVERY)
        {
            slot.keyframe_asked = Some(now);
            self.ask_keyframe(stream);
        }
    }

    /// Whether a video frame goes out: not while the stream waits for a keyframe after a
    /// loss (a decoder would show the frames that refer to the lost one broken).
    fn passes(slot: &mut Slot, keyframe: bool) -> bool {
        if slot.broken && keyframe {
            slot.broken = false;
        }
        !slot.broken
    }

    /// Frames out of `f` to every forward of the slot; a full queue drops and marks it.
    fn fan_out(slot: &mut Slot, f: impl FnOnce(&mut Outlet, &mut dyn FnMut(OutFrame))) {
        let Slot { outlet, sinks, .. } = slot;
        f(outlet, &mut |frame| {
            let frame = Arc::new(frame);
            for s in sinks.iter() {
                if let Err(TrySendError::Full(_)) = s.tx.try_send(frame.clone()) {
                    s.overflow.store(true, Ordering::Relaxed);
                }
            }
        });
    }

    /// Starts configured forwards of live streams; returns those to stop, whose stream ended
    /// more than [`END_GRACE`] ago or whose configuration is gone, as `(key, id, reason)`.
    /// `streams`: every `(app/stream, index)`; `config`: the configuration in force.
    fn housekeep(
        self: &Arc<Self>,
        streams: &[(String, usize)],
        config: &Config,
        now: Instant,
    ) -> Vec<(String, String, &'static str)> {
        let live: HashMap<&str, usize> = streams
            .iter()
            .filter(|(_, i)| {
                self.stats
                    .stream(*i)
                    .is_some_and(|c| c.live.load(Ordering::Relaxed))
            })
            .map(|(k, i)| (k.as_str(), *i))
            .collect();
        let mut ended = Vec::new();
        for e in self.entries().iter() {
            let is_live = live.get(e.key.as_str()) == Some(&e.index);
            let mut since = e.not_live.lock().unwrap_or_else(|x| x.into_inner());
            if is_live {
                *since = None;
            } else if now.saturating_duration_since(*since.get_or_insert(now)) >= END_GRACE {
                ended.push((e.key.clone(), e.id.clone(), "stream ended"));
                continue;
            }
            if let Origin::Config(url) = &e.origin {
                let (app, stream) = e.key.split_once('/').unwrap_or((&e.key, ""));
                let still = config.app(app).is_some_and(|a| {
                    a.forwards
                        .iter()
                        .any(|f| &f.url == url && f.tls_verify == e.tls_verify && f.covers(stream))
                });
                if !still {
                    ended.push((e.key.clone(), e.id.clone(), "configuration changed"));
                }
            }
        }
        for (key, index) in live {
            let (app, stream) = key.split_once('/').unwrap_or((key, ""));
            let Some(a) = config.app(app) else {
                continue;
            };
            for f in a.forwards.iter().filter(|f| f.covers(stream)) {
                let running = self.entries().iter().any(|e| {
                    e.key == key
                        && e.origin == Origin::Config(f.url.clone())
                        && e.tls_verify == f.tls_verify
                });
                if running {
                    continue;
                }
                if let Err(err) = self.start(
                    key,
                    index,
                    &f.url,
                    f.tls_verify,
                    Origin::Config(f.url.clone()),
                ) {
                    warn!(stream = %key, url = %redact_forward_url(&f.url), "forward not started: {err}");
                }
            }
        }
        ended
    }

    /// A new publisher on stream `index`: its outlet's timeline goes on from where it was.
    fn publisher_changed(&self, index: usize) {
        if let Some(mut slot) = self.slot(index)
            && !slot.sinks.is_empty()
        {
            slot.outlet.restart();
            slot.feed = Feed::new(slot.feed.codec());
        }
    }

    /// The housekeeping, on the current runtime until the event stream closes: on stream
    /// and publisher events and once a second, [`Forwards::housekeep`].
    pub async fn housekeeping(
        self: &Arc<Self>,
        streams: &Directory,
        config: impl Fn() -> Arc<Config>,
    ) {
        // The event bus is read only while forwards may run (configured, or added through
        // the API): with no subscriber an event costs nothing.
        let mut events: Option<broadcast::Receiver<crate::snapshot::Event>> = None;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                e = async {
                    match events.as_mut() {
                        Some(rx) => rx.recv().await,
                        None => std::future::pending().await,
                    }
                } => match e {
                    Ok(e) if e.kind == EventKind::PublisherJoined => {
                        if let Some(i) = streams.get(&e.stream) {
                            self.publisher_changed(i.index);
                        }
                    }
                    Ok(e) if !matches!(e.kind, EventKind::StreamChanged | EventKind::PublisherLeft) => continue,
                    Err(broadcast::error::RecvError::Closed) => return,
                    _ => {}
                },
                _ = tick.tick() => {}
            }
            let cfg = config();
            let configured = cfg.apps.iter().any(|a| !a.forwards.is_empty());
            if !configured && self.entries().is_empty() {
                events = None;
                continue;
            }
            if events.is_none() {
                events = Some(self.stats.snapshots.subscribe());
            }
            let ended = self.housekeep(&streams.list(), &cfg, Instant::now());
            if ended.is_empty() {
                continue;
            }
            // Stopping a forward joins its thread: not on the runtime's own thread (and a
            // blocking thread only when there is one to stop).
            let me = self.clone();
            let _ = tokio::task::spawn_blocking(move || {
                for (key, id, reason) in ended {
                    me.remove(&key, &id, reason);
                }
            })
            .await;
        }
    }
}

impl Outlets for Forwards {
    /// Takes reader `id` off stream `index`'s outlet (and the outlet down with its last
    /// reader).
    fn detach(&self, index: usize, id: u64) {
        if let Some(mut slot) = self.slot(index) {
            slot.sinks.retain(|s| s.id != id);
            if slot.sinks.is_empty() {
                *slot = Slot::default();
            }
        }
        self.set_wanted(index);
    }

    /// An event about `entry`: its JSON as the snapshot.
    fn event(&self, kind: EventKind, entry: &Entry, reason: Option<&'static str>) {
        self.stats
            .snapshots
            .recording(kind, &entry.key, entry.json().to_string(), reason);
    }

    fn ask_keyframe(&self, index: usize) {
        (self.keyframe)(index);
    }

    /// Whether stream `index`'s video can go out in `container`; why not.
    fn codec_ok(&self, index: usize, container: Container) -> Result<(), String> {
        carried(self.stats.video(index).codec, container)
    }
}

impl Subscriber for Forwards {
    fn wanted(&self, stream: usize) -> bool {
        self.stats
            .stream(stream)
            .is_some_and(|c| c.forward_wanted.load(Ordering::Relaxed))
    }

    /// A frame from the stream's publisher.
    fn sample(&self, stream: usize, sample: &Sample) {
        let Some(mut slot) = self.slot(stream) else {
            return;
        };
        if slot.sinks.is_empty() {
            return;
        }
        if slot.slate {
            slot.slate = false;
            slot.outlet.restart();
        }
        let now = now_ms();
        Self::fan_out(&mut slot, |o, out| {
            o.push(&sample_unit(sample), true, now, out)
        });
    }

    /// A ring packet of the stream.
    fn packet(&self, tap: &TapPacket) {
        let codec = self.stats.video(tap.stream).codec;
        let Some(mut slot) = self.slot(tap.stream) else {
            return;
        };
        if slot.sinks.is_empty() {
            return;
        }
        if slot.slate != tap.slate {
            slot.slate = tap.slate;
            slot.outlet.restart();
            slot.feed = Feed::new(codec);
        }
        let now = now_ms();
        if codec == VideoCodec::H265 && tap.pkt.kind == MediaKind::Video {
            let p = &tap.pkt;
            let dts = slot.hevc_ts.extend(p.rtp_ts);
            let damaged = slot.hevc.damaged_frames();
            let au = match slot.hevc.push(p.seq as u16, p.rtp_ts, p.marker, &p.payload) {
                Ok(Some(au)) => Some(au.to_vec()),
                _ => None,
            };
            let lost = slot.hevc.damaged_frames() > damaged;
            self.watch_loss(tap.stream, &mut slot, lost);
            let Some(au) = au else {
                return;
            };
            let key = h265::is_keyframe_au(&au);
            if !Self::passes(&mut slot, key) {
                return;
            }
            Self::fan_out(&mut slot, |o, out| o.push_h265(dts, key, &au, now, out));
            return;
        }
        slot.feed.set_codec(codec);
        let damaged = slot.feed.damaged_frames();
        let mut units = Vec::new();
        slot.feed
            .push_rtp(&tap.pkt, &mut |u| units.push(u.into_owned()));
        if tap.pkt.kind == MediaKind::Video {
            let lost = slot.feed.damaged_frames() > damaged;
            self.watch_loss(tap.stream, &mut slot, lost);
        }
        for u in &units {
            if let Unit::Video { keyframe, .. } = u
                && !Self::passes(&mut slot, *keyframe)
            {
                continue;
            }
            Self::fan_out(&mut slot, |o, out| o.push(u, false, now, out));
        }
    }
}

/// Milliseconds on a monotonic clock (the outlets' arrival times).
fn now_ms() -> i64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::StreamCounters;
    use std::sync::atomic::AtomicUsize;
    use tern_rtc::stream::RingPacket;

    const SPS: &[u8] = &[0x67, 0x42, 0xc0, 0x1f, 0xda, 0x01, 0x40, 0x16, 0xe8];
    const PPS: &[u8] = &[0x68, 0xce, 0x3c, 0x80];

    /// A lost video frame holds the stream's forwards until the next keyframe, which is
    /// asked of the publisher at the loss: the frames between refer to the lost one.
    #[test]
    fn a_lost_frame_holds_the_video_until_the_next_keyframe() {
        let stats = Arc::new(EngineStats {
            streams: vec![StreamCounters::default()],
            ..EngineStats::default()
        });
        let asked = Arc::new(AtomicUsize::new(0));
        let counted = asked.clone();
        let hub = Arc::new(Forwards::new(
            1,
            stats,
            Box::new(move |_| {
                counted.fetch_add(1, Ordering::Relaxed);
            }),
        ));
        let reader = hub.subscribe(0);
        assert_eq!(asked.load(Ordering::Relaxed), 1, "a new reader asks once");
        let pool =
            tern_pool::BufferPool::new(tern_pool::PoolConfig::packets("test")).expect("pool");
        let send = |seq: u64, ts: u32, marker: bool, payload: &[u8]| {
            let mut b = pool.alloc(payload.len());
            b.copy_from_slice(payload);
            hub.packet(&TapPacket {
                stream: 0,
                pkt: RingPacket {
                    kind: MediaKind::Video,
                    layer: 0,
                    seq,
                    rtp_ts: ts,
                    marker,
                    keyframe: false,
                    capture_ntp: 0,
                    payload: b.freeze(),
                },
                slate: false,
            });
        };
        let idr = [0x65, 0x88, 0x84, 0x00];
        let p = [0x41, 0x9a, 0x02, 0x00];
        // A keyframe and a frame; frame 2 (seq 5) is lost whole; frames 3 and 4 refer to
        // it; frame 5 is a keyframe.
        send(0, 0, false, SPS);
        send(1, 0, false, PPS);
        send(2, 0, true, &idr);
        send(3, 3_000, true, &p);
        send(5, 9_000, true, &p);
        send(6, 12_000, true, &p);
        assert_eq!(
            asked.load(Ordering::Relaxed),
            2,
            "the loss asks for a keyframe"
        );
        send(7, 15_000, false, SPS);
        send(8, 15_000, false, PPS);
        send(9, 15_000, true, &idr);
        send(10, 18_000, true, &p);
        let mut video = Vec::new();
        while let Ok(f) = reader.rx.try_recv() {
            if let OutFrame::Video { dts, keyframe, .. } = &*f {
                video.push((*dts, *keyframe));
            }
        }
        let keys: Vec<bool> = video.iter().map(|v| v.1).collect();
        assert_eq!(keys, [true, false, true, false], "{video:?}");
        assert_eq!(
            video[2].0 - video[1].0,
            12_000,
            "frames 2 to 4 left out: {video:?}"
        );
    }
}
