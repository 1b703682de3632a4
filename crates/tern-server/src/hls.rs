//! LL-HLS egress: one [`Packager`] per stream, running only while an HLS session reads it.
//!
//! The media comes through the media tap ([`crate::tap`]), of which [`Hls`] is a
//! subscriber while a stream is wanted ([`crate::media::StreamCounters::hls_wanted`]):
//! frames as the encoder sent them from RTMP, SRT and RTSP-H264 publishers (H264 with its
//! B-frames: fMP4 carries composition offsets, so nothing is transcoded for HLS; AAC
//! untouched), ring packets of every other stream, which each packaging's
//! [`tern_rtc::package::Feed`] depacketizes. It stores the codecs of
//! the codecs table ([`tern_rtc::codecs`]), as recordings do.
//!
//! Sessions: a player's first `index.m3u8` goes through admission and gets a session
//! token that every URI it is given carries; a session ends after `hls.session_timeout_s`
//! without a request, and a stream's packaging stops (its segments freed) when its last
//! session has been gone that long too.
//!
//! The HTTP side ([`crate::http`]'s `hls` module) reads packagers under their lock and
//! waits for new parts on a watch channel per stream.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tern_pool::{PoolCounter, shrink_map};
use tern_proto::codec::MediaKind;
use tern_rtc::av::Sample;
use tern_rtc::hls::{AWAIT_AUDIO, HlsConfig, Packager};
use tern_rtc::package::Feed;
use tokio::sync::watch;
use tracing::{debug, info};

use crate::admission::{Admission, SessionKey};
use crate::clock::unix_ms;
use crate::config::HlsSection;
use crate::limits::{AddrPermit, LimitReached, PerAddress};
use crate::media::{EngineStats, TapPacket};
use crate::tap::Subscriber;

mod ladder;

use ladder::Ladder;

/// The "layer" of a ladder's audio rendition in [`Hls::with_packager`] (video layers are
/// 0 to 7).
pub(crate) const AUDIO_LAYER: u8 = u8::MAX;

/// A player's session: admitted once, named by the token in its URIs.
#[derive(Debug)]
struct HlsSession {
    stream: usize,
    /// Admission's key for the close notification.
    serial: u64,
    last: Instant,
    /// The end the admission set (JWT expiry, webhook lifetime), if any.
    until: Option<Instant>,
    _permit: AddrPermit,
}

/// One stream's packaging.
struct Packaging {
    packager: Packager,
    /// Sessions reading it.
    sessions: usize,
    /// Since when it has had none.
    idle_since: Option<Instant>,
    /// Units out of the stream's ring packets or its publisher's frames.
    feed: Feed,
    /// Whether the last media was the stream's slate (`[[app]] fallback`): a switch either
    /// way starts a new feed, so that the packager is told the other side's configuration
    /// (a new init segment and `EXT-X-DISCONTINUITY` where it differs).
    slate: bool,
    /// The lower video layers' variants (simulcast layers, renditions).
    ladder: Ladder,
    /// When (unix ms) keyframes were last asked for, and how often they may be.
    asked_ms: u64,
    ask_every_ms: u64,
}

impl Packaging {
    /// Layer `layer`'s packager (0: the top; [`AUDIO_LAYER`]: the audio rendition), once
    /// it exists.
    fn packager(&self, layer: u8) -> Option<&Packager> {
        match layer {
            0 => Some(&self.packager),
            AUDIO_LAYER => self.ladder.audio(),
            l => self.ladder.packager(l),
        }
    }

    /// Moves when any variant completes a part.
    fn version(&self) -> u64 {
        self.packager.version().wrapping_add(self.ladder.version())
    }
}

