//! AAC → Opus, for RTMP publishers (WebRTC viewers play Opus, encoders push AAC).
//!
//! * AAC-LC is decoded by symphonia's pure-Rust decoder (`symphonia-codec-aac`), given the
//!   AudioSpecificConfig of the AAC sequence header.
//! * When the source rate is not 48 kHz (44.1 kHz is the common case), rubato's sinc
//!   resampler converts it at a fixed ratio, one 1024-frame AAC frame per call; its start-up
//!   delay is dropped from the output so the timeline stays put. Not rubato's FFT resampler:
//!   its FFT crate (rustfft) is generic over the sample type, so every SSE and AVX kernel of it
//!   was compiled into tern-rtc, twice per test build (half of the crate's machine code;
//!   BENCHMARKS.md, "The fast stage's floor"). The price: 0.25 % of a core per 44.1 kHz
//!   stereo publisher against the FFT resampler's 0.07 % (`bench/resampler`), and about
//!   9 KB more heap per RTMP connection (521,358 bytes against 512,642).
//! * libopus (the `opus` crate, over the system's libopus, the one libavcodec loads) encodes 20 ms
//!   frames at 48 kHz, mono or stereo like the source.
//!
//! Timestamps: the first sample of the first AAC frame is placed at the frame's RTMP
//! timestamp × 48 (ms → 48 kHz), which is the same epoch the video uses (× 90), so audio
//! and video stay aligned. From there the RTP timestamp advances by 960 per Opus frame, so
//! no rounding drift builds up; if an AAC frame's RTMP timestamp strays more than
//! [`MAX_DRIFT_MS`] from where the samples put it (a gap in the source, a clock jump), the
//! timeline is re-anchored at that frame. AAC decoder priming (1024 samples with ffmpeg's
//! encoder, ~21 ms) and Opus look-ahead (6.5 ms) are not compensated.
//!
//! Sans-IO: the caller passes the frames and their timestamps; nothing reads the clock.

use std::panic::{AssertUnwindSafe, catch_unwind};

use audioadapter_buffers::direct::InterleavedSlice;
use rubato::{
    Async, FixedAsync, Resampler, SincInterpolationParameters, SincInterpolationType,
    WindowFunction,
};
use symphonia_codec_aac::AacDecoder;
use symphonia_core::codecs::audio::well_known::CODEC_ID_AAC;
use symphonia_core::codecs::audio::{AudioCodecParameters, AudioDecoder, AudioDecoderOptions};
use symphonia_core::packet::PacketRef;
use symphonia_core::units::{Duration, Timestamp};
use tern_proto::rtmp::flv::AudioSpecificConfig;
use thiserror::Error;

/// Opus RTP clock and encoder rate.
const OPUS_RATE: u32 = 48_000;
/// Samples per channel in one 20 ms Opus frame.
pub const OPUS_FRAME: usize = 960;
/// Samples per channel in one AAC-LC frame.
const AAC_FRAME: usize = 1024;
/// Largest Opus packet produced: the RTP payload limit of the stream's packet pool.
const MAX_OPUS_PACKET: usize = 1200;
/// How far (ms) an AAC frame's timestamp may stray from the sample count before the
/// timeline is re-anchored: two AAC frames at 44.1 kHz.
pub const MAX_DRIFT_MS: i64 = 50;

/// Why AAC could not be turned into Opus.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum TranscodeError {
    /// The AudioSpecificConfig is malformed or not AAC-LC mono/stereo.
    #[error("unsupported AAC configuration: {0}")]
    Config(String),
    /// An AAC frame could not be decoded.
    #[error("AAC frame: {0}")]
    Decode(String),
    /// The resampler or the Opus encoder failed.
    #[error("{0}")]
    Encode(String),
}

/// Bit rates of the Opus output: 64 kbit/s stereo, 32 kbit/s mono (transparent for speech
/// and music at WebRTC's usual settings).
fn bitrate(channels: usize) -> i32 {
    if channels == 2 { 64_000 } else { 32_000 }
}

/// The resampler's filter: a 64-tap windowed sinc, 128 steps between taps, linearly
/// interpolated. Its cut-off (rubato's, for the window) is 17.4 kHz at 44.1 kHz, above what
/// AAC at an encoder's usual 96-160 kbit/s keeps and what Opus codes at 32-64 kbit/s; its
/// table is 32 KiB per publisher (a longer filter or a finer table costs more of both for
/// nothing heard: `bench/resampler`).
fn resampler_filter() -> SincInterpolationParameters {
    SincInterpolationParameters::new(64, WindowFunction::BlackmanHarris2)
        .oversampling_factor(128)
        .interpolation(SincInterpolationType::Linear)
}

