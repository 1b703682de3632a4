//! Buffer pool configuration and the crate's error type.

use std::fmt;

/// Size of a huge page assumed by [`PoolConfig::huge_pages`] (2 MiB on x86-64 and aarch64).
pub const HUGE_PAGE_BYTES: usize = 2 * 1024 * 1024;

/// Errors of this crate. Each names the offending configuration key.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PoolError {
    /// A [`PoolConfig`] field holds a value the pool cannot work with.
    InvalidConfig {
        /// The offending field, spelled as in the config file (`"max_free"`, ...).
        field: &'static str,
        /// Why the value was rejected.
        reason: &'static str,
    },
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::InvalidConfig { field, reason } => {
                write!(f, "invalid buffer pool setting `{field}`: {reason}")
            }
        }
    }
}

impl std::error::Error for PoolError {}

/// Configuration of a [`BufferPool`](crate::BufferPool), with spead2 `memory_pool` semantics.
///
/// Requests of `lower..=upper` bytes are served with `upper`-byte buffers from the pool;
/// other sizes bypass it. The defaults of [`PoolConfig::packets`] are sized for RTP/SRTP
/// datagrams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// Name in statistics, warnings and the memory report (`"packets"`).
    pub name: &'static str,
    /// Smallest request served from the pool; smaller requests bypass it.
    pub lower: usize,
    /// Largest request served from the pool, and the capacity of every pooled buffer.
    pub upper: usize,
    /// Buffers allocated (and, with `prefault`, faulted in) by
    /// [`BufferPool::new`](crate::BufferPool::new), before the first packet.
    pub initial: usize,
    /// Most free buffers kept; a buffer freed beyond this goes back to the system.
    pub max_free: usize,
    /// When the free count drops below this, the pool flags that it needs a refill, and
    /// [`BufferPool::refill`](crate::BufferPool::refill) (run off the packet path) tops the
    /// free count back up to this. `0` disables refilling.
    pub low_water: usize,
    /// Allocate the pool's buffers in one anonymous mapping created with `MAP_POPULATE`, so
    /// the first packet into each buffer never takes a page fault. Without it (and without
    /// `huge_pages`) each buffer is its own heap allocation, faulted in on first touch.
    pub prefault: bool,
    /// Back that mapping with huge pages: reserved ones (`MAP_HUGETLB`) if the system has
    /// them, else transparent huge pages (`MADV_HUGEPAGE`). The mapping is rounded up to a
    /// whole number of [`HUGE_PAGE_BYTES`]. Falls back to normal pages, and to the heap when
    /// mapping fails altogether.
    pub huge_pages: bool,
}

impl PoolConfig {
    /// Defaults for a packet buffer pool named `name`:
    ///
    /// - `lower = 1`: every non-empty datagram is pooled.
    /// - `upper = 1500`: the Ethernet MTU bounds every unfragmented datagram, and UDP
    ///   applications must not rely on fragmentation (RFC 8085, section 3.2); WebRTC stacks keep
    ///   media packets near 1,200 bytes.
    /// - `initial = 1024`: a few milliseconds of a busy fan-out in flight (a 1,000-viewer stream
    ///   at 30 packets per frame keeps a few hundred buffers live).
    /// - `max_free = 4096`: 6 MiB at most held idle after a burst.
    /// - `low_water = 256`: a quarter of `initial`, leaving the refill thread time to react
    ///   before the pool runs dry.
    /// - `prefault = true`, `huge_pages = false` (1,500-byte buffers are far below a huge page).
    pub fn packets(name: &'static str) -> Self {
        Self {
            name,
            lower: 1,
            upper: 1500,
            initial: 1024,
            max_free: 4096,
            low_water: 256,
            prefault: true,
            huge_pages: false,
        }
    }

    /// Check the settings; the error names the first bad field.
    pub fn validate(&self) -> Result<(), PoolError> {
        let bad = |field, reason| Err(PoolError::InvalidConfig { field, reason });
        if self.name.is_empty() {
            return bad("name", "must not be empty");
        }
        if self.upper == 0 {
            return bad("upper", "must be at least 1 byte");
        }
        if self.upper > isize::MAX as usize / 2 {
            return bad("upper", "is larger than any allocation can be");
        }
        if self.lower > self.upper {
            return bad("lower", "must not exceed `upper`");
        }
        if self.initial > self.max_free {
            return bad("initial", "must not exceed `max_free`");
        }
        if self.initial.checked_mul(self.upper).is_none() {
            return bad("initial", "`initial * upper` overflows");
        }
        if self.low_water > self.max_free {
            return bad(
                "low_water",
                "must not exceed `max_free` (a refill would be released again)",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(cfg: PoolConfig) -> &'static str {
        match cfg.validate() {
            Err(PoolError::InvalidConfig { field, .. }) => field,
            Ok(()) => "ok",
        }
    }

    #[test]
    fn validation_names_the_field() {
        let ok = PoolConfig::packets("p");
        assert_eq!(field(ok.clone()), "ok");
        assert_eq!(
            field(PoolConfig {
                name: "",
                ..ok.clone()
            }),
            "name"
        );
        assert_eq!(
            field(PoolConfig {
                upper: 0,
                lower: 0,
                ..ok.clone()
            }),
            "upper"
        );
        assert_eq!(
            field(PoolConfig {
                lower: 1501,
                ..ok.clone()
            }),
            "lower"
        );
        assert_eq!(
            field(PoolConfig {
                initial: 5000,
                ..ok.clone()
            }),
            "initial"
        );
        assert_eq!(
            field(PoolConfig {
                low_water: 5000,
                ..ok.clone()
            }),
            "low_water"
        );
        assert_eq!(
            field(PoolConfig {
                huge_pages: true,
                ..ok.clone()
            }),
            "ok"
        );
        let msg = PoolConfig { max_free: 0, ..ok }
            .validate()
            .expect_err("initial > max_free")
            .to_string();
        assert!(msg.contains("`initial`"), "{msg}");
    }
}
