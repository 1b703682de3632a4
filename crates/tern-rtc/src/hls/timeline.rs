//! The packager's state machine: samples onto the output timeline, cut into parts and
//! segments, and the window of segments held.

use std::sync::Arc;
use std::time::Duration;

use super::fmp4::{self, AUDIO_TRACK_ID, Run, SampleInfo, VIDEO_TIMESCALE, VIDEO_TRACK_ID};
use super::{AudioConfig, Driver, Epoch, Packager, PartEntry, Segment, Track};
use crate::clip::opus_packet_samples;

/// A timestamp step beyond this (or backwards) is a new timeline (a new publisher).
const MAX_STEP: Duration = Duration::from_secs(5);
/// Without video, audio-only packaging starts after audio has flowed this long, so that a
/// stream whose first video access unit comes a little after its audio is not taken for
/// audio-only.
const AUDIO_ONLY_GRACE_MS: u64 = 1000;
/// Audio frames queued while video does not close parts (a stalled video track); the oldest
/// are dropped beyond this (about 20 s of AAC or Opus).
const MAX_PENDING_AUDIO: usize = 1000;
/// A segment without a keyframe for this many segment targets is closed, and the stream
/// restarts at the next keyframe (bounds memory on a stream that stopped sending them).
const MAX_SEGMENT_TARGETS: u32 = 10;
/// Duration assumed for a lone first video sample (30 fps) until a second one arrives.
const DEFAULT_VIDEO_DURATION: u32 = VIDEO_TIMESCALE / 30;

/// `v` from timescale `from` to `to`, saturating.
pub(crate) fn rescale(v: u64, from: u32, to: u32) -> u64 {
    let r = u128::from(v) * u128::from(to) / u128::from(from.max(1));
    u64::try_from(r).unwrap_or(u64::MAX)
}

/// A duration in ticks of `timescale`.
pub(crate) fn ticks(d: Duration, timescale: u32) -> u64 {
    let r = d.as_nanos() * u128::from(timescale) / 1_000_000_000;
    u64::try_from(r).unwrap_or(u64::MAX)
}

/// A duration in whole seconds, rounded up.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

impl Track {
    pub(super) fn new(timescale: u32) -> Track {
        Track {
            timescale,
            samples: Vec::new(),
            data: Vec::new(),
            held: false,
            held_nominal: 0,
            map: None,
            last_in: 0,
            last_out: 0,
            last_wall: 0,
            end: 0,
        }
    }

    /// Output time of input timestamp `ts` (at or after the mapping's base).
    pub(super) fn out(&self, ts: i64) -> Option<u64> {
        let (in_base, out_base) = self.map?;
        let delta = u64::try_from(i128::from(ts) - i128::from(in_base)).ok()?;
        out_base.checked_add(delta)
    }

    /// Whether `ts` continues the track's timeline: after the last timestamp, by at most
    /// [`MAX_STEP`]. `None` for the same timestamp again.
    fn continues(&self, ts: i64) -> Option<bool> {
        let step = i128::from(ts) - i128::from(self.last_in);
        if step == 0 {
            return None;
        }
        Some(step > 0 && step <= i128::from(ticks(MAX_STEP, self.timescale)))
    }

    /// Gives the held sample its duration: up to `next_out` if that is after it, else its
    /// fallback duration.
    fn finish_held(&mut self, next_out: Option<u64>) {
        if !self.held {
            return;
        }
        self.held = false;
        let fallback = self.held_nominal.max(1);
        let Some(last) = self.samples.last_mut() else {
            return;
        };
        let step = next_out.and_then(|n| n.checked_sub(last.dts));
        last.duration = step
            .and_then(|d| u32::try_from(d).ok())
            .filter(|d| *d > 0)
            .unwrap_or(fallback);
        self.held_nominal = last.duration;
        self.end = last.dts + u64::from(last.duration);
    }

    fn push(&mut self, sample: SampleInfo, data: &[u8], nominal: u32, wall_ms: u64) {
        self.last_out = sample.dts;
        self.last_wall = wall_ms;
        self.samples.push(sample);
        self.data.extend_from_slice(data);
        self.held = true;
        self.held_nominal = nominal;
        self.end = sample.dts + u64::from(nominal);
    }

    /// Samples whose duration is known.
    fn complete(&self) -> usize {
        self.samples.len() - usize::from(self.held)
    }

