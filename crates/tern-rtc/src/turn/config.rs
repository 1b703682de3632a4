//! The TURN server's settings, each with its documented default.

use crate::peer_policy::PeerPolicy;

/// Settings of the TURN server. Every field has a documented default.
#[derive(Debug, Clone)]
pub struct TurnConfig {
    /// REALM sent in challenges. Default `"tern"`.
    pub realm: String,
    /// Long-term users as `(name, password)`.
    pub users: Vec<(String, String)>,
    /// Shared secret for REST credentials (coturn `use-auth-secret` / `static-auth-secret`).
    pub secret: Option<String>,
    /// Allocations in total; more are refused with 508. Default 10000: at well under 1 KiB
    /// each plus a socket, memory stays ~10 MiB and the open-file limit (20000 here) is not
    /// reached.
    pub max_allocations: usize,
    /// Allocations per username; more are refused with 486 (RFC 8656 §7.2). Default 100:
    /// a browser makes one or two per peer connection, a load tester more.
    pub max_allocations_per_user: usize,
    /// Permissions per allocation; more are refused with 508. Default 32: a viewer needs one.
    pub max_permissions: usize,
    /// Channels per allocation; more are refused with 508. Default 32.
    pub max_channels: usize,
    /// Lifetime when the client asks none, seconds. Default 600 (RFC 8656 §7.2).
    pub default_lifetime: u32,
    /// Longest lifetime granted, seconds. Default 3600 (RFC 8656 §7.2 suggests one hour).
    pub max_lifetime: u32,
    /// How long a nonce stays valid, seconds. Default 600 (coturn's `stale-nonce` default).
    pub nonce_lifetime: u32,
    /// Key for nonce MACs; take it from a random source (the driver) or a seed (tests).
    pub nonce_seed: [u8; 32],
    /// Which peers relays may reach. Default: [`PeerPolicy`]'s refusals of loopback,
    /// private, link-local and other internal ranges (the driver adds its own addresses).
    pub peers: PeerPolicy,
    /// Allocations per client IP (IPv6: per /64); more are refused with 486. Default 64.
    pub max_allocations_per_ip: usize,
    /// Relayed bytes per second per allocation, both directions together (coturn's
    /// `max-bps` / 8); datagrams over it in the current second are dropped. 0: no cap.
    pub max_bytes_per_sec: u32,
}

impl Default for TurnConfig {
    fn default() -> Self {
        TurnConfig {
            realm: "tern".into(),
            users: Vec::new(),
            secret: None,
            max_allocations: 10_000,
            max_allocations_per_user: 100,
            max_permissions: 32,
            max_channels: 32,
            default_lifetime: 600,
            max_lifetime: 3600,
            nonce_lifetime: 600,
            nonce_seed: [0; 32],
            peers: PeerPolicy::new(&[], Vec::new(), Vec::new()),
            max_allocations_per_ip: 64,
            max_bytes_per_sec: 0,
        }
    }
}
