//! A viewer's simulcast layer: the mechanics on [`Viewer`] (which layer it is sent and
//! wants, the bandwidth estimator of a viewer of a simulcast stream, made only for those,
//! the feedback it reads, the padding that probes its path) and the policy that drives
//! them, [`LayerChooser`].
//!
//! # The policy
//!
//! Sans-IO like the rest of the crate: the owner calls [`LayerChooser::choose`] now and
//! then (tern's workers: every 250 ms) with what it [`Viewer::observe`]s of the viewer and
//! the stream's [`LayerRates`], and [`LayerChooser::probe_round`] while the viewer probes
//! (tern's workers: every 20 ms). Both take `now`; neither reads the clock. Every rule is
//! stated in time, not in calls, so the policy holds whatever the owner's cadence:
//!
//! - without an estimate (no transport-wide feedback negotiated, and no REMB) the best
//!   layer sending now; with feedback negotiated but too little of it yet, where it is;
//! - down at once, to the best layer under [`DOWN_TO`] of the estimate, when its layer no
//!   longer fits in [`DOWN_AT`] of it; the layer it leaves stops at once ([`Switch::Drop`]:
//!   its packets would only deepen the queue that the new layer's keyframe waits in);
//! - up only to a layer that fits with [`UP_HEADROOM`] of headroom, and only once a higher
//!   layer has fitted at every call for [`UP_HOLD`] (hysteresis);
//! - an up-move is checked for [`UP_CHECK`]: if the viewer has to move down in that time,
//!   or its path's delay grows (overuse: then it drops at once to the layer below), the
//!   move failed, and the viewer holds its layer, with no probe, for [`UP_BACKOFF_MIN`],
//!   doubling with each failed up-move in a row to [`UP_BACKOFF_MAX`]; one that passes its
//!   check clears that. (An estimate that probes lifted through a token bucket's burst, or
//!   a receiver's own that overshoots, admits a layer whose keyframes the path's queue
//!   cannot take; libwebrtc's and LiveKit's allocators back off the same way.)
//! - a pinned viewer (`?layer=`, or the API) never moves and never starts a probe.
//!
//! Probing: a viewer on a lower layer never sends more than that layer, so its estimate
//! could never show room for a higher one. A viewer whose next layer up does not fit, whose
//! path is not overused and that is sent the layer it wants, probes for [`PROBE_LENGTH`]:
//! padding-only packets ([`Viewer::write_padding`]) at a rate that brings what it is sent
//! to [`PROBE_GAIN`] times the estimate (at most [`PROBE_CAP`] times what the next layer
//! needs with its headroom). The owner paces them in rounds: a round sends what the rate
//! earned over the round's length, in whole [`PROBE_PACKET`]s rounded up, at most
//! [`PROBE_BURST`] back to back and [`PROBE_PPS_MAX`] a second. The estimator takes what
//! arrived without queues growing as its new floor, so the estimate grows by half per
//! probe while the path has room. The next probe waits [`PROBE_REST`] after one ends, or,
//! after one that ended in overuse, a back-off from [`BACKOFF_MIN`] doubling to
//! [`BACKOFF_MAX`], cleared by the next probe that ends without overuse.
//!
//! A viewer that reports REMB (aiortc) is probed the same way when it negotiated RTX and
//! abs-send-time: its own estimator counts the padding as received (aiortc's never reports
//! more than 1.5 times what it received in the last second, so without probes a viewer
//! moved down could never climb back), and a REMB lower than the one before is read as
//! overuse ([`Viewer::path_usage`]).
//!
//! # From loop passes to time
//!
//! The policy used to live in the server's worker and count its loop: layers chosen every
//! 250 ms pass (which runs at the first 20 ms sweep after it is due: every 260 ms), probes
//! paced every sweep. Converted, at that cadence:
//!
//! | counted in passes and sweeps | in time |
//! |---|---|
//! | up after 8 passes in a row | [`UP_HOLD`] 1.75 s after the first: the 8th pass, as before |
//! | a probe of 25 sweeps | [`PROBE_LENGTH`] 500 ms: 25 rounds of 20 ms, as before |
//! | `extra / 8 / 50` bytes a sweep | `extra / 8` bytes a second: the same per 20 ms round |
//! | 16 packets a sweep at most | 16 a round, and 800 a second |
//! | 2 passes before the next probe | [`PROBE_REST`] 250 ms after the end: the 2nd pass after it, as before |
//! | back-off 8 → 128 passes | 2 s → 32 s after the end (the 9th pass, not the 8th: the counter's first pass came 20 ms after the end, so it waited 1.84 s for "2 s") |
//!
//! A chooser is 6 bytes, what the pass counters were: its times are 16-bit stamps of 5 ms
//! ticks past an [`Epoch`] that the owner keeps once for all its viewers (an `Instant` is 16
//! bytes). The stamps wrap every 65,536 ticks (5.46 minutes). A wait is never more than
//! [`BACKOFF_MAX`] ahead, so one that reads as further ahead is stale (its chooser was not
//! called for minutes: a pinned viewer, a stream that lost its layers) and is dropped; only
//! one left alone for 4.9 to 5.46 minutes can read as a wait still to run (32 s at most).

use std::num::NonZeroU16;
use std::time::{Duration, Instant};

use tern_proto::rtp::{self, HeaderOut};
use tern_proto::twcc;

use super::estimate::Bwe;
use super::{Viewer, ViewerError, ViewerState};
use crate::bwe::{BweConfig, Estimator, Usage};
use crate::stream::LayerRates;

pub mod pause;

/// Padding bytes of a probe packet: the most one packet's padding can say (its count is one
/// octet).
const PADDING: usize = 255;

/// What a viewer with transport-wide feedback starts on, before it has an estimate: the
/// best layer within this (a start on the top layer of a path that cannot carry it would
/// lose packets until the first estimate; libwebrtc's senders start at 300 kbit/s).
pub const START_BPS: u32 = 1_000_000;
/// A layer above this share of the estimate no longer fits: move down.
pub const DOWN_AT: f64 = 0.95;
/// Moving down, to the best layer under this share of the estimate...
pub const DOWN_TO: f64 = 0.9;
/// ...or of this share while the path's delay grows (overuse): its queue is full of the
/// layer being left, and the new layer's keyframe must get through it (behind a 300 kbit/s
/// token bucket, pion's viewer lost 2-4 % of its packets moving from 530 to 250 kbit/s).
pub const DOWN_TO_OVERUSE: f64 = 0.6;
/// Headroom a layer needs under the estimate to move up to it.
pub const UP_HEADROOM: f64 = 1.3;
/// How long a higher layer must have fitted, at every call from the first that saw it fit,
/// before the viewer moves up.
pub const UP_HOLD: Duration = Duration::from_millis(1_750);
/// How long a probe lasts.
pub const PROBE_LENGTH: Duration = Duration::from_millis(500);
/// A probe brings what the viewer is sent to this multiple of the estimate...
pub const PROBE_GAIN: f64 = 1.5;
/// ...but to no more than this multiple of what the next layer needs (its rate with
/// [`UP_HEADROOM`]).
pub const PROBE_CAP: f64 = 1.1;
/// The wait after a probe that ended without overuse.
pub const PROBE_REST: Duration = Duration::from_millis(250);
/// The wait after a probe that ended in overuse, doubling with each such probe in a row...
pub const BACKOFF_MIN: Duration = Duration::from_secs(2);
/// ...up to this.
pub const BACKOFF_MAX: Duration = Duration::from_secs(32);
/// Bytes of one probe packet on the wire, about: 255 bytes of padding, the RTP header with the
/// transport-wide sequence number, the AEAD tag.
pub const PROBE_PACKET: usize = 291;
/// Most probe packets of one viewer back to back, in one round (~4.6 KB).
pub const PROBE_BURST: usize = 16;
/// Most probe packets of one viewer a second (16 every 20 ms: 1.9 Mbit/s).
pub const PROBE_PPS_MAX: u64 = 800;

