//! [`Direct`]: each request on a connection of its own to the one node asked, never
//! following the membership — for the views that ask every node what it is (the CLI's
//! `status`, `top` and `admin members`), where a pooled [`Client`](super::Client) would
//! retire the address of a node that is not a voter, and dial every seed for nothing.

use std::sync::Arc;
use std::time::Duration;

use super::core::check_answer;
use super::error::{unexpected, ClientError};
use super::io::dial::Dialer;
use super::io::oneoff::exchange;
use crate::proto::frame::{Request, Response, TopKey, TOP_KEYS_MAX};

/// Asks one node at a time, each request on a fresh connection closed after its answer.
/// Cheap to clone (the secret and TLS configuration are shared): one per thread.
#[derive(Clone)]
pub(crate) struct Direct {
    dialer: Arc<Dialer>,
}

impl Direct {
    pub(crate) fn new(dialer: Dialer) -> Direct {
        Direct { dialer: Arc::new(dialer) }
    }

    /// `request` to the node at `addr`, answered within `timeout` (the connection and
    /// its handshake included). An `M` is [`ClientError::NotLeader`]: nothing is
    /// followed. `Unavailable` when no connection could be made (its cause inside,
    /// `lasting` for a mistake retrying cannot fix), `NoAnswer` when none came.
    pub(crate) fn ask(
        &self,
        addr: &str,
        request: &Request,
        timeout: Duration,
    ) -> Result<Response, ClientError> {
        exchange(&self.dialer, addr, request, timeout).and_then(check_answer)
    }

    /// The STATUS text of the node at `addr` (`name=value` lines, docs/protocol.md).
    pub(crate) fn status_of(&self, addr: &str, timeout: Duration) -> Result<String, ClientError> {
        text(self.ask(addr, &Request::Status, timeout)?)
    }

    /// The MEMBERS text of the node at `addr`: the membership as that node sees it.
    /// Needs the operator secret; others get [`ClientError::Refused`].
    pub(crate) fn members_of(&self, addr: &str, timeout: Duration) -> Result<String, ClientError> {
        text(self.ask(addr, &Request::Members, timeout)?)
    }

    /// TOP KEYS (the `n` keys with the longest queues) of the node at `addr`, which
    /// must lead: a follower's `M` is [`ClientError::NotLeader`].
    pub(crate) fn top_keys_of(
        &self,
        addr: &str,
        n: u8,
        timeout: Duration,
    ) -> Result<Vec<TopKey>, ClientError> {
        if n == 0 || n > TOP_KEYS_MAX {
            return Err(ClientError::Invalid(format!("n must be 1..={TOP_KEYS_MAX}, not {n}")));
        }
        match self.ask(addr, &Request::TopKeys { n }, timeout)? {
            Response::TopKeys { keys } => Ok(keys),
            other => Err(unexpected(other)),
        }
    }
}

fn text(response: Response) -> Result<String, ClientError> {
    match response {
        Response::Status { text } => Ok(text),
        other => Err(unexpected(other)),
    }
}
