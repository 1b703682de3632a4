//! AV1 over RTP (the AOM "RTP Payload Format for AV1", v1.0).
//!
//! * [`Depacketizer`] rebuilds whole temporal units from RTP payloads, as
//!   [`crate::h264::Depacketizer`] does access units for H264, and counts losses. A
//!   temporal unit comes out in the low-overhead bitstream format (AV1 spec §5: every OBU
//!   with `obu_has_size_field` = 1 and its LEB128 size), a temporal delimiter first: what
//!   libavcodec's AV1 decoders take.
//! * [`obus`] walks such a temporal unit; [`is_keyframe_tu`] tells whether one decodes on
//!   its own.
//! * [`read_leb128`] and [`write_leb128`]: the spec's `leb128()` sizes.
//!
//! The payload (§4.3-4.4 of the payload format): a one-byte aggregation header
//! `|Z|Y|W W|N|-|-|-|`, then OBU elements. Z: the first element continues an OBU fragment
//! of the previous packet. Y: the last element is an OBU fragment that continues in the
//! next packet. W: the number of elements (1-3), each but the last preceded by its LEB128
//! length; 0: any number of elements, every one preceded by its length. N: the packet
//! starts a coded video sequence. An OBU in an element usually has no size field (the
//! sender removes it); one that has it is taken too.
//!
//! Nothing here panics on malformed input.

use crate::reassembly::{Depacketize, Unit};
use thiserror::Error;

/// OBU type of a sequence header.
pub const OBU_SEQUENCE_HEADER: u8 = 1;
/// OBU type of a temporal delimiter.
pub const OBU_TEMPORAL_DELIMITER: u8 = 2;
/// OBU type of a frame header.
pub const OBU_FRAME_HEADER: u8 = 3;
/// OBU type of a tile group.
pub const OBU_TILE_GROUP: u8 = 4;
/// OBU type of metadata.
pub const OBU_METADATA: u8 = 5;
/// OBU type of a frame (a frame header and a tile group).
pub const OBU_FRAME: u8 = 6;
/// OBU type of a redundant frame header.
pub const OBU_REDUNDANT_FRAME_HEADER: u8 = 7;
/// OBU type of a tile list (large scale tile decoding only).
pub const OBU_TILE_LIST: u8 = 8;
/// OBU type of padding.
pub const OBU_PADDING: u8 = 15;

/// A temporal delimiter OBU with its (zero) size: the first bytes of every temporal unit
/// the [`Depacketizer`] returns.
pub const TEMPORAL_DELIMITER: [u8; 2] = [OBU_TEMPORAL_DELIMITER << 3 | HAS_SIZE, 0];

/// Largest temporal unit the [`Depacketizer`] rebuilds (a 4K key frame at a high bitrate
/// fits, as in [`crate::ts::MAX_PES`]); a larger one is damaged
/// ([`DepacketizeError::TooLarge`]).
pub const MAX_TEMPORAL_UNIT: usize = 4 << 20;

/// Most bytes of a LEB128 value (AV1 spec §4.10.5).
pub const MAX_LEB128_LEN: usize = 8;

/// `obu_has_size_field` in an OBU header.
const HAS_SIZE: u8 = 0x02;
/// `obu_extension_flag` in an OBU header.
const HAS_EXTENSION: u8 = 0x04;
/// `obu_forbidden_bit` in an OBU header.
const FORBIDDEN: u8 = 0x80;

/// The OBU type in an OBU header byte.
pub fn obu_type(header: u8) -> u8 {
    (header >> 3) & 0x0f
}

/// Reads a LEB128 value at the start of `data`: the value and the bytes it took. `None`
/// when it runs past `data`, takes more than [`MAX_LEB128_LEN`] bytes or exceeds
/// 2^32 - 1 (AV1 spec §4.10.5).
pub fn read_leb128(data: &[u8]) -> Option<(usize, usize)> {
    let mut value = 0u64;
    for (i, &b) in data.iter().take(MAX_LEB128_LEN).enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            let value = u32::try_from(value).ok()?;
            return Some((usize::try_from(value).ok()?, i + 1));
        }
    }
    None
}

/// Appends `value` as LEB128, in as few bytes as it takes.
pub fn write_leb128(mut value: usize, out: &mut Vec<u8>) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// One OBU of a low-overhead bitstream (see [`obus`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Obu<'a> {
    /// `obu_type`.
    pub obu_type: u8,
    /// The extension byte (`temporal_id`, `spatial_id`), when the header has one.
    pub extension: Option<u8>,
    /// The OBU's payload, after its header and size field.
    pub payload: &'a [u8],
}

