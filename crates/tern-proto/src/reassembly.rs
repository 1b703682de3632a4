//! What the VP8 and VP9 depacketizers share: a frame rebuilt from the payloads of one SSRC
//! between a start flag and the marker bit, damaged (dropped and counted) by a
//! sequence-number gap, a new timestamp before the marker or a truncated descriptor.

/// One SSRC's frame in progress and the counts.
#[derive(Debug, Default)]
pub(crate) struct Reassembly {
    frame: Vec<u8>,
    /// `frame` holds a finished frame returned by the previous push.
    ready: bool,
    in_frame: bool,
    ts: u32,
    damaged: bool,
    last_seq: Option<u16>,
    frames: u64,
    damaged_frames: u64,
}

impl Reassembly {
    /// Feeds one payload whose descriptor parsed to `descriptor` (its length and whether
    /// the payload starts a frame; `None`: truncated). `restart`: a start inside a frame
    /// drops that frame and begins anew (else the start is taken only between frames).
    /// Returns the frame it completes, if intact; duplicate and late packets are ignored.
    pub(crate) fn push(
        &mut self,
        seq: u16,
        rtp_ts: u32,
        marker: bool,
        payload: &[u8],
        descriptor: Option<(usize, bool)>,
        restart: bool,
    ) -> Option<&[u8]> {
        if self.ready {
            self.frame.clear();
            self.ready = false;
        }
        if let Some(last) = self.last_seq {
            let ahead = seq.wrapping_sub(last);
            if ahead == 0 || ahead >= 0x8000 {
                return None;
            }
            if ahead > 1 && self.in_frame {
                self.damaged = true;
            }
        }
        self.last_seq = Some(seq);
        if self.in_frame && rtp_ts != self.ts {
            self.drop_frame();
        }
        let Some((n, start)) = descriptor else {
            if self.in_frame {
                self.damaged = true;
            }
            return None;
        };
        if start && (restart || !self.in_frame) {
            if self.in_frame {
                self.drop_frame();
            }
            self.in_frame = true;
            self.damaged = false;
            self.ts = rtp_ts;
            self.frame.clear();
        }
        if !self.in_frame {
            return None;
        }
        self.frame.extend_from_slice(&payload[n..]);
        if !marker {
            return None;
        }
        self.in_frame = false;
        if self.damaged {
            self.damaged_frames += 1;
            self.frame.clear();
            return None;
        }
        self.frames += 1;
        self.ready = true;
        Some(&self.frame)
    }

    fn drop_frame(&mut self) {
        self.in_frame = false;
        self.damaged_frames += 1;
        self.frame.clear();
    }

    /// Frames returned.
    pub(crate) fn frames(&self) -> u64 {
        self.frames
    }

    /// Frames dropped as damaged.
    pub(crate) fn damaged_frames(&self) -> u64 {
        self.damaged_frames
    }
}
