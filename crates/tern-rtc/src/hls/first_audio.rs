//! The first segment waits a moment for audio that is coming.
//!
//! A stream's audio configuration is often known only at its first audio frame (WebRTC's
//! Opus, AAC in MPEG-TS), which can come after the first video keyframe. Started on that
//! keyframe, the stream's first init segment would have no audio track, and the audio would
//! bring a second init after `EXT-X-DISCONTINUITY`. Players do not all take that: ffmpeg's
//! HLS reader keeps the first init's tracks and reads the new fragments wrong, and hls.js
//! made its source buffers for video alone. So a packager told to
//! ([`Packager::await_audio`]) holds the video from the first keyframe until the audio is
//! configured, or the wait ends (a stream without audio), then places what it held with
//! the times it arrived: nothing is lost, the start is only later.

use std::time::Duration;

use tern_pool::PoolCounter;

use super::Packager;

/// Bytes held at most (about a second of 30 Mbit/s video): beyond, the video is released
/// without audio.
const MAX_HELD_BYTES: usize = 4 << 20;
/// Samples held at most (a second at 240 fps): beyond, the same.
const MAX_HELD_SAMPLES: usize = 240;

/// Video held before the first segment.
#[derive(Debug)]
pub(super) struct AudioWait {
    wait_ms: u64,
    /// When the wait ends: the first keyframe's arrival plus the wait.
    deadline: Option<u64>,
    held: Vec<Held>,
    bytes: usize,
    /// The packager's memory counter (`hls_segments`): a held sample counts in it as an
    /// item of its bytes, with its buffer's capacity reserved, until it is placed or dropped.
    counter: PoolCounter,
}

impl AudioWait {
    /// Takes the held samples out of the wait and out of the memory counter.
    fn take_held(&mut self) -> Vec<Held> {
        let held = std::mem::take(&mut self.held);
        self.counter.sub(held.len(), self.bytes);
        self.counter
            .unreserve(held.iter().map(|h| h.data.capacity()).sum());
        self.bytes = 0;
        held
    }
}

impl Drop for AudioWait {
    /// A packager dropped while it holds video (its stream gone) leaves nothing counted.
    fn drop(&mut self) {
        self.take_held();
    }
}

/// One video sample held, as [`Packager::place_video`] takes it.
#[derive(Debug)]
struct Held {
    dts: i64,
    pts: i64,
    keyframe: bool,
    data: Vec<u8>,
    wall_ms: u64,
}

impl Packager {
    /// Before its first segment, holds the video for up to `wait` after the first keyframe
    /// while no audio is configured, so that the first init segment has the audio track
    /// too (see the [module](self)). For a stream that has audio, or may have: a stream
    /// without it starts `wait` later. A ladder's variants and audio rendition do not wait
    /// (their audio is apart). Call before the first sample.
    pub fn await_audio(&mut self, wait: Duration) {
        self.audio_wait = Some(AudioWait {
            wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            deadline: None,
            held: Vec::new(),
            bytes: 0,
            counter: self.counter.clone(),
        });
    }

    /// Whether a well-formed video sample is held for the audio (else the caller places
    /// it, after anything held before it).
    pub(super) fn hold_for_audio(
        &mut self,
        dts: i64,
        pts: i64,
        keyframe: bool,
        sample: &[u8],
        wall_ms: u64,
    ) -> bool {
        let waits = self.audio_cfg.is_none()
            && self.inits.is_empty()
            && !self.audio_apart
            && !self.rendition
            && self.follow.is_none();
        let Some(w) = self.audio_wait.as_mut().filter(|_| waits) else {
            self.release_video();
            return false;
        };
        if w.held.is_empty() && !keyframe {
            // Nothing can start here: the caller drops it as before any keyframe.
            return false;
        }
        let deadline = *w
            .deadline
            .get_or_insert_with(|| wall_ms.saturating_add(w.wait_ms));
        let fits = w.bytes + sample.len() <= MAX_HELD_BYTES && w.held.len() < MAX_HELD_SAMPLES;
        if wall_ms >= deadline || !fits {
            self.release_video();
            return false;
        }
        let data = sample.to_vec();
        w.bytes += data.len();
        w.counter.add(1, data.len());
        w.counter.reserve(data.capacity());
        w.held.push(Held {
            dts,
            pts,
            keyframe,
            data,
            wall_ms,
        });
        true
    }

