//! What `ticketing server --help` prints, and the names of every variable the server
//! reads (a `TICKETING_` variable not among them is a typo, refused at start).

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
     this NodeId already ran or a founding node found the cluster formed
  70  a bug: an invariant of the lock table, Raft or the server was violated, or one
      of their threads panicked (one line names it; replace the node)
";

/// Every variable the server reads.
pub const KNOWN_VARS: &[&str] = &[
    "TICKETING_LISTEN",
    "TICKETING_AUTH_TOKEN",
    "TICKETING_AUTH_TOKEN_FILE",
    "TICKETING_PEER_AUTH_TOKEN",
    "TICKETING_PEER_AUTH_TOKEN_FILE",
    "TICKETING_NODE_ID",
    "TICKETING_CLUSTER_SELF",
    "TICKETING_CLUSTER_PEERS",
    "TICKETING_CLUSTER_STATE",
    "TICKETING_AUTOPILOT",
    "TICKETING_AUTOPILOT_DEAD_MS",
    "TICKETING_STANDBYS_MAX",
    "TICKETING_LEAVE_ON_TERMINATE",
    "TICKETING_TLS_CERT",
    "TICKETING_TLS_KEY",
    "TICKETING_TLS_CA",
    "TICKETING_HEARTBEAT_MS",
    "TICKETING_ELECTION_MS",
    "TICKETING_MAX_WAITERS",
    "TICKETING_MAX_KEYS",
    "TICKETING_METRICS_LISTEN",
];
