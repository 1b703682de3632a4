//! RTP fixed header (RFC 3550 §5.1) and header extensions (RFC 8285).
//!
//! [`parse_header`] reads a packet in place and never copies; [`write_header`] fills a
//! caller-owned buffer. Neither allocates. Helpers convert between Unix time and 64-bit NTP
//! timestamps, read the abs-capture-time extension, and extend 16-bit sequence numbers.

use std::time::Duration;

/// Length of the RTP fixed header (RFC 3550 §5.1), without CSRCs or extension.
pub const FIXED_HEADER_LEN: usize = 12;

/// Profile of the one-byte header extension form (RFC 8285 §4.2).
const ONE_BYTE_PROFILE: u16 = 0xBEDE;

/// Profile mask of the two-byte header extension form: `0x100` followed by 4 app bits
/// (RFC 8285 §4.3).
const TWO_BYTE_PROFILE_MASK: u16 = 0xFFF0;
const TWO_BYTE_PROFILE: u16 = 0x1000;

/// Bytes of the one-byte-form elements [`write_header`] writes (element header and data):
/// abs-capture-time, the transport-wide sequence number, abs-send-time.
const ABS_CAPTURE_ELEMENT_LEN: usize = 9;
const TRANSPORT_CC_ELEMENT_LEN: usize = 3;
const ABS_SEND_ELEMENT_LEN: usize = 4;

/// Seconds between the NTP epoch (1900-01-01) and the Unix epoch (1970-01-01).
const NTP_UNIX_OFFSET_SECS: u64 = 2_208_988_800;

/// Errors from parsing or writing RTP headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RtpError {
    /// The buffer is shorter than the fixed header, the CSRC list or the extension it declares.
    #[error("RTP packet truncated")]
    Truncated,
    /// The version field is not 2.
    #[error("RTP version is not 2")]
    BadVersion,
    /// The padding count is zero or larger than the payload.
    #[error("RTP padding count invalid")]
    BadPadding,
    /// The output buffer cannot hold the header.
    #[error("output buffer too small")]
    BufferTooSmall,
    /// A field passed to the writer is out of range (payload type > 127, extension id not
    /// in 1..=14).
    #[error("field out of range: {0}")]
    InvalidField(&'static str),
}

/// A parsed RTP header; offsets refer to the buffer passed to [`parse_header`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Marker bit.
    pub marker: bool,
    /// Payload type (7 bits).
    pub payload_type: u8,
    /// 16-bit sequence number.
    pub sequence: u16,
    /// RTP timestamp.
    pub timestamp: u32,
    /// Synchronization source.
    pub ssrc: u32,
    /// Length of the header including CSRCs and the extension block; the payload starts here.
    pub header_len: usize,
    /// Length of the payload, excluding padding.
    pub payload_len: usize,
    /// Number of padding bytes at the end of the packet (0 when the P bit is clear).
    pub padding: u8,
    /// Profile word of the extension block (0 when there is none).
    ext_profile: u16,
    /// Offset of the extension data (after the 4-byte extension header).
    ext_offset: usize,
    /// Length of the extension data in bytes.
    ext_len: usize,
}

impl Header {
    /// The payload bytes of `buf` (the same buffer that was parsed).
    ///
    /// Returns an empty slice if `buf` is not the buffer this header came from and is too short.
    pub fn payload<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        buf.get(self.header_len..self.header_len + self.payload_len)
            .unwrap_or(&[])
    }

    /// Looks up header extension element `id` (RFC 8285) in `buf`, the buffer this header was
    /// parsed from.
    ///
    /// Both the one-byte (`0xBEDE`, ids 1..=14) and the two-byte (`0x100X`, ids 1..=255)
    /// forms are understood. Returns `None` if there is no extension block, the element is
    /// absent, `id` is 0, or the block is malformed.
    pub fn extension<'a>(&self, buf: &'a [u8], id: u8) -> Option<&'a [u8]> {
        if id == 0 || self.ext_len == 0 {
            return None;
        }
        let data = buf.get(self.ext_offset..self.ext_offset + self.ext_len)?;
        if self.ext_profile == ONE_BYTE_PROFILE {
            find_one_byte(data, id)
        } else if self.ext_profile & TWO_BYTE_PROFILE_MASK == TWO_BYTE_PROFILE {
            find_two_byte(data, id)
        } else {
            None
        }
    }

    /// Profile word of the extension block, if the X bit is set.
    pub fn extension_profile(&self) -> Option<u16> {
        (self.ext_offset != 0).then_some(self.ext_profile)
    }
}

