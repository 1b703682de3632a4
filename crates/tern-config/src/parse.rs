//! [`Config::parse_all`] and [`Config::validate_all`]: every problem of a file, each under its
//! key, where [`Config::parse`] and [`Config::validate`] stop at the first.
//!
//! The file is parsed to a table (a TOML syntax error is then the one problem), and each
//! top-level table is deserialized on its own, each `[[app]]` entry too, so that a bad key in
//! one leaves the others read; then every section and app that was read is checked. A
//! section's own check still stops at its first bad key.

use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;
use toml::de::{DeTable, DeValue, ValueDeserializer};

use super::{AppConfig, CLOSED_SET_RULES, Config, ConfigError};

/// The top-level keys, as [`Config`] names them.
const TOP_LEVEL: [&str; 7] = [
    "server", "tunables", "app", "turn", "limits", "hls", "cluster",
];

impl Config {
    /// Parses and validates TOML text (`origin` names it in errors), reporting every problem:
    /// first those of reading it (unknown keys, missing keys, values of the wrong type or
    /// outside a closed set) in the file's order, each naming its dotted key
    /// (`server.htp: unknown field ...`, `app[1]: missing field ...`); then
    /// [`Config::validate_all`]'s for the sections and apps that were read (an app keeps its
    /// place among the `[[app]]` entries: `app[2].token`). A TOML syntax error is the only
    /// problem reported when there is one.
    pub fn parse_all(text: &str, origin: &str) -> Result<Config, Vec<ConfigError>> {
        let (cfg, problems) = Self::read(text, origin);
        if problems.is_empty() {
            Ok(cfg)
        } else {
            Err(problems)
        }
    }

    /// Checks ranges and names, reporting every bad key: each section's own check (which
    /// stops at its first) in the order `[server]`, `[hls]`, `[cluster]`, `[tunables]`,
    /// `[limits]`, `[turn]`, then each app under its place (`app[1].token`), whose name must
    /// not repeat an earlier app's.
    pub fn validate_all(&self) -> Result<(), Vec<ConfigError>> {
        let problems = self.problems();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }

    /// Every problem of [`Config::validate_all`] (none: the configuration is valid).
    pub(super) fn problems(&self) -> Vec<ConfigError> {
        let apps: Vec<_> = self.apps.iter().enumerate().collect();
        self.checks(&apps, true)
    }

    /// The configuration read from `text` and every problem of [`Config::parse_all`] (none:
    /// it is valid). The sections and apps that could not be read keep their defaults and are
    /// left out.
    pub(super) fn read(text: &str, origin: &str) -> (Config, Vec<ConfigError>) {
        let mut r = Reader {
            text,
            origin,
            found: Vec::new(),
        };
        let mut cfg = Config::default();
        let root = match DeTable::parse(text) {
            Ok(root) => root.into_inner(),
            Err(e) => return (cfg, vec![r.parse_error(e.message(), e.span())]),
        };
        let mut server_read = true;
        // Where each app read was among the `[[app]]` entries.
        let mut apps_at = Vec::new();
        for (key, value) in root {
            let place: &str = key.get_ref();
            match place {
                "server" => match r.read(place, value) {
                    Some(s) => cfg.server = s,
                    None => server_read = false,
                },
                "tunables" => cfg.tunables = r.read(place, value).unwrap_or_default(),
                "turn" => cfg.turn = r.read(place, value).unwrap_or_default(),
                "limits" => cfg.limits = r.read(place, value).unwrap_or_default(),
                "hls" => cfg.hls = r.read(place, value).unwrap_or_default(),
                "cluster" => cfg.cluster = r.read(place, value),
                "app" => {
                    let span = value.span();
                    match value.into_inner() {
                        DeValue::Array(entries) => {
                            for (i, entry) in entries.into_iter().enumerate() {
                                if let Some(app) = r.read::<AppConfig>(&format!("app[{i}]"), entry)
                                {
                                    cfg.apps.push(app);
                                    apps_at.push(i);
                                }
                            }
                        }
                        // Not a list: serde's error names the type it is.
                        other => {
                            let apps: Vec<AppConfig> =
                                r.read(place, Spanned::new(span, other)).unwrap_or_default();
                            apps_at.extend(0..apps.len());
                            cfg.apps = apps;
                        }
                    }
                }
                unknown => {
                    let expected = TOP_LEVEL.map(|k| format!("`{k}`")).join(", ");
                    let message =
                        format!("{unknown}: unknown field `{unknown}`, expected one of {expected}");
                    let problem = r.parse_error(&message, Some(key.span()));
                    r.found.push((key.span().start, problem));
                }
            }
        }
        // Reading problems in the file's order, then the checks in theirs.
        r.found.sort_by_key(|(at, _)| *at);
        let mut problems: Vec<_> = r.found.into_iter().map(|(_, e)| e).collect();
        let apps: Vec<_> = apps_at.into_iter().zip(&cfg.apps).collect();
        problems.extend(cfg.checks(&apps, server_read));
        (cfg, problems)
    }

