//! [`ConfigFile`]: the configuration file's text edited (the config API's `PUT` and `DELETE` of
//! apps and their sources) with its comments and layout kept (`toml_edit`), and
//! [`write_atomically`], which puts it back on disk.
//!
//! An app is an `[[app]]` entry, found by its `name`; a source is an `[[app.source]]` entry of
//! its app, found by its `stream`. A put edits the entry in place: a key whose value does not
//! change keeps its text (its comment, `'literal'` strings, `0x` numbers), a changed value
//! keeps its trailing comment, a table of the entry (`[app.record]`) is edited key by key, a
//! key the JSON leaves out is removed (a `PUT` replaces the whole entry). A new entry goes
//! after the last one. JSON objects become tables (`[app.record]`, or inline tables inside
//! lists and inline tables), lists of objects under `source` become `[[app.source]]` entries
//! and other lists inline arrays (`renditions = [{ ... }]`). Apps written as an inline
//! `app = [...]` array are not edited.
//!
//! The edited text is not checked here: [`super::Config::parse_all`] says what is wrong with
//! it before it is written.

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use serde_json::{Map, Value as Json};
use toml_edit::{ArrayOfTables, DocumentMut, InlineTable, Item, Table, Value};

use super::error::ConfigError;

/// The keys whose lists of objects are written as arrays of tables (`[[app.source]]`, as the
/// documentation writes them); other lists of objects (`renditions`) are inline arrays.
const ARRAYS_OF_TABLES: [&str; 1] = ["source"];

/// What names the text in a [`ConfigError::Parse`] of [`ConfigFile::parse`].
const TEXT_ORIGIN: &str = "(the text being edited)";

/// The configuration file's text, edited.
#[derive(Debug, Clone)]
pub struct ConfigFile {
    /// The parsed text, comments and layout included.
    doc: DocumentMut,
}

impl ConfigFile {
    /// Parses the file's text (TOML syntax only: [`super::Config::parse_all`] checks the
    /// keys).
    pub fn parse(text: &str) -> Result<ConfigFile, ConfigError> {
        let doc = text
            .parse::<DocumentMut>()
            .map_err(|e| ConfigError::Parse {
                path: TEXT_ORIGIN.into(),
                message: e.to_string().trim().replace('\n', " "),
            })?;
        Ok(ConfigFile { doc })
    }

    /// Puts app `name` (a JSON object with the `[[app]]` keys; its `"name"`, if present, must
    /// equal `name`): edits the existing `[[app]]` entry of that name in place (returns
    /// false) or appends a new one (returns true: created). Keys not in the object are
    /// removed from the entry (PUT replaces). A JSON value TOML cannot hold (`null`, an
    /// integer above `i64::MAX`) or a non-object is an error naming the key (`app.KEY`), and
    /// leaves the text as it was; so does an inline `app = [...]` array.
    pub fn put_app(&mut self, name: &str, app: &Json) -> Result<bool, ConfigError> {
        let mut entry = entry_table(app, "app", "name", name)?;
        let Some(apps) = self.apps()? else {
            // The first app: at the end of the file, after its closing comments.
            entry.set_position(Some(last_position(self.doc.as_table()).saturating_add(1)));
            let trailing = self.doc.trailing().as_str().unwrap_or_default();
            if !trailing.trim().is_empty() {
                let mut before = trailing.to_string();
                if !before.ends_with('\n') {
                    before.push('\n');
                }
                before.push('\n');
                entry.decor_mut().set_prefix(before);
                self.doc.set_trailing("");
            }
            let mut apps = ArrayOfTables::new();
            apps.push(entry);
            self.doc.insert("app", Item::ArrayOfTables(apps));
            return Ok(true);
        };
        match find(apps, "name", name) {
            Some(old) => {
                merge_table(old, entry);
                Ok(false)
            }
            None => {
                apps.push(entry);
                Ok(true)
            }
        }
    }

    /// Removes app `name`; false if there was none (an app of an inline `app = [...]` array
    /// is not found).
    pub fn delete_app(&mut self, name: &str) -> bool {
        let Ok(Some(apps)) = self.apps() else {
            return false;
        };
        let Some(i) = position(apps, "name", name) else {
            return false;
        };
        apps.remove(i);
        if apps.is_empty() {
            self.doc.remove("app");
        }
        true
    }

