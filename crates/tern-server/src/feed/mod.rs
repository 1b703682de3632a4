//! After the grant: a publisher's place in the engine, and the one way its media goes in.
//!
//! - [`Publish::attach`] (and [`Publish::attach_blocking`] for the surfaces' own threads)
//!   takes what the session layer granted and a [`Feed`]: the cluster claim and the
//!   stream's slot, the publisher added to the engine, the publisher table and the
//!   session's lifetime. It returns a [`PublisherSlot`] whose `Drop` undoes it all (forgets
//!   the session, removes the publisher), whatever the way out: an error, a close, a kick,
//!   a panic (quinn's `ConnectionRef`). A [`Publish`] dropped before `attach` releases its
//!   claim. Sources the server pulls itself (RTSP cameras, an edge's upstream) have no
//!   grant and take their slot with [`attach_source`].
//! - [`FrameSink`] is where a frame publisher's thread (RTMP, SRT, RTSP, edge pull) puts
//!   each [`tern_rtc::av::AvEvent`] its container became: packets go to the engine in one
//!   bounded batch, samples to every packager that wants them ([`crate::tap::MediaTap`]),
//!   video facts to the [`VideoWatch`], and the thread's heap into its memory pool
//!   ([`Ledger`], [`Booking`]). A surface only turns its container into events.

mod ledger;
mod sink;
mod watch;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use tern_proto::codec::VideoCodec;
use tern_rtc::publisher::Publisher;
use tokio::sync::oneshot;

pub use ledger::{Booking, Ledger, arc_bytes};
pub use sink::{FrameSink, MEDIA_STALL};
pub use watch::VideoWatch;

use crate::limits::AddrPermit;
use crate::media::{AddError, Command, EngineHandle, FrameCommand, PublisherId, Source};
use crate::session::{Core, Publish, Refusal};

/// What a publisher feeds the engine with.
pub enum Feed {
    /// A WHIP session, driven by the engine on the media port.
    Whip {
        /// The accepted session.
        publisher: Box<Publisher>,
        /// The client address's place among its pending sessions, held until it connects.
        permit: Option<AddrPermit>,
    },
    /// A publisher on a thread of its own that hands in packets ([`FrameSink`]).
    Frames {
        /// Its kind.
        source: Source,
        /// The codec of its video packets (an SRT publisher may learn another from its
        /// TS later: [`FrameSink::set_codec`]).
        codec: VideoCodec,
        /// The RIDs of its video layers in layer order (RTMP renditions); empty with one.
        rids: Vec<Box<str>>,
        /// Bit `l` set by the engine when a viewer asks for a keyframe of layer `l`.
        keyframe: Arc<AtomicU8>,
    },
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed")
            .field("source", &self.source())
            .field("codec", &self.codec())
            .finish()
    }
}

impl Feed {
    /// Its kind.
    pub fn source(&self) -> Source {
        match self {
            Feed::Whip { .. } => Source::Whip,
            Feed::Frames { source, .. } => *source,
        }
    }

    /// The codec of its video.
    pub fn codec(&self) -> VideoCodec {
        match self {
            Feed::Whip { publisher, .. } => publisher.video_codec(),
            Feed::Frames { codec, .. } => *codec,
        }
    }

    /// The engine's command that adds it to stream `stream`, the reply's receiver, and the
    /// flag the engine sets when it ends the publisher.
    fn command(self, stream: usize) -> (Command, Pending) {
        let (reply, rx) = oneshot::channel();
        let closed = Arc::new(AtomicBool::new(false));
        let cmd = match self {
            Feed::Whip { publisher, permit } => Command::AddPublisher {
                stream,
                publisher,
                reply,
                permit,
            },
            Feed::Frames {
                source,
                codec,
                rids,
                keyframe,
            } => Command::Frames(FrameCommand::Add {
                stream,
                source,
                codec,
                closed: closed.clone(),
                keyframe,
                rids,
                reply,
            }),
        };
        (cmd, Pending { rx, closed })
    }
}

/// An add the engine has yet to answer.
struct Pending {
    rx: oneshot::Receiver<Result<PublisherId, AddError>>,
    closed: Arc<AtomicBool>,
}

/// Why the engine could not add a publisher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachError {
    /// The stream has a publisher (or a built-in source).
    Busy,
    /// The engine is stopping.
    Stopped,
}

impl std::fmt::Display for AttachError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AttachError::Busy => "the stream already has a publisher",
            AttachError::Stopped => "the media engine stopped",
        })
    }
}

/// The engine's answer to an add, as the seam reads it.
fn answer(
    r: Result<Result<PublisherId, AddError>, oneshot::error::RecvError>,
) -> Result<PublisherId, AttachError> {
    match r {
        Ok(Ok(id)) => Ok(id),
        Ok(Err(AddError::Busy)) => Err(AttachError::Busy),
        Err(_) => Err(AttachError::Stopped),
    }
}

