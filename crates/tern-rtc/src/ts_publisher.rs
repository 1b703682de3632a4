//! The SRT publisher's media: MPEG-TS in (as SRT delivers it, 1316-byte messages), the
//! same [`AvEvent`]s as an RTMP publisher's out, through the shared [`AvPipeline`].
//!
//! * The demuxer ([`tern_proto::ts`]) follows the first program: its first video stream
//!   (H264 or H265, [`TsPublisher::video_codec`]) and its first audio stream (AAC or Opus).
//!   The demuxer passes over other stream types (MPEG audio, data).
//! * H264: each PES is an access unit in Annex B; its SPS/PPS become the pipeline's
//!   configuration when they change, the rest goes on as length-prefixed NAL units (access
//!   unit delimiters and parameter sets dropped from the unit), with PTS and DTS; B-frames take the same transcoder as RTMP's.
//! * H265 (stream type 0x24): passed through ([`AvPipeline::h265_frame`]), as a WHIP or
//!   RTSP publisher's: each PES is an access unit in Annex B; its VPS/SPS/PPS are kept and
//!   put in front of every IRAP picture (whether or not the encoder repeats them), access
//!   unit delimiters dropped; frames before the first parameter sets and IRAP are dropped.
//! * Opus: each packet of a PES (after its control header) passes through, timed by its
//!   TOC's duration from the PES's PTS.
//! * AAC: each ADTS frame of a PES goes to the AAC → Opus transcoder at the PES's PTS plus
//!   1024 samples a frame; its header gives the AudioSpecificConfig.
//! * Time: PTS/DTS (90 kHz, 33 bits) are unwrapped and put on the publisher's millisecond
//!   timeline, one offset for both tracks (lip sync). A jump forward of more than
//!   [`MAX_JUMP_MS`] or back of more than [`MAX_BACK_MS`] (a TS discontinuity, an encoder restarted on the same connection) moves
//!   the offset so the timeline goes on one frame later instead of leaping.
//! * Bad input is counted and dropped ([`TsPublisher::errors`]), never fatal: a lossy SRT
//!   path (SRT gives up on a packet after its latency) costs a frame, not the publisher.

use tern_proto::codec::VideoCodec;
use tern_proto::ts::{Demuxer, Pes, TsCodec, TsStats, adts_frames, opus_packets, opus_samples};
use tern_proto::{h264, h265};

use crate::av::{AvEvent, AvPipeline};

/// A timestamp step forward larger than this is a discontinuity...
pub const MAX_JUMP_MS: i64 = 5_000;
/// ... and so is one back by more than this (B-frames step back by a few frames only).
pub const MAX_BACK_MS: i64 = 1_000;
/// Where the timeline starts: the first timestamp seen maps here, leaving room for a track
/// whose first timestamp is a little earlier than the other's.
const START_MS: i64 = 10_000;

/// The 33-bit MPEG clock put on one millisecond timeline.
#[derive(Debug, Default)]
struct TsClock {
    /// The last extended 90 kHz value, to unwrap the next.
    last: Option<i64>,
    /// Added to an extended 90 kHz value to give the timeline (90 kHz).
    offset: i64,
    /// Highest timeline value given out (ms), per track (video, audio): a muxer interleaves
    /// the tracks up to about a second apart, so each track is compared with itself.
    high: [Option<i64>; 2],
    jumps: u64,
}

