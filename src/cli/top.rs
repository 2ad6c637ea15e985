//! `ticketing top`: a live view of a node or a cluster (docs/cli.md). Each refresh
//! asks every member its STATUS (role, term, indexes, connections and the lock
//! counters), each on a connection of its own (`views.rs`), and the leader its TOP
//! KEYS; rates are the counters' change between two refreshes over the time between
//! each node's two answers, summed over the nodes that answered both times.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read, Write};
use std::time::{Duration, Instant};

use super::commands::table;
use super::views::{self, Row, View};
use super::{addrs_of, build_direct, client_options, parse, Budget, EXIT_OK, EXIT_UNKNOWN, EXIT_USAGE};
use crate::client::{ClientError, Direct, TopKey, TOP_KEYS_MAX};
use crate::proto::{Request, Response};

/// The STATUS counters `top` turns into rates: (STATUS name, column title).
const RATES: [(&str, &str); 3] = [
    ("grants_total", "grants/s"),
    ("handoffs_total", "hand-offs/s"),
    ("lease_expiries_total", "lease expiries/s"),
];

/// Everything one refresh learned: a row per node (its STATUS and when it came).
struct Sample {
    view: View,
    keys: Result<Vec<TopKey>, String>,
    /// The pools (keys of capacity above 1) among `keys`, from the leader's POOL.
    pools: Vec<PoolRow>,
}

/// One pool as the leader's POOL answered it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PoolRow {
    key: String,
    capacity: u32,
    in_use: u32,
    holds: u32,
    waiters: u32,
    oldest_wait_ms: u32,
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
    let direct = match build_direct(&matches) {
        Ok(d) => d,
        Err(code) => return code,
    };
    let view = Viewer { direct, given, keys, interval };
    if matches.opt_present("once") {
        return view.once();
    }
    view.live()
}

struct Viewer {
    direct: Direct,
    given: Vec<String>,
    keys: u8,
    interval: Duration,
}

