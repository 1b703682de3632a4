//! H264 with B-frames → Constrained Baseline H264, for WebRTC viewers of RTMP publishers.
//!
//! WebRTC receivers decode frames in the order they arrive and play them at once: a stream
//! whose decode order differs from its display order (B-frames: x264's and OBS's default
//! `-bf 3`) stutters or freezes in every browser. Such a stream is decoded and encoded again
//! without B-frames, at the source size:
//!
//! * decoding: libavcodec's H264 decoder (every profile, B-frames, CABAC), one thread;
//! * encoding: libx264 through libavcodec, `profile=baseline`, `preset=veryfast`,
//!   `tune=zerolatency` (no lookahead, no frame delay), CRF 23, an IDR wherever the source
//!   has one (so the keyframe cache and joining viewers see the source's GOP), SPS/PPS in
//!   band before every IDR.
//!
//! Why libavcodec through `ffmpeg-next`: the binding is maintained (releases follow FFmpeg's),
//! safe to use (no `unsafe` here), and FFmpeg is already what tern's users and tests run;
//! its H264 decoder handles every profile encoders send, which openh264's decoder does not
//! promise for B-slices, and its libx264 encoder is the reference for quality per CPU.
//! Debian's `libavcodec` is built with libx264.
//!
//! Sans-IO apart from the codec calls: frames in with their timestamps and the time they
//! arrived, encoded frames out; the added latency (arrival to encoded output) is measured
//! per frame.
//!
//! The decoding half (`H264Decoder`) and the encoder set-up (`open_x264`) are shared with
//! the renditions ([`crate::renditions`]): a stream with renditions is decoded once, and its
//! transcoder (`H264Transcoder::fed`) takes that decoder's pictures.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use ffmpeg_next as ff;
use thiserror::Error;

/// Why the transcoder could not start or go on.
#[derive(Debug, Error)]
#[error("video transcoder: {0}")]
pub struct VideoTranscodeError(String);

impl VideoTranscodeError {
    /// An error saying `what`.
    pub(crate) fn new(what: &str) -> VideoTranscodeError {
        VideoTranscodeError(what.to_string())
    }
}

fn err(what: &str, e: impl std::fmt::Display) -> VideoTranscodeError {
    VideoTranscodeError(format!("{what}: {e}"))
}

/// One encoded frame: Annex B (start codes), SPS/PPS in band before an IDR.
#[derive(Debug)]
pub struct EncodedFrame {
    /// Presentation time in milliseconds (the source's; equal to decode time now).
    pub pts_ms: i64,
    /// Whether it is an IDR frame.
    pub keyframe: bool,
    /// Annex B bytes.
    pub data: Vec<u8>,
}

/// What the transcoder has done so far.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct TranscodeStats {
    /// Source frames pushed (primed ones included).
    pub frames_in: u64,
    /// Encoded frames out.
    pub frames_out: u64,
    /// Mean time from a frame's arrival to its encoded output (computed by
    /// [`H264Transcoder::stats`]).
    pub mean_latency: Duration,
    /// Longest such time.
    pub max_latency: Duration,
    /// Source size.
    pub width: u32,
    /// Source size.
    pub height: u32,
}

/// Initialises FFmpeg once more (cheap) and quiets it: libavcodec and libx264 write their
/// notes to stderr; tern logs what matters.
pub(crate) fn init() -> Result<(), VideoTranscodeError> {
    ff::init().map_err(|e| err("init", e))?;
    ff::log::set_level(ff::log::Level::Error);
    Ok(())
}

/// How a libx264 encoder spends its bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RateTarget {
    /// Constant quality (the B-frame transcoder: CRF 23, the source's size and detail).
    Crf(u8),
    /// An average bitrate in kbit/s, held by a VBV buffer of one second (a rendition,
    /// whose point is a known rate).
    Kbps(u32),
}

