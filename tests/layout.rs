//! The shape of the source tree that the docs describe (docs/architecture.md §9).

/// `server/` starts `cluster/` and hands it channels; `cluster/` never imports anything
/// of `server/` (the messages both use live in `src/messages.rs`).
#[test]
fn the_cluster_module_imports_nothing_of_the_server_module() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cluster");
    let mut files = 0;
    let mut paths: Vec<std::path::PathBuf> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    while let Some(path) = paths.pop() {
        if path.is_dir() {
            paths.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        files += 1;
        for (n, line) in text.lines().enumerate() {
            assert!(!line.contains("crate::server"), "{}:{}: {line}", path.display(), n + 1);
        }
    }
    assert!(files >= 4, "read {files} files of src/cluster");
    let messages = std::fs::read_to_string(dir.join("../messages.rs")).unwrap();
    assert!(!messages.contains("crate::server"), "src/messages.rs imports server/");
}

/// The client's layers (src/client/mod.rs, "Structure"): each file has a rank, and an
/// import may only point at a file of a lower rank — never back up, never sideways. A
/// file not in the table fails the test, so a new file is placed on purpose.
const CLIENT_RANKS: &[(&str, u32)] = &[
    // Leaves: the core's names, plain data, the reconnect schedule.
    ("core/ids.rs", 0),
    ("error.rs", 1),
    ("outcome.rs", 1),
    ("place.rs", 1),
    ("backoff.rs", 1),
    // The sans-IO core, bottom to top.
    ("core/session.rs", 2),
    ("core/orphans.rs", 2),
    ("core/claims.rs", 2),
    ("core/slot.rs", 3),
    ("core/domain_record.rs", 3),
    ("core/net.rs", 4),
    ("core/routing.rs", 5),
    ("core/domains.rs", 5),
    ("core/members.rs", 6),
    ("core/cx.rs", 7),
    ("core/acquire.rs", 8),
    ("core/release.rs", 8),
    ("core/read.rs", 8),
    ("core/watch.rs", 8),
    ("core/resolve.rs", 9),
    ("core/ops.rs", 10),
    ("core/mod.rs", 11),
    ("core/cancel.rs", 12),
    ("core/acquires.rs", 12),
    // The I/O around it.
    ("io/sync.rs", 13),
    ("io/cell.rs", 14),
    ("io/conn.rs", 14),
    ("io/dial.rs", 14),
    ("io/oneoff.rs", 15),
    ("io/shared.rs", 15),
    ("io/shared_tests.rs", 16),
    ("io/reader.rs", 16),
    ("io/driver.rs", 16),
    ("io/mod.rs", 17),
    // The API.
    ("lock.rs", 18),
    ("admin.rs", 19),
    ("direct.rs", 19),
    ("calls.rs", 19),
    ("api.rs", 20),
    ("tls.rs", 20),
    ("callback.rs", 21),
    ("hold.rs", 22),
    ("builder.rs", 21),
    ("mod.rs", 23),
];

/// Most lines a client source file may have: one concept per file.
const CLIENT_FILE_LINES_MAX: usize = 520;

fn client_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/client")
}

/// Every `.rs` file under src/client but the test modules kept in files of their own,
/// as a path relative to it (`core/net.rs`).
fn client_files() -> Vec<String> {
    src_files()
        .into_iter()
        .filter_map(|f| f.strip_prefix("client/").map(str::to_owned))
        // A `#[cfg(test)]` module kept in a file of its own (`net.rs`'s `net_tests.rs`)
        // is test code, as a `mod tests` at the end of a file is.
        .filter(|f| !f.ends_with("_tests.rs"))
        .collect()
}

