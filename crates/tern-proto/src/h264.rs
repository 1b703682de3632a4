//! H264 over RTP (RFC 6184), packetization mode 1.
//!
//! * [`nal_units`] splits an Annex B byte stream (start-code delimited) into NAL units
//!   without allocating.
//! * [`Packetizer`] turns the NAL units of one access unit into RTP payloads: single NAL
//!   unit packets, STAP-A aggregates of small NAL units (SPS+PPS) and FU-A fragments of
//!   equal size, so that every packet of a frame but the last has the same length and the
//!   frame can be sent with one UDP GSO call.
//! * [`is_keyframe`] tells whether an RTP payload starts a decodable picture.
//! * [`Depacketizer`] reassembles access units for test clients and counts losses.
//!
//! Nothing here panics on malformed input.

use crate::reassembly::{Depacketize, Unit};
use thiserror::Error;

/// NAL unit type of a non-IDR coded slice.
pub const NAL_SLICE: u8 = 1;
/// NAL unit type of a coded slice of an IDR picture.
pub const NAL_IDR: u8 = 5;
/// NAL unit type of supplemental enhancement information.
pub const NAL_SEI: u8 = 6;
/// NAL unit type of a sequence parameter set.
pub const NAL_SPS: u8 = 7;
/// NAL unit type of a picture parameter set.
pub const NAL_PPS: u8 = 8;
/// NAL unit type of an access unit delimiter.
pub const NAL_AUD: u8 = 9;
/// RTP payload type of a single-time aggregation packet (RFC 6184 §5.7.1).
pub const NAL_STAP_A: u8 = 24;
/// RTP payload type of a fragmentation unit without DON (RFC 6184 §5.8).
pub const NAL_FU_A: u8 = 28;

/// Smallest `max_payload` the packetizer accepts: an FU-A needs two header bytes and at
/// least one byte of data per fragment.
pub const MIN_PAYLOAD: usize = 3;

/// The NAL unit type (low five bits of the first byte); 0 for an empty slice.
pub fn nal_type(nal: &[u8]) -> u8 {
    nal.first().map_or(0, |b| b & 0x1f)
}

/// The `profile-level-id` of the sequence parameter set an RTP payload carries, whole or in
/// a STAP-A: its `profile_idc`, constraint flags and `level_idc` (RFC 6184 §8.1: the three
/// bytes after the SPS's NAL header). `None` for any other payload, or one cut short.
pub fn sps_profile_level_id(payload: &[u8]) -> Option<[u8; 3]> {
    let sps = |nal: &[u8]| -> Option<[u8; 3]> {
        if nal_type(nal) != NAL_SPS {
            return None;
        }
        nal.get(1..4)?.try_into().ok()
    };
    match nal_type(payload) {
        NAL_SPS => sps(payload),
        NAL_STAP_A => {
            let mut rest = payload.get(1..)?;
            while rest.len() >= 2 {
                let n = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
                let nal = rest.get(2..2 + n)?;
                if let Some(id) = sps(nal) {
                    return Some(id);
                }
                rest = &rest[2 + n..];
            }
            None
        }
        _ => None,
    }
}

/// Position of the first `00 00 01` in `data`.
fn find_start_code(data: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i + 2 < data.len() {
        // Step quickly over bytes that cannot be the `01` of a start code.
        match data[i + 2] {
            1 if data[i] == 0 && data[i + 1] == 0 => return Some(i),
            0 => i += 1,
            _ => i += 3,
        }
    }
    None
}

/// Splits an Annex B byte stream into NAL units (without start codes).
///
/// Both 3- and 4-byte start codes are recognised; trailing zero bytes before a start code
/// are removed; bytes before the first start code and empty NAL units are skipped.
pub fn nal_units(annex_b: &[u8]) -> NalUnits<'_> {
    let rest = match find_start_code(annex_b) {
        Some(p) => &annex_b[p + 3..],
        None => &[],
    };
    NalUnits { rest }
}

