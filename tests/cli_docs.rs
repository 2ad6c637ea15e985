//! The docs against the binary's `--help`: docs/cli.md against every command's help
//! (the top level, each command, `admin` and each admin subcommand), and
//! docs/configuration.md and README.md against `ticketing server --help`. Commands,
//! options, environment, exit statuses and the figures the help quotes must agree, so
//! that a help text or a page changed alone fails here.

mod common;

use std::collections::BTreeSet;
use std::process::Command;

use common::bin;
use common::children::{Within, CLI};

fn help(args: &[&str]) -> String {
    let out = Command::new(bin()).args(args).arg("--help").output_within(CLI);
    assert!(out.status.success(), "{args:?} --help: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn page(name: &str) -> String {
    std::fs::read_to_string(format!("{}/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// The `--long` options a help text lists in its Options section.
fn options(text: &str) -> BTreeSet<String> {
    text.lines()
        .map(str::trim_start)
        .filter_map(|l| {
            // A short form first: "-h, --help".
            let l = match l.as_bytes() {
                [b'-', c, b',', b' ', ..] if c.is_ascii_alphabetic() => &l[4..],
                _ => l,
            };
            let name = l.strip_prefix("--")?;
            let end = name.find(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).unwrap_or(name.len());
            Some(format!("--{}", &name[..end]))
        })
        .collect()
}

/// Every `--word` a text mentions.
fn mentioned(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (at, _) in text.match_indices("--") {
        let rest = &text[at + 2..];
        let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).unwrap_or(rest.len());
        // `--` alone separates `run`'s command; words start with a letter.
        if end > 0 && rest.as_bytes()[0].is_ascii_lowercase() {
            out.insert(format!("--{}", &rest[..end]));
        }
    }
    out
}

/// The commands of the top-level help: the first word of each line of its list, the
/// first two for `admin`.
fn top_commands(top: &str) -> Vec<Vec<String>> {
    top.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| {
            let words: Vec<String> = l.split_whitespace().map(str::to_owned).collect();
            let n = if words[0] == "admin" { 2 } else { 1 };
            words[..n].to_vec()
        })
        .collect()
}

/// Every help text: the top level (no arguments), each command of its list, and
/// `admin` itself.
fn every_help() -> Vec<(Vec<String>, String)> {
    let top = help(&[]);
    let mut all = vec![(Vec::new(), top.clone()), (vec!["admin".to_owned()], help(&["admin"]))];
    for command in top_commands(&top) {
        let args: Vec<&str> = command.iter().map(String::as_str).collect();
        let text = help(&args);
        all.push((command, text));
    }
    all
}

/// The lines of the section that starts with the line `title` (up to a blank line).
fn section(text: &str, title: &str) -> Option<Vec<String>> {
    let mut lines = text.lines().skip_while(|l| l.trim_end() != title);
    lines.next()?;
    Some(lines.take_while(|l| !l.trim().is_empty()).map(str::to_owned).collect())
}

/// White space collapsed, backticks dropped: how a help line and a table cell compare.
fn norm(text: &str) -> String {
    text.replace('`', "").split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The "Exit status:" entries of a help: (status, text), continuation lines joined.
fn exit_entries(text: &str) -> Vec<(String, String)> {
    let mut entries: Vec<(String, String)> = Vec::new();
    for line in section(text, "Exit status:").unwrap_or_default() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match trimmed.split_once("  ") {
            Some((code, rest)) if indent == 2 && code.chars().all(|c| c.is_ascii_digit()) => {
                entries.push((code.to_owned(), rest.trim().to_owned()));
            }
            _ => {
                let last = entries.last_mut().unwrap_or_else(|| panic!("a continuation first: {line:?}"));
                last.1.push(' ');
                last.1.push_str(trimmed);
            }
        }
    }
    entries
}

/// Every row of every Markdown table on a page, as cells.
fn table_rows(doc: &str) -> Vec<Vec<String>> {
    doc.lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('|') && !l.starts_with("|-"))
        .map(|l| l.trim().trim_matches('|').split(" | ").map(|c| c.trim().to_owned()).collect())
        .collect()
}

/// The environment variables a help's "Environment:" section lists.
fn env_vars(text: &str) -> Vec<String> {
    section(text, "Environment:")
        .unwrap_or_default()
        .iter()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        .map(str::to_owned)
        .collect()
}

fn name(command: &[String]) -> String {
    if command.is_empty() {
        "ticketing".into()
    } else {
        format!("ticketing {}", command.join(" "))
    }
}

#[test]
fn every_command_and_option_of_the_help_is_documented_and_nothing_else() {
    let doc = page("docs/cli.md");
    let all = every_help();
    let commands: Vec<Vec<String>> = all.iter().map(|(c, _)| c.clone()).filter(|c| !c.is_empty()).collect();
    assert!(commands.len() >= 13, "{commands:?}");
    let mut all_options = BTreeSet::new();
    for (command, text) in &all {
        let synopsis = name(command);
        assert!(doc.contains(&synopsis), "docs/cli.md does not show {synopsis:?}");
        for option in options(text) {
            assert!(doc.contains(&option), "docs/cli.md does not mention {option} of {synopsis}");
            all_options.insert(option);
        }
    }
    // The other way: every command of the page's synopsis and of `admin --help` is in
    // the top-level help's list.
    let synopsis_block = doc.split("```").nth(1).expect("the synopsis block");
    let admin_usage = &all.iter().find(|(c, _)| c == &["admin"]).unwrap().1;
    let listed = synopsis_block.lines().chain(admin_usage.lines().take_while(|l| !l.trim().is_empty()));
    for line in listed {
        let words: Vec<&str> = line.split_whitespace().skip_while(|w| *w != "ticketing").skip(1).collect();
        let Some(first) = words.first().filter(|w| !w.starts_with('-')) else { continue };
        let n = if *first == "admin" { 2 } else { 1 };
        let command: Vec<String> = words[..n].iter().map(|w| w.to_string()).collect();
        assert!(commands.contains(&command), "{line:?}: `ticketing --help` does not list {command:?}");
    }
    // Options of other programs the page quotes (`git rev-parse --short HEAD`).
    let others = ["--short"];
    for option in mentioned(&doc).into_iter().filter(|o| !others.contains(&o.as_str())) {
        assert!(all_options.contains(&option), "docs/cli.md names {option}, which no --help lists");
    }
}

#[test]
fn every_help_lists_its_environment_and_exit_statuses_as_the_page_does() {
    let doc = page("docs/cli.md");
    let rows = table_rows(&doc);
    for (command, text) in
        every_help().iter().filter(|(c, _)| c.first().map(String::as_str) != Some("server"))
    {
        let who = name(command);
        let vars = env_vars(text);
        assert!(!vars.is_empty(), "{who} --help has no Environment section:\n{text}");
        for var in &vars {
            assert!(doc.contains(&format!("`{var}`")), "{who} --help lists {var}; docs/cli.md does not");
        }
        let admin = command.first().map(String::as_str) == Some("admin");
        let secret = if admin { "TICKETING_PEER_AUTH_TOKEN" } else { "TICKETING_AUTH_TOKEN" };
        let other = if admin { "TICKETING_AUTH_TOKEN" } else { "TICKETING_PEER_AUTH_TOKEN" };
        if command != &["demo"] {
            assert!(vars.iter().any(|v| v == secret), "{who} --help does not name {secret}:\n{text}");
        }
        assert!(!vars.iter().any(|v| v == other), "{who} --help names {other}, which it does not read");
        // Each status the help explains is a row of one of the page's tables, in the
        // help's words.
        let entries = exit_entries(text);
        assert!(entries.len() >= 3, "{who} --help has no Exit status section:\n{text}");
        for (code, meaning) in &entries {
            assert!(
                rows.iter().any(|r| r.len() >= 2 && r[0] == *code && norm(&r[1]).contains(&norm(meaning))),
                "{who} --help: exit status {code} \"{meaning}\" is in no table of docs/cli.md"
            );
        }
    }
    // The page's general table has no status the top-level help does not explain.
    let top: Vec<String> = exit_entries(&help(&[])).into_iter().map(|(c, _)| c).collect();
    let general = doc.split("## Exit status").nth(1).unwrap().split("\n## ").next().unwrap();
    for row in table_rows(general).iter().skip(1) {
        assert!(top.contains(&row[0]), "docs/cli.md's exit status {} is not in `ticketing --help`", row[0]);
    }
}

/// "about 7 s", "after 3 s", "default 30", ... : a figure with the word that says what it
/// is, from what a help says before its Environment section (checked on its own).
fn figures(text: &str) -> BTreeSet<String> {
    let text = text.split("\nEnvironment:").next().unwrap();
    let words: Vec<&str> =
        text.split(|c: char| c.is_whitespace() || "(),;:".contains(c)).filter(|w| !w.is_empty()).collect();
    let mut out = BTreeSet::new();
    for (i, w) in words.iter().enumerate() {
        let lead = match (*w, words.get(i + 1)) {
            ("about" | "after" | "within" | "default", _) => w.to_string(),
            ("at", Some(&"most")) | ("up", Some(&"to")) => format!("{w} {}", words[i + 1]),
            _ => continue,
        };
        let at = i + lead.split(' ').count();
        let Some(number) = words.get(at).filter(|n| n.starts_with(|c: char| c.is_ascii_digit())) else {
            continue;
        };
        let number = number.trim_end_matches('.');
        let unit = match words.get(at + 1) {
            Some(&u) if u == "s" || u == "ms" => format!(" {u}"),
            _ => String::new(),
        };
        out.insert(format!("{lead} {number}{unit}"));
    }
    out
}

#[test]
fn every_figure_a_help_quotes_is_the_pages() {
    let doc = norm(&page("docs/cli.md"));
    for (command, text) in
        every_help().iter().filter(|(c, _)| c.first().map(String::as_str) != Some("server"))
    {
        for figure in figures(text) {
            // The same words, not followed by another digit ("default 1" is not "default 10").
            let found = doc.match_indices(&figure).any(|(at, _)| {
                !doc[at + figure.len()..].starts_with(|c: char| c.is_ascii_digit() || c == '.')
            });
            assert!(found, "{} --help says \"{figure}\"; docs/cli.md does not", name(command));
        }
    }
}

/// `ticketing server --help`'s variables and, where it names one, their default.
fn server_variables(text: &str) -> Vec<(String, Option<String>)> {
    let mut out: Vec<(String, Option<String>)> = Vec::new();
    for line in text.lines().skip_while(|l| !l.starts_with("Environment variables")).skip(1) {
        if line.trim().is_empty() {
            break;
        }
        let trimmed = line.trim_start();
        let default =
            trimmed.split("default ").nth(1).map(|d| d.split([' ', ';']).next().unwrap().to_owned());
        if line.len() - trimmed.len() == 2 {
            out.push((trimmed.split_whitespace().next().unwrap().to_owned(), default));
        } else if let Some(default) = default {
            out.last_mut().unwrap().1.get_or_insert(default);
        }
    }
    out
}

#[test]
fn the_server_help_and_the_configuration_pages_agree() {
    let text = help(&["server"]);
    let vars = server_variables(&text);
    assert!(vars.len() >= 20, "{vars:?}");
    let config = page("docs/configuration.md");
    let table: Vec<Vec<String>> =
        table_rows(config.split("## 3. Variables").nth(1).unwrap().split("\n### ").next().unwrap());
    let documented: Vec<String> = table.iter().skip(1).map(|r| r[0].trim_matches('`').to_owned()).collect();
    for (var, default) in &vars {
        let row = table
            .iter()
            .find(|r| r[0] == format!("`{var}`"))
            .unwrap_or_else(|| panic!("docs/configuration.md §3 has no row for {var}"));
        if let Some(default) = default {
            let cell = row[1].replace(['`', ' '], "");
            assert!(
                cell.starts_with(default.as_str()),
                "{var}: `ticketing server --help` says default {default}, docs/configuration.md says {}",
                row[1]
            );
        }
    }
    for var in &documented {
        assert!(
            vars.iter().any(|(v, _)| v == var),
            "docs/configuration.md §3 lists {var}; server --help does not"
        );
    }
    // The exit statuses: the same set as the page's §4.
    let codes: BTreeSet<String> = exit_entries(&text).into_iter().map(|(c, _)| c).collect();
    let section4 = config.split("## 4. Exit statuses").nth(1).unwrap().split("\n## ").next().unwrap();
    let page_codes: BTreeSet<String> =
        table_rows(section4).into_iter().skip(1).map(|r| r[0].clone()).collect();
    assert_eq!(codes, page_codes, "server --help's exit statuses against docs/configuration.md §4");
    // README's table names every variable too.
    let readme = page("README.md");
    let readme_config = readme.split("## Configuration").nth(1).unwrap().split("\n## ").next().unwrap();
    for (var, _) in &vars {
        assert!(readme_config.contains(var.as_str()), "README.md's Configuration table lacks {var}");
    }
}
