//! Transport-wide congestion control feedback (draft-holmer-rmcat-transport-wide-cc-
//! extensions-01 §3.1): the RTCP transport feedback a receiver (Chromium, Firefox) sends
//! with the arrival time of every packet that carried the transport-wide sequence number
//! header extension. Sans-IO: [`parse`] reads the feedback control information (the body
//! of an RTCP packet with PT 205 and FMT 15 after the two SSRCs), [`write`] makes one
//! (tests and simulations). A bandwidth estimator turns the result into a rate.
//!
//! Wire format of the FCI:
//! ```text
//! base sequence number (16) | packet status count (16)
//! reference time (24, signed, units of 64 ms) | feedback packet count (8)
//! packet chunks (16 bits each), then one receive delta per received packet
//!   (1 byte unsigned or 2 bytes signed, units of 250 µs), then padding to 32 bits
//! chunk: 0|S(2)|run length(13)   run of one status
//!        1|0|14 one-bit symbols  (0 not received, 1 small delta)
//!        1|1|7 two-bit symbols   (00 not received, 01 small, 10 large or negative delta)
//! ```

/// FMT of transport-wide feedback within PT 205 (RTPFB).
pub const FMT_TWCC: u8 = 15;
/// Receive deltas are in units of this many microseconds.
pub const DELTA_US: i64 = 250;
/// The reference time is in units of this many microseconds.
pub const REFERENCE_US: i64 = 64_000;
/// Statuses one feedback may carry: bounds the work on a hostile packet (a 16-bit count
/// could otherwise ask for 65,535 entries from a few bytes of run-length chunks).
pub const MAX_STATUSES: usize = 8192;

/// One packet's entry in a feedback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketStatus {
    /// Its transport-wide sequence number.
    pub seq: u16,
    /// When it arrived, in µs on the receiver's clock (reference time plus the deltas so
    /// far); `None` when it was not received.
    pub arrival_us: Option<i64>,
}

/// A parsed feedback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feedback {
    /// The first sequence number it reports.
    pub base_seq: u16,
    /// Counts the feedbacks the receiver sent (wraps at 256): a gap is a lost feedback.
    pub feedback_count: u8,
    /// Every reported packet, in sequence order from `base_seq`.
    pub packets: Vec<PacketStatus>,
}

/// Why a feedback could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TwccError {
    /// Fewer bytes than the header, the chunks or the deltas need.
    #[error("transport feedback truncated")]
    Truncated,
    /// A reserved status symbol (11), or a chunk whose status needs no delta where one was
    /// counted: the feedback is malformed.
    #[error("transport feedback has a reserved packet status")]
    Reserved,
    /// More statuses than [`MAX_STATUSES`].
    #[error("transport feedback reports {0} packets, more than allowed")]
    TooMany(usize),
}

/// Status symbols.
const NOT_RECEIVED: u8 = 0;
const SMALL: u8 = 1;
const LARGE: u8 = 2;

/// Reads the FCI of a transport feedback (after the packet sender and media source SSRCs).
pub fn parse(fci: &[u8]) -> Result<Feedback, TwccError> {
    let head = fci.get(..8).ok_or(TwccError::Truncated)?;
    let base_seq = u16::from_be_bytes([head[0], head[1]]);
    let count = usize::from(u16::from_be_bytes([head[2], head[3]]));
    if count > MAX_STATUSES {
        return Err(TwccError::TooMany(count));
    }
    // 24-bit signed reference time.
    let raw = (u32::from(head[4]) << 16) | (u32::from(head[5]) << 8) | u32::from(head[6]);
    let reference = ((raw << 8) as i32 >> 8) as i64;
    let feedback_count = head[7];
    let mut statuses: Vec<u8> = Vec::with_capacity(count);
    let mut at = 8;
    while statuses.len() < count {
        let c = fci.get(at..at + 2).ok_or(TwccError::Truncated)?;
        at += 2;
        let chunk = u16::from_be_bytes([c[0], c[1]]);
        let left = count - statuses.len();
        if chunk & 0x8000 == 0 {
            let symbol = ((chunk >> 13) & 0x3) as u8;
            let run = usize::from(chunk & 0x1fff).min(left);
            statuses.extend(std::iter::repeat_n(symbol, run));
        } else if chunk & 0x4000 == 0 {
            for i in (0..14).rev().take(left) {
                statuses.push(((chunk >> i) & 1) as u8);
            }
        } else {
            for i in (0..7).rev().take(left) {
                statuses.push(((chunk >> (2 * i)) & 3) as u8);
            }
        }
    }
    let mut now = reference * REFERENCE_US;
    let mut packets = Vec::with_capacity(count);
    for (i, s) in statuses.into_iter().enumerate() {
        let seq = base_seq.wrapping_add(i as u16);
        let delta = match s {
            NOT_RECEIVED => {
                packets.push(PacketStatus {
                    seq,
                    arrival_us: None,
                });
                continue;
            }
            SMALL => {
                let b = *fci.get(at).ok_or(TwccError::Truncated)?;
                at += 1;
                i64::from(b)
            }
            LARGE => {
                let b = fci.get(at..at + 2).ok_or(TwccError::Truncated)?;
                at += 2;
                i64::from(i16::from_be_bytes([b[0], b[1]]))
            }
            _ => return Err(TwccError::Reserved),
        };
        now += delta * DELTA_US;
        packets.push(PacketStatus {
            seq,
            arrival_us: Some(now),
        });
    }
    Ok(Feedback {
        base_seq,
        feedback_count,
        packets,
    })
}

