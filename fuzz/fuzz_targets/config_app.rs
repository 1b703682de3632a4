//! The configuration file and the config API's edits. Input: the file's text, a 0 byte, then
//! a JSON text. Reading any text (`Config::parse_all`) never panics; and when the text is TOML
//! and the JSON parses, putting it as app `a` and as source `s` of `a` (`ConfigFile`), then
//! deleting them, never panics and always leaves text that is TOML again, which
//! `Config::parse_all` reads without panicking.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tern_config::{Config, ConfigFile};

fuzz_target!(|data: &[u8]| {
    let (text, json) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let _ = Config::parse_all(text, "fuzz");
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(json) else {
        return;
    };
    let Ok(mut file) = ConfigFile::parse(text) else {
        return;
    };
    let app = file.put_app("a", &json);
    let source = file.put_source("a", "s", &json);
    let edited = file.to_string();
    if let Err(e) = ConfigFile::parse(&edited) {
        panic!("put ({app:?}, {source:?}) made text that is not TOML: {e}\n{edited}");
    }
    let _ = Config::parse_all(&edited, "fuzz");
    file.delete_source("a", "s");
    file.delete_app("a");
    let deleted = file.to_string();
    if let Err(e) = ConfigFile::parse(&deleted) {
        panic!("delete made text that is not TOML: {e}\n{deleted}");
    }
    let _ = Config::parse_all(&deleted, "fuzz");
});
