//! The admin operations (docs/operations.md): each asks one node at a time on a
//! one-off connection and follows `M` to the leader itself. They take long (a
//! replacement streams a snapshot) and are rare, so they stay off the shared sessions.

use std::time::{Duration, Instant};

use super::core::check_answer;
use super::error::{unexpected, ClientError};
use super::io::oneoff::exchange;
use super::io::Handle;
use crate::proto::frame::{Request, Response};

/// Pause between two rounds over the known addresses when none answered for good.
const ROUND_PAUSE: Duration = Duration::from_millis(100);

/// One request on a fresh connection to `addr`, answered within `timeout`.
pub(crate) fn one_off(
    handle: &Handle,
    addr: &str,
    request: &Request,
    timeout: Duration,
) -> Result<Response, ClientError> {
    exchange(&handle.shared.dialer, addr, request, timeout).and_then(check_answer)
}

/// `admin replace`: asks `known` (the leader first) until the leader reports the
/// change done, refuses it, or `timeout` passes. An `M` — a node that is not the leader,
/// or one that stopped leading during the change — sends it to the leader named.
pub(crate) fn replace_member(
    handle: &Handle,
    known: &[String],
    request: &Request,
    timeout: Duration,
) -> Result<String, ClientError> {
    ask_leader(handle, known, request, timeout)
}

/// `admin transfer-leader`: asks the leader to hand over to `target` (or to the voter
/// it chooses) and returns the new leader as `ID@ADDR`.
pub(crate) fn transfer_leader(
    handle: &Handle,
    known: &[String],
    target: Option<u64>,
    timeout: Duration,
) -> Result<String, ClientError> {
    let text = ask_leader(handle, known, &Request::TransferLeader { target }, timeout)?;
    Ok(text.lines().find_map(|l| l.strip_prefix("leader=")).unwrap_or("").to_owned())
}

/// What a node listed for `admin found` said of itself (its MEMBERS answer) before
/// anything was founded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FoundNode {
    /// It knows no cluster and no member named it a leader: a founder-to-be. `addr` is
    /// the address its peers dial (`TICKETING_CLUSTER_SELF`).
    Waiting { id: u64, addr: String },
    /// It knows no configuration yet, but a member named it a leader (id, client
    /// address): a cluster exists, which it is joining.
    Joining { id: u64, leader_id: u64, leader: String },
    /// It belongs to a cluster: its role there, that cluster's voters (ids, sorted) and
    /// the leader it knows (0: none).
    Member { id: u64, role: String, voters: Vec<u64>, leader_id: u64 },
}

impl FoundNode {
    /// The node's id.
    pub fn id(&self) -> u64 {
        match self {
            FoundNode::Waiting { id, .. } | FoundNode::Joining { id, .. } | FoundNode::Member { id, .. } => {
                *id
            }
        }
    }
}

/// What `admin found` did: each node's state, then FOUND's answers if it was sent.
#[derive(Clone, Debug)]
pub struct Founding {
    /// Each address given, in order, with what its node said, or why it did not answer.
    pub nodes: Vec<(String, Result<FoundNode, ClientError>)>,
    /// FOUND's answer from each address, in order — when it was sent: only when every
    /// node answered and each is waiting, or (a founding retried after a lost answer)
    /// a member of the very cluster these nodes make. Otherwise `None`: nothing was
    /// sent, nothing changed.
    pub answers: Option<Vec<Result<String, ClientError>>>,
}

impl Founding {
    /// The voters (ids, sorted) the listed nodes would found: their ids.
    pub fn asked(&self) -> Vec<u64> {
        let mut ids: Vec<u64> =
            self.nodes.iter().filter_map(|(_, n)| n.as_ref().ok().map(FoundNode::id)).collect();
        ids.sort_unstable();
        ids
    }

    /// The leader of the one running cluster the listed nodes belong to, when nothing
    /// was sent and they do: every listed node that answered is a member of a cluster
    /// (a voter or a standby) or joining one, and all name the same leader, which the
    /// members know. A cluster founded already — asked again after a lost answer, by a
    /// Job run twice, or by the recipe re-run after a rolling restart or a heal, when
    /// the addresses listed run other node ids (some voters, some standbys). A node
    /// waiting to be founded, nodes that name different leaders or none (a cluster
    /// that lost its majority), or no member answering: `None`. A listed node that
    /// does not answer does not undo the others' answer: the cluster runs.
    pub fn running_cluster(&self) -> Option<u64> {
        if self.answers.is_some() {
            return None;
        }
        let mut leader = None;
        let mut members = 0;
        for (_, node) in &self.nodes {
            let named = match node {
                Ok(FoundNode::Member { leader_id, .. }) => {
                    members += 1;
                    *leader_id
                }
                Ok(FoundNode::Joining { leader_id, .. }) => *leader_id,
                Ok(FoundNode::Waiting { .. }) => return None,
                Err(_) => continue,
            };
            if named == 0 || leader.is_some_and(|l| l != named) {
                return None;
            }
            leader = Some(named);
        }
        leader.filter(|_| members > 0)
    }

    /// True when the listed nodes belong to one running cluster and nothing was sent
    /// ([`Founding::running_cluster`]): founded already.
    pub fn founded_already(&self) -> bool {
        self.running_cluster().is_some()
    }
}

