"""A client used in a process forked after it was made fails at once, before any I/O,
with an error that says what happened and what to do — and the parent is not disturbed:
its next acquire and release work, and no lock stays held. Fork after use, fork before
first use, and ``multiprocessing`` with the fork start method (Linux's default)."""

from __future__ import annotations

import multiprocessing
import os
import select
import signal
from typing import Tuple

import pytest

import ticketing
from conftest import SECRET, Server


def client_of(server: Server, owner: str) -> ticketing.Client:
    assert server.addr is not None
    return ticketing.Client([server.addr], auth_token=SECRET, owner=owner)


# How long the parent waits for a forked child: its call fails without any I/O, so this
# is thousands of times what it takes; a child still running then is killed and the test
# fails naming it.
CHILD_DEADLINE = 60.0


def child_attempt(client: ticketing.Client, key: str) -> str:
    """In the child: the error of an acquire."""
    try:
        client.acquire(key, lease=30, wait=1)
        return "acquired?!"
    except ticketing.Error as e:
        return f"{type(e).__name__}: {e}"


def wait_for_child(pid: int) -> int:
    """The exit status of the child `pid`, waiting at most CHILD_DEADLINE; then it is
    killed and the test fails."""
    pidfd = os.pidfd_open(pid)
    try:
        exited, _, _ = select.select([pidfd], [], [], CHILD_DEADLINE)
    finally:
        os.close(pidfd)
    if not exited:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail(f"the forked child (pid {pid}) did not exit within {CHILD_DEADLINE} s: killed")
    return os.waitpid(pid, 0)[1]


def forked(client: ticketing.Client, key: str) -> str:
    """Forks; the child tries `key` and reports through a pipe."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            os.write(write, child_attempt(client, key).encode())
        finally:
            os._exit(0)
    os.close(write)
    status = wait_for_child(pid)
    with os.fdopen(read) as pipe:
        message = pipe.read()
    assert status == 0, f"the forked child failed ({status}): {message}"
    return message


def check_refused(message: str) -> None:
    """The after-fork error, which the library returns before it does anything else."""
    print(f"child: {message}")
    assert message.startswith("Unavailable: this client was created in another process before a fork"), message
    assert "create a new client in this process, with its own owner" in message


def check_parent(client: ticketing.Client, key: str) -> None:
    # The parent's next calls work, and nothing the child did is held.
    assert client.query(key) is None
    lock = client.acquire(key, lease=30, wait=1)
    assert lock.release() == "released"
    assert client.query(key) is None


def test_a_client_used_before_the_fork_fails_at_once_in_the_child(server: Server) -> None:
    client = client_of(server, "fork-after-use")
    client.acquire("fork:used", lease=30, wait=0).release()
    held = client.acquire("fork:held", lease=30, wait=0)  # held across the fork
    check_refused(forked(client, "fork:child"))
    check_parent(client, "fork:child")
    assert held.release() == "released"


def test_a_client_never_used_before_the_fork_fails_in_the_child_too(server: Server) -> None:
    client = client_of(server, "fork-before-use")
    check_refused(forked(client, "fork:fresh"))
    check_parent(client, "fork:fresh")


_POOL_CLIENT = None


def _pool_work(key: str) -> str:
    assert _POOL_CLIENT is not None
    return child_attempt(_POOL_CLIENT, key)


def test_multiprocessing_workers_get_the_error_and_the_pattern_that_works(server: Server) -> None:
    global _POOL_CLIENT
    _POOL_CLIENT = client_of(server, "fork-pool")
    _POOL_CLIENT.acquire("fork:pool-warm", lease=30, wait=0).release()
    with multiprocessing.get_context("fork").Pool(2) as pool:
        results = pool.map_async(_pool_work, ["fork:pool-1", "fork:pool-2"]).get(CHILD_DEADLINE)
    for message in results:
        check_refused(message)
    check_parent(_POOL_CLIENT, "fork:pool-1")
    check_parent(_POOL_CLIENT, "fork:pool-2")
    # What works: a client made in the worker, after the fork, with an owner of its own.
    with multiprocessing.get_context("fork").Pool(2) as pool:
        tokens = pool.map_async(_own_client_work, [(server.addr, i) for i in range(2)]).get(CHILD_DEADLINE)
    assert all(t > 0 for t in tokens)


def _own_client_work(args: Tuple[str, int]) -> int:
    addr, i = args
    client = ticketing.Client([addr], auth_token=SECRET, owner=f"fork-worker-{os.getpid()}")
    lock = client.acquire(f"fork:own-{i}", lease=30, wait=5)
    token = lock.token
    assert lock.release() == "released"
    return token
