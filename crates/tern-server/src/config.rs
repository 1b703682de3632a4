//! The configuration file (TOML) and its validation.
//!
//! Every key is optional; command-line flags override the file. An unknown key or a bad value
//! stops start-up with an error that names the key (serde's `deny_unknown_fields` plus
//! [`Config::validate`]).

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use serde::Deserialize;
use tern_rtc::peer_policy::Cidr;

use crate::cluster::section::ClusterSection;

/// Errors loading or validating the configuration.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// File path.
        path: String,
        /// Underlying error.
        source: std::io::Error,
    },
    /// The TOML is malformed or has an unknown key or a value of the wrong type.
    #[error("config file {path}: {message}")]
    Parse {
        /// File path.
        path: String,
        /// What is wrong, naming the key.
        message: String,
    },
    /// A value is out of range.
    #[error("config key `{key}`: {message}")]
    Invalid {
        /// The offending key, dotted.
        key: String,
        /// What is wrong.
        message: String,
    },
}

/// The whole configuration.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Listening addresses.
    #[serde(default)]
    pub server: ServerConfig,
    /// Memory and session tunables (pjnath `config_site.h` in spirit).
    #[serde(default)]
    pub tunables: Tunables,
    /// Applications and their declared streams.
    #[serde(default, rename = "app")]
    pub apps: Vec<AppConfig>,
    /// The built-in STUN/TURN server (off unless `turn.listen` is set).
    #[serde(default)]
    pub turn: TurnSection,
    /// Limits per client address (IPv4 address or IPv6 /64).
    #[serde(default)]
    pub limits: LimitsSection,
    /// Low-Latency HLS egress.
    #[serde(default)]
    pub hls: HlsSection,
    /// Origin/edge clustering over Redis (absent: this node runs alone).
    #[serde(default)]
    pub cluster: Option<ClusterSection>,
}

/// The `[hls]` section: every H264 stream also as Low-Latency HLS (CMAF fMP4) at
/// `/{app}/{stream}/index.m3u8`, packaged only while someone reads it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HlsSection {
    /// Serve HLS at all. Default true.
    #[serde(default = "d_true")]
    pub enabled: bool,
    /// Longest partial segment (ms). Default 500: Apple's guidance is 0.2-1 s; half a second
    /// keeps hls.js two or three parts (~1.5 s) behind live with a request every 0.5 s.
    #[serde(default = "d_part_target_ms")]
    pub part_target_ms: u64,
    /// Shortest segment (ms); a segment ends at the first keyframe after it. Default 2000:
    /// with a 1-2 s GOP every keyframe starts a segment, and a CDN caches one object per
    /// 2 s instead of one per part.
    #[serde(default = "d_segment_target_ms")]
    pub segment_target_ms: u64,
    /// Complete segments listed and kept (older ones are freed). Default 6: 12 s at the
    /// default target, room for a player that starts at the live edge and a short stall.
    #[serde(default = "d_hls_window")]
    pub window: usize,
    /// A session (an admitted player) ends after this many seconds without a request; a
    /// stream's packaging stops when its last session ends. Default 30.
    #[serde(default = "d_hls_session_timeout_s")]
    pub session_timeout_s: u64,
    /// HLS sessions at once, all streams. Default 10,000: a session is a few hundred bytes;
    /// the packaged bytes are per stream, not per session.
    #[serde(default = "d_hls_max_sessions")]
    pub max_sessions: usize,
    /// HLS sessions one client address may hold (see `[limits]`; exempt ranges apply).
    /// Default 50.
    #[serde(default = "d_hls_sessions_per_ip")]
    pub sessions_per_ip: usize,
    /// Where the player page loads hls.js from when it falls back to HLS (browsers without
    /// native HLS). Default jsDelivr's hls.js 1.x; point it at a copy you host to keep
    /// players off third-party origins.
    #[serde(default = "d_hls_player_script")]
    pub player_script: String,
}

fn d_hls_player_script() -> String {
    "https://cdn.jsdelivr.net/npm/hls.js@1/dist/hls.min.js".into()
}

fn d_part_target_ms() -> u64 {
    500
}
fn d_segment_target_ms() -> u64 {
    2000
}
fn d_hls_window() -> usize {
    6
}
fn d_hls_session_timeout_s() -> u64 {
    30
}
fn d_hls_max_sessions() -> usize {
    10_000
}
fn d_hls_sessions_per_ip() -> usize {
    50
}

impl Default for HlsSection {
    fn default() -> Self {
        HlsSection {
            enabled: true,
            part_target_ms: d_part_target_ms(),
            segment_target_ms: d_segment_target_ms(),
            window: d_hls_window(),
            session_timeout_s: d_hls_session_timeout_s(),
            max_sessions: d_hls_max_sessions(),
            sessions_per_ip: d_hls_sessions_per_ip(),
            player_script: d_hls_player_script(),
        }
    }
}