    /// Removes the first `n` samples and their bytes.
    fn drain(&mut self, n: usize) {
        let bytes: usize = self.samples[..n].iter().map(|s| s.size as usize).sum();
        self.samples.drain(..n);
        self.data.drain(..bytes);
    }
}

impl Packager {
    pub(super) fn config_changed(&mut self) {
        self.init_dirty = true;
        if self.driver.is_some() {
            self.break_stream();
        }
    }

    /// Closes the segment in progress; the next segment starts at the next sample that may
    /// start one, with a discontinuity, each track rebased.
    pub(super) fn break_stream(&mut self) {
        self.close_segment(None);
        self.video.map = None;
        self.audio.map = None;
        self.pending_discontinuity = self.next_msn > 0;
    }

    fn drop_sample(&mut self) {
        self.stats.dropped_samples += 1;
    }

    pub(super) fn in_segment(&self) -> bool {
        self.segments.back().is_some_and(|s| !s.complete)
    }

    pub(super) fn video_sample(
        &mut self,
        dts: i64,
        pts: i64,
        keyframe: bool,
        well_formed: bool,
        sample: &[u8],
        wall_ms: u64,
    ) {
        self.video_seen = true;
        self.stats.samples_in += 1;
        let size = u32::try_from(sample.len()).ok().filter(|s| *s > 0);
        let (true, Some(_), Some(_)) = (well_formed, size, &self.video_cfg) else {
            return self.drop_sample();
        };
        if self.audio_wait.is_some() && self.hold_for_audio(dts, pts, keyframe, sample, wall_ms) {
            return;
        }
        self.place_video(dts, pts, keyframe, sample, wall_ms);
    }

    /// A counted, well-formed video sample onto the timeline.
    pub(super) fn place_video(
        &mut self,
        dts: i64,
        pts: i64,
        keyframe: bool,
        sample: &[u8],
        wall_ms: u64,
    ) {
        // The caller checked that the size fits.
        let size = u32::try_from(sample.len()).unwrap_or(u32::MAX);
        if self.video.map.is_some() {
            match self.video.continues(dts) {
                None => return self.drop_sample(),
                Some(false) => self.break_stream(),
                Some(true) => {}
            }
        }
        let msn_before = self.next_msn;
        let out = if self.follow.is_some() {
            match self.follow_position(dts, pts, keyframe, wall_ms) {
                Some(out) => out,
                None => return self.drop_sample(),
            }
        } else if self.driver == Some(Driver::Video) && self.in_segment() {
            let Some(out) = self.video.out(dts) else {
                return self.drop_sample();
            };
            if !self.cut_before(Driver::Video, out, keyframe, wall_ms) {
                return self.drop_sample();
            }
            out
        } else {
            if !keyframe {
                return self.drop_sample();
            }
            if self.driver == Some(Driver::Audio) {
                self.break_stream();
            }
            let out = self.video.end.max(rescale(
                self.audio.end,
                self.audio.timescale,
                VIDEO_TIMESCALE,
            ));
            self.video.map = Some((dts, out));
            if !self.start_segment(Driver::Video, out, wall_ms) {
                self.video.map = None;
                return self.drop_sample();
            }
            out
        };
        if self.follow.is_none()
            && self.next_msn != msn_before
            && let Some(seg) = self.segments.back()
        {
            let tags = self.segments.iter().filter(|s| s.discontinuity).count() as u64;
            self.last_cut = Some(super::Cut {
                msn: seg.msn,
                dts,
                pts,
                out,
                discontinuity: seg.discontinuity,
                discontinuity_sequence: self.evicted_discontinuities + tags,
                pdt_ms: seg.pdt_ms,
            });
        }
        let cts = (i128::from(pts) - i128::from(dts)).clamp(i32::MIN.into(), i32::MAX.into());
        let info = SampleInfo {
            dts: out,
            duration: 0,
            size,
            cts: cts as i32,
            sync: keyframe,
        };
        // Until the next sample arrives, its duration is assumed to be the previous one's.
        let nominal = match self.video.held_nominal {
            0 => DEFAULT_VIDEO_DURATION,
            d => d,
        };
        self.video.push(info, sample, nominal, wall_ms);
        self.video.last_in = dts;
    }

