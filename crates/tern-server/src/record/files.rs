//! Recorded files on disk: the `record.path` template (expanded to name a new file,
//! matched to find an app's files again), the listing `GET /v1/recordings` returns, and the
//! `delete_after_s` sweep.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tern_rtc::hls::file::{FileHead, moof_end, parse_head};

use crate::config::{AppConfig, RecordConfig};

/// Directories walked below a template's fixed root when looking for files.
const MAX_DEPTH: usize = 8;
/// Files a listing reads at most (per app).
const MAX_FILES: usize = 10_000;
/// A moof larger than this is not read (a part of 60 s of 50 Mbit/s video has a moof of a
/// few hundred KiB at most).
const MAX_MOOF: u64 = 8 << 20;

/// `(year, month, day, hour, minute, second)` of a Unix time in seconds, UTC.
pub fn civil(unix_s: u64) -> (i64, u32, u32, u32, u32, u32) {
    let days = (unix_s / 86_400) as i64;
    let secs = unix_s % 86_400;
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y,
        m,
        d,
        (secs / 3600) as u32,
        (secs / 60 % 60) as u32,
        (secs % 60) as u32,
    )
}

/// RFC 3339 (UTC, ms) of a Unix time in ms.
pub fn rfc3339(unix_ms: u64) -> String {
    let (y, mo, d, h, mi, s) = civil(unix_ms / 1000);
    format!(
        "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{:03}Z",
        unix_ms % 1000
    )
}

/// The template expanded for `app/stream` at `unix_s`, with `.mp4` added.
pub fn expand(template: &str, app: &str, stream: &str, unix_s: u64) -> PathBuf {
    let (y, mo, d, h, mi, s) = civil(unix_s);
    let mut out = String::with_capacity(template.len() + 32);
    let mut rest = template;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let fields: [(&str, String); 9] = [
            ("%app", app.to_string()),
            ("%stream", stream.to_string()),
            ("%Y", format!("{y:04}")),
            ("%m", format!("{mo:02}")),
            ("%d", format!("{d:02}")),
            ("%H", format!("{h:02}")),
            ("%M", format!("{mi:02}")),
            ("%S", format!("{s:02}")),
            ("%%", "%".into()),
        ];
        match fields.iter().find(|(f, _)| rest.starts_with(f)) {
            Some((f, v)) => {
                out.push_str(v);
                rest = &rest[f.len()..];
            }
            // The config check allows no other field.
            None => {
                out.push('%');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out.push_str(".mp4");
    PathBuf::from(out)
}

/// A free name for a new file: `path`, else `path` with `-1`, `-2`… before `.mp4`.
pub fn free_name(path: &Path) -> PathBuf {
    if !path.exists() {
        return path.to_path_buf();
    }
    let stem = path.with_extension("");
    (1..1000)
        .map(|i| PathBuf::from(format!("{}-{i}.mp4", stem.display())))
        .find(|p| !p.exists())
        .unwrap_or_else(|| path.to_path_buf())
}

/// One token of a template, for matching paths against it.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Lit(char),
    /// A name (`%app`, `%stream`): 1-64 of `[A-Za-z0-9._-]`, captured at index 0 or 1.
    Name(usize),
    /// `n` digits.
    Digits(usize),
}

fn tokens(template: &str, app: Option<&str>) -> Vec<Tok> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(c) = rest.chars().next() {
        let fields: [(&str, Option<Tok>); 9] = [
            ("%app", None),
            ("%stream", Some(Tok::Name(1))),
            ("%Y", Some(Tok::Digits(4))),
            ("%m", Some(Tok::Digits(2))),
            ("%d", Some(Tok::Digits(2))),
            ("%H", Some(Tok::Digits(2))),
            ("%M", Some(Tok::Digits(2))),
            ("%S", Some(Tok::Digits(2))),
            ("%%", Some(Tok::Lit('%'))),
        ];
        if c == '%'
            && let Some((f, t)) = fields.iter().find(|(f, _)| rest.starts_with(f))
        {
            match (t, app) {
                (Some(t), _) => out.push(t.clone()),
                (None, Some(a)) => out.extend(a.chars().map(Tok::Lit)),
                (None, None) => out.push(Tok::Name(0)),
            }
            rest = &rest[f.len()..];
            continue;
        }
        out.push(Tok::Lit(c));
        rest = &rest[c.len_utf8()..];
    }
    out
}

fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// Matches `s` against `toks`; names captured into `caps`.
fn matches<'a>(toks: &[Tok], s: &'a str, caps: &mut [Option<&'a str>; 2]) -> bool {
    let Some(t) = toks.first() else {
        // A collision suffix (`-N`) may follow the expanded template.
        return s.is_empty()
            || s.strip_prefix('-')
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
    };
    match t {
        Tok::Lit(c) => s
            .strip_prefix(*c)
            .is_some_and(|r| matches(&toks[1..], r, caps)),
        Tok::Digits(n) => {
            s.len() >= *n
                && s.as_bytes()[..*n].iter().all(u8::is_ascii_digit)
                && matches(&toks[1..], &s[*n..], caps)
        }
        Tok::Name(i) => {
            let max = s.chars().take_while(|c| name_char(*c)).count().min(64);
            (1..=max).rev().any(|len| {
                let saved = *caps;
                caps[*i] = Some(&s[..len]);
                if matches(&toks[1..], &s[len..], caps) {
                    return true;
                }
                *caps = saved;
                false
            })
        }
    }
}

/// The stream a file of app `app` belongs to, when `path` (without `.mp4`) is one the
/// template makes.
pub fn stream_of(template: &str, app: &str, path: &Path) -> Option<String> {
    let s = path.to_str()?.strip_suffix(".mp4")?;
    // A template without a folder is walked from "."; its paths come back as "./…".
    let s = match template.starts_with("./") {
        true => s,
        false => s.strip_prefix("./").unwrap_or(s),
    };
    let toks = tokens(template, Some(app));
    let mut caps = [None, None];
    matches(&toks, s, &mut caps).then(|| caps[1].unwrap_or("").to_string())
}

/// The fixed directory a template's files are under: its path up to the first component
/// with a `%` field.
fn root(template: &str) -> PathBuf {
    let mut root = PathBuf::new();
    let comps: Vec<&str> = template.split('/').collect();
    for (i, c) in comps.iter().enumerate() {
        if c.contains('%') || i + 1 == comps.len() {
            break;
        }
        if c.is_empty() && i == 0 {
            root.push("/");
        } else {
            root.push(c);
        }
    }
    if root.as_os_str().is_empty() {
        root.push(".");
    }
    root
}

fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    if depth > MAX_DEPTH || out.len() >= MAX_FILES {
        return;
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let Ok(ft) = e.file_type() else { continue };
        let p = e.path();
        if ft.is_dir() {
            walk(&p, depth + 1, out);
        } else if ft.is_file() && p.extension().is_some_and(|x| x == "mp4") {
            out.push(p);
            if out.len() >= MAX_FILES {
                return;
            }
        }
    }
}

/// A file of an app, as `GET /v1/recordings` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct FileEntry {
    /// Its path, as the template made it.
    pub path: PathBuf,
    /// App and stream.
    pub app: String,
    /// Stream name.
    pub stream: String,
    /// Recording start, Unix ms (from the file).
    pub start_ms: u64,
    /// Seconds of media: the finished file's, else up to its last complete fragment.
    pub duration_s: f64,
    /// File size.
    pub bytes: u64,
    /// RFC 6381 codecs of its tracks.
    pub codecs: String,
    /// Last modification.
    pub modified: SystemTime,
}

impl FileEntry {
    /// The JSON object of the listing.
    pub fn json(&self) -> serde_json::Value {
        let name = self
            .path
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned());
        serde_json::json!({
            "path": self.path.to_string_lossy(),
            "app": self.app,
            "stream": self.stream,
            "file": name,
            "url": format!("/v1/recordings/{}/{}/{}", self.app, self.stream, name),
            "start": rfc3339(self.start_ms),
            "duration_s": (self.duration_s * 1000.0).round() / 1000.0,
            "bytes": self.bytes,
            "codecs": self.codecs,
        })
    }
}

/// Reads a file's head and, when it was not finished, walks its fragments to the last
/// complete one. `None` for a file that is not a recording.
pub fn probe(path: &Path) -> Option<(FileHead, f64)> {
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    let mut head = vec![0u8; len.min(64 << 10) as usize];
    f.read_exact(&mut head).ok()?;
    let h = parse_head(&head)?;
    if h.duration_ms > 0 {
        return Some((h.clone(), h.duration_ms as f64 / 1000.0));
    }
    let (track, timescale) = h.driver;
    let mut at = h.len as u64;
    let mut end = 0u64;
    let mut hdr = [0u8; 8];
    use std::io::{Seek, SeekFrom};
    while at + 8 <= len {
        f.seek(SeekFrom::Start(at)).ok()?;
        f.read_exact(&mut hdr).ok()?;
        let size = u64::from(u32::from_be_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]));
        if size < 8 || at + size > len {
            break;
        }
        if &hdr[4..] == b"moof" && size <= MAX_MOOF {
            let mut moof = vec![0u8; size as usize];
            moof[..8].copy_from_slice(&hdr);
            f.read_exact(&mut moof[8..]).ok()?;
            let next = at + size;
            // A fragment counts when its mdat is complete too.
            let mut mdat = [0u8; 8];
            let complete = f.read_exact(&mut mdat).is_ok() && {
                let msize = u64::from(u32::from_be_bytes([mdat[0], mdat[1], mdat[2], mdat[3]]));
                &mdat[4..] == b"mdat" && next + msize <= len
            };
            if complete && let Some(e) = moof_end(&moof, track) {
                end = end.max(e);
            }
        }
        at += size;
    }
    Some((h, end as f64 / f64::from(timescale.max(1))))
}

