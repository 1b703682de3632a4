//! A ladder's lower variants: packagers that cut their segments where the top variant cut
//! its own, so that every variant's segment N starts at the same presentation time, under
//! the same number, on the same output timeline (players switch variants at segment
//! boundaries and expect them aligned, RFC 8216bis 6.2.4).
//!
//! The top variant cuts at its keyframes as any packager does, and reports each cut
//! ([`Packager::last_cut`]). Its owner hands the cut to every lower variant
//! ([`Packager::follow_cut`]) before their samples of that time, with their timestamps on the
//! top variant's clock. A lower variant cuts at the first sample at or after the cut,
//! keyframe or not: RTMP renditions are encoded with the source's keyframes, and a
//! simulcast encoder makes keyframes on every layer when asked, but a lower layer may miss
//! one. A segment that then starts without a keyframe is marked so (no
//! `INDEPENDENT=YES` on its first part, and the playlist drops `EXT-X-INDEPENDENT-SEGMENTS`).

use std::collections::VecDeque;

use super::{Cut, Driver, Packager, START_TOLERANCE};

/// How far (90 kHz ticks) a lower variant's sample may come before a cut and still be taken
/// as at it: half a frame at 30 fps.
const CUT_TOLERANCE: i64 = 1500;
/// The same for a keyframe: a frame at 30 fps.
const KEY_TOLERANCE: i64 = 3000;
/// Cuts remembered by a lower variant (a few segments' worth; older ones are passed).
pub(super) const MAX_CUTS: usize = 16;
/// Cuts a lower variant lets pass without a keyframe at one before it starts at a keyframe
/// elsewhere (a simulcast layer whose keyframes come apart from the top's).
const LATE_START_CUTS: u64 = 2;

impl Packager {
    /// Makes this packager a ladder's lower variant: from now on it cuts segments only at
    /// the cuts [`follow_cut`](Self::follow_cut) gives it, and starts only at a keyframe
    /// within a cut's segment.
    pub fn follow(&mut self) {
        if self.follow.is_none() {
            self.follow = Some(VecDeque::new());
        }
    }

    /// Makes this packager a video variant of a ladder whose audio is a rendition of its
    /// own: audio frames are still taken and placed (the top's
    /// [`audio_anchor`](Self::audio_anchor) is what the audio rendition follows) but none is
    /// stored, and the init segment has no audio track. Call before the first sample.
    pub fn audio_apart(&mut self) {
        self.audio_apart = true;
    }

    /// Makes this packager a ladder's audio rendition: it takes only audio, placing each
    /// frame where the top variant placed it (the anchor [`follow_audio`](Self::follow_audio)
    /// gives with the frame), and cuts its segments at the top's cuts
    /// ([`follow_cut`](Self::follow_cut)): its segment N starts with the first audio frame
    /// at or after the top's segment N, under the same number and date. Audio frames are
    /// all sync samples, so it starts in the segment the top is in. Its owner hands it a
    /// frame once the top's video has passed it ([`video_passed`](Self::video_passed)),
    /// so that the cut before it is known.
    pub fn audio_rendition(&mut self) {
        self.follow();
        self.rendition = true;
    }

    /// Whether this (top) variant's video has reached output time `audio_out` of its audio
    /// timeline (an [`audio_anchor`](Self::audio_anchor)'s second part): every cut up to
    /// that time is known.
    pub fn video_passed(&self, audio_out: u64) -> bool {
        let end = super::timeline::rescale(
            self.video.end,
            super::fmp4::VIDEO_TIMESCALE,
            self.audio.timescale,
        );
        end >= audio_out
    }

    /// The top variant started segment `cut.msn` (a lower variant's owner passes every
    /// [`last_cut`](Self::last_cut) of the top variant on, in order). Cuts that do not
    /// advance the sequence are ignored.
    pub fn follow_cut(&mut self, cut: Cut) {
        let Some(cuts) = &mut self.follow else {
            return;
        };
        if cuts.back().is_some_and(|c| c.msn >= cut.msn) {
            return;
        }
        cuts.push_back(cut);
        while cuts.len() > MAX_CUTS {
            cuts.pop_front();
        }
    }

