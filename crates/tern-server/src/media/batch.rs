//! Batched UDP sends: the media engine writes each protected packet straight into a
//! preallocated buffer, back to back, and hands the whole batch to the kernel with one
//! `sendmmsg(2)` call.
//!
//! # UDP GSO: one message per viewer-frame
//!
//! `sendmmsg` saves syscalls, but the kernel still walks its send path once per datagram,
//! and that walk is most of a fan-out's CPU. UDP GSO (`UDP_SEGMENT`, Linux 4.18+) hands the
//! kernel one buffer of equal-size segments for one address, and the path is walked once
//! for all of them. A fan-out sends each viewer its packets of a frame in a row
//! (`worker/fanout.rs`), and they lie next to each other in this buffer, so each viewer's
//! run of equal-size packets becomes one message with a `UDP_SEGMENT` control message, in
//! the same `sendmmsg` as the other viewers' messages (the kernel takes one control message
//! per `mmsghdr`). No byte is copied to make the super-buffer.
//!
//! A run ends when the next packet goes elsewhere or is larger than the run's segment size;
//! a shorter packet joins as the run's last segment (the kernel's rule: every segment but
//! the last has the segment size). It also ends at [`MAX_SEGMENTS`] packets or
//! [`MAX_GSO_BYTES`]. A run of one is sent as a plain datagram, with no control message.
//!
//! Support is probed at start ([`Gso::probe`]) and may be turned off (`[tunables] gso =
//! "off"`). A GSO send that fails with `EIO` (a device that cannot segment) or `EINVAL`
//! turns GSO off for good, process-wide, and what was left of the batch is sent again as
//! plain datagrams: no packet is lost, one warning is logged.
//!
//! The syscall itself is `media/socket.rs`'s (`sys::send_messages`), the one place of this
//! crate allowed `unsafe`. A batch is created on the thread that uses it.

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::errno::Errno;
use nix::sys::socket::SockaddrStorage;
use tracing::warn;

use crate::media::socket::sys::{self, MAX_MESSAGES, Message};

/// Messages per `sendmmsg` call. 64 amortizes the syscall well (the kernel's own UIO_MAXIOV
/// is 1024); without GSO a message is one packet.
pub const BATCH: usize = MAX_MESSAGES;

/// Bytes per slot: the largest datagram the engine sends (an RTP packet of the configured
/// maximum payload plus header, extension and SRTP tag, or a DTLS flight record).
pub const SLOT: usize = 1536;

/// The batch's buffer: room for 128 full slots (192 KiB, well inside a core's L2 here). Without
/// GSO the 64 messages use half of it; with GSO a message holds a run of packets, and the rest
/// lets a `sendmmsg` carry ~10 viewer-frames of a 4 Mbit/s stream.
const BUF: usize = 2 * BATCH * SLOT;

/// Segments per GSO message at most: the kernel's `UDP_MAX_SEGMENTS` was 64 before Linux
/// 6.9 (128 since).
pub const MAX_SEGMENTS: usize = 64;

/// Bytes per GSO message at most: the largest UDP payload over IPv4 (65,535 − 20 − 8).
pub const MAX_GSO_BYTES: usize = 65_507;

/// A GSO message shorter than this is not used for the forced failure (1-byte segments of a
/// message this long are more than `UDP_MAX_SEGMENTS`, which the kernel refuses with
/// `EINVAL`).
const FORCED_FAILURE_MIN: u32 = 129;

/// Whether sends may use UDP GSO: probed at start, switched off for good by a failed GSO
/// send. Shared by every batch of the engine.
#[derive(Debug, Default)]
pub struct Gso {
    on: AtomicBool,
    fail_first: AtomicBool,
}

impl Gso {
    /// GSO on if `wanted` and the kernel supports it for sockets of `addr`'s family
    /// (Linux 4.18+ and a `UDP_SEGMENT` `setsockopt` accepted, as quinn-udp probes).
    pub fn probe(wanted: bool, addr: SocketAddr) -> Gso {
        Gso {
            on: AtomicBool::new(wanted && sys::gso_supported(addr)),
            fail_first: AtomicBool::new(false),
        }
    }

    /// GSO on without a probe (tests that know the kernel supports it), or off.
    pub fn new(on: bool) -> Gso {
        Gso {
            on: AtomicBool::new(on),
            fail_first: AtomicBool::new(false),
        }
    }

