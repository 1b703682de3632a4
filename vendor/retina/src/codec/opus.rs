// Copyright (C) The Retina Authors
// SPDX-License-Identifier: MIT OR Apache-2.0

//! Opus, as defined in [RFC 7587](https://datatracker.ietf.org/doc/html/rfc7587).
//!
//! Each RTP payload is exactly one Opus packet (RFC 7587 section 4.2), so depacketizing is
//! taking the payload whole; its duration is read from the packet's TOC byte (and, for a
//! code 3 packet, its frame count) as RFC 6716 section 3.1 defines them. The RTP clock is
//! always 48 kHz.

use std::num::{NonZeroU16, NonZeroU32};

use bytes::Bytes;

use crate::buf::PacketRef;

use super::{AudioParameters, CodecItem};

/// The longest packet RFC 6716 allows: 120 ms at 48 kHz.
const MAX_SAMPLES: u32 = 5760;

#[derive(Debug)]
pub(crate) struct Depacketizer {
    parameters: AudioParameters,
    pending: Option<super::AudioFrame>,
}

impl Depacketizer {
    /// Creates a new Depacketizer. `sprop-stereo=1` in the format parameters marks a
    /// sender that may send stereo; the rtpmap's channel count is always 2 (RFC 7587
    /// section 7) and says nothing.
    pub(super) fn new(
        clock_rate: u32,
        format_specific_params: Option<&str>,
    ) -> Result<Self, String> {
        if clock_rate != 48_000 {
            return Err(format!("Opus needs a 48000 Hz RTP clock, not {clock_rate}"));
        }
        let stereo = format_specific_params.is_some_and(|p| {
            p.split(';')
                .filter_map(|kv| kv.trim().split_once('='))
                .any(|(k, v)| k.trim() == "sprop-stereo" && v.trim() == "1")
        });
        Ok(Self {
            parameters: AudioParameters {
                rfc6381_codec: Some("opus".to_owned()),
                frame_length: None, // variable
                clock_rate,
                channels: NonZeroU16::new(if stereo { 2 } else { 1 }).expect("1 or 2"),
                extra_data: Vec::new(),
                codec: super::AudioParametersCodec::Other,
            },
            pending: None,
        })
    }

    pub(super) fn parameters(&self) -> Option<super::ParametersRef<'_>> {
        Some(super::ParametersRef::Audio(&self.parameters))
    }

    pub(super) fn push(&mut self, pkt: &PacketRef<'_>) -> Result<(), String> {
        assert!(self.pending.is_none());
        let (s1, s2) = pkt.payload().slices();
        let mut payload = Vec::with_capacity(s1.len() + s2.len());
        payload.extend_from_slice(s1);
        payload.extend_from_slice(s2);
        let frame_length = packet_samples(&payload)?;
        self.pending = Some(super::AudioFrame {
            loss: pkt.meta.loss,
            ctx: pkt.meta.ctx,
            stream_id: pkt.meta.stream_id,
            timestamp: pkt.meta.timestamp,
            frame_length,
            data: Bytes::from(payload),
        });
        Ok(())
    }

    pub(super) fn pull(&mut self) -> Option<Result<super::CodecItem, super::DepacketizeError>> {
        self.pending.take().map(|f| Ok(CodecItem::AudioFrame(f)))
    }
}

