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

/// The requests (connection, request id) one command answers: usually at most two (a
/// release and the grant to the next waiter), kept inline, so tracking such a proposal
/// allocates nothing; the end of a pooled hold may hand its permits to more.
#[derive(Debug, Default)]
pub(super) struct Owed {
    items: [(ConnId, u32); 2],
    len: usize,
    more: Vec<(ConnId, u32)>,
}

impl Owed {
    fn push(&mut self, item: (ConnId, u32)) {
        if self.len < self.items.len() {
            self.items[self.len] = item;
            self.len += 1;
        } else {
            self.more.push(item);
        }
    }
}

impl IntoIterator for Owed {
    type Item = (ConnId, u32);
    type IntoIter = std::iter::Chain<
        std::iter::Take<std::array::IntoIter<(ConnId, u32), 2>>,
        std::vec::IntoIter<(ConnId, u32)>,
    >;
    fn into_iter(self) -> Self::IntoIter {
        self.items.into_iter().take(self.len).chain(self.more)
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
        Command::Hold { hold } => add(&hold.grant.origin),
        Command::End { origin, next, .. } => {
            if let Some(o) = origin {
                add(o);
            }
            for hold in next {
                add(&hold.grant.origin);
            }
        }
    }
    owed
}
