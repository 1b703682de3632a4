//! Renditions of a WHIP publisher that sends one video layer (`[[app]] renditions`), made
//! as a frame publisher's are ([`tern_rtc::renditions`]) but fed from the media tap.
//!
//! - The publisher is added with its layers announced ([`WhipLayers`]: `h`, then each
//!   rendition's RID), and the engine hands its top layer's ring packets to the media tap
//!   (`renditions_wanted`) for as long as it publishes.
//! - On the tap's thread this subscriber rebuilds H264 access units from them
//!   ([`tern_rtc::package::Feed`]) and queues each for the stream's renditions thread
//!   (`WhipRendition`), never waiting. That thread decodes, scales and hands the pictures
//!   to the renditions' encoder threads (`RtmpRendition`). Decoding takes milliseconds a
//!   frame, which on the tap's thread would hold up every packager behind it.
//! - The encoders' packets go to the engine as the publisher's layers 1 and up, through the
//!   door a frame publisher's use ([`FrameCommand::Media`]), and are mapped onto the
//!   stream's timeline as simulcast layers are.
//! - A source keyframe makes an IDR in every rendition, so LL-HLS variants cut at the same
//!   times. A viewer's keyframe request for layer `l` > 0 reaches the encoder of `l` (the
//!   engine sets its bit); one for layer 0 goes to the browser as a PLI.
//! - A full queue or a damaged frame drops frames up to the next keyframe, which is asked
//!   of the publisher (at most once a second): the renditions freeze briefly, never decode
//!   garbage or fall behind.
//! - The renditions stop when the publisher leaves: the thread sees the flag down and
//!   nothing queued, ends, and reports what each rendition did.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tern_proto::codec::{MediaKind, VideoCodec};
use tern_rtc::av::{Sample, ntp_of};
use tern_rtc::package::{Feed, Unit, VideoFormat};
use tern_rtc::publisher::Publisher;
use tern_rtc::renditions::{RenditionSpec, Renditions, SourceFrame};
use tracing::{info, warn};

use super::renditions::rendition_sink;
use crate::config::AppConfig;
use crate::media::{EngineHandle, EngineStats, PublisherId, TapPacket, WhipLayers};
use crate::tap::Subscriber;

/// Source frames waiting for a stream's renditions thread at most (a quarter of a second
/// at 30 fps): beyond, frames are dropped up to the next keyframe.
const QUEUE_FRAMES: usize = 8;

/// How often the publisher is asked for a keyframe at most, while frames wait for one.
const ASK_EVERY: Duration = Duration::from_secs(1);

/// How long the renditions thread waits for a frame before it looks whether the
/// publisher left.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// One source frame for the renditions thread.
struct Frame {
    pts_ms: i64,
    keyframe: bool,
    annex_b: Vec<u8>,
    /// Capture time (64-bit NTP) of its first packet.
    capture_ntp: u64,
}

/// One stream's renditions, as the tap's thread sees them.
struct Seat {
    id: PublisherId,
    depack: Feed,
    frames: SyncSender<Frame>,
    /// Frames are dropped until a keyframe (at the start, after a full queue or a damaged
    /// frame).
    wait_key: bool,
    /// When the publisher was last asked for a keyframe.
    asked: Option<Instant>,
    /// The RTP timestamp and capture time (its first packet's) of the frame being rebuilt.
    frame: Option<(u32, u64)>,
}

/// The renditions of every WHIP publisher that sends one video layer: a media tap
/// [`Subscriber`] (see the [module](self)).
pub struct WhipRenditions {
    engine: EngineHandle,
    stats: Arc<EngineStats>,
    max_payload: usize,
    seats: Mutex<Vec<Option<Seat>>>,
    /// Asks stream `i`'s publisher for a keyframe of its top layer.
    keyframes: Box<dyn Fn(usize) + Send + Sync>,
}

impl std::fmt::Debug for WhipRenditions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WhipRenditions").finish_non_exhaustive()
    }
}

impl WhipRenditions {
    /// The subscriber for `engine`'s streams; `max_payload` caps the renditions' RTP
    /// payloads; `keyframes` asks stream `i`'s publisher for a keyframe.
    pub fn new(
        engine: EngineHandle,
        max_payload: usize,
        keyframes: Box<dyn Fn(usize) + Send + Sync>,
    ) -> WhipRenditions {
        let stats = engine.stats.clone();
        let seats = (0..stats.streams.len()).map(|_| None).collect();
        WhipRenditions {
            engine,
            stats,
            max_payload,
            seats: Mutex::new(seats),
            keyframes,
        }
    }

    /// The layers to announce for WHIP publisher `p` of stream `key` in `app`: `None` when
    /// the app makes no renditions, or the publisher sends no video, simulcast layers of its
    /// own or video other than H264 (which the renditions decode), or libavcodec here cannot
    /// make them (said in the log).
    pub fn layers(app: &AppConfig, p: &Publisher, key: &str) -> Option<WhipLayers> {
        let one_h264 = p.has_video() && p.rids().len() <= 1 && p.video_codec() == VideoCodec::H264;
        let rids = app.layer_rids();
        if rids.is_empty() || !one_h264 {
            return None;
        }
        if let Err(e) = Renditions::available() {
            warn!("{key}: no renditions: {e}; the source layer goes on alone");
            return None;
        }
        Some(WhipLayers {
            rids,
            keyframe: Arc::new(AtomicU8::new(0)),
        })
    }

