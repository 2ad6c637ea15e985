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
import select
import threading
import time
from ctypes import byref, c_char_p, c_int, c_uint32, c_uint64, c_void_p
from dataclasses import dataclass
from functools import partial
from types import TracebackType
from typing import Any, Callable, Dict, Iterable, Iterator, Literal, NamedTuple, Optional, Sequence, Tuple, Type, Union

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


#: The whole seconds whose nanoseconds fit an int64 (the common case, converted at once).
_INT_SECONDS_MAX = _INT64_MAX // 1_000_000_000


def _nanos(seconds: object, what: str) -> int:
    """A lease or a wait in seconds (int or float) as the C ABI's nanoseconds, to the
    nearest one: the library alone checks them (a lease is whole seconds, a wait at
    most 300 s), alike for every language."""
    if type(seconds) is int and -_INT_SECONDS_MAX <= seconds <= _INT_SECONDS_MAX:
        return seconds * 1_000_000_000
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


def _read_pool(fill: Fill) -> "Pool":
    """A pool read's outcome."""
    info, error = n.PoolInfo(), c_void_p()
    kind = fill(byref(info), byref(error))
    if kind:
        raise from_handle(kind, error)
    holders = tuple(
        PoolHolder(bytes(h.owner[: h.owner_len]).decode("utf-8", "replace"), h.token, h.count,
                   h.lease_left_ms / 1000)
        for h in info.holders[: info.holders_len]
    )
    return Pool(info.capacity, info.in_use, info.holds, info.waiters, info.oldest_wait_ms / 1000, holders)


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


def _u32(value: object, what: str) -> int:
    """A count or a capacity as the C ABI's uint32 (the library checks its limits)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32:
        raise InvalidArgument(f"{what} must be an int in 0..2**32, not {value!r}")
    return value


#: The ctypes array type of each number of hold parts, made once.
_PART_ARRAYS: Dict[int, Any] = {}


def _part_key(value: object, i: int, field: str) -> bytes:
    """A hold part's key as _text converts it; its argument's name (``keys[i]``) is
    only spelled out for an error."""
    if type(value) is str and "\0" not in value:  # type: ignore[operator]
        try:
            return value.encode("utf-8")  # type: ignore[union-attr, no-any-return]
        except UnicodeEncodeError:
            pass
    return _text(value, f"keys[{i}]{field}")


def _part_u32(value: object, i: int, field: str) -> int:
    """A hold part's count or capacity as _u32 checks it, named only for an error."""
    if type(value) is int and 0 <= value < 4294967296:  # type: ignore[operator]
        return value  # type: ignore[return-value]
    return _u32(value, f"keys[{i}].{field}")


def _hold_args(client: int, keys: Iterable[Union[str, "Permits"]], lease: float, wait: float) -> Tuple[Any, ...]:
    """The C ABI's parts of a hold: each key as given, a plain ``str`` as the key's
    exclusive lock (1 of 1). Their number, repeated keys and the counts' limits are the
    library's to check."""
    if type(keys) is not list and type(keys) is not tuple and (
            isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable)):
        raise TypeError(f"keys must be a list of keys (str or ticketing.Permits), not {type(keys).__name__}")
    parts = []
    for i, part in enumerate(keys):
        if isinstance(part, str):
            parts.append((_part_key(part, i, ""), 1, 1))
        elif isinstance(part, Permits):
            key, count, capacity = part
            parts.append((_part_key(key, i, ".key"), _part_u32(count, i, "count"), _part_u32(capacity, i, "capacity")))
        else:
            raise TypeError(f"keys[{i}] must be a str or a ticketing.Permits, not {type(part).__name__}")
    size = max(len(parts), 1)
    array_type = _PART_ARRAYS.get(size)
    if array_type is None:
        array_type = _PART_ARRAYS[size] = n.HoldPart * size
    return client, array_type(*parts), len(parts), _nanos(lease, "lease"), _nanos(wait, "wait")


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
# A hold's arguments end in its place callback and context: always none (NO_PLACES,
# None), since a Python callback would run on a client thread. Places come through a
# queue instead (_hold_with_places, and aio.py), started by ticketing_hold_start_queued.
_HOLD = _Operation(n.blocking.ticketing_hold, n.quick.ticketing_hold_start,
                   n.quick.ticketing_future_get_lock, _read_lock)
_POOL = _Operation(n.blocking.ticketing_pool, n.quick.ticketing_pool_start,
                   n.quick.ticketing_future_get_pool, _read_pool)
NO_PLACES = n.PLACE_FN()


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


def _start_queued(args: Tuple[Any, ...], queue: int, place_tag: int) -> int:
    """The future of a hold (`args` as _hold_args gives them) whose places leave
    `place_tag` in `queue` (``ticketing_hold_start_queued``)."""
    future, error = c_void_p(), c_void_p()
    kind = n.quick.ticketing_hold_start_queued(*args, queue, place_tag, byref(future), byref(error))
    if kind or future.value is None:
        raise from_handle(kind, error)
    return future.value