/// After an up-move, how long it is checked: a move down, or delay growing on the path
/// (overuse), within this time of it makes it a failed up-move.
/// (Behind a 300 kbit/s token bucket with a 20 KB burst, pion's estimate let a 250 kbit/s
/// layer through for 4 to 5 s before it fell: the queue and the burst hide the overuse
/// that long.)
pub const UP_CHECK: Duration = Duration::from_secs(10);
/// After a failed up-move the viewer holds its lower layer (no up-move, no probe) for this,
/// doubling with each failed up-move in a row...
pub const UP_BACKOFF_MIN: Duration = Duration::from_secs(8);
/// ...up to this; an up-move that passes its check clears it.
pub const UP_BACKOFF_MAX: Duration = Duration::from_secs(64);

/// `up` modes (above [`UP_MODE_SHIFT`]): an up-move is being checked; the viewer is held
/// after a failed one.
const UP_CHECKING: u8 = 1 << UP_MODE_SHIFT;
const UP_HELD: u8 = 2 << UP_MODE_SHIFT;
const UP_MODE_SHIFT: u32 = 4;
/// Most failed up-moves counted in a row (8 s, 16, 32, 64).
const UP_LEVEL_MAX: u8 = 4;

/// A probe's rate is kept in units of this many bytes a second (400 bit/s), so that a 20 ms
/// round's share is a whole number of bytes, as the per-sweep budget was.
const RATE_UNIT: u64 = 50;
/// Bits of [`LayerChooser`]'s word that hold the probe's rate (3.3 Mbit/s at most; the
/// packet caps stop a probe at 1.9).
const RATE_MASK: u16 = (1 << 13) - 1;
/// The back-off level sits above the rate: 0 none, 1 ..= 5 for 2 s ..= 32 s.
const LEVEL_SHIFT: u32 = 13;
const LEVEL_MAX: u16 = 5;
/// Length of a stamp's tick.
const TICK_MS: u64 = 5;

/// The time origin of a worker's choosers: their stamps count 5 ms ticks past it. One per
/// owner, made once (see the module).
#[derive(Debug, Clone, Copy)]
pub struct Epoch(Instant);

impl Epoch {
    /// An origin at `at`.
    pub fn new(at: Instant) -> Self {
        Epoch(at)
    }

    fn tick(&self, now: Instant) -> Tick {
        let ms = now.saturating_duration_since(self.0).as_millis();
        // Wraps, on purpose (see the module).
        Tick((ms / u128::from(TICK_MS)) as u16)
    }
}

/// A time as a chooser keeps it (see [`Epoch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tick(u16);

impl Tick {
    fn after(self, d: Duration) -> Tick {
        let n = d.as_millis() / u128::from(TICK_MS);
        Tick(self.0.wrapping_add(n as u16))
    }

    /// Time from `earlier` to this.
    fn since(self, earlier: Tick) -> Duration {
        Duration::from_millis(u64::from(self.0.wrapping_sub(earlier.0)) * TICK_MS)
    }

    /// Whether `deadline` has come (it is less than half the wrap ahead).
    fn reached(self, deadline: Tick) -> bool {
        self.0.wrapping_sub(deadline.0) < 1 << 15
    }

    /// As stored: a stamp of 0 moves a tick back (a hold or a wait 5 ms shorter), so
    /// that `None` costs nothing.
    fn stamp(self) -> NonZeroU16 {
        NonZeroU16::new(self.0).unwrap_or(NonZeroU16::MAX)
    }
}

impl From<NonZeroU16> for Tick {
    fn from(s: NonZeroU16) -> Tick {
        Tick(s.get())
    }
}

/// A viewer's bandwidth estimate, as the policy reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Estimate {
    /// None, and none coming: no transport-wide feedback negotiated, no REMB yet.
    None,
    /// Transport-wide feedback is negotiated, but too little has come to judge by.
    Pending,
    /// The viewer's latest REMB (bit/s): layers follow it, probes can raise it (its
    /// estimator counts their padding as received; see [`Viewer::write_padding`]).
    Remb(u64),
    /// From transport-wide feedback (bit/s): layers follow it, probes can raise it.
    Feedback(u64),
}

/// What [`LayerChooser::choose`] needs to know of a viewer (see [`Viewer::observe`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    /// Its bandwidth estimate.
    pub estimate: Estimate,
    /// What its path's delay says ([`Viewer::path_usage`]).
    pub usage: Option<Usage>,
    /// The layer it wants: the one sent, or the one it moves to at its next keyframe.
    pub target: u8,
    /// The layer being sent (`None` before its first video packet).
    pub sending: Option<u8>,
    /// Whether it can be sent probe packets (an estimate and RTX negotiated).
    pub can_probe: bool,
    /// Whether its layer is pinned.
    pub pinned: bool,
    /// Whether its video is paused (see [`LayerChooser::gate`]).
    pub paused: bool,
    /// Video lost in its latest receiver report (of 256).
    pub loss: u8,
}

/// Where a viewer's layer goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    /// Where it is.
    Stay,
    /// To this layer at its next keyframe ([`Viewer::set_layer`]).
    To(u8),
    /// Down to this layer, the current one stopping at once ([`Viewer::drop_to_layer`]).
    Drop(u8),
    /// No video at all, from now ([`Viewer::pause_video`]; a single-layer stream's
    /// viewer, see [`LayerChooser::gate`]).
    Pause,
    /// Video again, from the layer's next keyframe ([`Viewer::resume_video`]).
    Resume,
}

/// What [`LayerChooser::choose`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// The viewer's layer.
    pub switch: Switch,
    /// A probe starts now: call [`LayerChooser::probe_round`] every round until it ends.
    pub probe: bool,
}

impl Decision {
    const STAY: Decision = Decision {
        switch: Switch::Stay,
        probe: false,
    };
}

/// What one round of a probe sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeRound {
    /// This many probe packets, now.
    Send(usize),
    /// The probe is over (its back-off is set); `overuse` says how it ended.
    Ended {
        /// The path's delay grew: the next probe backs off.
        overuse: bool,
    },
    /// No probe runs.
    Idle,
}

