//! The counters the media threads share with the HTTP side (metrics, API, limits): relaxed
//! atomics, added once per batch on the per-packet path.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tern_proto::codec::VideoCodec;
use tern_proto::sdp::StreamVideo;

/// Counters shared with the HTTP side (metrics, API, limits).
#[derive(Debug, Default)]
pub struct EngineStats {
    /// Viewers currently held.
    pub viewers: AtomicUsize,
    /// Viewers whose DTLS handshake is not finished.
    pub handshakes: AtomicUsize,
    /// Viewers that completed the handshake, ever.
    pub handshakes_done: AtomicU64,
    /// Viewers that failed or timed out before connecting, ever.
    pub handshakes_failed: AtomicU64,
    /// SRTP packets sent.
    pub packets_out: AtomicU64,
    /// Bytes sent (SRTP/SRTCP/DTLS/STUN).
    pub bytes_out: AtomicU64,
    /// Packets retransmitted on NACK.
    pub retransmits: AtomicU64,
    /// Keyframe requests (PLI/FIR) received, before coalescing.
    pub keyframe_requests: AtomicU64,
    /// Datagrams received.
    pub packets_in: AtomicU64,
    /// Datagrams dropped: malformed, unknown sender, failed authentication.
    pub dropped_in: AtomicU64,
    /// Sends that failed (socket buffer full or error).
    pub send_errors: AtomicU64,
    /// Datagrams or packets dropped because a worker's queue was full (it fell behind), and
    /// RTMP publishers closed because their app worker's queue stayed full.
    pub queue_full: AtomicU64,
    /// Publishers (WHIP, RTMP) connected or connecting.
    pub publishers: AtomicUsize,
    /// Probe (padding) packets sent to viewers of simulcast streams to test their path.
    pub probe_packets: AtomicU64,
    /// Media packets received from publishers.
    pub ingest_packets: AtomicU64,
    /// Whether each stream is live (index as in the engine's streams).
    pub live: Vec<AtomicBool>,
    /// Whether each stream has a publisher, connected or connecting.
    pub publishing: Vec<AtomicBool>,
    /// Media packets sent per stream (index as in the engine's streams).
    pub stream_packets: Vec<AtomicU64>,
    /// Media bytes sent per stream.
    pub stream_bytes: Vec<AtomicU64>,
    /// Each stream's video as viewers are offered it: the codec's
    /// [`VideoCodec::index`] in bits 32-39 and, for H264, the profile-level-id of its last
    /// SPS in the low 24 bits with bit 24 set once one was seen (0: H264, SPS unknown).
    /// Written by the stream's owning worker only; read by the HTTP side.
    pub stream_video: Vec<AtomicU64>,
    /// The RIDs of each stream's simulcast layers, in layer order (empty without
    /// simulcast). Written by the owning worker when a WHIP publisher is added or leaves;
    /// read by the HTTP side to resolve a viewer's `?layer=`.
    pub stream_rids: Vec<Mutex<Arc<[Box<str>]>>>,
    /// Sequence numbers viewers of each stream NACKed.
    pub stream_nacks: Vec<AtomicU64>,
    /// PLI/FIR requests from viewers of each stream.
    pub stream_keyframe_requests: Vec<AtomicU64>,
    /// Packets viewers of each stream reported lost in their receiver reports (the growth
    /// of each viewer's cumulative-lost fields, RFC 3550 §6.4.1, summed).
    pub stream_reported_lost: Vec<AtomicU64>,
    /// TURN CreatePermission/ChannelBind (403) and Send indications refused by the peer
    /// policy (copied from the TURN worker once a second).
    pub turn_peer_refused: AtomicU64,
    /// TURN datagrams dropped by an allocation's bandwidth cap.
    pub turn_rate_limited: AtomicU64,
    /// TURN allocations refused by a quota (total, per user, per address).
    pub turn_quota_refusals: AtomicU64,
    /// Whether each stream is being packaged for LL-HLS: its owning worker then hands its
    /// ring packets to the HLS thread (WHIP and clip streams; RTMP ones are packaged from
    /// the connection's frames).
    pub hls_wanted: Vec<AtomicBool>,
    /// Ring packets not handed to the HLS thread because its queue was full.
    pub hls_tap_dropped: AtomicU64,
    /// Cached snapshots of viewers and streams, and the event bus.
    pub snapshots: crate::snapshot::Snapshots,
}

/// Bit 24 of [`EngineStats::stream_video`]: a profile-level-id was seen.
const PROFILE_SEEN: u64 = 1 << 24;

impl EngineStats {
    /// Stream `index`'s video: its codec and (H264) SPS profile-level-id if one was seen.
    pub fn video(&self, index: usize) -> StreamVideo {
        let Some(a) = self.stream_video.get(index) else {
            return StreamVideo::default();
        };
        let v = a.load(Ordering::Relaxed);
        StreamVideo {
            codec: VideoCodec::from_index((v >> 32) as u8),
            h264_profile: (v & PROFILE_SEEN != 0).then_some([
                (v >> 16) as u8,
                (v >> 8) as u8,
                v as u8,
            ]),
        }
    }

    /// Stream `index`'s simulcast RIDs in layer order (empty without simulcast).
    pub fn rids(&self, index: usize) -> Arc<[Box<str>]> {
        self.stream_rids
            .get(index)
            .and_then(|m| m.lock().ok().map(|r| r.clone()))
            .unwrap_or_else(|| Arc::new([]))
    }

    /// Records stream `index`'s simulcast RIDs.
    pub fn set_rids(&self, index: usize, rids: &[Box<str>]) {
        if let Some(Ok(mut r)) = self.stream_rids.get(index).map(Mutex::lock) {
            *r = rids.into();
        }
    }

    /// Records the profile-level-id of an SPS of stream `index`.
    pub fn set_h264_profile(&self, index: usize, id: [u8; 3]) {
        if let Some(a) = self.stream_video.get(index) {
            let codec = a.load(Ordering::Relaxed) & (0xff << 32);
            let v = codec
                | PROFILE_SEEN
                | u64::from(id[0]) << 16
                | u64::from(id[1]) << 8
                | u64::from(id[2]);
            a.store(v, Ordering::Relaxed);
        }
    }

    /// Records the codec of stream `index`'s new publisher; a change of codec forgets the
    /// H264 profile.
    pub fn set_video_codec(&self, index: usize, codec: VideoCodec) {
        if let Some(a) = self.stream_video.get(index) {
            let old = a.load(Ordering::Relaxed);
            let c = u64::from(codec.index()) << 32;
            if old & (0xff << 32) != c {
                a.store(c, Ordering::Relaxed);
            }
        }
    }
}
