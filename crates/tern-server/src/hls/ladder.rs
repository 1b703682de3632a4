//! A stream's lower video layers in LL-HLS: one variant each, beside the top layer's.
//!
//! Simulcast layers of a WHIP publisher and the renditions of an RTMP one reach the tap as
//! ring packets of layers 1 and up (the top layer comes as ring packets or as its
//! publisher's frames). Each lower layer has its own [`Feed`] and a [`Packager`] that
//! follows the top one ([`Packager::follow`]): it cuts where the top cut, under the same
//! numbers, on the same output timeline, so that players switch variants at any segment.
//!
//! Two things make that work whatever order the layers' packets come in:
//! - **One clock.** Ingest puts every layer of a publisher on the stream's timeline (the
//!   ring's timestamps), so simulcast layers share the top's clock as they come. A frame
//!   publisher's top comes as its frames, on the encoder's clock: its renditions' ring
//!   timestamps are put back on it with the offset ingest applied
//!   ([`crate::media::StreamCounters::frame_ts_offset`]; renditions carry the source's
//!   timestamps).
//! - **The top goes first.** A lower layer's units wait in a queue until the top is
//!   [`START_TOLERANCE`] past their time (how far a simulcast layer's clock may be off the
//!   top's), so that the cut they fall on is known. A top that stalls (a paused simulcast
//!   layer) holds them at most [`MAX_HOLD_MS`].
//!
//! The audio is a rendition of its own (`EXT-X-MEDIA TYPE=AUDIO`, which every variant
//! names), not in every variant: the top packager still takes the audio (it places each
//! frame, [`Packager::audio_apart`]) and stores none; a third kind of packager
//! ([`Packager::audio_rendition`]) gets each frame with the top's placement of it once the
//! top's video has passed it, and cuts where the top cut. A stream is packaged this way
//! when it has more than one layer as its packaging starts ([`Ladder::new`]).

use std::collections::VecDeque;

use tern_pool::PoolCounter;
use tern_proto::codec::{MediaKind, VideoCodec};
use tern_rtc::hls::{HlsConfig, Packager, START_TOLERANCE};
use tern_rtc::package::{Feed, Unit};
use tern_rtc::stream::RingPacket;

/// Longest a lower layer's unit waits for the top layer to reach its time.
pub(super) const MAX_HOLD_MS: u64 = 1000;
/// Most units a lower layer holds (about 4 s of 30 fps video with its audio).
const MAX_HELD: usize = 512;
/// Lower layers a stream may have (the ring's layer index is a `u8`; publishers have 3).
const MAX_LOWER: usize = 7;
/// A lower layer whose last video came longer ago than this is not sending (a paused
/// simulcast layer): no keyframe is asked for it.
const SENDING_MS: u64 = 2000;

/// One lower layer's variant.
pub(super) struct Lower {
    pub(super) packager: Packager,
    feed: Feed,
    /// Units on the top's clock, waiting for the top, with their arrival (unix ms).
    queue: VecDeque<(Unit<'static>, u64)>,
    /// When (unix ms) its last video packet came.
    last_video_ms: u64,
}

/// A ladder's audio rendition.
pub(super) struct AudioRendition {
    pub(super) packager: Packager,
    /// The top's audio units with their arrival (unix ms) and where the top placed them
    /// (its anchor after taking them; `None` for a configuration), until the top's video
    /// has passed them.
    queue: VecDeque<(Unit<'static>, u64, Option<Anchor>)>,
}

/// Input and output times of an audio frame as the top placed it ([`Packager::audio_anchor`]).
type Anchor = (i64, u64);

impl AudioRendition {
    fn new(config: &HlsConfig, counter: &PoolCounter) -> AudioRendition {
        let mut packager = Packager::new(config.clone(), counter.clone());
        packager.audio_rendition();
        AudioRendition {
            packager,
            queue: VecDeque::new(),
        }
    }
}

/// The lower layers of a stream being packaged.
pub(super) struct Ladder {
    lower: Vec<Option<Lower>>,
    /// The audio rendition, when the audio is apart from the variants.
    audio: Option<AudioRendition>,
    config: HlsConfig,
    counter: PoolCounter,
    /// The top's newest video time (input pts).
    top: Option<i64>,
    /// The top layer comes as its publisher's frames, on the renditions' clock.
    pub(super) frames: bool,
    /// The audio's configuration unit, for a layer that starts after it was given.
    audio_config: Option<Unit<'static>>,
}

impl Ladder {
    /// The ladder of a stream; `audio_apart`: its audio is a rendition of its own (the
    /// stream has several layers; the top packager was made [`Packager::audio_apart`]).
    pub(super) fn new(config: HlsConfig, counter: PoolCounter, audio_apart: bool) -> Ladder {
        Ladder {
            lower: Vec::new(),
            audio: audio_apart.then(|| AudioRendition::new(&config, &counter)),
            config,
            counter,
            top: None,
            frames: false,
            audio_config: None,
        }
    }

