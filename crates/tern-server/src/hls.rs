//! LL-HLS egress: one [`Packager`] per stream, running only while an HLS session reads it.
//!
//! Where the media comes from:
//! - RTMP and SRT publishers: their connection thread hands over the frames as the encoder sent
//!   them ([`Hls::rtmp_sample`]): H264 with its B-frames (fMP4 carries composition
//!   offsets, so nothing is transcoded for HLS) and the AAC untouched.
//! - WHIP publishers and clip sources: the owning app worker copies the stream's ring
//!   packets (a reference count, not the bytes) into a bounded queue while the stream is
//!   wanted ([`crate::media::StreamCounters::hls_wanted`]); the `HlsPackager` thread depacketizes them
//!   (H264 access units, Opus packets) and packages them. The media path never waits on
//!   HLS: a full queue drops the packet and counts it.
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

use crossbeam_channel::Receiver;
use tern_pool::{PoolCounter, shrink_map};
use tern_proto::codec::VideoCodec;
use tern_proto::h264::{self, Depacketizer};
use tern_proto::rtp::Unwrap32;
use tern_rtc::clip::MediaKind;
use tern_rtc::hls::{AudioConfig, HlsConfig, Packager, VideoConfig};
use tern_rtc::rtmp::Sample;
use tokio::sync::watch;
use tracing::{debug, info};

use crate::admission::{Admission, SessionKey};
use crate::config::HlsSection;
use crate::limits::{AddrPermit, LimitReached, PerAddress};
use crate::media::clock::unix_ms;
use crate::media::{EngineStats, HlsTap};

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
    rtp: RtpDemux,
}

/// Access units and Opus packets out of the stream's RTP (WHIP publishers, clip sources).
#[derive(Default)]
struct RtpDemux {
    video: Depacketizer,
    video_ts: Unwrap32,
    audio_ts: Unwrap32,
    audio_set: bool,
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
}

/// LL-HLS for every stream: sessions, packagers, and the thread that feeds them.
pub struct Hls {
    cfg: HlsSection,
    slots: Vec<Slot>,
    sessions: Mutex<HashMap<String, HlsSession>>,
    per_ip: Arc<PerAddress>,
    stats: Arc<EngineStats>,
    /// The `hls_segments` memory line: parts held and free buffers of every packager.
    counter: PoolCounter,
    serial: AtomicU64,
    /// Figures for `/metrics`.
    pub counters: HlsCounters,
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
    /// A hub for `streams` streams (the engine's count, spare slots included).
    pub fn new(
        cfg: &HlsSection,
        streams: usize,
        stats: Arc<EngineStats>,
        exempt: &[tern_rtc::peer_policy::Cidr],
    ) -> Self {
        Hls {
            cfg: cfg.clone(),
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
        }
    }

    /// The `[hls]` settings.
    pub fn settings(&self) -> &HlsSection {
        &self.cfg
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

    fn packager_config(&self) -> HlsConfig {
        HlsConfig {
            part_target: Duration::from_millis(self.cfg.part_target_ms),
            segment_target: Duration::from_millis(self.cfg.segment_target_ms),
            window: self.cfg.window,
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
            if m.len() >= self.cfg.max_sessions {
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
                debug!("HLS packaging of stream {stream} starts");
                Box::new(Packaging {
                    packager: Packager::new(self.packager_config(), self.counter.clone()),
                    sessions: 0,
                    idle_since: None,
                    rtp: RtpDemux::default(),
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

    /// Runs `f` on stream `stream`'s packager, if it is being packaged.
    pub fn with_packager<R>(&self, stream: usize, f: impl FnOnce(&Packager) -> R) -> Option<R> {
        let slot = self.slots.get(stream)?;
        let p = slot.packaging.lock().ok()?;
        p.as_ref().map(|pk| f(&pk.packager))
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
        let before = pk.packager.version();
        f(pk, unix_ms());
        let v = pk.packager.version();
        if v != before {
            slot.version.send_replace(v);
        }
    }

    /// A frame from stream `stream`'s RTMP publisher.
    pub fn rtmp_sample(&self, stream: usize, sample: &Sample) {
        self.feed(stream, |pk, wall| {
            let p = &mut pk.packager;
            match sample {
                Sample::VideoConfig { sps, pps } => p.set_video(VideoConfig::H264 {
                    sps: sps.clone(),
                    pps: pps.clone(),
                }),
                Sample::AudioConfig {
                    asc,
                    sample_rate,
                    channels,
                } => p.set_audio(AudioConfig::Aac {
                    asc: asc.clone(),
                    sample_rate: *sample_rate,
                    channels: *channels,
                }),
                Sample::Video {
                    dts_ms,
                    pts_ms,
                    keyframe,
                    avcc,
                } => p.push_video(dts_ms * 90, pts_ms * 90, *keyframe, avcc, wall),
                Sample::Audio { pts, data } => p.push_audio(*pts, data, wall),
            }
        });
    }

    /// A ring packet of a WHIP or clip stream.
    fn rtp_packet(&self, tap: &HlsTap) {
        let HlsTap { stream, pkt } = tap;
        let stream = *stream;
        if self.stats.video(stream).codec != VideoCodec::H264 && pkt.kind == MediaKind::Video {
            return;
        }
        self.feed(stream, |pk, wall| {
            let d = &mut pk.rtp;
            match pkt.kind {
                MediaKind::Video => {
                    let ts = d.video_ts.extend(pkt.rtp_ts);
                    let before_damaged = d.video.damaged_frames();
                    // Only H264 reaches here (checked above); a malformed payload damages its
                    // access unit, which the depacketizer drops and counts.
                    if let Ok(Some(au)) =
                        d.video
                            .push(pkt.seq as u16, pkt.rtp_ts, pkt.marker, &pkt.payload)
                    {
                        let key = h264::nal_units(au).any(|n| h264::nal_type(n) == h264::NAL_IDR);
                        pk.packager.push_video_annexb(ts, ts, key, au, wall);
                    }
                    let damaged = d.video.damaged_frames() - before_damaged;
                    if damaged > 0 {
                        self.counters
                            .damaged_frames
                            .fetch_add(damaged, Ordering::Relaxed);
                    }
                }
                MediaKind::Audio => {
                    if !d.audio_set {
                        // WebRTC's Opus is always signalled as two channels; a mono encoder's
                        // packets decode as stereo.
                        pk.packager.set_audio(AudioConfig::Opus { channels: 2 });
                        d.audio_set = true;
                    }
                    let ts = d.audio_ts.extend(pkt.rtp_ts);
                    pk.packager.push_audio(ts, &pkt.payload, wall);
                }
            }
        });
    }

    /// Ends sessions idle for `hls.session_timeout_s` (or past their admission's end), and
    /// stops the packaging of streams without a session for as long. `admission` hears of
    /// each ended session.
    pub fn housekeep(&self, now: Instant, admission: &Admission) {
        let idle = Duration::from_secs(self.cfg.session_timeout_s);
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

    /// Starts the `HlsPackager` thread: it packages the ring packets of WHIP and clip
    /// streams, hands each to `also` too (the recorder), and ends when the engine's workers
    /// (the senders) are gone.
    pub fn spawn(
        self: &Arc<Self>,
        rx: Receiver<HlsTap>,
        also: impl Fn(&HlsTap) + Send + 'static,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        let hub = self.clone();
        std::thread::Builder::new()
            .name("HlsPackager".into())
            .spawn(move || {
                while let Ok(t) = rx.recv() {
                    hub.rtp_packet(&t);
                    also(&t);
                }
            })
    }
}
