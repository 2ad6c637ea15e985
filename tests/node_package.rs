//! The Node.js package (node/, docs/node.md) against real servers: its `node --test`
//! suite (grant, FIFO, busy and timeout, release outcomes, withLock on throw, 64
//! concurrent operations on one client, an aborted written acquire, bad arguments, a
//! wrong secret, `clusterName` against servers named `blue` and unnamed, a paused
//! server's indeterminate acquire and its resolve, client threads never held by the
//! event loop, 1,000 waits without a thread each, exit and close, the
//! TypeScript types with `await using`), the README's Node example, run as written
//! against a node, and the fencing example (node/examples/fenced-postgres.mjs, `pg`)
//! against a throw-away PostgreSQL.
//!
//! The package is used from the source tree with the libticketing.so and the `ticketing`
//! binary of this cargo run (TICKETING_LIBRARY, TICKETING_BIN), so it tests this
//! checkout; its npm dependencies (koffi; TypeScript and pg for the tests) are
//! installed in node/ by `npm install` when missing. Needs Node.js 18 or newer with npm.
//! Without them the tests print `SKIPPED` and pass, unless `TICKETING_REQUIRE_NODE=1`
//! (set by `.ci/run`) makes that a failure.

mod common;

#[path = "../examples/fenced_postgres.rs"]
#[allow(dead_code)]
mod fenced_postgres;

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use common::bindings::{have_or_skip, native_lib_dir, postgres_or_skip, run_in_group};
use common::{bin, repo, start_server, TOKEN};

fn node() -> String {
    std::env::var("NODE").unwrap_or_else(|_| "node".into())
}

/// True when Node.js 18 or newer and npm run; else `SKIPPED` (or a failure under
/// TICKETING_REQUIRE_NODE=1), naming how to install them.
fn have_node(test: &str) -> bool {
    let install = "apt-get install nodejs npm (Node.js 18 or newer)";
    let probe = ["-e", "process.exit(Number(process.versions.node.split('.')[0]) >= 18 ? 0 : 1)"];
    have_or_skip(test, &node(), &probe, "TICKETING_REQUIRE_NODE", install)
        && have_or_skip(test, "npm", &["--version"], "TICKETING_REQUIRE_NODE", install)
}

/// node/node_modules with the package's dependencies, installed once per run when missing
/// (`--ignore-scripts`: the library is this run's, through TICKETING_LIBRARY).
fn dependencies() {
    static ONCE: Mutex<bool> = Mutex::new(false);
    let mut done = ONCE.lock().unwrap_or_else(|e| e.into_inner());
    let modules = repo().join("node/node_modules");
    let installed =
        ["koffi", "typescript", "pg"].iter().all(|m| modules.join(m).join("package.json").is_file());
    if *done || installed {
        *done = true;
        return;
    }
    let args = ["install", "--ignore-scripts", "--no-audit", "--no-fund"];
    let (ok, output) = run("npm", &args, &repo().join("node"), &[], Duration::from_secs(300));
    assert!(ok, "npm install in node/ failed:\n{output}");
    *done = true;
}

/// `program args…` in `dir` with this build's library and binary (see
/// [`run_in_group`]). Returns (success, output).
fn run(program: &str, args: &[&str], dir: &Path, env: &[(&str, &str)], limit: Duration) -> (bool, String) {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(dir)
        .env("TICKETING_LIBRARY", native_lib_dir().join("libticketing.so"))
        .env("TICKETING_BIN", bin())
        .envs(env.iter().copied());
    run_in_group(&mut cmd, limit)
}

#[test]
fn the_node_test_suite_passes_against_real_servers() {
    if !have_node("the_node_test_suite_passes_against_real_servers") {
        return;
    }
    dependencies();
    let dir = repo().join("node");
    let mut files: Vec<String> = std::fs::read_dir(dir.join("test"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".test.mjs"))
        .map(|name| format!("test/{name}"))
        .collect();
    files.sort();
    let mut args = vec!["--test"];
    args.extend(files.iter().map(String::as_str));
    let (ok, output) = run(&node(), &args, &dir, &[], Duration::from_secs(400));
    assert!(ok, "node --test failed:\n{output}");
    assert!(output.contains("\n# fail 0") && output.contains("\n# skipped 0"), "{output}");
    // The summary lines, for the log of this run.
    for line in output.lines().filter(|l| l.starts_with("# threads:") || l.starts_with("# indeterminate")) {
        eprintln!("{line}");
    }
}

