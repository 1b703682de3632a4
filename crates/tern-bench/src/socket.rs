//! The media threads' sockets: reading with `recvmmsg` (cut `UDP_GRO` messages, kernel
//! arrival times) and, for `--sockets thread`, one socket a thread that all its viewers
//! share.
//!
//! With `--sockets thread` each media thread has one socket, not one per viewer, and its viewers are told
//! apart by address after all: each has its own loopback address (`127.16+T.x.y`, T the
//! thread), set as the source of what it sends (`IP_PKTINFO`) and read back as the
//! destination of what arrives. The server still sees one address per viewer; the thread
//! reads every viewer's datagrams with one `recvmmsg` of up to [`SHARED_BATCH`] and wakes once
//! per batch, not once per viewer. It needs a server on loopback (IPv4) and no `--relay`.
//!
//! `UDP_GRO` (on unless `--gro false`): a server that sends each viewer's run of equal-size
//! packets as one `UDP_SEGMENT` message (tern's GSO) reaches a socket with `UDP_GRO` set
//! as that one message, with its segment size in a control message, instead of being cut
//! into datagrams by the kernel and queued one by one. The message is split here at the
//! segment size; every segment is counted as a datagram and goes to the client (SRTP
//! checked) on its own, exactly as if it had come alone.

use std::io::{IoSlice, IoSliceMut};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket as StdUdpSocket};
use std::time::{Duration, Instant};

use mio::net::UdpSocket;

/// Datagrams read per `recvmmsg` call from a viewer's own socket.
pub(crate) const BATCH: usize = 16;
/// Datagrams read per `recvmmsg` call from a thread's shared socket.
pub(crate) const SHARED_BATCH: usize = 64;
/// Receive buffer asked for a shared socket: every viewer of the thread queues there while
/// the thread sleeps between polls or is busy with handshakes, where each viewer's own socket
/// would have its own 1 MiB. 256 MiB holds a quarter second of 2,000 viewers at 4 Mbit/s
/// (a 32 MiB buffer lost packets in one run of two there). Taken only as datagrams queue;
/// forced past `rmem_max` where the process may (`SO_RCVBUFFORCE`).
const SHARED_RCVBUF: usize = 256 << 20;
/// Viewers one thread can address in `--sockets thread` (`127.16+T.x.y`, x.y from 0.1).
pub(crate) const SHARED_MAX_VIEWERS: usize = 65_534;
/// Threads `--sockets thread` can address (second octet 16 to 255).
pub(crate) const SHARED_MAX_THREADS: usize = 240;
/// Largest datagram read whole.
const MAX_DATAGRAM: usize = 2048;
/// Largest `UDP_GRO` message: a UDP payload's limit.
const MAX_GRO: usize = 65_536;

/// One message read: its length, kernel arrival time (since the Unix epoch), for a
/// `UDP_GRO` message of several datagrams their segment size, and (a shared socket) where it
/// came from and which address it was sent to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Got {
    pub(crate) len: usize,
    pub(crate) ts: Option<Duration>,
    pub(crate) seg: Option<usize>,
    pub(crate) from: Option<SocketAddrV4>,
    pub(crate) to: Option<Ipv4Addr>,
}

/// Buffers and headers for `recvmmsg`, reused across calls.
pub(crate) struct RecvBatch {
    bufs: Vec<Vec<u8>>,
    hdrs: nix::sys::socket::MultiHeaders<nix::sys::socket::SockaddrStorage>,
    /// The control buffer each header gets.
    cmsg: Vec<u8>,
    got: Vec<Got>,
}

impl RecvBatch {
    /// `batch` buffers for single datagrams, or for `UDP_GRO` messages if `gro`.
    pub(crate) fn new(gro: bool, batch: usize) -> Self {
        let cmsg = nix::cmsg_space!(nix::sys::time::TimeSpec, i32, nix::libc::in_pktinfo);
        let size = if gro { MAX_GRO } else { MAX_DATAGRAM };
        RecvBatch {
            bufs: (0..batch).map(|_| vec![0u8; size]).collect(),
            hdrs: nix::sys::socket::MultiHeaders::preallocate(batch, Some(cmsg.clone())),
            cmsg,
            got: Vec::with_capacity(batch),
        }
    }

    /// Whether the last read filled every buffer (more may be queued).
    fn full(&self) -> bool {
        self.got.len() == self.bufs.len()
    }