/// The `[limits]` section: what one client address (IPv4, or IPv6 /64) may hold at once.
/// Past a limit HTTP answers 429 with `Retry-After`, RTMP and TURN refuse; the global caps
/// (`tunables.max_handshakes`, `tunables.max_viewers`, `turn.max_allocations`, the RTMP
/// connection cap) still apply on top.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    /// WHEP, WHIP and OME-signalled sessions that have not finished ICE and DTLS. Default 50:
    /// a page starts one at a time, and a whole office behind one NAT rarely starts 50 in the
    /// same second, while one address alone can no longer fill the global handshake cap.
    #[serde(default = "d_pending_sessions_per_ip")]
    pub pending_sessions_per_ip: usize,
    /// Open HTTP connections (WHEP, WHIP, API, pages, WebSockets). Default 64: a browser
    /// opens at most 6 per origin, so this leaves room for a NAT with a dozen browsers.
    #[serde(default = "d_http_connections_per_ip")]
    pub http_connections_per_ip: usize,
    /// Open OvenMediaEngine signalling WebSockets. Default 32: one per playing tab.
    #[serde(default = "d_ome_connections_per_ip")]
    pub ome_connections_per_ip: usize,
    /// Open RTMP connections. Default 8: an encoder publishes one stream per connection.
    #[serde(default = "d_rtmp_connections_per_ip")]
    pub rtmp_connections_per_ip: usize,
    /// TURN allocations (UDP and TCP together). Default 64: a viewer uses one or two.
    #[serde(default = "d_turn_allocations_per_ip")]
    pub turn_allocations_per_ip: usize,
    /// Streams publishers may make on names not declared in any app's `streams` (each a
    /// slot reserved at start; a publish past them gets 503). Default 1024.
    #[serde(default = "d_dynamic_streams")]
    pub dynamic_streams: usize,
    /// Client ranges (CIDR) none of these limits count, except the TURN allocation quota.
    /// Default loopback (`127.0.0.0/8`, `::1/128`): a load tester on the same host, or a
    /// reverse proxy in front of tern, whose clients all share its address (limit them at
    /// the proxy). `[]` counts everyone.
    #[serde(default = "d_exempt")]
    pub exempt: Vec<String>,
}

fn d_exempt() -> Vec<String> {
    vec!["127.0.0.0/8".into(), "::1/128".into()]
}

impl LimitsSection {
    /// The exempt ranges; validated to parse.
    pub fn exempt_ranges(&self) -> Vec<Cidr> {
        self.exempt.iter().filter_map(|s| s.parse().ok()).collect()
    }
}

fn d_dynamic_streams() -> usize {
    1024
}
fn d_pending_sessions_per_ip() -> usize {
    50
}
fn d_http_connections_per_ip() -> usize {
    64
}
fn d_ome_connections_per_ip() -> usize {
    32
}
fn d_rtmp_connections_per_ip() -> usize {
    8
}
fn d_turn_allocations_per_ip() -> usize {
    64
}

impl Default for LimitsSection {
    fn default() -> Self {
        LimitsSection {
            pending_sessions_per_ip: d_pending_sessions_per_ip(),
            http_connections_per_ip: d_http_connections_per_ip(),
            ome_connections_per_ip: d_ome_connections_per_ip(),
            rtmp_connections_per_ip: d_rtmp_connections_per_ip(),
            turn_allocations_per_ip: d_turn_allocations_per_ip(),
            dynamic_streams: d_dynamic_streams(),
            exempt: d_exempt(),
        }
    }
}

/// The `[turn]` section: the built-in STUN/TURN server (RFC 8489, RFC 8656).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnSection {
    /// UDP and TCP listen address, e.g. `0.0.0.0:3478`. TURN is off when unset.
    #[serde(default)]
    pub listen: Option<SocketAddr>,
    /// Long-term users, each `"name:password"`.
    #[serde(default)]
    pub users: Vec<String>,
    /// Shared secret for REST credentials (coturn's `static-auth-secret`). When unset, tern
    /// still mints REST credentials for its WHEP answers with a random secret made at start.
    #[serde(default)]
    pub secret: Option<String>,
    /// Address relay sockets bind to and announce; also the host in the `Link` headers.
    /// Default: the listen address if it is specific, else the ICE candidate address.
    #[serde(default)]
    pub relay_ip: Option<IpAddr>,
    /// Lowest relay port. Default 49152 (coturn's `min-port`, the IANA dynamic range).
    #[serde(default = "d_relay_port_min")]
    pub relay_port_min: u16,
    /// Highest relay port. Default 65535 (coturn's `max-port`).
    #[serde(default = "d_relay_port_max")]
    pub relay_port_max: u16,
    /// REALM of the long-term credentials. Default `tern`.
    #[serde(default = "d_realm")]
    pub realm: String,
    /// Allocations in total. Default 10000: under 1 KiB of heap each plus a socket; the
    /// open-file limit (20000 here) leaves room for viewers.
    #[serde(default = "d_max_allocations")]
    pub max_allocations: usize,
    /// Allocations per username. Default 100.
    #[serde(default = "d_max_allocations_per_user")]
    pub max_allocations_per_user: usize,
    /// Lifetime of the REST credentials tern puts in WHEP `Link` headers, seconds. Default
    /// 86400 (coturn's recommended TTL): a Refresh after expiry would fail, so this bounds
    /// how long a viewer can stay on the relay.
    #[serde(default = "d_credential_lifetime")]
    pub credential_lifetime: u64,
    /// Peer ranges (CIDR) the relay may reach even where the defaults refuse them, e.g.
    /// `["10.0.0.0/8"]` for a deployment whose peers are on its private network. Wins over
    /// `denied_peers`, as in coturn. Default: none.
    #[serde(default)]
    pub allowed_peers: Vec<String>,
    /// Peer ranges (CIDR) refused on top of the defaults (loopback, unspecified, link-local,
    /// private, CGNAT, multicast, reserved, broadcast and the server's own addresses; see
    /// `tern_rtc::peer_policy`). Default: none.
    #[serde(default)]
    pub denied_peers: Vec<String>,
    /// Relayed bandwidth cap per allocation, bits per second, both directions together
    /// (coturn's `max-bps`); datagrams over it are dropped. Default 0: no cap.
    #[serde(default)]
    pub max_bps: u64,
}

