//! An allocation's life from the client's side: Allocate (transport, family, EVEN-PORT,
//! quotas in total, per user and per client IP), its completion once the driver bound a
//! relay socket, Refresh, and the lifetime granted.

use std::net::SocketAddr;
use std::time::Instant;

use tern_proto::stun::{self, Class, Message, MessageWriter, StunError};
use tern_proto::turn;

use super::auth::Auth;
use super::driver::{AllocId, ClientAddr, ClientOutput, PendingAllocation};
use super::reply::{Code, write_allocate_success, write_error};
use super::table::{Allocation, TurnServer, client_ip_key};

impl TurnServer {
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

    /// Refresh (RFC 8656 §8) of the client's own allocation, its credentials checked by the
    /// caller: a new lifetime, or 0 to end the allocation.
    pub(super) fn refresh(
        &mut self,
        now: Instant,
        m: &Message<'_>,
        id: AllocId,
        key: &[u8; 16],
        out: &mut [u8],
    ) -> Result<ClientOutput, StunError> {
        let t = self.secs(now);
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
        let mut w = MessageWriter::new(out, Class::Success, stun::REFRESH, m.transaction_id())?;
        w.u32_attr(stun::LIFETIME, lifetime)?;
        w.integrity(key)?.fingerprint()?;
        Ok(ClientOutput::Reply(w.finish()))
    }

    pub(super) fn grant(&self, asked: Option<u32>) -> u32 {
        asked
            .unwrap_or(self.cfg.default_lifetime)
            .max(self.cfg.default_lifetime)
            .min(self.cfg.max_lifetime)
    }
}
