//! What the server's parts report in `/metrics`, held by the server rather than the process:
//! a part that counts registers its counters here when it starts ([`Exposed::add`]), and
//! `http/metrics.rs` writes every registered part's lines after its own. Two servers in one
//! process (tests) keep their own counts.
//!
//! A leaf: it imports nothing of the crate, so any part can register, whatever its floor.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

/// A part's Prometheus lines.
pub trait Expose: Send + Sync {
    /// Appends the part's metric families, in the text exposition format.
    fn write_metrics(&self, out: &mut String);
}

/// The parts registered with one server.
#[derive(Default)]
pub struct Exposed {
    parts: Mutex<Vec<Arc<dyn Expose>>>,
}

impl std::fmt::Debug for Exposed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.parts.lock().map_or(0, |p| p.len());
        f.debug_struct("Exposed").field("parts", &n).finish()
    }
}

impl Exposed {
    /// Registers `part`: its lines are written with the server's from now on.
    pub fn add(&self, part: Arc<dyn Expose>) {
        self.parts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(part);
    }

    /// Every registered part's lines, in registration order.
    pub fn write_metrics(&self, out: &mut String) {
        let parts = self
            .parts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for p in parts {
            p.write_metrics(out);
        }
    }
}

/// Appends one metric family with a single unlabelled sample: its `# HELP` and `# TYPE`
/// lines, then `name value`.
pub fn family(out: &mut String, name: &str, help: &str, kind: &str, value: u64) {
    // Writing into a String cannot fail.
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(u64);

    impl Expose for Fixed {
        fn write_metrics(&self, out: &mut String) {
            family(out, "tern_test_total", "A test counter.", "counter", self.0);
        }
    }

    #[test]
    fn every_registered_part_writes_its_families_in_order() {
        let e = Exposed::default();
        let mut out = String::new();
        e.write_metrics(&mut out);
        assert_eq!(out, "");
        e.add(Arc::new(Fixed(3)));
        e.add(Arc::new(Fixed(4)));
        e.write_metrics(&mut out);
        assert_eq!(
            out,
            "# HELP tern_test_total A test counter.\n# TYPE tern_test_total counter\ntern_test_total 3\n\
             # HELP tern_test_total A test counter.\n# TYPE tern_test_total counter\ntern_test_total 4\n"
        );
    }
}
