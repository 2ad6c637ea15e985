//! The Go module (go/, docs/go.md) against real servers: `go vet` and its test suite
//! under the race detector (grant, FIFO, busy and timeout, release outcomes, WithLock on
//! error and panic, 64 goroutines on one client, a cancelled written acquire, bad
//! arguments, a wrong secret, `Config.ClusterName` against servers named `blue` and
//! unnamed, a paused server's indeterminate acquire and its resolve, 1,000 waiting
//! goroutines on a few OS threads, counted and multi-key holds, pools and places in
//! line, the lock's deadline as a ctx, the examples of docs/go.md), and the README's Go
//! example, built as a program of its own through `replace` and run as written against
//! a node; and the fencing example (go/examples/fenced_postgres) and the ticket sale
//! (go/examples/ticket_sale) against a throw-away PostgreSQL.
//!
//! The module links this cargo run's libticketing.a (CGO_LDFLAGS puts its directory
//! first) and starts this run's `ticketing` binary (TICKETING_BIN), so it tests this
//! checkout. Needs Go 1.19 or newer (`$GO`) and a C compiler. Without Go the tests
//! print `SKIPPED` and pass, unless `TICKETING_REQUIRE_GO=1` (set by `.ci/run`) makes
//! that a failure.

mod common;

#[path = "../examples/fenced_postgres.rs"]
#[allow(dead_code)]
mod fenced_postgres;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::bindings::{have_or_skip, native_lib_dir, postgres_or_skip, run_in_group};
use common::children::{Within, TOOL};
use common::{bin, repo, start_server, TOKEN};

fn go() -> String {
    std::env::var("GO").unwrap_or_else(|_| "go".into())
}

fn have_go(test: &str) -> bool {
    have_or_skip(
        test,
        &go(),
        &["version"],
        "TICKETING_REQUIRE_GO",
        "apt-get install golang-go (Go 1.19 or newer)",
    )
}

/// The environment a Go build of the module needs to link this run's library.
fn go_env() -> Vec<(String, String)> {
    vec![
        ("CGO_ENABLED".into(), "1".into()),
        ("CGO_LDFLAGS".into(), format!("-L{}", native_lib_dir().display())),
        ("TICKETING_BIN".into(), bin().to_string()),
        ("GOFLAGS".into(), "-mod=mod".into()),
    ]
}

/// `program args…` in `dir` (see [`run_in_group`]). Returns (success, output).
fn run(
    program: &str,
    args: &[&str],
    dir: &Path,
    env: &[(String, String)],
    limit: Duration,
) -> (bool, String) {
    let mut cmd = Command::new(program);
    cmd.args(args).current_dir(dir).envs(env.iter().map(|(k, v)| (k, v)));
    run_in_group(&mut cmd, limit)
}

#[test]
fn the_go_suite_passes_vet_and_the_race_detector_against_real_servers() {
    if !have_go("the_go_suite_passes_vet_and_the_race_detector_against_real_servers") {
        return;
    }
    let dir = repo().join("go");
    let env = go_env();
    let (ok, output) = run(&go(), &["vet", "./..."], &dir, &env, Duration::from_secs(300));
    assert!(ok && output.trim().is_empty(), "go vet:\n{output}");
    let args = ["test", "-race", "-count=1", "-v", "./..."];
    let (ok, output) = run(&go(), &args, &dir, &env, Duration::from_secs(600));
    assert!(ok, "go test -race failed:\n{output}");
    assert!(
        output.contains("\nok ") && !output.contains("--- SKIP") && !output.contains("WARNING: DATA RACE")
    );
    // The summary lines, for the log of this run.
    for line in output.lines().filter(|l| l.contains("OS threads:") || l.contains("indeterminate (")) {
        eprintln!("{}", line.trim());
    }
}

