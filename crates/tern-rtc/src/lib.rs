//! Sans-IO sessions for tern (in progress).

#![forbid(unsafe_code)]

pub mod clip;
