//! What a proposed command owes: the requests of this node it answers once applied.

use crate::lock::{Command, ConnId};

/// A command that was handed to the log and whose answers are still owed.
#[derive(Debug)]
pub(super) struct Pending {
    /// Requests of this node the command answers.
    pub owed: Owed,
    /// (index, term) once the log appended it.
    pub at: Option<(u64, u64)>,
    /// Answered `U` already: a later commit must stay silent.
    pub abandoned: bool,
}

/// The requests (connection, request id) one command answers: at most two (a release
/// and the grant to the next waiter). Inline, so tracking a proposal allocates nothing.
#[derive(Debug, Default)]
pub(super) struct Owed {
    items: [(ConnId, u32); 2],
    len: usize,
}

impl Owed {
    fn push(&mut self, item: (ConnId, u32)) {
        self.items[self.len] = item;
        self.len += 1;
    }
}

impl IntoIterator for Owed {
    type Item = (ConnId, u32);
    type IntoIter = std::iter::Take<std::array::IntoIter<(ConnId, u32), 2>>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.into_iter().take(self.len)
    }
}

/// The requests of node `node` that `command` answers when applied.
pub(super) fn owed_by(command: &Command, node: u64) -> Owed {
    let mut owed = Owed::default();
    let mut add = |o: &crate::lock::Origin| {
        if o.node == node {
            owed.push((o.conn, o.id));
        }
    };
    match command {
        Command::Grant { grant, .. } => add(&grant.origin),
        Command::Release { origin, next, .. } => {
            add(origin);
            if let Some(g) = next {
                add(&g.origin);
            }
        }
        Command::SetDomain { .. } | Command::SetMember { .. } => {}
        Command::Expire { next, .. } => {
            if let Some(g) = next {
                add(&g.origin);
            }
        }
    }
    owed
}
