//! `ticketing admin`: cluster membership (docs/operations.md).

use super::views;
use super::*;
use crate::client::FoundNode;

/// How long `admin replace` waits for the change to commit (the new node may have a
/// large snapshot to receive).
const REPLACE_TIMEOUT: Duration = Duration::from_secs(180);

/// What the exit statuses of `ticketing admin` mean: 1 is a refusal here, not a busy key.
const ADMIN_EXIT_CODES: &str = "\
Exit status:
  0  done
  1  refused, with the reason (found: a node refused)
  2  usage or configuration error (no TICKETING_PEER_AUTH_TOKEN)
  3  no answer or no leader in time (members: the freshest view printed, labelled
     as possibly stale); at once, a mistake retrying cannot fix: the client secret
     instead of the operator secret, the certificate, TLS or plain, a peer port (a
     line names it)";

/// [`parse`] for the admin subcommands: their help names the operator secret and
/// their own exit statuses.
fn parse_admin(opts: &Options, args: &[String], usage: &str, about: &str) -> Result<Matches, i32> {
    parse_with_help(opts, args, usage, about, ADMIN_ENV, ADMIN_EXIT_CODES)
}

pub(super) fn admin(args: &[String]) -> i32 {
    match args.first().map(String::as_str) {
        Some("replace") => replace(&args[1..]),
        Some("members") => members(&args[1..]),
        Some("transfer-leader") => transfer_leader(&args[1..]),
        Some("found") => found(&args[1..]),
        Some("-h" | "--help") | None => {
            print!(
                "Usage: ticketing admin replace OLD_ID NEW_ID@ADDR [--timeout S] [--addr ADDR]\n       \
                 ticketing admin members [--addr ADDR]\n       \
                 ticketing admin transfer-leader [ID] [--addr ADDR]\n       \
                 ticketing admin found ADDR,ADDR,ADDR[,ADDR,ADDR]\n\n\
                 replace: the leader adds NEW (started with TICKETING_CLUSTER_STATE=join and a\n\
                 NodeId never used in the cluster) as a standby, streams it the state, then swaps\n\
                 OLD for NEW with joint consensus. OLD stops by itself once removed.\n\
                 members: the leader's view of the voters and standbys, and the autopilot.\n\
                 transfer-leader: the leader hands leadership to voter ID (without ID: the\n\
                 caught-up voter it chooses) and the command waits until that node leads.\n\
                 found: the 3 or 5 waiting nodes at ADDR (started with TICKETING_CLUSTER_STATE=join,\n\
                 knowing no cluster) found a new cluster together; run once, when a cluster is born.\n\n\
                 All four authenticate with the operator secret: TICKETING_PEER_AUTH_TOKEN or\n\
                 TICKETING_PEER_AUTH_TOKEN_FILE (the cluster's peer secret). Each takes --help.\n\n\
                 {ADMIN_ENV}\n\n{ADMIN_EXIT_CODES}\n"
            );
            if args.is_empty() {
                EXIT_USAGE
            } else {
                EXIT_OK
            }
        }
        Some(other) => {
            eprintln!("ticketing admin: unknown subcommand {other:?}; see ticketing admin --help");
            EXIT_USAGE
        }
    }
}

fn replace(args: &[String]) -> i32 {
    let mut opts = client_options();
    opts.optopt(
        "",
        "timeout",
        "seconds to wait for the change to commit (default 180; the new node may have a large snapshot to receive)",
        "S",
    );
    let about = "Replaces voter OLD_ID by node NEW_ID at client address ADDR (see docs/operations.md). Prints the new voter list.";
    let matches =
        match parse_admin(&opts, args, "ticketing admin replace OLD_ID NEW_ID@ADDR [options]", about) {
            Ok(m) => m,
            Err(code) => return code,
        };
    let [old, new] = matches.free.as_slice() else {
        eprintln!("ticketing admin replace: expected OLD_ID NEW_ID@ADDR; see --help");
        return EXIT_USAGE;
    };
    let Ok(old) = old.parse::<u64>() else {
        eprintln!("ticketing admin replace: OLD_ID {old:?} is not a node id");
        return EXIT_USAGE;
    };
    let Some((new_id, new_addr)) = new.split_once('@') else {
        eprintln!("ticketing admin replace: {new:?} is not NEW_ID@HOST:PORT");
        return EXIT_USAGE;
    };
    let Ok(new_id) = new_id.parse::<u64>() else {
        eprintln!("ticketing admin replace: NEW_ID {new_id:?} is not a node id");
        return EXIT_USAGE;
    };
    let client = match build_admin_client(&matches) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let timeout = match matches.opt_str("timeout") {
        None => REPLACE_TIMEOUT,
        Some(text) => match text.parse::<u64>() {
            Ok(s) if s > 0 => Duration::from_secs(s),
            _ => {
                eprintln!("ticketing admin replace: --timeout {text:?}: must be whole seconds, at least 1");
                return EXIT_USAGE;
            }
        },
    };
    let budget = Budget::of(timeout);
    match client.replace_member(old, new_id, new_addr, timeout) {
        Ok(report) => {
            print!("{report}");
            EXIT_OK
        }
        Err(e) => admin_failed(&client, "admin replace", &e, true, budget),
    }
}