/// Opens libx264 for `w`x`h` YUV420P pictures timed in milliseconds: Constrained Baseline,
/// `preset=veryfast`, `tune=zerolatency`, `rate`, a picture marked I encoded as an IDR, SPS
/// and PPS in band before every IDR. `threads` 0 lets x264 choose.
pub(crate) fn open_x264(
    w: u32,
    h: u32,
    rate: RateTarget,
    threads: usize,
) -> Result<ff::encoder::Video, VideoTranscodeError> {
    let codec = ff::encoder::find_by_name("libx264")
        .ok_or_else(|| VideoTranscodeError("libavcodec has no libx264 encoder".into()))?;
    let ctx = ff::codec::Context::new_with_codec(codec);
    let mut enc = ctx.encoder().video().map_err(|e| err("libx264", e))?;
    enc.set_width(w);
    enc.set_height(h);
    enc.set_format(ff::format::Pixel::YUV420P);
    enc.set_time_base((1, 1000));
    enc.set_max_b_frames(0);
    // IDRs follow the source's; this only bounds a source without any.
    enc.set_gop(600);
    let mut opts = ff::Dictionary::new();
    opts.set("profile", "baseline");
    opts.set("preset", "veryfast");
    opts.set("tune", "zerolatency");
    opts.set("forced-idr", "1");
    match rate {
        RateTarget::Crf(crf) => opts.set("crf", &crf.to_string()),
        RateTarget::Kbps(kbps) => {
            enc.set_bit_rate(kbps as usize * 1000);
            // zerolatency turns on --force-cfr, with which x264 budgets each frame at the
            // time base's "1000 fps"; off, its rate control follows the timestamps.
            opts.set(
                "x264-params",
                &format!("vbv-maxrate={kbps}:vbv-bufsize={kbps}:force-cfr=0"),
            );
        }
    }
    if threads > 0 {
        opts.set("threads", &threads.to_string());
    }
    enc.open_with(opts).map_err(|e| err("open libx264", e))
}

/// libavcodec's H264 decoder (one thread: frame threads would add a frame of delay each),
/// with what its users need beside the pictures: which were source keyframes, and when
/// each frame arrived.
pub(crate) struct H264Decoder {
    decoder: ff::decoder::Video,
    decoded: ff::frame::Video,
    /// Source keyframes (pts) not yet decoded.
    source_keys: Vec<i64>,
    /// Arrival time of each frame in flight, by pts.
    arrivals: VecDeque<(i64, Instant)>,
}

/// A decoded picture, lent by [`H264Decoder::push`] to its caller.
pub(crate) struct Picture<'a> {
    /// Presentation time (ms) its source frame came with.
    pub pts: i64,
    /// Its source frame was a keyframe.
    pub source_key: bool,
    /// When its source frame arrived.
    pub arrived: Instant,
    /// The picture (any pixel format the source has).
    pub frame: &'a mut ff::frame::Video,
}

impl H264Decoder {
    /// Opens the decoder.
    pub(crate) fn new() -> Result<H264Decoder, VideoTranscodeError> {
        init()?;
        let codec = ff::decoder::find(ff::codec::Id::H264)
            .ok_or_else(|| VideoTranscodeError("libavcodec has no H264 decoder".into()))?;
        let mut ctx = ff::codec::Context::new_with_codec(codec);
        ctx.set_threading(ff::threading::Config {
            kind: ff::threading::Type::Slice,
            count: 1,
            ..Default::default()
        });
        let decoder = ctx
            .decoder()
            .video()
            .map_err(|e| err("open H264 decoder", e))?;
        Ok(H264Decoder {
            decoder,
            decoded: ff::frame::Video::empty(),
            source_keys: Vec::new(),
            arrivals: VecDeque::new(),
        })
    }

