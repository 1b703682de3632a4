//! A stream's media made ready to leave the server (restreaming over RTMP and SRT): the
//! packagers' [`Unit`]s of one stream become [`OutFrame`]s, H264 and AAC on one 90 kHz
//! timeline, which every outbound muxer of the stream shares (an FLV writer per RTMP
//! forward, a TS writer per SRT forward or reader).
//!
//! * Video: H264 everywhere, H265 in MPEG-TS ([`carried`] says which output takes which). An
//!   encoder's H264 frames (RTMP, SRT, RTSP publishers) pass as they came, B-frames and
//!   composition offsets kept; an H264 access unit rebuilt from RTP (WHIP, the clip) goes from
//!   Annex B to length-prefixed NAL units, its parameter sets taken out into an
//!   [`OutFrame::VideoConfig`] whenever they change. H265 access units (rebuilt from RTP by
//!   the caller: SRT, RTSP and WHIP publishers' H265) pass in Annex B with their parameter
//!   sets in band ([`Outlet::push_h265`]). Another codec is refused by the caller.
//! * Audio: AAC passes as it came; Opus (WHIP, the clip, RTSP) is decoded by libopus and
//!   encoded once per stream to AAC-LC 48 kHz by libavcodec's native encoder ([`AacEncoder`]),
//!   whatever the number of forwards.
//! * Time: the output starts near 0 and never goes back. A publisher's frames share one
//!   clock, so both tracks keep their offset from it (lip sync as the encoder made it);
//!   RTP tracks have clocks of their own, each anchored where its first unit arrived.
//!   [`Outlet::restart`] (a new publisher, the slate taking over) re-anchors both tracks at
//!   the time of arrival, so a publisher that reconnects continues the timeline instead of
//!   restarting it; so does a source clock that jumps by more than [`MAX_JUMP`].
//!
//! Sans-IO: the caller passes each unit with the time it arrived; nothing reads the clock.

use std::sync::Arc;

use ffmpeg_next as ff;
use tern_proto::codec::VideoCodec;
use tern_proto::h264;
use thiserror::Error;

use crate::codecs::{self, Output};
use crate::hls::{AudioConfig, VideoConfig};
use crate::package::{Unit, VideoFormat};

/// 90 kHz ticks per millisecond.
const TICKS_PER_MS: i64 = 90;
/// A source timestamp this far from where arrival puts it (ticks, 5 s) is a clock jump: the
/// track is anchored again.
pub const MAX_JUMP: i64 = 5_000 * TICKS_PER_MS;
/// The sample rate of the AAC that Opus becomes.
pub const AAC_RATE: u32 = 48_000;
/// Samples in an AAC-LC frame.
const AAC_FRAME: usize = 1024;

/// One thing an outbound muxer writes, shared by every muxer of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutFrame {
    /// H264's parameter sets (raw NAL units, header byte included): before the first
    /// frame and whenever they change.
    VideoConfig {
        /// The sequence parameter set.
        sps: Arc<[u8]>,
        /// The picture parameter set.
        pps: Arc<[u8]>,
    },
    /// AAC's AudioSpecificConfig: before the first frame and whenever it changes.
    AudioConfig {
        /// The AudioSpecificConfig bytes.
        asc: Arc<[u8]>,
        /// Sampling rate (Hz).
        sample_rate: u32,
        /// Channels.
        channels: u8,
    },
    /// One access unit.
    Video {
        /// Decode time, 90 kHz.
        dts: i64,
        /// Presentation time, 90 kHz.
        pts: i64,
        /// An IDR access unit.
        keyframe: bool,
        /// NAL units, each after a 4-byte big-endian length (no parameter sets or
        /// delimiters for a unit rebuilt from RTP).
        avcc: Arc<[u8]>,
    },
    /// One H265 access unit in Annex B (its parameter sets in band before an IRAP).
    Hevc {
        /// Decode (and presentation) time, 90 kHz.
        dts: i64,
        /// An IRAP access unit.
        keyframe: bool,
        /// The access unit.
        annexb: Arc<[u8]>,
    },
    /// One raw AAC frame.
    Audio {
        /// Presentation time, 90 kHz.
        pts: i64,
        /// The frame.
        aac: Arc<[u8]>,
    },
}