/// The samples (at 48 kHz) an Opus packet holds, from its TOC byte (RFC 6716 section 3.1).
fn packet_samples(packet: &[u8]) -> Result<NonZeroU32, String> {
    let Some(&toc) = packet.first() else {
        return Err("empty Opus packet".to_owned());
    };
    let config = toc >> 3;
    // Samples per frame at 48 kHz: SILK-only (configs 0-11) 10/20/40/60 ms, hybrid
    // (12-15) 10/20 ms, CELT-only (16-31) 2.5/5/10/20 ms.
    let per_frame: u32 = match config {
        0..=11 => [480, 960, 1920, 2880][usize::from(config % 4)],
        12..=15 => [480, 960][usize::from(config % 2)],
        _ => [120, 240, 480, 960][usize::from(config % 4)],
    };
    let frames: u32 = match toc & 0x3 {
        0 => 1,
        1 | 2 => 2,
        _ => match packet.get(1) {
            Some(&b) => u32::from(b & 0x3f),
            None => return Err("Opus code 3 packet without its frame count".to_owned()),
        },
    };
    let samples = per_frame * frames;
    if samples > MAX_SAMPLES {
        return Err(format!("Opus packet of {samples} samples (over 120 ms)"));
    }
    NonZeroU32::new(samples).ok_or_else(|| "Opus code 3 packet of 0 frames".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_from_the_toc() {
        // CELT 20 ms (config 31), one frame: WebRTC's usual packet.
        assert_eq!(packet_samples(&[31 << 3, 0xaa]).unwrap().get(), 960);
        // SILK 60 ms (config 3), one frame.
        assert_eq!(packet_samples(&[3 << 3]).unwrap().get(), 2880);
        // Hybrid 10 ms (config 12), two frames of equal size (code 1).
        assert_eq!(packet_samples(&[12 << 3 | 1]).unwrap().get(), 960);
        // CELT 2.5 ms (config 16), code 3 with 6 frames.
        assert_eq!(packet_samples(&[16 << 3 | 3, 6]).unwrap().get(), 720);
    }

    #[test]
    fn bad_packets_are_refused() {
        assert!(packet_samples(&[]).is_err());
        assert!(packet_samples(&[31 << 3 | 3]).is_err(), "no frame count");
        assert!(packet_samples(&[31 << 3 | 3, 0]).is_err(), "0 frames");
        // 60 ms × 3 frames = 180 ms.
        assert!(packet_samples(&[3 << 3 | 3, 3]).is_err(), "over 120 ms");
    }

    /// The whole input space of the duration parser (it reads at most two bytes): no
    /// panic, and every accepted length is 2.5 ms to 120 ms.
    #[test]
    fn every_toc_and_count_is_bounded() {
        for b0 in 0..=255u8 {
            let one = packet_samples(&[b0]);
            for b1 in 0..=255u8 {
                let two = packet_samples(&[b0, b1]);
                if b0 & 3 != 3 {
                    assert_eq!(one, two);
                }
                if let Ok(n) = two {
                    assert!(
                        (120..=MAX_SAMPLES).contains(&n.get()),
                        "{b0:#x} {b1:#x}: {n}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_payload_is_one_frame_and_sprop_stereo_sets_channels() {
        use crate::PacketContext;
        use crate::buf::MarkBuf;
        use crate::rtp::ReceivedPacketBuilder;

        let mut d = super::super::Depacketizer::new(
            "audio",
            "opus",
            48_000,
            None,
            Some("minptime=10;sprop-stereo=1"),
        )
        .unwrap();
        match d.parameters() {
            Some(super::super::ParametersRef::Audio(p)) => assert_eq!(p.channels().get(), 2),
            other => panic!("{other:?}"),
        }
        let timestamp = crate::Timestamp {
            timestamp: 960,
            clock_rate: NonZeroU32::new(48_000).unwrap(),
            start: 0,
        };
        let pkt = ReceivedPacketBuilder {
            ctx: PacketContext::dummy(),
            stream_id: 0,
            sequence_number: 7,
            timestamp,
            payload_type: 111,
            ssrc: 0,
            mark: false,
            loss: 0,
        }
        .build([31 << 3, 1, 2, 3])
        .unwrap();
        let mut buf = MarkBuf::new(1024);
        let pos = buf.end();
        buf.extend(pkt.payload());
        buf.advance_unparsed(buf.end());
        let meta = crate::rtp::PacketMeta::from_received(&pkt);
        d.push(&PacketRef::new(meta, &buf, pos, pkt.payload().len() as u16))
            .unwrap();
        let a = match d.pull() {
            Some(Ok(CodecItem::AudioFrame(a))) => a,
            other => panic!("{other:?}"),
        };
        assert_eq!((a.timestamp, a.frame_length.get()), (timestamp, 960));
        assert_eq!(&a.data[..], &[31 << 3, 1, 2, 3]);
        assert!(d.pull().is_none());
        let mono =
            super::super::Depacketizer::new("audio", "opus", 48_000, NonZeroU16::new(2), None)
                .unwrap();
        match mono.parameters() {
            Some(super::super::ParametersRef::Audio(p)) => assert_eq!(p.channels().get(), 1),
            other => panic!("{other:?}"),
        }
        assert!(super::super::Depacketizer::new("audio", "opus", 8_000, None, None).is_err());
    }
}