/// A publisher in the engine. Dropping it removes the publisher and forgets its session;
/// [`PublisherSlot::keep`] leaves both to the publisher's own end (a WHIP resource, ended
/// by its DELETE or by the engine).
pub struct PublisherSlot {
    engine: EngineHandle,
    id: PublisherId,
    closed: Arc<AtomicBool>,
    /// The publisher table's entry, for publishers the session layer admitted.
    session: Option<(Arc<Core>, String)>,
    kept: bool,
}

impl std::fmt::Debug for PublisherSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublisherSlot")
            .field("id", &self.id)
            .field("session", &self.session())
            .finish_non_exhaustive()
    }
}

impl PublisherSlot {
    /// The publisher's id.
    pub fn id(&self) -> PublisherId {
        self.id
    }

    /// Its session id in the publisher table (`None` for a pulled source).
    pub fn session(&self) -> Option<&str> {
        self.session.as_ref().map(|(_, s)| s.as_str())
    }

    /// Whether the engine ended the publisher (a kick, a timeout, shutdown): its thread
    /// should close the connection.
    pub fn closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    /// Leaves the publisher in the engine and the table after this slot is gone; its
    /// session id.
    pub fn keep(mut self) -> String {
        self.kept = true;
        self.session
            .as_ref()
            .map(|(_, s)| s.clone())
            .unwrap_or_default()
    }
}

impl Drop for PublisherSlot {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        if let Some((core, session)) = self.session.take() {
            core.forget_publisher(&session);
        }
        let _ = self.engine.send(Command::RemovePublisher(self.id));
    }
}

impl Publish {
    /// Steps 3 and 4 of publishing (see [`crate::session`]'s publish module): the cluster
    /// claim and the stream's slot, the publisher added to the engine with `feed`, then
    /// the publisher table and the session's lifetime. Viewers answered in another video
    /// codec than the new publisher's are ended so that they rejoin in it.
    pub async fn attach(self, core: &Arc<Core>, feed: Feed) -> Result<PublisherSlot, Refusal> {
        let info = self.claim(core).await?;
        let (was, codec) = (core.engine.stats.video(info.index).codec, feed.codec());
        let pending = send(&core.engine, info.index, feed).map_err(|_| stopped())?;
        let closed = pending.closed.clone();
        let added = answer(pending.rx.await);
        self.attached(core, added, closed, (was, codec))
    }

    /// [`Publish::attach`] for a surface's own thread (RTMP, SRT): it waits on the
    /// runtime; the media threads never do.
    pub fn attach_blocking(self, core: &Arc<Core>, feed: Feed) -> Result<PublisherSlot, Refusal> {
        let rt = core
            .runtime()
            .ok_or(Refusal::Unavailable("admission is not running"))?;
        let info = rt.block_on(self.claim(core))?;
        let (was, codec) = (core.engine.stats.video(info.index).codec, feed.codec());
        let pending = send(&core.engine, info.index, feed).map_err(|_| stopped())?;
        let closed = pending.closed.clone();
        let added = answer(pending.rx.blocking_recv());
        self.attached(core, added, closed, (was, codec))
    }

    fn attached(
        self,
        core: &Arc<Core>,
        added: Result<PublisherId, AttachError>,
        closed: Arc<AtomicBool>,
        (was, codec): (VideoCodec, VideoCodec),
    ) -> Result<PublisherSlot, Refusal> {
        let id = match added {
            Ok(id) => id,
            Err(AttachError::Busy) => return Err(self.refused(AddError::Busy)),
            Err(AttachError::Stopped) => return Err(stopped()),
        };
        if was != codec {
            core.end_viewers_of_other_codec(self.key(), was, codec);
        }
        let session = self.started(core, id);
        Ok(PublisherSlot {
            engine: core.engine.clone(),
            id,
            closed,
            session: Some((core.clone(), session)),
            kept: false,
        })
    }
}

/// Takes stream `stream`'s publisher slot for a source the server pulls itself (an RTSP
/// camera, an edge's upstream session): no grant, no publisher table.
pub async fn attach_source(
    engine: &EngineHandle,
    stream: usize,
    feed: Feed,
) -> Result<PublisherSlot, AttachError> {
    let pending = send(engine, stream, feed)?;
    let id = answer(pending.rx.await)?;
    Ok(source_slot(engine, id, pending.closed))
}

/// [`attach_source`] for a thread of its own (an edge pull).
pub fn attach_source_blocking(
    engine: &EngineHandle,
    stream: usize,
    feed: Feed,
) -> Result<PublisherSlot, AttachError> {
    let pending = send(engine, stream, feed)?;
    let id = answer(pending.rx.blocking_recv())?;
    Ok(source_slot(engine, id, pending.closed))
}

fn source_slot(engine: &EngineHandle, id: PublisherId, closed: Arc<AtomicBool>) -> PublisherSlot {
    PublisherSlot {
        engine: engine.clone(),
        id,
        closed,
        session: None,
        kept: false,
    }
}

fn send(engine: &EngineHandle, stream: usize, feed: Feed) -> Result<Pending, AttachError> {
    let (cmd, pending) = feed.command(stream);
    engine.send(cmd).map_err(|_| AttachError::Stopped)?;
    Ok(pending)
}

fn stopped() -> Refusal {
    Refusal::Unavailable("media engine stopped")
}
