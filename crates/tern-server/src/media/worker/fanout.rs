//! Where a new packet of a stream goes from the worker that has it: over to the stream
//! workers (an app worker's peers), each woken once per loop pass however many packets it
//! was handed, and into the queue for this worker's own viewers, sent viewer by viewer
//! (`Worker::fan_out_queued`).
//!
//! The queue: live packets arrive together (a video frame's, or whatever queued while the
//! worker was busy). Sending them viewer by viewer gives each viewer every queued packet of
//! its stream in a row, so its slot, SRTP context and cipher key are fetched into the cache
//! once per batch rather than once per packet: at 5,000 viewers that state no longer fits
//! in the cache, and the packet-by-packet order paid the misses on every packet (`tern
//! lab`: 310 ns per packet per viewer at 1,000 viewers, 440-650 ns at 5,000).
//!
//! Equal sizes for UDP GSO: a viewer's video packets of a frame leave as one GSO message
//! when they are the same size (a shorter last one aside; see `media/batch.rs`). tern's own
//! packetizers cut FU-A fragments greedily, full size but the last, but a WHIP publisher's
//! packets are forwarded as they came, and libwebrtc splits a frame "about equally": sizes a
//! byte or a few apart. So, when GSO is on, each batch works out once, for all viewers,
//! which video packets of a stream's layer run together, and pads the smaller ones of a run
//! with RTP padding up to its largest, when that costs at most [`MAX_PAD`] bytes a packet;
//! a packet further off starts a new run (larger) or ends the run unpadded (smaller).

use crossbeam_channel::TrySendError;
use tern_proto::codec::MediaKind;
use tern_rtc::stream::RingPacket;

use crate::media::link::{Data, WorkerLink};

/// Live packets queued for a viewer-by-viewer fan-out before it runs anyway (a keyframe's
/// packets, or a backlog): bounds the queue and the wait of the batch's first packet.
pub(super) const FANOUT_BATCH: usize = 32;

/// RTP padding a packet may get to join its run's size (bytes).
pub(super) const MAX_PAD: usize = 16;

/// A worker's fan-out: its peers and its queue (see the module).
pub(super) struct FanOut {
    /// Stream workers this app worker hands its packets to (none for a stream worker).
    peers: Vec<WorkerLink>,
    /// Peers handed something since they were last woken.
    woken: Vec<bool>,
    /// Live packets waiting to go to this worker's viewers, with their stream; empty
    /// outside the part of a loop pass that takes in media.
    queue: Vec<(usize, RingPacket)>,
    /// The padding of the queue's packets, worked out when they are taken.
    pads: Vec<u8>,
}

impl FanOut {
    /// A fan-out to `peers`.
    pub(super) fn new(peers: Vec<WorkerLink>) -> Self {
        FanOut {
            woken: vec![false; peers.len()],
            peers,
            queue: Vec::with_capacity(FANOUT_BATCH),
            pads: Vec::with_capacity(FANOUT_BATCH),
        }
    }

    /// Hands a packet of `stream` to every peer (a clone each: the payload is shared).
    /// Returns how many peers' queues were full (the packet is lost to their viewers).
    pub(super) fn hand_over(&mut self, stream: usize, pkt: &RingPacket) -> u64 {
        let mut full = 0;
        for (peer, woken) in self.peers.iter().zip(&mut self.woken) {
            let pkt = pkt.clone();
            match peer.data.try_send(Data::Media { stream, pkt }) {
                Ok(()) => *woken = true,
                Err(TrySendError::Full(_)) => {
                    full += 1;
                    *woken = true;
                }
                Err(TrySendError::Disconnected(_)) => {}
            }
        }
        full
    }

    /// Tells every peer that `stream`'s rings are cleared (its publisher left).
    pub(super) fn reset(&mut self, stream: usize) {
        for (peer, woken) in self.peers.iter().zip(&mut self.woken) {
            if peer.data.try_send(Data::Reset(stream)).is_ok() {
                *woken = true;
            }
        }
    }

    /// Wakes the peers handed something since the last wake.
    pub(super) fn wake(&mut self) {
        for (peer, woken) in self.peers.iter().zip(&mut self.woken) {
            if std::mem::take(woken) {
                peer.wake();
            }
        }
    }

    /// Queues a live packet of `stream` for this worker's viewers; true when the queue is
    /// full and should be sent now.
    pub(super) fn queue(&mut self, stream: usize, pkt: RingPacket) -> bool {
        self.queue.push((stream, pkt));
        self.queue.len() >= FANOUT_BATCH
    }

    /// Whether nothing is queued.
    pub(super) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Takes the queued packets out to be sent, with the padding that evens out each
    /// run's sizes when `pad` (GSO is on; see the module); [`FanOut::give_back`] returns
    /// the room.
    pub(super) fn take(&mut self, pad: bool) -> Batch {
        let queue = std::mem::take(&mut self.queue);
        let mut pads = std::mem::take(&mut self.pads);
        pads.clear();
        pads.resize(queue.len(), 0);
        if pad {
            even_out(&queue, &mut pads);
        }
        Batch(queue, pads)
    }

