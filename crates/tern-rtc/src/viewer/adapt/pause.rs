//! A single-layer stream's viewer on a path too narrow for it: its video pauses, its audio
//! goes on, and the video resumes at a keyframe once the path has room again (LiveKit
//! pauses a subscriber's video the same way when even its lowest layer does not fit).
//!
//! The policy is [`LayerChooser::gate`], with the same parts as the layer choice: the
//! estimate from transport-wide feedback, probes to find room, and the check after a
//! move up (a resume is one):
//!
//! - the video pauses at once when the stream's rate no longer fits in [`DOWN_AT`] of the
//!   estimate, or a receiver report says [`PAUSE_LOSS`] or more of it was lost (the first
//!   verdict to come on a path in doubt); its packets stop there, retransmissions too, so
//!   the queue drains and the audio gets through;
//! - while paused, the viewer is sent only audio, which carries no transport-wide sequence
//!   number: its path is measured by probes alone. Each lasts [`PAUSED_PROBE_LENGTH`] and
//!   adds padding up to [`PAUSED_PROBE_GAIN`] times the estimate after one that went
//!   through (the estimate takes what arrived as its floor unless the path is overused,
//!   also while its queue drains, as it does when a limit lifts: see
//!   `Estimator::take_probe_result`; so it grows by that much per probe on a path with
//!   room: 250 kbit/s to a 1.1 Mbit/s stream's 1.4 with headroom in three probes), or
//!   [`PROBE_GAIN`] times after one that ended in overuse and for the
//!   first of a pause; the wait after an overused one
//!   is at most [`PAUSED_PROBE_WAIT`] (a paused viewer has nothing else to recover with);
//! - it resumes when the stream's rate fits with [`UP_HEADROOM`]: from the stream's next
//!   keyframe, which the owner asks for. The resume is checked like an up-move: paused
//!   again within [`UP_CHECK`], the viewer stays paused, with no probe, for
//!   [`UP_BACKOFF_MIN`] doubling to [`UP_BACKOFF_MAX`].
//!
//! A viewer without an estimate from transport-wide feedback is never paused (a REMB-only
//! receiver's estimate comes from the video it is sent: paused, it could never recover).

use std::time::{Duration, Instant};

use super::{
    DOWN_AT, Decision, Epoch, Estimate, LayerChooser, Observed, PROBE_CAP, PROBE_GAIN, Switch,
    TICK_MS, Tick, UP_CHECKING, UP_HEADROOM, UP_MODE_SHIFT,
};
#[cfg(doc)]
use super::{UP_BACKOFF_MAX, UP_BACKOFF_MIN, UP_CHECK};

/// While paused, a probe after one that went through brings what the viewer is sent to
/// this multiple of the estimate.
pub const PAUSED_PROBE_GAIN: f64 = 2.5;
/// How long a probe of a paused viewer lasts: shorter than [`PROBE_LENGTH`] (it is the
/// only traffic feedback is about, so the acknowledged rate is the probe's from its
/// first feedback), so that a path that has room again is climbed in about a second a
/// step.
pub const PAUSED_PROBE_LENGTH: Duration = Duration::from_millis(300);
/// While paused, the longest wait before the next probe after one that ended in overuse.
pub const PAUSED_PROBE_WAIT: Duration = Duration::from_secs(1);
/// Video lost in a receiver report (of 256) from which the video pauses whatever the
/// estimate: 20 %.
pub const PAUSE_LOSS: u8 = 51;

impl LayerChooser {
    /// For a viewer of a single-layer stream whose video runs at `rate` bit/s: whether its
    /// video pauses or resumes, and whether a probe starts (see the module). Calls as
    /// [`LayerChooser::choose`]'s; a viewer is run by one or the other, never both.
    pub fn gate(&mut self, epoch: &Epoch, seen: &Observed, rate: u32, now: Instant) -> Decision {
        // Before its first feedback, only a receiver report's loss can say.
        let b = match seen.estimate {
            Estimate::Feedback(b) => b as f64,
            Estimate::Pending if !seen.paused => f64::INFINITY,
            _ => return Decision::STAY,
        };
        if seen.pinned || rate == 0 {
            return Decision::STAY;
        }
        let t = epoch.tick(now);
        let rate = f64::from(rate);
        let free = self.up_free(t);
        let checking = self.up & !(UP_CHECKING - 1) == UP_CHECKING;
        if !seen.paused {
            // Heavy loss in a receiver report is a verdict of its own, and the first one to
            // come: the estimator starts with the path in doubt, and its first feedback
            // comes from behind the queue that is losing the packets (pion behind a
            // 300 kbit/s token bucket: the report said 39 % lost 1.1 s before the first
            // feedback). Not while a resume is checked: the report may be from before it.
            let lossy = !checking && seen.loss >= PAUSE_LOSS;
            if rate > DOWN_AT * b || lossy {
                if checking {
                    self.fail_up(t);
                }
                // The first probe of a pause is as after one that ended in overuse: the
                // estimate was just shown too high.
                self.set(self.level().max(1), self.rate());
                return Decision {
                    switch: Switch::Pause,
                    probe: false,
                };
            }
            return Decision::STAY;
        }
        if !free {
            return Decision::STAY;
        }
        let need = rate * UP_HEADROOM;
        if b >= need {
            // Checked for UP_CHECK from now, as an up-move.
            self.up_since = Some(t.stamp());
            self.up = self.up & (UP_CHECKING - 1) | UP_CHECKING;
            return Decision {
                switch: Switch::Resume,
                probe: false,
            };
        }
        let probe =
            self.up >> UP_MODE_SHIFT == 0 && self.may_probe_paused(t) && seen.can_probe && {
                let gain = if self.level() == 0 {
                    PAUSED_PROBE_GAIN
                } else {
                    PROBE_GAIN
                };
                self.begin_probe((gain * b).min(need * PROBE_CAP), t, PAUSED_PROBE_LENGTH)
            };
        Decision {
            switch: Switch::Stay,
            probe,
        }
    }

