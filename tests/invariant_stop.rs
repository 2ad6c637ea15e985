//! A violated invariant stops the process (src/invariant.rs): the server's panic hook
//! turns it into exit status 70, from any thread, and so does a panic of a vital thread
//! (one started by `invariant::spawn_vital`, whatever its name); another thread's
//! ordinary panic ends only that thread.
//!
//! Each case runs in a child process (this test binary run again with `INVARIANT_CASE`),
//! because the hook ends the whole process.

mod common;

use std::process::Command;

use common::children::{Within, CLI};
use ticketing::invariant::{self, EXIT_VIOLATION};

fn case(name: &str) -> std::process::Output {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env("INVARIANT_CASE", name)
        .output_within(CLI)
}

/// The child: installs the hook, then does what `INVARIANT_CASE` says.
#[test]
fn child() {
    let Ok(which) = std::env::var("INVARIANT_CASE") else { return };
    invariant::stop_on_violation();
    let on = |name: &str, f: fn()| std::thread::Builder::new().name(name.into()).spawn(f).unwrap().join();
    match which.as_str() {
        "violation" => {
            let _ = on("conn-1", || ticketing::invariant!(1 + 1 == 3, "arithmetic", "1 + 1 is {}", 1 + 1));
        }
        "vital" => {
            let _ = invariant::spawn_vital("lock-table", || panic!("index out of bounds")).unwrap().join();
        }
        "named" => {
            // Named like a vital thread, started like any other: its panic ends it alone.
            let _ = on("lock-table", || panic!("index out of bounds"));
        }
        "other" => {
            let _ = on("conn-1", || panic!("index out of bounds"));
        }
        _ => unreachable!(),
    }
    println!("still running");
}

#[test]
fn a_violated_invariant_on_any_thread_stops_the_process_with_status_70() {
    let out = case("violation");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(EXIT_VIOLATION), "{stderr}");
    assert!(stderr.contains("ticketing: stopping: invariant violated: arithmetic: 1 + 1 is 2"), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("still running"));
}

#[test]
fn a_panic_of_the_lock_table_thread_stops_the_process() {
    let out = case("vital");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(EXIT_VIOLATION), "{stderr}");
    assert!(stderr.contains("the lock-table thread panicked: index out of bounds"), "{stderr}");
}

#[test]
fn a_connection_threads_ordinary_panic_ends_only_that_thread() {
    let out = case("other");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("still running"));
}

#[test]
fn a_thread_is_vital_by_how_it_was_started_not_by_its_name() {
    let out = case("named");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("still running"));
}
