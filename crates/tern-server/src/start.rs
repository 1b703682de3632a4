//! What a part of the server reports when it cannot start: a socket it could not bind or a
//! thread it could not start. Each part's start function (`turn::start`, `http::bind`,
//! `rtmp::start`, ...) returns it; [`crate::Server::start`] turns it into its `ServeError`.
//! A leaf: the parts stand on it, and it stands on nothing of the crate.

use std::io;
use std::net::SocketAddr;

/// Why a part could not start.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A socket could not be bound.
    #[error("cannot bind {what} on {addr}: {source}")]
    Bind {
        /// Which listener.
        what: &'static str,
        /// Address.
        addr: SocketAddr,
        /// Cause.
        source: io::Error,
    },
    /// A thread (or the HTTP runtime) could not be started.
    #[error("cannot start the {what} thread: {source}")]
    Thread {
        /// Which thread.
        what: &'static str,
        /// Cause.
        source: io::Error,
    },
}

impl StartError {
    /// For `map_err`: listener `what` could not be bound on `addr`.
    pub fn bind(what: &'static str, addr: SocketAddr) -> impl FnOnce(io::Error) -> StartError {
        move |source| StartError::Bind { what, addr, source }
    }

    /// For `map_err`: thread `what` could not be started.
    pub fn thread(what: &'static str) -> impl FnOnce(io::Error) -> StartError {
        move |source| StartError::Thread { what, source }
    }
}