    /// Whether sends use GSO now.
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// The test hook behind `TERN_GSO_FAIL_FIRST`: the first GSO message sent from now on
    /// goes to the kernel with a 1-byte segment size, more segments than the kernel allows,
    /// so the kernel refuses it with `EINVAL` and the fallback runs for real.
    pub fn fail_first_send(&self) {
        self.fail_first.store(true, Ordering::Relaxed);
    }

    /// Turns GSO off; true if this call did (it was on).
    fn switch_off(&self) -> bool {
        self.on.swap(false, Ordering::Relaxed)
    }
}

/// Outcome of one flush.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Flushed {
    /// Datagrams the kernel accepted.
    pub sent: usize,
    /// Bytes the kernel accepted.
    pub bytes: usize,
    /// Datagrams dropped because the socket refused them (buffer full or an error).
    pub dropped: usize,
    /// GSO messages the kernel accepted.
    pub gso_messages: usize,
    /// Datagrams that left inside GSO messages.
    pub gso_packets: usize,
    /// Whether a GSO send failed and the rest of the batch went again without GSO.
    pub fell_back: bool,
}

/// Datagrams in a message.
fn packets(m: &Message) -> usize {
    if m.segment == 0 {
        1
    } else {
        (m.len as usize).div_ceil(usize::from(m.segment))
    }
}

/// A batch of datagrams waiting for one `sendmmsg` call (see the module).
pub struct SendBatch {
    buf: Box<[u8]>,
    /// Bytes of `buf` written.
    fill: usize,
    /// The messages, in order, and each one's address.
    msgs: Vec<Message>,
    addrs: Vec<SockaddrStorage>,
    /// The address of the last message while it may still take packets.
    open: Option<SocketAddr>,
    gso: Option<Arc<Gso>>,
}

impl std::fmt::Debug for SendBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendBatch")
            .field("messages", &self.msgs.len())
            .field("bytes", &self.fill)
            .finish()
    }
}

impl Default for SendBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl SendBatch {
    /// An empty batch with all its memory allocated up front, that sends without GSO.
    pub fn new() -> Self {
        SendBatch {
            buf: vec![0u8; BUF].into_boxed_slice(),
            fill: 0,
            msgs: Vec::with_capacity(BATCH),
            addrs: Vec::with_capacity(BATCH),
            open: None,
            gso: None,
        }
    }

    /// An empty batch that forms GSO messages while `gso` is on.
    pub fn with_gso(gso: Arc<Gso>) -> Self {
        SendBatch {
            gso: Some(gso),
            ..SendBatch::new()
        }
    }

    /// Whether this batch forms GSO messages now.
    pub fn gso_on(&self) -> bool {
        self.gso.as_ref().is_some_and(|g| g.is_on())
    }

    /// Number of datagrams queued.
    pub fn len(&self) -> usize {
        self.msgs.iter().map(packets).sum()
    }

    /// Number of messages queued (a GSO message counts once).
    pub fn messages(&self) -> usize {
        self.msgs.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.msgs.is_empty()
    }

    /// Whether the batch must be flushed before the next [`SendBatch::slot`]: no room for a
    /// full slot, or no message left for a datagram that starts a new one.
    pub fn is_full(&self) -> bool {
        self.msgs.len() == BATCH || self.fill + SLOT > self.buf.len()
    }

    /// The buffer of the next slot, to be filled and then committed with
    /// [`SendBatch::commit`]. `None` when the batch is full.
    pub fn slot(&mut self) -> Option<&mut [u8]> {
        if self.is_full() {
            return None;
        }
        Some(&mut self.buf[self.fill..self.fill + SLOT])
    }

    /// Queues the first `len` bytes of the current slot for `to`: as the next segment of
    /// the open GSO run when it fits (see the module), else as a message of its own.
    pub fn commit(&mut self, len: usize, to: SocketAddr) {
        if len > SLOT || self.fill + len > self.buf.len() || len == 0 {
            return;
        }
        let off = self.fill;
        if self.open == Some(to)
            && self.gso.as_ref().is_some_and(|g| g.is_on())
            && let Some(m) = self.msgs.last_mut()
        {
            let seg = if m.segment == 0 {
                m.len as usize
            } else {
                usize::from(m.segment)
            };
            let joins = len <= seg
                && packets(m) < MAX_SEGMENTS
                && m.len as usize + len <= MAX_GSO_BYTES
                && (m.off + m.len) as usize == off;
            if joins && let Ok(seg16) = u16::try_from(seg) {
                m.segment = seg16;
                m.len += len as u32;
                self.fill += len;
                // A shorter packet is the run's last segment.
                if len < seg {
                    self.open = None;
                }
                return;
            }
        }
        if self.msgs.len() == BATCH {
            return;
        }
        self.msgs.push(Message {
            off: off as u32,
            len: len as u32,
            segment: 0,
        });
        self.addrs.push(SockaddrStorage::from(to));
        self.open = Some(to);
        self.fill += len;
    }