/// Walks one-byte form elements: `ID(4) | L(4)` then L+1 data bytes; a zero byte is padding,
/// ID 15 ends the block (RFC 8285 §4.2).
fn find_one_byte(data: &[u8], id: u8) -> Option<&[u8]> {
    let mut i = 0;
    while i < data.len() {
        let b = data[i];
        if b == 0 {
            i += 1;
            continue;
        }
        let el_id = b >> 4;
        if el_id == 15 {
            return None;
        }
        let len = usize::from(b & 0x0f) + 1;
        let start = i + 1;
        let el = data.get(start..start + len)?;
        if el_id == id {
            return Some(el);
        }
        i = start + len;
    }
    None
}

/// Walks two-byte form elements: `ID(8) | L(8)` then L data bytes; a zero ID byte is padding
/// (RFC 8285 §4.3).
fn find_two_byte(data: &[u8], id: u8) -> Option<&[u8]> {
    let mut i = 0;
    while i < data.len() {
        let el_id = data[i];
        if el_id == 0 {
            i += 1;
            continue;
        }
        let len = usize::from(*data.get(i + 1)?);
        let start = i + 2;
        let el = data.get(start..start + len)?;
        if el_id == id {
            return Some(el);
        }
        i = start + len;
    }
    None
}

/// Returns true if `buf` looks like RTCP rather than RTP when both share a port
/// (RFC 5761 §4): version 2 and a second byte (M bit + PT) in 192..=223.
pub fn is_rtcp(buf: &[u8]) -> bool {
    buf.len() >= 2 && buf[0] >> 6 == 2 && (192..=223).contains(&buf[1])
}

/// Parses the RTP header of `buf`, including CSRCs, the extension block and padding.
///
/// # Errors
/// [`RtpError::Truncated`] if `buf` cannot hold what the header declares,
/// [`RtpError::BadVersion`] if the version is not 2, [`RtpError::BadPadding`] if the padding
/// count is 0 or runs into the header.
pub fn parse_header(buf: &[u8]) -> Result<Header, RtpError> {
    let mut h = parse_header_unpadded(buf)?;
    if buf[0] & 0x20 != 0 {
        let padding = buf[buf.len() - 1];
        if padding == 0 || usize::from(padding) > h.payload_len {
            return Err(RtpError::BadPadding);
        }
        h.padding = padding;
        h.payload_len -= usize::from(padding);
    }
    Ok(h)
}

/// Parses the header without looking at the padding (whose count byte is encrypted in SRTP):
/// `payload_len` runs to the end of `buf` and `padding` is 0. What to read an SRTP packet's
/// header with before it is decrypted: [`parse_header`] would take the auth tag's last octet
/// for the padding count.
///
/// # Errors
/// [`RtpError::Truncated`] if `buf` cannot hold what the header declares,
/// [`RtpError::BadVersion`] if the version is not 2.
pub fn parse_header_unpadded(buf: &[u8]) -> Result<Header, RtpError> {
    if buf.len() < FIXED_HEADER_LEN {
        return Err(RtpError::Truncated);
    }
    if buf[0] >> 6 != 2 {
        return Err(RtpError::BadVersion);
    }
    let csrc_count = usize::from(buf[0] & 0x0f);
    let mut header_len = FIXED_HEADER_LEN + 4 * csrc_count;
    let (mut ext_profile, mut ext_offset, mut ext_len) = (0, 0, 0);
    if buf[0] & 0x10 != 0 {
        let eh = buf
            .get(header_len..header_len + 4)
            .ok_or(RtpError::Truncated)?;
        ext_profile = u16::from_be_bytes([eh[0], eh[1]]);
        ext_len = 4 * usize::from(u16::from_be_bytes([eh[2], eh[3]]));
        ext_offset = header_len + 4;
        header_len = ext_offset + ext_len;
    }
    if header_len > buf.len() {
        return Err(RtpError::Truncated);
    }
    Ok(Header {
        marker: buf[1] & 0x80 != 0,
        payload_type: buf[1] & 0x7f,
        sequence: u16::from_be_bytes([buf[2], buf[3]]),
        timestamp: u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]),
        ssrc: u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]),
        header_len,
        payload_len: buf.len() - header_len,
        padding: 0,
        ext_profile,
        ext_offset,
        ext_len,
    })
}