/// The container an output writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Container {
    /// FLV over RTMP or RTMPS.
    Flv,
    /// MPEG-TS (SRT forwards and readers).
    Ts,
}

impl Container {
    /// The output of the codecs table ([`crate::codecs`]) it is.
    pub fn output(self) -> Output {
        match self {
            Container::Flv => Output::RtmpForward,
            Container::Ts => Output::Srt,
        }
    }
}

/// Whether a stream whose video is `codec` can go out in `container` (the codecs table:
/// FLV carries H264; MPEG-TS H264 and H265); the reason when it cannot.
pub fn carried(codec: VideoCodec, container: Container) -> Result<(), String> {
    let output = container.output();
    if codecs::carries(output, codec) {
        return Ok(());
    }
    let names: Vec<&str> = codecs::carried_by(output)
        .map(VideoCodec::sdp_name)
        .collect();
    Err(match container {
        Container::Flv => format!(
            "{} video cannot be forwarded over RTMP: RTMP forwards carry {}",
            codec.sdp_name(),
            names.join(", ")
        ),
        Container::Ts => format!(
            "{} video cannot go out in MPEG-TS: SRT carries {}",
            codec.sdp_name(),
            names.join(" and ")
        ),
    })
}

/// Why audio could not be made into AAC.
#[derive(Debug, Error)]
#[error("AAC encoder: {0}")]
pub struct AacError(String);

fn aac_err(what: &str, e: impl std::fmt::Display) -> AacError {
    AacError(format!("{what}: {e}"))
}

/// Opus → AAC-LC 48 kHz stereo: libopus decodes, libavcodec's native AAC encoder encodes
/// (128 kbit/s). A gap in the Opus timeline (loss) is filled by libopus's concealment, up to
/// [`AacEncoder::MAX_CONCEAL`]; a longer one re-anchors the output at the next packet.
pub struct AacEncoder {
    decoder: opus::Decoder,
    encoder: ff::encoder::Audio,
    frame: ff::frame::Audio,
    packet: ff::Packet,
    /// Decoded samples waiting for a whole AAC frame (interleaved stereo).
    pcm: Vec<f32>,
    /// Scratch for one decoded Opus packet (120 ms at most).
    scratch: Vec<f32>,
    /// The Opus time (48 kHz) the next decoded sample has, once anchored.
    next_in: Option<i64>,
    /// The 48 kHz time of `pcm`'s first sample.
    pcm_pts: i64,
    /// The time of the last AAC frame given out.
    last_out: Option<i64>,
    asc: Arc<[u8]>,
    /// Packets decoded, samples concealed.
    decoded: u64,
    concealed: u64,
}

impl std::fmt::Debug for AacEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AacEncoder")
            .field("decoded", &self.decoded)
            .field("concealed", &self.concealed)
            .finish()
    }
}

impl AacEncoder {
    /// The longest gap (48 kHz samples, 200 ms) concealed rather than re-anchored.
    pub const MAX_CONCEAL: i64 = 9_600;

    /// Opens libopus and libavcodec's AAC encoder.
    pub fn new() -> Result<AacEncoder, AacError> {
        crate::video_transcode::init().map_err(|e| aac_err("init", e))?;
        let decoder =
            opus::Decoder::new(AAC_RATE, opus::Channels::Stereo).map_err(|e| aac_err("opus", e))?;
        let codec = ff::encoder::find(ff::codec::Id::AAC)
            .ok_or_else(|| AacError("libavcodec has no AAC encoder".into()))?;
        let ctx = ff::codec::Context::new_with_codec(codec);
        let mut enc = ctx.encoder().audio().map_err(|e| aac_err("aac", e))?;
        enc.set_rate(AAC_RATE as i32);
        enc.set_channel_layout(ff::ChannelLayout::STEREO);
        enc.set_format(ff::format::Sample::F32(ff::format::sample::Type::Planar));
        enc.set_bit_rate(128_000);
        enc.set_time_base((1, AAC_RATE as i32));
        let encoder = enc.open().map_err(|e| aac_err("open aac", e))?;
        // What the native encoder writes in its extradata for these settings (AAC-LC, no
        // SBR); the binding does not reach the extradata, so it is written here.
        let asc: Arc<[u8]> = audio_specific_config(2, AAC_RATE, 2).as_slice().into();
        let mut frame = ff::frame::Audio::new(
            ff::format::Sample::F32(ff::format::sample::Type::Planar),
            AAC_FRAME,
            ff::ChannelLayout::STEREO,
        );
        frame.set_rate(AAC_RATE);
        Ok(AacEncoder {
            decoder,
            encoder,
            frame,
            packet: ff::Packet::empty(),
            pcm: Vec::with_capacity(AAC_FRAME * 4),
            scratch: vec![0.0; 5760 * 2],
            next_in: None,
            pcm_pts: 0,
            last_out: None,
            asc,
            decoded: 0,
            concealed: 0,
        })
    }