def _take(operation: _Operation, future: int, *context: Any) -> Any:
    """The outcome of `operation`'s ready `future` (freed here), read as the blocking
    call's is."""
    try:
        return operation.read(partial(operation.get, future), *context)
    finally:
        _future_free(future)


_future_free = n.quick.ticketing_future_free


@dataclass(frozen=True)
class Holder:
    """Who holds a key (``Client.query``): the holder's owner and fencing token, the lease
    left on the leader's clock when it answered (seconds), and how many acquires wait."""

    owner: str
    token: int
    lease_left: float
    waiters: int


class Permits(NamedTuple):
    """``count`` of ``key``'s ``capacity`` permits: one key of a hold (``Client.hold``).
    Every request on a key states the same capacity; a plain ``"key"`` in a hold is
    ``Permits("key", 1, 1)``, the key's exclusive lock."""

    key: str
    count: int = 1
    capacity: int = 1


@dataclass(frozen=True)
class Place:
    """A waiting hold's place in line: ``ahead`` requests are before it in the longest
    of its keys' queues, and that key saw ``grants_per_s`` grants a second lately.
    ``estimated_wait`` is how long those ahead take at that rate, in seconds (None
    while no rate is measured yet): an estimate — holders may release sooner or keep
    their whole lease. Wraps ``Place``."""

    ahead: int
    grants_per_s: float
    estimated_wait: Optional[float]

    @classmethod
    def _of(cls, ahead: int, grants_per_ks: int) -> "Place":
        """From the C ABI's numbers: the estimated wait is ahead × 1000 ÷ grants_per_ks s."""
        wait = ahead * 1000 / grants_per_ks if grants_per_ks else None
        return cls(ahead, grants_per_ks / 1000, wait)


@dataclass(frozen=True)
class PoolHolder:
    """One hold in a ``Pool``: its owner and fencing token, the permits of the key it
    holds, and the lease left on the leader's clock when it answered (seconds)."""

    owner: str
    token: int
    count: int
    lease_left: float


@dataclass(frozen=True)
class Pool:
    """A key read as a pool (``Client.pool``): its ``capacity`` (0 when nobody holds the
    key or waits for it), the permits ``in_use``, the number of ``holds`` and of
    ``waiters``, how long the first waiter has waited (``oldest_wait``, seconds), and
    the oldest ``holders`` (at most 8), oldest first. Wraps ``PoolInfo``."""

    capacity: int
    in_use: int
    holds: int
    waiters: int
    oldest_wait: float
    holders: Tuple[PoolHolder, ...]


class Lock:
    """A held lock: the server granted ``key`` to ``owner`` under fencing token ``token``
    (larger than every earlier grant's). Pass the token to every write the critical
    section makes (docs/fencing.md).

    ``release()`` gives the key back and returns the server's answer. Used as a context
    manager, the lock is released when the block ends. A Lock that is garbage-collected
    unreleased is released in the background (the Rust ``Lock``'s drop)."""

    __slots__ = ("_handle", "key", "owner", "token", "lease", "_keys", "_expires_at", "__weakref__")

    def __init__(self, handle: int) -> None:
        q = n.quick
        self._handle: Optional[int] = handle
        self.key: str = q.ticketing_lock_key(handle).decode()
        self.owner: str = q.ticketing_lock_owner(handle).decode()
        self.token: int = q.ticketing_lock_token(handle)
        #: The lease the server granted, in seconds.
        self.lease: float = q.ticketing_lock_lease_ms(handle) / 1000
        self._keys: Optional[Tuple[Permits, ...]] = None
        self._expires_at: Optional[float] = None

    @property
    def keys(self) -> Tuple[Permits, ...]:
        """Every key this lock holds, as ``Permits(key, count, capacity)``, in the order
        the hold named them: ``(Permits(key, 1, 1),)`` for an ``acquire``. Its release
        ends the hold of all of them at once. Wraps ``Lock::keys``."""
        if self._keys is None:
            handle, q = self._handle, n.quick
            key, count, capacity = c_char_p(), c_uint32(), c_uint32()
            keys = []
            for i in range(q.ticketing_lock_key_count(handle)):
                q.ticketing_lock_key_at(handle, i, byref(key), byref(count), byref(capacity), None)
                keys.append(Permits((key.value or b"").decode(), count.value, capacity.value))
            self._keys = tuple(keys)
        return self._keys

    @property
    def expires_at(self) -> float:
        """The lock's local deadline on ``time.monotonic()``'s clock: the instant before
        its request was written plus the lease (the server's lease never ends before
        it). Work under the lock must be done, or stopped, by then. Wraps
        ``Lock::deadline`` (``ticketing_lock_deadline_ns`` against ``ticketing_now_ns``)."""
        if self._expires_at is None:
            # This clock first: the deadline read against the library's later "now" can
            # only come out a hair early, never late.
            here = time.monotonic_ns()
            q = n.quick
            self._expires_at = (here + q.ticketing_lock_deadline_ns(self._handle) - q.ticketing_now_ns()) / 1e9
        return self._expires_at

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


