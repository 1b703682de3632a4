//! A small sans-IO TURN client (RFC 8656): allocate, refresh, create permissions, bind
//! channels, send and receive through the relay. For the load tester (`tern bench --relay`)
//! and tests; it plays pjnath's role in its ICE heap study.
//!
//! One transaction is outstanding at a time: start one (`allocate`, `refresh`,
//! `create_permission`, `channel_bind` write the request into `out`), send it, feed every
//! datagram (or TCP frame) from the server to [`TurnClient::handle_input`], and wait for the
//! [`TurnClientEvent`]. The long-term credential dance is inside: a 401 or 438 answer yields
//! [`Received::Transmit`] with the request signed with the server's realm and nonce. Over
//! UDP, [`TurnClient::handle_timeout`] retransmits (RFC 8489 §6.2.1: RTO 500 ms doubling,
//! 7 tries). No clock is read: every call takes `now`.

use std::net::SocketAddr;
use std::ops::Range;
use std::time::{Duration, Instant};

use tern_proto::stun::{self, Class, Message, MessageWriter, StunError};
use tern_proto::turn::{self, ChannelData, FrameKind};

use crate::turn::Transport;

/// Initial retransmission timeout (RFC 8489 §6.2.1).
const RTO: Duration = Duration::from_millis(500);
/// Requests sent before giving up (RFC 8489 §6.2.1, Rc = 7).
const MAX_TRIES: u8 = 7;

/// A request the client can make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnRequest {
    /// Allocate a UDP relay.
    Allocate,
    /// Refresh the allocation (lifetime 0 deletes it).
    Refresh {
        /// Requested lifetime, seconds.
        lifetime: u32,
    },
    /// Permit a peer's IP.
    CreatePermission {
        /// The peer (its port is ignored by the server).
        peer: SocketAddr,
    },
    /// Bind a channel number to a peer.
    ChannelBind {
        /// 0x4000..=0x4FFF.
        number: u16,
        /// The peer.
        peer: SocketAddr,
    },
}

/// Outcome of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnClientEvent {
    /// Allocate succeeded.
    Allocated {
        /// The relayed transport address (give it to peers).
        relayed: SocketAddr,
        /// Our address as the server sees it.
        mapped: Option<SocketAddr>,
        /// Granted lifetime, seconds.
        lifetime: u32,
    },
    /// Refresh succeeded.
    Refreshed {
        /// Granted lifetime, seconds (0: the allocation is gone).
        lifetime: u32,
    },
    /// CreatePermission succeeded.
    PermissionCreated {
        /// The peer.
        peer: SocketAddr,
    },
    /// ChannelBind succeeded; [`TurnClient::send`] uses the channel from now on.
    ChannelBound {
        /// The channel number.
        number: u16,
        /// The peer.
        peer: SocketAddr,
    },
    /// The request failed: an error response, or no answer after every retransmission
    /// (`code` 0).
    Failed {
        /// The request.
        request: TurnRequest,
        /// STUN error code, or 0 for a timeout.
        code: u16,
    },
}

/// What an input or a timeout produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// Payload from `peer` at `input[data]`.
    Data {
        /// The peer that sent it.
        peer: SocketAddr,
        /// Range of the payload in the input.
        data: Range<usize>,
    },
    /// Send `out[..n]` to the server (a signed retry after a challenge, or a retransmission).
    Transmit(usize),
    /// A request finished.
    Event(TurnClientEvent),
    /// Nothing to do (unrelated or malformed input, nothing due).
    Nothing,
}

/// Misuse or buffer errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TurnClientError {
    /// A transaction is still outstanding.
    #[error("a TURN transaction is already in progress")]
    Busy,
    /// No allocation yet.
    #[error("no TURN allocation")]
    NoAllocation,
    /// Channel number outside 0x4000..=0x4FFF.
    #[error("channel number outside 0x4000..=0x4FFF")]
    BadChannel,
    /// Writing failed (buffer too small, payload too long).
    #[error(transparent)]
    Stun(#[from] StunError),
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    request: TurnRequest,
    tid: [u8; 12],
    sent: Instant,
    tries: u8,
    /// Whether a challenge was already answered (a second 401 is final).
    challenged: bool,
}

