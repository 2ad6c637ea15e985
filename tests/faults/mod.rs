//! Jepsen-style fault suite on real processes: a cluster of the real binary inside a
//! network namespace of its own, a workload through the official client, nemeses
//! chosen from a seed, and a checker over the recorded history. See docs/safety.md.
#![allow(dead_code)]

pub mod checker;
pub mod cluster;
pub mod delay;
pub mod history;
pub mod nemesis;
pub mod netns;
pub mod workload;

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use checker::{CheckConfig, Report};
use history::{Clock, Event};
use workload::{Fence, Shared, Topology};

use crate::common::eventually_every;

#[path = "../sim/rng.rs"]
mod sim_rng;
pub use sim_rng::Rng;

/// The fault suite's generator for `seed`: the simulators' SplitMix64, mixed with a
/// constant of its own so that the runs recorded in docs/safety.md replay as they ran.
pub fn rng(seed: u64) -> Rng {
    Rng::new(seed ^ 0x5DEE_CE66_D1CE_4E5B)
}

pub struct RunConfig {
    pub seed: u64,
    /// How long the workload runs.
    pub duration: Duration,
    pub nodes: usize,
    pub out_dir: PathBuf,
    /// Skip the namespace even when it is available (process-level nemeses only).
    pub no_netns: bool,
    /// Quiet time after each heal, counted from the first grant after it.
    pub quiet: Duration,
    /// How long the harness waits for that grant before it gives up (against a hang:
    /// a recovery takes an election timeout or two, 2–5 s).
    pub recovery_bound: Duration,
    /// Peer links shaped by delay proxies (`delay.rs`), if set.
    pub links: Option<cluster::Links>,
}

/// Parses `LAT,JITTER[,SLOW]` (milliseconds): every peer link `LAT ± JITTER` one way,
/// and, with SLOW, the first node's `SLOW ± JITTER`.
pub fn parse_links(text: &str) -> Result<cluster::Links, String> {
    let nums: Vec<u64> = text
        .split(',')
        .map(|p| {
            p.trim()
                .parse::<u64>()
                .map_err(|_| format!("TICKETING_FAULT_LINKS: {text:?} is not LAT,JITTER[,SLOW]"))
        })
        .collect::<Result<_, _>>()?;
    let (lat, jitter, slow) = match nums.as_slice() {
        [lat, jitter] => (*lat, *jitter, None),
        [lat, jitter, slow] => (*lat, *jitter, Some(*slow)),
        _ => return Err(format!("TICKETING_FAULT_LINKS: {text:?} is not LAT,JITTER[,SLOW]")),
    };
    Ok(cluster::Links {
        shape: delay::Shape::latency(lat, jitter),
        slow: slow.map(|s| delay::Shape::latency(s, jitter)),
    })
}

impl RunConfig {
    /// From the environment: TICKETING_FAULT_SECS (default `default_secs`),
    /// TICKETING_FAULT_SEED (default 6), TICKETING_FAULT_NODES (3 or 5, default 3),
    /// TICKETING_FAULT_OUT (default target/faults), TICKETING_FAULT_NO_NETNS=1,
    /// TICKETING_FAULT_LINKS=LAT,JITTER[,SLOW] (shaped peer links, `parse_links`).
    pub fn from_env(default_secs: u64) -> RunConfig {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let secs = var("TICKETING_FAULT_SECS").and_then(|v| v.parse().ok()).unwrap_or(default_secs);
        let seed = var("TICKETING_FAULT_SEED").and_then(|v| v.parse().ok()).unwrap_or(6);
        let nodes = var("TICKETING_FAULT_NODES").and_then(|v| v.parse().ok()).unwrap_or(3);
        assert!(nodes == 3 || nodes == 5, "TICKETING_FAULT_NODES must be 3 or 5");
        let base = var("TICKETING_FAULT_OUT")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target").join("faults"));
        let links = var("TICKETING_FAULT_LINKS").map(|v| parse_links(&v).unwrap_or_else(|e| panic!("{e}")));
        RunConfig {
            seed,
            duration: Duration::from_secs(secs),
            nodes,
            out_dir: base.join(format!(
                "seed{seed}-n{nodes}{}-{}",
                if links.is_some() { "-links" } else { "" },
                std::process::id()
            )),
            links,
            no_netns: var("TICKETING_FAULT_NO_NETNS").is_some_and(|v| v != "0"),
            quiet: Duration::from_secs(6),
            recovery_bound: Duration::from_secs(60),
        }
    }
}

