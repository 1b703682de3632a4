//! Simulcast layer choice and probing, and the pause of a single-layer stream's video on a
//! path too narrow for it (`tunables.pause_video_below_estimate`). The policy is
//! tern-rtc's sans-IO `LayerChooser` (`tern_rtc::viewer::adapt`: down at once, up after a
//! hold, probes and their back-off, all stated in time); the worker runs it:
//!
//! - every 250 ms (`adaptation::EVERY`), for each simulcast stream it serves, each
//!   connected viewer's chooser, with what it observes of the viewer and the stream's layer
//!   rates, and carries out the decision (pinned viewers never move);
//! - at the same pace, for each single-layer stream, the viewers whose path is in doubt
//!   (`Viewer::path_in_doubt`: loss in a receiver report, a NACK; only those
//!   get an estimator) through the chooser's gate (`tern_rtc::viewer::adapt::pause`):
//!   their video pauses while the stream does not fit their estimate and resumes at a
//!   keyframe, each with an event; a viewer without trouble pays nothing here;
//! - every sweep, a round of each probing viewer's probe: what the time since the last
//!   round earned, in padding-only packets on its RTX SSRC (see `Worker::send_padding`).
//!
//! A viewer moves at the wanted layer's next keyframe; one waiting to move gets that
//! keyframe asked for again each pass (encoders ignore requests too soon after another:
//! libwebrtc keeps 300 ms per sender, whatever the layer; ingest still coalesces them to
//! one per layer per 500 ms).

use std::time::Instant;

use tern_rtc::stream::MAX_LAYERS;
use tern_rtc::viewer::adapt::{Estimate, ProbeRound, Switch};

use super::Worker;
use crate::media::ledger::ledger;

/// The least a single-layer stream's viewer's estimate starts at (a stream whose rate is
/// not measured yet).
const START_FLOOR_BPS: u64 = 300_000;
use crate::media::link::ViewerId;

impl Worker {
    /// Points stream `stream`'s viewers at their layers and starts probes (see the module).
    pub(super) fn choose_layers(&mut self, stream: usize, now: Instant) {
        let rates = self.streams.slots[stream].stream.layer_rates();
        // Bit l: some viewer waits for a keyframe of layer l.
        let mut wanted = 0u8;
        let mut probes: Vec<ViewerId> = Vec::new();
        let stats = &self.shared.stats;
        for &id in &self.streams.slots[stream].viewers {
            let Some(e) = self.table.get(id) else {
                continue;
            };
            if e.handshaking {
                continue;
            }
            // Paused while its stream had one layer: the gate no longer runs it.
            if e.viewer.video_paused() {
                e.viewer.resume_video();
                stats.snapshots.viewer_video_paused(id.raw(), false);
            }
            // Observing starts the viewer's estimator (its heap is the viewer's).
            let seen = ledger(e, |v| v.observe(now));
            let d = e.layers.choose(self.adaptation.epoch(), &seen, &rates, now);
            let v = &mut e.viewer;
            v.apply(d.switch);
            if d.probe {
                probes.push(id);
            }
            if v.video_layer().is_some_and(|l| l != v.target_layer()) {
                wanted |= 1 << v.target_layer();
            }
        }
        self.adaptation.started(probes);
        for layer in 0..MAX_LAYERS as u8 {
            if wanted & 1 << layer != 0 {
                self.ask_keyframe(stream, layer, now);
            }
        }
    }

    /// Pauses and resumes the video of single-layer stream `stream`'s viewers whose path is
    /// in doubt, and starts their probes (see the module).
    pub(super) fn gate_video(&mut self, stream: usize, now: Instant) {
        let rate = self.streams.slots[stream].stream.layer_rates().rate(0);
        // A new estimator starts a little above the stream's rate: the first loss takes it
        // below.
        let start = (u64::from(rate) * 5 / 4).max(START_FLOOR_BPS);
        let mut resuming = false;
        let mut probes: Vec<ViewerId> = Vec::new();
        let mut changed: Vec<(ViewerId, bool)> = Vec::new();
        for &id in &self.streams.slots[stream].viewers {
            let Some(e) = self.table.get(id) else {
                continue;
            };
            if e.handshaking || !(e.viewer.has_estimator() || e.viewer.path_in_doubt()) {
                continue;
            }
            let mut seen = ledger(e, |v| {
                v.enable_bwe_from(now, start);
                v.observe(now)
            });
            if seen.estimate == Estimate::Pending
                && let Some(b) = e.viewer.early_estimate_bps()
            {
                seen.estimate = Estimate::Feedback(b);
            }
            self.shared.pools.book(e);
            let d = e.layers.gate(self.adaptation.epoch(), &seen, rate, now);
            e.viewer.apply(d.switch);
            match d.switch {
                Switch::Pause => changed.push((id, true)),
                Switch::Resume => changed.push((id, false)),
                _ => {}
            }
            if d.probe {
                probes.push(id);
            }
            resuming |= e.viewer.resuming();
        }
        self.adaptation.started(probes);
        let stats = &self.shared.stats;
        for (id, paused) in changed {
            stats.snapshots.viewer_video_paused(id.raw(), paused);
        }
        if resuming {
            self.ask_keyframe(stream, 0, now);
        }
    }

    /// One round of every probing viewer: the probe packets the time since the last round
    /// earned. A probe that ran out is judged (overuse backs the next one off) and leaves
    /// the list.
    pub(super) fn probe(&mut self, now: Instant) {
        let (round, mut probing) = self.adaptation.begin_round(now);
        let mut i = 0;
        while i < probing.len() {
            let id = probing[i];
            let Some(e) = self.table.get(id) else {
                probing.swap_remove(i);
                continue;
            };
            let usage = e.viewer.path_usage();
            match e
                .layers
                .probe_round(self.adaptation.epoch(), now, round, usage)
            {
                ProbeRound::Send(packets) => {
                    for _ in 0..packets {
                        if !self.send_padding(id, now) {
                            break;
                        }
                    }
                    i += 1;
                }
                ProbeRound::Ended { .. } | ProbeRound::Idle => {
                    probing.swap_remove(i);
                }
            }
        }
        self.adaptation.end_round(probing);
    }
}