    /// Every problem the checks find, the apps named by their places (`(i, app)`: `app[i]`);
    /// `server_read`: `[server]` was read, which `turn.tls_listen`'s check looks at (its
    /// defaults would make that check report a problem that is not there).
    fn checks(&self, apps: &[(usize, &AppConfig)], server_read: bool) -> Vec<ConfigError> {
        let mut found = Vec::new();
        let mut note = |checked: Result<(), ConfigError>| {
            if let Err(e) = checked {
                found.push(e);
            }
        };
        note(self.server.check());
        note(self.hls.check());
        if let Some(c) = &self.cluster {
            note(c.check());
        }
        note(self.tunables.check());
        note(self.limits.check());
        note(self.turn.check());
        if server_read {
            let has_cert = self.server.tls_cert.is_some() && self.server.tls_key.is_some();
            note(self.turn.check_tls(has_cert));
        }
        for (k, &(i, app)) in apps.iter().enumerate() {
            let place = format!("app[{i}]");
            // A name taken by an earlier app was reported there.
            if apps[..k].iter().any(|(_, a)| a.name == app.name) {
                note(Err(ConfigError::invalid(
                    format!("{place}.name"),
                    "duplicate app name",
                )));
            }
            note(app.check().map_err(|e| e.under(&place)));
        }
        found
    }
}

/// Reads the parts of one file, noting their problems.
struct Reader<'t> {
    /// The file's text, for the line and column of a problem.
    text: &'t str,
    /// What names the file in errors.
    origin: &'t str,
    /// The problems found, each with the byte offset where it is (to sort them).
    found: Vec<(usize, ConfigError)>,
}