    pub(super) fn audio_frame(&mut self, pts: i64, data: &[u8], wall_ms: u64) {
        self.stats.samples_in += 1;
        let nominal = match &self.audio_cfg {
            Some(AudioConfig::Aac { .. }) => Some(1024),
            Some(AudioConfig::Opus { .. }) => opus_packet_samples(data),
            None => None,
        };
        let size = u32::try_from(data.len()).ok().filter(|s| *s > 0);
        let (Some(nominal), Some(size)) = (nominal, size) else {
            return self.drop_sample();
        };
        let continues = match self.audio.map {
            Some(_) => match self.audio.continues(pts) {
                None => return self.drop_sample(),
                Some(c) => c,
            },
            None => false,
        };
        let out = match self.driver {
            _ if self.rendition => match self.rendition_position(pts, continues, wall_ms) {
                Some(out) => out,
                None => return self.drop_sample(),
            },
            Some(Driver::Video) if self.in_segment() => {
                // A ladder's lower variant takes the top's mapping of the same audio.
                let anchor = self.follow_audio.filter(|(at_in, _)| {
                    let step = i128::from(pts) - i128::from(*at_in);
                    step >= 0 && step <= i128::from(ticks(MAX_STEP, self.audio.timescale))
                });
                let out = if continues {
                    self.audio.out(pts)
                } else if let Some((at_in, at_out)) = anchor {
                    self.audio.map = Some((at_in, at_out));
                    self.audio.out(pts).map(|o| o.max(self.audio.end))
                } else {
                    // First frame since the (re)start, or a jump of the audio clock: placed
                    // by arrival time (relative to the epoch, or to the last frame), never
                    // before where the track ended, nor more than MAX_STEP past the video.
                    let scale = self.audio.timescale;
                    let latest = rescale(self.video.end, VIDEO_TIMESCALE, scale)
                        .saturating_add(ticks(MAX_STEP, scale));
                    let (from_out, from_wall) = match (self.audio.map, self.epoch) {
                        (Some(_), _) => (self.audio.last_out, self.audio.last_wall),
                        (None, Some(e)) => (rescale(e.out, e.timescale, scale), e.wall_ms),
                        (None, None) => (0, wall_ms),
                    };
                    let since = rescale(wall_ms.saturating_sub(from_wall), 1000, scale);
                    let out = self
                        .audio
                        .end
                        .max(from_out.saturating_add(since).min(latest));
                    self.audio.map = Some((pts, out));
                    Some(out)
                };
                let Some(out) = out else {
                    return self.drop_sample();
                };
                self.audio.finish_held(Some(out));
                out
            }
            Some(Driver::Audio) if self.in_segment() && continues => {
                let Some(out) = self.audio.out(pts) else {
                    return self.drop_sample();
                };
                if !self.cut_before(Driver::Audio, out, true, wall_ms) {
                    return self.drop_sample();
                }
                out
            }
            _ => {
                // Not in a segment, or an audio-only timeline jump: audio may start one only
                // when the stream has no video.
                let first = *self.first_audio_wall.get_or_insert(wall_ms);
                let grace = wall_ms.saturating_sub(first) < AUDIO_ONLY_GRACE_MS;
                if self.video_seen || self.audio_apart || grace {
                    return self.drop_sample();
                }
                if self.in_segment() {
                    self.break_stream();
                }
                let out = self.audio.end.max(rescale(
                    self.video.end,
                    VIDEO_TIMESCALE,
                    self.audio.timescale,
                ));
                self.audio.map = Some((pts, out));
                if !self.start_segment(Driver::Audio, out, wall_ms) {
                    self.audio.map = None;
                    return self.drop_sample();
                }
                out
            }
        };
        let info = SampleInfo {
            dts: out,
            duration: 0,
            size,
            cts: 0,
            sync: true,
        };
        self.audio.push(info, data, nominal, wall_ms);
        self.audio.last_in = pts;
        if self.driver == Some(Driver::Video) && self.audio.samples.len() > MAX_PENDING_AUDIO {
            self.audio.drain(1);
            self.drop_sample();
        }
    }

