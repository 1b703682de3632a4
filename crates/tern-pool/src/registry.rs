//! The memory report: every named pool, slab and counter registers here, and
//! [`format_dd`] prints them one line each, like pjsua's `dd`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use crate::sys::AllocStats;

/// Something that can describe its memory in one report line.
pub(crate) trait MemorySource: Send + Sync {
    fn memory_report(&self) -> PoolReport;
}

/// One line of the memory report: an allocation class with its used, allocated and peak bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolReport {
    /// The class's name (`"packet_buffers"`, `"viewer_sessions"`, ...).
    pub name: &'static str,
    /// Bytes in live objects (buffers handed out, occupied slots, counted items).
    pub used_bytes: usize,
    /// Bytes held for this class, used or not (free buffers and empty slots included).
    pub allocated_bytes: usize,
    /// `used_bytes` as a percentage of `allocated_bytes` (0 when nothing is allocated).
    pub utilization_pct: f64,
    /// Highest `used_bytes` seen.
    pub peak_bytes: usize,
    /// Live objects (buffers handed out, occupied slots, counted items).
    pub items_in_use: usize,
    /// Highest `items_in_use` seen.
    pub items_peak: usize,
}

impl PoolReport {
    /// A report line; `utilization_pct` is derived from the byte counts.
    pub fn new(
        name: &'static str,
        used_bytes: usize,
        allocated_bytes: usize,
        peak_bytes: usize,
        items_in_use: usize,
        items_peak: usize,
    ) -> Self {
        Self {
            name,
            used_bytes,
            allocated_bytes,
            utilization_pct: utilization(used_bytes, allocated_bytes),
            peak_bytes,
            items_in_use,
            items_peak,
        }
    }
}

fn utilization(used: usize, allocated: usize) -> f64 {
    if allocated == 0 {
        0.0
    } else {
        used as f64 * 100.0 / allocated as f64
    }
}

/// A set of memory sources that can be listed in one report.
///
/// Pools, slabs and counters register when created (`new` uses [`MemoryRegistry::global`],
/// `new_in` a registry of the caller's choice, which tests use to stay isolated). The registry
/// holds weak references only: a source disappears from the report when it is dropped.
/// Registration and [`reports`](Self::reports) take a lock; nothing on a packet path does.
#[derive(Default)]
pub struct MemoryRegistry {
    sources: Mutex<Vec<Weak<dyn MemorySource>>>,
    /// The live counters by name, so that every owner of one class shares one line.
    counters: Mutex<Vec<Weak<CounterInner>>>,
}

impl std::fmt::Debug for MemoryRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegistry")
            .field("reports", &self.reports())
            .finish()
    }
}

static GLOBAL: MemoryRegistry = MemoryRegistry::new();

impl MemoryRegistry {
    /// An empty registry.
    pub const fn new() -> Self {
        Self {
            sources: Mutex::new(Vec::new()),
            counters: Mutex::new(Vec::new()),
        }
    }

    /// The process-wide default registry, used by `BufferPool::new`, `Slab::new` and
    /// `PoolCounter::new`; what `GET /v1/memory` and `tern mem` print.
    pub fn global() -> &'static MemoryRegistry {
        &GLOBAL
    }

    pub(crate) fn register(&self, source: &Arc<dyn MemorySource>) {
        let mut sources = self.sources.lock().unwrap_or_else(PoisonError::into_inner);
        sources.retain(|s| s.strong_count() > 0);
        sources.push(Arc::downgrade(source));
    }

    /// A [`PoolCounter`] named `name` for items of nominally `item_size` bytes: the live
    /// counter of that name in this registry if there is one (so the owners of one class,
    /// such as the viewer tables of several media workers, add up on one line of the report,
    /// with one peak), else a new one registered here. A shared counter keeps the item size
    /// it was first created with.
    pub fn counter(&self, name: &'static str, item_size: usize) -> PoolCounter {
        let mut counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        counters.retain(|c| c.strong_count() > 0);
        if let Some(inner) = counters
            .iter()
            .filter_map(Weak::upgrade)
            .find(|c| c.name == name)
        {
            return PoolCounter { inner };
        }
        let counter = PoolCounter {
            inner: Arc::new(CounterInner {
                name,
                item_size,
                items: AtomicUsize::new(0),
                items_peak: AtomicUsize::new(0),
                used: AtomicUsize::new(0),
                used_peak: AtomicUsize::new(0),
                reserved: AtomicUsize::new(0),
            }),
        };
        counters.push(Arc::downgrade(&counter.inner));
        let source: Arc<dyn MemorySource> = counter.inner.clone();
        self.register(&source);
        counter
    }

    /// One line per live registered source, in registration order.
    pub fn reports(&self) -> Vec<PoolReport> {
        let live: Vec<Arc<dyn MemorySource>> = {
            let mut sources = self.sources.lock().unwrap_or_else(PoisonError::into_inner);
            sources.retain(|s| s.strong_count() > 0);
            sources.iter().filter_map(Weak::upgrade).collect()
        };
        // Reports are built outside the lock: a source may take its own locks.
        live.iter().map(|s| s.memory_report()).collect()
    }
}

