//! TURN framing beside STUN (RFC 8656): ChannelData messages, stream framing for TURN over
//! TCP, the TURN attribute helpers and the two writers the relay path needs (ChannelData
//! header, Data indication). Zero-copy and panic-free on network input, like [`crate::stun`].
//!
//! The STUN method and attribute numbers (ALLOCATE, XOR-RELAYED-ADDRESS, LIFETIME, ...) live
//! in [`crate::stun`]; this module adds what is TURN-only.
//!
//! Relay-path writers put the framing *in front of* a payload that already sits in the
//! caller's buffer (`head` bytes in), so relaying never copies the payload: a datagram from a
//! peer is received at offset [`PEER_HEADROOM`] and framed in place.

use std::net::SocketAddr;

use crate::stun::{self, Class, MessageWriter, StunError};

/// Lowest channel number (RFC 8656 §12).
pub const CHANNEL_MIN: u16 = 0x4000;
/// Highest channel number a client should pick (RFC 8656 §12: 0x4000 through 0x4FFF).
pub const CHANNEL_MAX: u16 = 0x4FFF;
/// Highest channel number accepted: RFC 5766 allowed up to 0x7FFF and coturn's clients
/// (`turnutils_uclient`) still use that range, so a server takes it for interoperability.
pub const CHANNEL_MAX_ACCEPTED: u16 = 0x7FFF;
/// Length of the ChannelData header (channel number and length).
pub const CHANNEL_HEADER_LEN: usize = 4;
/// REQUESTED-TRANSPORT value for UDP (the IANA protocol number).
pub const TRANSPORT_UDP: u8 = 17;

/// REQUESTED-ADDRESS-FAMILY (RFC 8656 §18.8).
pub const REQUESTED_ADDRESS_FAMILY: u16 = 0x0017;
/// EVEN-PORT (RFC 8656 §18.6).
pub const EVEN_PORT: u16 = 0x0018;
/// DONT-FRAGMENT (RFC 8656 §18.9).
pub const DONT_FRAGMENT: u16 = 0x001A;
/// RESERVATION-TOKEN (RFC 8656 §18.10).
pub const RESERVATION_TOKEN: u16 = 0x0022;
/// ADDITIONAL-ADDRESS-FAMILY (RFC 8656 §18.11).
pub const ADDITIONAL_ADDRESS_FAMILY: u16 = 0x8000;

/// Bytes a relay buffer must leave free before a peer's payload so that the largest Data
/// indication header fits in front of it: STUN header (20), XOR-PEER-ADDRESS for IPv6 (24),
/// DATA attribute header (4).
pub const PEER_HEADROOM: usize = 48;
/// Bytes a relay buffer must leave free after a payload: padding to a multiple of 4.
pub const PEER_TAILROOM: usize = 3;

/// Why bytes are not a valid TURN frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TurnError {
    /// Fewer bytes than the header.
    #[error("TURN frame shorter than its header")]
    TooShort,
    /// The first byte is neither STUN (0..=3) nor a channel number (0x40..=0x7F).
    #[error("not a STUN message or ChannelData (first byte {0:#04x})")]
    NotTurn(u8),
    /// The ChannelData length runs past the datagram.
    #[error("ChannelData length runs past the datagram")]
    BadLength,
    /// A STUN error while framing.
    #[error(transparent)]
    Stun(#[from] StunError),
}

/// What kind of TURN frame a datagram or stream position holds, by its first byte
/// (RFC 8656 §12): STUN (0..=3) or ChannelData (0x40..=0x7F, the RFC 5766 range; on a TURN
/// port nothing else shares the first byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// A STUN message.
    Stun,
    /// A ChannelData message.
    ChannelData,
}

impl FrameKind {
    /// Classifies by first byte; `None` for anything else.
    pub fn of(first: u8) -> Option<FrameKind> {
        match first {
            0..=3 => Some(FrameKind::Stun),
            0x40..=0x7F => Some(FrameKind::ChannelData),
            _ => None,
        }
    }
}

