//! H265 over RTP (RFC 7798).
//!
//! * [`packetize`] turns an access unit given as length-prefixed NAL units (the form an MP4
//!   sample and an RTSP client's depacketizer hand over) into RTP payloads: a NAL unit that
//!   fits goes in a single NAL unit packet (§4.4.1), a larger one is split into
//!   fragmentation units (type 49, §4.4.3) of equal size. Access unit delimiters (35) and
//!   NAL units of two bytes or less (a header alone) are dropped. No payload exceeds
//!   `max_payload`. A length that runs past the end of the access unit is an error, never a
//!   panic. [`packetize_nals`] does the same for NAL units already apart.
//! * [`Depacketizer`] rebuilds whole access units (Annex B) from RTP payloads, as
//!   [`crate::h264::Depacketizer`] does for H264, and counts losses; [`is_keyframe_au`]
//!   tells whether one holds an IRAP picture.
//!
//! Nothing here panics on malformed input.

use crate::reassembly::{Depacketize, Unit};
use thiserror::Error;

/// NAL unit type of an aggregation packet (§4.4.2).
pub const AP: u8 = 48;
/// NAL unit type of a fragmentation unit (§4.4.3).
pub const FU: u8 = 49;
/// NAL unit type of a PACI packet (§4.4.4).
pub const PACI: u8 = 50;
/// NAL unit type of an access unit delimiter.
pub const AUD: u8 = 35;
/// NAL unit type of a video parameter set.
pub const VPS: u8 = 32;
/// NAL unit type of a sequence parameter set.
pub const SPS: u8 = 33;
/// NAL unit type of a picture parameter set.
pub const PPS: u8 = 34;
/// The NAL unit header (2 bytes) and the FU header (1 byte).
const FU_OVERHEAD: usize = 3;
/// The smallest `max_payload` accepted: an FU must carry at least one byte.
pub const MIN_PAYLOAD: usize = FU_OVERHEAD + 1;

/// Why an access unit cannot be packetized.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum H265Error {
    /// A NAL unit's length runs past the end of the access unit.
    #[error("a NAL unit length ({len}) runs past the access unit ({left} bytes left)")]
    Truncated {
        /// The length read.
        len: usize,
        /// Bytes left after it.
        left: usize,
    },
    /// `max_payload` below [`MIN_PAYLOAD`].
    #[error("max_payload {0} is too small")]
    MaxPayloadTooSmall(usize),
}

/// The NAL unit type of a NAL unit (its header's bits 1-6).
pub fn nal_type(nal: &[u8]) -> u8 {
    nal.first().map_or(0, |b| (b >> 1) & 0x3f)
}

/// Whether a NAL unit is a parameter set (VPS, SPS or PPS).
pub fn is_parameter_set(nal: &[u8]) -> bool {
    matches!(nal_type(nal), VPS | SPS | PPS)
}

/// Whether a NAL unit is a slice of an IRAP picture (BLA, IDR, CRA and the reserved IRAP
/// types 16-23, H.265 §7.4.2.2): a picture a decoder can start at.
pub fn is_irap(nal: &[u8]) -> bool {
    (16..=23).contains(&nal_type(nal))
}

/// The parameter sets (VPS, SPS, PPS) an RTP payload carries (RFC 7798): the payload itself
/// when it is one single NAL unit, or those of an aggregation packet (no DONL). Anything
/// malformed yields what was read before it.
pub fn payload_parameter_sets(payload: &[u8]) -> impl Iterator<Item = &[u8]> {
    let (single, mut rest) = match nal_type(payload) {
        AP => (None, payload.get(2..).unwrap_or_default()),
        _ if is_parameter_set(payload) && payload.len() > 2 => (Some(payload), &[][..]),
        _ => (None, &[][..]),
    };
    let aggregated = std::iter::from_fn(move || {
        let (len, tail) = rest.split_first_chunk::<2>()?;
        let len = usize::from(u16::from_be_bytes(*len));
        let nal = tail.get(..len)?;
        rest = &tail[len..];
        Some(nal)
    });
    single
        .into_iter()
        .chain(aggregated)
        .filter(|n| is_parameter_set(n) && n.len() > 2)
}