impl TsClock {
    /// The timeline (ms) of a 33-bit 90 kHz timestamp of `track` (0 video, 1 audio).
    fn ms(&mut self, ts: u64, track: usize) -> i64 {
        const WRAP: i64 = 1 << 33;
        let ts = (ts & (WRAP as u64 - 1)) as i64;
        let ext = match self.last {
            None => {
                self.offset = START_MS * 90 - ts;
                ts
            }
            Some(last) => {
                // The nearest value congruent to `ts` modulo 2^33.
                let base = last - last.rem_euclid(WRAP);
                [base - WRAP + ts, base + ts, base + WRAP + ts]
                    .into_iter()
                    .min_by_key(|v| (v - last).abs())
                    .unwrap_or(base + ts)
            }
        };
        self.last = Some(ext);
        let mut ms = (ext + self.offset).div_euclid(90);
        let track = track.min(1);
        if let Some(high) = self.high[track]
            && (ms - high > MAX_JUMP_MS || high - ms > MAX_BACK_MS)
        {
            // Go on one 30 fps frame after the highest value given out.
            self.offset += (high + 33 - ms) * 90;
            self.jumps += 1;
            ms = high + 33;
        }
        let h = &mut self.high[track];
        *h = Some(h.map_or(ms, |h| h.max(ms)));
        ms
    }
}

/// What a TS publisher counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TsPublisherStats {
    /// The demuxer's counts.
    pub demux: TsStats,
    /// Video access units and AAC frames handed to the pipeline.
    pub video_frames: u64,
    /// AAC frames handed to the pipeline.
    pub audio_frames: u64,
    /// Frames dropped: no timestamp, malformed, or refused by the pipeline.
    pub dropped: u64,
    /// Timeline discontinuities smoothed over.
    pub discontinuities: u64,
}

/// One SRT publisher's MPEG-TS.
#[derive(Debug)]
pub struct TsPublisher {
    demux: Demuxer,
    av: AvPipeline,
    clock: TsClock,
    video_pid: Option<u16>,
    video_codec: Option<VideoCodec>,
    audio_pid: Option<u16>,
    sps: Vec<u8>,
    pps: Vec<u8>,
    /// H265: the last VPS, SPS and PPS seen (one each), put in front of IRAP pictures.
    hevc_params: [Vec<u8>; 3],
    /// H265: an IRAP picture went out (frames before it cannot be decoded).
    hevc_started: bool,
    asc: Option<[u8; 2]>,
    stats: TsPublisherStats,
    /// The last error, for the log (taken by [`TsPublisher::take_error`]).
    error: Option<String>,
}

impl TsPublisher {
    /// A publisher whose RTP payloads are at most `max_payload` bytes.
    pub fn new(max_payload: usize) -> Self {
        TsPublisher {
            demux: Demuxer::new(),
            av: AvPipeline::new(max_payload),
            clock: TsClock::default(),
            video_pid: None,
            video_codec: None,
            audio_pid: None,
            sps: Vec::new(),
            pps: Vec::new(),
            hevc_params: Default::default(),
            hevc_started: false,
            asc: None,
            stats: TsPublisherStats::default(),
            error: None,
        }
    }

    /// The media pipeline (transcoding, renditions, samples, counts).
    pub fn media(&mut self) -> &mut AvPipeline {
        &mut self.av
    }

    /// What it counted.
    pub fn stats(&self) -> TsPublisherStats {
        TsPublisherStats {
            demux: self.demux.stats(),
            discontinuities: self.clock.jumps,
            ..self.stats
        }
    }

    /// The codec of the video stream followed, once its first PES came: H264 (packetized
    /// by the pipeline, transcoded when it has B-frames) or H265 (passed through).
    pub fn video_codec(&self) -> Option<VideoCodec> {
        self.video_codec
    }

    /// The last error since the previous call (a frame dropped, and why).
    pub fn take_error(&mut self) -> Option<String> {
        self.error.take()
    }

    /// Feeds bytes of the transport stream at `now_ntp` (64-bit NTP time).
    pub fn receive(&mut self, now_ntp: u64, data: &[u8], ev: &mut dyn FnMut(AvEvent)) {
        let mut pes = Vec::new();
        self.demux.push(data, &mut |p| pes.push(p));
        for p in pes {
            self.pes(now_ntp, p, ev);
        }
    }

    fn drop_frame(&mut self, why: String) {
        self.stats.dropped += 1;
        self.error = Some(why);
    }

