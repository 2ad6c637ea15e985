//! Server configuration from the environment (docs/configuration.md). Every value is checked at
//! start; a bad one stops the server with one line naming the variable.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::proto::addr::PEER_PORT_OFFSET;
use crate::proto::limits::{AUTH_TOKEN_LEN_MIN, WAITERS_PER_KEY_MAX_DEFAULT};

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
  70 a bug: an invariant of the lock table, Raft or the server was violated, or one of
     their threads panicked (one line names it; replace the node)
";

/// Every variable the server reads.
const KNOWN_VARS: &[&str] = &[
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
    "TICKETING_TLS_CERT",
    "TICKETING_TLS_KEY",
    "TICKETING_TLS_CA",
    "TICKETING_HEARTBEAT_MS",
    "TICKETING_ELECTION_MS",
    "TICKETING_MAX_WAITERS",
    "TICKETING_MAX_KEYS",
    "TICKETING_METRICS_LISTEN",
];

/// Default client port.
pub const DEFAULT_LISTEN: &str = "0.0.0.0:5225";
/// Largest accepted `TICKETING_MAX_WAITERS`.
pub const MAX_WAITERS_LIMIT: usize = 1_000_000;
/// Default `TICKETING_MAX_KEYS`: keys held or queued for, node-wide.
pub const MAX_KEYS_DEFAULT: usize = 1_000_000;
/// Largest accepted `TICKETING_MAX_KEYS`: a snapshot of that many keys with the longest
/// keys and owners (524 bytes each) stays below the largest snapshot a follower
/// accepts (1 GiB), so a full node can always bring a new member up to date.
pub const MAX_KEYS_LIMIT: usize = 2_000_000;
/// A held key's largest size in a snapshot: key str8, owner str8, token, lease.
const SNAPSHOT_KEY_BYTES_MAX: usize = 1 + 255 + 1 + 255 + 8 + 4;
const _: () = assert!(
    MAX_KEYS_LIMIT * SNAPSHOT_KEY_BYTES_MAX + (1 << 20) < crate::raft::wire::SNAPSHOT_MAX_BYTES,
    "a node at its key limit must produce snapshots its followers accept"
);

/// A configuration error: which variable, and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub var: &'static str,
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.var, self.message)
    }
}

impl std::error::Error for ConfigError {}

fn err(var: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError { var, message: message.into() }
}

/// PEM files that turn TLS on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: Option<PathBuf>,
}

/// Whether this node founds a new cluster or joins an existing one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterState {
    New,
    Join,
}

/// A member of the cluster as configured: its node id and client address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub id: u64,
    pub addr: String,
}

/// Cluster settings; `None` in [`Config::cluster`] means standalone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    pub self_addr: String,
    /// Members named with their ids (all voters for `new`).
    pub peers: Vec<Peer>,
    pub state: ClusterState,
    /// `join` only: client addresses of members named without an id, asked for the
    /// leader (docs/operations.md "Joining").
    pub seeds: Vec<String>,
    /// `join` with `TICKETING_NODE_ID=auto` (or unset): the node drew a fresh random id
    /// and asks the leader to add it as a standby by itself. With a fixed id it waits
    /// for an operator's `admin replace`.
    pub auto_join: bool,
    /// `TICKETING_AUTOPILOT_DEAD_MS`, or `None` with `TICKETING_AUTOPILOT=off`.
    pub autopilot_dead_ms: Option<u64>,
    /// `TICKETING_STANDBYS_MAX`: learners a leader adds at their own request at most.
    pub standbys_max: usize,
}

/// Default `TICKETING_AUTOPILOT_DEAD_MS`: how long a voter must have been unreachable
/// before the leader's autopilot replaces it. Well above an election timeout (2 s) and
/// a planned hand-over (under 1 s), and above a VM's live migration or a long GC pause.
pub const AUTOPILOT_DEAD_MS_DEFAULT: u64 = 30_000;
/// `TICKETING_AUTOPILOT_DEAD_MS` is at least this many election timeouts: a voter is
/// never called dead for missing one election.
pub const AUTOPILOT_DEAD_ELECTIONS_MIN: u64 = 3;
/// Default `TICKETING_STANDBYS_MAX`.
pub const STANDBYS_MAX_DEFAULT: u64 = 2;
/// Largest `TICKETING_STANDBYS_MAX`: every standby receives every entry.
pub const STANDBYS_MAX_LIMIT: u64 = 8;

