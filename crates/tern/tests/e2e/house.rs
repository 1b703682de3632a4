//! The house rules of the source tree, checked on every test run (issue 17): **no module
//! imports one that imports it** (directly or around a longer circle), and **no source file
//! passes 1,000 lines before its tests**. A circle means two files cannot be read, tested or
//! changed apart; a file past a thousand lines holds more than one idea.
//!
//! What counts, per crate (every `lib.rs`, `main.rs` and `src/bin/*.rs` is the root of a
//! module tree found by following its `mod name;` lines):
//! - a file's code is what stands before its tests: the first column-0 `#[cfg(test)]` whose
//!   next item is a `mod`. Comments, strings and character literals are blanked first.
//! - file A imports file B when that code names a path into B: a `use` (brace groups
//!   expanded), or an inline `crate::…`, `super::…`, `self::…`, or `child::…` for a child
//!   module A declares. A path resolves to the longest module prefix that is a file, so
//!   `crate::Foo` (an item of the root) imports the root file and `super::Foo` the parent
//!   file. A path through a name the root gives another crate (`pub use tern_config as
//!   config;`: `crate::config::Config`) leaves the crate and imports nothing. `mod child;`
//!   lines are not imports: a parent may declare children and re-export from them, as long as
//!   the children then take nothing from the parent file.
//!
//! The checker works on an in-memory map of files so that its own tests below can feed it
//! small crates with and without circles; the two real tests load the workspace from disk.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Most lines a source file may hold before its tests.
const MAX_LINES: usize = 1000;

/// A module path inside one crate: `[]` is the root, `["media", "engine"]` is
/// `crate::media::engine`.
type ModPath = Vec<String>;

/// One file of a module tree.
#[derive(Debug)]
struct ModFile {
    /// Its path relative to the crate's `src/`.
    file: PathBuf,
    /// Where it sits in the tree.
    module: ModPath,
    /// Its code before its tests, with comments and literals blanked.
    code: String,
}

/// An import of one file by another, with the line that shows it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Edge {
    from: PathBuf,
    to: PathBuf,
    line: usize,
    path: String,
}

/// The line at which a file's tests begin (0-based), or its length.
fn tests_start(src: &str) -> usize {
    let lines: Vec<&str> = src.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if l.trim_end() != "#[cfg(test)]" {
            continue;
        }
        let next = lines[i + 1..]
            .iter()
            .map(|l| l.trim())
            .find(|l| !l.is_empty() && !l.starts_with("#["));
        if next.is_some_and(|l| l.starts_with("mod ") || l.starts_with("pub mod ")) {
            return i;
        }
    }
    lines.len()
}

/// The code before the tests, with comments, strings and character literals replaced by
/// spaces (newlines kept, so line numbers stay right). Lifetimes are kept.
fn strip(src: &str) -> String {
    let head: Vec<&str> = src.lines().take(tests_start(src)).collect();
    let c: Vec<char> = head.join("\n").chars().collect();
    let mut out = String::with_capacity(c.len());
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut i = 0;
    while i < c.len() {
        let prev_ident = i > 0 && ident(c[i - 1]);
        match c[i] {
            '/' if c.get(i + 1) == Some(&'/') => {
                while i < c.len() && c[i] != '\n' {
                    i += 1;
                }
            }
            '/' if c.get(i + 1) == Some(&'*') => {
                let mut depth = 0;
                while i < c.len() {
                    if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                        depth += 1;
                        i += 2;
                    } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        blank(&mut out, c[i]);
                        i += 1;
                    }
                }
            }
            'r' | 'b' if !prev_ident && raw_string_start(&c, i).is_some() => {
                let (hashes, body) = raw_string_start(&c, i).unwrap_or_default();
                i = body;
                while i < c.len() {
                    if c[i] == '"' && (0..hashes).all(|k| c.get(i + 1 + k) == Some(&'#')) {
                        i += 1 + hashes;
                        break;
                    }
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
            '"' => {
                i += 1;
                while i < c.len() && c[i] != '"' {
                    if c[i] == '\\' {
                        blank(&mut out, c[i]);
                        i += 1;
                    }
                    if i < c.len() {
                        blank(&mut out, c[i]);
                        i += 1;
                    }
                }
                i += 1;
            }
            '\'' if c.get(i + 1) == Some(&'\\') => {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            }
            '\'' if c.get(i + 2) == Some(&'\'') => i += 3,
            ch => {
                out.push(ch);
                i += 1;
            }
        }
    }
    out
}

