//! Watching the connections (docs/client.md, "Dead connections", "Seeds and
//! discovery").
//!
//! - A session that received nothing for the idle-PING interval is sent a PING; if no
//!   frame at all arrives within [`PING_ANSWER_TIMEOUT`] of it, the session is closed
//!   (its slot redials). Why: a frozen or partitioned node never closes its sockets.
//!   A PING is never waited for: while a write is under way on the session it is
//!   skipped and tried again [`PING_RETRY`] later.
//! - After a leader change, after a connection ends, and every [`MEMBERSHIP_REFRESH`]
//!   at least, STATUS is asked of the leader — the node the hint names, even when its
//!   connection's WELCOME said follower — (or of the nodes in turn while none is known,
//!   every [`LEADER_UNKNOWN_RETRY`]; a hinted node that knows no leader loses the
//!   hint); the leader it names is followed and, from a
//!   leader's STATUS only, the slots are reconciled with its voter set (a follower's or
//!   a new learner's may lag behind a change).

use std::time::{Duration, Instant};

use super::cx::PING_ANSWER_TIMEOUT;
use super::ids::SessionId;
use super::net::Net;
use super::session::Waiting;
use crate::proto::addr::host_of;
use crate::proto::frame::{encode_request, Request};

/// Default time a session may receive nothing before it is PINGed.
pub const IDLE_PING_DEFAULT: Duration = Duration::from_secs(1);
/// The membership is read from STATUS at least this often.
pub const MEMBERSHIP_REFRESH: Duration = Duration::from_secs(30);
/// While no leader is known, STATUS is asked this often.
pub const LEADER_UNKNOWN_RETRY: Duration = Duration::from_millis(500);
/// A discovery STATUS unanswered this long is given up.
const STATUS_TIMEOUT: Duration = Duration::from_secs(2);
/// Two discovery STATUS requests are at least this far apart.
const STATUS_SPACING: Duration = Duration::from_millis(200);
/// A PING skipped because a write was under way is tried again after this.
const PING_RETRY: Duration = Duration::from_millis(100);

/// Dead-session detection: PINGs idle sessions, closes those whose PING went
/// unanswered.
pub(crate) fn pings(net: &mut Net, idle_ping: Duration, now: Instant) {
    let mut kill = Vec::new();
    let mut ping = Vec::new();
    for s in net.live_sessions() {
        if let Some(at) = s.ping_at {
            if s.last_rx >= at {
                ping.push((s.id, false));
            } else if now.saturating_duration_since(at) >= PING_ANSWER_TIMEOUT {
                kill.push(s.id);
                continue;
            } else {
                continue;
            }
        }
        let idle = now.saturating_duration_since(s.last_rx) >= idle_ping;
        if idle && s.ping_retry.is_none_or(|at| at <= now) {
            ping.push((s.id, true));
        }
    }
    for id in kill {
        log::warn!(
            "{} answered nothing for {PING_ANSWER_TIMEOUT:?} after a PING; reconnecting",
            net.name(id)
        );
        if net.session(id).is_some_and(|s| s.leads) || net.is_hinted(id) {
            net.refresh_due = true;
        }
        net.kill(id);
    }
    for (id, send) in ping {
        let Some(s) = net.session_mut(id) else { continue };
        s.ping_at = None;
        if let Some(ping) = s.ping_id.take() {
            // Another frame answered for the session: its PING's own answer, should it
            // still come, is of no use (and a server that never answers PINGs must not
            // grow the pending map).
            s.forget(ping);
        }
        if !send {
            continue;
        }
        if s.is_flushing() {
            // A writer is under way (perhaps blocked on a full socket): never wait
            // behind it; its write deadline finds a dead path anyway.
            s.ping_retry = Some(now + PING_RETRY);
            continue;
        }
        s.ping_retry = None;
        s.ping_at = Some(now);
        let ping = net.send(id, Waiting::Ping, now, |out, rid| encode_request(out, rid, &Request::Ping));
        if let Some(s) = net.session_mut(id) {
            s.ping_id = Some(ping);
        }
    }
}

/// When [`pings`] next has something to do.
pub(crate) fn next_ping(net: &Net, idle_ping: Duration) -> Option<Instant> {
    net.live_sessions()
        .map(|s| match (s.ping_at, s.ping_retry) {
            (Some(at), _) if s.last_rx < at => at + PING_ANSWER_TIMEOUT,
            (Some(_), _) => s.last_rx,
            (None, Some(retry)) => retry.max(s.last_rx + idle_ping),
            (None, None) => s.last_rx + idle_ping,
        })
        .min()
}

/// The discovery STATUS requests.
#[derive(Default)]
pub(crate) struct Discovery {
    in_flight: Option<(SessionId, u32, Instant)>,
    last_sent: Option<Instant>,
    last_refresh: Option<Instant>,
    turn: usize,
}