    /// The AudioSpecificConfig of the AAC it makes.
    pub fn asc(&self) -> Arc<[u8]> {
        self.asc.clone()
    }

    /// Samples concealed for lost Opus packets.
    pub fn concealed(&self) -> u64 {
        self.concealed
    }

    /// One Opus packet timed `pts` (48 kHz) in; each AAC frame it completes to `out` with
    /// its time (48 kHz). A packet libopus cannot decode is skipped (concealed by the next).
    pub fn push(
        &mut self,
        pts: i64,
        packet: &[u8],
        out: &mut dyn FnMut(i64, &[u8]),
    ) -> Result<(), AacError> {
        match self.next_in {
            Some(next) if pts > next && pts - next <= Self::MAX_CONCEAL => {
                // Lost packets: libopus conceals them, 20 ms at a time.
                let mut missing = pts - next;
                while missing > 0 {
                    let n = missing.min(960) as usize;
                    let got = self
                        .decoder
                        .decode_float(&[], &mut self.scratch[..n * 2], false)
                        .unwrap_or(0);
                    if got == 0 {
                        break;
                    }
                    self.concealed += got as u64;
                    self.pcm.extend_from_slice(&self.scratch[..got * 2]);
                    missing -= got as i64;
                }
            }
            Some(next) if pts > next => {
                // A gap longer than concealment: what is buffered goes out (padded to a
                // frame), and the output jumps ahead with the input, never back.
                if !self.pcm.is_empty() {
                    self.pcm.resize(AAC_FRAME * 2, 0.0);
                    self.encode_buffered(out)?;
                }
                self.pcm_pts = self.pcm_pts.max(pts);
            }
            // On time, or a little early.
            Some(next) if pts + 960 >= next => {}
            // Late or repeated (within a second): dropped, the output has it already.
            Some(next) if next - pts <= i64::from(AAC_RATE) => return Ok(()),
            // The input's clock went back (a new source): the output goes on from where
            // it is, the input's time from this packet.
            Some(_) => self.next_in = Some(pts),
            None => self.pcm_pts = pts,
        }
        let Ok(n) = self.decoder.decode_float(packet, &mut self.scratch, false) else {
            return Ok(());
        };
        self.decoded += 1;
        // A packet a little early overlaps what was decoded already: its first samples are
        // left out, so the output keeps the input's time (and never runs ahead of it).
        let end = pts + n as i64;
        let skip = match self.next_in {
            Some(next) if next > pts => usize::try_from(next - pts).unwrap_or(0).min(n),
            _ => 0,
        };
        self.next_in = Some(self.next_in.map_or(end, |next| next.max(end)));
        self.pcm.extend_from_slice(&self.scratch[skip * 2..n * 2]);
        self.encode_buffered(out)
    }

