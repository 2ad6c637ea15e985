"""Client, Lock and Holder: thin wrappers over the C ABI (include/ticketing.h), each
method naming the Rust call it ends in. Every behaviour — routing to the leader,
pipelining, reconnecting, never resending a written acquire, the release queue and its
deadline, resolving — is the Rust client's (docs/client.md); this module only converts
arguments and results and raises the exception of each error kind."""

from __future__ import annotations

import atexit
import ctypes
import math
import os
import threading
from ctypes import byref, c_char_p, c_int, c_void_p
from dataclasses import dataclass
from functools import partial
from types import TracebackType
from typing import Any, Callable, Iterator, Literal, NamedTuple, Optional, Sequence, Tuple, Type, Union

from . import _logging
from . import _native as n
from .errors import Error, Indeterminate, InvalidArgument, NotHolder, from_handle

ReleaseOutcome = Literal["released", "not_holder", "released_or_expired"]

_INT64_MAX = 2**63 - 1


def _text(value: object, what: str) -> bytes:
    """`value` as the NUL-terminated UTF-8 the C ABI reads."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if "\0" in value:
        raise InvalidArgument(f"{what} contains a NUL character")
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidArgument(f"{what} is not valid Unicode: {e}") from None


def _seconds(seconds: object, what: str) -> None:
    """Refuses what is not a finite number of seconds."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {type(seconds).__name__}")
    if isinstance(seconds, float) and not math.isfinite(seconds):
        raise InvalidArgument(f"{what} must be finite, not {seconds}")


def _nanos(seconds: object, what: str) -> int:
    """A lease or a wait in seconds (int or float) as the C ABI's nanoseconds, to the
    nearest one: the library alone checks them (a lease is whole seconds, a wait at
    most 300 s), alike for every language."""
    _seconds(seconds, what)
    ns = seconds * 1_000_000_000 if isinstance(seconds, int) else round(seconds * 1e9)  # type: ignore[operator]
    # Out of int64 range: pass the largest value, which the client refuses as out of range.
    return max(-_INT64_MAX, min(ns, _INT64_MAX))


def _millis(seconds: object, what: str) -> int:
    """A timeout in seconds (int or float) as whole milliseconds, the rest rounded up."""
    _seconds(seconds, what)
    ms = math.ceil(seconds * 1000)  # type: ignore[operator]
    return max(-_INT64_MAX, min(ms, _INT64_MAX))


# ---- the waits: how a blocking call answers Python's signal handlers ------------------

#: How often a blocking call that waits runs Python's signal handlers (through the
#: library's wait check): Ctrl-C, or a SIGTERM handler that raises, ends a wait within
#: this, whatever the wait's length. A call whose outcome comes sooner never pays for it.
WAIT_SLICE_MS = 50

class _Interrupted(threading.local):
    """What a signal handler raised during this thread's wait, until the call raises it
    (a class attribute as the default: reading it costs a dictionary look-up, not a
    caught AttributeError, on every call)."""

    error: Optional[BaseException] = None


_interrupted = _Interrupted()


def _checker() -> Iterator[int]:
    """The library's wait check (``ticketing_set_wait_check``), as a generator whose
    ``send`` the library calls: resuming at the ``yield`` — inside the ``try`` — is where
    Python runs the signal handlers that are due, so what one raises is caught here
    (a plain function would get it at its first instruction, outside any ``try``). It
    stops the wait; the call raises it once the library has cancelled the operation."""
    result = 0
    while True:
        try:
            yield result
            result = 0
        except GeneratorExit:  # closed at interpreter exit
            return
        except BaseException as e:  # KeyboardInterrupt, SystemExit, what a handler raises
            _interrupted.error = e
            result = 1


_CHECKER = _checker()
next(_CHECKER)
_CHECK = n.WAIT_CHECK_FN(_CHECKER.send)


_main_checks = False


def _check_signals_in_this_thread() -> None:
    """Python runs signal handlers in the main thread only: that is the thread whose
    waits answer them. Set once, at import or at its first call."""
    global _main_checks
    if not _main_checks and threading.current_thread() is threading.main_thread():
        n.blocking.ticketing_set_wait_check(_CHECK, None, WAIT_SLICE_MS, None)
        _main_checks = True


