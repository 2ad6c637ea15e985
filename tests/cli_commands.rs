//! The `ticketing` command line: help, version, every client subcommand against the
//! real server, `run`, `demo`, and the exit codes (0 ok, 1 no, 2 usage, 3 unknown).

mod common;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::children::{Within, CLI};
use common::{Server, ServerProcess, TOKEN};

fn ticketing(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ticketing"));
    command.args(args).env_clear().env("PATH", std::env::var("PATH").unwrap_or_default());
    for (k, v) in env {
        command.env(k, v);
    }
    command.output_within(CLI)
}

fn on(server: &ServerProcess, args: &[&str]) -> Output {
    ticketing(
        args,
        &[
            ("TICKETING_ADDRS", &server.addr.to_string()),
            ("TICKETING_AUTH_TOKEN", TOKEN),
            ("TICKETING_OWNER", "cli-test"),
        ],
    )
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("exited normally")
}

#[test]
fn help_and_version() {
    let out = ticketing(&["--help"], &[]);
    assert_eq!(code(&out), 0);
    for word in ["acquire", "release", "query", "status", "run", "demo", "Exit status"] {
        assert!(stdout(&out).contains(word), "--help lacks {word}");
    }
    for sub in ["acquire", "release", "query", "status", "run", "demo"] {
        let out = ticketing(&[sub, "--help"], &[]);
        assert_eq!(code(&out), 0, "{sub} --help");
        assert!(stdout(&out).contains(&format!("ticketing {sub}")), "{sub} --help");
    }
    let out = ticketing(&["server", "--help"], &[]);
    assert_eq!(code(&out), 0);
    assert!(stdout(&out).contains("TICKETING_LISTEN"));
    let out = ticketing(&["--version"], &[]);
    assert_eq!(code(&out), 0);
    let version = stdout(&out);
    assert!(version.starts_with(&format!("ticketing {}", env!("CARGO_PKG_VERSION"))));
    assert!(version.contains("commit") && version.contains("build"), "{version}");
}

#[test]
fn usage_and_configuration_errors_exit_2() {
    let token = [("TICKETING_AUTH_TOKEN", "0123456789abcdef-0123")];
    assert_eq!(code(&ticketing(&[], &[])), 2);
    assert_eq!(code(&ticketing(&["frobnicate"], &[])), 2);
    assert_eq!(code(&ticketing(&["acquire"], &token)), 2);
    assert_eq!(code(&ticketing(&["acquire", "k", "--lease", "0"], &token)), 2);
    assert_eq!(code(&ticketing(&["acquire", "k", "--lease", "251"], &token)), 2);
    assert_eq!(code(&ticketing(&["acquire", "k", "--wait", "300001"], &token)), 2);
    assert_eq!(code(&ticketing(&["acquire", "k", "--bogus"], &token)), 2);
    assert_eq!(code(&ticketing(&["release", "k", "notanumber"], &token)), 2);
    assert_eq!(code(&ticketing(&["run", "k"], &token)), 2);
    // No token at all, a short one, a bad address: configuration errors.
    let out = ticketing(&["query", "k"], &[]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("auth token"), "{}", stderr(&out));
    let out = ticketing(&["query", "k"], &[("TICKETING_AUTH_TOKEN", "short")]);
    assert_eq!(code(&out), 2);
    let out = ticketing(&["query", "k", "--addr", "nonsense"], &token);
    assert_eq!(code(&out), 2);
    // The server refuses a bad configuration with 2 as well.
    let out = ticketing(&["server"], &[("TICKETING_AUTH_TOKEN", "short")]);
    assert_eq!(code(&out), 2);
}

