//! The state a bandwidth estimate adds to a viewer (see `adapt.rs`).

use std::time::Instant;

use crate::bwe::Estimator;

/// The bandwidth estimate of a viewer of a simulcast stream: boxed, and only made for
/// those (a viewer of a single-layer stream has nothing to adapt).
pub(super) struct Bwe {
    pub(super) est: Estimator,
    /// Next transport-wide sequence number.
    pub(super) next_seq: u16,
    /// Extended sequence number of the next RTX (probe padding) packet.
    pub(super) rtx_seq: u64,
    /// The estimator's time zero.
    pub(super) epoch: Instant,
    /// Transport-wide feedback packets read, and dropped as malformed.
    pub(super) parsed: u32,
    pub(super) dropped: u32,
}

impl Bwe {
    pub(super) fn micros(&self, now: Instant) -> i64 {
        now.saturating_duration_since(self.epoch).as_micros() as i64
    }
}
