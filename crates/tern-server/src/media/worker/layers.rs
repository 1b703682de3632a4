//! Simulcast layer choice and probing, for the viewers of simulcast streams only (a viewer
//! of a single-layer stream has nothing to adapt and pays nothing here).
//!
//! Every [`EVERY`], for each simulcast stream this worker serves, every viewer that is not
//! pinned is pointed at a layer:
//!
//! - without a bandwidth estimate (no transport-wide feedback negotiated, and no REMB), the
//!   best layer sending now (a viewer that will have one starts on the best layer within
//!   [`START_BPS`], see `Worker::start_viewer`);
//! - down, the layer it leaves stops at once (its packets would only deepen the queue the
//!   new layer's keyframe waits in);
//! - with one, down at once to the best layer that fits in 0.9 of the estimate when its
//!   layer no longer fits in 0.95 of it; up only to a layer that fits with 30 % headroom,
//!   and only after that has held for [`UP_AFTER`] passes in a row (2 s: hysteresis).
//!
//! A viewer moves at the wanted layer's next keyframe; one waiting to move gets that
//! keyframe asked for again each pass (encoders ignore requests too soon after another:
//! libwebrtc keeps 300 ms per sender, whatever the layer; ingest still coalesces them to
//! one per layer per 500 ms).
//!
//! Probing: a viewer on a lower layer never sends more than that layer, so its estimate
//! could never show room for a higher one. A viewer whose next layer up does not fit sends
//! probe packets for half a second: padding-only RTP packets on its RTX SSRC, each with its
//! own transport-wide sequence number so that the feedback counts them, paced every sweep,
//! for a total of 1.5 times the estimate (at most what the next layer needs). (Copies of
//! media packets would not do: SRTP's replay protection drops them before the receiver's
//! transport layer sees them; padding on the media SSRC would take sequence numbers from
//! the media.) The estimator takes what arrived without queues growing as
//! its new floor, so the estimate grows by half per probe while the path has room. A probe
//! that ends in overuse backs off: the next one waits 2 s, doubling to 32 s.

use std::time::{Duration, Instant};

use tern_rtc::bwe::Usage;
use tern_rtc::stream::MAX_LAYERS;

use super::Worker;
use crate::media::ledger::ledger;
use crate::media::link::ViewerId;
use crate::media::table::entry_in;

/// What a viewer with transport-wide feedback starts on, before it has an estimate: the
/// best layer within this (a start on the top layer of a path that cannot carry it would
/// lose packets until the first estimate; libwebrtc's senders start at 300 kbit/s).
pub(super) const START_BPS: u32 = 1_000_000;
/// How often layers are chosen: a path that shrank is left within a quarter second of
/// the estimate saying so.
pub(super) const EVERY: Duration = Duration::from_millis(250);
/// Passes a higher layer must fit before a viewer moves up (2 s).
const UP_AFTER: u8 = 8;
/// Headroom a layer needs under the estimate to move up to it.
const UP_HEADROOM: f64 = 1.3;
/// A layer above this share of the estimate no longer fits: move down.
const DOWN_AT: f64 = 0.95;
/// Moving down, to the best layer under this share of the estimate.
const DOWN_TO: f64 = 0.9;
/// Sweeps a probe lasts (20 ms each: half a second).
const PROBE_TICKS: u8 = 25;
/// A probe brings the viewer's send rate to this multiple of the estimate.
const PROBE_GAIN: f64 = 1.5;
/// Wait before the next probe after overuse, doubling, up to this (passes: 2 s, 32 s).
const PROBE_BACKOFF_MIN: u8 = 8;
const PROBE_BACKOFF_MAX: u8 = 128;
/// Most probe packets per viewer and sweep (16 every 20 ms: 1.9 Mbit/s).
const PROBE_BURST: usize = 16;
/// Bytes of one probe packet on the wire, about: 255 of padding, the RTP header with the
/// transport-wide sequence number, the AEAD tag.
const PROBE_PACKET: usize = 291;