/// The layer policy's state for one viewer: 7 bytes, packed, so that it fits where the
/// 6-byte pass counters were (see the module).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[repr(C, packed)]
pub struct LayerChooser {
    /// As `up` says: when a higher layer first fitted, of the calls in a row at which one
    /// has (none: the last call saw none fit); while an up-move is checked, when it was
    /// made; while the viewer is held after a failed one, when that failed.
    up_since: Option<NonZeroU16>,
    /// While probing, when the probe ends; else when the next probe may start (none: now).
    until: Option<NonZeroU16>,
    /// The probe's rate in [`RATE_UNIT`]s (0: not probing), and the back-off level
    /// above it (see [`LEVEL_SHIFT`]).
    word: u16,
    /// What `up_since` holds ([`UP_CHECKING`], [`UP_HELD`] or neither), and the failed
    /// up-moves in a row below [`UP_MODE_SHIFT`] (see [`LayerChooser::up_backoff`]).
    up: u8,
}

impl LayerChooser {
    /// The layer a viewer starts on: the best sending now, or, for one that will have an
    /// estimate from transport-wide feedback (`can_estimate`), the best within
    /// [`START_BPS`].
    pub fn first_layer(rates: &LayerRates, can_estimate: bool) -> u8 {
        rates.pick(can_estimate.then_some(START_BPS))
    }

    /// Whether a probe runs.
    pub fn probing(&self) -> bool {
        self.rate() > 0
    }

    /// The current back-off after overuse (zero: none).
    pub fn backoff(&self) -> Duration {
        match self.level() {
            0 => Duration::ZERO,
            l => BACKOFF_MIN * (1 << (l - 1)),
        }
    }

    /// The running probe's rate (bit/s; 0: none).
    pub fn probe_bps(&self) -> u64 {
        u64::from(self.rate()) * RATE_UNIT * 8
    }

    /// Points the viewer at a layer and decides whether it probes now (see the module).
    /// `rates` are its stream's.
    pub fn choose(
        &mut self,
        epoch: &Epoch,
        seen: &Observed,
        rates: &LayerRates,
        now: Instant,
    ) -> Decision {
        if seen.pinned {
            return Decision::STAY;
        }
        let t = epoch.tick(now);
        let rate = |l: u8| f64::from(rates.rate(l));
        let cur = seen.target;
        let mut switch = Switch::Stay;
        let target = match seen.estimate {
            Estimate::Pending => cur,
            Estimate::None => rates.pick(None),
            Estimate::Remb(b) | Estimate::Feedback(b) => {
                let b = b as f64;
                let free = self.up_free(t);
                let checking = self.up & !(UP_CHECKING - 1) == UP_CHECKING;
                if rate(cur) > DOWN_AT * b || rate(cur) == 0.0 {
                    if checking {
                        self.fail_up(t);
                    } else if free {
                        self.up_since = None;
                    }
                    let share = if seen.usage == Some(Usage::Over) {
                        DOWN_TO_OVERUSE
                    } else {
                        DOWN_TO
                    };
                    let to = rates.pick(Some((share * b) as u32));
                    if to != cur && rate(cur) > 0.0 {
                        switch = Switch::Drop(to);
                    }
                    to
                } else if checking && seen.usage == Some(Usage::Over) {
                    // The delay grew right after the move up: back to the layer below at
                    // once (its keyframe is what the queue must let through next).
                    self.fail_up(t);
                    let to = rates.next_below(cur).unwrap_or(cur);
                    if to != cur {
                        switch = Switch::Drop(to);
                    }
                    to
                } else if !free {
                    cur
                } else {
                    let up = rates.pick(Some((b / UP_HEADROOM) as u32));
                    if rate(up) <= rate(cur) {
                        self.up_since = None;
                        cur
                    } else {
                        let since = Tick::from(self.up_since.unwrap_or(t.stamp()));
                        if t.since(since) >= UP_HOLD {
                            // Checked for UP_CHECK from now.
                            self.up_since = Some(t.stamp());
                            self.up = self.up & (UP_CHECKING - 1) | UP_CHECKING;
                            up
                        } else {
                            self.up_since = Some(since.stamp());
                            cur
                        }
                    }
                }
            }
        };
        if switch == Switch::Stay && target != cur {
            switch = Switch::To(target);
        }
        let probe = self.up >> UP_MODE_SHIFT == 0
            && self.may_probe(t)
            && self.start_probe(seen, rates, target, t);
        Decision { switch, probe }
    }

    /// How long the viewer is held on its layer after the failed up-moves in a row so far
    /// (zero: none failed).
    pub fn up_backoff(&self) -> Duration {
        match self.up & (UP_CHECKING - 1) {
            0 => Duration::ZERO,
            l => UP_BACKOFF_MIN * (1 << (l - 1)),
        }
    }

    /// Whether the viewer may move up now: no up-move is being checked and no hold after a
    /// failed one runs. Ends a check that has run its time (the move held: the count of
    /// failed ones is cleared) and a hold that has. (As with the probes' waits, a chooser
    /// left alone for minutes can find part of a hold still to run, 64 s at most.)
    fn up_free(&mut self, t: Tick) -> bool {
        let mode = self.up & !(UP_CHECKING - 1);
        if mode == 0 {
            return true;
        }
        let since = self
            .up_since
            .map_or(Duration::MAX, |s| t.since(Tick::from(s)));
        let over = if mode == UP_CHECKING {
            since >= UP_CHECK
        } else {
            since >= self.up_backoff()
        };
        if !over {
            return false;
        }
        self.up = if mode == UP_CHECKING {
            0
        } else {
            self.up & (UP_CHECKING - 1)
        };
        self.up_since = None;
        true
    }

    /// An up-move failed its check: hold the viewer, for longer than after the last.
    fn fail_up(&mut self, t: Tick) {
        let level = (self.up & (UP_CHECKING - 1)) + 1;
        self.up = level.min(UP_LEVEL_MAX) | UP_HELD;
        self.up_since = Some(t.stamp());
    }

    /// Whether no probe runs and none waits (a wait that has passed, or reads as further
    /// ahead than any can be, is dropped).
    fn may_probe(&mut self, t: Tick) -> bool {
        if self.probing() {
            return false;
        }
        let Some(until) = self.until.map(Tick::from) else {
            return true;
        };
        if t.reached(until) || until.since(t) > BACKOFF_MAX {
            self.until = None;
            return true;
        }
        false
    }

    /// Starts a probe toward the layer above `target` if the viewer needs one and its path
    /// allows it.
    fn start_probe(&mut self, seen: &Observed, rates: &LayerRates, target: u8, t: Tick) -> bool {
        let (Estimate::Feedback(b) | Estimate::Remb(b), Some(next)) =
            (seen.estimate, rates.next_above(target))
        else {
            return false;
        };
        let b = b as f64;
        let need = f64::from(rates.rate(next)) * UP_HEADROOM;
        if b >= need
            || !seen.can_probe
            || seen.usage != Some(Usage::Normal)
            || seen.sending != Some(target)
        {
            return false;
        }
        let total = (PROBE_GAIN * b).min(need * PROBE_CAP);
        self.begin_probe(total - f64::from(rates.rate(target)), t, PROBE_LENGTH)
    }

    /// Starts a probe that adds `extra` bit/s of padding for `length` (none when that
    /// rounds to nothing).
    fn begin_probe(&mut self, extra: f64, t: Tick, length: Duration) -> bool {
        let units = (extra.max(0.0) / 8.0 / RATE_UNIT as f64).min(f64::from(RATE_MASK)) as u16;
        if units == 0 {
            return false;
        }
        self.set(self.level(), units);
        self.until = Some(t.after(length).stamp());
        true
    }