fn d_relay_port_min() -> u16 {
    49152
}
fn d_relay_port_max() -> u16 {
    65535
}
fn d_realm() -> String {
    "tern".into()
}
fn d_max_allocations() -> usize {
    10_000
}
fn d_max_allocations_per_user() -> usize {
    100
}
fn d_credential_lifetime() -> u64 {
    86_400
}

impl Default for TurnSection {
    fn default() -> Self {
        TurnSection {
            listen: None,
            users: Vec::new(),
            secret: None,
            relay_ip: None,
            relay_port_min: d_relay_port_min(),
            relay_port_max: d_relay_port_max(),
            realm: d_realm(),
            max_allocations: d_max_allocations(),
            max_allocations_per_user: d_max_allocations_per_user(),
            credential_lifetime: d_credential_lifetime(),
            allowed_peers: Vec::new(),
            denied_peers: Vec::new(),
            max_bps: 0,
        }
    }
}

impl TurnSection {
    /// The peer policy's extra ranges: (allowed, denied); validated to parse.
    pub fn peer_ranges(&self) -> (Vec<Cidr>, Vec<Cidr>) {
        let parse = |v: &Vec<String>| v.iter().filter_map(|s| s.parse().ok()).collect();
        (parse(&self.allowed_peers), parse(&self.denied_peers))
    }

    /// The users as `(name, password)`; validated to contain a `:`.
    pub fn user_pairs(&self) -> Vec<(String, String)> {
        self.users
            .iter()
            .filter_map(|u| u.split_once(':'))
            .map(|(n, p)| (n.to_string(), p.to_string()))
            .collect()
    }
}

/// Listening addresses.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// HTTP listener (WHEP, WHIP, pages, API). Default `0.0.0.0:8080`.
    #[serde(default = "default_http")]
    pub http: SocketAddr,
    /// The one UDP port for all WebRTC media. Default `0.0.0.0:10000`.
    #[serde(default = "default_media")]
    pub media: SocketAddr,
    /// Host address announced in ICE candidates. Default: the media address if it is not
    /// unspecified, else `127.0.0.1`.
    #[serde(default)]
    pub candidate: Option<IpAddr>,
    /// RTCP CNAME used in sender reports. Default `tern`.
    #[serde(default = "default_cname")]
    pub cname: String,
    /// Bearer token for the management API (`/v1/...` API routes, `/v1/events`,
    /// `/metrics`). Default: none, the API is open (bind `http` to a private address).
    #[serde(default)]
    pub api_token: Option<String>,
    /// Socket workers on the media port, each with its own socket (`SO_REUSEPORT`):
    /// OvenMediaEngine's `<Bind>...<WorkerCount>`. Default 1; 1 to 128.
    #[serde(default = "default_one")]
    pub worker_count: usize,
    /// App workers: per-stream work (sources, ingest, rings); OvenMediaEngine's
    /// `AppWorkerCount`. Default 1; 1 to 128.
    #[serde(default = "default_one")]
    pub app_worker_count: usize,
    /// Stream workers: per-viewer work (SRTP, RTCP, sends); OvenMediaEngine's
    /// `StreamWorkerCount`, where 0 means the app workers send. Default 1 (this is a
    /// per-core knob: raise it up to the core count when one stream worker is saturated).
    #[serde(default = "default_one")]
    pub stream_worker_count: usize,
    /// RTMP ingest listener (`--rtmp`), e.g. `"0.0.0.0:1935"`, or `"none"` for no RTMP.
    /// Absent (`None`): [`DEFAULT_RTMP`] when that port is free; when it is taken (another
    /// tern, a test beside a server) start-up goes on without RTMP and says so. An address set
    /// here or on the command line that cannot be bound stops start-up.
    #[serde(default, deserialize_with = "de_rtmp")]
    pub rtmp: Option<Option<SocketAddr>>,
    /// Seconds a WHIP publisher has from its answer to the end of ICE and DTLS before it is
    /// ended and its stream freed. Default 10 ([`DEFAULT_PUBLISHER_TIMEOUT_S`]); 1 to 300.
    #[serde(default = "default_publisher_timeout")]
    pub publisher_connect_timeout: u64,
    /// Seconds a WHIP or RTMP publisher may go without sending media before it is ended and
    /// its stream freed. Default 10; 1 to 300.
    #[serde(default = "default_publisher_timeout")]
    pub publisher_timeout: u64,
}

/// Most workers of each kind (`worker_count`, `app_worker_count`, `stream_worker_count`):
/// the media engine's viewer ids carry their worker in 8 bits.
pub const MAX_WORKERS: usize = 128;

/// Default `publisher_connect_timeout` and `publisher_timeout`, seconds. 10: ICE and DTLS take
/// well under a second on any working path (a WHIP client retransmits its checks every
/// 50-500 ms), and an encoder sends dozens of packets a second, so 10 s of nothing is a dead
/// or stalled publisher, not a slow one.
pub const DEFAULT_PUBLISHER_TIMEOUT_S: u64 = 10;