_check_signals_in_this_thread()


@atexit.register
def _stop_checking() -> None:
    global _main_checks
    if _main_checks:
        n.blocking.ticketing_set_wait_check(n.WAIT_CHECK_FN(), None, WAIT_SLICE_MS, None)
        _main_checks = False


def _raise_if_interrupted() -> None:
    """After a blocking call: the exception a signal handler raised while it waited."""
    error = _interrupted.error
    if error is not None:
        _interrupted.error = None
        raise error


# ---- each operation once: its arguments, and what its outcome means ------------------
#
# An operation's outcome is read by one function, given the call that fills its
# out-parameters: the blocking call (``ticketing_acquire``: the library starts the
# operation's future and waits for it in its one place, answering the signal handlers
# through the wait check) or, in aio.py, the ready future's getter
# (``ticketing_future_get_lock``, which the blocking call itself ends in).

#: A call that fills an operation's out-parameters and returns its status.
Fill = Callable[..., int]


def _read_lock(fill: Fill, client: Optional["Client"]) -> "Lock":
    """An acquire's outcome."""
    lock, error = c_void_p(), c_void_p()
    kind = fill(byref(lock), byref(error))
    if kind or lock.value is None:
        raise from_handle(kind, error, client)
    return Lock(lock.value)


def _read_release(fill: Fill) -> ReleaseOutcome:
    """A release's outcome (of a lock, or of a key and token)."""
    outcome, error = c_int(0), c_void_p()
    kind = fill(byref(outcome), byref(error))
    if kind:
        raise from_handle(kind, error)
    return n.OUTCOMES[outcome.value]  # type: ignore[return-value]


def _read_holder(fill: Fill) -> Optional["Holder"]:
    """A query's outcome."""
    held, holder, error = c_int(0), n.Holder(), c_void_p()
    kind = fill(byref(held), byref(holder), byref(error))
    if kind:
        raise from_handle(kind, error)
    if not held.value:
        return None
    owner = bytes(holder.owner[: holder.owner_len]).decode("utf-8", "replace")
    return Holder(owner, holder.token, holder.lease_left_ms / 1000, holder.waiters)


def _read_resolution(fill: Fill, attempt: Indeterminate) -> Optional["Lock"]:
    """A resolve's outcome: the adopted lock, None (not held), or `attempt` raised again."""
    resolution, lock, error = c_int(0), c_void_p(), c_void_p()
    kind = fill(byref(resolution), byref(lock), byref(error))
    if kind:
        raise from_handle(kind, error)
    if resolution.value == n.RESOLUTION["held"] and lock.value is not None:
        return Lock(lock.value)
    if resolution.value == n.RESOLUTION["not_held"]:
        return None
    raise attempt  # still unknown


def _acquire_args(client: int, key: str, lease: float, wait: float) -> Tuple[Any, ...]:
    return client, _text(key, "key"), _nanos(lease, "lease"), _nanos(wait, "wait")


def _release_args(client: int, key: str, token: int) -> Tuple[Any, ...]:
    if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < 2**64:
        raise InvalidArgument(f"token must be an int in 0..2**64, not {token!r}")
    return client, _text(key, "key"), token


def _query_args(client: int, key: str) -> Tuple[Any, ...]:
    return client, _text(key, "key")


def _resolve_args(client: int, attempt: Indeterminate, timeout: float) -> Tuple[Any, ...]:
    return client, attempt._handle, _millis(timeout, "timeout")


class _Operation(NamedTuple):
    """One operation of the C ABI: its blocking call, its future's start and getter, and
    the one reader of its outcome."""

    blocking: Callable[..., int]
    start: Callable[..., int]
    get: Callable[..., int]
    read: Callable[..., Any]


_ACQUIRE = _Operation(n.blocking.ticketing_acquire, n.quick.ticketing_acquire_start,
                      n.quick.ticketing_future_get_lock, _read_lock)
_LOCK_RELEASE = _Operation(n.blocking.ticketing_lock_release, n.quick.ticketing_lock_release_start,
                           n.quick.ticketing_future_get_release, _read_release)
_RELEASE = _Operation(n.blocking.ticketing_release, n.quick.ticketing_release_start,
                      n.quick.ticketing_future_get_release, _read_release)