/// Fields of an outgoing RTP header, see [`write_header`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderOut {
    /// Marker bit.
    pub marker: bool,
    /// Payload type, 0..=127.
    pub payload_type: u8,
    /// 16-bit sequence number.
    pub sequence: u16,
    /// RTP timestamp.
    pub timestamp: u32,
    /// Synchronization source.
    pub ssrc: u32,
    /// abs-capture-time extension: (extmap id 1..=14, 64-bit NTP capture timestamp).
    pub abs_capture_time: Option<(u8, u64)>,
    /// Transport-wide sequence number extension: (extmap id 1..=14, sequence number).
    pub transport_cc: Option<(u8, u16)>,
    /// abs-send-time extension (webrtc.org/experiments/rtp-hdrext/abs-send-time): (extmap
    /// id 1..=14, send time in seconds as 6.18 fixed point, low 24 bits; see
    /// [`abs_send_time`]). A receiver that estimates the path itself (REMB) reads it.
    pub abs_send_time: Option<(u8, u32)>,
}

impl HeaderOut {
    /// Bytes of the extension elements, before the block's header and padding.
    fn elements_len(&self) -> usize {
        usize::from(self.abs_capture_time.is_some()) * ABS_CAPTURE_ELEMENT_LEN
            + usize::from(self.transport_cc.is_some()) * TRANSPORT_CC_ELEMENT_LEN
            + usize::from(self.abs_send_time.is_some()) * ABS_SEND_ELEMENT_LEN
    }

    /// Number of bytes [`write_header`] writes for this header: 12, plus, with any
    /// extension, a 4-byte block header and the elements padded to whole words: 28 with
    /// abs-capture-time (with or without the transport-wide sequence number, which fits in
    /// its padding); 20 with the transport-wide sequence number or abs-send-time alone.
    pub fn encoded_len(&self) -> usize {
        match self.elements_len() {
            0 => FIXED_HEADER_LEN,
            n => FIXED_HEADER_LEN + 4 + n.div_ceil(4) * 4,
        }
    }
}

/// A send time as abs-send-time carries it: `since` (from any origin the sender keeps; the
/// receiver reads only differences) in seconds, 6.18 fixed point, wrapping every 64 s.
pub fn abs_send_time(since: std::time::Duration) -> u32 {
    let ticks = (since.as_micros() << 18) / 1_000_000;
    (ticks & 0xff_ffff) as u32
}

/// Writes an RTP header (no CSRCs, no padding) to the start of `out` and returns its length.
///
/// With any extension set, a one-byte-form extension block follows, holding (in this order)
/// abs-capture-time (`id << 4 | 7`, 8 bytes), the transport-wide sequence number
/// (`id << 4 | 1`, 2 bytes) and abs-send-time (`id << 4 | 2`, 3 bytes), padded to a 4-byte
/// boundary (see [`HeaderOut::encoded_len`]).
///
/// # Errors
/// [`RtpError::BufferTooSmall`] if `out` is too short, [`RtpError::InvalidField`] if the
/// payload type exceeds 127 or the extension id is outside 1..=14.
pub fn write_header(out: &mut [u8], h: &HeaderOut) -> Result<usize, RtpError> {
    if h.payload_type > 0x7f {
        return Err(RtpError::InvalidField("payload_type"));
    }
    let len = h.encoded_len();
    let out = out.get_mut(..len).ok_or(RtpError::BufferTooSmall)?;
    let id_ok = |e: Option<u8>| e.is_none_or(|id| (1..=14).contains(&id));
    if !id_ok(h.abs_capture_time.map(|e| e.0)) {
        return Err(RtpError::InvalidField("abs_capture_time id"));
    }
    if !id_ok(h.transport_cc.map(|e| e.0)) {
        return Err(RtpError::InvalidField("transport_cc id"));
    }
    if !id_ok(h.abs_send_time.map(|e| e.0)) {
        return Err(RtpError::InvalidField("abs_send_time id"));
    }
    let x = if len > FIXED_HEADER_LEN { 0x10 } else { 0 };
    out[0] = 0x80 | x;
    out[1] = (u8::from(h.marker) << 7) | h.payload_type;
    out[2..4].copy_from_slice(&h.sequence.to_be_bytes());
    out[4..8].copy_from_slice(&h.timestamp.to_be_bytes());
    out[8..12].copy_from_slice(&h.ssrc.to_be_bytes());
    if len == FIXED_HEADER_LEN {
        return Ok(len);
    }
    // One block in the one-byte form (RFC 8285 §4.2): its length in words, the elements
    // one after another, zero padding to the word.
    out[12..14].copy_from_slice(&ONE_BYTE_PROFILE.to_be_bytes());
    out[14..16].copy_from_slice(&(((len - 16) / 4) as u16).to_be_bytes());
    let mut at = 16;
    if let Some((id, ntp)) = h.abs_capture_time {
        out[at] = (id << 4) | 7;
        out[at + 1..at + 9].copy_from_slice(&ntp.to_be_bytes());
        at += ABS_CAPTURE_ELEMENT_LEN;
    }
    if let Some((id, seq)) = h.transport_cc {
        out[at] = (id << 4) | 1;
        out[at + 1..at + 3].copy_from_slice(&seq.to_be_bytes());
        at += TRANSPORT_CC_ELEMENT_LEN;
    }
    if let Some((id, t)) = h.abs_send_time {
        out[at] = (id << 4) | 2;
        out[at + 1..at + 4].copy_from_slice(&t.to_be_bytes()[1..]);
        at += ABS_SEND_ELEMENT_LEN;
    }
    out[at..len].fill(0);
    Ok(len)
}

