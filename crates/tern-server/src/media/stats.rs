//! The counters the media threads share with the HTTP side (metrics, API, limits): relaxed
//! atomics, added once per batch on the per-packet path.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
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
    /// GSO messages sent (each one viewer's run of equal-size packets).
    pub gso_messages: AtomicU64,
    /// Datagrams that left inside GSO messages.
    pub gso_packets: AtomicU64,
    /// Batches sent again without GSO after a GSO send failed.
    pub gso_fallbacks: AtomicU64,
    /// Datagrams or packets dropped because a worker's queue was full (it fell behind), and
    /// Frame publishers closed because their app worker's queue stayed full.
    pub queue_full: AtomicU64,
    /// Publishers (every kind) connected or connecting.
    pub publishers: AtomicUsize,
    /// Probe (padding) packets sent to viewers of simulcast streams to test their path.
    pub probe_packets: AtomicU64,
    /// Media packets received from publishers.
    pub ingest_packets: AtomicU64,
    /// Each stream's counters and flags (index as in the engine's streams).
    pub streams: Vec<StreamCounters>,
    /// TURN CreatePermission/ChannelBind (403) and Send indications refused by the peer
    /// policy (copied from the TURN worker once a second).
    pub turn_peer_refused: AtomicU64,
    /// TURN datagrams dropped by an allocation's bandwidth cap.
    pub turn_rate_limited: AtomicU64,
    /// TURN allocations refused by a quota (total, per user, per address).
    pub turn_quota_refusals: AtomicU64,
    /// TURN datagrams relayed client → peer (copied from the TURN worker once a second).
    pub turn_to_peer: AtomicU64,
    /// Payload bytes of `turn_to_peer`.
    pub turn_to_peer_bytes: AtomicU64,
    /// TURN datagrams relayed peer → client.
    pub turn_to_client: AtomicU64,
    /// Payload bytes of `turn_to_client`.
    pub turn_to_client_bytes: AtomicU64,
    /// Ring packets not handed to the HLS thread because its queue was full.
    pub hls_tap_dropped: AtomicU64,
    /// Cached snapshots of viewers and streams, and the event bus.
    pub snapshots: crate::snapshot::Snapshots,
}

/// One stream's counters and flags, shared with the HTTP side. Written by the stream's
/// owning worker (the HLS flag by the HLS side); read by metrics, the API and the session
/// layer.
#[derive(Debug, Default)]
pub struct StreamCounters {
    /// Whether the stream is live (has media).
    pub live: AtomicBool,
    /// Whether it has a publisher, connected or connecting.
    pub publishing: AtomicBool,
    /// Whether it plays its slate (`[[app]] fallback`): live, with no publisher's media.
    pub slate: AtomicBool,
    /// Media packets sent to its viewers.
    pub packets: AtomicU64,
    /// Media bytes sent to its viewers.
    pub bytes: AtomicU64,
    /// Its video as viewers are offered it: the codec's [`VideoCodec::index`] in bits
    /// 32-39 and, for H264, the profile-level-id of its last SPS in the low 24 bits with bit
    /// 24 set once one was seen (0: H264, SPS unknown).
    pub video: AtomicU64,
    /// The RIDs of its simulcast layers, in layer order (empty without simulcast). Written
    /// when a WHIP publisher is added or leaves; read to resolve a viewer's `?layer=`.
    pub rids: Mutex<Arc<[Box<str>]>>,
    /// Sequence numbers its viewers NACKed.
    pub nacks: AtomicU64,
    /// PLI/FIR requests from its viewers.
    pub keyframe_requests: AtomicU64,
    /// Packets retransmitted to its viewers (NACKs answered within their budgets).
    pub retransmits: AtomicU64,

    /// Packets its viewers reported lost in their receiver reports (the growth of each
    /// viewer's cumulative-lost fields, RFC 3550 §6.4.1, summed).
    pub reported_lost: AtomicU64,
    /// Whether it is being packaged for LL-HLS: its owning worker then hands its ring
    /// packets to the media tap's thread (unless its publisher hands packagers its frames,
    /// `Source::packages_from_frames`), and a frame publisher turns its samples on.
    pub hls_wanted: AtomicBool,
    /// Whether it is being recorded (`crate::record`): as `hls_wanted`, for the recorder.
    pub record_wanted: AtomicBool,
    /// Whether someone asked for its thumbnail lately (`crate::thumbs`): as `hls_wanted`.
    pub thumb_wanted: AtomicBool,
    /// Whether some forward sends it on (`crate::forward`): as `hls_wanted`, for the
    /// forwards' outlet.
    pub forward_wanted: AtomicBool,
    /// Whether its WHIP publisher's renditions are made (`crate::feed::WhipRenditions`,
    /// from its top layer's ring packets): as `hls_wanted`. Set while such a publisher is
    /// on the stream.
    pub renditions_wanted: AtomicBool,
    /// For a publisher that hands packagers its frames (RTMP, SRT, RTSP-H264): what ingest
    /// adds (mod 2^32) to its video timestamps (PTS × 90) to make the stream's ring
    /// timestamps. LL-HLS puts the ring packets of its renditions back on the frames'
    /// clock with it.
    pub frame_ts_offset: AtomicU32,
}

