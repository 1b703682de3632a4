//! A sans-IO TURN server (RFC 8656) with a STUN binding service (RFC 8489).
//!
//! [`TurnServer`] holds the allocation table: allocations in a [`Slab`] addressed by
//! [`AllocId`], each with its permissions, channel bindings and expiry; a map from the
//! client's transport address to its allocation; per-user counts for quotas. It never touches
//! a socket or the clock. The driver (tern-server) feeds it:
//!
//! - [`TurnServer::handle_client`]: a datagram (or one TCP frame) from a client. The answer
//!   is a [`ClientOutput`]: a reply to send back, payload to relay to a peer from the
//!   allocation's relay socket, or a [`PendingAllocation`] for which the driver binds a relay
//!   socket and calls [`TurnServer::finish_allocate`].
//! - [`TurnServer::handle_peer`]: a datagram that arrived on a relay socket. The payload is
//!   framed in place (ChannelData or Data indication) for the client.
//! - [`TurnServer::handle_timeout`] at [`TurnServer::poll_timeout`], and
//!   [`TurnServer::client_closed`] when a TCP client goes away; both may end allocations,
//!   reported by [`TurnServer::poll_event`] so the driver closes the relay socket.
//!
//! Authentication is the long-term mechanism (RFC 8489 §9.2) with stateless nonces: a nonce
//! is its expiry time plus an HMAC over that time and the client's IP, so a 401 costs no
//! state and a stale nonce is answered 438. Users are either configured (`name:password`) or
//! minted by a shared secret in coturn's `use-auth-secret` format (the "TURN REST API":
//! username `expiry-unix-time[:user]`, password `base64(HMAC-SHA1(secret, username))`), so
//! existing deployments carry over.
//!
//! What one allocation costs: one [`Slab`] slot (the fixed part, ~170 bytes, reported as
//! `turn_allocations`), its username and its permission/channel vectors on the heap
//! (reported as `turn_allocation_heap`), one entry in the client map, and the driver's relay
//! socket.
//!
//! Files, each importing only its siblings: `config.rs` (settings), `driver.rs` (what the
//! server and its driver hand each other), `table.rs` (the server's state, allocation
//! records, expiry and removal), `auth.rs` (credentials and stateless nonces), `reply.rs`
//! (error codes and the responses written), `request.rs` (client input checked and
//! dispatched), `allocate.rs` (Allocate, quotas, Refresh), `permission.rs` (permissions and
//! channels), `relay.rs` (the data path both ways and the bandwidth cap); this file only
//! declares and re-exports them.
//!
//! [`Slab`]: tern_pool::Slab

mod allocate;
mod auth;
mod config;
mod driver;
mod permission;
mod relay;
mod reply;
mod request;
mod table;

pub use auth::rest_credentials;
pub use config::TurnConfig;
pub use driver::{
    AllocId, ClientAddr, ClientOutput, DropReason, MAX_REPLY, PendingAllocation, Transport,
    TurnEvent, TurnStats,
};
pub use permission::{CHANNEL_LIFETIME, PERMISSION_LIFETIME};
pub use table::TurnServer;
