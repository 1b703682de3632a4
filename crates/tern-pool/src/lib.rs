//! Buffer pools, session slabs and memory accounting for tern (in progress).