    /// The input and output times (the audio's timescale) of the last audio frame placed, to
    /// hand to a ladder's lower variants ([`follow_audio`](Self::follow_audio)).
    pub fn audio_anchor(&self) -> Option<(i64, u64)> {
        self.audio
            .map
            .map(|_| (self.audio.last_in, self.audio.last_out))
    }

    /// The top variant placed its audio frame of input time `anchor.0` at output time
    /// `anchor.1` (its [`audio_anchor`](Self::audio_anchor)): this lower variant places the
    /// same audio at the same times (from its next frame that does not continue its own
    /// mapping), not by its own arrival, since its video comes later than the top's and the
    /// audio would land earlier than in the top.
    pub fn follow_audio(&mut self, anchor: Option<(i64, u64)>) {
        if self.follow.is_some() {
            self.follow_audio = anchor;
        }
    }

    /// The last segment a video keyframe started, in a packager that cuts at its own
    /// keyframes (the top variant of a ladder); `None` before the first.
    pub fn last_cut(&self) -> Option<Cut> {
        self.last_cut
    }

    /// Whether a video keyframe is wanted now: no segment is in progress (the next starts
    /// at one), or the one in progress has reached its target and ends at the next one
    /// (a WebRTC encoder sends keyframes only when asked). A ladder's lower variant in a
    /// segment wants none: it cuts where the top cuts.
    pub fn wants_keyframe(&self) -> bool {
        if !self.video_seen || self.holds_keyframe() {
            return false;
        }
        match self.segments.back() {
            Some(seg) if !seg.complete && self.driver == Some(Driver::Video) => {
                let target = super::timeline::ticks(
                    self.config.segment_target,
                    super::fmp4::VIDEO_TIMESCALE,
                );
                self.follow.is_none() && self.video.end.saturating_sub(seg.start) >= target
            }
            _ => true,
        }
    }

    /// Whether every segment held starts with a keyframe (`EXT-X-INDEPENDENT-SEGMENTS`).
    pub fn independent_segments(&self) -> bool {
        self.segments
            .iter()
            .all(super::playlist::starts_independent)
    }

    /// A lower variant's video sample: its output time, having cut the segment if a cut
    /// is due; `None` to drop it.
    pub(super) fn follow_position(
        &mut self,
        dts: i64,
        pts: i64,
        keyframe: bool,
        wall_ms: u64,
    ) -> Option<u64> {
        let cuts = self.follow.as_ref()?;
        let tolerance = if keyframe {
            KEY_TOLERANCE
        } else {
            CUT_TOLERANCE
        };
        // This layer's time on the top's clock.
        let top_pts = pts.saturating_add(self.follow_shift);
        let due = cuts
            .iter()
            .rev()
            .find(|c| top_pts.saturating_add(tolerance) >= c.pts)
            .copied();
        // The cut nearest a keyframe, within START_TOLERANCE, on this layer's own clock.
        let nearest = cuts
            .iter()
            .filter(|c| keyframe && c.msn >= self.next_msn)
            .min_by_key(|c| pts.abs_diff(c.pts))
            .filter(|c| pts.abs_diff(c.pts) <= START_TOLERANCE.unsigned_abs())
            .copied();
        if self.driver == Some(Driver::Video) && self.in_segment() {
            let out = self.video.out(dts)?;
            return self.follow_in_segment(Driver::Video, due, out, wall_ms);
        }
        // Not in a segment: it starts at a keyframe at a cut (the top's keyframe's picture).
        // One that has waited through [`LATE_START_CUTS`] cuts without one starts at a
        // keyframe inside a cut's segment (that first segment starts late; every later one
        // is cut with the top).
        let (cut, at_cut) = match nearest {
            Some(c) => (c, true),
            None => (due?, false),
        };
        let waited_from = *self.follow_waiting.get_or_insert(cut.msn);
        let late_ok = cut.msn >= waited_from + LATE_START_CUTS;
        if !keyframe || cut.msn < self.next_msn || !(at_cut || late_ok) {
            return None;
        }
        self.follow_waiting = None;
        if at_cut {
            self.follow_shift = cut.pts - pts;
        }
        if self.driver == Some(Driver::Audio) {
            self.break_stream();
        }
        if cut.msn != self.next_msn {
            self.skip_to(cut.msn);
        }
        // On the top variant's output timeline, never before where this one's video ended.
        // A keyframe at the cut is the top's keyframe's picture (its clock may be a little
        // off the top's): it is shown when that one is.
        let out = match at_cut {
            true => {
                let top_cts = i128::from(cut.pts) - i128::from(cut.dts);
                i128::from(cut.out) + top_cts - (i128::from(pts) - i128::from(dts))
            }
            // A late start: by its clock (corrected as far as it was measured before).
            false => {
                i128::from(cut.out) + i128::from(dts) + i128::from(self.follow_shift)
                    - i128::from(cut.dts)
            }
        };
        let out = u64::try_from(out.max(0)).ok()?.max(self.video.end);
        self.video.map = Some((dts, out));
        let started = self.start_cut(Driver::Video, cut, out, wall_ms);
        if started.is_none() {
            self.video.map = None;
        }
        started
    }

