//! STUN messages (RFC 8489, wire-compatible with RFC 5389), zero-copy.
//!
//! [`Message::parse`] validates a datagram and records where its attributes are, without
//! copying or allocating; accessors borrow from the datagram. [`MessageWriter`] builds a
//! message into a caller-owned buffer, bounds-checking every step. The two helpers
//! [`write_binding_success`] and [`write_binding_request`] cover what ICE needs.
//!
//! Rules this module keeps (RFC 8489 §14):
//! - Attributes after MESSAGE-INTEGRITY are ignored, except MESSAGE-INTEGRITY-SHA256 and
//!   FINGERPRINT, so nobody can append unauthenticated attributes to a signed message.
//! - FINGERPRINT must be the last attribute; anything after it makes the message invalid.
//! - Nothing here panics on input from the network.
//!
//! Files: `stun/hash.rs` holds the hand-written CRC-32 (FINGERPRINT) and MD5 (the
//! long-term credential key); this file holds the rest.

mod hash;

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use aws_lc_rs::{constant_time, hmac};

use hash::{Crc32, Md5};

/// The magic cookie every RFC 5389+ message carries in bytes 4..8.
pub const MAGIC_COOKIE: u32 = 0x2112_A442;
/// Length of the STUN header.
pub const HEADER_LEN: usize = 20;
/// Most attributes [`Message::parse`] keeps; a message with more is rejected.
///
/// ICE checks carry about seven and TURN requests about eight, so 24 leaves room while
/// keeping [`Message`] on the stack.
pub const MAX_ATTRS: usize = 24;

/// XOR value for FINGERPRINT (RFC 8489 §14.7): the ASCII bytes "STUN".
const FINGERPRINT_XOR: u32 = 0x5354_554E;
/// Length of the MESSAGE-INTEGRITY value (HMAC-SHA1).
const INTEGRITY_LEN: usize = 20;

// Methods (RFC 8489 §18.2, RFC 8656 §17).

/// Binding method (RFC 8489).
pub const BINDING: u16 = 0x0001;
/// TURN Allocate method (RFC 8656).
pub const ALLOCATE: u16 = 0x0003;
/// TURN Refresh method (RFC 8656).
pub const REFRESH: u16 = 0x0004;
/// TURN Send method (indication only, RFC 8656).
pub const SEND: u16 = 0x0006;
/// TURN Data method (indication only, RFC 8656).
pub const DATA: u16 = 0x0007;
/// TURN CreatePermission method (RFC 8656).
pub const CREATE_PERMISSION: u16 = 0x0008;
/// TURN ChannelBind method (RFC 8656).
pub const CHANNEL_BIND: u16 = 0x0009;

// Attribute types (RFC 8489 §18.3, RFC 8445 §16.1, RFC 8656 §18).

/// MAPPED-ADDRESS (plain, un-XORed address; RFC 3489 legacy).
pub const MAPPED_ADDRESS: u16 = 0x0001;
/// USERNAME.
pub const USERNAME: u16 = 0x0006;
/// MESSAGE-INTEGRITY (HMAC-SHA1, 20 bytes).
pub const MESSAGE_INTEGRITY: u16 = 0x0008;
/// ERROR-CODE.
pub const ERROR_CODE: u16 = 0x0009;
/// UNKNOWN-ATTRIBUTES.
pub const UNKNOWN_ATTRIBUTES: u16 = 0x000A;
/// TURN CHANNEL-NUMBER.
pub const CHANNEL_NUMBER: u16 = 0x000C;
/// TURN LIFETIME.
pub const LIFETIME: u16 = 0x000D;
/// TURN XOR-PEER-ADDRESS.
pub const XOR_PEER_ADDRESS: u16 = 0x0012;
/// TURN DATA attribute (named `ATTR_DATA` to keep it apart from the [`DATA`] method).
pub const ATTR_DATA: u16 = 0x0013;
/// REALM.
pub const REALM: u16 = 0x0014;
/// NONCE.
pub const NONCE: u16 = 0x0015;
/// TURN XOR-RELAYED-ADDRESS.
pub const XOR_RELAYED_ADDRESS: u16 = 0x0016;
/// TURN REQUESTED-TRANSPORT.
pub const REQUESTED_TRANSPORT: u16 = 0x0019;
/// MESSAGE-INTEGRITY-SHA256.
pub const MESSAGE_INTEGRITY_SHA256: u16 = 0x001C;
/// XOR-MAPPED-ADDRESS.
pub const XOR_MAPPED_ADDRESS: u16 = 0x0020;
/// ICE PRIORITY.
pub const PRIORITY: u16 = 0x0024;
/// ICE USE-CANDIDATE (empty value).
pub const USE_CANDIDATE: u16 = 0x0025;
/// SOFTWARE.
pub const SOFTWARE: u16 = 0x8022;
/// FINGERPRINT (CRC-32 of the message XOR 0x5354554E).
pub const FINGERPRINT: u16 = 0x8028;
/// ICE ICE-CONTROLLED (64-bit tiebreaker).
pub const ICE_CONTROLLED: u16 = 0x8029;
/// ICE ICE-CONTROLLING (64-bit tiebreaker).
pub const ICE_CONTROLLING: u16 = 0x802A;

/// The class of a STUN message (RFC 8489 §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// A request; expects a success or error response.
    Request,
    /// An indication; expects no response.
    Indication,
    /// A success response.
    Success,
    /// An error response.
    Error,
}

impl Class {
    fn bits(self) -> u16 {
        match self {
            Class::Request => 0x0000,
            Class::Indication => 0x0010,
            Class::Success => 0x0100,
            Class::Error => 0x0110,
        }
    }

    fn from_type(ty: u16) -> Self {
        match ty & 0x0110 {
            0x0000 => Class::Request,
            0x0010 => Class::Indication,
            0x0100 => Class::Success,
            _ => Class::Error,
        }
    }
}

/// Interleaves a 12-bit method and a class into the 14-bit message type (RFC 8489 §5).
fn message_type(class: Class, method: u16) -> u16 {
    (method & 0x000F) | ((method & 0x0070) << 1) | ((method & 0x0F80) << 2) | class.bits()
}

/// Extracts the 12-bit method from a message type.
fn method_of(ty: u16) -> u16 {
    (ty & 0x000F) | ((ty >> 1) & 0x0070) | ((ty >> 2) & 0x0F80)
}

