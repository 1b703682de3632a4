//! The entry point for client input: ChannelData or STUN, Binding answered at once,
//! requests checked (method, unknown attributes, credentials, allocation) and dispatched.

use std::time::Instant;

use tern_proto::stun::{self, Class, Message, MessageWriter, StunError};
use tern_proto::turn::{self, FrameKind};

use super::driver::{ClientAddr, ClientOutput, DropReason};
use super::reply::Code;
use super::table::TurnServer;

/// Attributes below 0x8000 (comprehension-required) the server understands; others get 420.
const KNOWN: [u16; 12] = [
    turn::EVEN_PORT,
    stun::USERNAME,
    stun::MESSAGE_INTEGRITY,
    stun::MESSAGE_INTEGRITY_SHA256,
    stun::REALM,
    stun::NONCE,
    stun::LIFETIME,
    stun::REQUESTED_TRANSPORT,
    stun::XOR_PEER_ADDRESS,
    stun::ATTR_DATA,
    stun::CHANNEL_NUMBER,
    turn::REQUESTED_ADDRESS_FAMILY,
];

impl TurnServer {
    /// Handles one datagram (UDP) or frame (TCP) from a client; replies go into `out`
    /// (at least [`MAX_REPLY`](super::MAX_REPLY) bytes).
    pub fn handle_client(
        &mut self,
        now: Instant,
        from: ClientAddr,
        input: &[u8],
        out: &mut [u8],
    ) -> ClientOutput {
        match input.first().copied().and_then(FrameKind::of) {
            Some(FrameKind::ChannelData) => self.client_channel_data(now, from, input),
            Some(FrameKind::Stun) => match Message::parse(input) {
                Ok(m) => self.client_stun(now, from, &m, input, out),
                Err(_) => self.dropped(DropReason::Malformed),
            },
            None => self.dropped(DropReason::Malformed),
        }
    }

    pub(super) fn client_stun(
        &mut self,
        now: Instant,
        from: ClientAddr,
        m: &Message<'_>,
        input: &[u8],
        out: &mut [u8],
    ) -> ClientOutput {
        match (m.class(), m.method()) {
            (Class::Request, stun::BINDING) => {
                self.stats.requests += 1;
                let mut w = match MessageWriter::new(
                    out,
                    Class::Success,
                    stun::BINDING,
                    m.transaction_id(),
                ) {
                    Ok(w) => w,
                    Err(_) => return self.dropped(DropReason::Malformed),
                };
                let ok = w
                    .xor_address(stun::XOR_MAPPED_ADDRESS, from.addr)
                    .and_then(|w| w.fingerprint())
                    .is_ok();
                if ok {
                    ClientOutput::Reply(w.finish())
                } else {
                    self.dropped(DropReason::Malformed)
                }
            }
            (Class::Indication, stun::SEND) => self.send_indication(now, from, m, input),
            (Class::Request, method) => {
                self.stats.requests += 1;
                match self.request(now, from, m, method, out) {
                    Ok(o) => o,
                    Err(_) => self.dropped(DropReason::Malformed),
                }
            }
            _ => self.dropped(DropReason::Ignored),
        }
    }

    /// Authenticated requests: Allocate, Refresh, CreatePermission, ChannelBind.
    pub(super) fn request(
        &mut self,
        now: Instant,
        from: ClientAddr,
        m: &Message<'_>,
        method: u16,
        out: &mut [u8],
    ) -> Result<ClientOutput, StunError> {
        if !matches!(
            method,
            stun::ALLOCATE | stun::REFRESH | stun::CREATE_PERMISSION | stun::CHANNEL_BIND
        ) {
            return self.error(now, from, m, out, Code::BadRequest, None);
        }
        let mut unknown = [0u16; 8];
        let mut n_unknown = 0;
        for (ty, _) in m.attrs() {
            if ty < 0x8000 && !KNOWN.contains(&ty) && n_unknown < unknown.len() {
                unknown[n_unknown] = ty;
                n_unknown += 1;
            }
        }
        if n_unknown > 0 {
            let mut w = MessageWriter::new(out, Class::Error, method, m.transaction_id())?;
            let (code, reason) = Code::UnknownAttribute.parts();
            w.error_code(code, reason)?;
            let mut list = [0u8; 16];
            for (i, ty) in unknown[..n_unknown].iter().enumerate() {
                list[2 * i..2 * i + 2].copy_from_slice(&ty.to_be_bytes());
            }
            w.attr(stun::UNKNOWN_ATTRIBUTES, &list[..2 * n_unknown])?;
            w.fingerprint()?;
            return Ok(ClientOutput::Reply(w.finish()));
        }
        let auth = match self.authenticate(now, from, m) {
            Ok(a) => a,
            Err(code) => return self.error(now, from, m, out, code, None),
        };
        let existing = self.by_client.get(&from).copied();
        if method == stun::ALLOCATE {
            return self.allocate(now, from, m, auth, existing, out);
        }
        let Some(id) = existing else {
            return self.error(now, from, m, out, Code::AllocationMismatch, Some(&auth.key));
        };
        let same_user = self
            .allocs
            .get(id.0)
            .is_some_and(|a| a.user.as_bytes() == auth.user);
        if !same_user {
            return self.error(now, from, m, out, Code::WrongCredentials, Some(&auth.key));
        }
        match method {
            stun::REFRESH => self.refresh(now, m, id, &auth.key, out),
            stun::CREATE_PERMISSION => self.create_permission(now, from, m, id, &auth.key, out),
            _ => self.channel_bind(now, from, m, id, &auth.key, out),
        }
    }
}
