//! `ticketing bench` against a real standalone server: runs, and prints the JSON
//! shape scripts rely on. No speed threshold: this machine is shared.

mod common;

use std::process::Command;

use common::children::{Within, CLI};
use common::*;

fn bench_json(addr: &str, args: &[&str]) -> String {
    let out = Command::new(bin())
        .arg("bench")
        .args(args)
        .args(["--addr", addr, "--duration", "1", "--warmup", "0", "--json", "--quiet"])
        .env("TICKETING_AUTH_TOKEN", TOKEN)
        .output_within(CLI);
    assert!(out.status.success(), "bench failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn field<'a>(json: &'a str, name: &str) -> &'a str {
    let at = json.find(&format!("\"{name}\":")).unwrap_or_else(|| panic!("no {name} in {json}"));
    let rest = &json[at + name.len() + 3..];
    let end = rest.find([',', '}']).unwrap();
    &rest[..end]
}

#[test]
fn bench_prints_json_for_each_scenario() {
    let server = start_server(&[]);
    let addr = server.addr.to_string();
    for (scenario, extra) in [
        ("uncontended", vec!["--connections", "2"]),
        ("hot", vec!["--threads", "4"]),
        ("mixed", vec!["--connections", "2", "--pipeline", "2"]),
    ] {
        let mut args = vec![scenario];
        args.extend(extra);
        let json = bench_json(&addr, &args);
        assert!(json.trim_start().starts_with('{') && json.trim_end().ends_with('}'), "{json}");
        assert_eq!(field(&json, "scenario"), format!("\"{scenario}\""));
        for name in ["pairs", "grants", "connections", "threads", "errors_total"] {
            field(&json, name).parse::<u64>().unwrap_or_else(|_| panic!("{name} in {json}"));
        }
        for name in ["pairs_per_s", "grants_per_s", "p50", "p90", "p99", "p999", "max", "elapsed_s"] {
            field(&json, name).parse::<f64>().unwrap_or_else(|_| panic!("{name} in {json}"));
        }
        assert!(field(&json, "pairs").parse::<u64>().unwrap() > 0, "{json}");
        for kind in ["busy", "timeout", "not_leader", "overloaded", "indeterminate", "not_holder"] {
            field(&json, kind).parse::<u64>().unwrap();
        }
        let p50: f64 = field(&json, "p50").parse().unwrap();
        let p99: f64 = field(&json, "p99").parse().unwrap();
        let max: f64 = field(&json, "max").parse().unwrap();
        assert!(p50 <= p99 && p99 <= max, "{json}");
    }
}

/// The counted and multi-key scenarios and places in line, each briefly: they make
/// grants, and a place is told only when it changed.
#[test]
fn bench_runs_the_counted_and_multi_key_scenarios() {
    let server = start_server(&[]);
    let addr = server.addr.to_string();
    for (scenario, extra) in [
        ("stock", vec!["--threads", "8", "--permits", "3", "--count", "2"]),
        ("pool", vec!["--threads", "12"]),
        ("multi", vec!["--threads", "4", "--keys-per-hold", "3"]),
        ("hot", vec!["--threads", "300", "--connections", "4", "--position"]),
    ] {
        let mut args = vec![scenario];
        args.extend(extra);
        let json = bench_json(&addr, &args);
        assert_eq!(field(&json, "scenario"), format!("\"{scenario}\""), "{json}");
        assert!(field(&json, "grants").parse::<u64>().unwrap() > 0, "{json}");
        assert_eq!(field(&json, "errors_total"), "0", "{json}");
        let places: u64 = field(&json, "places").parse().unwrap();
        if scenario == "hot" {
            assert_eq!(field(&json, "position"), "true", "{json}");
            // 300 waiters on one key: holds queue, and each that queues is told its place.
            assert!(places > 0, "{json}");
            assert_eq!(field(&json, "places_unchanged"), "0", "{json}");
            // Above 256 workers the bench asks Linux for a futex hash of 2 x 300 rounded
            // up (null: a kernel without the call).
            let slots = field(&json, "futex_hash_slots");
            assert!(slots == "1024" || slots == "null", "{json}");
        } else {
            assert_eq!(places, 0, "{json}");
            assert_eq!(field(&json, "futex_hash_slots"), "null", "{json}");
        }
    }
    assert_eq!(field(&bench_json(&addr, &["stock", "--threads", "2"]), "permits"), "1000");
    assert_eq!(field(&bench_json(&addr, &["pool", "--threads", "2"]), "permits"), "10");
    assert_eq!(field(&bench_json(&addr, &["multi", "--threads", "2"]), "keys_per_hold"), "4");
}

#[test]
fn bench_help_and_usage_errors() {
    let out = Command::new(bin()).args(["bench", "--help"]).output_within(CLI);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for word in ["uncontended", "hot", "mixed", "stock", "pool", "multi", "--permits", "--position", "--json"]
    {
        assert!(help.contains(word), "help lacks {word}");
    }
    let out =
        Command::new(bin()).args(["bench", "sideways"]).env("TICKETING_AUTH_TOKEN", TOKEN).output_within(CLI);
    assert_eq!(out.status.code(), Some(2));
    for bad in [
        &["--lease", "0"][..],
        &["stock", "--permits", "3", "--count", "4"],
        &["multi", "--keys-per-hold", "17"],
        &["stock", "--position"],
    ] {
        let out =
            Command::new(bin()).arg("bench").args(bad).env("TICKETING_AUTH_TOKEN", TOKEN).output_within(CLI);
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("--"), "{bad:?} names no option");
    }
}

