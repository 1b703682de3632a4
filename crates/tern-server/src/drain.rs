//! Draining a node for an upgrade (`POST /v1/drain`, SIGTERM with `server.shutdown_drain_s`):
//! the node takes no new publishers or viewers, says so on `GET /v1/health` (`503`), leaves
//! the cluster's routing, and lets its open sessions go on until they end or the deadline,
//! then the process exits 0. `{"cancel": true}` takes it back. A leaf: the state and its
//! changes; the surfaces read it ([`Drain::is_draining`]) and `http::Serving` ends the
//! process when [`Drain::done`] says so.

use std::sync::Mutex;
use std::sync::PoisonError;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tracing::info;

/// How often a draining node checks whether its sessions have ended.
const CHECK_EVERY: Duration = Duration::from_millis(250);

/// The node's drain state.
#[derive(Debug)]
pub struct Drain {
    /// The deadline while draining; `None` when not.
    deadline: Mutex<Option<Instant>>,
    /// Bumped at each start and cancel, for waiters.
    changed: watch::Sender<u64>,
}

impl Default for Drain {
    fn default() -> Self {
        Drain {
            deadline: Mutex::new(None),
            changed: watch::Sender::new(0),
        }
    }
}

impl Drain {
    /// Whether the node is draining: new publishers and viewers are refused.
    pub fn is_draining(&self) -> bool {
        self.left().is_some()
    }

    /// Starts draining (or moves the deadline of a drain under way) with `deadline` from
    /// now; `sessions` open now, for the log.
    pub fn start(&self, deadline: Duration, sessions: u64) {
        let at = Instant::now() + deadline;
        let was = self
            .deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(at)
            .is_some();
        info!(
            deadline_s = deadline.as_secs(),
            sessions,
            "{}: no new publishers or viewers; open sessions go on until they end or the deadline, then the process exits",
            if was {
                "drain deadline moved"
            } else {
                "draining"
            }
        );
        self.changed.send_modify(|n| *n += 1);
    }

    /// Stops draining: the node takes sessions again. Whether it was draining.
    pub fn cancel(&self) -> bool {
        let was = self
            .deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .is_some();
        if was {
            info!("drain cancelled: taking new sessions again");
        }
        self.changed.send_modify(|n| *n += 1);
        was
    }

    /// Time left to the deadline, while draining.
    pub fn left(&self) -> Option<Duration> {
        self.deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// Resolves once a drain has run its course: `sessions()` came to 0 or the deadline
    /// passed. A cancelled drain waits for the next one.
    pub async fn done(&self, sessions: impl Fn() -> u64) {
        let mut rx = self.changed.subscribe();
        loop {
            if let Some(left) = self.left() {
                let n = sessions();
                if n == 0 || left.is_zero() {
                    info!(
                        sessions = n,
                        "drain done ({}): stopping",
                        if n == 0 {
                            "no session left"
                        } else {
                            "deadline reached"
                        }
                    );
                    return;
                }
                let _ = tokio::time::timeout(CHECK_EVERY, rx.changed()).await;
            } else if rx.changed().await.is_err() {
                // The sender lives as long as `self`: not reached.
                std::future::pending::<()>().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU64;
    use std::sync::atomic::Ordering;

    /// Real time, short: a drain's checks run every 250 ms.
    #[tokio::test]
    async fn a_drain_ends_when_its_sessions_do_or_at_its_deadline() {
        let ms = Duration::from_millis;
        let d = Arc::new(Drain::default());
        let sessions = Arc::new(AtomicU64::new(2));
        assert!(!d.is_draining() && d.left().is_none());
        let wait = |d: &Arc<Drain>, s: &Arc<AtomicU64>| {
            let (d, s) = (d.clone(), s.clone());
            tokio::spawn(async move { d.done(move || s.load(Ordering::Relaxed)).await })
        };
        // Not draining: not done.
        let waiting = wait(&d, &sessions);
        tokio::time::sleep(ms(600)).await;
        assert!(!waiting.is_finished());
        d.start(Duration::from_secs(60), 2);
        assert!(d.is_draining() && d.left().is_some_and(|l| l > Duration::from_secs(59)));
        tokio::time::sleep(ms(600)).await;
        assert!(!waiting.is_finished(), "two sessions open");
        sessions.store(0, Ordering::Relaxed);
        tokio::time::sleep(ms(600)).await;
        assert!(waiting.is_finished(), "no session left");

        // The deadline ends it with sessions open; a cancel before it does not.
        assert!(d.cancel());
        assert!(!d.is_draining() && d.left().is_none());
        sessions.store(3, Ordering::Relaxed);
        let waiting = wait(&d, &sessions);
        d.start(ms(800), 3);
        tokio::time::sleep(ms(300)).await;
        d.cancel();
        tokio::time::sleep(ms(1200)).await;
        assert!(!waiting.is_finished(), "cancelled before its deadline");
        d.start(ms(800), 3);
        tokio::time::sleep(ms(1400)).await;
        assert!(waiting.is_finished(), "deadline reached");
    }
}