/// How long `admin transfer-leader` waits: a hand-over ends within about an election
/// timeout (2 s by default); this leaves room for slower timing settings.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(30);

fn transfer_leader(args: &[String]) -> i32 {
    let opts = client_options();
    let about = format!(
        "Hands leadership to voter ID (without ID: the caught-up voter the leader chooses) and waits \
         until it leads, at most {} s; requests meanwhile wait and are answered or redirected. Prints \
         the new leader as ID@ADDR (see docs/operations.md).",
        TRANSFER_TIMEOUT.as_secs()
    );
    let matches = match parse_admin(&opts, args, "ticketing admin transfer-leader [ID] [options]", &about) {
        Ok(m) => m,
        Err(code) => return code,
    };
    let target = match matches.free.as_slice() {
        [] => None,
        [id] => match id.parse::<u64>() {
            Ok(id) if id != 0 => Some(id),
            _ => {
                eprintln!("ticketing admin transfer-leader: ID {id:?} is not a node id");
                return EXIT_USAGE;
            }
        },
        _ => {
            eprintln!("ticketing admin transfer-leader: expected at most one ID; see --help");
            return EXIT_USAGE;
        }
    };
    let client = match build_admin_client(&matches) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let budget = Budget::of(TRANSFER_TIMEOUT);
    match client.transfer_leader(target, TRANSFER_TIMEOUT) {
        Ok(leader) => {
            println!("leader {leader}");
            EXIT_OK
        }
        Err(e) => admin_failed(&client, "admin transfer-leader", &e, true, budget),
    }
}

/// How long `admin found` waits for each node's answer.
const FOUND_TIMEOUT: Duration = Duration::from_secs(10);

fn found(args: &[String]) -> i32 {
    // Only the nodes listed are asked: no --addr, and TICKETING_ADDRS is not read.
    let mut opts = Options::new();
    opts.optflag("h", "help", "print this help");
    let about = format!(
        "Founds a new cluster of the 3 or 5 nodes at ADDR,...: each must be waiting, started with \
         TICKETING_CLUSTER_STATE=join, and know no cluster (see docs/operations.md, \"Founding\"). \
         Asks the nodes listed, and no other address, what they are (all at once, up to {} s each), \
         and prints each node's state; only when every one is waiting does it tell each to found, \
         and prints each answer. Run again on the cluster it founded (also after restarts and heals, \
         when the addresses run other node ids: every node answering a member of one cluster that has \
         a leader, or joining it), it says so and changes nothing.",
        FOUND_TIMEOUT.as_secs()
    );
    let usage = "ticketing admin found ADDR,ADDR,ADDR[,ADDR,ADDR]";
    let matches = match parse_admin(&opts, args, usage, &about) {
        Ok(m) => m,
        Err(code) => return code,
    };
    let addrs: Vec<String> = matches.free.iter().flat_map(|a| split_addrs(a)).collect();
    if addrs.len() != 3 && addrs.len() != 5 {
        eprintln!(
            "ticketing admin found: expected the addresses of 3 or 5 waiting nodes, got {}; see --help",
            addrs.len()
        );
        return EXIT_USAGE;
    }
    let built = admin_builder().and_then(|builder| {
        builder.replace_addrs(addrs.clone()).request_timeout(CLI_REQUEST_TIMEOUT).build().map_err(|e| {
            eprintln!("ticketing admin found: {}", build_error(&e, "ADDR"));
            EXIT_USAGE
        })
    });
    let client = match built {
        Ok(c) => c,
        Err(code) => return code,
    };
    let founding = match client.found_cluster(&addrs, FOUND_TIMEOUT) {
        Ok(founding) => founding,
        Err(e) => {
            eprintln!("ticketing admin found: {e}");
            return client_exit(&e);
        }
    };
    if let Some(answers) = &founding.answers {
        let mut code = EXIT_OK;
        for (addr, answer) in addrs.iter().zip(answers) {
            match answer {
                Ok(text) => println!("{addr}: {}", text.trim().replace('\n', " ")),
                Err(e) => {
                    println!("{addr}: not founding: {e}");
                    code = EXIT_NO;
                }
            }
        }
        return code;
    }
    let states: Vec<String> =
        founding.nodes.iter().map(|(addr, node)| format!("{addr}: {}", node_state(addr, node))).collect();
    if let Some(leader) = founding.running_cluster() {
        println!(
            "founded already: these nodes belong to a running cluster, led by node {leader}; nothing was sent, \
             nothing changed"
        );
        for (addr, node) in &founding.nodes {
            match node {
                Ok(FoundNode::Member { id, role, .. }) => println!("{addr}: node {id}, {role}"),
                other => println!("{addr}: {}", node_state(addr, other)),
            }
        }
        return EXIT_OK;
    }
    let unanswered: Vec<&ClientError> = founding.nodes.iter().filter_map(|(_, n)| n.as_ref().err()).collect();
    if unanswered.iter().any(|e| matches!(e, ClientError::Refused(why) if why.starts_with(crate::proto::frame::NEEDS_OPERATOR_SECRET))) {
        eprintln!("ticketing admin found: {NOT_THE_OPERATOR_SECRET}");
        return EXIT_UNKNOWN;
    }
    // Members that know no leader: a cluster founded once, which cannot elect one now.
    let leaderless =
        founding.nodes.iter().any(|(_, n)| matches!(n, Ok(FoundNode::Member { leader_id: 0, .. })));
    let (headline, code) = if leaderless {
        ("a node listed belongs to a cluster that knows no leader (a cluster is founded once; after losing a majority, start every node again before founding: docs/operations.md, \"Losing a majority\")", EXIT_NO)
    } else if unanswered.is_empty() {
        ("a cluster is founded once, and these nodes are not all waiting to be founded", EXIT_NO)
    } else {
        ("every node listed must answer, and not all did; no node was told to found", EXIT_UNKNOWN)
    };
    eprintln!("ticketing admin found: nothing founded: {headline}");
    for line in states {
        eprintln!("  {line}");
    }
    code
}

