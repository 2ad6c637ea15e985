//! One cluster per client (docs/client.md, "One cluster per client"): the fencing
//! domains the client's nodes report, and when they forbid sending anything.
//!
//! Every node reports its cluster's fencing domain (WELCOME; a node that reports none
//! there is asked STATUS at once). Two clusters that share a secret have two domains,
//! and a seed list that mixes them would otherwise get grants of one key from both. The
//! rules, for every client (a cluster name filters nodes before this, in the dial):
//!
//! - **The seeds define the cluster.** Each address keeps the last domain it reported,
//!   connected or not. A seed whose domain is not known yet is never retired: it is
//!   dialed until it reports one.
//! - **Settling.** Requests for any node (not those for one named address: a view of one
//!   node) wait while a seed is making its first connection and has not reported a
//!   domain, at most [`SEED_SETTLE_MAX`](super::SEED_SETTLE_MAX) from when the seed was added (at start, or when
//!   the seeds are dialed again after everything was unreachable).
//! - **Disagreement.** While the addresses report two domains, nothing is sent: requests
//!   end at once with a lasting mistake naming both domains and their addresses, and no
//!   slot is retired, so the disagreement stays in sight until it is resolved (an
//!   address reports the agreeing domain) or the client is rebuilt with one cluster's
//!   addresses. A learned address (named by the cluster, not configured) whose domain
//!   differs from the one the seeds agree on is not ours: it is dropped, never used.
//! - **Locks still held.** The domain of the grants this client may still hold counts
//!   until their leases end: a cluster founded anew at the same addresses is used only
//!   once the old one's locks are over (requests wait meanwhile; not a lasting mistake).

use std::time::{Duration, Instant};

use super::ids::SessionId;
use super::net::{Net, Target};
use super::session::Waiting;
use super::slot::Slot;

/// Why requests for any node must not be sent now.
pub(crate) struct Conflict {
    pub(crate) why: String,
    /// The addresses disagree: only the operator ends it (requests end at once). Not
    /// lasting: only locks of an older domain may still be held (requests wait).
    pub(crate) lasting: bool,
    domains: Vec<u64>,
}

impl Slot {
    /// Its domain is known, or cannot be learned now: the node reported one (or the
    /// leader it named did), or the connection attempt ended without a session. A node
    /// that answers without a domain and names no leader that reported one is asked
    /// again every [`REPROBE_EVERY`] and keeps requests waiting, up to the settling
    /// bound: taking its silence as an answer let a seed list that mixes two clusters
    /// use the other cluster's seed alone.
    pub(super) fn domain_settled(&self) -> bool {
        self.domain != 0 || self.outside || (self.tried && self.session.is_none())
    }
}

/// How often a node that answered STATUS without a fencing domain is asked again while
/// requests wait for it.
pub(crate) const REPROBE_EVERY: Duration = Duration::from_millis(100);

impl Net {
    /// The node of `session` reports fencing domain `domain` (0: none yet) in a STATUS;
    /// `outside`: it is in no cluster yet (waiting or joining).
    pub(crate) fn reports_domain(&mut self, session: SessionId, domain: u64, outside: bool) {
        let now = self.now;
        let Some(slot) = self.slots.iter_mut().find(|s| s.session.as_ref().is_some_and(|x| x.id == session))
        else {
            return;
        };
        slot.outside = domain == 0 && outside;
        slot.reprobe_at = (domain == 0 && slot.domain == 0 && !outside).then_some(now + REPROBE_EVERY);
        let addr = slot.addr.clone();
        self.address_reports(&addr, domain);
    }

    /// Asks STATUS again of the seeds' nodes that answered without a domain, while
    /// requests still wait for them.
    pub(crate) fn reprobe_due(&mut self, now: Instant) {
        let settle = self.domains.settle;
        let mut ask = Vec::new();
        for slot in self.slots.iter_mut().filter(|s| s.seed && !s.retired() && s.domain == 0) {
            let (Some(at), Some(session)) = (slot.reprobe_at, slot.live()) else { continue };
            if at <= now {
                let id = session.id;
                slot.reprobe_at = None;
                if now < slot.added + settle {
                    ask.push(id);
                }
            }
        }
        for id in ask {
            self.send(id, Waiting::Probe, now, |out, rid| {
                crate::proto::frame::encode_request(out, rid, &crate::proto::frame::Request::Status)
            });
        }
    }

