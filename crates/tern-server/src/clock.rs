//! Wall-clock time for RTP: instants mapped to NTP timestamps (RTCP sender reports,
//! abs-capture-time), read from the system clock once.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use tern_proto::rtp;

/// Milliseconds since the Unix epoch by the wall clock (0 before 1970): the `time` of events,
/// snapshots, playlists and recordings.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Maps instants to 64-bit NTP time (read from the wall clock once at start).
#[derive(Debug, Clone, Copy)]
pub struct NtpClock {
    base: Instant,
    base_ntp: u64,
}

impl NtpClock {
    /// Reads the clocks now.
    pub fn now() -> Self {
        let base = Instant::now();
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        NtpClock {
            base,
            base_ntp: rtp::ntp_from_unix(unix),
        }
    }

    /// NTP time of `t`.
    pub fn ntp(&self, t: Instant) -> u64 {
        let d = t.saturating_duration_since(self.base);
        let frac = (u64::from(d.subsec_nanos()) << 32) / 1_000_000_000;
        self.base_ntp
            .wrapping_add(d.as_secs() << 32)
            .wrapping_add(frac)
    }
}
