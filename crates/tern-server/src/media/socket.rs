//! Socket workers: the threads that receive on the shared media port and hand each datagram to
//! the worker that owns its session (OvenMediaEngine's per-bind `WorkerCount`).
//!
//! Each socket worker owns one socket bound to the media address. With several workers the
//! sockets share the port through `SO_REUSEPORT`, and the kernel spreads peers over them by a
//! hash of the 4-tuple, so a peer's datagrams always reach the same socket worker.
//!
//! Demultiplexing: by source address once the owning worker has confirmed it (a viewer's ICE
//! check succeeded, see [`Route::Addr`]); before that, a STUN request is routed by the ICE
//! ufrag at the start of its `USERNAME` (RFC 8445 §7.2.2). The tables are this thread's own,
//! updated through a queue by the workers that own the sessions: no lock on the per-packet path.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token, Waker};
use tern_pool::{BufferPool, PoolCounter};
use tern_proto::stun;
use tern_rtc::viewer::UFRAG_LEN;
use tracing::warn;

use crate::media::ledger::{book_set, map_bytes};
use crate::media::link::{Data, Target, ViewerId, WorkerLink};
use crate::media::stats::EngineStats;
use tern_pool::{shrink_map, shrink_vec};

const SOCKET: Token = Token(0);
const WAKER: Token = Token(1);

/// How often the tables are trimmed and booked in the `session_index` pool.
const HOUSEKEEPING: Duration = Duration::from_millis(200);

/// A change to the socket workers' tables, sent by the worker that owns the session.
#[derive(Debug)]
pub(crate) enum Route {
    /// A viewer's ICE ufrag (`add`), or its removal.
    Ufrag {
        /// The server-side ufrag.
        ufrag: [u8; UFRAG_LEN],
        /// The viewer.
        id: ViewerId,
        /// Add, or remove if it still names `id`.
        add: bool,
    },
    /// A WHIP publisher's ICE ufrag; removal also forgets the addresses learned for it.
    Publisher {
        /// The server-side ufrag (ignored on removal).
        ufrag: Box<str>,
        /// The stream it publishes.
        stream: usize,
        /// Add, or remove.
        add: bool,
    },
    /// A confirmed peer address (`add`), or its removal if it still names `to`.
    Addr {
        /// The peer's address.
        addr: SocketAddr,
        /// Its session.
        to: Target,
        /// Add, or remove.
        add: bool,
    },
    /// Stop the thread.
    Shutdown,
}

/// The handle workers use to update a socket worker's tables.
#[derive(Clone)]
pub(crate) struct SocketLink {
    tx: Sender<Route>,
    waker: Arc<Waker>,
}

impl SocketLink {
    /// Queues a change and wakes the thread.
    pub(crate) fn send(&self, r: Route) {
        if self.tx.send(r).is_ok() {
            let _ = self.waker.wake();
        }
    }
}

/// A socket worker before its thread starts.
pub(crate) struct SocketWorker {
    socket: UdpSocket,
    poll: Poll,
    routes: Receiver<Route>,
    by_addr: HashMap<SocketAddr, Target>,
    by_ufrag: HashMap<[u8; UFRAG_LEN], ViewerId>,
    publishers: Vec<(Box<str>, usize)>,
    hosts: Arc<[WorkerLink]>,
    apps: usize,
    pool: BufferPool,
    stats: Arc<EngineStats>,
    index: PoolCounter,
    index_booked: (usize, usize, usize),
    /// Hosts that were handed datagrams since they were last woken.
    woken: Vec<bool>,
}