/// What a node listed for `admin found` is, in a few words (or why it did not answer).
fn node_state(addr: &str, node: &Result<FoundNode, ClientError>) -> String {
    match node {
        Ok(FoundNode::Waiting { id, .. }) => format!("waiting to be founded (node {id})"),
        Ok(FoundNode::Joining { id, leader_id, leader }) => {
            format!("joining the cluster led by node {leader_id} at {leader} (node {id}): a cluster exists")
        }
        Ok(FoundNode::Member { id, role, voters, leader_id }) => {
            let led = if *leader_id == 0 {
                "no leader known".to_owned()
            } else {
                format!("led by node {leader_id}")
            };
            format!(
                "belongs to a cluster already: node {id}, a {role} there; its voters are {voters:?}, {led}"
            )
        }
        Err(e) => {
            let why = why_unanswered(addr, e);
            why.strip_prefix(&format!("{addr}: ")).map(str::to_owned).unwrap_or(why)
        }
    }
}

/// Pause between two rounds of `admin members` while no node answering leads (an
/// election runs).
const MEMBERS_ROUND_PAUSE: Duration = Duration::from_millis(200);

fn members(args: &[String]) -> i32 {
    let opts = client_options();
    let about =
        "Prints the membership as the leader sees it: the leader; each voter and standby (id@address, \
                 the process incarnation the log recorded for it, how long the leader has not heard from \
                 it); the autopilot's state; the nodes a committed configuration removed. Asks every node \
                 it knows of for its view, and waits for a leader's (5 s at most); without one it prints \
                 the most recent view, says whose and how old, and exits 3.";
    let matches = match parse_admin(&opts, args, "ticketing admin members [options]", about) {
        Ok(m) => m,
        Err(code) => return code,
    };
    let direct = match admin_builder().and_then(|builder| direct_from(&matches, builder)) {
        Ok(d) => d,
        Err(code) => return code,
    };
    let budget = Budget::of(CLI_REQUEST_TIMEOUT);
    let mut known = addrs_of(&matches);
    let ask: views::Ask<String> =
        std::sync::Arc::new(move |addr: &str, budget: Duration| direct.members_of(addr, budget));
    let (views, failures) = loop {
        let left = budget.length.saturating_sub(budget.started.elapsed());
        let (mut views, mut failures) = (Vec::new(), Vec::new());
        for answer in views::ask_each(&known, left, known.len(), 0, ask.clone()) {
            match answer.reply {
                Ok(text) => views.push((answer.addr, text)),
                Err(u) => failures.push(u),
            }
        }
        if failures.iter().any(|u| needs_operator_secret(&u.error)) {
            eprintln!("ticketing admin members: {NOT_THE_OPERATOR_SECRET}");
            return EXIT_UNKNOWN;
        }
        if let Some((_, text)) = leader_view(&views) {
            print_members(text, false);
            return EXIT_OK;
        }
        // Next round: also the leader each node names and every member it lists.
        let before = known.len();
        for (_, text) in &views {
            for addr in named_addrs(text) {
                if !known.contains(&addr) {
                    known.push(addr);
                }
            }
        }
        let out_of_time = budget.started.elapsed() + MEMBERS_ROUND_PAUSE >= budget.length;
        // Nothing to wait for: a mistake retrying cannot fix everywhere, or nodes that
        // wait to be founded (no leader comes of waiting).
        let hopeless =
            views.is_empty() && !failures.is_empty() && failures.iter().all(|u| is_lasting(&u.error));
        let waiting = !views.is_empty() && views.iter().all(|(_, text)| field_of(text, "role") == "waiting");
        if out_of_time || hopeless || waiting {
            break (views, failures);
        }
        if known.len() == before {
            // sleep: the pause between two rounds while no node leads (an election runs).
            std::thread::sleep(MEMBERS_ROUND_PAUSE);
        }
    };
    // No leader answered in time: the most recent view a member gave, labelled.
    match freshest_view(&views) {
        Some((_, text)) => {
            print_members(text, true);
            EXIT_UNKNOWN
        }
        None => {
            if let Some(why) = views.iter().find_map(|(_, text)| not_a_member(text)) {
                eprintln!("ticketing admin members: {why}");
            } else if let Some(first) = failures.first() {
                views::report_unanswered("admin members", first, budget);
                for u in &failures[1..] {
                    eprintln!("  {}", u.why);
                }
            }
            EXIT_UNKNOWN
        }
    }
}