    /// Encodes every whole frame of `pcm`.
    fn encode_buffered(&mut self, out: &mut dyn FnMut(i64, &[u8])) -> Result<(), AacError> {
        while self.pcm.len() >= AAC_FRAME * 2 {
            for (i, s) in self.pcm.drain(..AAC_FRAME * 2).enumerate() {
                let (ch, at) = (i % 2, i / 2);
                let plane: &mut [f32] = self.frame.plane_mut(ch);
                if let Some(p) = plane.get_mut(at) {
                    *p = s;
                }
            }
            self.frame.set_pts(Some(self.pcm_pts));
            self.pcm_pts += AAC_FRAME as i64;
            self.encoder
                .send_frame(&self.frame)
                .map_err(|e| aac_err("encode", e))?;
            while self.encoder.receive_packet(&mut self.packet).is_ok() {
                if let Some(data) = self.packet.data() {
                    // Each packet is 1024 samples after the one before, or later when the
                    // input jumped ahead: never the same time twice.
                    let at = self.packet.pts().unwrap_or(self.pcm_pts);
                    let t = self.last_out.map_or(at, |l| at.max(l + AAC_FRAME as i64));
                    self.last_out = Some(t);
                    out(t, data);
                }
            }
        }
        Ok(())
    }
}

/// A 2-byte AudioSpecificConfig: `object` (2 = AAC-LC), the rate's frequency index,
/// `channels`.
pub fn audio_specific_config(object: u8, rate: u32, channels: u8) -> [u8; 2] {
    const RATES: [u32; 13] = [
        96_000, 88_200, 64_000, 48_000, 44_100, 32_000, 24_000, 22_050, 16_000, 12_000, 11_025,
        8_000, 7_350,
    ];
    let idx = RATES.iter().position(|&r| r == rate).unwrap_or(3) as u8;
    [
        (object << 3) | (idx >> 1),
        ((idx & 1) << 7) | ((channels & 0x0f) << 3),
    ]
}

/// One track's way from its source clock to the output's.
#[derive(Debug, Default, Clone, Copy)]
struct Track {
    /// Output ticks minus source ticks, once anchored.
    offset: Option<i64>,
    /// The last output time given (dts for video).
    last: Option<i64>,
}

/// One stream's outlet: units in, [`OutFrame`]s out.
#[derive(Debug)]
pub struct Outlet {
    /// The arrival time (ms, the caller's clock) the output's 0 stands for.
    epoch_ms: Option<i64>,
    /// Both tracks share one source clock (a publisher's frames): one offset.
    shared: Track,
    video: Track,
    audio: Track,
    sps: Option<Arc<[u8]>>,
    pps: Option<Arc<[u8]>>,
    /// The AAC configuration given last.
    asc: Option<Arc<[u8]>>,
    /// The audio's clock rate (AAC's sampling rate, 48 kHz for Opus).
    audio_rate: u32,
    /// The source's audio is Opus: it goes through the encoder.
    opus: bool,
    aac: Option<AacEncoder>,
    /// Why audio is dropped (the encoder did not open), said once.
    audio_error: Option<String>,
    frames: u64,
}

impl Default for Outlet {
    fn default() -> Self {
        Outlet::new()
    }
}

impl Outlet {
    /// An outlet waiting for its stream's first units.
    pub fn new() -> Outlet {
        Outlet {
            epoch_ms: None,
            shared: Track::default(),
            video: Track::default(),
            audio: Track::default(),
            sps: None,
            pps: None,
            asc: None,
            audio_rate: AAC_RATE,
            opus: false,
            aac: None,
            audio_error: None,
            frames: 0,
        }
    }

    /// The stream's media comes from elsewhere now (another publisher, the slate): the
    /// tracks are anchored again where their next units arrive, so the timeline goes on.
    pub fn restart(&mut self) {
        self.shared.offset = None;
        self.video.offset = None;
        self.audio.offset = None;
    }

    /// Frames given out.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Why the audio is left out, if it is (the AAC encoder did not open).
    pub fn audio_error(&self) -> Option<&str> {
        self.audio_error.as_deref()
    }

    /// Whether Opus is being encoded to AAC.
    pub fn encodes_audio(&self) -> bool {
        self.aac.is_some()
    }

    /// The configurations in force, for a muxer that joins now.
    pub fn configs(&self) -> Vec<OutFrame> {
        let mut v = Vec::new();
        if let (Some(sps), Some(pps)) = (&self.sps, &self.pps) {
            v.push(OutFrame::VideoConfig {
                sps: sps.clone(),
                pps: pps.clone(),
            });
        }
        if let Some(asc) = &self.asc {
            v.push(self.audio_config(asc.clone()));
        }
        v
    }

