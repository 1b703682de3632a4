//! Slates: what a stream plays while it has no publisher (`[[app]] fallback`).
//!
//! [`Slates`] holds each app's clip, loaded once at start (the built-in clip, or an MP4
//! file); the worker that owns a stream runs a [`Slate`] (a [`ClipSource`] pacing that clip)
//! while the stream has no publisher, and stops it when one arrives. The slate's packets go
//! through ingest's numbering ([`super::Ingest::map_slate`]), so viewers keep their SSRCs,
//! sequence numbers and timestamps across every switch. The media tap gets them marked as
//! the slate's: LL-HLS packages them (a switch either way is a new init segment and
//! `EXT-X-DISCONTINUITY`), recordings leave them out.

use std::sync::Arc;
use std::time::Instant;

use tern_pool::PoolCounter;
use tern_proto::codec::VideoCodec;
use tern_rtc::clip::{Clip, ClipSource};

use crate::config::{AppConfig, ConfigError, Fallback};

/// Each app's slate clip, for the apps that have one.
#[derive(Debug, Default)]
pub struct Slates {
    /// Replaced whole by a reload ([`Slates::replace`]).
    by_app: std::sync::RwLock<Vec<(Box<str>, Arc<Clip>)>>,
}

impl Slates {
    /// The clips of `apps`' `fallback` keys: the built-in clip parsed once for every app that
    /// names it, each file once. A file that does not load stops start-up, naming the key
    /// (`app[i].fallback`). Their bytes are booked in the `clip_sources` pool.
    pub fn load(apps: &[AppConfig]) -> Result<Slates, ConfigError> {
        let mut by_app = Vec::new();
        let mut builtin: Option<Arc<Clip>> = None;
        let mut files: Vec<(std::path::PathBuf, Arc<Clip>)> = Vec::new();
        let counter = PoolCounter::new("clip_sources", 0);
        for (i, app) in apps.iter().enumerate() {
            let bad = |e: String| ConfigError::invalid(format!("app[{i}].fallback"), e);
            let clip = match app.fallback() {
                Fallback::None => continue,
                Fallback::Clip => match &builtin {
                    Some(c) => c.clone(),
                    None => {
                        let c = Arc::new(Clip::builtin().map_err(|e| bad(e.to_string()))?);
                        counter.add(1, c.heap_bytes());
                        builtin.insert(c).clone()
                    }
                },
                Fallback::File(path) => match files.iter().find(|(p, _)| *p == path) {
                    Some((_, c)) => c.clone(),
                    None => {
                        let c = Arc::new(
                            Clip::from_mp4(&path)
                                .map_err(|e| bad(format!("{}: {e}", path.display())))?,
                        );
                        // A slate stands in for any publisher of the app, whose viewers
                        // were answered in H264 (the built-in clip's codec too).
                        if c.video_codec() != VideoCodec::H264 {
                            return Err(bad(format!(
                                "{}: the slate's video is {}; a slate must be H264",
                                path.display(),
                                c.video_codec()
                            )));
                        }
                        counter.add(1, c.heap_bytes());
                        files.push((path, c.clone()));
                        c
                    }
                },
            };
            by_app.push((app.name.as_str().into(), clip));
        }
        Ok(Slates {
            by_app: std::sync::RwLock::new(by_app),
        })
    }

    /// Puts a reload's slates (`new`, loaded with [`Slates::load`]) in force: streams that
    /// lose their publisher from now on play these; a slate playing goes on with its clip.
    pub fn replace(&self, new: Slates) {
        let new = new.by_app.into_inner().unwrap_or_else(|e| e.into_inner());
        *self.by_app.write().unwrap_or_else(|e| e.into_inner()) = new;
    }

    /// The slate of stream `key` (`app/stream`), if its app has one.
    pub fn of(&self, key: &str) -> Option<Arc<Clip>> {
        let app = key.split('/').next()?;
        self.by_app
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|(a, _)| &**a == app)
            .map(|(_, c)| c.clone())
    }
}

/// A stream's running slate.
#[derive(Debug)]
pub struct Slate {
    /// The clip, paced from the moment the slate started.
    pub source: ClipSource,
    /// Whether its video goes out: only when the stream's viewers take H264 (a stream last
    /// fed VP8 or another codec gets the slate's audio alone).
    pub video: bool,
}

impl Slate {
    /// `clip` from `now`.
    pub fn start(clip: &Arc<Clip>, now: Instant, video: bool) -> Slate {
        Slate {
            source: ClipSource::new(clip.clone(), now),
            video,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    /// A slate file in H265 (which `Clip::from_mp4` reads, for `tern bench`) is refused at
    /// load, naming the key and the codec: a slate stands in for publishers whose viewers
    /// were answered in H264.
    #[test]
    fn an_h265_slate_is_refused_naming_the_key() {
        let dir = std::env::temp_dir().join(format!("tern-slate-h265-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("slate.mp4");
        let status = std::process::Command::new("ffmpeg")
            .args(["-v", "error", "-nostdin", "-y"])
            .args(["-f", "lavfi", "-i", "testsrc=size=320x180:rate=25"])
            .args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"])
            .args(["-t", "1", "-c:v", "libx265", "-pix_fmt", "yuv420p"])
            .args([
                "-x265-params",
                "bframes=0:log-level=error",
                "-c:a",
                "libopus",
            ])
            .arg(&file)
            .status()
            .expect("the ffmpeg CLI runs (this test needs it)");
        assert!(status.success(), "ffmpeg: {status}");
        let text = format!(
            "[[app]]\nname = \"live\"\nfallback = \"file:{}\"\n",
            file.display()
        );
        let config = Config::parse(&text, "test").expect("config");
        let err = match Slates::load(&config.apps) {
            Ok(_) => panic!("an H265 slate loaded"),
            Err(e) => e.to_string(),
        };
        let _ = std::fs::remove_dir_all(&dir);
        assert!(err.contains("app[0].fallback"), "{err}");
        assert!(err.contains("the slate's video is H265"), "{err}");
    }
}
