//! Sans-IO sessions for tern (in progress).

pub mod clip;