/// Regression: the lock-table thread writes answers itself; a connection that closes
/// right after reading its answer must not have that answer subtracted twice from the
/// node-wide pending count (which wrapped and made the node answer `E 4` to all).
#[test]
fn short_connections_keep_the_node_wide_pending_count() {
    use ticketing::proto::frame::Response;
    let server = start_server(&[]);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let addr = server.addr;
            std::thread::spawn(move || {
                for i in 0..100 {
                    let mut c = connect(addr);
                    let key = format!("short-{t}-{i}");
                    let token = granted_token(&c.call(1, &acquire(&key, "o", 5, 0)));
                    assert_eq!(c.call(2, &release(&key, "o", token)), Response::Released);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // The node has seen every short connection close (only the asking one is open).
    assert!(
        eventually(std::time::Duration::from_secs(10), || status_map(&mut connect(server.addr), 1)
            ["connections"]
            == "1"),
        "the short connections are still open at the node"
    );
    let mut c = connect(server.addr);
    let token = granted_token(&c.call(1, &acquire("after", "o", 5, 0)));
    assert_eq!(c.call(2, &release("after", "o", token)), Response::Released);
}

/// The bench's peak resident memory (VmHWM, kB) while it runs, polled from /proc; the
/// bench is killed (and the test fails) if it runs past `within`.
fn peak_rss_kb(mut child: std::process::Child, within: std::time::Duration) -> (u64, std::process::Output) {
    let started = std::time::Instant::now();
    let status = format!("/proc/{}/status", child.id());
    let mut peak = 0u64;
    // Every 10 ms, the sampling interval of the memory figure, until the bench exits.
    let exited = eventually_every(
        within.saturating_sub(started.elapsed()),
        std::time::Duration::from_millis(10),
        || {
            if let Ok(text) = std::fs::read_to_string(&status) {
                let kb = text
                    .lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
                peak = peak.max(kb.unwrap_or(0));
            }
            child.try_wait().unwrap()
        },
    );
    if exited.is_none() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("bench still running after {within:?} (peak {peak} kB so far)");
    }
    (peak, child.wait_with_output().unwrap())
}

/// A million keys over 32 workers: the bench's memory does not grow with --keys (no
/// per-worker copy of the key space).
#[test]
fn bench_memory_does_not_grow_with_the_key_space() {
    let server = start_server(&[]);
    let addr = server.addr.to_string();
    let child = Command::new(bin())
        .args(["bench", "mixed", "--keys", "1000000", "--threads", "32", "--connections", "4"])
        .args(["--addr", &addr, "--duration", "2", "--warmup", "0", "--json", "--quiet"])
        .env("TICKETING_AUTH_TOKEN", TOKEN)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run ticketing bench");
    let (peak_kb, out) = peak_rss_kb(child, std::time::Duration::from_secs(25));
    println!("bench mixed --keys 1000000 --threads 32: peak RSS {} MB", peak_kb / 1024);
    assert!(peak_kb < BENCH_RSS_MAX_KB, "peak RSS {peak_kb} kB");
    assert!(out.status.success(), "bench failed: {}", String::from_utf8_lossy(&out.stderr));
    let json = String::from_utf8(out.stdout).unwrap();
    assert!(field(&json, "pairs").parse::<u64>().unwrap() > 0, "{json}");
}

/// Far above what the bench needs for its threads and connections, far below one copy
/// of a million key strings per worker.
const BENCH_RSS_MAX_KB: u64 = 64 * 1024;

/// `bench ARGS --duration SECS` with the client secret `token`: (exit status, stdout,
/// stderr, how long it took).
fn bench_with(token: &str, secs: &str, args: &[&str]) -> (Option<i32>, String, String, std::time::Duration) {
    let started = std::time::Instant::now();
    let out = Command::new(bin())
        .arg("bench")
        .args(args)
        .args(["--duration", secs, "--warmup", "1", "--quiet"])
        .env_remove("TICKETING_ADDRS")
        .env_remove("TICKETING_TLS_CA")
        .env("TICKETING_AUTH_TOKEN", token)
        .output_within(CLI);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr), started.elapsed())
}

/// A mistake that retrying cannot fix (here the secret) stops the bench at once and
/// names its cause, as every other command does (it ran the whole duration and said
/// `errors: unavailable=196`); a dead address is named too (it said `errors: none`).
#[test]
fn bench_names_the_cause_and_stops_on_a_mistake_retrying_cannot_fix() {
    let server = start_server(&[]);
    let (code, out, err, took) =
        bench_with("not-the-server-secret-0123", "120", &["--addr", &server.addr.to_string()]);
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(err.contains("the server refused our auth token"), "{out}{err}");
    assert!(err.contains("trying again will not help"), "{out}{err}");
    // Stopping takes a fraction of a second; running on would take the 120 s asked for.
    assert!(took < std::time::Duration::from_secs(60), "the bench ran on for {took:?}: {out}{err}");

    let dead = format!("127.0.0.1:{}", free_port_pair());
    let (code, out, err, _) = bench_with(TOKEN, "10", &["--addr", &dead]);
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(err.contains(&format!("{dead}: connection refused")), "{out}{err}");
    assert!(!out.contains("errors: none"), "{out}{err}");
}