    /// Decodes one source frame (Annex B, SPS/PPS in band before an IDR) that arrived at
    /// `now` and hands each picture now ready to `pic`, in display order. A damaged frame
    /// is the decoder's to conceal, not an error; an error of `pic` stops and is returned.
    pub(crate) fn push(
        &mut self,
        pts_ms: i64,
        dts_ms: i64,
        keyframe: bool,
        annex_b: &[u8],
        now: Instant,
        pic: &mut dyn FnMut(Picture<'_>) -> Result<(), VideoTranscodeError>,
    ) -> Result<(), VideoTranscodeError> {
        if keyframe {
            self.source_keys.push(pts_ms);
        }
        self.arrivals.push_back((pts_ms, now));
        while self.arrivals.len() > MAX_IN_FLIGHT {
            self.arrivals.pop_front();
        }
        let mut pkt = ff::Packet::copy(annex_b);
        pkt.set_pts(Some(pts_ms));
        pkt.set_dts(Some(dts_ms));
        if let Err(e) = self.decoder.send_packet(&pkt) {
            tracing::debug!("H264 decoder refused a frame: {e}");
        }
        while self.decoder.receive_frame(&mut self.decoded).is_ok() {
            // The pts the frame came with (best_effort_timestamp may swap in a guess from
            // the dts, which the users' pts rules would then miss).
            let pts = self.decoded.pts().or(self.decoded.timestamp()).unwrap_or(0);
            let source_key = if let Some(i) = self.source_keys.iter().position(|&k| k == pts) {
                self.source_keys.swap_remove(i);
                true
            } else {
                false
            };
            self.source_keys.retain(|&k| k > pts);
            let arrived = match self.arrivals.iter().position(|&(p, _)| p == pts) {
                Some(i) => self.arrivals.remove(i).map_or(now, |(_, at)| at),
                None => now,
            };
            // Frames well before this picture will never come out (dropped by the decoder).
            self.arrivals.retain(|&(p, _)| p >= pts - 10_000);
            pic(Picture {
                pts,
                source_key,
                arrived,
                frame: &mut self.decoded,
            })?;
        }
        Ok(())
    }
}

/// The decoder (its own, or a shared one's pictures) and, once the first picture gave the
/// size, the encoder of one stream.
pub struct H264Transcoder {
    /// Its own decoder; `None` when a shared decoder feeds it ([`H264Transcoder::fed`]).
    decoder: Option<H264Decoder>,
    encoder: Option<ff::encoder::Video>,
    scaler: Option<ff::software::scaling::Context>,
    /// Arrival time of each picture given to the encoder, by the pts it was given.
    arrivals: VecDeque<(i64, Instant)>,
    /// pts of primed frames whose decoded pictures are not encoded.
    discard: Vec<i64>,
    /// The next frame given to the encoder is forced to be an IDR.
    force_idr: bool,
    stats: TranscodeStats,
    latency_sum: Duration,
    /// pts of the last picture given to the encoder (x264 takes strictly increasing ones).
    last_pts: Option<i64>,
    /// See [`H264Transcoder::skip_through`].
    skip_through: Option<i64>,
    converted: ff::frame::Video,
    packet: ff::Packet,
}

impl std::fmt::Debug for H264Transcoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H264Transcoder")
            .field("stats", &self.stats())
            .field("fed", &self.is_fed())
            .finish_non_exhaustive()
    }
}

/// Frames in flight (decoder reorder delay plus anything stuck) beyond which the oldest
/// arrival times are forgotten.
const MAX_IN_FLIGHT: usize = 64;

impl H264Transcoder {
    /// A transcoder with the H264 decoder open; the encoder opens at the first picture.
    pub fn new() -> Result<H264Transcoder, VideoTranscodeError> {
        let mut t = H264Transcoder::fed()?;
        t.decoder = Some(H264Decoder::new()?);
        Ok(t)
    }