/// Everything a node needs to start. Its `Debug` shows the secrets' lengths only.
#[derive(Clone, PartialEq, Eq)]
pub struct Config {
    pub listen: SocketAddr,
    /// The client secret.
    pub auth_token: Vec<u8>,
    /// The peer and operator secret: required in a cluster (the peer port accepts only
    /// it) and different from the client secret; on the client port it grants admin
    /// rights (docs/security.md).
    pub peer_auth_token: Option<Vec<u8>>,
    pub node_id: u64,
    pub tls: Option<TlsFiles>,
    pub heartbeat_ms: u64,
    pub election_ms: u64,
    pub max_waiters: usize,
    /// Keys held or queued for, node-wide (`TICKETING_MAX_KEYS`).
    pub max_keys: usize,
    /// Where to serve `/metrics`, `/healthz` and `/readyz` (`TICKETING_METRICS_LISTEN`);
    /// `None`: off.
    pub metrics_listen: Option<SocketAddr>,
    pub cluster: Option<ClusterConfig>,
    /// Things worth a warning at start that are not errors (a secret file others may
    /// read); logged by `run_from_env`.
    pub warnings: Vec<String>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redacted = |s: &[u8]| format!("<{} bytes>", s.len());
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("auth_token", &redacted(&self.auth_token))
            .field("peer_auth_token", &self.peer_auth_token.as_deref().map(redacted))
            .field("node_id", &self.node_id)
            .field("tls", &self.tls)
            .field("heartbeat_ms", &self.heartbeat_ms)
            .field("election_ms", &self.election_ms)
            .field("max_waiters", &self.max_waiters)
            .field("max_keys", &self.max_keys)
            .field("metrics_listen", &self.metrics_listen)
            .field("cluster", &self.cluster)
            .field("warnings", &self.warnings)
            .finish()
    }
}

impl Config {
    /// A standalone node with defaults, for tests, the demo and embedding.
    pub fn standalone(listen: SocketAddr, auth_token: Vec<u8>) -> Config {
        Config {
            listen,
            auth_token,
            peer_auth_token: None,
            node_id: 1,
            tls: None,
            heartbeat_ms: 200,
            election_ms: 2000,
            max_waiters: WAITERS_PER_KEY_MAX_DEFAULT,
            max_keys: MAX_KEYS_DEFAULT,
            metrics_listen: None,
            cluster: None,
            warnings: Vec::new(),
        }
    }

    /// Why this configuration cannot run, for configurations built in code (the
    /// environment path checks the same while reading).
    pub fn check(&self) -> Result<(), ConfigError> {
        if let Some(cluster) = &self.cluster {
            check_peer_secret(self.peer_auth_token.as_deref(), &self.auth_token)?;
            check_cluster_listen(self.listen, &cluster.self_addr)?;
        } else if let Some(peer) = &self.peer_auth_token {
            check_peer_secret(Some(peer), &self.auth_token)?;
        }
        Ok(())
    }

    /// Reads the process environment.
    pub fn from_env() -> Result<Config, ConfigError> {
        let mut vars = BTreeMap::new();
        for (name, value) in std::env::vars_os() {
            let Some(name) = name.to_str() else { continue };
            match value.into_string() {
                Ok(value) => {
                    vars.insert(name.to_owned(), value);
                }
                Err(_) if name.starts_with("TICKETING_") => {
                    let var = KNOWN_VARS.iter().find(|v| **v == name).copied().unwrap_or("TICKETING_*");
                    return Err(err(var, format!("{name} is not valid UTF-8")));
                }
                Err(_) => {}
            }
        }
        Config::from_vars(&|name| vars.get(name).cloned())
    }