    /// Before a driver sample at output time `out` joins the part in progress: completes
    /// the held sample, then closes the part and maybe the segment. `false` when the sample
    /// cannot be kept (the segment was closed for lack of keyframes).
    pub(super) fn cut_before(
        &mut self,
        driver: Driver,
        out: u64,
        keyframe: bool,
        wall_ms: u64,
    ) -> bool {
        let timescale = match driver {
            Driver::Video => VIDEO_TIMESCALE,
            Driver::Audio => self.audio.timescale,
        };
        self.end_held_within_target(driver, out);
        let track = match driver {
            Driver::Video => &self.video,
            Driver::Audio => &self.audio,
        };
        let last_duration = track.samples.last().map_or(0, |s| u64::from(s.duration));
        let part_target = ticks(self.config.part_target, timescale);
        let part_start = track.samples.first().map_or(out, |s| s.dts);
        let segment_start = self.segments.back().map_or(out, |s| s.start);
        let in_segment = out.saturating_sub(segment_start);
        let segment_target = ticks(self.config.segment_target, timescale);
        if keyframe && in_segment >= segment_target {
            self.close_segment(Some(out));
            // Same timeline, no discontinuity; the init is the same unless it changed.
            return self.start_segment(driver, out, wall_ms);
        }
        if in_segment >= segment_target.saturating_mul(u64::from(MAX_SEGMENT_TARGETS)) {
            self.break_stream();
            return false;
        }
        if out.saturating_sub(part_start) + last_duration > part_target {
            self.close_part(usize::MAX);
        }
        true
    }

    /// Completes `driver`'s held sample, the next starting at output time `out`. A part only
    /// goes over the part target when that sample lasted longer than the one before (a
    /// frame late, or frames missing): the sample then moves to a part of its own, so that
    /// every part keeps to `PART-TARGET` (RFC 8216bis 4.4.4.9) unless one sample alone is
    /// longer.
    pub(super) fn end_held_within_target(&mut self, driver: Driver, out: u64) {
        let timescale = match driver {
            Driver::Video => VIDEO_TIMESCALE,
            Driver::Audio => self.audio.timescale,
        };
        let track = match driver {
            Driver::Video => &mut self.video,
            Driver::Audio => &mut self.audio,
        };
        track.finish_held(Some(out));
        let first = track.samples.first().map_or(out, |s| s.dts);
        let n = track.samples.len();
        if out.saturating_sub(first) > ticks(self.config.part_target, timescale) && n > 1 {
            self.close_part(n - 1);
        }
    }

    /// Starts a segment whose first sample is at output time `out` of the driver's track.
    pub(super) fn start_segment(&mut self, driver: Driver, out: u64, wall_ms: u64) -> bool {
        if self.init_dirty || self.inits.is_empty() {
            let video = match driver {
                Driver::Video => self.video_cfg.as_ref(),
                Driver::Audio => None,
            };
            let audio = self.audio_cfg.as_ref().filter(|_| !self.audio_apart);
            let init = match fmp4::init_segment(video, audio) {
                Ok(init) => init,
                Err(err) => {
                    tracing::debug!(%err, "hls: cannot build the init segment");
                    return false;
                }
            };
            let version = self.inits.last().map_or(1, |(v, _)| v.wrapping_add(1));
            self.inits.push((version, Arc::new(init)));
            self.codecs = fmp4::codecs(video, audio);
            self.init_dirty = false;
        }
        let timescale = match driver {
            Driver::Video => VIDEO_TIMESCALE,
            Driver::Audio => self.audio.timescale,
        };
        let discontinuity = self.pending_discontinuity;
        let epoch = match self.epoch {
            Some(e) if !discontinuity && self.driver == Some(driver) => e,
            _ => Epoch {
                wall_ms,
                out,
                timescale,
            },
        };
        self.epoch = Some(epoch);
        let since_epoch = rescale(out.saturating_sub(epoch.out), timescale, 1000);
        let pdt_ms = epoch
            .wall_ms
            .saturating_add(since_epoch)
            .max(self.last_pdt_end);
        self.stats.discontinuities += u64::from(discontinuity);
        let init_version = self.inits.last().map_or(1, |(v, _)| *v);
        self.segments.push_back(Segment {
            msn: self.next_msn,
            parts: Vec::new(),
            duration: 0,
            timescale,
            start: out,
            discontinuity,
            init_version,
            pdt_ms,
            complete: false,
            video_samples: 0,
        });
        self.next_msn += 1;
        self.driver = Some(driver);
        self.pending_discontinuity = false;
        true
    }

    /// Closes the part and the segment in progress, if any. `next_out`: where the driver's
    /// next sample starts, when known (else the held samples get their fallback duration).
    pub(super) fn close_segment(&mut self, next_out: Option<u64>) {
        if !self.in_segment() {
            return;
        }
        match self.driver {
            Some(Driver::Video) => {
                self.video.finish_held(next_out);
                self.audio.finish_held(None);
            }
            _ => self.audio.finish_held(next_out),
        }
        self.close_part(usize::MAX);
        let Some(seg) = self.segments.back_mut() else {
            return;
        };
        seg.complete = true;
        let length_ms = rescale(seg.duration, seg.timescale, 1000);
        self.last_pdt_end = seg.pdt_ms.saturating_add(length_ms);
        let secs = seg.duration.div_ceil(u64::from(seg.timescale.max(1)));
        self.max_segment_secs = self.max_segment_secs.max(secs);
        self.version += 1;
        self.evict();
    }