    /// One round of a running probe, `round` long (the time since the owner's last round):
    /// how many probe packets to send now, or, once [`PROBE_LENGTH`] has passed, its end,
    /// judged by `usage` (the path's delay now) and setting the wait before the next.
    pub fn probe_round(
        &mut self,
        epoch: &Epoch,
        now: Instant,
        round: Duration,
        usage: Option<Usage>,
    ) -> ProbeRound {
        if !self.probing() {
            return ProbeRound::Idle;
        }
        let t = epoch.tick(now);
        let end = self.until.map_or(t, Tick::from);
        if t.reached(end) {
            let overuse = usage == Some(Usage::Over);
            let level = if overuse {
                (self.level() + 1).min(LEVEL_MAX)
            } else {
                0
            };
            self.set(level, 0);
            let wait = if overuse { self.backoff() } else { PROBE_REST };
            self.until = Some(t.after(wait).stamp());
            return ProbeRound::Ended { overuse };
        }
        let us = round.as_micros();
        let bytes = u128::from(self.rate()) * u128::from(RATE_UNIT) * us / 1_000_000;
        let packets = bytes
            .div_ceil(PROBE_PACKET as u128)
            .min((u128::from(PROBE_PPS_MAX) * us).div_ceil(1_000_000))
            .min(PROBE_BURST as u128);
        ProbeRound::Send(packets as usize)
    }

    fn rate(&self) -> u16 {
        self.word & RATE_MASK
    }

    fn level(&self) -> u16 {
        self.word >> LEVEL_SHIFT
    }

    fn set(&mut self, level: u16, rate: u16) {
        self.word = level << LEVEL_SHIFT | rate & RATE_MASK;
    }
}

impl Viewer {
    /// The video layer being sent (`None` before the first video packet or without
    /// video).
    pub fn video_layer(&self) -> Option<u8> {
        self.video
            .as_ref()
            .filter(|t| t.src_start.is_some())
            .map(|t| t.layer)
    }

    /// The video layer wanted: the one sent, or the one switched to at its next keyframe.
    pub fn target_layer(&self) -> u8 {
        self.video.as_ref().map_or(0, |t| t.target)
    }

    /// Starts a bandwidth estimate from transport-wide feedback, if the viewer negotiated
    /// it (the sequence number extension is then written on its video). Returns whether it
    /// has one.
    pub fn enable_bwe(&mut self, now: Instant) -> bool {
        self.enable_bwe_from(now, BweConfig::default().start_bps)
    }

    /// As [`Viewer::enable_bwe`], with the estimate starting at `start_bps` (a
    /// single-layer stream's viewer whose path came in doubt: from a little above the
    /// stream's rate, so that the first loss the feedback shows takes it below).
    pub fn enable_bwe_from(&mut self, now: Instant, start_bps: u64) -> bool {
        if self.bwe.is_none() && self.video.is_some_and(|t| t.p.transport_cc_ext.is_some()) {
            self.bwe = Some(Box::new(Bwe {
                est: Estimator::new(BweConfig {
                    start_bps,
                    ..BweConfig::default()
                }),
                next_seq: 0,
                // A start as unpredictable as the (random) RTX SSRC (RFC 3550 §5.1), below
                // 2^15 like the media's.
                rtx_seq: self
                    .video
                    .and_then(|t| t.p.rtx)
                    .map_or(0, |(_, ssrc)| u64::from(ssrc >> 17)),
                epoch: now,
                parsed: 0,
                dropped: 0,
            }));
        }
        self.bwe.is_some()
    }

    /// Whether the viewer negotiated transport-wide feedback (see
    /// [`Viewer::enable_bwe`]).
    pub fn can_estimate(&self) -> bool {
        self.video.is_some_and(|t| t.p.transport_cc_ext.is_some())
    }

    /// Reads a transport-wide feedback's FCI (after its two SSRCs) into the estimate; one
    /// that does not parse is counted as dropped. Without an estimate it is ignored.
    pub fn on_transport_feedback(&mut self, fci: &[u8], now: Instant) {
        let paused = self.video_paused();
        let Some(b) = self.bwe.as_mut() else {
            return;
        };
        match twcc::parse(fci) {
            Ok(fb) => {
                let t = b.micros(now);
                b.est.on_feedback(&fb, t);
                // Paused, the viewer's feedback covers only probes (its audio carries no
                // transport-wide number): see `Estimator::take_probe_result`.
                if paused {
                    b.est.take_probe_result();
                }
                b.parsed = b.parsed.wrapping_add(1);
            }
            Err(_) => {
                b.dropped = b.dropped.wrapping_add(1);
                self.counters.dropped += 1;
            }
        }
    }

    /// Whether the viewer can be sent probe packets: RTX negotiated, and an estimator
    /// that counts them (tern's own from transport-wide feedback, or the viewer's, which
    /// reports REMB and reads abs-send-time).
    pub fn can_probe(&self) -> bool {
        self.video.is_some_and(|t| {
            t.p.rtx.is_some()
                && (self.bwe.is_some() || t.p.abs_send_time_ext.is_some() && self.remb_bps > 0)
        })
    }

    /// The viewer's bandwidth estimate (bit/s): from transport-wide feedback when it has
    /// [`Viewer::enable_bwe`], else its latest REMB, else none.
    pub fn estimate_bps(&self) -> Option<u64> {
        match &self.bwe {
            Some(b) if b.est.acked_bps().is_some() => Some(b.est.estimate_bps()),
            Some(_) => None,
            None => (self.remb_bps > 0).then_some(u64::from(self.remb_bps)),
        }
    }