    /// Copies `data` into a slot for `to`; false when the batch is full or `data` too big.
    pub fn push(&mut self, data: &[u8], to: SocketAddr) -> bool {
        if data.len() > SLOT || data.is_empty() {
            return false;
        }
        let Some(slot) = self.slot() else {
            return false;
        };
        slot[..data.len()].copy_from_slice(data);
        self.commit(data.len(), to);
        true
    }

    /// Drops everything queued without sending it.
    pub fn clear(&mut self) {
        self.msgs.clear();
        self.addrs.clear();
        self.fill = 0;
        self.open = None;
    }

    /// Sends everything queued on `fd` (a non-blocking UDP socket) and empties the batch.
    ///
    /// A datagram the kernel refuses (send buffer full, unreachable peer) is dropped and
    /// counted: a late media packet is worth nothing, and the viewer's NACK will ask again.
    /// A GSO message refused with `EIO` or `EINVAL` is not: GSO is switched off and the rest
    /// of the batch goes out as plain datagrams.
    pub fn flush(&mut self, fd: RawFd) -> Flushed {
        let mut out = Flushed::default();
        let mut i = 0;
        while i < self.msgs.len() {
            let end = self.msgs.len().min(i + BATCH);
            let forced = self.msgs[i].segment != 0
                && self.msgs[i].len >= FORCED_FAILURE_MIN
                && self
                    .gso
                    .as_ref()
                    .is_some_and(|g| g.fail_first.swap(false, Ordering::Relaxed));
            let res = if forced {
                let real = self.msgs[i].segment;
                self.msgs[i].segment = 1;
                let r = sys::send_messages(fd, &self.buf, &self.msgs[i..end], &self.addrs[i..end]);
                self.msgs[i].segment = real;
                r
            } else {
                sys::send_messages(fd, &self.buf, &self.msgs[i..end], &self.addrs[i..end])
            };
            match res {
                Ok(0) => {
                    out.dropped += self.msgs[i..].iter().map(packets).sum::<usize>();
                    break;
                }
                Ok(k) => {
                    for m in &self.msgs[i..i + k] {
                        let n = packets(m);
                        out.sent += n;
                        out.bytes += m.len as usize;
                        if m.segment != 0 {
                            out.gso_messages += 1;
                            out.gso_packets += n;
                        }
                    }
                    i += k;
                }
                Err(Errno::EINTR) => {}
                Err(e @ (Errno::EIO | Errno::EINVAL)) if self.msgs[i].segment != 0 => {
                    if self.gso.as_ref().is_some_and(|g| g.switch_off()) {
                        warn!(
                            "UDP GSO send failed ({}); GSO is off from now on, the batch goes again without it",
                            std::io::Error::from_raw_os_error(e as i32)
                        );
                    }
                    out.fell_back = true;
                    self.split_from(i);
                }
                Err(_) => {
                    // The first message of the remainder was refused; drop it and go on
                    // with the rest, which may be for other, reachable viewers.
                    out.dropped += packets(&self.msgs[i]);
                    i += 1;
                }
            }
        }
        self.clear();
        out
    }