/// Why a datagram is not a valid STUN message, or why a message could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StunError {
    /// Fewer than 20 bytes.
    #[error("STUN message shorter than the 20-byte header")]
    TooShort,
    /// The first two bits are set or the magic cookie is wrong.
    #[error("not a STUN message (bad leading bits or magic cookie)")]
    NotStun,
    /// The header length is not a multiple of 4 or disagrees with the datagram size.
    #[error("STUN length field does not match the datagram")]
    BadLength,
    /// An attribute runs past the end of the message.
    #[error("STUN attribute runs past the end of the message")]
    BadAttribute,
    /// An attribute follows FINGERPRINT, which must be last.
    #[error("STUN attribute after FINGERPRINT")]
    AfterFingerprint,
    /// More than [`MAX_ATTRS`] attributes.
    #[error("STUN message has more than {MAX_ATTRS} attributes")]
    TooManyAttributes,
    /// The output buffer cannot hold the message being written.
    #[error("buffer too small for the STUN message")]
    BufferTooSmall,
    /// An attribute value longer than 65535 bytes, or a message longer than 65535 + 20.
    #[error("STUN attribute or message too long")]
    TooLong,
    /// The writer was used in a way the RFC forbids (the text says how).
    #[error("STUN writer misuse: {0}")]
    Misuse(&'static str),
}

/// Position of one attribute inside the message.
#[derive(Clone, Copy, Default)]
struct AttrPos {
    ty: u16,
    len: u16,
    /// Offset of the value (the attribute header starts 4 bytes earlier).
    off: u32,
}

/// A parsed STUN message borrowing the datagram it came from.
#[derive(Clone, Copy)]
pub struct Message<'a> {
    buf: &'a [u8],
    attrs: [AttrPos; MAX_ATTRS],
    n: u8,
}

impl fmt::Debug for Message<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut l = f.debug_struct("Message");
        l.field("class", &self.class())
            .field("method", &format_args!("{:#05x}", self.method()))
            .field("len", &self.buf.len());
        let types: Vec<String> = self
            .attrs
            .iter()
            .take(self.n as usize)
            .map(|a| format!("{:#06x}/{}", a.ty, a.len))
            .collect();
        l.field("attrs", &types).finish()
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([s[0], s[1]]))
}

fn be32(b: &[u8]) -> Option<u32> {
    let s: [u8; 4] = b.try_into().ok()?;
    Some(u32::from_be_bytes(s))
}

fn be64(b: &[u8]) -> Option<u64> {
    let s: [u8; 8] = b.try_into().ok()?;
    Some(u64::from_be_bytes(s))
}

/// Rounds up to a multiple of 4.
fn padded(len: usize) -> usize {
    (len + 3) & !3
}

impl<'a> Message<'a> {
    /// Validates `buf` as one STUN message and indexes its attributes.
    ///
    /// Checks: at least 20 bytes, the two leading bits zero, the magic cookie, a length
    /// field that is a multiple of 4 and equals `buf.len() - 20`, every attribute (with its
    /// padding) inside the message, FINGERPRINT last, and at most [`MAX_ATTRS`] attributes
    /// kept. Attributes after MESSAGE-INTEGRITY other than MESSAGE-INTEGRITY-SHA256 and
    /// FINGERPRINT are skipped (RFC 8489 §14.5).
    pub fn parse(buf: &'a [u8]) -> Result<Message<'a>, StunError> {
        let header: &[u8; HEADER_LEN] = buf
            .get(..HEADER_LEN)
            .and_then(|h| h.try_into().ok())
            .ok_or(StunError::TooShort)?;
        if header[0] & 0xC0 != 0
            || u32::from_be_bytes([header[4], header[5], header[6], header[7]]) != MAGIC_COOKIE
        {
            return Err(StunError::NotStun);
        }
        let len = u16::from_be_bytes([header[2], header[3]]) as usize;
        if !len.is_multiple_of(4) || len != buf.len() - HEADER_LEN {
            return Err(StunError::BadLength);
        }
        let mut msg = Message {
            buf,
            attrs: [AttrPos::default(); MAX_ATTRS],
            n: 0,
        };
        let mut at = HEADER_LEN;
        let mut seen_integrity = false;
        let mut seen_fingerprint = false;
        while at < buf.len() {
            if seen_fingerprint {
                return Err(StunError::AfterFingerprint);
            }
            let ty = be16(buf, at).ok_or(StunError::BadAttribute)?;
            let alen = be16(buf, at + 2).ok_or(StunError::BadAttribute)?;
            let off = at + 4;
            let end = off + padded(alen as usize);
            if end > buf.len() {
                return Err(StunError::BadAttribute);
            }
            let keep = !seen_integrity || ty == FINGERPRINT || ty == MESSAGE_INTEGRITY_SHA256;
            if keep {
                let slot = msg
                    .attrs
                    .get_mut(msg.n as usize)
                    .ok_or(StunError::TooManyAttributes)?;
                *slot = AttrPos {
                    ty,
                    len: alen,
                    // A message is at most 65535 + 20 bytes, so offsets fit.
                    off: off as u32,
                };
                msg.n += 1;
            }
            seen_integrity |= ty == MESSAGE_INTEGRITY;
            seen_fingerprint |= ty == FINGERPRINT;
            at = end;
        }
        Ok(msg)
    }

    /// The message class.
    pub fn class(&self) -> Class {
        Class::from_type(self.message_type())
    }

    /// The 12-bit method ([`BINDING`], [`ALLOCATE`], ...).
    pub fn method(&self) -> u16 {
        method_of(self.message_type())
    }

    fn message_type(&self) -> u16 {
        be16(self.buf, 0).unwrap_or(0)
    }

    /// The 96-bit transaction id.
    pub fn transaction_id(&self) -> &'a [u8; 12] {
        const EMPTY: [u8; 12] = [0; 12];
        // parse() guarantees 20 bytes; the fallback is unreachable.
        self.buf
            .get(8..HEADER_LEN)
            .and_then(|t| t.try_into().ok())
            .unwrap_or(&EMPTY)
    }

