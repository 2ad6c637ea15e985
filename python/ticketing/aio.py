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
import collections
import itertools
import os
import time
import weakref
from ctypes import byref, c_uint32, c_uint64, c_void_p
from types import TracebackType, coroutine
from typing import (Any, AsyncIterator, Callable, Deque, Dict, Generator, Iterable, Optional, Sequence, Tuple, Type,
                    Union)

from . import _native as n
from . import client as sync
from .client import Holder, Permits, Place, Pool, ReleaseOutcome
from .errors import Error, Indeterminate, InvalidArgument, from_handle

__all__ = ["Client", "DeadlineScope", "Hold", "Lock", "LockContext"]


class _Dispatcher:
    """One event loop's completion queue: the tags of ready futures come through its
    descriptor, and each one's asyncio future gets the outcome."""

    #: Tags handled per turn of the loop. The descriptor stays readable while tags wait,
    #: so the rest come on the next turn, after the tasks these woke have run: 10,000
    #: places told at once never hold the loop for more than a few milliseconds.
    _TAKE = 64

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        queue, error = c_void_p(), c_void_p()
        kind = n.quick.ticketing_queue_new(byref(queue), byref(error))
        if kind:
            raise from_handle(kind, error)
        self.queue: int = queue.value  # type: ignore[assignment]
        self.loop = loop
        self.waiting: Dict[int, Tuple[int, "asyncio.Future[Any]", sync._Operation, Tuple[Any, ...], int]] = {}
        #: The place tags of waiting holds: what each one's new place goes to.
        self.places: Dict[int, Callable[[], None]] = {}
        self._tags = itertools.count(1)
        self._buffer = (c_uint64 * self._TAKE)()
        loop.add_reader(n.quick.ticketing_queue_fd(self.queue), self._drain)

    def tag(self) -> int:
        """A tag no other future of this queue has."""
        return next(self._tags)

    def start(self, future: int, operation: sync._Operation, context: Tuple[Any, ...] = (),
              place_tag: int = 0) -> "asyncio.Future[Any]":
        """Hands the native `future` of `operation` to this queue; once it is ready its
        outcome is read (and the future freed) as ``sync._take(operation, future,
        *context)`` reads it. `place_tag`: the tag its places come with (a hold started
        with it), forgotten with the future."""
        waiter: "asyncio.Future[Any]" = self.loop.create_future()
        tag = next(self._tags)
        self.waiting[tag] = (future, waiter, operation, context, place_tag)
        _set_queue(future, self.queue, tag, None)
        return waiter

    def __del__(self, _free: n.Free = n.quick.ticketing_queue_free) -> None:
        # Futures that still name the queue keep it until they are ready.
        _free(self.queue)

    def _drain(self) -> None:
        """At most ``_TAKE`` tags, one turn's share (the loop calls again while more wait)."""
        buffer, places, waiting, take = self._buffer, self.places, self.waiting, sync._take
        count = n.quick.ticketing_queue_take(self.queue, buffer, self._TAKE)
        for tag in buffer[:count]:
            if places:
                on_place = places.get(tag)
                if on_place is not None:
                    on_place()
                    continue
            entry = waiting.pop(tag, None)
            if entry is None:
                continue  # the place tag of a hold that is over
            future, waiter, operation, context, place_tag = entry
            if place_tag:
                # Its places end here, before the future is freed.
                places.pop(place_tag, None)
            if waiter.cancelled():
                # Its caller is gone: whatever came is dropped (a lock in it is
                # released in the background).
                n.quick.ticketing_future_free(future)
                continue
            try:
                waiter.set_result(take(operation, future, *context))
            except BaseException as e:  # the call's own error, for its caller
                waiter.set_exception(e)


_set_queue = n.quick.ticketing_future_set_queue
_dispatchers: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Dispatcher]" = weakref.WeakKeyDictionary()
#: The dispatcher found last (one of `_dispatchers`): its loop is nearly always the
#: running one, found again without a look-up of the weak dictionary.
_last: Optional[_Dispatcher] = None