    /// Reads `fd` until its queue is empty, handing each message and its bytes to `each`.
    /// Edge-triggered epoll: a call that fills fewer buffers than it has found the queue
    /// empty. EAGAIN ends it too; so does any other error (ICMP port unreachable and the
    /// like: the server is gone or refused us, and timers decide).
    pub(crate) fn drain(&mut self, fd: std::os::fd::RawFd, each: &mut dyn FnMut(&Got, &mut [u8])) {
        loop {
            match self.recv(fd) {
                Ok(()) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => return,
            }
            for (k, g) in self.got.iter().enumerate() {
                each(g, &mut self.bufs[k]);
            }
            if !self.full() {
                return;
            }
        }
    }

    /// Reads as many messages as there are buffers from `fd` without blocking into
    /// `self.got`.
    fn recv(&mut self, fd: std::os::fd::RawFd) -> nix::Result<()> {
        use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmmsg};
        self.got.clear();
        let n = self.bufs.len();
        let mut iovs: Vec<[IoSliceMut<'_>; 1]> = self
            .bufs
            .iter_mut()
            .map(|b| [IoSliceMut::new(&mut b[..])])
            .collect();
        // nix leaves each header's control length at what the kernel wrote into it on the
        // previous call: after a datagram with only its timestamp, a `UDP_GRO` message's
        // segment size would not fit (MSG_CTRUNC) and its segments would be read as one
        // datagram. Fresh headers every call (three small allocations).
        self.hdrs = nix::sys::socket::MultiHeaders::preallocate(n, Some(self.cmsg.clone()));
        let res = recvmmsg(
            fd,
            &mut self.hdrs,
            iovs.iter_mut(),
            MsgFlags::MSG_DONTWAIT,
            None,
        )?;
        for m in res {
            let mut g = Got {
                len: m.bytes,
                ts: None,
                seg: None,
                from: m
                    .address
                    .and_then(|a| a.as_sockaddr_in().map(|a| (*a).into())),
                to: None,
            };
            if let Ok(cmsgs) = m.cmsgs() {
                for c in cmsgs {
                    match c {
                        ControlMessageOwned::ScmTimestampns(t) => g.ts = Some(Duration::from(t)),
                        ControlMessageOwned::UdpGroSegments(n) if n > 0 => {
                            g.seg = Some(n as usize);
                        }
                        ControlMessageOwned::Ipv4PacketInfo(i) => {
                            g.to = Some(Ipv4Addr::from(u32::from_be(i.ipi_addr.s_addr)));
                        }
                        _ => {}
                    }
                }
            }
            self.got.push(g);
        }
        Ok(())
    }
}

/// The datagrams of one message read: `len` bytes, cut every `seg` bytes if the kernel
/// coalesced several (`UDP_GRO`; the last may be shorter), else whole.
pub(crate) fn segments(
    len: usize,
    seg: Option<usize>,
) -> impl Iterator<Item = std::ops::Range<usize>> {
    let step = seg.filter(|&s| s < len).unwrap_or(len).max(1);
    // An empty datagram is still one (the client counts it as dropped).
    (0..len.div_ceil(step).max(1)).map(move |i| i * step..((i + 1) * step).min(len))
}

/// Maps kernel arrival times (wall clock) to [`Instant`]s.
pub(crate) fn arrival(now: Instant, wall_now: Duration, ts: Option<Duration>) -> Instant {
    match ts {
        Some(t) if t <= wall_now => now.checked_sub(wall_now - t).unwrap_or(now),
        _ => now,
    }
}

/// The address of viewer `slot` of thread `thread` on its shared socket.
pub(crate) fn shared_addr(thread: usize, slot: usize) -> Ipv4Addr {
    let n = slot + 1;
    Ipv4Addr::new(127, 16 + thread as u8, (n >> 8) as u8, n as u8)
}

/// The viewer (slot) of thread `thread` that `to` addresses, if any.
pub(crate) fn shared_slot(thread: usize, to: Ipv4Addr) -> Option<usize> {
    let [a, b, c, d] = to.octets();
    let n = (usize::from(c) << 8) | usize::from(d);
    (a == 127 && usize::from(b) == 16 + thread && n > 0).then(|| n - 1)
}

