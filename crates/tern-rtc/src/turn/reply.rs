//! What the server writes back: its error codes, error responses (with a fresh nonce
//! for a challenge) and the Allocate success.

use std::net::SocketAddr;
use std::time::Instant;

use tern_proto::stun::{self, Class, Message, MessageWriter, StunError};

use super::driver::{ClientAddr, ClientOutput};
use super::table::TurnServer;

/// Error codes the server sends (RFC 8489 §14.8, RFC 8656 §19).
#[derive(Clone, Copy)]
pub(super) enum Code {
    BadRequest,
    Unauthorized,
    UnknownAttribute,
    AllocationMismatch,
    StaleNonce,
    AddressFamily,
    WrongCredentials,
    UnsupportedTransport,
    PeerFamilyMismatch,
    Forbidden,
    Quota,
    Capacity,
}

impl Code {
    pub(super) fn parts(self) -> (u16, &'static str) {
        match self {
            Code::BadRequest => (400, "Bad Request"),
            Code::Unauthorized => (401, "Unauthorized"),
            Code::UnknownAttribute => (420, "Unknown Attribute"),
            Code::AllocationMismatch => (437, "Allocation Mismatch"),
            Code::StaleNonce => (438, "Stale Nonce"),
            Code::AddressFamily => (440, "Address Family not Supported"),
            Code::WrongCredentials => (441, "Wrong Credentials"),
            Code::UnsupportedTransport => (442, "Unsupported Transport Protocol"),
            Code::PeerFamilyMismatch => (443, "Peer Address Family Mismatch"),
            Code::Forbidden => (403, "Forbidden"),
            Code::Quota => (486, "Allocation Quota Reached"),
            Code::Capacity => (508, "Insufficient Capacity"),
        }
    }
}

impl TurnServer {
    pub(super) fn error(
        &mut self,
        now: Instant,
        from: ClientAddr,
        m: &Message<'_>,
        out: &mut [u8],
        code: Code,
        key: Option<&[u8; 16]>,
    ) -> Result<ClientOutput, StunError> {
        let challenge = matches!(code, Code::Unauthorized | Code::StaleNonce)
            .then(|| (self.cfg.realm.clone(), self.make_nonce(now, from)));
        let n = write_error(
            out,
            m.method(),
            m.transaction_id(),
            code,
            challenge.as_ref().map(|(r, n)| (r.as_bytes(), &n[..])),
            key,
        )?;
        Ok(ClientOutput::Reply(n))
    }
}

pub(super) fn write_allocate_success(
    out: &mut [u8],
    tid: &[u8; 12],
    relay: SocketAddr,
    mapped: SocketAddr,
    lifetime: u32,
    key: &[u8; 16],
) -> Result<usize, StunError> {
    let mut w = MessageWriter::new(out, Class::Success, stun::ALLOCATE, tid)?;
    w.xor_address(stun::XOR_RELAYED_ADDRESS, relay)?
        .u32_attr(stun::LIFETIME, lifetime)?
        .xor_address(stun::XOR_MAPPED_ADDRESS, mapped)?
        .integrity(key)?
        .fingerprint()?;
    Ok(w.finish())
}

pub(super) fn write_error(
    out: &mut [u8],
    method: u16,
    tid: &[u8; 12],
    code: Code,
    challenge: Option<(&[u8], &[u8])>,
    key: Option<&[u8; 16]>,
) -> Result<usize, StunError> {
    let (c, reason) = code.parts();
    let mut w = MessageWriter::new(out, Class::Error, method, tid)?;
    w.error_code(c, reason)?;
    if let Some((realm, nonce)) = challenge {
        w.attr(stun::REALM, realm)?.attr(stun::NONCE, nonce)?;
    }
    if let Some(k) = key {
        w.integrity(k)?;
    }
    w.fingerprint()?;
    Ok(w.finish())
}