    /// An audio rendition's frame ([`audio_rendition`](Self::audio_rendition)) of input
    /// time `pts`, `continues` whether it follows its last frame: its output time, having
    /// cut the segment if a cut is due; `None` to drop it (no anchor yet, no cut yet).
    pub(super) fn rendition_position(
        &mut self,
        pts: i64,
        continues: bool,
        wall_ms: u64,
    ) -> Option<u64> {
        let scale = self.audio.timescale;
        let out = match self.follow_audio {
            // Where the top placed this very frame (its anchor comes with it).
            Some((at_in, at_out)) if at_in == pts || !continues => {
                let step = i128::from(pts) - i128::from(at_in);
                let out = i128::from(at_out) + step;
                let out = u64::try_from(out).ok()?.max(self.audio.end);
                self.audio.map = Some((pts, out));
                out
            }
            _ if continues => self.audio.out(pts)?,
            _ => return None,
        };
        let cuts = self.follow.as_ref()?;
        // Half an AAC frame of tolerance: the frame that straddles the cut starts the
        // segment.
        let half = i128::from(scale / 100);
        let cut_out =
            |c: &Cut| super::timeline::rescale(c.out, super::fmp4::VIDEO_TIMESCALE, scale);
        let due = cuts
            .iter()
            .rev()
            .find(|c| i128::from(out) + half >= i128::from(cut_out(c)))
            .copied();
        if self.driver == Some(Driver::Audio) && self.in_segment() {
            return self.follow_in_segment(Driver::Audio, due, out, wall_ms);
        }
        // Not in a segment: it starts in the segment the top is in.
        let cut = due.filter(|c| c.msn >= self.next_msn)?;
        if cut.msn != self.next_msn {
            self.skip_to(cut.msn);
        }
        self.start_cut(Driver::Audio, cut, out, wall_ms)
    }

    /// A follower's sample at output time `out` of `driver`'s track, inside a segment: the
    /// segment ends there when `due` (the top's latest cut at or before it) is a later
    /// one, else the sample joins it (parts close as in any packager; the segment does not
    /// end at a keyframe of this variant's own). Its output time, or `None` to drop it.
    fn follow_in_segment(
        &mut self,
        driver: Driver,
        due: Option<Cut>,
        out: u64,
        wall_ms: u64,
    ) -> Option<u64> {
        let current = self.segments.back().map_or(0, |s| s.msn);
        if let Some(cut) = due.filter(|c| c.msn > current) {
            // The last part keeps to the part target as a part closed within the segment
            // does (Chromium's lower layers skip frames: one lasting to the cut would make
            // the segment's last part longer).
            self.end_held_within_target(driver, out);
            self.close_segment(Some(out));
            if cut.msn != self.next_msn {
                self.skip_to(cut.msn);
            }
            return self.start_cut(driver, cut, out, wall_ms);
        }
        self.cut_before(driver, out, false, wall_ms).then_some(out)
    }