_QUERY = _Operation(n.blocking.ticketing_query, n.quick.ticketing_query_start,
                    n.quick.ticketing_future_get_query, _read_holder)
_RESOLVE = _Operation(n.blocking.ticketing_resolve, n.quick.ticketing_resolve_start,
                      n.quick.ticketing_future_get_resolve, _read_resolution)


def _wait(operation: _Operation, args: Tuple[Any, ...], *context: Any) -> Any:
    """The blocking call of `operation`, its outcome read as aio.py reads its future's.
    What a signal handler raised while it waited comes first (a lock granted meanwhile
    is released with its ``Lock``, an error freed with its exception)."""
    if not _main_checks:
        _check_signals_in_this_thread()
    try:
        result = operation.read(partial(operation.blocking, *args), *context)
    except Error:
        _raise_if_interrupted()
        raise
    _raise_if_interrupted()
    return result


def _start(operation: _Operation, args: Tuple[Any, ...]) -> int:
    """The future of `operation`, started (for aio.py), or the exception its refusal means."""
    future, error = c_void_p(), c_void_p()
    kind = operation.start(*args, byref(future), byref(error))
    if kind or future.value is None:
        raise from_handle(kind, error)
    return future.value


def _take(operation: _Operation, future: int, *context: Any) -> Any:
    """The outcome of `operation`'s ready `future` (freed here), read as the blocking
    call's is."""

    def fill(*outs: Any) -> int:
        try:
            return operation.get(future, *outs)
        finally:
            n.quick.ticketing_future_free(future)

    return operation.read(fill, *context)


@dataclass(frozen=True)
class Holder:
    """Who holds a key (``Client.query``): the holder's owner and fencing token, the lease
    left on the leader's clock when it answered (seconds), and how many acquires wait."""

    owner: str
    token: int
    lease_left: float
    waiters: int


class Lock:
    """A held lock: the server granted ``key`` to ``owner`` under fencing token ``token``
    (larger than every earlier grant's). Pass the token to every write the critical
    section makes (docs/fencing.md).

    ``release()`` gives the key back and returns the server's answer. Used as a context
    manager, the lock is released when the block ends. A Lock that is garbage-collected
    unreleased is released in the background (the Rust ``Lock``'s drop)."""

    __slots__ = ("_handle", "key", "owner", "token", "lease", "__weakref__")

    def __init__(self, handle: int) -> None:
        q = n.quick
        self._handle: Optional[int] = handle
        self.key: str = q.ticketing_lock_key(handle).decode()
        self.owner: str = q.ticketing_lock_owner(handle).decode()
        self.token: int = q.ticketing_lock_token(handle)
        #: The lease the server granted, in seconds.
        self.lease: float = q.ticketing_lock_lease_ms(handle) / 1000

    @property
    def remaining(self) -> float:
        """Seconds left until the lock's local deadline (the instant before the acquire was
        written plus the lease; the server's lease never ends before it); 0 once passed
        or once released. Wraps ``Lock::remaining``."""
        return n.quick.ticketing_lock_remaining_ms(self._handle) / 1000 if self._handle else 0.0

    @property
    def expired(self) -> bool:
        """True once the local deadline has passed: the key may be someone else's now."""
        return self.remaining == 0

    def release(self) -> ReleaseOutcome:
        """Releases the lock and waits for the server's answer: "released", "not_holder" (the
        lease had already ended) or "released_or_expired" (an earlier attempt's answer was
        lost). Raises ``ReleaseUnconfirmed``, ``Unavailable`` or ``ReleaseQueueFull`` when the
        release is not confirmed (the key may stay held a while: the client keeps checking
        and releases it once a leader answers); the lock stays releasable then: call
        ``release()`` again. ``InvalidArgument`` when already released. Wraps
        ``Lock::release``; blocks at most 5 s."""
        return _wait(_LOCK_RELEASE, (self._handle,))  # type: ignore[no-any-return]

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        _release_at_exit(self, failed=exc_type is not None)

    def __del__(self, _free: n.Free = n.quick.ticketing_lock_free) -> None:
        handle, self._handle = self._handle, None
        if handle:
            _free(handle)

    def __repr__(self) -> str:
        return f"Lock(key={self.key!r}, owner={self.owner!r}, token={self.token}, remaining={self.remaining:.3f})"


