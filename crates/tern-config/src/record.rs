//! `[app.record]`: recording an app's streams to fragmented MP4 files.

use serde::{Deserialize, Serialize};

use super::admission::{WEBHOOK_URL_RULE, webhook_url_ok};
use super::error::ConfigError;

/// `[app.record]`: where and how an app's streams are recorded (`tern_server::record`).
/// A recording runs while `enabled` and the stream is live, or between the API's start and
/// stop.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecordConfig {
    /// Record every stream of the app while it is live. Default false: recordings start
    /// only through the API.
    pub enabled: bool,
    /// The file path, without `.mp4` (added): strftime fields `%Y %m %d %H %M %S` (UTC),
    /// `%app`, `%stream`, `%%`; relative paths are from the working directory. Default
    /// `recordings/%app/%stream/%Y-%m-%d_%H-%M-%S`: one folder per stream, files sorted by
    /// their start.
    pub path: String,
    /// A new file after this many seconds, at the next keyframe. Default 3600: an hour per
    /// file, as OvenMediaEngine and SRS split by default.
    pub segment_s: u64,
    /// Fragment length in seconds: each fragment is written out when it completes, so at
    /// most this much is lost when the process dies. Default 1 (MediaMTX's part length).
    pub part_s: u64,
    /// Files of the app older than this (their last write) are deleted; checked every 10 s.
    /// Default 0: files are kept.
    pub delete_after_s: u64,
    /// `http[s]://host[:port][/path]` POSTed a JSON object per finished file
    /// (`{"app","stream","path","start","duration_s","bytes"}`), as the admission webhook
    /// is. Default empty: none.
    pub on_segment_url: String,
}

impl Default for RecordConfig {
    fn default() -> Self {
        RecordConfig {
            enabled: false,
            path: "recordings/%app/%stream/%Y-%m-%d_%H-%M-%S".into(),
            segment_s: 3600,
            part_s: 1,
            delete_after_s: 0,
            on_segment_url: String::new(),
        }
    }
}

/// The `%` fields a path may hold.
pub const PATH_FIELDS: [&str; 9] = ["%app", "%stream", "%Y", "%m", "%d", "%H", "%M", "%S", "%%"];

impl RecordConfig {
    /// The first bad key, named under `record`.
    pub fn check(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, message: &str| Err(ConfigError::invalid(key, message));
        if self.path.is_empty() || self.path.ends_with('/') {
            return bad("record.path", "must name a file (without .mp4)");
        }
        if self.path.split('/').any(|c| c == "..") {
            return bad("record.path", "must not contain ..");
        }
        let mut rest = self.path.as_str();
        while let Some(i) = rest.find('%') {
            rest = &rest[i..];
            let Some(f) = PATH_FIELDS.iter().find(|f| rest.starts_with(**f)) else {
                return bad(
                    "record.path",
                    "knows only %app %stream %Y %m %d %H %M %S %%",
                );
            };
            rest = &rest[f.len()..];
        }
        if !(1..=86_400).contains(&self.segment_s) {
            return bad("record.segment_s", "must be between 1 and 86400");
        }
        if !(1..=60).contains(&self.part_s) || self.part_s > self.segment_s {
            return bad(
                "record.part_s",
                "must be between 1 and 60, at most segment_s",
            );
        }
        if !self.on_segment_url.is_empty() && !webhook_url_ok(&self.on_segment_url) {
            return bad("record.on_segment_url", WEBHOOK_URL_RULE);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::Config;

    #[test]
    fn bad_values_are_named() {
        for (body, key) in [
            ("segment_s = 0", "app[0].record.segment_s"),
            ("part_s = 0", "app[0].record.part_s"),
            ("segment_s = 2\npart_s = 3", "app[0].record.part_s"),
            ("path = \"rec/%q\"", "app[0].record.path"),
            ("path = \"../x\"", "app[0].record.path"),
            ("path = \"\"", "app[0].record.path"),
            (
                "on_segment_url = \"ftp://x\"",
                "app[0].record.on_segment_url",
            ),
        ] {
            let text = format!("[[app]]\nname = \"live\"\n[app.record]\n{body}\n");
            let e = Config::parse(&text, "t.toml").expect_err(body);
            assert!(e.to_string().contains(key), "{body}: {e}");
        }
        let ok = "[[app]]\nname = \"live\"\n[app.record]\nenabled = true\npath = \"/r/%app-%stream/%Y%m%d-%%\"\n";
        let c = Config::parse(ok, "t.toml").expect("valid");
        assert!(c.apps[0].record.enabled);
        assert_eq!(c.apps[0].record.part_s, 1);
    }
}