    /// When [`Net::reprobe_due`] next has something to do.
    pub(crate) fn next_reprobe(&self) -> Option<Instant> {
        self.slots
            .iter()
            .filter(|s| s.seed && !s.retired() && s.domain == 0 && s.live().is_some())
            .filter_map(|s| s.reprobe_at)
            .min()
    }

    /// The node at `addr` reports `domain` (0: none): the domain is the address's, so
    /// every slot of it takes it (a single seed has two), and the last report wins.
    pub(super) fn address_reports(&mut self, addr: &str, domain: u64) {
        if domain == 0 {
            return;
        }
        for slot in self.slots.iter_mut().filter(|s| s.addr == addr) {
            slot.domain = domain;
        }
        // A node without a domain of its own that named this address as its leader is
        // of that leader's cluster (a joining node, a follower still catching up).
        let vouched: Vec<String> = self
            .slots
            .iter()
            .filter(|s| s.domain == 0 && s.named_leader.as_deref() == Some(addr))
            .map(|s| s.addr.clone())
            .collect();
        for slot in self.slots.iter_mut().filter(|s| s.domain == 0 && vouched.contains(&s.addr)) {
            slot.domain = domain;
        }
        self.drop_foreign();
    }

    /// The domain every seed that reported one agrees on, if they agree.
    fn seeds_domain(&self) -> Option<u64> {
        let mut known =
            self.slots.iter().filter(|s| s.seed && !s.retired() && s.domain != 0).map(|s| s.domain);
        let first = known.next()?;
        known.all(|d| d == first).then_some(first)
    }

    /// Retires learned slots whose domain differs from the one the seeds agree on: the
    /// cluster named a node of another (an address reused by another cluster, say).
    pub(super) fn drop_foreign(&mut self) {
        let Some(ours) = self.seeds_domain() else { return };
        let now = self.now;
        let mut kill = Vec::new();
        for slot in
            self.slots.iter_mut().filter(|s| !s.seed && !s.retired() && s.domain != 0 && s.domain != ours)
        {
            log::warn!(
                "{} (named by the cluster) belongs to fencing domain {}, not to the seeds' {ours}: not using it",
                slot.addr,
                slot.domain
            );
            slot.retired_at = Some(now);
            slot.left = true;
            slot.next_dial = None;
            kill.extend(slot.session.as_ref().map(|s| s.id));
        }
        for id in kill {
            self.kill(id);
        }
        self.forget_ended_slots();
    }

    /// A grant of `lease` came on `session`: a lock of its node's domain may be held
    /// until `lease + margin` from now.
    pub(crate) fn granted_on(&mut self, session: SessionId, lease: Duration, margin: Duration, now: Instant) {
        let domain = self.slot_of(session).map_or(0, |s| s.domain);
        self.holding(domain, now + lease + margin);
    }

    /// A caller holds a lock until `until` (adopted by `resolve`, say): of the domain the
    /// addresses agree on.
    pub(crate) fn holding_until(&mut self, until: Instant) {
        let domain = self.agreed_domain().unwrap_or(0);
        self.holding(domain, until);
    }

    fn holding(&mut self, domain: u64, until: Instant) {
        let domain = if domain != 0 { domain } else { self.agreed_domain().unwrap_or(0) };
        if domain == 0 {
            return;
        }
        self.domains.held = match self.domains.held {
            Some((d, at)) if d == domain => Some((d, at.max(until))),
            _ => Some((domain, until)),
        };
    }

    /// The one domain the addresses report, if they report exactly one.
    fn agreed_domain(&self) -> Option<u64> {
        let mut known = self.slots.iter().filter(|s| !s.retired() && s.domain != 0).map(|s| s.domain);
        let first = known.next()?;
        known.all(|d| d == first).then_some(first)
    }

