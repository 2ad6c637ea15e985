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

/// `admin found`: the id of each waiting node (from its MEMBERS answer), then FOUND
/// with all of them to each. Every node must answer MEMBERS as one that knows no
/// cluster (no `member=` line): a node of a running cluster is never made a founder.
pub(crate) fn found_cluster(
    handle: &Handle,
    addrs: &[String],
    timeout: Duration,
) -> Result<Vec<Result<String, ClientError>>, ClientError> {
    if addrs.len() != 3 && addrs.len() != 5 {
        return Err(ClientError::Invalid(format!(
            "a new cluster has 3 or 5 voters; {} addresses given",
            addrs.len()
        )));
    }
    let mut voters = Vec::with_capacity(addrs.len());
    // Nodes that belong to a cluster already, with the voters they know: accepted only
    // when that cluster is the one asked for (a founding retried after a lost answer).
    let mut members_of: Vec<(String, Vec<u64>)> = Vec::new();
    for addr in addrs {
        let text = match one_off(handle, addr, &Request::Members, timeout)? {
            Response::Status { text } => text,
            other => return Err(unexpected(other)),
        };
        let field =
            |name: &str| text.lines().find_map(|l| l.strip_prefix(name)).unwrap_or("").trim().to_owned();
        // member=ID ROLE ADDR ...: documented data, read by position.
        let members: Vec<(u64, bool)> = text
            .lines()
            .filter_map(|l| l.strip_prefix("member="))
            .filter_map(|l| {
                let mut parts = l.split(' ');
                let id = parts.next()?.parse().ok()?;
                Some((id, parts.next()? == "voter"))
            })
            .collect();
        if !members.is_empty() {
            let voters = members.iter().filter(|(_, voter)| *voter).map(|(id, _)| *id).collect();
            members_of.push((addr.clone(), voters));
        }
        let id: u64 = field("node_id=")
            .parse()
            .map_err(|_| ClientError::Invalid(format!("{addr} did not say its node id")))?;
        // The address the node was started with (TICKETING_CLUSTER_SELF): what its peers
        // will dial, whatever name the operator reached it by.
        let own = field("self=");
        voters.push((id, if own.is_empty() { addr.clone() } else { own }));
    }
    let mut asked: Vec<u64> = voters.iter().map(|(id, _)| *id).collect();
    asked.sort_unstable();
    for (addr, mut known) in members_of {
        known.sort_unstable();
        if known != asked {
            return Err(ClientError::Refused(format!(
                "{addr} belongs to a cluster already (voters {known:?}, not {asked:?}); a cluster is founded once"
            )));
        }
    }
    let request = Request::Found { voters };
    Ok(addrs
        .iter()
        .map(|addr| match one_off(handle, addr, &request, timeout) {
            Ok(Response::Status { text }) => Ok(text),
            Ok(other) => Err(unexpected(other)),
            Err(e) => Err(e),
        })
        .collect())
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
