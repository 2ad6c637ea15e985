//! The C ABI from C: tests/c/ticketing_test.c is built with `cc` against
//! include/ticketing.h, once linked to libticketing.so and once to libticketing.a (both
//! made by this `cargo test` run: the crate's cdylib and staticlib), and run against a
//! real standalone server: acquire, query, release and their outcomes, busy, timeout,
//! bad arguments, a wrong secret, and 8 threads sharing one client on one key; and
//! tests/c/cluster_name.c against a server named `blue` and one without a name
//! (`ticketing_client_new_named`).
//!
//! Needs a C compiler (`cc`, or `$CC`). Without one the tests print `SKIPPED` and pass,
//! unless `TICKETING_REQUIRE_CC=1` (set by `.ci/run`) makes that a failure.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::bindings::{have_or_skip, native_lib_dir, run_in_group};
use common::children::{try_run_within, BUILD, TOOL};
use common::{repo, run_within, start_server, Server, TOKEN};

/// The C compiler (`$CC`, else `cc`), or `None` after printing why the test is skipped.
fn cc_or_skip(test: &str) -> Option<String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    have_or_skip(test, &cc, &["--version"], "TICKETING_REQUIRE_CC", "apt-get install gcc").then_some(cc)
}

/// Builds `source` (against include/ticketing.h, warnings as errors) into `out`,
/// linking `link` (the arguments naming the library).
fn build(cc: &str, source: &Path, out: &Path, link: &[&str]) {
    let output = run_within(
        Command::new(cc)
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pthread", "-I"])
            .arg(repo().join("include"))
            .arg(source)
            .arg("-o")
            .arg(out)
            .args(link),
        BUILD,
        cc,
    );
    assert!(output.status.success(), "{cc} failed:\n{}", String::from_utf8_lossy(&output.stderr));
}

/// Runs the built program against a fresh server; returns its standard output.
fn run(program: &Path, lib_dir: &Path) -> String {
    let server = start_server(&[]);
    let started = Instant::now();
    let output = run_within(
        Command::new(program).args([server.addr.to_string().as_str(), TOKEN]).env("LD_LIBRARY_PATH", lib_dir),
        TOOL,
        "the C test program",
    );
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{} failed ({}):\n{stdout}\n{}",
        program.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(started.elapsed() < Duration::from_secs(60));
    stdout
}

fn check(stdout: &str) {
    for line in [
        "acquire and query: token",
        "busy and timeout: ok",
        "release: released, then not holder",
        "bad arguments: invalid",
        "threads: 8 threads x 40 turns on one key",
        "wrong secret: no server can be used",
        "checks passed",
    ] {
        assert!(stdout.contains(line), "no {line:?} in:\n{stdout}");
    }
    assert!(stdout.contains("the server refused our auth token"), "{stdout}");
}

/// Builds the test program as `name`, linked by the arguments `link` gives for the
/// library directory, and runs it with `LD_LIBRARY_PATH` = what `search` gives; checks
/// its report. Returns the program (in `dir`) and its output.
fn build_and_run(
    test: &str,
    name: &str,
    link: impl Fn(&Path) -> Vec<String>,
    search: impl Fn(&Path) -> PathBuf,
) -> Option<(tempfile::TempDir, PathBuf, String)> {
    let cc = cc_or_skip(test)?;
    let lib = native_lib_dir();
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join(name);
    let link = link(&lib);
    let source = repo().join("tests/c/ticketing_test.c");
    build(&cc, &source, &program, &link.iter().map(String::as_str).collect::<Vec<_>>());
    let stdout = run(&program, &search(dir.path()));
    check(&stdout);
    Some((dir, program, stdout))
}

#[test]
fn a_c_program_linked_to_the_shared_library_acquires_releases_and_shares_a_client() {
    let test = "a_c_program_linked_to_the_shared_library";
    let link = |lib: &Path| vec![format!("-L{}", lib.display()), "-lticketing".into()];
    if let Some((_, _, stdout)) = build_and_run(test, "ticketing_test_shared", link, |_| native_lib_dir()) {
        eprintln!("{stdout}");
    }
}

