//! Every ```toml block in `docs/` is a whole tern configuration file: each one is loaded
//! through [`Config::parse`] (which also validates it), so an example cannot drift from the
//! keys, types and ranges the server accepts. A block that truly cannot stand alone is
//! marked ```toml,ignore and skipped.

use std::path::{Path, PathBuf};

use tern_server::config::Config;

/// The blocks the documentation must hold at least; it has more. Guards against a walk that
/// silently finds nothing (a moved folder, a changed fence).
const AT_LEAST: usize = 5;

/// One fenced block: where it starts (the fence's line, 1-based) and its text.
struct Block {
    file: PathBuf,
    line: usize,
    text: String,
}

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            markdown_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "md") {
            out.push(path);
        }
    }
}

/// The ```toml blocks of one Markdown text, without those marked `ignore`.
fn toml_blocks(file: &Path, text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, bool, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let fence = line.trim_start();
        match &mut open {
            None => {
                if let Some(info) = fence.strip_prefix("```") {
                    let mut tags = info.split(',').map(str::trim);
                    let is_toml = tags.next() == Some("toml");
                    let ignored = tags.any(|t| t == "ignore");
                    open = Some((i + 1, is_toml && !ignored, String::new()));
                }
            }
            Some((start, wanted, body)) => {
                if fence.trim_end() == "```" {
                    if *wanted {
                        blocks.push(Block {
                            file: file.to_path_buf(),
                            line: *start,
                            text: std::mem::take(body),
                        });
                    }
                    open = None;
                } else {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
    }
    assert!(
        open.is_none(),
        "{}: a code block is never closed",
        file.display()
    );
    blocks
}

#[test]
fn every_toml_example_in_docs_loads() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
    let mut files = Vec::new();
    markdown_files(&docs, &mut files);
    files.sort();
    let mut blocks = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        blocks.extend(toml_blocks(f, &text));
    }
    let failures: Vec<String> = blocks
        .iter()
        .filter_map(|b| {
            let shown = b.file.strip_prefix(&docs).unwrap_or(&b.file).display();
            let origin = format!("docs/{shown}:{}", b.line);
            Config::parse(&b.text, &origin).err().map(|e| {
                // A parse error names the origin itself; a bad value names only its key.
                let e = e.to_string();
                if e.contains(&origin) {
                    e
                } else {
                    format!("{origin}: {e}")
                }
            })
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} ```toml blocks in docs/ are not valid tern configuration files \
         (file:line is the block's opening fence; a TOML parse error's line counts from the \
         block's first line):\n{}",
        failures.len(),
        blocks.len(),
        failures.join("\n")
    );
    assert!(
        blocks.len() >= AT_LEAST,
        "only {} ```toml blocks found under {} (at least {AT_LEAST} expected)",
        blocks.len(),
        docs.display()
    );
    eprintln!(
        "{} ```toml blocks in {} files under docs/ load",
        blocks.len(),
        files.len()
    );
}

#[test]
fn the_block_finder_skips_ignored_blocks_and_counts_lines() {
    let md = "# t\n\n```toml\n[server]\n```\n\n```toml,ignore\nfragment\n```\n\n  ```toml\n  [hls]\n  ```\n```sh\nls\n```\n";
    let found = toml_blocks(Path::new("x.md"), md);
    let lines: Vec<usize> = found.iter().map(|b| b.line).collect();
    assert_eq!(lines, [3, 11]);
    assert_eq!(found[0].text, "[server]\n");
    assert_eq!(found[1].text, "  [hls]\n");
}