/// One AAC stream's transcoder.
pub struct AacToOpus {
    decoder: AacDecoder,
    /// The AudioSpecificConfig, to start a new decoder after a bad frame.
    asc: Box<[u8]>,
    resampler: Option<Async<f32>>,
    encoder: opus::Encoder,
    channels: usize,
    in_rate: u32,
    /// Decoded (and resampled) 48 kHz samples, interleaved, not yet encoded.
    pending: Vec<f32>,
    /// 48 kHz timestamp of `pending[0]`.
    pending_ts: u64,
    /// Where the next AAC frame should start, in 48 kHz units (None before the first).
    expect_ts: Option<u64>,
    /// Resampler output frames still to drop (its start-up delay).
    skip: usize,
    decoded: Vec<f32>,
    resampled: Vec<f32>,
    packet: Vec<u8>,
    frames_in: u64,
    frames_out: u64,
}

impl std::fmt::Debug for AacToOpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AacToOpus")
            .field("channels", &self.channels)
            .field("in_rate", &self.in_rate)
            .field("frames_in", &self.frames_in)
            .field("frames_out", &self.frames_out)
            .finish()
    }
}

impl AacToOpus {
    /// A transcoder for the stream an AAC sequence header (AudioSpecificConfig) describes.
    pub fn new(asc: &[u8]) -> Result<Self, TranscodeError> {
        let cfg =
            AudioSpecificConfig::parse(asc).map_err(|e| TranscodeError::Config(e.to_string()))?;
        if cfg.object_type != 2 {
            return Err(TranscodeError::Config(format!(
                "audio object type {} (only AAC-LC, 2)",
                cfg.object_type
            )));
        }
        let channels = usize::from(cfg.channels);
        if !(1..=2).contains(&channels) {
            return Err(TranscodeError::Config(format!(
                "channel configuration {} (only mono and stereo)",
                cfg.channels
            )));
        }
        if !(8_000..=96_000).contains(&cfg.sample_rate) {
            return Err(TranscodeError::Config(format!(
                "sample rate {}",
                cfg.sample_rate
            )));
        }
        let decoder = new_decoder(asc)?;
        let resampler = if cfg.sample_rate == OPUS_RATE {
            None
        } else {
            Some(
                Async::<f32>::new_sinc(
                    f64::from(OPUS_RATE) / f64::from(cfg.sample_rate),
                    1.0,
                    &resampler_filter(),
                    AAC_FRAME,
                    channels,
                    FixedAsync::Input,
                )
                .map_err(|e| TranscodeError::Config(format!("resampler: {e}")))?,
            )
        };
        let skip = resampler.as_ref().map_or(0, |r| r.output_delay());
        let ch = if channels == 2 {
            opus::Channels::Stereo
        } else {
            opus::Channels::Mono
        };
        let mut encoder = opus::Encoder::new(OPUS_RATE, ch, opus::Application::Audio)
            .map_err(|e| TranscodeError::Encode(format!("opus encoder: {e}")))?;
        encoder
            .set_bitrate(opus::Bitrate::Bits(bitrate(channels)))
            .map_err(|e| TranscodeError::Encode(format!("opus bitrate: {e}")))?;
        Ok(AacToOpus {
            decoder,
            asc: asc.into(),
            resampler,
            encoder,
            channels,
            in_rate: cfg.sample_rate,
            pending: Vec::with_capacity(4 * OPUS_FRAME * channels),
            pending_ts: 0,
            expect_ts: None,
            skip,
            decoded: Vec::with_capacity(AAC_FRAME * channels),
            resampled: Vec::new(),
            packet: vec![0; MAX_OPUS_PACKET],
            frames_in: 0,
            frames_out: 0,
        })
    }

    /// Source channels (1 or 2).
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// Source sample rate.
    pub fn sample_rate(&self) -> u32 {
        self.in_rate
    }

