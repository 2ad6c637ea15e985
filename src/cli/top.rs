//! `ticketing top`: a live view of a node or a cluster (docs/cli.md). Each refresh
//! asks every member its STATUS (role, term, indexes, connections and the lock
//! counters) and the leader its TOP KEYS; rates are the counters' change between two
//! refreshes, summed over the nodes that answered both times.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read, Write};
use std::time::{Duration, Instant};

use super::commands::{cluster_members, parse_status, table};
use super::{
    addrs_of, build_client, client_options, parse, why_unanswered, EXIT_OK, EXIT_UNKNOWN, EXIT_USAGE,
};
use crate::client::{Client, ClientError, TopKey, TOP_KEYS_MAX};

/// The STATUS counters `top` turns into rates: (STATUS name, column title).
const RATES: [(&str, &str); 3] = [
    ("grants_total", "grants/s"),
    ("handoffs_total", "hand-offs/s"),
    ("lease_expiries_total", "lease expiries/s"),
];

/// One node's STATUS, or why it did not answer.
struct NodeSample {
    addr: String,
    status: Result<BTreeMap<String, String>, String>,
}

impl NodeSample {
    fn field(&self, name: &str) -> Option<&str> {
        self.status.as_ref().ok()?.get(name).map(String::as_str).filter(|v| !v.is_empty())
    }
    fn number(&self, name: &str) -> Option<u64> {
        self.field(name)?.parse().ok()
    }
}

/// Everything one refresh learned.
struct Sample {
    at: Instant,
    nodes: Vec<NodeSample>,
    keys: Result<Vec<TopKey>, String>,
}

pub(super) fn top(args: &[String]) -> i32 {
    let mut opts = client_options();
    opts.optflag("", "once", "print one view (rates over one interval) and exit: for scripts");
    opts.optopt("", "interval", "seconds between refreshes, 0.2..=60 (default 1)", "S");
    opts.optopt("", "keys", "how many of the longest queues to list, 1..=100 (default 10)", "N");
    let about = "A live view of a node or cluster: each node's role, term, commit index, lag behind \
                 the leader and client connections; grants, hand-offs and lease expiries per second \
                 over the cluster; the keys with the longest queues (their waiters, the oldest wait, \
                 the holder). One address is enough: the others are found from its STATUS. Press q \
                 to quit. Without a terminal it prints one view per interval.";
    let matches = match parse(&opts, args, "ticketing top [options]", about) {
        Ok(m) => m,
        Err(code) => return code,
    };
    if let Some(extra) = matches.free.first() {
        eprintln!("ticketing top: unexpected argument {extra:?}");
        return EXIT_USAGE;
    }
    let interval = match matches.opt_str("interval").map(|s| s.parse::<f64>()) {
        None => Duration::from_secs(1),
        Some(Ok(s)) if (0.2..=60.0).contains(&s) => Duration::from_secs_f64(s),
        Some(_) => {
            eprintln!("ticketing top: --interval must be a number of seconds, 0.2..=60");
            return EXIT_USAGE;
        }
    };
    let keys = match matches.opt_str("keys").map(|s| s.parse::<u8>()) {
        None => 10,
        Some(Ok(n)) if (1..=TOP_KEYS_MAX).contains(&n) => n,
        Some(_) => {
            eprintln!("ticketing top: --keys must be 1..={TOP_KEYS_MAX}");
            return EXIT_USAGE;
        }
    };
    let given = addrs_of(&matches);
    let client = match build_client(&matches) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let view = Viewer { client, given, keys, interval };
    if matches.opt_present("once") {
        return view.once();
    }
    view.live()
}

struct Viewer {
    client: Client,
    given: Vec<String>,
    keys: u8,
    interval: Duration,
}

impl Viewer {
    /// Two samples an interval apart, one view.
    fn once(&self) -> i32 {
        let first = self.sample();
        if first.nodes.iter().all(|n| n.status.is_err()) {
            print!("{}", render(None, &first, self.interval));
            return EXIT_UNKNOWN;
        }
        std::thread::sleep(self.interval);
        let second = self.sample();
        print!("{}", render(Some(&first), &second, self.interval));
        if second.nodes.iter().all(|n| n.status.is_err()) {
            EXIT_UNKNOWN
        } else {
            EXIT_OK
        }
    }