    /// Puts the `[[app.source]]` of stream `stream` in app `app` (a JSON object with the
    /// source keys; its `"stream"`, if present, must equal `stream`, and is set from it):
    /// edits the existing entry in place (returns false) or appends one (returns true:
    /// created), as [`ConfigFile::put_app`] does. [`ConfigError::NoApp`] if the app has no
    /// `[[app]]` entry.
    pub fn put_source(&mut self, app: &str, stream: &str, src: &Json) -> Result<bool, ConfigError> {
        let entry = entry_table(src, "app.source", "stream", stream)?;
        let no_app = || ConfigError::NoApp { name: app.into() };
        let table = self
            .apps()?
            .and_then(|apps| find(apps, "name", app))
            .ok_or_else(no_app)?;
        let sources = match table.get_mut("source") {
            Some(Item::ArrayOfTables(sources)) => sources,
            None | Some(Item::None) => {
                let mut sources = ArrayOfTables::new();
                sources.push(entry);
                table.insert("source", Item::ArrayOfTables(sources));
                return Ok(true);
            }
            Some(_) => {
                return Err(ConfigError::invalid(
                    "app.source",
                    "is not an array of tables ([[app.source]] entries): edit the file by hand",
                ));
            }
        };
        match find(sources, "stream", stream) {
            Some(old) => {
                merge_table(old, entry);
                Ok(false)
            }
            None => {
                sources.push(entry);
                Ok(true)
            }
        }
    }

    /// Removes the `[[app.source]]` of stream `stream` from app `app`; false if there was
    /// none.
    pub fn delete_source(&mut self, app: &str, stream: &str) -> bool {
        let Ok(Some(apps)) = self.apps() else {
            return false;
        };
        let Some(table) = find(apps, "name", app) else {
            return false;
        };
        let Some(Item::ArrayOfTables(sources)) = table.get_mut("source") else {
            return false;
        };
        let Some(i) = position(sources, "stream", stream) else {
            return false;
        };
        sources.remove(i);
        if sources.is_empty() {
            table.remove("source");
        }
        true
    }

    /// The `[[app]]` entries; `None` when the file has none; an error when `app` is
    /// something else (an inline array).
    fn apps(&mut self) -> Result<Option<&mut ArrayOfTables>, ConfigError> {
        match self.doc.get_mut("app") {
            None | Some(Item::None) => Ok(None),
            Some(Item::ArrayOfTables(apps)) => Ok(Some(apps)),
            Some(_) => Err(ConfigError::invalid(
                "app",
                "is not an array of tables ([[app]] entries): edit the file by hand",
            )),
        }
    }
}

/// The text, edited.
impl fmt::Display for ConfigFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.doc.fmt(f)
    }
}

/// The largest position of the tables in `table` (0 for none): the order in which the text
/// shows them.
fn last_position(table: &Table) -> isize {
    let own = table.position().unwrap_or(0);
    table
        .iter()
        .map(|(_, item)| match item {
            Item::Table(t) => last_position(t),
            Item::ArrayOfTables(a) => a.iter().map(last_position).max().unwrap_or(0),
            _ => 0,
        })
        .fold(own, isize::max)
}

/// Where in `tables` the entry whose `key` is the string `value` is.
fn position(tables: &ArrayOfTables, key: &str, value: &str) -> Option<usize> {
    tables
        .iter()
        .position(|t| t.get(key).and_then(Item::as_str) == Some(value))
}

/// The entry of `tables` whose `key` is the string `value`.
fn find<'a>(tables: &'a mut ArrayOfTables, key: &str, value: &str) -> Option<&'a mut Table> {
    let i = position(tables, key, value)?;
    tables.get_mut(i)
}