#[test]
fn acquire_query_release_and_their_exit_codes() {
    let server = Server::new().start();
    let out = on(&server, &["acquire", "seat:1", "--lease", "30"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let token: u64 = stdout(&out).trim().parse().expect("acquire prints the token");
    // Held by the first process even though it exited.
    let out = on(&server, &["acquire", "seat:1"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("busy"));
    let out = on(&server, &["acquire", "seat:1", "--wait", "100"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("timeout"));
    let out = on(&server, &["query", "seat:1"]);
    assert_eq!(code(&out), 0);
    assert!(stdout(&out).contains(&format!("owner=cli-test token={token}")));
    // Another owner cannot release it.
    let out = on(&server, &["release", "seat:1", &token.to_string(), "--owner", "other"]);
    assert_eq!(code(&out), 1);
    assert_eq!(stdout(&out).trim(), "not holder");
    let out = on(&server, &["release", "seat:1", &token.to_string()]);
    assert_eq!(code(&out), 0);
    assert_eq!(stdout(&out).trim(), "released");
    let out = on(&server, &["release", "seat:1", &token.to_string()]);
    assert_eq!(code(&out), 1);
    let out = on(&server, &["query", "seat:1"]);
    assert_eq!((code(&out), stdout(&out).trim().to_owned()), (0, "free".into()));
}

#[test]
fn status_of_one_node_and_a_table_of_several() {
    let server = Server::new().start();
    let out = on(&server, &["status"]);
    assert_eq!(code(&out), 0);
    assert!(stdout(&out).contains("role=standalone"));
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let both = format!("{},{dead}", server.addr);
    let out = on(&server, &["status", "--addr", &both]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let table = stdout(&out);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    for column in ["node_id", "role", "term", "leader", "commit_index", "applied_index"] {
        assert!(lines[0].contains(column), "{table}");
    }
    assert!(lines[1].starts_with(&server.addr.to_string()) && lines[1].contains("standalone"));
    assert!(lines[2].starts_with(&dead) && lines[2].contains("unreachable"));
}

#[test]
fn unreachable_servers_exit_3() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let env = [("TICKETING_ADDRS", dead.as_str()), ("TICKETING_AUTH_TOKEN", "0123456789abcdef-0123")];
    let start = Instant::now();
    let out = ticketing(&["acquire", "k"], &env);
    assert_eq!(code(&out), 3);
    assert!(stderr(&out).contains("no server reachable"), "{}", stderr(&out));
    // It gives up after CONNECT_WAIT_MIN (3 s); the bound is 20 times that, against a hang.
    assert!(start.elapsed() < 20 * ticketing::client::CONNECT_WAIT_MIN, "{:?}", start.elapsed());
}

#[test]
fn run_passes_the_fence_and_exits_with_the_commands_status() {
    let server = Server::new().start();
    let out = on(
        &server,
        &[
            "run",
            "job",
            "--lease",
            "10",
            "--",
            "sh",
            "-c",
            "echo \"$TICKETING_KEY $TICKETING_FENCE\"; exit 7",
        ],
    );
    assert_eq!(code(&out), 7, "{}", stderr(&out));
    let printed = stdout(&out);
    let (key, fence) = printed.trim().split_once(' ').expect("key and fence");
    assert_eq!(key, "job");
    assert!(fence.parse::<u64>().expect("a numeric token") > 0);
    // Released afterwards.
    assert_eq!(stdout(&on(&server, &["query", "job"])).trim(), "free");
    // Success passes through too.
    assert_eq!(code(&on(&server, &["run", "job", "--", "true"])), 0);
    // While someone else holds the key, run does not start the command: exit 1.
    let out = on(&server, &["acquire", "job", "--owner", "blocker"]);
    assert_eq!(code(&out), 0);
    let out = on(&server, &["run", "job", "--", "sh", "-c", "echo ran"]);
    assert_eq!(code(&out), 1);
    assert_eq!(stdout(&out), "");
}

#[test]
fn run_stops_the_command_before_the_lease_runs_out() {
    let server = Server::new().start();
    let start = Instant::now();
    let out = on(&server, &["run", "slow", "--lease", "2", "--", "sleep", "120"]);
    let took = start.elapsed();
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(stderr(&out).contains("SIGTERM"), "{}", stderr(&out));
    assert!(stderr(&out).contains("ran out"), "{}", stderr(&out));
    // Stopped near the 2 s lease, not after the command's own 120 s.
    assert!(took < Duration::from_secs(60), "{took:?}");
    // A command that ignores SIGTERM gets SIGKILL after the grace period.
    let out =
        on(&server, &["run", "stubborn", "--lease", "2", "--", "sh", "-c", "trap '' TERM; exec sleep 30"]);
    assert_eq!(code(&out), 3);
    assert!(stderr(&out).contains("SIGKILL"), "{}", stderr(&out));
}

#[test]
fn demo_runs_on_its_own_and_checks_the_tokens() {
    let out = ticketing(&["demo"], &[]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("strictly increasing: yes"), "{text}");
    assert!(text.contains("holds seat:"));
    assert!(text.contains("handed off from"));
}

#[test]
fn demo_cluster_survives_the_leader_stop_with_tokens_still_growing() {
    let out = ticketing(&["demo", "--cluster"], &[]);
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("stopping the leader"), "{text}");
    assert!(text.contains("leads and serves"), "{text}");
    assert!(text.contains("strictly increasing: yes"), "{text}");
    let line = text.lines().find(|l| l.contains("tokens across the failover")).expect("token line");
    let numbers: Vec<u64> =
        line.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
    assert!(numbers.len() == 2 && numbers[0] < numbers[1], "{line}");
}

#[test]
fn the_secret_can_come_from_a_file() {
    let server = Server::new().start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    let out = ticketing(
        &["query", "k", "--addr", &server.addr.to_string()],
        &[("TICKETING_AUTH_TOKEN_FILE", file.to_str().unwrap())],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "free");
    // A wrong secret never gets a connection: nothing reachable, exit 3.
    let out = ticketing(
        &["query", "k", "--addr", &server.addr.to_string()],
        &[("TICKETING_AUTH_TOKEN", "a-wrong-secret-0123456789")],
    );
    assert_eq!(code(&out), 3);
}
