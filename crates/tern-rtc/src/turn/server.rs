//! The TURN server's message handling: client requests (Allocate, Refresh,
//! CreatePermission, ChannelBind, Send, ChannelData, Binding), relayed peer data, timers and
//! the allocation table's bookkeeping.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::time::{Duration, Instant};

use aws_lc_rs::hmac;
use tern_pool::{MemoryRegistry, Slab};
use tern_proto::stun::{self, Class, Message, MessageWriter, StunError};
use tern_proto::turn::{self, ChannelData, FrameKind};

use super::types::*;

impl TurnServer {
    /// A server whose clock starts at `now`, when the wall clock reads `unix_now` seconds
    /// (only REST credential expiry needs wall time). `relay_v4` says whether relay sockets
    /// are IPv4 (peers of the other family are refused with 443).
    pub fn new(cfg: TurnConfig, now: Instant, unix_now: u64, relay_v4: bool) -> Self {
        Self::new_in(MemoryRegistry::global(), cfg, now, unix_now, relay_v4)
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
        self.events.pop_front()
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

    /// Handles one datagram (UDP) or frame (TCP) from a client; replies go into `out`
    /// (at least [`MAX_REPLY`] bytes).
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

    pub(super) fn client_channel_data(
        &mut self,
        now: Instant,
        from: ClientAddr,
        input: &[u8],
    ) -> ClientOutput {
        let Ok(cd) = ChannelData::parse(input) else {
            return self.dropped(DropReason::Malformed);
        };
        let Some(&id) = self.by_client.get(&from) else {
            return self.dropped(DropReason::NoAllocation);
        };
        let t = self.secs(now);
        let cap = self.cfg.max_bytes_per_sec;
        let found = self.allocs.get_mut(id.0).and_then(|a| {
            let c = a
                .channels
                .iter()
                .find(|c| c.number == cd.number && c.expires > t)?;
            let peer = c.peer;
            a.permitted(peer.ip(), t)
                .then(|| (peer, a.within(cap, cd.data.len(), t)))
        });
        match found {
            Some((_, false)) => {
                self.stats.rate_limited += 1;
                self.dropped(DropReason::RateLimited)
            }
            Some((peer, true)) => {
                self.stats.to_peer += 1;
                ClientOutput::Relay {
                    alloc: id,
                    peer,
                    data: turn::CHANNEL_HEADER_LEN..turn::CHANNEL_HEADER_LEN + cd.data.len(),
                }
            }
            None => self.dropped(DropReason::NoPermission),
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

    pub(super) fn send_indication(
        &mut self,
        now: Instant,
        from: ClientAddr,
        m: &Message<'_>,
        input: &[u8],
    ) -> ClientOutput {
        let Some(&id) = self.by_client.get(&from) else {
            return self.dropped(DropReason::NoAllocation);
        };
        let (Some(peer), Some(data)) = (
            m.xor_address(stun::XOR_PEER_ADDRESS),
            m.attr(stun::ATTR_DATA),
        ) else {
            return self.dropped(DropReason::Malformed);
        };
        if !self.cfg.peers.allows(peer) {
            self.stats.peer_refused += 1;
            return self.dropped(DropReason::PeerRefused);
        }
        let t = self.secs(now);
        let cap = self.cfg.max_bytes_per_sec;
        let Some(a) = self.allocs.get_mut(id.0) else {
            return self.dropped(DropReason::NoAllocation);
        };
        if !a.permitted(peer.ip(), t) {
            return self.dropped(DropReason::NoPermission);
        }
        if !a.within(cap, data.len(), t) {
            self.stats.rate_limited += 1;
            return self.dropped(DropReason::RateLimited);
        }
        // `data` borrows `input`: its offset is the distance between the two starts.
        let start = (data.as_ptr() as usize).saturating_sub(input.as_ptr() as usize);
        self.stats.to_peer += 1;
        ClientOutput::Relay {
            alloc: id,
            peer,
            data: start..start + data.len(),
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
        let t = self.secs(now);
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
            stun::REFRESH => {
                let asked = m.u32_attr(stun::LIFETIME);
                let lifetime = match asked {
                    Some(0) => 0,
                    other => self.grant(other),
                };
                if lifetime == 0 {
                    self.remove(id);
                } else if let Some(a) = self.allocs.get_mut(id.0) {
                    a.expires = t.saturating_add(lifetime);
                }
                let mut w = MessageWriter::new(out, Class::Success, method, m.transaction_id())?;
                w.u32_attr(stun::LIFETIME, lifetime)?;
                w.integrity(&auth.key)?.fingerprint()?;
                Ok(ClientOutput::Reply(w.finish()))
            }
            stun::CREATE_PERMISSION => {
                let mut peers = m
                    .attrs()
                    .filter(|(ty, _)| *ty == stun::XOR_PEER_ADDRESS)
                    .count();
                if peers == 0 {
                    return self.error(now, from, m, out, Code::BadRequest, Some(&auth.key));
                }
                // Check every peer before installing any (the request is atomic).
                let mut ips = [None::<IpAddr>; stun::MAX_ATTRS];
                let mut k = 0;
                for (ty, v) in m.attrs() {
                    if ty != stun::XOR_PEER_ADDRESS {
                        continue;
                    }
                    let Some(peer) = stun::decode_xor_address(v, m.transaction_id()) else {
                        return self.error(now, from, m, out, Code::BadRequest, Some(&auth.key));
                    };
                    if !self.family_ok(peer) {
                        return self.error(
                            now,
                            from,
                            m,
                            out,
                            Code::PeerFamilyMismatch,
                            Some(&auth.key),
                        );
                    }
                    if !self.cfg.peers.allows_ip(peer.ip()) {
                        self.stats.peer_refused += 1;
                        return self.error(now, from, m, out, Code::Forbidden, Some(&auth.key));
                    }
                    ips[k] = Some(peer.ip().to_canonical());
                    k += 1;
                }
                peers = k;
                let ok = self.install_permissions(id, &ips[..peers], t);
                if !ok {
                    return self.error(now, from, m, out, Code::Capacity, Some(&auth.key));
                }
                let mut w = MessageWriter::new(out, Class::Success, method, m.transaction_id())?;
                w.integrity(&auth.key)?.fingerprint()?;
                Ok(ClientOutput::Reply(w.finish()))
            }
            _ => {
                // ChannelBind.
                let (Some(number), Some(peer)) = (
                    turn::channel_number(m),
                    m.xor_address(stun::XOR_PEER_ADDRESS),
                ) else {
                    return self.error(now, from, m, out, Code::BadRequest, Some(&auth.key));
                };
                if !(turn::CHANNEL_MIN..=turn::CHANNEL_MAX_ACCEPTED).contains(&number) {
                    return self.error(now, from, m, out, Code::BadRequest, Some(&auth.key));
                }
                if !self.family_ok(peer) {
                    return self.error(
                        now,
                        from,
                        m,
                        out,
                        Code::PeerFamilyMismatch,
                        Some(&auth.key),
                    );
                }
                if !self.cfg.peers.allows(peer) {
                    self.stats.peer_refused += 1;
                    return self.error(now, from, m, out, Code::Forbidden, Some(&auth.key));
                }
                let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
                let code = self.install_channel(id, number, peer, t);
                if let Some(code) = code {
                    return self.error(now, from, m, out, code, Some(&auth.key));
                }
                let mut w = MessageWriter::new(out, Class::Success, method, m.transaction_id())?;
                w.integrity(&auth.key)?.fingerprint()?;
                Ok(ClientOutput::Reply(w.finish()))
            }
        }
    }

    pub(super) fn family_ok(&self, peer: SocketAddr) -> bool {
        peer.ip().to_canonical().is_ipv4() == self.relay_family_v4
    }

    pub(super) fn grant(&self, asked: Option<u32>) -> u32 {
        asked
            .unwrap_or(self.cfg.default_lifetime)
            .max(self.cfg.default_lifetime)
            .min(self.cfg.max_lifetime)
    }

    pub(super) fn install_permissions(
        &mut self,
        id: AllocId,
        ips: &[Option<IpAddr>],
        t: Secs,
    ) -> bool {
        let max = self.cfg.max_permissions;
        let Some(a) = self.allocs.get_mut(id.0) else {
            return false;
        };
        let new = ips
            .iter()
            .flatten()
            .filter(|ip| !a.perms.iter().any(|p| p.ip == **ip))
            .count();
        let live = a.perms.iter().filter(|p| p.expires > t).count();
        if live + new > max {
            return false;
        }
        let before = a.heap_bytes() as isize;
        a.perms.retain(|p| p.expires > t);
        for ip in ips.iter().flatten() {
            let expires = t.saturating_add(PERMISSION_LIFETIME);
            match a.perms.iter_mut().find(|p| p.ip == *ip) {
                Some(p) => p.expires = expires,
                None => {
                    a.perms.reserve_exact(1);
                    a.perms.push(Permission { ip: *ip, expires });
                }
            }
        }
        let delta = a.heap_bytes() as isize - before;
        self.account(delta);
        true
    }

    pub(super) fn install_channel(
        &mut self,
        id: AllocId,
        number: u16,
        peer: SocketAddr,
        t: Secs,
    ) -> Option<Code> {
        let max = self.cfg.max_channels;
        let a = self.allocs.get_mut(id.0)?;
        let by_number = a.channels.iter().position(|c| c.number == number);
        let by_peer = a.channels.iter().position(|c| c.peer == peer);
        let before = a.heap_bytes() as isize;
        let expires = t.saturating_add(CHANNEL_LIFETIME);
        match (by_number, by_peer) {
            (Some(i), Some(j)) if i == j => a.channels[i].expires = expires,
            (None, None) => {
                if a.channels.len() >= max {
                    return Some(Code::Capacity);
                }
                a.channels.reserve_exact(1);
                a.channels.push(Channel {
                    peer,
                    number,
                    expires,
                });
            }
            // The number is bound to another peer, or the peer to another number.
            _ => return Some(Code::BadRequest),
        }
        let delta = a.heap_bytes() as isize - before;
        self.account(delta);
        // A channel binding installs or refreshes the permission for its peer (§12.2).
        if !self.install_permissions(id, &[Some(peer.ip())], t) {
            return Some(Code::Capacity);
        }
        None
    }

    pub(super) fn allocate(
        &mut self,
        now: Instant,
        from: ClientAddr,
        m: &Message<'_>,
        auth: Auth<'_>,
        existing: Option<AllocId>,
        out: &mut [u8],
    ) -> Result<ClientOutput, StunError> {
        if let Some(id) = existing {
            // A retransmitted Allocate gets the same success; any other is a mismatch.
            let same = self
                .allocs
                .get(id.0)
                .filter(|a| a.tid == *m.transaction_id())
                .map(|a| (a.relay, a.expires));
            return match same {
                Some((relay, expires)) => {
                    let left = expires.saturating_sub(self.secs(now));
                    let n = write_allocate_success(
                        out,
                        m.transaction_id(),
                        relay,
                        from.addr,
                        left,
                        &auth.key,
                    )?;
                    Ok(ClientOutput::Reply(n))
                }
                None => self.error(now, from, m, out, Code::AllocationMismatch, Some(&auth.key)),
            };
        }
        match turn::requested_transport(m) {
            None => return self.error(now, from, m, out, Code::BadRequest, Some(&auth.key)),
            Some(turn::TRANSPORT_UDP) => {}
            Some(_) => {
                return self.error(
                    now,
                    from,
                    m,
                    out,
                    Code::UnsupportedTransport,
                    Some(&auth.key),
                );
            }
        }
        if let Some(fam) = turn::requested_address_family(m) {
            let want_v4 = match fam {
                0x01 => true,
                0x02 => false,
                _ => return self.error(now, from, m, out, Code::AddressFamily, Some(&auth.key)),
            };
            if want_v4 != self.relay_family_v4 {
                return self.error(now, from, m, out, Code::AddressFamily, Some(&auth.key));
            }
        }
        // EVEN-PORT with the R bit asks to reserve the next port too: not offered (508, as
        // RFC 8656 §7.2 allows a server that cannot reserve).
        let even_port = match m.attr(turn::EVEN_PORT) {
            None => false,
            Some([flags, ..]) if flags & 0x80 == 0 => true,
            Some(_) => return self.error(now, from, m, out, Code::Capacity, Some(&auth.key)),
        };
        let user = String::from_utf8_lossy(auth.user);
        if self.allocs.len() >= self.cfg.max_allocations {
            self.stats.quota_refusals += 1;
            return self.error(now, from, m, out, Code::Capacity, Some(&auth.key));
        }
        let per_ip = self
            .per_ip
            .get(&client_ip_key(from.addr.ip()))
            .copied()
            .unwrap_or(0) as usize;
        if self.per_user.get(user.as_ref()).copied().unwrap_or(0) as usize
            >= self.cfg.max_allocations_per_user
            || per_ip >= self.cfg.max_allocations_per_ip
        {
            self.stats.quota_refusals += 1;
            return self.error(now, from, m, out, Code::Quota, Some(&auth.key));
        }
        Ok(ClientOutput::Allocate(PendingAllocation {
            client: from,
            tid: *m.transaction_id(),
            user: user.into(),
            key: auth.key,
            lifetime: self.grant(m.u32_attr(stun::LIFETIME)),
            even_port,
        }))
    }

    /// Completes an Allocate: `relay` is the bound relay socket's address, or `None` if none
    /// could be bound (the client gets 508). Writes the response into `out` and returns its
    /// length, with the new allocation's id.
    pub fn finish_allocate(
        &mut self,
        now: Instant,
        p: PendingAllocation,
        relay: Option<SocketAddr>,
        out: &mut [u8],
    ) -> (Option<AllocId>, usize) {
        let full =
            self.allocs.len() >= self.cfg.max_allocations || self.by_client.contains_key(&p.client);
        let Some(relay) = relay.filter(|_| !full) else {
            let n = write_error(
                out,
                stun::ALLOCATE,
                &p.tid,
                Code::Capacity,
                None,
                Some(&p.key),
            )
            .unwrap_or(0);
            return (None, n);
        };
        let t = self.secs(now);
        let a = Allocation {
            client: p.client,
            relay,
            tid: p.tid,
            expires: t.saturating_add(p.lifetime),
            user: p.user,
            perms: Vec::new(),
            channels: Vec::new(),
            window: (0, 0),
        };
        self.heap.add(1, a.heap_bytes());
        *self.per_user.entry(a.user.clone()).or_insert(0) += 1;
        *self
            .per_ip
            .entry(client_ip_key(p.client.addr.ip()))
            .or_insert(0) += 1;
        let id = AllocId(self.allocs.insert(a));
        self.by_client.insert(p.client, id);
        self.stats.allocations_total += 1;
        let n = write_allocate_success(out, &p.tid, relay, p.client.addr, p.lifetime, &p.key)
            .unwrap_or(0);
        (Some(id), n)
    }

    /// Handles a datagram from `peer` that arrived on `alloc`'s relay socket. The payload is
    /// `buf[head..head + len]`, with at least [`turn::PEER_HEADROOM`] bytes before it and
    /// [`turn::PEER_TAILROOM`] after. Frames it in place for the client (ChannelData if a
    /// channel is bound to the peer, else a Data indication) and returns the client and the
    /// frame's range; `None` (counted) without a permission.
    pub fn handle_peer(
        &mut self,
        now: Instant,
        alloc: AllocId,
        peer: SocketAddr,
        buf: &mut [u8],
        head: usize,
        len: usize,
    ) -> Option<(ClientAddr, Range<usize>)> {
        let t = self.secs(now);
        let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
        let cap = self.cfg.max_bytes_per_sec;
        let Some(a) = self.allocs.get_mut(alloc.0) else {
            self.stats.dropped += 1;
            return None;
        };
        if !a.permitted(peer.ip(), t) {
            self.stats.dropped += 1;
            return None;
        }
        if !a.within(cap, len, t) {
            self.stats.dropped += 1;
            self.stats.rate_limited += 1;
            return None;
        }
        let client = a.client;
        let channel = a
            .channels
            .iter()
            .find(|c| c.peer == peer && c.expires > t)
            .map(|c| c.number);
        let framed = match channel {
            Some(number) => {
                turn::frame_channel_data(buf, head, len, number, client.transport == Transport::Tcp)
            }
            None => {
                self.indication_seq = self.indication_seq.wrapping_add(1);
                let mut tid = [0u8; 12];
                tid[4..].copy_from_slice(&self.indication_seq.to_be_bytes());
                turn::frame_data_indication(buf, head, len, peer, &tid)
            }
        };
        match framed {
            Ok(r) => {
                self.stats.to_client += 1;
                Some((client, r))
            }
            Err(_) => {
                self.stats.dropped += 1;
                None
            }
        }
    }

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
