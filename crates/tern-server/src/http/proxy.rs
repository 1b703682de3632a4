//! Real client addresses behind reverse proxies (`server.trusted_proxies`).
//!
//! For a request whose connection comes from a trusted proxy, the client is the right-most
//! address of `Forwarded: for=` (RFC 7239) or, without that header, of `X-Forwarded-For`,
//! that is not itself a trusted proxy: every hop a trusted proxy appended is skipped, and
//! the first address an untrusted party could have written ends the walk. The request's
//! [`Peer`] becomes that address (the port stays the proxy connection's: proxies do not
//! forward the client's), so the per-address limits, admission, tokens, logs and snapshots
//! all see it. From anyone else, the headers are ignored.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, Weak};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use tern_rtc::peer_policy::Cidr;

use crate::config::Config;
use crate::http::listener::Peer;
use crate::session::Core;

/// The trusted proxies' ranges.
#[derive(Debug, Clone)]
pub struct TrustedProxies(Arc<[Cidr]>);

impl TrustedProxies {
    /// Over `ranges` (`server.trusted_proxies`).
    pub fn new(ranges: Vec<Cidr>) -> TrustedProxies {
        TrustedProxies(ranges.into())
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|c| c.contains(ip))
    }

    /// The client behind a request that came from `peer`: `None` when `peer` is not a
    /// trusted proxy or the headers name no usable address.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> Option<IpAddr> {
        if !self.trusts(peer) {
            return None;
        }
        let hops = forwarded_hops(headers);
        // Right to left: the last hop was appended by `peer` itself.
        for hop in hops.iter().rev() {
            match hop {
                Some(ip) if self.trusts(*ip) => continue,
                Some(ip) => return Some(*ip),
                // `unknown`, an obfuscated name or garbage: nothing right of it can be
                // believed to be the client, and it names no one.
                None => return None,
            }
        }
        // Every hop was a trusted proxy: the left-most is as close to a client as there is.
        hops.first().copied().flatten()
    }
}

/// The hops named by `Forwarded` (every `for=`, in order) or, when that is absent, by
/// `X-Forwarded-For`; `None` for an entry that is not an address.
fn forwarded_hops(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    let forwarded: Vec<&str> = headers
        .get_all("forwarded")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    if !forwarded.is_empty() {
        return forwarded
            .iter()
            .flat_map(|v| v.split(','))
            .filter_map(|element| {
                element.split(';').find_map(|pair| {
                    let (k, v) = pair.trim().split_once('=')?;
                    k.trim()
                        .eq_ignore_ascii_case("for")
                        .then(|| parse_node(v.trim().trim_matches('"')))
                })
            })
            .collect();
    }
    headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| parse_node(s.trim()))
        .collect()
}

/// An address as proxies write it: `192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`,
/// `[2001:db8::1]` or `[2001:db8::1]:4711`.
fn parse_node(s: &str) -> Option<IpAddr> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(sa) = s.parse::<SocketAddr>() {
        return Some(sa.ip());
    }
    s.strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .and_then(|r| r.parse().ok())
}

/// The ranges of the configuration in force, parsed once per configuration: a reload that
/// changes `server.trusted_proxies` applies from the next request.
#[derive(Debug, Default)]
pub struct LiveProxies(Mutex<Option<(Weak<Config>, TrustedProxies)>>);

impl LiveProxies {
    /// The trusted proxies of `config` (parsed again only when `config` is not the one
    /// parsed last).
    pub fn of(&self, config: &Arc<Config>) -> TrustedProxies {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((seen, t)) = g.as_ref()
            && std::ptr::eq(seen.as_ptr(), Arc::as_ptr(config))
        {
            return t.clone();
        }
        let t = TrustedProxies::new(config.server.trusted_proxy_ranges());
        *g = Some((Arc::downgrade(config), t.clone()));
        t
    }
}

/// The layer's state: the configuration's owner and the ranges parsed.
#[derive(Clone)]
pub(crate) struct ProxyLayer {
    core: Arc<Core>,
    proxies: Arc<LiveProxies>,
}

impl ProxyLayer {
    /// Over `core`'s configuration.
    pub(crate) fn new(core: Arc<Core>) -> Self {
        ProxyLayer {
            core,
            proxies: Arc::default(),
        }
    }
}

/// The layer: replaces the request's [`Peer`] with the real client's address.
pub(crate) async fn real_client(
    State(st): State<ProxyLayer>,
    mut req: Request,
    next: Next,
) -> Response {
    let trusted = st.proxies.of(&st.core.config());
    if let Some(ConnectInfo(Peer(addr))) = req.extensions().get::<ConnectInfo<Peer>>().copied()
        && let Some(ip) = trusted.client(addr.ip(), req.headers())
    {
        req.extensions_mut()
            .insert(ConnectInfo(Peer(SocketAddr::new(ip, addr.port()))));
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trusted(r: &[&str]) -> TrustedProxies {
        TrustedProxies::new(r.iter().map(|s| s.parse().expect("cidr")).collect())
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().expect("header value"));
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn the_right_most_untrusted_hop_is_the_client() {
        let t = trusted(&["127.0.0.1/32", "10.0.0.0/8"]);
        let h = headers(&[("x-forwarded-for", "203.0.113.9, 198.51.100.7, 10.1.2.3")]);
        // 198.51.100.7 is the first hop no trusted proxy vouches for: a client could have
        // written 203.0.113.9 itself.
        assert_eq!(t.client(ip("127.0.0.1"), &h), Some(ip("198.51.100.7")));
        // Two header lines are one list.
        let h = headers(&[
            ("x-forwarded-for", "203.0.113.9"),
            ("x-forwarded-for", "10.0.0.5"),
        ]);
        assert_eq!(t.client(ip("10.0.0.1"), &h), Some(ip("203.0.113.9")));
    }

    #[test]
    fn headers_from_an_untrusted_peer_are_ignored() {
        let t = trusted(&["127.0.0.1/32"]);
        let h = headers(&[("x-forwarded-for", "203.0.113.9")]);
        assert_eq!(t.client(ip("192.0.2.50"), &h), None);
        assert_eq!(trusted(&[]).client(ip("127.0.0.1"), &h), None);
    }

    #[test]
    fn forwarded_wins_and_its_forms_parse() {
        let t = trusted(&["127.0.0.0/8"]);
        let h = headers(&[
            (
                "forwarded",
                "for=192.0.2.43;proto=https, for=\"[2001:db8:cafe::17]:4711\"",
            ),
            ("x-forwarded-for", "198.51.100.1"),
        ]);
        assert_eq!(t.client(ip("127.0.0.1"), &h), Some(ip("2001:db8:cafe::17")));
        let h = headers(&[("forwarded", "For=\"192.0.2.60:8080\";by=10.0.0.1")]);
        assert_eq!(t.client(ip("127.0.0.1"), &h), Some(ip("192.0.2.60")));
    }

    #[test]
    fn garbage_or_unknown_names_no_one() {
        let t = trusted(&["127.0.0.1/32"]);
        for v in ["unknown", "_hidden", "not an address", ""] {
            let h = headers(&[("x-forwarded-for", v)]);
            assert_eq!(t.client(ip("127.0.0.1"), &h), None, "{v:?}");
        }
        // Only trusted hops: the left-most.
        let h = headers(&[("x-forwarded-for", "127.0.0.1, 127.0.0.1")]);
        assert_eq!(t.client(ip("127.0.0.1"), &h), Some(ip("127.0.0.1")));
        // Nothing forwarded.
        assert_eq!(t.client(ip("127.0.0.1"), &HeaderMap::new()), None);
    }
}