    /// Starts segment `cut.msn` (the next number) at output time `out` of `driver`'s
    /// track, dated as the top variant dated its own.
    fn start_cut(&mut self, driver: Driver, cut: Cut, out: u64, wall_ms: u64) -> Option<u64> {
        // Discontinuities as the top has them, so that segment `msn` has the same
        // discontinuity sequence number in every variant: this variant's output is on the
        // top's timeline, so a break of its own (a new configuration, a jump) needs no tag
        // the top does not have. A first segment takes the top's count so far.
        let tag = u64::from(cut.discontinuity);
        if self.segments.is_empty() {
            self.evicted_discontinuities = cut.discontinuity_sequence.saturating_sub(tag);
        }
        self.pending_discontinuity = cut.discontinuity;
        if !self.start_segment(driver, out, wall_ms) {
            return None;
        }
        // Dated as the top dated its own, moved by how far from it this one starts, never
        // before the end of the one before.
        let last_end = self.last_pdt_end;
        let scale = match driver {
            Driver::Video => super::fmp4::VIDEO_TIMESCALE,
            Driver::Audio => self.audio.timescale,
        };
        let cut_out = super::timeline::rescale(cut.out, super::fmp4::VIDEO_TIMESCALE, scale);
        if let Some(seg) = self.segments.back_mut() {
            let off_ms = (i128::from(out) - i128::from(cut_out)) * 1000 / i128::from(scale);
            let pdt = (i128::from(cut.pdt_ms) + off_ms).max(0);
            seg.pdt_ms = u64::try_from(pdt).unwrap_or(u64::MAX).max(last_end);
        }
        Some(out)
    }

    /// Jumps the sequence to `msn` (cuts were missed: this variant stalled or restarted).
    /// A playlist's numbers are consecutive, so the segments held are dropped; the next one
    /// takes the top's discontinuity count ([`Packager::start_cut`]).
    fn skip_to(&mut self, msn: u64) {
        self.close_segment(None);
        self.evict_to(0);
        self.next_msn = msn;
    }
}

#[cfg(test)]
mod tests {
    use super::super::sps::tests::{PPS_720P_HIGH, SPS_360P_BASELINE, SPS_720P_HIGH};
    use super::super::{HlsConfig, Packager, VideoConfig};
    use tern_pool::MemoryRegistry;

    /// 2026-11-25T16:00:00.000Z.
    const WALL0: u64 = 1_795_622_400_000;

    fn packager(sps: &[u8]) -> Packager {
        let counter = MemoryRegistry::new().counter("hls_parts", 0);
        let mut p = Packager::new(HlsConfig::default(), counter);
        p.set_video(VideoConfig::H264 {
            sps: sps.to_vec(),
            pps: PPS_720P_HIGH.to_vec(),
        });
        p
    }

    /// One slice NAL unit of `len` bytes in AVCC.
    fn au(keyframe: bool, len: usize) -> Vec<u8> {
        let mut slice = vec![if keyframe { 0x65 } else { 0x41 }; len];
        slice[1] = 0x88;
        let mut au = (len as u32).to_be_bytes().to_vec();
        au.extend_from_slice(&slice);
        au
    }

    /// The top's frame at `dts` (3,000 bytes), and its cut handed to `follower` as a
    /// ladder's owner does.
    fn top_frame(top: &mut Packager, follower: &mut Packager, dts: i64, key: bool, wall: u64) {
        top.push_video(dts, dts, key, &au(key, 3000), wall);
        if let Some(cut) = top.last_cut() {
            follower.follow_cut(cut);
        }
    }

    /// Frames at 30 fps for `secs`, the top layer with a keyframe every `top_gop` frames and
    /// the lower one every `low_gop` from frame `low_from` on. The top goes first at each
    /// time, and its cuts are handed down as a ladder's owner does.
    fn run(top_gop: i64, low_gop: i64, low_from: i64, secs: i64) -> (Packager, Packager) {
        run_shifted(top_gop, low_gop, low_from, secs, 0)
    }

    /// [`run`] with the lower layer's clock `shift` ticks off the top's (a simulcast layer
    /// lined up by arrival).
    fn run_shifted(
        top_gop: i64,
        low_gop: i64,
        low_from: i64,
        secs: i64,
        shift: i64,
    ) -> (Packager, Packager) {
        let mut top = packager(SPS_720P_HIGH);
        let mut low = packager(SPS_360P_BASELINE);
        low.follow();
        let dts0 = 123_456;
        for i in 0..secs * 30 {
            let dts = dts0 + i * 3000;
            let wall = WALL0 + (i * 1000 / 30) as u64;
            let key = i % top_gop == 0;
            top_frame(&mut top, &mut low, dts, key, wall);
            if i >= low_from {
                let key = (i - low_from) % low_gop == 0;
                low.push_video(dts + shift, dts + shift, key, &au(key, 800), wall + 3);
            }
        }
        (top, low)
    }

