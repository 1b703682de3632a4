//! The messages between the media threads and the ids they carry: what the engine, the
//! workers and the socket workers all speak. Everything here is plain data and queues; it
//! imports none of the threads, so each of them can import it (quinn keeps its
//! endpoint-connection messages in a neutral module the same way).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU8;

use crossbeam_channel::Sender;
use mio::Waker;
use tern_pool::Buf;
use tern_rtc::publisher::Publisher;
use tern_rtc::stream::RingPacket;
use tern_rtc::viewer::{PWD_LEN, UFRAG_LEN, ViewerParams};
use tokio::sync::oneshot;

use crate::limits::AddrPermit;
use crate::media::ingest::{AddError, EndReason, FrameCommand, PublisherId};

/// Packets and datagrams a worker's queue holds. 4096 is more than a second of a 4 Mbps
/// stream's packets, or of RTCP from thousands of viewers, while the queue's slots stay
/// small (~0.4 MiB per worker, allocated once).
pub(super) const QUEUE: usize = 4096;

/// Ring packets waiting for the media tap's thread (LL-HLS, recordings): 2,048 is two
/// seconds of a 6 Mbit/s stream's packets, far more than a packager falls behind by.
pub const TAP_QUEUE: usize = 2048;

/// A ring packet of stream `stream` for the media tap's subscribers (the payload is
/// shared, not copied).
pub struct TapPacket {
    /// Stream index.
    pub stream: usize,
    /// The packet as the ring holds it.
    pub pkt: RingPacket,
    /// It is the stream's slate (`[[app]] fallback`), not a publisher's or a clip source's:
    /// LL-HLS packages it, recordings leave it out.
    pub slate: bool,
}

impl std::fmt::Debug for TapPacket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TapPacket")
            .field("stream", &self.stream)
            .field("seq", &self.pkt.seq)
            .finish()
    }
}

/// Most workers of each kind, a bound of the `[server]` section: a [`ViewerId`] carries its
/// worker in 8 bits.
pub use crate::config::MAX_WORKERS;
const _: () = assert!(
    MAX_WORKERS <= 256,
    "a ViewerId carries its worker in 8 bits"
);

/// Opaque handle of a viewer inside the engine (slot index + generation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ViewerId(u64);

impl ViewerId {
    /// The id as a number (for the API).
    pub fn raw(self) -> u64 {
        self.0
    }

    /// The id of a number from [`ViewerId::raw`].
    pub fn from_raw(v: u64) -> Self {
        ViewerId(v)
    }

