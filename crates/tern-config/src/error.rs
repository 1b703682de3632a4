//! [`ConfigError`]: what loading or checking the configuration reports. Its own file so that
//! every section can return it without importing the file that gathers the sections.

/// Errors loading or validating the configuration.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// File path.
        path: String,
        /// Underlying error.
        source: std::io::Error,
    },
    /// The TOML is malformed or has an unknown key or a value of the wrong type.
    #[error("config file {path}: {message}")]
    Parse {
        /// File path.
        path: String,
        /// What is wrong, naming the key.
        message: String,
    },
    /// A value is out of range.
    #[error("config key `{key}`: {message}")]
    Invalid {
        /// The offending key, dotted.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// An edit of the file ([`super::ConfigFile`]) names an app the file has no `[[app]]`
    /// entry for.
    #[error("no app named `{name}` in the configuration file")]
    NoApp {
        /// The app's name.
        name: String,
    },
}

impl ConfigError {
    /// A bad value at `key` (dotted, e.g. `hls.window`): what a check of a setting returns,
    /// here or in the server (an app's slate file, its JWT key file).
    pub fn invalid(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            key: key.into(),
            message: message.into(),
        }
    }

    /// The same error with its key placed under `prefix`: a check of one entry of a list
    /// names keys inside the entry (`token`), the list's owner adds where the entry is
    /// (`app[2]` + `token` = `app[2].token`).
    pub(crate) fn under(self, prefix: &str) -> Self {
        match self {
            ConfigError::Invalid { key, message } => ConfigError::Invalid {
                key: format!("{prefix}.{key}"),
                message,
            },
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_prefixes_only_a_key() {
        let e = ConfigError::invalid("token", "must not be empty").under("app[2]");
        assert_eq!(
            e.to_string(),
            "config key `app[2].token`: must not be empty"
        );
        let e = ConfigError::invalid("url", "bad")
            .under("admission")
            .under("app[0]");
        assert!(matches!(e, ConfigError::Invalid { ref key, .. } if key == "app[0].admission.url"));
        let e = ConfigError::Parse {
            path: "x.toml".into(),
            message: "m".into(),
        }
        .under("app[0]");
        assert_eq!(e.to_string(), "config file x.toml: m");
    }
}
