//! Publishing, in the order every ingest surface follows:
//!
//! 1. [`Core::begin_publish`]: the name (declared, or a valid name in a dynamic app), the
//!    app's static token, the per-address limit on pending sessions (surfaces whose
//!    sessions handshake on the media port), then admission (JWT, webhook);
//! 2. the surface's own work (WHIP accepts the SDP offer; RTMP has nothing to do);
//! 3. [`Publish::claim`]: the cluster claim (no publisher on another node) and the
//!    stream's slot, made if the stream is new;
//! 4. the publisher is added to the engine, and [`Publish::started`] records it: the
//!    publisher table, the admitted session's lifetime and close notification.
//!
//! Steps 3 and 4 are one call for every surface: [`Publish::attach`], which returns the
//! publisher's slot ([`crate::feed::PublisherSlot`]). A `Publish` dropped before it gives back the client
//! address's pending-session permit.

use std::net::SocketAddr;
use std::time::Duration;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::admission::{Action, Ask, Protocol};
use crate::directory::StreamInfo;
use crate::feed::{Adding, AttachError, Feed, PublisherSlot, PublisherTable};
use crate::limits::AddrPermit;
use tern_proto::codec::VideoCodec;

use crate::media::{AddError, Command, PublisherId, ViewerId};
use crate::session::refusal::Refusal;
use crate::session::shared::{Core, Credentials, PublisherSession, random_token};

/// How long a publisher that took a stream from this node's own pull of it waits for the
/// pull's publisher to leave the stream's slot.
const PULL_LEAVES: Duration = Duration::from_secs(2);

/// A request to publish.
#[derive(Debug, Clone)]
pub struct PublishAsk {
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
}

/// A publisher the session layer admitted: what it holds until the publisher exists in the
/// engine ([`Publish::attach`]) or is dropped.
#[derive(Debug)]
pub struct Publish {
    key: String,
    session: String,
    ask: Ask,
    lifetime: Option<Duration>,
    permit: Option<AddrPermit>,
}

impl Core {
    /// Step 1 of publishing (see the module doc): [`Core::check_publish`], then
    /// [`Core::admit_publish`].
    pub async fn begin_publish(&self, ask: PublishAsk) -> Result<Publish, Refusal> {
        self.check_publish(&ask)?;
        self.admit_publish(ask).await
    }

    /// Step 1's checks that read only the configuration and the streams: the name and the
    /// app's token. A surface with a request body to check (WHIP's offer) runs them first,
    /// then checks its body, then [`Core::admit_publish`].
    pub fn check_publish(&self, ask: &PublishAsk) -> Result<(), Refusal> {
        if self.drain.is_draining() {
            return Err(Refusal::Draining);
        }
        self.may_publish(&ask.app, &ask.stream)?;
        self.check_app_token(&ask.app, ask.credentials.app_token.as_deref())
    }

    /// The rest of step 1, after [`Core::check_publish`]: the per-address limit and
    /// admission.
    pub async fn admit_publish(&self, ask: PublishAsk) -> Result<Publish, Refusal> {
        let permit = match ask.protocol.handshakes_on_media_port() {
            true => Some(self.pending_permit(ask.client.ip())?),
            false => None,
        };
        let session = match ask.protocol {
            Protocol::Whip => random_token(22),
            p => format!("{}-{}", p.as_str(), random_token(16)),
        };
        let key = format!("{}/{}", ask.app, ask.stream);
        let (ask, lifetime) = self
            .admit(
                Action::Publish,
                ask.protocol,
                (ask.app, ask.stream),
                ask.client,
                ask.credentials,
                session.clone(),
            )
            .await?;
        Ok(Publish {
            key,
            session,
            ask,
            lifetime,
            permit,
        })
    }

    /// Whether a publisher may have stream `app/stream` (before admission): it exists, or
    /// its app makes streams on any valid name.
    pub fn may_publish(&self, app: &str, stream: &str) -> Result<(), Refusal> {
        let key = format!("{app}/{stream}");
        if self
            .config()
            .app(app)
            .is_some_and(|a| a.source(stream).is_some())
        {
            return Err(Refusal::Source(key));
        }
        if self.streams.contains(&key) {
            return Ok(());
        }
        if !crate::config::valid_name(stream) {
            return Err(Refusal::BadName(stream.to_string()));
        }
        match self.config().app(app) {
            Some(a) if a.dynamic => Ok(()),
            _ => Err(Refusal::NotFound(key)),
        }
    }

