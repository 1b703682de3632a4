//! Thumbnails: `GET /{app}/{stream}/thumb.jpg[?width=W]`, the stream's latest keyframe as a
//! JPEG.
//!
//! A subscriber of the media tap ([`crate::tap`]), on demand: a stream is tapped for
//! thumbnails while someone asked for one in the last [`WANTED_FOR`]; a request that finds no
//! keyframe kept asks the publisher for one (at most once a second) and waits for it (up to
//! [`FIRST_KEYFRAME_WAIT`]).
//! While tapped, each keyframe is kept (one per stream, bytes as the decoder takes them:
//! H264 and H265 in Annex B with their parameter sets, a VP8 or VP9 frame, an AV1 temporal
//! unit, all rebuilt by the tap's feed as for the packagers); nothing else is stored.
//!
//! A request decodes the kept keyframe only if no request decoded it before: the picture is
//! kept with the keyframe's number, and the JPEGs made from it (one per width asked, a few)
//! with it, so any rate of requests costs at most one decode per keyframe
//! (`tern_thumbnail_decodes_total`). Decodes run on the runtime's blocking threads, one at a
//! time per stream. The `ETag` is the keyframe's number and the width; `Cache-Control`
//! allows the time between the last two keyframes (the GOP), when known.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tern_proto::codec::VideoCodec;
use tern_rtc::av::Sample;
use tern_rtc::hls::VideoConfig;
use tern_rtc::package::{Feed, Unit, VideoFormat};
use tern_rtc::thumbnail::{self, Still};
use tracing::debug;

use crate::media::{EngineStats, TapPacket};
use crate::metrics::{Expose, Exposition};
use crate::tap::Subscriber;

/// A stream stays tapped for thumbnails this long after the last request.
pub const WANTED_FOR: Duration = Duration::from_secs(60);
/// How long the first request of a stream waits for a keyframe.
pub const FIRST_KEYFRAME_WAIT: Duration = Duration::from_secs(5);
/// Largest keyframe kept (bytes): a bigger one is skipped.
const MAX_KEYFRAME: usize = 8 << 20;
/// JPEGs kept per picture (distinct widths asked).
const JPEGS_KEPT: usize = 4;

/// A keyframe as the decoder takes it.
#[derive(Clone)]
struct Key {
    /// Its number: keyframes kept since start, across streams.
    serial: u64,
    codec: VideoCodec,
    data: Arc<[u8]>,
    /// Time since the keyframe before it, if one was seen.
    gop: Option<Duration>,
}

/// A decoded keyframe and the JPEGs made from it.
struct Picture {
    serial: u64,
    still: Arc<Still>,
    jpegs: Vec<(u32, bytes::Bytes)>,
}

/// One stream's state while it is tapped.
#[derive(Default)]
struct State {
    feed: Feed,
    /// H264 parameter sets from a publisher's sequence header (its frames are AVCC).
    config: Option<(Vec<u8>, Vec<u8>)>,
    key: Option<Key>,
    key_at: Option<Instant>,
    picture: Option<Picture>,
}

struct Slot {
    /// When it was last asked for (ms since [`Thumbs::epoch`]), 0 if never.
    asked_ms: AtomicU64,
    /// When its publisher was last asked for a keyframe (ms since [`Thumbs::epoch`]).
    keyframe_asked_ms: AtomicU64,
    state: Mutex<State>,
    /// Wakes requests waiting for a first keyframe.
    keyframe: tokio::sync::Notify,
    /// One decode at a time per stream.
    work: tokio::sync::Mutex<()>,
}

/// A thumbnail, ready to send.
#[derive(Debug, Clone)]
pub struct Thumbnail {
    /// The JPEG.
    pub jpeg: bytes::Bytes,
    /// Its keyframe's number (with the width, the `ETag`).
    pub serial: u64,
    /// Its size.
    pub width: u32,
    /// Its size.
    pub height: u32,
    /// Seconds between the stream's last two keyframes, if known.
    pub gop_s: Option<u64>,
}