/// Where `--rtmp` without a value listens: all interfaces, port 1935 (RTMP's registered port,
/// the one encoders assume when a URL names none).
pub const DEFAULT_RTMP: &str = "0.0.0.0:1935";

/// Parses an RTMP listener setting: `none` (off) or a socket address.
pub fn parse_rtmp(s: &str) -> Result<Option<SocketAddr>, String> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    s.parse()
        .map(Some)
        .map_err(|_| format!("`{s}` is neither `none` nor an address like 0.0.0.0:1935"))
}

fn de_rtmp<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<SocketAddr>>, D::Error> {
    let s = String::deserialize(d)?;
    parse_rtmp(&s).map(Some).map_err(serde::de::Error::custom)
}

fn default_one() -> usize {
    1
}

fn default_publisher_timeout() -> u64 {
    DEFAULT_PUBLISHER_TIMEOUT_S
}

fn default_http() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 8080))
}
fn default_media() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 10000))
}
fn default_cname() -> String {
    "tern".into()
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            http: default_http(),
            media: default_media(),
            candidate: None,
            cname: default_cname(),
            api_token: None,
            worker_count: 1,
            app_worker_count: 1,
            stream_worker_count: 1,
            rtmp: None,
            publisher_connect_timeout: default_publisher_timeout(),
            publisher_timeout: default_publisher_timeout(),
        }
    }
}

/// Tunables, each default justified.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tunables {
    /// Largest RTP payload the packetizer and pool handle. Default 1200: fits a 1280-byte
    /// IPv6 minimum MTU path with IP/UDP/RTP/SRTP headers and the abs-capture-time extension.
    #[serde(default = "d_max_payload")]
    pub max_payload: usize,
    /// Video ring length in packets. Default 2048: ~5 s at 4 Mbps (≈400 packets/s), so a NACK
    /// arriving within several round trips and a 1 s GOP keyframe are always still held.
    #[serde(default = "d_video_ring")]
    pub video_ring: usize,
    /// Audio ring length in packets. Default 256: ~5 s of 20 ms Opus frames.
    #[serde(default = "d_audio_ring")]
    pub audio_ring: usize,
    /// Packet buffers allocated and prefaulted at start. Default 4096: both rings full
    /// (2048 + 256) plus headroom for ingest bursts.
    #[serde(default = "d_pool_initial")]
    pub pool_initial: usize,
    /// Free packet buffers kept before returning extras to the system. Default 8192.
    #[serde(default = "d_pool_max_free")]
    pub pool_max_free: usize,
    /// Seconds between housekeeping passes that give back what a burst left: packet buffers
    /// above `pool_initial` that the period since the last pass did not need, then the C
    /// allocator's free pages (glibc `malloc_trim`) once a MiB or more of heap was freed.
    /// Default 10; 0 keeps everything.
    #[serde(default = "d_pool_trim_s")]
    pub pool_trim_s: u64,
    /// Maximum concurrent DTLS handshakes; further WHEP requests get 503 + Retry-After.
    /// Default 2000: at ~5 ms per handshake a burst of this size completes within seconds and
    /// bounds transient handshake memory (tens of KiB each) to tens of MiB.
    #[serde(default = "d_max_handshakes")]
    pub max_handshakes: usize,
    /// Maximum viewers in total. Default 20000: the open-file limit does not apply (one UDP
    /// port), memory at ~4 KiB per viewer is ~80 MiB.
    #[serde(default = "d_max_viewers")]
    pub max_viewers: usize,
}

fn d_max_payload() -> usize {
    1200
}
fn d_video_ring() -> usize {
    2048
}
fn d_audio_ring() -> usize {
    256
}
fn d_pool_initial() -> usize {
    4096
}
fn d_pool_max_free() -> usize {
    8192
}
fn d_pool_trim_s() -> u64 {
    10
}
fn d_max_handshakes() -> usize {
    2000
}
fn d_max_viewers() -> usize {
    20000
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            max_payload: d_max_payload(),
            video_ring: d_video_ring(),
            audio_ring: d_audio_ring(),
            pool_initial: d_pool_initial(),
            pool_max_free: d_pool_max_free(),
            pool_trim_s: d_pool_trim_s(),
            max_handshakes: d_max_handshakes(),
            max_viewers: d_max_viewers(),
        }
    }
}

/// One application (the `{app}` in URLs).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppConfig {
    /// Application name.
    pub name: String,
    /// Bearer token required for WHEP/WHIP on this app, if any.
    #[serde(default)]
    pub token: Option<String>,
    /// Declared streams: they exist (WHEP answers 409 while not live) without a publisher.
    #[serde(default)]
    pub streams: Vec<String>,
    /// Whether publishers (RTMP, WHIP) may publish to names not in `streams`, making the
    /// stream while they are live. Default true; false keeps the closed list.
    #[serde(default = "d_true")]
    pub dynamic: bool,
    /// Seconds a publisher-made stream outlives its publisher (a reconnecting encoder keeps
    /// its viewers); then it is removed and its viewers ended. Default 10.
    #[serde(default = "d_idle_grace_s")]
    pub idle_grace_s: u64,
    /// HS256 secret: when set, every publish and play needs a JWT (Bearer for WHEP/WHIP,
    /// `?token=` for RTMP and OME signalling) with `sub` = `app/stream`, `act` = `publish`
    /// or `play`, and `exp`.
    #[serde(default)]
    pub jwt_secret: Option<String>,
    /// End a session admitted by JWT when its token expires. Default false.
    #[serde(default)]
    pub end_at_exp: bool,
    /// Admission webhook, asked before every publish and play.
    #[serde(default)]
    pub admission: Option<AdmissionConfig>,
    /// What to do with an RTMP publisher whose H264 has B-frames, which WebRTC players
    /// cannot play smoothly: `"auto"` (default) transcodes it to Constrained Baseline while
    /// the stream has viewers, `"never"` passes it through (with a warning).
    #[serde(default)]
    pub transcode: TranscodeSetting,
    /// Lower video layers made from an RTMP publisher's video (decoded, scaled, encoded
    /// again), so that its viewers can move between layers as with a simulcast WHIP
    /// publisher: at most 2, each `{ rid, height, bitrate_kbps }`. The source is layer `h`;
    /// rendition `i` is layer `i + 1`. Default none: an RTMP stream has one layer.
    #[serde(default)]
    pub renditions: Vec<RenditionConfig>,
}