    /// Returns a sent batch's room for the next.
    pub(super) fn give_back(&mut self, batch: Batch) {
        self.queue = batch.0;
        self.queue.clear();
        self.pads = batch.1;
    }
}

/// Sets `pads[i]` for the video packets of `q` (see the module): per stream and layer, in
/// order, a run takes packets while its sizes stay within [`MAX_PAD`] bytes of each other,
/// and each packet of a run is padded up to the run's largest. A smaller packet further off
/// ends the run unpadded (the kernel takes a shorter last segment); a larger one starts the
/// next run.
fn even_out(q: &[(usize, RingPacket)], pads: &mut [u8]) {
    let video = |i: usize| q[i].1.kind == MediaKind::Video;
    let close = |run: &[usize], max: usize, pads: &mut [u8]| {
        for &i in run {
            pads[i] = u8::try_from(max - q[i].1.payload.len()).unwrap_or(0);
        }
    };
    for first in 0..q.len() {
        let key = (q[first].0, q[first].1.layer);
        let same = |i: usize| video(i) && (q[i].0, q[i].1.layer) == key;
        // Each stream and layer once, from its first video packet.
        if !same(first) || (0..first).any(same) {
            continue;
        }
        let mut run = [0usize; FANOUT_BATCH];
        let (mut n, mut max, mut min) = (0, 0, 0);
        for i in (first..q.len()).filter(|&i| same(i)) {
            let len = q[i].1.payload.len();
            if n > 0 && n < FANOUT_BATCH && len.max(max) - len.min(min) <= MAX_PAD {
                run[n] = i;
                n += 1;
                max = max.max(len);
                min = min.min(len);
                continue;
            }
            close(&run[..n], max, pads);
            if n > 0 && len < min {
                // Much smaller: the run's unpadded last segment.
                n = 0;
                continue;
            }
            run[0] = i;
            (n, max, min) = (1, len, len);
        }
        close(&run[..n], max, pads);
    }
}

/// Queued packets being sent (see [`FanOut::take`]), and each one's RTP padding.
pub(super) struct Batch(Vec<(usize, RingPacket)>, Vec<u8>);

impl Batch {
    /// Each stream with packets in the batch, once, in the order of its first packet: the
    /// stream and where its first packet is.
    pub(super) fn streams(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let q = &self.0;
        q.iter()
            .enumerate()
            .filter(|&(first, &(stream, _))| !q[..first].iter().any(|&(s, _)| s == stream))
            .map(|(first, &(stream, _))| (first, stream))
    }

