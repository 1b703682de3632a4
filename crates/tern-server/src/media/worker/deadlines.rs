//! The times a worker's loop wakes for, in one table (quinn-proto's `TimerTable`): a slot
//! per [`Timer`], and [`Deadlines::next_timeout`] for the soonest and which it is.
//!
//! The sweep and the catch-up step are the worker's own clocks, set and stopped here.
//! Ingest and the clip sources keep their timers themselves (they move with every packet);
//! the loop copies theirs in before it waits, so the wait is one look at the table.

use std::time::Instant;

/// What a worker wakes for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Timer {
    /// The periodic sweep: streams' ticks, layer choice and probes, viewers' timers.
    Sweep,
    /// The next step of the viewers catching up from the keyframe cache.
    CatchUp,
    /// Ingest's soonest timer (publishers' timeouts, keyframe request coalescing).
    Ingest,
    /// The soonest packet due from a clip source.
    Source,
}

impl Timer {
    /// Every timer, in slot order.
    pub(super) const ALL: [Timer; 4] = [Timer::Sweep, Timer::CatchUp, Timer::Ingest, Timer::Source];
}

/// When each [`Timer`] fires, if it is set.
#[derive(Debug, Default, Clone)]
pub(super) struct Deadlines {
    at: [Option<Instant>; Timer::ALL.len()],
}

impl Deadlines {
    /// Sets `timer` to fire at `at`.
    pub(super) fn set(&mut self, timer: Timer, at: Instant) {
        self.at[timer as usize] = Some(at);
    }

    /// Sets `timer` to `at`, or stops it.
    pub(super) fn update(&mut self, timer: Timer, at: Option<Instant>) {
        self.at[timer as usize] = at;
    }

    /// Stops `timer`.
    pub(super) fn stop(&mut self, timer: Timer) {
        self.at[timer as usize] = None;
    }

    /// When `timer` fires, if it is set.
    pub(super) fn get(&self, timer: Timer) -> Option<Instant> {
        self.at[timer as usize]
    }

    /// Whether `timer` is set and due at `now`.
    pub(super) fn is_expired(&self, timer: Timer, now: Instant) -> bool {
        self.get(timer).is_some_and(|at| at <= now)
    }

    /// The soonest timer set, and which it is (the first in [`Timer::ALL`] order on a tie).
    pub(super) fn next_timeout(&self) -> Option<(Instant, Timer)> {
        Timer::ALL
            .into_iter()
            .filter_map(|t| self.get(t).map(|at| (at, t)))
            .min_by_key(|&(at, _)| at)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_soonest_timer_set_is_next_and_says_which_it_is() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut d = Deadlines::default();
        assert_eq!(d.next_timeout(), None);
        d.set(Timer::Sweep, ms(20));
        d.set(Timer::Ingest, ms(500));
        assert_eq!(d.next_timeout(), Some((ms(20), Timer::Sweep)));
        d.set(Timer::CatchUp, ms(5));
        assert_eq!(d.next_timeout(), Some((ms(5), Timer::CatchUp)));
        d.stop(Timer::CatchUp);
        d.update(Timer::Source, Some(ms(10)));
        assert_eq!(d.next_timeout(), Some((ms(10), Timer::Source)));
        d.update(Timer::Source, None);
        d.set(Timer::Sweep, ms(600));
        assert_eq!(d.next_timeout(), Some((ms(500), Timer::Ingest)));
        // A tie goes to the first in slot order.
        d.set(Timer::Source, ms(500));
        assert_eq!(d.next_timeout(), Some((ms(500), Timer::Ingest)));
    }

    #[test]
    fn a_timer_is_due_from_its_instant_on_and_never_once_stopped() {
        let t0 = Instant::now();
        let mut d = Deadlines::default();
        assert!(!d.is_expired(Timer::Sweep, t0));
        d.set(Timer::Sweep, t0 + Duration::from_millis(20));
        assert!(!d.is_expired(Timer::Sweep, t0 + Duration::from_millis(19)));
        assert!(d.is_expired(Timer::Sweep, t0 + Duration::from_millis(20)));
        assert!(!d.is_expired(Timer::CatchUp, t0 + Duration::from_secs(60)));
        d.stop(Timer::Sweep);
        assert!(!d.is_expired(Timer::Sweep, t0 + Duration::from_secs(60)));
        assert_eq!(d.get(Timer::Sweep), None);
    }
}