    /// Why requests for any node must not be sent now, in the caller's words; `None`
    /// when the domains agree.
    pub(crate) fn domain_conflict(&self) -> Option<Conflict> {
        let mut seen: Vec<(u64, Vec<String>)> = Vec::new();
        for slot in self.slots.iter().filter(|s| !s.retired() && s.domain != 0) {
            let who = if slot.seed { slot.addr.clone() } else { format!("{} (learned)", slot.addr) };
            match seen.iter_mut().find(|(d, _)| *d == slot.domain) {
                Some((_, all)) if !all.contains(&who) => all.push(who),
                Some(_) => {}
                None => seen.push((slot.domain, vec![who])),
            }
        }
        let list = |seen: &[(u64, Vec<String>)]| {
            let parts: Vec<String> =
                seen.iter().map(|(d, who)| format!("fencing domain {d} ({})", who.join(", "))).collect();
            parts.join(" and ")
        };
        if seen.len() >= 2 {
            let advice = if self.domains.named {
                "two clusters have the name this client was given: give each cluster its own \
                 TICKETING_CLUSTER_NAME on its nodes"
                    .to_owned()
            } else {
                format!("give each cluster its own name ({})", self.domains.name_setting)
            };
            return Some(Conflict {
                why: format!(
                    "the nodes report {} fencing domains, {}: {} mixes nodes of two clusters; this client sends \
                     nothing until they agree. List one cluster's nodes only, and {advice}",
                    seen.len(),
                    list(&seen),
                    self.domains.seeds_setting
                ),
                lasting: true,
                domains: seen.iter().map(|(d, _)| *d).collect(),
            });
        }
        let (held, until) = self.domains.held.filter(|(_, until)| *until > self.now)?;
        let (now_domain, who) = seen.first()?;
        if *now_domain == held {
            return None;
        }
        let left = until.saturating_duration_since(self.now).as_secs() + 1;
        Some(Conflict {
            why: format!(
                "the nodes now report fencing domain {now_domain} ({}), and this client may still hold locks of \
                 fencing domain {held} (a cluster founded anew?): it sends nothing until those locks' leases end, \
                 in {left} s at most",
                who.join(", ")
            ),
            lasting: false,
            domains: vec![held, *now_domain],
        })
    }

    /// True while requests for `target` must wait because the seeds have not all
    /// reported a domain yet (see the module docs). A view of one address never waits.
    pub(crate) fn domains_unsettled(&self, target: &Target) -> bool {
        *target == Target::Any && self.settle_until().is_some_and(|until| self.now < until)
    }

    /// Until when requests wait for seeds to report their domain (`None`: they do not).
    pub(crate) fn settle_until(&self) -> Option<Instant> {
        self.slots
            .iter()
            .filter(|s| s.seed && !s.retired() && !s.domain_settled())
            .map(|s| s.added + self.domains.settle)
            .filter(|until| *until > self.now)
            .max()
    }

    /// May requests for `target` be sent now (the domains agree and are known to)?
    /// Says a new disagreement once in the log.
    pub(crate) fn domains_allow(&mut self, target: &Target) -> bool {
        if *target != Target::Any {
            return true;
        }
        if let Some(conflict) = self.domain_conflict() {
            if self.domains.said != conflict.domains {
                log::warn!("{}", conflict.why);
                self.domains.said = conflict.domains;
            }
            return false;
        }
        self.domains.said.clear();
        !self.domains_unsettled(target)
    }

    /// When waiting requests should look again: the domain of held locks stops
    /// counting, or the wait for a seed ends.
    pub(crate) fn next_domains_change(&self) -> Option<Instant> {
        let held = self.domains.held.map(|(_, until)| until).filter(|until| *until > self.now);
        [held, self.settle_until()].into_iter().flatten().min()
    }

    /// Forgets the domain of held locks once none can be held.
    pub(crate) fn domains_housekeeping(&mut self, now: Instant) {
        if self.domains.held.is_some_and(|(_, until)| until <= now) {
            self.domains.held = None;
        }
    }
}

#[cfg(test)]
#[path = "domains_tests.rs"]
mod tests;