async def _call(operation: sync._Operation, args: Tuple[Any, ...], *context: Any) -> Any:
    """`operation` as the blocking call runs it, but awaited: its future started with
    the same arguments, and its outcome read by the same function. Cancelling the task
    cancels the operation."""
    future = sync._start(operation, args)
    return await _outcome(_dispatcher().start(future, operation, context), future)


@coroutine
def _outcome(waiter: "asyncio.Future[Any]", future: int) -> Generator[Any, None, Any]:
    """Awaits `waiter`, the outcome of the native `future` (``await`` in a coroutine,
    ``yield from`` in an ``__await__``, no coroutine object of its own); cancelling the
    task cancels the operation."""
    try:
        return (yield from waiter)
    except asyncio.CancelledError:
        if waiter.cancelled():
            # Not drained yet: this ends the native future at once, and the dispatcher
            # frees it when its tag comes. (Drained already, the outcome is in `waiter`
            # and goes with it: a lock in it is released when it is collected.)
            n.quick.ticketing_future_cancel(future)
        raise


def _dispatcher() -> _Dispatcher:
    """The running loop's completion queue."""
    global _last
    loop = asyncio.get_running_loop()
    dispatcher = _last
    if dispatcher is not None and dispatcher.loop is loop:
        return dispatcher
    dispatcher = _dispatchers.get(loop)
    if dispatcher is None:
        dispatcher = _dispatchers[loop] = _Dispatcher(loop)
    _last = dispatcher
    return dispatcher


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
    keys = property(lambda self: self._lock.keys,
                    doc="Every key it holds, as ``Permits(key, count, capacity)`` (see the blocking ``Lock``).")
    expires_at = property(lambda self: self._lock.expires_at,
                          doc="The local deadline on ``time.monotonic()``'s clock (see the blocking ``Lock``).")

    def deadline_scope(self) -> "DeadlineScope":
        """``async with lock.deadline_scope():`` — the block is cancelled at the lock's
        local deadline (``expires_at``), never before it, and the scope then raises
        ``TimeoutError`` naming the key: work that overruns the lease stops there
        instead of learning it from the store's rejection. A block that ends in time
        is not touched. Like ``asyncio.timeout_at``, on the loop's own clock."""
        return DeadlineScope(self)

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


class DeadlineScope:
    """``async with lock.deadline_scope():`` (see ``Lock.deadline_scope``). The task is
    cancelled at ``lock.expires_at`` and the ``CancelledError`` that ends the block
    becomes a ``TimeoutError``; a cancellation from elsewhere goes on as it is."""

    __slots__ = ("_lock", "_task", "_timer", "_fired", "_cancelling")

    def __init__(self, lock: Lock) -> None:
        self._lock = lock
        self._task: Optional["asyncio.Task[Any]"] = None
        self._timer: Optional[asyncio.TimerHandle] = None
        self._fired = False
        self._cancelling = 0

    @property
    def expired(self) -> bool:
        """True once the scope cancelled its block at the deadline."""
        return self._fired

    async def __aenter__(self) -> "DeadlineScope":
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("lock.deadline_scope() is used inside a task")
        self._task = task
        cancelling = getattr(task, "cancelling", None)  # Python 3.11 and newer
        self._cancelling = cancelling() if cancelling else 0
        self._arm()
        return self

    def _arm(self) -> None:
        loop = asyncio.get_running_loop()
        self._timer = loop.call_at(loop.time() + (self._lock.expires_at - time.monotonic()), self._fire)

    def _fire(self) -> None:
        if time.monotonic() < self._lock.expires_at:
            # A loop's timer may run a hair early (uvloop's clock counts milliseconds):
            # never before the deadline.
            self._arm()
            return
        self._fired = True
        assert self._task is not None
        self._task.cancel()

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if not self._fired:
            return
        uncancel = getattr(self._task, "uncancel", None)  # Python 3.11 and newer
        if uncancel is not None and uncancel() > self._cancelling:
            return  # cancelled from elsewhere too: that goes on
        if exc_type is asyncio.CancelledError:
            lock = self._lock
            raise TimeoutError(
                f"the lease on {lock.key!r} (token {lock.token}) reached its local deadline: "
                "lock.deadline_scope() cancelled the block"
            ) from exc


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


