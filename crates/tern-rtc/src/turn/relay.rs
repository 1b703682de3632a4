//! The relay data path: ChannelData and Send indications from clients to peers, peer
//! datagrams framed in place for clients, and the per-allocation bandwidth cap.

use std::net::SocketAddr;
use std::ops::Range;
use std::time::Instant;

use tern_proto::stun::{self, Message};
use tern_proto::turn::{self, ChannelData};

use super::driver::{AllocId, ClientAddr, ClientOutput, DropReason, Transport};
use super::table::{Allocation, Secs, TurnServer};

impl Allocation {
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
}

impl TurnServer {
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
}
