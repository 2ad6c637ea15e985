//! `ticketing admin`: cluster membership (docs/operations.md).

use super::*;

/// How long `admin replace` waits for the change to commit (the new node may have a
/// large snapshot to receive).
const REPLACE_TIMEOUT: Duration = Duration::from_secs(180);

/// What the exit statuses of `ticketing admin` mean: 1 is a refusal here, not a busy key.
const ADMIN_EXIT_CODES: &str = "\
Exit status:
  0  done
  1  refused, with the reason (found: a node refused)
  2  usage or configuration error (no TICKETING_PEER_AUTH_TOKEN)
  3  no answer or no leader in time; at once, a mistake retrying cannot fix: the
     client secret instead of the operator secret, the certificate, TLS or plain,
     a peer port (a line names it)";

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
                 NodeId never used in the cluster) as a learner, streams it the state, then swaps\n\
                 OLD for NEW with joint consensus. OLD stops by itself once removed.\n\
                 members: the leader, the voters, standbys and learners, and the autopilot.\n\
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
    let opts = client_options();
    let about = format!(
        "Founds a new cluster of the 3 or 5 nodes at ADDR,...: each must be waiting, started with \
         TICKETING_CLUSTER_STATE=join, and know no cluster (see docs/operations.md, \"Founding\"). \
         Prints each node's answer, waiting up to {} s for each.",
        FOUND_TIMEOUT.as_secs()
    );
    let matches = match parse_admin(
        &opts,
        args,
        "ticketing admin found ADDR,ADDR,ADDR[,ADDR,ADDR] [options]",
        &about,
    ) {
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
    let client = match build_admin_client(&matches) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let budget = Budget::of(FOUND_TIMEOUT);
    match client.found_cluster(&addrs, FOUND_TIMEOUT) {
        Ok(answers) => {
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
            code
        }
        Err(e) => admin_failed(&client, "admin found (nothing founded)", &e, false, budget),
    }
}

fn members(args: &[String]) -> i32 {
    let opts = client_options();
    let about = "Prints, as the leader sees them: the leader; each voter, standby and learner (id@address, \
                 the process incarnation the log recorded for it, how long the leader has not heard from \
                 it); the autopilot's state; the nodes a committed configuration removed.";
    let matches = match parse_admin(&opts, args, "ticketing admin members [options]", about) {
        Ok(m) => m,
        Err(code) => return code,
    };
    let client = match build_admin_client(&matches) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let budget = Budget::of(CLI_REQUEST_TIMEOUT);
    match client.members() {
        Ok(text) => {
            let field = |name: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
                    .unwrap_or("")
            };
            println!("leader   {} (node {}, term {})", field("leader"), field("leader_id"), field("term"));
            // member=ID ROLE ADDR incarnation=X [unreachable_ms=N] (the leader adds how
            // long it has not heard from each member)
            let standbys: Vec<&str> = field("standbys").split(',').filter(|s| !s.is_empty()).collect();
            for line in text.lines().filter_map(|l| l.strip_prefix("member=")) {
                let parts: Vec<&str> = line.split(' ').collect();
                if let [id, role, addr, incarnation, extra @ ..] = parts.as_slice() {
                    let role = if *role == "learner" && standbys.contains(id) { "standby" } else { role };
                    let mut line = format!("{role:<8} {id}@{addr}  {}", incarnation.replace('=', " "));
                    for field in extra {
                        if let Some(ms) =
                            field.strip_prefix("unreachable_ms=").and_then(|v| v.parse::<u64>().ok())
                        {
                            line.push_str(&format!("  unreachable for {:.1} s", ms as f64 / 1000.0));
                        }
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
            EXIT_OK
        }
        Err(e) => admin_failed(&client, "admin members", &e, false, budget),
    }
}

/// A failed admin operation: its lines, and its exit status — 1 for a refusal of the
/// operation itself; 3 when the operator secret given is the client secret (a mistake
/// that trying again cannot fix: the line names `TICKETING_PEER_AUTH_TOKEN`); otherwise
/// as for every command (`report_failure`).
fn admin_failed(client: &Client, command: &str, e: &ClientError, no_leader: bool, budget: Budget) -> i32 {
    match e {
        ClientError::Refused(why) if why.starts_with(crate::proto::frame::NEEDS_OPERATOR_SECRET) => {
            eprintln!(
                "ticketing {command}: TICKETING_PEER_AUTH_TOKEN holds the client secret, not the cluster's peer \
                 (operator) secret: nothing was done, and trying again will not help until it is fixed"
            );
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
