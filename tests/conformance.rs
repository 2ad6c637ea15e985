//! One conformance suite for every library (docs/conformance.md): the same scenarios,
//! against real server processes, through a small driver program per library that reads
//! one command per line and writes one outcome per line. A library that fails a
//! scenario is not released.
//!
//! This binary has no test harness of its own: run as a driver (with
//! `TICKETING_CONFORMANCE_DRIVER=1`) it is the Rust client's driver; otherwise it runs
//! every scenario against every library this machine can build, prints one line per
//! library and scenario, and fails when any failed. `CONFORMANCE_ONLY=c,python` limits
//! it to some libraries; the libraries run side by side, `CONFORMANCE_JOBS` (3) at a
//! time, each its scenarios one after another.

mod common;
#[path = "conformance/driver.rs"]
mod driver;
#[path = "conformance/holds.rs"]
mod holds;
#[path = "conformance/libraries.rs"]
mod libraries;
#[path = "conformance/pki.rs"]
mod pki;
#[path = "conformance/rust_driver.rs"]
mod rust_driver;
#[path = "conformance/scenarios.rs"]
mod scenarios;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

fn main() {
    if std::env::var(libraries::DRIVER_VAR).is_ok_and(|v| v == "1") {
        rust_driver::run();
        return;
    }
    let only: Option<Vec<String>> =
        std::env::var("CONFORMANCE_ONLY").ok().map(|v| v.split(',').map(str::to_owned).collect());
    // CONFORMANCE_SCENARIOS=holds,deadline: only scenarios whose name contains one of them.
    let scenarios_only: Option<Vec<String>> =
        std::env::var("CONFORMANCE_SCENARIOS").ok().map(|v| v.split(',').map(str::to_owned).collect());
    type Run = (&'static str, fn(&driver::Launch));
    let scenarios: Vec<Run> = scenarios::ALL
        .iter()
        .chain(holds::ALL)
        .copied()
        .filter(|(name, _)| {
            scenarios_only.as_ref().is_none_or(|only| only.iter().any(|o| name.contains(o.as_str())))
        })
        .collect();
    let libraries =
        libraries::available(|name| only.as_ref().is_none_or(|only| only.iter().any(|o| o == name)));
    // The libraries run side by side, CONFORMANCE_JOBS at a time (default 3): each
    // scenario starts servers of its own on ports of its own, so only the machine is
    // shared, and a scenario waits on facts, not on time. The last listed (Java's, the
    // slowest to start) go first: workers take from the end.
    let jobs: usize = std::env::var("CONFORMANCE_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(3).max(1);
    let queue = std::sync::Mutex::new(libraries);
    let failures = std::sync::Mutex::new(Vec::new());
    let started = Instant::now();
    std::thread::scope(|scope| {
        for worker in 0..jobs {
            let (queue, failures, scenarios) = (&queue, &failures, &scenarios);
            std::thread::Builder::new()
                .name(format!("conformance-{worker}"))
                .spawn_scoped(scope, move || loop {
                    let Some(library) = queue.lock().unwrap().pop() else { return };
                    for (scenario, run) in scenarios {
                        let t = Instant::now();
                        let result = catch_unwind(AssertUnwindSafe(|| run(&library.launch)));
                        let verdict = if result.is_ok() { "ok" } else { "FAILED" };
                        println!(
                            "conformance {:<15} {scenario:<64} {verdict} ({:.1} s)",
                            library.name,
                            t.elapsed().as_secs_f64()
                        );
                        if result.is_err() {
                            failures.lock().unwrap().push(format!("{}: {scenario}", library.name));
                        }
                    }
                })
                .expect("a conformance worker thread");
        }
    });
    let failures = failures.into_inner().unwrap();
    println!("conformance: {} failures in {:.0} s", failures.len(), started.elapsed().as_secs_f64());
    if !failures.is_empty() {
        eprintln!("failed:\n  {}", failures.join("\n  "));
        std::process::exit(1);
    }
}