    /// The stream `app/stream` for an admitted publisher (or an edge pull), made (and
    /// announced to the engine and the event stream) if it does not exist yet.
    pub fn claim_stream(&self, app: &str, stream: &str) -> Result<StreamInfo, Refusal> {
        self.may_publish(app, stream)?;
        let key = format!("{app}/{stream}");
        let (info, made) = self
            .streams
            .claim(&key, std::time::Instant::now())
            .map_err(Refusal::Full)?;
        if made {
            let _ = self.engine.send(Command::BindStream {
                index: info.index,
                key: key.as_str().into(),
                declared: false,
            });
            self.engine.stats.snapshots.stream_created(&key);
            tracing::info!("stream {key} created by a publisher");
        }
        Ok(info)
    }

    /// Removes a publisher from the publisher table (a WHIP DELETE, an RTMP connection
    /// closed, a kick); a wave of departed publishers leaves no table sized for it behind.
    pub fn forget_publisher(&self, session: &str) -> Option<PublisherId> {
        let mut m = self.publishers.lock().ok()?;
        let id = m.remove(session).map(|s| s.id);
        tern_pool::shrink_map(&mut m);
        id
    }

    /// The publisher table's entry for `session`.
    pub fn publisher(&self, session: &str) -> Option<PublisherSession> {
        self.publishers.lock().ok()?.get(session).cloned()
    }

    /// Updates the entry for `session` (a WHIP ICE restart); false if it is gone.
    pub fn update_publisher(&self, session: &str, f: impl FnOnce(&mut PublisherSession)) -> bool {
        match self.publishers.lock() {
            Ok(mut m) => m.get_mut(session).map(f).is_some(),
            Err(_) => false,
        }
    }

    /// A publisher in another video codec took the stream (a WHIP offer's codec, an SRT
    /// publisher's TS): the viewers answered for the old codec could not decode the new
    /// one (their payload type says the old codec), so they are ended (DTLS close_notify),
    /// and their players' next offer is answered with the new codec.
    pub fn end_viewers_of_other_codec(&self, key: &str, was: VideoCodec, now: VideoCodec) {
        let viewers = self.engine.stats.snapshots.viewers(Some(key));
        if viewers.is_empty() {
            return;
        }
        tracing::info!(
            "stream {key}: the publisher sends {now}, its viewers were answered {was}: ending {} viewers so they rejoin",
            viewers.len()
        );
        for v in viewers {
            let _ = self
                .engine
                .send(Command::RemoveViewer(ViewerId::from_raw(v.id)));
        }
    }

    /// Removes the publisher of stream `index` from the table (an API kick); its id.
    pub fn forget_publisher_of(&self, index: usize) -> Option<PublisherId> {
        let session = {
            let m = self.publishers.lock().ok()?;
            m.iter()
                .find(|(_, p)| p.id.stream == index)
                .map(|(s, _)| s.clone())?
        };
        self.forget_publisher(&session)
    }
}

impl PublisherTable for Core {
    fn forget(&self, session: &str) {
        self.forget_publisher(session);
    }
}

impl Publish {
    /// Steps 3 and 4 (see the module doc): the cluster claim and the stream's slot, the
    /// publisher added to the engine with `feed` ([`crate::feed::add`]), then the publisher
    /// table and the session's lifetime. Viewers answered in another video codec than the
    /// new publisher's are ended so that they rejoin in it. The slot's `Drop` undoes it.
    pub async fn attach(self, core: &Arc<Core>, feed: Feed) -> Result<PublisherSlot, Refusal> {
        let info = self.claim(core).await?;
        let (adding, codecs) = self.add(core, info, feed)?;
        let slot = adding.added().await;
        self.attached(core, slot, codecs)
    }

