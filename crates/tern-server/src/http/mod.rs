//! The HTTP side, one file per surface over one shared state:
//!
//! - `router.rs`: every route in one place ([`router()`]);
//! - surfaces: `whep.rs` (WHEP), [`whip`] (WHIP ingest), [`ome`] (OvenMediaEngine
//!   signalling), [`api`] (REST API, events, metrics, OpenAPI), `pages.rs` (index, player,
//!   dashboard), `memory.rs` (`/v1/memory`, `/v1/stats/current`), `hls.rs` (LL-HLS),
//!   [`cluster`] (routing, edge pull and the publish-time claim of a cluster node);
//! - `state.rs`: [`AppState`], the WHEP session table and the stream lookup; `reply.rs`:
//!   the responses every surface shares.
//!
//! Imports point down: router → surfaces → state → reply. No surface imports another,
//! except the player page handing a WebSocket upgrade to `ome`.

pub mod api;
pub mod cluster;
mod hls;
mod listener;
mod memory;
pub mod ome;
mod pages;
mod reply;
pub mod router;
mod state;
mod trickle;
mod whep;
pub mod whip;

pub use listener::{LimitedListener, Peer};
pub(crate) use reply::random_token as session_token;
pub use router::router;
pub use state::{
    AppState, PublishRefusal, StreamInfo, TurnLinks, claim_stream, forget_publisher, may_publish,
    sweep_streams,
};
pub(crate) use state::{PublisherSession, admitted_publisher};