impl Reader<'_> {
    /// `value` (the value of key `place`, dotted) as a `T`; `None` when it is not one, with
    /// the problem noted under its dotted key.
    fn read<'de, T: Deserialize<'de>>(
        &mut self,
        place: &str,
        value: Spanned<DeValue<'de>>,
    ) -> Option<T> {
        match serde_path_to_error::deserialize(ValueDeserializer::from(value)) {
            Ok(v) => Some(v),
            Err(e) => {
                let key = match e.path().to_string() {
                    // The value itself (a missing field, a wrong type).
                    inner if inner == "." => place.to_string(),
                    inner if inner.starts_with('[') => format!("{place}{inner}"),
                    inner => format!("{place}.{inner}"),
                };
                let e = e.into_inner();
                let span = e.span();
                let problem = if CLOSED_SET_RULES.contains(&e.message()) {
                    ConfigError::invalid(key, e.message())
                } else {
                    self.parse_error(&format!("{key}: {}", e.message()), span.clone())
                };
                self.found.push((span.map_or(0, |s| s.start), problem));
                None
            }
        }
    }

    /// A [`ConfigError::Parse`] saying `message` on one line, with where `span` starts.
    fn parse_error(&self, message: &str, span: Option<Range<usize>>) -> ConfigError {
        let at = span
            .and_then(|s| self.text.get(..s.start))
            .map(|before| {
                let line = before.matches('\n').count() + 1;
                let line_start = before.rfind('\n').map_or(0, |i| i + 1);
                let column = before[line_start..].chars().count() + 1;
                format!(" (line {line}, column {column})")
            })
            .unwrap_or_default();
        ConfigError::Parse {
            path: self.origin.to_string(),
            message: format!("{}{at}", message.trim().replace('\n', " ")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The problems of `text`, shown.
    fn problems(text: &str) -> Vec<String> {
        match Config::parse_all(text, "x.toml") {
            Ok(_) => Vec::new(),
            Err(e) => e.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn every_problem_is_reported_under_its_key() {
        let text = "\
[server]
htp = \"1.2.3.4:1\"

[hls]
window = 0

[[app]]
name = \"live\"

[[app]]
name = \"live\"
";
        let p = problems(text);
        assert_eq!(p.len(), 3, "{p:#?}");
        assert!(
            p[0].contains("server.htp: unknown field `htp`") && p[0].contains("line 2, column 1"),
            "{}",
            p[0]
        );
        assert_eq!(
            p[1],
            "config key `hls.window`: must be between 2 and 100 (segments)"
        );
        assert_eq!(p[2], "config key `app[1].name`: duplicate app name");
        // The first of them is what `parse` reports.
        let e = Config::parse(text, "x.toml").expect_err("bad");
        assert_eq!(e.to_string(), p[0]);
    }

    #[test]
    fn a_bad_app_leaves_the_others_checked_under_their_places() {
        let text = "\
bogus = 1
[[app]]
streams = [\"a\"]
[[app]]
name = \"b\"
token = \"\"
[app.admission]
url = \"http://h/\"
on_error = \"maybe\"
[[app]]
name = \"c\"
token = \"\"
[tunables]
max_payload = \"big\"
[turn]
tls_listen = \"127.0.0.1:5349\"
[cluster]
redis = \"redis://h\"
";
        let p = problems(text);
        let expect = [
            "bogus: unknown field `bogus`, expected one of `server`,",
            "app[0]: missing field `name` (line 2, column 1)",
            "config key `app[1].admission.on_error`: must be \"deny\" or \"allow\"",
            "tunables.max_payload: invalid type: string \"big\"",
            "cluster: missing field `node`",
            "config key `turn.tls_listen`: needs turn.listen",
            "config key `app[2].token`: must not be empty",
        ];
        assert_eq!(p.len(), expect.len(), "{p:#?}");
        for (got, want) in p.iter().zip(expect) {
            assert!(got.contains(want), "{got} / {want}");
        }
    }

    #[test]
    fn a_syntax_error_is_the_one_problem() {
        let p = problems("[server]\nhttp = \n[hls]\nwindow = 0\n");
        assert_eq!(p.len(), 1, "{p:#?}");
        assert!(p[0].contains("line 2"), "{}", p[0]);
        // `app` that is not a list of tables is named.
        let p = problems("app = 5\n");
        assert!(p.len() == 1 && p[0].contains("app: invalid type"), "{p:#?}");
    }

    #[test]
    fn validate_all_names_every_section() {
        let mut c = Config::default();
        c.server.worker_count = 0;
        c.limits.exempt = vec!["x".into()];
        c.apps = vec![
            AppConfig {
                token: Some(String::new()),
                ..Config::parse("[[app]]\nname = \"a\"\n", "x")
                    .expect("valid")
                    .apps
                    .remove(0)
            };
            2
        ];
        let keys: Vec<_> = c
            .validate_all()
            .expect_err("bad")
            .into_iter()
            .map(|e| match e {
                ConfigError::Invalid { key, .. } => key,
                other => other.to_string(),
            })
            .collect();
        assert_eq!(
            keys,
            [
                "server.worker_count",
                "limits.exempt[0]",
                "app[0].token",
                "app[1].name",
                "app[1].token"
            ]
        );
        assert_eq!(
            c.validate().map_err(|e| e.to_string()),
            Err("config key `server.worker_count`: must be between 1 and 128".into())
        );
        assert!(Config::default().validate_all().is_ok());
    }
}