/// The value of the line `name=` of a MEMBERS (or STATUS) text; empty when absent.
fn field_of<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines().find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix('='))).unwrap_or("")
}

fn number_of(text: &str, name: &str) -> u64 {
    field_of(text, name).parse().unwrap_or(0)
}

/// The MEMBERS text of the node that says it leads (the highest term if two do).
fn leader_view(views: &[(String, String)]) -> Option<&(String, String)> {
    views.iter().filter(|(_, t)| field_of(t, "role") == "leader").max_by_key(|(_, t)| number_of(t, "term"))
}

/// The most recent view a member gave: the highest term, then commit index, then the
/// one that heard from a leader last.
fn freshest_view(views: &[(String, String)]) -> Option<&(String, String)> {
    views.iter().filter(|(_, t)| not_a_member(t).is_none()).max_by_key(|(_, t)| {
        let heard = field_of(t, "leader_heard_ms").parse::<u64>().map_or(0, |ms| u64::MAX - ms);
        (number_of(t, "term"), number_of(t, "commit_index"), heard)
    })
}

/// The client addresses a MEMBERS text names: its leader, the leader a joining node
/// asks, and every member.
fn named_addrs(text: &str) -> Vec<String> {
    let mut out = vec![field_of(text, "leader").to_owned()];
    out.extend(field_of(text, "joining").split_once('@').map(|(_, addr)| addr.to_owned()));
    for line in text.lines().filter_map(|l| l.strip_prefix("member=")) {
        out.extend(line.split(' ').nth(2).map(str::to_owned));
    }
    out.retain(|a| !a.is_empty());
    out
}

fn needs_operator_secret(e: &ClientError) -> bool {
    matches!(e, ClientError::Refused(why) if why.starts_with(crate::proto::frame::NEEDS_OPERATOR_SECRET))
}

fn is_lasting(e: &ClientError) -> bool {
    matches!(e, ClientError::Unavailable { lasting: true, .. })
}

