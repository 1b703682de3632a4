//! tern server IO driver (in progress).

#![forbid(unsafe_code)]