/// `admin found`: asks each node at `addrs` — and no other address — for its MEMBERS
/// (all at once: a silent node does not hold up the others' answers), then, if each is
/// waiting, tells each to found a new cluster of them all. A node of a running cluster
/// is never made a founder; a founding retried after a lost answer is sent again.
pub(crate) fn found_cluster(
    handle: &Handle,
    addrs: &[String],
    timeout: Duration,
) -> Result<Founding, ClientError> {
    if addrs.len() != 3 && addrs.len() != 5 {
        return Err(ClientError::Invalid(format!(
            "a new cluster has 3 or 5 voters; {} addresses given",
            addrs.len()
        )));
    }
    let nodes: Vec<(String, Result<FoundNode, ClientError>)> = std::thread::scope(|scope| {
        let asks: Vec<_> = addrs
            .iter()
            .map(|addr| scope.spawn(move || (addr.clone(), found_node(handle, addr, timeout))))
            .collect();
        asks.into_iter()
            .zip(addrs)
            .map(|(h, addr)| h.join().unwrap_or((addr.clone(), Err(ClientError::NoAnswer))))
            .collect()
    });
    let mut founding = Founding { nodes, answers: None };
    let asked = founding.asked();
    // Every node waiting, or (a founding retried after a lost answer) some already
    // voters of the very cluster these nodes make and the others waiting to join it.
    let ready = founding.nodes.iter().all(|(_, node)| match node {
        Ok(FoundNode::Waiting { .. }) => true,
        Ok(FoundNode::Member { voters, .. }) => *voters == asked,
        _ => false,
    });
    if !ready || founding.founded_already() {
        return Ok(founding);
    }
    let voters: Vec<(u64, String)> = founding
        .nodes
        .iter()
        .map(|(given, node)| match node {
            Ok(FoundNode::Waiting { id, addr }) => {
                (*id, if addr.is_empty() { given.clone() } else { addr.clone() })
            }
            Ok(other) => (other.id(), given.clone()),
            Err(_) => unreachable!("every node answered"),
        })
        .collect();
    let request = Request::Found { voters };
    founding.answers = Some(
        addrs
            .iter()
            .map(|addr| match one_off(handle, addr, &request, timeout) {
                Ok(Response::Status { text }) => Ok(text),
                Ok(other) => Err(unexpected(other)),
                Err(e) => Err(e),
            })
            .collect(),
    );
    Ok(founding)
}

/// The MEMBERS answer of the node at `addr`, read as a [`FoundNode`].
fn found_node(handle: &Handle, addr: &str, timeout: Duration) -> Result<FoundNode, ClientError> {
    let text = match one_off(handle, addr, &Request::Members, timeout)? {
        Response::Status { text } => text,
        other => return Err(unexpected(other)),
    };
    let field = |name: &str| text.lines().find_map(|l| l.strip_prefix(name)).unwrap_or("").trim().to_owned();
    let id: u64 = field("node_id=")
        .parse()
        .map_err(|_| ClientError::Protocol(format!("{addr} did not say its node id")))?;
    // member=ID ROLE ADDR ...: documented data, read by position.
    let mut voters: Vec<u64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("member="))
        .filter_map(|l| {
            let mut parts = l.split(' ');
            let id = parts.next()?.parse().ok()?;
            (parts.next()? == "voter").then_some(id)
        })
        .collect();
    voters.sort_unstable();
    let members = text.lines().any(|l| l.strip_prefix("member=").is_some());
    if members {
        let leader_id = field("leader_id=").parse().unwrap_or(0);
        return Ok(FoundNode::Member { id, role: field("role="), voters, leader_id });
    }
    if let Some((leader_id, leader)) = field("joining=").split_once('@') {
        let leader_id = leader_id.parse().unwrap_or(0);
        return Ok(FoundNode::Joining { id, leader_id, leader: leader.to_owned() });
    }
    // The address the node was started with (TICKETING_CLUSTER_SELF): what its peers
    // will dial, whatever name the operator reached it by.
    Ok(FoundNode::Waiting { id, addr: field("self=") })
}

/// Sends `request` to `known` one at a time, following `M` to the leader, until a node
/// answers it with its STATUS text (returned), refuses it for good (`Refused`,
/// `Invalid`), or `timeout` passes (the last error).
fn ask_leader(
    handle: &Handle,
    known: &[String],
    request: &Request,
    timeout: Duration,
) -> Result<String, ClientError> {
    let deadline = Instant::now() + timeout;
    let mut leader: Option<String> = None;
    let mut last = ClientError::unavailable();
    while Instant::now() < deadline {
        let candidates: Vec<String> = match leader.take() {
            Some(leader) => vec![leader],
            None => known.to_vec(),
        };
        // Every address failed with a mistake that trying again cannot fix (the
        // secret, a certificate, TLS on one side only): no round will do better.
        let mut all_lasting = !candidates.is_empty();
        for addr in candidates {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match one_off(handle, &addr, request, left) {
                Ok(Response::Status { text }) => return Ok(text),
                Ok(other) => return Err(unexpected(other)),
                Err(ClientError::NotLeader { leader: Some(named) }) => {
                    leader = Some(named);
                    break;
                }
                Err(e @ (ClientError::Refused(_) | ClientError::Invalid(_))) => return Err(e),
                Err(e) => {
                    all_lasting &= matches!(e, ClientError::Unavailable { lasting: true, .. });
                    last = e;
                }
            }
        }
        if all_lasting && leader.is_none() {
            return Err(last);
        }
        if leader.is_none() {
            std::thread::sleep(ROUND_PAUSE.min(deadline.saturating_duration_since(Instant::now())));
        }
    }
    Err(last)
}