/// The client. See the module docs.
#[derive(Debug)]
pub struct TurnClient {
    username: Box<str>,
    password: Box<str>,
    transport: Transport,
    realm: Vec<u8>,
    nonce: Vec<u8>,
    key: Option<[u8; 16]>,
    pending: Option<Pending>,
    rng: u64,
    relayed: Option<SocketAddr>,
    channels: Vec<(u16, SocketAddr)>,
}

impl TurnClient {
    /// A client with long-term (or REST) credentials, talking to the server over `transport`
    /// (TCP pads ChannelData). `seed` makes transaction ids reproducible.
    pub fn new(username: &str, password: &str, transport: Transport, seed: u64) -> Self {
        TurnClient {
            username: username.into(),
            password: password.into(),
            transport,
            realm: Vec::new(),
            nonce: Vec::new(),
            key: None,
            pending: None,
            rng: seed ^ 0x9E37_79B9_7F4A_7C15,
            relayed: None,
            channels: Vec::new(),
        }
    }

    /// The relayed address once allocated.
    pub fn relayed(&self) -> Option<SocketAddr> {
        self.relayed
    }

    /// Whether a transaction is outstanding.
    pub fn busy(&self) -> bool {
        self.pending.is_some()
    }

    /// Starts an Allocate (UDP relay); the request is `out[..n]`.
    pub fn allocate(&mut self, now: Instant, out: &mut [u8]) -> Result<usize, TurnClientError> {
        self.start(now, TurnRequest::Allocate, out)
    }

    /// Starts a Refresh.
    pub fn refresh(
        &mut self,
        now: Instant,
        lifetime: u32,
        out: &mut [u8],
    ) -> Result<usize, TurnClientError> {
        self.need_allocation()?;
        self.start(now, TurnRequest::Refresh { lifetime }, out)
    }

    /// Starts a CreatePermission for `peer`.
    pub fn create_permission(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        out: &mut [u8],
    ) -> Result<usize, TurnClientError> {
        self.need_allocation()?;
        self.start(now, TurnRequest::CreatePermission { peer }, out)
    }

    /// Starts a ChannelBind of `number` to `peer`.
    pub fn channel_bind(
        &mut self,
        now: Instant,
        number: u16,
        peer: SocketAddr,
        out: &mut [u8],
    ) -> Result<usize, TurnClientError> {
        self.need_allocation()?;
        if !(turn::CHANNEL_MIN..=turn::CHANNEL_MAX).contains(&number) {
            return Err(TurnClientError::BadChannel);
        }
        self.start(now, TurnRequest::ChannelBind { number, peer }, out)
    }

    /// Writes `data` for `peer` into `out`: ChannelData if a channel is bound to the peer,
    /// else a Send indication. Returns the length.
    pub fn send(
        &mut self,
        peer: SocketAddr,
        data: &[u8],
        out: &mut [u8],
    ) -> Result<usize, TurnClientError> {
        self.need_allocation()?;
        if let Some(&(number, _)) = self.channels.iter().find(|(_, p)| *p == peer) {
            let body = out
                .get_mut(turn::CHANNEL_HEADER_LEN..turn::CHANNEL_HEADER_LEN + data.len())
                .ok_or(StunError::BufferTooSmall)?;
            body.copy_from_slice(data);
            let r = turn::frame_channel_data(
                out,
                turn::CHANNEL_HEADER_LEN,
                data.len(),
                number,
                self.transport == Transport::Tcp,
            )
            .map_err(|_| StunError::BufferTooSmall)?;
            return Ok(r.end);
        }
        let tid = self.next_tid();
        let mut w = MessageWriter::new(out, Class::Indication, stun::SEND, &tid)?;
        w.xor_address(stun::XOR_PEER_ADDRESS, peer)?
            .attr(stun::ATTR_DATA, data)?;
        Ok(w.finish())
    }