/// Iterator returned by [`nal_units`].
#[derive(Debug, Clone)]
pub struct NalUnits<'a> {
    /// Bytes just after a start code.
    rest: &'a [u8],
}

impl<'a> Iterator for NalUnits<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        while !self.rest.is_empty() {
            let (nal, rest) = match find_start_code(self.rest) {
                Some(p) => (&self.rest[..p], &self.rest[p + 3..]),
                None => (self.rest, &[][..]),
            };
            self.rest = rest;
            let end = nal.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
            if end > 0 {
                return Some(&nal[..end]);
            }
        }
        None
    }
}

/// Misuse of the [`Packetizer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PacketizeError {
    /// `max_payload` is below [`MIN_PAYLOAD`].
    #[error("max_payload {0} is below the minimum of {MIN_PAYLOAD} bytes")]
    MaxPayloadTooSmall(usize),
}

/// H264 RTP packetizer for packetization mode 1 (RFC 6184 §6.3).
///
/// Owns a scratch buffer, reused across calls, in which STAP-A and FU-A payloads are
/// assembled; single NAL unit packets are emitted straight from the input.
#[derive(Debug, Default)]
pub struct Packetizer {
    scratch: Vec<u8>,
}

impl Packetizer {
    /// A packetizer with an empty scratch buffer (it grows to `max_payload` on first use).
    pub fn new() -> Packetizer {
        Packetizer::default()
    }

    /// Packetizes the NAL units of one access unit.
    ///
    /// `emit(payload, last)` is called once per RTP payload in sending order; `last` is
    /// true for the final payload of the access unit (set the RTP marker bit on it).
    /// Access unit delimiters and empty NAL units are dropped. Consecutive NAL units that
    /// fit together are aggregated into a STAP-A, a NAL unit that fits on its own goes in
    /// a single NAL unit packet, and a larger one is split into FU-A fragments of equal
    /// size (`n = ceil(len / cap)` fragments of `ceil(len / n)` bytes, the last possibly
    /// smaller). No payload exceeds `max_payload`. Nothing is emitted if the access unit
    /// holds no NAL unit to send.
    pub fn packetize(
        &mut self,
        access_unit_nals: &[&[u8]],
        max_payload: usize,
        emit: &mut impl FnMut(&[u8], bool),
    ) -> Result<(), PacketizeError> {
        if max_payload < MIN_PAYLOAD {
            return Err(PacketizeError::MaxPayloadTooSmall(max_payload));
        }
        let keep = |n: &&&[u8]| !n.is_empty() && nal_type(n) != NAL_AUD;
        let Some(last_idx) = access_unit_nals.iter().rposition(|n| keep(&n)) else {
            return Ok(());
        };
        // NAL units waiting to be sent together: indices into `access_unit_nals`.
        let mut pending_start = 0;
        let mut pending_count = 0usize;
        // Size of the pending NAL units as a STAP-A: 1 header byte + (2 + len) each.
        let mut pending_stap_len = 1usize;

        for (i, nal) in access_unit_nals.iter().enumerate().take(last_idx + 1) {
            if !keep(&nal) {
                continue;
            }
            let would_be = pending_stap_len + 2 + nal.len();
            let fits_alone = nal.len() <= max_payload;
            // Capping a STAP-A at 64 KiB keeps every unit length within its 16-bit field.
            let stap_cap = max_payload.min(usize::from(u16::MAX));
            if pending_count > 0 && fits_alone && would_be <= stap_cap {
                pending_count += 1;
                pending_stap_len = would_be;
                continue;
            }
            if pending_count > 0 {
                self.flush(
                    access_unit_nals,
                    pending_start,
                    i,
                    pending_count,
                    false,
                    emit,
                );
                pending_count = 0;
                pending_stap_len = 1;
            }
            if fits_alone {
                pending_start = i;
                pending_count = 1;
                pending_stap_len = 1 + 2 + nal.len();
            } else {
                self.fragment(nal, max_payload, i == last_idx, emit);
            }
        }
        if pending_count > 0 {
            self.flush(
                access_unit_nals,
                pending_start,
                last_idx + 1,
                pending_count,
                true,
                emit,
            );
        }
        Ok(())
    }

