//! Edge pull: one upstream session per stream from the node that has its publisher, fed to
//! the local engine as that stream's publisher, so every local viewer is served from the
//! one ring exactly as if the publisher were here.
//!
//! The session is tern-rtc's lean WebRTC receiver ([`tern_rtc::client::Client`]) on a UDP
//! socket of its own thread, signalled with WHEP and the cluster secret (so the origin skips
//! admission and counts it as one viewer). Each session is one publisher in the engine: when
//! the origin goes silent or away the publisher is removed, the origin map is read again,
//! and the next session (at the same origin once its publisher is back, or at the node the
//! publisher moved to) is a new publisher on the same stream, which ingest maps onto the
//! stream's own numbering: viewers keep their SSRCs and see continuous sequence numbers and
//! timestamps, as with a returning publisher. Keyframe requests from local viewers, which
//! ingest coalesces, go upstream as one PLI. The thread ends `cluster.edge_grace_s` after
//! the stream's last local viewer left.
//!
//! An origin that went silent while the map still names it (cut off from this edge, or
//! frozen) is not asked first: the next session is a *relay* from another live node
//! ([`RELAY_HEADER`]), which serves it only if the stream is live there from its publisher
//! or its own pull from the origin. If no relay serves, the origin is tried again; a relay
//! that goes silent sends the pull back to the origin.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;
use tern_proto::sdp;
use tern_rtc::client::{Client, ClientOffer, ClientState, client_params};
use tern_rtc::publisher::IngestPacket;
use tracing::{info, warn};

use crate::config::{RELAY_HEADER, SECRET_HEADER};
use crate::feed::{
    AttachError, Feed, FrameSink, MEDIA_STALL, PublisherSlot, attach_source_blocking,
};
use crate::media::{EngineHandle, NtpClock, Source};

/// An origin that sends nothing for this long is taken as gone (a live stream sends dozens
/// of packets a second; its publisher leaving is covered the same way).
const SILENCE: Duration = Duration::from_secs(2);
/// ICE and DTLS with the origin must be done within this.
const CONNECT: Duration = Duration::from_secs(5);
/// Longest wait between two attempts to find or reach the origin: an attempt is one Redis
/// GET (and a WHEP POST once there is an origin), cheap enough that viewers should not
/// wait on a long backoff for a publisher that came back.
const MAX_BACKOFF: Duration = Duration::from_millis(500);
/// Time allowed for one WHEP request to the origin (POST or DELETE).
pub(super) const SIGNAL_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest wait in one receive call: timers and flags are looked at this often.
const TICK: Duration = Duration::from_millis(10);

/// What a pull asks of the cluster (implemented by [`super::Cluster`]).
pub(super) trait Origins: Send + Sync {
    /// The name and URL of the node that has `key`'s publisher, when that is another live
    /// node (read from Redis now, on `rt`); `None` when unknown, this node, or Redis is down.
    fn origin(&self, key: &str, rt: &tokio::runtime::Handle) -> Option<(String, String)>;
    /// The name and URL of a live node other than this one and `origin` to relay `key`
    /// from (the least loaded), if there is one.
    fn relay(&self, origin: &str) -> Option<(String, String)>;
    /// The pull of `key` now comes through a relay (`true`) or from its origin.
    fn relaying(&self, key: &str, on: bool);
    /// An upstream session ended for the origin's sake.
    fn retried(&self);
    /// The pull of `key` ended.
    fn ended(&self, key: &str);
}

/// What one upstream needs.
pub(super) struct Pull {
    /// The cluster secret the origin checks.
    pub secret: String,
    /// How long the pull outlives the stream's last local viewer.
    pub grace: Duration,
    /// The upstream sessions' DTLS certificate.
    pub dtls: Arc<tern_rtc::viewer::DtlsContext>,
    /// The WHEP client (`http://` or `https://` origins, [`SIGNAL_TIMEOUT`] per request,
    /// statuses returned rather than errors).
    pub agent: ureq::Agent,
    /// `app/stream`.
    pub key: String,
    /// The stream's index in the engine.
    pub index: usize,
    /// The engine the stream's packets go to.
    pub engine: EngineHandle,
    /// The HTTP runtime (Redis reads).
    pub runtime: tokio::runtime::Handle,
    /// Set to end the pull.
    pub stop: Arc<AtomicBool>,
}

