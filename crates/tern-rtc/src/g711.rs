//! G.711 (PCMU, PCMA; ITU-T G.711, RFC 3551 §4.5.14) → Opus, for cameras that send
//! telephone-band audio: each byte is expanded to a 16-bit sample (μ-law or A-law), the
//! 8 kHz mono signal is brought to 48 kHz by linear interpolation (×6: G.711 holds nothing
//! above 4 kHz, so no anti-imaging filter beyond that is needed for speech), and libopus
//! encodes 20 ms frames at 24 kbit/s.
//!
//! Timestamps as [`crate::transcode`]'s: the first sample at the first frame's time × 48,
//! then by samples, re-anchored when a frame's time strays more than
//! [`crate::transcode::MAX_DRIFT_MS`]. Sans-IO: the caller passes the frames and their times.

use crate::transcode::{MAX_DRIFT_MS, TranscodeError};

/// 48 kHz samples per 20 ms Opus frame.
const OPUS_FRAME: usize = 960;
/// The up-sampling factor from 8 kHz.
const UP: usize = 6;
/// Largest Opus packet the encoder may write.
const MAX_OPUS_PACKET: usize = 1500;

/// Which G.711 law.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Law {
    /// μ-law (PCMU, RTP payload type 0).
    Mu,
    /// A-law (PCMA, payload type 8).
    A,
}

/// One byte of μ-law as a linear 16-bit sample (G.711 §2, as in Sun's g711.c).
pub fn ulaw_to_linear(b: u8) -> i16 {
    let u = !b;
    let t = ((i32::from(u & 0x0f) << 3) + 0x84) << ((u & 0x70) >> 4);
    (if u & 0x80 != 0 { 0x84 - t } else { t - 0x84 }) as i16
}

/// One byte of A-law as a linear 16-bit sample.
pub fn alaw_to_linear(b: u8) -> i16 {
    let a = b ^ 0x55;
    let mut t = i32::from(a & 0x0f) << 4;
    let seg = (a & 0x70) >> 4;
    t = match seg {
        0 => t + 8,
        1 => t + 0x108,
        s => (t + 0x108) << (s - 1),
    };
    (if a & 0x80 != 0 { t } else { -t }) as i16
}

/// One G.711 stream's transcoder (8 kHz mono).
pub struct G711ToOpus {
    law: Law,
    encoder: opus::Encoder,
    /// The last input sample, the start of the next interpolation.
    last: f32,
    pending: Vec<f32>,
    pending_ts: u64,
    expect_ts: Option<u64>,
    packet: Vec<u8>,
}

impl std::fmt::Debug for G711ToOpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("G711ToOpus")
            .field("law", &self.law)
            .finish()
    }
}

impl G711ToOpus {
    /// A transcoder for 8 kHz mono `law`.
    pub fn new(law: Law) -> Result<Self, TranscodeError> {
        let mut encoder = opus::Encoder::new(48_000, opus::Channels::Mono, opus::Application::Voip)
            .map_err(|e| TranscodeError::Encode(format!("opus encoder: {e}")))?;
        encoder
            .set_bitrate(opus::Bitrate::Bits(24_000))
            .map_err(|e| TranscodeError::Encode(format!("opus bitrate: {e}")))?;
        Ok(G711ToOpus {
            law,
            encoder,
            last: 0.0,
            pending: Vec::with_capacity(4 * OPUS_FRAME),
            pending_ts: 0,
            expect_ts: None,
            packet: vec![0; MAX_OPUS_PACKET],
        })
    }

    /// Takes one frame of G.711 bytes whose first sample is at `ts_ms`; emits every 20 ms
    /// Opus frame that completes with its 48 kHz timestamp.
    pub fn push(
        &mut self,
        data: &[u8],
        ts_ms: u64,
        emit: &mut dyn FnMut(&[u8], u64),
    ) -> Result<(), TranscodeError> {
        let at = ts_ms.saturating_mul(48);
        let drift = self.expect_ts.map(|e| at as i64 - e as i64);
        if drift.is_none_or(|d| d.abs() > MAX_DRIFT_MS * 48) {
            self.pending.clear();
            self.pending_ts = at;
            self.expect_ts = Some(at);
        }
        if let Some(e) = &mut self.expect_ts {
            *e += (data.len() * UP) as u64;
        }
        for &b in data {
            let s = f32::from(match self.law {
                Law::Mu => ulaw_to_linear(b),
                Law::A => alaw_to_linear(b),
            }) / 32768.0;
            for k in 1..=UP {
                let f = k as f32 / UP as f32;
                self.pending.push(self.last + (s - self.last) * f);
            }
            self.last = s;
        }
        let mut used = 0;
        while self.pending.len() - used >= OPUS_FRAME {
            let n = self
                .encoder
                .encode_float(&self.pending[used..used + OPUS_FRAME], &mut self.packet)
                .map_err(|e| TranscodeError::Encode(format!("opus: {e}")))?;
            emit(&self.packet[..n], self.pending_ts);
            self.pending_ts += OPUS_FRAME as u64;
            used += OPUS_FRAME;
        }
        self.pending.drain(..used);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_laws_expand_as_g711_tables() {
        // Well-known values of both tables.
        assert_eq!(ulaw_to_linear(0xff), 0);
        assert_eq!(ulaw_to_linear(0x00), -32124);
        assert_eq!(ulaw_to_linear(0x80), 32124);
        assert_eq!(alaw_to_linear(0xd5), 8);
        assert_eq!(alaw_to_linear(0x55), -8);
        assert_eq!(alaw_to_linear(0xaa), 32256);
        assert_eq!(alaw_to_linear(0x2a), -32256);
    }

    #[test]
    fn twenty_ms_of_g711_make_one_opus_frame_on_the_timeline() {
        let mut t = G711ToOpus::new(Law::Mu).expect("encoder");
        let mut out = Vec::new();
        // 160 bytes = 20 ms at 8 kHz, starting at 1 s.
        for i in 0..5u64 {
            t.push(&[0x7f; 160], 1000 + i * 20, &mut |p, ts| {
                out.push((p.len(), ts))
            })
            .expect("push");
        }
        assert_eq!(out.len(), 5);
        assert_eq!(out[0].1, 48_000);
        assert_eq!(out[4].1, 48_000 + 4 * 960);
        assert!(out.iter().all(|(n, _)| *n > 0));
    }
}