/// At `c[i]`, the start of a raw string (`r"`, `r#"`, `br"`): the number of `#`s and the
/// index of its first character.
fn raw_string_start(c: &[char], i: usize) -> Option<(usize, usize)> {
    let mut j = i;
    if c.get(j) == Some(&'b') {
        j += 1;
    }
    if c.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while c.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    (c.get(j) == Some(&'"')).then_some((hashes, j + 1))
}

/// `mod name;` declarations in stripped code (any visibility, attributes ignored).
fn declared_children(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in code.lines() {
        let mut t = line.trim();
        if let Some(rest) = t.strip_prefix("pub") {
            t = rest.trim_start();
            if t.starts_with('(') {
                t = t.split_once(')').map_or("", |(_, r)| r.trim_start());
            }
        }
        if let Some(rest) = t.strip_prefix("mod ")
            && let Some(name) = rest.trim().strip_suffix(';')
        {
            out.push(name.trim().to_string());
        }
    }
    out
}

/// The module tree under `roots` (paths relative to `src/`), following `mod` lines through
/// the files in `files`.
fn module_tree(files: &BTreeMap<PathBuf, String>, root: &Path) -> Vec<ModFile> {
    let mut out = Vec::new();
    let mut todo = vec![(root.to_path_buf(), ModPath::new())];
    while let Some((file, module)) = todo.pop() {
        let Some(src) = files.get(&file) else {
            continue;
        };
        let code = strip(src);
        // Children of `a.rs` live in `a/`; of `lib.rs`, `main.rs`, `mod.rs`, beside them.
        let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let dir = file.parent().unwrap_or(Path::new("")).to_path_buf();
        let child_dir = if module.is_empty() || stem == "mod" {
            dir
        } else {
            dir.join(stem)
        };
        for child in declared_children(&code) {
            let flat = child_dir.join(format!("{child}.rs"));
            let nested = child_dir.join(&child).join("mod.rs");
            let path = if files.contains_key(&flat) {
                flat
            } else {
                nested
            };
            let mut m = module.clone();
            m.push(child);
            todo.push((path, m));
        }
        out.push(ModFile { file, module, code });
    }
    out
}

/// Expands one `use` tree (`a::{b, c::{d as e, *}}`) into its paths.
fn expand_use(tree: &str) -> Vec<String> {
    fn go(prefix: &str, t: &str, out: &mut Vec<String>) {
        let t = t.trim();
        if let Some(open) = t.find('{') {
            let head = t[..open].trim().trim_end_matches("::").trim();
            let inner = t[open + 1..t.rfind('}').unwrap_or(t.len())].to_string();
            let base = join(prefix, head);
            let mut depth = 0;
            let mut start = 0;
            let b = inner.as_bytes();
            for k in 0..=b.len() {
                let at_end = k == b.len();
                if !at_end && b[k] == b'{' {
                    depth += 1;
                } else if !at_end && b[k] == b'}' {
                    depth -= 1;
                } else if at_end || (b[k] == b',' && depth == 0) {
                    let part = inner[start..k].trim();
                    if !part.is_empty() {
                        go(&base, part, out);
                    }
                    start = k + 1;
                }
            }
        } else {
            let t = t.split(" as ").next().unwrap_or(t).trim();
            let t = t.trim_end_matches("::*").trim_end_matches('*');
            if t == "self" {
                out.push(prefix.to_string());
            } else {
                out.push(join(prefix, t));
            }
        }
    }
    fn join(a: &str, b: &str) -> String {
        match (a.is_empty(), b.is_empty()) {
            (true, _) => b.to_string(),
            (_, true) => a.to_string(),
            _ => format!("{a}::{b}"),
        }
    }
    let mut out = Vec::new();
    go("", tree, &mut out);
    out
}

/// Inline modules (`mod name { … }`) of stripped code: (start, end, name) byte spans.
fn inline_modules(code: &str) -> Vec<(usize, usize, String)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(k) = code[from..].find("mod ") {
        let s = from + k;
        from = s + 4;
        if s > 0 && (b[s - 1].is_ascii_alphanumeric() || b[s - 1] == b'_') {
            continue;
        }
        let rest = code[s + 4..].trim_start();
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let after = rest[name.len()..].trim_start();
        if name.is_empty() || !after.starts_with('{') {
            continue;
        }
        let open = code.len() - after.len();
        let mut depth = 0;
        let mut end = code.len();
        for (i, ch) in code[open..].char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push((open, end, name));
    }
    out
}