impl Viewer {
    /// Two samples an interval apart, one view.
    fn once(&self) -> i32 {
        let first = self.sample();
        if first.view.answering() == 0 {
            print!("{}", render(None, &first, self.interval));
            return EXIT_UNKNOWN;
        }
        std::thread::sleep(self.interval);
        let second = self.sample();
        print!("{}", render(Some(&first), &second, self.interval));
        if second.view.answering() == 0 {
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

    /// One refresh, within one request budget (5 s): every node's STATUS at once
    /// (`views::gather`: a silent node costs a short wait once a majority answered),
    /// then the queues from the node that says it leads.
    fn sample(&self) -> Sample {
        let budget = Budget::of(super::CLI_REQUEST_TIMEOUT);
        let (_, view) = views::gather(&self.direct, &self.given, budget);
        // The queues live on the leader: when no node answering leads (none was
        // founded, an election runs), TOP KEYS would only be answered `M`.
        let left = || budget.length.saturating_sub(budget.started.elapsed());
        let leader = view.leader.map(|i| view.rows[i].addr.clone());
        let keys = match &leader {
            None => Err(NO_LEADER.into()),
            Some(addr) => self.direct.top_keys_of(addr, self.keys, left()).map_err(|e| describe(&e)),
        };
        // Which of those keys are pools: each one's POOL, within what is left of the
        // budget (a key the leader does not answer for in time is left out).
        let mut pools = Vec::new();
        if let (Some(addr), Ok(keys)) = (&leader, &keys) {
            for k in keys {
                let asked = self.direct.ask(addr, &Request::Pool { key: k.key.clone() }, left());
                if let Ok(Response::Pool { capacity, in_use, holds, waiters, oldest_wait_ms, .. }) = asked {
                    if capacity > 1 {
                        let key = k.key.clone();
                        pools.push(PoolRow { key, capacity, in_use, holds, waiters, oldest_wait_ms });
                    }
                }
            }
        }
        Sample { view, keys, pools }
    }
}

/// Why no queues are shown when no leader answers.
const NO_LEADER: &str = "no leader known: the queues live on the leader";

fn describe(e: &ClientError) -> String {
    match e {
        ClientError::NotLeader { .. } | ClientError::Unavailable { lasting: false, .. } => NO_LEADER.into(),
        ClientError::Unavailable { lasting: true, .. } => "no node can be used (see above)".into(),
        other => other.to_string(),
    }
}

/// The view: nodes, rates, keys. `previous` gives the rates (none on the first view).
fn render(previous: Option<&Sample>, current: &Sample, interval: Duration) -> String {
    let mut out = String::new();
    let view = &current.view;
    let leader = view.leader.map(|i| &view.rows[i]);
    out.push_str(&format!(
        "ticketing top: {} node{}, {} answering, leader {}, every {:.1} s\n\n",
        view.rows.len(),
        if view.rows.len() == 1 { "" } else { "s" },
        view.answering(),
        leader.and_then(|l| l.field("node_id")).unwrap_or("unknown"),
        interval.as_secs_f64()
    ));
    let leader_commit = leader.and_then(|l| l.number("commit_index"));
    let mut rows =
        vec![["NODE", "ADDR", "ROLE", "TERM", "COMMIT", "LAG", "CONNS"].map(str::to_owned).to_vec()];
    for node in &view.rows {
        let cell = |name: &str| node.field(name).unwrap_or("-").to_owned();
        let lag = match (leader_commit, node.number("applied_index")) {
            (Some(commit), Some(applied)) => commit.saturating_sub(applied).to_string(),
            _ => "-".into(),
        };
        rows.push(vec![
            node.id.clone(),
            node.addr.clone(),
            node.role().to_owned(),
            cell("term"),
            cell("commit_index"),
            lag,
            cell("connections"),
        ]);
    }
    out.push_str(&table(&rows));
    // Why each node that did not answer gave nothing; a node that knows no cluster
    // yet says what it waits for, and what to do.
    for node in &view.rows {
        match &node.status {
            Err(why) => out.push_str(&format!("node {} unreachable: {why}\n", node.id)),
            Ok(status) => {
                let field = |name: &str| status.get(name).map(String::as_str).unwrap_or("");
                if let Some(why) = super::admin::not_a_member_by(&field) {
                    out.push_str(&format!("{why}\n"));
                }
            }
        }
    }
    if let Some(whose) = view.whose() {
        out.push_str(&format!("{whose}\n"));
    }
    out.push('\n');
    let rates: Vec<String> = RATES
        .iter()
        .map(|(name, title)| match previous.and_then(|p| rate(&p.view.rows, &view.rows, name)) {
            Some(r) => format!("{title} {r:.1}"),
            None => format!("{title} -"),
        })
        .collect();
    out.push_str(&rates.join("   "));
    out.push('\n');
    // Counted and multi-key holds, from the leader's STATUS (applied state).
    let pooled = |name: &str| leader.and_then(|l| l.field(name)).unwrap_or("-").to_owned();
    out.push_str(&format!(
        "pooled holds {}   permits in use {}\n\n",
        pooled("pooled_holds"),
        pooled("permits_in_use")
    ));
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
    if !current.pools.is_empty() {
        out.push('\n');
        let mut rows = vec![["POOL", "CAPACITY", "IN USE", "HOLDS", "WAITERS", "OLDEST WAIT"]
            .map(str::to_owned)
            .to_vec()];
        for p in &current.pools {
            rows.push(vec![
                printable(&p.key),
                p.capacity.to_string(),
                p.in_use.to_string(),
                p.holds.to_string(),
                p.waiters.to_string(),
                seconds(p.oldest_wait_ms),
            ]);
        }
        out.push_str(&table(&rows));
    }
    out
}

/// Per second, of the counter `name` summed over the nodes that answered both samples
/// (keyed by node id, so a node that stopped answering does not look like a drop; a
/// restarted node's counter starting over counts as no change). Each node's change is
/// divided by the time between its own two answers — not by the refresh interval: a
/// sample that waited for a silent node took longer than that.
fn rate(previous: &[Row], current: &[Row], name: &str) -> Option<f64> {
    let by_node = |rows: &[Row]| -> BTreeMap<String, (u64, Instant)> {
        rows.iter().filter_map(|n| Some((n.field("node_id")?.to_owned(), (n.number(name)?, n.at)))).collect()
    };
    let (before, after) = (by_node(previous), by_node(current));
    let mut sum = 0.0;
    let mut any = false;
    for (node, (now, at)) in &after {
        let Some((then, was)) = before.get(node) else { continue };
        let elapsed = at.saturating_duration_since(*was).as_secs_f64();
        if elapsed > 0.0 {
            sum += now.saturating_sub(*then) as f64 / elapsed;
            any = true;
        }
    }
    any.then_some(sum)
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
    use crate::cli::views::Fields;

    fn node(id: &str, at: Instant, fields: &[(&str, &str)]) -> Row {
        let mut status: Fields = fields.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        status.insert("node_id".into(), id.into());
        Row { id: id.into(), addr: format!("127.0.0.{id}:5225"), status: Ok(status), at }
    }

    fn sample(rows: Vec<Row>, leader: Option<usize>) -> Sample {
        Sample { view: View { rows, source: None, leader }, keys: Ok(vec![]), pools: vec![] }
    }

    #[test]
    fn rates_sum_the_nodes_seen_twice_and_ignore_restarts() {
        let t0 = Instant::now();
        let t2 = t0 + Duration::from_secs(2);
        let before =
            vec![node("1", t0, &[("grants_total", "100")]), node("2", t0, &[("grants_total", "50")])];
        let after = vec![
            node("1", t2, &[("grants_total", "300")]),
            node("2", t2, &[("grants_total", "10")]), // restarted: counts as no change
            node("3", t2, &[("grants_total", "999")]), // new: not in the first sample
        ];
        assert_eq!(rate(&before, &after, "grants_total"), Some(100.0));
        assert_eq!(rate(&before, &after, "handoffs_total"), None);
    }

    /// The first sample waited 5 s for a silent node after the live ones answered, then
    /// `top --once` slept its 1 s interval: the live nodes' answers are 6 s apart, and
    /// 300 grants in them are 50 a second — not 300 (it divided by the interval).
    #[test]
    fn rates_divide_by_the_time_between_each_node_s_two_answers() {
        let t0 = Instant::now();
        let before = vec![node("1", t0 + Duration::from_millis(10), &[("grants_total", "1000")])];
        let after = vec![node("1", t0 + Duration::from_millis(6010), &[("grants_total", "1300")])];
        assert_eq!(rate(&before, &after, "grants_total"), Some(50.0));
        // Two nodes answering at different moments: each over its own interval.
        let before = vec![
            node("1", t0, &[("grants_total", "0")]),
            node("2", t0 + Duration::from_secs(3), &[("grants_total", "0")]),
        ];
        let after = vec![
            node("1", t0 + Duration::from_secs(4), &[("grants_total", "40")]),
            node("2", t0 + Duration::from_secs(4), &[("grants_total", "10")]),
        ];
        assert_eq!(rate(&before, &after, "grants_total"), Some(20.0));
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
        let mut current = sample(
            vec![
                node("1", t0, &[("role", "leader"), ("commit_index", "120"), ("applied_index", "120")]),
                node("2", t0, &[("role", "follower"), ("commit_index", "118"), ("applied_index", "100")]),
                node("4", t0, &[("role", "standby"), ("commit_index", "118"), ("applied_index", "118")]),
                Row {
                    id: "3".into(),
                    addr: "127.0.0.3:5225".into(),
                    status: Err("127.0.0.3:5225: connection refused".into()),
                    at: t0,
                },
            ],
            Some(0),
        );
        current.keys = Ok(keys);
        let text = render(None, &current, Duration::from_secs(1));
        assert!(text.contains("4 nodes, 3 answering, leader 1"), "{text}");
        let lag_of_2 = text.lines().find(|l| l.starts_with("2 ")).unwrap();
        assert!(lag_of_2.split_whitespace().nth(5) == Some("20"), "{text}");
        // The unreachable node's row keeps the table's columns; why is under it.
        let row_of_3 = text.lines().find(|l| l.starts_with("3 ")).unwrap();
        assert_eq!(
            row_of_3.split_whitespace().collect::<Vec<_>>(),
            ["3", "127.0.0.3:5225", "unreachable", "-", "-", "-", "-"]
        );
        assert!(text.contains("node 3 unreachable: 127.0.0.3:5225: connection refused"), "{text}");
        assert!(text.lines().find(|l| l.starts_with("4 ")).unwrap().contains(" standby "), "{text}");
        assert!(text.contains("seat:\\n42  7"), "{text}");
        assert!(text.contains("grants/s -"), "{text}");
        assert!(!text.contains("POOL "), "no pool among the keys: no pool table\n{text}");
    }

    #[test]
    fn pools_among_the_keys_get_a_table_of_their_own() {
        let t0 = Instant::now();
        let mut current = sample(
            vec![node("1", t0, &[("role", "standalone"), ("pooled_holds", "3"), ("permits_in_use", "5")])],
            Some(0),
        );
        current.pools = vec![PoolRow {
            key: "stock".into(),
            capacity: 5,
            in_use: 5,
            holds: 3,
            waiters: 2,
            oldest_wait_ms: 2_500,
        }];
        let text = render(None, &current, Duration::from_secs(1));
        assert!(text.contains("pooled holds 3   permits in use 5"), "{text}");
        let row = text.lines().find(|l| l.starts_with("stock ")).unwrap();
        assert_eq!(row.split_whitespace().collect::<Vec<_>>(), ["stock", "5", "5", "3", "2", "2.5", "s"]);
    }
}