    /// [`LayerChooser::may_probe`] with the wait after an overused probe cut to
    /// [`PAUSED_PROBE_WAIT`] from that probe's end (the wait set then is the back-off of
    /// the level it left).
    fn may_probe_paused(&mut self, t: Tick) -> bool {
        let wait = self.backoff();
        if let Some(until) = self.until.map(Tick::from)
            && !self.probing()
            && wait > PAUSED_PROBE_WAIT
            && !t.reached(until)
            && until.since(t) > PAUSED_PROBE_WAIT
        {
            let ended = Tick(
                until
                    .0
                    .wrapping_sub((wait.as_millis() / u128::from(TICK_MS)) as u16),
            );
            self.until = Some(ended.after(PAUSED_PROBE_WAIT).stamp());
        }
        self.may_probe(t)
    }
}

#[cfg(test)]
mod tests {
    //! The gate on simulated time.

    use super::super::{ProbeRound, UP_BACKOFF_MIN, UP_CHECK};
    use super::*;
    use crate::bwe::Usage;

    /// The demo clip's rate, about.
    const RATE: u32 = 1_100_000;
    const PASS: Duration = Duration::from_millis(250);
    const ROUND: Duration = Duration::from_millis(20);

    /// A connected viewer of the one layer (see the layer policy's tests), paused or not.
    fn seen(bps: u64, paused: bool) -> Observed {
        Observed {
            paused,
            ..super::super::tests::seen(bps, 0)
        }
    }

    struct Sim {
        epoch: Epoch,
        now: Instant,
        c: LayerChooser,
        paused: bool,
    }

    impl Sim {
        fn new() -> Sim {
            let now = Instant::now();
            Sim {
                epoch: Epoch::new(now),
                now,
                c: LayerChooser::default(),
                paused: false,
            }
        }

        /// One pass with estimate `bps`; the viewer's paused flag follows the decision.
        fn pass(&mut self, bps: u64) -> Decision {
            let d = self
                .c
                .gate(&self.epoch, &seen(bps, self.paused), RATE, self.now);
            match d.switch {
                Switch::Pause => self.paused = true,
                Switch::Resume => self.paused = false,
                _ => {}
            }
            d
        }

        /// Runs a started probe to its end with `usage` at the end; returns the packets it
        /// sent.
        fn run_probe(&mut self, usage: Usage) -> usize {
            let mut sent = 0;
            loop {
                self.now += ROUND;
                match self
                    .c
                    .probe_round(&self.epoch, self.now, ROUND, Some(usage))
                {
                    ProbeRound::Send(n) => sent += n,
                    ProbeRound::Ended { .. } => return sent,
                    ProbeRound::Idle => panic!("no probe ran"),
                }
            }
        }
    }

    #[test]
    fn pauses_at_once_when_the_stream_no_longer_fits_and_not_before() {
        let mut s = Sim::new();
        // 1.1 Mbit/s in 0.95 of 1.2: fits.
        assert_eq!(s.pass(1_200_000).switch, Switch::Stay);
        s.now += PASS;
        assert_eq!(s.pass(1_100_000).switch, Switch::Pause);
        assert!(s.paused);
        // Without an estimate from feedback, or pinned, or with no video measured: never.
        let mut c = LayerChooser::default();
        let e = Epoch::new(s.now);
        for (est, pinned, rate) in [
            (Estimate::Remb(100_000), false, RATE),
            (Estimate::Pending, false, RATE),
            (Estimate::Feedback(100_000), true, RATE),
            (Estimate::Feedback(100_000), false, 0),
        ] {
            let mut o = seen(0, false);
            o.estimate = est;
            o.pinned = pinned;
            assert_eq!(c.gate(&e, &o, rate, s.now), Decision::STAY);
        }
    }

