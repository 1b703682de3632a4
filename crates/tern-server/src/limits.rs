//! Limits per client address: how many connections or pending sessions one address may hold
//! at once, so that one client that opens many and walks away cannot lock everyone else out
//! of a global cap.
//!
//! An IPv4 client is counted by its address; an IPv6 client by its /64, the prefix one host
//! or one customer usually holds whole (counting single IPv6 addresses would let one host
//! take a fresh address per connection). IPv4-mapped IPv6 addresses count as IPv4.
//!
//! Exempt ranges (`limits.exempt`, by default loopback) are not counted: a load tester on
//! the same host, or a reverse proxy in front of tern (whose clients all arrive from its
//! address, so a per-address limit would lump them together; limit them at the proxy).
//!
//! A [`PerAddress`] limiter hands out an [`AddrPermit`] per admitted connection or session;
//! dropping the permit gives the place back. The table holds only addresses with a permit
//! out, so its size is bounded by what the global caps admit. The lock is taken once per
//! connection or session, never per packet.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tern_rtc::peer_policy::Cidr;

/// The part of an address a limit counts: an IPv4 address or an IPv6 /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientKey {
    /// An IPv4 client (also when it arrives IPv4-mapped).
    V4([u8; 4]),
    /// The /64 of an IPv6 client.
    V6([u8; 8]),
}

impl ClientKey {
    /// The key `ip` is counted under.
    pub fn of(ip: IpAddr) -> ClientKey {
        match ip {
            IpAddr::V4(v4) => ClientKey::V4(v4.octets()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => ClientKey::V4(v4.octets()),
                None => {
                    let o = v6.octets();
                    let mut p = [0u8; 8];
                    p.copy_from_slice(&o[..8]);
                    ClientKey::V6(p)
                }
            },
        }
    }
}

/// A limit was reached; what to tell the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("too many {what} from this address (at most {max})")]
pub struct LimitReached {
    /// What is limited, e.g. "pending sessions".
    pub what: &'static str,
    /// The limit.
    pub max: usize,
}

/// Which configuration key a registered limiter follows ([`Limiters`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKey {
    /// `limits.http_connections_per_ip` (trusted proxies exempt too).
    HttpConnections,
    /// `limits.rtmp_connections_per_ip`.
    RtmpConnections,
    /// `limits.srt_connections_per_ip`.
    SrtConnections,
    /// `limits.pending_sessions_per_ip`.
    PendingSessions,
    /// `limits.ome_connections_per_ip`.
    OmeConnections,
    /// `hls.sessions_per_ip`.
    HlsSessions,
}

/// The server's limiters by the key each follows: a reload sets them all at once
/// ([`Limiters::apply`]).
#[derive(Debug, Default)]
pub struct Limiters(Mutex<Vec<(LimitKey, Arc<PerAddress>)>>);

impl Limiters {
    /// `limiter` follows `key` from now on.
    pub fn register(&self, key: LimitKey, limiter: &Arc<PerAddress>) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((key, limiter.clone()));
    }

    /// Sets every limiter to `cfg`'s value of its key and `limits.exempt`.
    pub fn apply(&self, cfg: &crate::config::Config) {
        let exempt = cfg.limits.exempt_ranges();
        let mut http_exempt = exempt.clone();
        http_exempt.extend(cfg.server.trusted_proxy_ranges());
        let l = &cfg.limits;
        for (key, limiter) in self.0.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let (max, ex) = match key {
                LimitKey::HttpConnections => (l.http_connections_per_ip, &http_exempt),
                LimitKey::RtmpConnections => (l.rtmp_connections_per_ip, &exempt),
                LimitKey::SrtConnections => (l.srt_connections_per_ip, &exempt),
                LimitKey::PendingSessions => (l.pending_sessions_per_ip, &exempt),
                LimitKey::OmeConnections => (l.ome_connections_per_ip, &exempt),
                LimitKey::HlsSessions => (cfg.hls.sessions_per_ip, &exempt),
            };
            limiter.set(max, ex);
        }
    }
}

/// Counts what each client address holds of one kind, up to a maximum each.
#[derive(Debug)]
pub struct PerAddress {
    what: &'static str,
    /// The limit: a reload may change it ([`PerAddress::set`]).
    max: std::sync::atomic::AtomicUsize,
    /// Ranges not counted: a reload may change them.
    exempt: std::sync::RwLock<Vec<Cidr>>,
    held: Mutex<HashMap<ClientKey, usize>>,
    refused: AtomicU64,
}

impl PerAddress {
    /// A limiter of `max` per address for `what` (named in refusals and metrics); addresses
    /// in `exempt` are not counted.
    pub fn new(what: &'static str, max: usize, exempt: &[Cidr]) -> Arc<PerAddress> {
        Arc::new(PerAddress {
            what,
            max: std::sync::atomic::AtomicUsize::new(max),
            exempt: std::sync::RwLock::new(exempt.to_vec()),
            held: Mutex::new(HashMap::new()),
            refused: AtomicU64::new(0),
        })
    }

