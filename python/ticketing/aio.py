"""The asyncio client: the same client, calls that never block the event loop.

    import ticketing.aio

    client = ticketing.aio.Client(["10.0.0.1:5225"], auth_token="...", owner="box-office-7")
    async with client.lock("seat:42", lease=30, wait=5) as lock:
        await sell_seat(42, fence=lock.token)

Each call starts the native client's operation as a future (include/ticketing.h,
"Futures") and awaits it; no thread is used or kept per call — 10 000 acquires waiting
at once cost memory, not threads. The native futures of one event loop report to one
completion queue, whose file descriptor the loop watches (``loop.add_reader``): no
Python code runs on the client's own threads. Works with any loop that has
``add_reader`` (asyncio's default loop on Unix, uvloop).

Errors are the blocking API's exception classes (``ticketing.Busy``,
``ticketing.Indeterminate``, ...). A task cancelled while its call is under way gets
``asyncio.CancelledError`` and the operation is cancelled by the rule of the native
futures: an acquire not yet sent ends there; one already sent becomes indeterminate and
a grant it gets anyway is released by the client — nothing is sent again, no grant is
left held."""

from __future__ import annotations

import asyncio
import itertools
import os
import weakref
from ctypes import byref, c_uint64, c_void_p
from types import TracebackType
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Type, TypeVar, Union

from . import _native as n
from . import client as sync
from .client import Holder, ReleaseOutcome
from .errors import Error, Indeterminate, from_handle

T = TypeVar("T")

__all__ = ["Client", "Lock", "LockContext"]


class _Dispatcher:
    """One event loop's completion queue: the tags of ready futures come through its
    descriptor, and each one's asyncio future gets the outcome."""

    _TAKE = 256

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        queue, error = c_void_p(), c_void_p()
        kind = n.quick.ticketing_queue_new(byref(queue), byref(error))
        if kind:
            raise from_handle(kind, error)
        self.queue: int = queue.value  # type: ignore[assignment]
        self.loop = loop
        self.waiting: Dict[int, Tuple[int, "asyncio.Future[Any]", Callable[[int], Any]]] = {}
        self._tags = itertools.count(1)
        self._buffer = (c_uint64 * self._TAKE)()
        loop.add_reader(n.quick.ticketing_queue_fd(self.queue), self._drain)

    def start(self, future: int, read: Callable[[int], T]) -> "asyncio.Future[T]":
        """Hands the native `future` to this queue; `read` turns it into the outcome
        (and frees it) once it is ready."""
        waiter: "asyncio.Future[T]" = self.loop.create_future()
        tag = next(self._tags)
        self.waiting[tag] = (future, waiter, read)
        n.quick.ticketing_future_set_queue(future, self.queue, tag, None)
        return waiter

    def __del__(self, _free: n.Free = n.quick.ticketing_queue_free) -> None:
        # Futures that still name the queue keep it until they are ready.
        _free(self.queue)

    def _drain(self) -> None:
        buffer = self._buffer
        while True:
            count = n.quick.ticketing_queue_take(self.queue, buffer, self._TAKE)
            for i in range(count):
                future, waiter, read = self.waiting.pop(buffer[i])
                if waiter.cancelled():
                    # Its caller is gone: whatever came is dropped (a lock in it is
                    # released in the background).
                    n.quick.ticketing_future_free(future)
                    continue
                try:
                    waiter.set_result(read(future))
                except BaseException as e:  # the call's own error, for its caller
                    waiter.set_exception(e)
            if count < self._TAKE:
                return


_dispatchers: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Dispatcher]" = weakref.WeakKeyDictionary()


async def _call(operation: sync._Operation, args: Tuple[Any, ...], *context: Any) -> Any:
    """`operation` as the blocking call runs it, but awaited: its future started with
    the same arguments, and its outcome read by the same function."""
    future = sync._start(operation, args)
    return await _run(future, lambda f: sync._take(operation, f, *context))


async def _run(future: int, read: Callable[[int], T]) -> T:
    """Awaits the native `future`; cancelling the task cancels the operation."""
    loop = asyncio.get_running_loop()
    dispatcher = _dispatchers.get(loop)
    if dispatcher is None:
        dispatcher = _dispatchers[loop] = _Dispatcher(loop)
    waiter = dispatcher.start(future, read)
    try:
        return await waiter
    except asyncio.CancelledError:
        if waiter.cancelled():
            # Not drained yet: this ends the native future at once, and the dispatcher
            # frees it when its tag comes. (Drained already, the outcome is in `waiter`
            # and goes with it: a lock in it is released when it is collected.)
            n.quick.ticketing_future_cancel(future)
        raise


