//! What the TURN server and its driver hand each other: client addresses, allocation
//! handles, the outcome of an input, events, counters.

use std::net::SocketAddr;
use std::ops::Range;

use tern_pool::SlabId;

/// Largest response the server writes (error responses with REALM, NONCE, integrity).
pub const MAX_REPLY: usize = 256;

/// How a client reaches the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Datagrams on the UDP listener.
    Udp,
    /// A TCP connection (frames per RFC 8656 §12.5; ChannelData padded).
    Tcp,
}

/// A client's transport address as the server sees it (the 5-tuple minus the server side).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientAddr {
    /// UDP or TCP.
    pub transport: Transport,
    /// The client's address.
    pub addr: SocketAddr,
}

/// Handle of an allocation (slab index and generation). The driver keys its relay sockets by
/// [`AllocId::index`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AllocId(pub(super) SlabId);

impl AllocId {
    /// The slab index: dense, reused after the allocation ends.
    pub fn index(self) -> usize {
        self.0.index as usize
    }
}

/// An Allocate request that passed every check; the driver binds a relay socket for it and
/// calls [`TurnServer::finish_allocate`](super::TurnServer::finish_allocate).
#[derive(Debug, Clone)]
pub struct PendingAllocation {
    pub(super) client: ClientAddr,
    pub(super) tid: [u8; 12],
    pub(super) user: Box<str>,
    pub(super) key: [u8; 16],
    pub(super) lifetime: u32,
    pub(super) even_port: bool,
}

impl PendingAllocation {
    /// The client asking.
    pub fn client(&self) -> ClientAddr {
        self.client
    }

    /// The username that authenticated the request.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// Whether the relay port must be even (EVEN-PORT, RFC 8656 §7.2; the reservation of
    /// the next port is not offered).
    pub fn even_port(&self) -> bool {
        self.even_port
    }
}

/// Why an input was dropped without an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DropReason {
    /// Not STUN or ChannelData, or malformed.
    Malformed,
    /// A response or an unknown indication: nothing to do.
    Ignored,
    /// Indication or ChannelData from a client without an allocation.
    NoAllocation,
    /// No permission (or channel) for the peer.
    NoPermission,
    /// A Send indication to a peer the policy refuses.
    PeerRefused,
    /// Over the allocation's bandwidth cap this second.
    RateLimited,
}

/// What to do with a client's input.
#[derive(Debug)]
pub enum ClientOutput {
    /// Send `out[..n]` back to the client.
    Reply(usize),
    /// Send `input[data]` from the allocation's relay socket to `peer`.
    Relay {
        /// The allocation.
        alloc: AllocId,
        /// Destination.
        peer: SocketAddr,
        /// The payload's range in the input.
        data: Range<usize>,
    },
    /// Bind a relay socket, then call
    /// [`TurnServer::finish_allocate`](super::TurnServer::finish_allocate).
    Allocate(PendingAllocation),
    /// Nothing to send; counted in [`TurnStats::dropped`].
    Drop(DropReason),
}

/// Something the driver must act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnEvent {
    /// The allocation ended (expired, refreshed to 0, client gone): close its relay socket.
    Closed {
        /// The allocation.
        alloc: AllocId,
        /// Its client.
        client: ClientAddr,
    },
}

/// Counters, exact.
#[derive(Debug, Clone, Copy, Default)]
pub struct TurnStats {
    /// Allocations created, ever.
    pub allocations_total: u64,
    /// STUN requests handled.
    pub requests: u64,
    /// 401 answers (missing or bad credentials).
    pub unauthorized: u64,
    /// 438 answers.
    pub stale_nonces: u64,
    /// Allocations refused by a quota (486 or 508).
    pub quota_refusals: u64,
    /// Datagrams relayed client → peer.
    pub to_peer: u64,
    /// Datagrams relayed peer → client.
    pub to_client: u64,
    /// Inputs dropped (malformed, no allocation, no permission).
    pub dropped: u64,
    /// CreatePermission, ChannelBind (403) and Send indications refused by the peer policy.
    pub peer_refused: u64,
    /// Datagrams dropped by an allocation's bandwidth cap.
    pub rate_limited: u64,
}
