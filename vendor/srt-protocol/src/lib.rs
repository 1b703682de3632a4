// tern (PATCHES.md, 3): the warnings this 2023 release gives under rustc 1.95.
#![allow(dead_code, mismatched_lifetime_syntaxes)]

pub mod access;
pub mod connection;
pub mod listener;
pub mod options;
pub mod packet;
pub mod protocol;
pub mod settings;
pub mod statistics;