    /// AAC frames decoded and Opus frames produced so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.frames_in, self.frames_out)
    }

    /// Decodes one raw AAC frame whose RTMP timestamp is `ts_ms` and emits every 20 ms
    /// Opus frame that completes, with its 48 kHz RTP timestamp.
    pub fn push(
        &mut self,
        aac: &[u8],
        ts_ms: u64,
        emit: &mut dyn FnMut(&[u8], u64),
    ) -> Result<(), TranscodeError> {
        let at = ts_ms.saturating_mul(u64::from(OPUS_RATE) / 1000);
        let drift = self.expect_ts.map(|e| at as i64 - e as i64);
        if drift.is_none_or(|d| d.abs() > MAX_DRIFT_MS * 48) {
            // First frame or a discontinuity: start a new timeline here.
            self.pending.clear();
            self.pending_ts = at;
            self.expect_ts = Some(at);
            if let Some(r) = &mut self.resampler {
                r.reset();
                self.skip = r.output_delay();
            }
        }
        self.decode(aac)?;
        self.frames_in += 1;
        let frames = self.decoded.len() / self.channels;
        if let Some(e) = &mut self.expect_ts {
            *e += (frames as u64 * u64::from(OPUS_RATE)) / u64::from(self.in_rate);
        }
        match &mut self.resampler {
            None => self.pending.extend_from_slice(&self.decoded),
            Some(r) => {
                if frames != r.input_frames_next() {
                    return Err(TranscodeError::Decode(format!(
                        "{frames} samples in an AAC frame"
                    )));
                }
                let out_frames = r.output_frames_next();
                self.resampled.resize(out_frames * self.channels, 0.0);
                let input = InterleavedSlice::new(&self.decoded[..], self.channels, frames)
                    .map_err(|e| TranscodeError::Encode(format!("resampler input: {e}")))?;
                let mut output =
                    InterleavedSlice::new_mut(&mut self.resampled[..], self.channels, out_frames)
                        .map_err(|e| TranscodeError::Encode(format!("resampler output: {e}")))?;
                let (_, written) = r
                    .process_into_buffer(&input, &mut output, None)
                    .map_err(|e| TranscodeError::Encode(format!("resampler: {e}")))?;
                let drop = self.skip.min(written);
                self.skip -= drop;
                self.pending.extend_from_slice(
                    &self.resampled[drop * self.channels..written * self.channels],
                );
            }
        }
        let step = OPUS_FRAME * self.channels;
        let mut used = 0;
        while self.pending.len() - used >= step {
            let n = self
                .encoder
                .encode_float(&self.pending[used..used + step], &mut self.packet)
                .map_err(|e| TranscodeError::Encode(format!("opus: {e}")))?;
            emit(&self.packet[..n], self.pending_ts);
            self.frames_out += 1;
            self.pending_ts += OPUS_FRAME as u64;
            used += step;
        }
        self.pending.drain(..used);
        Ok(())
    }

    /// Decodes into `self.decoded` (interleaved f32).
    fn decode(&mut self, aac: &[u8]) -> Result<(), TranscodeError> {
        let pkt = PacketRef::new(0, Timestamp::new(0), Duration::new(AAC_FRAME as u64), aac);
        let decoded = &mut self.decoded;
        let decoder = &mut self.decoder;
        // symphonia returns errors for the malformed frames we know of; should its decoder
        // ever panic on a crafted frame, that is caught here and becomes an error that
        // closes this one publisher instead of its thread.
        let res = catch_unwind(AssertUnwindSafe(|| match decoder.decode_ref(&pkt) {
            Ok(buf) => {
                buf.copy_to_vec_interleaved::<f32>(decoded);
                Ok(buf.spec().channels().count())
            }
            Err(e) => Err(e.to_string()),
        }));
        if !matches!(res, Ok(Ok(_))) {
            // A frame that failed may leave the decoder's state half-updated (symphonia's
            // `reset` does not clear all of it): start a new decoder, so that one bad frame
            // does not spoil the ones after it.
            if let Ok(d) = new_decoder(&self.asc) {
                self.decoder = d;
            }
        }
        match res {
            Ok(Ok(ch)) if ch == self.channels => Ok(()),
            Ok(Ok(ch)) => Err(TranscodeError::Decode(format!(
                "{ch} channels decoded, {} configured",
                self.channels
            ))),
            Ok(Err(e)) => Err(TranscodeError::Decode(e)),
            Err(_) => Err(TranscodeError::Decode("the AAC decoder panicked".into())),
        }
    }
}