/// The OBUs of a low-overhead bitstream (AV1 spec §5), such as a temporal unit from the
/// [`Depacketizer`]: each OBU must have its size field. Stops at the first malformed OBU
/// (forbidden bit set, no size field, a size past the end); [`Obus::malformed`] then says so.
pub fn obus(data: &[u8]) -> Obus<'_> {
    Obus {
        rest: data,
        malformed: false,
    }
}

/// Iterator returned by [`obus`].
#[derive(Debug, Clone)]
pub struct Obus<'a> {
    rest: &'a [u8],
    malformed: bool,
}

impl Obus<'_> {
    /// Whether the iteration stopped at a malformed OBU rather than at the end of the data.
    pub fn malformed(&self) -> bool {
        self.malformed
    }
}

impl<'a> Iterator for Obus<'a> {
    type Item = Obu<'a>;

    fn next(&mut self) -> Option<Obu<'a>> {
        if self.rest.is_empty() {
            return None;
        }
        let obu = parse_obu(self.rest, true);
        match obu {
            Some((obu, used)) => {
                self.rest = self.rest.get(used..).unwrap_or_default();
                Some(obu)
            }
            None => {
                self.malformed = true;
                self.rest = &[];
                None
            }
        }
    }
}

/// Parses the OBU at the start of `data`: the OBU and the bytes it took. Without a size
/// field the OBU takes the rest of `data`, unless `need_size`. `None` if malformed.
fn parse_obu(data: &[u8], need_size: bool) -> Option<(Obu<'_>, usize)> {
    let (&header, rest) = data.split_first()?;
    if header & FORBIDDEN != 0 {
        return None;
    }
    let (extension, rest) = if header & HAS_EXTENSION != 0 {
        let (&ext, rest) = rest.split_first()?;
        (Some(ext), rest)
    } else {
        (None, rest)
    };
    let (payload, rest) = if header & HAS_SIZE != 0 {
        let (size, n) = read_leb128(rest)?;
        rest.get(n..)?.split_at_checked(size)?
    } else if need_size {
        return None;
    } else {
        (rest, &[][..])
    };
    let obu = Obu {
        obu_type: obu_type(header),
        extension,
        payload,
    };
    Some((obu, data.len() - rest.len()))
}

/// Whether a temporal unit in the low-overhead format (as the [`Depacketizer`] returns)
/// decodes on its own: it holds a sequence header, and its first frame (the first frame or
/// frame header OBU) is a key frame. The frame type is read from the first bits of the
/// frame's uncompressed header (AV1 spec §5.9.2): `show_existing_frame` = 0 and
/// `frame_type` = `KEY_FRAME`, or any frame under a sequence header with
/// `reduced_still_picture_header` = 1. A hidden key frame (`show_frame` = 0) counts.
pub fn is_keyframe_tu(tu: &[u8]) -> bool {
    // The sequence header's `reduced_still_picture_header`, once one was seen.
    let mut reduced_still_picture = None;
    for obu in obus(tu) {
        match obu.obu_type {
            OBU_SEQUENCE_HEADER => {
                // seq_profile (3 bits), still_picture (1), reduced_still_picture_header (1).
                if let Some(&b) = obu.payload.first() {
                    reduced_still_picture = Some(b & 0x08 != 0);
                }
            }
            OBU_FRAME | OBU_FRAME_HEADER => {
                return match reduced_still_picture {
                    None => false,
                    Some(true) => true,
                    // show_existing_frame (1 bit) = 0, frame_type (2 bits) = KEY_FRAME (0).
                    Some(false) => obu.payload.first().is_some_and(|b| b & 0xe0 == 0),
                };
            }
            _ => {}
        }
    }
    false
}

/// A malformed RTP payload given to the [`Depacketizer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DepacketizeError {
    /// The payload is empty.
    #[error("empty payload")]
    Empty,
    /// An OBU element length that is not a valid LEB128 (over [`MAX_LEB128_LEN`] bytes,
    /// past the payload, or over 2^32 - 1).
    #[error("malformed LEB128 element length")]
    BadLeb128,
    /// An OBU element that is empty or runs past the payload, or fewer elements than the W
    /// field says (or none at all).
    #[error("malformed OBU element")]
    BadElement,
    /// A whole OBU whose header is malformed: empty, forbidden bit set, an extension byte
    /// missing, or a size field that does not match the element.
    #[error("malformed OBU")]
    BadObu,
    /// The temporal unit grows past [`MAX_TEMPORAL_UNIT`].
    #[error("temporal unit over {MAX_TEMPORAL_UNIT} bytes")]
    TooLarge,
}