    fn audio_config(&self, asc: Arc<[u8]>) -> OutFrame {
        let channels = asc.get(1).map_or(2, |b| (b >> 3) & 0x0f);
        OutFrame::AudioConfig {
            asc,
            sample_rate: self.audio_rate,
            channels,
        }
    }

    /// Where a source time `src` (90 kHz) of `track` lands, anchoring the track when it is
    /// not (or when the source clock jumped): `now_ms` is when the unit arrived, `shared`
    /// whether the unit's clock is the publisher's common one.
    fn map(&mut self, video: bool, shared: bool, src: i64, now_ms: i64) -> i64 {
        let epoch = *self.epoch_ms.get_or_insert(now_ms);
        let arrival = (now_ms - epoch) * TICKS_PER_MS;
        let last = if video {
            self.video.last
        } else {
            self.audio.last
        };
        let slot = if shared {
            &mut self.shared
        } else if video {
            &mut self.video
        } else {
            &mut self.audio
        };
        let jumped = slot.offset.is_some_and(|o| {
            (src + o - arrival).abs() > MAX_JUMP || last.is_some_and(|l| src + o < l - MAX_JUMP / 5)
        });
        if slot.offset.is_none() || jumped {
            // Continue after what was given, never before it.
            let floor = last.map_or(0, |l| l + 1);
            slot.offset = Some(arrival.max(floor) - src);
        }
        let mut t = src + slot.offset.unwrap_or(0);
        if let Some(l) = last
            && t < l
        {
            // A small step back (reordering at a join): held at the last time.
            t = l;
        }
        t
    }

    /// One unit of the stream, arrived at `now_ms` (the caller's millisecond clock);
    /// `shared_clock`: it is a publisher's frame, whose tracks share one clock (not a unit
    /// rebuilt from RTP). What it makes goes to `out`.
    pub fn push(
        &mut self,
        unit: &Unit<'_>,
        shared_clock: bool,
        now_ms: i64,
        out: &mut dyn FnMut(OutFrame),
    ) {
        match unit {
            Unit::VideoConfig(VideoConfig::H264 { sps, pps }) => {
                self.set_params(sps, pps, out);
            }
            Unit::VideoConfig(_) => {}
            Unit::AudioConfig(AudioConfig::Aac {
                asc, sample_rate, ..
            }) => {
                self.opus = false;
                self.aac = None;
                self.audio_rate = *sample_rate;
                let asc: Arc<[u8]> = asc.as_slice().into();
                if self.asc.as_ref() != Some(&asc) {
                    self.asc = Some(asc.clone());
                    out(self.audio_config(asc));
                }
            }
            Unit::AudioConfig(AudioConfig::Opus { .. }) => {
                self.opus = true;
                self.audio_rate = AAC_RATE;
                if self.aac.is_none() && self.audio_error.is_none() {
                    match AacEncoder::new() {
                        Ok(e) => self.aac = Some(e),
                        Err(e) => self.audio_error = Some(e.to_string()),
                    }
                }
                if let Some(asc) = self.aac.as_ref().map(AacEncoder::asc)
                    && self.asc.as_ref() != Some(&asc)
                {
                    self.asc = Some(asc.clone());
                    out(self.audio_config(asc));
                }
            }
            Unit::Video {
                dts,
                pts,
                keyframe,
                format,
                data,
            } => {
                let avcc: Arc<[u8]> = match format {
                    VideoFormat::Avcc => Arc::from(&data[..]),
                    VideoFormat::AnnexB => {
                        let Some(avcc) = self.split_annexb(data, out) else {
                            return;
                        };
                        avcc.into()
                    }
                    // H265 comes to the outlet by `push_h265` (Annex B for MPEG-TS), not
                    // as a unit; VP8, VP9 and AV1 do not go out at all.
                    VideoFormat::H265 | VideoFormat::Vp8 | VideoFormat::Vp9 | VideoFormat::Av1 => {
                        return;
                    }
                };
                if self.sps.is_none() {
                    return;
                }
                let t = self.map(true, shared_clock, *dts, now_ms);
                self.video.last = Some(t);
                self.frames += 1;
                out(OutFrame::Video {
                    dts: t,
                    pts: t + (pts - dts).max(0),
                    keyframe: *keyframe,
                    avcc,
                });
            }
            Unit::Audio { pts, data } => {
                if self.opus {
                    self.push_opus(*pts, data, shared_clock, now_ms, out);
                    return;
                }
                if self.asc.is_none() {
                    return;
                }
                let src = *pts * 90_000 / i64::from(self.audio_rate.max(1));
                let t = self.map(false, shared_clock, src, now_ms);
                if self.audio.last.is_some_and(|l| t <= l) {
                    // Audio never repeats a time: a frame that would is dropped.
                    return;
                }
                self.audio.last = Some(t);
                self.frames += 1;
                out(OutFrame::Audio {
                    pts: t,
                    aac: Arc::from(&data[..]),
                });
            }
        }
    }