/// The paths a file's code names, with their (1-based) lines and the inline modules they
/// stand in: every `use` path and every inline path that starts at `crate`, `super`, `self`
/// or one of the file's child modules.
fn named_paths(code: &str, children: &[String]) -> Vec<(usize, String, Vec<String>)> {
    let inline = inline_modules(code);
    let inside = |pos: usize| -> Vec<String> {
        inline
            .iter()
            .filter(|(s, e, _)| *s < pos && pos < *e)
            .map(|(_, _, n)| n.clone())
            .collect()
    };
    let line_of = |pos: usize| code[..pos].matches('\n').count() + 1;
    // `pub(in crate::x)` is visibility, not a path to import.
    let code_nv = blank_visibility(code);
    let code = code_nv.as_str();
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < bytes.len() {
        if !ident(bytes[i]) || (i > 0 && (ident(bytes[i - 1]) || bytes[i - 1] == b'$')) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && ident(bytes[i]) {
            i += 1;
        }
        let word = &code[start..i];
        if word == "use" {
            let end = code[i..].find(';').map_or(code.len(), |e| i + e);
            for p in expand_use(&code[i..end]) {
                out.push((line_of(start), p, inside(start)));
            }
            i = end;
            continue;
        }
        let preceded_by_path = code[..start].trim_end().ends_with("::");
        let leads =
            matches!(word, "crate" | "super" | "self") || children.iter().any(|c| c == word);
        if !leads || preceded_by_path || !code[i..].trim_start().starts_with("::") {
            continue;
        }
        // Collect `word::seg::seg`.
        let mut path = word.to_string();
        let mut j = i;
        loop {
            let rest = &code[j..];
            let trimmed = rest.trim_start();
            let Some(after) = trimmed.strip_prefix("::") else {
                break;
            };
            let after_ws = after.trim_start();
            let seg: String = after_ws
                .bytes()
                .take_while(|&b| ident(b))
                .map(char::from)
                .collect();
            if seg.is_empty() {
                break;
            }
            j += rest.len() - after_ws.len() + seg.len();
            path.push_str("::");
            path.push_str(&seg);
        }
        out.push((line_of(start), path, inside(start)));
        i = j;
    }
    out
}

/// `pub(in path)` with the path blanked.
fn blank_visibility(code: &str) -> String {
    let mut out = code.to_string();
    let mut from = 0;
    while let Some(k) = out[from..].find("pub(in ") {
        let s = from + k;
        let e = out[s..].find(')').map_or(out.len(), |e| s + e);
        let blanked: String = out[s..e]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        out.replace_range(s..e, &blanked);
        from = e;
    }
    out
}

/// The names a crate root gives other crates (`pub use other_crate as name;`), from its
/// stripped code: a path through one leaves the crate.
fn crate_aliases(root_code: &str) -> BTreeSet<String> {
    let children = declared_children(root_code);
    let mut out = BTreeSet::new();
    for line in root_code.lines() {
        let mut t = line.trim();
        if let Some(rest) = t.strip_prefix("pub") {
            t = rest.trim_start();
            if t.starts_with('(') {
                t = t.split_once(')').map_or("", |(_, r)| r.trim_start());
            }
        }
        let Some((from, name)) = t
            .strip_prefix("use ")
            .and_then(|r| r.trim().strip_suffix(';'))
            .and_then(|r| r.split_once(" as "))
        else {
            continue;
        };
        let from = from.trim().trim_start_matches("::");
        let ident = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_');
        if ident(from)
            && !matches!(from, "crate" | "self" | "super")
            && !children.iter().any(|c| c == from)
        {
            out.insert(name.trim().to_string());
        }
    }
    out
}

/// Resolves `path`, named in module `at`, to the module file it reaches (the longest
/// prefix that is a module), or None for a path that leaves the crate (another crate's, or
/// one through a name of `aliases`, the root's names for other crates).
fn resolve(
    path: &str,
    at: &ModPath,
    modules: &BTreeSet<ModPath>,
    children: &[String],
    aliases: &BTreeSet<String>,
) -> Option<ModPath> {
    let segs: Vec<&str> = path.split("::").map(str::trim).collect();
    let mut m: ModPath;
    let mut k = 0;
    match segs.first().copied()? {
        "crate" => {
            m = ModPath::new();
            k = 1;
        }
        "super" | "self" => {
            m = at.clone();
            while k < segs.len() && matches!(segs[k], "super" | "self") {
                if segs[k] == "super" {
                    m.pop()?;
                }
                k += 1;
            }
        }
        first if children.iter().any(|c| c == first) => m = at.clone(),
        _ => return None,
    }
    for s in &segs[k..] {
        m.push((*s).to_string());
    }
    if m.first().is_some_and(|first| aliases.contains(first)) {
        return None;
    }
    // The longest prefix that is a module file (inline modules belong to their file).
    while !modules.contains(&m) {
        m.pop()?;
    }
    Some(m)
}

