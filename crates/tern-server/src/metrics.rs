//! What the server reports in `/metrics`, and the one place its Prometheus text is written.
//!
//! [`Exposition`] writes the text exposition format (version 0.0.4): a family's `# HELP`
//! and `# TYPE` lines, then its samples, label values escaped. Every part reports through it
//! and no other code writes that text.
//!
//! The parts are held by the server rather than the process: a part that counts registers
//! itself here when it starts ([`Exposed::add`]), and `http/metrics.rs` writes every
//! registered part's families after its own. Two servers in one process (tests) keep their
//! own counts.
//!
//! A leaf: it imports nothing of the crate, so any part can register, whatever its floor.

use std::fmt::{self, Display, Write as _};
use std::sync::{Arc, Mutex, PoisonError};

/// A part's Prometheus families.
pub trait Expose: Send + Sync {
    /// Writes the part's metric families to `out`.
    fn write_metrics(&self, out: &mut Exposition);
}

/// The parts registered with one server.
#[derive(Default)]
pub struct Exposed {
    parts: Mutex<Vec<Arc<dyn Expose>>>,
}

impl fmt::Debug for Exposed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.parts.lock().map_or(0, |p| p.len());
        f.debug_struct("Exposed").field("parts", &n).finish()
    }
}

impl Exposed {
    /// Registers `part`: its families are written with the server's from now on.
    pub fn add(&self, part: Arc<dyn Expose>) {
        self.parts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(part);
    }

    /// Every registered part's families, in registration order.
    pub fn write_metrics(&self, out: &mut Exposition) {
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

/// A family's type, as `# TYPE` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (names end in `_total`).
    Counter,
    /// Goes up and down.
    Gauge,
    /// Cumulative `_bucket{le}` samples, then `_sum` and `_count` ([`Family::series`]).
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A sample's value: a number as Prometheus reads it.
pub trait Value: Display {}

impl Value for u8 {}
impl Value for u32 {}
impl Value for u64 {}
impl Value for usize {}
impl Value for i64 {}
impl Value for f64 {}

/// A duration kept in milliseconds, written in seconds with three decimals (`1.234`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Millis(pub u64);

impl Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}

impl Value for Millis {}

/// A sample's labels: names and values (any `Display`, escaped as they are written).
pub type Labels<'a> = [(&'a str, &'a dyn Display)];

/// Prometheus text being written, family after family.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    /// An empty text with room for `bytes`.
    pub fn with_capacity(bytes: usize) -> Self {
        Exposition {
            out: String::with_capacity(bytes),
        }
    }

    /// Starts the family `name`: writes its `# HELP` and `# TYPE` lines. Its samples follow
    /// through the returned [`Family`]; a family with none is valid.
    pub fn family<'a>(&'a mut self, name: &'a str, help: &str, kind: Kind) -> Family<'a> {
        debug_assert!(is_name(name), "metric name {name:?}");
        let o = &mut self.out;
        o.push_str("# HELP ");
        o.push_str(name);
        o.push(' ');
        // Writing into a String cannot fail.
        let _ = Escape::help(o).write_str(help);
        o.push_str("\n# TYPE ");
        o.push_str(name);
        o.push(' ');
        o.push_str(kind.as_str());
        o.push('\n');
        Family { out: o, name }
    }

    /// A counter family with its one unlabelled sample.
    pub fn counter(&mut self, name: &str, help: &str, v: impl Value) {
        self.family(name, help, Kind::Counter).value(v);
    }

    /// A gauge family with its one unlabelled sample.
    pub fn gauge(&mut self, name: &str, help: &str, v: impl Value) {
        self.family(name, help, Kind::Gauge).value(v);
    }

    /// The text so far.
    pub fn as_str(&self) -> &str {
        &self.out
    }

    /// The text, to serve.
    pub fn into_string(self) -> String {
        self.out
    }
}

/// The family being written: its samples.
#[derive(Debug)]
pub struct Family<'a> {
    out: &'a mut String,
    name: &'a str,
}

impl Family<'_> {
    /// The family's one sample, unlabelled: `name value`.
    pub fn value(mut self, v: impl Value) {
        self.series("", &[], v);
    }

    /// One sample with `labels`: `name{a="x",b="y"} value`.
    pub fn sample(&mut self, labels: &Labels<'_>, v: impl Value) {
        self.series("", labels, v);
    }

    /// One sample of the series `name` + `suffix` (a histogram's `_bucket`, `_sum` and
    /// `_count`).
    pub fn series(&mut self, suffix: &str, labels: &Labels<'_>, v: impl Value) {
        let o = &mut *self.out;
        o.push_str(self.name);
        o.push_str(suffix);
        if !labels.is_empty() {
            o.push('{');
            for (i, (name, value)) in labels.iter().enumerate() {
                debug_assert!(is_name(name) && !name.contains(':'), "label {name:?}");
                if i > 0 {
                    o.push(',');
                }
                o.push_str(name);
                o.push_str("=\"");
                let _ = write!(Escape::label(o), "{value}");
                o.push('"');
            }
            o.push('}');
        }
        let _ = writeln!(o, " {v}");
    }
}

