//! The crate's public face (src/lib.rs): the items a user of the crate sees in
//! `cargo doc`. Every one is listed here with the reason it is on the face; a new public
//! item that is not fails this test — list it (with its reason) or hide it
//! (`#[doc(hidden)]` for what the binary and the tests need, `pub(crate)` otherwise).
//! The C ABI's functions and constants are listed by the header instead
//! (`include/ticketing.h`, generated from src/capi and checked by tests/c_header.rs).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The face, by reason.
const FACE: &[(&str, &[&str])] = &[
    ("the three modules of the face (src/lib.rs)", &["crate::capi", "crate::client", "crate::server"]),
    (
        "the client API of docs/client.md",
        &[
            "client::Client",
            "client::ClientBuilder",
            "client::Lock",
            "client::LockParts",
            "client::Pending",
            "client::Resolution",
            "client::ReleaseOutcome",
            "client::HolderInfo",
            "client::Hold",
            "client::Place",
            "client::PoolInfo",
            "client::PoolHolding",
            "client::TopKey",
            "client::Founding",
            "client::FoundNode",
        ],
    ),
    (
        "the client's errors, each with its kinds",
        &[
            "client::AcquireError",
            "client::ReleaseError",
            "client::ClientError",
            "client::BuildError",
            "client::Indeterminate",
            "client::IndeterminateCause",
        ],
    ),
    (
        "the client's defaults a caller reasons about (docs/client.md's bounds)",
        &[
            "client::COMMIT_MARGIN",
            "client::DEFAULT_ADDR",
            "client::REQUEST_TIMEOUT_DEFAULT",
            "client::RELEASE_DEADLINE",
        ],
    ),
    (
        "the server's entry points (what `ticketing server` runs) and its configuration",
        &["server::Server", "server::run_from_env", "server::Config", "server::ConfigError"],
    ),
    ("the C ABI's own types and bounds, as the header names them", &["capi::Holder"]),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The public items a face module's file shows, as `MODULE::NAME`: its `pub` items and
/// `pub use` names, each unless `#[doc(hidden)]` comes right before it; a glob
/// `pub use child::*` shows the child file's items.
fn items(path: &Path, module: &str) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut hidden = false;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim();
        i += 1;
        if trimmed.starts_with("#[") {
            hidden |= trimmed.contains("doc(hidden)");
            continue;
        }
        if trimmed.is_empty() || trimmed.starts_with("//") {
            continue;
        }
        let was_hidden = std::mem::replace(&mut hidden, false);
        if let Some(rest) = line.strip_prefix("pub use ") {
            let mut statement = rest.to_string();
            while !statement.trim_end().ends_with(';') {
                statement.push(' ');
                statement.push_str(lines[i].trim());
                i += 1;
            }
            if was_hidden {
                continue;
            }
            let body = statement.trim_end().trim_end_matches(';').trim();
            if let Some(child) = body.strip_suffix("::*") {
                let child = child.rsplit("::").next().unwrap();
                // An enum of this file re-exporting its variants (the C ABI's kinds): its
                // variants are the header's constants, the enum itself an item.
                if text.contains(&format!("pub enum {child} ")) {
                    continue;
                }
                out.extend(items(&path.with_file_name(format!("{child}.rs")), module));
            } else if let (Some(open), Some(close)) = (body.find('{'), body.rfind('}')) {
                for name in body[open + 1..close].split(',').map(str::trim).filter(|n| !n.is_empty()) {
                    out.push(format!("{module}::{}", name.rsplit(" as ").next().unwrap().trim()));
                }
            } else {
                let last = body.rsplit("::").next().unwrap();
                out.push(format!("{module}::{}", last.rsplit(" as ").next().unwrap().trim()));
            }
            continue;
        }
        let mut words =
            line.split(|c: char| c.is_whitespace() || c == '(' || c == '<' || c == ':' || c == ';');
        if words.next() != Some("pub") || was_hidden {
            continue;
        }
        let mut kinds = words.filter(|w| !w.is_empty() && *w != "unsafe" && *w != "extern" && *w != "\"C\"");
        if let (Some(kind), Some(name)) = (kinds.next(), kinds.next()) {
            if ["mod", "fn", "struct", "enum", "const", "type", "trait", "static"].contains(&kind) {
                out.push(format!("{module}::{name}"));
            }
        }
    }
    out
}

fn face() -> BTreeSet<String> {
    let mut all = items(&src().join("lib.rs"), "crate");
    all.extend(items(&src().join("client/mod.rs"), "client"));
    all.extend(items(&src().join("server/mod.rs"), "server"));
    all.extend(items(&src().join("capi/mod.rs"), "capi"));
    all.into_iter().collect()
}

#[test]
fn every_public_item_on_the_face_is_listed_with_its_reason() {
    let header =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("include/ticketing.h")).unwrap();
    let listed: BTreeSet<&str> = FACE.iter().flat_map(|(_, items)| items.iter().copied()).collect();
    let face = face();
    let mut unlisted = Vec::new();
    for item in &face {
        let name = item.rsplit("::").next().unwrap();
        // A function, a type (an enum, a struct, an opaque handle, a function pointer) or a
        // constant the generated header declares under the same name.
        let in_header = item.starts_with("capi::")
            && (name.starts_with("ticketing_")
                && [format!("{name}("), format!(" {name};"), format!("(*{name})(")]
                    .iter()
                    .any(|declared| header.contains(declared.as_str()))
                || name.starts_with("TICKETING_") && header.contains(&format!("#define {name} ")));
        if !in_header && !listed.contains(item.as_str()) {
            unlisted.push(item.clone());
        }
    }
    assert!(
        unlisted.is_empty(),
        "public items on the crate's face that tests/public_api.rs does not list: {unlisted:?}\n\
         List each with the reason it is for users, or hide it: #[doc(hidden)] (the binary and the \
         tests need it) or pub(crate)"
    );
    let stale: Vec<&&str> = listed.iter().filter(|item| !face.contains(**item)).collect();
    assert!(stale.is_empty(), "listed but not on the face any more: {stale:?}");
    assert!(face.len() > 80, "read only {} items: the reader is broken", face.len());
}

#[test]
fn the_reader_sees_items_uses_globs_and_hidden_ones() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("m.rs"),
        "pub use a::{B, C as D};\n#[doc(hidden)]\npub use e::F;\npub mod child;\npub use child::*;\n\
         /// doc\npub struct S;\n#[doc(hidden)]\npub fn hidden() {}\npub(crate) fn inner() {}\n\
         pub unsafe extern \"C\" fn exported(x: u8) {}\npub enum Kind {\n    A,\n}\npub use Kind::*;\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("child.rs"), "pub const K: u8 = 1;\nfn private() {}\n").unwrap();
    let mut got = items(&dir.path().join("m.rs"), "m");
    got.sort();
    assert_eq!(got, ["m::B", "m::D", "m::K", "m::Kind", "m::S", "m::child", "m::exported"]);
}