    fn pes(&mut self, now_ntp: u64, p: Pes, ev: &mut dyn FnMut(AvEvent)) {
        match p.codec {
            TsCodec::H264 | TsCodec::H265 if *self.video_pid.get_or_insert(p.pid) == p.pid => {
                let codec = match p.codec {
                    TsCodec::H265 => VideoCodec::H265,
                    _ => VideoCodec::H264,
                };
                if *self.video_codec.get_or_insert(codec) != codec {
                    // The PMT gave the PID another codec: the stream's codec stays.
                    return self.drop_frame(format!("video PID {} changed codec", p.pid));
                }
                match codec {
                    VideoCodec::H265 => self.hevc(now_ntp, &p, ev),
                    _ => self.video(now_ntp, &p, ev),
                }
            }
            TsCodec::Aac if *self.audio_pid.get_or_insert(p.pid) == p.pid => {
                self.audio(now_ntp, &p, ev)
            }
            TsCodec::Opus if *self.audio_pid.get_or_insert(p.pid) == p.pid => {
                self.opus(now_ntp, &p, ev)
            }
            // A second video or audio stream of the program.
            TsCodec::H264 | TsCodec::H265 | TsCodec::Aac | TsCodec::Opus => {}
        }
    }

    fn video(&mut self, now_ntp: u64, p: &Pes, ev: &mut dyn FnMut(AvEvent)) {
        let Some(pts) = p.pts else {
            return self.drop_frame("a video PES without a PTS".into());
        };
        let pts_ms = self.clock.ms(pts, 0);
        let dts_ms = match p.dts {
            Some(dts) => pts_ms - (pts.wrapping_sub(dts) & ((1 << 33) - 1)) as i64 / 90,
            None => pts_ms,
        };
        let (mut sps, mut pps) = (None, None);
        let mut body = Vec::with_capacity(p.data.len() + 16);
        let mut idr = false;
        for nal in h264::nal_units(&p.data) {
            // The parameter sets go to the configuration (the pipeline puts them in front
            // of each keyframe), not in the access unit: as an RTMP encoder sends them.
            match h264::nal_type(nal) {
                h264::NAL_AUD => continue,
                h264::NAL_SPS => {
                    sps = sps.or(Some(nal));
                    continue;
                }
                h264::NAL_PPS => {
                    pps = pps.or(Some(nal));
                    continue;
                }
                h264::NAL_IDR => idr = true,
                _ => {}
            }
            body.extend_from_slice(&(nal.len() as u32).to_be_bytes());
            body.extend_from_slice(nal);
        }
        if let (Some(s), Some(q)) = (sps, pps)
            && (s != self.sps.as_slice() || q != self.pps.as_slice())
        {
            match self.av.video_config(&avc_record(s, q)) {
                Ok(()) => {
                    self.sps = s.to_vec();
                    self.pps = q.to_vec();
                }
                Err(e) => return self.drop_frame(format!("H264 parameter sets: {e}")),
            }
        }
        if !self.av.has_video_config() || body.is_empty() {
            // Frames before the first SPS/PPS cannot be decoded by anyone.
            self.stats.dropped += 1;
            return;
        }
        match self.av.video_frame(now_ntp, dts_ms, pts_ms, idr, &body, ev) {
            Ok(()) => self.stats.video_frames += 1,
            Err(e) => self.drop_frame(format!("H264 access unit at {pts_ms} ms: {e}")),
        }
    }

