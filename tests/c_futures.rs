//! Futures of the C ABI, from C (tests/c/futures.c), built with AddressSanitizer and
//! UBSan where the toolchain has them, against real servers: blocking, a callback, a
//! completion queue watched with poll(2); cancel before and after the acquire was sent
//! (and the grant the server makes to a cancelled waiter released by the client); a
//! future freed while it waits; and 10 000 acquires waiting at once on one client —
//! fewer than 20 threads in the process, every one granted or timed out.

mod common;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Output;

use common::cc::{build_against_shared, cc_or_skip, command, sanitizers, test_source};
use common::children::TOOL;
use common::{run_within, start_server, TOKEN};

fn futures(test: &str, sanitized: bool) -> Option<(tempfile::TempDir, PathBuf)> {
    let cc = cc_or_skip(test)?;
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("futures");
    let flags = if sanitized { sanitizers(&cc) } else { vec!["-O2".to_string()] };
    build_against_shared(&cc, &test_source("futures.c"), &program, &flags);
    Some((dir, program))
}

fn check(output: &Output, lines: &[&str]) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the program failed ({}):\n{stdout}\n{stderr}", output.status);
    for line in lines {
        assert!(stdout.contains(line), "no {line:?} in:\n{stdout}\n{stderr}");
    }
    assert!(stderr.is_empty(), "standard error:\n{stderr}");
    stdout
}

#[test]
fn a_future_is_blocked_on_heard_through_a_callback_or_a_queue_and_read_once() {
    let Some((_dir, program)) = futures("a_future_is_blocked_on", true) else { return };
    let server = start_server(&[]);
    let output =
        run_within(command(&program).arg(server.addr.to_string()).arg(TOKEN).arg("basics"), TOOL, "basics");
    check(
        &output,
        &[
            "acquire future: granted, outcome taken once",
            "release future: callback once, released; a ready future's callback runs at once",
            "bad arguments: refused at start, no future",
            "queue: two tags through the descriptor, busy and granted",
            "done",
        ],
    );
}

#[test]
fn a_cancelled_waiter_is_indeterminate_and_its_grant_is_released() {
    let Some((_dir, program)) = futures("a_cancelled_waiter", true) else { return };
    let server = start_server(&[]);
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let output = run_within(
        command(&program).arg(server.addr.to_string()).arg(TOKEN).args(["cancel", &dead]),
        TOOL,
        "cancel",
    );
    check(
        &output,
        &[
            "cancel after send: indeterminate, cause cancelled",
            "the cancelled waiter's grant was released",
            "a freed waiting future: its grant was released",
            "cancel before send: cancelled, not acquired",
            "done",
        ],
    );
}

#[test]
fn ten_thousand_acquires_wait_at_once_without_a_thread_each() {
    // Optimised, without the sanitizers: this one measures the library's own threads.
    let Some((_dir, program)) = futures("ten_thousand_acquires_wait_at_once", false) else { return };
    let server = start_server(&[]);
    let output = run_within(
        command(&program).arg(server.addr.to_string()).arg(TOKEN).arg("ten-thousand"),
        TOOL,
        "ten-thousand",
    );
    let stdout = check(&output, &["done"]);
    eprintln!("{stdout}");
    let line = stdout.lines().find(|l| l.starts_with("waiting: ")).expect("a waiting line");
    let threads: usize =
        line.split("threads ").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap();
    assert!(threads < 20, "{threads} threads while 10 000 acquires wait: {line}");
}