    /// Whether a keyframe is held (the stream needs no other to start).
    pub(super) fn holds_keyframe(&self) -> bool {
        self.audio_wait.as_ref().is_some_and(|w| !w.held.is_empty())
    }

    /// A new video configuration while video is held: what was held belongs to the old
    /// one and nothing was published, so it is dropped (counted) and the wait goes on, to
    /// its first deadline, from the new configuration's keyframe.
    pub(super) fn drop_held(&mut self) {
        if let Some(w) = self.audio_wait.as_mut() {
            self.stats.dropped_samples += w.take_held().len() as u64;
        }
    }

    /// Ends the wait: places the video held, in order. Called when audio is configured,
    /// the video configuration changes, the stream finishes, or the wait is over.
    pub(super) fn release_video(&mut self) {
        let Some(mut w) = self.audio_wait.take() else {
            return;
        };
        for h in w.take_held() {
            self.place_video(h.dts, h.pts, h.keyframe, &h.data, h.wall_ms);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use mp4_atom::{Decode, Ftyp, Moov};
    use tern_pool::MemoryRegistry;

    use crate::hls::{AudioConfig, HlsConfig, Packager, VideoConfig};

    const SPS: &[u8] = &[
        0x67, 0x42, 0xc0, 0x1e, 0xd9, 0x00, 0xa0, 0x47, 0xfe, 0xc8, 0x05, 0x10, 0x00, 0x00, 0x03,
        0x00, 0x10, 0x00, 0x00, 0x03, 0x03, 0xc0, 0xf1, 0x62, 0xe4, 0x80,
    ];
    const PPS: &[u8] = &[0x68, 0xce, 0x3c, 0x80];

    fn packager() -> Packager {
        let mut p = Packager::new(
            HlsConfig::default(),
            MemoryRegistry::new().counter("hls_parts", 0),
        );
        p.await_audio(Duration::from_millis(1000));
        // Configured after the wait is set, as VP8, VP9 and AV1 are by their first keyframe.
        p.set_video(VideoConfig::H264 {
            sps: SPS.to_vec(),
            pps: PPS.to_vec(),
        });
        p
    }

    /// One 30 fps access unit (an IDR slice every 60 frames) at frame `i`, arrived at
    /// `1_000_000 + 33 i` ms.
    fn push_frame(p: &mut Packager, i: i64) {
        push(p, i, i % 60 == 0);
    }

    /// Frame `i` as [`push_frame`], an IDR if `idr`.
    fn push(p: &mut Packager, i: i64, idr: bool) {
        let nal: &[u8] = if idr {
            &[0x65, 0x88, 1, 2]
        } else {
            &[0x41, 0x9a, 1, 2]
        };
        let mut avcc = (nal.len() as u32).to_be_bytes().to_vec();
        avcc.extend_from_slice(nal);
        p.push_video(i * 3000, i * 3000, idr, &avcc, 1_000_000 + 33 * i as u64);
    }

    fn tracks(p: &Packager, version: u32) -> usize {
        let init = p.init(version).expect("an init segment");
        let mut buf = init.as_slice();
        Ftyp::decode(&mut buf).expect("ftyp");
        Moov::decode(&mut buf).expect("moov").trak.len()
    }

    #[test]
    fn audio_after_the_first_keyframe_is_in_the_first_init() {
        let mut p = packager();
        for i in 0..5 {
            push_frame(&mut p, i);
        }
        assert!(!p.in_progress(), "the video is held while audio is awaited");
        assert_eq!(p.init(1), None);
        p.set_audio(AudioConfig::Opus { channels: 2 });
        assert!(
            p.in_progress(),
            "audio configured: the held video starts the stream"
        );
        p.push_audio(0, &[0xfc, 1, 2, 3], 1_000_000 + 140);
        for i in 5..130 {
            push_frame(&mut p, i);
        }
        assert_eq!(tracks(&p, 1), 2, "the first init has video and audio");
        assert_eq!(p.init(2), None, "and there is no second one");
        assert_eq!(p.stats().discontinuities, 0);
        // Nothing held was lost: 130 frames in.
        let video_samples: u64 = p.stats().samples_in;
        assert_eq!(
            video_samples, 131,
            "130 video samples and one audio frame counted once"
        );
        assert_eq!(p.stats().dropped_samples, 0);
    }

    /// Held video is in the memory report (the packager's `hls_segments` line) while held,
    /// and leaves it when dropped for a new configuration or with the packager.
    #[test]
    fn held_video_is_counted_until_it_is_placed_or_dropped() {
        let counter = MemoryRegistry::new().counter("hls_segments", 0);
        let mut p = Packager::new(HlsConfig::default(), counter.clone());
        p.await_audio(Duration::from_millis(1000));
        p.set_video(VideoConfig::H264 {
            sps: SPS.to_vec(),
            pps: PPS.to_vec(),
        });
        for i in 0..5 {
            push_frame(&mut p, i);
        }
        let r = counter.report();
        // Five access units of 8 bytes (a 4-byte length and a 4-byte NAL unit).
        assert_eq!((r.items_in_use, r.used_bytes), (5, 40), "{r:?}");
        assert!(r.allocated_bytes >= 40, "{r:?}");
        // A new configuration drops what was held.
        p.set_video(VideoConfig::H264 {
            sps: SPS.to_vec(),
            pps: [PPS, &[0]].concat(),
        });
        let r = counter.report();
        assert_eq!(
            (r.items_in_use, r.used_bytes, r.allocated_bytes),
            (0, 0, 0),
            "{r:?}"
        );
        // Held again from the new configuration's keyframe (before the first deadline).
        for i in 0..3 {
            push_frame(&mut p, i);
        }
        assert_eq!(counter.report().items_in_use, 3);
        drop(p);
        let r = counter.report();
        assert_eq!(
            (r.items_in_use, r.used_bytes, r.allocated_bytes),
            (0, 0, 0),
            "{r:?}"
        );
    }

    #[test]
    fn without_audio_the_video_starts_when_the_wait_ends() {
        let mut p = packager();
        // 31 frames: 990 ms after the first keyframe, still waiting.
        for i in 0..31 {
            push_frame(&mut p, i);
        }
        assert!(!p.in_progress());
        // The frame at 1023 ms ends the wait; everything held is placed from frame 0.
        push_frame(&mut p, 31);
        assert!(p.in_progress());
        assert_eq!(tracks(&p, 1), 1, "a video-only init");
        for i in 32..130 {
            push_frame(&mut p, i);
        }
        assert_eq!(p.stats().dropped_samples, 0);
        assert!(p.has_complete_segment());
        let first = &p.segments[0];
        assert_eq!(first.msn, 0);
        assert_eq!(first.start, 0, "from the first keyframe held");
        assert_eq!(
            first.video_samples, 60,
            "frames 0-59: the held ones included"
        );
    }

    #[test]
    fn a_new_video_configuration_while_holding_drops_the_old_and_waits_on() {
        let mut p = packager();
        for i in 0..5 {
            push_frame(&mut p, i);
        }
        assert!(!p.wants_keyframe(), "a keyframe is held");
        // The encoder restarts with another SPS (a level change) before audio came.
        let mut sps = SPS.to_vec();
        sps[3] = 0x1f;
        p.set_video(VideoConfig::H264 {
            sps,
            pps: PPS.to_vec(),
        });
        assert_eq!(
            p.stats().dropped_samples,
            5,
            "the old configuration's video"
        );
        assert!(!p.in_progress(), "still waiting");
        // Its first keyframe, 330 ms in: held to the first deadline.
        for i in 10..15 {
            push(&mut p, i, i == 10);
        }
        assert!(!p.in_progress());
        p.set_audio(AudioConfig::Opus { channels: 2 });
        assert!(p.in_progress());
        for i in 15..130 {
            push(&mut p, i, i % 30 == 10);
        }
        assert_eq!(
            tracks(&p, 1),
            2,
            "one init, with the new video and the audio"
        );
        assert_eq!(p.init(2), None);
        assert_eq!(p.stats().discontinuities, 0);
    }

    #[test]
    fn finish_places_what_is_held() {
        let mut p = packager();
        for i in 0..10 {
            push_frame(&mut p, i);
        }
        p.finish();
        assert_eq!(p.stats().dropped_samples, 0);
        assert_eq!(p.segments.len(), 1);
        assert_eq!(
            p.segments[0].video_samples, 10,
            "the held frames, in a closed segment"
        );
    }

    #[test]
    fn frames_before_the_first_keyframe_are_not_held() {
        let mut p = packager();
        for i in 50..60 {
            push_frame(&mut p, i);
        }
        assert_eq!(
            p.stats().dropped_samples,
            10,
            "dropped as before any keyframe"
        );
        push_frame(&mut p, 60);
        assert_eq!(p.stats().dropped_samples, 10, "the keyframe is held");
        assert!(!p.in_progress());
    }
}
