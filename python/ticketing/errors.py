"""The exceptions: one class per error kind of the C ABI (include/ticketing.h), which
maps each error of the Rust client (docs/client.md) to a kind. The message is the Rust
error's own text, which says what to do next in this package's terms: the client is
made with ticketing_client_new_named("python", ...), so a fix names the keyword
(``tls_ca=``), not the C argument or the command line's variable."""

from __future__ import annotations

from typing import Any, Dict, Optional, Protocol, Type

from . import _native as n


class _Resolver(Protocol):
    """What an ``Indeterminate`` resolves through: its ``ticketing.Client`` (a protocol
    here, so that this module imports nothing of the client's)."""

    def resolve(self, error: "Indeterminate", timeout: float = 15.0) -> Optional[Any]: ...


class Error(Exception):
    """Root of every error of this package.

    ``kind`` is the C ABI's name of the kind ("busy", "timeout", ...); ``retryable`` is
    true when the request was certainly not executed and a new try soon may succeed
    (NotLeader, Overloaded, Unavailable: ``AcquireError::is_retryable``); ``definitive``
    is true when the operation certainly did not take effect (false for Indeterminate,
    ReleaseUnconfirmed, ProtocolError and InternalError), as the library says of the kind.

    An error of a kind this package has no class for (a library newer than the package)
    is an ``Error`` whose ``kind`` is the library's name of it."""

    kind = "error"

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable

    @property
    def definitive(self) -> bool:
        """True when the operation certainly did not take effect (``ticketing_kind_is_definitive``)."""
        return n.DEFINITIVE.get(self.kind, True)


class Busy(Error):
    """The key is held and the wait was 0 (or its queue is full). Not acquired (definitive)."""

    kind = "busy"


class Timeout(Error):
    """The wait ran out before this caller's turn; it left the queue. Not acquired (definitive)."""

    kind = "timeout"


class NotLeader(Error):
    """The node does not lead and did not execute the request. The client sends the next
    request to the leader it named (``leader``, when known): try again."""

    kind = "not_leader"

    def __init__(self, message: str, *, retryable: bool = True, leader: Optional[str] = None) -> None:
        super().__init__(message, retryable=retryable)
        self.leader = leader


class InvalidArgument(Error, ValueError):
    """An argument outside its limits (lease whole seconds 1..250, wait 0..300 s, key and
    owner 1..255 bytes, no NUL) or of the wrong type. Nothing was sent."""

    kind = "invalid"


class Overloaded(Error):
    """The server has too many requests pending. Not executed; try again later."""

    kind = "overloaded"


class Unavailable(Error):
    """No connection could take the request in time: nothing was sent. The message names
    the last connection error (refused, the auth token, TLS)."""

    kind = "unavailable"


class Indeterminate(Error):
    """The acquire was sent and no definitive answer came: the key MAY be held under a
    token this process never learned. Do not enter the critical section.

    ``cause`` says why ("connection_lost", "server_unknown", "no_answer",
    "protocol_violation", "expired_on_arrival", "cancelled"). ``resolve(timeout)`` finds out without
    sending the acquire again; when nobody resolves it, the client finds out by itself
    and releases a grant that happened anyway (no grant is left orphaned)."""

    kind = "indeterminate"

    def __init__(self, message: str, *, retryable: bool = False, cause: str = "", handle: Any = None,
                 client: Optional[_Resolver] = None) -> None:
        super().__init__(message, retryable=retryable)
        self.cause = cause
        self._handle = handle
        self._client = client

    def resolve(self, timeout: float = 15.0) -> Optional[Any]:
        """Waits until this acquire's grant can no longer happen (its send instant + its
        wait + 5 s), then asks the leader. Returns the ``Lock`` if the grant did happen
        (adopted: use or release it), ``None`` if the key is certainly not held by it;
        raises this exception again when it is still unknown after ``timeout`` seconds.
        Wraps ``Client::resolve``; blocks at most ``timeout``."""
        if self._client is None:
            raise InvalidArgument("this Indeterminate was not raised by a Client")
        return self._client.resolve(self, timeout)

    def __del__(self, _free: n.Free = n.quick.ticketing_error_free) -> None:
        handle, self._handle = self._handle, None
        if handle:
            _free(handle)


class NoAnswer(Error):
    """A query was sent and no answer came within the request timeout (10 s)."""

    kind = "no_answer"


class ReleaseUnconfirmed(Error):
    """No answer to the release within its 5 s deadline: the key may stay held until its
    lease ends."""

    kind = "unconfirmed"


class ReleaseQueueFull(Error):
    """The client's release queue is full: the release was not sent; the lease ends the hold."""

    kind = "queue_full"


class NotHolder(Error):
    """Raised where a release's ``not_holder`` outcome is an error: at the end of a
    ``with`` block whose lock's lease had already ended (the key may have been granted
    to someone else meanwhile; only the fencing token protected the writes)."""

    kind = "not_holder"


class ProtocolError(Error):
    """The server broke the protocol (an answer of the wrong kind)."""

    kind = "protocol"


class Refused(Error):
    """The server refused the request; the message says why."""

    kind = "refused"


class ConfigError(Error, ValueError):
    """The client's configuration was refused (no address, a bad address, an auth token
    under 16 bytes, a bad owner, an unreadable CA file)."""

    kind = "config"


class InternalError(Error):
    """A bug in libticketing (a Rust panic, caught at the C boundary)."""

    kind = "internal"


class Cancelled(Error):
    """An operation cancelled before it was sent (its caller stopped waiting). The
    blocking and asyncio calls raise the exception that cancelled them instead
    (``KeyboardInterrupt``, ``asyncio.CancelledError``); this is what the C ABI reports."""

    kind = "cancelled"


# A kind's class by the kind's name: the names are the library's (n.KINDS, read at load).
_BY_NAME: Dict[str, Type[Error]] = {
    cls.kind: cls
    for cls in (Busy, Timeout, NotLeader, InvalidArgument, Overloaded, Unavailable, Indeterminate, NoAnswer,
                ReleaseUnconfirmed, ReleaseQueueFull, ProtocolError, Refused, ConfigError, InternalError, Cancelled)
}


def from_handle(kind: int, handle: Any, client: Optional[_Resolver] = None) -> Error:
    """The exception for a failed call's `ticketing_error` (which it takes over)."""
    q = n.quick
    message = (q.ticketing_error_message(handle) or b"").decode("utf-8", "replace")
    retryable = bool(q.ticketing_error_is_retryable(handle))
    name = n.KINDS.get(kind, "unknown")
    cls = _BY_NAME.get(name)
    if cls is Indeterminate:
        cause = n.CAUSES.get(q.ticketing_error_cause(handle), "")
        # Kept (and freed with the exception): resolve needs the acquire's state.
        return Indeterminate(message, retryable=retryable, cause=cause, handle=handle, client=client)
    try:
        if cls is NotLeader:
            leader = q.ticketing_error_leader(handle)
            return NotLeader(message, retryable=retryable, leader=leader.decode() if leader else None)
        if cls is None:  # a kind this package has no class for: the library's name, its flags
            error = Error(message, retryable=retryable)
            error.kind = name
            return error
        return cls(message, retryable=retryable)
    finally:
        q.ticketing_error_free(handle)