/// Whether an RTP payload starts an IRAP picture's slice with no parameter sets before it:
/// a single IRAP NAL unit, or the first fragment of one.
pub fn payload_starts_bare_irap(payload: &[u8]) -> bool {
    match nal_type(payload) {
        FU => payload
            .get(2)
            .is_some_and(|fu| fu & 0x80 != 0 && (16..=23).contains(&(fu & 0x3f))),
        _ => is_irap(payload),
    }
}

/// The NAL units of `au`, each after a 4-byte big-endian length.
pub fn split_length_prefixed(au: &[u8]) -> Result<Vec<&[u8]>, H265Error> {
    let mut out = Vec::new();
    let mut rest = au;
    while !rest.is_empty() {
        let Some((len, tail)) = rest.split_first_chunk::<4>() else {
            return Err(H265Error::Truncated {
                len: 4,
                left: rest.len(),
            });
        };
        let len = u32::from_be_bytes(*len) as usize;
        if len > tail.len() {
            return Err(H265Error::Truncated {
                len,
                left: tail.len(),
            });
        }
        out.push(&tail[..len]);
        rest = &tail[len..];
    }
    Ok(out)
}

/// Packetizes one access unit of 4-byte length-prefixed NAL units; `emit(payload, last)`
/// once per RTP payload, `last` on the access unit's final one (the marker bit).
pub fn packetize(
    au: &[u8],
    max_payload: usize,
    emit: &mut dyn FnMut(&[u8], bool),
) -> Result<(), H265Error> {
    packetize_nals(&split_length_prefixed(au)?, max_payload, emit)
}

/// [`packetize`] for an access unit whose NAL units are already apart (each without a
/// length or start code), as an MP4 sample's are once cut.
pub fn packetize_nals(
    nals: &[&[u8]],
    max_payload: usize,
    emit: &mut dyn FnMut(&[u8], bool),
) -> Result<(), H265Error> {
    if max_payload < MIN_PAYLOAD {
        return Err(H265Error::MaxPayloadTooSmall(max_payload));
    }
    let nals: Vec<&[u8]> = nals
        .iter()
        .copied()
        .filter(|n| n.len() > 2 && nal_type(n) != AUD)
        .collect();
    let mut scratch = Vec::with_capacity(max_payload);
    for (i, nal) in nals.iter().enumerate() {
        let last_nal = i + 1 == nals.len();
        if nal.len() <= max_payload {
            emit(nal, last_nal);
            continue;
        }
        // FU: the NAL header with type 49 (F, layer id and TID kept), then S/E and the type.
        let header = [(nal[0] & 0x81) | (FU << 1), nal[1]];
        let body = &nal[2..];
        let cap = max_payload - FU_OVERHEAD;
        let n = body.len().div_ceil(cap);
        let size = body.len().div_ceil(n);
        for (j, part) in body.chunks(size).enumerate() {
            let (start, end) = (j == 0, j + 1 == n);
            scratch.clear();
            scratch.extend_from_slice(&header);
            scratch.push(u8::from(start) << 7 | u8::from(end) << 6 | nal_type(nal));
            scratch.extend_from_slice(part);
            emit(&scratch, last_nal && end);
        }
    }
    Ok(())
}

/// Largest access unit the [`Depacketizer`] rebuilds (a 4K IRAP picture at a high bitrate
/// fits, as in [`crate::ts::MAX_PES`]); a larger one is damaged ([`DepacketizeError::TooLarge`]).
pub const MAX_ACCESS_UNIT: usize = 4 << 20;

/// Whether an Annex B access unit (as the [`Depacketizer`] returns) holds a slice of an IRAP
/// picture (NAL unit types 16-23, [`is_irap`]): one a decoder can start at. Whether its
/// parameter sets came with it is [`is_parameter_set`] on its NAL units
/// ([`crate::h264::nal_units`] splits H265 Annex B as well).
pub fn is_keyframe_au(annex_b: &[u8]) -> bool {
    crate::h264::nal_units(annex_b).any(is_irap)
}