pub struct Outcome {
    pub report: Report,
    pub text: String,
    pub history: PathBuf,
    pub events: Vec<Event>,
}

/// Stops the workload threads even when the run panics.
struct StopOnDrop(Arc<Shared>);
impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop.store(true, Ordering::SeqCst);
        self.0.pause_budget.store(0, Ordering::SeqCst);
    }
}

pub fn run(cfg: &RunConfig) -> Outcome {
    std::fs::create_dir_all(&cfg.out_dir).expect("output directory");
    let mut rng = rng(cfg.seed);
    let mut notes = Vec::new();

    // The namespace (dropped last: declared first).
    let net = if cfg.no_netns {
        notes.push("namespace: disabled by TICKETING_FAULT_NO_NETNS; process-level nemeses only".to_string());
        None
    } else {
        match netns::Netns::create().and_then(|ns| ns.enter().map(|_| ns)) {
            Ok(ns) => {
                notes.push(format!(
                    "namespace: {} (nodes, client workload and iptables/tc rules inside it; netem {})",
                    ns.name,
                    if ns.netem { "available" } else { "NOT available in this kernel: delay uses tbf" }
                ));
                Some(ns)
            }
            Err(why) => {
                notes.push(format!(
                    "namespace: UNAVAILABLE ({why}); running the process-level nemeses only (kill9+replace, pause-node, client-pause)"
                ));
                None
            }
        }
    };
    for n in &notes {
        eprintln!("fault suite: {n}");
    }
    // In the namespace nothing else binds; outside it, a port picked for this start.
    let pick_port = || if net.is_some() { 7225 } else { crate::common::free_port_pair() };
    if let Some(links) = cfg.links {
        let s = links.shape;
        let slow = links
            .slow
            .map_or(String::new(), |w| format!("; node 1: {} ms ± {} ms", w.latency_ms, w.jitter_ms));
        notes.push(format!(
            "peer links: {} ms ± {} ms one way toward every node, through delay proxies{slow}",
            s.latency_ms, s.jitter_ms
        ));
        eprintln!("fault suite: {}", notes.last().unwrap());
    }
    let mut cluster = crate::common::with_fresh_ports("the fault suite's cluster", || {
        cluster::Cluster::start_with(cfg.nodes, pick_port(), cfg.out_dir.clone(), net.as_ref(), cfg.links)
    });
    assert!(
        cluster.wait_leader(Duration::from_secs(30)).is_some(),
        "no leader within 30 s; logs in {}",
        cfg.out_dir.display()
    );

    let clock = Clock::new();
    let sink: workload::Sink = Arc::new(Mutex::new(Vec::new()));
    let shared = Arc::new(Shared {
        clock,
        sink: sink.clone(),
        fence: Fence::new(clock, sink.clone()),
        topology: Topology { gen: AtomicU64::new(0), addrs: Mutex::new(cluster.client_addrs()) },
        stop: AtomicBool::new(false),
        pause_budget: AtomicU32::new(0),
    });
    let guard = StopOnDrop(shared.clone());
    let workers = workload::start(shared.clone(), 4, 2, 2, cfg.seed);

    let kinds = nemesis::available(net.as_ref());
    let plan = nemesis::schedule(&mut rng, &kinds, 10_000);
    let start = Instant::now();
    let end = start + cfg.duration;
    let mut faults: Vec<Event> = Vec::new();
    let mut harness_errors: Vec<String> = Vec::new();
    // sleep: the workload's warm-up before the first fault, a timed part of the run.
    std::thread::sleep(Duration::from_secs(3).min(cfg.duration / 4));
    for kind in plan {
        let hold = nemesis::hold(kind, &mut rng);
        // Leave room for the fault, its heal (a replacement can take a while) and the
        // quiet time (the wait for a grant after the heal may run past the end).
        let budget =
            hold + cfg.quiet + Duration::from_secs(if kind == nemesis::Kind::KillReplace { 8 } else { 1 });
        if Instant::now() + budget > end {
            break;
        }
        let t0 = clock.now();
        let injected = match nemesis::inject(kind, &mut rng, &mut cluster, net.as_ref(), &shared) {
            Ok(i) => i,
            Err(e) => {
                eprintln!("fault suite: could not inject {}: {e}", kind.name());
                harness_errors.push(format!("inject {}: {e}", kind.name()));
                // sleep: pacing before the next fault of the plan.
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
        };
        eprintln!("fault suite: {:>7.1}s inject {}: {}", t0 as f64 / 1e6, kind.name(), injected.detail);
        // sleep: the fault lasts its hold (the nemesis's timing).
        std::thread::sleep(hold);
        // Evidence that the fault bit: who leads just before the heal.
        let during = match cluster.leader() {
            Some(l) => format!("; leader before heal: node {}", cluster.nodes[l].id),
            None => "; no leader before heal".to_string(),
        };
        let healed = nemesis::heal(kind, &injected, &mut cluster, net.as_ref(), &shared);
        let t1 = clock.now();
        let ok = match &healed {
            Ok(what) => {
                eprintln!("fault suite: {:>7.1}s healed: {what}{during}", t1 as f64 / 1e6);
                true
            }
            Err(e) => {
                eprintln!("fault suite: {:>7.1}s HEAL FAILED: {e}", t1 as f64 / 1e6);
                false
            }
        };
        faults.push(Event::Fault {
            kind: kind.name().to_string(),
            detail: format!("{}{during}", injected.detail),
            start: t0,
            end: t1,
            healed: ok,
        });
        for exit in cluster.unexpected_exits() {
            eprintln!("fault suite: {exit}");
            harness_errors.push(exit);
        }
        if !ok {
            break;
        }
        // A fact before the next fault: some grant completed after the heal (the checker
        // judges the order; a run that never recovers stops here after the hang guard).
        let recovered = eventually_every(cfg.recovery_bound, Duration::from_millis(20), || {
            granted_after(&sink, t1).then_some(())
        });
        if recovered.is_none() {
            break;
        }
        let quiet_end = Instant::now() + cfg.quiet;
        while Instant::now() < quiet_end.min(end) {
            // sleep: the quiet time after a heal, a timed part of the run.
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // Let the workload run on a healthy cluster until the end (at least the recovery
    // bound after the last heal).
    while Instant::now() < end {
        // sleep: the workload runs on a healthy cluster until the run's end.
        std::thread::sleep(Duration::from_millis(100));
    }
    let run_end = clock.now();
    shared.stop.store(true, Ordering::SeqCst);
    for w in workers {
        let _ = w.join();
    }
    drop(guard);
    for exit in cluster.unexpected_exits() {
        harness_errors.push(exit);
    }
    let final_leader = cluster.leader().map(|l| cluster.nodes[l].id);
    drop(cluster);
    drop(net);

    let mut events = std::mem::take(&mut *sink.lock().unwrap());
    events.extend(faults);
    let check_cfg = CheckConfig { run_end, ..CheckConfig::default() };
    let mut report = checker::check(&events, &check_cfg);
    for e in &harness_errors {
        report.violations.push(("harness", e.clone()));
    }
    let history = cfg.out_dir.join("history.jsonl");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&history).expect("history file"));
    for e in &events {
        writeln!(f, "{}", e.to_json()).unwrap();
    }
    f.flush().unwrap();
    let title = format!(
        "fault suite: seed {} · {} nodes · {:.0} s · {}",
        cfg.seed,
        cfg.nodes,
        run_end as f64 / 1e6,
        if notes[0].contains("UNAVAILABLE") || notes[0].contains("disabled") {
            "process-level nemeses only"
        } else {
            "in a network namespace"
        }
    );
    let mut text = report.render(&title);
    for n in &notes {
        text.push_str(&format!("{n}\n"));
    }
    text.push_str(&format!(
        "final leader: {}\nhistory: {}\n",
        final_leader.map(|l| format!("node {l}")).unwrap_or("none".into()),
        history.display()
    ));
    std::fs::write(cfg.out_dir.join("report.txt"), &text).unwrap();
    Outcome { report, text, history, events }
}

/// Reads a history written by `run`.
pub fn load_history(path: &std::path::Path) -> Result<Vec<Event>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines().filter(|l| !l.trim().is_empty()).map(Event::from_json).collect()
}

/// Whether the workload has seen a grant answered after `t` (the clock's microseconds).
fn granted_after(sink: &workload::Sink, t: u64) -> bool {
    let events = sink.lock().unwrap();
    events.iter().rev().any(|e| {
        matches!(e, Event::Acquire { complete, outcome: history::AcqOutcome::Granted { .. }, .. }
            | Event::Hold { complete, outcome: history::AcqOutcome::Granted { .. }, .. } if *complete > t)
    })
}