/// The code of a file without comments and without its `#[cfg(test)]` module.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module paths a file's code names (`super::net::Net`, `crate::client::io::Handle`,
/// each leaf of a `use a::{b, c::d}` tree), as segment lists relative to src/client.
fn client_paths(file: &str, code: &str) -> Vec<Vec<String>> {
    // The module the file is: `core/net.rs` → ["core", "net"]; `core/mod.rs` → ["core"].
    let mut me: Vec<String> = file.trim_end_matches(".rs").split('/').map(str::to_owned).collect();
    if me.last().is_some_and(|m| m == "mod") {
        me.pop();
    }
    let mut out = Vec::new();
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let boundary = at == 0 || !rest.as_bytes()[at - 1].is_ascii_alphanumeric();
        let end = rest[at..].find(';').map_or(rest.len(), |e| at + e);
        if boundary {
            expand_use_tree("", &rest[at + 4..end], &mut paths);
        }
        rest = &rest[end.min(rest.len() - 1) + 1..];
    }
    // Paths written inline in the code.
    for token in code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')) {
        if token.starts_with("super::") || token.starts_with("crate::client::") {
            paths.push(token.to_owned());
        }
    }
    for path in paths {
        let path = path.trim().trim_start_matches("pub(crate) ").to_owned();
        let segments: Vec<&str> = path.split("::").map(str::trim).filter(|s| !s.is_empty()).collect();
        let resolved = match segments.first() {
            Some(&"super") | Some(&"self") => {
                let mut base = me.clone();
                let mut rest = &segments[..];
                while let Some((first, tail)) = rest.split_first() {
                    match *first {
                        "super" => {
                            base.pop();
                        }
                        "self" => {}
                        _ => break,
                    }
                    rest = tail;
                }
                base.extend(rest.iter().map(|s| s.to_string()));
                base
            }
            Some(&"crate") if segments.get(1) == Some(&"client") => {
                segments[2..].iter().map(|s| s.to_string()).collect()
            }
            _ => continue,
        };
        out.push(resolved);
    }
    out
}

/// The file a path lands in: the deepest module it names (`core::net::Net` →
/// `core/net.rs`; `core::Outcome` → `core/mod.rs`; `Client` → `mod.rs`).
fn file_of(path: &[String]) -> String {
    let dir = client_dir();
    let mut at: Vec<String> = Vec::new();
    for segment in path {
        let mut next = at.clone();
        next.push(segment.clone());
        let joined = next.join("/");
        if dir.join(format!("{joined}.rs")).is_file() || dir.join(&joined).join("mod.rs").is_file() {
            at = next;
        } else {
            break;
        }
    }
    let joined = at.join("/");
    if at.is_empty() {
        "mod.rs".to_owned()
    } else if dir.join(&joined).join("mod.rs").is_file() {
        format!("{joined}/mod.rs")
    } else {
        format!("{joined}.rs")
    }
}

#[test]
fn the_client_modules_import_only_downward() {
    let rank = |file: &str| CLIENT_RANKS.iter().find(|(f, _)| *f == file).map(|(_, r)| *r);
    let mut problems = Vec::new();
    let files = client_files();
    assert!(files.len() >= 20, "read {} client files", files.len());
    for file in &files {
        let Some(mine) = rank(file) else {
            problems.push(format!("src/client/{file} has no rank in CLIENT_RANKS (tests/layout.rs)"));
            continue;
        };
        let text = std::fs::read_to_string(client_dir().join(file)).unwrap();
        for path in client_paths(file, &code_of(&text)) {
            let target = file_of(&path);
            if target == *file {
                continue;
            }
            let theirs = rank(&target).unwrap_or(u32::MAX);
            if theirs >= mine {
                problems.push(format!(
                    "src/client/{file} (rank {mine}) imports {} from src/client/{target} (rank {theirs})",
                    path.join("::")
                ));
            }
        }
    }
    problems.sort();
    problems.dedup();
    assert!(problems.is_empty(), "arrows that do not run down:\n{}", problems.join("\n"));
}

#[test]
fn the_client_modules_are_small() {
    let mut long = Vec::new();
    for file in client_files() {
        let lines = std::fs::read_to_string(client_dir().join(&file)).unwrap().lines().count();
        if lines > CLIENT_FILE_LINES_MAX {
            long.push(format!("src/client/{file}: {lines} lines"));
        }
    }
    assert!(long.is_empty(), "over {CLIENT_FILE_LINES_MAX} lines:\n{}", long.join("\n"));
}

/// The checker itself: a back-up arrow is found, in a use-tree and inline.
#[test]
fn the_layout_checker_sees_an_arrow_back_up() {
    let code = "use super::{cx::Cx, net::{Net, Target}};\nfn f() { super::super::io::Handle::x(); }";
    let paths = client_paths("core/acquire.rs", code);
    let files: Vec<String> = paths.iter().map(|p| file_of(p)).collect();
    assert!(files.contains(&"core/cx.rs".to_owned()), "{files:?}");
    assert!(files.contains(&"core/net.rs".to_owned()), "{files:?}");
    assert!(files.contains(&"io/mod.rs".to_owned()), "{files:?}");
}