    /// Reads configuration through `get` (the environment, or a map in tests).
    pub fn from_vars(get: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let listen_text = get("TICKETING_LISTEN").unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
        let listen = resolve("TICKETING_LISTEN", &listen_text)?;
        let mut warnings = Vec::new();
        let auth_token = secret(get, "TICKETING_AUTH_TOKEN", "TICKETING_AUTH_TOKEN_FILE", &mut warnings)?
            .ok_or_else(|| err("TICKETING_AUTH_TOKEN", "required (or TICKETING_AUTH_TOKEN_FILE)"))?;
        let peer_auth_token =
            secret(get, "TICKETING_PEER_AUTH_TOKEN", "TICKETING_PEER_AUTH_TOKEN_FILE", &mut warnings)?;
        if peer_auth_token.is_some() {
            check_peer_secret(peer_auth_token.as_deref(), &auth_token)?;
        }
        let tls = tls_files(get)?;
        let heartbeat_ms = number(get, "TICKETING_HEARTBEAT_MS", 200, 10, 60_000)?;
        let election_ms = number(get, "TICKETING_ELECTION_MS", 2000, 50, 600_000)?;
        if election_ms < 2 * heartbeat_ms {
            return Err(err(
                "TICKETING_ELECTION_MS",
                format!("{election_ms} must be at least twice TICKETING_HEARTBEAT_MS ({heartbeat_ms})"),
            ));
        }
        let max_waiters = number(
            get,
            "TICKETING_MAX_WAITERS",
            WAITERS_PER_KEY_MAX_DEFAULT as u64,
            1,
            MAX_WAITERS_LIMIT as u64,
        )? as usize;
        let max_keys =
            number(get, "TICKETING_MAX_KEYS", MAX_KEYS_DEFAULT as u64, 1, MAX_KEYS_LIMIT as u64)? as usize;
        let metrics_listen = match get("TICKETING_METRICS_LISTEN") {
            None => None,
            Some(text) => {
                let addr = resolve("TICKETING_METRICS_LISTEN", &text)?;
                if addr.port() == listen.port()
                    && (addr.ip() == listen.ip()
                        || addr.ip().is_unspecified()
                        || listen.ip().is_unspecified())
                {
                    return Err(err(
                        "TICKETING_METRICS_LISTEN",
                        format!(
                            "{text:?} is the client port (TICKETING_LISTEN); give the metrics their own port"
                        ),
                    ));
                }
                Some(addr)
            }
        };
        let node_id = match get("TICKETING_NODE_ID") {
            None => None,
            Some(text) if text.trim() == "auto" => Some(NodeIdSetting::Auto),
            Some(text) => match text.trim().parse::<u64>() {
                Ok(0) | Err(_) => {
                    return Err(err("TICKETING_NODE_ID", format!("{text:?} is not a non-zero u64 or auto")))
                }
                Ok(id) => Some(NodeIdSetting::Fixed(id)),
            },
        };
        let mut cluster = cluster_config(get, node_id, election_ms)?;
        let node_id = match (&mut cluster, node_id) {
            (_, Some(NodeIdSetting::Fixed(id))) => Some(id),
            (Some(cluster), _) if cluster.state == ClusterState::Join => {
                cluster.auto_join = true;
                Some(fresh_node_id())
            }
            (Some(_), Some(NodeIdSetting::Auto)) => return Err(err(
                "TICKETING_NODE_ID",
                "auto is for TICKETING_CLUSTER_STATE=join; the founders of a new cluster are listed with \
                     their ids in TICKETING_CLUSTER_PEERS (or start them all with join and found the cluster \
                     with `ticketing admin found`)",
            )),
            (None, Some(NodeIdSetting::Auto)) => None,
            (_, None) => None,
        };
        if let Some(cluster) = &cluster {
            if node_id.is_none() {
                return Err(err("TICKETING_NODE_ID", "required in cluster mode"));
            }
            check_peer_secret(peer_auth_token.as_deref(), &auth_token)?;
            check_cluster_listen(listen, &cluster.self_addr)?;
        }
        Ok(Config {
            listen,
            auth_token,
            peer_auth_token,
            node_id: node_id.unwrap_or(1),
            tls,
            heartbeat_ms,
            election_ms,
            max_waiters,
            max_keys,
            metrics_listen,
            cluster,
            warnings,
        })
    }
}

fn resolve(var: &'static str, text: &str) -> Result<SocketAddr, ConfigError> {
    match crate::resolve::resolve(text) {
        Ok(addrs) => {
            addrs.into_iter().next().ok_or_else(|| err(var, format!("{text:?} resolves to no address")))
        }
        Err(e) => Err(err(var, format!("{text:?} is not host:port ({e})"))),
    }
}

fn number(
    get: &dyn Fn(&str) -> Option<String>,
    var: &'static str,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64, ConfigError> {
    let Some(text) = get(var) else {
        return Ok(default);
    };
    match text.trim().parse::<u64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(err(var, format!("{text:?} is not a whole number in {min}..={max}"))),
    }
}

/// The peer secret must exist in a cluster and must not be the client secret: every
/// lock client holds the client secret, and the peer secret is what makes a node a
/// node (and an operator an operator).
fn check_peer_secret(peer: Option<&[u8]>, client: &[u8]) -> Result<(), ConfigError> {
    const VAR: &str = "TICKETING_PEER_AUTH_TOKEN";
    match peer {
        None => Err(err(
            VAR,
            "required in cluster mode (or TICKETING_PEER_AUTH_TOKEN_FILE): the peer and operator \
             secret, different from the client secret",
        )),
        // Equality of two secrets of our own: no timing to protect here.
        Some(peer) if peer == client => Err(err(
            VAR,
            "must differ from TICKETING_AUTH_TOKEN: every lock client holds the client secret, \
             and the peer secret lets its holder act as a node or an operator",
        )),
        Some(_) => Ok(()),
    }
}

