//! Playing, in the order every play surface follows:
//!
//! 1. [`Core::begin_play`]: in a cluster, a stream published on another node is pulled
//!    here first (edge pull); then the stream must exist, and the app's static token must
//!    match (a request from another node skips the token: it proved itself with the
//!    cluster secret); a stream a camera feeds that is not live yet is then admitted
//!    (JWT, webhook: before the camera is woken, so only an admitted client can make tern
//!    dial it), pulled, and the request waits for its first keyframe ([`Core::wake_source`]);
//! 2. the surface's own checks (WHEP: the `?layer=` pin and the SDP offer; LL-HLS: H264);
//! 3. [`Play::admit`]: the stream must be live; WHEP and OME viewers need room
//!    (`max_viewers`, `max_handshakes`), a WHEP viewer a pending-session permit (an OME
//!    viewer takes its permit with its answer); then admission (JWT, webhook), which a
//!    node's request skips, as does a request admitted in step 1;
//! 4. the surface makes its session, and [`PlayGrant::started`] records it: lifetime and
//!    close notification.

use std::net::SocketAddr;
use std::time::Duration;

use crate::admission::{Action, Ask, Protocol, SessionKey};
use crate::directory::StreamInfo;
use crate::limits::AddrPermit;
use crate::session::refusal::Refusal;
use crate::session::shared::{Core, Credentials, random_token};

/// How long a play request waits for an edge pull to bring the stream live.
const PULL_WAIT: Duration = Duration::from_secs(5);

/// A request to play.
#[derive(Debug, Clone)]
pub struct PlayAsk {
    /// App name.
    pub app: String,
    /// Stream name.
    pub stream: String,
    /// The surface asking.
    pub protocol: Protocol,
    /// The client's address.
    pub client: SocketAddr,
    /// What the client offers to prove it may.
    pub credentials: Credentials,
    /// The id the session will have (an OME offer id); `None`: one is minted.
    pub session: Option<String>,
    /// The request comes from another node of the cluster (an edge's upstream session):
    /// no pull, no token, no per-address limit, no admission.
    pub from_node: bool,
}

/// A play request whose stream exists and whose token matched.
#[derive(Debug)]
pub struct Play {
    ask: PlayAsk,
    info: StreamInfo,
    live: bool,
    /// Admission's verdict when it was asked in step 1 (a camera's stream woken for this
    /// request).
    admitted: Option<(Ask, Option<Duration>)>,
}

/// An admitted viewer, until its session exists ([`PlayGrant::started`]).
#[derive(Debug)]
pub struct PlayGrant {
    info: StreamInfo,
    session: String,
    admitted: Option<(Ask, Option<Duration>)>,
    permit: Option<AddrPermit>,
}

impl Core {
    /// Step 1 of playing (see the module doc): the edge pull, the stream, its token.
    pub async fn begin_play(&self, mut ask: PlayAsk) -> Result<Play, Refusal> {
        // A draining node takes no new viewer; an edge's pull of a stream published here
        // still goes on, as the publisher does.
        if !ask.from_node && self.drain.is_draining() {
            return Err(Refusal::Draining);
        }
        if !ask.from_node {
            self.pull(&ask.app, &ask.stream).await?;
        }
        let key = format!("{}/{}", ask.app, ask.stream);
        let info = self.streams.get(&key).ok_or(Refusal::NotFound(key))?;
        let mut admitted = None;
        if !ask.from_node {
            self.check_app_token(&ask.app, ask.credentials.app_token.as_deref())?;
            // A camera is woken only for a client admission lets in: asked here, before
            // the pull, when the stream is a camera's and not live (a live one is joined
            // and admitted in step 3 as any stream).
            let camera = self
                .config()
                .app(&ask.app)
                .is_some_and(|a| a.source(&ask.stream).is_some());
            if camera && !self.is_live(info) {
                let session = ask.session.get_or_insert_with(|| random_token(22)).clone();
                admitted = Some(
                    self.admit(
                        Action::Play,
                        ask.protocol,
                        (ask.app.clone(), ask.stream.clone()),
                        ask.client,
                        ask.credentials.clone(),
                        session,
                    )
                    .await?,
                );
            }
            self.wake_source(&ask.app, &ask.stream).await?;
        }
        let live = self.is_live(info);
        Ok(Play {
            ask,
            info,
            live,
            admitted,
        })
    }