/// The client's core decides and never does I/O (src/client/core/mod.rs): no sockets,
/// no threads, no clock, no randomness of its own — so the simulator can drive it.
#[test]
fn the_client_core_does_no_io() {
    let forbidden = [
        "std::net",
        "TcpStream",
        "std::thread",
        "thread::",
        "Instant::now",
        "SystemTime",
        "std::fs",
        "std::io",
        "Mutex",
        "Condvar",
        "rand",
    ];
    let mut found = Vec::new();
    let mut files = 0;
    for file in client_files().into_iter().filter(|f| f.starts_with("core/")) {
        files += 1;
        let text = std::fs::read_to_string(client_dir().join(&file)).unwrap();
        for (n, line) in code_of(&text).lines().enumerate() {
            for word in forbidden {
                if line.contains(word) {
                    found.push(format!("src/client/{file}:{}: {word}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(files >= 8, "read {files} core files");
    assert!(found.is_empty(), "I/O in the client's core:\n{}", found.join("\n"));
}

/// The client's control flow never reads server prose: what a server's answer means
/// comes from its kind and its fields (an `M`, an error code, an `X` in its place in
/// the handshake), so a reworded message can never change what the client does.
/// (STATUS's `name=value` lines are data with a documented format, read by name.)
#[test]
fn the_client_never_decides_on_the_wording_of_a_message() {
    let mut found = Vec::new();
    for file in client_files() {
        let text = std::fs::read_to_string(client_dir().join(&file)).unwrap();
        for (n, line) in code_of(&text).lines().enumerate() {
            if line.contains(".contains(\"") || line.contains(".find(\"") || line.contains(".starts_with(\"")
            {
                found.push(format!("src/client/{file}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "matching on message text:\n{}", found.join("\n"));
}

// ----- the import graph of the whole of src/ -----------------------------------------

/// Most lines a source file may have: a file holds one concept.
const SRC_FILE_LINES_MAX: usize = 700;

/// Every `.rs` file of the library (src/, without the binary's `main.rs`), as a path
/// relative to src/ (`server/outbox.rs`).
fn src_files() -> Vec<String> {
    fn walk(dir: &std::path::Path, base: &std::path::Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, base, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path.strip_prefix(base).unwrap().to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let base = src_dir();
    let mut out = Vec::new();
    walk(&base, &base, &mut out);
    out.retain(|f| f != "main.rs");
    out.sort();
    out
}

fn src_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The module a file is: `server/outbox.rs` → ["server", "outbox"]; `server/mod.rs` →
/// ["server"]; `lib.rs` → [].
fn module_of(file: &str) -> Vec<String> {
    let mut me: Vec<String> = file.trim_end_matches(".rs").split('/').map(str::to_owned).collect();
    if me.last().is_some_and(|m| m == "mod" || m == "lib") {
        me.pop();
    }
    me
}

/// The file that holds module `module`, if there is one.
fn file_of_module(module: &[String]) -> Option<String> {
    if module.is_empty() {
        return Some("lib.rs".into());
    }
    let joined = module.join("/");
    if src_dir().join(format!("{joined}.rs")).is_file() {
        Some(format!("{joined}.rs"))
    } else if src_dir().join(&joined).join("mod.rs").is_file() {
        Some(format!("{joined}/mod.rs"))
    } else {
        None
    }
}

/// Code without comments, string literals and `#[cfg(test)] mod … { … }` blocks: what
/// the library itself imports.
fn library_code(text: &str) -> String {
    // Comments and strings first, character by character.
    let bytes: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let next = bytes.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < bytes.len() && bytes[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i + 1 < bytes.len() && !(bytes[i] == '*' && bytes[i + 1] == '/') {
                i += 1;
            }
            i += 2;
        } else if c == 'r' && (next == Some('#') || next == Some('"')) && (i == 0 || !is_ident(bytes[i - 1]))
        {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while bytes.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if bytes.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= bytes.len() {
                    break;
                }
                if bytes[j] == '"' && (0..hashes).all(|h| bytes.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < bytes.len() && bytes[i] != '"' {
                if bytes[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && next.is_some() && bytes.get(i + 2) == Some(&'\'') {
            // A char literal such as '{' (a lifetime has no closing quote there).
            out.push_str("' '");
            i += 3;
        } else if c == '\'' && next == Some('\\') {
            let close = (i + 2..bytes.len()).find(|&j| bytes[j] == '\'').unwrap_or(bytes.len() - 1);
            out.push_str("' '");
            i = close + 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    // Then the test modules, by brace matching.
    let mut code = out;
    while let Some(at) = code.find("#[cfg(test)]") {
        let after = &code[at + "#[cfg(test)]".len()..];
        let trimmed = after.trim_start();
        let skip = after.len() - trimmed.len();
        let end = if trimmed.starts_with("mod ") || trimmed.starts_with("pub mod ") {
            let Some(open) = trimmed.find('{') else { break };
            let mut depth = 0;
            let mut close = trimmed.len();
            for (k, ch) in trimmed[open..].char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            close = open + k + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            at + "#[cfg(test)]".len() + skip + close
        } else {
            // An attribute on one item: only the attribute goes (the item stays, harmless).
            at + "#[cfg(test)]".len()
        };
        code.replace_range(at..end, "");
    }
    code
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Flattens a use-tree: `a::{b, c::{d, e as f}}` → `a::b`, `a::c::d`, `a::c::e as f`.
fn expand_use_tree(prefix: &str, tree: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head = format!("{prefix}{}", &tree[..open]);
        // Not a use-tree (prose that reads "use " and runs into code): nothing to expand.
        let Some(close) = tree.rfind('}').filter(|&close| close > open) else { return };
        let inner = &tree[open + 1..close];
        let mut depth = 0;
        let mut start = 0;
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_use_tree(&head, &inner[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand_use_tree(&head, &inner[start..], out);
    } else if !tree.is_empty() {
        out.push(format!("{prefix}{tree}"));
    }
}

/// The `use` declarations of `code`: (is it a re-export (`pub use`), each leaf path).
fn use_leaves(code: &str) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    let mut rest = code;
    let mut consumed = 0;
    while let Some(at) = rest.find("use ") {
        let abs = consumed + at;
        let boundary = abs == 0 || !is_ident(code[..abs].chars().last().unwrap());
        let end = rest[at..].find(';').map_or(rest.len(), |e| at + e);
        if boundary {
            let before = code[..abs].trim_end();
            let public =
                before.ends_with("pub") || before.ends_with("pub(crate)") || before.ends_with("pub(super)");
            let mut leaves = Vec::new();
            expand_use_tree("", &rest[at + 4..end], &mut leaves);
            out.extend(leaves.into_iter().map(|l| (public, l)));
        }
        let step = (end + 1).min(rest.len());
        consumed += step;
        rest = &rest[step..];
    }
    out
}

/// Paths the code writes inline (`crate::lock::ConnId`, `super::shared::Shared`,
/// `self::x::Y`), outside its `use` declarations.
fn inline_paths(code: &str) -> Vec<String> {
    let mut without_uses = String::with_capacity(code.len());
    let mut rest = code;
    let mut consumed = 0;
    while let Some(at) = rest.find("use ") {
        let abs = consumed + at;
        let boundary = abs == 0 || !is_ident(code[..abs].chars().last().unwrap());
        let end = rest[at..].find(';').map_or(rest.len(), |e| at + e);
        without_uses.push_str(if boundary { &rest[..at] } else { &rest[..end] });
        let step = (end + 1).min(rest.len());
        consumed += step;
        rest = &rest[step..];
    }
    without_uses.push_str(rest);
    without_uses
        .split(|c: char| !(is_ident(c) || c == ':'))
        .filter(|t| t.starts_with("crate::") || t.starts_with("super::") || t.starts_with("self::"))
        .map(|t| t.trim_end_matches(':').to_owned())
        .filter(|t| !["crate", "super", "self"].contains(&t.rsplit("::").next().unwrap_or("")))
        .collect()
}

/// What the library's files know: each file's code and re-exports, and the file that
/// defines each exported macro.
struct SrcTree {
    code: std::collections::BTreeMap<String, String>,
    macros: std::collections::BTreeMap<String, String>,
}

impl SrcTree {
    fn read() -> SrcTree {
        let mut code = std::collections::BTreeMap::new();
        let mut macros = std::collections::BTreeMap::new();
        for file in src_files() {
            let text = library_code(&std::fs::read_to_string(src_dir().join(&file)).unwrap());
            for def in text.split("macro_rules!").skip(1) {
                let name: String = def.trim_start().chars().take_while(|&c| is_ident(c)).collect();
                macros.insert(name, file.clone());
            }
            code.insert(file, text);
        }
        SrcTree { code, macros }
    }

    /// The segments of `path` (as written in `file`) made absolute from the crate root,
    /// or `None` for a path into another crate.
    fn absolute(&self, file: &str, path: &str) -> Option<Vec<String>> {
        let path = path.split(" as ").next().unwrap().trim();
        let segments: Vec<String> =
            path.split("::").map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect();
        let me = module_of(file);
        let first = segments.first()?.as_str();
        match first {
            "crate" => Some(segments[1..].to_vec()),
            "super" | "self" => {
                let mut base = me;
                let mut rest = &segments[..];
                while let Some((head, tail)) = rest.split_first() {
                    match head.as_str() {
                        "super" => {
                            base.pop();
                        }
                        "self" => {}
                        _ => break,
                    }
                    rest = tail;
                }
                base.extend(rest.iter().cloned());
                Some(base)
            }
            // A child module named without `self::` (`use status::Counters;` in mod.rs).
            _ => {
                let mut child = me;
                child.push(first.to_owned());
                file_of_module(&child).map(|_| {
                    child.extend(segments[1..].iter().cloned());
                    child
                })
            }
        }
    }

    /// The file that defines what the absolute path `path` names, following `pub use`
    /// re-exports (so importing `crate::lock::LockState` is an arrow to the file that
    /// defines it, not to `lock/mod.rs`).
    fn target(&self, path: &[String], depth: usize) -> Option<String> {
        if let [name] = path {
            if let Some(file) = self.macros.get(name) {
                return Some(file.clone());
            }
        }
        let mut module: Vec<String> = Vec::new();
        let mut rest = path;
        while let Some((head, tail)) = rest.split_first() {
            let mut next = module.clone();
            next.push(head.clone());
            if file_of_module(&next).is_none() {
                break;
            }
            module = next;
            rest = tail;
        }
        let file = file_of_module(&module)?;
        let Some(item) = rest.first() else { return Some(file) };
        if depth < 8 {
            for (public, leaf) in use_leaves(&self.code[&file]) {
                if !public {
                    continue;
                }
                let alias = leaf.rsplit(" as ").next().unwrap().trim();
                let name = alias.rsplit("::").next().unwrap().trim();
                let from = if name == "*" {
                    // A glob re-export: follow it if the item is not defined here.
                    let glob = leaf.trim_end_matches('*').trim_end_matches("::").to_owned();
                    self.absolute(&file, &format!("{glob}::{item}"))
                } else if name == item {
                    self.absolute(&file, &leaf)
                } else {
                    None
                };
                if let Some(abs) = from {
                    if let Some(found) = self.target(&abs, depth + 1) {
                        if name != "*" || found != file {
                            return Some(found);
                        }
                    }
                }
            }
        }
        Some(file)
    }

    /// file → the files it imports from (itself left out), with the paths that tie them.
    fn arrows(&self) -> std::collections::BTreeMap<String, std::collections::BTreeMap<String, Vec<String>>> {
        let mut arrows: std::collections::BTreeMap<_, std::collections::BTreeMap<_, Vec<String>>> =
            Default::default();
        for (file, code) in &self.code {
            // A `pub use` is an arrow too: a module that passes on a name from a file
            // depends on that file. (Whoever imports the name through it gets an arrow to
            // the defining file, not to the module.) A glob passes on a whole file.
            let mut paths: Vec<String> = use_leaves(code)
                .into_iter()
                .map(|(_, p)| p.rsplit(" as ").last().unwrap().trim().trim_end_matches("::*").to_owned())
                .collect();
            paths.extend(inline_paths(code));
            for path in paths {
                let Some(abs) = self.absolute(file, &path) else { continue };
                let Some(target) = self.target(&abs, 0) else { continue };
                if target != *file {
                    arrows.entry(file.clone()).or_default().entry(target).or_default().push(path);
                }
            }
        }
        arrows
    }
}

/// The circles of a graph: its strongly connected components of more than one file.
fn circles(
    arrows: &std::collections::BTreeMap<String, std::collections::BTreeMap<String, Vec<String>>>,
) -> Vec<Vec<String>> {
    use std::collections::{BTreeMap, BTreeSet};
    let nodes: BTreeSet<&String> = arrows.keys().chain(arrows.values().flat_map(|m| m.keys())).collect();
    let reach = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for next in arrows.get(&n).map(|m| m.keys().cloned().collect::<Vec<_>>()).unwrap_or_default() {
                if seen.insert(next.clone()) {
                    todo.push(next);
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<&String, BTreeSet<String>> = nodes.iter().map(|n| (*n, reach(n))).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut placed = BTreeSet::new();
    for n in &nodes {
        if placed.contains(*n) || !reachable[n].contains(*n) {
            continue;
        }
        let circle: Vec<String> = nodes
            .iter()
            .filter(|m| reachable[n].contains(**m) && reachable[**m].contains(*n))
            .map(|m| (*m).clone())
            .collect();
        placed.extend(circle.iter().cloned());
        out.push(circle);
    }
    out
}

/// No import circle anywhere in src/: between two files, arrows run one way, so each
/// file can be read knowing only the files below it (docs/architecture.md §9).
#[test]
fn no_import_circle_anywhere_in_src() {
    let tree = SrcTree::read();
    assert!(tree.code.len() >= 100, "read {} files of src/", tree.code.len());
    let arrows = tree.arrows();
    let mut report = Vec::new();
    for circle in circles(&arrows) {
        report.push(format!("circle: {}", circle.join(", ")));
        for a in &circle {
            for (b, paths) in arrows.get(a).into_iter().flatten() {
                if circle.contains(b) {
                    let mut paths = paths.clone();
                    paths.sort();
                    paths.dedup();
                    report.push(format!("  src/{a} -> src/{b}: {}", paths.join(", ")));
                }
            }
        }
    }
    assert!(report.is_empty(), "import circles in src/:\n{}", report.join("\n"));
}

/// The checker itself: it finds a circle of two files and one through a re-export, and
/// it follows re-exports instead of stopping at a module's face.
#[test]
fn the_circle_checker_sees_circles_and_follows_re_exports() {
    let tree = SrcTree::read();
    // A re-export is followed to the defining file.
    let abs = tree.absolute("cli/demo.rs", "crate::server::Server").unwrap();
    assert_eq!(tree.target(&abs, 0).as_deref(), Some("server/node.rs"));
    let abs = tree.absolute("server/mod.rs", "limits::Limits").unwrap();
    assert_eq!(tree.target(&abs, 0).as_deref(), Some("server/limits.rs"));
    // A macro is where macro_rules! defines it.
    assert_eq!(tree.target(&["invariant".to_owned()], 0).as_deref(), Some("invariant.rs"));
    // Comments, strings and test modules are not imports.
    let code = library_code("// use crate::a;\nlet s = \"crate::b::C\";\n#[cfg(test)]\nmod tests { use crate::c; }\nuse crate::d::E;");
    assert_eq!(use_leaves(&code), vec![(false, "crate::d::E".to_owned())]);
    // Two files that import each other are a circle; a third one below them is not in it.
    let mut arrows: std::collections::BTreeMap<String, std::collections::BTreeMap<String, Vec<String>>> =
        Default::default();
    let mut arrow = |a: &str, b: &str| {
        arrows.entry(a.into()).or_default().insert(b.into(), vec![format!("{a}->{b}")]);
    };
    arrow("a.rs", "b.rs");
    arrow("b.rs", "a.rs");
    arrow("b.rs", "c.rs");
    assert_eq!(circles(&arrows), vec![vec!["a.rs".to_owned(), "b.rs".to_owned()]]);
}

/// Most lines a test source file may have (tests/**): past it, a file holds several
/// subjects and its reader cannot keep it in view; split it into submodules of the test
/// (`#[path = "name/part.rs"] mod part;`), as raft_scenarios, replica, cluster_sim and
/// client_sim are.
const TEST_FILE_LINES_MAX: usize = 1_250;

/// No Rust file under tests/ over TEST_FILE_LINES_MAX lines, and each opens with a
/// comment that says what it holds.
#[test]
fn every_test_file_is_small_and_says_what_it_holds() {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let tests = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut files = Vec::new();
    walk(&tests, &mut files);
    assert!(files.len() > 50, "found only {} test files", files.len());
    let mut problems = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.strip_prefix(&tests).unwrap().display().to_string();
        let lines = text.lines().count();
        if lines > TEST_FILE_LINES_MAX {
            problems.push(format!("tests/{name}: {lines} lines (at most {TEST_FILE_LINES_MAX})"));
        }
        if !text.starts_with("//!") {
            problems.push(format!("tests/{name}: does not open with a //! comment saying what it holds"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// No file in src/ over SRC_FILE_LINES_MAX lines, and each opens with a comment that
/// says what it owns.
#[test]
fn every_src_file_is_small_and_says_what_it_owns() {
    let mut problems = Vec::new();
    for file in src_files() {
        let text = std::fs::read_to_string(src_dir().join(&file)).unwrap();
        let lines = text.lines().count();
        if lines > SRC_FILE_LINES_MAX {
            problems.push(format!("src/{file}: {lines} lines (at most {SRC_FILE_LINES_MAX})"));
        }
        if !text.starts_with("//! ") {
            problems.push(format!("src/{file}: does not open with a //! comment saying what it owns"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
