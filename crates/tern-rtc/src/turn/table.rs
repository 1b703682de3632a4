//! The allocation table: the server's state, each allocation's record (permissions,
//! channels, expiry), lookups, the sweep that expires them, removal and memory accounting.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use aws_lc_rs::hmac;
use tern_pool::{MemoryRegistry, PoolCounter, Slab};
use tern_proto::stun;

use super::config::TurnConfig;
use super::driver::{AllocId, ClientAddr, ClientOutput, DropReason, TurnEvent, TurnStats};

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
    /// Heap bytes behind this allocation (name and vectors), for `turn_allocation_heap`.
    pub(super) fn heap_bytes(&self) -> usize {
        self.user.len()
            + self.perms.capacity() * size_of::<Permission>()
            + self.channels.capacity() * size_of::<Channel>()
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

impl TurnServer {
    /// A server whose clock starts at `now`, when the wall clock reads `unix_now` seconds
    /// (only REST credential expiry needs wall time). `relay_v4` says whether relay sockets
    /// are IPv4 (peers of the other family are refused with 443).
    pub fn new(cfg: TurnConfig, now: Instant, unix_now: u64, relay_v4: bool) -> Self {
        Self::new_in(MemoryRegistry::global(), cfg, now, unix_now, relay_v4)
    }

    /// Replaces the long-term users, the REST secret and the peer policy (a configuration
    /// reload): requests from now on are checked against them. Allocations made stay; their
    /// next refresh is checked with the new credentials, their next permission with the new
    /// policy.
    pub fn set_credentials(
        &mut self,
        users: Vec<(String, String)>,
        secret: Option<String>,
        peers: crate::peer_policy::PeerPolicy,
    ) {
        let realm = self.cfg.realm.as_bytes();
        self.users = users
            .iter()
            .map(|(u, p)| {
                let key = stun::long_term_key(u.as_bytes(), realm, p.as_bytes());
                (u.as_str().into(), key)
            })
            .collect();
        self.rest = secret
            .as_ref()
            .map(|s| hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, s.as_bytes()));
        self.cfg.users = users;
        self.cfg.secret = secret;
        self.cfg.peers = peers;
    }

    /// Sets the allocations one client address may hold (a reload): the next allocation is
    /// checked against it; those held stay.
    pub fn set_max_allocations_per_ip(&mut self, n: usize) {
        self.cfg.max_allocations_per_ip = n;
    }

    /// As [`new`](Self::new), reporting memory to `registry`.
    pub fn new_in(
        registry: &MemoryRegistry,
        cfg: TurnConfig,
        now: Instant,
        unix_now: u64,
        relay_v4: bool,
    ) -> Self {
        let users = cfg
            .users
            .iter()
            .map(|(u, p)| {
                let key = stun::long_term_key(u.as_bytes(), cfg.realm.as_bytes(), p.as_bytes());
                (u.as_str().into(), key)
            })
            .collect();
        let rest = cfg
            .secret
            .as_ref()
            .map(|s| hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, s.as_bytes()));
        let nonce_key = hmac::Key::new(hmac::HMAC_SHA256, &cfg.nonce_seed);
        // Reserve up front for a modest number; the slab grows (doubling) up to the quota.
        let allocs = Slab::new_in(registry, "turn_allocations", cfg.max_allocations.min(1024));
        let heap = registry.counter("turn_allocation_heap", 0);
        TurnServer {
            cfg,
            epoch: now,
            unix_at_epoch: unix_now,
            relay_family_v4: relay_v4,
            users,
            rest,
            nonce_key,
            allocs,
            heap,
            by_client: HashMap::new(),
            per_user: HashMap::new(),
            per_ip: HashMap::new(),
            events: VecDeque::new(),
            next_sweep: now + Duration::from_secs(1),
            indication_seq: 0,
            stats: TurnStats::default(),
        }
    }

    /// Counters.
    pub fn stats(&self) -> TurnStats {
        self.stats
    }

    /// Allocations alive.
    pub fn allocations(&self) -> usize {
        self.allocs.len()
    }

    /// Bytes of one allocation's fixed part (its slab slot).
    pub fn slot_bytes() -> usize {
        Slab::<Allocation>::slot_size()
    }

    /// The allocation of a client, if any.
    pub fn allocation_of(&self, client: ClientAddr) -> Option<AllocId> {
        self.by_client.get(&client).copied()
    }

    /// The relayed address of an allocation.
    pub fn relay_addr(&self, alloc: AllocId) -> Option<SocketAddr> {
        self.allocs.get(alloc.0).map(|a| a.relay)
    }

    /// The client of an allocation.
    pub fn client_of(&self, alloc: AllocId) -> Option<ClientAddr> {
        self.allocs.get(alloc.0).map(|a| a.client)
    }

    pub(super) fn secs(&self, now: Instant) -> Secs {
        u32::try_from(now.saturating_duration_since(self.epoch).as_secs()).unwrap_or(u32::MAX)
    }

    /// When [`handle_timeout`](Self::handle_timeout) wants to run next.
    pub fn poll_timeout(&self) -> Instant {
        self.next_sweep
    }

    /// The next event for the driver.
    pub fn poll_event(&mut self) -> Option<TurnEvent> {
        let e = self.events.pop_front();
        // Drained after a burst (a wave of allocations ending): give the room back.
        if e.is_none() && self.events.capacity() > 32 {
            self.events.shrink_to_fit();
        }
        e
    }

    /// Expires allocations, permissions and channels (a sweep at most once a second).
    pub fn handle_timeout(&mut self, now: Instant) {
        if now < self.next_sweep {
            return;
        }
        self.next_sweep = now + Duration::from_secs(1);
        let t = self.secs(now);
        let mut dead = Vec::new();
        let mut delta: isize = 0;
        for (id, a) in self.allocs.iter_mut() {
            if a.expires <= t {
                dead.push(AllocId(id));
                continue;
            }
            let before = a.heap_bytes() as isize;
            a.perms.retain(|p| p.expires > t);
            a.channels.retain(|c| c.expires > t);
            if a.perms.capacity() > 2 * a.perms.len().max(2) {
                a.perms.shrink_to_fit();
            }
            if a.channels.capacity() > 2 * a.channels.len().max(2) {
                a.channels.shrink_to_fit();
            }
            delta += a.heap_bytes() as isize - before;
        }
        self.account(delta);
        for id in dead {
            self.remove(id);
        }
    }

    /// A TCP client's connection closed: its allocation ends (RFC 8656 §3.1).
    pub fn client_closed(&mut self, client: ClientAddr) {
        if let Some(id) = self.by_client.get(&client).copied() {
            self.remove(id);
        }
    }

    pub(super) fn account(&self, delta: isize) {
        if delta > 0 {
            self.heap.add(0, delta.unsigned_abs());
        } else if delta < 0 {
            self.heap.sub(0, delta.unsigned_abs());
        }
    }

    pub(super) fn remove(&mut self, id: AllocId) {
        let Some(a) = self.allocs.remove(id.0) else {
            return;
        };
        self.heap.sub(1, a.heap_bytes());
        self.by_client.remove(&a.client);
        // A wave of allocations leaves no table sized for it behind.
        tern_pool::shrink_map(&mut self.by_client);
        if let Some(n) = self.per_user.get_mut(&a.user) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_user.remove(&a.user);
            }
        }
        let ip = client_ip_key(a.client.addr.ip());
        if let Some(n) = self.per_ip.get_mut(&ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_ip.remove(&ip);
            }
        }
        self.events.push_back(TurnEvent::Closed {
            alloc: id,
            client: a.client,
        });
    }

    pub(super) fn dropped(&mut self, why: DropReason) -> ClientOutput {
        self.stats.dropped += 1;
        ClientOutput::Drop(why)
    }
}
