//! docs/architecture.md names the code it describes, and every name must still be there:
//! each path exists, each constant is defined, each type is defined or imported, each
//! `Type::member` has that member, each snake_case name is in the code. A rename or a
//! removal that leaves the document behind fails here, so the document cannot silently
//! drift from the code again.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under src/ and tests/, without comments (a name only a comment
/// mentions is not in the code).
fn src_code() -> String {
    fn walk(dir: &Path, out: &mut String) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("architecture_doc.rs") {
                // (This file's own stale examples must not count as code.)
                for line in std::fs::read_to_string(&path).unwrap().lines() {
                    let code = line.trim_start();
                    if !code.starts_with("//") {
                        out.push_str(line);
                        out.push('\n');
                    }
                }
            }
        }
    }
    let mut out = String::new();
    walk(&root().join("src"), &mut out);
    // The document also names the simulators' and tests' own parts.
    walk(&root().join("tests"), &mut out);
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The identifiers of `code`, in order.
fn words(code: &str) -> Vec<&str> {
    code.split(|c: char| !is_ident(c)).filter(|w| !w.is_empty()).collect()
}

/// Names the code defines (after `struct`, `enum`, `trait`, `type`, `fn`, `const`,
/// `static`, `mod`, `macro_rules!`), enum variants and fields (`Name {`, `Name(`,
/// `name:`), and names it imports (the last segment of each `use` leaf).
struct Known {
    defined: BTreeSet<String>,
    constants: BTreeSet<String>,
    members: BTreeSet<String>,
    all_words: BTreeSet<String>,
}

fn known() -> Known {
    let code = src_code();
    let w = words(&code);
    let mut defined = BTreeSet::new();
    let mut constants = BTreeSet::new();
    for pair in w.windows(2) {
        match pair[0] {
            "struct" | "enum" | "trait" | "type" | "fn" | "mod" | "macro_rules" => {
                defined.insert(pair[1].to_owned());
            }
            "const" | "static" => {
                constants.insert(pair[1].to_owned());
                defined.insert(pair[1].to_owned());
            }
            _ => {}
        }
    }
    // Imported names: `use a::b::{C, d::E as F};` gives C, E and F.
    for statement in code.split(';') {
        let Some(at) = statement.find("use ") else { continue };
        if at > 0 && statement[..at].chars().last().is_some_and(is_ident) {
            continue;
        }
        for word in words(&statement[at + 4..]) {
            if word.chars().next().is_some_and(|c| c.is_ascii_uppercase()) {
                defined.insert(word.to_owned());
            }
        }
    }
    // Members: fields and variants, by what follows the name.
    let mut members = BTreeSet::new();
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if is_ident(chars[i]) && (i == 0 || !is_ident(chars[i - 1])) {
            let start = i;
            while i < chars.len() && is_ident(chars[i]) {
                i += 1;
            }
            let name: String = chars[start..i].iter().collect();
            let mut j = i;
            while j < chars.len() && chars[j] == ' ' {
                j += 1;
            }
            let next = chars.get(j).copied();
            let double_colon = next == Some(':') && chars.get(j + 1) == Some(&':');
            if (next == Some(':') && !double_colon)
                || next == Some('{')
                || next == Some('(')
                || next == Some(',')
            {
                members.insert(name);
            }
        } else {
            i += 1;
        }
    }
    let all_words = w.iter().map(|s| s.to_string()).collect();
    Known { defined, constants, members, all_words }
}

/// The spans in backticks of a Markdown text, code blocks left out.
fn code_spans(doc: &str) -> Vec<String> {
    let mut spans = Vec::new();
    let mut in_block = false;
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let (Some(span), Some(_)) = (parts.next(), parts.next()) {
            spans.push(span.to_owned());
        }
        // An odd count leaves the last part unpaired: it is prose.
    }
    spans
}

