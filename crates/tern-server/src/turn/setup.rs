//! Starting TURN from the configuration (`[turn]`): the worker's options, its relay address
//! and peer policy, what WHEP and OME answers announce ([`TurnLinks`]), and what a reload
//! changes in the running server (`TurnControl`: users, REST secret, peer lists).

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use mio::Waker;
use tern_rtc::peer_policy::PeerPolicy;
use tern_rtc::turn::TurnConfig;

use super::{Credentials, TurnHandle, TurnOptions, spawn};
use crate::config::{Config, TurnSection};
use crate::http::CertStore;
use crate::media::EngineStats;
use crate::session::{TurnLinks, random_token};
use crate::start::StartError;

/// What a reload changes in the running TURN server ([`TurnControl::apply`]): its users,
/// REST secret and peer policy.
struct TurnControl {
    /// The worker's waker and the slot it takes credentials from when woken.
    handle: (Arc<Waker>, Arc<Mutex<Option<Credentials>>>),
    /// The server's own addresses, which the relay never reaches.
    own: Vec<IpAddr>,
    /// The media port on the candidate addresses, which relayed viewers may reach.
    exceptions: Vec<SocketAddr>,
    /// Minted with when the configuration names no secret (nobody else knows it).
    own_secret: String,
    /// The secret WHEP and OME answers mint credentials with ([`TurnLinks::secret`]).
    links: Arc<std::sync::RwLock<String>>,
}

impl TurnControl {
    /// The peer policy of `t` (`allowed_peers`, `denied_peers`) around the server's own
    /// addresses.
    fn policy(&self, t: &TurnSection) -> PeerPolicy {
        let (allowed, denied) = t.peer_ranges();
        PeerPolicy::new(&self.own, allowed, denied).with_exceptions(self.exceptions.clone())
    }

    /// Puts `t`'s users, secret and peer lists in force: the worker takes them at its next
    /// wake (at once), and answers mint with the new secret from now on.
    fn apply(&self, cfg: &Config) {
        let t = &cfg.turn;
        let secret = t.secret.clone().unwrap_or_else(|| self.own_secret.clone());
        *self.links.write().unwrap_or_else(|e| e.into_inner()) = secret.clone();
        let (waker, pending) = &self.handle;
        *pending.lock().unwrap_or_else(|e| e.into_inner()) = Some(Credentials {
            users: t.user_pairs(),
            secret,
            peers: self.policy(t),
            per_ip: cfg.limits.turn_allocations_per_ip,
        });
        let _ = waker.wake();
    }
}

/// Starts TURN as the configuration says (`[turn]`, off without `turn.listen`): the worker
/// on `turn.listen`, its relays on `turn.relay_ip`, else the listen address, else the first
/// of `candidate_ips` of the listen address's family. Relayed viewers may reach the media
/// port `media_port` of the candidate addresses and nothing else of the server's own;
/// allocations are counted in `stats`. With `turn.tls_listen`, TURN over TLS serves the
/// certificate of `certs` (loaded by the caller from `server.tls_cert`). Returns the worker
/// and what WHEP `Link` headers announce.
pub fn start(
    cfg: &Config,
    candidate_ips: &[IpAddr],
    media_port: u16,
    stats: &Arc<EngineStats>,
    certs: Option<&Arc<CertStore>>,
) -> Result<Option<(TurnHandle, TurnLinks)>, StartError> {
    let t = &cfg.turn;
    let Some(listen) = t.listen else {
        return Ok(None);
    };
    // The relay's default address: the listen address, else the first candidate of the
    // listen address's family (a relay on 0.0.0.0 cannot announce ::1).
    let v4 = listen.ip().is_ipv4();
    let candidate_ip = candidate_ips
        .iter()
        .copied()
        .find(|ip| ip.to_canonical().is_ipv4() == v4)
        .unwrap_or(candidate_ips[0]);
    let relay_ip = t.relay_ip.unwrap_or(if listen.ip().is_unspecified() {
        candidate_ip
    } else {
        listen.ip()
    });
    // Without a configured secret, a random one lets tern mint REST credentials for its own
    // WHEP answers; nobody else knows it.
    let secret = t.secret.clone().unwrap_or_else(|| random_token(32));
    // The relay never reaches the server's own addresses or internal ranges unless allowed.
    let own: Vec<IpAddr> = [listen.ip(), relay_ip]
        .into_iter()
        .chain(candidate_ips.iter().copied())
        .filter(|ip| !ip.is_unspecified())
        .collect();
    let (allowed, denied) = t.peer_ranges();
    let exceptions: Vec<SocketAddr> = candidate_ips
        .iter()
        .map(|ip| SocketAddr::new(*ip, media_port))
        .collect();
    let config = TurnConfig {
        realm: t.realm.clone(),
        users: t.user_pairs(),
        secret: Some(secret.clone()),
        max_allocations: t.max_allocations,
        max_allocations_per_user: t.max_allocations_per_user,
        // Relayed viewers reach tern's own media port, and only that port of its address.
        peers: PeerPolicy::new(&own, allowed, denied).with_exceptions(exceptions.clone()),
        max_allocations_per_ip: cfg.limits.turn_allocations_per_ip,
        max_bytes_per_sec: u32::try_from(t.max_bps / 8).unwrap_or(u32::MAX),
        nonce_seed: rand::random(),
        ..TurnConfig::default()
    };
    let tls = match (t.tls_listen, certs) {
        (Some(addr), Some(store)) => Some((addr, tls_config(store))),
        _ => None,
    };
    let mut handle = spawn(TurnOptions {
        listen,
        relay_ip,
        relay_ports: (t.relay_port_min, t.relay_port_max),
        config,
        stats: Some(stats.clone()),
        tls,
    })
    .map_err(StartError::bind(
        "TURN (UDP, TCP and TLS)",
        t.tls_listen.unwrap_or(listen),
    ))?;
    let tls = handle.tls_addr.map(|a| {
        let host = t.tls_host.clone().unwrap_or_else(|| match relay_ip {
            IpAddr::V4(ip) => ip.to_string(),
            IpAddr::V6(ip) => format!("[{ip}]"),
        });
        (host, a.port())
    });
    let links_secret = Arc::new(std::sync::RwLock::new(secret.clone()));
    let control = TurnControl {
        handle: handle.control_parts(),
        own,
        exceptions,
        own_secret: secret,
        links: links_secret.clone(),
    };
    handle.reload = Some(Box::new(move |c: &Config| control.apply(c)));
    let links = TurnLinks {
        host: relay_ip,
        port: handle.addr.port(),
        secret: links_secret,
        lifetime: t.credential_lifetime,
        tls,
    };
    Ok(Some((handle, links)))
}

/// rustls's configuration for TURN over TLS: TLS 1.2 and 1.3 on the aws-lc-rs provider,
/// the certificate of `store` (reloaded with it). No ALPN: RFC 7443's `stun.turn` is
/// optional, and a server that names protocols refuses clients offering others.
fn tls_config(store: &Arc<CertStore>) -> Arc<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("the aws-lc-rs provider supports TLS 1.2 and 1.3")
        .with_no_client_auth()
        .with_cert_resolver(store.clone());
    Arc::new(cfg)
}