/// Reads the absolute capture timestamp from an abs-capture-time extension element
/// (8 bytes, or 16 with the estimated capture clock offset, which is ignored).
pub fn abs_capture_time(ext: &[u8]) -> Option<u64> {
    match ext.len() {
        8 | 16 => {
            let mut b = [0u8; 8];
            b.copy_from_slice(&ext[..8]);
            Some(u64::from_be_bytes(b))
        }
        _ => None,
    }
}

/// Converts a time since the Unix epoch to a 64-bit NTP timestamp (seconds since 1900 in the
/// high 32 bits, binary fraction in the low 32).
///
/// Seconds wrap modulo 2^32 (NTP era 1 starts in February 2036), matching [`ntp_to_unix`].
pub fn ntp_from_unix(d: Duration) -> u64 {
    let secs = d.as_secs().wrapping_add(NTP_UNIX_OFFSET_SECS) & 0xffff_ffff;
    let frac = (u64::from(d.subsec_nanos()) << 32) / 1_000_000_000;
    (secs << 32) | frac
}

/// Converts a 64-bit NTP timestamp to a time since the Unix epoch.
///
/// Following RFC 4330 §3, a seconds value below the Unix epoch offset is taken to be in NTP era
/// 1 (after February 2036), so the range covered is 1970..2106. The fraction is rounded to the
/// nearest nanosecond.
pub fn ntp_to_unix(ntp: u64) -> Duration {
    let secs = ntp >> 32;
    let secs = if secs >= NTP_UNIX_OFFSET_SECS {
        secs - NTP_UNIX_OFFSET_SECS
    } else {
        secs + (1 << 32) - NTP_UNIX_OFFSET_SECS
    };
    let nanos = ((ntp & 0xffff_ffff) * 1_000_000_000 + (1 << 31)) >> 32;
    Duration::from_secs(secs) + Duration::from_nanos(nanos)
}

/// Extends 32-bit timestamps (RTP's, and RTMP's milliseconds, which wrap after ~49.7 days)
/// to 64 bits, each relative to the one before: a timestamp slightly behind the last one
/// stays behind rather than jumping a whole wrap ahead.
#[derive(Debug, Default, Clone)]
pub struct Unwrap32 {
    last: Option<(u32, i64)>,
}

impl Unwrap32 {
    /// `ts` extended; the first timestamp is taken as it is.
    pub fn extend(&mut self, ts: u32) -> i64 {
        let ext = match self.last {
            None => i64::from(ts),
            Some((raw, ext)) => ext + i64::from(ts.wrapping_sub(raw) as i32),
        };
        self.last = Some((ts, ext));
        ext
    }
}