/// The README's ```js block, run as written against a standalone node: its address
/// (127.0.0.1:5225) is the node's, TICKETING_AUTH_TOKEN its secret; "ticketing" is the
/// package as `npm install ./node` links it.
#[test]
fn the_readme_node_example_runs_as_written_against_a_node() {
    if !have_node("the_readme_node_example_runs_as_written_against_a_node") {
        return;
    }
    dependencies();
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let start = readme.find("```js\n").expect("a ```js block in README.md") + 6;
    let example = &readme[start..start + readme[start..].find("```").unwrap()];
    assert!(example.contains("127.0.0.1:5225"), "the example talks to the node the CLI section starts");
    let server = start_server(&[]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("example.mjs"),
        example.replace("127.0.0.1:5225", &server.addr.to_string()),
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("node_modules")).unwrap();
    std::os::unix::fs::symlink(repo().join("node"), dir.path().join("node_modules/ticketing")).unwrap();
    let env = [("TICKETING_AUTH_TOKEN", TOKEN)];
    let (ok, output) = run(&node(), &["example.mjs"], dir.path(), &env, Duration::from_secs(60));
    assert!(ok, "README's Node example failed:\n{output}");
    for expected in ["selling seat 42 under fencing token", "held by box-office-7", "released"] {
        assert!(output.contains(expected), "no {expected:?} in:\n{output}");
    }
}

/// Runs the example `script` (under node/) against a real server and a throw-away
/// PostgreSQL, and gives its output once it succeeded; `None` (SKIPPED) without Node.js or
/// PostgreSQL (`.ci/run` installs both).
fn postgres_example(test: &str, script: &str, timeout: Duration) -> Option<String> {
    if !have_node(test) {
        return None;
    }
    if !postgres_or_skip(test, fenced_postgres::postgres_bin_dir().is_some()) {
        return None;
    }
    dependencies();
    let server = start_server(&[]);
    let pg = fenced_postgres::Postgres::start().expect("start PostgreSQL");
    let addr = server.addr.to_string();
    let env =
        [("TICKETING_ADDRS", addr.as_str()), ("TICKETING_AUTH_TOKEN", TOKEN), ("FENCE_PG", pg.conn.as_str())];
    let (ok, output) = run(&node(), &[script], &repo().join("node"), &env, timeout);
    assert!(ok, "the Node example {script} failed:\n{output}\nPostgreSQL:\n{}", pg.log());
    eprintln!("{output}");
    Some(output)
}

/// node/examples/fenced-postgres.mjs (docs/node.md, "Fencing with the token"): A's late
/// write is rejected, sold once to B.
#[test]
fn the_node_fencing_example_sells_once_against_postgres() {
    let test = "the_node_fencing_example_sells_once_against_postgres";
    let Some(output) = postgres_example(test, "examples/fenced-postgres.mjs", Duration::from_secs(120))
    else {
        return;
    };
    for expected in ["sells with token", ": rejected", "release: notHolder", "sold once, to B"] {
        assert!(output.contains(expected), "no {expected:?} in:\n{output}");
    }
}

/// node/examples/ticket-sale.mjs (docs/node.md, "Counted and multi-key holds"): 100
/// tickets ordered and never more than 8 checkouts at once, each seat sold once, one of
/// the two overlapping families served.
#[test]
fn the_node_ticket_sale_example_never_oversells_against_postgres() {
    let test = "the_node_ticket_sale_example_never_oversells_against_postgres";
    let Some(output) = postgres_example(test, "examples/ticket-sale.mjs", Duration::from_secs(180)) else {
        return;
    };
    for expected in [
        "50 bought, 10 sold out; 100 tickets ordered, 0 left",
        "(capacity 8)",
        "family-c: seats [207, 208, 209, 210]",
        "nothing oversold, no seat sold twice",
    ] {
        assert!(output.contains(expected), "no {expected:?} in:\n{output}");
    }
    let families: Vec<_> =
        ["family-a: seats", "family-b: seats"].iter().filter(|f| output.contains(*f)).collect();
    assert_eq!(families.len(), 1, "exactly one of the overlapping families served:\n{output}");
}
