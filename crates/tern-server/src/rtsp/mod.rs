//! RTSP cameras (`[[app.source]]`): tern pulls an IP camera into one of an app's streams
//! while someone watches it (or always, `on_demand = false`), and plays it over WebRTC and
//! LL-HLS like any published stream.
//!
//! | file | what |
//! | --- | --- |
//! | `mod.rs` | [`Sources`]: one entry per source, the wake from a play request, the metrics |
//! | `entry.rs` | what a source's thread and sessions share: its entry, the thread's job, the idle rule |
//! | `status.rs` | a source's state (idle, connecting, live, retrying), last error, counters; its snapshot and events |
//! | `pull.rs` | one source's thread (`RtspPull`): connect, stream, back off and retry, stop when idle |
//! | `camera.rs` | one RTSP session with the camera: DESCRIBE/SETUP/PLAY with `retina`, its frames through [`tern_rtc::av::AvPipeline`] to the engine |
//! | `tls.rs` | an `rtsps://` source's TLS client configuration: the server's outbound roots, or any certificate with `tls_verify = false` |
//!
//! # The client: `retina`
//!
//! The RTSP client is the `retina` crate (Moonfire NVR's), as the issue proposed, kept on
//! this evidence: it is pure Rust (no FFI, so no `unsafe` and no C library's own threads
//! beside ours; GStreamer's or ffmpeg's RTSP clients would bring both), async on tokio (which
//! tern runs already), and does what cameras need and tern would otherwise write itself:
//! basic and digest authentication, TCP-interleaved and UDP transport, keepalives, the
//! camera quirks it has met in the field (live555's TCP bug, bad RTP timestamps), and the
//! depacketizers for H264 (with parameter sets that change mid-stream, reported per frame),
//! H265, AAC (RFC 3640) and G.711. It was tested against GStreamer's RTSP server in
//! `crates/tern/tests/e2e/rtsp.rs` (H264 + AAC, basic auth, a server killed and started
//! again). Its URL may not carry credentials: tern takes them out of the configured URL and
//! hands them over as `Credentials`, so the password is in no request line and no error.
//!
//! # RTSPS
//!
//! `rtsps://` is RTSP over TLS (RFC 7826 §4.2, port 322 by default), which retina did not
//! speak: tern's patch 4 (`vendor/retina/PATCHES.md`) runs its connection over
//! `tokio-rustls` with a `rustls::ClientConfig` the caller gives. The media comes
//! interleaved in the TLS connection (an `rtsps://` source with `transport = "udp"` is a
//! configuration error: RTP beside it on UDP would be in the clear). The certificate is
//! verified against the server's outbound roots (system roots and `server.ca_file`,
//! [`crate::outbound`]) for the URL's host, unless the source says `tls_verify = false`
//! (`tls.rs`). A failed handshake is a `camera error` whose message names the certificate
//! problem ("invalid peer certificate: UnknownIssuer").
//!
//! # Ingest
//!
//! Each RTSP session is one publisher in the engine (`feed::attach_source` with the source
//! `rtsp`), its frames made into RTP by the same [`tern_rtc::av::AvPipeline`] as RTMP's and
//! SRT's (H264 access units with their parameter sets in front of keyframes, AAC to Opus)
//! and handed on by the same [`crate::feed::FrameSink`], so LL-HLS and recordings take its
//! frames as they take RTMP's (a camera's H265 from the stream's ring). A session that ends (the camera gone, an
//! error) removes its publisher; the next one is a returning publisher on the same stream,
//! which ingest maps onto the stream's numbering: viewers stay connected, keep their SSRCs
//! and resume at the next keyframe. A camera cannot be asked for a keyframe: joins use the
//! keyframe cache.
//!
//! Sources come from the configuration, so the session layer's name, token and admission
//! steps do not apply to them; a publisher on a source's stream is refused
//! ([`crate::session::Refusal::Source`]).

mod camera;
mod entry;
mod pull;
mod status;
mod tls;

pub use status::{SourceState, SourceStatus};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tracing::{info, warn};

use crate::metrics::{Expose, Exposition};
use crate::outbound::Outbound;
use crate::session::{Core, SourcePulls};
use entry::{Entry, Run};

/// The configured sources and their threads.
pub struct Sources {
    core: Arc<Core>,
    /// By key; a reload adds, retires and replaces entries ([`Sources::apply`]).
    entries: Mutex<HashMap<String, Arc<Entry>>>,
    stop: Arc<AtomicBool>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Roots for `rtsps://` sources.
    outbound: Outbound,
}

/// What a reload did to the sources ([`Sources::apply`]): `app/stream` keys.
#[derive(Debug, Default)]
pub struct SourceChanges {
    /// Sources that are new: their streams are to be declared.
    pub added: Vec<String>,
    /// Sources that are gone: their threads stop, their streams are to be removed.
    pub removed: Vec<String>,
    /// Sources whose configuration changed: pulled again, their viewers kept.
    pub changed: Vec<String>,
}

