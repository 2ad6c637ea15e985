//! docs/cli.md against the binary's `--help`: every command and every option the help
//! shows is on the page, and every option the page names exists.

mod common;

use std::collections::BTreeSet;
use std::process::Command;

use common::bin;

fn help(args: &[&str]) -> String {
    let out = Command::new(bin()).args(args).arg("--help").output().unwrap();
    assert!(out.status.success(), "{args:?} --help: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
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

#[test]
fn every_command_and_option_of_the_help_is_documented_and_nothing_else() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cli.md")).unwrap();
    let top = help(&[]);
    // The commands of the top-level help: the first word(s) of each line of its list.
    let commands: Vec<Vec<&str>> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            if words[0] == "admin" {
                words[..2].to_vec()
            } else {
                words[..1].to_vec()
            }
        })
        .collect();
    assert!(commands.len() >= 10, "{commands:?}");
    let mut all_options = options(&top);
    for command in &commands {
        let synopsis = format!("ticketing {}", command.join(" "));
        assert!(doc.contains(&synopsis), "docs/cli.md does not show {synopsis:?}");
        let text = help(command);
        for option in options(&text) {
            assert!(doc.contains(&option), "docs/cli.md does not mention {option} of {synopsis}");
            all_options.insert(option);
        }
    }
    // Options of other programs the page quotes (`git rev-parse --short HEAD`).
    let others = ["--short"];
    for option in mentioned(&doc).into_iter().filter(|o| !others.contains(&o.as_str())) {
        assert!(all_options.contains(&option), "docs/cli.md names {option}, which no --help lists");
    }
}