    /// Writes one probe packet into `out`, sent at `now`: padding only, on the RTX SSRC (so
    /// that it takes no sequence number from the media), with the next transport-wide
    /// sequence number, so that the viewer's feedback counts it, or, to a REMB viewer,
    /// with abs-send-time, so that its own estimator counts it as received (aiortc's
    /// caps its REMB at 1.5 times what it receives). The receiver drops it after its
    /// transport layer has seen it. Returns its length, or `None` when it cannot be
    /// probed ([`Viewer::can_probe`]) or before the video started.
    pub fn write_padding(
        &mut self,
        out: &mut [u8],
        now: Instant,
    ) -> Result<Option<usize>, ViewerError> {
        if self.state != ViewerState::Connected {
            return Ok(None);
        }
        let (Some(t), Some(srtp)) = (self.video.as_ref(), self.srtp.as_mut()) else {
            return Ok(None);
        };
        let (Some((pt, ssrc)), Some(_)) = (t.p.rtx, t.src_start) else {
            return Ok(None);
        };
        // The RTX packet's extended sequence number, and what lets the viewer count it.
        let (rtx_seq, transport_cc, abs_send_time) = match (
            self.bwe.as_ref(),
            t.p.transport_cc_ext,
            t.p.abs_send_time_ext,
        ) {
            (Some(b), Some(id), _) => (b.rtx_seq, Some((id, b.next_seq)), None),
            (None, None, Some(id)) if self.remb_bps > 0 => {
                // Probes are all a REMB viewer is sent on RTX: their count numbers them,
                // from a start as unpredictable as the RTX SSRC (as `enable_bwe_from`).
                let since = now.saturating_duration_since(self.created);
                let seq = u64::from(ssrc >> 17) + self.counters.probes;
                (seq, None, Some((id, rtp::abs_send_time(since))))
            }
            _ => return Ok(None),
        };
        let hdr = HeaderOut {
            marker: false,
            payload_type: pt,
            sequence: rtx_seq as u16,
            timestamp: t.last_ts,
            ssrc,
            abs_capture_time: None,
            transport_cc,
            abs_send_time,
        };
        let hlen = rtp::write_header(out, &hdr).map_err(|_| ViewerError::BufferTooSmall)?;
        // The P bit (RFC 3550 §5.1): the payload is all padding, its last octet the count.
        out[0] |= 0x20;
        let mut pad = [0u8; PADDING];
        pad[PADDING - 1] = PADDING as u8;
        if out.len() < hlen + PADDING + srtp.rtp_tx.overhead() {
            return Err(ViewerError::BufferTooSmall);
        }
        let n = srtp
            .rtp_tx
            .protect_payload(out, hlen, &pad, (rtx_seq >> 16) as u32)
            .map_err(|e| ViewerError::Srtp(e.to_string()))?;
        if let (Some(b), Some((_, seq))) = (self.bwe.as_mut(), transport_cc) {
            b.next_seq = seq.wrapping_add(1);
            b.rtx_seq += 1;
            let at = b.micros(now);
            b.est.on_sent(seq, n, at);
        }
        self.counters.probes += 1;
        Ok(Some(n))
    }

    /// Takes a REMB (bit/s) as the viewer's estimate, noting whether it fell (see
    /// [`Viewer::path_usage`]).
    pub(super) fn on_remb(&mut self, bps: u64) {
        let bps = bps.min(u64::from(u32::MAX)) as u32;
        self.remb_fell = bps < self.remb_bps;
        self.remb_bps = bps;
    }

    /// What the path's delay says: the delay-based detector's reading, with an estimate
    /// from transport-wide feedback; for a viewer that reports REMB, overuse while its
    /// latest REMB is below the one before (a receive-side estimator, libwebrtc's or
    /// aiortc's, lowers it only when its own delay detector sees overuse), else normal;
    /// none without either.
    pub fn path_usage(&self) -> Option<Usage> {
        match &self.bwe {
            Some(b) => Some(b.est.usage()),
            None if self.remb_bps > 0 => Some(if self.remb_fell {
                Usage::Over
            } else {
                Usage::Normal
            }),
            None => None,
        }
    }

    /// What the layer policy needs to know of the viewer (see [`LayerChooser::choose`]).
    /// Starts its estimator if it negotiated transport-wide feedback and has none yet
    /// (see [`Viewer::enable_bwe`]: this allocates it).
    pub fn observe(&mut self, now: Instant) -> Observed {
        let feedback = self.enable_bwe(now);
        let estimate = match (self.estimate_bps(), feedback) {
            (Some(b), true) => Estimate::Feedback(b),
            (Some(b), false) => Estimate::Remb(b),
            (None, true) => Estimate::Pending,
            (None, false) => Estimate::None,
        };
        Observed {
            estimate,
            usage: self.path_usage(),
            target: self.target_layer(),
            sending: self.video_layer(),
            can_probe: self.can_probe(),
            pinned: self.pinned,
            paused: self.video_paused(),
            loss: self.video.as_ref().map_or(0, |t| t.fraction_lost),
        }
    }

    /// Carries out a layer decision of [`LayerChooser::choose`].
    pub fn apply(&mut self, switch: Switch) {
        match switch {
            Switch::Stay => {}
            Switch::To(layer) => self.set_layer(layer, false),
            Switch::Drop(layer) => self.drop_to_layer(layer),
            Switch::Pause => self.pause_video(),
            Switch::Resume => self.resume_video(),
        }
    }

    /// Whether the layer is pinned (see [`Viewer::set_layer`]).
    pub fn pinned(&self) -> bool {
        self.pinned
    }

    /// Wants video layer `layer` from its next keyframe on (the current one is sent until
    /// then, so the picture never stops). `pin` keeps it there: [`Viewer::pinned`] tells
    /// the owner not to move it with the bandwidth estimate.
    pub fn set_layer(&mut self, layer: u8, pin: bool) {
        self.pinned = pin;
        if let Some(t) = self.video.as_mut() {
            t.target = layer;
            // A paused viewer resumes, at the layer's next keyframe.
            t.hold = t.paused && t.src_start.is_some();
            t.paused = false;
            if t.src_start.is_none() {
                t.layer = layer;
            }
        }
    }

    /// As [`Viewer::set_layer`] (not pinned), for a path that cannot carry the current
    /// layer: its packets stop at once rather than at the new layer's keyframe, so that
    /// the queue drains and that keyframe gets through sooner.
    pub fn drop_to_layer(&mut self, layer: u8) {
        self.set_layer(layer, false);
        if let Some(t) = self.video.as_mut()
            && t.src_start.is_some()
            && t.layer != layer
        {
            t.hold = true;
        }
    }

    /// Stops the viewer's video, at once and until [`Viewer::resume_video`]: no packet, no
    /// retransmission, no keyframe (see [`LayerChooser::gate`]). Its audio goes on.
    pub fn pause_video(&mut self) {
        if let Some(t) = self.video.as_mut() {
            t.paused = true;
            t.hold = t.src_start.is_some();
        }
        // Probes start from what got through (see `Estimator::settle`), or, with no
        // feedback yet (paused on a receiver report's loss), from a low rate that feedback
        // on the probes themselves will correct.
        if let Some(b) = self.bwe.as_mut() {
            b.est.settle(UNMEASURED_BPS as f64);
        }
    }

    /// Sends video again from the layer's next keyframe, numbered on from the last packet
    /// sent before the pause.
    pub fn resume_video(&mut self) {
        if let Some(t) = self.video.as_mut() {
            t.paused = false;
        }
    }

    /// Whether the viewer's video is paused.
    pub fn video_paused(&self) -> bool {
        self.video.as_ref().is_some_and(|t| t.paused)
    }

    /// Whether the viewer waits for a keyframe to resume its video (the owner asks the
    /// publisher for one).
    pub fn resuming(&self) -> bool {
        self.video
            .as_ref()
            .is_some_and(|t| t.hold && !t.paused && t.target == t.layer)
    }

    /// The estimate from transport-wide feedback whenever an estimator runs, even before
    /// it has seen enough to say what the path carries (what the gate of a single-layer
    /// stream reads: its estimator starts above the stream's rate, so it pauses nobody
    /// before feedback says so, and a paused viewer probes from where the pause left it).
    pub fn early_estimate_bps(&self) -> Option<u64> {
        self.bwe.as_ref().map(|b| b.est.estimate_bps())
    }

    /// Whether the viewer has a bandwidth estimator from transport-wide feedback running.
    pub fn has_estimator(&self) -> bool {
        self.bwe.is_some()
    }