    /// Bits 0-23: slot index; 24-31: the worker holding it; 32-63: generation.
    pub(super) fn new(worker: usize, index: u32, generation: u32) -> Self {
        ViewerId(u64::from(generation) << 32 | ((worker as u64 & 0xff) << 24) | u64::from(index))
    }
    pub(super) fn index(self) -> usize {
        (self.0 & 0xff_ffff) as usize
    }
    /// The worker (host index, see [`EngineHandle`]) holding the viewer.
    pub(crate) fn worker(self) -> usize {
        ((self.0 >> 24) & 0xff) as usize
    }
    pub(super) fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

/// Commands from the HTTP side.
pub enum Command {
    /// Create a viewer on stream `stream` (index into the engine's streams).
    AddViewer {
        /// Stream index.
        stream: usize,
        /// Session parameters.
        params: Box<ViewerParams>,
        /// Where the new id goes.
        reply: oneshot::Sender<ViewerId>,
        /// The client address's place among its pending sessions, held until the viewer
        /// connects or ends.
        permit: Option<AddrPermit>,
    },
    /// End a viewer (WHEP DELETE).
    RemoveViewer(ViewerId),
    /// Pin a viewer to a simulcast layer (`Some`), or let the bandwidth estimate choose
    /// (`None`).
    SetLayer {
        /// The viewer.
        id: ViewerId,
        /// The layer to pin.
        pin: Option<u8>,
    },
    /// Install a WHIP publisher on stream `stream`.
    AddPublisher {
        /// Stream index.
        stream: usize,
        /// The accepted session.
        publisher: Box<Publisher>,
        /// Its id, or why not.
        reply: oneshot::Sender<Result<PublisherId, AddError>>,
        /// The client address's place among its pending sessions, held until the publisher
        /// connects or ends.
        permit: Option<AddrPermit>,
        /// Renditions made of its one video layer (`[app] renditions`), if any.
        renditions: Option<WhipLayers>,
    },
    /// End a publisher (WHIP DELETE, RTMP connection closed, kick).
    RemovePublisher(PublisherId),
    /// A frame publisher's request (take a stream's publisher slot, or its codec).
    Frames(FrameCommand),
    /// ICE restart with new credentials.
    RestartIce {
        /// The viewer.
        id: ViewerId,
        /// New local ufrag.
        ufrag: [u8; UFRAG_LEN],
        /// New local password.
        pwd: [u8; PWD_LEN],
        /// The viewer's new ufrag.
        remote_ufrag: Box<str>,
    },
    /// ICE restart of a WHIP publisher: the encoder's new credentials in, the server's new
    /// ones (ufrag, password) out.
    RestartPublisherIce {
        /// The publisher.
        id: PublisherId,
        /// The encoder's new ufrag.
        ufrag: String,
        /// The encoder's new password.
        pwd: String,
        /// The server's new ufrag and password, or why not.
        reply: oneshot::Sender<Result<(String, String), String>>,
    },
    /// A publisher-made stream, or one a reload declared, takes slot `index` under `key`
    /// (every worker: the slot's name, and rings where the worker serves it).
    BindStream {
        /// Stream index.
        index: usize,
        /// `app/stream`.
        key: Arc<str>,
        /// Declared (by a reload): it plays its app's slate, if any, until a publisher comes.
        declared: bool,
    },
    /// A keyframe for stream `index`'s top layer (a recording, thumbnail or forward just
    /// started and starts at one): coalesced with viewers' requests, as a PLI.
    RequestKeyframe(usize),
    /// A keyframe on every video layer of stream `index` (its LL-HLS ladder just started:
    /// each variant starts at one).
    RequestLayerKeyframes(usize),
    /// Slot `index`'s stream is removed: its viewers and its publisher end, its rings go.
    UnbindStream {
        /// Stream index.
        index: usize,
        /// Why, as the sessions' `left` events give it ([`EndReason`]).
        reason: EndReason,
    },
    /// Stop the engine.
    Shutdown,
}

/// The layers a WHIP publisher that sends one video layer gets from its renditions
/// (`[app] renditions`, made by `crate::feed::WhipRenditions`).
#[derive(Debug, Clone)]
pub struct WhipLayers {
    /// The stream's RIDs in layer order: the source's (`h`), then each rendition's.
    pub rids: Vec<Box<str>>,
    /// Bit `l` set by the engine when a viewer asks for a keyframe of layer `l` > 0.
    pub keyframe: Arc<AtomicU8>,
}

/// One viewer's memory as the engine accounts it.
#[derive(Debug, Clone)]
pub struct SessionMemory {
    /// The viewer.
    pub id: ViewerId,
    /// Its state, e.g. `Connected`.
    pub state: String,
    /// Whether it still holds DTLS handshake state.
    pub handshake: bool,
    /// Bytes of its slot in the engine's session table (the inline `Viewer`).
    pub inline_bytes: usize,
    /// Heap bytes it holds: allocated and kept by its own calls on the engine thread (DTLS
    /// state while handshaking, the SRTP context once connected) plus its ICE ufrag.
    pub heap_bytes: usize,
}

/// Where a datagram goes: a viewer, or the publisher of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// A viewer session.
    Viewer(ViewerId),
    /// The WHIP publisher of a stream (index).
    Publisher(usize),
}

impl Target {
    /// The host (worker index) that owns the session.
    pub(crate) fn host(self, apps: usize) -> usize {
        match self {
            Target::Viewer(id) => id.worker(),
            Target::Publisher(stream) => stream % apps,
        }
    }
}

/// Packets between threads (bounded queue).
pub(crate) enum Data {
    /// A datagram for a session the worker owns (socket worker -> worker).
    Datagram {
        /// Its session.
        to: Target,
        /// Its source.
        from: SocketAddr,
        /// Its bytes, in a pooled buffer.
        buf: Buf,
    },
    /// A new packet of a stream (app worker -> stream workers).
    Media {
        /// Stream index.
        stream: usize,
        /// The packet; its payload is shared, not copied.
        pkt: RingPacket,
    },
    /// The stream's publisher left: clear the copies of its rings (app -> stream workers).
    Reset(usize),
    /// Media from a frame publisher's thread (RTMP, SRT, RTSP, edge pull; -> the stream's
    /// app worker). Bounded like the rest, so a worker that falls behind stalls the sending
    /// thread, which stops reading its socket and so pushes back on the encoder.
    Frames(FrameCommand),
}

/// Control messages (unbounded queue; rare).
pub(super) enum Ctl {
    Cmd(Command),
    Sessions(oneshot::Sender<Vec<SessionMemory>>),
    /// A viewer's live figures (`None`: not here).
    Live(
        ViewerId,
        oneshot::Sender<Option<tern_rtc::viewer::ViewerLive>>,
    ),
    /// A viewer asked for a keyframe (stream worker -> the stream's app worker).
    Keyframe(usize, u8),
}

/// A worker's queues and its waker.
#[derive(Clone)]
pub(crate) struct WorkerLink {
    pub(crate) data: Sender<Data>,
    pub(super) ctl: Sender<Ctl>,
    pub(super) waker: Arc<Waker>,
}

impl WorkerLink {
    /// Wakes the worker.
    pub(crate) fn wake(&self) {
        let _ = self.waker.wake();
    }

    /// Sends a control message and wakes the worker.
    pub(super) fn ctl(&self, c: Ctl) -> Result<(), &'static str> {
        self.ctl.send(c).map_err(|_| "media engine stopped")?;
        self.waker.wake().map_err(|_| "media engine stopped")
    }
}