class Lock:
    """A held lock (``Client.acquire``): ``key``, ``owner``, fencing ``token`` (larger
    than every earlier grant's: pass it to every write), ``lease`` in seconds.
    ``await lock.release()``; ``async with lock:`` releases at the end of the block. One
    garbage-collected unreleased is released in the background."""

    __slots__ = ("_lock", "__weakref__")

    def __init__(self, lock: sync.Lock) -> None:
        self._lock = lock

    key = property(lambda self: self._lock.key, doc="The locked key.")
    owner = property(lambda self: self._lock.owner, doc="The owner it was granted to.")
    token = property(lambda self: self._lock.token, doc="The fencing token.")
    lease = property(lambda self: self._lock.lease, doc="The lease granted, in seconds.")

    @property
    def remaining(self) -> float:
        """Seconds left until the local deadline; 0 once passed or released."""
        return self._lock.remaining

    @property
    def expired(self) -> bool:
        """True once the local deadline has passed: the key may be someone else's now."""
        return self._lock.expired

    async def release(self) -> ReleaseOutcome:
        """Releases and returns the server's answer: "released", "not_holder" (the lease
        had already ended) or "released_or_expired". Raises ``ReleaseUnconfirmed``,
        ``Unavailable`` or ``ReleaseQueueFull`` when not confirmed (the lock stays
        releasable), ``InvalidArgument`` when already released. At most 5 s."""
        return await _call(sync._LOCK_RELEASE, (self._lock._handle,))  # type: ignore[no-any-return]

    async def __aenter__(self) -> "Lock":
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await _release_at_exit(self, failed=exc_type is not None)

    def __repr__(self) -> str:
        return f"aio.{self._lock!r}"


async def _release_at_exit(lock: Lock, failed: bool) -> None:
    """The end of an ``async with`` block, as the blocking ``with``'s."""
    try:
        outcome = await lock.release()
    except Error:
        if failed:
            return
        raise
    sync._check_exit_outcome(lock.key, lock.token, outcome, failed)


class LockContext:
    """``async with client.lock(key, lease, wait) as lock:`` acquires on entry and
    releases on exit, also when the block raises."""

    __slots__ = ("_client", "_key", "_lease", "_wait", "_lock")

    def __init__(self, client: "Client", key: str, lease: float, wait: float) -> None:
        self._client, self._key, self._lease, self._wait = client, key, lease, wait
        self._lock: Optional[Lock] = None

    async def __aenter__(self) -> Lock:
        self._lock = await self._client.acquire(self._key, lease=self._lease, wait=self._wait)
        return self._lock

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            await _release_at_exit(lock, failed=exc_type is not None)


class Client:
    """The asyncio face of ``ticketing.Client`` (same arguments, same connections and
    rules); share one per process. No network I/O happens here."""

    def __init__(self, addrs: Union[str, Sequence[str]], *, auth_token: Union[str, bytes],
                 owner: Optional[str] = None, tls_ca: Optional[Union[str, "os.PathLike[str]"]] = None,
                 cluster_name: Optional[str] = None) -> None:
        self._client = sync.Client(addrs, auth_token=auth_token, owner=owner, tls_ca=tls_ca,
                                   cluster_name=cluster_name)

    @classmethod
    def _of(cls, client: sync.Client) -> "Client":
        self = cls.__new__(cls)
        self._client = client
        return self

    @property
    def owner(self) -> str:
        """The owner this client acquires and releases as."""
        return self._client.owner

    def with_owner(self, owner: str) -> "Client":
        """The same client acquiring and releasing as ``owner`` (see the blocking API)."""
        return Client._of(self._client.with_owner(owner))

    async def acquire(self, key: str, lease: float = 30, wait: float = 0) -> Lock:
        """Acquires ``key`` for ``lease`` seconds (whole, 1..250), queueing at most ``wait``
        seconds (0..300). Raises what ``ticketing.Client.acquire`` raises; an
        ``Indeterminate`` resolves with ``await client.resolve(err)``."""
        args = sync._acquire_args(self._client._live(), key, lease, wait)
        return Lock(await _call(sync._ACQUIRE, args, self._client))

    def lock(self, key: str, lease: float = 30, wait: float = 5) -> LockContext:
        """``async with client.lock(key, lease=30, wait=5) as lock:``."""
        return LockContext(self, key, lease, wait)

    async def release(self, key: str, token: int) -> ReleaseOutcome:
        """Releases ``key`` held by this client's owner under ``token``."""
        return await _call(sync._RELEASE, sync._release_args(self._client._live(), key, token))  # type: ignore[no-any-return]

    async def query(self, key: str) -> Optional[Holder]:
        """Who holds ``key`` (the leader's answer): a ``Holder``, or ``None`` when free."""
        return await _call(sync._QUERY, sync._query_args(self._client._live(), key))  # type: ignore[no-any-return]

    async def resolve(self, error: Indeterminate, timeout: float = 15.0) -> Optional[Lock]:
        """Whether the indeterminate acquire ``error`` holds its key after all: the
        ``Lock``, ``None`` (not held), or ``error`` raised again (still unknown)."""
        if not isinstance(error, Indeterminate) or not error._handle:
            return None
        held = await _call(sync._RESOLVE, sync._resolve_args(self._client._live(), error, timeout), error)
        return None if held is None else Lock(held)

    async def close(self, timeout: float = 5.0) -> bool:
        """Waits (in a worker thread, at most ``timeout``) until the releases still to
        make are done, and closes this handle."""
        return await asyncio.get_running_loop().run_in_executor(None, self._client.close, timeout)

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"aio.Client(owner={self.owner!r})"
