//! Allocate+free pairs, pool against mimalloc installed as the global allocator:
//! `cargo bench -p tern-pool --bench pair_mimalloc`.

mod common;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    common::run("mimalloc");
}