    /// Refreshes until `q` (or Ctrl-C, read as a key while the terminal is raw).
    fn live(&self) -> i32 {
        let interactive = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
        // A kill or a closed window must not leave the terminal raw: the signal only
        // sets a flag, checked between refreshes and while waiting, and the terminal is
        // restored on the way out.
        crate::server::signals::install_with_hangup();
        let _raw = if interactive { RawTerminal::enter() } else { None };
        let keys = crossbeam_channel::unbounded();
        if interactive {
            let tx = keys.0.clone();
            // Ends with the process: a blocking read of stdin cannot be interrupted.
            let _ = std::thread::Builder::new().name("top-keys".into()).spawn(move || {
                let mut byte = [0u8; 1];
                while let Ok(1) = std::io::stdin().read(&mut byte) {
                    if tx.send(byte[0]).is_err() {
                        break;
                    }
                }
            });
        }
        let mut previous: Option<Sample> = None;
        loop {
            let sample = self.sample();
            let mut out = String::new();
            if interactive {
                out.push_str("\x1b[H\x1b[2J");
            }
            out.push_str(&render(previous.as_ref(), &sample, self.interval));
            if interactive {
                out.push_str("\nq quits\n");
                // Raw mode: a newline no longer returns the carriage.
                out = out.replace('\n', "\r\n");
            } else {
                out.push('\n');
            }
            let mut stdout = std::io::stdout().lock();
            if stdout.write_all(out.as_bytes()).and_then(|_| stdout.flush()).is_err() {
                return EXIT_OK; // the reader went away (a closed pipe)
            }
            drop(stdout);
            previous = Some(sample);
            let until = Instant::now() + self.interval;
            while let Some(left) = until.checked_duration_since(Instant::now()) {
                if crate::server::signals::stop_requested() {
                    return EXIT_OK;
                }
                match keys.1.recv_timeout(left.min(Duration::from_millis(100))) {
                    Ok(b'q' | b'Q' | 3 | 4) => return EXIT_OK, // q, Ctrl-C, Ctrl-D
                    Ok(_) => {}
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                    Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                        std::thread::sleep(left.min(Duration::from_millis(100)))
                    }
                }
            }
        }
    }

    /// One refresh, within one request budget (5 s) when every member was among the
    /// addresses given: the given addresses are asked at once (an unreachable one must
    /// not delay the others), then the members the first answer names that were not
    /// asked yet; the leader's TOP KEYS meanwhile.
    fn sample(&self) -> Sample {
        let (nodes, keys) = std::thread::scope(|scope| {
            let given = self.ask(&self.given);
            // The queues live on the leader: when no node answering knows one (none was
            // founded, say), TOP KEYS would only wait out its budget for an `M`.
            let leader_known = given.iter().any(|(_, answer)| {
                answer.as_ref().is_ok_and(|text| {
                    let fields = parse_status(text);
                    fields
                        .iter()
                        .any(|(n, v)| (n == "leader" && !v.is_empty()) || (n == "role" && v == "standalone"))
                })
            });
            let keys = scope.spawn(move || match leader_known {
                true => self.client.top_keys(self.keys).map_err(|e| describe(&e)),
                false => Err(NO_LEADER.into()),
            });
            let members = given
                .iter()
                .find_map(|(_, answer)| answer.as_ref().ok().map(|text| cluster_members(text)))
                .filter(|m| !m.is_empty());
            let answers = match members {
                None => given,
                Some(members) => {
                    let missing: Vec<String> =
                        members.iter().filter(|m| !self.given.contains(m)).cloned().collect();
                    let mut known = given;
                    known.extend(self.ask(&missing));
                    members
                        .iter()
                        .filter_map(|m| {
                            known.iter().position(|(a, _)| a == m).map(|at| known.swap_remove(at))
                        })
                        .collect()
                }
            };
            let nodes = answers
                .into_iter()
                .map(|(addr, answer)| {
                    let status = answer
                        .map(|text| parse_status(&text).into_iter().collect())
                        .map_err(|e| why_unanswered(&addr, &e));
                    NodeSample { addr, status }
                })
                .collect();
            (nodes, keys.join().unwrap_or_else(|_| Err("failed".into())))
        });
        Sample { at: Instant::now(), nodes, keys }
    }

    /// The STATUS text of each of `addrs`, asked at once.
    fn ask(&self, addrs: &[String]) -> Vec<(String, Result<String, ClientError>)> {
        std::thread::scope(|scope| {
            let handles: Vec<_> =
                addrs.iter().map(|addr| scope.spawn(move || self.client.status_of(addr))).collect();
            handles
                .into_iter()
                .zip(addrs)
                .map(|(h, addr)| (addr.clone(), h.join().unwrap_or(Err(ClientError::NoAnswer))))
                .collect()
        })
    }
}