    #[test]
    fn a_lower_variant_cuts_where_the_top_cut_under_the_same_numbers() {
        // The lower layer joins 1 s in; keyframes come every second on both.
        let (top, low) = run(30, 30, 30, 12);
        let low_msns: Vec<u64> = low.segments.iter().map(|s| s.msn).collect();
        assert!(low_msns.len() >= 4, "{low_msns:?}");
        // Its first keyframe (1.0 s) is inside the top's first segment (0-2 s): it starts
        // at the next cut, with its keyframe at 2 s, and every segment is aligned.
        assert_eq!(low_msns[0], top.segments[1].msn, "{low_msns:?}");
        assert!(low_msns.windows(2).all(|w| w[1] == w[0] + 1));
        for seg in &low.segments {
            let t = top
                .segments
                .iter()
                .find(|t| t.msn == seg.msn)
                .expect("the top holds the same number");
            assert_eq!(
                seg.start, t.start,
                "segment {} starts with the top's",
                seg.msn
            );
            assert_eq!(seg.pdt_ms, t.pdt_ms, "segment {}'s date", seg.msn);
            if seg.complete && t.complete {
                assert_eq!(seg.duration, t.duration, "segment {}'s length", seg.msn);
            }
        }
        assert!(low.independent_segments());
        let text = low.media_playlist("").expect("a playlist");
        assert!(text.contains("#EXT-X-INDEPENDENT-SEGMENTS\n"), "{text}");
        assert_eq!(low.next_part().0, top.next_part().0);
    }

    #[test]
    fn a_lower_variants_last_part_before_a_cut_keeps_to_the_part_target() {
        // The top: 25 fps, a keyframe a second, cut every 2 s; its parts close after 12
        // frames (0.48 s), at frames 0, 12, 24, 36 and 48 of a segment. The lower layer skips
        // the three frames before every cut (a simulcast layer dropping frames): its frame
        // 46 lasts to the cut at 50, and the part from 36 would be 0.56 s.
        let mut top = packager(SPS_720P_HIGH);
        let mut low = packager(SPS_360P_BASELINE);
        low.follow();
        for i in 0..8 * 25 {
            let dts = 90_000 + i * 3600;
            let wall = WALL0 + (i * 1000 / 25) as u64;
            let key = i % 25 == 0;
            top_frame(&mut top, &mut low, dts, key, wall);
            if !(47..50).contains(&(i % 50)) {
                low.push_video(dts, dts, key, &au(key, 800), wall + 3);
            }
        }
        let complete: Vec<_> = low.segments.iter().filter(|s| s.complete).collect();
        assert!(complete.len() >= 2, "{}", complete.len());
        for seg in complete {
            let parts: Vec<u64> = seg.parts.iter().map(|p| p.duration).collect();
            assert!(
                parts.iter().all(|d| *d <= 45_000),
                "segment {}: {parts:?}",
                seg.msn
            );
            // The frame that lasted to the cut has a part of its own.
            assert_eq!(
                parts.last(),
                Some(&14_400),
                "segment {}: {parts:?}",
                seg.msn
            );
            assert_eq!(parts.iter().sum::<u64>(), seg.duration);
        }
    }

    #[test]
    fn a_lower_layer_clock_off_by_most_of_a_frame_still_cuts_at_its_keyframes() {
        // 28 ms and 100 ms early and late: Chromium's layers as ingest lines them up by
        // arrival.
        for shift in [-2556, 2556, -9000, 9000] {
            let (top, low) = run_shifted(30, 30, 0, 10, shift);
            assert_eq!(low.segments.len(), top.segments.len(), "shift {shift}");
            for (l, t) in low.segments.iter().zip(&top.segments) {
                assert_eq!(l.msn, t.msn);
                assert_eq!(l.start, t.start, "shift {shift}: on the top's timeline");
                let key = l.parts.first().is_some_and(|p| p.independent);
                assert!(key, "shift {shift}: segment {} starts at a keyframe", l.msn);
            }
        }
    }