/// Why no thumbnail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ThumbError {
    /// No keyframe came in time.
    #[error("no keyframe of the stream arrived within {0:?}; retry")]
    NoKeyframe(Duration),
    /// The keyframe did not decode or encode.
    #[error("{0}")]
    Codec(String),
}

/// Every stream's thumbnail state (see the module doc).
pub struct Thumbs {
    slots: Vec<Slot>,
    stats: Arc<EngineStats>,
    epoch: Instant,
    serial: AtomicU64,
    decodes: AtomicU64,
    encodes: AtomicU64,
    keyframe_request: Box<dyn Fn(usize) + Send + Sync>,
}

impl std::fmt::Debug for Thumbs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Thumbs")
            .field("streams", &self.slots.len())
            .field("decodes", &self.decodes.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Thumbs {
    /// State for `streams` engine streams; `keyframe_request(i)` asks stream `i`'s publisher
    /// for a keyframe.
    pub fn new(
        streams: usize,
        stats: Arc<EngineStats>,
        keyframe_request: Box<dyn Fn(usize) + Send + Sync>,
    ) -> Thumbs {
        Thumbs {
            slots: (0..streams)
                .map(|_| Slot {
                    asked_ms: AtomicU64::new(0),
                    keyframe_asked_ms: AtomicU64::new(0),
                    state: Mutex::new(State::default()),
                    keyframe: tokio::sync::Notify::new(),
                    work: tokio::sync::Mutex::new(()),
                })
                .collect(),
            stats,
            epoch: Instant::now(),
            serial: AtomicU64::new(0),
            decodes: AtomicU64::new(0),
            encodes: AtomicU64::new(0),
            keyframe_request,
        }
    }

    fn now_ms(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.epoch).as_millis())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// Keyframes decoded so far.
    pub fn decodes(&self) -> u64 {
        self.decodes.load(Ordering::Relaxed)
    }

    /// Stream `stream`'s thumbnail, `width` wide (its own width when `None`): taps the
    /// stream if it was not, waits for a keyframe if none is kept, decodes it if no
    /// request did. The caller checked that the stream is live.
    pub async fn get(&self, stream: usize, width: Option<u32>) -> Result<Thumbnail, ThumbError> {
        let Some(slot) = self.slots.get(stream) else {
            return Err(ThumbError::NoKeyframe(Duration::ZERO));
        };
        let now_ms = self.now_ms(Instant::now());
        slot.asked_ms.store(now_ms, Ordering::Relaxed);
        if let Some(c) = self.stats.stream(stream) {
            c.thumb_wanted.store(true, Ordering::Relaxed);
        }
        let key = match self.key(slot) {
            Some(k) => k,
            None => {
                // The publisher is asked while none came, at most once a second (a
                // request it missed, or one sent before the tap took its packets, is
                // asked again by the next thumbnail request).
                let asked = slot.keyframe_asked_ms.load(Ordering::Relaxed);
                if asked == 0 || now_ms.saturating_sub(asked) >= 1000 {
                    slot.keyframe_asked_ms
                        .store(now_ms.max(1), Ordering::Relaxed);
                    (self.keyframe_request)(stream);
                }
                let waited = tokio::time::timeout(FIRST_KEYFRAME_WAIT, async {
                    loop {
                        let notified = slot.keyframe.notified();
                        if let Some(k) = self.key(slot) {
                            return k;
                        }
                        notified.await;
                    }
                })
                .await;
                waited.map_err(|_| ThumbError::NoKeyframe(FIRST_KEYFRAME_WAIT))?
            }
        };
        let gop_s = key.gop.map(|g| g.as_secs().max(1));
        // One decode per keyframe: the first request in does it, the others wait and find
        // its result.
        let _turn = slot.work.lock().await;
        let (still, cached) = {
            let st = slot.state.lock().unwrap_or_else(PoisonError::into_inner);
            match &st.picture {
                Some(p) if p.serial == key.serial => {
                    let (w, _) = p.still.size_for(width);
                    (
                        Some(p.still.clone()),
                        p.jpegs
                            .iter()
                            .find(|(jw, _)| *jw == w)
                            .map(|(_, j)| j.clone()),
                    )
                }
                _ => (None, None),
            }
        };
        if let (Some(still), Some(jpeg)) = (&still, cached) {
            let (w, h) = still.size_for(width);
            return Ok(Thumbnail {
                jpeg,
                serial: key.serial,
                width: w,
                height: h,
                gop_s,
            });
        }
        let decoded = still.is_none();
        let data = key.data.clone();
        let codec = key.codec;
        let made = tokio::task::spawn_blocking(move || {
            let still = match still {
                Some(s) => s,
                None => Arc::new(thumbnail::decode(codec, &data).map_err(|e| e.to_string())?),
            };
            let jpeg = still.jpeg(width).map_err(|e| e.to_string())?;
            Ok::<_, String>((still, bytes::Bytes::from(jpeg)))
        })
        .await
        .map_err(|e| ThumbError::Codec(format!("thumbnail task: {e}")))?;
        if decoded {
            self.decodes.fetch_add(1, Ordering::Relaxed);
        }
        let (still, jpeg) = made.map_err(ThumbError::Codec)?;
        self.encodes.fetch_add(1, Ordering::Relaxed);
        let (w, h) = still.size_for(width);
        {
            let mut st = slot.state.lock().unwrap_or_else(PoisonError::into_inner);
            let pic = match &mut st.picture {
                Some(p) if p.serial == key.serial => p,
                p => p.insert(Picture {
                    serial: key.serial,
                    still,
                    jpegs: Vec::new(),
                }),
            };
            if pic.jpegs.len() >= JPEGS_KEPT {
                pic.jpegs.remove(0);
            }
            pic.jpegs.push((w, jpeg.clone()));
        }
        Ok(Thumbnail {
            jpeg,
            serial: key.serial,
            width: w,
            height: h,
            gop_s,
        })
    }

    fn key(&self, slot: &Slot) -> Option<Key> {
        slot.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .key
            .clone()
    }

    /// Once a second: streams not asked for in [`WANTED_FOR`] are no longer tapped, and
    /// their keyframe, picture and depacketizer go.
    pub fn housekeep(&self, now: Instant) {
        let now_ms = self.now_ms(now);
        for (i, slot) in self.slots.iter().enumerate() {
            let asked = slot.asked_ms.load(Ordering::Relaxed);
            if asked == 0 || now_ms.saturating_sub(asked) < WANTED_FOR.as_millis() as u64 {
                continue;
            }
            slot.asked_ms.store(0, Ordering::Relaxed);
            if let Some(c) = self.stats.stream(i) {
                c.thumb_wanted.store(false, Ordering::Relaxed);
            }
            *slot.state.lock().unwrap_or_else(PoisonError::into_inner) = State::default();
            debug!("thumbnails of stream {i} no longer asked for: untapped");
        }
    }

    /// A unit of stream `stream`: parameter sets are noted, keyframes kept.
    fn unit(&self, slot: &Slot, st: &mut State, unit: Unit<'_>, codec: VideoCodec) {
        match unit {
            Unit::VideoConfig(VideoConfig::H264 { sps, pps }) => st.config = Some((sps, pps)),
            Unit::Video {
                keyframe: true,
                format,
                data,
                ..
            } => {
                let bytes: Vec<u8> = match format {
                    VideoFormat::Avcc => match avcc_to_annex_b(&data, st.config.as_ref()) {
                        Some(b) => b,
                        None => return,
                    },
                    VideoFormat::AnnexB
                    | VideoFormat::H265
                    | VideoFormat::Vp8
                    | VideoFormat::Vp9
                    | VideoFormat::Av1 => data.into_owned(),
                };
                self.keep(slot, st, bytes, codec);
            }
            _ => {}
        }
    }

    /// Keeps `bytes`, a keyframe of `codec` as the decoder takes it, as the stream's latest
    /// (one too large is skipped) and wakes the requests waiting for one.
    fn keep(&self, slot: &Slot, st: &mut State, bytes: Vec<u8>, codec: VideoCodec) {
        if bytes.len() > MAX_KEYFRAME {
            return;
        }
        let now = Instant::now();
        let gop = st.key_at.map(|t| now.saturating_duration_since(t));
        st.key_at = Some(now);
        st.key = Some(Key {
            serial: self.serial.fetch_add(1, Ordering::Relaxed) + 1,
            codec,
            data: bytes.into(),
            gop,
        });
        slot.keyframe.notify_waiters();
    }
}

