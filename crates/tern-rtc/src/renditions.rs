//! Renditions: lower video layers made from an RTMP publisher's video, so that its viewers
//! can move between layers as viewers of a simulcast WHIP publisher do (`[app] renditions`).
//!
//! The source stays layer 0 (as it comes, or B-frame transcoded); rendition `i` becomes layer
//! `i + 1`:
//!
//! * decoding: once, for every rendition, by one `H264Decoder` on the publisher's thread,
//!   which also feeds the B-frame transcoder when that runs (`H264Transcoder::fed`);
//! * scaling: on the publisher's thread (libswscale, bilinear) to the rendition's height,
//!   the width keeping the source's aspect ratio ([`rendition_size`]);
//! * encoding: one thread per rendition (`RtmpRendition`), libx264 through libavcodec:
//!   Constrained Baseline, veryfast, zerolatency, one thread, the rendition's bitrate as an
//!   average with a one-second VBV, an IDR wherever the source has one and whenever a viewer
//!   of the layer asks (`Renditions::request_idr`);
//! * packetizing: as the transcoded layer 0 (RFC 6184 mode 1, SPS/PPS aggregated in front
//!   of each IDR), the layer's own sequence numbers, the source's timestamps (pts × 90) and
//!   capture times, so ingest aligns the layers on one timeline.
//!
//! Why a thread per rendition rather than the publisher's thread: the encoders cost a few
//! milliseconds a picture each (BENCHMARKS.md, "RTMP renditions"), which on the connection's
//! thread would hold up its socket reads and the source layer behind them; on their own
//! threads they run beside it (and beside each other), and the publisher's thread only
//! decodes, scales and hands over. An encoder's packets go straight to the caller's
//! [`RenditionSink`] from its thread.
//!
//! Between the two, a bounded queue of [`QUEUE_FRAMES`] pictures. An encoder that falls
//! behind (its queue full) has pictures dropped until its queue has drained or a source
//! keyframe comes, and then goes on with an IDR: its viewers see a short freeze, never a
//! growing delay. Drops are counted ([`RenditionStats::dropped`]) and reported once per
//! rendition ([`RenditionEvent::Behind`]). An encoder that fails is reported
//! ([`RenditionEvent::Failed`]) and stops; the other layers go on.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ffmpeg_next as ff;
use tern_proto::codec::MediaKind;
use tern_proto::h264;

use crate::publisher::IngestPacket;
use crate::stream::MAX_LAYERS;
use crate::video_transcode::{H264Decoder, Picture, RateTarget, VideoTranscodeError, open_x264};

/// Pictures waiting for a rendition's encoder at most (a quarter of a second at 30 fps).
pub const QUEUE_FRAMES: usize = 8;

/// The RID of the source layer (layer 0) of a stream with renditions.
pub const SOURCE_RID: &str = "h";

/// Renditions a stream takes at most: the source and these fill [`MAX_LAYERS`].
pub const MAX_RENDITIONS: usize = MAX_LAYERS - 1;

/// One rendition: a lower layer of an RTMP stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenditionSpec {
    /// Its RID (what `?layer=` names).
    pub rid: Box<str>,
    /// Picture height in pixels (even), capped at the source's; see [`rendition_size`].
    pub height: u32,
    /// Average bitrate in kbit/s.
    pub bitrate_kbps: u32,
}

/// The size a rendition is encoded at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenditionSize {
    /// Its layer (1..).
    pub layer: u8,
    /// Its RID.
    pub rid: Box<str>,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Average bitrate in kbit/s.
    pub bitrate_kbps: u32,
}

/// What a rendition did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RenditionStats {
    /// Its layer (1..).
    pub layer: u8,
    /// Its RID.
    pub rid: Box<str>,
    /// Source pictures offered to it.
    pub frames_in: u64,
    /// Frames it encoded.
    pub frames_out: u64,
    /// Pictures dropped because its encoder was behind.
    pub dropped: u64,
    /// Encoded bytes.
    pub bytes: u64,
    /// Time spent scaling its pictures (on the publisher's thread).
    pub scale_time: Duration,
    /// Time spent encoding and packetizing (on its own thread).
    pub encode_time: Duration,
}

