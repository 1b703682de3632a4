//! Permissions and channels: CreatePermission and ChannelBind (peer family and policy
//! checked, per-allocation limits), installing and refreshing them, and the permission check.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use tern_proto::stun::{self, Class, Message, MessageWriter, StunError};
use tern_proto::turn;

use super::driver::{AllocId, ClientAddr, ClientOutput};
use super::reply::Code;
use super::table::{Allocation, Channel, Permission, Secs, TurnServer};

/// Permission lifetime, fixed by RFC 8656 §9.
pub const PERMISSION_LIFETIME: u32 = 300;
/// Channel binding lifetime, fixed by RFC 8656 §12.
pub const CHANNEL_LIFETIME: u32 = 600;

impl Allocation {
    /// Whether `ip` holds a live permission.
    pub(super) fn permitted(&self, ip: IpAddr, now: Secs) -> bool {
        let ip = ip.to_canonical();
        self.perms.iter().any(|p| p.ip == ip && p.expires > now)
    }
}

impl TurnServer {
    /// CreatePermission (RFC 8656 §10): every peer checked before any is installed.
    pub(super) fn create_permission(
        &mut self,
        now: Instant,
        from: ClientAddr,
        m: &Message<'_>,
        id: AllocId,
        key: &[u8; 16],
        out: &mut [u8],
    ) -> Result<ClientOutput, StunError> {
        let t = self.secs(now);
        let mut peers = m
            .attrs()
            .filter(|(ty, _)| *ty == stun::XOR_PEER_ADDRESS)
            .count();
        if peers == 0 {
            return self.error(now, from, m, out, Code::BadRequest, Some(key));
        }
        // Check every peer before installing any (the request is atomic).
        let mut ips = [None::<IpAddr>; stun::MAX_ATTRS];
        let mut k = 0;
        for (ty, v) in m.attrs() {
            if ty != stun::XOR_PEER_ADDRESS {
                continue;
            }
            let Some(peer) = stun::decode_xor_address(v, m.transaction_id()) else {
                return self.error(now, from, m, out, Code::BadRequest, Some(key));
            };
            if !self.family_ok(peer) {
                return self.error(now, from, m, out, Code::PeerFamilyMismatch, Some(key));
            }
            if !self.cfg.peers.allows_ip(peer.ip()) {
                self.stats.peer_refused += 1;
                return self.error(now, from, m, out, Code::Forbidden, Some(key));
            }
            ips[k] = Some(peer.ip().to_canonical());
            k += 1;
        }
        peers = k;
        let ok = self.install_permissions(id, &ips[..peers], t);
        if !ok {
            return self.error(now, from, m, out, Code::Capacity, Some(key));
        }
        let mut w = MessageWriter::new(
            out,
            Class::Success,
            stun::CREATE_PERMISSION,
            m.transaction_id(),
        )?;
        w.integrity(key)?.fingerprint()?;
        Ok(ClientOutput::Reply(w.finish()))
    }

    /// ChannelBind (RFC 8656 §11): binds a channel number to a peer (and permits it).
    pub(super) fn channel_bind(
        &mut self,
        now: Instant,
        from: ClientAddr,
        m: &Message<'_>,
        id: AllocId,
        key: &[u8; 16],
        out: &mut [u8],
    ) -> Result<ClientOutput, StunError> {
        let t = self.secs(now);
        let (Some(number), Some(peer)) = (
            turn::channel_number(m),
            m.xor_address(stun::XOR_PEER_ADDRESS),
        ) else {
            return self.error(now, from, m, out, Code::BadRequest, Some(key));
        };
        if !(turn::CHANNEL_MIN..=turn::CHANNEL_MAX_ACCEPTED).contains(&number) {
            return self.error(now, from, m, out, Code::BadRequest, Some(key));
        }
        if !self.family_ok(peer) {
            return self.error(now, from, m, out, Code::PeerFamilyMismatch, Some(key));
        }
        if !self.cfg.peers.allows(peer) {
            self.stats.peer_refused += 1;
            return self.error(now, from, m, out, Code::Forbidden, Some(key));
        }
        let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
        let code = self.install_channel(id, number, peer, t);
        if let Some(code) = code {
            return self.error(now, from, m, out, code, Some(key));
        }
        let mut w =
            MessageWriter::new(out, Class::Success, stun::CHANNEL_BIND, m.transaction_id())?;
        w.integrity(key)?.fingerprint()?;
        Ok(ClientOutput::Reply(w.finish()))
    }

    pub(super) fn family_ok(&self, peer: SocketAddr) -> bool {
        peer.ip().to_canonical().is_ipv4() == self.relay_family_v4
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
}