/// Writes through to `out`, escaping as the text format asks: backslash and newline in help
/// text, and the double quote too in label values.
struct Escape<'a> {
    out: &'a mut String,
    quote: bool,
}

impl<'a> Escape<'a> {
    fn help(out: &'a mut String) -> Self {
        Escape { out, quote: false }
    }

    fn label(out: &'a mut String) -> Self {
        Escape { out, quote: true }
    }
}

impl fmt::Write for Escape<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for c in s.chars() {
            match c {
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                '"' if self.quote => self.out.push_str("\\\""),
                c => self.out.push(c),
            }
        }
        Ok(())
    }
}

/// A valid metric name: `[a-zA-Z_:][a-zA-Z0-9_:]*` (label names: the same without `:`).
fn is_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':')
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(u64);

    impl Expose for Fixed {
        fn write_metrics(&self, out: &mut Exposition) {
            out.counter("tern_test_total", "A test counter.", self.0);
        }
    }

    #[test]
    fn every_registered_part_writes_its_families_in_order() {
        let e = Exposed::default();
        let mut out = Exposition::default();
        e.write_metrics(&mut out);
        assert_eq!(out.as_str(), "");
        e.add(Arc::new(Fixed(3)));
        e.add(Arc::new(Fixed(4)));
        e.write_metrics(&mut out);
        assert_eq!(
            out.into_string(),
            "# HELP tern_test_total A test counter.\n# TYPE tern_test_total counter\ntern_test_total 3\n\
             # HELP tern_test_total A test counter.\n# TYPE tern_test_total counter\ntern_test_total 4\n"
        );
    }

    #[test]
    fn an_unlabelled_family() {
        let mut out = Exposition::default();
        out.gauge("tern_viewers", "Viewer sessions held.", 7u64);
        out.family("tern_expiry_seconds", "Seconds left.", Kind::Gauge)
            .value(-5i64);
        assert_eq!(
            out.as_str(),
            "# HELP tern_viewers Viewer sessions held.\n# TYPE tern_viewers gauge\ntern_viewers 7\n\
             # HELP tern_expiry_seconds Seconds left.\n# TYPE tern_expiry_seconds gauge\ntern_expiry_seconds -5\n"
        );
    }

    #[test]
    fn one_family_with_labelled_samples() {
        let mut out = Exposition::default();
        let mut f = out.family("tern_errors_total", "Errors by reason.", Kind::Counter);
        f.sample(&[("stream", &"live/a"), ("reason", &"auth failed")], 2u64);
        f.sample(&[("stream", &"live/b"), ("reason", &"unreachable")], 0u64);
        let mut h = out.family("tern_wait_seconds", "Waits.", Kind::Histogram);
        for (le, n) in [(0.005, 1u64), (1.0, 2)] {
            h.series("_bucket", &[("le", &le)], n);
        }
        h.series("_bucket", &[("le", &"+Inf")], 3u64);
        h.series("_sum", &[], 1.5);
        h.series("_count", &[], 3u64);
        assert_eq!(
            out.as_str(),
            "# HELP tern_errors_total Errors by reason.\n# TYPE tern_errors_total counter\n\
             tern_errors_total{stream=\"live/a\",reason=\"auth failed\"} 2\n\
             tern_errors_total{stream=\"live/b\",reason=\"unreachable\"} 0\n\
             # HELP tern_wait_seconds Waits.\n# TYPE tern_wait_seconds histogram\n\
             tern_wait_seconds_bucket{le=\"0.005\"} 1\n\
             tern_wait_seconds_bucket{le=\"1\"} 2\n\
             tern_wait_seconds_bucket{le=\"+Inf\"} 3\n\
             tern_wait_seconds_sum 1.5\n\
             tern_wait_seconds_count 3\n"
        );
    }

    #[test]
    fn label_values_and_help_are_escaped() {
        let mut out = Exposition::default();
        out.family("tern_x", "A \\ help\nline with \"quotes\".", Kind::Gauge)
            .sample(&[("node", &"a\\b\"c\nd")], 1u8);
        assert_eq!(
            out.as_str(),
            "# HELP tern_x A \\\\ help\\nline with \"quotes\".\n# TYPE tern_x gauge\n\
             tern_x{node=\"a\\\\b\\\"c\\nd\"} 1\n"
        );
    }

    #[test]
    fn millis_are_seconds_with_three_decimals() {
        for (ms, text) in [
            (0, "0.000"),
            (5, "0.005"),
            (1234, "1.234"),
            (60_000, "60.000"),
        ] {
            assert_eq!(Millis(ms).to_string(), text);
            // As the old `{:.3}` of the seconds wrote them.
            assert_eq!(format!("{:.3}", ms as f64 / 1000.0), text);
        }
    }
}
