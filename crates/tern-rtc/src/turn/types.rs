//! The TURN server's types: its configuration, client addresses, allocation handles,
//! what it hands the driver, and the allocation table's records.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::time::Instant;

use aws_lc_rs::hmac;
use tern_pool::{PoolCounter, Slab, SlabId};
use tern_proto::stun;
use tern_proto::turn;

use crate::peer_policy::PeerPolicy;

/// Permission lifetime, fixed by RFC 8656 §9.
pub const PERMISSION_LIFETIME: u32 = 300;
/// Channel binding lifetime, fixed by RFC 8656 §12.
pub const CHANNEL_LIFETIME: u32 = 600;
/// Largest response the server writes (error responses with REALM, NONCE, integrity).
pub const MAX_REPLY: usize = 256;

/// Settings of the TURN server. Every field has a documented default.
#[derive(Debug, Clone)]
pub struct TurnConfig {
    /// REALM sent in challenges. Default `"tern"`.
    pub realm: String,
    /// Long-term users as `(name, password)`.
    pub users: Vec<(String, String)>,
    /// Shared secret for REST credentials (coturn `use-auth-secret` / `static-auth-secret`).
    pub secret: Option<String>,
    /// Allocations in total; more are refused with 508. Default 10000: at well under 1 KiB
    /// each plus a socket, memory stays ~10 MiB and the open-file limit (20000 here) is not
    /// reached.
    pub max_allocations: usize,
    /// Allocations per username; more are refused with 486 (RFC 8656 §7.2). Default 100:
    /// a browser makes one or two per peer connection, a load tester more.
    pub max_allocations_per_user: usize,
    /// Permissions per allocation; more are refused with 508. Default 32: a viewer needs one.
    pub max_permissions: usize,
    /// Channels per allocation; more are refused with 508. Default 32.
    pub max_channels: usize,
    /// Lifetime when the client asks none, seconds. Default 600 (RFC 8656 §7.2).
    pub default_lifetime: u32,
    /// Longest lifetime granted, seconds. Default 3600 (RFC 8656 §7.2 suggests one hour).
    pub max_lifetime: u32,
    /// How long a nonce stays valid, seconds. Default 600 (coturn's `stale-nonce` default).
    pub nonce_lifetime: u32,
    /// Key for nonce MACs; take it from a random source (the driver) or a seed (tests).
    pub nonce_seed: [u8; 32],
    /// Which peers relays may reach. Default: [`PeerPolicy`]'s refusals of loopback,
    /// private, link-local and other internal ranges (the driver adds its own addresses).
    pub peers: PeerPolicy,
    /// Allocations per client IP (IPv6: per /64); more are refused with 486. Default 64.
    pub max_allocations_per_ip: usize,
    /// Relayed bytes per second per allocation, both directions together (coturn's
    /// `max-bps` / 8); datagrams over it in the current second are dropped. 0: no cap.
    pub max_bytes_per_sec: u32,
}

impl Default for TurnConfig {
    fn default() -> Self {
        TurnConfig {
            realm: "tern".into(),
            users: Vec::new(),
            secret: None,
            max_allocations: 10_000,
            max_allocations_per_user: 100,
            max_permissions: 32,
            max_channels: 32,
            default_lifetime: 600,
            max_lifetime: 3600,
            nonce_lifetime: 600,
            nonce_seed: [0; 32],
            peers: PeerPolicy::new(&[], Vec::new(), Vec::new()),
            max_allocations_per_ip: 64,
            max_bytes_per_sec: 0,
        }
    }
}

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
/// calls [`TurnServer::finish_allocate`].
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
    /// Bind a relay socket, then call [`TurnServer::finish_allocate`].
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

/// Seconds since the server's epoch: 4 bytes instead of an `Instant`'s 16 per timestamp.
pub(super) type Secs = u32;

#[derive(Debug, Clone, Copy)]
pub(super) struct Permission {
    pub(super) ip: IpAddr,
    pub(super) expires: Secs,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Channel {
    pub(super) peer: SocketAddr,
    pub(super) number: u16,
    pub(super) expires: Secs,
}

/// One allocation: the fixed part lives in the slab, the vectors and name on the heap.
pub(super) struct Allocation {
    pub(super) client: ClientAddr,
    pub(super) relay: SocketAddr,
    /// Transaction id of the Allocate that made it (a retransmission gets the same answer).
    pub(super) tid: [u8; 12],
    pub(super) expires: Secs,
    pub(super) user: Box<str>,
    pub(super) perms: Vec<Permission>,
    pub(super) channels: Vec<Channel>,
    /// The second the bandwidth cap is counting, and the bytes relayed in it.
    pub(super) window: (Secs, u32),
}

impl Allocation {
    pub(super) fn heap_bytes(&self) -> usize {
        self.user.len()
            + self.perms.capacity() * size_of::<Permission>()
            + self.channels.capacity() * size_of::<Channel>()
    }

    /// Counts `len` relayed bytes against a cap of `cap` per second (0: none); false when
    /// the datagram would pass it.
    pub(super) fn within(&mut self, cap: u32, len: usize, now: Secs) -> bool {
        if cap == 0 {
            return true;
        }
        if self.window.0 != now {
            self.window = (now, 0);
        }
        let used = self
            .window
            .1
            .saturating_add(u32::try_from(len).unwrap_or(u32::MAX));
        if used > cap {
            return false;
        }
        self.window.1 = used;
        true
    }

    pub(super) fn permitted(&self, ip: IpAddr, now: Secs) -> bool {
        let ip = ip.to_canonical();
        self.perms.iter().any(|p| p.ip == ip && p.expires > now)
    }
}

/// The key a client's allocations are counted under for the per-IP quota: an IPv4 address
/// (also IPv4-mapped), or an IPv6 address's /64, the prefix one host or customer usually
/// holds whole.
pub(super) fn client_ip_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let mut o = v6.octets();
            o[8..].fill(0);
            IpAddr::from(o)
        }
        v4 => v4,
    }
}

/// Credentials a request proved.
pub(super) struct Auth<'m> {
    pub(super) user: &'m [u8],
    pub(super) key: [u8; 16],
}

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

/// Attributes below 0x8000 (comprehension-required) the server understands; others get 420.
pub(super) const KNOWN: [u16; 12] = [
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

/// The TURN server state. See the module docs for the run loop.
pub struct TurnServer {
    pub(super) cfg: TurnConfig,
    pub(super) epoch: Instant,
    pub(super) unix_at_epoch: u64,
    pub(super) relay_family_v4: bool,
    pub(super) users: HashMap<Box<str>, [u8; 16]>,
    pub(super) rest: Option<hmac::Key>,
    pub(super) nonce_key: hmac::Key,
    pub(super) allocs: Slab<Allocation>,
    pub(super) heap: PoolCounter,
    pub(super) by_client: HashMap<ClientAddr, AllocId>,
    pub(super) per_user: HashMap<Box<str>, u32>,
    /// Allocations per client IP (IPv6: per /64), see [`client_ip_key`].
    pub(super) per_ip: HashMap<IpAddr, u32>,
    pub(super) events: VecDeque<TurnEvent>,
    pub(super) next_sweep: Instant,
    pub(super) indication_seq: u64,
    pub(super) stats: TurnStats,
}

impl std::fmt::Debug for TurnServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnServer")
            .field("allocations", &self.allocs.len())
            .field("stats", &self.stats)
            .finish()
    }
}