    /// Stream `stream`'s packets from `first` (see [`Batch::streams`]) on, in the order
    /// queued, each with its RTP padding.
    pub(super) fn packets(
        &self,
        first: usize,
        stream: usize,
    ) -> impl Iterator<Item = (&RingPacket, u8)> {
        self.0[first..]
            .iter()
            .zip(&self.1[first..])
            .filter(move |&(&(s, _), _)| s == stream)
            .map(|((_, p), &pad)| (p, pad))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crossbeam_channel::Receiver;
    use mio::{Events, Poll, Token, Waker};
    use tern_pool::{BufferPool, PoolConfig};

    use super::*;

    fn packet(pool: &BufferPool, seq: u64) -> RingPacket {
        RingPacket {
            kind: MediaKind::Video,
            layer: 0,
            seq,
            rtp_ts: 0,
            marker: false,
            keyframe: false,
            capture_ntp: 0,
            payload: pool.alloc(1).freeze(),
        }
    }

    fn pool() -> BufferPool {
        BufferPool::new(PoolConfig::packets("fanout test")).expect("pool")
    }

    /// A peer whose data queue holds `room` messages, with its poll (to see its wakes).
    fn peer(room: usize) -> (WorkerLink, Receiver<Data>, Poll) {
        let poll = Poll::new().expect("poll");
        let waker = Arc::new(Waker::new(poll.registry(), Token(1)).expect("waker"));
        let (data, data_rx) = crossbeam_channel::bounded(room);
        let (ctl, _) = crossbeam_channel::unbounded();
        (WorkerLink { data, ctl, waker }, data_rx, poll)
    }

    fn woken(poll: &mut Poll) -> bool {
        let mut events = Events::with_capacity(4);
        poll.poll(&mut events, Some(Duration::ZERO)).expect("poll");
        !events.is_empty()
    }

    #[test]
    fn a_batch_gives_each_stream_its_packets_in_order_from_its_first() {
        let pool = pool();
        let mut f = FanOut::new(Vec::new());
        for (stream, seq) in [(4, 1), (2, 1), (4, 2), (7, 1), (2, 2), (4, 3)] {
            assert!(!f.queue(stream, packet(&pool, seq)));
        }
        let batch = f.take(false);
        assert!(f.is_empty());
        let streams: Vec<(usize, usize)> = batch.streams().collect();
        assert_eq!(streams, [(0, 4), (1, 2), (3, 7)]);
        let seqs = |first, s| {
            batch
                .packets(first, s)
                .map(|(p, _)| p.seq)
                .collect::<Vec<_>>()
        };
        assert_eq!(seqs(0, 4), [1, 2, 3]);
        assert_eq!(seqs(1, 2), [1, 2]);
        assert_eq!(seqs(3, 7), [1]);
        // The room comes back for the next batch.
        f.give_back(batch);
        assert!(f.is_empty());
        assert!(f.queue.capacity() >= FANOUT_BATCH);
    }

    /// A video packet of stream `stream`, layer `layer`, with a payload of `len` bytes.
    fn sized(pool: &BufferPool, stream: usize, layer: u8, len: usize) -> (usize, RingPacket) {
        let mut p = packet(pool, 0);
        p.layer = layer;
        p.payload = pool.alloc(len).freeze();
        (stream, p)
    }

    #[test]
    fn runs_of_near_equal_video_packets_are_padded_to_their_largest() {
        let pool = pool();
        let mut f = FanOut::new(Vec::new());
        let q = [
            // Stream 0: libwebrtc's "about equal" split (larger ones last), then a frame's
            // short last packet, which ends the run unpadded.
            sized(&pool, 0, 0, 1180),
            sized(&pool, 0, 0, 1180),
            sized(&pool, 0, 0, 1181),
            sized(&pool, 0, 0, 1181),
            sized(&pool, 0, 0, 300),
            // Stream 0 again, 20 bytes apart: more than MAX_PAD, a new run each.
            sized(&pool, 0, 0, 1000),
            sized(&pool, 0, 0, 1020),
            // Stream 3's packets are another run, whatever lies between; so is layer 1.
            sized(&pool, 3, 0, 990),
            sized(&pool, 0, 1, 700),
            sized(&pool, 3, 0, 1000),
            sized(&pool, 0, 1, 690),
            sized(&pool, 3, 0, 1006),
        ];
        for (stream, p) in q.iter().cloned() {
            f.queue(stream, p);
        }
        // Audio is never padded.
        let mut audio = packet(&pool, 9);
        audio.kind = MediaKind::Audio;
        audio.payload = pool.alloc(100).freeze();
        f.queue(0, audio);
        let batch = f.take(true);
        assert_eq!(batch.1, [1, 1, 0, 0, 0, 0, 0, 16, 0, 6, 10, 0, 0]);
        // Padded, every packet of a run is its run's largest (or a shorter last one).
        let sizes: Vec<usize> = batch
            .packets(0, 0)
            .map(|(p, pad)| p.payload.len() + usize::from(pad))
            .collect();
        assert_eq!(
            sizes,
            [1181, 1181, 1181, 1181, 300, 1000, 1020, 700, 700, 100]
        );
        f.give_back(batch);
        // Without GSO nothing is padded.
        for (stream, p) in q.iter().cloned() {
            f.queue(stream, p);
        }
        let batch = f.take(false);
        assert!(batch.1.iter().all(|&p| p == 0));
    }

    #[test]
    fn the_queue_asks_to_be_sent_when_a_batch_is_full() {
        let pool = pool();
        let mut f = FanOut::new(Vec::new());
        for seq in 1..FANOUT_BATCH as u64 {
            assert!(!f.queue(0, packet(&pool, seq)));
        }
        assert!(f.queue(0, packet(&pool, 99)));
    }

    #[test]
    fn peers_get_every_packet_and_one_wake_per_pass_and_full_queues_are_counted() {
        let pool = pool();
        let (a, a_rx, mut a_poll) = peer(8);
        let (b, b_rx, mut b_poll) = peer(1);
        let mut f = FanOut::new(vec![a, b]);
        assert_eq!(f.hand_over(3, &packet(&pool, 1)), 0);
        assert_eq!(f.hand_over(3, &packet(&pool, 2)), 1, "b holds one");
        f.reset(3);
        // Nobody is woken before the end of the pass, then each once.
        assert!(!woken(&mut a_poll) && !woken(&mut b_poll));
        f.wake();
        assert!(woken(&mut a_poll) && woken(&mut b_poll));
        f.wake();
        assert!(!woken(&mut a_poll) && !woken(&mut b_poll));
        let got: Vec<String> = a_rx
            .try_iter()
            .map(|d| match d {
                Data::Media { stream, pkt } => format!("media {stream} {}", pkt.seq),
                Data::Reset(stream) => format!("reset {stream}"),
                _ => "other".into(),
            })
            .collect();
        assert_eq!(got, ["media 3 1", "media 3 2", "reset 3"]);
        assert_eq!(b_rx.try_iter().count(), 1);
    }
}