/// A cluster node's peer port is its client port + 1000 on both sides: peers dial
/// SELF's port + 1000, the node listens on LISTEN's port + 1000, so they must agree and
/// leave room for the addition.
fn check_cluster_listen(listen: SocketAddr, self_addr: &str) -> Result<(), ConfigError> {
    if listen.port() == 0 || listen.port() > u16::MAX - PEER_PORT_OFFSET {
        return Err(err(
            "TICKETING_LISTEN",
            format!(
                "port {} cannot be used in cluster mode: it must be 1..=64535 (peer port = port + 1000)",
                listen.port()
            ),
        ));
    }
    let self_port = self_addr.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok());
    if self_port != Some(listen.port()) {
        return Err(err(
            "TICKETING_CLUSTER_SELF",
            format!(
                "{self_addr:?} has another port than TICKETING_LISTEN ({listen}): peers dial SELF's port + \
                 1000, and this node listens on LISTEN's port + 1000"
            ),
        ));
    }
    Ok(())
}

/// A secret given inline or as a file (one trailing newline is not part of it). A file
/// that other users may read earns a warning.
fn secret(
    get: &dyn Fn(&str) -> Option<String>,
    var: &'static str,
    file_var: &'static str,
    warnings: &mut Vec<String>,
) -> Result<Option<Vec<u8>>, ConfigError> {
    let value = match (get(var), get(file_var)) {
        (Some(_), Some(_)) => return Err(err(var, format!("set either {var} or {file_var}, not both"))),
        (Some(inline), None) => (var, inline.into_bytes()),
        (None, Some(path)) => {
            let mut bytes =
                std::fs::read(&path).map_err(|e| err(file_var, format!("cannot read {path:?}: {e}")))?;
            if let Some(warning) = world_readable(file_var, &path) {
                warnings.push(warning);
            }
            if bytes.ends_with(b"\n") {
                bytes.pop();
                if bytes.ends_with(b"\r") {
                    bytes.pop();
                }
            }
            (file_var, bytes)
        }
        (None, None) => return Ok(None),
    };
    let (source, bytes) = value;
    if bytes.len() < AUTH_TOKEN_LEN_MIN {
        return Err(err(
            source,
            format!("the secret is {} bytes; at least {AUTH_TOKEN_LEN_MIN} are required", bytes.len()),
        ));
    }
    Ok(Some(bytes))
}

/// A warning when `path` may be read by users other than its owner and group.
fn world_readable(var: &str, path: &str) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode();
    (mode & 0o004 != 0).then(|| {
        format!(
            "{var}: {path:?} is readable by every user of this host (mode {:o}); chmod o-r it",
            mode & 0o777
        )
    })
}

fn tls_files(get: &dyn Fn(&str) -> Option<String>) -> Result<Option<TlsFiles>, ConfigError> {
    let cert = get("TICKETING_TLS_CERT");
    let key = get("TICKETING_TLS_KEY");
    let ca = get("TICKETING_TLS_CA").map(PathBuf::from);
    let files = match (cert, key) {
        (None, None) if ca.is_some() => {
            return Err(err(
                "TICKETING_TLS_CA",
                "needs TICKETING_TLS_CERT and TICKETING_TLS_KEY: a server with a CA but no certificate \
                 would run without TLS",
            ))
        }
        (None, None) => return Ok(None),
        (Some(_), None) => return Err(err("TICKETING_TLS_KEY", "required when TICKETING_TLS_CERT is set")),
        (None, Some(_)) => return Err(err("TICKETING_TLS_CERT", "required when TICKETING_TLS_KEY is set")),
        (Some(cert), Some(key)) => TlsFiles { cert: cert.into(), key: key.into(), ca },
    };
    for (var, path) in [("TICKETING_TLS_CERT", &files.cert), ("TICKETING_TLS_KEY", &files.key)] {
        if !path.is_file() {
            return Err(err(var, format!("{} is not a readable file", path.display())));
        }
    }
    if let Some(ca) = &files.ca {
        if !ca.is_file() {
            return Err(err("TICKETING_TLS_CA", format!("{} is not a readable file", ca.display())));
        }
    }
    Ok(Some(files))
}