/// News from a publisher's renditions, for the caller's [`RenditionSink`].
#[derive(Debug)]
#[non_exhaustive]
pub enum RenditionEvent {
    /// A rendition's encoded packets (its layer in each), for the engine; sent from the
    /// rendition's thread.
    Packets(Vec<IngestPacket>),
    /// The renditions' sizes, at the first picture and whenever the source's size changes.
    Started {
        /// The source's size.
        source: (u32, u32),
        /// Each rendition's.
        sizes: Vec<RenditionSize>,
    },
    /// A rendition's encoder fell behind and pictures are being dropped; once per
    /// rendition.
    Behind {
        /// Its layer.
        layer: u8,
        /// Its RID.
        rid: Box<str>,
    },
    /// A rendition's encoder failed: that layer stops, the others go on.
    Failed {
        /// Its layer.
        layer: u8,
        /// Its RID.
        rid: Box<str>,
        /// Why.
        error: String,
    },
    /// The renditions stopped (the publisher left), with what each did.
    Stopped(Vec<RenditionStats>),
}

/// Where a publisher's renditions report; called from the publisher's thread and from the
/// renditions' threads.
pub type RenditionSink = Arc<dyn Fn(RenditionEvent) + Send + Sync>;

/// The size of a rendition `height` pixels high of a `source`-sized picture: the height
/// capped at the source's and made even, the width the source's aspect ratio rounded to
/// the nearest even number (4:2:0 needs even sizes); at least 2x2.
pub fn rendition_size(source: (u32, u32), height: u32) -> (u32, u32) {
    let (sw, sh) = (u64::from(source.0.max(1)), u64::from(source.1.max(1)));
    let h = u64::from(height).min(sh) & !1;
    let h = h.max(2);
    let w = ((sw * h + sh) / (2 * sh) * 2).max(2);
    (
        u32::try_from(w).unwrap_or(u32::MAX - 1),
        u32::try_from(h).unwrap_or(2),
    )
}

/// A source frame for [`Renditions::push_frame`].
#[derive(Debug, Clone, Copy)]
pub struct SourceFrame<'a> {
    /// Presentation time (ms).
    pub pts_ms: i64,
    /// Decode time (ms).
    pub dts_ms: i64,
    /// It holds an IDR.
    pub keyframe: bool,
    /// Annex B, SPS/PPS in band before an IDR.
    pub annex_b: &'a [u8],
}

/// One scaled picture for an encoder.
struct Job {
    frame: ff::frame::Video,
    pts: i64,
    idr: bool,
    capture_ntp: u64,
}

/// What a rendition's thread and the publisher's thread share.
#[derive(Default)]
struct Counters {
    frames_out: AtomicU64,
    bytes: AtomicU64,
    encode_ns: AtomicU64,
    /// Pictures handed over and not yet encoded.
    in_flight: AtomicUsize,
    failed: AtomicBool,
}

/// One rendition as the publisher's thread drives it.
struct Lane {
    layer: u8,
    spec: RenditionSpec,
    size: (u32, u32),
    scaler: Option<ff::software::scaling::Context>,
    jobs: Option<SyncSender<Job>>,
    thread: Option<JoinHandle<()>>,
    counters: Arc<Counters>,
    frames_in: u64,
    dropped: u64,
    scale_time: Duration,
    /// Pictures are dropped until the queue has drained or a source keyframe comes.
    dropping: bool,
    behind_reported: bool,
    /// The next picture handed over is an IDR.
    force_idr: bool,
    /// Stopped (its encoder failed): nothing more is handed over.
    failed: bool,
}