    #[test]
    fn a_paused_viewer_probes_doubling_on_room_and_resumes_within_five_seconds() {
        let mut s = Sim::new();
        assert_eq!(s.pass(255_000).switch, Switch::Pause);
        // The limit lifts now: each probe that goes through doubles the estimate (the
        // estimator takes what arrived as its floor).
        let lifted = s.now;
        let mut est = 255_000u64;
        let mut probes = 0;
        while s.paused {
            s.now += PASS;
            let d = s.pass(est);
            if d.probe {
                probes += 1;
                let sent = s.run_probe(Usage::Normal);
                assert!(sent > 0);
                est = (est * 2).min(u64::from(RATE) * 3 / 2);
            }
            assert!(
                s.now - lifted < Duration::from_secs(5),
                "{probes} probes, {est}"
            );
        }
        assert_eq!(probes, 3);
        // The resume is checked: paused again within UP_CHECK, held with no probe.
        s.now += PASS;
        assert_eq!(s.pass(900_000).switch, Switch::Pause);
        s.now += PASS;
        let d = s.pass(3_000_000);
        assert_eq!(d, Decision::STAY);
        s.now += UP_BACKOFF_MIN;
        assert_eq!(s.pass(3_000_000).switch, Switch::Resume);
        // One that holds for its check clears the back-off.
        s.now += UP_CHECK;
        assert_eq!(s.pass(3_000_000).switch, Switch::Stay);
        assert_eq!(s.c.up_backoff(), Duration::ZERO);
    }

    #[test]
    fn under_a_narrow_path_probes_back_off_gently_and_never_wait_more_than_the_cap() {
        let mut s = Sim::new();
        assert_eq!(s.pass(255_000).switch, Switch::Pause);
        let mut starts = Vec::new();
        let t0 = s.now;
        while s.now - t0 < Duration::from_secs(60) {
            s.now += PASS;
            if s.pass(255_000).probe {
                starts.push(s.now);
                // 1.5 times the estimate after an overused probe, 2 after a clean one.
                let bps = s.c.probe_bps();
                assert!(bps <= 5 * 255_000 / 2 + 400, "{bps}");
                s.run_probe(Usage::Over);
                assert!(s.c.probe_bps() == 0);
            }
        }
        assert!(starts.len() >= 20, "{} probes in 60 s", starts.len());
        for w in starts.windows(2) {
            let gap = w[1] - w[0];
            assert!(
                gap <= PAUSED_PROBE_LENGTH + PAUSED_PROBE_WAIT + PASS + ROUND,
                "{gap:?} between probes"
            );
        }
        // After overuse the probe is 1.5 times the estimate.
        s.now += PAUSED_PROBE_WAIT + PASS;
        assert!(s.pass(255_000).probe);
        let bps = s.c.probe_bps();
        assert!(
            (380_000..=385_000).contains(&bps),
            "probe of {bps} bit/s after overuse"
        );
    }

    #[test]
    fn heavy_loss_in_a_receiver_report_pauses_before_any_feedback_but_not_during_a_check() {
        let mut s = Sim::new();
        let mut o = seen(0, false);
        o.estimate = Estimate::Pending;
        o.loss = PAUSE_LOSS - 1;
        assert_eq!(s.c.gate(&s.epoch, &o, RATE, s.now), Decision::STAY);
        o.loss = PAUSE_LOSS;
        assert_eq!(s.c.gate(&s.epoch, &o, RATE, s.now).switch, Switch::Pause);
        // Resumed: a report from before the resume does not pause it again.
        let mut o = seen(3_000_000, true);
        s.now += PASS;
        assert_eq!(s.c.gate(&s.epoch, &o, RATE, s.now).switch, Switch::Resume);
        o.paused = false;
        o.loss = 200;
        s.now += PASS;
        assert_eq!(s.c.gate(&s.epoch, &o, RATE, s.now), Decision::STAY);
        // Paused and still pending: nothing to probe with.
        let mut o = seen(0, true);
        o.estimate = Estimate::Pending;
        assert_eq!(s.c.gate(&s.epoch, &o, RATE, s.now), Decision::STAY);
    }

    #[test]
    fn without_rtx_a_paused_viewer_cannot_probe() {
        let mut s = Sim::new();
        assert_eq!(s.pass(255_000).switch, Switch::Pause);
        s.now += PASS;
        let mut o = seen(255_000, true);
        o.can_probe = false;
        assert_eq!(s.c.gate(&s.epoch, &o, RATE, s.now), Decision::STAY);
    }
}