impl StreamCounters {
    /// Counters for a stream that is live from the start (a built-in clip) or not.
    pub fn new(live: bool) -> Self {
        StreamCounters {
            live: AtomicBool::new(live),
            ..StreamCounters::default()
        }
    }

    /// Zeroes what a removed stream's slot must not pass to the next stream made in it:
    /// its traffic counters and its video (the flags are the engine's to clear).
    pub fn reset(&self) {
        for c in [
            &self.packets,
            &self.bytes,
            &self.video,
            &self.nacks,
            &self.keyframe_requests,
            &self.retransmits,
            &self.reported_lost,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// Bit 24 of [`StreamCounters::video`]: a profile-level-id was seen.
const PROFILE_SEEN: u64 = 1 << 24;

impl EngineStats {
    /// Stream `index`'s counters.
    pub fn stream(&self, index: usize) -> Option<&StreamCounters> {
        self.streams.get(index)
    }

    /// Stream `index`'s video: its codec and (H264) SPS profile-level-id if one was seen.
    pub fn video(&self, index: usize) -> StreamVideo {
        let Some(a) = self.stream(index).map(|c| &c.video) else {
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
        self.stream(index)
            .and_then(|c| c.rids.lock().ok().map(|r| r.clone()))
            .unwrap_or_else(|| Arc::new([]))
    }

    /// Records stream `index`'s simulcast RIDs.
    pub fn set_rids(&self, index: usize, rids: &[Box<str>]) {
        if let Some(Ok(mut r)) = self.stream(index).map(|c| c.rids.lock()) {
            // No layers is the shared empty slice (no allocation), as a new slot starts:
            // a slot that had a publisher holds no more heap than one that never did.
            *r = match rids {
                [] => Arc::default(),
                _ => rids.into(),
            };
        }
    }

    /// Records the profile-level-id of an SPS of stream `index`.
    pub fn set_h264_profile(&self, index: usize, id: [u8; 3]) {
        if let Some(a) = self.stream(index).map(|c| &c.video) {
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
        if let Some(a) = self.stream(index).map(|c| &c.video) {
            let old = a.load(Ordering::Relaxed);
            let c = u64::from(codec.index()) << 32;
            if old & (0xff << 32) != c {
                a.store(c, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reset_slot_passes_no_traffic_or_video_to_the_next_stream() {
        let stats = EngineStats {
            streams: (0..2).map(|i| StreamCounters::new(i == 0)).collect(),
            ..EngineStats::default()
        };
        let c = &stats.streams[1];
        for a in [
            &c.packets,
            &c.bytes,
            &c.nacks,
            &c.keyframe_requests,
            &c.reported_lost,
        ] {
            a.store(7, Ordering::Relaxed);
        }
        stats.set_video_codec(1, VideoCodec::Vp8);
        stats.set_rids(1, &["h".into()]);
        c.publishing.store(true, Ordering::Relaxed);
        c.reset();
        assert_eq!(c.packets.load(Ordering::Relaxed), 0);
        assert_eq!(c.bytes.load(Ordering::Relaxed), 0);
        assert_eq!(c.nacks.load(Ordering::Relaxed), 0);
        assert_eq!(c.keyframe_requests.load(Ordering::Relaxed), 0);
        assert_eq!(c.reported_lost.load(Ordering::Relaxed), 0);
        assert_eq!(stats.video(1), StreamVideo::default());
        // The flags and layers are the engine's: a reset leaves them.
        assert!(c.publishing.load(Ordering::Relaxed));
        assert_eq!(stats.rids(1).len(), 1);
        // Its neighbour is untouched: live from the start, as a clip is.
        assert!(stats.streams[0].live.load(Ordering::Relaxed));
        assert!(!c.live.load(Ordering::Relaxed));
    }
}