    fn audio(&mut self, now_ntp: u64, p: &Pes, ev: &mut dyn FnMut(AvEvent)) {
        let Some(pts) = p.pts else {
            return self.drop_frame("an audio PES without a PTS".into());
        };
        let ms = self.clock.ms(pts, 1);
        let (frames, clean) = adts_frames(&p.data);
        if !clean {
            self.drop_frame(format!("malformed ADTS at {ms} ms"));
        }
        for (i, (cfg, raw)) in frames.into_iter().enumerate() {
            let Some(rate) = cfg.sample_rate() else {
                self.drop_frame("ADTS with a reserved sampling frequency".into());
                continue;
            };
            let asc = cfg.audio_specific_config();
            if self.asc != Some(asc) {
                if let Err(e) = self.av.audio_config(&asc) {
                    self.drop_frame(format!("AAC configuration {asc:02x?}: {e}"));
                    continue;
                }
                self.asc = Some(asc);
            }
            let at = ms + (i as i64 * 1024 * 1000) / i64::from(rate);
            match self.av.audio_frame(now_ntp, at, raw, ev) {
                Ok(()) => self.stats.audio_frames += 1,
                Err(e) => self.drop_frame(format!("AAC frame at {at} ms: {e}")),
            }
        }
    }
}

impl TsPublisher {
    /// An H265 access unit (Annex B), passed through with its parameter sets in front of
    /// each IRAP picture.
    fn hevc(&mut self, now_ntp: u64, p: &Pes, ev: &mut dyn FnMut(AvEvent)) {
        let Some(pts) = p.pts else {
            return self.drop_frame("a video PES without a PTS".into());
        };
        let pts_ms = self.clock.ms(pts, 0);
        let dts_ms = match p.dts {
            Some(dts) => pts_ms - (pts.wrapping_sub(dts) & ((1 << 33) - 1)) as i64 / 90,
            None => pts_ms,
        };
        let mut irap = false;
        let mut slices: Vec<&[u8]> = Vec::new();
        for nal in h264::nal_units(&p.data) {
            if nal.len() < 3 {
                continue;
            }
            let t = h265::nal_type(nal);
            match t {
                h265::AUD => {}
                h265::VPS | h265::SPS | h265::PPS => {
                    let i = usize::from(t - h265::VPS);
                    if self.hevc_params[i] != nal {
                        self.hevc_params[i] = nal.to_vec();
                    }
                }
                _ => {
                    irap |= h265::is_irap(nal);
                    slices.push(nal);
                }
            }
        }
        let have_params = self.hevc_params.iter().all(|n| !n.is_empty());
        if slices.is_empty() || !have_params || !(irap || self.hevc_started) {
            // Nobody can decode a picture before the parameter sets and an IRAP.
            self.stats.dropped += 1;
            return;
        }
        self.hevc_started = true;
        let params: &[Vec<u8>] = if irap { &self.hevc_params } else { &[] };
        let mut au = Vec::with_capacity(p.data.len() + 128);
        for nal in params.iter().map(Vec::as_slice).chain(slices) {
            au.extend_from_slice(&(nal.len() as u32).to_be_bytes());
            au.extend_from_slice(nal);
        }
        match self.av.h265_frame(now_ntp, dts_ms, pts_ms, &au, ev) {
            Ok(()) => self.stats.video_frames += 1,
            Err(e) => self.drop_frame(format!("H265 access unit at {pts_ms} ms: {e}")),
        }
    }

    fn opus(&mut self, now_ntp: u64, p: &Pes, ev: &mut dyn FnMut(AvEvent)) {
        let Some(pts) = p.pts else {
            return self.drop_frame("an Opus PES without a PTS".into());
        };
        let ms = self.clock.ms(pts, 1);
        let (packets, clean) = opus_packets(&p.data);
        if !clean {
            self.drop_frame(format!("malformed Opus control header at {ms} ms"));
        }
        let mut offset = 0u32;
        for packet in packets {
            let Some(n) = opus_samples(packet) else {
                self.drop_frame(format!("malformed Opus packet at {ms} ms"));
                continue;
            };
            let at = ms + i64::from(offset) / 48;
            self.av.opus_frame(now_ntp, at, n, packet, ev);
            self.stats.audio_frames += 1;
            offset += n;
        }
    }
}