/// An AVCC frame (4-byte lengths) as Annex B, the parameter sets first; `None` when
/// malformed or when no parameter sets are known.
fn avcc_to_annex_b(avcc: &[u8], config: Option<&(Vec<u8>, Vec<u8>)>) -> Option<Vec<u8>> {
    let (sps, pps) = config?;
    let mut out = Vec::with_capacity(avcc.len() + sps.len() + pps.len() + 16);
    for nal in [sps.as_slice(), pps.as_slice()] {
        out.extend_from_slice(&[0, 0, 0, 1]);
        out.extend_from_slice(nal);
    }
    let mut rest = avcc;
    while !rest.is_empty() {
        let len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
        let nal = rest.get(4..4 + len)?;
        out.extend_from_slice(&[0, 0, 0, 1]);
        out.extend_from_slice(nal);
        rest = &rest[4 + len..];
    }
    Some(out)
}

impl Subscriber for Thumbs {
    fn wanted(&self, stream: usize) -> bool {
        self.stats
            .stream(stream)
            .is_some_and(|c| c.thumb_wanted.load(Ordering::Relaxed))
    }

    fn packet(&self, tap: &TapPacket) {
        let Some(slot) = self.slots.get(tap.stream) else {
            return;
        };
        let codec = self.stats.video(tap.stream).codec;
        let mut st = slot.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.feed.set_codec(codec);
        let mut keys = Vec::new();
        st.feed.push_rtp(&tap.pkt, &mut |u| {
            if matches!(u, Unit::Video { keyframe: true, .. }) {
                keys.push(u.into_owned());
            }
        });
        for u in keys {
            self.unit(slot, &mut st, u, codec);
        }
    }