    /// One H265 access unit (Annex B) timed `dts` (90 kHz, the RTP clock unwrapped),
    /// arrived at `now_ms`.
    pub fn push_h265(
        &mut self,
        dts: i64,
        keyframe: bool,
        annexb: &[u8],
        now_ms: i64,
        out: &mut dyn FnMut(OutFrame),
    ) {
        let t = self.map(true, false, dts, now_ms);
        self.video.last = Some(t);
        self.frames += 1;
        out(OutFrame::Hevc {
            dts: t,
            keyframe,
            annexb: annexb.into(),
        });
    }

    fn push_opus(
        &mut self,
        pts: i64,
        data: &[u8],
        shared_clock: bool,
        now_ms: i64,
        out: &mut dyn FnMut(OutFrame),
    ) {
        let Some(mut enc) = self.aac.take() else {
            return;
        };
        let mut made: Vec<(i64, Arc<[u8]>)> = Vec::new();
        if let Err(e) = enc.push(pts, data, &mut |t, aac| made.push((t, aac.into()))) {
            self.audio_error = Some(e.to_string());
            return;
        }
        self.aac = Some(enc);
        for (t48, aac) in made {
            let src = t48 * 90_000 / i64::from(AAC_RATE);
            let t = self.map(false, shared_clock, src, now_ms);
            if self.audio.last.is_some_and(|l| t <= l) {
                continue;
            }
            self.audio.last = Some(t);
            self.frames += 1;
            out(OutFrame::Audio { pts: t, aac });
        }
    }

    fn set_params(&mut self, sps: &[u8], pps: &[u8], out: &mut dyn FnMut(OutFrame)) {
        if self.sps.as_deref() == Some(sps) && self.pps.as_deref() == Some(pps) {
            return;
        }
        let (sps, pps): (Arc<[u8]>, Arc<[u8]>) = (sps.into(), pps.into());
        self.sps = Some(sps.clone());
        self.pps = Some(pps.clone());
        out(OutFrame::VideoConfig { sps, pps });
    }

    /// An Annex B access unit as length-prefixed NAL units, its parameter sets given as a
    /// configuration when they changed (delimiters and parameter sets left out of the unit).
    fn split_annexb(&mut self, data: &[u8], out: &mut dyn FnMut(OutFrame)) -> Option<Vec<u8>> {
        let mut avcc = Vec::with_capacity(data.len() + 16);
        let (mut sps, mut pps) = (None, None);
        for nal in h264::nal_units(data) {
            match h264::nal_type(nal) {
                7 => sps = Some(nal),
                8 => pps = Some(nal),
                9 => {}
                _ => {
                    avcc.extend_from_slice(&(nal.len() as u32).to_be_bytes());
                    avcc.extend_from_slice(nal);
                }
            }
        }
        if let (Some(s), Some(p)) = (sps, pps) {
            self.set_params(s, p, out);
        }
        (!avcc.is_empty()).then_some(avcc)
    }
}

/// MPEG-TS out of one reader's frames (an SRT reader, an SRT forward): H264 and AAC from
/// the first keyframe on, parameter sets in front of every keyframe, times from 1 s on
/// (room for the muxer's PCR delay) and never back.
#[derive(Debug)]
pub struct TsWriter {
    mux: tern_proto::ts::mux::Muxer,
    /// The video codec the muxer was made for.
    hevc: bool,
    /// The outlet time (90 kHz) that is this output's 1 s.
    base: Option<i64>,
    waiting: bool,
    sps: Option<Arc<[u8]>>,
    pps: Option<Arc<[u8]>>,
    asc: Option<Arc<[u8]>>,
    annexb: Vec<u8>,
}

