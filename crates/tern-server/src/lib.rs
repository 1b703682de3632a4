//! tern server IO driver (in progress).
