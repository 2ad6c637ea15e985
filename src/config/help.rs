//! What `ticketing server --help` prints, and the names of every variable the server
//! reads, taken from it (a `TICKETING_` variable not among them is a typo, warned
//! about at start).

/// Shown by `ticketing server --help`.
pub const HELP: &str = "\
Environment variables (docs/configuration.md):
  TICKETING_LISTEN                client listen address            default 0.0.0.0:5225
  TICKETING_AUTH_TOKEN            client auth secret, >= 16 bytes  required (or _FILE)
  TICKETING_AUTH_TOKEN_FILE       file holding the client secret
  TICKETING_PEER_AUTH_TOKEN       peer and operator secret, >= 16 bytes, not the client
                                  secret (or _FILE)                required in a cluster
  TICKETING_PEER_AUTH_TOKEN_FILE  file holding the peer secret
  TICKETING_NODE_ID               u64 node id, never reused, or auto (join: a fresh
                                  random id)                       default 1 standalone;
                                                                   required for new; join: auto
  TICKETING_CLUSTER_SELF          own client address as peers dial it (cluster); its
                                  port must be TICKETING_LISTEN's (peer port = port + 1000)
  TICKETING_CLUSTER_PEERS         id@host:port,... of all voters (new); host:port or
                                  id@host:port of any members (join) unset: standalone
  TICKETING_CLUSTER_STATE         new | join                       default new
  TICKETING_CLUSTER_NAME          this cluster's name (letters, digits, . _ -; 1-63):
                                  peers and clients of another name are refused
  TICKETING_AUTOPILOT             on | off: the leader replaces a dead voter by a
                                  caught-up standby                default on
  TICKETING_AUTOPILOT_DEAD_MS     unreachable this long = dead     default 30000
  TICKETING_STANDBYS_MAX          learners kept as standbys        default 2
  TICKETING_LEAVE_ON_TERMINATE    on | off: on SIGTERM a voter lets a caught-up
                                  standby take its place first     default on
  TICKETING_TLS_CERT              PEM certificate chain; with _KEY enables TLS on both ports
  TICKETING_TLS_KEY               PEM private key
  TICKETING_TLS_CA                PEM CA bundle to verify peers (needs _CERT and _KEY;
                                  required in a cluster with TLS)
  TICKETING_HEARTBEAT_MS          Raft heartbeat                   default 200
  TICKETING_ELECTION_MS           Raft election timeout (lower bound) default 2000
  TICKETING_MAX_WAITERS           waiters queued per key           default 4096
  TICKETING_MAX_KEYS              keys held or queued, node-wide   default 1000000
  TICKETING_METRICS_LISTEN        HTTP /metrics /healthz /readyz   default off (e.g. 0.0.0.0:9225)
  RUST_LOG                        log filter (env_logger)          default info

Exit status:
  0  stopped by SIGTERM or SIGINT, or removed from the cluster
  1  cannot start (the port cannot be bound) or cannot go on (a snapshot it cannot decode)
  2  a bad value (one line names the variable, checked at start), or, in a cluster,
     this NodeId already ran, a founding node found the cluster formed, or a node not
     yet in a cluster met peers of another name, two fencing domains or another peer
     secret
  70  a bug: an invariant of the lock table, Raft or the server was violated, or one
      of their threads panicked (one line names it; replace the node)
";

/// Every variable the server reads: the names [`HELP`] lists, read from it, so a new
/// variable is known once it is in the help (`every_variable_read_is_in_the_help`
/// checks that none is read without being there).
pub fn known_vars() -> impl Iterator<Item = &'static str> {
    HELP.lines().filter_map(|line| {
        let name = line.strip_prefix("  ")?.split_whitespace().next()?;
        name.starts_with("TICKETING_").then_some(name)
    })
}

/// `TICKETING_` variables that other parts of Ticketing read, not the server: the
/// client's and `ticketing admin`'s (docs/cli.md), the ones `ticketing run` gives its
/// command, the Python package's (docs/python.md). A server started from the same
/// shell or file sees them; they are not typos.
const OTHER_VARS: &[&str] = &[
    "TICKETING_ADDRS",
    "TICKETING_OWNER",
    "TICKETING_KEY",
    "TICKETING_FENCE",
    "TICKETING_LIBRARY",
    "TICKETING_PREBUILT_LIBRARY",
];

/// One warning per `TICKETING_` variable among `names` that Ticketing does not read (a
/// typo is otherwise silently ignored), naming the known variable closest to it.
pub fn unknown_vars<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let known: Vec<&str> = known_vars().chain(OTHER_VARS.iter().copied()).collect();
    let mut warnings = Vec::new();
    for name in names {
        if !name.starts_with("TICKETING_") || known.contains(&name) {
            continue;
        }
        let closest = known.iter().min_by_key(|k| edit_distance(name, k)).copied().unwrap_or("");
        warnings.push(format!(
            "{name} is not a variable Ticketing reads, so it changes nothing: did you mean {closest}? \
             (ticketing server --help lists them)"
        ));
    }
    warnings
}

/// Levenshtein distance between `a` and `b`, in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != *cb)).min(above + 1).min(row[j] + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_known_variables_are_the_helps() {
        let known: Vec<&str> = known_vars().collect();
        assert!(known.len() >= 20, "{known:?}");
        assert!(known.contains(&"TICKETING_MAX_WAITERS") && known.contains(&"TICKETING_METRICS_LISTEN"));
        assert!(!known.iter().any(|k| k.ends_with('\'') || k.contains(' ')), "{known:?}");
    }

    #[test]
    fn a_typo_names_the_closest_variable() {
        let warnings = unknown_vars(["TICKETING_MAX_WAITER", "TICKETING_ADDRS", "PATH", "TICKETING_LISTEN"]);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].starts_with("TICKETING_MAX_WAITER is not a variable"), "{}", warnings[0]);
        assert!(warnings[0].contains("did you mean TICKETING_MAX_WAITERS?"), "{}", warnings[0]);
        assert!(unknown_vars(["TICKETING_AUTH_TOKN"])[0].contains("TICKETING_AUTH_TOKEN?"));
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