    #[test]
    fn a_lower_variant_without_a_keyframe_at_a_cut_says_its_segment_is_not_independent() {
        // The top cuts every 2 s (keyframes every second); the lower layer has one every
        // 3 s, so its segments starting at 2, 4, 8 and 10 s have none.
        let (top, low) = run(30, 90, 0, 12);
        let starts: Vec<(u64, bool)> = low
            .segments
            .iter()
            .map(|s| (s.start, s.parts.first().is_some_and(|p| p.independent)))
            .collect();
        let top_starts: Vec<u64> = top.segments.iter().map(|s| s.start).collect();
        assert_eq!(
            starts.iter().map(|s| s.0).collect::<Vec<_>>(),
            top_starts,
            "the same cuts"
        );
        let independent: Vec<bool> = starts.iter().map(|s| s.1).collect();
        // Segments at 0, 2, 4, 6, 8, 10 s: keyframes at 0, 6 (and 3, 9 mid-segment).
        assert_eq!(
            &independent[..6],
            &[true, false, false, true, false, false][..(6.min(independent.len()))],
            "{starts:?}"
        );
        assert!(!low.independent_segments());
        let text = low.media_playlist("").expect("a playlist");
        assert!(!text.contains("#EXT-X-INDEPENDENT-SEGMENTS"), "{text}");
        assert!(top.independent_segments());
    }

    #[test]
    fn keyframes_are_wanted_to_start_and_once_a_segment_reaches_its_target() {
        let mut top = packager(SPS_720P_HIGH);
        let mut low = packager(SPS_360P_BASELINE);
        low.follow();
        assert!(
            top.wants_keyframe(),
            "configured, not started: it starts at one"
        );
        // A WebRTC encoder's stream: one keyframe, then none until asked.
        let mut wanted_at = None;
        for i in 0..90i64 {
            let dts = i * 3000;
            let wall = WALL0 + (i * 1000 / 30) as u64;
            top_frame(&mut top, &mut low, dts, i == 0, wall);
            low.push_video(dts, dts, i == 0, &au(i == 0, 800), wall);
            assert!(
                !low.wants_keyframe(),
                "in a segment, a lower variant waits for cuts"
            );
            if wanted_at.is_none() && top.wants_keyframe() {
                wanted_at = Some(i);
            }
        }
        // 2 s segments: wanted from the frame that takes the segment to 2 s.
        assert_eq!(wanted_at, Some(59));
        let fresh = packager(SPS_360P_BASELINE);
        assert!(fresh.wants_keyframe());
        let counter = MemoryRegistry::new().counter("hls_parts", 0);
        let audio_only = Packager::new(HlsConfig::default(), counter);
        assert!(
            !audio_only.wants_keyframe(),
            "no video: no keyframe to ask for"
        );
    }

    #[test]
    fn a_lower_variant_that_missed_cuts_jumps_ahead_with_the_tops_discontinuities() {
        let mut top = packager(SPS_720P_HIGH);
        let mut low = packager(SPS_360P_BASELINE);
        low.follow();
        for i in 0..12 * 30i64 {
            let dts = i * 3000;
            let wall = WALL0 + (i * 1000 / 30) as u64;
            let key = i % 30 == 0;
            top_frame(&mut top, &mut low, dts, key, wall);
            // The lower layer stops from 3 s to 7 s (a paused simulcast layer), and its
            // timestamps jump past the top's cuts in between.
            if !(90..210).contains(&i) {
                low.push_video(dts, dts, key, &au(key, 800), wall);
            }
        }
        let msns: Vec<u64> = low.segments.iter().map(|s| s.msn).collect();
        assert!(msns.windows(2).all(|w| w[1] == w[0] + 1), "{msns:?}");
        // Back at 7 s, inside the top's segment from 6 s, with its segment from 2 s still
        // open: that one ends, the ones before are dropped (numbers stay consecutive), and
        // it goes on from there, late, on the top's timeline.
        let find = |msn: u64| top.segments.iter().find(|t| t.msn == msn).expect("held");
        let first = &low.segments[0];
        let t = find(first.msn);
        assert_eq!(t.start, 6 * 90_000);
        assert_eq!(first.start, 7 * 90_000);
        // Its output stays on the top's timeline: no tag the top does not have, and the
        // same discontinuity sequence number.
        assert!(!first.discontinuity);
        assert_eq!(low.evicted_discontinuities, top.evicted_discontinuities);
        let second = &low.segments[1];
        assert_eq!(second.msn, first.msn + 1);
        assert_eq!(second.start, find(second.msn).start, "aligned again");
        assert!(!second.discontinuity);
    }

