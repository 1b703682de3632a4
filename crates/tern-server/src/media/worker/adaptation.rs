//! The worker's side of simulcast layer adaptation: the policy is tern-rtc's `LayerChooser`,
//! one in each viewer's table entry (see `worker/layers.rs`); this keeps what the worker
//! runs them with: the [`Epoch`] their stamps count from, when layers are next chosen, the
//! viewers probing, and when the last round of probes ran.

use std::time::{Duration, Instant};

use tern_rtc::viewer::adapt::Epoch;

use crate::media::link::ViewerId;

/// How often layers are chosen: a path that shrank is left within a quarter second of
/// the estimate saying so. (A pass runs in the first sweep after it is due.)
pub(super) const EVERY: Duration = Duration::from_millis(250);

/// See the module.
pub(super) struct Adaptation {
    epoch: Epoch,
    /// When layers are next chosen.
    next_pass: Instant,
    /// Viewers sending probe packets.
    probing: Vec<ViewerId>,
    /// When the last round of probes ran.
    last_round: Instant,
    /// Whether single-layer streams' viewers are gated (their video paused on a path too
    /// narrow for it, see `worker/layers.rs`).
    pause_video: bool,
}

impl Adaptation {
    /// Starts at `now`: the first pass is due at once.
    pub(super) fn new(now: Instant, pause_video: bool) -> Self {
        Adaptation {
            epoch: Epoch::new(now),
            next_pass: now,
            probing: Vec::new(),
            last_round: now,
            pause_video,
        }
    }

    /// Whether single-layer streams' viewers may have their video paused.
    pub(super) fn pause_video(&self) -> bool {
        self.pause_video
    }

    /// The origin of the viewers' choosers' stamps.
    pub(super) fn epoch(&self) -> &Epoch {
        &self.epoch
    }

    /// Whether layers are chosen now (then not again for [`EVERY`]).
    pub(super) fn pass_due(&mut self, now: Instant) -> bool {
        if now < self.next_pass {
            return false;
        }
        self.next_pass = now + EVERY;
        true
    }

    /// Viewers whose probe started.
    pub(super) fn started(&mut self, ids: impl IntoIterator<Item = ViewerId>) {
        self.probing.extend(ids);
    }

    /// A round of probes begins: its length (the time since the last began) and the
    /// probing viewers, out until [`Adaptation::end_round`] puts back those still probing.
    pub(super) fn begin_round(&mut self, now: Instant) -> (Duration, Vec<ViewerId>) {
        let round = now.saturating_duration_since(self.last_round);
        self.last_round = now;
        (round, std::mem::take(&mut self.probing))
    }

    /// The viewers still probing after a round (idle, the list holds no memory).
    pub(super) fn end_round(&mut self, still: Vec<ViewerId>) {
        self.probing = if still.is_empty() { Vec::new() } else { still };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_is_due_at_once_then_every_250_ms_from_the_last() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut a = Adaptation::new(t0, true);
        assert!(a.pass_due(t0));
        assert!(!a.pass_due(ms(249)));
        // Late by 10 ms (the next sweep): the one after is 250 ms from then.
        assert!(a.pass_due(ms(260)));
        assert!(!a.pass_due(ms(500)));
        assert!(a.pass_due(ms(510)));
    }

    #[test]
    fn a_round_is_as_long_as_the_time_since_the_last_and_an_idle_list_holds_nothing() {
        let t0 = Instant::now();
        let mut a = Adaptation::new(t0, true);
        let id = ViewerId::from_raw(7);
        a.started([id]);
        let (round, list) = a.begin_round(t0 + Duration::from_millis(20));
        assert_eq!(
            (round, list.as_slice()),
            (Duration::from_millis(20), &[id][..])
        );
        a.end_round(list);
        let (round, list) = a.begin_round(t0 + Duration::from_millis(41));
        assert_eq!(round, Duration::from_millis(21));
        assert_eq!(list, [id]);
        a.end_round(Vec::with_capacity(8));
        assert_eq!(a.probing.capacity(), 0);
    }
}