impl Default for TsWriter {
    fn default() -> Self {
        TsWriter::new()
    }
}

/// Where a [`TsWriter`]'s output starts (90 kHz): above the muxer's PCR delay.
const TS_START: i64 = 90_000;

impl TsWriter {
    /// A writer waiting for a keyframe.
    pub fn new() -> TsWriter {
        use tern_proto::ts::TsCodec;
        TsWriter {
            mux: tern_proto::ts::mux::Muxer::new(Some(TsCodec::H264), Some(TsCodec::Aac)),
            hevc: false,
            base: None,
            waiting: true,
            sps: None,
            pps: None,
            asc: None,
            annexb: Vec::new(),
        }
    }

    /// Frames were missed: the output goes on at the next keyframe.
    pub fn resync(&mut self) {
        self.waiting = true;
    }

    fn time(&self, t: i64) -> u64 {
        let base = self.base.unwrap_or(t);
        ((t - base).max(0) + TS_START) as u64 & ((1 << 33) - 1)
    }

    /// One frame; the TS packets it makes are appended to `out`.
    pub fn write(&mut self, f: &OutFrame, out: &mut Vec<u8>) {
        match f {
            OutFrame::VideoConfig { sps, pps } => {
                self.sps = Some(sps.clone());
                self.pps = Some(pps.clone());
            }
            OutFrame::AudioConfig { asc, .. } => self.asc = Some(asc.clone()),
            OutFrame::Video {
                dts,
                pts,
                keyframe,
                avcc,
            } => {
                if self.hevc {
                    use tern_proto::ts::TsCodec;
                    self.mux =
                        tern_proto::ts::mux::Muxer::new(Some(TsCodec::H264), Some(TsCodec::Aac));
                    self.hevc = false;
                    self.waiting = true;
                }
                if self.waiting {
                    if !*keyframe || self.sps.is_none() {
                        return;
                    }
                    self.waiting = false;
                    self.base.get_or_insert(*dts);
                }
                self.annexb.clear();
                if *keyframe && let (Some(sps), Some(pps)) = (&self.sps, &self.pps) {
                    for nal in [sps, pps] {
                        self.annexb.extend_from_slice(&[0, 0, 0, 1]);
                        self.annexb.extend_from_slice(nal);
                    }
                }
                let mut rest = &avcc[..];
                while rest.len() >= 4 {
                    let n = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
                    let Some(nal) = rest.get(4..4 + n) else {
                        break;
                    };
                    self.annexb.extend_from_slice(&[0, 0, 0, 1]);
                    self.annexb.extend_from_slice(nal);
                    rest = &rest[4 + n..];
                }
                let (d, p) = (self.time(*dts), self.time(*pts));
                self.mux.video(d, p, *keyframe, &self.annexb, out);
            }
            OutFrame::Hevc {
                dts,
                keyframe,
                annexb,
            } => {
                if !self.hevc {
                    // The stream's video is H265 (from the start, or a new publisher's):
                    // a program that says so, from its next IRAP.
                    use tern_proto::ts::TsCodec;
                    self.mux =
                        tern_proto::ts::mux::Muxer::new(Some(TsCodec::H265), Some(TsCodec::Aac));
                    self.hevc = true;
                    self.waiting = true;
                }
                if self.waiting {
                    if !*keyframe {
                        return;
                    }
                    self.waiting = false;
                    self.base.get_or_insert(*dts);
                }
                let d = self.time(*dts);
                self.mux.video(d, d, *keyframe, annexb, out);
            }
            OutFrame::Audio { pts, aac } => {
                let (Some(base), false, Some(asc)) = (self.base, self.waiting, &self.asc) else {
                    return;
                };
                if *pts < base {
                    return;
                }
                let t = self.time(*pts);
                self.mux.aac(t, asc, aac, out);
            }
        }
    }
}

#[cfg(test)]
mod tests;