/// Extends a 16-bit sequence number to the 64-bit value closest to `reference`.
///
/// A candidate exactly 32768 away keeps the epoch of `reference`. The result never goes below
/// 0: near 0 an older-looking sequence number is placed in epoch 0 instead.
pub fn extend_seq(reference: u64, seq: u16) -> u64 {
    const EPOCH: u64 = 1 << 16;
    const HALF: u64 = 1 << 15;
    let candidate = (reference & !0xffff) | u64::from(seq);
    if candidate > reference && candidate - reference > HALF && candidate >= EPOCH {
        candidate - EPOCH
    } else if candidate < reference && reference - candidate > HALF {
        candidate.checked_add(EPOCH).unwrap_or(candidate)
    } else {
        candidate
    }
}

/// Extends a stream of 16-bit RTP sequence numbers to monotonic 64-bit values, tolerating
/// wrap-around and reordering of up to 32767 packets.
///
/// The first sequence number `s` maps to `s + 65536` (epoch 1, not 0), so a packet that was
/// reordered before it still maps below it without underflowing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SeqUnwrapper {
    highest: Option<u64>,
}

impl SeqUnwrapper {
    /// A new unwrapper that has seen no packets.
    pub fn new() -> Self {
        Self { highest: None }
    }

    /// Extends `seq` relative to the highest value seen so far and returns it.
    pub fn unwrap(&mut self, seq: u16) -> u64 {
        let v = match self.highest {
            None => u64::from(seq) + (1 << 16),
            Some(h) => extend_seq(h, seq),
        };
        if self.highest.is_none_or(|h| v > h) {
            self.highest = Some(v);
        }
        v
    }

