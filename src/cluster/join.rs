//! How a node started with `TICKETING_CLUSTER_STATE=join` finds its cluster
//! (docs/operations.md "Joining"): until it knows a configuration, it asks the members
//! named in `TICKETING_CLUSTER_PEERS` (with or without their ids) which node leads, on
//! the client port with the operator secret, and
//!
//! 1. records that leader as vouched for: the leader is the node that will dial this
//!    one to add it, and is admitted because a member named it (never because the
//!    dialer says so itself);
//! 2. with `TICKETING_NODE_ID=auto` (or unset), asks that leader to add it as a standby
//!    learner (JOIN). With a fixed id it waits for an operator's `admin replace`.
//!
//! It never founds anything: a node that finds no leader keeps asking and says so in
//! its log (a new cluster is founded by `new` founders or by `ticketing admin found`).
//!
//! Before each round it reads every member's STATUS, and stops the node (exit 2) when
//! they show it cannot belong ([`check_members`]): a member of another cluster name,
//! members of two fencing domains, or members that all refuse its peer secret.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use log::info;

use super::view::ClusterView;
use crate::client::{Client, ClientError};

/// Rounds start this often at first…
const ROUND_PAUSE_MIN: Duration = Duration::from_millis(500);
/// …and back off to this while nothing answers.
const ROUND_PAUSE_MAX: Duration = Duration::from_secs(5);
/// One MEMBERS or JOIN exchange waits this long at most. A JOIN is answered once the
/// learner's configuration commits (the leader dials this node first: 5 s at most).
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(25);
/// One member's STATUS waits this long at most (an unanswered one proves nothing).
const STATUS_TIMEOUT: Duration = Duration::from_secs(5);
/// A waiting node says why at most this often.
static WAITING_LOG: crate::lograte::RateLimit = crate::lograte::RateLimit::every(30_000);

/// Everything the join thread needs.
pub struct Joiner {
    pub me: u64,
    pub self_addr: String,
    /// Client addresses of members to ask (this node's own left out).
    pub ask: Vec<String>,
    /// Ask the leader to add this node (`TICKETING_NODE_ID=auto`).
    pub auto: bool,
    pub peer_secret: Vec<u8>,
    pub tls_ca: Option<std::path::PathBuf>,
    pub view: Arc<ClusterView>,
    pub stopping: Arc<AtomicBool>,
    /// `TICKETING_CLUSTER_NAME` (empty: none).
    pub name: String,
    /// Set to the reason when this node must stop (exit 2).
    pub fatal: Arc<Mutex<Option<String>>>,
}

/// How a member at an address answered STATUS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberAnswer {
    /// Its STATUS text.
    Status(String),
    /// A mistake that asking again cannot fix (its secret refused ours, TLS, a port of
    /// another kind): the words name it.
    Refused(String),
    /// No answer now (down, unreachable): may pass.
    Silent,
}

/// Judges the members' STATUS answers (address, answer) for a node named `name`:
/// `Err` is why the node must stop (exit 2) — members of another cluster name and none
/// of its own, members of two fencing domains, or members that refused it and none that
/// accepted it. A member that is silent proves nothing; one of another name beside
/// members of this node's name is a stranger in the list (its dialer refuses it and says
/// so), not a reason to stop.
pub fn check_members(name: &str, answers: &[(String, MemberAnswer)]) -> Result<(), String> {
    let field = |text: &str, f: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(f).and_then(|v| v.strip_prefix('=')))
            .unwrap_or("")
            .to_owned()
    };
    let said = |n: &str| if n.is_empty() { "none".to_owned() } else { format!("{n:?}") };
    let mut domains: Vec<(u64, Vec<&str>)> = Vec::new();
    let mut refused = Vec::new();
    let mut other_names = Vec::new();
    let mut ours = false;
    for (addr, answer) in answers {
        match answer {
            MemberAnswer::Status(text) => {
                let theirs = field(text, "cluster_name");
                if theirs != name {
                    other_names.push(format!("{addr} has cluster name {}", said(&theirs)));
                    continue;
                }
                ours = true;
                let domain = field(text, "domain").parse::<u64>().unwrap_or(0);
                if domain != 0 {
                    match domains.iter_mut().find(|(d, _)| *d == domain) {
                        Some((_, addrs)) => addrs.push(addr),
                        None => domains.push((domain, vec![addr])),
                    }
                }
            }
            MemberAnswer::Refused(why) => refused.push(why.as_str()),
            MemberAnswer::Silent => {}
        }
    }
    if !ours && !other_names.is_empty() {
        return Err(format!(
            "TICKETING_CLUSTER_NAME: the members of TICKETING_CLUSTER_PEERS belong to another cluster ({}), and \
             this node's name is {}: one of the names is wrong, or the list names another cluster. Give every \
             node of a cluster the same TICKETING_CLUSTER_NAME and each cluster its own (docs/security.md)",
            other_names.join("; "),
            said(name)
        ));
    }
    if let [(a, a_addrs), (b, b_addrs), ..] = &domains[..] {
        return Err(format!(
            "TICKETING_CLUSTER_PEERS names members of two clusters: fencing domain {a} ({}) and fencing domain \
             {b} ({}). List the members of one cluster only, and give each cluster its own \
             TICKETING_CLUSTER_NAME (docs/security.md)",
            a_addrs.join(", "),
            b_addrs.join(", ")
        ));
    }
    if !ours && other_names.is_empty() && !refused.is_empty() {
        return Err(format!(
            "cannot join: no member that answered could be asked, for reasons that retrying cannot fix: {}",
            refused.join("; ")
        ));
    }
    Ok(())
}