/// The entry (of `[[place]]`) that the JSON object `json` makes, its `id_key` set to `id`
/// (first; a different `id_key` in `json` is an error).
fn entry_table(json: &Json, place: &str, id_key: &str, id: &str) -> Result<Table, ConfigError> {
    let Json::Object(obj) = json else {
        return Err(ConfigError::invalid(place, "must be a JSON object"));
    };
    if let Some(given) = obj.get(id_key)
        && given.as_str() != Some(id)
    {
        return Err(ConfigError::invalid(
            format!("{place}.{id_key}"),
            format!("must be {id:?}, as the path names it"),
        ));
    }
    let mut entry = Table::new();
    entry.insert(id_key, Item::Value(id.into()));
    for (k, v) in obj.iter().filter(|(k, _)| *k != id_key) {
        entry.insert(k, to_item(k, v, &format!("{place}.{k}"))?);
    }
    Ok(entry)
}

/// The JSON value `v` of key `key` (`path`: its dotted place, for errors) as an item of a
/// table: an object is a table, a list of objects under one of [`ARRAYS_OF_TABLES`] an array
/// of tables, anything else a value.
fn to_item(key: &str, v: &Json, path: &str) -> Result<Item, ConfigError> {
    match v {
        Json::Object(obj) => Ok(Item::Table(to_table(obj, path)?)),
        Json::Array(list)
            if ARRAYS_OF_TABLES.contains(&key)
                && !list.is_empty()
                && list.iter().all(Json::is_object) =>
        {
            let mut tables = ArrayOfTables::new();
            for (i, obj) in list.iter().filter_map(Json::as_object).enumerate() {
                tables.push(to_table(obj, &format!("{path}[{i}]"))?);
            }
            Ok(Item::ArrayOfTables(tables))
        }
        v => Ok(Item::Value(to_value(v, path)?)),
    }
}

/// A JSON object as a (standard) table.
fn to_table(obj: &Map<String, Json>, path: &str) -> Result<Table, ConfigError> {
    let mut table = Table::new();
    for (k, v) in obj {
        table.insert(k, to_item(k, v, &format!("{path}.{k}"))?);
    }
    Ok(table)
}

/// A JSON value as a TOML value (objects as inline tables).
fn to_value(v: &Json, path: &str) -> Result<Value, ConfigError> {
    Ok(match v {
        Json::Null => {
            return Err(ConfigError::invalid(
                path,
                "null has no TOML form: leave the key out for its default",
            ));
        }
        Json::Bool(b) => Value::from(*b),
        Json::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Value::from(i),
            (None, Some(f)) if !n.is_u64() => Value::from(f),
            _ => {
                return Err(ConfigError::invalid(
                    path,
                    "is above the largest TOML integer (9223372036854775807)",
                ));
            }
        },
        Json::String(s) => Value::from(s.as_str()),
        Json::Array(list) => {
            let mut array = toml_edit::Array::new();
            for (i, v) in list.iter().enumerate() {
                array.push(to_value(v, &format!("{path}[{i}]"))?);
            }
            Value::Array(array)
        }
        Json::Object(obj) => {
            let mut table = InlineTable::new();
            for (k, v) in obj {
                table.insert(k, to_value(v, &format!("{path}.{k}"))?);
            }
            Value::InlineTable(table)
        }
    })
}

/// Makes the table `old` hold what `new` does, in place: keys not in `new` removed, the
/// others merged ([`merge_item`]), new ones appended.
fn merge_table(old: &mut Table, new: Table) {
    old.retain(|k, _| new.contains_key(k));
    for (k, item) in new {
        match old.get_mut(&k) {
            Some(o) if !o.is_none() => merge_item(o, item),
            _ => {
                old.insert(&k, item);
            }
        }
    }
}

/// [`merge_table`] for an inline table.
fn merge_inline(old: &mut InlineTable, new: InlineTable) {
    old.retain(|k, _| new.contains_key(k));
    for (k, v) in new {
        match old.get_mut(&k) {
            Some(o) => merge_value(o, v),
            None => {
                old.insert(k, v);
            }
        }
    }
}

/// Makes the item `old` hold `new`, keeping what it can of its text: a table is merged key
/// by key in the form it has (standard, dotted or inline), an array of tables entry by entry,
/// a value by [`merge_value`]; an item of another kind is replaced.
fn merge_item(old: &mut Item, new: Item) {
    let new = match (&mut *old, new) {
        (Item::Table(o), Item::Table(n)) => return merge_table(o, n),
        (Item::Value(Value::InlineTable(o)), Item::Table(n)) => {
            return merge_inline(o, n.into_inline_table());
        }
        (Item::Value(o), n) => match n.into_value() {
            Ok(n) => return merge_value(o, n),
            Err(n) => n,
        },
        (Item::ArrayOfTables(o), n) => match n.into_array_of_tables() {
            Ok(n) => return merge_tables(o, n),
            Err(n) => n,
        },
        (_, n) => n,
    };
    *old = new;
}

