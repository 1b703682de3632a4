//! Batched UDP sends: the media engine writes each protected packet straight into a slot of
//! a preallocated batch and hands the whole batch to the kernel with one `sendmmsg(2)` call.
//!
//! Measured on this kind of machine (see FIELD-NOTES.md), `sendmmsg` moves ~1.4x the packets
//! per core of one `sendto` per packet. UDP GSO would do better still, but GSO needs every
//! segment of a message to go to the same address, and a fan-out sends each packet to a
//! different viewer, so it does not apply here.
//!
//! `nix` provides a safe `sendmmsg` wrapper, which keeps this crate free of `unsafe`. Its
//! header block holds raw pointers and is therefore not `Send`: a batch is created on the
//! thread that uses it.

use std::io::IoSlice;
use std::net::SocketAddr;
use std::os::fd::RawFd;

use nix::errno::Errno;
use nix::sys::socket::{MsgFlags, MultiHeaders, SockaddrStorage, sendmmsg};

/// Packets per `sendmmsg` call. 64 amortizes the syscall well (the kernel's own UIO_MAXIOV
/// is 1024) while the batch's buffers (64 x [`SLOT`] = 96 KiB) stay in L2.
pub const BATCH: usize = 64;

/// Bytes per slot: the largest datagram the engine sends (an RTP packet of the configured
/// maximum payload plus header, extension and SRTP tag, or a DTLS flight record).
pub const SLOT: usize = 1536;

/// Outcome of one flush.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Flushed {
    /// Datagrams the kernel accepted.
    pub sent: usize,
    /// Bytes the kernel accepted.
    pub bytes: usize,
    /// Datagrams dropped because the socket refused them (buffer full or an error).
    pub dropped: usize,
}

/// A batch of datagrams waiting for one `sendmmsg` call.
pub struct SendBatch {
    bufs: Box<[u8]>,
    lens: [usize; BATCH],
    addrs: Vec<Option<SockaddrStorage>>,
    headers: MultiHeaders<SockaddrStorage>,
}

impl std::fmt::Debug for SendBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendBatch")
            .field("queued", &self.addrs.len())
            .finish()
    }
}

impl Default for SendBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl SendBatch {
    /// An empty batch with all its memory allocated up front.
    pub fn new() -> Self {
        SendBatch {
            bufs: vec![0u8; BATCH * SLOT].into_boxed_slice(),
            lens: [0; BATCH],
            addrs: Vec::with_capacity(BATCH),
            headers: MultiHeaders::preallocate(BATCH, None),
        }
    }

    /// Number of datagrams queued.
    pub fn len(&self) -> usize {
        self.addrs.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
    }

    /// Whether the batch must be flushed before the next [`SendBatch::slot`].
    pub fn is_full(&self) -> bool {
        self.addrs.len() == BATCH
    }

    /// The buffer of the next slot, to be filled and then committed with
    /// [`SendBatch::commit`]. `None` when the batch is full.
    pub fn slot(&mut self) -> Option<&mut [u8]> {
        let i = self.addrs.len();
        if i == BATCH {
            return None;
        }
        Some(&mut self.bufs[i * SLOT..(i + 1) * SLOT])
    }

    /// Queues the first `len` bytes of the current slot for `to`.
    pub fn commit(&mut self, len: usize, to: SocketAddr) {
        let i = self.addrs.len();
        if i == BATCH || len > SLOT {
            return;
        }
        self.lens[i] = len;
        self.addrs.push(Some(SockaddrStorage::from(to)));
    }

    /// Copies `data` into a slot for `to`; false when the batch is full or `data` too big.
    pub fn push(&mut self, data: &[u8], to: SocketAddr) -> bool {
        if data.len() > SLOT {
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
        self.addrs.clear();
    }

    /// Sends everything queued on `fd` (a non-blocking UDP socket) and empties the batch.
    ///
    /// A datagram the kernel refuses (send buffer full, unreachable peer) is dropped and
    /// counted: a late media packet is worth nothing, and the viewer's NACK will ask again.
    pub fn flush(&mut self, fd: RawFd) -> Flushed {
        let n = self.addrs.len();
        let mut out = Flushed::default();
        let mut start = 0;
        while start < n {
            let bufs = &self.bufs;
            let lens = &self.lens;
            let iovs: [[IoSlice<'_>; 1]; BATCH] = std::array::from_fn(|i| {
                let len = if start + i < n { lens[start + i] } else { 0 };
                let off = (start + i).min(BATCH - 1) * SLOT;
                [IoSlice::new(&bufs[off..off + len])]
            });
            let res = sendmmsg(
                fd,
                &mut self.headers,
                iovs[..n - start].iter(),
                &self.addrs[start..n],
                [],
                MsgFlags::MSG_DONTWAIT,
            );
            match res {
                Ok(results) => {
                    let sent = results.count();
                    if sent == 0 {
                        out.dropped += n - start;
                        break;
                    }
                    out.sent += sent;
                    out.bytes += lens[start..start + sent].iter().sum::<usize>();
                    start += sent;
                }
                Err(Errno::EINTR) => {}
                Err(_) => {
                    // The first datagram of the remainder was refused; drop it and go on
                    // with the rest, which may be for other, reachable viewers.
                    out.dropped += 1;
                    start += 1;
                }
            }
        }
        self.addrs.clear();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    #[test]
    fn flush_delivers_every_datagram_in_order() {
        let rx = UdpSocket::bind("127.0.0.1:0").expect("bind rx");
        let rx2 = UdpSocket::bind("127.0.0.1:0").expect("bind rx2");
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
                let (n, _) = sock.recv_from(&mut buf).expect("recv");
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
}