/// Writes the FCI of a feedback for `packets` (consecutive sequence numbers from the first;
/// arrival times in µs, rounded down to 250 µs against a reference time that is the first
/// arrival rounded down to 64 ms). Deltas that do not fit two bytes are clamped. Uses
/// two-bit status vectors only: simple, and what a receiver may always send.
pub fn write(packets: &[PacketStatus], feedback_count: u8, out: &mut Vec<u8>) {
    let base_seq = packets.first().map_or(0, |p| p.seq);
    let first = packets.iter().find_map(|p| p.arrival_us).unwrap_or(0);
    let reference = first.div_euclid(REFERENCE_US);
    let start = out.len();
    out.extend_from_slice(&base_seq.to_be_bytes());
    out.extend_from_slice(&(packets.len() as u16).to_be_bytes());
    out.extend_from_slice(&((reference as u32) & 0x00ff_ffff).to_be_bytes()[1..]);
    out.push(feedback_count);
    let mut now = reference * REFERENCE_US;
    let mut deltas = Vec::new();
    let mut symbols = Vec::with_capacity(packets.len());
    for p in packets {
        match p.arrival_us {
            None => symbols.push(NOT_RECEIVED),
            Some(t) => {
                let d = ((t - now) / DELTA_US).clamp(i64::from(i16::MIN), i64::from(i16::MAX));
                now += d * DELTA_US;
                if (0..=255).contains(&d) {
                    symbols.push(SMALL);
                    deltas.push(d as u8);
                } else {
                    symbols.push(LARGE);
                    deltas.extend_from_slice(&(d as i16).to_be_bytes());
                }
            }
        }
    }
    for group in symbols.chunks(7) {
        let mut chunk: u16 = 0xc000;
        for (i, s) in group.iter().enumerate() {
            chunk |= u16::from(*s) << (2 * (6 - i));
        }
        out.extend_from_slice(&chunk.to_be_bytes());
    }
    out.extend_from_slice(&deltas);
    while !(out.len() - start).is_multiple_of(4) {
        out.push(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_feedback_of_every_chunk_kind() {
        // base 100, 20 packets, reference time 2 (128 ms), feedback count 7.
        let mut fci = vec![0, 100, 0, 20, 0, 0, 2, 7];
        // Run-length chunk: 3 × small delta.
        fci.extend_from_slice(&(0x2000u16 | 3).to_be_bytes());
        // One-bit vector, 14 symbols: received, lost, received, then 11 lost.
        fci.extend_from_slice(&0xa800u16.to_be_bytes());
        // Two-bit vector: large, small, lost (its other 4 symbols past the count).
        fci.extend_from_slice(&0xe400u16.to_be_bytes());
        // Deltas: 3 small (4, 4, 8), 2 small (1, 2), a large (-4), a small (255).
        fci.extend_from_slice(&[4, 4, 8, 1, 2]);
        fci.extend_from_slice(&(-4i16).to_be_bytes());
        fci.push(255);
        let f = parse(&fci).expect("feedback");
        assert_eq!(
            (f.base_seq, f.feedback_count, f.packets.len()),
            (100, 7, 20)
        );
        let got: Vec<Option<i64>> = f.packets.iter().map(|p| p.arrival_us).collect();
        let t = |q: i64| Some(128_000 + q * 250);
        let mut want = vec![t(4), t(8), t(16), t(17), None, t(19)];
        want.extend([None; 11]);
        want.extend([t(15), t(270), None]);
        assert_eq!(got, want);
        assert_eq!(f.packets[19].seq, 119);
    }

    #[test]
    fn round_trips_and_wraps() {
        let packets: Vec<PacketStatus> = (0..40u16)
            .map(|i| PacketStatus {
                seq: 65_520u16.wrapping_add(i),
                arrival_us: (i % 5 != 3)
                    .then(|| 1_000_000 + i64::from(i) * 5_000 - i64::from(i % 4) * 9_000),
            })
            .collect();
        let mut out = Vec::new();
        write(&packets, 9, &mut out);
        assert_eq!(out.len() % 4, 0);
        let f = parse(&out).expect("feedback");
        assert_eq!(f.feedback_count, 9);
        assert_eq!(f.packets.len(), 40);
        for (a, b) in packets.iter().zip(&f.packets) {
            assert_eq!(a.seq, b.seq);
            match (a.arrival_us, b.arrival_us) {
                (Some(x), Some(y)) => assert!((x - y).abs() < DELTA_US, "{x} vs {y}"),
                (x, y) => assert_eq!(x, y),
            }
        }
        assert_eq!(f.packets[16].seq, 0, "wrapped");
    }

    #[test]
    fn refuses_truncated_reserved_and_oversized_feedback() {
        assert_eq!(parse(&[0; 7]), Err(TwccError::Truncated));
        // One small-delta status and no delta byte.
        assert_eq!(
            parse(&[0, 1, 0, 1, 0, 0, 0, 0, 0x20, 0x01]),
            Err(TwccError::Truncated)
        );
        // A reserved two-bit symbol.
        assert_eq!(
            parse(&[0, 1, 0, 1, 0, 0, 0, 0, 0xf0, 0x00]),
            Err(TwccError::Reserved)
        );
        assert_eq!(
            parse(&[0, 1, 0xff, 0xff, 0, 0, 0, 0]),
            Err(TwccError::TooMany(65_535))
        );
        // Negative reference time (24-bit two's complement).
        let f = parse(&[0, 1, 0, 1, 0xff, 0xff, 0xff, 0, 0x20, 0x01, 4, 0]).expect("ok");
        assert_eq!(f.packets[0].arrival_us, Some(-64_000 + 1_000));
    }
}