fn is_screaming(s: &str) -> bool {
    s.contains('_')
        && s.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && s.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

fn is_camel(s: &str) -> bool {
    s.len() > 2
        && s.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && s.chars().any(|c| c.is_ascii_lowercase())
        && s.chars().all(|c| c.is_ascii_alphanumeric())
}

fn is_snake(s: &str) -> bool {
    s.contains('_')
        && s.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// What is wrong with the names of `doc` (empty: all there).
fn check(doc: &str, known: &Known, env_vars: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for span in code_spans(doc) {
        let span = span.trim();
        // Paths of the repository.
        if ["src/", "tests/", "scripts/", "bench/", "include/", "python/", "docs/"]
            .iter()
            .any(|p| span.starts_with(p))
        {
            // A command line names its script first (`scripts/measure.sh failover`).
            let path = span.split_whitespace().next().unwrap_or(span).trim_end_matches('/');
            if !root().join(path).exists() {
                problems.push(format!("`{span}`: no such path"));
            }
            continue;
        }
        if span.starts_with("TICKETING_") {
            // A line of the server's help (whose names the server reads), or a quoted
            // name (the other variables of src/config/help.rs).
            if !env_vars.contains(&format!("\n  {span} ")) && !env_vars.contains(&format!("\"{span}\"")) {
                problems.push(format!("`{span}`: not a variable the server reads (src/config/help.rs)"));
            }
            continue;
        }
        if is_screaming(span) {
            if !known.constants.contains(span) {
                problems.push(format!("`{span}`: no const or static of that name in src/"));
            }
            continue;
        }
        if let Some((ty, member)) = span.split_once("::") {
            if is_camel(ty) && member.chars().all(is_ident) {
                if !known.defined.contains(ty) {
                    problems.push(format!("`{span}`: no type {ty} in src/"));
                } else if !known.defined.contains(member) && !known.members.contains(member) {
                    problems.push(format!("`{span}`: {ty} has no {member} in src/"));
                }
            }
            continue;
        }
        if is_camel(span) {
            if !known.defined.contains(span) && !known.members.contains(span) {
                problems.push(format!("`{span}`: no type, variant or import of that name in src/"));
            }
            continue;
        }
        if is_snake(span) && !known.all_words.contains(span) {
            problems.push(format!("`{span}`: not in the code of src/"));
        }
    }
    problems.sort();
    problems.dedup();
    problems
}

fn env_vars() -> String {
    std::fs::read_to_string(root().join("src/config/help.rs")).unwrap()
}

#[test]
fn every_name_in_the_architecture_document_is_in_the_code() {
    let doc = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let known = known();
    assert!(code_spans(&doc).len() > 200, "read too few names from docs/architecture.md");
    let problems = check(&doc, &known, &env_vars());
    assert!(
        problems.is_empty(),
        "docs/architecture.md names what the code does not have:\n{}",
        problems.join("\n")
    );
}

/// The check is not vacuous: each kind of stale name is caught, and real ones pass.
#[test]
fn the_name_check_catches_each_kind_of_stale_name() {
    let known = known();
    let env = env_vars();
    let good = "`src/server/outbox.rs` `LOCK_ANSWER_BYTES` `DirectWriter` `DirectWriter::try_write` \
                `TableMsg::Open` `run_from_env` `TICKETING_MAX_WAITERS` `Arc`";
    assert_eq!(check(good, &known, &env), Vec::<String>::new());
    let stale = [
        "`src/server/nothing.rs`",
        "`NO_SUCH_LIMIT_MAX`",
        "`NoSuchWriter`",
        "`DirectWriter::no_such_member`",
        "`no_such_function`",
        "`TICKETING_NO_SUCH_VAR`",
    ];
    for name in stale {
        assert_eq!(check(name, &known, &env).len(), 1, "{name} was not caught");
    }
    // Names inside a code block are a drawing, not a claim.
    assert_eq!(check("```\n`NO_SUCH_LIMIT_MAX`\n```", &known, &env), Vec::<String>::new());
}