/// Makes the array of tables `old` hold `new`'s entries, each merged into the one at its
/// place ([`merge_table`]).
fn merge_tables(old: &mut ArrayOfTables, new: ArrayOfTables) {
    while old.len() > new.len() {
        old.remove(old.len() - 1);
    }
    for (i, table) in new.into_iter().enumerate() {
        match old.get_mut(i) {
            Some(o) => merge_table(o, table),
            None => old.push(table),
        }
    }
}

/// Makes the value `old` hold `new`: unchanged, it keeps its text; inline tables and arrays
/// are merged key by key and element by element; a changed scalar keeps the spaces and
/// comment around it.
fn merge_value(old: &mut Value, new: Value) {
    match (&mut *old, new) {
        (Value::InlineTable(o), Value::InlineTable(n)) => merge_inline(o, n),
        (Value::Array(o), Value::Array(n)) => {
            while o.len() > n.len() {
                o.remove(o.len() - 1);
            }
            for (i, v) in n.into_iter().enumerate() {
                match o.get_mut(i) {
                    Some(ov) => merge_value(ov, v),
                    None => o.push(v),
                }
            }
        }
        (o, n) if same(o, &n) => {}
        (o, mut n) => {
            *n.decor_mut() = o.decor().clone();
            *o = n;
        }
    }
}

/// Whether two scalars are the same value (however each is written).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::String(x), Value::String(y)) => x.value() == y.value(),
        (Value::Integer(x), Value::Integer(y)) => x.value() == y.value(),
        (Value::Float(x), Value::Float(y)) => x.value().to_bits() == y.value().to_bits(),
        (Value::Boolean(x), Value::Boolean(y)) => x.value() == y.value(),
        _ => false,
    }
}

/// Writes `text` to `path` atomically: a temporary file in the same directory (created
/// readable by its owner alone, then given the original's permissions and, where allowed,
/// its owner), fsync, rename over `path` (a symbolic link's target, which stays a link), then
/// fsync of the directory so that the rename survives a crash. A reader sees the old text or
/// the new, never a part; on an error the original is untouched and the temporary file
/// removed.
pub fn write_atomically(path: &Path, text: &str) -> io::Result<()> {
    // Through a link to its target, so that the link stays one.
    let target = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let name = target
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => Path::new(".").to_path_buf(),
    };
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{:016x}.tmp", rand::random::<u64>()));
    let tmp = dir.join(tmp_name);
    let written = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        if let Ok(meta) = fs::metadata(&target) {
            f.set_permissions(meta.permissions())?;
            // Only root may give a file away; anyone else keeps it as theirs.
            let _ = std::os::unix::fs::fchown(&f, Some(meta.uid()), Some(meta.gid()));
        }
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, &target)?;
        // The rename is done; a file system that cannot fsync a directory still has it.
        if let Ok(d) = fs::File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;
    use serde_json::json;

    const FILE: &str = "\
# tern's configuration (top comment)

[server]
http = \"127.0.0.1:8080\" # the HTTP listener

# The live app (before).
[[app]]
name = \"live\"
token = 'literal-token' # inside live
streams = [
  \"cam\", # the camera
  \"desk\",
]
idle_grace_s = 0x10
# before record
[app.record]
enabled = true # record it
# before the source
[[app.source]]
stream = \"cam\" # the camera's stream
url = \"rtsp://u:p@cam/1\"
# after live, before other

