//! Which peers a TURN relay may reach.
//!
//! A relay sends datagrams wherever its client asks (CreatePermission, ChannelBind, Send):
//! without a policy any client with credentials (and every WHEP viewer gets some) reaches the
//! server's own loopback services, its private network and the cloud metadata service. This
//! is the class of hole coturn closed for CVE-2020-26262. By default tern refuses peers that
//! are not on the public internet:
//!
//! | range | why |
//! | --- | --- |
//! | `0.0.0.0/8`, `::/128` | unspecified, "this network" (reaches the server itself on Linux) |
//! | `127.0.0.0/8`, `::1/128` | loopback |
//! | `169.254.0.0/16`, `fe80::/10` | link-local, incl. the metadata service 169.254.169.254 |
//! | `10.0.0.0/8`, `172.16.0.0/12`, `192.168.0.0/16`, `fc00::/7` | private (RFC 1918, ULA) |
//! | `100.64.0.0/10` | carrier-grade NAT (RFC 6598) |
//! | `224.0.0.0/4`, `ff00::/8` | multicast |
//! | `240.0.0.0/4` | reserved, and `255.255.255.255` broadcast |
//! | the server's own addresses | its listen, relay and candidate addresses |
//!
//! IPv4-mapped IPv6 peers (`::ffff:a.b.c.d`) are judged as the IPv4 address they carry.
//!
//! Exceptions are exact transport addresses the relay may reach whatever the ranges say:
//! tern's own WebRTC media port, the peer of every relayed viewer. Permissions (by IP) for
//! an exception's address are granted, but data goes only to the exception's port.
//! `allowed_peers` (CIDR list) lets ranges through whatever else says; `denied_peers` adds
//! ranges to the refused ones. As in coturn, a peer in both lists is allowed, so a private
//! deployment opens its own network with one `allowed_peers` entry.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::str::FromStr;

/// An address range in CIDR notation (`10.0.0.0/8`, `2001:db8::/32`; a bare address is a
/// /32 or /128).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    len: u8,
}

/// A CIDR string that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an address range like 10.0.0.0/8 or 2001:db8::/32")]
pub struct CidrError(pub String);

impl Cidr {
    /// The range of `net` with a prefix of `len` bits (clamped to the family's width).
    pub fn new(net: IpAddr, len: u8) -> Cidr {
        let max = if net.is_ipv4() { 32 } else { 128 };
        Cidr {
            net,
            len: len.min(max),
        }
    }

    /// Whether `ip` (of the same family) is in the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                prefix_eq(&n.octets(), &a.octets(), usize::from(self.len))
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                prefix_eq(&n.octets(), &a.octets(), usize::from(self.len))
            }
            _ => false,
        }
    }
}

/// Whether the first `bits` bits of `a` and `b` are equal.
fn prefix_eq(a: &[u8], b: &[u8], bits: usize) -> bool {
    let (whole, rest) = (bits / 8, bits % 8);
    if a[..whole] != b[..whole] {
        return false;
    }
    if rest == 0 {
        return true;
    }
    let mask = 0xffu8 << (8 - rest);
    (a[whole] & mask) == (b[whole] & mask)
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Cidr, CidrError> {
        let bad = || CidrError(s.to_string());
        let (addr, len) = match s.trim().split_once('/') {
            Some((a, l)) => (a, Some(l.parse::<u8>().map_err(|_| bad())?)),
            None => (s.trim(), None),
        };
        let net: IpAddr = addr.parse().map_err(|_| bad())?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let len = len.unwrap_or(max);
        if len > max {
            return Err(bad());
        }
        Ok(Cidr::new(net, len))
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.net, self.len)
    }
}

/// The ranges refused by default (see the module docs), as CIDR strings.
pub const DEFAULT_DENIED: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "::/128",
    "::1/128",
    "fc00::/7",
    "fe80::/10",
    "ff00::/8",
];

/// Decides which peer addresses a relay may reach.
#[derive(Debug, Clone)]
pub struct PeerPolicy {
    allowed: Vec<Cidr>,
    denied: Vec<Cidr>,
    exceptions: Vec<SocketAddr>,
}

impl PeerPolicy {
    /// The default refusals plus `own` (the server's addresses) and `denied`, with
    /// `allowed` let through over all of them.
    pub fn new(own: &[IpAddr], allowed: Vec<Cidr>, denied: Vec<Cidr>) -> PeerPolicy {
        let mut all: Vec<Cidr> = DEFAULT_DENIED
            .iter()
            .filter_map(|s| s.parse().ok())
            .collect();
        all.extend(
            own.iter()
                .filter(|ip| !ip.is_unspecified())
                .map(|&ip| Cidr::new(canonical(ip), 128)),
        );
        all.extend(denied);
        PeerPolicy {
            allowed,
            denied: all,
            exceptions: Vec::new(),
        }
    }

    /// Lets the relay reach exactly these transport addresses (IP and port) whatever the
    /// ranges say, e.g. the server's own media port.
    pub fn with_exceptions(mut self, exceptions: Vec<SocketAddr>) -> PeerPolicy {
        self.exceptions = exceptions
            .into_iter()
            .map(|a| SocketAddr::new(canonical(a.ip()), a.port()))
            .collect();
        self
    }