/// Every import between two files of one module tree.
fn edges(tree: &[ModFile]) -> Vec<Edge> {
    let modules: BTreeSet<ModPath> = tree.iter().map(|f| f.module.clone()).collect();
    let file_of: BTreeMap<&ModPath, &PathBuf> = tree.iter().map(|f| (&f.module, &f.file)).collect();
    let aliases = tree
        .iter()
        .find(|f| f.module.is_empty())
        .map(|root| crate_aliases(&root.code))
        .unwrap_or_default();
    let mut out = BTreeMap::new();
    for f in tree {
        let children = declared_children(&f.code);
        for (line, path, inline) in named_paths(&f.code, &children) {
            let mut at = f.module.clone();
            at.extend(inline);
            let Some(target) = resolve(&path, &at, &modules, &children, &aliases) else {
                continue;
            };
            let Some(&to) = file_of.get(&target) else {
                continue;
            };
            if *to == f.file {
                continue;
            }
            out.entry((f.file.clone(), to.clone())).or_insert(Edge {
                from: f.file.clone(),
                to: to.clone(),
                line,
                path,
            });
        }
    }
    out.into_values().collect()
}

/// The circles among `edges`: each strongly connected set of more than one file, with the
/// edges inside it (Tarjan's algorithm).
fn circles(edges: &[Edge]) -> Vec<Vec<Edge>> {
    let nodes: BTreeSet<&PathBuf> = edges.iter().flat_map(|e| [&e.from, &e.to]).collect();
    let idx: BTreeMap<&PathBuf, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let n = nodes.len();
    let mut adj = vec![Vec::new(); n];
    for e in edges {
        adj[idx[&e.from]].push(idx[&e.to]);
    }
    struct T {
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        sccs: Vec<Vec<usize>>,
    }
    fn visit(v: usize, adj: &[Vec<usize>], t: &mut T) {
        t.index[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on[v] = true;
        for &w in &adj[v] {
            match t.index[w] {
                None => {
                    visit(w, adj, t);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(iw) if t.on[w] => t.low[v] = t.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on[w] = false;
                scc.push(w);
                if w == v {
                    break;
                }
            }
            t.sccs.push(scc);
        }
    }
    let mut t = T {
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        sccs: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            visit(v, &adj, &mut t);
        }
    }
    let names: Vec<&PathBuf> = nodes.into_iter().collect();
    t.sccs
        .into_iter()
        .filter(|s| s.len() > 1)
        .map(|s| {
            let set: BTreeSet<&PathBuf> = s.iter().map(|&i| names[i]).collect();
            edges
                .iter()
                .filter(|e| set.contains(&e.from) && set.contains(&e.to))
                .cloned()
                .collect()
        })
        .collect()
}

/// The roots of a crate's module trees: `lib.rs`, `main.rs`, `bin/*.rs`.
fn roots(files: &BTreeMap<PathBuf, String>) -> Vec<PathBuf> {
    files
        .keys()
        .filter(|p| {
            let s = p.to_string_lossy();
            s == "lib.rs" || s == "main.rs" || (p.parent() == Some(Path::new("bin")))
        })
        .cloned()
        .collect()
}

/// The circles of one crate (files relative to its `src/`), described for a reader.
fn crate_circles(files: &BTreeMap<PathBuf, String>) -> Vec<String> {
    let mut out = Vec::new();
    for root in roots(files) {
        let tree = module_tree(files, &root);
        for circle in circles(&edges(&tree)) {
            let mut text = String::from("circle:");
            for e in circle {
                text.push_str(&format!(
                    "\n    {} -> {} ({}:{}: `{}`)",
                    e.from.display(),
                    e.to.display(),
                    e.from.display(),
                    e.line,
                    e.path
                ));
            }
            out.push(text);
        }
    }
    out
}

/// Files with more than [`MAX_LINES`] lines before their tests, as `(file, lines)`.
fn long_files(files: &BTreeMap<PathBuf, String>) -> Vec<(PathBuf, usize)> {
    files
        .iter()
        .map(|(p, src)| (p.clone(), tests_start(src)))
        .filter(|&(_, n)| n > MAX_LINES)
        .collect()
}

/// Every `.rs` file under `dir`, keyed by its path relative to `dir`.
fn load(dir: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(base, &p, out);
            } else if p.extension().is_some_and(|x| x == "rs")
                && let (Ok(rel), Ok(text)) = (p.strip_prefix(base), std::fs::read_to_string(&p))
            {
                out.insert(rel.to_path_buf(), text);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The workspace's source folders: each crate's `src/` and the bench baselines'.
fn source_dirs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .flatten()
        .map(|e| e.path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    dirs.push(root.join("bench/baselines/src"));
    dirs.sort();
    assert!(dirs.len() >= 7, "found only {dirs:?}");
    dirs
}

#[test]
fn no_module_imports_one_that_imports_it() {
    let _slot = crate::common::slot();
    let mut found = Vec::new();
    let mut files = 0;
    for dir in source_dirs() {
        let crate_files = load(&dir);
        files += crate_files.len();
        for c in crate_circles(&crate_files) {
            found.push(format!("{}: {c}", dir.display()));
        }
    }
    assert!(files > 50, "read only {files} files");
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
fn no_source_file_passes_1000_lines_before_its_tests() {
    let _slot = crate::common::slot();
    let mut dirs = source_dirs();
    dirs.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/fuzz_targets"));
    let mut long = Vec::new();
    for dir in dirs {
        for (file, n) in long_files(&load(&dir)) {
            long.push(format!("{}: {n} lines", dir.join(file).display()));
        }
    }
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines before their tests:\n{}",
        long.join("\n")
    );
}

/// `Server::start` reads as the list of the server's parts in the order they start (issue
/// 51): each part has its own start function, so the list stays short. Counted from its
/// `pub fn` line to its closing brace.
#[test]
fn server_start_stays_a_short_list_of_parts() {
    let _slot = crate::common::slot();
    const MAX: usize = 60;
    let lib = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tern-server/src/lib.rs"),
    )
    .expect("tern-server's lib.rs");
    let lines: Vec<&str> = lib.lines().collect();
    let first = lines
        .iter()
        .position(|l| l.starts_with("    pub fn start(cfg: Config"))
        .expect("Server::start in lib.rs");
    let len = lines[first..]
        .iter()
        .position(|l| *l == "    }")
        .expect("the end of Server::start")
        + 1;
    assert!(
        len < MAX,
        "Server::start is {len} lines (under {MAX} wanted): give the new part a start function of its own"
    );
}

/// Ingest surfaces (and the session layer under every surface) must not import the HTTP
/// side: a file is one when its path starts with one of these (relative to `src/`).
const BELOW_HTTP: [&str; 7] = [
    "rtmp.rs", "rtmp/", "srt.rs", "srt/", "rtsp.rs", "rtsp/", "session/",
];

/// Imports of `http/` by an ingest surface or the session layer, described for a reader.
fn http_imports(files: &BTreeMap<PathBuf, String>) -> Vec<String> {
    let mut out = Vec::new();
    for root in roots(files) {
        for e in edges(&module_tree(files, &root)) {
            let from = e.from.to_string_lossy();
            if BELOW_HTTP.iter().any(|p| from.starts_with(p)) && e.to.starts_with("http") {
                out.push(format!(
                    "{} imports {} ({}:{}: `{}`)",
                    e.from.display(),
                    e.to.display(),
                    e.from.display(),
                    e.line,
                    e.path
                ));
            }
        }
    }
    out
}

/// The modules a crate root declares (`mod x;`, `pub mod x;`) that its doc's module map
/// (a table whose rows start with `` | `x.rs` `` or `` | `x/` ``) does not name, and the
/// rows that name no declared module.
fn map_mismatches(root_src: &str) -> Vec<String> {
    let code = strip(root_src);
    let declared: BTreeSet<String> = declared_children(&code).into_iter().collect();
    let mut mapped = BTreeSet::new();
    for line in root_src.lines() {
        let Some(row) = line.trim_start().strip_prefix("//! | `") else {
            continue;
        };
        let Some(name) = row.split('`').next() else {
            continue;
        };
        let name = name.trim_end_matches(".rs").trim_end_matches('/');
        if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            mapped.insert(name.to_string());
        }
    }
    let mut out: Vec<String> = declared
        .difference(&mapped)
        .map(|m| format!("module `{m}` is missing from the module map"))
        .collect();
    out.extend(
        mapped
            .difference(&declared)
            .map(|m| format!("the module map names `{m}`, which is not a module")),
    );
    out
}