    /// What is limited.
    pub fn what(&self) -> &'static str {
        self.what
    }

    /// The limit per address.
    pub fn max(&self) -> usize {
        self.max.load(Ordering::Relaxed)
    }

    /// A reload's limit and exempt ranges: they apply to the next acquire (places held are
    /// kept, even above the limit).
    pub fn set(&self, max: usize, exempt: &[Cidr]) {
        self.max.store(max, Ordering::Relaxed);
        *self.exempt.write().unwrap_or_else(|e| e.into_inner()) = exempt.to_vec();
    }

    /// Refusals so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// How many `ip`'s key holds now.
    pub fn held(&self, ip: IpAddr) -> usize {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.get(&ClientKey::of(ip)).copied().unwrap_or(0)
    }

    /// Takes one place for `ip`, or says the limit is reached (and counts the refusal).
    pub fn acquire(self: &Arc<Self>, ip: IpAddr) -> Result<AddrPermit, LimitReached> {
        let canonical = ip.to_canonical();
        let exempt = self.exempt.read().unwrap_or_else(|e| e.into_inner());
        if exempt.iter().any(|c| c.contains(canonical)) {
            drop(exempt);
            return Ok(AddrPermit {
                limiter: self.clone(),
                key: None,
            });
        }
        drop(exempt);
        let key = ClientKey::of(ip);
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let n = held.entry(key).or_insert(0);
        let max = self.max();
        if *n >= max {
            drop(held);
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(LimitReached {
                what: self.what,
                max,
            });
        }
        *n += 1;
        Ok(AddrPermit {
            limiter: self.clone(),
            key: Some(key),
        })
    }

    fn release(&self, key: ClientKey) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                held.remove(&key);
            }
        }
    }
}

/// One place held by one client address; dropping it gives the place back.
#[derive(Debug)]
pub struct AddrPermit {
    limiter: Arc<PerAddress>,
    /// None for an exempt address (nothing was counted).
    key: Option<ClientKey>,
}

impl Drop for AddrPermit {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            self.limiter.release(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("address")
    }

    #[test]
    fn each_address_gets_its_own_allowance_and_dropping_a_permit_gives_it_back() {
        let l = PerAddress::new("connections", 2, &[]);
        let a1 = l.acquire(ip("192.0.2.1")).expect("first");
        let _a2 = l.acquire(ip("192.0.2.1")).expect("second");
        assert_eq!(
            l.acquire(ip("192.0.2.1"))
                .expect_err("a third is refused")
                .to_string(),
            "too many connections from this address (at most 2)"
        );
        assert_eq!(l.refused(), 1);
        // Another address is not affected.
        let _b = l.acquire(ip("192.0.2.2")).expect("another address");
        drop(a1);
        assert_eq!(l.held(ip("192.0.2.1")), 1);
        let _a3 = l.acquire(ip("192.0.2.1")).expect("a place was given back");
    }

    #[test]
    fn ipv6_counts_by_slash_64_and_mapped_ipv4_as_ipv4() {
        let l = PerAddress::new("sessions", 1, &[]);
        let _p = l.acquire(ip("2001:db8:1:2::1")).expect("first");
        assert!(
            l.acquire(ip("2001:db8:1:2:ffff::9")).is_err(),
            "same /64, another address"
        );
        let _q = l.acquire(ip("2001:db8:1:3::1")).expect("another /64");
        let _r = l.acquire(ip("198.51.100.7")).expect("v4");
        assert!(
            l.acquire(ip("::ffff:198.51.100.7")).is_err(),
            "mapped v4 is the same client"
        );
    }

    #[test]
    fn exempt_ranges_are_not_counted() {
        let loopback: Cidr = "127.0.0.0/8".parse().expect("cidr");
        let l = PerAddress::new("sessions", 1, &[loopback]);
        let held: Vec<AddrPermit> = (0..10)
            .map(|_| l.acquire(ip("127.0.0.1")).expect("exempt"))
            .collect();
        assert_eq!(l.held(ip("127.0.0.1")), 0);
        assert!(
            l.acquire(ip("::ffff:127.0.0.1")).is_ok(),
            "mapped loopback too"
        );
        let _p = l.acquire(ip("192.0.2.1")).expect("first");
        assert!(l.acquire(ip("192.0.2.1")).is_err());
        drop(held);
        assert_eq!(l.refused(), 1);
    }

    #[test]
    fn the_table_forgets_addresses_that_hold_nothing() {
        let l = PerAddress::new("sessions", 5, &[]);
        for i in 0..100u8 {
            drop(l.acquire(IpAddr::from([10, 0, 0, i])).expect("place"));
        }
        assert!(l.held.lock().expect("lock").is_empty());
    }
}