    /// The whole message as received.
    pub fn raw(&self) -> &'a [u8] {
        self.buf
    }

    fn positions(&self) -> &[AttrPos] {
        self.attrs.get(..self.n as usize).unwrap_or(&[])
    }

    fn value(&self, p: &AttrPos) -> &'a [u8] {
        let off = p.off as usize;
        self.buf.get(off..off + p.len as usize).unwrap_or(&[])
    }

    fn find(&self, ty: u16) -> Option<&AttrPos> {
        self.positions().iter().find(|p| p.ty == ty)
    }

    /// The value (without padding) of the first attribute of type `ty`.
    pub fn attr(&self, ty: u16) -> Option<&'a [u8]> {
        self.find(ty).map(|p| self.value(p))
    }

    /// All kept attributes in order, as `(type, value)`.
    pub fn attrs(&self) -> impl Iterator<Item = (u16, &'a [u8])> + '_ {
        self.positions().iter().map(|p| (p.ty, self.value(p)))
    }

    /// USERNAME, as raw bytes (ICE: `receiver-ufrag:sender-ufrag`).
    pub fn username(&self) -> Option<&'a [u8]> {
        self.attr(USERNAME)
    }

    /// Whether the ICE USE-CANDIDATE flag is present.
    pub fn use_candidate(&self) -> bool {
        self.find(USE_CANDIDATE).is_some()
    }

    /// The ICE PRIORITY, if present and 4 bytes long.
    pub fn priority(&self) -> Option<u32> {
        self.attr(PRIORITY).and_then(be32)
    }

    /// The ICE-CONTROLLING tiebreaker, if present and 8 bytes long.
    pub fn ice_controlling(&self) -> Option<u64> {
        self.attr(ICE_CONTROLLING).and_then(be64)
    }

    /// The ICE-CONTROLLED tiebreaker, if present and 8 bytes long.
    pub fn ice_controlled(&self) -> Option<u64> {
        self.attr(ICE_CONTROLLED).and_then(be64)
    }

    /// A 32-bit attribute such as LIFETIME, if present and 4 bytes long.
    pub fn u32_attr(&self, ty: u16) -> Option<u32> {
        self.attr(ty).and_then(be32)
    }

    /// Verifies MESSAGE-INTEGRITY with `key` (the ICE password for short-term credentials,
    /// [`long_term_key`] for long-term ones).
    ///
    /// The HMAC-SHA1 covers the message up to the attribute, with the header length set as
    /// if MESSAGE-INTEGRITY were the last attribute (RFC 8489 §14.5). The comparison is
    /// constant-time. False when the attribute is missing or not 20 bytes.
    pub fn check_integrity(&self, key: &[u8]) -> bool {
        let Some(p) = self.find(MESSAGE_INTEGRITY) else {
            return false;
        };
        if p.len as usize != INTEGRITY_LEN {
            return false;
        }
        let start = p.off as usize - 4;
        let (Some(signed), Some(tag)) =
            (self.buf.get(..start), self.buf.get(start + 4..start + 24))
        else {
            return false;
        };
        let expected = integrity_tag(key, signed, start + 4 + INTEGRITY_LEN);
        constant_time::verify_slices_are_equal(expected.as_ref(), tag).is_ok()
    }

    /// Verifies FINGERPRINT: CRC-32 of the message before it, XOR 0x5354554E
    /// (RFC 8489 §14.7). False when the attribute is missing or not 4 bytes.
    pub fn check_fingerprint(&self) -> bool {
        let Some(p) = self.find(FINGERPRINT) else {
            return false;
        };
        let start = p.off as usize - 4;
        let (Some(covered), Some(got)) = (
            self.buf.get(..start),
            self.buf
                .get(start + 4..start + 4 + p.len as usize)
                .and_then(be32),
        ) else {
            return false;
        };
        fingerprint_of(covered, start + 8) == got
    }

    /// Decodes an XOR-encoded address attribute: [`XOR_MAPPED_ADDRESS`],
    /// [`XOR_PEER_ADDRESS`] or [`XOR_RELAYED_ADDRESS`]. IPv4 and IPv6.
    pub fn xor_address(&self, ty: u16) -> Option<SocketAddr> {
        decode_xor_address(self.attr(ty)?, self.transaction_id())
    }

    /// Decodes the plain (legacy) MAPPED-ADDRESS attribute.
    pub fn mapped_address(&self) -> Option<SocketAddr> {
        let v = self.attr(MAPPED_ADDRESS)?;
        let port = be16(v, 2)?;
        let ip = match (v.first()?, v.get(1)?, v.len()) {
            (0, 1, 8) => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(v.get(4..8)?).ok()?)),
            (0, 2, 20) => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(v.get(4..20)?).ok()?)),
            _ => return None,
        };
        Some(SocketAddr::new(ip, port))
    }

    /// ERROR-CODE as `(code, reason)`, e.g. `(401, "Unauthorized")`.
    ///
    /// None when the attribute is missing or the code is outside 300..=699. A reason that is
    /// not UTF-8 is returned as "".
    pub fn error_code(&self) -> Option<(u16, &'a str)> {
        let v = self.attr(ERROR_CODE)?;
        let class = u16::from(*v.get(2)? & 0x07);
        let number = u16::from(*v.get(3)?);
        if !(3..=6).contains(&class) || number > 99 {
            return None;
        }
        let reason = v
            .get(4..)
            .and_then(|r| std::str::from_utf8(r).ok())
            .unwrap_or("");
        Some((class * 100 + number, reason))
    }
}