    /// Closes the part in progress with the driver's first `n` samples (at most those whose
    /// duration is known) and every complete audio sample when video drives.
    fn close_part(&mut self, n: usize) {
        let Some(driver) = self.driver else { return };
        let (nv, na) = match driver {
            Driver::Video => (n.min(self.video.complete()), self.audio.complete()),
            Driver::Audio => (0, n.min(self.audio.complete())),
        };
        // A ladder's video variant drops its audio here: it went into the part only to be
        // mapped (its audio rendition stores it).
        if self.audio_apart && driver == Driver::Video {
            self.audio.drain(na);
        }
        let na = if self.audio_apart { 0 } else { na };
        let driver_samples = match driver {
            Driver::Video => &self.video.samples[..nv],
            Driver::Audio => &self.audio.samples[..na],
        };
        let Some(first) = driver_samples.first() else {
            return;
        };
        let independent = first.sync;
        let duration: u64 = driver_samples.iter().map(|s| u64::from(s.duration)).sum();
        let video_bytes: usize = self.video.samples[..nv]
            .iter()
            .map(|s| s.size as usize)
            .sum();
        let audio_bytes: usize = self.audio.samples[..na]
            .iter()
            .map(|s| s.size as usize)
            .sum();
        let mut buf = self.take_buffer(video_bytes + audio_bytes + 512);
        let capacity = buf.capacity();
        self.sequence = self.sequence.wrapping_add(1);
        let runs = [
            Run {
                track_id: VIDEO_TRACK_ID,
                samples: &self.video.samples[..nv],
                data: &self.video.data[..video_bytes],
            },
            Run {
                track_id: AUDIO_TRACK_ID,
                samples: &self.audio.samples[..na],
                data: &self.audio.data[..audio_bytes],
            },
        ];
        let written = fmp4::write_part(&mut buf, self.sequence, &runs);
        self.video.drain(nv);
        self.audio.drain(na);
        self.counter
            .reserve(buf.capacity().saturating_sub(capacity));
        if let Err(err) = written {
            tracing::debug!(%err, "hls: cannot write a part");
            self.stats.dropped_samples += (nv + na) as u64;
            self.recycle(buf);
            return;
        }
        let Some(seg) = self.segments.back_mut().filter(|s| !s.complete) else {
            self.recycle(buf);
            return;
        };
        self.counter.add(1, buf.len());
        let start = seg.start + seg.duration;
        seg.duration += duration;
        seg.video_samples += nv as u64;
        seg.parts.push(PartEntry {
            data: Arc::new(buf),
            start,
            duration,
            independent,
        });
        self.version += 1;
    }

    /// Drops the complete segments beyond the window, and the init segments no segment
    /// uses any more (the current one stays).
    pub(super) fn evict(&mut self) {
        self.evict_to(self.config.window.max(1));
    }

    /// Drops the complete segments beyond the newest `window`, as [`Packager::evict`].
    pub(super) fn evict_to(&mut self, window: usize) {
        while self.segments.iter().filter(|s| s.complete).count() > window {
            let Some(seg) = self.segments.pop_front() else {
                break;
            };
            self.evicted_discontinuities += u64::from(seg.discontinuity);
            for part in seg.parts {
                self.counter.sub(1, part.data.len());
                match Arc::try_unwrap(part.data) {
                    Ok(buf) => self.recycle(buf),
                    // A response still holds it: it is freed when that one is done.
                    Err(shared) => self.counter.unreserve(shared.capacity()),
                }
            }
        }
        let oldest = self.segments.front().map(|s| s.init_version);
        let current = self.inits.last().map(|(v, _)| *v);
        self.inits
            .retain(|(v, _)| Some(*v) == current || oldest.is_some_and(|o| *v >= o));
    }

    fn take_buffer(&mut self, size_hint: usize) -> Vec<u8> {
        match self.free.pop() {
            Some(buf) => buf,
            None => {
                let buf = Vec::with_capacity(size_hint);
                self.counter.reserve(buf.capacity());
                buf
            }
        }
    }

    fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.free.len() < self.config.max_free_buffers {
            buf.clear();
            self.free.push(buf);
        } else {
            self.counter.unreserve(buf.capacity());
        }
    }
}