/// Why no queues are shown when no leader answers.
const NO_LEADER: &str = "no leader known: the queues live on the leader";

fn describe(e: &ClientError) -> String {
    match e {
        ClientError::NotLeader { leader: None } | ClientError::Unavailable { lasting: false, .. } => {
            NO_LEADER.into()
        }
        ClientError::Unavailable { lasting: true, .. } => "no node can be used (see above)".into(),
        other => other.to_string(),
    }
}

/// The view: nodes, rates, keys. `previous` gives the rates (none on the first view).
fn render(previous: Option<&Sample>, current: &Sample, interval: Duration) -> String {
    let mut out = String::new();
    let leader = current.nodes.iter().find(|n| matches!(n.field("role"), Some("leader" | "standalone")));
    let reachable = current.nodes.iter().filter(|n| n.status.is_ok()).count();
    out.push_str(&format!(
        "ticketing top: {} node{}, {} answering, leader {}, every {:.1} s\n\n",
        current.nodes.len(),
        if current.nodes.len() == 1 { "" } else { "s" },
        reachable,
        leader.and_then(|l| l.field("node_id")).unwrap_or("unknown"),
        interval.as_secs_f64()
    ));
    let leader_commit = leader.and_then(|l| l.number("commit_index"));
    let mut rows =
        vec![["NODE", "ADDR", "ROLE", "TERM", "COMMIT", "LAG", "CONNS"].map(str::to_owned).to_vec()];
    for node in &current.nodes {
        let cell = |name: &str| node.field(name).unwrap_or("-").to_owned();
        let row = match &node.status {
            Ok(_) => vec![
                cell("node_id"),
                node.addr.clone(),
                cell("role"),
                cell("term"),
                cell("commit_index"),
                match (leader_commit, node.number("applied_index")) {
                    (Some(commit), Some(applied)) => commit.saturating_sub(applied).to_string(),
                    _ => "-".into(),
                },
                cell("connections"),
            ],
            Err(why) => vec!["-".into(), node.addr.clone(), format!("unreachable ({why})")],
        };
        rows.push(row);
    }
    out.push_str(&table(&rows));
    // A node that knows no cluster yet says what it waits for, and what to do.
    for node in &current.nodes {
        if let Ok(status) = &node.status {
            let field = |name: &str| status.get(name).map(String::as_str).unwrap_or("");
            if let Some(why) = super::admin::not_a_member_by(&field) {
                out.push_str(&format!("{why}\n"));
            }
        }
    }
    out.push('\n');
    let rates: Vec<String> = RATES
        .iter()
        .map(|(name, title)| match previous.and_then(|p| rate(p, current, name)) {
            Some(r) => format!("{title} {r:.1}"),
            None => format!("{title} -"),
        })
        .collect();
    out.push_str(&rates.join("   "));
    out.push_str("\n\n");
    match &current.keys {
        Ok(keys) if keys.is_empty() => out.push_str("no key has waiters\n"),
        Ok(keys) => {
            let mut rows = vec![["KEY", "WAITERS", "OLDEST WAIT", "HOLDER", "TOKEN", "LEASE LEFT"]
                .map(str::to_owned)
                .to_vec()];
            for k in keys {
                rows.push(vec![
                    printable(&k.key),
                    k.waiters.to_string(),
                    seconds(k.oldest_wait_ms),
                    if k.owner.is_empty() { "-".into() } else { printable(&k.owner) },
                    if k.token == 0 { "-".into() } else { k.token.to_string() },
                    seconds(k.remaining_ms),
                ]);
            }
            out.push_str(&table(&rows));
        }
        Err(why) => out.push_str(&format!("keys: {why}\n")),
    }
    out
}

