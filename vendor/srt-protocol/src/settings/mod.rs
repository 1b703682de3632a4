mod accesscontrol;
mod connection;
mod encryption;

pub use accesscontrol::*;
pub use connection::*;
pub use encryption::*;

pub use crate::packet::SocketId;