#[test]
fn no_ingest_surface_or_the_session_layer_imports_http() {
    let _slot = crate::common::slot();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tern-server/src");
    let files = load(&dir);
    assert!(
        files.keys().any(|p| p.starts_with("session")),
        "no session/ in {dir:?}"
    );
    let found = http_imports(&files);
    assert!(found.is_empty(), "imports of http/:\n{}", found.join("\n"));
}

#[test]
fn the_servers_module_map_names_every_module() {
    let _slot = crate::common::slot();
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tern-server/src/lib.rs");
    let src = std::fs::read_to_string(lib).expect("tern-server's lib.rs");
    let found = map_mismatches(&src);
    assert!(
        found.is_empty(),
        "tern-server/src/lib.rs:\n{}",
        found.join("\n")
    );
}

/// The files of a crate that use `unsafe` (the keyword in code, comments and strings aside).
fn unsafe_files(files: &BTreeMap<PathBuf, String>) -> Vec<PathBuf> {
    files
        .iter()
        .filter(|(_, src)| {
            let code = strip(src);
            code.match_indices("unsafe").any(|(i, _)| {
                let before = code[..i].chars().next_back();
                let after = code[i + "unsafe".len()..].chars().next();
                let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
                !word(before) && !word(after)
            })
        })
        .map(|(p, _)| p.clone())
        .collect()
}