/// A malformed RTP payload given to the [`Depacketizer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DepacketizeError {
    /// The payload is shorter than its 2-byte payload header.
    #[error("payload shorter than its header")]
    Empty,
    /// An aggregation packet without a unit, or whose unit sizes do not match the payload
    /// (or announce a NAL unit shorter than its 2-byte header).
    #[error("malformed aggregation packet")]
    BadAggregation,
    /// A fragmentation unit without its FU header, with both start and end bits, or whose
    /// FuType is an aggregation, fragmentation or PACI packet.
    #[error("malformed fragmentation unit")]
    BadFragment,
    /// A payload type the depacketizer does not take: PACI (50) or unassigned (51-63).
    #[error("unsupported payload type {0}")]
    Unsupported(u8),
    /// The access unit grows past [`MAX_ACCESS_UNIT`].
    #[error("access unit over {MAX_ACCESS_UNIT} bytes")]
    TooLarge,
}

/// Reassembles H265 access units from RTP payloads (RFC 7798), with the API and the
/// behaviour of [`crate::h264::Depacketizer`].
///
/// Feed every received packet of one SSRC to [`Depacketizer::push`]; complete, intact
/// access units come back as Annex B with 4-byte start codes, NAL units in the order
/// received. It takes single NAL unit packets (types 0-47), aggregation packets (48) and
/// fragmentation units (49, S/E bits) without DONL fields: tern never signals
/// `sprop-max-don-diff`, so the sender may not add them (RFC 7798 §4.4). PACI packets (50)
/// are dropped, and with them whatever NAL unit they carried: their access unit is
/// damaged ([`DepacketizeError::Unsupported`]).
///
/// An access unit ends at the marker bit. A sequence-number gap, a broken fragmentation
/// unit, a malformed payload, an access unit over [`MAX_ACCESS_UNIT`] or a missing marker
/// (the RTP timestamp changes before the marker arrives) makes it *damaged*: it is dropped
/// and counted in [`Depacketizer::damaged_frames`].
#[derive(Debug, Default)]
pub struct Depacketizer {
    /// The access unit in progress; `in_fragment`: a fragmentation unit is in progress (its
    /// start fragment was seen).
    au: Unit,
}

impl Depacketizer {
    /// The aggregation units of an aggregation packet (after its payload header): a 16-bit
    /// size, then a NAL unit of that size, each; no DONL/DOND fields.
    fn push_aggregated(&mut self, mut rest: &[u8]) -> Result<(), DepacketizeError> {
        if rest.is_empty() {
            return Err(DepacketizeError::BadAggregation);
        }
        while !rest.is_empty() {
            let [a, b, tail @ ..] = rest else {
                return Err(DepacketizeError::BadAggregation);
            };
            let len = usize::from(u16::from_be_bytes([*a, *b]));
            if len < 2 || len > tail.len() {
                return Err(DepacketizeError::BadAggregation);
            }
            let (nal, tail) = tail.split_at(len);
            self.push_nal(nal)?;
            rest = tail;
        }
        Ok(())
    }

    /// Appends a start code and `nal`.
    fn push_nal(&mut self, nal: &[u8]) -> Result<(), DepacketizeError> {
        self.extend(&[0, 0, 0, 1])?;
        self.extend(nal)
    }

    fn extend(&mut self, data: &[u8]) -> Result<(), DepacketizeError> {
        if self.au.buf.len() + data.len() > MAX_ACCESS_UNIT {
            return Err(DepacketizeError::TooLarge);
        }
        self.au.buf.extend_from_slice(data);
        Ok(())
    }
}

impl Depacketize for Depacketizer {
    type Error = DepacketizeError;

    fn unit(&mut self) -> &mut Unit {
        &mut self.au
    }

    fn is_keyframe(au: &[u8]) -> bool {
        is_keyframe_au(au)
    }

    fn settle(&mut self, result: &Result<(), DepacketizeError>, _marker: bool) {
        // Nothing of a damaged access unit is returned: hold no memory for it.
        self.au.discard_damaged(result);
    }