/// A publisher's renditions: the shared decoder, the scalers and the encoder threads.
/// An RTMP, SRT or RTSP publisher's [`crate::av::AvPipeline`] drives them from its
/// thread; a WHIP publisher's are driven by a thread of the server's, from its ring
/// packets rebuilt into frames.
pub struct Renditions {
    decoder: H264Decoder,
    lanes: Vec<Lane>,
    sink: RenditionSink,
    /// The source picture's size and format the scalers are made for.
    source: Option<(u32, u32, ff::format::Pixel)>,
}

impl std::fmt::Debug for Renditions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renditions")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Renditions {
    /// Whether renditions can be made here: libavcodec has an H264 decoder and libx264
    /// (what [`Renditions::new`] needs besides threads).
    pub fn available() -> Result<(), VideoTranscodeError> {
        ff::init().map_err(|e| VideoTranscodeError::new(&format!("libavcodec: {e}")))?;
        if ff::decoder::find(ff::codec::Id::H264).is_none() {
            return Err(VideoTranscodeError::new("libavcodec has no H264 decoder"));
        }
        if ff::encoder::find_by_name("libx264").is_none() {
            return Err(VideoTranscodeError::new(
                "libavcodec has no libx264 encoder",
            ));
        }
        Ok(())
    }

    /// Opens the decoder and starts one encoder thread per rendition (at most
    /// [`MAX_RENDITIONS`]; the encoders open at the first picture); `max_payload` caps
    /// RTP payloads.
    pub fn new(
        specs: &[RenditionSpec],
        max_payload: usize,
        sink: RenditionSink,
    ) -> Result<Renditions, VideoTranscodeError> {
        Renditions::available()?;
        let decoder = H264Decoder::new()?;
        let mut r = Renditions {
            decoder,
            lanes: Vec::new(),
            sink,
            source: None,
        };
        for (i, spec) in specs.iter().take(MAX_RENDITIONS).enumerate() {
            let layer = i as u8 + 1;
            let (tx, rx) = sync_channel(QUEUE_FRAMES);
            let counters = Arc::new(Counters::default());
            let enc = RenditionEncoder::new(layer, spec.bitrate_kbps, max_payload);
            let (c, sink, rid) = (counters.clone(), r.sink.clone(), spec.rid.clone());
            let thread = std::thread::Builder::new()
                .name("RtmpRendition".into())
                .spawn(move || encode_lane(enc, &rx, &sink, &c, rid))
                .map_err(|e| VideoTranscodeError::new(&format!("rendition thread: {e}")))?;
            r.lanes.push(Lane {
                layer,
                spec: spec.clone(),
                size: (0, 0),
                scaler: None,
                jobs: Some(tx),
                thread: Some(thread),
                counters,
                frames_in: 0,
                dropped: 0,
                scale_time: Duration::ZERO,
                dropping: false,
                behind_reported: false,
                force_idr: true,
                failed: false,
            });
        }
        Ok(r)
    }

    /// A viewer of layer `layer` asked for a keyframe: its next picture is an IDR.
    pub fn request_idr(&mut self, layer: u8) {
        if let Some(l) = self.lanes.iter_mut().find(|l| l.layer == layer) {
            l.force_idr = true;
        }
    }

    /// What each rendition did so far.
    pub fn stats(&self) -> Vec<RenditionStats> {
        self.lanes
            .iter()
            .map(|l| RenditionStats {
                layer: l.layer,
                rid: l.spec.rid.clone(),
                frames_in: l.frames_in,
                frames_out: l.counters.frames_out.load(Ordering::Relaxed),
                dropped: l.dropped,
                bytes: l.counters.bytes.load(Ordering::Relaxed),
                scale_time: l.scale_time,
                encode_time: Duration::from_nanos(l.counters.encode_ns.load(Ordering::Relaxed)),
            })
            .collect()
    }

    /// Hands layer `layer`'s encoder a picture without a size, which libx264 refuses to
    /// open for: a real encoder failure, for tests.
    #[cfg(test)]
    pub(crate) fn poison(&mut self, layer: u8) {
        let lane = self.lanes.iter_mut().find(|l| l.layer == layer);
        if let Some((l, tx)) = lane.and_then(|l| l.jobs.clone().map(|tx| (l, tx))) {
            l.counters.in_flight.fetch_add(1, Ordering::Relaxed);
            // A fresh encoder for the empty picture's 0x0 size: no encoder is open for it.
            let _ = tx.send(Job {
                frame: ff::frame::Video::empty(),
                pts: i64::MAX,
                idr: true,
                capture_ntp: 0,
            });
        }
    }

    /// Waits (at most 10 s) until every encoder has encoded what it was handed.
    #[cfg(test)]
    pub(crate) fn drain(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline
            && self
                .lanes
                .iter()
                .any(|l| l.counters.in_flight.load(Ordering::Relaxed) > 0)
        {
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Decodes one source frame that arrived at `now`; each picture now ready is scaled
    /// and handed to every rendition (`ntp` gives the capture time of a pts).
    pub fn push_frame(&mut self, frame: SourceFrame<'_>, now: Instant, ntp: &dyn Fn(i64) -> u64) {
        self.push(frame, now, ntp, &mut |_| {});
    }

    /// Decodes one source frame that arrived at `now`; each picture now ready is scaled
    /// and handed to every rendition (`ntp` gives the capture time of a pts), then lent to
    /// `layer0` (the B-frame transcoder, when one runs on this decoder).
    pub(crate) fn push(
        &mut self,
        frame: SourceFrame<'_>,
        now: Instant,
        ntp: &dyn Fn(i64) -> u64,
        layer0: &mut dyn FnMut(Picture<'_>),
    ) {
        let SourceFrame {
            pts_ms,
            dts_ms,
            keyframe,
            annex_b,
        } = frame;
        let Renditions {
            decoder,
            lanes,
            sink,
            source,
        } = self;
        // The callback never fails: a rendition's trouble stops that rendition only.
        let _ = decoder.push(pts_ms, dts_ms, keyframe, annex_b, now, &mut |p| {
            feed(lanes, sink, source, &p, ntp(p.pts));
            layer0(p);
            Ok(())
        });
    }
}

impl Drop for Renditions {
    /// Stops the encoder threads (each finishes the picture in hand) and reports what the
    /// renditions did.
    fn drop(&mut self) {
        for l in &mut self.lanes {
            l.jobs = None;
        }
        for l in &mut self.lanes {
            if let Some(t) = l.thread.take() {
                let _ = t.join();
            }
        }
        (self.sink)(RenditionEvent::Stopped(self.stats()));
    }
}

/// Hands a decoded picture to every rendition still going.
fn feed(
    lanes: &mut [Lane],
    sink: &RenditionSink,
    source: &mut Option<(u32, u32, ff::format::Pixel)>,
    p: &Picture<'_>,
    capture_ntp: u64,
) {
    let f = &*p.frame;
    let (w, h, fmt) = (f.width(), f.height(), f.format());
    if w == 0 || h == 0 {
        return;
    }
    if *source != Some((w, h, fmt)) {
        let resized = source.is_none_or(|s| (s.0, s.1) != (w, h));
        *source = Some((w, h, fmt));
        for l in lanes.iter_mut() {
            l.scaler = None;
            l.size = rendition_size((w, h), l.spec.height);
        }
        if resized {
            sink(RenditionEvent::Started {
                source: (w, h),
                sizes: lanes
                    .iter()
                    .map(|l| RenditionSize {
                        layer: l.layer,
                        rid: l.spec.rid.clone(),
                        width: l.size.0,
                        height: l.size.1,
                        bitrate_kbps: l.spec.bitrate_kbps,
                    })
                    .collect(),
            });
        }
    }
    for l in lanes.iter_mut() {
        if l.failed {
            continue;
        }
        if l.counters.failed.load(Ordering::Relaxed) {
            // Its thread reported the failure and ended.
            l.failed = true;
            l.jobs = None;
            continue;
        }
        l.frames_in += 1;
        if l.dropping {
            if !p.source_key && l.counters.in_flight.load(Ordering::Relaxed) > 0 {
                l.dropped += 1;
                continue;
            }
            l.dropping = false;
            l.force_idr = true;
        }
        let started = Instant::now();
        let scaled = scale(l, f);
        l.scale_time += started.elapsed();
        let frame = match scaled {
            Ok(frame) => frame,
            Err(e) => {
                fail(l, sink, e.to_string());
                continue;
            }
        };
        let forced = std::mem::take(&mut l.force_idr);
        let job = Job {
            frame,
            pts: p.pts,
            idr: p.source_key || forced,
            capture_ntp,
        };
        let Some(tx) = l.jobs.as_ref() else {
            continue;
        };
        l.counters.in_flight.fetch_add(1, Ordering::Relaxed);
        match tx.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                l.counters.in_flight.fetch_sub(1, Ordering::Relaxed);
                l.dropping = true;
                l.dropped += 1;
                if !l.behind_reported {
                    l.behind_reported = true;
                    sink(RenditionEvent::Behind {
                        layer: l.layer,
                        rid: l.spec.rid.clone(),
                    });
                }
            }
            Err(TrySendError::Disconnected(_)) => {
                // The thread ended after a failure it reported.
                l.failed = true;
                l.jobs = None;
            }
        }
    }
}

