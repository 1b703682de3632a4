//! Changing a running server: configuration reload and the configuration API (issue 53).
//!
//! Three things re-read the configuration file: SIGHUP, `POST /v1/config/reload`, and a
//! change of the file itself (`server.watch_config`, polled every [`WATCH_EVERY`]). The API's
//! edits (`PUT`/`DELETE /v1/config/apps/...`) change the file's text with `toml_edit`
//! ([`crate::config::ConfigFile`], comments and layout kept), and go through the same
//! check before the file is written (atomically) and the change put in force.
//!
//! A reload is all or nothing: the text is parsed and checked as at start-up (every problem
//! reported, by key path: [`Config::parse_all`]), the command line is laid over it again,
//! then what needs work before anything changes is prepared (admission's key files, the
//! slates' clips). Any failure refuses the whole reload (`config.rejected`). Otherwise the
//! keys a running server cannot change (listeners, worker counts, the cluster,
//! [`crate::config::reload::reconcile`]) keep their running values and are named, and the rest is
//! put in force at once ([`Reload::commit`]):
//!
//! - the configuration readers see ([`Core::config`]): tokens, `api_token`,
//!   `trusted_proxies`, `hls.enabled`, capacity, every app's settings for new sessions;
//! - admission's gates (a changed token, JWT secret or key applies to new sessions only;
//!   an unchanged JWKS keeps its fetched set), the slates, the recorder's apps, the
//!   per-address limits;
//! - streams: a removed app's streams end (viewers' and publishers' `left` events say
//!   `app_removed`); an app's new declared streams and cameras get stream slots (spare ones,
//!   as publishers' streams do); a stream no longer declared lives on as a publisher-made
//!   one (removed after its grace with no publisher);
//! - cameras ([`crate::rtsp::Sources::apply`]): a new one pulls (now if always on), a removed
//!   one stops and its stream ends (`source_removed`), a changed one is pulled again with
//!   its viewers kept.
//!
//! Sessions of apps the reload did not change are not touched: no command reaches their
//! streams.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use serde_json::json;
use tracing::{info, warn};

use crate::admission::Gates;
use crate::config::reload::reconcile;
use crate::config::{AppConfig, Config, ConfigError, ConfigFile, write_atomically};
use crate::media::{Command, EndReason, Slates};
use crate::metrics::{Expose, Exposition, Kind};
use crate::session::Core;
use crate::snapshot::EventKind;

/// How often the watcher looks at the file (`server.watch_config`): a change applies within
/// two of these.
pub const WATCH_EVERY: Duration = Duration::from_millis(500);

/// What asked for a reload (in logs and events).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// SIGHUP.
    Signal,
    /// `POST /v1/config/reload`.
    Api,
    /// The watcher saw the file change.
    File,
    /// An edit through the configuration API.
    Edit,
}

impl Trigger {
    /// Its name: `signal`, `api`, `file`, `edit`.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Signal => "signal",
            Trigger::Api => "api",
            Trigger::File => "file",
            Trigger::Edit => "edit",
        }
    }
}

/// Why a reload or an edit changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// The configuration does not parse or check: every problem.
    #[error("the configuration has {} problem(s)", .0.len())]
    Invalid(Vec<ConfigError>),
    /// tern runs without a configuration file: there is nothing to reload or edit.
    #[error("tern was started without --config: there is no configuration file to change")]
    NoFile,
    /// The edited file could not be written (nothing changed).
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The app or source to change does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The server is stopping.
    #[error("the server is stopping")]
    Stopped,
}

/// What a reload put in force.
#[derive(Debug, Default, Clone)]
pub struct Applied {
    /// Keys that changed but wait for a restart (their running values are kept).
    pub restart: Vec<&'static str>,
    /// Apps added, removed and changed.
    pub added: Vec<String>,
    /// Apps removed (their sessions ended with `app_removed`).
    pub removed: Vec<String>,
    /// Apps whose settings changed.
    pub changed: Vec<String>,
    /// Camera sources added, removed and pulled again (`app/stream`).
    pub sources: (Vec<String>, Vec<String>, Vec<String>),
}

impl Applied {
    /// The API's and the event's JSON.
    pub fn json(&self, trigger: Trigger) -> serde_json::Value {
        json!({
            "status": "reloaded",
            "trigger": trigger.as_str(),
            "restart_required": self.restart,
            "apps": {"added": self.added, "removed": self.removed, "changed": self.changed},
            "sources": {"added": self.sources.0, "removed": self.sources.1, "changed": self.sources.2},
        })
    }
}