impl Discovery {
    /// Sends a STATUS when one is due.
    pub(crate) fn step(&mut self, net: &mut Net, now: Instant) {
        if let Some((session, id, sent)) = self.in_flight {
            let gone = net.session(session).is_none_or(|s| !s.usable());
            if gone || now.saturating_duration_since(sent) >= STATUS_TIMEOUT {
                if let Some(s) = net.session_mut(session) {
                    s.forget(id);
                }
                self.in_flight = None;
            }
        }
        if self.in_flight.is_some() || self.due_at(net, now).is_none_or(|at| at > now) {
            return;
        }
        let Some(target) = self.target(net) else { return };
        net.refresh_due = false;
        self.last_sent = Some(now);
        let id = net.send(target, Waiting::Status, now, |out, id| encode_request(out, id, &Request::Status));
        self.in_flight = Some((target, id, now));
    }

    /// When a STATUS is next due, `now` at the earliest (None: not in a cluster). While
    /// one is in flight, its timeout is the next event.
    pub(crate) fn due_at(&self, net: &Net, now: Instant) -> Option<Instant> {
        if let Some((_, _, sent)) = self.in_flight {
            return Some(sent + STATUS_TIMEOUT);
        }
        if !net.live_sessions().any(|s| !s.standalone) {
            return None;
        }
        let refresh = match self.last_refresh {
            Some(t) if !net.refresh_due => t + MEMBERSHIP_REFRESH,
            _ => now,
        };
        let leader_live = net.live_sessions().any(|s| s.leads || net.is_hinted(s.id));
        let unknown = match (leader_live, self.last_sent) {
            (true, _) => refresh,
            (false, Some(t)) => t + LEADER_UNKNOWN_RETRY,
            (false, None) => now,
        };
        let due = refresh.min(unknown).max(now);
        Some(self.last_sent.map_or(due, |t| due.max(t + STATUS_SPACING)))
    }

    /// Where to ask: the leader's session if it is up; else the session to the address
    /// the hint names (a follower's STATUS or an `M` named it, and the WELCOME of that
    /// connection came before it led: its STATUS carries the membership); else the
    /// others in turn.
    fn target(&mut self, net: &Net) -> Option<SessionId> {
        let leader = net.live_sessions().find(|s| s.leads && net.is_hinted(s.id));
        if let Some(s) = leader.or_else(|| net.live_sessions().find(|s| net.is_hinted(s.id))) {
            return Some(s.id);
        }
        let others: Vec<SessionId> = net.live_sessions().filter(|s| !s.standalone).map(|s| s.id).collect();
        if others.is_empty() {
            return None;
        }
        self.turn = self.turn.wrapping_add(1);
        Some(others[self.turn % others.len()])
    }

    /// The answer to the discovery STATUS `(session, id)`: acts on the leader it names,
    /// and on its voter set.
    pub(crate) fn answered(&mut self, net: &mut Net, session: SessionId, text: Option<&str>, now: Instant) {
        if self.in_flight.is_some_and(|(s, _, _)| s == session) {
            self.in_flight = None;
        }
        let Some(text) = text else { return };
        self.last_refresh = Some(now);
        let field = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
                .unwrap_or("")
                .trim()
        };
        match field("role") {
            "standalone" | "" => {}
            "leader" => {
                if let Some(s) = net.session_mut(session) {
                    s.leads = true;
                }
                if let Some(addr) = net.addr_of(session) {
                    net.set_hint(Some(&addr), now);
                }
                // Only the leader's voter set is taken: a follower's or a new learner's
                // may lag behind a change, and acting on it would drop a live member.
                net.reconcile(&parse_members(field("voters")), now);
            }
            _ => {
                if let Some(s) = net.session_mut(session) {
                    s.leads = false;
                }
                let leader = field("leader");
                if !leader.is_empty() {
                    // Ask the leader itself next (its STATUS carries the membership).
                    net.set_hint(Some(leader), now);
                } else if net.is_hinted(session) {
                    // The node the hint named knows no leader (cut off from its peers,
                    // an election under way): as after an `M` naming none, the hint
                    // goes, and the others are asked in turn.
                    net.set_hint(None, now);
                }
            }
        }
    }
}

/// `id@addr,id@addr` into pairs; malformed entries are skipped.
pub(crate) fn parse_members(list: &str) -> Vec<(u64, String)> {
    list.split(',')
        .filter_map(|member| {
            let (id, addr) = member.trim().split_once('@')?;
            let id = id.parse::<u64>().ok().filter(|id| *id != 0)?;
            host_of(addr)?;
            Some((id, addr.to_owned()))
        })
        .collect()
}

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;