/// The README's ```go block, as a program of its own that uses the module through
/// `replace` (docs/go.md), built into one file and run as written against a standalone
/// node: its address (127.0.0.1:5225) is the node's, TICKETING_AUTH_TOKEN its secret.
#[test]
fn the_readme_go_example_builds_into_one_file_and_runs_as_written() {
    if !have_go("the_readme_go_example_builds_into_one_file_and_runs_as_written") {
        return;
    }
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let start = readme.find("```go\n").expect("a ```go block in README.md") + 6;
    let example = &readme[start..start + readme[start..].find("```").unwrap()];
    assert!(example.contains("127.0.0.1:5225"), "the example talks to the node the CLI section starts");
    let server = start_server(&[]);
    let dir = tempfile::tempdir().unwrap();
    let program = example.replace("127.0.0.1:5225", &server.addr.to_string());
    std::fs::write(dir.path().join("main.go"), program).unwrap();
    let module = "github.com/ticketing-lock/ticketing/go";
    let go_mod = format!(
        "module example\n\ngo 1.19\n\nrequire {module} v0.0.0\n\nreplace {module} => {}\n",
        repo().join("go").display()
    );
    std::fs::write(dir.path().join("go.mod"), go_mod).unwrap();
    let (ok, output) =
        run(&go(), &["build", "-o", "example", "."], dir.path(), &go_env(), Duration::from_secs(300));
    assert!(ok, "building the README's Go example failed:\n{output}");
    // One file to copy: libticketing is inside it, not beside it.
    let ldd = Command::new("ldd").arg(dir.path().join("example")).try_output_within(TOOL);
    if let Ok(ldd) = ldd {
        let libs = String::from_utf8_lossy(&ldd.stdout);
        assert!(!libs.contains("libticketing"), "the example links libticketing dynamically:\n{libs}");
    }
    let exe = dir.path().join("example").to_string_lossy().into_owned();
    let env = [("TICKETING_AUTH_TOKEN".to_string(), TOKEN.to_string())];
    let (ok, output) = run(&exe, &[], dir.path(), &env, Duration::from_secs(60));
    assert!(ok, "README's Go example failed:\n{output}");
    for expected in ["selling seat 42 under fencing token", "held by box-office-7", "released"] {
        assert!(output.contains(expected), "no {expected:?} in:\n{output}");
    }
}

/// go/examples/fenced_postgres (docs/go.md, "Fencing with the token"; a module of its own
/// with pgx) against a real server and a throw-away PostgreSQL: A's late write is
/// rejected, sold once to B. Needs PostgreSQL (`.ci/run` installs it) and Go 1.23 or
/// newer (pgx's); with an older Go it prints `SKIPPED`.
#[test]
fn the_go_fencing_example_sells_once_against_postgres() {
    run_postgres_example(
        "the_go_fencing_example_sells_once_against_postgres",
        "go/examples/fenced_postgres",
        &["sells with token", ": rejected", "release: not_holder", "sold once, to B"],
    );
}

/// go/examples/ticket_sale (docs/go.md, "Counted and multi-key holds"; docs/fencing.md
/// §2.1) against a real server and a throw-away PostgreSQL: 2 of 100 tickets per buyer
/// through 8 checkout permits with the store's conditional decrement, never oversold,
/// and families holding 4 adjacent seats all or nothing. The example exits 1 when a
/// ticket was oversold, more than 8 checkouts were inside at once, a seat was sold
/// twice or not exactly one of the two overlapping families was served. Needs what the
/// fencing example needs.
#[test]
fn the_go_ticket_sale_example_never_oversells_against_postgres() {
    run_postgres_example(
        "the_go_ticket_sale_example_never_oversells_against_postgres",
        "go/examples/ticket_sale",
        &["50 bought, 10 sold out; 100 tickets ordered, 0 left", "family-c: seats [207 208 209 210]"],
    );
}

/// `go run .` of a PostgreSQL example module in `dir` against a real server and a
/// throw-away PostgreSQL; its output must hold each of `expected`.
fn run_postgres_example(test: &str, dir: &str, expected: &[&str]) {
    if !have_go(test) {
        return;
    }
    let version = Command::new(go()).args(["env", "GOVERSION"]).output_within(TOOL);
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    let minor: u32 =
        version.strip_prefix("go1.").and_then(|v| v.split('.').next()?.parse().ok()).unwrap_or(0);
    if minor < 23 {
        eprintln!("SKIPPED {test}: {version} is older than pgx's Go 1.23");
        return;
    }
    if !postgres_or_skip(test, fenced_postgres::postgres_bin_dir().is_some()) {
        return;
    }
    let server = start_server(&[]);
    let pg = fenced_postgres::Postgres::start().expect("start PostgreSQL");
    let mut env = go_env();
    env.push(("TICKETING_ADDRS".into(), server.addr.to_string()));
    env.push(("TICKETING_AUTH_TOKEN".into(), TOKEN.into()));
    env.push(("FENCE_PG".into(), pg.conn.clone()));
    let (ok, output) = run(&go(), &["run", "."], &repo().join(dir), &env, Duration::from_secs(300));
    assert!(ok, "{dir} failed:\n{output}\nPostgreSQL:\n{}", pg.log());
    for expected in expected {
        assert!(output.contains(expected), "no {expected:?} in:\n{output}");
    }
    eprintln!("{output}");
}