/// Why a session ended.
enum End {
    /// The thread should stop (no local viewers for the grace, shutdown, engine gone).
    Stop(&'static str),
    /// The origin could not be reached or went away: look it up again.
    Retry(String),
    /// The session had media and then none for [`SILENCE`]: the node may be cut off from
    /// here, or stopped.
    Silent,
}

/// Runs the pull until it should stop; the caller's thread.
pub(super) fn run(cluster: Arc<dyn Origins>, pull: Pull) {
    let key = pull.key.clone();
    info!("edge: pulling {key} from its origin");
    let mut backoff = Duration::from_millis(100);
    let mut idle_since: Option<Instant> = None;
    // The origin the last session failed with (silent, or not answering): if the map still
    // names it, the next session is a relay's.
    let mut avoid: Option<String> = None;
    let reason = loop {
        if pull.stop.load(Ordering::Relaxed) {
            break "stopped".to_string();
        }
        if idle(&pull, &mut idle_since) {
            break "no local viewers".to_string();
        }
        let Some((origin, origin_url)) = cluster.origin(&key, &pull.runtime) else {
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(MAX_BACKOFF);
            continue;
        };
        let relay = match avoid.take() {
            Some(a) if a == origin => cluster.relay(&origin),
            _ => None,
        };
        let via_relay = relay.is_some();
        let (name, url) = relay.unwrap_or((origin.clone(), origin_url));
        cluster.relaying(&key, via_relay);
        let (why, silent) = match session(&pull, &url, via_relay, &mut idle_since) {
            End::Stop(why) => break why.to_string(),
            End::Retry(why) => (why, false),
            End::Silent => (format!("silent for {SILENCE:?}"), true),
        };
        cluster.retried();
        if !via_relay {
            avoid = Some(origin);
        }
        if silent && !via_relay {
            // Straight to a relay: the map names the silent origin until its claim lapses,
            // and asking it again would wait on a node that may not answer.
            warn!(
                "edge: {key} from {name}: {why}; looking up its origin again (a relay while the map names {name})"
            );
            continue;
        }
        warn!("edge: {key} from {name}: {why}; looking up its origin again");
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(MAX_BACKOFF);
    };
    cluster.relaying(&key, false);
    cluster.ended(&key);
    info!("edge: pull of {key} ended: {reason}");
}

/// Whether the stream has had no local viewer (WebRTC, or LL-HLS packaging for players)
/// for the grace.
fn idle(pull: &Pull, since: &mut Option<Instant>) -> bool {
    let stats = &pull.engine.stats;
    let hls = stats
        .stream(pull.index)
        .is_some_and(|c| c.hls_wanted.load(Ordering::Relaxed));
    if hls || !stats.snapshots.viewers(Some(&pull.key)).is_empty() {
        *since = None;
        return false;
    }
    let since = *since.get_or_insert_with(Instant::now);
    since.elapsed() >= pull.grace
}

/// One WHEP session with the origin (or, `relay`, another edge) at `base`, fed to the
/// engine until it ends.
fn session(pull: &Pull, base: &str, relay: bool, idle_since: &mut Option<Instant>) -> End {
    let mut rng = rand::rng();
    let mut token = |n: usize| -> String {
        (&mut rng)
            .sample_iter(rand::distr::Alphanumeric)
            .take(n)
            .map(char::from)
            .collect()
    };
    let ufrag = token(8);
    let pwd = token(24);
    let offer = sdp::write_offer(&sdp::OfferParams {
        ice_ufrag: &ufrag,
        ice_pwd: &pwd,
        fingerprint_sha256: pull.dtls.fingerprint(),
        video: true,
        audio: true,
        abs_capture_time: true,
        all_video: true,
    });
    let url = format!("{}/{}/whep", base.trim_end_matches('/'), pull.key);
    let agent = &pull.agent;
    let (answer, location) = match post(agent, &url, &offer, &pull.secret, relay) {
        Ok(x) => x,
        Err(e) => return End::Retry(e),
    };
    let ntp = NtpClock::now();
    let now = Instant::now();
    let params = match client_params(
        &answer,
        &ClientOffer {
            ufrag,
            pwd,
            rtcp: true,
            ntp_base: (now, ntp.ntp(now)),
        },
    ) {
        Ok(p) => p,
        Err(e) => return End::Retry(format!("bad answer: {e}")),
    };
    let end = pump(pull, params, idle_since, &mut rng);
    if let Some(loc) = location {
        let loc = if loc.starts_with('/') {
            format!("{}{loc}", base.trim_end_matches('/'))
        } else {
            loc
        };
        // On a thread of its own: a node that went silent may not answer for the whole
        // request timeout, and the next session must not wait for it (the session ends on
        // the node's side anyway when its consent checks go unanswered).
        let (agent, secret) = (agent.clone(), pull.secret.clone());
        let _ = std::thread::Builder::new()
            .name("EdgeDelete".into())
            .spawn(move || {
                let _ = agent.delete(&loc).header(SECRET_HEADER, &secret).call();
            });
    }
    end
}

/// POSTs the offer: the answer and the session's `Location`.
fn post(
    agent: &ureq::Agent,
    url: &str,
    offer: &str,
    secret: &str,
    relay: bool,
) -> Result<(String, Option<String>), String> {
    let mut req = agent
        .post(url)
        .header("Content-Type", "application/sdp")
        .header(SECRET_HEADER, secret);
    if relay {
        req = req.header(RELAY_HEADER, "1");
    }
    let mut r = req.send(offer).map_err(|e| format!("POST {url}: {e}"))?;
    let status = r.status().as_u16();
    let location = r
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = r
        .body_mut()
        .with_config()
        .limit(64 * 1024)
        .read_to_string()
        .map_err(|e| format!("POST {url}: {e}"))?;
    if status != 201 {
        return Err(format!("POST {url}: HTTP {status} {}", body.trim()));
    }
    Ok((body, location))
}

/// Runs the lean client against the origin and hands its packets to the engine.
fn pump(
    pull: &Pull,
    params: tern_rtc::client::ClientParams,
    idle_since: &mut Option<Instant>,
    rng: &mut impl Rng,
) -> End {
    let server = params.server;
    let codec = params.video_codec;
    let bind: SocketAddr = if server.is_ipv4() {
        "0.0.0.0:0".parse().expect("a valid address")
    } else {
        "[::]:0".parse().expect("a valid address")
    };
    let sock = match UdpSocket::bind(bind).and_then(|s| s.connect(server).map(|()| s)) {
        Ok(s) => s,
        Err(e) => return End::Retry(format!("UDP socket: {e}")),
    };
    let start = Instant::now();
    let mut client = Client::new(params, pull.dtls.clone(), start, rng.random());
    let keyframe = Arc::new(AtomicU8::new(0));
    // The publisher's slot, taken at the first packet; its `Drop` removes the publisher.
    let mut slot: Option<PublisherSlot> = None;
    let mut sink = FrameSink::packets_only(&pull.engine);
    let mut buf = vec![0u8; 2048];
    let mut last_media = start;
    let mut asked_keyframe = false;
    let mut next_check = start;
    let end = loop {
        let now = Instant::now();
        client.drain(&mut |d| {
            let _ = sock.send(d);
        });
        if pull.stop.load(Ordering::Relaxed) {
            break End::Stop("stopped");
        }
        if slot.as_ref().is_some_and(PublisherSlot::closed) {
            break End::Stop("publisher removed by the engine");
        }
        if let ClientState::Failed(why) = client.state() {
            break End::Retry(format!("session failed: {why}"));
        }
        if slot.is_none() && now - start > CONNECT {
            break End::Retry(format!("no media within {CONNECT:?}"));
        }
        if slot.is_some() && now - last_media > SILENCE {
            break End::Silent;
        }
        if now >= next_check {
            next_check = now + Duration::from_secs(1);
            if idle(pull, idle_since) {
                break End::Stop("no local viewers");
            }
        }
        if keyframe.swap(0, Ordering::Relaxed) != 0 {
            client.request_keyframe();
        }
        let wait = client
            .poll_timeout()
            .map_or(TICK, |t| t.saturating_duration_since(now).min(TICK))
            .max(Duration::from_millis(1));
        let _ = sock.set_read_timeout(Some(wait));
        // Read what is there (the first read may wait), then hand it over as one batch.
        let mut first = true;
        loop {
            if !first {
                let _ = sock.set_nonblocking(true);
            }
            let n = match sock.recv(&mut buf) {
                Ok(n) => n,
                Err(_) => break,
            };
            first = false;
            let now = Instant::now();
            let Some(r) = client.handle_input(now, &mut buf[..n]) else {
                continue;
            };
            last_media = now;
            sink.packet(IngestPacket {
                layer: 0,
                kind: r.kind,
                seq: r.seq,
                rtp_ts: r.rtp_ts,
                marker: r.marker,
                payload: Arc::from(&buf[r.payload]),
                capture_ntp: r.capture_ntp,
            });
            if sink.pending() >= 64 {
                break;
            }
        }
        let _ = sock.set_nonblocking(false);
        let now = Instant::now();
        if client.poll_timeout().is_some_and(|t| t <= now) {
            client.handle_timeout(now);
        }
        if sink.pending() == 0 {
            continue;
        }
        if slot.is_none() {
            let feed = Feed::Frames {
                source: Source::Edge,
                codec,
                rids: Vec::new(),
                keyframe: keyframe.clone(),
            };
            match attach_source_blocking(&pull.engine, pull.index, feed) {
                Ok(s) => {
                    info!("edge: {} live from {server}", pull.key);
                    sink.attach(s.id(), &pull.key, crate::config::TranscodeSetting::Never);
                    slot = Some(s);
                }
                Err(AttachError::Busy) => break End::Stop("the stream has a local publisher"),
                Err(AttachError::Stopped) => break End::Stop("media engine stopped"),
            }
        }
        if !asked_keyframe {
            // Start the local viewers at once rather than at the origin's next keyframe.
            client.request_keyframe();
            asked_keyframe = true;
        }
        if let Err(e) = sink.flush() {
            warn!("edge: {}: {e} for {MEDIA_STALL:?}", pull.key);
            break End::Stop(e);
        }
    };
    drop(slot);
    end
}