/// An AVCDecoderConfigurationRecord holding one SPS and one PPS, 4-byte NAL lengths.
fn avc_record(sps: &[u8], pps: &[u8]) -> Vec<u8> {
    let profile = |i: usize| sps.get(i).copied().unwrap_or(0);
    let mut r = vec![1, profile(1), profile(2), profile(3), 0xff, 0xe1];
    r.extend_from_slice(&(sps.len() as u16).to_be_bytes());
    r.extend_from_slice(sps);
    r.push(1);
    r.extend_from_slice(&(pps.len() as u16).to_be_bytes());
    r.extend_from_slice(pps);
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publisher::IngestPacket;
    use tern_proto::codec::MediaKind;

    const SAMPLE: &[u8] = include_bytes!("../../../assets/srt/sample.ts");

    /// An MPEG-TS file made by ffmpeg from lavfi inputs with `args` (after `-f lavfi`),
    /// read and removed; `None` when ffmpeg (or the codec asked for) is missing.
    fn ffmpeg_ts(tag: &str, args: &[&str]) -> Option<Vec<u8>> {
        let path = std::env::temp_dir().join(format!("tern-{tag}-{}.ts", std::process::id()));
        let made = std::process::Command::new("ffmpeg")
            .args(["-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi"])
            .args(args)
            .args(["-f", "mpegts"])
            .arg(&path)
            .status();
        if !made.is_ok_and(|s| s.success()) {
            return None;
        }
        let data = std::fs::read(&path).expect("the TS");
        let _ = std::fs::remove_file(&path);
        Some(data)
    }

    fn run(p: &mut TsPublisher, data: &[u8]) -> Vec<IngestPacket> {
        let mut out = Vec::new();
        for msg in data.chunks(1316) {
            p.receive(1 << 40, msg, &mut |e| {
                if let AvEvent::Packet(k) = e {
                    out.push(k);
                }
            });
        }
        out
    }

    /// The sample TS, in SRT-sized messages: H264 comes out as RTP led by SPS/PPS on each
    /// keyframe at PTS × 90 on the publisher's timeline, AAC comes out as Opus, and both
    /// tracks share one timeline.
    #[test]
    fn sample_ts_becomes_rtp() {
        let mut p = TsPublisher::new(1200);
        let packets = run(&mut p, SAMPLE);
        let video: Vec<&IngestPacket> = packets
            .iter()
            .filter(|k| k.kind == MediaKind::Video)
            .collect();
        let audio: Vec<&IngestPacket> = packets
            .iter()
            .filter(|k| k.kind == MediaKind::Audio)
            .collect();
        let s = p.stats();
        // The last access unit waits for a next PES start that never comes.
        assert_eq!(s.video_frames, 29, "{s:?}");
        assert_eq!(s.dropped, 0, "{s:?} {:?}", p.take_error());
        assert_eq!(p.video_codec(), Some(VideoCodec::H264));
        let frames: Vec<u64> = video
            .iter()
            .filter(|k| k.marker)
            .map(|k| k.rtp_ts)
            .collect();
        assert_eq!(frames.len(), 29);
        // 1/15 s steps, within the 1 ms rounding of the ms timeline.
        assert!(
            frames.windows(2).all(|w| w[1].abs_diff(w[0] + 6000) <= 90),
            "{frames:?}"
        );
        assert!(frames[0] >= (START_MS as u64 - 1000) * 90);
        assert!(h264::is_keyframe(&video[0].payload));
        assert_eq!(h264::nal_type(&video[0].payload), h264::NAL_STAP_A);
        assert!(video.windows(2).all(|w| w[1].seq == w[0].seq + 1));
        // ~2 s of 20 ms Opus frames, every 960 samples, starting where the video does
        // (both tracks begin at 0 in the file).
        assert!(audio.len() >= 85, "{} Opus frames", audio.len());
        assert!(audio.windows(2).all(|w| w[1].rtp_ts - w[0].rtp_ts == 960));
        let (v0, a0) = (frames[0] as i64 / 90, audio[0].rtp_ts as i64 / 48);
        assert!((v0 - a0).abs() < 200, "video at {v0} ms, audio at {a0} ms");
    }

    /// A second pass of the same file (its clock back at the start) continues the
    /// timeline instead of jumping back; a lost TS packet costs one frame only.
    #[test]
    fn discontinuities_and_loss_keep_the_timeline() {
        let mut p = TsPublisher::new(1200);
        let first = run(&mut p, SAMPLE);
        let second = run(&mut p, SAMPLE);
        let last = first
            .iter()
            .filter(|k| k.kind == MediaKind::Video)
            .map(|k| k.rtp_ts)
            .max();
        let next = second
            .iter()
            .filter(|k| k.kind == MediaKind::Video)
            .map(|k| k.rtp_ts)
            .min();
        let (last, next) = (last.expect("video"), next.expect("video"));
        assert!(next > last && next - last < 90 * 200, "{last} then {next}");
        assert_eq!(p.stats().discontinuities, 1);
        // Cut a packet out of the middle of a video PES.
        let mut cut = SAMPLE.to_vec();
        cut.drain(188 * 60..188 * 61);
        let mut p = TsPublisher::new(1200);
        run(&mut p, &cut);
        let s = p.stats();
        assert!(s.video_frames >= 27, "{s:?}");
        assert!(s.demux.cc_errors == 1 || s.demux.malformed >= 1, "{s:?}");
    }

    /// Opus in MPEG-TS (as ffmpeg muxes it) passes through: every packet a 20 ms Opus
    /// packet, RTP timestamps 960 apart, decodable.
    #[test]
    fn opus_in_ts_passes_through() {
        let Some(data) = ffmpeg_ts(
            "opus",
            &[
                "-i",
                "testsrc2=size=160x96:rate=15",
                "-f",
                "lavfi",
                "-i",
                "sine",
                "-t",
                "2",
                "-c:v",
                "libx264",
                "-profile:v",
                "baseline",
                "-bf",
                "0",
                "-c:a",
                "libopus",
                "-b:a",
                "64k",
            ],
        ) else {
            return eprintln!("ffmpeg with libopus not installed: skipped");
        };
        let mut p = TsPublisher::new(1200);
        let packets = run(&mut p, &data);
        let audio: Vec<&IngestPacket> = packets
            .iter()
            .filter(|k| k.kind == MediaKind::Audio)
            .collect();
        assert!(audio.len() >= 80, "{} Opus packets", audio.len());
        assert!(audio.windows(2).all(|w| w[1].rtp_ts - w[0].rtp_ts == 960));
        let mut dec = opus::Decoder::new(48_000, opus::Channels::Stereo).expect("decoder");
        let mut pcm = vec![0f32; 960 * 2];
        for a in &audio {
            let n = dec
                .decode_float(&a.payload, &mut pcm, false)
                .expect("decodes");
            assert_eq!(n, 960);
        }
        assert!(packets.iter().any(|k| k.kind == MediaKind::Video));
    }

    /// H265 in MPEG-TS (ffmpeg's libx265, stream type 0x24) passes through: RFC 7798
    /// payloads, the VPS/SPS/PPS in front of every IRAP picture (even those x265 sent
    /// without them: the parameter sets are stripped from the input here to show it), PTS
    /// × 90 timestamps; the AAC beside it still becomes Opus.
    #[test]
    fn h265_in_ts_passes_through_with_parameter_sets_on_each_keyframe() {
        let Some(data) = ffmpeg_ts(
            "h265",
            &[
                "-i",
                "testsrc2=size=320x180:rate=15",
                "-f",
                "lavfi",
                "-i",
                "sine",
                "-t",
                "3",
                "-c:v",
                "libx265",
                "-preset",
                "ultrafast",
                "-x265-params",
                "keyint=15:bframes=0:log-level=error",
                "-c:a",
                "aac",
            ],
        ) else {
            return eprintln!("ffmpeg with libx265 not installed: skipped");
        };
        let mut p = TsPublisher::new(1200);
        let packets = run(&mut p, &data);
        assert_eq!(p.video_codec(), Some(VideoCodec::H265));
        let s = p.stats();
        assert_eq!(s.dropped, 0, "{s:?} {:?}", p.take_error());
        assert!(s.video_frames >= 40, "{s:?}");
        let video: Vec<&IngestPacket> = packets
            .iter()
            .filter(|k| k.kind == MediaKind::Video)
            .collect();
        assert!(video.iter().all(|k| k.payload.len() <= 1200));
        assert!(video.windows(2).all(|w| w[1].seq == w[0].seq + 1));
        // Each frame's first packet; keyframes every 15 frames, each led by the VPS.
        let firsts: Vec<&IngestPacket> = video
            .iter()
            .enumerate()
            .filter(|(i, _)| *i == 0 || video[i - 1].marker)
            .map(|(_, k)| *k)
            .collect();
        let keys: Vec<&&IngestPacket> = firsts
            .iter()
            .filter(|k| VideoCodec::H265.is_keyframe(&k.payload))
            .collect();
        assert!(keys.len() >= 3, "{} keyframes", keys.len());
        assert!(keys.iter().all(|k| h265::nal_type(&k.payload) == h265::VPS));
        assert_eq!(h265::nal_type(&video[0].payload), h265::VPS);
        let frames: Vec<u64> = firsts.iter().map(|k| k.rtp_ts).collect();
        assert!(
            frames.windows(2).all(|w| w[1].abs_diff(w[0] + 6000) <= 90),
            "{frames:?}"
        );
        let audio = packets.iter().filter(|k| k.kind == MediaKind::Audio);
        assert!(audio.count() >= 100);

        // Without the in-band parameter sets on later keyframes (an encoder that sends
        // them once): every keyframe still goes out led by them.
        let mut q = TsPublisher::new(1200);
        let mut once = Vec::new();
        let mut seen = false;
        let mut d = Demuxer::new();
        let mut pes = Vec::new();
        d.push(&data, &mut |x| pes.push(x));
        for mut x in pes {
            if x.codec == TsCodec::H265 {
                let mut out = Vec::new();
                for nal in h264::nal_units(&x.data) {
                    if h265::is_parameter_set(nal) && seen {
                        continue;
                    }
                    out.extend_from_slice(&[0, 0, 0, 1]);
                    out.extend_from_slice(nal);
                }
                seen = true;
                x.data = out;
            }
            q.pes(1 << 40, x, &mut |e| {
                if let AvEvent::Packet(k) = e {
                    once.push(k);
                }
            });
        }
        let video: Vec<&IngestPacket> =
            once.iter().filter(|k| k.kind == MediaKind::Video).collect();
        let led = video
            .iter()
            .enumerate()
            .filter(|(i, k)| {
                (*i == 0 || video[i - 1].marker) && VideoCodec::H265.is_keyframe(&k.payload)
            })
            .filter(|(_, k)| h265::nal_type(&k.payload) == h265::VPS)
            .count();
        assert_eq!(led, keys.len());
    }

    #[test]
    fn the_clock_unwraps_33_bits() {
        let mut c = TsClock::default();
        let near_wrap = (1u64 << 33) - 900;
        let a = c.ms(near_wrap, 0);
        let b = c.ms(900, 0); // 1800 ticks = 20 ms later, past the wrap
        assert_eq!(b - a, 20);
        assert_eq!(c.jumps, 0);
        // The other track 800 ms ahead (a muxer's interleaving) is no discontinuity, for
        // either track.
        let audio = c.ms(900 + 800 * 90, 1);
        assert_eq!(audio - b, 800);
        assert_eq!(c.ms(900 + 3000, 0) - b, 33);
        assert_eq!(c.jumps, 0);
    }
}
