//! Commands: the entries of the replicated log that change lock state.

/// Identifies one client connection on one node.
pub type ConnId = u64;

/// Where the answer to a command must go: the node (and process incarnation) that
/// received the request, its connection, and the request id. Every node applies every
/// command; only the node whose identity matches answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Origin {
    pub node: u64,
    pub incarnation: u64,
    pub conn: ConnId,
    pub id: u32,
}

/// A grant written by the leader: the token is chosen at proposal time and carried in
/// the entry, so applying never invents one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant<S = String> {
    pub owner: S,
    pub token: u64,
    pub lease_ms: u32,
    pub origin: Origin,
}

/// One key of a counted or multi-key hold: the key, the permits it takes and the key's
/// capacity (docs/architecture.md, "Lines").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part<S = String> {
    pub key: S,
    pub count: u32,
    pub capacity: u32,
}

/// A grant of a request for one or more keys, with a count of each: all of them at
/// once, under one token. A grant of one key of capacity 1 is held like a v1 grant
/// (the key's own holder); every other is a *pooled* hold, recorded under its token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HoldGrant<S = String> {
    pub grant: Grant<S>,
    pub parts: Vec<Part<S>>,
}

impl<S> HoldGrant<S> {
    /// Held as the key's own holder (one key of capacity 1), not pooled.
    pub fn is_plain(&self) -> bool {
        matches!(self.parts.as_slice(), [p] if p.capacity == 1)
    }
}

/// One lock state change. A release or an expiry and the grant to the next waiter are
/// ONE command, so a key is never free while someone waits and nobody jumps the queue.
///
/// `S` is how it holds its strings: owned (`String`) when it is made or kept, borrowed
/// from the log entry's bytes ([`CommandRef`]) when it is only applied — every node
/// applies every command, and copying its key and owner out first was the largest
/// share of the allocations per lock request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command<S = String> {
    /// Grant a free key.
    Grant { key: S, grant: Grant<S> },
    /// Release `key` if (owner, token) holds it, then hand it to `next`.
    Release { key: S, owner: S, token: u64, origin: Origin, next: Option<Grant<S>> },
    /// Record cluster member `node`: the process (`incarnation`, a random number each
    /// process start) that runs it, and its client address. The first incarnation
    /// recorded for a node id stays: every member then refuses that id from any other
    /// process (a node that lost its state must never come back under its id).
    /// Incarnation 0 means "not known" (records from older versions): it changes only
    /// the address.
    SetMember { node: u64, incarnation: u64, addr: S },
    /// Record the fencing domain chosen by the first leader (ignored once one is set).
    SetDomain { domain: u64 },
    /// End the hold `token` on `key` because its lease ran out, then hand it to `next`.
    Expire { key: S, token: u64, next: Option<Grant<S>> },
    /// Grant a request for one or more keys with a count of each, all at once.
    Hold { hold: HoldGrant<S> },
    /// End the hold `token` (a pooled hold, or the holder of `key`): a release by
    /// `owner` answered at `origin`, or (`owner` `None`) an expiry; then the grants of
    /// the permits it freed, in arrival order.
    End { key: S, token: u64, owner: Option<S>, origin: Option<Origin>, next: Vec<HoldGrant<S>> },
}

/// A command decoded in place: its strings borrow the log entry's bytes.
pub type CommandRef<'a> = Command<&'a str>;

impl<S: AsRef<str>> Grant<S> {
    pub fn to_owned_grant(&self) -> Grant {
        Grant {
            owner: self.owner.as_ref().to_owned(),
            token: self.token,
            lease_ms: self.lease_ms,
            origin: self.origin,
        }
    }
}

impl<S: AsRef<str>> HoldGrant<S> {
    pub fn to_owned_hold(&self) -> HoldGrant {
        HoldGrant {
            grant: self.grant.to_owned_grant(),
            parts: self
                .parts
                .iter()
                .map(|p| Part { key: p.key.as_ref().to_owned(), count: p.count, capacity: p.capacity })
                .collect(),
        }
    }
}

impl<S: AsRef<str>> Command<S> {
    /// The same command with owned strings.
    pub fn to_owned_command(&self) -> Command {
        let next = |n: &Option<Grant<S>>| n.as_ref().map(Grant::to_owned_grant);
        match self {
            Command::Grant { key, grant } => {
                Command::Grant { key: key.as_ref().to_owned(), grant: grant.to_owned_grant() }
            }
            Command::Release { key, owner, token, origin, next: n } => Command::Release {
                key: key.as_ref().to_owned(),
                owner: owner.as_ref().to_owned(),
                token: *token,
                origin: *origin,
                next: next(n),
            },
            Command::SetMember { node, incarnation, addr } => {
                Command::SetMember { node: *node, incarnation: *incarnation, addr: addr.as_ref().to_owned() }
            }
            Command::SetDomain { domain } => Command::SetDomain { domain: *domain },
            Command::Expire { key, token, next: n } => {
                Command::Expire { key: key.as_ref().to_owned(), token: *token, next: next(n) }
            }
            Command::Hold { hold } => Command::Hold { hold: hold.to_owned_hold() },
            Command::End { key, token, owner, origin, next } => Command::End {
                key: key.as_ref().to_owned(),
                token: *token,
                owner: owner.as_ref().map(|o| o.as_ref().to_owned()),
                origin: *origin,
                next: next.iter().map(HoldGrant::to_owned_hold).collect(),
            },
        }
    }
}