#[test]
fn unsafe_stays_in_the_servers_syscall_module() {
    let _slot = crate::common::slot();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tern-server/src");
    let files = load(&dir);
    let found = unsafe_files(&files);
    assert_eq!(
        found,
        [PathBuf::from("media/socket.rs")],
        "only media/socket.rs (its `sys` module) may use unsafe"
    );
    for (p, src) in &files {
        if p != Path::new("media/socket.rs") {
            assert!(
                !strip(src).contains("allow(unsafe_code)"),
                "{} allows unsafe code",
                p.display()
            );
        }
    }
}

// The checker's own tests: it must find what it is for and nothing else.

fn crate_of(files: &[(&str, &str)]) -> BTreeMap<PathBuf, String> {
    files
        .iter()
        .map(|(p, s)| (PathBuf::from(p), (*s).to_string()))
        .collect()
}

#[test]
fn checker_finds_a_direct_circle() {
    let _slot = crate::common::slot();
    let c = crate_of(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", "use crate::b::Thing;\npub struct A;\n"),
        (
            "b.rs",
            "pub struct Thing;\nfn f() -> crate::a::A { todo!() }\n",
        ),
    ]);
    let found = crate_circles(&c);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("a.rs -> b.rs (a.rs:1: `crate::b::Thing`)"),
        "{}",
        found[0]
    );
    assert!(
        found[0].contains("b.rs -> a.rs (b.rs:2: `crate::a::A`)"),
        "{}",
        found[0]
    );
}

#[test]
fn checker_finds_a_circle_of_three_through_a_brace_group() {
    let _slot = crate::common::slot();
    let c = crate_of(&[
        ("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n"),
        ("a.rs", "use crate::{b::X, c::{self as cc}};\n"),
        ("b.rs", "use crate::c::Y;\n"),
        ("c.rs", "use crate::a;\n"),
    ]);
    let found = crate_circles(&c);
    assert_eq!(found.len(), 1, "{found:?}");
    for e in ["a.rs -> b.rs", "b.rs -> c.rs", "c.rs -> a.rs"] {
        assert!(found[0].contains(e), "{e} missing: {}", found[0]);
    }
}

#[test]
fn checker_sees_a_child_taking_from_the_parent_that_reexports_it() {
    let _slot = crate::common::slot();
    let c = crate_of(&[
        ("lib.rs", "pub mod sdp;\n"),
        (
            "sdp.rs",
            "mod parse;\npub use parse::Thing;\npub struct Item;\n",
        ),
        ("sdp/parse.rs", "use super::Item;\npub struct Thing;\n"),
    ]);
    let found = crate_circles(&c);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("sdp/parse.rs -> sdp.rs"), "{}", found[0]);
}

