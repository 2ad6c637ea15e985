//! The one-shot client commands: acquire, release, query, status.

use super::*;
use crate::client::ReleaseOutcome;

pub(super) fn acquire(args: &[String]) -> i32 {
    let mut opts = lock_options();
    lease_wait_options(&mut opts);
    hold_options(&mut opts);
    let about = "Takes KEY (or every KEY at once: all or none, one token) and prints the \
                 fencing token on stdout. The keys stay held after the command exits, until \
                 `ticketing release KEY TOKEN` with any one of them (same owner) or the lease \
                 ends. With --permits N each KEY is a pool of N permits and --count K of them \
                 are taken.";
    let matches = match parse(&opts, args, "ticketing acquire KEY [KEY...] [options]", about) {
        Ok(m) => m,
        Err(code) => return code,
    };
    let keys = matches.free.clone();
    let (lease, wait) = match lease_wait(&matches) {
        Ok(lw) => lw,
        Err(code) => return code,
    };
    let shape = match hold_shape(&matches, &keys, "acquire") {
        Ok(shape) => shape,
        Err(code) => return code,
    };
    let client = match build_client(&matches) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if let Some(shape) = shape {
        return acquire_hold(&client, &keys, shape, lease, wait);
    }
    let key = &keys[0];
    let budget = Budget::acquire(wait);
    match acquire_following(&client, key, lease, wait, budget) {
        Ok(lock) => {
            eprintln!("acquired {key} as owner {} for {} s", lock.owner(), lock.lease().as_secs());
            println!("{}", lock.into_token());
            EXIT_OK
        }
        Err(e) => {
            let no_leader =
                matches!(e, AcquireError::NotLeader { leader: None } | AcquireError::Unavailable { .. });
            report_failure(&client, "acquire", &Failed::Acquire(&e), no_leader, budget);
            acquire_exit(&e)
        }
    }
}

/// The options of a hold: `acquire` and `run` take several keys and permits.
pub(super) fn hold_options(opts: &mut Options) {
    opts.optopt("", "permits", "capacity of every KEY: a pool of N permits, 1..=1000000 (default 1)", "N");
    opts.optopt("", "count", "permits of each KEY to take, 1..=--permits (default 1)", "K");
    opts.optflag("", "position", "print the place in line on stderr while waiting");
}

/// A hold's keys and options: (capacity, count, print places).
#[derive(Clone, Copy)]
pub(super) struct Shape {
    permits: u32,
    count: u32,
    position: bool,
}

/// `--permits`, `--count` and `--position` checked against the keys, in the CLI's
/// words: `None` for one key taken as an exclusive lock (today's ACQUIRE).
pub(super) fn hold_shape(matches: &Matches, keys: &[String], command: &str) -> Result<Option<Shape>, i32> {
    let number = |name: &str, max: u32| -> Result<Option<u32>, i32> {
        match matches.opt_str(name) {
            None => Ok(None),
            Some(text) => match text.parse::<u32>() {
                Ok(n) if (1..=max).contains(&n) => Ok(Some(n)),
                _ => {
                    eprintln!("ticketing {command}: --{name} {text:?}: must be a whole number 1..={max}");
                    Err(EXIT_USAGE)
                }
            },
        }
    };
    let max = crate::proto::limits::HOLD_KEYS_MAX;
    if keys.is_empty() || keys.len() > max {
        eprintln!("ticketing {command}: expected 1 to {max} KEYs, got {}; see --help", keys.len());
        return Err(EXIT_USAGE);
    }
    if let Some((i, key)) = keys.iter().enumerate().find(|(i, k)| keys[..*i].contains(k)) {
        let first = keys.iter().position(|k| k == key).unwrap_or(0);
        eprintln!(
            "ticketing acquire: KEY {key:?} is given twice (KEY {} and {}); name each key once",
            first + 1,
            i + 1
        );
        return Err(EXIT_USAGE);
    }
    let permits = number("permits", crate::proto::limits::CAPACITY_MAX)?.unwrap_or(1);
    let count = number("count", u32::MAX)?.unwrap_or(1);
    if count > permits {
        eprintln!("ticketing {command}: --count {count} is more than --permits {permits}");
        return Err(EXIT_USAGE);
    }
    let position = matches.opt_present("position");
    Ok((keys.len() > 1 || permits > 1 || position).then_some(Shape { permits, count, position }))
}

/// Several keys or permits taken as one HOLD, tried again like `acquire` while nothing
/// was executed, until `budget`.
pub(super) fn hold_following(
    client: &Client,
    keys: &[String],
    shape: Shape,
    lease: Duration,
    wait: Duration,
    budget: Budget,
) -> Result<Lock, AcquireError> {
    let Shape { permits, count, position } = shape;
    following(wait, budget, |left, _end| {
        let mut hold = keys.iter().fold(client.hold(lease, left), |h, k| h.permits(k, count, permits));
        if position {
            hold = hold.on_place(|p| match p.estimated_wait() {
                Some(eta) => eprintln!("place in line: {} ahead, about {:.1} s", p.ahead, eta.as_secs_f64()),
                None => eprintln!("place in line: {} ahead", p.ahead),
            });
        }
        hold.acquire()
    })
}