    /// Cuts every GSO message from `i` on into plain datagrams (after a failed GSO send).
    fn split_from(&mut self, i: usize) {
        let msgs: Vec<Message> = self.msgs.drain(i..).collect();
        let addrs: Vec<SockaddrStorage> = self.addrs.drain(i..).collect();
        for (m, a) in msgs.into_iter().zip(addrs) {
            if m.segment == 0 {
                self.msgs.push(m);
                self.addrs.push(a);
                continue;
            }
            let seg = u32::from(m.segment);
            let mut off = m.off;
            while off < m.off + m.len {
                let len = seg.min(m.off + m.len - off);
                self.msgs.push(Message {
                    off,
                    len,
                    segment: 0,
                });
                self.addrs.push(a);
                off += len;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    fn receiver(ip: &str) -> UdpSocket {
        let rx = UdpSocket::bind((ip, 0)).expect("bind rx");
        rx.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        rx
    }

    /// Every datagram waiting on `rx`, without blocking past the first.
    fn drain(rx: &UdpSocket) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        rx.set_nonblocking(false).expect("blocking");
        if let Ok(n) = rx.recv(&mut buf) {
            got.push(buf[..n].to_vec());
        }
        rx.set_nonblocking(true).expect("non-blocking");
        while let Ok(n) = rx.recv(&mut buf) {
            got.push(buf[..n].to_vec());
        }
        got
    }

    /// A datagram of `len` bytes that says who it is: viewer `v`, packet `k`.
    fn dgram(v: u8, k: u8, len: usize) -> Vec<u8> {
        let mut d = vec![k; len];
        d[0] = v;
        d[1] = k;
        d
    }

    #[test]
    fn flush_delivers_every_datagram_in_order() {
        let rx = receiver("127.0.0.1");
        let rx2 = receiver("127.0.0.1");
        let tx = UdpSocket::bind("127.0.0.1:0").expect("bind tx");
        let a = rx.local_addr().expect("addr");
        let b = rx2.local_addr().expect("addr");
        let mut batch = SendBatch::new();
        let mut total = Flushed::default();
        for i in 0..150u32 {
            if batch.is_full() {
                let f = batch.flush(tx.as_raw_fd());
                total.sent += f.sent;
                total.dropped += f.dropped;
            }
            let to = if i % 2 == 0 { a } else { b };
            assert!(batch.push(&i.to_be_bytes(), to));
        }
        let f = batch.flush(tx.as_raw_fd());
        total.sent += f.sent;
        total.dropped += f.dropped;
        assert!(batch.is_empty());
        assert_eq!(total.sent, 150);
        assert_eq!(total.dropped, 0);
        let mut buf = [0u8; 16];
        for (sock, first) in [(&rx, 0u32), (&rx2, 1u32)] {
            for k in 0..75u32 {
                let n = sock.recv(&mut buf).expect("recv");
                assert_eq!(n, 4);
                assert_eq!(
                    u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]),
                    first + 2 * k
                );
            }
        }
    }

    #[test]
    fn oversized_and_full_are_refused() {
        let mut batch = SendBatch::new();
        let to: SocketAddr = "127.0.0.1:9".parse().expect("addr");
        assert!(!batch.push(&[0u8; SLOT + 1], to));
        for _ in 0..BATCH {
            assert!(batch.push(&[1, 2, 3], to));
        }
        assert!(batch.is_full());
        assert!(!batch.push(&[1], to));
        assert!(batch.slot().is_none());
    }

    #[test]
    fn runs_form_by_address_and_size_and_end_at_the_limits() {
        let gso = Arc::new(Gso::new(true));
        let mut batch = SendBatch::with_gso(gso.clone());
        let a: SocketAddr = "127.0.0.1:9".parse().expect("addr");
        let b: SocketAddr = "127.0.0.1:10".parse().expect("addr");
        // a: 3 equal and a shorter last; then a packet as big again starts a new run.
        for len in [1000, 1000, 1000, 400, 1000] {
            assert!(batch.push(&vec![0; len], a));
        }
        // b: a run of one; then a, a larger packet after a smaller one.
        assert!(batch.push(&[0; 900], b));
        assert!(batch.push(&[0; 500], a));
        assert!(batch.push(&[0; 600], a));
        let shape: Vec<(u32, u16)> = batch.msgs.iter().map(|m| (m.len, m.segment)).collect();
        assert_eq!(
            shape,
            [(3400, 1000), (1000, 0), (900, 0), (500, 0), (600, 0)]
        );
        assert_eq!(batch.len(), 8);
        batch.clear();
        // At most MAX_SEGMENTS a message.
        for _ in 0..MAX_SEGMENTS + 1 {
            assert!(batch.push(&[0; 100], a));
        }
        let shape: Vec<(u32, u16)> = batch.msgs.iter().map(|m| (m.len, m.segment)).collect();
        assert_eq!(shape, [(100 * MAX_SEGMENTS as u32, 100), (100, 0)]);
        batch.clear();
        // At most MAX_GSO_BYTES a message: 54 x 1200 = 64,800; the 55th starts another.
        for _ in 0..55 {
            assert!(batch.push(&[0; 1200], a));
        }
        let shape: Vec<(u32, u16)> = batch.msgs.iter().map(|m| (m.len, m.segment)).collect();
        assert_eq!(shape, [(54 * 1200, 1200), (1200, 0)]);
        batch.clear();
        // GSO off: one message a datagram.
        let off = Arc::new(Gso::new(false));
        let mut plain = SendBatch::with_gso(off);
        for _ in 0..3 {
            assert!(plain.push(&[0; 1200], a));
        }
        assert_eq!(plain.messages(), 3);
    }