    /// Emits the kept NAL units of `nals[start..end]` (`count` of them) as one packet.
    fn flush(
        &mut self,
        nals: &[&[u8]],
        start: usize,
        end: usize,
        count: usize,
        last: bool,
        emit: &mut impl FnMut(&[u8], bool),
    ) {
        let group = nals[start..end]
            .iter()
            .filter(|n| !n.is_empty() && nal_type(n) != NAL_AUD);
        if count == 1 {
            if let Some(nal) = group.clone().next() {
                emit(nal, last);
            }
            return;
        }
        self.scratch.clear();
        self.scratch.push(0);
        let mut f_nri = 0u8;
        for nal in group {
            let h = nal[0];
            f_nri = (f_nri & 0x80) | (h & 0x80) | (f_nri & 0x60).max(h & 0x60);
            // `packetize` caps a STAP-A at 64 KiB, so every unit length fits in 16 bits.
            let len = u16::try_from(nal.len()).unwrap_or(u16::MAX);
            self.scratch.extend_from_slice(&len.to_be_bytes());
            self.scratch.extend_from_slice(nal);
        }
        self.scratch[0] = f_nri | NAL_STAP_A;
        emit(&self.scratch, last);
    }

    /// Emits `nal` as FU-A fragments of equal size.
    fn fragment(
        &mut self,
        nal: &[u8],
        max_payload: usize,
        last_nal: bool,
        emit: &mut impl FnMut(&[u8], bool),
    ) {
        let header = nal[0];
        let data = &nal[1..];
        let cap = max_payload - 2;
        let n = data.len().div_ceil(cap);
        let size = data.len().div_ceil(n);
        let indicator = (header & 0xe0) | NAL_FU_A;
        let count = data.len().div_ceil(size);
        for (k, chunk) in data.chunks(size).enumerate() {
            let start = if k == 0 { 0x80 } else { 0 };
            let end = if k + 1 == count { 0x40 } else { 0 };
            self.scratch.clear();
            self.scratch.push(indicator);
            self.scratch.push(start | end | (header & 0x1f));
            self.scratch.extend_from_slice(chunk);
            emit(&self.scratch, last_nal && end != 0);
        }
    }
}

/// Whether an RTP payload starts a keyframe: a single IDR or SPS NAL unit, a STAP-A
/// holding an IDR slice or an SPS, or the start fragment of an FU-A of an IDR slice or SPS.
pub fn is_keyframe(payload: &[u8]) -> bool {
    let key = |t: u8| t == NAL_IDR || t == NAL_SPS;
    match nal_type(payload) {
        NAL_STAP_A => StapA::new(payload).any(|nal| key(nal_type(nal))),
        // A start fragment; one with the end bit as well is malformed (RFC 6184 §5.8).
        NAL_FU_A => payload
            .get(1)
            .is_some_and(|&h| h & 0xc0 == 0x80 && key(h & 0x1f)),
        t => key(t),
    }
}

/// Iterator over the NAL units of a STAP-A payload; stops at the first malformed unit.
struct StapA<'a> {
    rest: &'a [u8],
    malformed: bool,
}

impl<'a> StapA<'a> {
    fn new(payload: &'a [u8]) -> StapA<'a> {
        StapA {
            rest: payload.get(1..).unwrap_or(&[]),
            malformed: false,
        }
    }
}

impl<'a> Iterator for StapA<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.rest.is_empty() {
            return None;
        }
        let unit = match self.rest {
            [a, b, rest @ ..] => {
                let len = usize::from(u16::from_be_bytes([*a, *b]));
                if len == 0 || len > rest.len() {
                    None
                } else {
                    let (nal, rest) = rest.split_at(len);
                    self.rest = rest;
                    Some(nal)
                }
            }
            _ => None,
        };
        if unit.is_none() {
            self.malformed = true;
            self.rest = &[];
        }
        unit
    }
}