/// A checked configuration with what it needs prepared, not in force yet.
struct Prepared {
    config: Config,
    restart: Vec<&'static str>,
    gates: Gates,
    slates: Slates,
}

/// What the watcher last saw of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
}

/// Puts `[turn]`'s users, secret and peer lists and `limits.turn_allocations_per_ip` in
/// force in the running TURN server.
pub type TurnReload = Box<dyn Fn(&Config) + Send + Sync>;

/// The running parts a reload changes beyond the [`Core`]: the slates, the cameras, the
/// TURN server (when on).
pub struct Parts {
    /// Each app's slate.
    pub slates: Arc<Slates>,
    /// The RTSP cameras.
    pub sources: Arc<crate::rtsp::Sources>,
    /// Puts `[turn]`'s users, secret and peer lists in force in the TURN server, when on
    /// (`crate::turn::TurnControl::apply`).
    pub turn: Option<TurnReload>,
}

/// The reloader: one per server (the HTTP side's, for the API and SIGHUP).
pub struct Reload {
    core: Weak<Core>,
    path: Option<PathBuf>,
    /// The command line, laid over every configuration read.
    overlay: Box<dyn Fn(&mut Config) + Send + Sync>,
    /// The built-in demo stream (`live/demo` with `--demo`), which no app owns.
    builtin: Option<String>,
    parts: Parts,
    /// One reload at a time; holds the text last put in force (the watcher skips a change
    /// that is no change).
    busy: Mutex<Option<String>>,
    stamp: Mutex<Option<Stamp>>,
    applied: AtomicU64,
    rejected: AtomicU64,
}

impl Reload {
    /// The reloader of `core`, whose configuration came from `path` (if any) with
    /// `overlay` (the command line) laid over it; `builtin` is the demo stream (no app's).
    pub fn new(
        core: &Arc<Core>,
        path: Option<PathBuf>,
        overlay: Box<dyn Fn(&mut Config) + Send + Sync>,
        builtin: Option<String>,
        parts: Parts,
    ) -> Arc<Reload> {
        let text = path
            .as_deref()
            .and_then(|p| std::fs::read_to_string(p).ok());
        let stamp = path.as_deref().and_then(stamp_of);
        let me = Arc::new(Reload {
            core: Arc::downgrade(core),
            path,
            overlay,
            builtin,
            parts,
            busy: Mutex::new(text),
            stamp: Mutex::new(stamp),
            applied: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        });
        core.exposed.add(me.clone());
        me
    }

    /// The configuration file, if tern was started with one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Re-reads the file and puts it in force (SIGHUP, `POST /v1/config/reload`, the
    /// watcher). Blocking: file reads, key files, clips.
    pub fn reload(&self, trigger: Trigger) -> Result<Applied, Refused> {
        let path = self.path.as_deref().ok_or(Refused::NoFile)?;
        let mut last = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        *self.stamp.lock().unwrap_or_else(|e| e.into_inner()) = stamp_of(path);
        let result = read(path)
            .map_err(|e| vec![e])
            .and_then(|text| self.check(&text).map(|p| (text, p)));
        match result {
            Ok((text, prepared)) => {
                *last = Some(text);
                self.commit(prepared, trigger)
            }
            Err(problems) => Err(self.reject(problems, trigger)),
        }
    }

    /// Edits the file with `edit` (the configuration API): the edited text is checked as a
    /// reload's, written back atomically, then put in force. `edit`'s value comes back with
    /// what was applied; an edit that fails, a check that fails or a write that fails
    /// changes nothing.
    pub fn edit<T>(
        &self,
        edit: impl FnOnce(&mut ConfigFile) -> Result<T, Refused>,
    ) -> Result<(T, Applied), Refused> {
        let path = self.path.as_deref().ok_or(Refused::NoFile)?;
        let mut last = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        let text = read(path).map_err(|e| Refused::Invalid(vec![e]))?;
        let mut file = ConfigFile::parse(&text).map_err(|e| Refused::Invalid(vec![e]))?;
        let value = edit(&mut file)?;
        let edited = file.to_string();
        let prepared = match self.check(&edited) {
            Ok(p) => p,
            Err(problems) => return Err(self.reject(problems, Trigger::Edit)),
        };
        write_atomically(path, &edited).map_err(|source| {
            warn!(
                "config edit not applied: cannot write {}: {source}",
                path.display()
            );
            Refused::Write {
                path: path.display().to_string(),
                source,
            }
        })?;
        *self.stamp.lock().unwrap_or_else(|e| e.into_inner()) = stamp_of(path);
        *last = Some(edited);
        Ok((value, self.commit(prepared, Trigger::Edit)?))
    }