    /// Forgets the lower layers (a new feed: the slate took over, or left).
    pub(super) fn clear(&mut self) {
        self.lower.clear();
        // The audio rendition goes on (as the top does): the other side's audio continues
        // neither its mapping nor, maybe, its configuration, which it takes as the top does
        // (a new init segment and a discontinuity where it differs). A new packager would
        // number its segments and init segments from the start again.
        if let Some(a) = &mut self.audio {
            a.queue.clear();
        }
        self.top = None;
        self.frames = false;
        self.audio_config = None;
    }

    /// The audio rendition's packager, when the audio is apart.
    pub(super) fn audio(&self) -> Option<&Packager> {
        self.audio.as_ref().map(|a| &a.packager)
    }

    /// Layer `layer`'s packager (1 and up), once it exists.
    pub(super) fn packager(&self, layer: u8) -> Option<&Packager> {
        let i = usize::from(layer).checked_sub(1)?;
        self.lower.get(i)?.as_ref().map(|l| &l.packager)
    }

    /// The lower layers that exist, by layer index.
    pub(super) fn layers(&self) -> impl Iterator<Item = (u8, &Packager)> {
        self.lower
            .iter()
            .enumerate()
            .filter_map(|(i, l)| Some((i as u8 + 1, &l.as_ref()?.packager)))
    }

    /// Whether a lower layer that is sending (video in the last [`SENDING_MS`] before
    /// `wall`) waits for a keyframe to start. A frame publisher's renditions make theirs
    /// where the source has one: never for them.
    pub(super) fn wants_keyframe(&self, wall: u64) -> bool {
        !self.frames
            && self.lower.iter().flatten().any(|l| {
                wall.saturating_sub(l.last_video_ms) < SENDING_MS && l.packager.wants_keyframe()
            })
    }

    /// The sum of the lower packagers' and the audio rendition's versions (any new part
    /// moves it).
    pub(super) fn version(&self) -> u64 {
        let audio = self.audio().map_or(0, Packager::version);
        self.layers().map(|(_, p)| p.version()).sum::<u64>() + audio
    }

    /// A unit the top packager just took: its cut goes to every lower layer and the audio
    /// rendition, its audio into the audio rendition's queue (with where the top placed
    /// it), or else into the lower layers' queues.
    pub(super) fn top_unit(&mut self, top: &Packager, unit: &Unit<'_>, wall: u64) {
        match unit {
            Unit::Video { pts, .. } => {
                self.top = Some(*pts);
                if let Some(cut) = top.last_cut() {
                    for l in self.lower.iter_mut().flatten() {
                        l.packager.follow_cut(cut);
                    }
                    if let Some(a) = &mut self.audio {
                        a.packager.follow_cut(cut);
                    }
                }
            }
            Unit::AudioConfig(_) | Unit::Audio { .. } if self.audio.is_some() => {
                let anchor = match unit {
                    Unit::Audio { .. } => top.audio_anchor(),
                    _ => None,
                };
                if let Some(a) = &mut self.audio {
                    hold(&mut a.queue, (unit.clone().into_owned(), wall, anchor));
                }
            }
            Unit::AudioConfig(_) | Unit::Audio { .. } => {
                if matches!(unit, Unit::AudioConfig(_)) {
                    self.audio_config = Some(unit.clone().into_owned());
                }
                let anchor = top.audio_anchor();
                for l in self.lower.iter_mut().flatten() {
                    l.packager.follow_audio(anchor);
                    hold(&mut l.queue, (unit.clone().into_owned(), wall));
                }
            }
            Unit::VideoConfig(_) => {}
        }
    }