/// Format a memory report in the style of pjsua's `dd`: one line per pool (name, used bytes,
/// allocated bytes, utilization, peak bytes, items in use and their peak), a total line, and
/// the allocator's process-wide line (live and peak heap bytes, plus memory the pools mapped
/// outside the heap).
pub fn format_dd(reports: &[PoolReport], alloc: &AllocStats) -> String {
    let width = reports
        .iter()
        .map(|r| r.name.len())
        .chain([5])
        .max()
        .unwrap_or(5);
    let mut out = String::new();
    let rule = "-".repeat(width + 69);
    // `write!` into a String cannot fail.
    let _ = writeln!(
        out,
        "{:<width$} {:>13} {:>13} {:>7} {:>13} {:>9} {:>9}",
        "pool", "used", "allocated", "util %", "peak", "items", "peak"
    );
    let _ = writeln!(out, "{rule}");
    let (mut used, mut allocated, mut peak, mut items, mut items_peak) = (0, 0, 0, 0, 0);
    for r in reports {
        let _ = writeln!(
            out,
            "{:<width$} {:>13} {:>13} {:>7.1} {:>13} {:>9} {:>9}",
            r.name,
            group(r.used_bytes),
            group(r.allocated_bytes),
            r.utilization_pct,
            group(r.peak_bytes),
            group(r.items_in_use),
            group(r.items_peak),
        );
        used += r.used_bytes;
        allocated += r.allocated_bytes;
        peak += r.peak_bytes;
        items += r.items_in_use;
        items_peak += r.items_peak;
    }
    let _ = writeln!(out, "{rule}");
    let _ = writeln!(
        out,
        "{:<width$} {:>13} {:>13} {:>7.1} {:>13} {:>9} {:>9}",
        "total",
        group(used),
        group(allocated),
        utilization(used, allocated),
        group(peak),
        group(items),
        group(items_peak),
    );
    let _ = writeln!(
        out,
        "allocator: live {} B, peak {} B, {} allocations, {} frees; pools mapped {} B outside the heap",
        group(alloc.live_bytes),
        group(alloc.peak_bytes),
        group_u64(alloc.allocations),
        group_u64(alloc.frees),
        group(alloc.mapped_bytes),
    );
    out
}

/// `1234567` as `1,234,567`, as pjsua prints byte counts.
fn group(n: usize) -> String {
    group_u64(n as u64)
}

fn group_u64(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

struct CounterInner {
    name: &'static str,
    item_size: usize,
    items: AtomicUsize,
    items_peak: AtomicUsize,
    used: AtomicUsize,
    used_peak: AtomicUsize,
    reserved: AtomicUsize,
}

impl MemorySource for CounterInner {
    fn memory_report(&self) -> PoolReport {
        let used = self.used.load(Relaxed);
        PoolReport::new(
            self.name,
            used,
            used.max(self.reserved.load(Relaxed)),
            self.used_peak.load(Relaxed),
            self.items.load(Relaxed),
            self.items_peak.load(Relaxed),
        )
    }
}

/// A named accounting handle for an allocation class that is not a packet buffer (viewer
/// sessions, handshakes, stream rings, snapshots): the owner reports what it allocates and
/// frees, and the class gets its own line in the memory report.
///
/// Two numbers are kept:
/// - *used*: items and their bytes, changed by [`add`](Self::add) / [`sub`](Self::sub);
/// - *reserved*: capacity held whether used or not (a slab's slots, a ring's array), changed by
///   [`reserve`](Self::reserve) / [`unreserve`](Self::unreserve).
///
/// The report's allocated bytes are `max(reserved, used)`: a counter that reserves nothing
/// reports allocated == used. Updates are a few relaxed atomic operations, no lock. Cloning is
/// cheap and clones share the counts (e.g. one `"viewer_sessions"` line for the slabs of all
/// workers).
#[derive(Clone)]
pub struct PoolCounter {
    inner: Arc<CounterInner>,
}

impl std::fmt::Debug for PoolCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolCounter")
            .field("name", &self.inner.name)
            .field("report", &self.report())
            .finish()
    }
}

impl PoolCounter {
    /// A counter registered in the [global registry](MemoryRegistry::global).
    pub fn new(name: &'static str, item_size: usize) -> Self {
        MemoryRegistry::global().counter(name, item_size)
    }

