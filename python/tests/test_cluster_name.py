"""cluster_name= against real servers: a bad name refused at construction, a client named
as its server's TICKETING_CLUSTER_NAME serving, and one named otherwise (or pointed at a
server without a name) sent nothing: Unavailable, not retryable, naming both names."""

from __future__ import annotations

import asyncio
import time
from typing import Iterator

import pytest

import ticketing
import ticketing.aio
from conftest import SECRET, Server

# A wait the refusal must not sit out: an unavailability that trying again could fix
# waits up to it for a connection; this one is said without waiting.
WAIT = 20


@pytest.fixture(scope="module")
def blue() -> Iterator[Server]:
    """A standalone node named "blue"."""
    s = Server({"TICKETING_LISTEN": "127.0.0.1:0", "TICKETING_CLUSTER_NAME": "blue"})
    try:
        yield s
    finally:
        s.stop()


def named(server: Server, name: str, owner: str) -> ticketing.Client:
    assert server.addr is not None
    return ticketing.Client([server.addr], auth_token=SECRET, owner=owner, cluster_name=name)


@pytest.mark.parametrize("make", [ticketing.Client, ticketing.aio.Client], ids=["blocking", "asyncio"])
def test_a_bad_cluster_name_is_refused_naming_the_keyword(make: type) -> None:
    for bad, says in [("", "1 to 63 bytes"), ("b" * 64, "1 to 63 bytes"), ("blue cluster", "ASCII letters"),
                      ("blü", "ASCII letters")]:
        with pytest.raises(ticketing.ConfigError) as caught:
            make(["127.0.0.1:5225"], auth_token=SECRET, cluster_name=bad)
        message = str(caught.value)
        assert "bad cluster name (cluster_name=)" in message and says in message, message
    with pytest.raises(TypeError):
        ticketing.Client(["127.0.0.1:5225"], auth_token=SECRET, cluster_name=b"blue")  # type: ignore[arg-type]


def test_a_client_named_as_its_server_acquires(blue: Server) -> None:
    client = named(blue, "blue", "blue-office")
    lock = client.acquire("named:seat:1", lease=30, wait=0)
    assert lock.token > 0
    assert client.query("named:seat:1") is not None
    assert lock.release() == "released"
    client.close()


def test_a_client_named_otherwise_is_sent_nothing_and_says_both_names(blue: Server) -> None:
    client = named(blue, "green", "green-office")
    started = time.monotonic()
    with pytest.raises(ticketing.Unavailable) as caught:
        client.acquire("named:seat:2", lease=30, wait=WAIT)
    assert time.monotonic() - started < WAIT, "the refusal waited out the wait"
    assert not caught.value.retryable
    message = str(caught.value)
    assert '"blue"' in message and '"green"' in message and "cluster_name=" in message, message
    # The client sent that node nothing: the key was never asked for.
    assert named(blue, "blue", "checker").query("named:seat:2") is None


def test_a_named_client_is_sent_nothing_by_a_server_without_a_name(server: Server) -> None:
    client = named(server, "green", "green-office")
    with pytest.raises(ticketing.Unavailable) as caught:
        client.acquire("named:seat:3", lease=30, wait=WAIT)
    assert not caught.value.retryable
    message = str(caught.value)
    assert '"green"' in message and "no cluster name" in message and "cluster_name=" in message, message


def test_the_asyncio_client_takes_the_name_too(blue: Server) -> None:
    assert blue.addr is not None
    addrs = [blue.addr]

    async def main() -> None:
        right = ticketing.aio.Client(addrs, auth_token=SECRET, owner="aio-blue", cluster_name="blue")
        lock = await right.acquire("named:aio:1", lease=30, wait=0)
        assert await lock.release() == "released"
        wrong = ticketing.aio.Client(addrs, auth_token=SECRET, owner="aio-green", cluster_name="green")
        with pytest.raises(ticketing.Unavailable) as caught:
            await wrong.acquire("named:aio:2", lease=30, wait=WAIT)
        assert not caught.value.retryable
        message = str(caught.value)
        assert '"blue"' in message and '"green"' in message and "cluster_name=" in message, message
        await right.close()
        await wrong.close()

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