#: The tags of a blocking hold's own queue: its outcome, and a new place in line.
_DONE, _PLACE = 1, 2


def _hold_with_places(args: Tuple[Any, ...], on_place: Callable[[Place], Any], client: "Client") -> Lock:
    """A blocking hold that hears its places on the calling thread: the hold's future
    leaves its tags in a queue of this call's own, and this thread waits on the queue's
    descriptor (GIL released), wakes for each place, calls ``on_place`` and waits again
    until the outcome. The main thread wakes every WAIT_SLICE_MS besides, so that Python
    runs its signal handlers: what one raises — or what ``on_place`` raises — cancels
    the hold by the futures' rule and goes on up."""
    if not _main_checks:
        _check_signals_in_this_thread()
    queue, error = c_void_p(), c_void_p()
    kind = n.quick.ticketing_queue_new(byref(queue), byref(error))
    if kind:
        raise from_handle(kind, error)
    try:
        future = _start_queued(args, queue.value, _PLACE)  # type: ignore[arg-type]
        try:
            n.quick.ticketing_future_set_queue(future, queue, _DONE, None)
            _wait_in_line(queue.value, future, on_place)  # type: ignore[arg-type]
        except BaseException:
            n.quick.ticketing_future_cancel(future)
            n.quick.ticketing_future_free(future)
            raise
        return _take(_HOLD, future, client)  # type: ignore[no-any-return]
    finally:
        n.quick.ticketing_queue_free(queue)


def _wait_in_line(queue: int, future: int, on_place: Callable[[Place], Any]) -> None:
    """Waits until `future`'s outcome tag comes, calling ``on_place`` for each place
    that comes before it (none with or after it: the future is ready then)."""
    poller = select.poll()
    poller.register(n.quick.ticketing_queue_fd(queue), select.POLLIN)
    slice_ms = WAIT_SLICE_MS if threading.current_thread() is threading.main_thread() else None
    tags = (c_uint64 * 4)()
    ahead, grants_per_ks = c_uint32(), c_uint32()
    while True:
        poller.poll(slice_ms)
        taken = tags[: n.quick.ticketing_queue_take(queue, tags, len(tags))]
        if _DONE in taken:
            return
        if _PLACE in taken and n.quick.ticketing_future_take_place(future, byref(ahead), byref(grants_per_ks)):
            on_place(Place._of(ahead.value, grants_per_ks.value))


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

    def hold(self, keys: Iterable[Union[str, Permits]], lease: float = 30, wait: float = 0, *,
             on_place: Optional[Callable[[Place], Any]] = None) -> Lock:
        """Holds every key of ``keys`` at once — a ``str`` is the key's exclusive lock,
        ``Permits(key, count, capacity)`` is ``count`` of the key's ``capacity`` permits —
        for ``lease`` seconds, queueing at most ``wait`` seconds: granted all at once, one
        fencing token for every key, only when no earlier request naming one of its keys
        still waits and every key has its count free; until then it holds nothing, and
        holds naming the same keys in other orders never deadlock. Returns one ``Lock``
        (``lock.keys``) whose release ends the whole hold; ``with client.hold(...) as
        lock:`` releases it at the end of the block.

        ``on_place(place)``, when given, hears the hold's place in line (a ``Place``)
        while it waits — when it queues, then at most once a second while the place
        changes — on this thread: the call wakes for it. What it raises cancels the hold
        and goes on up. Raises what ``acquire`` raises; ``InvalidArgument`` for 0 or
        more than 16 keys, a key named twice, a count outside 1..capacity, or a capacity
        other than the key's (naming both). Wraps ``Client::hold(...).acquire()``."""
        args = _hold_args(self._live(), keys, lease, wait)
        if on_place is None:
            return _wait(_HOLD, args + (NO_PLACES, None), self)  # type: ignore[no-any-return]
        if not callable(on_place):
            raise TypeError(f"on_place must be callable, not {type(on_place).__name__}")
        return _hold_with_places(args, on_place, self)

    def pool(self, key: str) -> Pool:
        """``key`` read as a pool, answered by the leader: a ``Pool`` (capacity, permits in
        use, holds, waiters, the oldest wait and holds). Wraps ``Client::pool``; blocks at
        most the request timeout (10 s)."""
        return _wait(_POOL, _query_args(self._live(), key))  # type: ignore[no-any-return]

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