    /// [`Publish::attach`] for a surface's own thread (RTMP, SRT): it waits on the
    /// runtime; the media threads never do.
    pub fn attach_blocking(self, core: &Arc<Core>, feed: Feed) -> Result<PublisherSlot, Refusal> {
        let rt = core
            .runtime()
            .ok_or(Refusal::Unavailable("admission is not running"))?;
        let info = rt.block_on(self.claim(core))?;
        let (adding, codecs) = self.add(core, info, feed)?;
        let slot = adding.added_blocking();
        self.attached(core, slot, codecs)
    }

    /// Asks the engine to add the publisher to the claimed stream `info`; with the stream's
    /// video codec until now and the publisher's.
    fn add(
        &self,
        core: &Core,
        info: StreamInfo,
        feed: Feed,
    ) -> Result<(Adding, (VideoCodec, VideoCodec)), Refusal> {
        debug_assert_eq!(Protocol::from(feed.source()), self.ask.protocol);
        let codecs = (core.engine.stats.video(info.index).codec, feed.codec());
        let adding = crate::feed::add(&core.engine, info.index, feed).map_err(|_| stopped())?;
        Ok((adding, codecs))
    }

    fn attached(
        self,
        core: &Arc<Core>,
        slot: Result<PublisherSlot, AttachError>,
        (was, codec): (VideoCodec, VideoCodec),
    ) -> Result<PublisherSlot, Refusal> {
        let slot = match slot {
            Ok(s) => s,
            Err(AttachError::Busy) => return Err(self.refused(AddError::Busy)),
            Err(AttachError::Stopped) => return Err(stopped()),
        };
        if was != codec {
            core.end_viewers_of_other_codec(self.key(), was, codec);
        }
        let session = self.started(core, slot.id());
        Ok(slot.in_table(core.clone(), session))
    }

    /// `app/stream`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The id the session gets (the WHIP resource id, `rtmp-…` for RTMP).
    pub fn session(&self) -> &str {
        &self.session
    }

    /// Takes the pending-session permit (the engine holds it until the publisher connects).
    pub fn take_permit(&mut self) -> Option<AddrPermit> {
        self.permit.take()
    }

    /// Step 3: in a cluster, no other node may have the stream's publisher; then the
    /// stream's slot (made if new).
    pub async fn claim(&self, core: &Core) -> Result<StreamInfo, Refusal> {
        let mut stopped_pull = false;
        if let Some(c) = &core.cluster {
            stopped_pull =
                c.claim(&self.key)
                    .await
                    .map_err(|node| Refusal::PublishedElsewhere {
                        key: self.key.clone(),
                        node,
                    })?;
        }
        let info = core.claim_stream(&self.ask.app, &self.ask.stream)?;
        if stopped_pull {
            // The encoder moved here while this node still pulled the stream (its origin
            // died): the pull is stopping, and its publisher leaves the stream's slot within
            // a few tens of ms. Waited for, so this publisher is not refused as a second one.
            let publishing = || {
                core.engine
                    .stats
                    .stream(info.index)
                    .is_some_and(|c| c.publishing.load(Ordering::Relaxed))
            };
            let until = tokio::time::Instant::now() + PULL_LEAVES;
            while publishing() && tokio::time::Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(info)
    }

    /// The refusal for the engine's answer to adding the publisher.
    pub fn refused(&self, e: AddError) -> Refusal {
        match e {
            AddError::Busy => Refusal::Busy(self.key.clone()),
        }
    }

    /// Step 4: the publisher exists in the engine as `id`: it goes into the publisher table
    /// under its session id, its end will be told to the webhook, and with a lifetime the
    /// engine ends it then. Returns the session id.
    pub(crate) fn started(self, core: &Core, id: PublisherId) -> String {
        crate::session::lifetime::admitted_publisher(core, id, self.ask, self.lifetime);
        if let Ok(mut m) = core.publishers.lock() {
            m.insert(
                self.session.clone(),
                PublisherSession {
                    id,
                    etag: String::new(),
                    remote_ufrag: String::new(),
                },
            );
        }
        self.session
    }
}

fn stopped() -> Refusal {
    Refusal::Unavailable("media engine stopped")
}