    /// The file's watcher when there is a file and `server.watch_config` is on
    /// ([`Reload::watch`]).
    pub(crate) fn watcher(self: &Arc<Self>) -> std::io::Result<Option<Watcher>> {
        let Some(core) = self.core.upgrade() else {
            return Ok(None);
        };
        if self.path.is_none() || !core.config().server.watch_config {
            return Ok(None);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let thread = self.watch(stop.clone())?;
        Ok(Some(Watcher { stop, thread }))
    }

    /// Watches the file (`server.watch_config`) on a thread of its own until `stop`:
    /// a change of its time or size whose text differs from what is in force reloads it.
    fn watch(
        self: &Arc<Self>,
        stop: Arc<AtomicBool>,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        let me = self.clone();
        std::thread::Builder::new()
            .name("ConfigWatch".into())
            .spawn(move || {
                let Some(path) = me.path.clone() else {
                    return;
                };
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(WATCH_EVERY);
                    let now = stamp_of(&path);
                    let seen = me.stamp.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    if now.is_none() || now == seen {
                        continue;
                    }
                    let same = std::fs::read_to_string(&path).ok().is_some_and(|t| {
                        me.busy.lock().unwrap_or_else(|e| e.into_inner()).as_deref() == Some(&t)
                    });
                    if same {
                        *me.stamp.lock().unwrap_or_else(|e| e.into_inner()) = now;
                        continue;
                    }
                    info!("config file {} changed: reloading", path.display());
                    // Logged and counted by `reload` either way.
                    let _ = me.reload(Trigger::File);
                }
            })
    }

    /// Parses and checks `text` as the configuration to put in force, prepares what it
    /// needs: every problem, or the prepared configuration.
    fn check(&self, text: &str) -> Result<Prepared, Vec<ConfigError>> {
        let origin = self
            .path
            .as_deref()
            .map_or("config".to_string(), |p| p.display().to_string());
        let mut cfg = Config::parse_all(text, &origin)?;
        (self.overlay)(&mut cfg);
        cfg.validate_all()?;
        let core = self.core.upgrade().ok_or_else(Vec::new)?;
        let r = reconcile(&core.config(), cfg);
        let gates = core
            .admission
            .prepare(&r.config.apps)
            .map_err(|e| vec![e])?;
        let slates = Slates::load(&r.config.apps).map_err(|e| vec![e])?;
        Ok(Prepared {
            config: r.config,
            restart: r.restart,
            gates,
            slates,
        })
    }

    /// A refused reload: logged with every problem, counted, `config.rejected`.
    fn reject(&self, problems: Vec<ConfigError>, trigger: Trigger) -> Refused {
        self.rejected.fetch_add(1, Ordering::Relaxed);
        for p in &problems {
            warn!("config reload ({}) refused: {p}", trigger.as_str());
        }
        if let Some(core) = self.core.upgrade() {
            core.engine.stats.snapshots.config_event(
                EventKind::ConfigRejected,
                &json!({"trigger": trigger.as_str(), "problems": problems_json(&problems)}),
            );
        }
        Refused::Invalid(problems)
    }

    /// Puts `p` in force (see the module's documentation).
    fn commit(&self, p: Prepared, trigger: Trigger) -> Result<Applied, Refused> {
        let core = self.core.upgrade().ok_or(Refused::Stopped)?;
        let old = core.config();
        let new = Arc::new(p.config);
        let mut applied = Applied {
            restart: p.restart,
            ..Applied::default()
        };
        for a in &new.apps {
            match old.app(&a.name) {
                None => applied.added.push(a.name.clone()),
                Some(o) if o != a => applied.changed.push(a.name.clone()),
                Some(_) => {}
            }
        }
        applied.removed = old
            .apps
            .iter()
            .filter(|a| new.app(&a.name).is_none())
            .map(|a| a.name.clone())
            .collect();
        core.set_config(new.clone());
        core.admission.replace(p.gates, core.runtime().as_ref());
        crate::session::watch_session_ends(&core);
        let (o, n) = (&old.turn, &new.turn);
        if let Some(apply) = &self.parts.turn
            && (o.users != n.users
                || o.secret != n.secret
                || o.allowed_peers != n.allowed_peers
                || o.denied_peers != n.denied_peers
                || old.limits.turn_allocations_per_ip != new.limits.turn_allocations_per_ip)
        {
            apply(&new);
        }
        self.parts.slates.replace(p.slates);
        core.record.set_apps(&new.apps);
        core.limiters.apply(&new);
        core.hls.set_settings(&new.hls);
        for app in &applied.removed {
            self.end_streams(&core, app, None, EndReason::AppRemoved);
        }
        self.declare(&core, &old, &new);
        let sources = self.parts.sources.apply(&new.apps);
        for key in &sources.removed {
            let (app, stream) = key.split_once('/').unwrap_or((key, ""));
            let still = new
                .app(app)
                .is_some_and(|a| a.streams.iter().any(|s| s == stream));
            if new.app(app).is_some() && !still {
                self.end_streams(&core, app, Some(stream), EndReason::SourceRemoved);
            }
        }
        applied.sources = (sources.added, sources.removed, sources.changed);
        self.applied.fetch_add(1, Ordering::Relaxed);
        for key in &applied.restart {
            warn!(
                "config reload ({}): `{key}` changed but needs a restart; the running value is kept",
                trigger.as_str()
            );
        }
        info!(
            "config reloaded ({}): apps added {:?}, removed {:?}, changed {:?}; cameras added {:?}, removed {:?}, changed {:?}",
            trigger.as_str(),
            applied.added,
            applied.removed,
            applied.changed,
            applied.sources.0,
            applied.sources.1,
            applied.sources.2
        );
        core.engine
            .stats
            .snapshots
            .config_event(EventKind::ConfigReloaded, &applied.json(trigger));
        Ok(applied)
    }

