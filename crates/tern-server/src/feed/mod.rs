//! After the grant: a publisher's place in the engine, and the one way its media goes in.
//!
//! - [`add`] puts a publisher in the engine with its [`Feed`] and gives back a
//!   [`PublisherSlot`] whose `Drop` undoes it (removes the publisher and, for a publisher
//!   the session layer admitted, forgets its session in the [`PublisherTable`]), whatever
//!   the way out: an error, a close, a kick, a panic (quinn's `ConnectionRef`). Admitted
//!   publishers come here through `Publish::attach` ([`crate::session::Publish`]: the
//!   cluster claim, the stream's slot, the table, the lifetime); sources the server pulls
//!   itself (RTSP cameras, an edge's upstream) have no grant and take their slot with
//!   [`attach_source`].
//! - [`FrameSink`] is where a frame publisher's thread (RTMP, SRT, RTSP, edge pull) puts
//!   each [`tern_rtc::av::AvEvent`] its container became: packets go to the engine in one
//!   bounded batch, samples to every packager that wants them ([`crate::tap::MediaTap`]),
//!   video facts to the [`VideoWatch`], and the thread's heap into its memory pool
//!   ([`Ledger`], [`Booking`]). A surface only turns its container into events.

mod ledger;
mod renditions;
mod sink;
mod watch;
mod whip_renditions;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use tern_proto::codec::VideoCodec;
use tern_rtc::publisher::Publisher;
use tokio::sync::oneshot;

pub use ledger::{Booking, Ledger, arc_bytes};
pub use renditions::{start_renditions, stop_renditions};
pub use sink::{FrameSink, MEDIA_STALL};
pub use watch::VideoWatch;
pub use whip_renditions::WhipRenditions;

use crate::limits::AddrPermit;
use crate::media::{
    AddError, Command, EngineHandle, FrameCommand, PublisherId, Source, WhipLayers,
};

/// Where admitted publishers are listed by session id (the session layer's publisher
/// table): a slot forgets its session there when it is dropped.
pub trait PublisherTable: Send + Sync {
    /// Removes `session` from the table.
    fn forget(&self, session: &str);
}

/// What a publisher feeds the engine with.
pub enum Feed {
    /// A WHIP session, driven by the engine on the media port.
    Whip {
        /// The accepted session.
        publisher: Box<Publisher>,
        /// The client address's place among its pending sessions, held until it connects.
        permit: Option<AddrPermit>,
        /// Renditions of its one video layer ([`WhipRenditions`]), if its app makes them.
        renditions: Option<WhipLayers>,
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

    /// The engine's command that adds it to stream `stream`, and the [`Adding`] that waits
    /// for the engine's answer (with the flag the engine sets when it ends the publisher).
    fn command(self, engine: &EngineHandle, stream: usize) -> (Command, Adding) {
        let (reply, rx) = oneshot::channel();
        let closed = Arc::new(AtomicBool::new(false));
        let cmd = match self {
            Feed::Whip {
                publisher,
                permit,
                renditions,
            } => Command::AddPublisher {
                stream,
                publisher,
                reply,
                permit,
                renditions,
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
        let adding = Adding {
            engine: engine.clone(),
            rx,
            closed,
        };
        (cmd, adding)
    }
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
    session: Option<(Arc<dyn PublisherTable>, String)>,
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

    /// The slot of a publisher listed in `table` as `session`: dropping it forgets it there.
    pub fn in_table(mut self, table: Arc<dyn PublisherTable>, session: String) -> Self {
        self.session = Some((table, session));
        self
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
        if let Some((table, session)) = self.session.take() {
            table.forget(&session);
        }
        let _ = self.engine.send(Command::RemovePublisher(self.id));
    }
}

/// A publisher on its way into the engine: [`Adding::added`] waits for its slot.
pub struct Adding {
    engine: EngineHandle,
    rx: oneshot::Receiver<Result<PublisherId, AddError>>,
    closed: Arc<AtomicBool>,
}

/// Asks the engine to add a publisher with `feed` to stream `stream`.
pub fn add(engine: &EngineHandle, stream: usize, feed: Feed) -> Result<Adding, AttachError> {
    let (cmd, adding) = feed.command(engine, stream);
    engine.send(cmd).map_err(|_| AttachError::Stopped)?;
    Ok(adding)
}

impl Adding {
    /// The publisher's slot once the engine took it.
    pub async fn added(self) -> Result<PublisherSlot, AttachError> {
        let id = answer(self.rx.await)?;
        Ok(slot(self.engine, id, self.closed))
    }

    /// [`Adding::added`] for a thread of its own.
    pub fn added_blocking(self) -> Result<PublisherSlot, AttachError> {
        let id = answer(self.rx.blocking_recv())?;
        Ok(slot(self.engine, id, self.closed))
    }
}

/// Takes stream `stream`'s publisher slot for a source the server pulls itself (an RTSP
/// camera, an edge's upstream session): no grant, no publisher table.
pub async fn attach_source(
    engine: &EngineHandle,
    stream: usize,
    feed: Feed,
) -> Result<PublisherSlot, AttachError> {
    add(engine, stream, feed)?.added().await
}

/// [`attach_source`] for a thread of its own (an edge pull).
pub fn attach_source_blocking(
    engine: &EngineHandle,
    stream: usize,
    feed: Feed,
) -> Result<PublisherSlot, AttachError> {
    add(engine, stream, feed)?.added_blocking()
}

fn slot(engine: EngineHandle, id: PublisherId, closed: Arc<AtomicBool>) -> PublisherSlot {
    PublisherSlot {
        engine,
        id,
        closed,
        session: None,
        kept: false,
    }
}