def _release_at_exit(lock: Lock, failed: bool) -> None:
    """The end of a ``with`` block: release; an unconfirmed release, or a lease that had
    already ended ("not_holder"), is an error unless the block is already failing."""
    try:
        outcome = lock.release()
    except Error:
        if failed:
            return  # the block's own exception goes on
        raise
    _check_exit_outcome(lock.key, lock.token, outcome, failed)


def _check_exit_outcome(key: str, token: int, outcome: ReleaseOutcome, failed: bool) -> None:
    """A release's outcome at the end of a block (``with``, ``async with``): "not_holder"
    is an error unless the block is already failing."""
    if outcome == "not_holder" and not failed:
        raise NotHolder(
            f"the lease on {key!r} (token {token}) had ended before the block did: the key "
            "may have been granted to someone else meanwhile; only the fencing token protected the writes"
        )


class LockContext:
    """``with client.lock(key, lease, wait) as lock:`` acquires on entry and releases on
    exit (see ``Client.lock``)."""

    __slots__ = ("_client", "_key", "_lease", "_wait", "_lock")

    def __init__(self, client: "Client", key: str, lease: float, wait: float) -> None:
        self._client, self._key, self._lease, self._wait = client, key, lease, wait
        self._lock: Optional[Lock] = None

    def __enter__(self) -> Lock:
        self._lock = self._client.acquire(self._key, lease=self._lease, wait=self._wait)
        return self._lock

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            _release_at_exit(lock, failed=exc_type is not None)


