//! The protocol-neutral session layer: **may this client publish or play this stream?**
//! Every surface (WHIP, WHEP, OME signalling, LL-HLS in `http/`; RTMP in `rtmp.rs`; SRT in
//! `srt/`) asks here, in the same order, and gets one grant or one [`Refusal`], which it
//! maps once to its own wire signal (an HTTP status, an RTMP NetStream code, an OME error,
//! an SRT reject reason). RTSP cameras and edge pulls are the server's own sources: they
//! need no grant. What follows a grant (the publisher in the engine, its media) is
//! [`crate::feed`]'s.
//!
//! | file | what |
//! | --- | --- |
//! | `shared.rs` | [`Core`]: what every surface shares (config, streams, engine, admission, limits, cluster, TURN links) |
//! | `refusal.rs` | [`Refusal`]: every reason a session is refused, protocol-neutral |
//! | `publish.rs` | [`Core::begin_publish`]: names and dynamic streams, app token, per-address limit, admission; then the cluster claim and the stream slot (`Publish::attach` in `feed/` runs them); the publisher table |
//! | `play.rs` | [`Core::begin_play`]: edge pull, the stream and its token; then live, capacity, per-address limit, admission |
//! | `lifetime.rs` | what follows a grant: the admitted session's lifetime and close notification, the sweep of publisher-made streams |
//!
//! Imports point down: surfaces import this module; it imports `admission`, `cluster`,
//! `directory`, `limits`, `media` and `config`, never a surface (`crates/tern/tests/e2e/house.rs`
//! checks that no ingest surface imports `http/`).

mod lifetime;
mod play;
mod publish;
mod refusal;
mod shared;

pub use lifetime::{end_stream, sweep_streams};
pub use play::{Play, PlayAsk, PlayGrant};
pub use publish::{Publish, PublishAsk};
pub use refusal::Refusal;
pub use shared::{
    Core, Credentials, PublisherSession, SourcePulls, TurnCredentials, TurnLinks, random_token,
    watch_session_ends,
};

pub use crate::admission::{Action, Protocol};
pub use crate::directory::StreamInfo;
