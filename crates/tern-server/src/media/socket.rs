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

/// The syscalls of the send path that no safe wrapper covers: `sendmmsg(2)` with a UDP GSO
/// control message (`UDP_SEGMENT`, Linux 4.18+) on some messages and not on others. The
/// only `unsafe` of this crate is here; [`crate::media::batch`] forms the messages.
///
/// `nix::sys::socket::sendmmsg` puts one set of control messages on every message, so it
/// cannot send a GSO message to one viewer beside a plain datagram to another in one call.
#[allow(unsafe_code)]
pub(crate) mod sys {
    use std::net::{SocketAddr, UdpSocket};
    use std::os::fd::RawFd;

    use nix::errno::Errno;
    use nix::sys::socket::{SockaddrLike, SockaddrStorage, setsockopt, sockopt};

    /// Messages one call takes at most.
    pub(crate) const MAX_MESSAGES: usize = 64;

    /// One message of [`send_messages`]: bytes `off..off + len` of the buffer, for one
    /// address, cut by the kernel into datagrams of `segment` bytes (the last one may be
    /// shorter) when `segment` is not 0.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) struct Message {
        /// Where the message starts in the buffer.
        pub off: u32,
        /// Its length.
        pub len: u32,
        /// The GSO segment size, 0 for a plain datagram.
        pub segment: u16,
    }

    /// A `UDP_SEGMENT` control message laid out as `CMSG_FIRSTHDR`/`CMSG_DATA` expect: the
    /// header, then the `u16` segment size at `CMSG_LEN(0)`, padded to `CMSG_SPACE(2)`.
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct SegmentCmsg {
        hdr: libc::cmsghdr,
        segment: u16,
    }

    // SAFETY: CMSG_LEN and CMSG_SPACE are pure arithmetic on their argument.
    const CMSG_LEN_2: usize = unsafe { libc::CMSG_LEN(2) } as usize;
    const CMSG_SPACE_2: usize = unsafe { libc::CMSG_SPACE(2) } as usize;
    const _: () = assert!(std::mem::offset_of!(SegmentCmsg, segment) + 2 == CMSG_LEN_2);
    const _: () = assert!(std::mem::size_of::<SegmentCmsg>() <= CMSG_SPACE_2);
    const _: () =
        assert!(std::mem::align_of::<SegmentCmsg>() >= std::mem::align_of::<libc::cmsghdr>());

    /// Sends `msgs` (at most [`MAX_MESSAGES`]; `addrs[i]` is the address of `msgs[i]`) with
    /// one non-blocking `sendmmsg`. Returns how many messages the kernel took (it stops at
    /// the first it refuses; the error is reported only when that is the first).
    ///
    /// A message outside `buf`, more than [`MAX_MESSAGES`] messages or fewer addresses
    /// than messages are `EINVAL` before any syscall.
    pub(crate) fn send_messages(
        fd: RawFd,
        buf: &[u8],
        msgs: &[Message],
        addrs: &[SockaddrStorage],
    ) -> Result<usize, Errno> {
        let n = msgs.len();
        if n == 0 {
            return Ok(0);
        }
        if n > MAX_MESSAGES || addrs.len() < n {
            return Err(Errno::EINVAL);
        }
        // SAFETY: all-zero is a valid value of these plain C structs (null pointers, zero
        // lengths).
        let mut hdrs: [libc::mmsghdr; MAX_MESSAGES] = unsafe { std::mem::zeroed() };
        let mut iovs: [libc::iovec; MAX_MESSAGES] = unsafe { std::mem::zeroed() };
        let mut cmsgs: [SegmentCmsg; MAX_MESSAGES] = unsafe { std::mem::zeroed() };
        for (i, m) in msgs.iter().enumerate() {
            let (off, len) = (m.off as usize, m.len as usize);
            let Some(bytes) = off.checked_add(len).and_then(|end| buf.get(off..end)) else {
                return Err(Errno::EINVAL);
            };
            iovs[i] = libc::iovec {
                iov_base: bytes.as_ptr().cast_mut().cast(),
                iov_len: bytes.len(),
            };
            let h = &mut hdrs[i].msg_hdr;
            h.msg_name = addrs[i].as_ptr().cast_mut().cast();
            h.msg_namelen = addrs[i].len();
            h.msg_iov = &mut iovs[i];
            h.msg_iovlen = 1;
            if m.segment != 0 {
                let c = &mut cmsgs[i];
                c.hdr.cmsg_len = CMSG_LEN_2 as _;
                c.hdr.cmsg_level = libc::SOL_UDP;
                c.hdr.cmsg_type = libc::UDP_SEGMENT;
                c.segment = m.segment;
                h.msg_control = std::ptr::from_mut(c).cast();
                h.msg_controllen = CMSG_SPACE_2 as _;
            }
        }
        // SAFETY: the first `n` headers point at `iovs`, `cmsgs`, `addrs` and `buf`, which
        // all outlive the call; each iovec covers bytes inside `buf` (checked above), each
        // name is a valid socket address of the length given, each control buffer holds
        // one well-formed cmsg of `msg_controllen` bytes. The kernel only reads them.
        let sent =
            unsafe { libc::sendmmsg(fd, hdrs.as_mut_ptr(), n as libc::c_uint, libc::MSG_DONTWAIT) };
        Errno::result(sent).map(|s| s as usize)
    }

    /// Sets Don't Fragment on what `fd` sends over IPv4 without taking up path-MTU
    /// discovery (`IP_MTU_DISCOVER` = `IP_PMTUDISC_PROBE`, as QUIC stacks do; on an IPv6
    /// socket too, for the IPv4 peers of a dual-stack `[::]` bind). Why: the kernel gives an
    /// IPv4 datagram without DF an IP ID from a shared hashed table with an atomic add per
    /// datagram (`__ip_select_ident`: 4.6 % of the server's CPU with 3,000 lite-clip
    /// viewers), and one with DF an ID of 0. Media datagrams stay under 1,200 bytes, so no
    /// path needs to fragment them; PROBE ignores learnt path MTUs, so no send is refused
    /// for one.
    pub(crate) fn set_dont_fragment(fd: RawFd) -> std::io::Result<()> {
        let v: libc::c_int = libc::IP_PMTUDISC_PROBE;
        // SAFETY: `v` is a c_int that outlives the call and its size is passed; the kernel
        // only reads it. A bad descriptor is an error return, not undefined behaviour.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        Errno::result(r).map(drop).map_err(std::io::Error::from)
    }

    /// `fd`'s `IP_MTU_DISCOVER` mode (for tests of [`set_dont_fragment`]).
    #[cfg(test)]
    pub(crate) fn mtu_discover(fd: RawFd) -> std::io::Result<libc::c_int> {
        let mut v: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `v` and `len` outlive the call and `len` is `v`'s size; the kernel writes
        // at most `len` bytes into `v` and the written length into `len`.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        Errno::result(r).map(|_| v).map_err(std::io::Error::from)
    }

    /// Whether this kernel sends UDP GSO, probed as quinn-udp does: Linux 4.18 or later
    /// (read from `/proc/sys/kernel/osrelease`), and a `UDP_SEGMENT` `setsockopt` accepted on
    /// a throwaway socket of `family`'s kind (never on the media socket: a socket-wide
    /// segment size would cut every send).
    pub(crate) fn gso_supported(family: SocketAddr) -> bool {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        if !kernel_at_least(&release, (4, 18)) {
            return false;
        }
        let any: SocketAddr = match family {
            SocketAddr::V4(_) => ([0, 0, 0, 0], 0).into(),
            SocketAddr::V6(_) => ([0u16; 8], 0).into(),
        };
        let Ok(probe) = UdpSocket::bind(any) else {
            return false;
        };
        setsockopt(&probe, sockopt::UdpGsoSegment, &1200).is_ok()
    }

    /// Whether a kernel release string (`6.18.44-...`) is at least `(major, minor)`.
    pub(crate) fn kernel_at_least(release: &str, want: (u32, u32)) -> bool {
        let mut parts = release
            .trim()
            .split(|c: char| !c.is_ascii_digit())
            .map(|p| p.parse::<u32>().ok());
        match (parts.next().flatten(), parts.next().flatten()) {
            (Some(major), Some(minor)) => (major, minor) >= want,
            _ => false,
        }
    }
}