impl Worker {
    /// Points stream `stream`'s viewers at their layers and starts probes (see the module).
    pub(super) fn choose_layers(&mut self, stream: usize, now: Instant) {
        let s = &self.streams[stream].stream;
        let best = s.pick_layer(None);
        let rate = |l: u8| f64::from(s.rate(l));
        // Bit l: some viewer waits for a keyframe of layer l.
        let mut wanted = 0u8;
        let mut probes: Vec<ViewerId> = Vec::new();
        for &id in &self.streams[stream].viewers {
            let Some(e) = entry_in(&mut self.slots, id) else {
                continue;
            };
            if e.handshaking {
                continue;
            }
            let has_bwe = ledger(e, |v| v.enable_bwe(now));
            let v = &mut e.viewer;
            let a = &mut e.adapt;
            if !v.pinned() {
                let cur = v.target_layer();
                let target = match v.estimate_bps().map(|b| b as f64) {
                    // Feedback is coming but too little yet to judge by.
                    None if has_bwe => cur,
                    None => best,
                    Some(b) if rate(cur) > DOWN_AT * b || rate(cur) == 0.0 => {
                        a.up_streak = 0;
                        let to = s.pick_layer(Some((DOWN_TO * b) as u32));
                        if to != cur && rate(cur) > 0.0 {
                            v.drop_to_layer(to);
                        }
                        to
                    }
                    Some(b) => {
                        let up = s.pick_layer(Some((b / UP_HEADROOM) as u32));
                        if rate(up) > rate(cur) {
                            a.up_streak = a.up_streak.saturating_add(1);
                        } else {
                            a.up_streak = 0;
                        }
                        if a.up_streak >= UP_AFTER {
                            a.up_streak = 0;
                            up
                        } else {
                            cur
                        }
                    }
                };
                // (A drop has set the target already, and holds the layer it leaves.)
                if target != v.target_layer() {
                    v.set_layer(target, false);
                }
                // Probe toward the next layer up when it does not fit yet.
                let next = s.ranked().filter(|&l| rate(l) > rate(target)).last();
                a.probe_wait = a.probe_wait.saturating_sub(1);
                if let (true, Some(next), Some(b)) = (has_bwe, next, v.estimate_bps()) {
                    let b = b as f64;
                    let need = rate(next) * UP_HEADROOM;
                    let usage = v.bwe_usage();
                    if b < need
                        && v.can_probe()
                        && a.probe_ticks == 0
                        && a.probe_wait == 0
                        && usage == Some(Usage::Normal)
                        && v.video_layer() == Some(target)
                    {
                        let total = (PROBE_GAIN * b).min(need * 1.1);
                        let extra = (total - rate(target)).max(0.0);
                        // Bytes per 20 ms sweep.
                        a.probe_bytes = (extra / 8.0 / 50.0).min(f64::from(u16::MAX)) as u16;
                        if a.probe_bytes > 0 {
                            a.probe_ticks = PROBE_TICKS;
                            probes.push(id);
                        }
                    }
                }
            }
            if v.video_layer().is_some_and(|l| l != v.target_layer()) {
                wanted |= 1 << v.target_layer();
            }
        }
        self.probing.extend(probes);
        for layer in 0..MAX_LAYERS as u8 {
            if wanted & 1 << layer != 0 {
                self.ask_keyframe(stream, layer, now);
            }
        }
    }

    /// One sweep of every probing viewer: its share of probe packets, copies of its layer's
    /// newest packets. A probe that ran out is judged: overuse backs the next one off.
    pub(super) fn probe(&mut self) {
        let mut i = 0;
        while i < self.probing.len() {
            let id = self.probing[i];
            let Some(e) = entry_in(&mut self.slots, id) else {
                self.probing.swap_remove(i);
                continue;
            };
            if e.adapt.probe_ticks == 0 {
                let over = e.viewer.bwe_usage() == Some(Usage::Over);
                let a = &mut e.adapt;
                if over {
                    a.backoff = (a.backoff * 2).clamp(PROBE_BACKOFF_MIN, PROBE_BACKOFF_MAX);
                    a.probe_wait = a.backoff;
                } else {
                    a.backoff = 0;
                    a.probe_wait = 2;
                }
                self.probing.swap_remove(i);
                continue;
            }
            e.adapt.probe_ticks -= 1;
            let packets = usize::from(e.adapt.probe_bytes)
                .div_ceil(PROBE_PACKET)
                .min(PROBE_BURST);
            for _ in 0..packets {
                if !self.send_padding(id) {
                    break;
                }
            }
            i += 1;
        }
        if self.probing.is_empty() && self.probing.capacity() > 0 {
            self.probing = Vec::new();
        }
    }
}