    /// Starts the renditions of publisher `id` (stream `key`), just added with `layers`:
    /// a thread that makes `specs` from the frames the tap will bring. A previous
    /// publisher's on the stream stop (their queue closes). An encoder that cannot open
    /// stops its layer alone, as an RTMP publisher's does.
    pub fn start(&self, id: PublisherId, key: &str, specs: &[RenditionSpec], layers: &WhipLayers) {
        if let Ok(mut seats) = self.seats.lock()
            && let Some(s) = seats.get_mut(id.stream)
        {
            *s = None;
        }
        let sink = rendition_sink(self.engine.clone(), id, key.to_string());
        let (tx, rx) = sync_channel(QUEUE_FRAMES);
        let (stats, stream) = (self.stats.clone(), id.stream);
        let keyframe = layers.keyframe.clone();
        let (specs, max_payload, name) = (specs.to_vec(), self.max_payload, key.to_string());
        // The decoder and scalers are made on the thread that uses them.
        let spawned = std::thread::Builder::new()
            .name("WhipRendition".into())
            .spawn(move || match Renditions::new(&specs, max_payload, sink) {
                Ok(r) => run(r, &rx, &keyframe, &stats, stream),
                Err(e) => warn!("{name}: no renditions: {e}; the source layer goes on alone"),
            });
        if let Err(e) = spawned {
            warn!("{key}: no renditions: thread: {e}");
            return;
        }
        info!("{key}: renditions of the WHIP publisher's video start");
        let seat = Seat {
            id,
            depack: Feed::new(VideoCodec::H264),
            frames: tx,
            wait_key: true,
            asked: None,
            frame: None,
        };
        if let Ok(mut seats) = self.seats.lock()
            && let Some(s) = seats.get_mut(stream)
        {
            *s = Some(seat);
        }
        (self.keyframes)(stream);
    }
}

/// The renditions thread: frames in until the queue closes (a new publisher's renditions
/// took the stream) or the publisher left and nothing came for [`IDLE_CHECK`].
fn run(
    mut renditions: Renditions,
    frames: &Receiver<Frame>,
    keyframe: &AtomicU8,
    stats: &EngineStats,
    stream: usize,
) {
    loop {
        let frame = match frames.recv_timeout(IDLE_CHECK) {
            Ok(f) => f,
            Err(RecvTimeoutError::Timeout) => {
                let on = stats
                    .stream(stream)
                    .is_some_and(|c| c.renditions_wanted.load(Ordering::Relaxed));
                if on {
                    continue;
                }
                break;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let asked = keyframe.swap(0, Ordering::Relaxed);
        for layer in (1..8u8).filter(|l| asked & (1 << l) != 0) {
            renditions.request_idr(layer);
        }
        // A picture's capture time: the frame's, moved by the pts difference (decoders
        // hand pictures out in presentation order).
        let (base_ms, base_ntp) = (frame.pts_ms, frame.capture_ntp);
        let ntp = move |pts: i64| base_ntp.wrapping_add(ntp_of(pts - base_ms, 1000) as u64);
        let source = SourceFrame {
            pts_ms: frame.pts_ms,
            dts_ms: frame.pts_ms,
            keyframe: frame.keyframe,
            annex_b: &frame.annex_b,
        };
        renditions.push_frame(source, Instant::now(), &ntp);
    }
    // Dropping them (at the return) stops the encoders and reports what each did.
}

impl Subscriber for WhipRenditions {
    fn wanted(&self, stream: usize) -> bool {
        self.stats
            .stream(stream)
            .is_some_and(|c| c.renditions_wanted.load(Ordering::Relaxed))
    }

    /// A top-layer ring packet of a stream whose publisher's renditions are made.
    fn packet(&self, tap: &TapPacket) {
        if tap.pkt.kind != MediaKind::Video || tap.pkt.layer != 0 || tap.slate {
            return;
        }
        if self.take(tap) {
            // Outside the seats' lock.
            (self.keyframes)(tap.stream);
        }
    }

    /// Frame publishers make their own renditions.
    fn sample(&self, _stream: usize, _sample: &Sample) {}
}

impl WhipRenditions {
    /// [`Subscriber::packet`]: one top-layer video packet into its stream's seat; whether
    /// the publisher should be asked for a keyframe.
    fn take(&self, tap: &TapPacket) -> bool {
        let Ok(mut seats) = self.seats.lock() else {
            return false;
        };
        let Some(Some(seat)) = seats.get_mut(tap.stream) else {
            return false;
        };
        // A frame's capture time is its first packet's (a new timestamp starts a frame,
        // whether or not the last one's marker came).
        let pkt = &tap.pkt;
        let capture = match seat.frame {
            Some((ts, ntp)) if ts == pkt.rtp_ts => ntp,
            _ => pkt.capture_ntp,
        };
        seat.frame = Some((pkt.rtp_ts, capture));
        let damaged = seat.depack.damaged_frames();
        let mut frame = None;
        seat.depack.push_rtp(&tap.pkt, &mut |u| {
            if let Unit::Video {
                dts,
                keyframe,
                format: VideoFormat::AnnexB,
                data,
                ..
            } = u
            {
                frame = Some(Frame {
                    pts_ms: dts / 90,
                    keyframe,
                    annex_b: data.into_owned(),
                    capture_ntp: capture,
                });
            }
        });
        if seat.depack.damaged_frames() != damaged {
            seat.wait_key = true;
        }
        let Some(frame) = frame else {
            return false;
        };
        if seat.wait_key && !frame.keyframe {
            let now = Instant::now();
            let ask = seat
                .asked
                .is_none_or(|t| now.duration_since(t) >= ASK_EVERY);
            if ask {
                seat.asked = Some(now);
            }
            return ask;
        }
        seat.wait_key = false;
        match seat.frames.try_send(frame) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => seat.wait_key = true,
            Err(TrySendError::Disconnected(_)) => {
                // Its thread ended (the publisher left, or its renditions could not start).
                let id = seat.id;
                seats[tap.stream] = None;
                info!("renditions of publisher {id:?} ended");
            }
        }
        false
    }
}