impl Joiner {
    /// Runs until this node knows a configuration, or stops.
    pub fn run(self) {
        let mut builder = Client::builder()
            .addrs(self.ask.iter().cloned())
            .auth_token(&self.peer_secret)
            .owner(format!("join-{}", self.me));
        if let Some(ca) = &self.tls_ca {
            builder = builder.tls_ca_file(ca);
        }
        let builder = builder
            .request_timeout(EXCHANGE_TIMEOUT.min(STATUS_TIMEOUT))
            .words(&crate::client::ENV_WORDS)
            .secret_named("TICKETING_PEER_AUTH_TOKEN differs from the cluster's peer secret");
        let client = match builder.build() {
            Ok(client) => client,
            Err(e) => {
                self.view.set_broken(format!("TICKETING_CLUSTER_PEERS: cannot ask the members: {e}"));
                return;
            }
        };
        info!(
            "node {} at {} joins through {}{}",
            self.me,
            self.self_addr,
            self.ask.join(","),
            if self.auto {
                "; it asks the leader to add it as a standby"
            } else {
                "; waiting for `admin replace`"
            }
        );
        let mut pause = ROUND_PAUSE_MIN;
        let mut round = 0;
        let mut last_advice = false;
        while !self.done() {
            if let Err(why) = self.check(&client) {
                *self.fatal.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
                return;
            }
            // Each round starts at the next member: one that names a stale leader (a
            // learner cut off from the cluster, say) is not asked first every time.
            if let Err(why) = self.round(&client, round) {
                // Info: the recipe's state until `admin found` (and a fresh process's
                // until it reaches the leader); STATUS, MEMBERS and /readyz say it too.
                // Said at once when the advice changes (every member answered now, so
                // founding is the advice), else at the log's rate.
                let advice = why.contains("ticketing admin found");
                if advice != last_advice {
                    last_advice = advice;
                    info!("node {} waits to join: {why}", self.me);
                } else if let Some(n) = WAITING_LOG.allow() {
                    info!("node {} waits to join: {why}{}", self.me, crate::lograte::suppressed_note(n));
                }
            }
            round += 1;
            // Backing off either way: a node waiting for `admin replace` (or for a
            // configuration the leader is sending) asks a few times a minute, not twice
            // a second.
            pause = (pause * 2).min(ROUND_PAUSE_MAX);
            let until = std::time::Instant::now() + pause;
            while std::time::Instant::now() < until && !self.done() {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// Reads every member's STATUS and judges them ([`check_members`]).
    fn check(&self, client: &Client) -> Result<(), String> {
        let mut answers = Vec::new();
        for addr in &self.ask {
            if self.done() {
                return Ok(());
            }
            let answer = match client.status_of(addr) {
                Ok(text) => MemberAnswer::Status(text),
                Err(ClientError::Unavailable { last_error: Some(why), lasting: true }) => {
                    MemberAnswer::Refused(why)
                }
                Err(_) => MemberAnswer::Silent,
            };
            answers.push((addr.clone(), answer));
        }
        check_members(&self.name, &answers)
    }

    fn done(&self) -> bool {
        self.stopping.load(Ordering::SeqCst) || self.view.admission().config_known
    }

    /// One round: find the leader, vouch for it, ask it to add this node.
    fn round(&self, client: &Client, round: usize) -> Result<(), String> {
        let (leader_id, leader) = match self.find_leader(client, round) {
            Ok(found) => found,
            Err((why, all_without_leader)) => {
                self.view.set_joining(None);
                self.view.set_waiting_why((!all_without_leader).then(|| why.clone()));
                return Err(why);
            }
        };
        self.view.set_waiting_why(None);
        self.view.vouch_for_leader(leader_id, &leader);
        self.view.set_joining(Some((leader_id, leader.clone())));
        if !self.auto {
            return Ok(());
        }
        match client.join_cluster(self.me, &self.self_addr, &leader, EXCHANGE_TIMEOUT) {
            Ok(text) => {
                info!(
                    "node {} added as a standby by node {leader_id} at {leader}: {}",
                    self.me,
                    text.trim().replace('\n', " ")
                );
                Ok(())
            }
            // Leadership moved: the next round asks again.
            Err(ClientError::NotLeader { .. }) => Ok(()),
            Err(e) => Err(format!("node {leader_id} at {leader}: {e}")),
        }
    }

    /// The leader (id, client address) the first member (from the round's turn on) that
    /// knows one names. `Err`: why none, and whether every member answered knowing none.
    fn find_leader(&self, client: &Client, round: usize) -> Result<(u64, String), (String, bool)> {
        let mut why = Vec::new();
        let mut all_without_leader = true;
        let first = round % self.ask.len().max(1);
        for addr in self.ask.iter().cycle().skip(first).take(self.ask.len()) {
            if self.done() {
                break;
            }
            match client.members_at(addr, EXCHANGE_TIMEOUT) {
                Ok(text) => {
                    let field = |name: &str| {
                        text.lines().find_map(|l| l.strip_prefix(name)).unwrap_or("").trim().to_owned()
                    };
                    match (field("leader_id=").parse::<u64>(), field("leader=")) {
                        (Ok(id), leader) if id != 0 && !leader.is_empty() => return Ok((id, leader)),
                        _ => why.push(format!("{addr} knows no leader")),
                    }
                }
                Err(e) => {
                    all_without_leader = false;
                    why.push(format!("{addr}: {e}"))
                }
            }
        }
        let why = if all_without_leader {
            format!(
                "no member of TICKETING_CLUSTER_PEERS named a leader ({}); a node never founds a cluster by \
                 itself: found one with `ticketing admin found` or start the founders with \
                 TICKETING_CLUSTER_STATE=new",
                why.join("; ")
            )
        } else {
            // Some member could not be asked: it may lead, so founding is not the advice.
            format!(
                "no member of TICKETING_CLUSTER_PEERS named a leader ({}): check that the members run and \
                 that this node reaches them",
                why.join("; ")
            )
        };
        Err((why, all_without_leader))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(name: &str, domain: u64) -> MemberAnswer {
        MemberAnswer::Status(format!("node_id=1\ndomain={domain}\ncluster_name={name}\n"))
    }

    fn answers(list: &[(&str, MemberAnswer)]) -> Vec<(String, MemberAnswer)> {
        list.iter().map(|(a, m)| (a.to_string(), m.clone())).collect()
    }

    #[test]
    fn members_of_one_cluster_with_this_name_pass() {
        let list =
            answers(&[("a:1", status("prod", 7)), ("b:1", status("prod", 0)), ("c:1", MemberAnswer::Silent)]);
        assert_eq!(check_members("prod", &list), Ok(()));
        assert_eq!(check_members("", &answers(&[("a:1", status("", 7))])), Ok(()));
        // A node from before names existed sends no cluster_name line: no name.
        let old = MemberAnswer::Status("node_id=1\ndomain=7\n".into());
        assert_eq!(check_members("", &answers(&[("a:1", old.clone())])), Ok(()));
        assert!(check_members("prod", &answers(&[("a:1", old)])).is_err());
    }

    #[test]
    fn another_name_two_domains_or_only_refusals_stop_the_node_naming_the_variable() {
        let why = check_members("prod", &answers(&[("a:1", status("staging", 7))])).unwrap_err();
        assert!(why.starts_with("TICKETING_CLUSTER_NAME: the members of TICKETING_CLUSTER_PEERS"), "{why}");
        assert!(why.contains("a:1 has cluster name \"staging\"), and this node's name is \"prod\""), "{why}");
        let why = check_members("prod", &answers(&[("a:1", status("", 7))])).unwrap_err();
        assert!(why.contains("a:1 has cluster name none"), "{why}");
        // Beside a member of its own name, one of another is a stranger in the list.
        let mixed = answers(&[("a:1", status("staging", 9)), ("b:1", status("prod", 7))]);
        assert_eq!(check_members("prod", &mixed), Ok(()));
        let two = answers(&[("a:1", status("", 7)), ("b:1", status("", 7)), ("c:1", status("", 9))]);
        let why = check_members("", &two).unwrap_err();
        assert!(why.contains("fencing domain 7 (a:1, b:1) and fencing domain 9 (c:1)"), "{why}");
        let refused = MemberAnswer::Refused(
            "a:1: the server refused our auth token (TICKETING_PEER_AUTH_TOKEN)".into(),
        );
        let why = check_members("", &answers(&[("a:1", refused.clone()), ("b:1", MemberAnswer::Silent)]))
            .unwrap_err();
        assert!(why.contains("TICKETING_PEER_AUTH_TOKEN"), "{why}");
        // One member accepted it: the one that refused is not proof enough.
        assert_eq!(check_members("", &answers(&[("a:1", refused), ("b:1", status("", 7))])), Ok(()));
        assert_eq!(check_members("", &answers(&[("a:1", MemberAnswer::Silent)])), Ok(()));
    }
}