    /// The same audio frames get the same output times in a lower variant whose video comes
    /// 100 ms after the top's as in the top.
    #[test]
    fn a_lower_variant_maps_the_audio_as_the_top_does() {
        use super::super::AudioConfig;
        let aac = AudioConfig::Aac {
            asc: vec![0x11, 0x90],
            sample_rate: 48_000,
            channels: 2,
        };
        let mut top = packager(SPS_720P_HIGH);
        let mut low = packager(SPS_360P_BASELINE);
        top.set_audio(aac.clone());
        low.set_audio(aac);
        low.follow();
        let mut audio = 0i64;
        let mut outs = Vec::new();
        for i in 0..8 * 30i64 {
            let dts = 500_000 + i * 3000;
            let wall = WALL0 + (i * 1000 / 30) as u64;
            let key = i % 30 == 0;
            top_frame(&mut top, &mut low, dts, key, wall);
            low.push_video(dts, dts, key, &au(key, 800), wall + 100);
            // The audio starts half a second after the video (placed by arrival, it
            // would land 100 ms earlier in the lower variant than in the top).
            while i >= 15 && audio * 1024 * 1000 / 48_000 < (i + 1) * 1000 / 30 - 500 {
                let pts = 77_777 + audio * 1024;
                let at = WALL0 + 500 + (audio * 1024 * 1000 / 48_000) as u64;
                top.push_audio(pts, &[0x21; 100], at);
                low.follow_audio(top.audio_anchor());
                // The audio as the top took it (its arrival), the video 100 ms late (an
                // encoder's latency), as the ladder's queue hands them over.
                low.push_audio(pts, &[0x21; 100], at);
                audio += 1;
                if low.audio.map.is_some() {
                    outs.push((top.audio.last_out, low.audio.last_out));
                }
            }
        }
        assert!(
            outs.len() > 250,
            "{} audio frames in the lower variant",
            outs.len()
        );
        assert!(outs.iter().all(|(t, l)| t == l), "{:?}", &outs[..4]);
    }