/// The OBU elements of a payload after its aggregation header, each with whether it is
/// the last one.
struct Elements<'a> {
    rest: &'a [u8],
    /// The W field: 0, or the number of elements.
    count: u8,
    /// Elements returned so far.
    seen: u8,
}

impl<'a> Iterator for Elements<'a> {
    type Item = Result<(&'a [u8], bool), DepacketizeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.count == 0 && self.rest.is_empty() && self.seen > 0 {
            return None;
        }
        if self.count != 0 && self.seen == self.count {
            return None;
        }
        self.seen = self.seen.saturating_add(1);
        let element = if self.count != 0 && self.seen == self.count {
            // The last of W elements: no length, the rest of the payload.
            Ok(std::mem::take(&mut self.rest))
        } else {
            read_leb128(self.rest)
                .ok_or(DepacketizeError::BadLeb128)
                .and_then(|(len, n)| {
                    let (element, rest) = self.rest[n..]
                        .split_at_checked(len)
                        .ok_or(DepacketizeError::BadLeb128)?;
                    self.rest = rest;
                    Ok(element)
                })
        };
        let item = element.and_then(|e| {
            if e.is_empty() {
                return Err(DepacketizeError::BadElement);
            }
            let last = if self.count == 0 {
                self.rest.is_empty()
            } else {
                self.seen == self.count
            };
            Ok((e, last))
        });
        if item.is_err() {
            // Stop after the first error.
            self.count = self.seen;
            self.rest = &[];
        }
        Some(item)
    }
}

/// Reassembles AV1 temporal units from RTP payloads, with the API and the behaviour of
/// [`crate::h264::Depacketizer`].
///
/// Feed every received packet of one SSRC to [`Depacketizer::push`]; complete, intact
/// temporal units come back in the low-overhead format: [`TEMPORAL_DELIMITER`], then each
/// OBU with its size field, in the order received. Temporal delimiter and tile list OBUs
/// in the payload are dropped (the payload format says a receiver ignores them). OBU
/// fragments (the Y and Z bits) are joined across packets.
///
/// A temporal unit ends at the marker bit. A sequence-number gap, an OBU fragment whose
/// start or end is missing, a malformed payload, a temporal unit over
/// [`MAX_TEMPORAL_UNIT`] or a missing marker (the RTP timestamp changes before the marker
/// arrives) makes it *damaged*: it is dropped and counted in
/// [`Depacketizer::damaged_frames`].
#[derive(Debug, Default)]
pub struct Depacketizer {
    /// The temporal unit in progress; `in_fragment`: the previous packet ended with an OBU
    /// fragment (Y = 1) that `obu` holds.
    tu: Unit,
    /// The OBU being put together from fragments (as sent: no size field, or its own).
    obu: Vec<u8>,
}

impl Depacketizer {
    /// Appends the whole OBU in `self.obu` to the temporal unit with its size field (after
    /// a temporal delimiter if it is the first), unless it is one the format drops.
    fn finish_obu(&mut self) -> Result<(), DepacketizeError> {
        let Some((obu, used)) = parse_obu(&self.obu, false) else {
            return Err(DepacketizeError::BadObu);
        };
        if used != self.obu.len() {
            // The OBU's own size field ends before the element does.
            return Err(DepacketizeError::BadObu);
        }
        if matches!(obu.obu_type, OBU_TEMPORAL_DELIMITER | OBU_TILE_LIST) {
            self.obu.clear();
            return Ok(());
        }
        let overhead = TEMPORAL_DELIMITER.len() + 2 + MAX_LEB128_LEN;
        if self.tu.buf.len() + overhead + obu.payload.len() > MAX_TEMPORAL_UNIT {
            return Err(DepacketizeError::TooLarge);
        }
        if self.tu.buf.is_empty() {
            self.tu.buf.extend_from_slice(&TEMPORAL_DELIMITER);
        }
        self.tu.buf.push(self.obu[0] | HAS_SIZE);
        self.tu.buf.extend(obu.extension);
        write_leb128(obu.payload.len(), &mut self.tu.buf);
        self.tu.buf.extend_from_slice(obu.payload);
        self.obu.clear();
        Ok(())
    }
}

impl Depacketize for Depacketizer {
    type Error = DepacketizeError;