    /// The highest extended sequence number seen, if any.
    pub fn highest(&self) -> Option<u64> {
        self.highest
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parse_minimal() {
        let buf = [
            0x80, 0xe0, 0x12, 0x34, 0, 0, 0x10, 0, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3,
        ];
        let h = parse_header(&buf).unwrap();
        assert!(h.marker);
        assert_eq!(h.payload_type, 96);
        assert_eq!(h.sequence, 0x1234);
        assert_eq!(h.timestamp, 0x1000);
        assert_eq!(h.ssrc, 0xdeadbeef);
        assert_eq!(h.header_len, 12);
        assert_eq!(h.payload_len, 3);
        assert_eq!(h.payload(&buf), &[1, 2, 3]);
        assert_eq!(h.extension(&buf, 1), None);
        assert_eq!(h.extension_profile(), None);
    }

    #[test]
    fn parse_csrc_ext_padding() {
        let mut buf = vec![0xb2, 96, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3];
        buf.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2]); // 2 CSRCs
        buf.extend_from_slice(&[0xbe, 0xde, 0, 2]); // one-byte ext, 2 words
        buf.extend_from_slice(&[0x10, 0xaa, 0x00, 0x22, 1, 2, 3, 0]);
        buf.extend_from_slice(&[9, 9, 9]); // payload
        buf.extend_from_slice(&[0, 0, 3]); // padding
        let h = parse_header(&buf).unwrap();
        assert_eq!(h.header_len, 12 + 8 + 4 + 8);
        assert_eq!(h.payload_len, 3);
        assert_eq!(h.padding, 3);
        assert_eq!(h.extension(&buf, 1), Some(&[0xaa][..]));
        assert_eq!(h.extension(&buf, 2), Some(&[1, 2, 3][..]));
        assert_eq!(h.extension(&buf, 3), None);
        assert_eq!(h.extension(&buf, 0), None);
        assert_eq!(h.extension_profile(), Some(0xbede));
    }

    #[test]
    fn two_byte_extension() {
        let mut buf = vec![0x90, 96, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3];
        buf.extend_from_slice(&[0x10, 0x00, 0, 2]);
        buf.extend_from_slice(&[5, 0, 0, 200, 3, 7, 8, 9]);
        let h = parse_header(&buf).unwrap();
        assert_eq!(h.extension(&buf, 5), Some(&[][..]));
        assert_eq!(h.extension(&buf, 200), Some(&[7, 8, 9][..]));
        assert_eq!(h.extension(&buf, 1), None);
    }

    #[test]
    fn errors() {
        assert_eq!(parse_header(&[0x80; 11]), Err(RtpError::Truncated));
        let mut b = [0u8; 12];
        b[0] = 0x40;
        assert_eq!(parse_header(&b), Err(RtpError::BadVersion));
        b[0] = 0x81; // one CSRC missing
        assert_eq!(parse_header(&b), Err(RtpError::Truncated));
        b[0] = 0x90; // extension header missing
        assert_eq!(parse_header(&b), Err(RtpError::Truncated));
        let mut p = [0u8; 14];
        p[0] = 0xa0;
        p[13] = 3; // padding 3 > payload 2
        assert_eq!(parse_header(&p), Err(RtpError::BadPadding));
        p[13] = 0;
        assert_eq!(parse_header(&p), Err(RtpError::BadPadding));
        p[13] = 2;
        let h = parse_header(&p).unwrap();
        assert_eq!(h.payload_len, 0);
        // Extension length pointing beyond the buffer.
        let e = [0x90, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xbe, 0xde, 0, 5];
        assert_eq!(parse_header(&e), Err(RtpError::Truncated));
    }

    #[test]
    fn rtcp_demux() {
        assert!(is_rtcp(&[0x80, 200]));
        assert!(is_rtcp(&[0x81, 223]));
        assert!(!is_rtcp(&[0x80, 96]));
        assert!(!is_rtcp(&[0x80, 224]));
        assert!(!is_rtcp(&[0x40, 200]));
        assert!(!is_rtcp(&[0x80]));
    }

    #[test]
    fn write_round_trip() {
        let mut out = [0u8; 64];
        let h = HeaderOut {
            marker: true,
            payload_type: 102,
            sequence: 65535,
            timestamp: 90_000,
            ssrc: 0x0102_0304,
            abs_capture_time: None,
            transport_cc: None,
            abs_send_time: None,
        };
        assert_eq!(write_header(&mut out, &h), Ok(12));
        let p = parse_header(&out[..12]).unwrap();
        assert!(p.marker);
        assert_eq!(
            (p.payload_type, p.sequence, p.timestamp, p.ssrc),
            (102, 65535, 90_000, 0x0102_0304)
        );

        let ntp = 0x1122_3344_5566_7788;
        let h = HeaderOut {
            abs_capture_time: Some((3, ntp)),
            ..h
        };
        assert_eq!(write_header(&mut out, &h), Ok(28));
        out[28..31].copy_from_slice(&[1, 2, 3]);
        let p = parse_header(&out[..31]).unwrap();
        assert_eq!(p.header_len, 28);
        assert_eq!(p.payload_len, 3);
        let ext = p.extension(&out, 3).unwrap();
        assert_eq!(abs_capture_time(ext), Some(ntp));
        assert_eq!(p.extension(&out, 4), None);

        // The transport-wide sequence number alone, and beside abs-capture-time.
        let alone = HeaderOut {
            abs_capture_time: None,
            transport_cc: Some((5, 0xbeef)),
            ..h
        };
        assert_eq!(write_header(&mut out, &alone), Ok(20));
        let p = parse_header(&out[..20]).unwrap();
        assert_eq!(p.header_len, 20);
        assert_eq!(p.extension(&out, 5), Some(&[0xbe, 0xef][..]));
        let both = HeaderOut {
            transport_cc: Some((5, 0x0102)),
            ..h
        };
        assert_eq!(write_header(&mut out, &both), Ok(28));
        let p = parse_header(&out[..28]).unwrap();
        assert_eq!(abs_capture_time(p.extension(&out, 3).unwrap()), Some(ntp));
        assert_eq!(p.extension(&out, 5), Some(&[1, 2][..]));
        // abs-send-time alone (what a REMB viewer gets), and beside the other two.
        let send = HeaderOut {
            abs_capture_time: None,
            abs_send_time: Some((2, 0x12_3456)),
            ..h
        };
        assert_eq!(write_header(&mut out, &send), Ok(20));
        let p = parse_header(&out[..20]).unwrap();
        assert_eq!(p.extension(&out, 2), Some(&[0x12, 0x34, 0x56][..]));
        let all = HeaderOut {
            transport_cc: Some((5, 0x0102)),
            abs_send_time: Some((2, 0xab_cdef)),
            ..h
        };
        assert_eq!(write_header(&mut out, &all), Ok(32));
        let p = parse_header(&out[..32]).unwrap();
        assert_eq!(abs_capture_time(p.extension(&out, 3).unwrap()), Some(ntp));
        assert_eq!(p.extension(&out, 5), Some(&[1, 2][..]));
        assert_eq!(p.extension(&out, 2), Some(&[0xab, 0xcd, 0xef][..]));

        assert_eq!(
            write_header(&mut out[..27], &h),
            Err(RtpError::BufferTooSmall)
        );
        let bad = HeaderOut {
            abs_capture_time: Some((15, 0)),
            ..h
        };
        assert!(matches!(
            write_header(&mut out, &bad),
            Err(RtpError::InvalidField(_))
        ));
        let bad = HeaderOut {
            payload_type: 128,
            ..h
        };
        assert!(matches!(
            write_header(&mut out, &bad),
            Err(RtpError::InvalidField(_))
        ));
    }

    #[test]
    fn abs_send_time_is_6_18_fixed_point_seconds_wrapping_at_64() {
        use std::time::Duration;
        assert_eq!(abs_send_time(Duration::ZERO), 0);
        assert_eq!(abs_send_time(Duration::from_secs(1)), 1 << 18);
        assert_eq!(abs_send_time(Duration::from_millis(1_500)), 3 << 17);
        assert_eq!(abs_send_time(Duration::from_secs(64)), 0);
        assert_eq!(abs_send_time(Duration::from_secs(65)), 1 << 18);
    }

    #[test]
    fn abs_capture_time_lengths() {
        assert_eq!(abs_capture_time(&[0, 0, 0, 0, 0, 0, 0, 1]), Some(1));
        assert_eq!(abs_capture_time(&[0; 16]), Some(0));
        assert_eq!(abs_capture_time(&[0; 9]), None);
    }

    #[test]
    fn ntp_conversions() {
        assert_eq!(ntp_from_unix(Duration::ZERO), NTP_UNIX_OFFSET_SECS << 32);
        assert_eq!(
            ntp_from_unix(Duration::from_millis(1500)),
            ((NTP_UNIX_OFFSET_SECS + 1) << 32) | 0x8000_0000
        );
        for d in [
            Duration::new(0, 0),
            Duration::new(1_700_000_000, 123_456_789),
            Duration::new(1_700_000_000, 999_999_999),
            Duration::new(2_100_000_000, 1), // after the 2036 NTP era rollover
        ] {
            assert_eq!(ntp_to_unix(ntp_from_unix(d)), d, "{d:?}");
        }
    }

    #[test]
    fn timestamps_unwrap() {
        let mut u = Unwrap32::default();
        assert_eq!(u.extend(u32::MAX - 10), i64::from(u32::MAX - 10));
        assert_eq!(u.extend(5), i64::from(u32::MAX) + 6);
        assert_eq!(u.extend(3), i64::from(u32::MAX) + 4);
    }

    #[test]
    fn extend_seq_cases() {
        assert_eq!(extend_seq(0, 5), 5);
        assert_eq!(extend_seq(0, 65535), 65535);
        assert_eq!(extend_seq(65536 + 65535, 0), 2 * 65536);
        assert_eq!(extend_seq(2 * 65536, 65535), 65536 + 65535);
        assert_eq!(extend_seq(2 * 65536 + 100, 50), 2 * 65536 + 50);
        assert_eq!(extend_seq(u64::MAX, 0), u64::MAX - 65535);
    }

    #[test]
    fn unwrapper() {
        let mut u = SeqUnwrapper::new();
        assert_eq!(u.highest(), None);
        assert_eq!(u.unwrap(65534), 65536 + 65534);
        assert_eq!(u.unwrap(65535), 65536 + 65535);
        assert_eq!(u.unwrap(0), 2 * 65536);
        assert_eq!(u.unwrap(65533), 65536 + 65533); // reordered from before the wrap
        assert_eq!(u.unwrap(1), 2 * 65536 + 1);
        assert_eq!(u.highest(), Some(2 * 65536 + 1));

        let mut u = SeqUnwrapper::new();
        assert_eq!(u.unwrap(0), 65536);
        assert_eq!(u.unwrap(65535), 65535); // slightly older, no underflow
        assert_eq!(u.unwrap(1), 65537);
    }

    #[test]
    fn no_panic_on_random_input() {
        let mut state = 0x1234_5678_9abc_def0u64;
        let mut buf = [0u8; 64];
        for _ in 0..20_000 {
            for b in buf.iter_mut() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *b = state as u8;
            }
            buf[0] = (buf[0] & 0x3f) | 0x80;
            let len = (state >> 40) as usize % buf.len();
            if let Ok(h) = parse_header(&buf[..len]) {
                assert!(h.header_len + h.payload_len + usize::from(h.padding) == len);
                for id in 0..=255 {
                    let _ = h.extension(&buf[..len], id);
                }
            }
        }
    }
}