/// Every file of `app` under its template (at most [`MAX_FILES`]), oldest first.
pub fn app_files(app: &AppConfig, stream: Option<&str>) -> Vec<FileEntry> {
    let rec: &RecordConfig = &app.record;
    let mut paths = Vec::new();
    walk(&root(&rec.path), 0, &mut paths);
    let mut out: Vec<FileEntry> = paths
        .into_iter()
        .filter_map(|p| {
            let s = stream_of(&rec.path, &app.name, &p)?;
            if stream.is_some_and(|want| want != s) {
                return None;
            }
            let meta = std::fs::metadata(&p).ok()?;
            let (h, duration_s) = probe(&p)?;
            Some(FileEntry {
                app: app.name.clone(),
                stream: s,
                start_ms: h.start_unix_ms,
                duration_s,
                bytes: meta.len(),
                codecs: h.codecs,
                modified: meta.modified().unwrap_or(UNIX_EPOCH),
                path: p,
            })
        })
        .collect();
    out.sort_by(|a, b| (a.start_ms, &a.path).cmp(&(b.start_ms, &b.path)));
    out
}

/// The file of `app`/`stream` named `file` (its last path component), if the app's
/// template makes it: what `GET /v1/recordings/{app}/{stream}/{file}` serves. Reads no file.
pub fn find(app: &AppConfig, stream: &str, file: &str) -> Option<PathBuf> {
    let mut paths = Vec::new();
    walk(&root(&app.record.path), 0, &mut paths);
    paths.into_iter().find(|p| {
        p.file_name().is_some_and(|n| *n == *file)
            && stream_of(&app.record.path, &app.name, p).as_deref() == Some(stream)
    })
}

/// Deletes the files of `app` last written more than `delete_after_s` ago, except those in
/// `open` (being written). Returns the paths deleted. Only files the app's template
/// matches are candidates; nothing else in the folders is touched.
pub fn sweep(app: &AppConfig, open: &[PathBuf], now: SystemTime) -> Vec<PathBuf> {
    let keep = app.record.delete_after_s;
    if keep == 0 {
        return Vec::new();
    }
    let Some(cutoff) = now.checked_sub(Duration::from_secs(keep)) else {
        return Vec::new();
    };
    let mut paths = Vec::new();
    walk(&root(&app.record.path), 0, &mut paths);
    let mut deleted = Vec::new();
    for p in paths {
        if open.contains(&p) || stream_of(&app.record.path, &app.name, &p).is_none() {
            continue;
        }
        let old = std::fs::metadata(&p)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t < cutoff);
        if old && std::fs::remove_file(&p).is_ok() {
            deleted.push(p);
        }
    }
    deleted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_time_and_templates() {
        // 2026-11-25T16:00:00Z
        assert_eq!(civil(1_795_622_400), (2026, 11, 25, 16, 0, 0));
        assert_eq!(civil(0), (1970, 1, 1, 0, 0, 0));
        assert_eq!(civil(951_782_400), (2000, 2, 29, 0, 0, 0));
        assert_eq!(rfc3339(1_795_622_400_123), "2026-11-25T16:00:00.123Z");
        let t = "rec/%app/%stream/%Y-%m-%d_%H-%M-%S";
        let p = expand(t, "live", "cam.1", 1_795_622_400);
        assert_eq!(p, PathBuf::from("rec/live/cam.1/2026-11-25_16-00-00.mp4"));
        assert_eq!(stream_of(t, "live", &p).as_deref(), Some("cam.1"));
        let suffixed = PathBuf::from("rec/live/cam.1/2026-11-25_16-00-00-2.mp4");
        assert_eq!(stream_of(t, "live", &suffixed).as_deref(), Some("cam.1"));
        assert_eq!(stream_of(t, "other", &p), None);
        assert_eq!(
            stream_of(t, "live", Path::new("rec/live/cam/notes.mp4")),
            None
        );
        // Names next to each other and a literal %.
        let t2 = "/r/%app-%stream_%Y%%";
        let p2 = expand(t2, "a-b", "c-d", 0);
        assert_eq!(p2, PathBuf::from("/r/a-b-c-d_1970%.mp4"));
        assert_eq!(stream_of(t2, "a-b", &p2).as_deref(), Some("c-d"));
        assert_eq!(root(t), PathBuf::from("rec"));
        assert_eq!(root(t2), PathBuf::from("/r"));
        assert_eq!(root("%stream"), PathBuf::from("."));
    }
}