/// The picture scaled to the lane's size as 8-bit 4:2:0.
fn scale(l: &mut Lane, f: &ff::frame::Video) -> Result<ff::frame::Video, VideoTranscodeError> {
    let scaler = match l.scaler.as_mut() {
        Some(s) => s,
        None => l.scaler.insert(
            ff::software::scaling::Context::get(
                f.format(),
                f.width(),
                f.height(),
                ff::format::Pixel::YUV420P,
                l.size.0,
                l.size.1,
                ff::software::scaling::Flags::BILINEAR,
            )
            .map_err(|e| VideoTranscodeError::new(&format!("scaler: {e}")))?,
        ),
    };
    let mut out = ff::frame::Video::empty();
    scaler
        .run(f, &mut out)
        .map_err(|e| VideoTranscodeError::new(&format!("scaling: {e}")))?;
    Ok(out)
}

/// Stops a lane for good and reports why.
fn fail(l: &mut Lane, sink: &RenditionSink, error: String) {
    l.failed = true;
    l.jobs = None;
    sink(RenditionEvent::Failed {
        layer: l.layer,
        rid: l.spec.rid.clone(),
        error,
    });
}

/// A rendition's thread: encodes what comes until the publisher's side hangs up, or until
/// the encoder fails (reported, and the lane marked failed).
fn encode_lane(
    mut enc: RenditionEncoder,
    jobs: &Receiver<Job>,
    sink: &RenditionSink,
    c: &Counters,
    rid: Box<str>,
) {
    while let Ok(job) = jobs.recv() {
        let started = Instant::now();
        let res = enc.encode(job);
        c.encode_ns
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        c.in_flight.fetch_sub(1, Ordering::Relaxed);
        match res {
            Ok((packets, frames, bytes)) => {
                c.frames_out.fetch_add(frames, Ordering::Relaxed);
                c.bytes.fetch_add(bytes, Ordering::Relaxed);
                if !packets.is_empty() {
                    sink(RenditionEvent::Packets(packets));
                }
            }
            Err(e) => {
                c.failed.store(true, Ordering::Relaxed);
                sink(RenditionEvent::Failed {
                    layer: enc.layer,
                    rid,
                    error: e.to_string(),
                });
                return;
            }
        }
    }
}

