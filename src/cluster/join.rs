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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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
        while !self.done() {
            // Each round starts at the next member: one that names a stale leader (a
            // learner cut off from the cluster, say) is not asked first every time.
            if let Err(why) = self.round(&client, round) {
                // Info: the recipe's state until `admin found` (and a fresh process's
                // until it reaches the leader); STATUS, MEMBERS and /readyz say it too.
                if let Some(n) = WAITING_LOG.allow() {
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

    fn done(&self) -> bool {
        self.stopping.load(Ordering::SeqCst) || self.view.admission().config_known
    }

    /// One round: find the leader, vouch for it, ask it to add this node.
    fn round(&self, client: &Client, round: usize) -> Result<(), String> {
        let (leader_id, leader) = match self.find_leader(client, round) {
            Ok(found) => found,
            Err(why) => {
                self.view.set_joining(None);
                return Err(why);
            }
        };
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
    /// knows one names.
    fn find_leader(&self, client: &Client, round: usize) -> Result<(u64, String), String> {
        let mut why = Vec::new();
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
                Err(e) => why.push(format!("{addr}: {e}")),
            }
        }
        Err(format!(
            "no member of TICKETING_CLUSTER_PEERS named a leader ({}); a node never founds a cluster by \
             itself: found one with `ticketing admin found` or start the founders with \
             TICKETING_CLUSTER_STATE=new",
            why.join("; ")
        ))
    }
}
