//! The metrics listener and the monitoring files (docs/metrics.md), against real
//! processes and, where installed, a real Prometheus and its promtool (`.ci/run`
//! installs Debian's `prometheus`; set TICKETING_REQUIRE_PROMETHEUS=1 to fail without).

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::children::output_within;
use common::children::{Within, TOOL};
use common::facts_cluster::wait_waiters;
use common::*;
use ticketing::proto::frame::HoldPart;
use ticketing::proto::{Request, Response};

/// (status code, body) of `GET path` on `addr`.
fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).expect("metrics port");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_string();
    (code, body)
}

/// A 3-node cluster whose nodes serve metrics on 127.0.0.N:(a port of their own).
fn cluster_with_metrics() -> (Cluster, Vec<SocketAddr>) {
    let metrics_listen = |i: usize, port: u16| format!("127.0.0.{i}:{port}");
    let (cluster, metrics_port) = Cluster::start_each(3, |i, port| {
        vec![("TICKETING_METRICS_LISTEN".to_string(), metrics_listen(i, port))]
    });
    // The metrics port of the attempt that started.
    let metrics = (1..=3).map(|i| metrics_listen(i, metrics_port).parse().unwrap()).collect();
    (cluster, metrics)
}

/// The metric names an exposition declares (`# TYPE name kind`).
fn exposed(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// The value of the sample `name` (with exactly these labels, as written) in `text`.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

fn have(tool: &str) -> bool {
    let found = Command::new(tool).arg("--version").try_output_within(TOOL).is_ok();
    if !found {
        assert!(
            std::env::var_os("TICKETING_REQUIRE_PROMETHEUS").is_none(),
            "{tool} is required here but not installed"
        );
        eprintln!("SKIPPED: {tool} is not installed (Debian package prometheus)");
    }
    found
}

#[test]
fn every_metric_is_documented_and_every_documented_metric_exists() {
    let (cluster, metrics) = cluster_with_metrics();
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let doc = std::fs::read_to_string(repo().join("docs/metrics.md")).unwrap();
    let documented: BTreeSet<String> = doc
        .split('`')
        .filter(|w| w.starts_with("ticketing_") && w.len() > "ticketing_".len())
        .map(|w| w.split('{').next().unwrap().to_string())
        .collect();
    // Per-peer figures appear once the leader has published its peers' progress: take
    // the first scrape that has every documented name (or the last one, to fail on).
    let mut scrape = (0, String::new());
    eventually_every(Duration::from_secs(5), Duration::from_millis(100), || {
        scrape = http_get(metrics[leader], "/metrics");
        documented.iter().all(|n| exposed(&scrape.1).contains(n)).then_some(())
    });
    let (code, text) = scrape;
    assert_eq!(code, 200, "{text}");
    let names = exposed(&text);
    for name in &names {
        assert!(documented.contains(name), "{name} is exposed but not in docs/metrics.md");
    }
    for name in &documented {
        assert!(names.contains(name), "docs/metrics.md lists {name}, which the leader does not expose");
    }
    // The Raft figures say what STATUS says.
    let status = status_map(&mut connect(cluster.addr(leader)), 1);
    assert_eq!(sample(&text, "ticketing_raft_term"), status["term"].parse().ok());
    assert_eq!(sample(&text, "ticketing_raft_role{role=\"leader\"}"), Some(1.0));
    assert_eq!(sample(&text, "ticketing_raft_leader_id"), status["leader_id"].parse().ok());
    assert_eq!(sample(&text, "ticketing_ready"), Some(1.0));
    assert!(sample(&text, "ticketing_process_resident_memory_bytes").unwrap() > 1e6);
    if have("promtool") {
        let mut child = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        let out = output_within(child, TOOL, "promtool check metrics", false);
        assert!(out.status.success(), "promtool check metrics: {}", String::from_utf8_lossy(&out.stderr));
    }
    let (code, _) = http_get(metrics[leader], "/healthz");
    assert_eq!(code, 200);
}

#[test]
fn the_monitoring_files_validate_and_the_alerts_behave() {
    let dir = repo().join("deploy/monitoring");
    // The dashboard is JSON, and every metric its queries use is one the nodes expose.
    let dashboard = std::fs::read_to_string(dir.join("grafana-dashboard.json")).unwrap();
    let py = "import json,sys; d=json.load(open(sys.argv[1])); assert d['panels'] and all(p['targets'] for p in d['panels'])";
    match Command::new("python3")
        .args(["-c", py])
        .arg(dir.join("grafana-dashboard.json"))
        .try_output_within(TOOL)
    {
        Ok(out) => assert!(out.status.success(), "dashboard: {}", String::from_utf8_lossy(&out.stderr)),
        Err(_) => eprintln!("dashboard JSON not parsed: no python3"),
    }
    let doc = std::fs::read_to_string(repo().join("docs/metrics.md")).unwrap();
    for (at, _) in dashboard.match_indices("ticketing_") {
        let name: String =
            dashboard[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        let base =
            ["_bucket", "_sum", "_count"].iter().fold(name.clone(), |n, s| n.trim_end_matches(s).to_string());
        assert!(
            doc.contains(&format!("`{base}")),
            "the dashboard uses {name}, which docs/metrics.md does not list"
        );
    }
    if !have("promtool") {
        return;
    }
    let run = |args: &[&str], cwd: &Path| {
        let out = Command::new("promtool").args(args).current_dir(cwd).output_within(TOOL);
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&["check", "rules", "ticketing-alerts.yml"], &dir);
    run(&["check", "config", "prometheus.yml"], &dir);
    run(&["test", "rules", "ticketing-alerts.test.yml"], &dir);
}

/// A node cut off from the majority turns not-ready once it knows no leader, and ready
/// again after the heal. How long each takes (about an election timeout) is measured,
/// not bounded here: `scripts/measure.sh readyz` (docs/safety.md, "Measured by
/// benchmarks, not bounded in tests"); 60 s against a hang, 25 times an election timeout.
#[test]
fn readyz_follows_the_quorum() {
    let (mut cluster, metrics) = cluster_with_metrics();
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let lone = (leader + 1) % 3;
    for (i, addr) in metrics.iter().enumerate() {
        assert_eq!(http_get(*addr, "/readyz").0, 200, "node {} before", i + 1);
    }
    let others: Vec<usize> = (0..3).filter(|i| *i != lone).collect();
    for &i in &others {
        cluster.signal(i, "-STOP");
    }
    let stopped = Instant::now();
    let not_ready = eventually_every(Duration::from_secs(60), Duration::from_millis(50), || {
        let (code, body) = http_get(metrics[lone], "/readyz");
        (code == 503).then(|| (stopped.elapsed(), body))
    });
    let (not_ready_after, body) =
        not_ready.unwrap_or_else(|| panic!("still ready {:?} after the majority froze", stopped.elapsed()));
    assert!(body.contains("no leader known"), "{body}");
    // /healthz is another matter: the node's own loops still run.
    assert_eq!(http_get(metrics[lone], "/healthz").0, 200);
    for &i in &others {
        cluster.signal(i, "-CONT");
    }
    let healed = Instant::now();
    assert!(
        eventually_every(Duration::from_secs(60), Duration::from_millis(100), || {
            (http_get(metrics[lone], "/readyz").0 == 200).then_some(())
        })
        .is_some(),
        "not ready again after the heal"
    );
    println!("not ready {not_ready_after:?} after the freeze, ready {:?} after the heal", healed.elapsed());
    cluster.kill(0);
}

/// A real Prometheus scrapes a real cluster and sees, through its query API, one
/// leader, the grants and hand-offs driven, and a leader change when the leader dies.
#[test]
fn a_real_prometheus_scrapes_the_cluster() {
    if !have("prometheus") {
        return;
    }
    let (mut cluster, metrics) = cluster_with_metrics();
    cluster.wait_leader(Duration::from_secs(15));
    let dir = tempfile::tempdir().unwrap();
    let targets: Vec<String> = metrics.iter().map(|m| format!("\"{m}\"")).collect();
    std::fs::write(
        dir.path().join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: ticketing\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        ),
    )
    .unwrap();
    // Its web port picked for it; again on another when it found that one taken.
    let (web, _prometheus) = with_fresh_ports("prometheus", || start_prometheus(dir.path()));
    // The first sample of a PromQL query's answer, once `good` holds for it.
    let wait_for = |promql: &str, good: &dyn Fn(f64) -> bool, what: &str| {
        let query: String = promql
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        let mut last = String::new();
        let answered = eventually_every(Duration::from_secs(30), Duration::from_millis(300), || {
            let mut s = TcpStream::connect_timeout(&web, Duration::from_millis(200)).ok()?;
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let _ =
                write!(s, "GET /api/v1/query?query={query} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let mut text = String::new();
            let _ = s.read_to_string(&mut text);
            // "value":[<time>,"<value>"]
            let value = text
                .split("\"value\":[")
                .nth(1)
                .and_then(|v| v.split('"').nth(1))
                .and_then(|v| v.parse::<f64>().ok());
            last = text;
            value.is_some_and(good).then_some(())
        });
        assert!(answered.is_some(), "{what}: Prometheus answered {promql:?} with {last}");
    };
    // Scrapes of the three nodes land at different moments: wait for an evaluation
    // that has all of them.
    wait_for("count(up{job=\"ticketing\"} == 1)", &|v| v == 3.0, "three nodes scraped");
    wait_for("sum(ticketing_raft_role{role=\"leader\"})", &|v| v == 1.0, "one leader");
    // Drive: one grant of a free key, then two hand-offs down a queue of two.
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let mut a = connect(cluster.addr(leader));
    let mut b = connect(cluster.addr(leader));
    let mut c = connect(cluster.addr(leader));
    let t1 = granted_token(&a.call(1, &acquire("p:1", "a", 30, 0)));
    // Queued in this order before the release, or the hand-offs would not be the ones
    // counted below.
    b.send(2, &acquire("p:1", "b", 30, 30_000));
    assert!(wait_waiters(cluster.addr(leader), "p:1", 1, Duration::from_secs(10)), "b queued");
    c.send(3, &acquire("p:1", "c", 30, 30_000));
    assert!(wait_waiters(cluster.addr(leader), "p:1", 2, Duration::from_secs(10)), "c queued behind b");
    assert_eq!(a.call(4, &release("p:1", "a", t1)), Response::Released);
    let t2 = granted_token(&b.recv().1);
    assert_eq!(b.call(5, &release("p:1", "b", t2)), Response::Released);
    let t3 = granted_token(&c.recv().1);
    assert_eq!(c.call(6, &release("p:1", "c", t3)), Response::Released);
    wait_for("sum(ticketing_grants_total{kind=\"handoff\"})", &|v| v == 2.0, "two hand-offs");
    wait_for("sum(ticketing_grants_total{kind=\"immediate\"})", &|v| v == 1.0, "one immediate grant");
    wait_for("sum(ticketing_releases_total)", &|v| v == 3.0, "three releases");
    // Kill the leader once: the survivors count one change of leader.
    cluster.kill(leader);
    cluster.wait_leader(Duration::from_secs(15));
    wait_for("max(ticketing_raft_leader_changes_total)", &|v| v == 1.0, "a leader change");
    wait_for("sum(ticketing_raft_role{role=\"leader\"})", &|v| v == 1.0, "one leader again");
}

/// Every kind of answer a client gets shows in the leader's figures, once each; the
/// histograms and the commit latency fill; a leader change shows on the survivors.
#[test]
fn the_figures_count_what_clients_are_answered() {
    let (mut cluster, metrics) = cluster_with_metrics();
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let follower = (0..3).find(|&i| i != leader).unwrap();
    let mut a = connect(cluster.addr(leader));
    let mut b = connect(cluster.addr(leader));
    let t1 = granted_token(&a.call(1, &acquire("m:1", "alice", 30, 0)));
    assert_eq!(b.call(2, &acquire("m:1", "bob", 30, 0)), Response::Busy);
    assert_eq!(b.call(3, &acquire("m:1", "bob", 30, 100)), Response::Timeout);
    b.send(4, &acquire("m:1", "bob", 1, 30_000));
    // Bob waits in the queue before Alice lets go: his grant is a hand-off.
    assert!(wait_waiters(cluster.addr(leader), "m:1", 1, Duration::from_secs(10)), "bob queued");
    // sleep: the wait the histogram must measure (≥ 0.3 s, below).
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(a.call(5, &release("m:1", "alice", t1)), Response::Released);
    let (id, granted) = b.recv();
    assert_eq!(id, 4);
    granted_token(&granted);
    assert_eq!(a.call(6, &release("m:1", "alice", t1)), Response::NotHolder);
    assert!(matches!(a.call(7, &acquire("m:2", "alice", 0, 0)), Response::Error { .. }), "lease 0");
    assert!(matches!(
        connect(cluster.addr(follower)).call(8, &acquire("m:3", "c", 5, 0)),
        Response::Moved { .. }
    ));
    // Bob's lease (1 s) runs out.
    let mut text = String::new();
    let counted = eventually_every(Duration::from_secs(10), Duration::from_millis(100), || {
        text = http_get(metrics[leader], "/metrics").1;
        (sample(&text, "ticketing_lease_expiries_total") == Some(1.0)).then_some(())
    });
    assert!(counted.is_some(), "no lease expiry counted:\n{text}");
    for (name, want) in [
        ("ticketing_grants_total{kind=\"immediate\"}", 1.0),
        ("ticketing_grants_total{kind=\"handoff\"}", 1.0),
        ("ticketing_busy_total", 1.0),
        ("ticketing_wait_timeouts_total", 1.0),
        ("ticketing_releases_total", 1.0),
        ("ticketing_not_holder_total", 1.0),
        ("ticketing_errors_total{code=\"1\"}", 1.0),
        ("ticketing_moved_total", 0.0),
        // Bob waited twice: the timeout and the hand-off; alice's hold was released,
        // bob's expired.
        ("ticketing_wait_seconds_count", 2.0),
        ("ticketing_hold_seconds_count", 2.0),
        ("ticketing_keys_held", 0.0),
        ("ticketing_waiters", 0.0),
    ] {
        assert_eq!(sample(&text, name), Some(want), "{name}:\n{text}");
    }
    // Waits of ≥ 0.1 s and ≥ 0.3 s; holds of ≥ 0.3 s and ≥ 1 s.
    assert!(sample(&text, "ticketing_wait_seconds_sum").unwrap() >= 0.39, "{text}");
    assert!(sample(&text, "ticketing_hold_seconds_sum").unwrap() >= 1.29, "{text}");
    assert!(sample(&text, "ticketing_raft_commit_seconds_count").unwrap() >= 4.0, "{text}");
    let statuses = status_map(&mut connect(cluster.addr(leader)), 9);
    assert_eq!(statuses["grants_total"], "2");
    assert_eq!(statuses["handoffs_total"], "1");
    assert_eq!(statuses["lease_expiries_total"], "1");
    let (_, on_follower) = http_get(metrics[follower], "/metrics");
    assert_eq!(sample(&on_follower, "ticketing_moved_total"), Some(1.0), "{on_follower}");
    assert_eq!(
        sample(&on_follower, "ticketing_grants_total{kind=\"immediate\"}"),
        Some(0.0),
        "followers count no grant"
    );
    assert_eq!(
        sample(&text, "ticketing_raft_leader_changes_total"),
        Some(0.0),
        "the first leader is no change"
    );
    for peer in (1..=3).filter(|&p| p != leader + 1) {
        let up = format!("ticketing_raft_peer_link_up{{peer=\"{peer}\"}}");
        assert_eq!(sample(&text, &up), Some(1.0), "{up}:\n{text}");
    }
    // The leader dies: a survivor counts one change of leader (learning the first was
    // none), and its link to the dead node goes down.
    cluster.kill(leader);
    let next = cluster.wait_leader(Duration::from_secs(15));
    let down = format!("ticketing_raft_peer_link_up{{peer=\"{}\"}}", leader + 1);
    let mut text = String::new();
    let seen = eventually_every(Duration::from_secs(10), Duration::from_millis(100), || {
        text = http_get(metrics[next], "/metrics").1;
        let changes = sample(&text, "ticketing_raft_leader_changes_total").unwrap_or(0.0);
        let elections = sample(&text, "ticketing_raft_elections_started_total").unwrap_or(0.0);
        (changes == 1.0 && sample(&text, &down) == Some(0.0) && elections >= 1.0).then_some(())
    });
    assert!(seen.is_some(), "after the leader died:\n{text}");
}

/// A standalone node serving metrics on a port of its own: the node and that address.
fn standalone_with_metrics() -> (ServerProcess, SocketAddr) {
    with_fresh_ports("standalone with metrics", || {
        let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let server = Server::new().env("TICKETING_METRICS_LISTEN", &metrics.to_string()).try_start()?;
        Ok((server, metrics))
    })
}

fn hold(owner: &str, wait_ms: u32, place: bool, parts: &[(&str, u32, u32)]) -> Request {
    let parts =
        parts.iter().map(|&(key, count, capacity)| HoldPart { key: key.into(), count, capacity }).collect();
    Request::Hold { lease_s: 60, wait_ms, place, owner: owner.into(), parts }
}

/// Counted and multi-key holds show in their own figures: HOLDs by what became of
/// them, the pooled holds and the permits they take, the requests waiting in line, the
/// places in line sent and the grants of several keys at once.
#[test]
fn the_pool_figures_follow_holds_waiters_and_places() {
    let (server, metrics) = standalone_with_metrics();
    let (mut a, mut b, mut c) = (connect(server.addr), connect(server.addr), connect(server.addr));
    let stock = [("stock", 2, 3)];
    let ta = granted_token(&a.call(1, &hold("a", 0, false, &stock)));
    let tb = granted_token(&b.call(1, &hold("b", 0, false, &[("seat:1", 1, 1), ("seat:2", 1, 1)])));
    assert_eq!(c.call(1, &hold("c", 0, false, &stock)), Response::Busy);
    assert!(matches!(c.call(2, &hold("c", 0, false, &[("stock", 1, 5)])), Response::Error { .. }));
    // Queued, asking for its place: an IN LINE frame comes first.
    c.send(3, &hold("c", 30_000, true, &stock));
    assert!(matches!(c.recv(), (3, Response::InLine { ahead: 0, .. })));
    let figures = |want: &[(&str, f64)]| {
        let mut text = String::new();
        let seen = eventually_every(Duration::from_secs(10), Duration::from_millis(50), || {
            text = http_get(metrics, "/metrics").1;
            want.iter().all(|(name, v)| sample(&text, name) == Some(*v)).then_some(())
        });
        assert!(seen.is_some(), "want {want:?}:\n{text}");
    };
    figures(&[
        ("ticketing_hold_requests_total{outcome=\"granted\"}", 2.0),
        ("ticketing_hold_requests_total{outcome=\"queued\"}", 1.0),
        ("ticketing_hold_requests_total{outcome=\"busy\"}", 1.0),
        ("ticketing_hold_requests_total{outcome=\"refused\"}", 1.0),
        ("ticketing_pooled_holds", 2.0),
        ("ticketing_permits_in_use", 4.0),
        ("ticketing_waiters", 1.0),
        ("ticketing_places_sent_total", 1.0),
        ("ticketing_multi_key_grants_total", 1.0),
    ]);
    // a's release hands its two permits to c: a hand-off, not a new HOLD.
    assert_eq!(a.call(2, &release("stock", "a", ta)), Response::Released);
    let tc = granted_token(&c.recv().1);
    figures(&[
        ("ticketing_hold_requests_total{outcome=\"granted\"}", 2.0),
        ("ticketing_pooled_holds", 2.0),
        ("ticketing_permits_in_use", 4.0),
        ("ticketing_waiters", 0.0),
        ("ticketing_grants_total{kind=\"handoff\"}", 1.0),
    ]);
    assert_eq!(b.call(2, &release("seat:2", "b", tb)), Response::Released);
    assert_eq!(c.call(4, &release("stock", "c", tc)), Response::Released);
    figures(&[("ticketing_pooled_holds", 0.0), ("ticketing_permits_in_use", 0.0)]);
}

/// The cluster's shape is in gauges — voters, standbys, and on the leader alone the
/// healthy voters — and the leader is a `node_id` label, exact for any id. A client
/// that closes its connection before sending a byte (a one-shot command that ended
/// while it still dialed) is counted apart, not as a failed handshake; one that went
/// away mid-handshake still is.
#[test]
fn gauges_of_the_cluster_s_shape_the_leader_as_a_label_and_abandoned_connections() {
    let (mut cluster, metrics) = cluster_with_metrics();
    let leader = cluster.wait_leader(Duration::from_secs(15));
    let label = format!("ticketing_raft_leader{{node_id=\"{}\"}}", leader + 1);
    let shaped = |at: usize, healthy: Option<f64>| {
        let (_, text) = http_get(metrics[at], "/metrics");
        let ok = sample(&text, &label) == Some(1.0)
            && sample(&text, "ticketing_raft_voters") == Some(3.0)
            && sample(&text, "ticketing_raft_standbys") == Some(0.0)
            && sample(&text, "ticketing_raft_healthy_voters") == healthy
            && sample(&text, "ticketing_raft_ready_standbys") == healthy.map(|_| 0.0);
        (ok, text)
    };
    for at in 0..3 {
        // The followers know the leader within a heartbeat; only the leader counts.
        let healthy = (at == leader).then_some(3.0);
        assert!(eventually(Duration::from_secs(10), || shaped(at, healthy).0), "{}", shaped(at, healthy).1);
    }
    let figure = |name: &str| sample(&http_get(metrics[leader], "/metrics").1, name).unwrap_or(-1.0);
    let closed = "ticketing_handshake_failures_total{reason=\"closed\"}";
    let abandoned = "ticketing_client_connections_abandoned_total";
    let (closed_before, abandoned_before) = (figure(closed), figure(abandoned));
    for _ in 0..5 {
        drop(std::net::TcpStream::connect(cluster.addr(leader)).unwrap());
    }
    // Part of an AUTH, then gone: a failure.
    let mut half = std::net::TcpStream::connect(cluster.addr(leader)).unwrap();
    half.write_all(b"TKT1").unwrap();
    drop(half);
    let counted = || figure(abandoned) == abandoned_before + 5.0 && figure(closed) == closed_before + 1.0;
    assert!(
        eventually(Duration::from_secs(10), counted),
        "abandoned {} (before {abandoned_before}), closed {} (before {closed_before})",
        figure(abandoned),
        figure(closed)
    );
    // The leader dies: the new one counts two healthy voters of three.
    cluster.kill(leader);
    let next = cluster.wait_leader(Duration::from_secs(15));
    let healthy = |text: &str| sample(text, "ticketing_raft_healthy_voters");
    let two_of_three = || {
        let (_, text) = http_get(metrics[next], "/metrics");
        healthy(&text) == Some(2.0) && sample(&text, "ticketing_raft_voters") == Some(3.0)
    };
    assert!(eventually(Duration::from_secs(10), two_of_three), "{}", http_get(metrics[next], "/metrics").1);
}

/// Prometheus with `dir`/prometheus.yml, its web port on a port picked for it: where it
/// serves, and the process (stopped however the test ends); why not, when it exited
/// because that port was taken.
fn start_prometheus(dir: &Path) -> Result<(SocketAddr, KillOnDrop), String> {
    let web: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let log = dir.join(format!("prometheus-{}.log", web.port()));
    let prometheus = Command::new("prometheus")
        .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
        .arg(format!("--storage.tsdb.path={}", dir.join(format!("data-{}", web.port())).display()))
        .arg(format!("--web.listen-address={web}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let prometheus = std::cell::RefCell::new(KillOnDrop(prometheus));
    // Until it serves or exits (the queries below wait for its answers).
    let exited = || prometheus.borrow_mut().0.try_wait().unwrap().is_some();
    eventually(Duration::from_secs(30), || {
        TcpStream::connect_timeout(&web, Duration::from_millis(200)).is_ok() || exited()
    });
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    // Go says "bind: address already in use".
    match exited() && said.to_lowercase().contains(&common::process::ADDR_IN_USE.to_lowercase()) {
        true => Err(format!("{}: {said}", common::process::ADDR_IN_USE)),
        false => Ok((web, prometheus.into_inner())),
    }
}