/// Decodes the value of an XOR-encoded address attribute (XOR-MAPPED-ADDRESS,
/// XOR-PEER-ADDRESS, XOR-RELAYED-ADDRESS) of a message with transaction id `tid`; for
/// messages that carry several (CreatePermission), iterate [`Message::attrs`] and decode each.
/// IPv4 and IPv6; `None` when malformed.
pub fn decode_xor_address(v: &[u8], tid: &[u8; 12]) -> Option<SocketAddr> {
    let mut mask = [0u8; 16];
    mask[..4].copy_from_slice(&MAGIC_COOKIE.to_be_bytes());
    mask[4..].copy_from_slice(tid);
    let port = be16(v, 2)? ^ (MAGIC_COOKIE >> 16) as u16;
    let ip = match (v.first()?, v.get(1)?, v.len()) {
        (0, 1, 8) => {
            let mut a = [0u8; 4];
            for (i, b) in a.iter_mut().enumerate() {
                *b = v[4 + i] ^ mask[i];
            }
            IpAddr::V4(Ipv4Addr::from(a))
        }
        (0, 2, 20) => {
            let mut a = [0u8; 16];
            for (i, b) in a.iter_mut().enumerate() {
                *b = v[4 + i] ^ mask[i];
            }
            IpAddr::V6(Ipv6Addr::from(a))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// HMAC-SHA1 over `signed` (a message prefix) with the header length field replaced by
/// `total - 20`, `total` being the message length through MESSAGE-INTEGRITY.
fn integrity_tag(key: &[u8], signed: &[u8], total: usize) -> hmac::Tag {
    let key = hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, key);
    let mut ctx = hmac::Context::with_key(&key);
    let len = (total.saturating_sub(HEADER_LEN) as u16).to_be_bytes();
    ctx.update(signed.get(..2).unwrap_or(&[]));
    ctx.update(&len);
    ctx.update(signed.get(4..).unwrap_or(&[]));
    ctx.sign()
}

/// FINGERPRINT value over `covered` (a message prefix) with the header length replaced by
/// `total - 20`, `total` being the message length through FINGERPRINT.
fn fingerprint_of(covered: &[u8], total: usize) -> u32 {
    let len = (total.saturating_sub(HEADER_LEN) as u16).to_be_bytes();
    let mut c = Crc32::new();
    c.update(covered.get(..2).unwrap_or(&[]));
    c.update(&len);
    c.update(covered.get(4..).unwrap_or(&[]));
    c.finish() ^ FINGERPRINT_XOR
}

/// Builds a STUN message into a caller-owned buffer.
///
/// Every step is bounds-checked and returns [`StunError::BufferTooSmall`] rather than
/// writing past the buffer; the header length is kept current after each attribute.
/// After [`MessageWriter::integrity`] only FINGERPRINT may follow, and after
/// [`MessageWriter::fingerprint`] nothing may ([`StunError::Misuse`]).
#[derive(Debug)]
pub struct MessageWriter<'b> {
    buf: &'b mut [u8],
    len: usize,
    stage: Stage,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Open,
    Signed,
    Sealed,
}

impl<'b> MessageWriter<'b> {
    /// Starts a message: writes the header with length 0.
    ///
    /// `method` must fit in 12 bits.
    pub fn new(
        buf: &'b mut [u8],
        class: Class,
        method: u16,
        tid: &[u8; 12],
    ) -> Result<Self, StunError> {
        if method > 0x0FFF {
            return Err(StunError::Misuse("method wider than 12 bits"));
        }
        let header = buf.get_mut(..HEADER_LEN).ok_or(StunError::BufferTooSmall)?;
        header[..2].copy_from_slice(&message_type(class, method).to_be_bytes());
        header[2..4].copy_from_slice(&[0, 0]);
        header[4..8].copy_from_slice(&MAGIC_COOKIE.to_be_bytes());
        header[8..].copy_from_slice(tid);
        Ok(Self {
            buf,
            len: HEADER_LEN,
            stage: Stage::Open,
        })
    }

    /// The transaction id being written.
    fn tid(&self) -> [u8; 12] {
        let mut t = [0u8; 12];
        if let Some(s) = self.buf.get(8..HEADER_LEN) {
            t.copy_from_slice(s);
        }
        t
    }

    /// Reserves an attribute of `vlen` value bytes (plus padding, zeroed), writes its header
    /// and the new message length, and returns the value slot.
    fn push(&mut self, ty: u16, vlen: usize) -> Result<&mut [u8], StunError> {
        let vlen16 = u16::try_from(vlen).map_err(|_| StunError::TooLong)?;
        let start = self.len;
        let end = start + 4 + padded(vlen);
        let body = u16::try_from(end - HEADER_LEN).map_err(|_| StunError::TooLong)?;
        let slot = self
            .buf
            .get_mut(start..end)
            .ok_or(StunError::BufferTooSmall)?;
        slot[..2].copy_from_slice(&ty.to_be_bytes());
        slot[2..4].copy_from_slice(&vlen16.to_be_bytes());
        slot[4..].fill(0);
        self.buf[2..4].copy_from_slice(&body.to_be_bytes());
        self.len = end;
        Ok(&mut self.buf[start + 4..start + 4 + vlen])
    }

    fn open(&self) -> Result<(), StunError> {
        match self.stage {
            Stage::Open => Ok(()),
            Stage::Signed => Err(StunError::Misuse("attribute after MESSAGE-INTEGRITY")),
            Stage::Sealed => Err(StunError::Misuse("attribute after FINGERPRINT")),
        }
    }

    /// Appends an attribute with a raw value (padded with zeros to 4 bytes).
    pub fn attr(&mut self, ty: u16, value: &[u8]) -> Result<&mut Self, StunError> {
        self.open()?;
        self.push(ty, value.len())?.copy_from_slice(value);
        Ok(self)
    }

    /// Appends a 32-bit attribute (PRIORITY, LIFETIME, ...).
    pub fn u32_attr(&mut self, ty: u16, v: u32) -> Result<&mut Self, StunError> {
        self.attr(ty, &v.to_be_bytes())
    }

    /// Appends a 64-bit attribute (ICE-CONTROLLING, ICE-CONTROLLED).
    pub fn u64_attr(&mut self, ty: u16, v: u64) -> Result<&mut Self, StunError> {
        self.attr(ty, &v.to_be_bytes())
    }

    /// Appends an XOR-encoded address (XOR-MAPPED-ADDRESS and the TURN ones).
    ///
    /// An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, as a dual-stack socket reports IPv4
    /// peers) is written as the IPv4 address it is.
    pub fn xor_address(&mut self, ty: u16, addr: SocketAddr) -> Result<&mut Self, StunError> {
        self.open()?;
        let tid = self.tid();
        let mut mask = [0u8; 16];
        mask[..4].copy_from_slice(&MAGIC_COOKIE.to_be_bytes());
        mask[4..].copy_from_slice(&tid);
        let port = (addr.port() ^ (MAGIC_COOKIE >> 16) as u16).to_be_bytes();
        match addr.ip().to_canonical() {
            IpAddr::V4(ip) => {
                let v = self.push(ty, 8)?;
                v[..2].copy_from_slice(&[0, 1]);
                v[2..4].copy_from_slice(&port);
                for (i, b) in ip.octets().iter().enumerate() {
                    v[4 + i] = b ^ mask[i];
                }
            }
            IpAddr::V6(ip) => {
                let v = self.push(ty, 20)?;
                v[..2].copy_from_slice(&[0, 2]);
                v[2..4].copy_from_slice(&port);
                for (i, b) in ip.octets().iter().enumerate() {
                    v[4 + i] = b ^ mask[i];
                }
            }
        }
        Ok(self)
    }

    /// Appends ERROR-CODE. `code` must be in 300..=699.
    pub fn error_code(&mut self, code: u16, reason: &str) -> Result<&mut Self, StunError> {
        self.open()?;
        if !(300..=699).contains(&code) {
            return Err(StunError::Misuse("error code outside 300..=699"));
        }
        let v = self.push(ERROR_CODE, 4 + reason.len())?;
        v[2] = (code / 100) as u8;
        v[3] = (code % 100) as u8;
        v[4..].copy_from_slice(reason.as_bytes());
        Ok(self)
    }

    /// Appends MESSAGE-INTEGRITY: HMAC-SHA1 with `key` over the message so far, the length
    /// field counting the attribute itself (RFC 8489 §14.5).
    pub fn integrity(&mut self, key: &[u8]) -> Result<&mut Self, StunError> {
        self.open()?;
        let start = self.len;
        // Reserve first so the length field and bounds are right before signing.
        self.push(MESSAGE_INTEGRITY, INTEGRITY_LEN)?;
        let tag = integrity_tag(key, &self.buf[..start], self.len);
        self.buf[start + 4..self.len].copy_from_slice(tag.as_ref());
        self.stage = Stage::Signed;
        Ok(self)
    }

    /// Appends FINGERPRINT; nothing may follow it.
    pub fn fingerprint(&mut self) -> Result<&mut Self, StunError> {
        if self.stage == Stage::Sealed {
            return Err(StunError::Misuse("second FINGERPRINT"));
        }
        let start = self.len;
        self.push(FINGERPRINT, 4)?;
        let fp = fingerprint_of(&self.buf[..start], self.len);
        self.buf[start + 4..self.len].copy_from_slice(&fp.to_be_bytes());
        self.stage = Stage::Sealed;
        Ok(self)
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether only the header has been written (a STUN message is never empty).
    pub fn is_empty(&self) -> bool {
        self.len == HEADER_LEN
    }

    /// Ends the message and returns its length; the message is `buf[..len]`.
    pub fn finish(self) -> usize {
        self.len
    }
}

/// Writes a Binding success response for an ICE check: XOR-MAPPED-ADDRESS `mapped`,
/// MESSAGE-INTEGRITY with `key` (our ICE password), FINGERPRINT. Returns its length
/// (64 bytes for IPv4, 76 for IPv6).
pub fn write_binding_success(
    out: &mut [u8],
    tid: &[u8; 12],
    mapped: SocketAddr,
    key: &[u8],
) -> Result<usize, StunError> {
    let mut w = MessageWriter::new(out, Class::Success, BINDING, tid)?;
    w.xor_address(XOR_MAPPED_ADDRESS, mapped)?
        .integrity(key)?
        .fingerprint()?;
    Ok(w.finish())
}

/// Writes an ICE Binding request (RFC 8445 §7.1.2): USERNAME, the role attribute,
/// USE-CANDIDATE if asked, PRIORITY, MESSAGE-INTEGRITY with `key` (the peer's ICE
/// password), FINGERPRINT. Returns its length.
///
/// `controlling: Some(tiebreaker)` sends ICE-CONTROLLING. `None` sends ICE-CONTROLLED with
/// tiebreaker 0, the smallest value, so that in a role conflict the peer takes the
/// controlling role (RFC 8445 §7.3.1.1). RFC 8445 lets only the controlling agent send
/// USE-CANDIDATE; this function writes it whenever `use_candidate` is set.
pub fn write_binding_request(
    out: &mut [u8],
    tid: &[u8; 12],
    username: &[u8],
    key: &[u8],
    priority: u32,
    controlling: Option<u64>,
    use_candidate: bool,
) -> Result<usize, StunError> {
    let mut w = MessageWriter::new(out, Class::Request, BINDING, tid)?;
    w.attr(USERNAME, username)?;
    match controlling {
        Some(t) => w.u64_attr(ICE_CONTROLLING, t)?,
        None => w.u64_attr(ICE_CONTROLLED, 0)?,
    };
    if use_candidate {
        w.attr(USE_CANDIDATE, &[])?;
    }
    w.u32_attr(PRIORITY, priority)?
        .integrity(key)?
        .fingerprint()?;
    Ok(w.finish())
}

/// The long-term credential key: MD5 of `username:realm:password` (RFC 8489 §9.2.2).
///
/// The inputs are used as given; RFC 8489 asks for OpaqueString/SASLprep processing first,
/// which is the caller's business (plain ASCII credentials need none).
pub fn long_term_key(username: &[u8], realm: &[u8], password: &[u8]) -> [u8; 16] {
    let mut m = Md5::new();
    m.update(username);
    m.update(b":");
    m.update(realm);
    m.update(b":");
    m.update(password);
    m.finish()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Hex as the RFCs print it (spaces and line breaks ignored) to bytes.
    fn hex(s: &str) -> Vec<u8> {
        let d: Vec<u8> = s
            .bytes()
            .filter(u8::is_ascii_hexdigit)
            .map(|c| (c as char).to_digit(16).unwrap() as u8)
            .collect();
        d.chunks(2).map(|p| p[0] << 4 | p[1]).collect()
    }

    const PASSWORD: &[u8] = b"VOkJxbRl1RmTxUk/WvJxBt";

    // RFC 5769 §2.1.
    const REQUEST: &str = "
        00 01 00 58 21 12 a4 42 b7 e7 a7 01 bc 34 d6 86 fa 87 df ae
        80 22 00 10 53 54 55 4e 20 74 65 73 74 20 63 6c 69 65 6e 74
        00 24 00 04 6e 00 01 ff
        80 29 00 08 93 2f f9 b1 51 26 3b 36
        00 06 00 09 65 76 74 6a 3a 68 36 76 59 20 20 20
        00 08 00 14 9a ea a7 0c bf d8 cb 56 78 1e f2 b5 b2 d3 f2 49 c1 b5 71 a2
        80 28 00 04 e5 7a 3b cf";

    // RFC 5769 §2.2.
    const RESPONSE_V4: &str = "
        01 01 00 3c 21 12 a4 42 b7 e7 a7 01 bc 34 d6 86 fa 87 df ae
        80 22 00 0b 74 65 73 74 20 76 65 63 74 6f 72 20
        00 20 00 08 00 01 a1 47 e1 12 a6 43
        00 08 00 14 2b 91 f5 99 fd 9e 90 c3 8c 74 89 f9 2a f9 ba 53 f0 6b e7 d7
        80 28 00 04 c0 7d 4c 96";

    // RFC 5769 §2.3.
    const RESPONSE_V6: &str = "
        01 01 00 48 21 12 a4 42 b7 e7 a7 01 bc 34 d6 86 fa 87 df ae
        80 22 00 0b 74 65 73 74 20 76 65 63 74 6f 72 20
        00 20 00 14 00 02 a1 47 01 13 a9 fa a5 d3 f1 79 bc 25 f4 b5 be d2 b9 d9
        00 08 00 14 a3 82 95 4e 4b e6 7b f1 17 84 c9 7c 82 92 c2 75 bf e3 ed 41
        80 28 00 04 c8 fb 0b 4c";

    // RFC 5769 §2.4: long-term credentials, no FINGERPRINT.
    const LONG_TERM_REQUEST: &str = "
        00 01 00 60 21 12 a4 42 78 ad 34 33 c6 ad 72 c0 29 da 41 2e
        00 06 00 12 e3 83 9e e3 83 88 e3 83 aa e3 83 83 e3 82 af e3 82 b9 00 00
        00 15 00 1c 66 2f 2f 34 39 39 6b 39 35 34 64 36 4f 4c 33 34 6f 4c 39 46 53 54 76 79 36 34 73 41
        00 14 00 0b 65 78 61 6d 70 6c 65 2e 6f 72 67 00
        00 08 00 14 f6 70 24 65 6d d6 4a 3e 02 b8 e0 71 2e 85 c9 a2 8c a8 96 66";

    #[test]
    fn message_type_interleaving() {
        for (class, method, ty) in [
            (Class::Request, BINDING, 0x0001),
            (Class::Success, BINDING, 0x0101),
            (Class::Error, BINDING, 0x0111),
            (Class::Request, ALLOCATE, 0x0003),
            (Class::Error, ALLOCATE, 0x0113),
            (Class::Indication, SEND, 0x0016),
            (Class::Indication, DATA, 0x0017),
            (Class::Success, CHANNEL_BIND, 0x0109),
            (Class::Request, 0x0FFF, 0x3EEF),
        ] {
            assert_eq!(message_type(class, method), ty);
            assert_eq!(method_of(ty), method);
            assert_eq!(Class::from_type(ty), class);
        }
    }

    #[test]
    fn rfc5769_sample_request() {
        let b = hex(REQUEST);
        let m = Message::parse(&b).unwrap();
        assert_eq!(m.class(), Class::Request);
        assert_eq!(m.method(), BINDING);
        assert_eq!(m.transaction_id(), &b[8..20]);
        assert_eq!(m.username(), Some(&b"evtj:h6vY"[..]));
        assert_eq!(m.attr(SOFTWARE), Some(&b"STUN test client"[..]));
        assert_eq!(m.priority(), Some(0x6e00_01ff));
        assert_eq!(m.ice_controlled(), Some(0x932f_f9b1_5126_3b36));
        assert_eq!(m.ice_controlling(), None);
        assert!(!m.use_candidate());
        assert_eq!(m.attrs().count(), 6);
        assert!(m.check_integrity(PASSWORD));
        assert!(m.check_fingerprint());
        assert!(!m.check_integrity(b"VOkJxbRl1RmTxUk/WvJxBT"));
        assert_eq!(m.raw(), &b[..]);
    }

    #[test]
    fn rfc5769_flipped_byte_fails_checks() {
        let good = hex(REQUEST);
        // Every byte before MESSAGE-INTEGRITY is covered by both checks (the length field
        // excepted, which parse rejects).
        for i in (0..good.len() - 32).filter(|i| !(2..4).contains(i)) {
            let mut b = good.clone();
            b[i] ^= 0x01;
            let Ok(m) = Message::parse(&b) else { continue };
            assert!(!m.check_integrity(PASSWORD), "byte {i}");
            assert!(!m.check_fingerprint(), "byte {i}");
        }
        // A flipped MESSAGE-INTEGRITY byte breaks integrity and fingerprint.
        let mut b = good.clone();
        let n = b.len();
        b[n - 10] ^= 0x80;
        let m = Message::parse(&b).unwrap();
        assert!(!m.check_integrity(PASSWORD));
        assert!(!m.check_fingerprint());
        // A flipped FINGERPRINT byte breaks only the fingerprint.
        let mut b = good;
        b[n - 1] ^= 0x01;
        let m = Message::parse(&b).unwrap();
        assert!(m.check_integrity(PASSWORD));
        assert!(!m.check_fingerprint());
    }

    #[test]
    fn rfc5769_ipv4_response() {
        let b = hex(RESPONSE_V4);
        let m = Message::parse(&b).unwrap();
        assert_eq!(m.class(), Class::Success);
        assert_eq!(m.method(), BINDING);
        assert_eq!(
            m.xor_address(XOR_MAPPED_ADDRESS),
            Some("192.0.2.1:32853".parse().unwrap())
        );
        assert!(m.check_integrity(PASSWORD));
        assert!(m.check_fingerprint());
    }

    #[test]
    fn rfc5769_ipv6_response() {
        let b = hex(RESPONSE_V6);
        let m = Message::parse(&b).unwrap();
        assert_eq!(
            m.xor_address(XOR_MAPPED_ADDRESS),
            Some(
                "[2001:db8:1234:5678:11:2233:4455:6677]:32853"
                    .parse()
                    .unwrap()
            )
        );
        assert!(m.check_integrity(PASSWORD));
        assert!(m.check_fingerprint());
    }

    #[test]
    fn rfc5769_long_term_request() {
        let b = hex(LONG_TERM_REQUEST);
        let m = Message::parse(&b).unwrap();
        let user = m.username().unwrap();
        assert_eq!(
            std::str::from_utf8(user).unwrap(),
            "\u{30DE}\u{30C8}\u{30EA}\u{30C3}\u{30AF}\u{30B9}"
        );
        assert_eq!(m.attr(REALM), Some(&b"example.org"[..]));
        assert_eq!(m.attr(NONCE), Some(&b"f//499k954d6OL34oL9FSTvy64sA"[..]));
        assert!(!m.check_fingerprint());
        // "The<U+00AD>M<U+00AA>tr<U+2168>" after SASLprep.
        let key = long_term_key(user, b"example.org", b"TheMatrIX");
        assert!(m.check_integrity(&key));
        assert!(!m.check_integrity(&long_term_key(user, b"example.org", b"TheMatrix")));
    }

    #[test]
    fn writer_reproduces_rfc5769_responses() {
        for (vector, mapped) in [
            (RESPONSE_V4, "192.0.2.1:32853"),
            (RESPONSE_V6, "[2001:db8:1234:5678:11:2233:4455:6677]:32853"),
        ] {
            let want = hex(vector);
            let tid: [u8; 12] = want[8..20].try_into().unwrap();
            let mut buf = [0u8; 128];
            let mut w = MessageWriter::new(&mut buf, Class::Success, BINDING, &tid).unwrap();
            // The RFC pads SOFTWARE with a space; any padding is allowed, the writer uses 0.
            w.attr(SOFTWARE, b"test vector ").unwrap();
            w.buf[22..24].copy_from_slice(&[0, 11]);
            w.xor_address(XOR_MAPPED_ADDRESS, mapped.parse().unwrap())
                .unwrap()
                .integrity(PASSWORD)
                .unwrap()
                .fingerprint()
                .unwrap();
            let n = w.finish();
            assert_eq!(&buf[..n], &want[..], "{mapped}");
        }
    }

    #[test]
    fn binding_success_round_trip() {
        let tid = [7u8; 12];
        for addr in [
            "203.0.113.45:51234",
            "[2001:db8::1]:443",
            "[::ffff:192.0.2.7]:3478",
        ] {
            let addr: SocketAddr = addr.parse().unwrap();
            let mut buf = [0u8; 128];
            let n = write_binding_success(&mut buf, &tid, addr, b"pwd").unwrap();
            let m = Message::parse(&buf[..n]).unwrap();
            assert_eq!(m.class(), Class::Success);
            assert_eq!(m.method(), BINDING);
            assert_eq!(m.transaction_id(), &tid);
            let want = SocketAddr::new(addr.ip().to_canonical(), addr.port());
            assert_eq!(m.xor_address(XOR_MAPPED_ADDRESS), Some(want));
            assert!(m.check_integrity(b"pwd"));
            assert!(!m.check_integrity(b"pwe"));
            assert!(m.check_fingerprint());
            assert_eq!(n, if want.is_ipv4() { 64 } else { 76 });
        }
    }

    #[test]
    fn binding_request_round_trip() {
        let tid = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
        let mut buf = [0u8; 256];
        let n = write_binding_request(
            &mut buf,
            &tid,
            b"abcd:efgh",
            b"secretsecretsecretsecret",
            0x7e00_ffff,
            Some(0x1122_3344_5566_7788),
            true,
        )
        .unwrap();
        let m = Message::parse(&buf[..n]).unwrap();
        assert_eq!((m.class(), m.method()), (Class::Request, BINDING));
        assert_eq!(m.username(), Some(&b"abcd:efgh"[..]));
        assert_eq!(m.priority(), Some(0x7e00_ffff));
        assert_eq!(m.ice_controlling(), Some(0x1122_3344_5566_7788));
        assert!(m.use_candidate());
        assert!(m.check_integrity(b"secretsecretsecretsecret"));
        assert!(m.check_fingerprint());

        let n = write_binding_request(&mut buf, &tid, b"u:v", b"k", 1, None, false).unwrap();
        let m = Message::parse(&buf[..n]).unwrap();
        assert_eq!(m.ice_controlled(), Some(0));
        assert_eq!(m.ice_controlling(), None);
        assert!(!m.use_candidate());
        assert!(m.check_integrity(b"k"));
    }

    #[test]
    fn writer_bounds_and_misuse() {
        let tid = [0u8; 12];
        assert_eq!(
            write_binding_success(&mut [0u8; 63], &tid, "1.2.3.4:5".parse().unwrap(), b"k"),
            Err(StunError::BufferTooSmall)
        );
        for len in 0..64 {
            let mut buf = vec![0u8; len];
            assert!(
                write_binding_success(&mut buf, &tid, "1.2.3.4:5".parse().unwrap(), b"k").is_err()
            );
        }
        let mut buf = [0u8; 256];
        let mut w = MessageWriter::new(&mut buf, Class::Request, BINDING, &tid).unwrap();
        assert!(w.is_empty());
        w.integrity(b"k").unwrap();
        assert!(matches!(w.attr(USERNAME, b"x"), Err(StunError::Misuse(_))));
        w.fingerprint().unwrap();
        assert!(matches!(w.fingerprint(), Err(StunError::Misuse(_))));
        assert!(matches!(w.integrity(b"k"), Err(StunError::Misuse(_))));
        assert_eq!(w.len(), 20 + 24 + 8);
        let mut buf = [0u8; 64];
        assert!(MessageWriter::new(&mut buf, Class::Request, 0x1000, &tid).is_err());
        let mut big = vec![0u8; 70_000];
        let mut w = MessageWriter::new(&mut big, Class::Request, BINDING, &tid).unwrap();
        assert_eq!(
            w.attr(ATTR_DATA, &[0u8; 65_536]).err(),
            Some(StunError::TooLong)
        );
        w.attr(ATTR_DATA, &[0u8; 65_000]).unwrap();
        assert_eq!(
            w.attr(ATTR_DATA, &[0u8; 600]).err(),
            Some(StunError::TooLong)
        );
    }

    #[test]
    fn error_code_round_trip() {
        let mut buf = [0u8; 128];
        let mut w = MessageWriter::new(&mut buf, Class::Error, ALLOCATE, &[9; 12]).unwrap();
        w.error_code(438, "Stale Nonce").unwrap();
        w.u32_attr(LIFETIME, 600).unwrap();
        let n = w.finish();
        let m = Message::parse(&buf[..n]).unwrap();
        assert_eq!(m.class(), Class::Error);
        assert_eq!(m.method(), ALLOCATE);
        assert_eq!(m.error_code(), Some((438, "Stale Nonce")));
        assert_eq!(m.u32_attr(LIFETIME), Some(600));
        let mut w = MessageWriter::new(&mut buf, Class::Error, BINDING, &[9; 12]).unwrap();
        assert!(w.error_code(200, "no").is_err());
        assert!(w.error_code(700, "no").is_err());
    }

    #[test]
    fn mapped_address_plain() {
        let mut buf = [0u8; 64];
        let mut w = MessageWriter::new(&mut buf, Class::Success, BINDING, &[3; 12]).unwrap();
        w.attr(MAPPED_ADDRESS, &[0, 1, 0x1f, 0x90, 10, 0, 0, 1])
            .unwrap();
        let n = w.finish();
        let m = Message::parse(&buf[..n]).unwrap();
        assert_eq!(m.mapped_address(), Some("10.0.0.1:8080".parse().unwrap()));
        assert_eq!(m.xor_address(XOR_MAPPED_ADDRESS), None);
    }

    #[test]
    fn malformed_input_is_rejected() {
        let good = hex(REQUEST);
        assert_eq!(Message::parse(&[]).err(), Some(StunError::TooShort));
        assert_eq!(Message::parse(&good[..19]).err(), Some(StunError::TooShort));
        for cut in 20..good.len() {
            assert!(Message::parse(&good[..cut]).is_err(), "truncated at {cut}");
        }
        let mut b = good.clone();
        b[0] |= 0x80;
        assert_eq!(Message::parse(&b).err(), Some(StunError::NotStun));
        let mut b = good.clone();
        b[5] ^= 1;
        assert_eq!(Message::parse(&b).err(), Some(StunError::NotStun));
        let mut b = good.clone();
        b[3] = 0x5a; // not a multiple of 4
        assert_eq!(Message::parse(&b).err(), Some(StunError::BadLength));
        let mut b = good.clone();
        b.extend_from_slice(&[0; 4]);
        assert_eq!(Message::parse(&b).err(), Some(StunError::BadLength));
        let mut b = good.clone();
        b[23] = 0x40; // SOFTWARE length past the end
        assert_eq!(Message::parse(&b).err(), Some(StunError::BadAttribute));
        // An attribute after FINGERPRINT.
        let mut b = good.clone();
        b.extend_from_slice(&[0x80, 0x22, 0, 0]);
        b[3] += 4;
        assert_eq!(Message::parse(&b).err(), Some(StunError::AfterFingerprint));
        // Too many attributes.
        let mut b = good[..20].to_vec();
        for _ in 0..=MAX_ATTRS {
            b.extend_from_slice(&[0x80, 0x22, 0, 0]);
        }
        let len = (b.len() - 20) as u16;
        b[2..4].copy_from_slice(&len.to_be_bytes());
        assert_eq!(Message::parse(&b).err(), Some(StunError::TooManyAttributes));
        b.truncate(b.len() - 4);
        b[2..4].copy_from_slice(&(len - 4).to_be_bytes());
        assert_eq!(Message::parse(&b).unwrap().attrs().count(), MAX_ATTRS);
        // Garbage in the shape of an RTP packet.
        assert!(Message::parse(&[0x80; 100]).is_err());
    }

    #[test]
    fn attributes_after_integrity_are_ignored() {
        let tid = [5u8; 12];
        let mut buf = [0u8; 128];
        let mut w = MessageWriter::new(&mut buf, Class::Request, BINDING, &tid).unwrap();
        w.attr(USERNAME, b"a:b").unwrap().integrity(b"k").unwrap();
        let mut n = w.finish();
        // Append USE-CANDIDATE behind MESSAGE-INTEGRITY by hand.
        buf[n..n + 4].copy_from_slice(&[0x00, 0x25, 0, 0]);
        n += 4;
        let body = (n - 20) as u16;
        buf[2..4].copy_from_slice(&body.to_be_bytes());
        let m = Message::parse(&buf[..n]).unwrap();
        assert!(!m.use_candidate());
        assert!(m.check_integrity(b"k"));
    }

    #[test]
    fn wrong_sized_values_are_none() {
        let mut buf = [0u8; 128];
        let mut w = MessageWriter::new(&mut buf, Class::Request, BINDING, &[1; 12]).unwrap();
        w.attr(PRIORITY, &[1, 2, 3]).unwrap();
        w.attr(ICE_CONTROLLING, &[1; 4]).unwrap();
        w.attr(XOR_MAPPED_ADDRESS, &[0, 1, 0, 0, 1, 2, 3]).unwrap();
        w.attr(ERROR_CODE, &[0, 0, 9, 1]).unwrap();
        w.attr(MESSAGE_INTEGRITY, &[0; 19]).unwrap();
        w.attr(FINGERPRINT, &[0; 3]).unwrap();
        let n = w.finish();
        let m = Message::parse(&buf[..n]).unwrap();
        assert_eq!(m.priority(), None);
        assert_eq!(m.ice_controlling(), None);
        assert_eq!(m.xor_address(XOR_MAPPED_ADDRESS), None);
        assert_eq!(m.error_code(), None);
        assert!(!m.check_integrity(b"k"));
        assert!(!m.check_fingerprint());
    }

    /// xorshift64*, so the test needs no rand crate and replays from its seed.
    fn xorshift(s: &mut u64) -> u64 {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        s.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn exercise(m: &Message<'_>) {
        let _ = (m.class(), m.method(), m.transaction_id(), m.raw());
        let _ = (
            m.username(),
            m.use_candidate(),
            m.priority(),
            m.error_code(),
        );
        let _ = (m.ice_controlling(), m.ice_controlled(), m.mapped_address());
        for ty in [XOR_MAPPED_ADDRESS, XOR_PEER_ADDRESS, XOR_RELAYED_ADDRESS] {
            let _ = m.xor_address(ty);
        }
        let _ = m.attrs().count();
        let _ = (m.check_integrity(b"key"), m.check_fingerprint());
        let _ = format!("{m:?}");
    }

    #[test]
    fn random_input_never_panics() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let seeds = [
            hex(REQUEST),
            hex(RESPONSE_V4),
            hex(RESPONSE_V6),
            hex(LONG_TERM_REQUEST),
        ];
        let mut parsed = 0;
        for round in 0..20_000 {
            let mut b = if round % 2 == 0 {
                seeds[round / 2 % seeds.len()].clone()
            } else {
                let len = (xorshift(&mut seed) % 120) as usize;
                let mut b: Vec<u8> = (0..len).map(|_| xorshift(&mut seed) as u8).collect();
                if b.len() >= 20 {
                    // Make the header plausible so the attribute walk is reached.
                    b[0] &= 0x3F;
                    b[2..4].copy_from_slice(&((len - 20) as u16).to_be_bytes());
                    b[4..8].copy_from_slice(&MAGIC_COOKIE.to_be_bytes());
                }
                b
            };
            let flips = xorshift(&mut seed) % 4;
            for _ in 0..flips {
                if b.is_empty() {
                    break;
                }
                let i = (xorshift(&mut seed) % b.len() as u64) as usize;
                b[i] = xorshift(&mut seed) as u8;
            }
            if let Ok(m) = Message::parse(&b) {
                parsed += 1;
                exercise(&m);
            }
        }
        assert!(parsed > 1000, "only {parsed} inputs parsed");
    }
}