    /// Two viewers, each a frame of equal packets and a shorter last one, over `ip`; every
    /// datagram arrives whole and in order, and the GSO counters say how they left.
    fn gso_roundtrip(ip: &str, gso: &Arc<Gso>) -> Flushed {
        let rx = [receiver(ip), receiver(ip)];
        let tx = UdpSocket::bind((ip, 0)).expect("bind tx");
        let mut batch = SendBatch::with_gso(gso.clone());
        let sizes = [1200, 1200, 1200, 1200, 1200, 300];
        for (v, r) in rx.iter().enumerate() {
            let to = r.local_addr().expect("addr");
            for (k, &len) in sizes.iter().enumerate() {
                assert!(batch.push(&dgram(v as u8, k as u8, len), to));
            }
        }
        let f = batch.flush(tx.as_raw_fd());
        assert_eq!(f.sent, 12);
        assert_eq!(f.dropped, 0);
        assert_eq!(f.bytes, 2 * (5 * 1200 + 300));
        for (v, r) in rx.iter().enumerate() {
            let mut got = drain(r);
            while got.len() < sizes.len() {
                let more = drain(r);
                assert!(!more.is_empty(), "viewer {v} got {} datagrams", got.len());
                got.extend(more);
            }
            let want: Vec<Vec<u8>> = sizes
                .iter()
                .enumerate()
                .map(|(k, &len)| dgram(v as u8, k as u8, len))
                .collect();
            assert_eq!(got, want, "viewer {v}");
        }
        f
    }

    #[test]
    fn gso_messages_arrive_as_the_datagrams_they_hold_over_ipv4_and_ipv6() {
        let gso = Arc::new(Gso::probe(true, "127.0.0.1:0".parse().expect("addr")));
        assert!(gso.is_on(), "this kernel (Linux 6.18) has UDP GSO");
        let f = gso_roundtrip("127.0.0.1", &gso);
        assert_eq!((f.gso_messages, f.gso_packets), (2, 12));
        assert!(!f.fell_back);
        let gso6 = Arc::new(Gso::probe(true, "[::1]:0".parse().expect("addr")));
        assert!(gso6.is_on());
        let f = gso_roundtrip("::1", &gso6);
        assert_eq!((f.gso_messages, f.gso_packets), (2, 12));
        assert!(gso6.is_on());
    }

    #[test]
    fn a_refused_gso_send_turns_gso_off_and_loses_nothing() {
        let gso = Arc::new(Gso::new(true));
        gso.fail_first_send();
        let f = gso_roundtrip("127.0.0.1", &gso);
        assert!(f.fell_back, "the kernel refused the forced send");
        assert!(!gso.is_on(), "GSO is off for good");
        assert_eq!(f.gso_messages, 0);
        // Off now: the next batch forms no runs, and sends everything.
        let f = gso_roundtrip("127.0.0.1", &gso);
        assert_eq!((f.gso_messages, f.fell_back), (0, false));
    }

    #[test]
    fn media_sockets_send_with_dont_fragment() {
        use std::os::fd::AsRawFd;
        for bind in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(s) = std::net::UdpSocket::bind(bind) else {
                continue; // no IPv6 here
            };
            assert_ne!(
                sys::mtu_discover(s.as_raw_fd()).expect("get"),
                libc::IP_PMTUDISC_PROBE
            );
            sys::set_dont_fragment(s.as_raw_fd()).expect(bind);
            assert_eq!(
                sys::mtu_discover(s.as_raw_fd()).expect("get"),
                libc::IP_PMTUDISC_PROBE
            );
        }
    }

    #[test]
    fn kernel_versions_compare() {
        assert!(sys::kernel_at_least("6.18.44-fc-v669\n", (4, 18)));
        assert!(sys::kernel_at_least("4.18.0", (4, 18)));
        assert!(!sys::kernel_at_least("4.17.9", (4, 18)));
        assert!(!sys::kernel_at_least("3.10.0-1160.el7", (4, 18)));
        assert!(!sys::kernel_at_least("garbage", (4, 18)));
    }
}
