//! The stream directory: `app/stream` → the engine's stream slot.
//!
//! Declared streams (the demo clip, each app's `streams`) hold their slots for the life of
//! the process. The engine also has `limits.dynamic_streams` spare slots: a publisher on an
//! undeclared name of a dynamic app claims one, and the stream exists while it has a
//! publisher and for the app's `idle_grace_s` after (so a reconnecting encoder keeps its
//! viewers). [`Directory::expired`] hands back the streams past their grace; the caller
//! tells the engine (which ends their viewers and frees their rings) and then
//! [`Directory::release`]s the slot, so a slot is never named twice in the engine's queues.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often [`Directory::expired`] is run (the server's housekeeping tick).
pub const SWEEP: Duration = Duration::from_secs(1);

/// A stream known to the HTTP side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamInfo {
    /// Index in the engine's streams.
    pub index: usize,
}

#[derive(Debug)]
struct Entry {
    index: usize,
    /// Made by a publisher (removed after its grace), not declared.
    dynamic: bool,
    /// Last time it had a publisher (or was made).
    active: Instant,
    /// When a sweep first found it without a publisher since then.
    idle_seen: Option<Instant>,
}

#[derive(Debug, Default)]
struct Inner {
    by_key: HashMap<String, Entry>,
    /// Spare slots, the lowest index last (taken first).
    free: Vec<usize>,
}

/// Why a stream could not be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    /// Every spare slot holds a stream.
    #[error("too many streams: every one of the server's dynamic stream slots is in use")]
    Full,
}

/// The directory. Locked briefly on each signalling request and once a second by the sweep.
#[derive(Debug, Default)]
pub struct Directory {
    inner: Mutex<Inner>,
}

