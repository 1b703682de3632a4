//! Simulcast layer choice and probing, for the viewers of simulcast streams only (a viewer
//! of a single-layer stream has nothing to adapt and pays nothing here). The policy is
//! tern-rtc's sans-IO `LayerChooser` (`tern_rtc::viewer::adapt`: down at once, up after a
//! hold, probes and their back-off, all stated in time); the worker runs it:
//!
//! - every 250 ms (`adaptation::EVERY`), for each simulcast stream it serves, each
//!   connected viewer's chooser, with what it observes of the viewer and the stream's layer
//!   rates, and carries out the decision (pinned viewers never move);
//! - every sweep, a round of each probing viewer's probe: what the time since the last
//!   round earned, in padding-only packets on its RTX SSRC (see `Worker::send_padding`).
//!
//! A viewer moves at the wanted layer's next keyframe; one waiting to move gets that
//! keyframe asked for again each pass (encoders ignore requests too soon after another:
//! libwebrtc keeps 300 ms per sender, whatever the layer; ingest still coalesces them to
//! one per layer per 500 ms).

use std::time::Instant;

use tern_rtc::stream::MAX_LAYERS;
use tern_rtc::viewer::adapt::ProbeRound;

use super::Worker;
use crate::media::ledger::ledger;
use crate::media::link::ViewerId;

impl Worker {
    /// Points stream `stream`'s viewers at their layers and starts probes (see the module).
    pub(super) fn choose_layers(&mut self, stream: usize, now: Instant) {
        let rates = self.streams[stream].stream.layer_rates();
        // Bit l: some viewer waits for a keyframe of layer l.
        let mut wanted = 0u8;
        let mut probes: Vec<ViewerId> = Vec::new();
        for &id in &self.streams[stream].viewers {
            let Some(e) = self.table.get(id) else {
                continue;
            };
            if e.handshaking {
                continue;
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
            let usage = e.viewer.bwe_usage();
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
