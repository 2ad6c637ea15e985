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
    ("backoff.rs", 1),
    // The sans-IO core, bottom to top.
    ("core/session.rs", 2),
    ("core/orphans.rs", 2),
    ("core/claims.rs", 2),
    ("core/net.rs", 3),
    ("core/routing.rs", 4),
    ("core/members.rs", 5),
    ("core/cx.rs", 6),
    ("core/acquire.rs", 7),
    ("core/release.rs", 7),
    ("core/read.rs", 7),
    ("core/watch.rs", 7),
    ("core/resolve.rs", 8),
    ("core/ops.rs", 9),
    ("core/mod.rs", 10),
    // The I/O around it.
    ("io/sync.rs", 11),
    ("io/cell.rs", 12),
    ("io/conn.rs", 12),
    ("io/dial.rs", 12),
    ("io/oneoff.rs", 13),
    ("io/shared.rs", 13),
    ("io/reader.rs", 14),
    ("io/driver.rs", 14),
    ("io/mod.rs", 15),
    // The API.
    ("lock.rs", 16),
    ("admin.rs", 17),
    ("api.rs", 18),
    ("tls.rs", 18),
    ("builder.rs", 19),
    ("mod.rs", 20),
];

/// Most lines a client source file may have: one concept per file.
const CLIENT_FILE_LINES_MAX: usize = 520;

fn client_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/client")
}

/// Every `.rs` file under src/client, as a path relative to it (`core/net.rs`).
fn client_files() -> Vec<String> {
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
    let mut out = Vec::new();
    walk(&client_dir(), &client_dir(), &mut out);
    out.sort();
    out
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
    // Flatten use-trees: `use super::{a::B, c};` → `super::a::B`, `super::c`.
    fn expand(prefix: &str, tree: &str, out: &mut Vec<String>) {
        let tree = tree.trim();
        if let Some(open) = tree.find('{') {
            let head = format!("{prefix}{}", &tree[..open]);
            let inner = &tree[open + 1..tree.rfind('}').unwrap()];
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        expand(&head, &inner[start..i], out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            expand(&head, &inner[start..], out);
        } else if !tree.is_empty() {
            out.push(format!("{prefix}{tree}"));
        }
    }
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let boundary = at == 0 || !rest.as_bytes()[at - 1].is_ascii_alphanumeric();
        let end = rest[at..].find(';').map_or(rest.len(), |e| at + e);
        if boundary {
            expand("", &rest[at + 4..end], &mut paths);
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
