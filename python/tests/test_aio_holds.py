"""Holds of ticketing.aio against a real server: all or nothing, pools, places in line
as an async iterator beside the awaited lock (1,000 holds in line without a thread
each), and the lock's deadline scope, which cancels its block at the deadline and not
before. On asyncio's loop and on uvloop."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Awaitable, Callable, List

import pytest

import ticketing
import ticketing.aio
from conftest import SECRET, Server
from test_aio import LOOPS, aio_client, run
from ticketing import Permits


async def until(fact: Callable[[], Awaitable[bool]], what: str, timeout: float = 20) -> None:
    """Waits until `fact()` holds, polling; fails naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not await fact():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_a_hold_is_awaited_or_scoped_and_takes_every_key_or_none(server: Server, loop_kind: str) -> None:
    async def main() -> None:
        a, b = aio_client(server, f"aio-all-a-{loop_kind}"), aio_client(server, f"aio-all-b-{loop_kind}")
        k1, k2, stock = (f"aio-all:{loop_kind}:{x}" for x in ("seat:1", "seat:2", "stock"))
        held = await a.acquire(k2, lease=30)
        with pytest.raises(ticketing.Busy):
            await b.hold([k1, k2], lease=30, wait=0)
        assert await b.query(k1) is None
        waiting = asyncio.ensure_future(b.hold([k1, Permits(k2, 1, 1), Permits(stock, 2, 4)], lease=30, wait=20))

        async def queued() -> bool:
            return (await b.pool(k1)).waiters == 1

        await until(queued, "the hold queued")
        assert (await b.pool(k1)).in_use == 0 and (await b.pool(stock)).in_use == 0
        await held.release()
        lock = await waiting
        assert lock.keys == (Permits(k1, 1, 1), Permits(k2, 1, 1), Permits(stock, 2, 4))
        pool = await b.pool(stock)
        assert (pool.capacity, pool.in_use, pool.holds) == (4, 2, 1)
        assert pool.holders[0].token == lock.token == (await b.query(k1)).token  # type: ignore[union-attr]
        assert await lock.release() == "released"
        assert await b.query(k2) is None and (await b.pool(stock)).capacity == 0
        async with b.hold([k1, Permits(stock, 4, 4)], lease=30) as scoped:
            assert (await b.pool(stock)).in_use == 4 and scoped.token > lock.token
            with pytest.raises(ticketing.Busy):
                await a.hold([Permits(stock, 1, 4)], lease=30)
            with pytest.raises(ticketing.InvalidArgument, match="says 5.*capacity 4"):
                await a.hold([Permits(stock, 1, 5)], lease=30)
        assert await b.query(k1) is None and (await b.pool(stock)).capacity == 0

    run(loop_kind, main)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_places_come_decreasing_through_the_async_iterator(server: Server, loop_kind: str) -> None:
    async def main() -> None:
        client = aio_client(server, f"aio-place-holder-{loop_kind}")
        key = f"aio-places:{loop_kind}:seat:1"
        held = await client.acquire(key, lease=30)
        places: List[int] = []

        async def waiter(i: int) -> None:
            """Queued ahead; once granted, keeps the key until the caller heard it is
            `1 - i` ahead (a fact), then lets go."""
            lock = await client.with_owner(f"aio-place-waiter-{i}").acquire(key, lease=30, wait=30)

            async def heard() -> bool:
                return 1 - i in places

            await until(heard, f"the place {1 - i}")
            await lock.release()

        waiters = []
        for i in range(2):
            waiters.append(asyncio.ensure_future(waiter(i)))

            async def queued(n: int = i + 1) -> bool:
                return (await client.query(key)).waiters == n  # type: ignore[union-attr]

            await until(queued, f"waiter {i} queued")
        hold = client.with_owner(f"aio-place-caller-{loop_kind}").hold([key], lease=30, wait=60, places=True)
        async for place in hold.places():
            places.append(place.ahead)
            if len(places) == 1:
                await held.release()
        lock = await hold
        await asyncio.gather(*waiters)
        assert places == [2, 1, 0]
        assert threading.active_count() == threads_before
        assert await lock.release() == "released"
        # A hold made without places=True says how to get them.
        with pytest.raises(ticketing.InvalidArgument, match="places=True"):
            async for _ in client.hold([key], lease=30).places():
                pass

    threads_before = threading.active_count()
    run(loop_kind, main)


def os_threads() -> int:
    """The process's threads, Python's and the native library's alike."""
    return len(os.listdir("/proc/self/task"))


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_a_thousand_holds_in_line_with_places_make_no_thread_each(server: Server, loop_kind: str) -> None:
    async def main() -> None:
        client = aio_client(server, f"aio-line-{loop_kind}")
        key = f"aio-line:{loop_kind}:seat:1"
        held = await client.with_owner(f"aio-line-holder-{loop_kind}").acquire(key, lease=60)
        # Every path warm before counting: a hold with places on a free key, a pool read.
        async with client.hold([f"aio-line:{loop_kind}:warm"], lease=30, places=True):
            pass
        await client.pool(key)
        before = os_threads()
        told = [0] * 1000

        async def waiter(i: int) -> None:
            hold = client.hold([key], lease=30, wait=120, places=True)
            async for _ in hold.places():
                told[i] += 1
            await (await hold).release()

        waiters = [asyncio.ensure_future(waiter(i)) for i in range(1000)]

        async def lined_up() -> bool:
            return (await client.pool(key)).waiters == 1000 and all(told)

        await until(lined_up, "1,000 holds in line, each told its place", timeout=60)
        during = os_threads()
        # A few threads the native runtime may start late are allowed; one per waiter is not.
        assert during <= before + 4, f"{before} threads before, {during} with 1,000 holds waiting"
        await held.release()
        await asyncio.gather(*waiters)
        assert await client.query(key) is None

    run(loop_kind, main)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_the_deadline_scope_cancels_at_the_deadline_and_not_before(server: Server, loop_kind: str) -> None:
    async def main() -> None:
        client = aio_client(server, f"aio-deadline-{loop_kind}")
        lock = await client.hold([f"aio-deadline:{loop_kind}:seat:1"], lease=1)
        assert time.monotonic() < lock.expires_at <= time.monotonic() + 1
        # A block that ends in time is not touched, and neither is what follows it.
        async with lock.deadline_scope() as scope:
            await asyncio.sleep(0)
        assert not scope.expired
        await asyncio.sleep(0)
        # One that overruns is cancelled at the deadline, never before it.
        reached = []
        with pytest.raises(TimeoutError, match="local deadline") as ended:
            async with lock.deadline_scope() as scope:
                reached.append(time.monotonic())
                await asyncio.sleep(30)
        at = time.monotonic()
        assert scope.expired and isinstance(ended.value.__cause__, asyncio.CancelledError)
        assert reached[0] < lock.expires_at <= at
        assert lock.expired
        # A cancellation from elsewhere goes on as it is.
        later = await client.acquire(f"aio-deadline:{loop_kind}:seat:2", lease=30)

        async def work() -> None:
            async with later.deadline_scope():
                await asyncio.sleep(30)

        task = asyncio.ensure_future(work())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await later.release()

    run(loop_kind, main)