/// A stream's place in the hub.
struct Slot {
    packaging: Mutex<Option<Box<Packaging>>>,
    /// The packager's [`Packager::version`], published after every push that completed a
    /// part: blocked playlist and part requests wait on it.
    version: watch::Sender<u64>,
}

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// `hls.max_sessions` are open.
    #[error("{0} HLS sessions are open (hls.max_sessions)")]
    Full(usize),
    /// The client address holds `hls.sessions_per_ip`.
    #[error(transparent)]
    PerAddress(#[from] LimitReached),
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct HlsCounters {
    /// Sessions opened, ever.
    pub sessions_opened: AtomicU64,
    /// Playlist responses.
    pub playlists: AtomicU64,
    /// Part, segment and init responses.
    pub media: AtomicU64,
    /// Bytes of parts, segments and init segments sent.
    pub media_bytes: AtomicU64,
    /// Access units the RTP demuxer could not rebuild (loss, a full tap queue).
    pub damaged_frames: AtomicU64,
    /// Video frames left out: their codec is not packaged
    /// (the codecs table ([`tern_rtc::codecs`])).
    pub skipped_frames: AtomicU64,
}

/// LL-HLS for every stream: sessions, packagers, and the thread that feeds them.
pub struct Hls {
    /// `[hls]`: a reload may replace it ([`Hls::set_settings`]).
    cfg: std::sync::RwLock<HlsSection>,
    slots: Vec<Slot>,
    sessions: Mutex<HashMap<String, HlsSession>>,
    per_ip: Arc<PerAddress>,
    stats: Arc<EngineStats>,
    /// The `hls_segments` memory line: parts held and free buffers of every packager, and
    /// the video a packager holds for its first segment's audio.
    counter: PoolCounter,
    serial: AtomicU64,
    /// Figures for `/metrics`.
    pub counters: HlsCounters,
    /// Asks stream `i`'s publisher for a keyframe on every video layer.
    keyframes: Box<dyn Fn(usize) + Send + Sync>,
}

impl std::fmt::Debug for Hls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hls")
            .field("streams", &self.slots.len())
            .field("sessions", &self.session_count())
            .finish()
    }
}

impl Hls {
    /// A hub for `streams` streams (the engine's count, spare slots included);
    /// `keyframes(i)` asks stream `i`'s publisher for a keyframe on every layer (segments
    /// start at one, and a WebRTC encoder sends them only when asked).
    pub fn new(
        cfg: &HlsSection,
        streams: usize,
        stats: Arc<EngineStats>,
        exempt: &[tern_rtc::peer_policy::Cidr],
        keyframes: Box<dyn Fn(usize) + Send + Sync>,
    ) -> Self {
        Hls {
            cfg: std::sync::RwLock::new(cfg.clone()),
            slots: (0..streams)
                .map(|_| Slot {
                    packaging: Mutex::new(None),
                    version: watch::Sender::new(0),
                })
                .collect(),
            sessions: Mutex::new(HashMap::new()),
            per_ip: PerAddress::new("HLS sessions", cfg.sessions_per_ip, exempt),
            stats,
            counter: PoolCounter::new("hls_segments", 0),
            serial: AtomicU64::new(0),
            counters: HlsCounters::default(),
            keyframes,
        }
    }

    /// The `[hls]` settings in force.
    pub fn settings(&self) -> HlsSection {
        self.cfg.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A reload's `[hls]`: packaging started from now on takes its part and segment targets
    /// and window, sessions its limits and timeout (what is packaging keeps its timing).
    pub fn set_settings(&self, cfg: &HlsSection) {
        *self.cfg.write().unwrap_or_else(|e| e.into_inner()) = cfg.clone();
    }

    /// The per-address limiter of sessions (`hls.sessions_per_ip`).
    pub fn per_ip(&self) -> &Arc<PerAddress> {
        &self.per_ip
    }

    /// Open sessions.
    pub fn session_count(&self) -> usize {
        self.sessions.lock().map_or(0, |m| m.len())
    }

    /// Streams being packaged.
    pub fn packaging_count(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.packaging.lock().is_ok_and(|p| p.is_some()))
            .count()
    }

    /// Refusals by the per-address limit.
    pub fn refused_per_ip(&self) -> u64 {
        self.per_ip.refused()
    }

    /// The packagers' timing: a ladder's (`ladder`) cuts shorter segments and keeps more
    /// of them (`hls.ladder_segment_target_ms`).
    fn packager_config(&self, ladder: bool) -> HlsConfig {
        let cfg = self.settings();
        let (segment_ms, window) = match ladder {
            true => (cfg.ladder_segment_target_ms, cfg.ladder_window()),
            false => (cfg.segment_target_ms, cfg.window),
        };
        HlsConfig {
            part_target: Duration::from_millis(cfg.part_target_ms),
            segment_target: Duration::from_millis(segment_ms),
            window,
            ..HlsConfig::default()
        }
    }