#[test]
fn checker_accepts_children_that_use_siblings_only() {
    let _slot = crate::common::slot();
    let c = crate_of(&[
        ("lib.rs", "pub mod sdp;\nuse sdp::Thing;\n"),
        (
            "sdp/mod.rs",
            "mod model;\nmod parse;\npub use model::Item;\npub use parse::*;\n",
        ),
        ("sdp/model.rs", "pub struct Item;\n"),
        (
            "sdp/parse.rs",
            "use super::model::Item;\npub fn p() -> super::model::Item { Item }\npub struct Thing;\n",
        ),
    ]);
    assert_eq!(crate_circles(&c), Vec::<String>::new());
}

#[test]
fn checker_ignores_comments_strings_and_tests() {
    let _slot = crate::common::slot();
    let c = crate_of(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", "use crate::b::B;\n"),
        (
            "b.rs",
            concat!(
                "//! See [`crate::a::A`].\n",
                "/// Like `crate::a::A`. /* crate::a::A */\n",
                "pub struct B<'a>(&'a str);\n",
                "const S: &str = \"crate::a::A\";\n",
                "const R: &str = r#\"use crate::a::A; \"quoted\"\"#;\n",
                "const C: char = '\"';\n",
                "#[cfg(test)]\n",
                "mod tests {\n",
                "    use crate::a::A;\n",
                "}\n",
            ),
        ),
    ]);
    assert_eq!(crate_circles(&c), Vec::<String>::new());
}

#[test]
fn checker_resolves_super_inside_an_inline_module_to_its_own_file() {
    let _slot = crate::common::slot();
    let c = crate_of(&[
        ("lib.rs", "mod sys;\npub use sys::Alloc;\n"),
        (
            "sys.rs",
            "pub struct Alloc;\nmod inner {\n    use super::Alloc;\n    fn f() -> super::Alloc { Alloc }\n}\n",
        ),
    ]);
    assert_eq!(crate_circles(&c), Vec::<String>::new());
    // While the same line at the top of sys.rs reaches the root.
    let c = crate_of(&[
        (
            "lib.rs",
            "mod sys;\npub use sys::Alloc;\npub struct Root;\n",
        ),
        ("sys.rs", "pub struct Alloc;\nuse super::Root;\n"),
    ]);
    assert_eq!(crate_circles(&c).len(), 1);
}

#[test]
fn checker_does_not_mistake_other_crates_paths_for_children() {
    let _slot = crate::common::slot();
    // `stream` is a child of lib.rs, but `tern_rtc::stream::X` is another crate's.
    let c = crate_of(&[
        ("lib.rs", "mod stream;\nmod a;\nuse a::A;\n"),
        (
            "a.rs",
            "use other::stream::X;\npub struct A(other::stream::Y);\n",
        ),
        ("stream.rs", "use crate::a::A;\n"),
    ]);
    assert_eq!(crate_circles(&c), Vec::<String>::new());
}

#[test]
fn checker_lets_a_path_through_another_crates_alias_leave_the_crate() {
    let _slot = crate::common::slot();
    // tern-server's `pub use tern_config as config;`: `crate::config::X` is tern-config's.
    let c = crate_of(&[
        (
            "lib.rs",
            "pub use other_crate as config;\nmod a;\nuse a::A;\n",
        ),
        (
            "a.rs",
            "use crate::config::Config;\npub struct A(super::config::Limits);\n",
        ),
    ]);
    assert_eq!(crate_circles(&c), Vec::<String>::new());
    // A name the root re-exports from one of its own modules stays in the crate.
    let c = crate_of(&[
        (
            "lib.rs",
            "mod b;\npub use b as config;\nmod a;\nuse a::A;\n",
        ),
        ("a.rs", "use crate::config::Config;\npub struct A;\n"),
        ("b.rs", "pub struct Config;\n"),
    ]);
    assert_eq!(crate_circles(&c).len(), 1);
}

#[test]
fn checker_counts_lines_before_the_tests_only() {
    let _slot = crate::common::slot();
    let body = |n: usize| "fn f() {}\n".repeat(n);
    let tests = "#[cfg(test)]\nmod tests {\n}\n".to_string() + &body(2000);
    let c = crate_of(&[
        ("lib.rs", &(body(1000) + &tests)),
        ("long.rs", &body(1001)),
        (
            "gated.rs",
            &(body(990) + "#[cfg(test)]\nfn helper() {}\n" + &body(20)),
        ),
    ]);
    assert_eq!(
        long_files(&c),
        vec![
            (PathBuf::from("gated.rs"), 1012),
            (PathBuf::from("long.rs"), 1001)
        ]
    );
}

