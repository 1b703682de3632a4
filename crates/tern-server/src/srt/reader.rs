//! One SRT reader's thread (`SrtReader`): a caller that asked to play a stream
//! (`#!::r=APP/STREAM,m=request` or MediaMTX's `read:APP/STREAM`) gets it as MPEG-TS, as vMix,
//! OBS media sources and hardware decoders pull contribution feeds.
//!
//! 1. The session layer decides as for any viewer ([`Core::begin_play`], [`Play::admit`]):
//!    the stream must exist and be live, the app's token (`s=`/`token=`, MediaMTX's password),
//!    JWT and the admission webhook (`"protocol": "srt"`, action `play`); the listener already
//!    checked the app's passphrase, and the caller holds its place under
//!    `limits.srt_connections_per_ip`. The stream's video must be H264 or H265.
//! 2. Accepted, the reader takes the stream's outlet ([`crate::forward::Forwards::subscribe`],
//!    the one every forward of the stream shares: Opus is encoded to AAC once per stream,
//!    whatever the number of readers) and writes its frames with a
//!    [`tern_rtc::outlet::TsWriter`] from the next keyframe on; the listener thread sends the
//!    messages (7 TS packets each).
//! 3. It is a viewer in the snapshots (`signalling: "srt"`, `viewer.joined`, `viewer.left`),
//!    whose end is told to the admission webhook; it ends when the caller leaves, at its
//!    admitted lifetime, or [`END_GRACE`] after its stream stopped being live.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::{RecvTimeoutError, TryRecvError};
use tern_rtc::outlet::{Container, TsWriter, carried};
use tracing::{info, warn};

use super::link::{Control, Inbound, reject_code};
use super::publisher::Job;
use super::transport::RejectCode;
use crate::admission::{Protocol, SessionKey};
use crate::session::{Core, Credentials, PlayAsk, Refusal};

/// How long a reader outlives its stream's end (a publisher that reconnects keeps it).
pub const END_GRACE: Duration = Duration::from_secs(5);
/// The largest SRT message: 7 TS packets.
const MESSAGE: usize = 7 * 188;
/// Messages the listener may hold for readers, all together; past it a reader's messages
/// are dropped (counted) and it starts again at a keyframe.
const MAX_PENDING: usize = 8192;
/// Reader ids in the viewer snapshots: above the engine's viewer ids.
const READER_IDS: u64 = 1 << 62;

/// The reader's place in `tern_srt_readers` while it lives.
struct Counted(Arc<super::link::SrtCounters>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.readers.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The thread's body.
pub(super) fn run(job: Job, serial: u64) {
    let (peer, key) = (job.peer, job.id.key());
    let core = job.core.clone();
    let grant = match admit(&job) {
        Ok(g) => g,
        Err((code, why)) => {
            warn!(
                "srt {peer}: reader of {key} refused ({} {}): {why}",
                code.libsrt(),
                code.name()
            );
            let _ = job.control.send(Control::Reject(job.conn, code));
            return;
        }
    };
    if !job.accept(&format!("reader of {key}")) {
        return;
    }
    job.counters.readers.fetch_add(1, Ordering::Relaxed);
    let _counted = Counted(job.counters.clone());
    let id = READER_IDS | serial;
    let snaps = &core.engine.stats.snapshots;
    snaps.viewer_joined_via(id, &key, "srt");
    snaps.viewer_connected(id, Some(peer), None);
    let until = grant.1.map(|l| Instant::now() + l);
    grant.0.started(&core, SessionKey::Viewer(id));
    info!("srt {peer}: playing {key}");
    let (why, sent) = play(&job, grant.2, until);
    info!("srt {peer}: reader of {key} ended: {why}; {sent} messages");
    snaps.viewer_left(id, why);
    if why != "closed by the peer" {
        let _ = job.control.send(Control::Close(job.conn));
    }
}

/// The session layer's answer: the grant, its lifetime and the stream's index; or the
/// reject reason and why.
#[allow(clippy::type_complexity)]
fn admit(
    job: &Job,
) -> Result<(crate::session::PlayGrant, Option<Duration>, usize), (RejectCode, String)> {
    let core = &job.core;
    let id = &job.id;
    let refused = |r: Refusal| (reject_code(&r), r.to_string());
    let ask = PlayAsk {
        app: id.app.clone(),
        stream: id.stream.clone(),
        protocol: Protocol::Srt,
        client: job.peer,
        credentials: Credentials {
            app_token: id.token.clone().or_else(|| id.pass.clone()),
            token: id.token.clone(),
            query: id.query.clone(),
        },
        session: None,
        from_node: false,
    };
    let rt = core
        .runtime()
        .ok_or_else(|| refused(Refusal::Unavailable("admission is not running")))?;
    let play = rt.block_on(core.begin_play(ask)).map_err(refused)?;
    let index = play.info().index;
    if let Err(why) = carried(core.engine.stats.video(index).codec, Container::Ts) {
        return Err((RejectCode::Conflict, why));
    }
    let grant = rt.block_on(play.admit(core)).map_err(refused)?;
    let lifetime = grant.lifetime();
    Ok((grant, lifetime, index))
}

/// Whether stream `index` of `key` is live.
fn live(core: &Core, key: &str, index: usize) -> bool {
    core.streams.get(key).is_some_and(|i| i.index == index)
        && core
            .engine
            .stats
            .stream(index)
            .is_some_and(|c| c.live.load(Ordering::Relaxed))
}

/// Sends the stream until the reader ends; why, and the messages sent.
fn play(job: &Job, index: usize, until: Option<Instant>) -> (&'static str, u64) {
    let core = &job.core;
    let key = job.id.key();
    let reader = core.forwards.subscribe(index);
    let mut ts = TsWriter::new();
    let mut out = Vec::with_capacity(64 * 188);
    let mut sent = 0u64;
    let mut not_live: Option<Instant> = None;
    let mut checked = Instant::now();
    let c = &job.counters;
    loop {
        match job.inbound.try_recv() {
            Ok(Inbound::Closed(_)) => return ("closed by the peer", sent),
            Ok(_) | Err(TryRecvError::Empty) => {}
            Err(TryRecvError::Disconnected) => return ("server shutting down", sent),
        }
        let now = Instant::now();
        if until.is_some_and(|u| now >= u) {
            return ("lifetime", sent);
        }
        if now.duration_since(checked) >= Duration::from_millis(500) {
            checked = now;
            if live(core, &key, index) {
                not_live = None;
            } else if now.duration_since(*not_live.get_or_insert(now)) >= END_GRACE {
                return ("stream ended", sent);
            }
        }
        if reader.missed() {
            ts.resync();
            reader.ask_keyframe();
        }
        match reader.rx.recv_timeout(Duration::from_millis(50)) {
            Ok(f) => {
                ts.write(&f, &mut out);
                while let Ok(f) = reader.rx.try_recv() {
                    ts.write(&f, &mut out);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return ("server shutting down", sent),
        }
        for m in out.chunks(MESSAGE) {
            if c.pending.fetch_add(1, Ordering::Relaxed) >= MAX_PENDING {
                c.pending.fetch_sub(1, Ordering::Relaxed);
                c.reader_drops.fetch_add(1, Ordering::Relaxed);
                ts.resync();
                reader.ask_keyframe();
                break;
            }
            let msg = bytes::Bytes::copy_from_slice(m);
            if job.control.send(Control::Send(job.conn, msg)).is_err() {
                return ("server shutting down", sent);
            }
            sent += 1;
        }
        out.clear();
    }
}