    fn is_keyframe(tu: &[u8]) -> bool {
        is_keyframe_tu(tu)
    }

    fn forget(&mut self) {
        self.obu.clear();
    }

    fn settle(&mut self, result: &Result<(), DepacketizeError>, marker: bool) {
        // Nothing of a damaged temporal unit is returned: hold no memory for it (nor for
        // its OBU, unless that continues), nor for the OBU past the unit's end.
        let damaged = self.tu.discard_damaged(result);
        if marker || (damaged && !self.tu.in_fragment) {
            self.obu.clear();
        }
    }

    fn add_payload(&mut self, payload: &[u8]) -> Result<(), DepacketizeError> {
        let Some((&aggregation, rest)) = payload.split_first() else {
            return Err(DepacketizeError::Empty);
        };
        let (z, y) = (aggregation & 0x80 != 0, aggregation & 0x40 != 0);
        if rest.is_empty() {
            return Err(DepacketizeError::BadElement);
        }
        let elements = Elements {
            rest,
            count: (aggregation >> 4) & 0x03,
            seen: 0,
        };
        for (i, element) in elements.enumerate() {
            let (element, last) = element?;
            if i == 0 && z {
                if !self.tu.in_fragment {
                    // The OBU's start was lost (or the previous packet said it ended).
                    self.tu.damaged = true;
                    continue;
                }
            } else {
                // If the previous packet's last OBU continues, this packet does not carry
                // its continuation: it was lost.
                self.tu.end_fragment();
                self.obu.clear();
            }
            if self.tu.buf.len() + self.obu.len() + element.len() > MAX_TEMPORAL_UNIT {
                return Err(DepacketizeError::TooLarge);
            }
            self.obu.extend_from_slice(element);
            if last && y {
                self.tu.in_fragment = true;
            } else {
                self.tu.in_fragment = false;
                self.finish_obu()?;
            }
        }
        Ok(())
    }

    fn unit(&mut self) -> &mut Unit {
        &mut self.tu
    }
}