#[test]
fn checker_finds_an_ingest_surface_importing_http() {
    let _slot = crate::common::slot();
    let files = crate_of(&[
        ("lib.rs", "mod http;\nmod rtmp;\nmod session;\n"),
        ("http/mod.rs", "pub struct AppState;\n"),
        (
            "rtmp.rs",
            "use crate::session::Core;\nuse crate::http::AppState;\n",
        ),
        ("session/mod.rs", "pub struct Core;\n"),
    ]);
    let found = http_imports(&files);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("rtmp.rs imports http/mod.rs"),
        "{found:?}"
    );
    let clean = crate_of(&[
        ("lib.rs", "mod http;\nmod rtmp;\nmod session;\n"),
        ("http/mod.rs", "use crate::session::Core;\n"),
        ("rtmp.rs", "use crate::session::Core;\n"),
        ("session/mod.rs", "pub struct Core;\n"),
    ]);
    assert!(http_imports(&clean).is_empty());
}

#[test]
fn checker_finds_a_module_missing_from_the_map() {
    let _slot = crate::common::slot();
    let lib = "//! | where | what |\n//! | --- | --- |\n//! | `media/` | media |\n//! | `gone.rs` | was |\n\npub mod media;\nmod rtmp;\n";
    assert_eq!(
        map_mismatches(lib),
        vec![
            "module `rtmp` is missing from the module map".to_string(),
            "the module map names `gone`, which is not a module".to_string(),
        ]
    );
}

/// The `[patch.crates-io]` lines of a Cargo manifest, with `path` values made absolute
/// against `dir` (the manifest's folder).
fn patches(manifest: &str, dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut inside = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == "[patch.crates-io]";
            continue;
        }
        let Some((name, value)) = line.split_once('=').filter(|_| inside) else {
            continue;
        };
        let path = value.split('"').nth(1).unwrap_or_default();
        let full = dir.join(path);
        let full = full.canonicalize().unwrap_or(full);
        out.insert(format!("{} -> {}", name.trim(), full.display()));
    }
    out
}

/// The fuzz crate is a workspace of its own: it builds the server's crates against the same
/// patched dependencies as the root, or it does not build at all (CI stop 43: the fuzz build
/// failed on a method only the vendored dimpl has).
#[test]
fn the_fuzz_workspace_takes_the_roots_patches() {
    let _slot = crate::common::slot();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let read = |p: &Path| std::fs::read_to_string(p).expect("read a manifest");
    let want = patches(&read(&root.join("Cargo.toml")), &root);
    let fuzz = root.join("fuzz");
    let have = patches(&read(&fuzz.join("Cargo.toml")), &fuzz);
    assert!(
        !want.is_empty(),
        "the root patches nothing: is the checker still right?"
    );
    assert_eq!(
        have, want,
        "fuzz/Cargo.toml's [patch.crates-io] differs from the root's"
    );
}

/// Every end-to-end test starts by taking a slot (`common::slot`) or its module's lock and
/// then a slot (`common::serial`): libtest starts them all at once in CI, and the slots are
/// what keeps `E2E_THREADS` of them working (common/slot.rs). A test without one would run
/// beside three others.
#[test]
fn every_end_to_end_test_takes_a_slot_first() {
    let _slot = crate::common::slot();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e");
    let mut tests = 0;
    let mut without = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/e2e")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    files.sort();
    for file in files {
        let src = std::fs::read_to_string(&file).expect("read a test file");
        let lines: Vec<&str> = src.lines().collect();
        for (i, _) in lines.iter().enumerate().filter(|(_, l)| **l == "#[test]") {
            tests += 1;
            let Some(f) = lines[i..].iter().position(|l| l.starts_with("fn ")) else {
                without.push(format!("{}:{}: no fn after #[test]", file.display(), i + 1));
                continue;
            };
            let first = lines[i + f + 1..]
                .iter()
                .find(|l| !l.trim_start().starts_with("use "))
                .copied()
                .unwrap_or_default();
            let takes = [
                "crate::common::slot()",
                "crate::common::serial(&",
                "one_at_a_time()",
            ]
            .iter()
            .any(|t| first.contains(t));
            if !takes {
                without.push(format!(
                    "{}:{}: {}",
                    file.display(),
                    i + f + 1,
                    lines[i + f]
                ));
            }
        }
    }
    assert!(tests > 100, "found only {tests} tests in {}", dir.display());
    assert!(
        without.is_empty(),
        "tests that do not take a slot first (common/slot.rs):\n{}",
        without.join("\n")
    );
}
