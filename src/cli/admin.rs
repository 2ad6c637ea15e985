//! `ticketing admin replace OLD NEW@ADDR`: membership change (SPEC §8).

use super::*;

/// How long `admin replace` waits for the leader's answer: it comes once the new node
/// has caught up and the joint-consensus swap has committed.
pub const ADMIN_REPLACE_TIMEOUT: Duration = Duration::from_secs(120);

pub(super) fn admin(args: &[String]) -> i32 {
    match args.first().map(String::as_str) {
        Some("replace") => replace(&args[1..]),
        Some("-h" | "--help") => {
            print!("Usage: ticketing admin replace OLD_ID NEW_ID@ADDR [options]\n\nCluster administration; see ticketing admin replace --help.\n");
            EXIT_OK
        }
        Some(other) => {
            eprintln!("ticketing admin: unknown subcommand {other:?}; the one there is: replace");
            EXIT_USAGE
        }
        None => {
            eprintln!("Usage: ticketing admin replace OLD_ID NEW_ID@ADDR [options]");
            EXIT_USAGE
        }
    }
}

fn replace(args: &[String]) -> i32 {
    let opts = client_options();
    let about = "Replaces voter OLD_ID by the node NEW_ID listening at ADDR (its client \
                 address as peers dial it). The new node must already run with \
                 TICKETING_CLUSTER_STATE=join and a NodeId never used in the domain. \
                 The leader adds it as a learner, streams it the state, and swaps it for \
                 OLD_ID with joint consensus; the answer (the leader's STATUS) comes once \
                 the swap has committed. Sent to any node; a follower's MOVED is followed \
                 to the leader. Exit 1 when the leader refuses (the reason is printed).";
    let matches = match parse(&opts, args, "ticketing admin replace OLD_ID NEW_ID@ADDR [options]", about) {
        Ok(m) => m,
        Err(code) => return code,
    };
    let [old, new] = matches.free.as_slice() else {
        eprintln!("ticketing admin replace: expected OLD_ID NEW_ID@ADDR; see --help");
        return EXIT_USAGE;
    };
    let Some((new_id, addr)) = new.split_once('@') else {
        eprintln!("ticketing admin replace: {new:?} is not NEW_ID@HOST:PORT");
        return EXIT_USAGE;
    };
    let (Ok(old), Ok(new_id)) = (old.parse::<u64>(), new_id.parse::<u64>()) else {
        eprintln!("ticketing admin replace: node ids are non-zero whole numbers");
        return EXIT_USAGE;
    };
    let client = match build_client_with_timeout(&matches, ADMIN_REPLACE_TIMEOUT) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match client.admin_replace(old, new_id, addr) {
        Ok(Ok(status)) => {
            eprintln!("replaced node {old} by node {new_id} at {addr}");
            print!("{status}");
            if !status.ends_with('\n') {
                println!();
            }
            EXIT_OK
        }
        Ok(Err(reason)) => {
            eprintln!("ticketing admin replace: refused: {reason}");
            EXIT_NO
        }
        Err(e) => {
            eprintln!("ticketing admin replace: {e}");
            EXIT_UNKNOWN
        }
    }
}
