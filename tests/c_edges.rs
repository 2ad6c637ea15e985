//! The C ABI at the edges of a process, from C and C++ (tests/c/edges.c,
//! tests/c/global_guard.cpp), built with AddressSanitizer and UBSan where the toolchain
//! has them, against real servers: a lock released from an `atexit` handler, a C++
//! global destructor and a `pthread_key` destructor is released (the key is free the
//! moment the program has exited); a failed release can be retried through the same
//! handle as include/ticketing.h says; absurd counts are `TICKETING_INVALID`; handles
//! used after free fail loudly instead of hanging; a panic inside the library prints
//! nothing unless the program set a logger; a client used after fork() fails at once in
//! the child and the parent goes on.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::cc::{build_against_shared, cc_or_skip, command, cxx_or_skip, sanitizers, test_source};
use common::children::{Deadline, TOOL};
use common::{run_within, start_server, ServerProcess, TOKEN};

/// tests/c/edges.c built once per test (with the sanitizers when available).
fn edges(test: &str) -> Option<(tempfile::TempDir, PathBuf)> {
    let cc = cc_or_skip(test)?;
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("edges");
    build_against_shared(&cc, &test_source("edges.c"), &program, &sanitizers(&cc));
    Some((dir, program))
}

fn run(program: &Path, server: &ServerProcess, args: &[&str]) -> Output {
    let mut cmd = command(program);
    cmd.arg(server.addr.to_string()).arg(TOKEN).args(args);
    run_within(&mut cmd, TOOL, &format!("tests/c/edges.c {}", args[0]))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The program succeeded, printed `lines`, and wrote nothing to standard error.
fn check(output: &Output, lines: &[&str]) -> String {
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(output.status.success(), "the program failed ({}):\n{stdout}\n{stderr}", output.status);
    for line in lines {
        assert!(stdout.contains(line), "no {line:?} in:\n{stdout}\nstderr:\n{stderr}");
    }
    assert!(stderr.is_empty(), "the program's standard error is not empty:\n{stderr}");
    stdout
}

/// The key is free on the server right now (nobody released it for the program if it
/// did not: its lease was 20 s).
fn assert_free(server: &ServerProcess, key: &str) {
    let holder = server.client("checker").query(key).unwrap();
    assert!(holder.is_none(), "{key} is still held after the program exited: {holder:?}");
}

#[test]
fn a_release_from_an_atexit_handler_releases_the_key() {
    let Some((_dir, program)) = edges("a_release_from_an_atexit_handler") else { return };
    let server = start_server(&[]);
    let output = run(&program, &server, &["atexit", "at-exit"]);
    check(&output, &["acquired at-exit", "atexit release: released"]);
    assert_free(&server, "at-exit");
}

#[test]
fn a_release_from_a_pthread_key_destructor_releases_the_key() {
    let Some((_dir, program)) = edges("a_release_from_a_pthread_key_destructor") else { return };
    let server = start_server(&[]);
    let output = run(&program, &server, &["pthread-key", "thread-key"]);
    check(&output, &["pthread_key destructor release: released", "done"]);
    assert_free(&server, "thread-key");
}

#[test]
fn a_release_from_a_cxx_global_destructor_releases_the_key() {
    let test = "a_release_from_a_cxx_global_destructor";
    let Some(cxx) = cxx_or_skip(test) else { return };
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("global_guard");
    build_against_shared(&cxx, &test_source("global_guard.cpp"), &program, &sanitizers(&cxx));
    let server = start_server(&[]);
    let mut cmd = command(&program);
    cmd.arg(server.addr.to_string()).arg(TOKEN).arg("global");
    let output = run_within(&mut cmd, TOOL, "tests/c/global_guard.cpp");
    check(&output, &["acquired global", "global destructor release: released"]);
    assert_free(&server, "global");
}

/// Runs an interactive mode: at each `ready:` line the harness does the next step.
fn interactive(
    program: &Path,
    server: &mut ServerProcess,
    mode: &str,
    steps: &mut [&mut dyn FnMut(&mut ServerProcess)],
) -> String {
    let mut child = command(program)
        .arg(server.addr.to_string())
        .arg(TOKEN)
        .args([mode, mode])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its output ends when it exits, or when the deadline kills it.
    let deadline = Deadline::watch(&child, TOOL, &format!("tests/c/edges.c {mode}"), false);
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = String::new();
    let mut next = 0;
    while let Some(Ok(line)) = lines.next() {
        seen.push_str(&line);
        seen.push('\n');
        if line.starts_with("ready:") {
            assert!(next < steps.len(), "an unexpected step: {line}\n{seen}");
            (steps[next])(server);
            next += 1;
            writeln!(stdin, "go").unwrap();
        }
    }
    let output = child.wait_with_output().unwrap();
    deadline.end();
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{mode} failed ({}):\n{seen}\n{stderr}", output.status);
    assert!(stderr.is_empty(), "standard error is not empty:\n{stderr}");
    assert_eq!(next, steps.len(), "not every step was reached:\n{seen}");
    seen
}

#[test]
fn an_unconfirmed_release_stays_releasable_and_the_retry_learns_the_outcome() {
    let Some((_dir, program)) = edges("an_unconfirmed_release_stays_releasable") else { return };
    let mut server = start_server(&[]);
    let mut pause = |s: &mut ServerProcess| assert!(s.signal("-STOP"));
    let mut resume = |s: &mut ServerProcess| assert!(s.signal("-CONT"));
    let seen = interactive(&program, &mut server, "release-retry-paused", &mut [&mut pause, &mut resume]);
    assert!(seen.contains("retry after unconfirmed: release"), "{seen}");
    assert!(seen.contains("release after success: invalid, already released"), "{seen}");
    assert_free(&server, "release-retry-paused");
}

#[test]
fn an_unavailable_release_is_retryable_through_the_same_handle() {
    let Some((_dir, program)) = edges("an_unavailable_release_is_retryable") else { return };
    let mut server = start_server(&[]);
    let mut kill = |s: &mut ServerProcess| s.kill();
    let seen = interactive(&program, &mut server, "release-retry-dead", &mut [&mut kill]);
    assert!(seen.contains("release on a dead server: unavailable twice, retryable"), "{seen}");
}

#[test]
fn absurd_counts_are_invalid_before_anything_is_read() {
    let Some((_dir, program)) = edges("absurd_counts_are_invalid") else { return };
    let server = start_server(&[]);
    let started = Instant::now();
    let output = run(&program, &server, &["limits"]);
    check(
        &output,
        &[
            "huge addrs_len: invalid: addrs_len is 1099511627776; a client takes at most 64",
            "huge auth_token_len: invalid",
            "done",
        ],
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn handles_used_after_free_or_of_the_wrong_kind_are_invalid_not_a_hang() {
    let Some((_dir, program)) = edges("handles_used_after_free") else { return };
    let server = start_server(&[]);
    let started = Instant::now();
    let output = run(&program, &server, &["use-after-free", "after-free"]);
    check(
        &output,
        &[
            "wrong kind of handle: invalid",
            "lock used after free: invalid",
            "client used after free: invalid",
            "done",
        ],
    );
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
}

#[test]
fn a_double_free_aborts_with_one_line_naming_the_mistake() {
    let Some((_dir, program)) = edges("a_double_free_aborts") else { return };
    let server = start_server(&[]);
    let output = run(&program, &server, &["double-free", "double-free"]);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(!output.status.success(), "a double free went on:\n{stdout}");
    assert!(stdout.contains("freeing the lock again") && !stdout.contains("FAILED"), "{stdout}");
    assert!(
        stderr.contains(
            "libticketing: ticketing_lock_free: the argument is not a live ticketing_lock: it was freed already, \
             or it is another kind of handle; aborting"
        ),
        "{stderr}"
    );
}

#[test]
fn a_panic_inside_the_library_prints_nothing_and_reaches_a_logger_when_one_is_set() {
    let Some((_dir, program)) = edges("a_panic_inside_the_library") else { return };
    let server = start_server(&[]);
    // RUST_BACKTRACE would make Rust's default hook print a backtrace too.
    let mut cmd = command(&program);
    cmd.arg(server.addr.to_string()).arg(TOKEN).arg("panic-quiet").env("RUST_BACKTRACE", "1");
    let quiet = run_within(&mut cmd, TOOL, "tests/c/edges.c panic-quiet");
    check(&quiet, &["panics: internal, twice", "done"]);
    let logged = run(&program, &server, &["panic-logged"]);
    let stdout = check(&logged, &["panics: internal, twice", "done"]);
    assert!(stdout.contains("the logger got: ") && stdout.contains("a test panic"), "{stdout}");
}

#[test]
fn a_client_used_after_fork_fails_at_once_in_the_child_and_the_parent_goes_on() {
    let Some((_dir, program)) = edges("a_client_used_after_fork") else { return };
    let server = start_server(&[]);
    let output = run(&program, &server, &["fork", "fork:key"]);
    let stdout = check(
        &output,
        &[
            "child: unavailable, the same error object twice: ",
            "parent after fork release: released",
            "parent's lock held across the fork release: released",
            "done",
        ],
    );
    assert!(stdout.contains("create a new client in this process, with its own owner"), "{stdout}");
    assert_free(&server, "fork:key");
    assert_free(&server, "fork:held");
}

#[test]
fn a_wait_check_stops_a_blocking_wait_and_the_key_is_released_afterwards() {
    let Some((_dir, program)) = edges("a_wait_check_stops_a_blocking_wait") else { return };
    let server = start_server(&[]);
    let output = run(&program, &server, &["wait-check", "checked"]);
    check(
        &output,
        &[
            "wait check: ",
            "after 3 checks",
            "block_until_ready wait check: ",
            "holder release: released",
            "done",
        ],
    );
    // The holder let go; the stopped waiter's grant, if the server made one, is the
    // client's to release: the key ends free.
    let checker = server.client("checker");
    assert!(common::eventually(Duration::from_secs(10), || matches!(checker.query("checked"), Ok(None))));
}