impl SocketWorker {
    /// A worker over a bound, non-blocking socket; returns it and the link workers use.
    pub(crate) fn new(
        socket: std::net::UdpSocket,
        hosts: Arc<[WorkerLink]>,
        apps: usize,
        pool: BufferPool,
        stats: Arc<EngineStats>,
    ) -> io::Result<(SocketWorker, SocketLink)> {
        let mut socket = UdpSocket::from_std(socket);
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut socket, SOCKET, Interest::READABLE)?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let (tx, routes) = crossbeam_channel::unbounded();
        let woken = vec![false; hosts.len()];
        Ok((
            SocketWorker {
                socket,
                poll,
                routes,
                by_addr: HashMap::new(),
                by_ufrag: HashMap::new(),
                publishers: Vec::new(),
                hosts,
                apps,
                pool,
                stats,
                index: PoolCounter::new("session_index", 0),
                index_booked: (0, 0, 0),
                woken,
            },
            SocketLink { tx, waker },
        ))
    }

    /// Runs until [`Route::Shutdown`].
    pub(crate) fn run(mut self) {
        let mut events = Events::with_capacity(16);
        let mut buf = vec![0u8; 2048].into_boxed_slice();
        let mut next_housekeeping = Instant::now() + HOUSEKEEPING;
        loop {
            let timeout = next_housekeeping.saturating_duration_since(Instant::now());
            if let Err(e) = self.poll.poll(&mut events, Some(timeout))
                && e.kind() != io::ErrorKind::Interrupted
            {
                warn!("socket worker poll failed: {e}");
                return;
            }
            if !self.apply_routes() {
                self.unbook();
                return;
            }
            let (mut received, mut dropped) = (0u64, 0u64);
            // Drain the socket (mio is edge-triggered), bounded so routes stay fresh.
            for _ in 0..4096 {
                match self.socket.recv_from(&mut buf) {
                    Ok((n, from)) => {
                        received += 1;
                        if !self.dispatch(&buf[..n], from) {
                            dropped += 1;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    // ICMP errors surface as ECONNREFUSED on some sends; keep going.
                    Err(_) => continue,
                }
            }
            self.stats.packets_in.fetch_add(received, Ordering::Relaxed);
            self.stats.dropped_in.fetch_add(dropped, Ordering::Relaxed);
            for (i, w) in self.woken.iter_mut().enumerate() {
                if std::mem::take(w) {
                    self.hosts[i].wake();
                }
            }
            let now = Instant::now();
            if now >= next_housekeeping {
                self.housekeeping();
                next_housekeeping = now + HOUSEKEEPING;
            }
        }
    }

    /// Applies queued table changes; false on shutdown.
    fn apply_routes(&mut self) -> bool {
        while let Ok(r) = self.routes.try_recv() {
            match r {
                Route::Ufrag { ufrag, id, add } => {
                    if add {
                        self.by_ufrag.insert(ufrag, id);
                    } else if self.by_ufrag.get(&ufrag) == Some(&id) {
                        self.by_ufrag.remove(&ufrag);
                    }
                }
                Route::Publisher { ufrag, stream, add } => {
                    // One publisher per stream: a new one replaces, a removal forgets the
                    // stream's ufrag and the addresses learned for it.
                    self.publishers.retain(|&(_, s)| s != stream);
                    if add {
                        self.publishers.push((ufrag, stream));
                    } else {
                        self.by_addr.retain(|_, t| *t != Target::Publisher(stream));
                    }
                }
                Route::Addr { addr, to, add } => {
                    if add {
                        self.by_addr.insert(addr, to);
                    } else if self.by_addr.get(&addr) == Some(&to) {
                        self.by_addr.remove(&addr);
                    }
                }
                Route::Shutdown => return false,
            }
        }
        true
    }

    /// The session a datagram belongs to.
    fn lookup(&mut self, data: &[u8], from: SocketAddr) -> Option<Target> {
        if let Some(&t) = self.by_addr.get(&from) {
            return Some(t);
        }
        // Only a STUN request (RFC 7983: first byte 0-3) may open a path.
        if data.first().is_none_or(|&b| b > 3) {
            return None;
        }
        let msg = stun::Message::parse(data).ok()?;
        let user = msg.username()?;
        let ufrag = user.split(|&b| b == b':').next()?;
        if let Ok(u) = <[u8; UFRAG_LEN]>::try_from(ufrag)
            && let Some(&id) = self.by_ufrag.get(&u)
        {
            return Some(Target::Viewer(id));
        }
        let &(_, stream) = self
            .publishers
            .iter()
            .find(|(u, _)| u.as_bytes() == ufrag)?;
        // A publisher's str0m session checks the request itself; its address is learned
        // here and forgotten when the publisher goes.
        let t = Target::Publisher(stream);
        self.by_addr.insert(from, t);
        Some(t)
    }

    /// Hands a datagram to its owner; false if it was dropped.
    fn dispatch(&mut self, data: &[u8], from: SocketAddr) -> bool {
        let target = match self.lookup(data, from) {
            Some(t) => t,
            None => {
                // The owner may have confirmed this address a moment ago.
                if !self.apply_routes() {
                    return false;
                }
                match self.lookup(data, from) {
                    Some(t) => t,
                    None => return false,
                }
            }
        };
        let host = target.host(self.apps);
        let Some(link) = self.hosts.get(host) else {
            return false;
        };
        let mut b = self.pool.alloc(data.len());
        b.copy_from_slice(data);
        match link.data.try_send(Data::Datagram {
            to: target,
            from,
            buf: b,
        }) {
            Ok(()) => {
                self.woken[host] = true;
                true
            }
            Err(TrySendError::Full(_)) => {
                self.stats.queue_full.fetch_add(1, Ordering::Relaxed);
                self.woken[host] = true;
                false
            }
            Err(TrySendError::Disconnected(_)) => false,
        }
    }

    /// Trims tables left mostly empty and books them in the `session_index` pool.
    fn housekeeping(&mut self) {
        shrink_map(&mut self.by_addr);
        shrink_map(&mut self.by_ufrag);
        shrink_vec(&mut self.publishers);
        let used = self.by_addr.len() * (std::mem::size_of::<(SocketAddr, Target)>() + 1)
            + self.by_ufrag.len() * (std::mem::size_of::<([u8; UFRAG_LEN], ViewerId)>() + 1);
        let allocated = map_bytes(&self.by_addr) + map_bytes(&self.by_ufrag);
        let now = (0, used, allocated);
        book_set(&self.index, &mut self.index_booked, now);
    }

    fn unbook(&mut self) {
        book_set(&self.index, &mut self.index_booked, (0, 0, 0));
    }
}