/// `TICKETING_NODE_ID` as given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NodeIdSetting {
    Fixed(u64),
    Auto,
}

/// A node id no process has used: 63 random bits from the OS (never 0). Why random and
/// not assigned: a restarted process must not need anyone's bookkeeping to be new, and
/// two ids drawn this way collide with odds of 2^-63 per pair; the leader still refuses
/// an id any configuration ever named (docs/operations.md "Node ids").
pub fn fresh_node_id() -> u64 {
    crate::random::nonzero(63)
}

fn cluster_config(
    get: &dyn Fn(&str) -> Option<String>,
    node_id: Option<NodeIdSetting>,
    election_ms: u64,
) -> Result<Option<ClusterConfig>, ConfigError> {
    let node_id = match node_id {
        Some(NodeIdSetting::Fixed(id)) => Some(id),
        _ => None,
    };
    let state = match get("TICKETING_CLUSTER_STATE").as_deref().map(str::trim) {
        None | Some("new") => ClusterState::New,
        Some("join") => ClusterState::Join,
        Some(other) => return Err(err("TICKETING_CLUSTER_STATE", format!("{other:?} is not new or join"))),
    };
    let Some(peers_text) = get("TICKETING_CLUSTER_PEERS") else {
        if get("TICKETING_CLUSTER_SELF").is_some() {
            return Err(err("TICKETING_CLUSTER_PEERS", "required when TICKETING_CLUSTER_SELF is set"));
        }
        // Why an error and not standalone: a standalone node founds a fencing domain of
        // its own, so a node meant to join would hand out a second grant of every key.
        if state == ClusterState::Join {
            return Err(err(
                "TICKETING_CLUSTER_PEERS",
                "required with TICKETING_CLUSTER_STATE=join (the members to join, id@host:port,...)",
            ));
        }
        return Ok(None);
    };
    let mut peers: Vec<Peer> = Vec::new();
    let mut seeds: Vec<String> = Vec::new();
    for item in peers_text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if state == ClusterState::Join && !item.contains('@') {
            check_addr("TICKETING_CLUSTER_PEERS", item)?;
            if !seeds.iter().any(|s| s == item) {
                seeds.push(item.to_owned());
            }
            continue;
        }
        let peer = parse_peer(item).map_err(|m| err("TICKETING_CLUSTER_PEERS", m))?;
        if peers.iter().any(|p| p.id == peer.id) {
            return Err(err("TICKETING_CLUSTER_PEERS", format!("node id {} appears twice", peer.id)));
        }
        peers.push(peer);
    }
    let self_addr = get("TICKETING_CLUSTER_SELF")
        .map(|s| s.trim().to_owned())
        .ok_or_else(|| err("TICKETING_CLUSTER_SELF", "required in cluster mode"))?;
    check_addr("TICKETING_CLUSTER_SELF", &self_addr)?;
    if state == ClusterState::New {
        if peers.len() != 3 && peers.len() != 5 {
            return Err(err(
                "TICKETING_CLUSTER_PEERS",
                format!("a new cluster has exactly 3 or 5 voters; {} are listed", peers.len()),
            ));
        }
        if let Some(id) = node_id {
            match peers.iter().find(|p| p.id == id) {
                None => {
                    return Err(err("TICKETING_CLUSTER_PEERS", format!("this node's id {id} is not listed")))
                }
                Some(me) if me.addr != self_addr => {
                    return Err(err(
                        "TICKETING_CLUSTER_SELF",
                        format!("{self_addr:?} differs from the address listed for node {id}: {:?}", me.addr),
                    ))
                }
                Some(_) => {}
            }
        }
    } else if peers.is_empty() && seeds.is_empty() {
        return Err(err("TICKETING_CLUSTER_PEERS", "a joining node needs at least one existing member"));
    }
    let autopilot = match get("TICKETING_AUTOPILOT").as_deref().map(str::trim) {
        None | Some("on") => true,
        Some("off") => false,
        Some(other) => return Err(err("TICKETING_AUTOPILOT", format!("{other:?} is not on or off"))),
    };
    let dead_min = AUTOPILOT_DEAD_ELECTIONS_MIN * election_ms;
    let dead_ms =
        number(get, "TICKETING_AUTOPILOT_DEAD_MS", AUTOPILOT_DEAD_MS_DEFAULT.max(dead_min), 1, 86_400_000)?;
    if dead_ms < dead_min {
        return Err(err(
            "TICKETING_AUTOPILOT_DEAD_MS",
            format!(
                "{dead_ms} is under {AUTOPILOT_DEAD_ELECTIONS_MIN} election timeouts ({dead_min} ms with \
                 TICKETING_ELECTION_MS={election_ms}): a voter that missed an election is not dead"
            ),
        ));
    }
    let standbys_max =
        number(get, "TICKETING_STANDBYS_MAX", STANDBYS_MAX_DEFAULT, 0, STANDBYS_MAX_LIMIT)? as usize;
    Ok(Some(ClusterConfig {
        self_addr,
        peers,
        state,
        seeds,
        auto_join: false,
        autopilot_dead_ms: autopilot.then_some(dead_ms),
        standbys_max,
    }))
}