/// One entry of `[app] renditions`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenditionConfig {
    /// The layer's RID, what `?layer=` names: 1-8 characters of `[A-Za-z0-9_-]`, unique in
    /// the app, not `"h"` (the source's).
    pub rid: String,
    /// Picture height in pixels, even, 2-2160 (capped at the source's); the width keeps
    /// the source's aspect ratio.
    pub height: u32,
    /// Average bitrate in kbit/s, 50-50000, held by a one-second VBV.
    pub bitrate_kbps: u32,
}

impl AppConfig {
    /// The RIDs of an RTMP stream's layers: the source's (`"h"`) and the renditions', in
    /// layer order; empty without renditions (one layer, no simulcast).
    pub fn layer_rids(&self) -> Vec<Box<str>> {
        if self.renditions.is_empty() {
            return Vec::new();
        }
        std::iter::once(tern_rtc::renditions::SOURCE_RID.into())
            .chain(self.renditions.iter().map(|r| r.rid.as_str().into()))
            .collect()
    }

    /// The renditions as the RTMP publisher takes them.
    pub fn rendition_specs(&self) -> Vec<tern_rtc::renditions::RenditionSpec> {
        self.renditions
            .iter()
            .map(|r| tern_rtc::renditions::RenditionSpec {
                rid: r.rid.as_str().into(),
                height: r.height,
                bitrate_kbps: r.bitrate_kbps,
            })
            .collect()
    }

    /// What is wrong with `renditions`, as (key under `app[i].`, message).
    fn check_renditions(&self) -> Result<(), (String, String)> {
        use tern_rtc::renditions::{MAX_RENDITIONS, SOURCE_RID};
        let r = &self.renditions;
        if r.len() > MAX_RENDITIONS {
            return Err((
                "renditions".into(),
                format!("at most {MAX_RENDITIONS} (with the source, 3 layers)"),
            ));
        }
        for (j, x) in r.iter().enumerate() {
            let key = |k: &str| format!("renditions[{j}].{k}");
            let rid_ok = (1..=8).contains(&x.rid.len())
                && x.rid
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !rid_ok {
                return Err((key("rid"), "must be 1-8 characters of [A-Za-z0-9_-]".into()));
            }
            if x.rid == SOURCE_RID {
                return Err((
                    key("rid"),
                    format!("\"{SOURCE_RID}\" is the source's layer"),
                ));
            }
            if r[..j].iter().any(|y| y.rid == x.rid) {
                return Err((key("rid"), "duplicate rid".into()));
            }
            if !(2..=2160).contains(&x.height) || x.height % 2 != 0 {
                return Err((key("height"), "must be even and between 2 and 2160".into()));
            }
            if !(50..=50_000).contains(&x.bitrate_kbps) {
                return Err((key("bitrate_kbps"), "must be between 50 and 50000".into()));
            }
        }
        Ok(())
    }
}

/// `[app] transcode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TranscodeSetting {
    /// Transcode B-frame video while it has viewers.
    #[default]
    Auto,
    /// Never transcode.
    Never,
}

/// `[app.admission]`: the operator's HTTP service that decides who may publish and play.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmissionConfig {
    /// `http://host:port/path` the request is POSTed to.
    pub url: String,
    /// Time allowed for the answer. Default 2000 ms.
    #[serde(default = "d_admission_timeout_ms")]
    pub timeout_ms: u64,
    /// What a timeout, a connection error or a non-200 answer means: `deny` (default) or
    /// `allow`.
    #[serde(default = "d_on_error")]
    pub on_error: String,
    /// Requests to the webhook at once; past it new sessions get 503. Default 256.
    #[serde(default = "d_max_in_flight")]
    pub max_in_flight: usize,
}

fn d_true() -> bool {
    true
}
/// Default `idle_grace_s`.
pub const DEFAULT_IDLE_GRACE_S: u64 = 10;

fn d_idle_grace_s() -> u64 {
    DEFAULT_IDLE_GRACE_S
}
fn d_admission_timeout_ms() -> u64 {
    2000
}
fn d_on_error() -> String {
    "deny".into()
}
fn d_max_in_flight() -> usize {
    256
}

/// Whether `s` is a valid app or stream name: 1-64 characters of `A-Z a-z 0-9 . _ -`.
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// Whether `url` is a webhook tern can call: `http://host[:port][/path]` (plain HTTP; put
/// a local proxy in front for TLS), no user info.
pub fn webhook_url_ok(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let auth = rest.split('/').next().unwrap_or("");
    !auth.is_empty()
        && !auth.contains('@')
        && url.parse::<hyper::Uri>().is_ok_and(|u| u.host().is_some())
}

