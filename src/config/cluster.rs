//! Cluster settings: the members, founding or joining, the node id, the autopilot and
//! standbys, and the checks that tie them to the client port.

use std::net::SocketAddr;

use super::values::{check_addr, err, number, ConfigError};
use crate::proto::addr::PEER_PORT_OFFSET;

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

/// Cluster settings; `None` in [`Config::cluster`](super::Config::cluster) means standalone.
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
    /// `TICKETING_LEAVE_ON_TERMINATE`: on SIGTERM a voter asks the leader to swap a
    /// standby in for it, and waits for that (bounded) before it stops.
    pub leave_on_terminate: bool,
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

/// `TICKETING_NODE_ID` as given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeIdSetting {
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

pub fn cluster_config(
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
    let leave_on_terminate = match get("TICKETING_LEAVE_ON_TERMINATE").as_deref().map(str::trim) {
        None | Some("on") => true,
        Some("off") => false,
        Some(other) => {
            return Err(err("TICKETING_LEAVE_ON_TERMINATE", format!("{other:?} is not on or off")))
        }
    };
    Ok(Some(ClusterConfig {
        self_addr,
        peers,
        state,
        seeds,
        auto_join: false,
        autopilot_dead_ms: autopilot.then_some(dead_ms),
        standbys_max,
        leave_on_terminate,
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

/// A cluster node's peer port is its client port + 1000 on both sides: peers dial
/// SELF's port + 1000, the node listens on LISTEN's port + 1000, so they must agree and
/// leave room for the addition.
pub fn check_cluster_listen(listen: SocketAddr, self_addr: &str) -> Result<(), ConfigError> {
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
