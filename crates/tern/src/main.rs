//! The tern command line.
fn main() {}
