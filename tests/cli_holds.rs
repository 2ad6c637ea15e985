//! `ticketing acquire KEY KEY… --permits N --count K --position` and `query --pool`
//! against the real server (docs/cli.md): every key or none under one token, a stock of
//! permits, places in line, and bad input named by its option.

mod common;

use std::process::{Command, Output};

use common::children::{Within, CLI};
use common::{ServerProcess, TOKEN};

fn on(server: &ServerProcess, owner: &str, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ticketing"));
    command.args(args).env_clear().env("PATH", std::env::var("PATH").unwrap_or_default());
    command.env("TICKETING_ADDRS", server.addr.to_string()).env("TICKETING_AUTH_TOKEN", TOKEN);
    command.env("TICKETING_OWNER", owner);
    command.output_within(CLI)
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

#[test]
fn several_keys_are_taken_together_and_released_with_any_one() {
    let server = common::start_server(&[]);
    let out = on(&server, "family", &["acquire", "seat:1", "seat:2", "seat:3", "--lease", "60"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("acquired seat:1, seat:2, seat:3 as owner family"));
    let token = text(&out.stdout).trim().to_owned();
    // Another caller asking for one of them with wait 0: busy, and nothing taken.
    let out = on(&server, "other", &["acquire", "seat:4", "seat:2"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let q = on(&server, "x", &["query", "seat:4"]);
    assert_eq!(text(&q.stdout).trim(), "free");
    // One release names one key and ends all three.
    let out = on(&server, "family", &["release", "seat:3", &token]);
    assert_eq!(text(&out.stdout).trim(), "released");
    for seat in ["seat:1", "seat:2", "seat:3"] {
        assert_eq!(text(&on(&server, "x", &["query", seat]).stdout).trim(), "free", "{seat}");
    }
}

#[test]
fn a_stock_of_permits_and_its_pool() {
    let server = common::start_server(&[]);
    for owner in ["a", "b"] {
        let out = on(&server, owner, &["acquire", "stock", "--permits", "5", "--count", "2"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(text(&out.stderr).contains("(2 of 5 permits each)"));
    }
    let out = on(&server, "c", &["acquire", "stock", "--permits", "5", "--count", "2"]);
    assert_eq!(out.status.code(), Some(1), "only 1 of 5 left: {}", text(&out.stderr));
    let pool = text(&on(&server, "x", &["query", "--pool", "stock"]).stdout);
    let mut lines = pool.lines();
    assert_eq!(lines.next(), Some("pool capacity=5 in_use=4 holds=2 waiters=0 oldest_wait_ms=0"));
    let holds: Vec<&str> = lines.collect();
    assert_eq!(holds.len(), 2);
    assert!(holds[0].starts_with("hold owner=a token=") && holds[0].contains(" count=2 "), "{pool}");
    // Another capacity: refused naming both numbers, with the fix.
    let out = on(&server, "d", &["acquire", "stock", "--permits", "6"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("says 6") && err.contains("capacity 5") && err.contains("--permits"), "{err}");
    assert_eq!(
        text(&on(&server, "x", &["query", "--pool", "none"]).stdout).trim(),
        "pool capacity=0 in_use=0 holds=0 waiters=0 oldest_wait_ms=0"
    );
}

#[test]
fn position_prints_the_place_in_line_while_waiting() {
    let server = common::start_server(&[]);
    let out = on(&server, "holder", &["acquire", "k", "--lease", "3"]);
    assert_eq!(out.status.code(), Some(0));
    // The holder's 3 s lease ends while the waiter waits: it is granted in the end.
    let out = on(&server, "waiter", &["acquire", "k", "--position", "--wait", "20000"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("place in line: 0 ahead"), "{err}");
    assert!(err.contains("acquired k as owner waiter"), "{err}");
}

#[test]
fn bad_input_is_named_by_its_option_and_sends_nothing() {
    let server = common::start_server(&[]);
    let seventeen: Vec<String> = (0..17).map(|i| format!("k{i}")).collect();
    let mut args = vec!["acquire"];
    args.extend(seventeen.iter().map(String::as_str));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (args, "1 to 16 KEYs"),
        (vec!["acquire", "a", "b", "a"], "KEY \"a\" is given twice (KEY 1 and 3)"),
        (vec!["acquire", "a", "--permits", "2", "--count", "3"], "--count 3 is more than --permits 2"),
        (vec!["acquire", "a", "--permits", "0"], "--permits \"0\""),
        (vec!["acquire", "a", "--permits", "1000001"], "--permits \"1000001\""),
        (vec!["acquire", "a", "--count", "x"], "--count \"x\""),
    ];
    for (args, says) in cases {
        let out = on(&server, "o", &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(text(&out.stderr).contains(says), "{args:?}: {}", text(&out.stderr));
    }
    assert_eq!(text(&on(&server, "x", &["query", "a"]).stdout).trim(), "free");
}

#[test]
fn run_takes_several_keys_for_its_command_and_releases_them_all() {
    let server = common::start_server(&[]);
    let out = on(
        &server,
        "runner",
        &["run", "seat:1", "seat:2", "--", "sh", "-c", "echo \"$TICKETING_KEY $TICKETING_FENCE\""],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    let (keys, token) = printed.trim().split_once(' ').expect("keys and token");
    assert_eq!(keys, "seat:1,seat:2");
    assert!(token.parse::<u64>().is_ok(), "{printed}");
    for seat in ["seat:1", "seat:2"] {
        assert_eq!(text(&on(&server, "x", &["query", seat]).stdout).trim(), "free", "{seat}");
    }
}