    fn need_allocation(&self) -> Result<(), TurnClientError> {
        if self.relayed.is_none() {
            return Err(TurnClientError::NoAllocation);
        }
        Ok(())
    }

    fn next_tid(&mut self) -> [u8; 12] {
        // splitmix64: cheap, seedable, good enough for transaction ids.
        let mut next = || {
            self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.rng;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let (a, b) = (next(), next());
        let mut t = [0u8; 12];
        t[..8].copy_from_slice(&a.to_be_bytes());
        t[8..].copy_from_slice(&b.to_be_bytes()[..4]);
        t
    }

    fn start(
        &mut self,
        now: Instant,
        request: TurnRequest,
        out: &mut [u8],
    ) -> Result<usize, TurnClientError> {
        if self.pending.is_some() {
            return Err(TurnClientError::Busy);
        }
        let tid = self.next_tid();
        let n = self.write_request(request, &tid, out)?;
        self.pending = Some(Pending {
            request,
            tid,
            sent: now,
            tries: 1,
            challenged: false,
        });
        Ok(n)
    }

    fn write_request(
        &self,
        request: TurnRequest,
        tid: &[u8; 12],
        out: &mut [u8],
    ) -> Result<usize, StunError> {
        let method = match request {
            TurnRequest::Allocate => stun::ALLOCATE,
            TurnRequest::Refresh { .. } => stun::REFRESH,
            TurnRequest::CreatePermission { .. } => stun::CREATE_PERMISSION,
            TurnRequest::ChannelBind { .. } => stun::CHANNEL_BIND,
        };
        let mut w = MessageWriter::new(out, Class::Request, method, tid)?;
        match request {
            TurnRequest::Allocate => turn::write_requested_transport(&mut w, turn::TRANSPORT_UDP)?,
            TurnRequest::Refresh { lifetime } => {
                w.u32_attr(stun::LIFETIME, lifetime)?;
            }
            TurnRequest::CreatePermission { peer } => {
                w.xor_address(stun::XOR_PEER_ADDRESS, peer)?;
            }
            TurnRequest::ChannelBind { number, peer } => {
                turn::write_channel_number(&mut w, number)?;
                w.xor_address(stun::XOR_PEER_ADDRESS, peer)?;
            }
        }
        // The first Allocate goes unsigned to learn realm and nonce (RFC 8489 §9.2.3).
        if let Some(key) = &self.key {
            w.attr(stun::USERNAME, self.username.as_bytes())?
                .attr(stun::REALM, &self.realm)?
                .attr(stun::NONCE, &self.nonce)?
                .integrity(key)?;
        }
        w.fingerprint()?;
        Ok(w.finish())
    }

    /// Handles a datagram (or TCP frame) from the server.
    pub fn handle_input(&mut self, now: Instant, input: &[u8], out: &mut [u8]) -> Received {
        match input.first().copied().and_then(FrameKind::of) {
            Some(FrameKind::ChannelData) => {
                let Ok(cd) = ChannelData::parse(input) else {
                    return Received::Nothing;
                };
                match self.channels.iter().find(|(n, _)| *n == cd.number) {
                    Some(&(_, peer)) => Received::Data {
                        peer,
                        data: turn::CHANNEL_HEADER_LEN..turn::CHANNEL_HEADER_LEN + cd.data.len(),
                    },
                    None => Received::Nothing,
                }
            }
            Some(FrameKind::Stun) => match Message::parse(input) {
                Ok(m) => self.handle_stun(now, &m, input, out),
                Err(_) => Received::Nothing,
            },
            None => Received::Nothing,
        }
    }

    fn handle_stun(
        &mut self,
        now: Instant,
        m: &Message<'_>,
        input: &[u8],
        out: &mut [u8],
    ) -> Received {
        if (m.class(), m.method()) == (Class::Indication, stun::DATA) {
            let (Some(peer), Some(data)) = (
                m.xor_address(stun::XOR_PEER_ADDRESS),
                m.attr(stun::ATTR_DATA),
            ) else {
                return Received::Nothing;
            };
            let start = (data.as_ptr() as usize).saturating_sub(input.as_ptr() as usize);
            return Received::Data {
                peer,
                data: start..start + data.len(),
            };
        }
        let Some(p) = self.pending else {
            return Received::Nothing;
        };
        if m.transaction_id() != &p.tid || !matches!(m.class(), Class::Success | Class::Error) {
            return Received::Nothing;
        }
        // Responses to signed requests must be signed with the same key.
        if let Some(key) = &self.key
            && m.attr(stun::MESSAGE_INTEGRITY).is_some()
            && !m.check_integrity(key)
        {
            return Received::Nothing;
        }
        if m.class() == Class::Error {
            let code = m.error_code().map_or(0, |(c, _)| c);
            let retry = match code {
                401 if !p.challenged => true,
                438 => true,
                _ => false,
            };
            if retry && let (Some(realm), Some(nonce)) = (m.attr(stun::REALM), m.attr(stun::NONCE))
            {
                self.realm = realm.to_vec();
                self.nonce = nonce.to_vec();
                self.key = Some(stun::long_term_key(
                    self.username.as_bytes(),
                    realm,
                    self.password.as_bytes(),
                ));
                let tid = self.next_tid();
                if let Ok(n) = self.write_request(p.request, &tid, out) {
                    self.pending = Some(Pending {
                        tid,
                        sent: now,
                        tries: 1,
                        challenged: code == 401 || p.challenged,
                        ..p
                    });
                    return Received::Transmit(n);
                }
            }
            self.pending = None;
            return Received::Event(TurnClientEvent::Failed {
                request: p.request,
                code,
            });
        }
        self.pending = None;
        let ev = match p.request {
            TurnRequest::Allocate => {
                let Some(relayed) = m.xor_address(stun::XOR_RELAYED_ADDRESS) else {
                    return Received::Event(TurnClientEvent::Failed {
                        request: p.request,
                        code: 0,
                    });
                };
                self.relayed = Some(relayed);
                TurnClientEvent::Allocated {
                    relayed,
                    mapped: m.xor_address(stun::XOR_MAPPED_ADDRESS),
                    lifetime: m.u32_attr(stun::LIFETIME).unwrap_or(0),
                }
            }
            TurnRequest::Refresh { .. } => {
                let lifetime = m.u32_attr(stun::LIFETIME).unwrap_or(0);
                if lifetime == 0 {
                    self.relayed = None;
                    self.channels.clear();
                }
                TurnClientEvent::Refreshed { lifetime }
            }
            TurnRequest::CreatePermission { peer } => TurnClientEvent::PermissionCreated { peer },
            TurnRequest::ChannelBind { number, peer } => {
                if !self.channels.iter().any(|&(n, _)| n == number) {
                    self.channels.push((number, peer));
                }
                TurnClientEvent::ChannelBound { number, peer }
            }
        };
        Received::Event(ev)
    }

    /// When the outstanding request is due for retransmission (UDP only).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let p = self.pending.as_ref()?;
        if self.transport == Transport::Tcp {
            return None;
        }
        Some(p.sent + RTO * (1u32 << (p.tries - 1).min(6)))
    }

    /// Retransmits the outstanding request if due ([`Received::Transmit`]), or gives up
    /// after the last try ([`Received::Event`] with [`TurnClientEvent::Failed`], code 0).
    pub fn handle_timeout(&mut self, now: Instant, out: &mut [u8]) -> Received {
        let (Some(due), Some(p)) = (self.poll_timeout(), self.pending) else {
            return Received::Nothing;
        };
        if now < due {
            return Received::Nothing;
        }
        if p.tries >= MAX_TRIES {
            self.pending = None;
            return Received::Event(TurnClientEvent::Failed {
                request: p.request,
                code: 0,
            });
        }
        match self.write_request(p.request, &p.tid, out) {
            Ok(n) => {
                self.pending = Some(Pending {
                    sent: now,
                    tries: p.tries + 1,
                    ..p
                });
                Received::Transmit(n)
            }
            Err(_) => Received::Nothing,
        }
    }
}