    /// A ladder whose audio is a rendition: the top variant (audio apart) stores no audio,
    /// and the audio rendition, handed each frame with the top's anchor once the top's
    /// video has passed it, has the top's segment numbers, each starting with the first
    /// audio frame at or after the top's segment start, dated as the top's.
    #[test]
    fn an_audio_rendition_is_cut_and_dated_as_the_top() {
        use super::super::AudioConfig;
        use std::collections::VecDeque;
        let aac = AudioConfig::Aac {
            asc: vec![0x11, 0x90],
            sample_rate: 48_000,
            channels: 2,
        };
        let mut top = packager(SPS_720P_HIGH);
        top.audio_apart();
        top.set_audio(aac.clone());
        let counter = MemoryRegistry::new().counter("hls_parts", 0);
        let mut audio = Packager::new(HlsConfig::default(), counter);
        audio.audio_rendition();
        audio.set_audio(aac);
        // (pts, arrival, the top's anchor after taking it)
        type Held = (i64, u64, Option<(i64, u64)>);
        let mut held: VecDeque<Held> = VecDeque::new();
        let mut n = 0i64;
        for i in 0..12 * 30i64 {
            let dts = 900_000 + i * 3000;
            let wall = WALL0 + (i * 1000 / 30) as u64;
            let key = i % 30 == 0;
            top_frame(&mut top, &mut audio, dts, key, wall);
            // Audio a little ahead of the video (it is encoded faster).
            while n * 1024 * 1000 / 48_000 < (i + 3) * 1000 / 30 {
                let pts = 55_555 + n * 1024;
                let at = WALL0 + (n * 1024 * 1000 / 48_000) as u64;
                top.push_audio(pts, &[0x21; 100], at);
                held.push_back((pts, at, top.audio_anchor()));
                n += 1;
            }
            while let Some(&(pts, at, anchor)) = held.front() {
                if !anchor.is_some_and(|(_, out)| top.video_passed(out)) {
                    break;
                }
                held.pop_front();
                audio.follow_audio(anchor);
                audio.push_audio(pts, &[0x21; 100], at);
            }
        }
        assert_eq!(
            top.codecs().as_deref(),
            Some("avc1.64001f"),
            "no audio in the top"
        );
        let top_init = top.init(1).expect("the top's init");
        assert!(!top_init.windows(4).any(|w| w == b"mp4a"), "no audio track");
        // An audio frame is 100 bytes of 0x21: found in the rendition's parts only.
        let has_audio = |p: &Packager| {
            p.segments
                .iter()
                .flat_map(|s| &s.parts)
                .any(|p| p.data.windows(100).any(|w| w.iter().all(|b| *b == 0x21)))
        };
        assert!(!has_audio(&top), "the top stores no audio");
        assert!(has_audio(&audio), "the rendition does");
        assert_eq!(audio.codecs().as_deref(), Some("mp4a.40.2"));
        let msns: Vec<u64> = audio.segments.iter().map(|s| s.msn).collect();
        assert!(msns.len() >= 5, "{msns:?}");
        assert_eq!(
            msns[0], top.segments[0].msn,
            "it starts in the top's first segment"
        );
        for seg in &audio.segments {
            let t = top
                .segments
                .iter()
                .find(|t| t.msn == seg.msn)
                .expect("the top holds the same number");
            // In ms: the audio's first frame is at or after the top's start, within a frame.
            let top_ms = t.start * 1000 / 90_000;
            let audio_ms = seg.start * 1000 / 48_000;
            assert!(
                audio_ms + 11 >= top_ms && audio_ms <= top_ms + 22,
                "segment {}: audio at {audio_ms} ms, video at {top_ms} ms",
                seg.msn
            );
            assert!(
                seg.pdt_ms.abs_diff(t.pdt_ms) <= 22,
                "segment {}'s date: {} against {}",
                seg.msn,
                seg.pdt_ms,
                t.pdt_ms
            );
            if seg.complete && seg.msn > msns[0] {
                let secs = seg.duration as f64 / 48_000.0;
                assert!((secs - 2.0).abs() < 0.03, "segment {}: {secs} s", seg.msn);
            }
        }
        assert!(audio.independent_segments());
        assert!(!audio.wants_keyframe());
    }

    #[test]
    fn a_lower_variant_has_the_tops_discontinuity_sequence_numbers() {
        let mut top = packager(SPS_720P_HIGH);
        let mut low = packager(SPS_360P_BASELINE);
        low.follow();
        // The top's timeline jumps twice (a new publisher: 10 s ahead each time); the lower
        // layer joins after the first jump.
        for i in 0..24 * 30i64 {
            let jump = (i / (8 * 30)) * 10 * 90_000;
            let dts = i * 3000 + jump;
            let wall = WALL0 + (i * 1000 / 30) as u64;
            let key = i % 30 == 0;
            top_frame(&mut top, &mut low, dts, key, wall);
            if i >= 10 * 30 {
                low.push_video(dts, dts, key, &au(key, 800), wall);
            }
        }
        // The discontinuity sequence number of each segment both hold.
        let seq = |p: &Packager, msn: u64| {
            let mut n = p.evicted_discontinuities;
            for s in &p.segments {
                n += u64::from(s.discontinuity);
                if s.msn == msn {
                    return Some(n);
                }
            }
            None
        };
        let mut compared = 0;
        for s in &low.segments {
            assert_eq!(seq(&low, s.msn), seq(&top, s.msn), "segment {}", s.msn);
            compared += 1;
        }
        assert!(compared >= 4 && seq(&top, top.segments.back().expect("held").msn) == Some(2));
        let text = low.media_playlist("").expect("a playlist");
        let top_text = top.media_playlist("").expect("a playlist");
        let tag = |t: &str| {
            t.lines()
                .find(|l| l.starts_with("#EXT-X-DISCONTINUITY-SEQUENCE:"))
                .map(str::to_string)
        };
        let first = |t: &str| {
            t.lines()
                .find(|l| l.starts_with("#EXT-X-MEDIA-SEQUENCE:"))
                .map(str::to_string)
        };
        if first(&text) == first(&top_text) {
            assert_eq!(tag(&text), tag(&top_text));
        }
    }
}