    /// An admitted player of stream `stream` from `ip`: session `token`, and the stream's
    /// packaging started if it was not running. `until`: when admission ends it. Returns
    /// the admission key to report the session's end under.
    pub fn open(
        &self,
        token: String,
        stream: usize,
        ip: IpAddr,
        until: Option<Instant>,
        now: Instant,
    ) -> Result<SessionKey, OpenError> {
        let permit = self.per_ip.acquire(ip)?;
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        {
            let Ok(mut m) = self.sessions.lock() else {
                return Err(OpenError::Full(0));
            };
            if m.len() >= self.settings().max_sessions {
                return Err(OpenError::Full(m.len()));
            }
            m.insert(
                token,
                HlsSession {
                    stream,
                    serial,
                    last: now,
                    until,
                    _permit: permit,
                },
            );
        }
        self.counters
            .sessions_opened
            .fetch_add(1, Ordering::Relaxed);
        if let Some(slot) = self.slots.get(stream)
            && let Ok(mut p) = slot.packaging.lock()
        {
            let pk = p.get_or_insert_with(|| {
                // A stream with several layers is a ladder: its audio is a rendition of its
                // own rather than a copy in every variant.
                let audio_apart = self.stats.rids(stream).len() > 1;
                debug!("HLS packaging of stream {stream} starts (audio apart: {audio_apart})");
                let config = self.packager_config(audio_apart);
                let ask_every_ms = (config.segment_target.as_millis() as u64 / 2).max(250);
                let mut packager = Packager::new(config.clone(), self.counter.clone());
                if audio_apart {
                    packager.audio_apart();
                } else {
                    packager.await_audio(AWAIT_AUDIO);
                }
                Box::new(Packaging {
                    asked_ms: 0,
                    ask_every_ms,
                    packager,
                    sessions: 0,
                    idle_since: None,
                    feed: Feed::default(),
                    slate: false,
                    ladder: Ladder::new(config, self.counter.clone(), audio_apart),
                })
            });
            pk.sessions += 1;
            pk.idle_since = None;
        }
        if let Some(w) = self.stats.stream(stream).map(|c| &c.hls_wanted) {
            w.store(true, Ordering::Relaxed);
        }
        Ok(SessionKey::Hls(serial))
    }

    /// The stream of session `token` if it is open (and notes the request).
    pub fn touch(&self, token: &str, now: Instant) -> Option<usize> {
        let mut m = self.sessions.lock().ok()?;
        let s = m.get_mut(token)?;
        if s.until.is_some_and(|u| now >= u) {
            return None;
        }
        s.last = now;
        Some(s.stream)
    }

    /// Runs `f` on the packager of stream `stream`'s video layer `layer` (0: the top;
    /// [`AUDIO_LAYER`]: the audio rendition of a ladder), if it is being packaged.
    pub fn with_packager<R>(
        &self,
        stream: usize,
        layer: u8,
        f: impl FnOnce(&Packager) -> R,
    ) -> Option<R> {
        let slot = self.slots.get(stream)?;
        let p = slot.packaging.lock().ok()?;
        p.as_ref().and_then(|pk| pk.packager(layer)).map(f)
    }

    /// A receiver of stream `stream`'s packager version (new parts).
    pub fn subscribe(&self, stream: usize) -> Option<watch::Receiver<u64>> {
        self.slots.get(stream).map(|s| s.version.subscribe())
    }

    /// Whether stream `stream` is being packaged (an RTMP connection then emits samples).
    pub fn wanted(&self, stream: usize) -> bool {
        self.stats
            .stream(stream)
            .is_some_and(|c| c.hls_wanted.load(Ordering::Relaxed))
    }

    fn lock(&self, stream: usize) -> Option<(MutexGuard<'_, Option<Box<Packaging>>>, &Slot)> {
        let slot = self.slots.get(stream)?;
        Some((slot.packaging.lock().ok()?, slot))
    }

    /// Runs `f` on stream `stream`'s packaging, if it runs, and wakes the requests waiting
    /// on the stream when `f` completed a part.
    fn feed(&self, stream: usize, f: impl FnOnce(&mut Packaging, u64)) {
        let Some((mut g, slot)) = self.lock(stream) else {
            return;
        };
        let Some(pk) = g.as_mut() else {
            return;
        };
        let before = pk.version();
        let wall = unix_ms();
        f(pk, wall);
        let v = pk.version();
        if v != before {
            slot.version.send_replace(v);
        }
        // A segment due to end, or a variant waiting to start: a keyframe on every layer
        // (a frame publisher's renditions make theirs where the source has one).
        // A frame publisher's keyframes cannot be asked for (its encoder places them; its
        // renditions follow them).
        let wants =
            !pk.ladder.frames && (pk.packager.wants_keyframe() || pk.ladder.wants_keyframe(wall));
        if wants && wall.saturating_sub(pk.asked_ms) >= pk.ask_every_ms {
            pk.asked_ms = wall;
            drop(g);
            (self.keyframes)(stream);
        }
    }