    fn add_payload(&mut self, payload: &[u8]) -> Result<(), DepacketizeError> {
        let [h0, h1, body @ ..] = payload else {
            return Err(DepacketizeError::Empty);
        };
        match nal_type(payload) {
            0..=47 => {
                self.au.end_fragment();
                self.push_nal(payload)
            }
            AP => {
                self.au.end_fragment();
                let start = self.au.buf.len();
                let result = self.push_aggregated(body);
                if result.is_err() {
                    self.au.buf.truncate(start);
                }
                result
            }
            FU => {
                let [fu, data @ ..] = body else {
                    return Err(DepacketizeError::BadFragment);
                };
                let (start, end, fu_type) = (fu & 0x80 != 0, fu & 0x40 != 0, fu & 0x3f);
                if (start && end) || fu_type >= AP {
                    return Err(DepacketizeError::BadFragment);
                }
                if !self.au.fragment(start, end) {
                    return Ok(());
                }
                if start {
                    // The fragmented NAL unit's header: F, layer id and TID of the payload
                    // header, with FuType as its type.
                    self.push_nal(&[(h0 & 0x81) | (fu_type << 1), *h1])?;
                }
                self.extend(data)
            }
            t => Err(DepacketizeError::Unsupported(t)),
        }
    }
}

crate::reassembly::depacketizer_api! {
    au, "access unit", "malformed or unsupported", "held an IRAP picture ([`is_keyframe_au`])",
    "Access units dropped because of loss, malformed or unsupported payloads, or size."
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_sets_and_bare_irap_starts_are_read_from_payloads() {
        let vps = [0x40, 0x01, 0x0c];
        let sps = [0x42, 0x01, 0x01, 0x01];
        let pps = [0x44, 0x01, 0xc1];
        let idr = [0x26, 0x01, 0xaf];
        let cra = [0x2a, 0x01, 0xaf];
        let mut ap = vec![AP << 1, 0x01];
        for n in [&vps[..], &sps, &pps] {
            ap.extend_from_slice(&(n.len() as u16).to_be_bytes());
            ap.extend_from_slice(n);
        }
        let got: Vec<&[u8]> = payload_parameter_sets(&ap).collect();
        assert_eq!(got, [&vps[..], &sps, &pps]);
        assert_eq!(payload_parameter_sets(&sps).count(), 1);
        assert_eq!(payload_parameter_sets(&idr).count(), 0);
        // Truncated aggregation: what came before the cut.
        assert_eq!(payload_parameter_sets(&ap[..ap.len() - 1]).count(), 2);
        assert_eq!(payload_parameter_sets(&[AP << 1]).count(), 0);
        assert!(payload_starts_bare_irap(&idr) && payload_starts_bare_irap(&cra));
        assert!(!payload_starts_bare_irap(&ap) && !payload_starts_bare_irap(&vps));
        // FU of a CRA: the start fragment only.
        let fu_start = [FU << 1, 0x01, 0x80 | 21, 0xaa];
        let fu_middle = [FU << 1, 0x01, 21, 0xaa];
        let fu_p = [FU << 1, 0x01, 0x80 | 1, 0xaa];
        assert!(payload_starts_bare_irap(&fu_start));
        assert!(!payload_starts_bare_irap(&fu_middle) && !payload_starts_bare_irap(&fu_p));
        assert!(!payload_starts_bare_irap(&[]) && !payload_starts_bare_irap(&[FU << 1, 1]));
    }
    use crate::codec::VideoCodec;
    use crate::test_rng::Rng;

    fn au(nals: &[&[u8]]) -> Vec<u8> {
        let mut v = Vec::new();
        for n in nals {
            v.extend_from_slice(&(n.len() as u32).to_be_bytes());
            v.extend_from_slice(n);
        }
        v
    }

    #[test]
    fn small_nals_go_whole_and_large_ones_in_fragments() {
        let vps = [32 << 1, 1, 0xaa, 0xbb];
        let aud = [35 << 1, 1, 0x50];
        let mut idr = vec![19 << 1, 1];
        idr.extend((0..2500u32).map(|i| i as u8));
        let mut out: Vec<(Vec<u8>, bool)> = Vec::new();
        packetize(&au(&[&vps, &aud, &idr]), 1200, &mut |p, last| {
            out.push((p.to_vec(), last))
        })
        .expect("packetize");
        assert_eq!(out.len(), 1 + 3, "VPS whole, the IDR in three fragments");
        assert_eq!(out[0], (vps.to_vec(), false));
        assert!(VideoCodec::H265.is_keyframe(&out[0].0));
        assert!(
            VideoCodec::H265.is_keyframe(&out[1].0),
            "FU start of an IDR"
        );
        assert!(out.iter().all(|(p, _)| p.len() <= 1200));
        assert!(out[3].1 && !out[2].1);
        assert_eq!(out[1].0[2], 0x80 | 19);
        assert_eq!(out[3].0[2], 0x40 | 19);
        // The fragments put back together are the NAL unit.
        let mut back = idr[..2].to_vec();
        for (p, _) in &out[1..] {
            back.extend_from_slice(&p[3..]);
        }
        assert_eq!(back, idr);
    }

    #[test]
    fn truncated_lengths_are_errors() {
        let mut bad = au(&[&[1 << 1, 1, 2]]);
        bad.extend_from_slice(&[0, 0, 0, 9, 1]);
        assert!(matches!(
            packetize(&bad, 1200, &mut |_, _| {}),
            Err(H265Error::Truncated { len: 9, left: 1 })
        ));
        assert!(packetize(&[0, 0], 1200, &mut |_, _| {}).is_err());
        assert!(packetize(&[], 3, &mut |_, _| {}).is_err());
    }

    fn annex_b(nals: &[&[u8]]) -> Vec<u8> {
        let mut v = Vec::new();
        for n in nals {
            v.extend_from_slice(&[0, 0, 0, 1]);
            v.extend_from_slice(n);
        }
        v
    }

    fn packets(nals: &[&[u8]], max: usize) -> Vec<(Vec<u8>, bool)> {
        let mut out = Vec::new();
        packetize(&au(nals), max, &mut |p, m| out.push((p.to_vec(), m))).expect("packetize");
        out
    }

    /// An aggregation packet (no DONL) of `nals`.
    fn aggregate(nals: &[&[u8]]) -> Vec<u8> {
        let mut v = vec![AP << 1, 1];
        for n in nals {
            v.extend_from_slice(&(n.len() as u16).to_be_bytes());
            v.extend_from_slice(n);
        }
        v
    }

    /// A NAL unit of `len` bytes of type `t` (layer 0, TID 1), bytes from `rng`.
    fn nal(t: u8, len: usize, rng: &mut Rng) -> Vec<u8> {
        let mut n = vec![t << 1, 1];
        n.extend((2..len).map(|_| 1 + rng.below(255) as u8));
        n
    }

    #[test]
    fn packetizer_output_depacketizes_back() {
        let mut rng = Rng(0x5eed_1234_abcd_0001);
        let mut de = Depacketizer::new();
        let mut seq = 65_500u16;
        let mut keys = 0;
        for frame in 0..200u32 {
            let max = MIN_PAYLOAD + rng.below(1400);
            let mut owned = vec![vec![AUD << 1, 1, 0x50]];
            let key = frame % 25 == 0;
            if key {
                keys += 1;
                for t in [VPS, SPS, PPS] {
                    owned.push(nal(t, 3 + rng.below(30), &mut rng));
                }
            }
            for _ in 0..1 + rng.below(3) {
                let bound = if rng.below(4) == 0 { 20_000 } else { 300 };
                owned.push(nal(
                    if key { 19 } else { 1 },
                    3 + rng.below(bound),
                    &mut rng,
                ));
            }
            let nals: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
            let mut got = None;
            for (p, m) in packets(&nals, max) {
                let r = de.push(seq, frame * 3000, m, &p).expect("well-formed");
                seq = seq.wrapping_add(1);
                if let Some(au) = r {
                    assert!(got.is_none());
                    got = Some(au.to_vec());
                }
            }
            // The packetizer drops the access unit delimiter.
            let want = annex_b(&nals[1..]);
            assert_eq!(got.as_deref(), Some(&want[..]), "frame {frame}");
            assert_eq!(is_keyframe_au(&want), key);
        }
        assert_eq!(de.frames(), 200);
        assert_eq!(de.keyframes(), keys);
        assert_eq!(de.damaged_frames(), 0);
        assert_eq!(de.lost_packets(), 0);
    }

    #[test]
    fn single_aggregated_and_fragmented_nal_units() {
        let mut rng = Rng(7);
        let vps = nal(VPS, 20, &mut rng);
        let sps = nal(SPS, 30, &mut rng);
        let pps = nal(PPS, 6, &mut rng);
        let sei = nal(39, 9, &mut rng);
        // A CRA slice (21) with layer id 0 and TID 1, in three fragments.
        let cra = nal(21, 3000, &mut rng);
        let fu = |s: bool, e: bool, data: &[u8]| {
            let mut p = vec![FU << 1, 1, u8::from(s) << 7 | u8::from(e) << 6 | 21];
            p.extend_from_slice(data);
            p
        };
        let mut de = Depacketizer::new();
        let pkts = [
            aggregate(&[&vps, &sps, &pps]),
            sei.clone(),
            fu(true, false, &cra[2..1000]),
            fu(false, false, &cra[1000..2000]),
            fu(false, true, &cra[2000..]),
        ];
        for (i, p) in pkts.iter().enumerate() {
            let last = i + 1 == pkts.len();
            let r = de
                .push(10 + i as u16, 90_000, last, p)
                .expect("well-formed");
            if last {
                let want = annex_b(&[&vps, &sps, &pps, &sei, &cra]);
                assert_eq!(r, Some(&want[..]));
            } else {
                assert_eq!(r, None);
            }
        }
        assert_eq!((de.frames(), de.keyframes()), (1, 1));
        // A trailing picture of one slice; then one AP of two slices (one of one byte past
        // the header) alone.
        let trail = nal(1, 40, &mut rng);
        assert_eq!(
            de.push(15, 93_000, true, &trail),
            Ok(Some(&annex_b(&[&trail])[..]))
        );
        let tiny = [1 << 1, 1];
        let ap = aggregate(&[&trail, &tiny]);
        assert_eq!(
            de.push(16, 96_000, true, &ap),
            Ok(Some(&annex_b(&[&trail, &tiny])[..]))
        );
        assert_eq!((de.frames(), de.keyframes()), (3, 1));
        assert_eq!(de.damaged_frames(), 0);
        assert!(!is_keyframe_au(&annex_b(&[&vps, &sps, &pps, &trail])));
        assert!(!is_keyframe_au(&[]));
    }

    #[test]
    fn a_lost_fragment_damages_its_access_unit_only() {
        let mut rng = Rng(3);
        let idr = nal(19, 5000, &mut rng);
        let pkts = packets(&[&idr], 1200);
        assert!(pkts.len() >= 4);
        let mut de = Depacketizer::new();
        for (i, (p, m)) in pkts.iter().enumerate() {
            if i != 2 {
                assert_eq!(de.push(i as u16, 0, *m, p), Ok(None));
            }
        }
        assert_eq!((de.damaged_frames(), de.lost_packets()), (1, 1));
        // The next access unit comes out whole.
        let base = pkts.len() as u16;
        let mut out = None;
        for (i, (p, m)) in pkts.iter().enumerate() {
            if let Some(au) = de.push(base + i as u16, 3000, *m, p).expect("ok") {
                out = Some(au.to_vec());
            }
        }
        assert_eq!(out, Some(annex_b(&[&idr])));
        // A lost marker packet: seen when the timestamp changes.
        let base = base * 2;
        for (i, (p, _)) in pkts.iter().enumerate().take(pkts.len() - 1) {
            assert_eq!(de.push(base + i as u16, 6000, false, p), Ok(None));
        }
        let trail = [1 << 1, 1, 0xaa];
        assert_eq!(
            de.push(base + pkts.len() as u16 - 1, 9000, true, &trail),
            Ok(Some(&annex_b(&[&trail])[..]))
        );
        // A fragment's start then a single NAL unit packet: the FU lost its end.
        let base = base + pkts.len() as u16;
        assert_eq!(de.push(base, 12_000, false, &pkts[0].0), Ok(None));
        assert_eq!(de.push(base + 1, 12_000, true, &trail), Ok(None));
        // Duplicates and late packets are ignored.
        assert_eq!(de.push(base + 1, 12_000, true, &trail), Ok(None));
        assert_eq!(de.push(base, 12_000, true, &trail), Ok(None));
        assert_eq!(de.damaged_frames(), 3);
        assert_eq!(de.frames(), 2);
        assert_eq!(de.keyframes(), 1);
    }

    #[test]
    fn malformed_payloads_are_errors_and_damage_their_access_unit() {
        let mut de = Depacketizer::new();
        let bad: [(&[u8], DepacketizeError); 12] = [
            (&[], DepacketizeError::Empty),
            (&[1 << 1], DepacketizeError::Empty),
            // AP: no unit, a size past the end, a size of one, a lone size byte.
            (&[AP << 1, 1], DepacketizeError::BadAggregation),
            (&[AP << 1, 1, 0, 9, 2, 1], DepacketizeError::BadAggregation),
            (&[AP << 1, 1, 0, 1, 2], DepacketizeError::BadAggregation),
            (
                &[AP << 1, 1, 0, 2, 2, 1, 0],
                DepacketizeError::BadAggregation,
            ),
            // FU: no FU header, S and E both, FuType of an AP.
            (&[FU << 1, 1], DepacketizeError::BadFragment),
            (&[FU << 1, 1, 0xc0 | 19, 1], DepacketizeError::BadFragment),
            (&[FU << 1, 1, 0x80 | 48, 1], DepacketizeError::BadFragment),
            // PACI and unassigned types.
            (
                &[PACI << 1, 1, 0, 0, 2, 1],
                DepacketizeError::Unsupported(PACI),
            ),
            (&[51 << 1, 1, 0], DepacketizeError::Unsupported(51)),
            (&[0x7f, 0xff, 0], DepacketizeError::Unsupported(63)),
        ];
        for (i, (p, e)) in bad.iter().enumerate() {
            assert_eq!(de.push(i as u16, i as u32, true, p), Err(*e), "{p:?}");
        }
        assert_eq!(de.frames(), 0);
        assert_eq!(de.damaged_frames(), bad.len() as u64);
        // An error before the marker: the rest of the access unit is dropped too.
        let n = bad.len() as u16;
        let trail = [1 << 1, 1, 0xaa];
        assert_eq!(
            de.push(n, 100, false, &[AP << 1, 1, 0xff, 0xff]),
            Err(DepacketizeError::BadAggregation)
        );
        assert_eq!(de.push(n + 1, 100, true, &trail), Ok(None));
        assert_eq!(de.damaged_frames(), bad.len() as u64 + 1);
        assert_eq!(
            de.push(n + 2, 200, true, &trail),
            Ok(Some(&annex_b(&[&trail])[..]))
        );
    }

    #[test]
    fn access_units_are_bounded() {
        let mut de = Depacketizer::new();
        let chunk = vec![0x5a; 60_000];
        let mut start = vec![FU << 1, 1, 0x80 | 19];
        start.extend_from_slice(&chunk);
        let mut middle = vec![FU << 1, 1, 19];
        middle.extend_from_slice(&chunk);
        assert_eq!(de.push(0, 0, false, &start), Ok(None));
        let mut seq = 1;
        let mut err = None;
        while seq < 100 {
            if let Err(e) = de.push(seq, 0, false, &middle) {
                err = Some(e);
                break;
            }
            seq += 1;
        }
        assert_eq!(err, Some(DepacketizeError::TooLarge));
        assert_eq!(seq as usize, MAX_ACCESS_UNIT / chunk.len());
        let mut end = vec![FU << 1, 1, 0x40 | 19];
        end.extend_from_slice(&chunk);
        assert_eq!(de.push(seq + 1, 0, true, &end), Ok(None));
        assert_eq!((de.frames(), de.damaged_frames()), (0, 1));
        let trail = [1 << 1, 1, 0xaa];
        assert_eq!(
            de.push(seq + 2, 1, true, &trail),
            Ok(Some(&annex_b(&[&trail])[..]))
        );
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = Rng(99);
        let mut de = Depacketizer::new();
        for i in 0..5000u32 {
            let len = rng.below(40);
            let mut buf: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            if let Some(b) = buf.first_mut() {
                // Mostly the types the depacketizer takes.
                *b = (*b & 0x81) | ((46 + rng.below(6) as u8) << 1);
            }
            if let Ok(Some(au)) = de.push(i as u16, i / 4, rng.below(3) == 0, &buf) {
                assert!(au.starts_with(&[0, 0, 0, 1]));
                let _ = is_keyframe_au(au);
            }
        }
        assert!(de.keyframes() <= de.frames());
    }
}