/// Per second, of the counter `name` summed over nodes that answered both samples
/// (keyed by node id, so a node that stopped answering does not look like a drop; a
/// restarted node's counter starting over counts as no change).
fn rate(previous: &Sample, current: &Sample, name: &str) -> Option<f64> {
    let by_node = |s: &Sample| -> BTreeMap<String, u64> {
        s.nodes.iter().filter_map(|n| Some((n.field("node_id")?.to_owned(), n.number(name)?))).collect()
    };
    let (before, after) = (by_node(previous), by_node(current));
    let mut delta = 0u64;
    let mut any = false;
    for (node, now) in &after {
        if let Some(then) = before.get(node) {
            delta += now.saturating_sub(*then);
            any = true;
        }
    }
    let elapsed = current.at.duration_since(previous.at).as_secs_f64();
    (any && elapsed > 0.0).then(|| delta as f64 / elapsed)
}

fn seconds(ms: u32) -> String {
    format!("{:.1} s", f64::from(ms) / 1000.0)
}

/// Keys and owners are any UTF-8: control characters would break the view.
fn printable(text: &str) -> String {
    if text.chars().any(char::is_control) {
        text.escape_debug().to_string()
    } else {
        text.to_owned()
    }
}

/// The terminal in "one key at a time, no echo" mode while `top` runs (through `stty`,
/// so no terminal library is needed); restored on drop.
struct RawTerminal {
    saved: String,
}

impl RawTerminal {
    fn enter() -> Option<RawTerminal> {
        let saved = std::process::Command::new("stty")
            .arg("-g")
            .stdin(std::process::Stdio::inherit())
            .output()
            .ok()
            .filter(|o| o.status.success())?;
        let saved = String::from_utf8(saved.stdout).ok()?.trim().to_owned();
        // -isig: Ctrl-C arrives as a byte, so the terminal is restored on the way out.
        let ok = std::process::Command::new("stty")
            .args(["-icanon", "-echo", "-isig", "min", "1"])
            .stdin(std::process::Stdio::inherit())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(RawTerminal { saved })
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        let _ = std::process::Command::new("stty")
            .arg(&self.saved)
            .stdin(std::process::Stdio::inherit())
            .status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, fields: &[(&str, &str)]) -> NodeSample {
        let mut status: BTreeMap<String, String> =
            fields.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        status.insert("node_id".into(), id.into());
        NodeSample { addr: format!("127.0.0.{id}:5225"), status: Ok(status) }
    }

    #[test]
    fn rates_sum_the_nodes_seen_twice_and_ignore_restarts() {
        let t0 = Instant::now();
        let before = Sample {
            at: t0,
            nodes: vec![node("1", &[("grants_total", "100")]), node("2", &[("grants_total", "50")])],
            keys: Ok(vec![]),
        };
        let after = Sample {
            at: t0 + Duration::from_secs(2),
            nodes: vec![
                node("1", &[("grants_total", "300")]),
                node("2", &[("grants_total", "10")]), // restarted: counts as no change
                node("3", &[("grants_total", "999")]), // new: not in the first sample
            ],
            keys: Ok(vec![]),
        };
        assert_eq!(rate(&before, &after, "grants_total"), Some(100.0));
        assert_eq!(rate(&before, &after, "handoffs_total"), None);
    }

    #[test]
    fn the_view_names_the_leader_its_lag_and_the_longest_queue_first() {
        let t0 = Instant::now();
        let keys = vec![TopKey {
            key: "seat:\n42".into(),
            waiters: 7,
            oldest_wait_ms: 1500,
            token: 9,
            owner: "svc-7".into(),
            remaining_ms: 29_000,
        }];
        let sample = Sample {
            at: t0,
            nodes: vec![
                node("1", &[("role", "leader"), ("commit_index", "120"), ("applied_index", "120")]),
                node("2", &[("role", "follower"), ("commit_index", "118"), ("applied_index", "100")]),
                NodeSample { addr: "127.0.0.3:5225".into(), status: Err("connection refused".into()) },
            ],
            keys: Ok(keys),
        };
        let text = render(None, &sample, Duration::from_secs(1));
        assert!(text.contains("3 nodes, 2 answering, leader 1"), "{text}");
        let lag_of_2 = text.lines().find(|l| l.starts_with("2 ")).unwrap();
        assert!(lag_of_2.split_whitespace().nth(5) == Some("20"), "{text}");
        assert!(text.contains("unreachable (connection refused)"), "{text}");
        assert!(text.contains("seat:\\n42  7"), "{text}");
        assert!(text.contains("grants/s -"), "{text}");
    }
}