    /// A ring packet of lower layer `pkt.layer` (video), `codec` the stream's, `top` the
    /// top layer's packager; `frame_ts_offset` what ingest adds to a frame publisher's
    /// timestamps (see the module docs).
    pub(super) fn lower_packet(
        &mut self,
        top: &Packager,
        pkt: &RingPacket,
        codec: VideoCodec,
        frame_ts_offset: u32,
        wall: u64,
    ) {
        let Some(i) = usize::from(pkt.layer).checked_sub(1) else {
            return;
        };
        if pkt.kind != MediaKind::Video || i >= MAX_LOWER {
            return;
        }
        if self.lower.len() <= i {
            self.lower.resize_with(i + 1, || None);
        }
        let (config, counter) = (&self.config, &self.counter);
        let audio_config = &self.audio_config;
        let l = self.lower[i].get_or_insert_with(|| {
            let mut packager = Packager::new(config.clone(), counter.clone());
            packager.follow();
            // The segment the top is in, so that this layer's first frames find their cut.
            if let Some(cut) = top.last_cut() {
                packager.follow_cut(cut);
            }
            let mut queue = VecDeque::new();
            // (Without the audio when it is apart: `audio_config` stays `None`.)
            if let Some(a) = audio_config {
                queue.push_back((a.clone(), wall));
            }
            Lower {
                packager,
                feed: Feed::new(codec),
                queue,
                last_video_ms: wall,
            }
        });
        l.feed.set_codec(codec);
        l.last_video_ms = wall;
        // Before the top's first frame nothing can be placed (nor cut).
        let Some(top) = self.top else {
            return;
        };
        // The ring's clock to the frames' (ingest added `frame_ts_offset` to them).
        let off = if self.frames { frame_ts_offset } else { 0 };
        let Lower { feed, queue, .. } = l;
        feed.push_rtp(pkt, &mut |u| {
            let Unit::Video {
                dts,
                pts,
                keyframe,
                format,
                data,
            } = u
            else {
                return;
            };
            // Placed next to the top's newest time, as the 32-bit difference says (this
            // layer's unwrapping and the top's may be a wrap apart: they started at
            // different times, and a frame publisher's clock is not unwrapped from the
            // ring's at all).
            let place = |t: i64| {
                let t = (t as u32).wrapping_sub(off);
                top + i64::from(t.wrapping_sub(top as u32) as i32)
            };
            let unit = Unit::Video {
                dts: place(dts),
                pts: place(pts),
                keyframe,
                format,
                data: data.into_owned().into(),
            };
            hold(queue, (unit, wall));
        });
    }

    /// Hands each lower layer the units the top has reached (and those held too long), and
    /// the audio rendition the frames the top's video (`top_packager`) has passed.
    pub(super) fn release(&mut self, top_packager: &Packager, wall: u64) {
        if let Some(a) = &mut self.audio {
            while let Some((_, at, anchor)) = a.queue.front() {
                let due = anchor.is_none_or(|(_, out)| top_packager.video_passed(out));
                if !due && wall.saturating_sub(*at) < MAX_HOLD_MS && a.queue.len() <= MAX_HELD {
                    break;
                }
                if let Some((unit, at, anchor)) = a.queue.pop_front() {
                    a.packager.follow_audio(anchor);
                    unit.apply(&mut a.packager, at);
                }
            }
        }
        let top = self.top;
        for l in self.lower.iter_mut().flatten() {
            while let Some((unit, at)) = l.queue.front() {
                // A frame waits until the top is START_TOLERANCE past it: a simulcast layer's
                // clock may be that far off the top's, and its cut must be known first.
                let due = match unit {
                    Unit::Video { pts, .. } => {
                        top.is_some_and(|t| pts.saturating_add(START_TOLERANCE) <= t)
                    }
                    _ => true,
                };
                if !due && wall.saturating_sub(*at) < MAX_HOLD_MS && l.queue.len() <= MAX_HELD {
                    break;
                }
                if let Some((unit, at)) = l.queue.pop_front() {
                    unit.apply(&mut l.packager, at);
                }
            }
        }
    }
}

/// Queues `item` (a unit with its arrival, and for the audio rendition the top's anchor),
/// the oldest dropped past twice [`MAX_HELD`] (a queue stays bounded whatever
/// [`Ladder::release`] does).
fn hold<T>(queue: &mut VecDeque<T>, item: T) {
    if queue.len() >= 2 * MAX_HELD {
        queue.pop_front();
    }
    queue.push_back(item);
}
