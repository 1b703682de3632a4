//! What follows a grant: an admitted session's lifetime (the engine ends it when admission
//! said so) and its close notification (the webhook hears of its end), and the sweep that
//! removes publisher-made streams once their app's grace has passed with no publisher.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::admission::{Ask, SessionKey};
use crate::media::{Command, PublisherId, ViewerId};
use crate::session::shared::Core;

/// An admitted session now exists as `key`: its end will be told to the webhook, and with
/// a `lifetime` a viewer is ended by the engine then (with DTLS close_notify).
pub(super) fn admitted(core: &Core, key: SessionKey, ask: Ask, lifetime: Option<Duration>) {
    core.admission.admitted(key, ask);
    let (SessionKey::Viewer(raw), Some(after)) = (key, lifetime) else {
        return;
    };
    end_after(core, after, Command::RemoveViewer(ViewerId::from_raw(raw)));
}

/// As [`admitted`], for a publisher (its id is needed to end it).
pub(super) fn admitted_publisher(
    core: &Core,
    id: PublisherId,
    ask: Ask,
    lifetime: Option<Duration>,
) {
    core.admission
        .admitted(SessionKey::Publisher(id.serial), ask);
    if let Some(after) = lifetime {
        end_after(core, after, Command::RemovePublisher(id));
    }
}

/// Sends `cmd` to the engine `after` from now, on the runtime.
fn end_after(core: &Core, after: Duration, cmd: Command) {
    let Some(rt) = core.runtime() else {
        return;
    };
    let engine = core.engine.clone();
    rt.spawn(async move {
        tokio::time::sleep(after).await;
        let _ = engine.send(cmd);
    });
}

/// Removes publisher-made streams past their app's grace with no publisher: their viewers
/// end, their rings and counters are freed, `stream.removed` goes out. Run once a second.
pub fn sweep_streams(core: &Core) {
    let stats = &core.engine.stats;
    let gone = core.streams.expired(
        std::time::Instant::now(),
        |app| {
            Duration::from_secs(
                core.config()
                    .app(app)
                    .map_or(crate::config::DEFAULT_IDLE_GRACE_S, |a| a.idle_grace_s),
            )
        },
        |i| {
            stats
                .stream(i)
                .is_some_and(|c| c.publishing.load(Ordering::Relaxed))
        },
    );
    for (key, index) in gone {
        end_stream(core, &key, index, crate::media::EndReason::Idle);
        tracing::info!("stream {key} removed: no publisher for its grace");
    }
}

/// Stream `key` in slot `index`, already taken out of the directory, ends: its publisher
/// (if any) leaves the publisher table, the engine ends its sessions with `reason` and
/// frees its rings, its counters are reset and its slot given back. `stream.removed` goes
/// out here for an idle stream; for a removal the engine sends it once the publisher's
/// leaving has updated the stream's snapshot.
pub fn end_stream(core: &Core, key: &str, index: usize, reason: crate::media::EndReason) {
    let stats = &core.engine.stats;
    let _ = core.forget_publisher_of(index);
    let _ = core.engine.send(Command::UnbindStream { index, reason });
    if let Some(c) = stats.stream(index) {
        c.reset();
    }
    if reason == crate::media::EndReason::Idle {
        stats.snapshots.stream_removed(key);
    }
    core.streams.release(index);
}