/// `acquire` of several keys or permits: one HOLD.
fn acquire_hold(client: &Client, keys: &[String], shape: Shape, lease: Duration, wait: Duration) -> i32 {
    let Shape { permits, count, .. } = shape;
    let budget = Budget::acquire(wait);
    match hold_following(client, keys, shape, lease, wait, budget) {
        Ok(lock) => {
            let what =
                if permits > 1 { format!(" ({count} of {permits} permits each)") } else { String::new() };
            eprintln!(
                "acquired {}{what} as owner {} for {} s",
                keys.join(", "),
                lock.owner(),
                lock.lease().as_secs()
            );
            println!("{}", lock.into_token());
            EXIT_OK
        }
        Err(e) => {
            let no_leader =
                matches!(e, AcquireError::NotLeader { leader: None } | AcquireError::Unavailable { .. });
            report_failure(client, "acquire", &Failed::Acquire(&e), no_leader, budget);
            if matches!(&e, AcquireError::Invalid(why) if why.contains("and the key has capacity")) {
                eprintln!("  give --permits the key's capacity (`ticketing query --pool KEY` shows it)");
            }
            acquire_exit(&e)
        }
    }
}

pub(super) fn release(args: &[String]) -> i32 {
    let opts = lock_options();
    let about = "Releases KEY held by this owner under TOKEN. Prints `released`, or \
                 `not holder` (already released, expired, or never granted; exit 1).";
    let matches = match parse(&opts, args, "ticketing release KEY TOKEN [options]", about) {
        Ok(m) => m,
        Err(code) => return code,
    };
    let [key, token] = matches.free.as_slice() else {
        eprintln!("ticketing release: expected KEY TOKEN; see --help");
        return EXIT_USAGE;
    };
    let Ok(token) = token.parse::<u64>() else {
        eprintln!("ticketing release: TOKEN {token:?} is not a number");
        return EXIT_USAGE;
    };
    let client = match build_client(&matches) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let budget = Budget::of(crate::client::RELEASE_DEADLINE);
    match client.release(key, token) {
        Ok(ReleaseOutcome::Released) => {
            println!("released");
            EXIT_OK
        }
        Ok(ReleaseOutcome::NotHolder) => {
            println!("not holder");
            EXIT_NO
        }
        Ok(other) => {
            // An earlier attempt may have released it: the key is free of this token.
            println!("{other}");
            EXIT_OK
        }
        Err(e) => {
            report_failure(&client, "release", &Failed::Release(&e), true, budget);
            release_exit(&e)
        }
    }
}

pub(super) fn query(args: &[String]) -> i32 {
    let mut opts = client_options();
    opts.optflag(
        "",
        "pool",
        "show KEY as a pool: capacity, permits in use, holds, waiters and the oldest holds",
    );
    let about = "Shows who holds KEY: `free`, or `held owner=… token=… remaining_ms=… waiters=…`. \
                 With --pool: `pool capacity=… in_use=… holds=… waiters=… oldest_wait_ms=…` and \
                 one `hold owner=… token=… count=… remaining_ms=…` line for each of the oldest \
                 holds.";
    let matches = match parse(&opts, args, "ticketing query KEY [options]", about) {
        Ok(m) => m,
        Err(code) => return code,
    };
    let [key] = matches.free.as_slice() else {
        eprintln!("ticketing query: expected exactly one KEY; see --help");
        return EXIT_USAGE;
    };
    let client = match build_client(&matches) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let budget = Budget::of(CLI_REQUEST_TIMEOUT);
    if matches.opt_present("pool") {
        return match client.pool(key) {
            Ok(p) => {
                println!(
                    "pool capacity={} in_use={} holds={} waiters={} oldest_wait_ms={}",
                    p.capacity,
                    p.in_use,
                    p.holds,
                    p.waiters,
                    p.oldest_wait.as_millis()
                );
                for h in &p.holders {
                    println!(
                        "hold owner={} token={} count={} remaining_ms={}",
                        h.owner,
                        h.token,
                        h.count,
                        h.remaining.as_millis()
                    );
                }
                EXIT_OK
            }
            Err(e) => {
                report_failure(&client, "query", &Failed::Read(&e), false, budget);
                client_exit(&e)
            }
        };
    }
    match client.query(key) {
        Ok(None) => {
            println!("free");
            EXIT_OK
        }
        Ok(Some(h)) => {
            println!(
                "held owner={} token={} remaining_ms={} waiters={}",
                h.owner,
                h.token,
                h.remaining.as_millis(),
                h.waiters
            );
            EXIT_OK
        }
        Err(e) => {
            let no_leader = matches!(
                e,
                ClientError::NotLeader { leader: None }
                    | ClientError::Unavailable { lasting: false, .. }
                    | ClientError::NoAnswer
            );
            report_failure(&client, "query", &Failed::Read(&e), no_leader, budget);
            client_exit(&e)
        }
    }
}

