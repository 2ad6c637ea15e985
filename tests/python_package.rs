//! The Python package (python/, docs/python.md) against real servers: its pytest suite
//! (python/tests: grant, FIFO, busy and timeout, tokens, the context manager, 16
//! threads on one client, a paused server's indeterminate acquire and its resolve, a
//! leader killed mid-loop in a 3-node cluster, a wrong secret, bad arguments,
//! `cluster_name=` against servers named `blue` and unnamed) and the
//! README's Python example, run as written against a node.
//!
//! The package is used from the source tree (PYTHONPATH=python) with the libticketing.so
//! and the `ticketing` binary of this cargo run (TICKETING_LIBRARY, TICKETING_BIN), so
//! it tests this checkout. `.ci/run` also installs it with the README's command.
//!
//! Needs python3 (`$PYTHON`) and pytest. Without them the tests print `SKIPPED` and
//! pass, unless `TICKETING_REQUIRE_PYTHON=1` (set by `.ci/run`) makes that a failure.

mod common;

#[path = "../examples/fenced_postgres.rs"]
#[allow(dead_code)]
mod fenced_postgres;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::bindings::{have_or_skip, native_lib_dir, postgres_or_skip, run_in_group};
use common::{bin, repo, start_server, TOKEN};

fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

/// True when python imports `module`; else `SKIPPED` (or a failure under
/// TICKETING_REQUIRE_PYTHON=1), naming how to install it.
fn python_has(test: &str, module: &str, install: &str) -> bool {
    let probe = ["-c", &format!("import {module}")];
    have_or_skip(test, &python(), &probe, "TICKETING_REQUIRE_PYTHON", install)
}

