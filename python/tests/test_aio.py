"""ticketing.aio against real servers: the same outcomes as the blocking API, thousands
of concurrent tasks on one client without threads, and a cancelled task that leaves no
grant held. Runs on asyncio's default loop, and on uvloop when it is installed."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any, Awaitable, Callable, List

import pytest

import ticketing
import ticketing.aio
from conftest import SECRET, Server

try:
    import uvloop  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - optional
    uvloop = None

LOOPS = ["asyncio"] + (["uvloop"] if uvloop is not None else [])
if os.environ.get("TICKETING_REQUIRE_UVLOOP") == "1" and uvloop is None:
    raise RuntimeError("TICKETING_REQUIRE_UVLOOP=1 but uvloop is not installed (pip install uvloop)")


def run(loop_kind: str, main: Callable[[], Awaitable[Any]]) -> Any:
    if loop_kind == "uvloop":
        assert uvloop is not None
        loop = uvloop.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def aio_client(server: Server, owner: str) -> ticketing.aio.Client:
    assert server.addr is not None
    return ticketing.aio.Client([server.addr], auth_token=SECRET, owner=owner)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_grant_busy_timeout_query_and_release(server: Server, loop_kind: str) -> None:
    async def main() -> None:
        a, b = aio_client(server, f"aio-a-{loop_kind}"), aio_client(server, f"aio-b-{loop_kind}")
        key = f"aio:basic:{loop_kind}"
        lock = await a.acquire(key, lease=30, wait=0)
        assert lock.token > 0 and lock.key == key and lock.owner == f"aio-a-{loop_kind}"
        holder = await b.query(key)
        assert holder is not None and (holder.owner, holder.token) == (lock.owner, lock.token)
        with pytest.raises(ticketing.Busy):
            await b.acquire(key, lease=30, wait=0)
        started = time.monotonic()
        with pytest.raises(ticketing.Timeout):
            await b.acquire(key, lease=30, wait=0.3)
        assert time.monotonic() - started < 5
        assert await lock.release() == "released"
        with pytest.raises(ticketing.InvalidArgument, match="already released"):
            await lock.release()
        assert await b.query(key) is None
        async with b.lock(key, lease=30, wait=1) as held:
            assert (await a.query(key)).token == held.token  # type: ignore[union-attr]
        assert await a.query(key) is None
        assert await a.release(key, held.token) == "not_holder"
        with pytest.raises(ticketing.InvalidArgument):
            await a.acquire(key, lease=1.5, wait=0)
        await a.close()

    run(loop_kind, main)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_the_block_is_released_when_it_raises_and_waiters_go_in_order(server: Server, loop_kind: str) -> None:
    async def main() -> None:
        client = aio_client(server, f"aio-order-{loop_kind}")
        key = f"aio:order:{loop_kind}"
        first = await client.acquire(key, lease=30, wait=0)
        order: List[int] = []

        async def waiter(i: int) -> None:
            async with client.with_owner(f"w{i}").lock(key, lease=30, wait=10):
                order.append(i)

        tasks = []
        for i in range(5):
            tasks.append(asyncio.ensure_future(waiter(i)))
            # Each is queued on the server before the next: a fact, not a sleep.
            while ((await client.query(key)) or ticketing.Holder("", 0, 0, 0)).waiters < i + 1:
                await asyncio.sleep(0.005)
        await first.release()
        await asyncio.gather(*tasks)
        assert order == [0, 1, 2, 3, 4]
        with pytest.raises(RuntimeError, match="boom"):
            async with client.lock(key, lease=30, wait=1):
                raise RuntimeError("boom")
        assert await client.query(key) is None

    run(loop_kind, main)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_a_thousand_tasks_share_one_client_without_threads(server: Server, loop_kind: str) -> None:
    async def main() -> None:
        client = aio_client(server, f"aio-many-{loop_kind}")
        tokens: List[int] = []

        async def one(i: int) -> None:
            lock = await client.acquire(f"aio:many:{loop_kind}:{i}", lease=30, wait=5)
            tokens.append(lock.token)
            assert await lock.release() == "released"

        threads_before = threading.active_count()
        await asyncio.gather(*(one(i) for i in range(1000)))
        assert len(set(tokens)) == 1000
        assert threading.active_count() == threads_before, "a Python thread per call"

    run(loop_kind, main)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_a_cancelled_waiting_task_leaves_no_grant_held(server: Server, loop_kind: str) -> None:
    async def main() -> None:
        holder_client, client = aio_client(server, "aio-holder"), aio_client(server, f"aio-cancel-{loop_kind}")
        key = f"aio:cancel:{loop_kind}"
        held = await holder_client.acquire(key, lease=30, wait=0)
        task = asyncio.ensure_future(client.acquire(key, lease=30, wait=20))
        while ((await holder_client.query(key)) or ticketing.Holder("", 0, 0, 0)).waiters < 1:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The holder is unchanged; once it lets go, the server grants the cancelled
        # waiter, and its client releases that grant.
        now = await holder_client.query(key)
        assert now is not None and now.token == held.token
        assert await held.release() == "released"
        deadline = time.monotonic() + 10
        while (await holder_client.query(key)) is not None:
            assert time.monotonic() < deadline, "the cancelled waiter's grant is still held"
            await asyncio.sleep(0.01)

    run(loop_kind, main)


def test_an_indeterminate_acquire_resolves_through_aio(own_server: Server) -> None:
    async def main() -> None:
        client = aio_client(own_server, "aio-resolve")
        assert await client.query("aio:resolve") is None
        own_server.pause()
        try:
            with pytest.raises(ticketing.Indeterminate) as caught:
                await client.acquire("aio:resolve", lease=30, wait=1)
        finally:
            own_server.signal(__import__("signal").SIGCONT)
        lock = await client.resolve(caught.value, timeout=20)
        holder = await client.query("aio:resolve")
        if lock is None:
            assert holder is None or holder.owner != "aio-resolve"
        else:
            assert holder is not None and holder.token == lock.token
            assert await lock.release() == "released"
        assert await client.resolve(ticketing.Busy("x"), 0) is None  # type: ignore[arg-type]

    run("asyncio", main)
