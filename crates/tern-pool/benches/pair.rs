//! Allocate+free pairs, pool against glibc's malloc (the system allocator):
//! `cargo bench -p tern-pool --bench pair`. `pair_mimalloc` is the same with mimalloc.

mod common;

fn main() {
    common::run("glibc");
}