#[test]
fn a_c_program_linked_to_the_static_library_needs_no_shared_ticketing() {
    let test = "a_c_program_linked_to_the_static_library";
    // The system libraries the staticlib needs (`rustc --print native-static-libs`).
    let link = |lib: &Path| {
        let archive = lib.join("libticketing.a").display().to_string();
        [archive.as_str(), "-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl"].map(String::from).to_vec()
    };
    // A library path holding nothing: the program must not need libticketing.so.
    let empty = |dir: &Path| {
        let empty = dir.join("no-libs");
        std::fs::create_dir_all(&empty).unwrap();
        empty
    };
    let Some((_dir, program, _)) = build_and_run(test, "ticketing_test_static", link, empty) else { return };
    if let Ok(needed) = try_run_within(Command::new("readelf").arg("-d").arg(&program), TOOL, "readelf") {
        let text = String::from_utf8_lossy(&needed.stdout);
        assert!(!text.contains("libticketing"), "linked to the shared library:\n{text}");
    }
}

/// docs/c.md's example compiles and links as written (the doc's own commands: no stub
/// added), and, with the addresses and the secret of a real node put in, runs: it sells
/// the seat under a fencing token.
#[test]
fn the_example_of_docs_c_md_links_and_runs_as_written() {
    let Some(cc) = cc_or_skip("the_example_of_docs_c_md_links_and_runs_as_written") else { return };
    let doc = std::fs::read_to_string(repo().join("docs/c.md")).unwrap();
    let start = doc.find("```c\n").expect("a ```c block in docs/c.md") + 5;
    let example = &doc[start..start + doc[start..].find("```").unwrap()];
    let dir = tempfile::tempdir().unwrap();
    let search = format!("-L{}", native_lib_dir().display());
    let source = dir.path().join("example.c");
    std::fs::write(&source, example).unwrap();
    build(&cc, &source, &dir.path().join("example"), &[&search, "-lticketing"]);

    let server = start_server(&[]);
    let addr = server.addr.to_string();
    let local = example
        .replace("{\"10.0.0.1:5225\", \"10.0.0.2:5225\", \"10.0.0.3:5225\"}", &format!("{{\"{addr}\"}}"))
        .replace("ticketing_client_new(addrs, 3,", "ticketing_client_new(addrs, 1,")
        .replace("\"a secret of at least 16 bytes\"", &format!("\"{TOKEN}\""));
    assert!(local.contains(&addr) && local.contains(TOKEN), "the example's addresses or secret moved");
    let source = dir.path().join("local.c");
    std::fs::write(&source, local).unwrap();
    let program = dir.path().join("local");
    build(&cc, &source, &program, &[&search, "-lticketing"]);
    let output =
        run_within(Command::new(&program).env("LD_LIBRARY_PATH", native_lib_dir()), TOOL, "the example");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.starts_with("seat 42 sold under fencing token "), "{stdout}");
}

/// `ticketing_client_new_named`: a bad name is `TICKETING_CONFIG` naming `cluster_name`
/// (or the binding's own setting); against a server named `blue`, a client named `blue`
/// (or given NULL) acquires, and one named `green` — or named at a server without a
/// name — is sent nothing: unavailable, not retryable, naming both names.
#[test]
fn a_c_client_named_for_one_cluster_is_sent_nothing_by_another() {
    let Some(cc) = cc_or_skip("a_c_client_named_for_one_cluster_is_sent_nothing_by_another") else { return };
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("cluster_name");
    let search = format!("-L{}", native_lib_dir().display());
    build(&cc, &repo().join("tests/c/cluster_name.c"), &program, &[&search, "-lticketing"]);
    let blue = Server::new().env("TICKETING_CLUSTER_NAME", "blue").start();
    let unnamed = start_server(&[]);
    let mut cmd = Command::new(&program);
    cmd.args([blue.addr.to_string().as_str(), unnamed.addr.to_string().as_str(), TOKEN])
        .env("LD_LIBRARY_PATH", native_lib_dir());
    let (ok, output) = run_in_group(&mut cmd, Duration::from_secs(120));
    assert!(ok, "{} failed:\n{output}", program.display());
    for line in ["bad names: config", "blue at blue, and no name anywhere: acquired", "checks passed"] {
        assert!(output.contains(line), "no {line:?} in:\n{output}");
    }
    eprintln!("{output}");
}