    /// A transcoder without a decoder of its own: a shared decoder (the renditions')
    /// hands it its pictures ([`H264Transcoder::picture`]).
    pub(crate) fn fed() -> Result<H264Transcoder, VideoTranscodeError> {
        init()?;
        Ok(H264Transcoder {
            decoder: None,
            encoder: None,
            scaler: None,
            arrivals: VecDeque::new(),
            discard: Vec::new(),
            force_idr: true,
            stats: TranscodeStats::default(),
            latency_sum: Duration::ZERO,
            last_pts: None,
            skip_through: None,
            converted: ff::frame::Video::empty(),
            packet: ff::Packet::empty(),
        })
    }

    /// Whether a shared decoder feeds it (no decoder of its own).
    pub fn is_fed(&self) -> bool {
        self.decoder.is_none()
    }

    /// What it has done so far.
    pub fn stats(&self) -> TranscodeStats {
        TranscodeStats {
            mean_latency: self.latency_sum / self.stats.frames_out.max(1) as u32,
            ..self.stats
        }
    }

    /// Makes the next encoded picture an IDR (a viewer asked for a keyframe).
    pub fn request_idr(&mut self) {
        self.force_idr = true;
    }

    /// Pictures whose pts is at or below `pts` are decoded but not encoded: they were
    /// already sent untranscoded, and a transcoded picture must not go back in time (a
    /// player drops a frame older than one it showed, and an IDR dropped so leaves it
    /// waiting for the next).
    pub fn skip_through(&mut self, pts: i64) {
        self.skip_through = Some(pts);
    }

    /// Decodes a frame of the current GOP without encoding its picture: what a transcoder
    /// started mid-GOP needs to decode the frames that follow.
    pub fn prime(
        &mut self,
        pts_ms: i64,
        dts_ms: i64,
        annex_b: &[u8],
    ) -> Result<(), VideoTranscodeError> {
        self.discard.push(pts_ms);
        self.push(pts_ms, dts_ms, false, annex_b, Instant::now(), &mut |_| {})
    }

    /// Decodes one source frame (Annex B, SPS/PPS in band before an IDR) that arrived at
    /// `now`, and hands each encoded frame now ready to `out`. Errs on a transcoder fed
    /// by a shared decoder.
    pub fn push(
        &mut self,
        pts_ms: i64,
        dts_ms: i64,
        keyframe: bool,
        annex_b: &[u8],
        now: Instant,
        out: &mut dyn FnMut(EncodedFrame),
    ) -> Result<(), VideoTranscodeError> {
        let Some(mut dec) = self.decoder.take() else {
            return Err(VideoTranscodeError(
                "a transcoder fed by a shared decoder takes pictures, not frames".into(),
            ));
        };
        self.stats.frames_in += 1;
        let res = dec.push(pts_ms, dts_ms, keyframe, annex_b, now, &mut |p| {
            self.take_picture(p, now, out)
        });
        self.decoder = Some(dec);
        res
    }

    /// A picture of the shared decoder (a transcoder made with [`H264Transcoder::fed`]),
    /// encoded unless [`H264Transcoder::skip_through`] covers it; each encoded frame now
    /// ready goes to `out`.
    pub(crate) fn picture(
        &mut self,
        p: Picture<'_>,
        now: Instant,
        out: &mut dyn FnMut(EncodedFrame),
    ) -> Result<(), VideoTranscodeError> {
        self.stats.frames_in += 1;
        self.take_picture(p, now, out)
    }

    fn take_picture(
        &mut self,
        p: Picture<'_>,
        now: Instant,
        out: &mut dyn FnMut(EncodedFrame),
    ) -> Result<(), VideoTranscodeError> {
        if let Some(i) = self.discard.iter().position(|&d| d == p.pts) {
            self.discard.swap_remove(i);
            return Ok(());
        }
        if self.skip_through.is_some_and(|s| p.pts <= s) {
            return Ok(());
        }
        self.encode_decoded(p, now, out)
    }