    /// Edge pull for a play request: when `app/stream` is not live here and another node
    /// holds its claim, the stream is made here, one upstream pull started (or joined), and
    /// the request waits until the stream is live. `Ok` when there is nothing to pull (the
    /// request goes on as on a single node).
    pub async fn pull(&self, app: &str, stream: &str) -> Result<(), Refusal> {
        let Some(c) = self.cluster.as_ref() else {
            return Ok(());
        };
        let key = format!("{app}/{stream}");
        let live_here = || self.streams.get(&key).is_some_and(|i| self.is_live(i));
        if live_here() {
            return Ok(());
        }
        let origin = match c.origin_of(&key).await {
            Ok(Some(o)) if o != c.config().node => o,
            Ok(_) => return Ok(()),
            Err(e) => {
                return Err(Refusal::PullFailed(format!(
                    "the cluster store (Redis) cannot be reached ({e}): this node cannot find where {key} is published; retry"
                )));
            }
        };
        let info = self.claim_stream(app, stream)?;
        let Some(rt) = self.runtime.get().cloned() else {
            return Err(Refusal::Unavailable("the async runtime is not running"));
        };
        c.start_pull(&key, info.index, self.engine.clone(), rt)
            .map_err(|e| Refusal::PullFailed(format!("cannot start the pull of {key}: {e}")))?;
        let until = std::time::Instant::now() + PULL_WAIT;
        while std::time::Instant::now() < until {
            if live_here() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(Refusal::PullFailed(format!(
            "{key} is published on node {origin}, but pulling it here gave no media within {PULL_WAIT:?}; retry"
        )))
    }
}

impl Core {
    /// A play request for a stream a camera feeds (`[[app.source]]`): its pull is started
    /// (an on-demand source) or kept, and the request waits until the stream is live (the
    /// camera's first keyframe), at most [`PULL_WAIT`] as an edge pull. `Ok` at once for
    /// any other stream, or a source's stream that is live.
    pub async fn wake_source(&self, app: &str, stream: &str) -> Result<(), Refusal> {
        let Some(sources) = self.sources.get() else {
            return Ok(());
        };
        let key = format!("{app}/{stream}");
        if !sources.wake(&key) {
            return Ok(());
        }
        let live_here = || self.streams.get(&key).is_some_and(|i| self.is_live(i));
        let until = std::time::Instant::now() + PULL_WAIT;
        while !live_here() {
            if std::time::Instant::now() >= until {
                let why = sources
                    .last_error(&key)
                    .map_or(String::new(), |e| format!(" (last error: {e})"));
                return Err(Refusal::PullFailed(format!(
                    "the camera of {key} gave no keyframe within {PULL_WAIT:?}{why}; retry"
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            // A waiting request is a viewer to be: the pull's idle grace starts over.
            sources.wake(&key);
        }
        Ok(())
    }
}

impl Play {
    /// The stream.
    pub fn info(&self) -> StreamInfo {
        self.info
    }

    /// Whether it had media when the request was checked.
    pub fn live(&self) -> bool {
        self.live
    }

    /// `app/stream`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.ask.app, self.ask.stream)
    }

    /// Step 3 for a thumbnail (`thumb.jpg`): live, and admission with action `thumbnail`
    /// (a `play` token serves). No session follows, so no room or permit is taken and no
    /// close notification is owed.
    pub async fn admit_thumbnail(self, core: &Core) -> Result<(), Refusal> {
        if !self.live {
            return Err(Refusal::NotLive(self.key()));
        }
        let ask = self.ask;
        core.admit(
            Action::Thumbnail,
            ask.protocol,
            (ask.app, ask.stream),
            ask.client,
            ask.credentials,
            random_token(22),
        )
        .await
        .map(drop)
    }

    /// Step 3: live, room, the pending-session permit, admission.
    pub async fn admit(self, core: &Core) -> Result<PlayGrant, Refusal> {
        if !self.live {
            return Err(Refusal::NotLive(self.key()));
        }
        let ask = self.ask;
        // Which of the engine's limits the surface's viewers count against: WHEP and OME
        // viewers are sessions on the media port (an OME viewer's permit comes with its
        // answer, since its offer holds no engine state); LL-HLS sessions are limited by
        // the HLS side itself.
        let (room, permit_now) = match ask.protocol {
            Protocol::Whep => (true, true),
            Protocol::Ome => (true, false),
            _ => (false, false),
        };
        if room {
            core.check_capacity()?;
        }
        let permit = match permit_now && !ask.from_node {
            true => Some(core.pending_permit(ask.client.ip())?),
            false => None,
        };
        let session = ask.session.unwrap_or_else(|| random_token(22));
        let admitted = match (ask.from_node, self.admitted) {
            (true, _) => None,
            (false, Some(admitted)) => Some(admitted),
            (false, None) => Some(
                core.admit(
                    Action::Play,
                    ask.protocol,
                    (ask.app, ask.stream),
                    ask.client,
                    ask.credentials,
                    session.clone(),
                )
                .await?,
            ),
        };
        Ok(PlayGrant {
            info: self.info,
            session,
            admitted,
            permit,
        })
    }
}

impl PlayGrant {
    /// The stream.
    pub fn info(&self) -> StreamInfo {
        self.info
    }

    /// The id the session gets (the WHEP resource id, the LL-HLS session token, the OME
    /// offer id).
    pub fn session(&self) -> &str {
        &self.session
    }

    /// How long admission lets the session live, if it set a limit.
    pub fn lifetime(&self) -> Option<Duration> {
        self.admitted.as_ref().and_then(|(_, l)| *l)
    }

    /// Takes the pending-session permit (the engine holds it until the viewer connects).
    pub fn take_permit(&mut self) -> Option<AddrPermit> {
        self.permit.take()
    }

    /// Step 4: the session exists as `key`: its end will be told to the webhook, and a
    /// viewer with a lifetime is ended by the engine then (an LL-HLS session's lifetime is
    /// kept by the HLS side, from [`PlayGrant::lifetime`]).
    pub fn started(self, core: &Core, key: SessionKey) {
        if let Some((ask, lifetime)) = self.admitted {
            crate::session::lifetime::admitted(core, key, ask, lifetime);
        }
    }
}