    /// A policy that allows every peer (tests of the relay path itself, on loopback).
    pub fn allow_all() -> PeerPolicy {
        PeerPolicy {
            allowed: Vec::new(),
            denied: Vec::new(),
            exceptions: Vec::new(),
        }
    }

    /// Whether a permission (CreatePermission, by IP) may be installed for `ip`: its ranges
    /// allow it, or it is an exception's address.
    pub fn allows_ip(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.range_allows(ip) || self.exceptions.iter().any(|e| e.ip() == ip)
    }

    /// Whether the relay may exchange datagrams with `peer` (ChannelBind, Send).
    pub fn allows(&self, peer: SocketAddr) -> bool {
        let peer = SocketAddr::new(canonical(peer.ip()), peer.port());
        self.range_allows(peer.ip()) || self.exceptions.contains(&peer)
    }

    fn range_allows(&self, ip: IpAddr) -> bool {
        if self.allowed.iter().any(|c| c.contains(ip)) {
            return true;
        }
        if ip == IpAddr::V4(Ipv4Addr::BROADCAST) {
            return false;
        }
        !self.denied.iter().any(|c| c.contains(ip))
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it carries; others unchanged.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("address")
    }

    fn v6(s: &str) -> std::net::Ipv6Addr {
        s.parse().expect("v6")
    }

    fn policy() -> PeerPolicy {
        PeerPolicy::new(&[ip("203.0.113.10"), ip("0.0.0.0")], Vec::new(), Vec::new())
    }

    #[test]
    fn internal_and_special_peers_are_refused_by_default() {
        let p = policy();
        for bad in [
            "127.0.0.1",
            "127.8.9.10",
            "0.0.0.0",
            "0.1.2.3",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "100.127.255.254",
            "169.254.169.254",
            "169.254.1.1",
            "224.0.0.1",
            "239.255.255.250",
            "255.255.255.255",
            "240.0.0.1",
            "203.0.113.10",
            "::",
            "::1",
            "fe80::1",
            "fd00::1",
            "fc00::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.1.2.3",
            "::ffff:169.254.169.254",
            "::ffff:203.0.113.10",
        ] {
            assert!(!p.allows_ip(ip(bad)), "{bad} is allowed");
        }
    }

    #[test]
    fn public_peers_are_allowed() {
        let p = policy();
        for good in [
            "8.8.8.8",
            "172.32.0.1",
            "172.15.255.255",
            "100.128.0.1",
            "192.169.0.1",
            "203.0.113.11",
            "2001:db8::1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(p.allows_ip(ip(good)), "{good} is refused");
        }
    }

    #[test]
    fn allowed_peers_override_and_denied_peers_add() {
        let p = PeerPolicy::new(
            &[],
            vec!["10.1.0.0/16".parse().expect("cidr")],
            vec![
                "198.51.100.0/24".parse().expect("cidr"),
                "10.1.2.3".parse().expect("cidr"),
            ],
        );
        assert!(
            p.allows_ip(ip("10.1.2.3")),
            "allowed wins over denied, as in coturn"
        );
        assert!(p.allows_ip(ip("10.1.200.1")));
        assert!(
            !p.allows_ip(ip("10.2.0.1")),
            "the rest of 10/8 stays refused"
        );
        assert!(!p.allows_ip(ip("198.51.100.7")));
        assert!(p.allows_ip(ip("198.51.101.7")));
        assert!(PeerPolicy::allow_all().allows_ip(ip("127.0.0.1")));
    }

    #[test]
    fn an_exception_opens_one_port_of_a_refused_address() {
        let media: SocketAddr = "127.0.0.1:10000".parse().expect("addr");
        let p = policy().with_exceptions(vec![media]);
        assert!(
            p.allows_ip(ip("127.0.0.1")),
            "a permission for the media address"
        );
        assert!(p.allows(media));
        assert!(p.allows("[::ffff:127.0.0.1]:10000".parse().expect("mapped")));
        assert!(
            !p.allows("127.0.0.1:22".parse().expect("addr")),
            "other ports stay shut"
        );
        assert!(!p.allows_ip(ip("127.0.0.2")));
        assert!(p.allows("8.8.8.8:53".parse().expect("addr")));
        assert!(!p.allows("10.0.0.1:10000".parse().expect("addr")));
    }

    #[test]
    fn cidrs_parse_and_reject_nonsense() {
        let c: Cidr = "2001:db8::/32".parse().expect("v6");
        assert!(c.contains(IpAddr::V6(v6("2001:db8:ffff::1"))));
        assert!(!c.contains(IpAddr::V6(v6("2001:db9::1"))));
        assert!(!c.contains(ip("10.0.0.1")), "families do not mix");
        assert_eq!(
            "10.0.0.0/8".parse::<Cidr>().expect("v4").to_string(),
            "10.0.0.0/8"
        );
        assert_eq!(
            "1.2.3.4".parse::<Cidr>().expect("bare").to_string(),
            "1.2.3.4/32"
        );
        assert!(
            "0.0.0.0/0"
                .parse::<Cidr>()
                .expect("all")
                .contains(ip("8.8.8.8"))
        );
        for bad in [
            "10.0.0.0/33",
            "::/129",
            "10.0.0/8",
            "nonsense",
            "10.0.0.0/x",
            "",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad} parsed");
        }
    }
}