    fn sample(&self, stream: usize, sample: &Sample) {
        let Some(slot) = self.slots.get(stream) else {
            return;
        };
        let unit = tern_rtc::package::sample_unit(sample);
        if !matches!(
            unit,
            Unit::VideoConfig(_) | Unit::Video { keyframe: true, .. }
        ) {
            return;
        }
        let mut st = slot.state.lock().unwrap_or_else(PoisonError::into_inner);
        self.unit(slot, &mut st, unit, VideoCodec::H264);
    }
}

impl Expose for Thumbs {
    fn write_metrics(&self, o: &mut Exposition) {
        o.counter(
            "tern_thumbnail_decodes_total",
            "Keyframes decoded for thumbnails (at most one per keyframe).",
            self.decodes.load(Ordering::Relaxed),
        );
        o.counter(
            "tern_thumbnail_encodes_total",
            "JPEGs made for thumbnails (one per keyframe and width asked).",
            self.encodes.load(Ordering::Relaxed),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn avcc_frames_become_annex_b_with_their_parameter_sets() {
        let config = (vec![0x67, 1, 2], vec![0x68, 3]);
        let avcc = [0, 0, 0, 2, 0x65, 9, 0, 0, 0, 1, 0x06];
        let out = avcc_to_annex_b(&avcc, Some(&config)).expect("converts");
        assert_eq!(
            out,
            [
                0, 0, 0, 1, 0x67, 1, 2, 0, 0, 0, 1, 0x68, 3, 0, 0, 0, 1, 0x65, 9, 0, 0, 0, 1, 0x06
            ]
        );
        assert!(avcc_to_annex_b(&avcc, None).is_none(), "no parameter sets");
        assert!(
            avcc_to_annex_b(&[0, 0, 0, 9, 0x65], Some(&config)).is_none(),
            "a length past the end"
        );
    }
}