class Client:
    """A client of a Ticketing node or cluster, shared by any number of threads.

    ``addrs`` are seeds ("host:port"): one live member is enough; the client finds the
    leader and the other members. ``auth_token`` is the client secret (at least 16 bytes).
    ``owner`` is sent with every acquire and release (default: host-pid-random, unique
    per client). ``tls_ca`` (a PEM CA bundle) turns TLS on. ``cluster_name`` is the name
    of the cluster this client serves (its nodes' ``TICKETING_CLUSTER_NAME``): a node
    that reports another name or none is sent nothing, and calls end in ``Unavailable``
    naming both names; without it the client compares the fencing domains its nodes
    report instead. No network I/O happens here: connections are made in the background.
    Raises ``ConfigError``. Wraps ``ClientBuilder::build``."""

    def __init__(self, addrs: Union[str, Sequence[str]], *, auth_token: Union[str, bytes],
                 owner: Optional[str] = None, tls_ca: Optional[Union[str, "os.PathLike[str]"]] = None,
                 cluster_name: Optional[str] = None) -> None:
        self._handle: Optional[int] = None
        if isinstance(addrs, str):
            addrs = [addrs]
        encoded = [_text(a, "address") for a in addrs]
        array = (c_char_p * max(len(encoded), 1))(*encoded)
        if isinstance(auth_token, str):
            secret = auth_token.encode("utf-8")
        elif isinstance(auth_token, (bytes, bytearray)):
            secret = bytes(auth_token)
        else:
            raise TypeError(f"auth_token must be str or bytes, not {type(auth_token).__name__}")
        _logging.install()
        handle = c_void_p()
        error = c_void_p()
        # "python": the client's messages name this package's keywords (tls_ca=,
        # cluster_name=), not the C arguments or the CLI's variables.
        kind = n.blocking.ticketing_client_new_named(
            b"python", None if cluster_name is None else _text(cluster_name, "cluster_name"),
            array, len(encoded), secret, len(secret),
            None if owner is None else _text(owner, "owner"),
            None if tls_ca is None else _text(os.fspath(tls_ca), "tls_ca"),
            byref(handle), byref(error),
        )
        if kind:
            raise from_handle(kind, error)
        self._adopt(handle.value)

    def _adopt(self, handle: Optional[int]) -> None:
        self._handle = handle
        self._closed = False
        self._owner: str = n.quick.ticketing_client_owner(handle).decode()

    @property
    def owner(self) -> str:
        """The owner this client acquires and releases as. Wraps ``Client::owner``."""
        return self._owner

    def with_owner(self, owner: str) -> "Client":
        """The same client (connections, release queue) acquiring and releasing as
        ``owner``. Give each logical caller its own owner when ``resolve`` must tell an
        indeterminate acquire's grant from another grant to the same owner.
        Wraps ``Client::with_owner``; never blocks."""
        handle = c_void_p()
        error = c_void_p()
        kind = n.quick.ticketing_client_with_owner(self._live(), _text(owner, "owner"), byref(handle),
                                                   byref(error))
        if kind:
            raise from_handle(kind, error)
        other = Client.__new__(Client)
        other._adopt(handle.value)
        return other

    def _live(self) -> int:
        if self._closed or not self._handle:
            raise InvalidArgument("the client is closed")
        return self._handle

    def acquire(self, key: str, lease: float = 30, wait: float = 0) -> Lock:
        """Acquires ``key`` for ``lease`` seconds (whole seconds, 1..250), queueing at most
        ``wait`` seconds (0..300; 0 is one immediate try). Returns the ``Lock``.

        Raises, definitive (the key is NOT held by this call): ``Busy``, ``Timeout``,
        ``NotLeader``, ``Overloaded``, ``Unavailable``, ``InvalidArgument``. Raises
        ``Indeterminate`` when the outcome is unknown: do not enter the critical section;
        ``err.resolve(timeout)`` finds out later. Wraps ``Client::acquire``; blocks at most
        max(wait, 3 s) to put the request on a connection plus wait + 5 s for the answer."""
        return _wait(_ACQUIRE, _acquire_args(self._live(), key, lease, wait), self)  # type: ignore[no-any-return]

    def lock(self, key: str, lease: float = 30, wait: float = 5) -> LockContext:
        """``with client.lock(key, lease=30, wait=5) as lock:`` — ``acquire`` on entry (its
        exceptions propagate: the block does not run), ``release`` on exit, also when the
        block raises. At the end of a block that did not raise, an unconfirmed release
        raises ``ReleaseUnconfirmed`` and a lease that had already ended raises
        ``NotHolder``."""
        return LockContext(self, key, lease, wait)

    def release(self, key: str, token: int) -> ReleaseOutcome:
        """Releases ``key`` held by this client's owner under ``token`` (a token kept
        elsewhere); outcomes and errors as ``Lock.release``. Wraps ``Client::release``;
        blocks at most 5 s."""
        return _wait(_RELEASE, _release_args(self._live(), key, token))  # type: ignore[no-any-return]

    def query(self, key: str) -> Optional[Holder]:
        """Who holds ``key``, answered by the leader: a ``Holder``, or ``None`` when free.
        Raises ``Unavailable``, ``NoAnswer``, ... Wraps ``Client::query``; blocks at most
        the request timeout (10 s)."""
        return _wait(_QUERY, _query_args(self._live(), key))  # type: ignore[no-any-return]

    def resolve(self, error: Indeterminate, timeout: float = 15.0) -> Optional[Lock]:
        """``error.resolve(timeout)``: whether the indeterminate acquire ``error`` holds its
        key after all. Returns the ``Lock`` (held), ``None`` (certainly not held); raises
        ``error`` again when still unknown. Wraps ``Client::resolve``; blocks at most
        ``timeout``."""
        if not isinstance(error, Indeterminate) or not error._handle:
            return None  # any other error is definitive: not held
        return _wait(_RESOLVE, _resolve_args(self._live(), error, timeout), error)  # type: ignore[no-any-return]

    def close(self, timeout: float = 5.0) -> bool:
        """Waits until every release this client still has to make is done (or
        ``timeout`` seconds pass) and closes this handle: later calls raise. True when
        none was left. Wraps ``Client::close``; blocks at most ``timeout``."""
        if self._closed or not self._handle:
            return True
        drained = c_int(0)
        error = c_void_p()
        kind = n.blocking.ticketing_client_close(self._handle, _millis(timeout, "timeout"), byref(drained),
                                                 byref(error))
        if kind:
            raise from_handle(kind, error)
        self._closed = True
        return bool(drained.value)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()

    def __del__(self, _free: n.Free = n.blocking.ticketing_client_free) -> None:
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            _free(handle)

    def __repr__(self) -> str:
        return f"Client(owner={self._owner!r})"
