//! One cluster per client (docs/client.md, "One cluster per client"): the fencing
//! domains the client's nodes report, and when they forbid sending anything.
//!
//! Every node reports its cluster's fencing domain (WELCOME, STATUS). Two clusters that
//! share a secret have two domains, and a seed list that mixes them would otherwise get
//! grants of one key from both. So requests for any node (not those for one named
//! address: a view of one node) wait while
//!
//! - a seed is still making its first connection, for a client given no cluster name:
//!   until every seed has answered or failed once, the client cannot know that they
//!   agree (a named client checks each node's name before it uses the connection);
//! - the connections up report two domains, or one other than the domain of locks this
//!   client may still hold: it serves nothing until they agree, and says why as a
//!   lasting mistake naming both domains and their addresses. Meanwhile no connection is
//!   retired, so the disagreement stays in sight until the operator fixes the list.

use std::time::{Duration, Instant};

use super::ids::SessionId;
use super::net::{Net, Target};

/// A client without a cluster name holds requests for any node at most this long after
/// it starts while a seed is still making its first connection. Why a bound: a seed
/// whose host is down answers nothing until the connect timeout (3 s), and the other
/// seeds should serve before a short budget ends. A seed that answers later is still
/// compared, and a disagreement then stops the client.
pub const SEED_SETTLE_MAX: Duration = Duration::from_secs(2);

/// What the client knows of fencing domains.
#[derive(Debug, Default)]
pub(crate) struct Domains {
    /// The client was given a cluster name: each connection was checked before use.
    pub(crate) named: bool,
    /// How the messages name the addresses' setting and the name's (the caller's words).
    pub(crate) seeds_setting: &'static str,
    pub(crate) name_setting: &'static str,
    /// The domain of the latest grant, and until when a lock from it may be held
    /// (its lease plus the commit margin, the latest of them).
    held: Option<(u64, Instant)>,
    /// The last disagreement said in the log (said once, not at every request).
    said: Option<String>,
}

impl Domains {
    pub(crate) fn new(named: bool, seeds_setting: &'static str, name_setting: &'static str) -> Domains {
        Domains { named, seeds_setting, name_setting, held: None, said: None }
    }
}

impl Net {
    /// The node of `session` reports fencing domain `domain` (0: none yet).
    pub(crate) fn reports_domain(&mut self, session: SessionId, domain: u64) {
        if domain == 0 {
            return;
        }
        if let Some(slot) =
            self.slots.iter_mut().find(|s| s.session.as_ref().is_some_and(|x| x.id == session))
        {
            slot.domain = domain;
        }
    }

    /// A grant of `lease` came on `session`: a lock of its node's domain may be held
    /// until `lease + margin` from now.
    pub(crate) fn granted_on(&mut self, session: SessionId, lease: Duration, margin: Duration, now: Instant) {
        let Some(domain) = self.slot_of(session).map(|s| s.domain).filter(|d| *d != 0) else { return };
        let until = now + lease + margin;
        self.domains.held = match self.domains.held {
            Some((d, at)) if d == domain => Some((d, at.max(until))),
            _ => Some((domain, until)),
        };
    }

    /// Why requests for any node must not be sent now: the disagreement in the
    /// caller's words, or `None` when the domains agree.
    pub(crate) fn domain_conflict(&self) -> Option<String> {
        let now = self.now;
        let mut seen: Vec<(u64, Vec<String>)> = Vec::new();
        let mut add = |domain: u64, who: String| match seen.iter_mut().find(|(d, _)| *d == domain) {
            Some((_, who_all)) => who_all.push(who),
            None => seen.push((domain, vec![who])),
        };
        for slot in self.slots.iter().filter(|s| s.domain != 0 && s.live().is_some()) {
            add(slot.domain, slot.addr.clone());
        }
        if let Some((domain, until)) = self.domains.held.filter(|(_, until)| *until > now) {
            let left = until.saturating_duration_since(now).as_secs() + 1;
            add(domain, format!("locks this client may still hold, for {left} s more"));
        }
        if seen.len() < 2 {
            return None;
        }
        let list: Vec<String> =
            seen.iter().map(|(d, who)| format!("fencing domain {d} ({})", who.join(", "))).collect();
        Some(format!(
            "the nodes report {} fencing domains, {}: {} mixes nodes of two clusters; this client sends nothing \
             until they agree. List one cluster's nodes only, and give each cluster its own name ({})",
            seen.len(),
            list.join(" and "),
            self.domains.seeds_setting,
            self.domains.name_setting
        ))
    }

    /// True while requests for `target` must wait because the domains are not known to
    /// agree yet: a seed of a client without a cluster name is making its first
    /// connection (see the module docs). A view of one address never waits.
    pub(crate) fn domains_unsettled(&self, target: &Target) -> bool {
        *target == Target::Any && self.settle_until().is_some_and(|until| self.now < until)
    }

    /// Until when requests wait for seeds still making their first connection (`None`:
    /// they do not, see [`Net::domains_unsettled`]).
    pub(crate) fn settle_until(&self) -> Option<Instant> {
        let waiting = !self.domains.named && self.slots.iter().any(|s| s.seed && !s.retired() && !s.tried);
        waiting.then_some(self.created + SEED_SETTLE_MAX)
    }

    /// May requests for `target` be sent now (the domains agree and are known to)?
    /// Says a new disagreement once in the log.
    pub(crate) fn domains_allow(&mut self, target: &Target) -> bool {
        if *target != Target::Any {
            return true;
        }
        if let Some(why) = self.domain_conflict() {
            if self.domains.said.as_ref() != Some(&why) {
                log::warn!("{why}");
                self.domains.said = Some(why);
            }
            return false;
        }
        self.domains.said = None;
        !self.domains_unsettled(target)
    }

    /// When waiting requests should look again: the domain of held locks stops
    /// counting, or the wait for the seeds ends.
    pub(crate) fn next_domains_change(&self) -> Option<Instant> {
        let settle = self.settle_until().filter(|until| self.now < *until);
        [self.domains.held.map(|(_, until)| until), settle].into_iter().flatten().min()
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