fn new_decoder(asc: &[u8]) -> Result<AacDecoder, TranscodeError> {
    let mut params = AudioCodecParameters::new();
    params
        .for_codec(CODEC_ID_AAC)
        .with_extra_data(asc.to_vec().into_boxed_slice());
    AacDecoder::try_new(&params, &AudioDecoderOptions::default())
        .map_err(|e| TranscodeError::Config(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_configs_are_refused() {
        // HE-AAC (object type 5), 44.1 kHz stereo.
        assert!(matches!(
            AacToOpus::new(&[0x2a, 0x10]),
            Err(TranscodeError::Config(_))
        ));
        // 5.1 channels.
        assert!(matches!(
            AacToOpus::new(&[0x12, 0x30]),
            Err(TranscodeError::Config(_))
        ));
        assert!(AacToOpus::new(&[0x12]).is_err());
        let t = AacToOpus::new(&[0x12, 0x10]).expect("AAC-LC 44.1 kHz stereo");
        assert_eq!((t.channels(), t.sample_rate()), (2, 44100));
    }

    /// The raw AAC frames of the sample FLV (audio tags after the sequence header) and its
    /// AudioSpecificConfig.
    fn sample_aac() -> (Vec<u8>, Vec<Vec<u8>>) {
        let f: &[u8] = include_bytes!("../../../assets/rtmp/sample.flv");
        let mut at = u32::from_be_bytes([f[5], f[6], f[7], f[8]]) as usize + 4;
        let (mut asc, mut frames) = (Vec::new(), Vec::new());
        while at + 11 <= f.len() {
            let size = (usize::from(f[at + 1]) << 16) | (usize::from(f[at + 2]) << 8);
            let size = size | usize::from(f[at + 3]);
            let body = &f[at + 11..at + 11 + size];
            if f[at] == 8 {
                match body[1] {
                    0 => asc = body[2..].to_vec(),
                    _ => frames.push(body[2..].to_vec()),
                }
            }
            at += 11 + size + 4;
        }
        (asc, frames)
    }

    /// The sample's 440 Hz sine (44.1 kHz AAC) comes out of the Opus decoder at 48 kHz as
    /// 440 Hz (a resampler at the wrong ratio would give 479 or 404 Hz), at its level, and
    /// without a jump where one AAC frame's output meets the next.
    #[test]
    fn the_tone_keeps_its_pitch_and_level() {
        let (asc, frames) = sample_aac();
        let mut t = AacToOpus::new(&asc).expect("config");
        let mut dec = opus::Decoder::new(OPUS_RATE, opus::Channels::Stereo).expect("decoder");
        let mut left: Vec<f32> = Vec::new();
        let mut pcm = vec![0f32; 2 * OPUS_FRAME];
        for (i, f) in frames.iter().enumerate() {
            let ms = (i as u64 * 1024 * 1000) / 44_100;
            t.push(f, ms, &mut |pkt, _| {
                let n = dec.decode_float(pkt, &mut pcm, false).expect("opus decode");
                left.extend(pcm[..2 * n].iter().step_by(2));
            })
            .expect("frame");
        }
        // The first 100 ms hold the AAC and Opus start-up; measure the steady second after.
        let steady = &left[4_800..4_800 + 48_000];
        let rises = steady
            .windows(2)
            .filter(|w| w[0] < 0.0 && w[1] >= 0.0)
            .count();
        assert!((438..=442).contains(&rises), "{rises} Hz");
        let rms = (steady.iter().map(|x| x * x).sum::<f32>() / steady.len() as f32).sqrt();
        // ffmpeg's sine source has an amplitude of 1/8, and `-ac 2` spreads the mono tone over
        // both channels at -3 dB: 0.0884 in each, an RMS of 0.0625.
        assert!((0.055..0.07).contains(&rms), "RMS {rms}");
        // That sine moves at most 0.0884 × 2π × 440 / 48,000 = 0.0051 from one sample to the
        // next (0.00525 here with Opus's coding noise, with rubato's FFT resampler as with the
        // sinc one); a dropped or repeated stretch of samples would jump further.
        let step = steady
            .windows(2)
            .map(|w| (w[1] - w[0]).abs())
            .fold(0f32, f32::max);
        assert!(step < 0.0051 * 1.25, "largest step {step}");
    }

    #[test]
    fn garbage_frames_are_errors_and_the_stream_goes_on() {
        let (asc, frames) = sample_aac();
        let mut t = AacToOpus::new(&asc).expect("config");
        let mut out = 0;
        let mut x = 12345u32;
        let mut errors = 0;
        for len in [0usize, 1, 7, 100, 400, 1500] {
            let frame: Vec<u8> = (0..len)
                .map(|_| {
                    x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    (x >> 16) as u8
                })
                .collect();
            if t.push(&frame, 0, &mut |_, _| out += 1).is_err() {
                errors += 1;
            }
        }
        assert!(errors >= 3, "only {errors} of 6 garbage frames refused");
        // Real frames afterwards still decode (a new timeline: their timestamps jump).
        let mut ts = Vec::new();
        for (i, f) in frames.iter().enumerate().take(40) {
            let ms = 5_000 + (i as u64 * 1024 * 1000) / 44_100;
            t.push(f, ms, &mut |_, at| ts.push(at))
                .unwrap_or_else(|e| panic!("good frame {i}: {e}"));
        }
        // 40 frames of 1024 at 44.1 kHz are ~929 ms: 45 or 46 Opus frames after the
        // resampler's delay.
        assert!((44..=47).contains(&ts.len()), "{} Opus frames", ts.len());
        assert_eq!(ts[0], 5_000 * 48);
        assert!(ts.windows(2).all(|w| w[1] == w[0] + 960));
    }
}
