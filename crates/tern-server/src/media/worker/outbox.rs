//! What a worker sends: its send batch on the shared UDP port, handed to the kernel with
//! one `sendmmsg` when it fills or at the end of a loop pass (each viewer's run of
//! equal-size packets one UDP GSO message, see `media/batch.rs`), and the counters that the
//! sends add to (bytes, packets, GSO messages and failures, once per flush rather than per
//! packet).

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

use crate::media::batch::SendBatch;
use crate::media::stats::EngineStats;

/// A worker's sends (see the module).
pub(super) struct Outbox {
    socket: UdpSocket,
    batch: SendBatch,
    /// Media packets written since the last flush.
    media: u64,
}

impl Outbox {
    /// Sends on `socket` through `batch`.
    pub(super) fn new(socket: UdpSocket, batch: SendBatch) -> Self {
        Outbox {
            socket,
            batch,
            media: 0,
        }
    }

    /// Queues a control datagram (STUN, DTLS, RTCP); one that does not fit a slot is
    /// counted as a send error.
    pub(super) fn send_to(&mut self, data: &[u8], to: SocketAddr, stats: &EngineStats) {
        self.make_room(stats);
        if !self.batch.push(data, to) {
            stats.send_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Flushes a full batch, so that the next slot is free.
    pub(super) fn make_room(&mut self, stats: &EngineStats) {
        if self.batch.is_full() {
            self.flush(stats);
        }
    }

    /// The next slot to write a datagram into (after [`Outbox::make_room`]), then
    /// [`Outbox::commit`] or [`Outbox::commit_media`].
    pub(super) fn slot(&mut self) -> Option<&mut [u8]> {
        self.batch.slot()
    }

    /// Whether the batch forms UDP GSO messages now.
    pub(super) fn gso_on(&self) -> bool {
        self.batch.gso_on()
    }

    /// Queues the `len` bytes written into the slot, for `to`.
    pub(super) fn commit(&mut self, len: usize, to: SocketAddr) {
        self.batch.commit(len, to);
    }

    /// As [`Outbox::commit`], for a media packet (counted in `packets_out`).
    pub(super) fn commit_media(&mut self, len: usize, to: SocketAddr) {
        self.batch.commit(len, to);
        self.media += 1;
    }

    /// Hands the batch to the kernel and adds to the counters.
    pub(super) fn flush(&mut self, stats: &EngineStats) {
        if self.media > 0 {
            stats
                .packets_out
                .fetch_add(std::mem::take(&mut self.media), Ordering::Relaxed);
        }
        if self.batch.is_empty() {
            return;
        }
        let f = self.batch.flush(self.socket.as_raw_fd());
        stats.bytes_out.fetch_add(f.bytes as u64, Ordering::Relaxed);
        if f.dropped > 0 {
            stats
                .send_errors
                .fetch_add(f.dropped as u64, Ordering::Relaxed);
        }
        if f.gso_messages > 0 {
            stats
                .gso_messages
                .fetch_add(f.gso_messages as u64, Ordering::Relaxed);
            stats
                .gso_packets
                .fetch_add(f.gso_packets as u64, Ordering::Relaxed);
        }
        if f.fell_back {
            stats.gso_fallbacks.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::media::batch::{BATCH, SLOT};

    fn pair() -> (Outbox, UdpSocket) {
        let send = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let recv = UdpSocket::bind("127.0.0.1:0").expect("bind");
        recv.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        (Outbox::new(send, SendBatch::new()), recv)
    }

    #[test]
    fn datagrams_go_out_at_the_flush_and_the_counters_follow() {
        let (mut out, recv) = pair();
        let stats = EngineStats::default();
        let to = recv.local_addr().expect("addr");
        out.send_to(b"stun", to, &stats);
        out.make_room(&stats);
        let slot = out.slot().expect("a slot");
        slot[..5].copy_from_slice(b"media");
        out.commit_media(5, to);
        assert_eq!(
            stats.bytes_out.load(Ordering::Relaxed),
            0,
            "nothing before the flush"
        );
        out.flush(&stats);
        let mut buf = [0u8; 64];
        let mut got = Vec::new();
        for _ in 0..2 {
            let n = recv.recv(&mut buf).expect("a datagram");
            got.push(buf[..n].to_vec());
        }
        assert_eq!(got, [b"stun".to_vec(), b"media".to_vec()]);
        assert_eq!(stats.bytes_out.load(Ordering::Relaxed), 9);
        assert_eq!(stats.packets_out.load(Ordering::Relaxed), 1, "media only");
        assert_eq!(stats.send_errors.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_full_batch_is_flushed_to_make_room_and_an_oversized_datagram_is_an_error() {
        let (mut out, recv) = pair();
        let stats = EngineStats::default();
        let to = recv.local_addr().expect("addr");
        for _ in 0..=BATCH {
            out.send_to(b"x", to, &stats);
        }
        assert_eq!(stats.bytes_out.load(Ordering::Relaxed), BATCH as u64);
        out.send_to(&[0; SLOT + 1], to, &stats);
        assert_eq!(stats.send_errors.load(Ordering::Relaxed), 1);
    }
}
