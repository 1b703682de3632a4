//! A viewer's simulcast layer and bandwidth estimate: which layer it is sent and wants,
//! the estimator of a viewer of a simulcast stream (made only for those), the feedback it
//! reads, and the padding that probes its path.

use std::time::Instant;

use tern_proto::rtp::{self, HeaderOut};
use tern_proto::twcc;

use super::estimate::Bwe;
use super::{Viewer, ViewerError, ViewerState};
use crate::bwe::{BweConfig, Estimator, Usage};

/// Padding bytes of a probe packet: the most one packet's padding can say (its count is one
/// octet).
const PADDING: usize = 255;

impl Viewer {
    /// The video layer being sent (`None` before the first video packet or without
    /// video).
    pub fn video_layer(&self) -> Option<u8> {
        self.video
            .as_ref()
            .filter(|t| t.src_start.is_some())
            .map(|t| t.layer)
    }

    /// The video layer wanted: the one sent, or the one switched to at its next keyframe.
    pub fn target_layer(&self) -> u8 {
        self.video.as_ref().map_or(0, |t| t.target)
    }

    /// Starts a bandwidth estimate from transport-wide feedback, if the viewer negotiated
    /// it (the sequence number extension is then written on its video). Returns whether it
    /// has one.
    pub fn enable_bwe(&mut self, now: Instant) -> bool {
        if self.bwe.is_none() && self.video.is_some_and(|t| t.p.transport_cc_ext.is_some()) {
            self.bwe = Some(Box::new(Bwe {
                est: Estimator::new(BweConfig::default()),
                next_seq: 0,
                // A start as unpredictable as the (random) RTX SSRC (RFC 3550 §5.1), below
                // 2^15 like the media's.
                rtx_seq: self
                    .video
                    .and_then(|t| t.p.rtx)
                    .map_or(0, |(_, ssrc)| u64::from(ssrc >> 17)),
                epoch: now,
            }));
        }
        self.bwe.is_some()
    }

    /// Whether the viewer negotiated transport-wide feedback (see
    /// [`Viewer::enable_bwe`]).
    pub fn can_estimate(&self) -> bool {
        self.video.is_some_and(|t| t.p.transport_cc_ext.is_some())
    }

    /// Reads a transport-wide feedback's FCI (after its two SSRCs) into the estimate; one
    /// that does not parse is counted as dropped. Without an estimate it is ignored.
    pub fn on_transport_feedback(&mut self, fci: &[u8], now: Instant) {
        let Some(b) = self.bwe.as_mut() else {
            return;
        };
        match twcc::parse(fci) {
            Ok(fb) => {
                let t = b.micros(now);
                b.est.on_feedback(&fb, t);
            }
            Err(_) => self.counters.dropped += 1,
        }
    }

    /// Whether the viewer can be sent probe packets (an estimate and RTX negotiated).
    pub fn can_probe(&self) -> bool {
        self.bwe.is_some() && self.video.is_some_and(|t| t.p.rtx.is_some())
    }

    /// The viewer's bandwidth estimate (bit/s): from transport-wide feedback when it has
    /// [`Viewer::enable_bwe`], else its latest REMB, else none.
    pub fn estimate_bps(&self) -> Option<u64> {
        match &self.bwe {
            Some(b) if b.est.acked_bps().is_some() => Some(b.est.estimate_bps()),
            Some(_) => None,
            None => (self.remb_bps > 0).then_some(u64::from(self.remb_bps)),
        }
    }

    /// Writes one probe packet into `out`: padding only, on the RTX SSRC (so that it takes
    /// no sequence number from the media), with the next transport-wide sequence number, so
    /// that the viewer's feedback counts it. The receiver drops it after its transport
    /// layer has seen it. Returns its length, or `None` without an estimate or negotiated
    /// RTX, or before the video started.
    pub fn write_padding(&mut self, out: &mut [u8]) -> Result<Option<usize>, ViewerError> {
        if self.state != ViewerState::Connected {
            return Ok(None);
        }
        let (Some(b), Some(t), Some(srtp)) =
            (self.bwe.as_mut(), self.video.as_ref(), self.srtp.as_mut())
        else {
            return Ok(None);
        };
        let (Some((pt, ssrc)), Some(id), Some(_)) = (t.p.rtx, t.p.transport_cc_ext, t.src_start)
        else {
            return Ok(None);
        };
        let seq = b.next_seq;
        let hdr = HeaderOut {
            marker: false,
            payload_type: pt,
            sequence: b.rtx_seq as u16,
            timestamp: t.last_ts,
            ssrc,
            abs_capture_time: None,
            transport_cc: Some((id, seq)),
        };
        let hlen = rtp::write_header(out, &hdr).map_err(|_| ViewerError::BufferTooSmall)?;
        // The P bit (RFC 3550 §5.1): the payload is all padding, its last octet the count.
        out[0] |= 0x20;
        let mut pad = [0u8; PADDING];
        pad[PADDING - 1] = PADDING as u8;
        if out.len() < hlen + PADDING + srtp.rtp_tx.overhead() {
            return Err(ViewerError::BufferTooSmall);
        }
        let n = srtp
            .rtp_tx
            .protect_payload(out, hlen, &pad, (b.rtx_seq >> 16) as u32)
            .map_err(|e| ViewerError::Srtp(e.to_string()))?;
        b.next_seq = seq.wrapping_add(1);
        b.rtx_seq += 1;
        let at = b.micros(Instant::now());
        b.est.on_sent(seq, n, at);
        self.counters.probes += 1;
        Ok(Some(n))
    }

    /// What the delay-based detector last saw, with an estimate from transport-wide
    /// feedback.
    pub fn bwe_usage(&self) -> Option<Usage> {
        self.bwe.as_ref().map(|b| b.est.usage())
    }

    /// Whether the layer is pinned (see [`Viewer::set_layer`]).
    pub fn pinned(&self) -> bool {
        self.pinned
    }

    /// Wants video layer `layer` from its next keyframe on (the current one is sent until
    /// then, so the picture never stops). `pin` keeps it there: [`Viewer::pinned`] tells
    /// the owner not to move it with the bandwidth estimate.
    pub fn set_layer(&mut self, layer: u8, pin: bool) {
        self.pinned = pin;
        if let Some(t) = self.video.as_mut() {
            t.target = layer;
            t.hold = false;
            if t.src_start.is_none() {
                t.layer = layer;
            }
        }
    }

    /// As [`Viewer::set_layer`] (not pinned), for a path that cannot carry the current
    /// layer: its packets stop at once rather than at the new layer's keyframe, so that
    /// the queue drains and that keyframe gets through sooner.
    pub fn drop_to_layer(&mut self, layer: u8) {
        self.set_layer(layer, false);
        if let Some(t) = self.video.as_mut()
            && t.src_start.is_some()
            && t.layer != layer
        {
            t.hold = true;
        }
    }
}