    /// Ends sessions idle for `hls.session_timeout_s` (or past their admission's end), and
    /// stops the packaging of streams without a session for as long. `admission` hears of
    /// each ended session.
    pub fn housekeep(&self, now: Instant, admission: &Admission) {
        let idle = Duration::from_secs(self.settings().session_timeout_s);
        let mut ended = Vec::new();
        if let Ok(mut m) = self.sessions.lock() {
            m.retain(|_, s| {
                let expired = s.until.is_some_and(|u| now >= u);
                let keep = !expired && now.saturating_duration_since(s.last) < idle;
                if !keep {
                    ended.push((s.stream, s.serial, expired));
                }
                keep
            });
            shrink_map(&mut m);
        }
        for (stream, serial, expired) in ended {
            admission.ended(
                SessionKey::Hls(serial),
                if expired { "lifetime" } else { "idle" },
            );
            if let Some((mut g, _)) = self.lock(stream)
                && let Some(pk) = g.as_mut()
            {
                pk.sessions = pk.sessions.saturating_sub(1);
                if pk.sessions == 0 {
                    pk.idle_since = Some(now);
                }
            }
        }
        for (i, slot) in self.slots.iter().enumerate() {
            let Ok(mut g) = slot.packaging.lock() else {
                continue;
            };
            let stop = g.as_ref().is_some_and(|pk| {
                pk.idle_since
                    .is_some_and(|t| now.saturating_duration_since(t) >= idle)
            });
            if stop {
                *g = None;
                if let Some(w) = self.stats.stream(i).map(|c| &c.hls_wanted) {
                    w.store(false, Ordering::Relaxed);
                }
                info!("HLS packaging of stream {i} stopped: no session for {idle:?}");
            }
        }
    }
}

impl Subscriber for Hls {
    fn wanted(&self, stream: usize) -> bool {
        Hls::wanted(self, stream)
    }

    /// Lower video layers too: each is a variant of the stream's LL-HLS.
    fn takes_layers(&self) -> bool {
        true
    }

    /// A frame from the stream's publisher (its top layer).
    fn sample(&self, stream: usize, sample: &Sample) {
        self.feed(stream, |pk, wall| {
            if pk.slate {
                pk.slate = false;
                pk.feed = Feed::new(pk.feed.codec());
                pk.ladder.clear();
            }
            pk.ladder.frames = true;
            let Packaging {
                packager, ladder, ..
            } = pk;
            pk.feed.push_sample(sample, &mut |u| {
                u.apply(packager, wall);
                ladder.top_unit(packager, &u, wall);
            });
            pk.ladder.release(&pk.packager, wall);
        });
    }

    /// A ring packet of the stream.
    fn packet(&self, tap: &TapPacket) {
        let codec = self.stats.video(tap.stream).codec;
        self.feed(tap.stream, |pk, wall| {
            if pk.slate != tap.slate {
                pk.slate = tap.slate;
                pk.feed = Feed::new(codec);
                pk.ladder.clear();
            }
            if tap.pkt.kind == MediaKind::Video && tap.pkt.layer == 0 {
                // The top comes from the ring: not a frame publisher's (any more).
                pk.ladder.frames = false;
            }
            if tap.pkt.layer != 0 {
                let offset = self
                    .stats
                    .stream(tap.stream)
                    .map_or(0, |c| c.frame_ts_offset.load(Ordering::Relaxed));
                pk.ladder
                    .lower_packet(&pk.packager, &tap.pkt, codec, offset, wall);
                pk.ladder.release(&pk.packager, wall);
                return;
            }
            pk.feed.set_codec(codec);
            let (damaged, skipped) = (pk.feed.damaged_frames(), pk.feed.skipped_frames());
            let Packaging {
                packager, ladder, ..
            } = pk;
            pk.feed.push_rtp(&tap.pkt, &mut |u| {
                u.apply(packager, wall);
                ladder.top_unit(packager, &u, wall);
            });
            pk.ladder.release(&pk.packager, wall);
            let damaged = pk.feed.damaged_frames() - damaged;
            if damaged > 0 {
                self.counters
                    .damaged_frames
                    .fetch_add(damaged, Ordering::Relaxed);
            }
            let skipped = pk.feed.skipped_frames() - skipped;
            if skipped > 0 {
                self.counters
                    .skipped_frames
                    .fetch_add(skipped, Ordering::Relaxed);
            }
        });
    }
}