/// `python args…` in `dir` with the source package and this build's library and binary
/// (see [`run_in_group`]). Returns (success, output).
fn run_python(args: &[&str], dir: &Path, env: &[(&str, &str)], limit: Duration) -> (bool, String) {
    let mut cmd = Command::new(python());
    cmd.args(args)
        .current_dir(dir)
        .env("PYTHONPATH", repo().join("python"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("TICKETING_LIBRARY", native_lib_dir().join("libticketing.so"))
        .env("TICKETING_BIN", bin())
        .envs(env.iter().copied());
    run_in_group(&mut cmd, limit)
}

#[test]
fn the_pytest_suite_passes_against_real_servers() {
    if !python_has("the_pytest_suite_passes_against_real_servers", "pytest", "pip install pytest") {
        return;
    }
    let args = ["-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "tests"];
    let (ok, output) = run_python(&args, &repo().join("python"), &[], Duration::from_secs(300));
    assert!(ok, "pytest failed:\n{output}");
    assert!(output.contains(" passed") && !output.contains(" skipped"), "{output}");
    // The summary lines, for the log of this run.
    for line in output.lines().filter(|l| l.starts_with("failover:") || l.starts_with("indeterminate")) {
        eprintln!("{line}");
    }
}

/// The README's ```python block, run as written against a standalone node: its address
/// (127.0.0.1:5225) is the node's, TICKETING_AUTH_TOKEN its secret.
#[test]
fn the_readme_python_example_runs_as_written_against_a_node() {
    if !python_has(
        "the_readme_python_example_runs_as_written_against_a_node",
        "os",
        "apt-get install python3",
    ) {
        return;
    }
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let start = readme.find("```python\n").expect("a ```python block in README.md") + 10;
    let example = &readme[start..start + readme[start..].find("```").unwrap()];
    assert!(example.contains("127.0.0.1:5225"), "the example talks to the node the CLI section starts");
    let server = start_server(&[]);
    let script = example.replace("127.0.0.1:5225", &server.addr.to_string());
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("example.py"), script).unwrap();
    let env = [("TICKETING_AUTH_TOKEN", TOKEN)];
    let (ok, output) = run_python(&["example.py"], dir.path(), &env, Duration::from_secs(60));
    assert!(ok, "README's Python example failed:\n{output}");
    for expected in ["selling seat 42 under fencing token", "Holder(owner='box-office-7'", "released"] {
        assert!(output.contains(expected), "no {expected:?} in:\n{output}");
    }
}

/// Runs the example `script` (under python/examples) against a real server and a
/// throw-away PostgreSQL, and gives its output once it succeeded; `None` (SKIPPED) without
/// psycopg or PostgreSQL (`.ci/run` installs both).
fn postgres_example(test: &str, script: &str, timeout: Duration) -> Option<String> {
    if !python_has(test, "psycopg", "pip install 'psycopg[binary]'") {
        return None;
    }
    if !postgres_or_skip(test, fenced_postgres::postgres_bin_dir().is_some()) {
        return None;
    }
    let server = start_server(&[]);
    let pg = fenced_postgres::Postgres::start().expect("start PostgreSQL");
    let addrs = server.addr.to_string();
    let env = [
        ("TICKETING_ADDRS", addrs.as_str()),
        ("TICKETING_AUTH_TOKEN", TOKEN),
        ("FENCE_PG", pg.conn.as_str()),
    ];
    let example = repo().join("python/examples").join(script);
    let (ok, output) = run_python(&[example.to_str().unwrap()], &repo().join("python"), &env, timeout);
    assert!(ok, "the Python example {script} failed:\n{output}\nPostgreSQL:\n{}", pg.log());
    eprintln!("{output}");
    Some(output)
}

/// python/examples/fenced_postgres.py (docs/python.md, "Fencing with the token"): A's
/// late write is rejected, sold once to B.
#[test]
fn the_python_fencing_example_sells_once_against_postgres() {
    let test = "the_python_fencing_example_sells_once_against_postgres";
    let Some(output) = postgres_example(test, "fenced_postgres.py", Duration::from_secs(60)) else { return };
    for expected in ["sells with token", ": rejected", "release: not_holder", "sold once, to B"] {
        assert!(output.contains(expected), "no {expected:?} in:\n{output}");
    }
}

/// python/examples/ticket_sale.py (docs/python.md, "Counted and multi-key holds"): 60
/// buyers of 2 of 100 tickets through a key of 8 permits, 50 bought, never more than 8
/// checkouts at once, nothing oversold; families holding 4 adjacent seats in one hold buy
/// all 4 or none.
#[test]
fn the_python_ticket_sale_example_never_oversells_against_postgres() {
    let test = "the_python_ticket_sale_example_never_oversells_against_postgres";
    let Some(output) = postgres_example(test, "ticket_sale.py", Duration::from_secs(120)) else { return };
    for expected in [
        "60 buyers of 2: 50 bought, 10 sold out; 100 tickets ordered, 0 left",
        "family-c: seats [207, 208, 209, 210]",
        "nothing oversold, no seat sold twice",
    ] {
        assert!(output.contains(expected), "no {expected:?} in:\n{output}");
    }
}

#[test]
fn the_package_version_is_the_crate_version() {
    let version = env!("CARGO_PKG_VERSION");
    let pyproject = std::fs::read_to_string(repo().join("python/pyproject.toml")).unwrap();
    assert!(pyproject.contains(&format!("\nversion = \"{version}\"\n")), "python/pyproject.toml");
    let init = std::fs::read_to_string(repo().join("python/ticketing/__init__.py")).unwrap();
    assert!(init.contains(&format!("__version__ = \"{version}\"")), "python/ticketing/__init__.py");
}

/// The files under `dir`, relative, sorted (the test's own copy of the package).
fn tree(dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            files.push(path.strip_prefix(dir).unwrap().display().to_string());
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    files.sort();
    files
}

/// `pip install ./python` (docs/python.md) writes nothing into the checkout: setuptools'
/// build/ and ticketing.egg-info/ go to a directory of their own. Run on a copy of the
/// package (with TICKETING_PREBUILT_LIBRARY, so no cargo build), installed with
/// `--target` into a temporary directory. pip fetches the build requirements
/// (setuptools, wheel): without a package index the test prints `SKIPPED`.
#[test]
fn pip_install_leaves_the_package_directory_as_it_was() {
    let test = "pip_install_leaves_the_package_directory_as_it_was";
    if !python_has(test, "pip", "apt-get install python3-pip") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("python");
    for file in ["README.md", "pyproject.toml", "setup.py"] {
        std::fs::create_dir_all(&copy).unwrap();
        std::fs::copy(repo().join("python").join(file), copy.join(file)).unwrap();
    }
    std::fs::create_dir_all(copy.join("ticketing")).unwrap();
    for entry in std::fs::read_dir(repo().join("python/ticketing")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        if name.ends_with(".py") || name == "py.typed" {
            std::fs::copy(&path, copy.join("ticketing").join(name)).unwrap();
        }
    }
    let before = tree(&copy);
    let target = dir.path().join("site");
    let lib = native_lib_dir().join("libticketing.so");
    let args = [
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--no-cache-dir",
        "--target",
        target.to_str().unwrap(),
        "./python",
    ];
    let env = [("TICKETING_PREBUILT_LIBRARY", lib.to_str().unwrap())];
    let (ok, output) = run_python(&args, dir.path(), &env, Duration::from_secs(300));
    if !ok && (output.contains("No matching distribution") || output.contains("Could not find a version")) {
        assert!(!std::env::var("TICKETING_REQUIRE_PYTHON").is_ok_and(|v| v == "1"), "{output}");
        eprintln!("SKIPPED {test}: pip cannot fetch the build requirements:\n{output}");
        return;
    }
    assert!(ok, "pip install failed:\n{output}");
    assert!(target.join("ticketing/libticketing.so").is_file(), "the library is in the installed package");
    assert_eq!(tree(&copy), before, "pip install wrote into the package directory:\n{output}");
}