impl Sources {
    /// Every `[[app.source]]` of the configuration; the always-on ones start pulling now.
    /// Set as the session layer's [`Core::sources`] so that play requests wake the others,
    /// and registered with the server's `/metrics` ([`Core::exposed`]). `rtsps://` sources
    /// verify their cameras' certificates with `outbound`'s roots.
    pub fn start(core: Arc<Core>, outbound: &Outbound) -> Arc<Sources> {
        let me = Arc::new(Sources {
            core: core.clone(),
            entries: Mutex::new(HashMap::new()),
            stop: Arc::new(AtomicBool::new(false)),
            threads: Mutex::new(Vec::new()),
            outbound: outbound.clone(),
        });
        let changes = me.apply(&core.config().apps);
        if !changes.added.is_empty() {
            info!("rtsp: {} camera source(s)", changes.added.len());
        }
        let _ = core.sources.set(me.clone());
        core.exposed
            .add(Arc::new(SourceMetrics(Arc::downgrade(&me))));
        me
    }

    /// Makes the sources those of `apps`: a new source gets an entry (and pulls now if it
    /// is always on); a removed one's thread stops; a changed one (its URL, credentials or
    /// any other key) stops and is pulled again with the new settings, once its old thread
    /// has ended, so its viewers stay on the stream.
    pub fn apply(&self, apps: &[crate::config::AppConfig]) -> SourceChanges {
        let mut wanted: HashMap<String, Entry> = HashMap::new();
        for app in apps {
            for s in &app.sources {
                let key = format!("{}/{}", app.name, s.stream);
                let e = Entry {
                    tls: tls::client_config(&key, s, &self.outbound),
                    key: key.clone(),
                    cfg: s.clone(),
                    grace: std::time::Duration::from_secs(app.idle_grace_s),
                    status: SourceStatus::new(&key, s),
                    run: Mutex::new(Run::default()),
                    retired: AtomicBool::new(false),
                };
                wanted.insert(key, e);
            }
        }
        let mut changes = SourceChanges::default();
        let mut start = Vec::new();
        let mut replaced = Vec::new();
        {
            let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            entries.retain(|key, old| {
                let keep = wanted.contains_key(key);
                if !keep {
                    old.retired.store(true, Ordering::Relaxed);
                    changes.removed.push(key.clone());
                }
                keep
            });
            for (key, e) in wanted {
                match entries.get(&key) {
                    Some(old) if old.same_as(&e) => continue,
                    Some(old) => {
                        old.retired.store(true, Ordering::Relaxed);
                        replaced.push(old.clone());
                        changes.changed.push(key.clone());
                    }
                    None => changes.added.push(key.clone()),
                }
                e.status.publish(&self.core.engine.stats.snapshots, None);
                let e = Arc::new(e);
                entries.insert(key, e.clone());
                start.push(e);
            }
        }
        for e in start {
            let old = replaced.iter().find(|o| o.key == e.key).cloned();
            let watched = entry::watched(&self.core, &e.key);
            if !e.cfg.on_demand || (old.is_some() && watched) {
                match old {
                    // The new pull waits for the old one to leave the stream.
                    Some(old) => self.wake_after(old, e.key.clone()),
                    None => {
                        self.wake(&e.key);
                    }
                }
            }
        }
        changes
    }

    /// Wakes `key` once `old`'s thread has ended (at most 10 s), on a thread of its own.
    fn wake_after(&self, old: Arc<Entry>, key: String) {
        let Some(me) = self.core.sources.get().cloned() else {
            return;
        };
        let name = old.key.clone();
        let spawned = std::thread::Builder::new()
            .name("RtspRepull".into())
            .spawn(move || {
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                while old.run.lock().is_ok_and(|r| r.running)
                    && std::time::Instant::now() < deadline
                {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                me.wake(&key);
            });
        if let Err(e) = spawned {
            warn!("rtsp {name}: cannot start a thread: {e}");
        }
    }

    /// Stops every pull and waits for the threads.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let threads = self
            .threads
            .lock()
            .map(|mut t| std::mem::take(&mut *t))
            .unwrap_or_default();
        for t in threads {
            let _ = t.join();
        }
    }

    fn entry(&self, key: &str) -> Option<Arc<Entry>> {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }
}

impl SourcePulls for Sources {
    fn wake(&self, key: &str) -> bool {
        let Some(e) = self.entry(key) else {
            return false;
        };
        let Ok(mut run) = e.run.lock() else {
            return true;
        };
        run.wakes += 1;
        if run.running || self.stop.load(Ordering::Relaxed) {
            return true;
        }
        run.running = true;
        let job = entry::Job {
            core: self.core.clone(),
            entry: e.clone(),
            stop: self.stop.clone(),
        };
        match std::thread::Builder::new()
            .name("RtspPull".into())
            .spawn(move || pull::run(job))
        {
            Ok(t) => {
                if let Ok(mut threads) = self.threads.lock() {
                    threads.retain(|t| !t.is_finished());
                    threads.push(t);
                }
            }
            Err(err) => {
                run.running = false;
                warn!("rtsp {key}: cannot start a thread: {err}");
            }
        }
        true
    }

    fn last_error(&self, key: &str) -> Option<String> {
        self.entry(key).and_then(|e| e.status.last_error())
    }
}

/// The sources' `tern_source_*` families, by key: registered with the server's `/metrics`
/// by [`Sources::start`].
struct SourceMetrics(std::sync::Weak<Sources>);

impl Expose for SourceMetrics {
    fn write_metrics(&self, o: &mut Exposition) {
        let Some(sources) = self.0.upgrade() else {
            return;
        };
        let mut list: Vec<Arc<Entry>> = sources
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        if list.is_empty() {
            return;
        }
        list.sort_by(|a, b| a.key.cmp(&b.key));
        status::write_metrics(list.iter().map(|e| &e.status), o);
    }
}

impl Drop for Sources {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