    /// The counter's name.
    pub fn name(&self) -> &'static str {
        self.inner.name
    }

    /// The nominal size of one item, as given at creation.
    pub fn item_size(&self) -> usize {
        self.inner.item_size
    }

    /// `n_items` items holding `bytes` bytes in total came alive.
    pub fn add(&self, n_items: usize, bytes: usize) {
        let c = &*self.inner;
        let items = c.items.fetch_add(n_items, Relaxed).saturating_add(n_items);
        if items > c.items_peak.load(Relaxed) {
            c.items_peak.fetch_max(items, Relaxed);
        }
        let used = c.used.fetch_add(bytes, Relaxed).saturating_add(bytes);
        if used > c.used_peak.load(Relaxed) {
            c.used_peak.fetch_max(used, Relaxed);
        }
    }

    /// `n_items` items holding `bytes` bytes in total were freed. Saturates at zero rather than
    /// wrapping if the owner over-subtracts.
    pub fn sub(&self, n_items: usize, bytes: usize) {
        let c = &*self.inner;
        saturating_sub(&c.items, n_items);
        saturating_sub(&c.used, bytes);
    }

    /// `add(n, n * item_size)`.
    pub fn add_items(&self, n: usize) {
        self.add(n, n.saturating_mul(self.inner.item_size));
    }

    /// `sub(n, n * item_size)`.
    pub fn sub_items(&self, n: usize) {
        self.sub(n, n.saturating_mul(self.inner.item_size));
    }

    /// `bytes` more capacity is held for this class, used or not.
    pub fn reserve(&self, bytes: usize) {
        self.inner.reserved.fetch_add(bytes, Relaxed);
    }

    /// `bytes` of reserved capacity were freed (saturating at zero).
    pub fn unreserve(&self, bytes: usize) {
        saturating_sub(&self.inner.reserved, bytes);
    }

    /// This counter's line of the memory report.
    pub fn report(&self) -> PoolReport {
        self.inner.memory_report()
    }
}

fn saturating_sub(a: &AtomicUsize, n: usize) {
    // A compare-exchange loop rather than `fetch_update`, which newer toolchains deprecate
    // under another name that older ones lack: this builds warning-free on both.
    let mut v = a.load(Relaxed);
    while let Err(now) = a.compare_exchange_weak(v, v.saturating_sub(n), Relaxed, Relaxed) {
        v = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_tracks_used_allocated_and_peak() {
        let reg = MemoryRegistry::new();
        let c = reg.counter("handshakes", 100);
        c.add_items(3);
        c.add(1, 1000);
        c.sub_items(2);
        let r = c.report();
        assert_eq!(r.used_bytes, 1100);
        assert_eq!(r.allocated_bytes, 1100);
        assert_eq!(r.peak_bytes, 1300);
        assert_eq!((r.items_in_use, r.items_peak), (2, 4));
        assert!((r.utilization_pct - 100.0).abs() < 1e-9);
        c.reserve(4400);
        let r = c.report();
        assert_eq!(r.allocated_bytes, 4400);
        assert!((r.utilization_pct - 25.0).abs() < 1e-9);
        c.sub(10, 1_000_000);
        assert_eq!(c.report().used_bytes, 0);
        assert_eq!(c.report().items_in_use, 0);
    }

    #[test]
    fn registry_forgets_dropped_sources() {
        let reg = MemoryRegistry::new();
        let a = reg.counter("a", 1);
        let b = reg.counter("b", 1);
        let a2 = a.clone();
        assert_eq!(reg.reports().len(), 2);
        drop(a);
        assert_eq!(reg.reports().len(), 2, "a clone keeps the line");
        drop((a2, b));
        assert!(reg.reports().is_empty());
    }

    #[test]
    fn owners_of_one_class_share_its_counter_and_line() {
        let reg = MemoryRegistry::new();
        // Two workers, each with its own handle on the class.
        let w0 = reg.counter("viewer_sessions", 100);
        let w1 = reg.counter("viewer_sessions", 100);
        w0.add_items(3);
        w1.add_items(2);
        w0.sub_items(3);
        let reports = reg.reports();
        assert_eq!(reports.len(), 1, "one line for the class");
        let r = &reports[0];
        assert_eq!((r.items_in_use, r.items_peak), (2, 5));
        assert_eq!(r.used_bytes, 200);
        drop((w0, w1));
        assert!(reg.reports().is_empty());
        // Once every owner is gone the name starts afresh.
        assert_eq!(reg.counter("viewer_sessions", 100).report().items_peak, 0);
    }

    #[test]
    fn dd_table_lists_every_pool_and_totals() {
        let reports = [
            PoolReport::new("packet_buffers", 1500, 6000, 3000, 1, 2),
            PoolReport::new("viewer_sessions", 2048, 4096, 4096, 2, 4),
        ];
        let alloc = AllocStats {
            live_bytes: 1_234_567,
            peak_bytes: 2_000_000,
            allocations: 10,
            frees: 4,
            mapped_bytes: 0,
        };
        let out = format_dd(&reports, &alloc);
        assert!(out.contains("packet_buffers"), "{out}");
        assert!(out.contains("viewer_sessions"), "{out}");
        let total = out
            .lines()
            .find(|l| l.starts_with("total"))
            .expect("a total line");
        assert!(
            total.contains("3,548") && total.contains("10,096"),
            "{total}"
        );
        assert!(out.contains("live 1,234,567 B, peak 2,000,000 B"), "{out}");
        assert!(out.contains(" 25.0 "), "{out}");
    }

    #[test]
    fn grouping() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1,000");
        assert_eq!(group(123_456_789), "123,456,789");
    }
}