crate::reassembly::depacketizer_api! {
    tu, "temporal unit", "malformed", "decode on their own ([`is_keyframe_tu`])",
    "Temporal units dropped because of loss, malformed payloads or size."
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::Rng;

    /// An OBU as RTP carries it: header (no size field), payload.
    fn obu(t: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![t << 3];
        v.extend_from_slice(payload);
        v
    }

    /// A sequence header (profile 0; `reduced_still_picture_header` as asked).
    fn sequence_header(reduced_still_picture: bool) -> Vec<u8> {
        let b = if reduced_still_picture { 0x18 } else { 0x00 };
        obu(OBU_SEQUENCE_HEADER, &[b, 0x0a, 0x0b, 0xff])
    }

    /// A frame OBU: a shown key frame or a shown inter frame, then `len` bytes.
    fn frame(key: bool, len: usize, rng: &mut Rng) -> Vec<u8> {
        let mut payload = vec![if key { 0x10 } else { 0x30 }];
        payload.extend(rng.bytes(len));
        obu(OBU_FRAME, &payload)
    }

    /// The low-overhead form of OBUs given as RTP carries them (with or without a size
    /// field), temporal delimiters and tile lists left out, a temporal delimiter first.
    fn temporal_unit(obus: &[&[u8]]) -> Vec<u8> {
        let mut v = TEMPORAL_DELIMITER.to_vec();
        for o in obus {
            let (parsed, _) = parse_obu(o, false).expect("well-formed OBU");
            if matches!(parsed.obu_type, OBU_TEMPORAL_DELIMITER | OBU_TILE_LIST) {
                continue;
            }
            v.push(o[0] | HAS_SIZE);
            v.extend(parsed.extension);
            write_leb128(parsed.payload.len(), &mut v);
            v.extend_from_slice(parsed.payload);
        }
        v
    }

    /// A payload: the aggregation header, then `elements`, each with its length but (when
    /// `w` > 0) the last.
    fn payload(z: bool, y: bool, w: u8, n: bool, elements: &[&[u8]]) -> Vec<u8> {
        let mut p = vec![u8::from(z) << 7 | u8::from(y) << 6 | w << 4 | u8::from(n) << 3];
        for (i, e) in elements.iter().enumerate() {
            if w == 0 || i + 1 < elements.len() {
                write_leb128(e.len(), &mut p);
            }
            p.extend_from_slice(e);
        }
        p
    }

    /// Packs OBUs into payloads of at most `max` bytes (at least 8), fragmenting them
    /// across packets; W is the element count when `use_w` and it fits, else 0.
    fn packetize(obus: &[&[u8]], max: usize, use_w: bool) -> Vec<(Vec<u8>, bool)> {
        let mut out = Vec::new();
        let mut elements: Vec<&[u8]> = Vec::new();
        // The payload's size, counting 3 bytes for every length field (max < 2^21).
        let mut size = 1;
        let mut z = false;
        let flush = |elements: &mut Vec<&[u8]>, z: bool, y: bool| {
            let w = if use_w && elements.len() <= 3 {
                elements.len() as u8
            } else {
                0
            };
            let p = payload(z, y, w, false, elements);
            elements.clear();
            (p, false)
        };
        for o in obus {
            let mut rest = *o;
            while !rest.is_empty() {
                if size + 3 >= max {
                    out.push(flush(&mut elements, z, false));
                    (size, z) = (1, false);
                }
                let take = rest.len().min(max - size - 3);
                elements.push(&rest[..take]);
                size += 3 + take;
                rest = &rest[take..];
                if !rest.is_empty() {
                    out.push(flush(&mut elements, z, true));
                    (size, z) = (1, true);
                }
            }
        }
        if !elements.is_empty() {
            out.push(flush(&mut elements, z, false));
        }
        if let Some(last) = out.last_mut() {
            last.1 = true;
        }
        out
    }

    #[test]
    fn leb128_round_trips_and_limits() {
        for v in [
            0usize,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            1 << 28,
            u32::MAX as usize,
        ] {
            let mut b = Vec::new();
            write_leb128(v, &mut b);
            assert_eq!(read_leb128(&b), Some((v, b.len())), "{v}");
            b.push(0x55);
            assert_eq!(read_leb128(&b), Some((v, b.len() - 1)), "{v}");
        }
        // Eight bytes (padded with continuation bits) is the most; a ninth is malformed.
        let eight = [0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00];
        assert_eq!(read_leb128(&eight), Some((1, 8)));
        assert_eq!(read_leb128(&[0x80; 8]), None);
        assert_eq!(
            read_leb128(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00]),
            None
        );
        // Past the data, or over 2^32 - 1.
        assert_eq!(read_leb128(&[0x80]), None);
        assert_eq!(read_leb128(&[]), None);
        assert_eq!(read_leb128(&[0xff, 0xff, 0xff, 0xff, 0x1f]), None);
    }

    #[test]
    fn aggregates_with_and_without_a_count() {
        let mut rng = Rng(1);
        let seq_hdr = sequence_header(false);
        let key = frame(true, 200, &mut rng);
        let td = obu(OBU_TEMPORAL_DELIMITER, &[]);
        let mut de = Depacketizer::new();
        // W = 0: every element with its length; the temporal delimiter in it is dropped.
        let p = payload(false, false, 0, true, &[&td, &seq_hdr, &key]);
        let want = temporal_unit(&[&seq_hdr, &key]);
        assert_eq!(de.push(1, 0, true, &p), Ok(Some(&want[..])));
        assert!(want.starts_with(&TEMPORAL_DELIMITER));
        assert!(is_keyframe_tu(&want));
        // W = 2: the last element without a length; a metadata OBU and an inter frame.
        let meta = obu(OBU_METADATA, &[0x01, 0x02]);
        let inter = frame(false, 100, &mut rng);
        let p = payload(false, false, 2, false, &[&meta, &inter]);
        let want = temporal_unit(&[&meta, &inter]);
        assert_eq!(de.push(2, 3000, true, &p), Ok(Some(&want[..])));
        assert!(!is_keyframe_tu(&want));
        // W = 1 and W = 3, over two packets of one temporal unit.
        let p1 = payload(false, false, 1, false, &[&seq_hdr]);
        let p2 = payload(false, false, 3, false, &[&meta, &key, &inter]);
        assert_eq!(de.push(3, 6000, false, &p1), Ok(None));
        let want = temporal_unit(&[&seq_hdr, &meta, &key, &inter]);
        assert_eq!(de.push(4, 6000, true, &p2), Ok(Some(&want[..])));
        assert_eq!(
            (de.frames(), de.keyframes(), de.damaged_frames()),
            (3, 2, 0)
        );
        // The temporal unit walks back into its OBUs.
        let mut it = obus(&want);
        let types: Vec<u8> = it.by_ref().map(|o| o.obu_type).collect();
        assert_eq!(types, [2, 1, 5, 6, 6]);
        assert!(!it.malformed());
    }

    #[test]
    fn fragments_over_three_packets() {
        let mut rng = Rng(2);
        let seq_hdr = sequence_header(false);
        // A key frame with an extension byte (temporal id 0, spatial id 0).
        let mut key = frame(true, 3000, &mut rng);
        key[0] |= HAS_EXTENSION;
        key.insert(1, 0x00);
        // An OBU that keeps its own size field, and a tile list (dropped).
        let mut sized = vec![OBU_METADATA << 3 | HAS_SIZE];
        write_leb128(300, &mut sized);
        sized.extend(rng.bytes(300));
        let tiles = obu(OBU_TILE_LIST, &[1, 2, 3]);
        let p1 = payload(false, true, 2, true, &[&seq_hdr, &key[..1000]]);
        let p2 = payload(true, true, 1, false, &[&key[1000..2000]]);
        let p3 = payload(true, false, 0, false, &[&key[2000..], &tiles, &sized]);
        let mut de = Depacketizer::new();
        assert_eq!(de.push(7, 90, false, &p1), Ok(None));
        assert_eq!(de.push(8, 90, false, &p2), Ok(None));
        let want = temporal_unit(&[&seq_hdr, &key, &sized]);
        assert_eq!(de.push(9, 90, true, &p3), Ok(Some(&want[..])));
        let got: Vec<Obu<'_>> = obus(&want).collect();
        assert_eq!(got.len(), 4);
        assert_eq!(got[2].extension, Some(0));
        assert_eq!(got[2].payload, &key[2..]);
        assert_eq!(got[3].payload, &sized[3..]);
        assert_eq!((de.frames(), de.keyframes()), (1, 1));
    }

    #[test]
    fn a_lost_fragment_damages_its_temporal_unit_only() {
        let mut rng = Rng(3);
        let seq_hdr = sequence_header(false);
        let key = frame(true, 5000, &mut rng);
        let pkts = packetize(&[&seq_hdr, &key], 1200, false);
        assert!(pkts.len() >= 4);
        let mut de = Depacketizer::new();
        for (i, (p, m)) in pkts.iter().enumerate() {
            if i != 2 {
                assert_eq!(de.push(i as u16, 0, *m, p), Ok(None));
            }
        }
        assert_eq!((de.damaged_frames(), de.lost_packets()), (1, 1));
        // The next temporal unit comes out whole.
        let want = temporal_unit(&[&seq_hdr, &key]);
        let base = pkts.len() as u16;
        let mut out = None;
        for (i, (p, m)) in pkts.iter().enumerate() {
            if let Some(tu) = de.push(base + i as u16, 3000, *m, p).expect("ok") {
                out = Some(tu.to_vec());
            }
        }
        assert_eq!(out, Some(want));
        // A lost marker packet: seen when the timestamp changes.
        let base = base * 2;
        for (i, (p, _)) in pkts.iter().enumerate().take(pkts.len() - 1) {
            assert_eq!(de.push(base + i as u16, 6000, false, p), Ok(None));
        }
        let inter = frame(false, 10, &mut rng);
        let single = payload(false, false, 1, false, &[&inter]);
        assert_eq!(
            de.push(base + pkts.len() as u16 - 1, 9000, true, &single),
            Ok(Some(&temporal_unit(&[&inter])[..]))
        );
        assert_eq!(de.damaged_frames(), 2);
        // Y = 1, then a packet without Z: the fragment lost its end.
        let mut seq = base + pkts.len() as u16;
        assert_eq!(de.push(seq, 12_000, false, &pkts[0].0), Ok(None));
        assert_eq!(de.push(seq + 1, 12_000, true, &single), Ok(None));
        // Z = 1 without a fragment in progress: the start was lost.
        let tail = payload(true, false, 1, false, &[&[1, 2, 3]]);
        assert_eq!(de.push(seq + 2, 15_000, true, &tail), Ok(None));
        // The marker on a packet with Y = 1.
        assert_eq!(de.push(seq + 3, 18_000, true, &pkts[0].0), Ok(None));
        assert_eq!(de.damaged_frames(), 5);
        // Duplicates and late packets are ignored; then all is well again.
        seq += 3;
        assert_eq!(de.push(seq, 18_000, true, &single), Ok(None));
        assert_eq!(de.push(seq - 1, 18_000, true, &single), Ok(None));
        assert_eq!(
            de.push(seq + 1, 21_000, true, &single),
            Ok(Some(&temporal_unit(&[&inter])[..]))
        );
        assert_eq!(
            (de.frames(), de.keyframes(), de.damaged_frames()),
            (3, 1, 5)
        );
    }

    #[test]
    fn malformed_payloads_are_errors_and_damage_their_temporal_unit() {
        use DepacketizeError::*;
        let f = OBU_FRAME << 3;
        let bad: [(&[u8], DepacketizeError); 12] = [
            (&[], Empty),
            // An aggregation header alone.
            (&[0x08], BadElement),
            // Element lengths: nine bytes, past the payload, over 2^32 - 1, cut short.
            (
                &[
                    0x00, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, f,
                ],
                BadLeb128,
            ),
            (&[0x00, 0x05, f, 0x10], BadLeb128),
            (&[0x00, 0xff, 0xff, 0xff, 0xff, 0x1f, f], BadLeb128),
            (&[0x00, 0x02, f, 0x10, 0x80], BadLeb128),
            // W = 2 with one element; a zero-length element.
            (&[0x20, 0x02, f, 0x10], BadElement),
            (&[0x00, 0x00], BadElement),
            // OBU headers: forbidden bit, missing extension byte, own size past the
            // element, own size short of it.
            (&[0x10, 0x80 | f, 0x10], BadObu),
            (&[0x10, f | HAS_EXTENSION], BadObu),
            (&[0x10, f | HAS_SIZE, 0x05, 0x10, 0x11], BadObu),
            (&[0x10, f | HAS_SIZE, 0x01, 0x10, 0x11], BadObu),
        ];
        let mut de = Depacketizer::new();
        for (i, (p, e)) in bad.iter().enumerate() {
            assert_eq!(de.push(i as u16, i as u32, true, p), Err(*e), "{p:?}");
        }
        assert_eq!(de.frames(), 0);
        assert_eq!(de.damaged_frames(), bad.len() as u64);
        // An error before the marker: the rest of the temporal unit is dropped too.
        let n = bad.len() as u16;
        let inter = frame(false, 10, &mut Rng(4));
        let single = payload(false, false, 1, false, &[&inter]);
        assert_eq!(de.push(n, 100, false, &[0x00, 0x09, f]), Err(BadLeb128));
        assert_eq!(de.push(n + 1, 100, true, &single), Ok(None));
        assert_eq!(de.damaged_frames(), bad.len() as u64 + 1);
        // A temporal unit of temporal delimiters only is empty: damaged, like an empty
        // access unit.
        let td = obu(OBU_TEMPORAL_DELIMITER, &[]);
        let only_td = payload(false, false, 1, false, &[&td]);
        assert_eq!(de.push(n + 2, 200, true, &only_td), Ok(None));
        assert_eq!(
            de.push(n + 3, 300, true, &single),
            Ok(Some(&temporal_unit(&[&inter])[..]))
        );
        assert_eq!(
            (de.frames(), de.damaged_frames()),
            (1, bad.len() as u64 + 2)
        );
        // Malformed low-overhead data stops the OBU walk.
        let short = [f | HAS_SIZE, 0x02, 0x10];
        let mut it = obus(&short);
        assert_eq!(it.next(), None);
        assert!(it.malformed());
        let unsized_obu = [f, 0x10];
        let mut it = obus(&unsized_obu);
        assert_eq!(it.next(), None);
        assert!(it.malformed());
    }

    #[test]
    fn keyframes_need_a_sequence_header_and_a_key_frame() {
        let mut rng = Rng(5);
        let seq_hdr = sequence_header(false);
        let key = frame(true, 10, &mut rng);
        let inter = frame(false, 10, &mut rng);
        assert!(is_keyframe_tu(&temporal_unit(&[&seq_hdr, &key])));
        assert!(is_keyframe_tu(&temporal_unit(&[&seq_hdr, &key, &inter])));
        assert!(!is_keyframe_tu(&temporal_unit(&[&key])));
        assert!(!is_keyframe_tu(&temporal_unit(&[&seq_hdr, &inter, &key])));
        assert!(!is_keyframe_tu(&temporal_unit(&[&seq_hdr])));
        // A frame header OBU counts as a frame; show_existing_frame does not make a key.
        let header = obu(OBU_FRAME_HEADER, &[0x10]);
        let existing = obu(OBU_FRAME_HEADER, &[0x80]);
        let intra_only = obu(OBU_FRAME, &[0x50]);
        assert!(is_keyframe_tu(&temporal_unit(&[&seq_hdr, &header])));
        assert!(!is_keyframe_tu(&temporal_unit(&[&seq_hdr, &existing])));
        assert!(!is_keyframe_tu(&temporal_unit(&[&seq_hdr, &intra_only])));
        // A reduced still picture header: every frame is a key frame.
        let still = sequence_header(true);
        assert!(is_keyframe_tu(&temporal_unit(&[&still, &existing])));
        assert!(!is_keyframe_tu(&[]));
        assert!(!is_keyframe_tu(&[0xff; 4]));
    }

    #[test]
    fn temporal_units_are_bounded() {
        let mut de = Depacketizer::new();
        let chunk = vec![0x5a; 60_000];
        let first = payload(false, true, 1, false, &[&frame(true, 60_000, &mut Rng(6))]);
        let middle = payload(true, true, 1, false, &[&chunk]);
        assert_eq!(de.push(0, 0, false, &first), Ok(None));
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
        assert_eq!(seq as usize, MAX_TEMPORAL_UNIT / chunk.len());
        let end = payload(true, false, 1, false, &[&chunk]);
        assert_eq!(de.push(seq + 1, 0, true, &end), Ok(None));
        assert_eq!((de.frames(), de.damaged_frames()), (0, 1));
        let inter = frame(false, 10, &mut Rng(6));
        let single = payload(false, false, 1, false, &[&inter]);
        assert_eq!(
            de.push(seq + 2, 1, true, &single),
            Ok(Some(&temporal_unit(&[&inter])[..]))
        );
    }

    #[test]
    fn packetized_temporal_units_come_back() {
        let mut rng = Rng(0x0a1b_2c3d_4e5f_6071);
        let mut de = Depacketizer::new();
        let mut seq = 65_000u16;
        let mut keys = 0;
        for tu in 0..300u32 {
            let max = 8 + rng.below(1400);
            let key = tu % 30 == 0;
            let mut owned = Vec::new();
            if rng.below(4) == 0 {
                owned.push(obu(OBU_TEMPORAL_DELIMITER, &[]));
            }
            if key {
                keys += 1;
                owned.push(sequence_header(false));
            }
            if rng.below(3) == 0 {
                let mut meta = vec![OBU_METADATA << 3 | HAS_SIZE];
                let len = rng.below(200);
                write_leb128(len, &mut meta);
                meta.extend(rng.bytes(len));
                owned.push(meta);
            }
            for layer in 0..1 + rng.below(2) {
                let bound = if rng.below(4) == 0 { 20_000 } else { 300 };
                let mut f = frame(key && layer == 0, rng.below(bound), &mut rng);
                if layer > 0 {
                    f[0] |= HAS_EXTENSION;
                    f.insert(1, (layer as u8) << 3);
                }
                owned.push(f);
            }
            let obus_in: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
            let mut got = None;
            for (p, m) in packetize(&obus_in, max, rng.below(2) == 0) {
                assert!(p.len() <= max);
                let r = de.push(seq, tu * 3000, m, &p).expect("well-formed");
                seq = seq.wrapping_add(1);
                if let Some(t) = r {
                    assert!(got.is_none());
                    got = Some(t.to_vec());
                }
            }
            let want = temporal_unit(&obus_in);
            assert_eq!(got.as_deref(), Some(&want[..]), "temporal unit {tu}");
            assert_eq!(is_keyframe_tu(&want), key);
        }
        assert_eq!(de.frames(), 300);
        assert_eq!(de.keyframes(), keys);
        assert_eq!(de.damaged_frames(), 0);
        assert_eq!(de.lost_packets(), 0);
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = Rng(99);
        let mut de = Depacketizer::new();
        for i in 0..5000u32 {
            let len = rng.below(40);
            let mut buf = rng.bytes(len);
            if len > 2 && rng.below(2) == 0 {
                // A W = 1 payload of one OBU without size field, of a random type.
                buf[0] &= 0xc8;
                buf[0] |= 0x10;
                buf[1] &= 0x79;
            }
            let _ = obus(&buf).count();
            let _ = is_keyframe_tu(&buf);
            if let Ok(Some(tu)) = de.push(i as u16, i / 4, rng.below(3) == 0, &buf) {
                assert!(tu.starts_with(&TEMPORAL_DELIMITER));
                let mut it = obus(tu);
                assert!(
                    it.by_ref()
                        .skip(1)
                        .all(|o| o.obu_type != OBU_TEMPORAL_DELIMITER)
                );
                assert!(!it.malformed());
            }
        }
        assert!(de.keyframes() <= de.frames());
        assert!(de.frames() > 0);
    }
}