impl Directory {
    /// The declared streams and the spare slots `spare` (engine indices).
    pub fn new(declared: impl IntoIterator<Item = (String, usize)>, spare: Vec<usize>) -> Self {
        let now = Instant::now();
        let by_key = declared
            .into_iter()
            .map(|(k, index)| {
                (
                    k,
                    Entry {
                        index,
                        dynamic: false,
                        active: now,
                        idle_seen: None,
                    },
                )
            })
            .collect();
        let mut free = spare;
        free.sort_unstable_by(|a, b| b.cmp(a));
        Directory {
            inner: Mutex::new(Inner { by_key, free }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The stream `key`, if it exists.
    pub fn get(&self, key: &str) -> Option<StreamInfo> {
        self.lock()
            .by_key
            .get(key)
            .map(|e| StreamInfo { index: e.index })
    }

    /// Whether `key` exists.
    pub fn contains(&self, key: &str) -> bool {
        self.lock().by_key.contains_key(key)
    }

    /// Every stream: (key, index), sorted by key.
    pub fn list(&self) -> Vec<(String, usize)> {
        let mut v: Vec<(String, usize)> = self
            .lock()
            .by_key
            .iter()
            .map(|(k, e)| (k.clone(), e.index))
            .collect();
        v.sort();
        v
    }

    /// Number of streams.
    pub fn len(&self) -> usize {
        self.lock().by_key.len()
    }

    /// Whether there is no stream.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The stream `key`, made in a spare slot if it does not exist: `(info, made)`. A made
    /// stream must be announced to the engine before it is used.
    pub fn claim(&self, key: &str, now: Instant) -> Result<(StreamInfo, bool), ClaimError> {
        self.take(
            key,
            now,
            |e| {
                e.active = now;
                e.idle_seen = None;
            },
            true,
        )
    }

    /// The stream `key` (`known` applied to its entry), or one made in a spare slot
    /// (`dynamic` as given): `(info, made)`.
    fn take(
        &self,
        key: &str,
        now: Instant,
        known: impl FnOnce(&mut Entry),
        dynamic: bool,
    ) -> Result<(StreamInfo, bool), ClaimError> {
        let mut g = self.lock();
        if let Some(e) = g.by_key.get_mut(key) {
            known(e);
            return Ok((StreamInfo { index: e.index }, false));
        }
        let index = g.free.pop().ok_or(ClaimError::Full)?;
        g.by_key.insert(
            key.to_string(),
            Entry {
                index,
                dynamic,
                active: now,
                idle_seen: None,
            },
        );
        Ok((StreamInfo { index }, true))
    }

    /// Declares `key` (a reload added it to an app's `streams` or as a camera's stream): a
    /// publisher-made stream of that name becomes declared; otherwise it is made in a spare
    /// slot. `(info, made)`: a made stream must be announced to the engine.
    pub fn declare(&self, key: &str) -> Result<(StreamInfo, bool), ClaimError> {
        self.take(key, Instant::now(), |e| e.dynamic = false, false)
    }

    /// A reload took `key` out of its app's declared streams: it lives on as a
    /// publisher-made stream would (removed after its app's grace with no publisher).
    pub fn undeclare(&self, key: &str, now: Instant) {
        if let Some(e) = self.lock().by_key.get_mut(key) {
            e.dynamic = true;
            e.active = now;
            e.idle_seen = None;
        }
    }

    /// Removes every stream of app `app` (a reload removed the app) but `except`, or only
    /// `app/stream` when `stream` is given: (key, index) of each. Their slots stay taken
    /// until [`Directory::release`], as with [`Directory::expired`].
    pub fn remove(
        &self,
        app: &str,
        stream: Option<&str>,
        except: Option<&str>,
    ) -> Vec<(String, usize)> {
        let mut g = self.lock();
        let prefix = format!("{app}/");
        let out: Vec<(String, usize)> = g
            .by_key
            .iter()
            .filter(|(k, _)| {
                Some(k.as_str()) != except
                    && k.strip_prefix(&prefix)
                        .is_some_and(|s| stream.is_none_or(|want| s == want))
            })
            .map(|(k, e)| (k.clone(), e.index))
            .collect();
        for (k, _) in &out {
            g.by_key.remove(k);
        }
        out
    }

    /// Publisher-made streams with no publisher (`busy(index)` false) for longer than
    /// `grace(app)`: removed from the directory and returned as (key, index). Their slots
    /// stay taken until [`Directory::release`].
    ///
    /// Idle time counts from the last sweep that saw the stream busy, or, when the sweeps
    /// stopped for a while (a frozen process), from one [`SWEEP`] before the first sweep
    /// that found it idle.
    pub fn expired(
        &self,
        now: Instant,
        grace: impl Fn(&str) -> Duration,
        busy: impl Fn(usize) -> bool,
    ) -> Vec<(String, usize)> {
        let mut g = self.lock();
        let mut out = Vec::new();
        for (k, e) in g.by_key.iter_mut() {
            if !e.dynamic {
                continue;
            }
            if busy(e.index) {
                e.active = now;
                e.idle_seen = None;
                continue;
            }
            // Idle from the last sweep that saw it busy, unless that was long before the
            // sweep that first found it idle (the process did not run meanwhile: stopped,
            // suspended): then from one sweep before that one, so that time the node was
            // frozen does not count against the grace.
            let seen = *e.idle_seen.get_or_insert(now);
            let from = e.active.max(seen.checked_sub(SWEEP).unwrap_or(seen));
            let app = k.split('/').next().unwrap_or("");
            if now.duration_since(from) >= grace(app) {
                out.push((k.clone(), e.index));
            }
        }
        for (k, _) in &out {
            g.by_key.remove(k);
        }
        if !out.is_empty() {
            tern_pool::shrink_map(&mut g.by_key);
        }
        out
    }

    /// Gives back a slot returned by [`Directory::expired`], once the engine has been told.
    pub fn release(&self, index: usize) {
        let mut g = self.lock();
        g.free.push(index);
        // Lowest index taken first keeps the streams that are used together close.
        g.free.sort_unstable_by(|a, b| b.cmp(a));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reload_declares_undeclares_and_removes_streams() {
        let d = Directory::new([("a/x".to_string(), 0)], vec![1, 2]);
        let t0 = Instant::now();
        let (made, new) = d.declare("b/y").expect("a spare slot");
        assert!(new && made.index == 1);
        // A publisher-made stream that a reload declares keeps its slot and stays.
        let (c, _) = d.claim("a/z", t0).expect("slot");
        assert_eq!(d.declare("a/z").expect("known"), (c, false));
        let later = t0 + Duration::from_secs(60);
        assert!(
            d.expired(later, |_| Duration::from_secs(1), |_| false)
                .is_empty()
        );
        // Undeclared, it goes after its grace.
        d.undeclare("a/z", t0);
        assert_eq!(
            d.expired(later, |_| Duration::from_secs(1), |_| false),
            vec![("a/z".to_string(), c.index)]
        );
        // Removing an app takes its streams and only its streams.
        assert!(d.remove("a", None, Some("a/x")).is_empty());
        assert_eq!(d.remove("a", None, None), vec![("a/x".to_string(), 0)]);
        assert!(d.contains("b/y"));
        assert!(d.remove("b", Some("q"), None).is_empty());
        assert_eq!(d.remove("b", Some("y"), None).len(), 1);
        assert!(d.is_empty());
        // Every slot can be declared again once released.
        d.release(0);
        d.release(1);
        d.release(c.index);
        for k in ["c/1", "c/2", "c/3"] {
            d.declare(k).expect("released slots");
        }
        assert_eq!(d.declare("c/4"), Err(ClaimError::Full));
    }

    #[test]
    fn claims_reuse_and_expire_after_the_grace() {
        let d = Directory::new([("live/demo".to_string(), 0)], vec![1, 2]);
        let t0 = Instant::now();
        assert_eq!(
            d.claim("live/demo", t0),
            Ok((StreamInfo { index: 0 }, false))
        );
        assert_eq!(d.claim("live/a", t0), Ok((StreamInfo { index: 1 }, true)));
        assert_eq!(d.claim("live/a", t0), Ok((StreamInfo { index: 1 }, false)));
        assert_eq!(d.claim("live/b", t0), Ok((StreamInfo { index: 2 }, true)));
        assert_eq!(d.claim("live/c", t0), Err(ClaimError::Full));
        let grace = |_: &str| Duration::from_secs(10);
        // A publisher keeps a stream; declared streams never expire.
        assert!(
            d.expired(t0 + Duration::from_secs(20), grace, |_| true)
                .is_empty()
        );
        let t1 = t0 + Duration::from_secs(20);
        // Swept each second: live/a (no publisher from t1 on) goes at t1 + 10 s.
        for s in 1..10 {
            assert!(
                d.expired(t1 + Duration::from_secs(s), grace, |i| i == 2)
                    .is_empty()
            );
        }
        let gone = d.expired(t1 + Duration::from_secs(10), grace, |i| i == 2);
        assert_eq!(gone, vec![("live/a".to_string(), 1)]);
        assert!(!d.contains("live/a") && d.contains("live/b") && d.contains("live/demo"));
        // The slot is not reused before it is released.
        assert_eq!(d.claim("live/c", t1), Err(ClaimError::Full));
        d.release(1);
        assert_eq!(d.claim("live/c", t1), Ok((StreamInfo { index: 1 }, true)));
        assert_eq!(
            d.list(),
            vec![
                ("live/b".to_string(), 2),
                ("live/c".to_string(), 1),
                ("live/demo".to_string(), 0)
            ]
        );
        // The sweeps stop for 30 s (the process was frozen) right after live/b's publisher
        // left (and live/c was made): the frozen time does not count against their grace.
        let t2 = t1 + Duration::from_secs(40);
        for s in 0..9 {
            assert!(
                d.expired(t2 + Duration::from_secs(s), grace, |_| false)
                    .is_empty(),
                "{s} s after the freeze"
            );
        }
        let mut gone = d.expired(t2 + Duration::from_secs(9), grace, |_| false);
        gone.sort();
        assert_eq!(
            gone,
            vec![("live/b".to_string(), 2), ("live/c".to_string(), 1)]
        );
    }
}