    /// Whether the viewer's path has shown trouble: its latest receiver report has
    /// [`DOUBT_LOSS`] or more of its video lost, or it has NACKed. A single-layer stream's
    /// viewer gets its estimator only then (see `adapt/pause.rs`): one on a path that
    /// never lost a packet pays nothing for it.
    pub fn path_in_doubt(&self) -> bool {
        self.video
            .as_ref()
            .is_some_and(|t| t.fraction_lost >= DOUBT_LOSS)
            || self.resend.is_some()
    }
}

/// Where the estimate of a viewer whose video paused before any feedback came is set (see
/// `adapt/pause.rs`): its first probe is 1.5 times this, and each that goes through lifts
/// the next.
pub const UNMEASURED_BPS: u64 = 150_000;

/// Fraction of video lost (of 256, as receiver reports say it) from which a path is in
/// doubt: 2 %.
pub const DOUBT_LOSS: u8 = 5;

#[cfg(test)]
mod tests {
    //! The policy on simulated time: `now` is an origin plus what the test adds to it.

    use super::*;

    /// A stream's layers: 0 at 2.5 Mbit/s, 1 at 1 Mbit/s, 2 at 300 kbit/s.
    const RATES: LayerRates = LayerRates([2_500_000, 1_000_000, 300_000]);
    const PASS: Duration = Duration::from_millis(250);
    const ROUND: Duration = Duration::from_millis(20);

    /// A connected viewer sent `layer`, with an estimate from feedback and a quiet path.
    pub(super) fn seen(bps: u64, layer: u8) -> Observed {
        Observed {
            estimate: Estimate::Feedback(bps),
            usage: Some(Usage::Normal),
            target: layer,
            sending: Some(layer),
            can_probe: true,
            pinned: false,
            paused: false,
            loss: 0,
        }
    }

    /// One viewer's chooser on a simulated clock.
    struct Sim {
        epoch: Epoch,
        start: Instant,
        now: Instant,
        c: LayerChooser,
    }

    impl Sim {
        fn new() -> Sim {
            Sim::at_epoch(Duration::ZERO)
        }

        /// A clock `past` after its epoch.
        fn at_epoch(past: Duration) -> Sim {
            let origin = Instant::now();
            let start = origin + past;
            Sim {
                epoch: Epoch::new(origin),
                start,
                now: start,
                c: LayerChooser::default(),
            }
        }

        fn elapsed(&self) -> Duration {
            self.now - self.start
        }

        fn choose(&mut self, seen: &Observed) -> Decision {
            self.c.choose(&self.epoch, seen, &RATES, self.now)
        }

        fn round(&mut self, round: Duration, usage: Usage) -> ProbeRound {
            self.c
                .probe_round(&self.epoch, self.now, round, Some(usage))
        }

        /// Runs the probe just started to its end, a round every `round` from now:
        /// the packets it sent and how it ended.
        fn run_probe(&mut self, round: Duration, end_usage: Usage) -> (usize, bool) {
            let mut sent = 0;
            loop {
                match self.round(round, end_usage) {
                    ProbeRound::Send(n) => sent += n,
                    ProbeRound::Ended { overuse } => return (sent, overuse),
                    ProbeRound::Idle => panic!("no probe runs"),
                }
                self.now += round;
            }
        }

        /// Calls `choose` every pass from now until it starts a probe (or `limit` passes):
        /// the time from `from` to that call.
        fn next_probe(&mut self, seen: &Observed, from: Instant, limit: usize) -> Option<Duration> {
            for _ in 0..limit {
                self.now += PASS;
                if self.choose(seen).probe {
                    return Some(self.now - from);
                }
            }
            None
        }
    }

    #[test]
    fn a_chooser_fits_where_the_pass_counters_it_replaced_were() {
        // The worker's `Adapt` (four `u8` counters and a `u16` byte count) was 6 bytes,
        // beside a `bool` in an 8-aligned entry: 7 bytes, packed, take no more room there.
        assert!(std::mem::size_of::<LayerChooser>() <= 7);
        assert_eq!(std::mem::align_of::<LayerChooser>(), 1);
    }

    #[test]
    fn down_at_once_when_the_estimate_falls_below_0_95_of_the_layer() {
        let mut sim = Sim::new();
        // 2.5 Mbit/s fits in 0.95 of 2.64: stay on layer 0 however long.
        for _ in 0..20 {
            assert_eq!(sim.choose(&seen(2_640_000, 0)).switch, Switch::Stay);
            sim.now += PASS;
        }
        // 2.5 > 0.95 x 2.6: at the first call, down to the best layer under 0.9 x 2.6 =
        // 2.34 Mbit/s (layer 1), the current one stopping at once.
        assert_eq!(sim.choose(&seen(2_600_000, 0)).switch, Switch::Drop(1));
        // Under 0.9 x 1 Mbit/s only layer 2 fits.
        let mut sim = Sim::new();
        assert_eq!(sim.choose(&seen(1_000_000, 0)).switch, Switch::Drop(2));
        // Nothing fits: the lowest layer.
        assert_eq!(sim.choose(&seen(100_000, 1)).switch, Switch::Drop(2));
        // While the path's delay grows, to the best under 0.6 of it: from 1.6 Mbit/s,
        // layer 2 (0.96 Mbit/s), not layer 1 (under 0.9 x 1.6, as on a quiet path).
        assert_eq!(
            Sim::new().choose(&seen(1_600_000, 0)).switch,
            Switch::Drop(1)
        );
        let mut over = seen(1_600_000, 0);
        over.usage = Some(Usage::Over);
        assert_eq!(Sim::new().choose(&over).switch, Switch::Drop(2));
    }

    #[test]
    fn up_only_after_the_hold_and_with_30_percent_headroom() {
        // 3.26 Mbit/s is over 1.3 x layer 0: up to it, on the first call at least 1.75 s
        // after the first that saw it fit: at passes 250 ms apart, the 8th.
        for step in [PASS, Duration::from_millis(100), Duration::from_millis(260)] {
            let mut sim = Sim::new();
            let moved = loop {
                let d = sim.choose(&seen(3_260_000, 1));
                if d.switch != Switch::Stay {
                    assert_eq!(d.switch, Switch::To(0));
                    break sim.elapsed();
                }
                assert!(sim.elapsed() < UP_HOLD, "still held at {:?}", sim.elapsed());
                sim.now += step;
            };
            assert!(
                moved >= UP_HOLD && moved < UP_HOLD + step,
                "{step:?}: {moved:?}"
            );
            if step == PASS {
                assert_eq!(moved, 7 * PASS, "the 8th pass");
            }
        }
        // Just under the headroom (3.2 Mbit/s < 1.3 x 2.5): never up.
        let mut sim = Sim::new();
        for _ in 0..100 {
            assert_eq!(sim.choose(&seen(3_200_000, 1)).switch, Switch::Stay);
            sim.now += PASS;
        }
        // A call that sees no room starts the hold again.
        let mut sim = Sim::new();
        for _ in 0..6 {
            assert_eq!(sim.choose(&seen(3_260_000, 1)).switch, Switch::Stay);
            sim.now += PASS;
        }
        assert_eq!(sim.choose(&seen(3_200_000, 1)).switch, Switch::Stay);
        sim.now += PASS;
        let again = sim.now;
        while sim.choose(&seen(3_260_000, 1)).switch == Switch::Stay {
            sim.now += PASS;
        }
        assert_eq!(sim.now - again, UP_HOLD);
    }