#: The place callback and its context a hold without places is started with.
_NO_CALLBACK = (sync.NO_PLACES, None)
#: The places of a hold made without them: always none.
_NO_PLACES: Deque[Place] = collections.deque(maxlen=0)


class Hold:
    """A hold of ``Client.hold``, started when first awaited or iterated: ``await hold``
    is its ``Lock``; ``async with hold as lock:`` releases it at the end of the block;
    ``async for place in hold.places():`` (a hold made with ``places=True``) yields its
    places in line while it waits, and ends when it is granted or fails. Cancelling the
    task that awaits it cancels the hold (no grant is left held)."""

    __slots__ = ("_client", "_args", "_want_places", "_waiter", "_future", "_places", "_news", "_lock",
                 "_held")

    def __init__(self, client: sync.Client, args: Tuple[Any, ...], places: bool) -> None:
        self._client, self._args, self._want_places = client, args, places
        self._waiter: "Optional[asyncio.Future[sync.Lock]]" = None
        self._future = 0
        self._places: Deque[Place] = collections.deque() if places else _NO_PLACES
        self._news: Optional[asyncio.Event] = None
        self._lock: Optional[Lock] = None
        self._held: Optional[Lock] = None

    def _start(self) -> "asyncio.Future[sync.Lock]":
        if self._waiter is not None:
            return self._waiter
        dispatcher = _dispatcher()
        context = (self._client,)
        if self._want_places:
            self._news = asyncio.Event()
            place_tag = dispatcher.tag()
            self._future = future = sync._start_queued(self._args, dispatcher.queue, place_tag)
            dispatcher.places[place_tag] = self._new_place
            self._waiter = dispatcher.start(future, sync._HOLD, context, place_tag)
            news = self._news
            self._waiter.add_done_callback(lambda _: news.set())
        else:
            self._future = future = sync._start(sync._HOLD, self._args + _NO_CALLBACK)
            self._waiter = dispatcher.start(future, sync._HOLD, context)
        return self._waiter

    def _new_place(self) -> None:
        """The hold's place tag came (on the loop, while the future is alive)."""
        ahead, grants_per_ks = c_uint32(), c_uint32()
        if n.quick.ticketing_future_take_place(self._future, byref(ahead), byref(grants_per_ks)):
            self._places.append(Place._of(ahead.value, grants_per_ks.value))
            assert self._news is not None
            self._news.set()

    async def places(self) -> AsyncIterator[Place]:
        """The hold's places in line (``Place``: ``ahead``, ``estimated_wait``), as they
        come — when it queues, then at most once a second while the place changes —
        until it is granted or fails (then ``await hold`` says which). Starts the hold."""
        if not self._want_places:
            raise InvalidArgument("hold.places() needs a hold made with client.hold(..., places=True)")
        waiter = self._start()
        news = self._news
        assert news is not None
        while True:
            while self._places:
                yield self._places.popleft()
            if waiter.done():
                return
            news.clear()
            await news.wait()

    def __await__(self) -> Generator[Any, None, Lock]:
        if self._lock is None:
            held = yield from _outcome(self._start(), self._future)
            if self._lock is None:  # (another task awaiting the same hold may have set it)
                self._lock = Lock(held)
        return self._lock

    async def __aenter__(self) -> Lock:
        self._held = await self
        return self._held

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        lock, self._held = self._held, None
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

    def hold(self, keys: Iterable[Union[str, Permits]], lease: float = 30, wait: float = 0, *,
             places: bool = False) -> Hold:
        """Holds every key of ``keys`` at once (a ``str``: the key's exclusive lock;
        ``Permits(key, count, capacity)``: ``count`` of its ``capacity`` permits), as
        ``ticketing.Client.hold`` does: ``lock = await client.hold(...)``, or ``async
        with client.hold(...) as lock:``. ``places=True`` asks for the hold's places in
        line, read with ``async for place in hold.places():`` beside awaiting it."""
        return Hold(self._client, sync._hold_args(self._client._live(), keys, lease, wait), bool(places))

    async def pool(self, key: str) -> Pool:
        """``key`` read as a pool (the leader's answer): a ``Pool``."""
        return await _call(sync._POOL, sync._query_args(self._client._live(), key))  # type: ignore[no-any-return]

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