/// A ChannelData message borrowing its datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelData<'a> {
    /// The channel number (0x4000..=[`CHANNEL_MAX_ACCEPTED`]).
    pub number: u16,
    /// The application data (without padding).
    pub data: &'a [u8],
}

impl<'a> ChannelData<'a> {
    /// Parses a ChannelData datagram. Padding after the data is allowed (over UDP it may or
    /// may not be present, RFC 8656 §12.5), anything longer than the padding is not.
    pub fn parse(buf: &'a [u8]) -> Result<ChannelData<'a>, TurnError> {
        let h: [u8; 4] = buf
            .get(..CHANNEL_HEADER_LEN)
            .and_then(|h| h.try_into().ok())
            .ok_or(TurnError::TooShort)?;
        let number = u16::from_be_bytes([h[0], h[1]]);
        if !(CHANNEL_MIN..=CHANNEL_MAX_ACCEPTED).contains(&number) {
            return Err(TurnError::NotTurn(h[0]));
        }
        let len = usize::from(u16::from_be_bytes([h[2], h[3]]));
        let rest = buf.len() - CHANNEL_HEADER_LEN;
        if len > rest || rest > padded(len) {
            return Err(TurnError::BadLength);
        }
        let data = buf
            .get(CHANNEL_HEADER_LEN..CHANNEL_HEADER_LEN + len)
            .ok_or(TurnError::BadLength)?;
        Ok(ChannelData { number, data })
    }
}

/// Rounds up to a multiple of 4.
pub fn padded(len: usize) -> usize {
    (len + 3) & !3
}

/// Length of the frame starting at `head` in a TCP byte stream (RFC 8656 §12.5: STUN
/// messages are self-delimiting, ChannelData is padded to 4 bytes over TCP).
///
/// `Ok(None)` when fewer than 4 bytes are there yet; `Err` when the stream is not TURN
/// (the connection should be closed: framing is lost).
pub fn tcp_frame_len(head: &[u8]) -> Result<Option<usize>, TurnError> {
    let Some(h) = head.get(..4) else {
        return Ok(None);
    };
    let len = usize::from(u16::from_be_bytes([h[2], h[3]]));
    match FrameKind::of(h[0]) {
        Some(FrameKind::Stun) => Ok(Some(stun::HEADER_LEN + len)),
        Some(FrameKind::ChannelData) => Ok(Some(CHANNEL_HEADER_LEN + padded(len))),
        None => Err(TurnError::NotTurn(h[0])),
    }
}

/// Frames the payload at `buf[head..head + len]` as ChannelData on channel `number`: writes
/// the 4-byte header in front of it and, if `pad` (TCP), zero padding behind it. Returns the
/// frame's range in `buf`.
pub fn frame_channel_data(
    buf: &mut [u8],
    head: usize,
    len: usize,
    number: u16,
    pad: bool,
) -> Result<std::ops::Range<usize>, TurnError> {
    let start = head
        .checked_sub(CHANNEL_HEADER_LEN)
        .ok_or(TurnError::Stun(StunError::BufferTooSmall))?;
    let len16 = u16::try_from(len).map_err(|_| TurnError::Stun(StunError::TooLong))?;
    let end = if pad { head + padded(len) } else { head + len };
    let frame = buf
        .get_mut(start..end)
        .ok_or(TurnError::Stun(StunError::BufferTooSmall))?;
    frame[..2].copy_from_slice(&number.to_be_bytes());
    frame[2..4].copy_from_slice(&len16.to_be_bytes());
    frame[CHANNEL_HEADER_LEN + len..].fill(0);
    Ok(start..end)
}

/// Frames the payload at `buf[head..head + len]` as a Data indication from `peer`
/// (XOR-PEER-ADDRESS, DATA; RFC 8656 §11.6) with transaction id `tid`: writes the STUN
/// header and attributes in front of the payload and the DATA padding behind it. Needs
/// `head >=` [`PEER_HEADROOM`] for an IPv6 peer (36 bytes suffice for IPv4). Returns the
/// message's range in `buf`.
pub fn frame_data_indication(
    buf: &mut [u8],
    head: usize,
    len: usize,
    peer: SocketAddr,
    tid: &[u8; 12],
) -> Result<std::ops::Range<usize>, TurnError> {
    let peer_attr = if peer.ip().to_canonical().is_ipv4() {
        12
    } else {
        24
    };
    let start = head
        .checked_sub(stun::HEADER_LEN + peer_attr + 4)
        .ok_or(TurnError::Stun(StunError::BufferTooSmall))?;
    // Write header and XOR-PEER-ADDRESS with the STUN writer into the headroom, then the DATA
    // attribute header by hand: the value is already in place.
    let n = {
        let room = buf
            .get_mut(start..head - 4)
            .ok_or(TurnError::Stun(StunError::BufferTooSmall))?;
        let mut w = MessageWriter::new(room, Class::Indication, stun::DATA, tid)?;
        w.xor_address(stun::XOR_PEER_ADDRESS, peer)?;
        w.finish()
    };
    debug_assert_eq!(start + n, head - 4);
    let len16 = u16::try_from(len).map_err(|_| TurnError::Stun(StunError::TooLong))?;
    let end = head + padded(len);
    let body = u16::try_from(end - start - stun::HEADER_LEN)
        .map_err(|_| TurnError::Stun(StunError::TooLong))?;
    let msg = buf
        .get_mut(start..end)
        .ok_or(TurnError::Stun(StunError::BufferTooSmall))?;
    msg[2..4].copy_from_slice(&body.to_be_bytes());
    let a = n;
    msg[a..a + 2].copy_from_slice(&stun::ATTR_DATA.to_be_bytes());
    msg[a + 2..a + 4].copy_from_slice(&len16.to_be_bytes());
    msg[a + 4 + len..].fill(0);
    Ok(start..end)
}

/// REQUESTED-TRANSPORT's protocol number, if present and well-formed (4 bytes).
pub fn requested_transport(m: &stun::Message<'_>) -> Option<u8> {
    let v = m.attr(stun::REQUESTED_TRANSPORT)?;
    (v.len() == 4).then(|| v[0])
}

/// CHANNEL-NUMBER, if present and well-formed (4 bytes; the RFFU half ignored).
pub fn channel_number(m: &stun::Message<'_>) -> Option<u16> {
    let v = m.attr(stun::CHANNEL_NUMBER)?;
    (v.len() == 4).then(|| u16::from_be_bytes([v[0], v[1]]))
}

/// REQUESTED-ADDRESS-FAMILY: 0x01 IPv4, 0x02 IPv6 (4 bytes, first byte).
pub fn requested_address_family(m: &stun::Message<'_>) -> Option<u8> {
    let v = m.attr(REQUESTED_ADDRESS_FAMILY)?;
    (v.len() == 4).then(|| v[0])
}

/// Appends CHANNEL-NUMBER (number plus two RFFU zero bytes).
pub fn write_channel_number(w: &mut MessageWriter<'_>, number: u16) -> Result<(), StunError> {
    let b = number.to_be_bytes();
    w.attr(stun::CHANNEL_NUMBER, &[b[0], b[1], 0, 0])?;
    Ok(())
}

/// Appends REQUESTED-TRANSPORT for `protocol` (17 = UDP).
pub fn write_requested_transport(w: &mut MessageWriter<'_>, protocol: u8) -> Result<(), StunError> {
    w.attr(stun::REQUESTED_TRANSPORT, &[protocol, 0, 0, 0])?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::stun::Message;

    #[test]
    fn channel_data_parse_and_frame() {
        let mut buf = [0u8; 64];
        buf[8..13].copy_from_slice(b"hello");
        let r = frame_channel_data(&mut buf, 8, 5, 0x4001, false).unwrap();
        assert_eq!(r, 4..13);
        let cd = ChannelData::parse(&buf[r]).unwrap();
        assert_eq!((cd.number, cd.data), (0x4001, &b"hello"[..]));
        // TCP: padded to 4 bytes, and the stream framing agrees.
        let r = frame_channel_data(&mut buf, 8, 5, 0x4FFF, true).unwrap();
        assert_eq!(r, 4..16);
        assert_eq!(&buf[13..16], &[0, 0, 0]);
        assert_eq!(tcp_frame_len(&buf[4..]).unwrap(), Some(12));
        let cd = ChannelData::parse(&buf[r]).unwrap();
        assert_eq!(cd.data, b"hello");
        // No headroom, out-of-range channel, overlong and short inputs.
        assert!(frame_channel_data(&mut buf, 3, 5, 0x4000, false).is_err());
        assert!(ChannelData::parse(&[0x40, 0, 0]).is_err());
        assert!(ChannelData::parse(&[0x80, 0, 0, 0]).is_err());
        assert_eq!(
            ChannelData::parse(&[0x7F, 0xFF, 0, 0]).unwrap().number,
            0x7FFF
        );
        assert_eq!(
            ChannelData::parse(&[0x40, 0, 0, 5, 1, 2]),
            Err(TurnError::BadLength)
        );
        // More than padding after the data.
        assert_eq!(
            ChannelData::parse(&[0x40, 0, 0, 1, 1, 0, 0, 0, 0]),
            Err(TurnError::BadLength)
        );
        assert_eq!(ChannelData::parse(&[0x40, 0, 0, 0]).unwrap().data, b"");
    }

    #[test]
    fn tcp_framing() {
        assert_eq!(tcp_frame_len(&[0, 1, 0]).unwrap(), None);
        assert_eq!(tcp_frame_len(&[0, 1, 0, 8]).unwrap(), Some(28));
        assert_eq!(tcp_frame_len(&[0x40, 1, 0, 0]).unwrap(), Some(4));
        assert_eq!(tcp_frame_len(&[0x40, 1, 0, 1]).unwrap(), Some(8));
        assert_eq!(
            tcp_frame_len(&[0x80, 1, 0, 1]),
            Err(TurnError::NotTurn(0x80))
        );
    }

    #[test]
    fn data_indication_in_place() {
        for (peer, start) in [("192.0.2.7:4000", 12), ("[2001:db8::9]:4000", 0)] {
            let peer: SocketAddr = peer.parse().unwrap();
            let mut buf = [0xAAu8; 128];
            buf[PEER_HEADROOM..PEER_HEADROOM + 6].copy_from_slice(b"abcdef");
            let r = frame_data_indication(&mut buf, PEER_HEADROOM, 6, peer, &[4; 12]).unwrap();
            assert_eq!(r, start..PEER_HEADROOM + 8);
            let m = Message::parse(&buf[r]).unwrap();
            assert_eq!((m.class(), m.method()), (Class::Indication, stun::DATA));
            assert_eq!(m.xor_address(stun::XOR_PEER_ADDRESS), Some(peer));
            assert_eq!(m.attr(stun::ATTR_DATA), Some(&b"abcdef"[..]));
        }
        let mut buf = [0u8; 64];
        assert!(
            frame_data_indication(&mut buf, 20, 4, "1.2.3.4:5".parse().unwrap(), &[0; 12]).is_err()
        );
    }

    #[test]
    fn attribute_helpers_round_trip() {
        let mut buf = [0u8; 128];
        let mut w =
            MessageWriter::new(&mut buf, Class::Request, stun::CHANNEL_BIND, &[1; 12]).unwrap();
        write_channel_number(&mut w, 0x4123).unwrap();
        write_requested_transport(&mut w, TRANSPORT_UDP).unwrap();
        w.attr(REQUESTED_ADDRESS_FAMILY, &[1, 0, 0, 0]).unwrap();
        let n = w.finish();
        let m = Message::parse(&buf[..n]).unwrap();
        assert_eq!(channel_number(&m), Some(0x4123));
        assert_eq!(requested_transport(&m), Some(17));
        assert_eq!(requested_address_family(&m), Some(1));
        assert_eq!(FrameKind::of(0x41), Some(FrameKind::ChannelData));
        assert_eq!(FrameKind::of(0x01), Some(FrameKind::Stun));
        assert_eq!(FrameKind::of(0x80), None);
        assert_eq!(FrameKind::of(0x3F), None);
    }
}