fn parse_peer(item: &str) -> Result<Peer, String> {
    let (id, addr) = item.split_once('@').ok_or_else(|| format!("{item:?} is not id@host:port"))?;
    let id: u64 = match id.parse() {
        Ok(0) | Err(_) => return Err(format!("{id:?} in {item:?} is not a non-zero u64")),
        Ok(id) => id,
    };
    check_addr("TICKETING_CLUSTER_PEERS", addr).map_err(|e| e.message)?;
    Ok(Peer { id, addr: addr.to_owned() })
}

/// A client address: `host:port`, short enough for a `str8`, with a port that leaves
/// room for the peer port (+1000); the same check as every address a node stores.
fn check_addr(var: &'static str, addr: &str) -> Result<(), ConfigError> {
    crate::proto::addr::check_client_addr(addr).map_err(|e| err(var, e.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: BTreeMap<String, String> =
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_vars(&|name| map.get(name).cloned())
    }

    const TOKEN: (&str, &str) = ("TICKETING_AUTH_TOKEN", "0123456789abcdef");

    #[test]
    fn defaults_for_a_standalone_node() {
        let c = config(&[TOKEN]).unwrap();
        assert_eq!(c.listen, "0.0.0.0:5225".parse().unwrap());
        assert_eq!(c.max_waiters, 4096);
        assert_eq!((c.heartbeat_ms, c.election_ms), (200, 2000));
        assert_eq!(c.node_id, 1);
        assert!(c.cluster.is_none() && c.tls.is_none());
    }

    #[test]
    fn each_bad_value_names_its_variable() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[], "TICKETING_AUTH_TOKEN"),
            (&[("TICKETING_AUTH_TOKEN", "short")], "TICKETING_AUTH_TOKEN"),
            (&[TOKEN, ("TICKETING_LISTEN", "nonsense")], "TICKETING_LISTEN"),
            (&[TOKEN, ("TICKETING_MAX_WAITERS", "0")], "TICKETING_MAX_WAITERS"),
            (&[TOKEN, ("TICKETING_MAX_WAITERS", "x")], "TICKETING_MAX_WAITERS"),
            (&[TOKEN, ("TICKETING_MAX_KEYS", "0")], "TICKETING_MAX_KEYS"),
            (&[TOKEN, ("TICKETING_MAX_KEYS", "2000001")], "TICKETING_MAX_KEYS"),
            (&[TOKEN, ("TICKETING_METRICS_LISTEN", "nonsense")], "TICKETING_METRICS_LISTEN"),
            (&[TOKEN, ("TICKETING_METRICS_LISTEN", "127.0.0.1:5225")], "TICKETING_METRICS_LISTEN"),
            (&[TOKEN, ("TICKETING_HEARTBEAT_MS", "-1")], "TICKETING_HEARTBEAT_MS"),
            (&[TOKEN, ("TICKETING_ELECTION_MS", "300")], "TICKETING_ELECTION_MS"),
            (&[TOKEN, ("TICKETING_NODE_ID", "0")], "TICKETING_NODE_ID"),
            (&[TOKEN, ("TICKETING_TLS_CERT", "/nonexistent")], "TICKETING_TLS_KEY"),
            (
                &[TOKEN, ("TICKETING_TLS_CERT", "/nonexistent"), ("TICKETING_TLS_KEY", "/x")],
                "TICKETING_TLS_CERT",
            ),
            (&[TOKEN, ("TICKETING_CLUSTER_STATE", "old")], "TICKETING_CLUSTER_STATE"),
            (&[TOKEN, ("TICKETING_AUTH_TOKEN_FILE", "/nonexistent")], "TICKETING_AUTH_TOKEN"),
            (&[TOKEN, ("TICKETING_PEER_AUTH_TOKEN", "short")], "TICKETING_PEER_AUTH_TOKEN"),
            (&[TOKEN, ("TICKETING_PEER_AUTH_TOKEN", TOKEN.1)], "TICKETING_PEER_AUTH_TOKEN"),
            (&[TOKEN, ("TICKETING_CLUSTER_STATE", "join")], "TICKETING_CLUSTER_PEERS"),
            (&[TOKEN, ("TICKETING_TLS_CA", "/etc/hostname")], "TICKETING_TLS_CA"),
        ];
        for (pairs, var) in cases {
            let e = config(pairs).unwrap_err();
            assert_eq!(e.var, *var, "{pairs:?} gave {e}");
        }
    }

    const PEER_TOKEN: (&str, &str) = ("TICKETING_PEER_AUTH_TOKEN", "fedcba9876543210");

    fn cluster_node(extra: &[(&'static str, &'static str)]) -> Result<Config, ConfigError> {
        let mut pairs = vec![
            TOKEN,
            PEER_TOKEN,
            ("TICKETING_LISTEN", "127.0.0.1:5225"),
            ("TICKETING_NODE_ID", "1"),
            ("TICKETING_CLUSTER_SELF", "127.0.0.1:5225"),
            ("TICKETING_CLUSTER_PEERS", "1@127.0.0.1:5225,2@127.0.0.2:5225,3@127.0.0.3:5225"),
        ];
        for (k, v) in extra {
            pairs.retain(|(name, _)| name != k);
            pairs.push((k, v));
        }
        config(&pairs)
    }

    #[test]
    fn a_cluster_node_needs_a_peer_secret_of_its_own() {
        assert!(cluster_node(&[]).is_ok());
        let mut pairs: Vec<(&str, &str)> = vec![
            TOKEN,
            ("TICKETING_NODE_ID", "1"),
            ("TICKETING_CLUSTER_SELF", "127.0.0.1:5225"),
            ("TICKETING_CLUSTER_PEERS", "1@127.0.0.1:5225,2@127.0.0.2:5225,3@127.0.0.3:5225"),
        ];
        assert_eq!(config(&pairs).unwrap_err().var, "TICKETING_PEER_AUTH_TOKEN");
        pairs.push(("TICKETING_PEER_AUTH_TOKEN", TOKEN.1));
        let e = config(&pairs).unwrap_err();
        assert_eq!(e.var, "TICKETING_PEER_AUTH_TOKEN");
        assert!(e.message.contains("must differ"), "{e}");
    }

    #[test]
    fn a_cluster_node_listens_on_its_own_port_with_room_for_the_peer_port() {
        let e = cluster_node(&[("TICKETING_LISTEN", "0.0.0.0:5300")]).unwrap_err();
        assert_eq!(e.var, "TICKETING_CLUSTER_SELF", "{e}");
        let e = cluster_node(&[("TICKETING_LISTEN", "127.0.0.1:65000")]).unwrap_err();
        assert_eq!(e.var, "TICKETING_LISTEN", "{e}");
        let e = cluster_node(&[("TICKETING_LISTEN", "127.0.0.1:0")]).unwrap_err();
        assert_eq!(e.var, "TICKETING_LISTEN", "{e}");
        assert!(cluster_node(&[("TICKETING_LISTEN", "0.0.0.0:5225")]).is_ok());
    }

    #[test]
    fn debug_output_never_shows_a_secret() {
        let c = cluster_node(&[]).unwrap();
        let text = format!("{c:?}");
        assert!(!text.contains(TOKEN.1) && !text.contains(PEER_TOKEN.1), "{text}");
        assert!(text.contains("<16 bytes>"), "{text}");
    }

    #[test]
    fn a_secret_file_others_can_read_is_warned_about() {
        use std::os::unix::fs::PermissionsExt;
        let mut file = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut file, b"0123456789abcdef").unwrap();
        let path = file.path().to_str().unwrap().to_owned();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(config(&[("TICKETING_AUTH_TOKEN_FILE", &path)]).unwrap().warnings.is_empty());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let warnings = config(&[("TICKETING_AUTH_TOKEN_FILE", &path)]).unwrap().warnings;
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].starts_with("TICKETING_AUTH_TOKEN_FILE") && warnings[0].contains("chmod"));
    }

    #[test]
    fn cluster_needs_three_or_five_voters() {
        let base =
            [TOKEN, PEER_TOKEN, ("TICKETING_NODE_ID", "1"), ("TICKETING_CLUSTER_SELF", "127.0.0.1:5225")];
        for (peers, ok) in [
            ("1@127.0.0.1:5225", false),
            ("1@127.0.0.1:5225,2@127.0.0.2:5225", false),
            ("1@127.0.0.1:5225,2@127.0.0.2:5225,3@127.0.0.3:5225", true),
            ("1@127.0.0.1:5225,2@127.0.0.2:5225,3@127.0.0.3:5225,4@127.0.0.4:5225", false),
            ("1@127.0.0.1:5225,2@a:5225,3@b:5225,4@c:5225,5@d:5225", true),
        ] {
            let mut pairs = base.to_vec();
            pairs.push(("TICKETING_CLUSTER_PEERS", peers));
            assert_eq!(config(&pairs).is_ok(), ok, "{peers}");
        }
    }

    #[test]
    fn a_joining_node_takes_a_fresh_id_and_members_without_ids() {
        let join = |extra: &[(&'static str, &'static str)]| {
            let mut pairs = vec![
                TOKEN,
                PEER_TOKEN,
                ("TICKETING_LISTEN", "127.0.0.9:5225"),
                ("TICKETING_CLUSTER_SELF", "127.0.0.9:5225"),
                ("TICKETING_CLUSTER_STATE", "join"),
                ("TICKETING_CLUSTER_PEERS", "127.0.0.1:5225,2@127.0.0.2:5225,127.0.0.9:5225"),
            ];
            pairs.extend_from_slice(extra);
            config(&pairs)
        };
        let a = join(&[]).unwrap();
        let b = join(&[("TICKETING_NODE_ID", "auto")]).unwrap();
        assert_ne!(a.node_id, b.node_id, "each start draws its own id");
        assert!(a.node_id != 0 && a.node_id < 1 << 63);
        let cluster = a.cluster.unwrap();
        assert!(cluster.auto_join);
        assert_eq!(cluster.seeds, ["127.0.0.1:5225", "127.0.0.9:5225"]);
        assert_eq!(cluster.peers, [Peer { id: 2, addr: "127.0.0.2:5225".into() }]);
        assert_eq!(cluster.autopilot_dead_ms, Some(AUTOPILOT_DEAD_MS_DEFAULT));
        assert_eq!(cluster.standbys_max, 2);
        // A fixed id waits for `admin replace`.
        let fixed = join(&[("TICKETING_NODE_ID", "44")]).unwrap();
        assert_eq!(fixed.node_id, 44);
        assert!(!fixed.cluster.unwrap().auto_join);
        // Founders are listed with their ids: `auto` is refused for `new`.
        assert_eq!(cluster_node(&[("TICKETING_NODE_ID", "auto")]).unwrap_err().var, "TICKETING_NODE_ID");
        // An id-less member is only for `join`.
        let e =
            cluster_node(&[("TICKETING_CLUSTER_PEERS", "127.0.0.1:5225,2@127.0.0.2:5225,3@127.0.0.3:5225")])
                .unwrap_err();
        assert_eq!(e.var, "TICKETING_CLUSTER_PEERS");
    }

    #[test]
    fn autopilot_settings_are_checked() {
        let off = cluster_node(&[("TICKETING_AUTOPILOT", "off")]).unwrap();
        assert_eq!(off.cluster.unwrap().autopilot_dead_ms, None);
        let c = cluster_node(&[("TICKETING_AUTOPILOT_DEAD_MS", "6000")]).unwrap();
        assert_eq!(c.cluster.unwrap().autopilot_dead_ms, Some(6000));
        for (var, value) in [
            ("TICKETING_AUTOPILOT", "yes"),
            // Under three election timeouts (2000 ms each).
            ("TICKETING_AUTOPILOT_DEAD_MS", "5999"),
            ("TICKETING_AUTOPILOT_DEAD_MS", "x"),
            ("TICKETING_STANDBYS_MAX", "9"),
        ] {
            let e = cluster_node(&[(var, value)]).unwrap_err();
            assert_eq!(e.var, var, "{value}: {e}");
        }
        // A long election timeout raises the default threshold with it.
        let slow = cluster_node(&[("TICKETING_ELECTION_MS", "20000")]).unwrap();
        assert_eq!(slow.cluster.unwrap().autopilot_dead_ms, Some(60_000));
    }

    #[test]
    fn token_file_drops_one_trailing_newline() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut file, b"0123456789abcdef\n").unwrap();
        let path = file.path().to_str().unwrap().to_owned();
        let c = config(&[("TICKETING_AUTH_TOKEN_FILE", &path)]).unwrap();
        assert_eq!(c.auth_token, b"0123456789abcdef");
    }
}