    fn encode_decoded(
        &mut self,
        p: Picture<'_>,
        now: Instant,
        out: &mut dyn FnMut(EncodedFrame),
    ) -> Result<(), VideoTranscodeError> {
        let decoded = p.frame;
        let (w, h) = (decoded.width(), decoded.height());
        if self.encoder.is_none() || (w, h) != (self.stats.width, self.stats.height) {
            // First picture, or the source changed size: a new encoder, starting on an IDR.
            self.encoder = None;
            self.scaler = None;
            self.encoder = Some(open_x264(w, h, RateTarget::Crf(23), 0)?);
            self.stats.width = w;
            self.stats.height = h;
            self.force_idr = true;
        }
        let yuv420 = matches!(
            decoded.format(),
            ff::format::Pixel::YUV420P | ff::format::Pixel::YUVJ420P
        );
        if !yuv420 && self.scaler.is_none() {
            // 4:2:2, 4:4:4 or 10-bit sources: converted to 8-bit 4:2:0 for Baseline.
            self.scaler = Some(
                ff::software::scaling::Context::get(
                    decoded.format(),
                    w,
                    h,
                    ff::format::Pixel::YUV420P,
                    w,
                    h,
                    ff::software::scaling::Flags::FAST_BILINEAR,
                )
                .map_err(|e| err("pixel format conversion", e))?,
            );
        }
        let frame = match self.scaler.as_mut() {
            Some(s) => {
                s.run(decoded, &mut self.converted)
                    .map_err(|e| err("pixel format conversion", e))?;
                &mut self.converted
            }
            None => {
                // YUVJ420P is YUV420P with full range: the same planes.
                decoded.set_format(ff::format::Pixel::YUV420P);
                decoded
            }
        };
        // A source whose timestamps step back (a broken encoder, a clock jump) still gives
        // the encoder increasing ones; the RTP timestamps follow.
        let pts = match self.last_pts {
            Some(last) if p.pts <= last => last + 1,
            _ => p.pts,
        };
        self.last_pts = Some(pts);
        self.arrivals.push_back((pts, p.arrived));
        while self.arrivals.len() > MAX_IN_FLIGHT {
            self.arrivals.pop_front();
        }
        frame.set_pts(Some(pts));
        let idr = std::mem::take(&mut self.force_idr) || p.source_key;
        frame.set_kind(if idr {
            ff::picture::Type::I
        } else {
            ff::picture::Type::None
        });
        let Some(enc) = self.encoder.as_mut() else {
            return Ok(());
        };
        enc.send_frame(frame).map_err(|e| err("libx264 send", e))?;
        while enc.receive_packet(&mut self.packet).is_ok() {
            let Some(data) = self.packet.data() else {
                continue;
            };
            let pts_ms = self.packet.pts().unwrap_or(pts);
            if let Some(i) = self.arrivals.iter().position(|&(p, _)| p == pts_ms) {
                let (_, at) = self.arrivals.remove(i).unwrap_or((pts_ms, now));
                let lat = now.saturating_duration_since(at);
                self.latency_sum += lat;
                self.stats.max_latency = self.stats.max_latency.max(lat);
            }
            self.stats.frames_out += 1;
            out(EncodedFrame {
                pts_ms,
                keyframe: self.packet.is_key(),
                data: data.to_vec(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `seconds` of 160x96 H264 High with B-frames (`-bf 2`, a keyframe every second) in
    /// container `format` (ffmpeg's `-f`), made by ffmpeg at test time; `None` without
    /// ffmpeg. Also the RTMP publisher's tests' sample (as FLV).
    pub(crate) fn b_frame_sample(seconds: u32, format: &str) -> Option<Vec<u8>> {
        let t = seconds.to_string();
        let out = std::process::Command::new("ffmpeg")
            .args([
                "-v",
                "error",
                "-f",
                "lavfi",
                "-i",
                "testsrc=size=160x96:rate=30",
            ])
            .args([
                "-t",
                &t,
                "-c:v",
                "libx264",
                "-profile:v",
                "high",
                "-bf",
                "2",
            ])
            .args(["-g", "30", "-pix_fmt", "yuv420p", "-f", format, "-"])
            .output()
            .ok()?;
        out.status.success().then_some(out.stdout)
    }

    /// (pts ms, dts ms, keyframe, Annex B).
    pub(crate) type SampleFrame = (i64, i64, bool, Vec<u8>);

    /// 2 s of a 160x96 H264 stream with B-frames (High profile, `-bf 2`, a keyframe every
    /// second) in MPEG-TS, made by ffmpeg at test time, demuxed by libavformat: (pts ms,
    /// dts ms, keyframe, Annex B) per frame. `None` (the test says it skipped) without ffmpeg.
    pub(crate) fn sample_with_b_frames() -> Option<Vec<SampleFrame>> {
        static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let ts = b_frame_sample(2, "mpegts")?;
        // One directory per call: tests run in parallel in one process.
        let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("tern-vt-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let path = dir.join("bframes.ts");
        std::fs::write(&path, ts).ok()?;
        let mut ictx = ff::format::input(&path).ok()?;
        let tb = ictx.streams().best(ff::media::Type::Video)?.time_base();
        let ms = |t: i64| t * 1000 * i64::from(tb.numerator()) / i64::from(tb.denominator());
        let mut frames = Vec::new();
        for (_, p) in ictx.packets() {
            let (Some(pts), Some(dts), Some(data)) = (p.pts(), p.dts(), p.data()) else {
                continue;
            };
            frames.push((ms(pts), ms(dts), p.is_key(), data.to_vec()));
        }
        let _ = std::fs::remove_dir_all(&dir);
        Some(frames)
    }

    #[test]
    fn b_frames_in_baseline_out_with_idrs_where_the_source_had_them() {
        let Some(frames) = sample_with_b_frames() else {
            eprintln!("ffmpeg not installed: skipped");
            return;
        };
        assert_eq!(frames.len(), 60, "2 s at 30 fps");
        assert!(
            frames.windows(2).any(|w| w[1].0 < w[0].0),
            "the sample has B-frames (display order differs from decode order)"
        );
        let mut t = H264Transcoder::new().expect("transcoder");
        let t0 = Instant::now();
        let mut out = Vec::new();
        for (pts, dts, key, au) in &frames {
            t.push(*pts, *dts, *key, au, t0, &mut |f| out.push(f))
                .expect("push");
        }
        assert!(out.len() >= 55, "most frames out already: {}", out.len());
        for f in &out {
            for nal in tern_proto::h264::nal_units(&f.data) {
                let ty = tern_proto::h264::nal_type(nal);
                if ty == 7 {
                    // profile_idc 66 (Baseline), constraint_set1 (Constrained Baseline).
                    assert_eq!(nal[1], 66, "Baseline SPS");
                }
            }
        }
        let keys: Vec<usize> = out
            .iter()
            .enumerate()
            .filter(|(_, f)| f.keyframe)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(keys.first(), Some(&0), "starts on an IDR");
        assert!(keys.len() >= 2, "the source's second IDR too: {keys:?}");
        let s = t.stats();
        assert_eq!((s.width, s.height), (160, 96));
        assert_eq!(s.frames_in, 60);
        // pts out strictly increasing: no reordering left.
        assert!(out.windows(2).all(|w| w[0].pts_ms < w[1].pts_ms));
    }

    #[test]
    fn garbage_is_survived() {
        let mut t = H264Transcoder::new().expect("transcoder");
        let now = Instant::now();
        for i in 0..20 {
            let junk: Vec<u8> = (0..200u32).map(|x| (x * 37 + i) as u8).collect();
            let mut data = vec![0, 0, 0, 1, 0x65];
            data.extend_from_slice(&junk);
            t.push(i64::from(i), i64::from(i), true, &data, now, &mut |_| {})
                .expect("garbage is concealed, not an error");
        }
    }
}