/// The rule [`valid_name`] checks, as errors state it.
pub const NAME_RULE: &str = "must be 1-64 characters of [A-Za-z0-9._-]";

impl Config {
    /// Reads and validates a TOML file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses and validates TOML text (`origin` names it in errors).
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let cfg: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_string(),
            message: e.to_string().trim().replace('\n', " "),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks ranges and names.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, message: &str| {
            Err(ConfigError::Invalid {
                key: key.to_string(),
                message: message.to_string(),
            })
        };
        let max = MAX_WORKERS;
        let s = &self.server;
        if !(1..=max).contains(&s.worker_count) {
            return bad(
                "server.worker_count",
                &format!("must be between 1 and {max}"),
            );
        }
        if !(1..=max).contains(&s.app_worker_count) {
            return bad(
                "server.app_worker_count",
                &format!("must be between 1 and {max}"),
            );
        }
        if s.stream_worker_count > max {
            return bad(
                "server.stream_worker_count",
                &format!("must be between 0 and {max} (0: app workers send)"),
            );
        }
        for (key, v) in [
            (
                "server.publisher_connect_timeout",
                s.publisher_connect_timeout,
            ),
            ("server.publisher_timeout", s.publisher_timeout),
        ] {
            if !(1..=300).contains(&v) {
                return bad(key, "must be between 1 and 300 (seconds)");
            }
        }
        let h = &self.hls;
        if !(100..=5000).contains(&h.part_target_ms) {
            return bad("hls.part_target_ms", "must be between 100 and 5000");
        }
        if h.segment_target_ms < h.part_target_ms || h.segment_target_ms > 60_000 {
            return bad(
                "hls.segment_target_ms",
                "must be at least hls.part_target_ms and at most 60000",
            );
        }
        if !(2..=100).contains(&h.window) {
            return bad("hls.window", "must be between 2 and 100 (segments)");
        }
        if !(h.player_script.starts_with("https://")
            || h.player_script.starts_with("http://")
            || h.player_script.starts_with('/'))
            || h.player_script.contains(['"', '<', '>'])
        {
            return bad(
                "hls.player_script",
                "must be an http(s) URL or an absolute path, without quotes or angle brackets",
            );
        }
        if !(5..=3600).contains(&h.session_timeout_s) {
            return bad("hls.session_timeout_s", "must be between 5 and 3600");
        }
        for (key, v) in [
            ("hls.max_sessions", h.max_sessions),
            ("hls.sessions_per_ip", h.sessions_per_ip),
        ] {
            if v == 0 {
                return bad(key, "must be at least 1");
            }
        }
        if let Some(c) = &self.cluster
            && let Err((key, message)) = c.check()
        {
            return bad(key, &message);
        }
        let t = &self.tunables;
        if !(200..=1400).contains(&t.max_payload) {
            return bad("tunables.max_payload", "must be between 200 and 1400");
        }
        if !(64..=65536).contains(&t.video_ring) {
            return bad("tunables.video_ring", "must be between 64 and 65536");
        }
        if !(16..=65536).contains(&t.audio_ring) {
            return bad("tunables.audio_ring", "must be between 16 and 65536");
        }
        if t.pool_max_free < t.pool_initial {
            return bad(
                "tunables.pool_max_free",
                "must be at least tunables.pool_initial",
            );
        }
        if t.pool_trim_s > 86_400 {
            return bad("tunables.pool_trim_s", "must be at most 86400 (a day)");
        }
        if t.max_handshakes == 0 {
            return bad("tunables.max_handshakes", "must be at least 1");
        }
        if t.max_viewers == 0 {
            return bad("tunables.max_viewers", "must be at least 1");
        }
        let l = &self.limits;
        for (key, v) in [
            ("limits.pending_sessions_per_ip", l.pending_sessions_per_ip),
            ("limits.http_connections_per_ip", l.http_connections_per_ip),
            ("limits.ome_connections_per_ip", l.ome_connections_per_ip),
            ("limits.rtmp_connections_per_ip", l.rtmp_connections_per_ip),
            ("limits.turn_allocations_per_ip", l.turn_allocations_per_ip),
        ] {
            if !(1..=100_000).contains(&v) {
                return bad(key, "must be between 1 and 100000");
            }
        }
        for (i, s) in l.exempt.iter().enumerate() {
            if let Err(e) = s.parse::<Cidr>() {
                return bad(&format!("limits.exempt[{i}]"), &e.to_string());
            }
        }
        let turn = &self.turn;
        for (i, u) in turn.users.iter().enumerate() {
            if !u
                .split_once(':')
                .is_some_and(|(n, p)| !n.is_empty() && !p.is_empty())
            {
                return bad(&format!("turn.users[{i}]"), "must be NAME:PASSWORD");
            }
        }
        for (list, name) in [
            (&turn.allowed_peers, "allowed_peers"),
            (&turn.denied_peers, "denied_peers"),
        ] {
            for (i, s) in list.iter().enumerate() {
                if let Err(e) = s.parse::<Cidr>() {
                    return bad(&format!("turn.{name}[{i}]"), &e.to_string());
                }
            }
        }
        if turn.secret.as_deref().is_some_and(str::is_empty) {
            return bad("turn.secret", "must not be empty");
        }
        if turn.relay_port_min == 0 || turn.relay_port_min > turn.relay_port_max {
            return bad(
                "turn.relay_port_min",
                "must be at least 1 and at most turn.relay_port_max",
            );
        }
        if turn.realm.is_empty() || turn.realm.len() > 127 {
            return bad("turn.realm", "must be 1-127 characters");
        }
        if turn.max_allocations == 0 {
            return bad("turn.max_allocations", "must be at least 1");
        }
        if turn.max_allocations_per_user == 0 {
            return bad("turn.max_allocations_per_user", "must be at least 1");
        }
        if !(60..=30 * 86_400).contains(&turn.credential_lifetime) {
            return bad("turn.credential_lifetime", "must be between 60 and 2592000");
        }
        if turn
            .relay_ip
            .is_some_and(|ip| ip.is_unspecified() || ip.is_multicast())
        {
            return bad("turn.relay_ip", "must be a unicast address");
        }
        for (i, app) in self.apps.iter().enumerate() {
            if !valid_name(&app.name) {
                return bad(&format!("app[{i}].name"), NAME_RULE);
            }
            if app.jwt_secret.as_deref().is_some_and(str::is_empty) {
                return bad(&format!("app[{i}].jwt_secret"), "must not be empty");
            }
            if app.end_at_exp && app.jwt_secret.is_none() {
                return bad(&format!("app[{i}].end_at_exp"), "needs jwt_secret");
            }
            if let Some(a) = &app.admission {
                let key = |k: &str| format!("app[{i}].admission.{k}");
                if !webhook_url_ok(&a.url) {
                    return bad(&key("url"), "must be http://host[:port][/path]");
                }
                if !(1..=60_000).contains(&a.timeout_ms) {
                    return bad(&key("timeout_ms"), "must be 1-60000");
                }
                if a.on_error != "deny" && a.on_error != "allow" {
                    return bad(&key("on_error"), "must be \"deny\" or \"allow\"");
                }
                if a.max_in_flight == 0 {
                    return bad(&key("max_in_flight"), "must be at least 1");
                }
            }
            if self.apps[..i].iter().any(|a| a.name == app.name) {
                return bad(&format!("app[{i}].name"), "duplicate app name");
            }
            if app.token.as_deref().is_some_and(str::is_empty) {
                return bad(&format!("app[{i}].token"), "must not be empty");
            }
            for (j, s) in app.streams.iter().enumerate() {
                if !valid_name(s) {
                    return bad(&format!("app[{i}].streams[{j}]"), NAME_RULE);
                }
            }
            if let Err((key, message)) = app.check_renditions() {
                return bad(&format!("app[{i}].{key}"), &message);
            }
        }
        Ok(())
    }

    /// The app named `name`, if configured.
    pub fn app(&self, name: &str) -> Option<&AppConfig> {
        self.apps.iter().find(|a| a.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_key_is_named() {
        let e = Config::parse("[server]\nhtp = \"1.2.3.4:1\"\n", "x.toml").expect_err("must fail");
        assert!(e.to_string().contains("htp"), "{e}");
    }

    #[test]
    fn bad_value_is_named() {
        let e = Config::parse("[tunables]\nmax_payload = 5\n", "x.toml").expect_err("must fail");
        assert!(e.to_string().contains("tunables.max_payload"), "{e}");
        let e = Config::parse("[[app]]\nname = \"a/b\"\n", "x.toml").expect_err("must fail");
        assert!(e.to_string().contains("app[0].name"), "{e}");
    }

    #[test]
    fn turn_section_parses_and_names_bad_keys() {
        let c = Config::parse(
            "[turn]\nlisten = \"127.0.0.1:3478\"\nusers = [\"a:b\"]\nsecret = \"s\"\nrelay_ip = \"127.0.0.1\"\n",
            "x.toml",
        )
        .expect("valid");
        assert_eq!(
            c.turn.user_pairs(),
            vec![("a".to_string(), "b".to_string())]
        );
        assert_eq!(c.turn.relay_port_min, 49152);
        for (text, key) in [
            ("[turn]\nusers = [\"nopassword\"]\n", "turn.users[0]"),
            ("[turn]\nsecret = \"\"\n", "turn.secret"),
            (
                "[turn]\nrelay_port_min = 6000\nrelay_port_max = 5000\n",
                "turn.relay_port_min",
            ),
            ("[turn]\nmax_allocations = 0\n", "turn.max_allocations"),
            ("[turn]\nrelay_ip = \"0.0.0.0\"\n", "turn.relay_ip"),
            ("[turn]\nlisten = \"nonsense\"\n", "listen"),
            ("[turn]\nlisen = \"1.2.3.4:5\"\n", "lisen"),
            (
                "[turn]\nallowed_peers = [\"10.0.0.0/8\", \"10.0.0.0/40\"]\n",
                "turn.allowed_peers[1]",
            ),
            (
                "[turn]\ndenied_peers = [\"nonsense\"]\n",
                "turn.denied_peers[0]",
            ),
            (
                "[limits]\npending_sessions_per_ip = 0\n",
                "limits.pending_sessions_per_ip",
            ),
            (
                "[limits]\nrtmp_connections_per_ip = 0\n",
                "limits.rtmp_connections_per_ip",
            ),
            (
                "[server]\npublisher_timeout = 0\n",
                "server.publisher_timeout",
            ),
            (
                "[server]\npublisher_connect_timeout = 301\n",
                "server.publisher_connect_timeout",
            ),
        ] {
            let e = Config::parse(text, "x.toml").expect_err(text);
            assert!(e.to_string().contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn apps_parse() {
        let c = Config::parse(
            "[[app]]\nname = \"live\"\ntoken = \"s3cret\"\nstreams = [\"idle\"]\n",
            "x.toml",
        )
        .expect("valid");
        let app = c.app("live").expect("valid");
        assert_eq!(app.token.as_deref(), Some("s3cret"));
        assert_eq!(app.streams, vec!["idle".to_string()]);
    }

    #[test]
    fn renditions_parse_and_bad_ones_are_named() {
        let c = Config::parse(
            "[[app]]\nname = \"live\"\nrenditions = [{ rid = \"m\", height = 360, bitrate_kbps = 800 }, { rid = \"l\", height = 180, bitrate_kbps = 250 }]\n",
            "x.toml",
        )
        .expect("valid");
        let app = c.app("live").expect("app");
        assert_eq!(
            app.renditions,
            [
                RenditionConfig {
                    rid: "m".into(),
                    height: 360,
                    bitrate_kbps: 800
                },
                RenditionConfig {
                    rid: "l".into(),
                    height: 180,
                    bitrate_kbps: 250
                }
            ]
        );
        assert_eq!(
            app.layer_rids(),
            ["h", "m", "l"].map(Box::<str>::from).to_vec()
        );
        assert_eq!(app.rendition_specs()[1].height, 180);
        // None by default: one layer, no RIDs.
        let c = Config::parse("[[app]]\nname = \"live\"\n", "x.toml").expect("valid");
        assert!(c.apps[0].renditions.is_empty() && c.apps[0].layer_rids().is_empty());
        let r = |list: &str| {
            format!("[[app]]\nname = \"a\"\n[[app]]\nname = \"b\"\nrenditions = [{list}]\n")
        };
        let ok = "{ rid = \"m\", height = 360, bitrate_kbps = 800 }";
        for (list, key) in [
            (format!("{ok}, {ok}"), "app[1].renditions[1].rid"),
            (format!("{ok}, {ok}, {ok}"), "app[1].renditions"),
            (
                "{ rid = \"h\", height = 360, bitrate_kbps = 800 }".into(),
                "app[1].renditions[0].rid",
            ),
            (
                "{ rid = \"\", height = 360, bitrate_kbps = 800 }".into(),
                "app[1].renditions[0].rid",
            ),
            (
                "{ rid = \"toolong12\", height = 360, bitrate_kbps = 800 }".into(),
                "app[1].renditions[0].rid",
            ),
            (
                "{ rid = \"a.b\", height = 360, bitrate_kbps = 800 }".into(),
                "app[1].renditions[0].rid",
            ),
            (
                format!("{ok}, {{ rid = \"l\", height = 181, bitrate_kbps = 250 }}"),
                "app[1].renditions[1].height",
            ),
            (
                "{ rid = \"l\", height = 0, bitrate_kbps = 250 }".into(),
                "app[1].renditions[0].height",
            ),
            (
                "{ rid = \"l\", height = 2162, bitrate_kbps = 250 }".into(),
                "app[1].renditions[0].height",
            ),
            (
                "{ rid = \"l\", height = 180, bitrate_kbps = 49 }".into(),
                "app[1].renditions[0].bitrate_kbps",
            ),
            (
                "{ rid = \"l\", height = 180, bitrate_kbps = 50001 }".into(),
                "app[1].renditions[0].bitrate_kbps",
            ),
            // Unknown and missing fields: the parser names them.
            (
                "{ rid = \"l\", height = 180, bitrate_kbps = 250, fps = 30 }".into(),
                "fps",
            ),
            ("{ rid = \"l\", height = 180 }".into(), "bitrate_kbps"),
        ] {
            let text = r(&list);
            let e = Config::parse(&text, "x.toml").expect_err(&text);
            assert!(e.to_string().contains(key), "{list}: {e}");
        }
        // The limits themselves are fine; the two renditions may be in any order.
        for list in [
            "{ rid = \"a-Z_9\", height = 2, bitrate_kbps = 50 }, { rid = \"abcdefgh\", height = 2160, bitrate_kbps = 50000 }",
            "{ rid = \"l\", height = 180, bitrate_kbps = 250 }, { rid = \"m\", height = 360, bitrate_kbps = 800 }",
        ] {
            Config::parse(&r(list), "x.toml").expect(list);
        }
    }

    #[test]
    fn rtmp_listener() {
        assert_eq!(Config::default().server.rtmp, None);
        assert_eq!(
            parse_rtmp(DEFAULT_RTMP),
            Ok(Some(SocketAddr::from(([0, 0, 0, 0], 1935))))
        );
        let c = Config::parse("[server]\nrtmp = \"127.0.0.1:1936\"\n", "x.toml").expect("valid");
        assert_eq!(
            c.server.rtmp,
            Some(Some(SocketAddr::from(([127, 0, 0, 1], 1936))))
        );
        let c = Config::parse("[server]\nrtmp = \"none\"\n", "x.toml").expect("valid");
        assert_eq!(c.server.rtmp, Some(None));
        let e = Config::parse("[server]\nrtmp = \"yes\"\n", "x.toml").expect_err("bad");
        assert!(e.to_string().contains("rtmp"), "{e}");
    }
}