    /// Calls `choose` every pass from now until it moves the viewer up (or `limit`
    /// passes): the time from now to that call, and the layer.
    fn until_up(sim: &mut Sim, s: &Observed, limit: usize) -> Option<(Duration, u8)> {
        let from = sim.now;
        for _ in 0..limit {
            if let Switch::To(l) = sim.choose(s).switch {
                return Some((sim.now - from, l));
            }
            sim.now += PASS;
        }
        None
    }

    #[test]
    fn a_failed_up_move_holds_the_layer_8_s_doubling_to_64_and_one_that_holds_clears_it() {
        let mut sim = Sim::new();
        let room = seen(3_260_000, 1);
        assert_eq!(until_up(&mut sim, &room, 20), Some((UP_HOLD, 0)));
        // On layer 0, the estimate falls within the check: down, and a hold of 8 s.
        sim.now += Duration::from_secs(1);
        assert_eq!(sim.choose(&seen(2_000_000, 0)).switch, Switch::Drop(1));
        assert_eq!(sim.c.up_backoff(), UP_BACKOFF_MIN);
        let failed = sim.now;
        // Room again at once: no probe and no move until the hold is over, then the usual
        // hold of a higher layer that fits.
        let mut probing = seen(2_000_000, 1);
        for _ in 0..8 {
            sim.now += PASS;
            assert_eq!(sim.choose(&probing), Decision::STAY, "held");
        }
        let (after, l) = until_up(&mut sim, &room, 100).expect("up again");
        let at = sim.now - failed;
        assert_eq!(l, 0);
        assert!(
            at >= UP_BACKOFF_MIN + UP_HOLD && at < UP_BACKOFF_MIN + UP_HOLD + PASS,
            "{at:?} ({after:?})"
        );
        // Overuse within the check: down to the layer below at once, a hold of 16 s.
        sim.now += PASS;
        let mut over = seen(3_260_000, 0);
        over.usage = Some(Usage::Over);
        assert_eq!(sim.choose(&over).switch, Switch::Drop(1));
        assert_eq!(sim.c.up_backoff(), 2 * UP_BACKOFF_MIN);
        // The holds double to 64 s.
        for want in [32, 64, 64] {
            until_up(&mut sim, &room, 1_000).expect("up again");
            sim.now += PASS;
            assert_eq!(sim.choose(&over).switch, Switch::Drop(1));
            assert_eq!(sim.c.up_backoff(), Duration::from_secs(want));
        }
        // An up-move that holds through its check (overuse after it does not count) clears
        // the count: a probe may start again, and the next failure holds 8 s.
        until_up(&mut sim, &room, 1_000).expect("up again");
        let mut kept = seen(3_260_000, 0);
        let moved = sim.now;
        while sim.now - moved < UP_CHECK {
            sim.now += PASS;
            assert_eq!(sim.choose(&kept).switch, Switch::Stay);
        }
        assert_eq!(sim.c.up_backoff(), Duration::ZERO);
        kept.usage = Some(Usage::Over);
        assert_eq!(sim.choose(&kept).switch, Switch::Stay);
        probing.target = 1;
        assert_eq!(sim.choose(&seen(2_600_000, 0)).switch, Switch::Drop(1));
        assert_eq!(
            sim.c.up_backoff(),
            Duration::ZERO,
            "a move down, not a failed move up"
        );
        sim.now += PASS;
        assert!(sim.choose(&probing).probe);
        // A REMB viewer's up-moves are checked as well (by its estimate: no delay signal).
        let mut sim = Sim::new();
        let mut remb = room;
        remb.estimate = Estimate::Remb(3_260_000);
        until_up(&mut sim, &remb, 20).expect("up");
        remb.estimate = Estimate::Remb(1_000_000);
        remb.target = 0;
        assert_eq!(sim.choose(&remb).switch, Switch::Drop(2));
        assert_eq!(sim.c.up_backoff(), UP_BACKOFF_MIN);
    }

    #[test]
    fn pinned_viewers_never_move_nor_probe() {
        let mut sim = Sim::new();
        for (bps, layer) in [(100_000, 0), (50_000_000, 2), (2_000_000, 1), (1, 1)] {
            let mut s = seen(bps, layer);
            s.pinned = true;
            for _ in 0..40 {
                assert_eq!(sim.choose(&s), Decision::STAY);
                sim.now += PASS;
            }
            for estimate in [Estimate::None, Estimate::Pending, Estimate::Remb(bps)] {
                s.estimate = estimate;
                assert_eq!(sim.choose(&s), Decision::STAY);
            }
        }
        assert_eq!(sim.c, LayerChooser::default(), "its state untouched");
    }

    #[test]
    fn without_an_estimate_the_best_layer_and_while_one_is_pending_where_it_is() {
        let mut sim = Sim::new();
        let mut s = seen(0, 2);
        s.estimate = Estimate::None;
        assert_eq!(sim.choose(&s).switch, Switch::To(0));
        s.target = 0;
        assert_eq!(sim.choose(&s).switch, Switch::Stay);
        s.estimate = Estimate::Pending;
        s.target = 2;
        assert_eq!(sim.choose(&s), Decision::STAY);
        // A REMB moves layers as an estimate from feedback does.
        let mut s = seen(600_000, 1);
        s.estimate = Estimate::Remb(600_000);
        assert_eq!(sim.choose(&s).switch, Switch::Drop(2));
        assert_eq!(LayerChooser::first_layer(&RATES, false), 0);
        assert_eq!(LayerChooser::first_layer(&RATES, true), 1);
    }

    #[test]
    fn a_probe_starts_only_below_the_next_layer_on_a_quiet_path_with_an_estimate() {
        // On layer 1 with 2 Mbit/s: layer 0 needs 3.25, so a probe; the same with a REMB
        // that did not fall (the viewer's own estimator counts the padding).
        assert!(Sim::new().choose(&seen(2_000_000, 1)).probe);
        let mut remb = seen(2_000_000, 1);
        remb.estimate = Estimate::Remb(2_000_000);
        assert!(Sim::new().choose(&remb).probe);
        type Change = fn(&mut Observed);
        let refused: [(&str, Change); 8] = [
            ("next layer fits", |s| {
                s.estimate = Estimate::Feedback(3_300_000)
            }),
            ("top layer", |s| {
                s.target = 0;
                s.sending = Some(0);
                s.estimate = Estimate::Feedback(3_000_000);
            }),
            ("REMB that fell", |s| {
                s.estimate = Estimate::Remb(2_000_000);
                s.usage = Some(Usage::Over);
            }),
            ("REMB without RTX", |s| {
                s.estimate = Estimate::Remb(2_000_000);
                s.can_probe = false;
            }),
            ("overuse", |s| s.usage = Some(Usage::Over)),
            ("draining", |s| s.usage = Some(Usage::Under)),
            ("no RTX", |s| s.can_probe = false),
            ("not yet on its layer", |s| s.sending = Some(2)),
        ];
        for (why, change) in refused {
            let mut s = seen(2_000_000, 1);
            change(&mut s);
            assert!(!Sim::new().choose(&s).probe, "{why}");
        }
        // One probe at a time.
        let mut sim = Sim::new();
        assert!(sim.choose(&seen(2_000_000, 1)).probe);
        sim.now += PASS;
        assert!(!sim.choose(&seen(2_000_000, 1)).probe);
    }

