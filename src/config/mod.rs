//! Server configuration from the environment (docs/configuration.md). Every value is checked at
//! start; a bad one stops the server with one line naming the variable.
//!
//! This file reads the variables into a [`Config`]; `help.rs` holds the help text and the
//! known names, `values.rs` the error and the shared parsers, `secrets.rs` the secrets
//! and TLS files, `cluster.rs` the cluster settings.

mod cluster;
mod help;
mod secrets;
mod values;

use std::collections::BTreeMap;
use std::net::SocketAddr;

use crate::proto::limits::WAITERS_PER_KEY_MAX_DEFAULT;
use cluster::{check_cluster_listen, cluster_config, NodeIdSetting};
use help::known_vars;
use secrets::{check_peer_secret, secret, tls_files};
use values::{err, number, resolve};

pub use cluster::{
    fresh_node_id, ClusterConfig, ClusterState, Peer, AUTOPILOT_DEAD_ELECTIONS_MIN,
    AUTOPILOT_DEAD_MS_DEFAULT, STANDBYS_MAX_DEFAULT, STANDBYS_MAX_LIMIT,
};
pub use help::HELP;
pub use secrets::TlsFiles;
pub use values::ConfigError;

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
/// The largest size in a snapshot of one unit of the key limit spent on a pooled hold
/// (each hold counts once per key it names): a hold of one key, with the longest key and
/// owner — owner str8, token, lease, key count, then key str8, count, capacity.
const SNAPSHOT_POOLED_UNIT_BYTES_MAX: usize = 1 + 255 + 8 + 4 + 1 + (1 + 255 + 4 + 4);
const _: () = assert!(
    MAX_KEYS_LIMIT * SNAPSHOT_POOLED_UNIT_BYTES_MAX + (1 << 20) < crate::raft::wire::SNAPSHOT_MAX_BYTES,
    "a node at its key limit in pooled holds must produce snapshots its followers accept"
);

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
    /// `TICKETING_CLUSTER_NAME`: reported in STATUS as `cluster_name`, compared in the
    /// peer handshake (a peer of another name, or none when this node has one, is
    /// refused) and checked by clients given a name (docs/security.md §6).
    pub cluster_name: Option<String>,
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
            .field("cluster_name", &self.cluster_name)
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
            cluster_name: None,
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
                    let var = known_vars().find(|v| *v == name).unwrap_or("TICKETING_*");
                    return Err(err(var, format!("{name} is not valid UTF-8")));
                }
                Err(_) => {}
            }
        }
        let mut config = Config::from_vars(&|name| vars.get(name).cloned())?;
        config.warnings.extend(help::unknown_vars(vars.keys().map(String::as_str)));
        Ok(config)
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
        let cluster_name = match get("TICKETING_CLUSTER_NAME") {
            None => None,
            Some(text) if text.trim().is_empty() => None,
            Some(text) => {
                crate::proto::limits::check_cluster_name(text.trim())
                    .map_err(|m| err("TICKETING_CLUSTER_NAME", m))?;
                Some(text.trim().to_owned())
            }
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
            cluster_name,
            warnings,
        })
    }
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
        // Leaving on SIGTERM: on by default, off on request.
        assert!(cluster_node(&[]).unwrap().cluster.unwrap().leave_on_terminate);
        let off = cluster_node(&[("TICKETING_LEAVE_ON_TERMINATE", " off")]).unwrap();
        assert!(!off.cluster.unwrap().leave_on_terminate);
        for (var, value) in [
            ("TICKETING_AUTOPILOT", "yes"),
            ("TICKETING_LEAVE_ON_TERMINATE", "true"),
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
    fn every_variable_read_is_in_the_help() {
        // The warning about unknown variables takes the help's list: a variable read
        // here and missing there would be called a typo at every start.
        let asked = std::cell::RefCell::new(std::collections::BTreeSet::new());
        for pairs in [
            vec![TOKEN],
            vec![
                TOKEN,
                PEER_TOKEN,
                ("TICKETING_NODE_ID", "1"),
                ("TICKETING_CLUSTER_SELF", "127.0.0.1:5225"),
                ("TICKETING_CLUSTER_PEERS", "1@127.0.0.1:5225,2@127.0.0.2:5225,3@127.0.0.3:5225"),
            ],
            vec![
                TOKEN,
                PEER_TOKEN,
                ("TICKETING_CLUSTER_STATE", "join"),
                ("TICKETING_CLUSTER_SELF", "127.0.0.9:5225"),
                ("TICKETING_LISTEN", "127.0.0.9:5225"),
                ("TICKETING_CLUSTER_PEERS", "127.0.0.1:5225"),
            ],
        ] {
            let map: BTreeMap<String, String> =
                pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            Config::from_vars(&|name| {
                asked.borrow_mut().insert(name.to_owned());
                map.get(name).cloned()
            })
            .unwrap();
        }
        let known: Vec<&str> = known_vars().collect();
        let asked = asked.into_inner();
        assert!(asked.len() >= 18, "{asked:?}");
        for name in &asked {
            assert!(known.contains(&name.as_str()), "{name} is read but not in ticketing server --help");
        }
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
