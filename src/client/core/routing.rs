//! Where requests go (docs/client.md, "Routing"): the session the leader hint names,
//! else one whose node is believed to lead, else any, round-robin among equals. While
//! a slot that could serve the request is still making its first connection, a patient
//! request holds out for it ([`LEADER_WAIT`]). The hint comes from WELCOME, STATUS, `M`
//! and `G`/`R`; a leader address no slot reaches is dialed (learned), up to
//! [`LEARNED_ADDRS_MAX`] of them.

use std::time::{Duration, Instant};

use super::ids::SessionId;
use super::net::{Net, Target};
use crate::proto::addr::{host_of, is_tls_server_name};
use crate::proto::frame::Response;

/// How long a request waits for a better connection (the leader's) while a slot is
/// still connecting for the first time, before it settles for any connected node.
/// Why: right after `build`, or right after an `M` named a new address, the first node
/// to answer is often a follower, and sending there would only earn an `M`.
pub const LEADER_WAIT: Duration = Duration::from_secs(1);
/// Most addresses the client dials beyond its seeds (learned from `M`, WELCOME and
/// STATUS). Why a cap: a confused or hostile server must not make it dial without end.
pub const LEARNED_ADDRS_MAX: usize = 16;

impl Net {
    /// Every address the client knows: the leader's first, then the dialed ones.
    pub(crate) fn known_addrs(&self) -> Vec<String> {
        let mut out: Vec<String> = self.hint().map(str::to_owned).into_iter().collect();
        for addr in self.dialed() {
            if !out.contains(&addr) {
                out.push(addr);
            }
        }
        out
    }

    /// The routing decision: the session a request for `target` goes to now. With
    /// `patient`, settles for a node not known to lead only when no slot that could
    /// serve it is still making its first connection. `avoid`: never that session
    /// while another is up.
    pub(crate) fn choose(
        &mut self,
        target: &Target,
        patient: bool,
        avoid: Option<SessionId>,
    ) -> Option<SessionId> {
        if !self.domains_allow(target) {
            return None;
        }
        let hint = self.hint.clone();
        let candidates: Vec<(SessionId, bool, bool)> = self
            .slots
            .iter()
            .filter(|s| !s.retired() && target.accepts(s))
            .filter_map(|s| s.live().map(|x| (x.id, hint.as_deref().is_some_and(|h| s.is(h)), x.leads)))
            .filter(|(id, _, _)| Some(*id) != avoid)
            .collect();
        let hold_out = patient && self.coming(target);
        let mut pick = |class: &dyn Fn(&(SessionId, bool, bool)) -> bool| {
            let count = candidates.iter().filter(|c| class(c)).count();
            if count == 0 {
                return None;
            }
            self.rr = self.rr.wrapping_add(1);
            candidates.iter().filter(|c| class(c)).nth(self.rr % count).map(|c| c.0)
        };
        if let Some(id) = pick(&|c| c.1).or_else(|| pick(&|c| c.2)) {
            return Some(id);
        }
        if hold_out {
            return None;
        }
        pick(&|_| true)
    }

    /// True while a slot that could serve `target` is making its first connection.
    pub(crate) fn coming(&self, target: &Target) -> bool {
        self.slots.iter().any(|s| !s.retired() && target.accepts(s) && !s.tried)
    }

    /// True while the hinted leader's slot is making its first connection and no other
    /// slot of that address is up: a request is better held back briefly than sent to
    /// a node that will answer `M`. (A single seed has two slots: the first one up
    /// carries requests while the second still connects.)
    pub(crate) fn leader_connecting(&self) -> bool {
        let Some(hint) = &self.hint else { return false };
        let at_hint = || self.slots.iter().filter(|s| !s.retired() && s.addr == *hint);
        at_hint().any(|s| !s.tried) && !at_hint().any(|s| s.live().is_some())
    }

    /// True when a session other than `except` is up whose node leads or is hinted.
    pub(crate) fn leader_elsewhere(&self, except: SessionId) -> bool {
        let hint = self.hint.as_deref();
        self.slots
            .iter()
            .filter(|s| !s.retired())
            .filter_map(|s| s.live().map(|x| (s, x)))
            .any(|(s, x)| x.id != except && (x.leads || hint.is_some_and(|h| s.is(h))))
    }

    /// Points routing at the leader `addr` (None: unknown). A new leader address is
    /// dialed if no slot reaches it, and the membership is read again.
    pub(crate) fn set_hint(&mut self, addr: Option<&str>, now: Instant) {
        if self.hint.as_deref() == addr {
            return;
        }
        log::debug!("leader is now {}", addr.unwrap_or("unknown"));
        self.hint = addr.map(str::to_owned);
        self.refresh_due = true;
        if let Some(addr) = addr {
            self.learn(addr, now);
        }
    }

    /// What an answer to this client's own request on `session` teaches: `M` names the
    /// leader, `G`/`R` show the node leads, a `G` is a lock of the node's fencing domain
    /// until its lease (plus `margin`) ends, a STATUS reports that domain (`domains.rs`).
    pub(crate) fn learn_from(
        &mut self,
        session: SessionId,
        response: &Response,
        margin: Duration,
        now: Instant,
    ) {
        match response {
            Response::Moved { leader } => self.moved(session, leader, now),
            Response::Granted { lease_ms, .. } => {
                self.leads(session, now);
                self.granted_on(session, Duration::from_millis(u64::from(*lease_ms)), margin, now);
            }
            Response::Released => self.leads(session, now),
            Response::Status { text } => {
                let domain = text.lines().find_map(|l| l.strip_prefix("domain="));
                let role = text.lines().find_map(|l| l.strip_prefix("role="));
                let outside = matches!(role, Some("waiting" | "joining"));
                self.reports_domain(session, domain.and_then(|d| d.parse().ok()).unwrap_or(0), outside);
            }
            _ => {}
        }
    }

    /// An `M` arrived on `session`: its node does not lead; the leader is `leader`
    /// (unknown when empty).
    pub(crate) fn moved(&mut self, session: SessionId, leader: &str, now: Instant) {
        if let Some(s) = self.session_mut(session) {
            s.leads = false;
        }
        self.set_hint(Some(leader).filter(|l| !l.is_empty()), now);
    }

    /// A `G` or `R` arrived on `session`: its node leads.
    pub(crate) fn leads(&mut self, session: SessionId, now: Instant) {
        let Some(s) = self.session_mut(session) else { return };
        if s.leads {
            return;
        }
        s.leads = true;
        if let Some(addr) = self.slot_of(session).map(|s| s.addr.clone()) {
            self.set_hint(Some(&addr), now);
        }
    }

    /// Adds a learned slot for `addr` unless one reaches it or the cap is reached.
    pub(super) fn learn(&mut self, addr: &str, now: Instant) {
        if self.stopped || self.slots.iter().any(|s| !s.retired() && s.is(addr)) {
            return;
        }
        if self.learned() >= LEARNED_ADDRS_MAX {
            log::warn!("not dialing {addr}: already {LEARNED_ADDRS_MAX} learned addresses");
            return;
        }
        let Some(host) = host_of(addr) else {
            log::warn!("a server named the leader {addr:?}, which is not host:port");
            return;
        };
        if self.tls && !is_tls_server_name(host) {
            log::warn!("a server named the leader {addr:?}, whose host cannot be a TLS name");
            return;
        }
        log::debug!("dialing {addr}, named by the cluster");
        self.add_slot(addr.to_owned(), false, now);
        self.dial_due(now);
    }

    pub(super) fn learned(&self) -> usize {
        self.slots.iter().filter(|s| !s.seed && !s.retired()).count()
    }
}