/// A malformed RTP payload given to the [`Depacketizer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DepacketizeError {
    /// The payload is empty.
    #[error("empty payload")]
    Empty,
    /// A STAP-A whose unit lengths do not match the payload.
    #[error("malformed STAP-A")]
    BadStapA,
    /// An FU-A shorter than its two header bytes, or with both start and end bits.
    #[error("malformed FU-A")]
    BadFuA,
    /// A payload type that packetization mode 1 does not allow (STAP-B, MTAP, FU-B, 0, 30, 31).
    #[error("unsupported NAL unit type {0}")]
    Unsupported(u8),
}

/// Reassembles access units from RTP payloads (for test clients and tools).
///
/// Feed every received packet of one SSRC to [`Depacketizer::push`]; complete, intact
/// access units come back as Annex B with 4-byte start codes. A sequence-number gap, a
/// broken FU-A, a malformed payload or a missing marker (the RTP timestamp changes
/// before the marker arrives) makes the affected access unit *damaged*: it is dropped and
/// counted in [`Depacketizer::damaged_frames`].
#[derive(Debug, Default)]
pub struct Depacketizer {
    /// The access unit in progress; `in_fragment`: an FU-A is in progress (its start
    /// fragment was seen).
    au: Unit,
}

impl Depacketizer {
    fn push_nal(&mut self, nal: &[u8]) {
        self.au.buf.extend_from_slice(&[0, 0, 0, 1]);
        self.au.buf.extend_from_slice(nal);
    }
}

impl Depacketize for Depacketizer {
    type Error = DepacketizeError;

    fn unit(&mut self) -> &mut Unit {
        &mut self.au
    }

    fn is_keyframe(au: &[u8]) -> bool {
        nal_units(au).any(|n| nal_type(n) == NAL_IDR)
    }

    fn settle(&mut self, result: &Result<(), DepacketizeError>, _marker: bool) {
        // Nothing of a damaged access unit is kept: a malformed last packet left its
        // unit's bytes in front of the next unit before (as H265's and AV1's never did).
        self.au.discard_damaged(result);
    }

    fn add_payload(&mut self, payload: &[u8]) -> Result<(), DepacketizeError> {
        let Some(&first) = payload.first() else {
            return Err(DepacketizeError::Empty);
        };
        match first & 0x1f {
            t @ 1..=23 => {
                self.au.end_fragment();
                let _ = t;
                self.push_nal(payload);
                Ok(())
            }
            NAL_STAP_A => {
                self.au.end_fragment();
                let mut units = StapA::new(payload);
                let start = self.au.buf.len();
                let mut any = false;
                for nal in units.by_ref() {
                    any = true;
                    self.au.buf.extend_from_slice(&[0, 0, 0, 1]);
                    self.au.buf.extend_from_slice(nal);
                }
                if units.malformed || !any {
                    self.au.buf.truncate(start);
                    return Err(DepacketizeError::BadStapA);
                }
                Ok(())
            }
            NAL_FU_A => {
                let [indicator, header, data @ ..] = payload else {
                    return Err(DepacketizeError::BadFuA);
                };
                let (start, end) = (header & 0x80 != 0, header & 0x40 != 0);
                if start && end {
                    return Err(DepacketizeError::BadFuA);
                }
                if !self.au.fragment(start, end) {
                    return Ok(());
                }
                if start {
                    self.au.buf.extend_from_slice(&[0, 0, 0, 1]);
                    self.au.buf.push((indicator & 0xe0) | (header & 0x1f));
                }
                self.au.buf.extend_from_slice(data);
                Ok(())
            }
            t => Err(DepacketizeError::Unsupported(t)),
        }
    }
}

