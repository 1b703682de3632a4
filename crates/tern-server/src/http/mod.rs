//! The HTTP side: every HTTP surface over the session layer ([`crate::session`]), which
//! decides who may publish and play for every protocol.
//!
//! - `router.rs`: every route in one place ([`router()`]), the API's routes behind one
//!   auth layer;
//! - surfaces: `whep.rs` (WHEP), `whip.rs` (WHIP ingest), [`ome`] (OvenMediaEngine
//!   signalling), `api.rs` (REST API and events), `metrics.rs` (Prometheus),
//!   `openapi.rs` (the OpenAPI document), `pages.rs` (index, player, dashboard),
//!   `memory.rs` (`/v1/memory`, `/v1/stats/current`), `hls.rs` (LL-HLS), [`cluster`]
//!   (WHEP routing to another node, the node's report, cluster JSON and metrics),
//!   `recordings.rs` (start, stop, list and serve recordings), `forwards.rs` (add, list and
//!   delete forwards);
//!   `trickle.rs` (what WHIP and WHEP PATCHes share);
//! - `server.rs`: the HTTP side's start and stop: the runtime and listeners ([`bind`]),
//!   serving them with the runtime's background work ([`serve`]), the graceful stop
//!   ([`Serving::stop`]);
//! - below the surfaces: `state.rs` ([`AppState`]: the session layer's `Core` and the WHEP
//!   session table), `extract.rs` (request extractors: stream path, SDP offer, tokens, the
//!   API auth layer), `error.rs` ([`HttpError`]: one table from error to status and
//!   headers), `reply.rs` (the successful responses surfaces share), `listener.rs` (the
//!   TCP listener with its per-address limit), `tls.rs` (HTTPS: the TLS listener and the
//!   certificate that reloads), `proxy.rs` (the client's address behind trusted proxies).
//!
//! What a surface may import: `state`, `extract`, `error`, `reply`, `trickle`, `cluster`
//! and the crate's lower layers (`session`, `media`, `admission`, `snapshot`, ...); the
//! player page also hands a WebSocket upgrade to `ome`, and `metrics` reads `cluster`'s
//! rows. No other surface imports another. Nothing outside `http/` imports from it but
//! the server's start (`lib.rs`): ingest surfaces (`rtmp.rs`, `srt/`, `rtsp/`) talk to the
//! session layer and `feed/` only (`crates/tern/tests/e2e/house.rs` checks this).

mod api;
pub mod cluster;
mod config;
mod error;
mod extract;
mod forwards;
mod hls;
mod listener;
mod memory;
mod metrics;
pub mod ome;
mod openapi;
mod pages;
mod proxy;
mod recordings;
mod reply;
pub mod router;
mod server;
mod state;
mod thumb;
pub mod tls;
mod trickle;
mod whep;
mod whip;

pub use error::HttpError;
pub use listener::{LimitedListener, Peer};
pub use openapi::openapi_doc;
pub use router::{redirect_router, router};
pub use server::{Bound, GRACE, Serving, Tls, bind, load_tls, serve};
pub use state::AppState;
pub use tls::{CertStore, TlsListener};