    #[test]
    fn a_probe_lasts_half_a_second_at_1_5_times_the_estimate() {
        let mut sim = Sim::new();
        assert!(sim.choose(&seen(2_000_000, 1)).probe);
        // 1.5 x 2 Mbit/s less the 1 Mbit/s it is sent (under 1.1 x 3.25).
        assert_eq!(sim.c.probe_bps(), 2_000_000);
        let mut rounds = 0;
        while let ProbeRound::Send(_) = sim.round(ROUND, Usage::Normal) {
            rounds += 1;
            sim.now += ROUND;
        }
        assert_eq!((rounds, sim.elapsed()), (25, PROBE_LENGTH));
        // Near the next layer, no more than 1.1 of what it needs: 3.575 - 1 Mbit/s.
        let mut sim = Sim::new();
        assert!(sim.choose(&seen(3_000_000, 1)).probe);
        assert_eq!(sim.c.probe_bps(), 2_574_800);
    }

    /// The probe packets of a 20 ms round as the worker counted them per sweep: the bytes
    /// of a sweep (`extra / 8 / 50`, truncated to a `u16`) in 291-byte packets, rounded up,
    /// at most 16.
    fn per_sweep(extra: f64) -> usize {
        let bytes = (extra / 8.0 / 50.0).min(f64::from(u16::MAX)) as u16;
        usize::from(bytes).div_ceil(PROBE_PACKET).min(PROBE_BURST)
    }

    #[test]
    fn at_20_ms_rounds_a_probe_sends_what_the_per_sweep_budget_sent() {
        // On layer 2 (300 kbit/s) with estimates from 250 kbit/s (1.5 x = 375: 75 extra)
        // up to 2.5 Mbit/s (capped at 1.1 x 1.3 x 1 Mbit/s).
        let mut checked = 0;
        for bps in (320_000..2_500_000).step_by(7_919) {
            let mut sim = Sim::new();
            let s = seen(bps, 2);
            if !sim.choose(&s).probe {
                continue;
            }
            let b = bps as f64;
            let need = 1_000_000.0 * UP_HEADROOM;
            let extra = ((PROBE_GAIN * b).min(need * PROBE_CAP) - 300_000.0).max(0.0);
            assert_eq!(
                sim.round(ROUND, Usage::Normal),
                ProbeRound::Send(per_sweep(extra)),
                "{bps}"
            );
            checked += 1;
        }
        assert!(checked > 100, "{checked}");
    }

    #[test]
    fn the_probe_budget_is_per_second_whatever_the_rounds() {
        // 465.6 kbit/s of probe (58,200 B/s: 200 packets a second): on layer 1 at 734.4
        // kbit/s, 1.5 x 800 kbit/s - 734.4.
        let rates = LayerRates([2_000_000, 734_400, 0]);
        for (round, per_round) in [(10, 2), (20, 4), (25, 5), (50, 10)] {
            let round = Duration::from_millis(round);
            let mut sim = Sim::new();
            assert!(
                sim.c
                    .choose(&sim.epoch, &seen(800_000, 1), &rates, sim.now)
                    .probe
            );
            assert_eq!(sim.c.probe_bps(), 465_600);
            assert_eq!(sim.round(round, Usage::Normal), ProbeRound::Send(per_round));
            // Half a second of it, in any rounds: 100 packets.
            assert_eq!(
                sim.run_probe(round, Usage::Normal),
                (100, false),
                "{round:?}"
            );
        }
        // A late round sends what its length earned, up to a burst.
        let mut sim = Sim::new();
        assert!(sim.choose(&seen(2_000_000, 1)).probe);
        let per = |ms| match sim.c.clone().probe_round(
            &sim.epoch,
            sim.now,
            Duration::from_millis(ms),
            None,
        ) {
            ProbeRound::Send(n) => n,
            other => panic!("{other:?}"),
        };
        // 2 Mbit/s is 250 kB/s: 5,000 bytes (18 packets) per 20 ms; at most 800 packets a
        // second and 16 in a round.
        assert_eq!((per(5), per(10), per(20), per(200)), (4, 8, 16, 16));
    }

    #[test]
    fn the_probe_back_off_doubles_from_2_to_32_s_and_resets() {
        let mut sim = Sim::new();
        let s = seen(2_000_000, 1);
        assert!(sim.choose(&s).probe);
        let mut waits = Vec::new();
        for _ in 0..7 {
            assert!(sim.run_probe(ROUND, Usage::Over).1);
            let end = sim.now;
            waits.push((
                sim.c.backoff(),
                sim.next_probe(&s, end, 1_000).expect("a probe"),
            ));
        }
        let secs = [2, 4, 8, 16, 32, 32, 32];
        for ((backoff, waited), s) in waits.into_iter().zip(secs) {
            let want = Duration::from_secs(s);
            assert_eq!(backoff, want);
            // The first pass at or after the end of the wait.
            assert!(waited >= want && waited < want + PASS, "{s} s: {waited:?}");
        }
        // A probe without overuse clears it: the next waits only the rest.
        assert!(!sim.run_probe(ROUND, Usage::Normal).1);
        assert_eq!(sim.c.backoff(), Duration::ZERO);
        let end = sim.now;
        let waited = sim.next_probe(&s, end, 10).expect("a probe");
        assert!(
            waited >= PROBE_REST && waited < PROBE_REST + PASS,
            "{waited:?}"
        );
        // And the next overuse starts again at 2 s.
        assert!(sim.run_probe(ROUND, Usage::Over).1);
        assert_eq!(sim.c.backoff(), BACKOFF_MIN);
    }

    #[test]
    fn stamps_wrap_without_holding_anything_up() {
        // The ticks wrap 65,536 x 5 ms (327.68 s) after the epoch: a hold across it.
        let mut sim = Sim::at_epoch(Duration::from_millis(327_680 - 1_000));
        while sim.choose(&seen(3_260_000, 1)).switch == Switch::Stay {
            sim.now += PASS;
        }
        assert_eq!(sim.elapsed(), UP_HOLD);
        // A 32 s back-off whose chooser is not called for minutes is over when it is.
        let mut sim = Sim::new();
        let s = seen(2_000_000, 1);
        for _ in 0..5 {
            assert!(sim.choose(&s).probe);
            sim.run_probe(ROUND, Usage::Over);
            sim.now += BACKOFF_MAX;
        }
        assert_eq!(sim.c.backoff(), BACKOFF_MAX);
        assert!(sim.choose(&s).probe);
        sim.run_probe(ROUND, Usage::Over);
        for minutes in [3, 5, 6] {
            let mut later = sim.c;
            let at = sim.now + Duration::from_secs(60 * minutes);
            assert!(
                later.choose(&sim.epoch, &s, &RATES, at).probe,
                "{minutes} min"
            );
        }
    }
}