    /// Every stream `new` declares (each app's `streams` and cameras) gets a slot; a stream
    /// `old` declared in an app `new` keeps but no longer declares lives on as a
    /// publisher-made one.
    fn declare(&self, core: &Core, old: &Config, new: &Config) {
        let now = Instant::now();
        for app in &new.apps {
            let want = declared(app);
            for key in &want {
                match core.streams.declare(key) {
                    Ok((info, true)) => {
                        let _ = core.engine.send(Command::BindStream {
                            index: info.index,
                            key: key.as_str().into(),
                            declared: true,
                        });
                        core.engine.stats.snapshots.stream_created(key);
                        info!("stream {key} declared");
                    }
                    Ok(_) => {}
                    Err(e) => warn!("stream {key} not declared: {e}"),
                }
            }
            let Some(o) = old.app(&app.name) else {
                continue;
            };
            // A removed camera's stream ends (`source_removed`, in `commit`); a stream
            // dropped from `streams` lives on until its grace.
            for s in &o.streams {
                let key = format!("{}/{s}", app.name);
                if !want.contains(&key) {
                    core.streams.undeclare(&key, now);
                }
            }
        }
    }

    /// Ends the streams of `app` (only `app/stream` when given): their publisher and viewers
    /// end with `reason`, their slots are freed. The built-in demo stream is no app's.
    fn end_streams(&self, core: &Core, app: &str, stream: Option<&str>, reason: EndReason) {
        for (key, index) in core.streams.remove(app, stream, self.builtin.as_deref()) {
            crate::session::end_stream(core, &key, index, reason);
            info!("stream {key} removed: {}", reason.as_str());
        }
    }
}

impl Expose for Reload {
    /// `tern_config_reloads_total{result}`.
    fn write_metrics(&self, o: &mut Exposition) {
        let mut f = o.family(
            "tern_config_reloads_total",
            "Configuration reloads (SIGHUP, API, file watch, API edits) by result: applied, or rejected (nothing changed).",
            Kind::Counter,
        );
        f.sample(
            &[("result", &"applied")],
            self.applied.load(Ordering::Relaxed),
        );
        f.sample(
            &[("result", &"rejected")],
            self.rejected.load(Ordering::Relaxed),
        );
    }
}

/// The streams `app` declares: its `streams` and its cameras' streams (`app/stream`).
fn declared(app: &AppConfig) -> Vec<String> {
    app.streams
        .iter()
        .chain(app.sources.iter().map(|s| &s.stream))
        .map(|s| format!("{}/{s}", app.name))
        .collect()
}

/// The file's text, or the error naming it.
fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// The file's time and size, if it can be read.
fn stamp_of(path: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        modified: m.modified().ok(),
        len: m.len(),
    })
}

/// Problems as the API and events list them: `{"key", "message"}` (`key` null when the
/// problem is the file's as a whole).
pub fn problems_json(problems: &[ConfigError]) -> serde_json::Value {
    problems
        .iter()
        .map(|p| match p {
            ConfigError::Invalid { key, message } => json!({"key": key, "message": message}),
            other => json!({"key": null, "message": other.to_string()}),
        })
        .collect()
}

/// The watcher's thread ([`Reload::watch`]).
pub(crate) struct Watcher {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Watcher {
    /// Stops the watcher and waits for it.
    pub(crate) fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
    }
}