/// Columns of the multi-node status table.
const STATUS_COLUMNS: [&str; 6] = ["node_id", "role", "term", "leader", "commit_index", "applied_index"];

pub(super) fn status(args: &[String]) -> i32 {
    let mut opts = client_options();
    opts.optflag("", "node", "print the STATUS text of the (single) given node only");
    let about = "With one address of a standalone node, prints its STATUS (name=value \
                 lines). With one address of a cluster node, or several addresses, prints one \
                 table of every node (a cluster node's voters and standbys are found from its \
                 STATUS). --node prints one node's STATUS text as it is.";
    let matches = match parse(&opts, args, "ticketing status [options]", about) {
        Ok(m) => m,
        Err(code) => return code,
    };
    if let Some(extra) = matches.free.first() {
        eprintln!("ticketing status: unexpected argument {extra:?}");
        return EXIT_USAGE;
    }
    let addrs = addrs_of(&matches);
    let direct = match build_direct(&matches) {
        Ok(d) => d,
        Err(code) => return code,
    };
    let budget = Budget::of(CLI_REQUEST_TIMEOUT);
    // One address: its STATUS as it is, unless it names other members (then a table).
    if addrs.len() == 1 {
        let answer = direct.status_of(&addrs[0], CLI_REQUEST_TIMEOUT);
        let members = answer.as_ref().map(|text| cluster_members(text)).unwrap_or_default();
        if matches.opt_present("node") || members.len() <= 1 {
            return match answer {
                Ok(text) => {
                    print!("{text}");
                    if !text.ends_with('\n') {
                        println!();
                    }
                    EXIT_OK
                }
                Err(error) => {
                    let why = why_unanswered(&addrs[0], &error);
                    views::report_unanswered("status", &views::Unanswered { error, why }, budget);
                    EXIT_UNKNOWN
                }
            };
        }
    }
    // Every node at once, each on a connection of its own: a silent one does not hold
    // up the others' rows past a short wait once a majority answered.
    let (_, view) = views::gather(&direct, &addrs, budget);
    let mut rows =
        vec![std::iter::once("addr").chain(STATUS_COLUMNS).map(str::to_owned).collect::<Vec<String>>()];
    for row in &view.rows {
        let mut cells = vec![row.addr.clone(), row.id.clone(), row.role().to_owned()];
        match &row.status {
            Ok(_) => {
                cells.push(row.field("term").unwrap_or("-").to_owned());
                cells.push(view.leader_of(row).unwrap_or_else(|| "-".into()));
                cells.push(row.field("commit_index").unwrap_or("-").to_owned());
                cells.push(row.field("applied_index").unwrap_or("-").to_owned());
            }
            Err(why) => {
                eprintln!("ticketing status: {why}");
                cells.extend(["-", "-", "-", "-"].map(str::to_owned));
            }
        }
        rows.push(cells);
    }
    print!("{}", table(&rows));
    if let Some(whose) = view.whose() {
        eprintln!("ticketing status: {whose}");
    }
    if view.answering() == 0 {
        EXIT_UNKNOWN
    } else {
        EXIT_OK
    }
}

/// `name=value` lines into pairs (lines without `=` are skipped).
pub(crate) fn parse_status(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| line.split_once('='))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// Left-aligned columns separated by two spaces; the last column is not padded.
pub(super) fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().filter_map(|r| r.get(c)).map(|v| v.chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(
                |(c, v)| {
                    if c + 1 == row.len() {
                        v.clone()
                    } else {
                        format!("{v:<width$}", width = widths[c])
                    }
                },
            )
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// Client addresses of the voters and learners a cluster node's STATUS lists.
pub(super) fn cluster_members(status: &str) -> Vec<String> {
    let mut members = Vec::new();
    for (name, value) in parse_status(status) {
        if name == "voters" || name == "learners" {
            for member in value.split(',') {
                if let Some((_, addr)) = member.split_once('@') {
                    if !addr.is_empty() && !members.iter().any(|m| m == addr) {
                        members.push(addr.to_owned());
                    }
                }
            }
        }
    }
    members
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_parse_and_tables_align() {
        let fields = parse_status("node_id=1\nrole=leader\nleader=\n");
        assert_eq!(fields[1], ("role".into(), "leader".into()));
        assert_eq!(fields[2], ("leader".into(), "".into()));
        let t = table(&[vec!["a".into(), "bb".into()], vec!["ccc".into(), "d".into()]]);
        assert_eq!(t, "a    bb\nccc  d\n");
    }
}