/// One rendition's encoder and packetizer (runs on the rendition's thread).
struct RenditionEncoder {
    layer: u8,
    kbps: u32,
    max_payload: usize,
    /// The encoder and the size it was opened for.
    encoder: Option<(ff::encoder::Video, u32, u32)>,
    packetizer: h264::Packetizer,
    packet: ff::Packet,
    /// The layer's next RTP sequence number (its own space).
    seq: u64,
    /// pts of the last picture encoded (x264 takes strictly increasing ones).
    last_pts: Option<i64>,
}

impl RenditionEncoder {
    fn new(layer: u8, kbps: u32, max_payload: usize) -> RenditionEncoder {
        RenditionEncoder {
            layer,
            kbps,
            max_payload,
            encoder: None,
            packetizer: h264::Packetizer::new(),
            packet: ff::Packet::empty(),
            seq: 0,
            last_pts: None,
        }
    }

    /// Encodes one picture; returns its RTP packets, frames out and bytes out.
    fn encode(
        &mut self,
        mut job: Job,
    ) -> Result<(Vec<IngestPacket>, u64, u64), VideoTranscodeError> {
        let (w, h) = (job.frame.width(), job.frame.height());
        let mut idr = job.idr;
        if self.encoder.as_ref().is_none_or(|e| (e.1, e.2) != (w, h)) {
            // First picture, or the source changed size: a new encoder, starting on an IDR.
            self.encoder = None;
            self.encoder = Some((open_x264(w, h, RateTarget::Kbps(self.kbps), 1)?, w, h));
            idr = true;
        }
        let pts = match self.last_pts {
            Some(last) if job.pts <= last => last + 1,
            _ => job.pts,
        };
        self.last_pts = Some(pts);
        job.frame.set_pts(Some(pts));
        job.frame.set_kind(if idr {
            ff::picture::Type::I
        } else {
            ff::picture::Type::None
        });
        let Some((enc, _, _)) = self.encoder.as_mut() else {
            return Ok((Vec::new(), 0, 0));
        };
        enc.send_frame(&job.frame)
            .map_err(|e| VideoTranscodeError::new(&format!("libx264 send: {e}")))?;
        let (mut packets, mut frames, mut bytes) = (Vec::new(), 0, 0);
        while enc.receive_packet(&mut self.packet).is_ok() {
            let Some(data) = self.packet.data() else {
                continue;
            };
            let rtp_ts = self.packet.pts().unwrap_or(pts).max(0) as u64 * 90;
            let nals: Vec<&[u8]> = h264::nal_units(data).collect();
            let (layer, seq) = (self.layer, &mut self.seq);
            self.packetizer
                .packetize(&nals, self.max_payload, &mut |payload, last| {
                    packets.push(IngestPacket {
                        layer,
                        kind: MediaKind::Video,
                        seq: *seq,
                        rtp_ts,
                        marker: last,
                        payload: Arc::from(payload),
                        capture_ntp: Some(job.capture_ntp),
                    });
                    *seq += 1;
                })
                .map_err(|e| VideoTranscodeError::new(&format!("packetizer: {e}")))?;
            frames += 1;
            bytes += data.len() as u64;
        }
        Ok((packets, frames, bytes))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::Mutex;

    pub(crate) fn spec(rid: &str, height: u32, bitrate_kbps: u32) -> RenditionSpec {
        RenditionSpec {
            rid: rid.into(),
            height,
            bitrate_kbps,
        }
    }

    /// A sink that keeps every event (after `delay` for packets: a slow consumer).
    pub(crate) fn keeping_sink(
        delay: Duration,
    ) -> (RenditionSink, Arc<Mutex<Vec<RenditionEvent>>>) {
        let kept = Arc::new(Mutex::new(Vec::new()));
        let k = kept.clone();
        let sink: RenditionSink = Arc::new(move |e| {
            if matches!(e, RenditionEvent::Packets(_)) {
                std::thread::sleep(delay);
            }
            k.lock().unwrap_or_else(|e| e.into_inner()).push(e);
        });
        (sink, kept)
    }

    /// A frame as a test sees it: rtp_ts, starts with a keyframe, payloads.
    pub(crate) type LayerFrame = (u64, bool, Vec<Arc<[u8]>>);

    /// The frames of one layer in `events`.
    pub(crate) fn layer_frames(events: &[RenditionEvent], layer: u8) -> Vec<LayerFrame> {
        let mut frames: Vec<LayerFrame> = Vec::new();
        let mut start = true;
        let mut seq = None;
        for e in events {
            let RenditionEvent::Packets(ps) = e else {
                continue;
            };
            for p in ps.iter().filter(|p| p.layer == layer) {
                assert_eq!(p.kind, MediaKind::Video);
                if let Some(s) = seq {
                    assert_eq!(p.seq, s + 1, "layer {layer}: dense sequence numbers");
                }
                seq = Some(p.seq);
                if start {
                    frames.push((p.rtp_ts, h264::is_keyframe(&p.payload), Vec::new()));
                }
                if let Some(f) = frames.last_mut() {
                    assert_eq!(f.0, p.rtp_ts, "one timestamp per frame");
                    f.2.push(p.payload.clone());
                }
                start = p.marker;
            }
        }
        frames
    }

    /// The picture sizes a decoder gets from one layer's packets in `events`, and the
    /// profile_idc of its SPSs.
    pub(crate) fn decoded(events: &[RenditionEvent], layer: u8) -> (Vec<(u32, u32)>, Vec<u8>) {
        let mut depack = h264::Depacketizer::new();
        let mut dec = H264Decoder::new().expect("decoder");
        let (mut sizes, mut profiles) = (Vec::new(), Vec::new());
        let now = Instant::now();
        for e in events {
            let RenditionEvent::Packets(ps) = e else {
                continue;
            };
            for p in ps.iter().filter(|p| p.layer == layer) {
                let au = depack
                    .push(p.seq as u16, p.rtp_ts as u32, p.marker, &p.payload)
                    .expect("depacketize");
                let Some(au) = au else {
                    continue;
                };
                profiles.extend(
                    h264::nal_units(au)
                        .filter(|n| h264::nal_type(n) == h264::NAL_SPS)
                        .map(|n| n[1]),
                );
                let ts = (p.rtp_ts / 90) as i64;
                dec.push(ts, ts, false, au, now, &mut |pic| {
                    sizes.push((pic.frame.width(), pic.frame.height()));
                    Ok(())
                })
                .expect("decode");
            }
        }
        assert_eq!(depack.damaged_frames(), 0, "layer {layer}: intact frames");
        (sizes, profiles)
    }

    /// An encoder that fails is reported once and stops; the other rendition goes on.
    #[test]
    fn a_failed_encoder_stops_its_layer_only() {
        let Some(frames) = crate::video_transcode::tests::sample_with_b_frames() else {
            eprintln!("ffmpeg not installed: skipped");
            return;
        };
        let (sink, kept) = keeping_sink(Duration::ZERO);
        let specs = [spec("m", 48, 200), spec("l", 24, 100)];
        let mut r = Renditions::new(&specs, 1200, sink).expect("renditions");
        for (i, (pts, dts, key, au)) in frames.iter().enumerate() {
            if i == 20 {
                r.drain();
                r.poison(1);
                r.drain();
            }
            let frame = SourceFrame {
                pts_ms: *pts,
                dts_ms: *dts,
                keyframe: *key,
                annex_b: au,
            };
            r.push(frame, Instant::now(), &|_| 0, &mut |_| {});
            r.drain();
        }
        let stats = r.stats();
        drop(r);
        let events = std::mem::take(&mut *kept.lock().expect("events"));
        let failed: Vec<(u8, &str)> = events
            .iter()
            .filter_map(|e| match e {
                RenditionEvent::Failed { layer, error, .. } => Some((*layer, error.as_str())),
                _ => None,
            })
            .collect();
        assert!(
            matches!(&failed[..], [(1, e)] if e.contains("libx264")),
            "{failed:?}"
        );
        let (m, l) = (layer_frames(&events, 1), layer_frames(&events, 2));
        assert!((15..=20).contains(&m.len()), "m stopped: {}", m.len());
        assert!(l.len() >= 55, "l went on: {}", l.len());
        assert_eq!(
            stats[0].frames_in,
            stats[0].frames_out + 1,
            "{:?}",
            stats[0]
        );
        assert!(
            stats[1].frames_in > 55 && stats[1].dropped == 0,
            "{:?}",
            stats[1]
        );
    }

    /// An encoder slower than the source (its sink takes 50 ms a frame, the source comes
    /// every 5 ms) has pictures dropped, says so once, and after each run of drops goes on
    /// with an IDR; nothing else is lost or reordered.
    #[test]
    fn an_encoder_behind_drops_to_an_idr_and_says_so_once() {
        let Some(frames) = crate::video_transcode::tests::sample_with_b_frames() else {
            eprintln!("ffmpeg not installed: skipped");
            return;
        };
        let (sink, kept) = keeping_sink(Duration::from_millis(50));
        let mut r = Renditions::new(&[spec("m", 48, 200)], 1200, sink).expect("renditions");
        for (pts, dts, key, au) in &frames {
            let frame = SourceFrame {
                pts_ms: *pts,
                dts_ms: *dts,
                keyframe: *key,
                annex_b: au,
            };
            r.push(frame, Instant::now(), &|_| 7, &mut |_| {});
            std::thread::sleep(Duration::from_millis(5));
        }
        r.drain();
        let stats = r.stats();
        drop(r);
        let events = std::mem::take(&mut *kept.lock().expect("events"));
        let s = &stats[0];
        assert!(s.dropped > 0, "{s:?}");
        // (libx264 holds the newest picture until the next one's timestamp.)
        assert_eq!(s.frames_in, s.frames_out + s.dropped + 1, "{s:?}");
        let behind = events
            .iter()
            .filter(|e| matches!(e, RenditionEvent::Behind { layer: 1, .. }))
            .count();
        assert_eq!(behind, 1, "reported once");
        assert!(
            matches!(events.last(), Some(RenditionEvent::Stopped(st)) if st[0].dropped == s.dropped)
        );
        let out = layer_frames(&events, 1);
        assert_eq!(out.len() as u64, s.frames_out);
        assert!(out[0].1, "starts on an IDR");
        let mut source: Vec<u64> = frames.iter().map(|f| f.0 as u64 * 90).collect();
        source.sort_unstable();
        let mut gaps = 0;
        for w in out.windows(2) {
            let (a, b) = (w[0].0, w[1].0);
            assert!(b > a, "in display order");
            if source.iter().any(|&t| t > a && t < b) {
                gaps += 1;
                assert!(
                    w[1].1,
                    "a frame after dropped pictures is an IDR ({a} -> {b})"
                );
            }
        }
        assert!(gaps > 0, "pictures were dropped between frames");
        // Every packet carries the capture time the caller gave.
        assert!(events.iter().all(|e| match e {
            RenditionEvent::Packets(ps) => ps.iter().all(|p| p.capture_ntp == Some(7)),
            _ => true,
        }));
    }

    #[test]
    fn sizes_keep_the_aspect_ratio_and_are_even() {
        assert_eq!(rendition_size((1280, 720), 360), (640, 360));
        assert_eq!(rendition_size((1280, 720), 180), (320, 180));
        assert_eq!(rendition_size((1920, 1080), 360), (640, 360));
        // 4:3, and a height that is not a multiple of 4 of the source.
        assert_eq!(rendition_size((640, 480), 240), (320, 240));
        assert_eq!(rendition_size((1280, 720), 270), (480, 270));
        // 854x480 at 360: 640.5 -> 640.
        assert_eq!(rendition_size((854, 480), 360), (640, 360));
        // Never above the source, always even, at least 2x2.
        assert_eq!(rendition_size((320, 180), 360), (320, 180));
        assert_eq!(rendition_size((321, 181), 720), (320, 180));
        assert_eq!(rendition_size((2, 2), 2), (2, 2));
        assert_eq!(rendition_size((1000, 2), 2), (1000, 2));
        assert_eq!(rendition_size((0, 0), 360), (2, 2));
    }
}