/// Opens a thread's shared socket (`--sockets thread`): any address, so that every viewer's
/// loopback address reaches it; `IP_PKTINFO` to learn which one a datagram was sent to.
pub(crate) fn open_shared(gro: bool) -> std::io::Result<UdpSocket> {
    use nix::sys::socket::{setsockopt, sockopt};
    let s = StdUdpSocket::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)))?;
    s.set_nonblocking(true)?;
    if setsockopt(&s, sockopt::RcvBufForce, &SHARED_RCVBUF).is_err() {
        let _ = setsockopt(&s, sockopt::RcvBuf, &SHARED_RCVBUF);
    }
    setsockopt(&s, sockopt::Ipv4PacketInfo, &true)?;
    let _ = setsockopt(&s, sockopt::ReceiveTimestampns, &true);
    if gro && let Err(e) = setsockopt(&s, sockopt::UdpGroSegment, &true) {
        eprintln!("bench: UDP_GRO refused ({e}): receiving datagram by datagram");
    }
    Ok(UdpSocket::from_std(s))
}

/// Sends `d` from viewer address `from` to `to` through the shared socket `fd`.
pub(crate) fn send_shared(fd: std::os::fd::RawFd, from: Ipv4Addr, to: SocketAddr, d: &[u8]) {
    use nix::sys::socket::{ControlMessage, MsgFlags, SockaddrIn, sendmsg};
    let SocketAddr::V4(to) = to else { return };
    let info = nix::libc::in_pktinfo {
        ipi_ifindex: 0,
        ipi_spec_dst: nix::libc::in_addr {
            s_addr: u32::from(from).to_be(),
        },
        ipi_addr: nix::libc::in_addr { s_addr: 0 },
    };
    let _ = sendmsg(
        fd,
        &[IoSlice::new(d)],
        &[ControlMessage::Ipv4PacketInfo(&info)],
        MsgFlags::empty(),
        Some(&SockaddrIn::from(to)),
    );
}

#[cfg(test)]
mod tests {
    use super::{SHARED_MAX_THREADS, SHARED_MAX_VIEWERS, segments, shared_addr, shared_slot};
    use std::net::Ipv4Addr;

    #[test]
    fn a_shared_socket_viewer_is_found_by_its_address() {
        for (t, i) in [
            (0, 0),
            (0, 255),
            (1, 256),
            (3, 40_000),
            (SHARED_MAX_THREADS - 1, SHARED_MAX_VIEWERS - 1),
        ] {
            let a = shared_addr(t, i);
            assert_eq!(shared_slot(t, a), Some(i), "{a}");
            assert_ne!(shared_slot(t + 1, a), Some(i), "{a} is thread {t}'s");
        }
        assert_eq!(shared_addr(0, 0), Ipv4Addr::new(127, 16, 0, 1));
        assert_eq!(shared_addr(2, 256), Ipv4Addr::new(127, 18, 1, 1));
        // The top address of the range is not the loopback broadcast.
        assert_ne!(
            shared_addr(SHARED_MAX_THREADS - 1, SHARED_MAX_VIEWERS - 1),
            Ipv4Addr::new(127, 255, 255, 255)
        );
        // Not a viewer: another range, or x.y = 0.0.
        assert_eq!(shared_slot(0, Ipv4Addr::new(127, 0, 0, 1)), None);
        assert_eq!(shared_slot(0, Ipv4Addr::new(127, 16, 0, 0)), None);
        assert_eq!(shared_slot(0, Ipv4Addr::new(10, 16, 0, 1)), None);
    }

    #[test]
    fn a_gro_message_is_cut_at_its_segment_size() {
        let cut = |len, seg| -> Vec<(usize, usize)> {
            segments(len, seg).map(|r| (r.start, r.end)).collect()
        };
        assert_eq!(
            cut(2_500, Some(1_000)),
            [(0, 1_000), (1_000, 2_000), (2_000, 2_500)]
        );
        assert_eq!(cut(3_000, Some(1_000)).len(), 3);
        // One datagram: whole, with or without a segment size.
        assert_eq!(cut(700, None), [(0, 700)]);
        assert_eq!(cut(700, Some(1_000)), [(0, 700)]);
        assert_eq!(cut(700, Some(700)), [(0, 700)]);
        // An empty datagram is still one.
        assert_eq!(cut(0, None), [(0, 0)]);
    }
}