crate::reassembly::depacketizer_api! {
    au, "access unit", "malformed", "contained an IDR slice",
    "Access units dropped because of loss or malformed payloads."
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;

    #[test]
    fn profile_level_id_from_an_sps_alone_or_in_a_stap_a() {
        // x264 High 4.0: 67 64 00 28 ...
        let sps = [0x67, 0x64, 0x00, 0x28, 0xac, 0xd9];
        let pps = [0x68, 0xeb, 0xe3];
        assert_eq!(sps_profile_level_id(&sps), Some([0x64, 0x00, 0x28]));
        let mut stap = vec![0x78, 0x00, pps.len() as u8];
        stap.extend_from_slice(&pps);
        stap.extend_from_slice(&[0x00, sps.len() as u8]);
        stap.extend_from_slice(&sps);
        assert_eq!(sps_profile_level_id(&stap), Some([0x64, 0x00, 0x28]));
        // Not an SPS, cut short, a STAP-A whose length runs past the end: none.
        assert_eq!(sps_profile_level_id(&pps), None);
        assert_eq!(sps_profile_level_id(&sps[..3]), None);
        assert_eq!(sps_profile_level_id(&[0x78, 0x00, 0x09, 0x67]), None);
        assert_eq!(sps_profile_level_id(&[]), None);
    }

    fn collect(nals: &[&[u8]], max: usize) -> Vec<(Vec<u8>, bool)> {
        let mut out = Vec::new();
        Packetizer::new()
            .packetize(nals, max, &mut |p, m| out.push((p.to_vec(), m)))
            .expect("valid max_payload");
        out
    }

    fn annex_b(nals: &[&[u8]]) -> Vec<u8> {
        let mut v = Vec::new();
        for n in nals {
            v.extend_from_slice(&[0, 0, 0, 1]);
            v.extend_from_slice(n);
        }
        v
    }

    #[test]
    fn splits_on_three_and_four_byte_start_codes() {
        let data = [
            0xff, 0, 0, 0, 1, 0x09, 0xf0, 0, 0, 1, 0x67, 1, 2, 0, 0, 0, 0, 1, 0x68, 3, 0, 0, 1, 0,
            0, 1, 0x65, 0, 0, 3, 1, 7,
        ];
        let nals: Vec<&[u8]> = nal_units(&data).collect();
        assert_eq!(
            nals,
            vec![
                &[0x09, 0xf0][..],
                &[0x67, 1, 2],
                &[0x68, 3],
                &[0x65, 0, 0, 3, 1, 7]
            ]
        );
        assert_eq!(nal_units(&[1, 2, 3]).count(), 0);
        assert_eq!(nal_units(&[0, 0, 1]).count(), 0);
        assert_eq!(nal_units(&[]).count(), 0);
        assert_eq!(nal_type(&[0x65]), NAL_IDR);
        assert_eq!(nal_type(&[]), 0);
    }

    #[test]
    fn stap_a_of_sps_pps() {
        let aud: &[u8] = &[0x09, 0xf0];
        let sps: &[u8] = &[0x67, 0x42, 0xc0, 0x1f, 0xda];
        let pps: &[u8] = &[0x68, 0xce, 0x3c, 0x80];
        let idr = vec![0x65; 3000];
        let pkts = collect(&[aud, sps, pps, &idr], 1200);
        let (stap, m) = &pkts[0];
        assert!(!m);
        let mut expect = vec![0x78, 0, 5];
        expect.extend_from_slice(sps);
        expect.extend_from_slice(&[0, 4]);
        expect.extend_from_slice(pps);
        assert_eq!(stap, &expect);
        assert!(is_keyframe(stap));
        assert!(pkts[1..].iter().all(|(p, _)| nal_type(p) == NAL_FU_A));
        assert!(is_keyframe(&pkts[1].0));
        assert!(!is_keyframe(&pkts[2].0));
        assert!(pkts.last().is_some_and(|(_, m)| *m));
        assert_eq!(pkts.iter().filter(|(_, m)| *m).count(), 1);
    }

    #[test]
    fn single_nal_and_markers() {
        let p: &[u8] = &[0x41, 1, 2, 3];
        let pkts = collect(&[&[0x09, 0x30], p], 1200);
        assert_eq!(pkts, vec![(p.to_vec(), true)]);
        assert!(!is_keyframe(p));
        assert!(collect(&[&[0x09, 0x30]], 1200).is_empty());
        // Two NAL units that do not fit together go separately.
        let a = vec![0x41; 700];
        let b = vec![0x41; 700];
        let pkts = collect(&[&a, &b], 1200);
        assert_eq!(pkts, vec![(a.clone(), false), (b.clone(), true)]);
    }

    #[test]
    fn fu_a_fragments_have_equal_size() {
        for len in [1201usize, 1202, 2399, 2400, 2401, 5000, 12345, 100_000] {
            let mut nal = vec![0x65];
            nal.extend((1..len).map(|i| i as u8));
            let pkts = collect(&[&nal], 1200);
            let n = (len - 1).div_ceil(1198);
            assert_eq!(pkts.len(), n, "len {len}");
            let first = pkts[0].0.len();
            assert!(first <= 1200);
            for (i, (p, m)) in pkts.iter().enumerate() {
                assert_eq!(p[0], 0x7c);
                assert_eq!(p[1] & 0x1f, NAL_IDR);
                assert_eq!(p[1] & 0x80 != 0, i == 0);
                assert_eq!(p[1] & 0x40 != 0, i + 1 == n);
                assert_eq!(*m, i + 1 == n);
                if i + 1 < n {
                    assert_eq!(p.len(), first);
                } else {
                    assert!(p.len() <= first && p.len() > 2);
                }
            }
            assert_eq!(first - 2, (len - 1).div_ceil(n));
        }
    }

    #[test]
    fn stap_a_never_exceeds_64_kib() {
        let a = vec![0x41; 40_000];
        let b = vec![0x41; 40_000];
        let pkts = collect(&[&a, &b], 200_000);
        assert_eq!(pkts, vec![(a.clone(), false), (b.clone(), true)]);
    }

    #[test]
    fn rejects_tiny_max_payload() {
        let r = Packetizer::new().packetize(&[&[0x41, 1]], 2, &mut |_, _| {});
        assert_eq!(r, Err(PacketizeError::MaxPayloadTooSmall(2)));
        // The minimum works, even for a large NAL unit.
        let nal = vec![0x41; 50];
        let pkts = collect(&[&nal], MIN_PAYLOAD);
        assert_eq!(pkts.len(), 49);
    }

    #[test]
    fn round_trip_random_access_units() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let mut de = Depacketizer::new();
        let mut seq = 65_000u16;
        let mut key = 0;
        for frame in 0..300u32 {
            let max = 20 + rng.below(1400);
            let mut owned: Vec<Vec<u8>> = Vec::new();
            owned.push(vec![0x09, 0xf0]);
            let is_key = frame % 30 == 0;
            if is_key {
                key += 1;
                owned.push(
                    (0..4 + rng.below(20))
                        .map(|i| if i == 0 { 0x67 } else { 0x42 })
                        .collect(),
                );
                owned.push(vec![0x68, 0xce, 0x3c, 0x80]);
            }
            for _ in 0..1 + rng.below(3) {
                let bound = if rng.below(4) == 0 { 20_000 } else { 200 };
                let len = 1 + rng.below(bound);
                let mut nal: Vec<u8> = (0..len).map(|_| 1 + rng.below(255) as u8).collect();
                nal[0] = if is_key { 0x65 } else { 0x41 };
                owned.push(nal);
            }
            let nals: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
            let pkts = collect(&nals, max);
            assert!(pkts.iter().all(|(p, _)| p.len() <= max));
            assert_eq!(is_keyframe(&pkts[0].0), is_key);
            let mut got = None;
            for (p, m) in &pkts {
                let r = de.push(seq, frame * 3000, *m, p).expect("well-formed");
                seq = seq.wrapping_add(1);
                if let Some(au) = r {
                    assert!(got.is_none());
                    got = Some(au.to_vec());
                }
            }
            assert_eq!(got, Some(annex_b(&nals[1..])), "frame {frame}");
        }
        assert_eq!(de.frames(), 300);
        assert_eq!(de.keyframes(), key);
        assert_eq!(de.damaged_frames(), 0);
        assert_eq!(de.lost_packets(), 0);
    }

    #[test]
    fn a_malformed_last_packet_leaves_nothing_for_the_next_unit() {
        let mut de = Depacketizer::new();
        assert_eq!(de.push(1, 100, false, &[0x65, 1, 2, 3]), Ok(None));
        assert_eq!(de.push(2, 100, true, &[]), Err(DepacketizeError::Empty));
        assert_eq!(de.damaged_frames(), 1);
        assert_eq!(
            de.push(3, 200, true, &[0x41, 9, 9]),
            Ok(Some(&[0, 0, 0, 1, 0x41, 9, 9][..]))
        );
    }

    #[test]
    fn depacketizer_detects_fu_a_loss() {
        let nal = vec![0x65; 5000];
        let pkts = collect(&[&nal], 1200);
        assert!(pkts.len() >= 4);
        let mut de = Depacketizer::new();
        for (i, (p, m)) in pkts.iter().enumerate() {
            if i == 2 {
                continue;
            }
            assert_eq!(de.push(i as u16, 0, *m, p), Ok(None));
        }
        assert_eq!(de.damaged_frames(), 1);
        assert_eq!(de.lost_packets(), 1);
        // The next frame is intact again.
        let base = pkts.len() as u16;
        let mut out = None;
        for (i, (p, m)) in pkts.iter().enumerate() {
            if let Some(au) = de.push(base + i as u16, 3000, *m, p).expect("ok") {
                out = Some(au.to_vec());
            }
        }
        assert_eq!(out, Some(annex_b(&[&nal])));
        // Lost marker packet: detected when the timestamp changes.
        let base = base * 2;
        for (i, (p, _)) in pkts.iter().enumerate().take(pkts.len() - 1) {
            assert_eq!(de.push(base + i as u16, 6000, false, p), Ok(None));
        }
        let p: &[u8] = &[0x41, 1];
        assert_eq!(
            de.push(base + pkts.len() as u16 - 1, 9000, true, p),
            Ok(Some(&annex_b(&[p])[..]))
        );
        assert_eq!(de.damaged_frames(), 2);
        assert_eq!(de.frames(), 2);
        assert_eq!(de.keyframes(), 1);
    }

    #[test]
    fn malformed_payloads_do_not_panic() {
        let mut de = Depacketizer::new();
        let bad: [&[u8]; 9] = [
            &[],
            &[0x78],
            &[0x78, 0, 9, 1],
            &[0x78, 0, 0],
            &[0x7c],
            &[0x7c, 0xc5],
            &[0x79, 1],
            &[0x1d, 0],
            &[0x00],
        ];
        for (i, p) in bad.iter().enumerate() {
            assert!(de.push(i as u16, 0, true, p).is_err(), "{p:?}");
            assert!(!is_keyframe(p) || p.is_empty());
        }
        assert_eq!(de.frames(), 0);
        assert_eq!(de.damaged_frames(), bad.len() as u64);
        assert!(!is_keyframe(&[0x78, 0, 9, 0x65]));
        assert!(is_keyframe(&[0x78, 0, 1, 0x65]));
        assert!(is_keyframe(&[0x65]));
        assert!(is_keyframe(&[0x67]));
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = Rng(99);
        let mut de = Depacketizer::new();
        for i in 0..5000u32 {
            let len = rng.below(40);
            let buf: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let _ = is_keyframe(&buf);
            let _ = nal_units(&buf).count();
            let _ = de.push(i as u16, i / 4, rng.below(3) == 0, &buf);
        }
    }
}
