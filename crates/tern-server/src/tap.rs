//! The media tap: where packagers (LL-HLS, recordings, thumbnails, forwards) and a WHIP
//! publisher's renditions take a stream's media, one door for every kind of publisher.
//!
//! A stream is tapped while any subscriber answers [`Subscriber::wanted`]. Its media comes
//! by one of two ways, and every subscriber gets both the same way:
//! - a frame publisher that hands packagers its frames (RTMP, SRT, RTSP-H264:
//!   [`crate::media::Source::packages_from_frames`]) calls [`MediaTap::sample`] from its
//!   own thread, through [`crate::feed::FrameSink`];
//! - for every other stream (WHIP, clip sources, edge pulls, a camera's H265), the owning
//!   app worker copies ring packets (a reference count, not the bytes) into a bounded
//!   queue, which the `MediaTap` thread drains into [`Subscriber::packet`]. The media path
//!   never waits on it: a full queue drops the packet and counts it.
//!
//! Each subscriber turns either into units with a [`tern_rtc::package::Feed`], whose
//! depacketizer is chosen from the stream's video codec: so every subscriber stores the
//! same codecs, those the codecs table ([`tern_rtc::codecs`]) gives LL-HLS and recordings.

use std::sync::Arc;

use crossbeam_channel::Receiver;
use tern_rtc::av::Sample;

use crate::media::TapPacket;
use tern_proto::codec::VideoCodec;
use tern_rtc::codecs::{Output, carried_by};
use tern_rtc::package::packaged;

/// Why stream `key`, whose video is `codec`, cannot be packaged (LL-HLS, a recording), or
/// `None` when it can: the one answer both give (the codecs table,
/// [`tern_rtc::codecs::TABLE`]).
pub fn refusal(key: &str, codec: VideoCodec) -> Option<String> {
    if packaged(codec) {
        return None;
    }
    let names: Vec<&str> = carried_by(Output::LlHls).map(|c| c.sdp_name()).collect();
    Some(format!(
        "LL-HLS and recordings package {} video; stream {key}'s video is {}",
        names.join(", "),
        codec.sdp_name()
    ))
}

/// A packager of streams' media.
pub trait Subscriber: Send + Sync {
    /// Whether it wants stream `stream`'s media now.
    fn wanted(&self, stream: usize) -> bool;
    /// A ring packet of stream `stream` (on the tap's thread); called only while
    /// [`Subscriber::wanted`] says so, and for a video layer other than the top only when
    /// [`Subscriber::takes_layers`].
    fn packet(&self, tap: &TapPacket);
    /// Whether it takes a stream's lower video layers too (simulcast layers, renditions:
    /// ring packets of layer 1 and up, even of a frame publisher). Default: no, the top
    /// layer only.
    fn takes_layers(&self) -> bool {
        false
    }
    /// A frame of stream `stream` from its publisher's thread; called only while
    /// [`Subscriber::wanted`] says so.
    fn sample(&self, stream: usize, sample: &Sample);
}

/// Every subscriber, asked in turn.
pub struct MediaTap {
    subscribers: Vec<Arc<dyn Subscriber>>,
}

impl std::fmt::Debug for MediaTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MediaTap")
            .field("subscribers", &self.subscribers.len())
            .finish()
    }
}

impl MediaTap {
    /// A tap for `subscribers`.
    pub fn new(subscribers: Vec<Arc<dyn Subscriber>>) -> MediaTap {
        MediaTap { subscribers }
    }

    /// Whether any subscriber wants stream `stream` (a frame publisher then emits samples).
    pub fn wanted(&self, stream: usize) -> bool {
        self.subscribers.iter().any(|s| s.wanted(stream))
    }

    /// Which subscribers want stream `stream`: bit `i` for the `i`th (at most 64).
    pub fn wanting(&self, stream: usize) -> u64 {
        self.subscribers
            .iter()
            .take(64)
            .enumerate()
            .filter(|(_, s)| s.wanted(stream))
            .fold(0, |m, (i, _)| m | 1 << i)
    }

    /// A frame publisher's sample, to each subscriber that wants the stream.
    pub fn sample(&self, stream: usize, sample: &Sample) {
        for s in &self.subscribers {
            if s.wanted(stream) {
                s.sample(stream, sample);
            }
        }
    }

    /// A ring packet, to each subscriber that wants its stream.
    pub fn packet(&self, tap: &TapPacket) {
        let lower = tap.pkt.layer != 0;
        for s in &self.subscribers {
            if s.wanted(tap.stream) && (!lower || s.takes_layers()) {
                s.packet(tap);
            }
        }
    }

    /// Starts the `MediaTap` thread: it hands each ring packet of `rx` to the subscribers
    /// and ends when the engine's workers (the senders) are gone.
    pub fn spawn(
        self: &Arc<Self>,
        rx: Receiver<TapPacket>,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        let tap = self.clone();
        std::thread::Builder::new()
            .name("MediaTap".into())
            .spawn(move || {
                while let Ok(t) = rx.recv() {
                    tap.packet(&t);
                }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_codec_of_the_table_is_refused() {
        for codec in carried_by(Output::LlHls) {
            assert_eq!(refusal("live/x", codec), None, "{codec}");
        }
        // The table takes every codec a publisher can send (AV1 since issue 54).
        for codec in [
            VideoCodec::H264,
            VideoCodec::Vp8,
            VideoCodec::Vp9,
            VideoCodec::Av1,
            VideoCodec::H265,
        ] {
            assert_eq!(refusal("live/x", codec), None, "{codec}");
        }
    }
}
