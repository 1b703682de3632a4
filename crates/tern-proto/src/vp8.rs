//! VP8 over RTP (RFC 7741): the payload descriptor, and frames rebuilt from payloads (for
//! recordings, which store frames as coded).

use crate::reassembly::Reassembly;

/// Length of the payload descriptor at the start of `p` (RFC 7741 §4.2), `None` when it is
/// truncated (nothing after it counts as truncated).
pub fn descriptor_len(p: &[u8]) -> Option<usize> {
    let b0 = *p.first()?;
    let mut i = 1;
    if b0 & 0x80 != 0 {
        let b1 = *p.get(i)?;
        i += 1;
        if b1 & 0x80 != 0 {
            let pic = *p.get(i)?;
            i += if pic & 0x80 != 0 { 2 } else { 1 };
        }
        if b1 & 0x40 != 0 {
            i += 1; // TL0PICIDX
        }
        if b1 & 0x30 != 0 {
            i += 1; // TID/Y/KEYIDX
        }
    }
    (i < p.len()).then_some(i)
}

/// Rebuilds VP8 frames from RTP payloads of one SSRC.
///
/// A frame starts at a payload with S=1 and partition index 0 and ends at the marker bit.
/// A sequence-number gap, a new timestamp before the marker, or a truncated descriptor
/// damages the frame in progress: it is dropped and counted, and nothing is returned until
/// the next frame start.
#[derive(Debug, Default)]
pub struct Depacketizer {
    frame: Reassembly,
}

impl Depacketizer {
    /// An empty depacketizer.
    pub fn new() -> Depacketizer {
        Depacketizer::default()
    }

    /// Feeds one payload; returns the frame it completes, if intact. Duplicate and late
    /// packets are ignored.
    pub fn push(&mut self, seq: u16, rtp_ts: u32, marker: bool, payload: &[u8]) -> Option<&[u8]> {
        let descriptor = descriptor_len(payload).map(|n| {
            let b0 = payload[0];
            (n, b0 & 0x10 != 0 && b0 & 0x07 == 0)
        });
        self.frame
            .push(seq, rtp_ts, marker, payload, descriptor, true)
    }

    /// Frames returned.
    pub fn frames(&self) -> u64 {
        self.frame.frames()
    }

    /// Frames dropped as damaged.
    pub fn damaged_frames(&self) -> u64 {
        self.frame.damaged_frames()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_rebuilt_and_a_gap_drops_one() {
        let mut d = Depacketizer::new();
        // Extended descriptor with a 15-bit picture id: X=1, S=1; I=1; M=1.
        let first = [0x90, 0x80, 0x80, 0x01, 0x10, 0x02, 0x9d];
        let middle = [0x80, 0x80, 0x80, 0x01, 0x20];
        assert_eq!(d.push(1, 100, false, &first), None);
        assert_eq!(
            d.push(2, 100, true, &middle),
            Some(&[0x10, 0x02, 0x9d, 0x20][..])
        );
        // Frame 2 loses its middle packet.
        assert_eq!(d.push(3, 200, false, &first), None);
        assert_eq!(d.push(5, 200, true, &middle), None);
        assert_eq!(d.damaged_frames(), 1);
        // A short descriptor (X=0), one packet.
        assert_eq!(
            d.push(6, 300, true, &[0x10, 0x31, 0x32]),
            Some(&[0x31, 0x32][..])
        );
        // A continuation without its start is ignored; garbage does not panic.
        assert_eq!(d.push(7, 400, true, &middle), None);
        assert_eq!(d.push(8, 500, true, &[0x80]), None);
        assert_eq!(d.push(9, 500, true, &[]), None);
        assert_eq!(d.frames(), 2);
    }
}