[[app]]
name = \"other\" # the other app
renditions = [{ rid = \"m\", height = 360, bitrate_kbps = 800 }]

# The HLS section (after the apps).
[hls]
window = 9 # segments
# the end
";

    /// Every comment line (or trailing comment) of [`FILE`] that `text` must still hold.
    fn comments(text: &str) -> Vec<&str> {
        text.lines()
            .filter_map(|l| l.find('#').map(|i| l[i..].trim()))
            .collect()
    }

    fn edited(f: &ConfigFile) -> Config {
        let text = f.to_string();
        Config::parse(&text, "edited").unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    fn assert_keeps(text: &str, comments_of: &str, except: &[&str]) {
        for c in comments(comments_of) {
            if !except.contains(&c) {
                assert!(text.contains(c), "lost {c:?}:\n{text}");
            }
        }
    }

    #[test]
    fn a_new_app_is_appended_and_every_comment_kept() {
        let mut f = ConfigFile::parse(FILE).expect("parses");
        let created = f
            .put_app(
                "new",
                &json!({
                    "token": "t",
                    "streams": ["a", "b"],
                    "dynamic": false,
                    "record": {"enabled": true, "segment_s": 60},
                    "admission": {"url": "http://127.0.0.1:9/admit", "on_error": "allow"},
                    "renditions": [{"rid": "m", "height": 360, "bitrate_kbps": 800}],
                    "source": [{"stream": "door", "url": "rtsp://cam/2", "on_demand": false}],
                }),
            )
            .expect("put");
        assert!(created);
        let text = f.to_string();
        assert_keeps(&text, FILE, &[]);
        // After the last app, before what follows the apps.
        let apps_end = FILE.find("# The HLS section").expect("hls");
        assert!(text.starts_with(&FILE[..apps_end]), "{text}");
        assert!(text.ends_with(&FILE[apps_end..]), "{text}");
        let c = edited(&f);
        let new = c.app("new").expect("new app");
        assert_eq!(new.token.as_deref(), Some("t"));
        assert_eq!(new.streams, ["a", "b"]);
        assert!(!new.dynamic && new.record.enabled && new.record.segment_s == 60);
        let admission = new.admission.as_ref().expect("admission");
        assert_eq!(admission.on_error, crate::OnError::Allow);
        assert_eq!(new.renditions[0].height, 360);
        assert_eq!(new.sources[0].stream, "door");
        assert!(!new.sources[0].on_demand);
        // (serde_json's objects list their keys in order.)
        assert!(
            text.contains("[[app.source]]\non_demand = false\n"),
            "{text}"
        );
        assert!(
            text.contains("renditions = [{ bitrate_kbps = 800,"),
            "{text}"
        );
        // The apps before it are as they were.
        assert_eq!(c.app("live").expect("live").idle_grace_s, 16);
        assert_eq!(c.hls.window, 9);
        // An app in a file without any.
        let mut f = ConfigFile::parse("# only a comment\n").expect("parses");
        assert!(f.put_app("a", &json!({"name": "a"})).expect("put"));
        assert_eq!(f.to_string(), "# only a comment\n\n[[app]]\nname = \"a\"\n");
        // After the closing comment of a file with tables, and before nothing.
        let text = "[server]\ncname = \"x\"\n[server.nested]\n[hls]\nwindow = 9\n# the end";
        let mut f = ConfigFile::parse(text).expect("parses");
        assert!(f.put_app("a", &json!({})).expect("put"));
        assert_eq!(f.to_string(), format!("{text}\n\n[[app]]\nname = \"a\"\n"));
    }

    #[test]
    fn an_app_is_replaced_in_place() {
        let mut f = ConfigFile::parse(FILE).expect("parses");
        let created = f
            .put_app(
                "live",
                &json!({
                    "name": "live",
                    "token": "literal-token",
                    "streams": ["cam", "desk", "door"],
                    "idle_grace_s": 16,
                    "record": {"enabled": false},
                    "source": [{"stream": "cam", "url": "rtsp://u:p@cam/1", "transport": "udp"}],
                }),
            )
            .expect("put");
        assert!(!created);
        let text = f.to_string();
        // Unchanged values keep their text and comment; a changed one its comment.
        assert!(
            text.contains("token = 'literal-token' # inside live"),
            "{text}"
        );
        assert!(text.contains("idle_grace_s = 0x10"), "{text}");
        assert!(text.contains("\"cam\", # the camera"), "{text}");
        assert!(text.contains("enabled = false # record it"), "{text}");
        assert_keeps(&text, FILE, &[]);
        let c = edited(&f);
        let live = c.app("live").expect("live");
        assert_eq!(live.streams, ["cam", "desk", "door"]);
        assert!(!live.record.enabled);
        assert_eq!(live.sources[0].transport, crate::SourceTransport::Udp);
        assert_eq!(c.apps.len(), 2);
        // PUT replaces: keys left out go, the entry stays where it was.
        assert!(!f.put_app("live", &json!({})).expect("put"));
        let text = f.to_string();
        assert!(
            !text.contains("token") && !text.contains("[app.record]"),
            "{text}"
        );
        assert_keeps(
            &text,
            FILE,
            &[
                "# inside live",
                "# the camera",
                "# before record",
                "# record it",
                "# before the source",
                "# the camera's stream",
            ],
        );
        let c = edited(&f);
        assert_eq!(
            c.apps[0],
            Config::parse("[[app]]\nname = \"live\"\n", "x")
                .expect("valid")
                .apps[0]
        );
        assert_eq!(c.apps[1].name, "other");
    }

    #[test]
    fn an_app_is_deleted() {
        let mut f = ConfigFile::parse(FILE).expect("parses");
        assert!(f.delete_app("live"));
        assert!(!f.delete_app("live"));
        let text = f.to_string();
        let c = edited(&f);
        assert_eq!(c.apps.len(), 1);
        assert_eq!(c.apps[0].name, "other");
        // The comments of the entry go with it; every other stays.
        assert_keeps(
            &text,
            FILE,
            &[
                "# The live app (before).",
                "# inside live",
                "# the camera",
                "# before record",
                "# record it",
                "# before the source",
                "# the camera's stream",
            ],
        );
        assert!(f.delete_app("other"));
        assert!(!f.to_string().contains("[[app]]"));
        edited(&f);
    }

    #[test]
    fn sources_are_put_and_deleted() {
        let mut f = ConfigFile::parse(FILE).expect("parses");
        let door = json!({"url": "rtsps://cam/door", "tls_verify": false});
        assert!(f.put_source("live", "door", &door).expect("put"));
        assert!(!f.put_source("live", "door", &door).expect("again"));
        assert!(
            f.put_source(
                "other",
                "door",
                &json!({"stream": "door", "url": "rtsp://c/x"})
            )
            .expect("put")
        );
        let text = f.to_string();
        assert_keeps(&text, FILE, &[]);
        let c = edited(&f);
        let live = c.app("live").expect("live");
        assert_eq!(live.sources.len(), 2);
        assert_eq!(live.source("door").map(|s| s.tls_verify), Some(false));
        assert_eq!(c.app("other").expect("other").sources.len(), 1);
        // The new entry goes after the app's last one, before the next app.
        let door_at = text.find("stream = \"door\"").expect("door");
        assert!(
            door_at < text.find("name = \"other\"").expect("other"),
            "{text}"
        );

        // Replacing keeps the entry's comments.
        let cam = json!({"stream": "cam", "url": "rtsp://u:p@cam/2"});
        assert!(!f.put_source("live", "cam", &cam).expect("replace"));
        let text = f.to_string();
        assert!(
            text.contains("stream = \"cam\" # the camera's stream"),
            "{text}"
        );
        assert_keeps(&text, FILE, &[]);

        assert!(f.delete_source("live", "door"));
        assert!(!f.delete_source("live", "door"));
        assert!(!f.delete_source("nowhere", "cam"));
        assert!(f.delete_source("other", "door"));
        let text = f.to_string();
        assert!(
            !text.contains("[[app.source]]\nstream = \"door\""),
            "{text}"
        );
        assert_keeps(&text, FILE, &[]);
        assert_eq!(edited(&f).app("live").expect("live").sources.len(), 1);

        let e = f.put_source("nowhere", "cam", &cam).expect_err("no app");
        assert!(
            matches!(e, ConfigError::NoApp { ref name } if name == "nowhere"),
            "{e}"
        );
        let e = f
            .put_source("live", "cam", &json!({"stream": "other"}))
            .expect_err("stream differs");
        assert!(e.to_string().contains("app.source.stream"), "{e}");
    }

    #[test]
    fn json_values_convert_and_null_is_refused() {
        let mut f = ConfigFile::parse("").expect("parses");
        f.put_app(
            "a",
            &json!({
                "int": 7, "neg": -3, "float": 1.5, "whole_float": 2.0, "yes": true,
                "s": "q\"uote\n", "list": [1, 2], "mixed": [1, "x"], "nested": {"deep": {"k": 1}},
                "objs": [{"a": 1}], "empty": [],
            }),
        )
        .expect("put");
        let text = f.to_string();
        let back: toml::Table = text.parse().expect("valid TOML");
        let app = &back["app"][0];
        assert_eq!(app["int"].as_integer(), Some(7));
        assert_eq!(app["neg"].as_integer(), Some(-3));
        assert_eq!(app["float"].as_float(), Some(1.5));
        assert_eq!(app["whole_float"].as_float(), Some(2.0));
        assert_eq!(app["yes"].as_bool(), Some(true));
        assert_eq!(app["s"].as_str(), Some("q\"uote\n"));
        assert_eq!(app["list"].as_array().map(Vec::len), Some(2));
        assert_eq!(app["mixed"][1].as_str(), Some("x"));
        assert_eq!(app["nested"]["deep"]["k"].as_integer(), Some(1));
        assert_eq!(app["objs"][0]["a"].as_integer(), Some(1));
        assert_eq!(app["empty"].as_array().map(Vec::len), Some(0));
        assert!(text.contains("[app.nested.deep]"), "{text}");

        for (bad, key) in [
            (json!({"token": null}), "app.token"),
            (json!({"record": {"path": null}}), "app.record.path"),
            (json!({"streams": ["a", null]}), "app.streams[1]"),
            (json!({"source": [{"url": null}]}), "app.source[0].url"),
            (json!({"big": u64::MAX}), "app.big"),
            (json!({"name": "b"}), "app.name"),
            (json!(["not", "an", "object"]), "app"),
        ] {
            let before = f.to_string();
            let e = f.put_app("a", &bad).expect_err(key);
            assert!(
                matches!(&e, ConfigError::Invalid { key: k, .. } if k == key),
                "{bad}: {e}"
            );
            assert_eq!(f.to_string(), before, "an error leaves the text as it was");
        }
    }

    #[test]
    fn inline_app_arrays_and_bad_text_are_refused() {
        let mut f = ConfigFile::parse("app = [{ name = \"a\" }]\n").expect("parses");
        assert!(f.put_app("a", &json!({})).is_err());
        assert!(f.put_source("a", "s", &json!({})).is_err());
        assert!(!f.delete_app("a") && !f.delete_source("a", "s"));
        let e = ConfigFile::parse("[server\n").expect_err("syntax");
        assert!(matches!(e, ConfigError::Parse { .. }), "{e}");
    }

    #[test]
    fn files_are_replaced_whole_with_their_mode() {
        let dir = std::env::temp_dir().join(format!("tern-edit-{:x}", rand::random::<u64>()));
        fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("tern.toml");
        fs::write(&path, "old\n").expect("write");
        fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o640))
            .expect("chmod");
        write_atomically(&path, "new\n").expect("replace");
        assert_eq!(fs::read_to_string(&path).expect("read"), "new\n");
        let mode = fs::metadata(&path).expect("meta").permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o640
        );
        // Through a link, the target is replaced and the link stays.
        let link = dir.join("link.toml");
        std::os::unix::fs::symlink(&path, &link).expect("link");
        write_atomically(&link, "linked\n").expect("through the link");
        assert!(
            fs::symlink_metadata(&link)
                .expect("meta")
                .file_type()
                .is_symlink()
        );
        assert_eq!(fs::read_to_string(&path).expect("read"), "linked\n");
        // A new file is its owner's alone; no temporary file is left behind.
        let fresh = dir.join("fresh.toml");
        write_atomically(&fresh, "x").expect("new");
        let mode = fs::metadata(&fresh).expect("meta").permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
        assert!(write_atomically(&dir.join("no/such/dir.toml"), "x").is_err());
        let names: Vec<_> = fs::read_dir(&dir)
            .expect("list")
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");
        fs::remove_dir_all(&dir).expect("clean");
    }
}