/// Prints a MEMBERS text: whose view it is and how old, the leader, a line per member,
/// the autopilot and the retired nodes. `stale`: no node answering leads, so this is a
/// node's own view, which may be out of date.
fn print_members(text: &str, stale: bool) {
    let field = |name: &str| field_of(text, name);
    let leader = match (field("leader"), field("leader_id")) {
        ("", _) | (_, "") => format!("none known (term {})", field("term")),
        (addr, id) => format!("{addr} (node {id}, term {})", field("term")),
    };
    println!("leader   {leader}");
    let role = views::role_word(field("role"));
    let view = match (stale, field("leader_heard_ms").parse::<u64>()) {
        (false, _) => format!("as seen by node {} (the leader), now", field("node_id")),
        (true, heard) => {
            let heard = match heard {
                Ok(ms) => format!("it last heard from a leader {:.1} s ago", ms as f64 / 1000.0),
                Err(_) => "it has not heard from a leader".to_owned(),
            };
            format!(
                "as seen by node {} ({role}); {heard}; no node answering leads now: this view may be stale",
                field("node_id")
            )
        }
    };
    println!("view     {view}");
    // member=ID ROLE ADDR incarnation=X [heard_ms=N | unreachable_ms=N] (the leader adds
    // how long ago it heard from each member: unreachable past three heartbeats)
    let ready: Option<Vec<&str>> = text
        .lines()
        .any(|l| l.starts_with("standbys="))
        .then(|| field("standbys").split(',').filter(|s| !s.is_empty()).collect());
    for line in text.lines().filter_map(|l| l.strip_prefix("member=")) {
        let parts: Vec<&str> = line.split(' ').collect();
        if let [id, role, addr, incarnation, extra @ ..] = parts.as_slice() {
            let role = views::role_word(role);
            let mut line = format!("{role:<8} {id}@{addr}  {}", incarnation.replace('=', " "));
            for field in extra {
                let ms = |name: &str| field.strip_prefix(name).and_then(|v| v.parse::<u64>().ok());
                if let Some(ms) = ms("unreachable_ms=") {
                    line.push_str(&format!("  unreachable for {:.1} s", ms as f64 / 1000.0));
                } else if let Some(ms) = ms("unheard_ms=") {
                    line.push_str(&format!("  unheard for {:.1} s", ms as f64 / 1000.0));
                } else if let Some(ms) = ms("heard_ms=") {
                    line.push_str(&format!("  heard {:.1} s ago", ms as f64 / 1000.0));
                }
            }
            if role == "standby" && ready.as_ref().is_some_and(|r| !r.contains(id)) {
                line.push_str("  not ready");
            }
            println!("{line}");
        }
    }
    let autopilot = field("autopilot");
    if !autopilot.is_empty() {
        println!("autopilot {autopilot}");
    }
    let retired = field("retired");
    if !retired.is_empty() {
        println!("retired  {retired}");
    }
}

/// What a node that is not a member of a cluster yet says it is (from its MEMBERS or
/// STATUS text: `role=waiting` or `role=joining`), in one line; `None` for a member.
pub(super) fn not_a_member(text: &str) -> Option<String> {
    not_a_member_by(&|name: &str| {
        text.lines().find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix('='))).unwrap_or("")
    })
}

/// [`not_a_member`], reading the fields through `field` (empty when absent).
pub(super) fn not_a_member_by<'a>(field: &dyn Fn(&str) -> &'a str) -> Option<String> {
    let at = [field("self"), field("node_id")];
    let node = match at {
        ["", id] => format!("node {id}"),
        [addr, id] => format!("{addr} (node {id})"),
    };
    match field("role") {
        "waiting" => Some(format!("{node} knows no cluster: it is {}", crate::cluster::view::WAITING)),
        "joining" => {
            // MEMBERS names the leader on its `joining=` line, STATUS on its leader lines.
            let leader = match field("joining").split_once('@') {
                Some((id, addr)) => format!("node {id} at {addr}"),
                None => format!("node {} at {}", field("leader_id"), field("leader")),
            };
            Some(format!("{node} is not a member yet: it is joining the cluster led by {leader}"))
        }
        _ => None,
    }
}

/// The client secret given as the operator secret: said the same by every admin command.
const NOT_THE_OPERATOR_SECRET: &str = "TICKETING_PEER_AUTH_TOKEN holds the client secret, not the cluster's \
                                       peer (operator) secret: nothing was done, and trying again will not \
                                       help until it is fixed";

/// A failed admin operation: its lines, and its exit status — 1 for a refusal of the
/// operation itself; 3 when the operator secret given is the client secret (a mistake
/// that trying again cannot fix: the line names `TICKETING_PEER_AUTH_TOKEN`); otherwise
/// as for every command (`report_failure`).
fn admin_failed(client: &Client, command: &str, e: &ClientError, no_leader: bool, budget: Budget) -> i32 {
    match e {
        ClientError::Refused(why) if why.starts_with(crate::proto::frame::NEEDS_OPERATOR_SECRET) => {
            eprintln!("ticketing {command}: {NOT_THE_OPERATOR_SECRET}");
            EXIT_UNKNOWN
        }
        ClientError::Refused(_) => {
            eprintln!("ticketing {command}: {e}");
            EXIT_NO
        }
        _ => {
            report_failure(client, command, &Failed::Read(e), no_leader, budget);
            client_exit(e)
        }
    }
}
