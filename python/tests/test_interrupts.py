"""A blocking wait answers Ctrl-C at once: SIGINT during a 120 s acquire on a key held
for 120 s ends the call with ``KeyboardInterrupt`` well before either could (how soon
is not bounded here: the machine's load decides it); the key's holder is
unchanged; and once the holder lets go, the grant the server makes to the interrupted
waiter is released by its client (the process is still running: its connection did not
close for it). The same through ``with client.lock(...)``, for a SIGTERM handler
that raises, and for a hold hearing its places (``on_place=``) on the main thread."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import ticketing
from conftest import SECRET, Server

_PACKAGE = str(Path(ticketing.__file__).resolve().parent.parent)

_SCRIPT = """
import signal, sys, time
import ticketing
client = ticketing.Client([{addr!r}], auth_token={secret!r}, owner="interrupted")
assert client.query({key!r}) is not None  # connected, and the key is held
{handler}
def call():
    {call}

print("waiting", flush=True)
try:
    call()
    print("acquired?!", flush=True)
except {caught} as e:
    print("interrupted", type(e).__name__, time.monotonic(), flush=True)
sys.stdin.readline()  # stay alive (the connection stays up) until the test says so
"""


def _sigint_by_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt(server: Server, key: str, call: str, sig: int = signal.SIGINT, handler: str = "",
              caught: str = "KeyboardInterrupt") -> None:
    assert server.addr is not None
    holder = ticketing.Client([server.addr], auth_token=SECRET, owner="holder")
    # The holder's lease and the child's wait are 120 s: only the signal can end the
    # wait before half of that.
    held = holder.acquire(key, lease=120, wait=0)
    script = textwrap.dedent(_SCRIPT).format(addr=server.addr, secret=SECRET, key=key, call=call,
                                             handler=handler, caught=caught)
    env = dict(os.environ)
    env["PYTHONPATH"] = _PACKAGE + os.pathsep + env.get("PYTHONPATH", "")
    # The child is a program in a terminal's foreground: Ctrl-C is not ignored there,
    # even when this suite runs in the background of a non-interactive shell (which
    # ignores SIGINT for its children, and Python then installs no KeyboardInterrupt).
    child = subprocess.Popen([sys.executable, "-c", script], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=_sigint_by_default)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "waiting"
        # The acquire is queued on the server: a fact, not a sleep.
        deadline = time.monotonic() + 10
        while (holder.query(key) or ticketing.Holder("", 0, 0, 0)).waiters < 1:
            assert time.monotonic() < deadline, "the child's acquire never queued"
            time.sleep(0.005)
        sent = time.monotonic()
        child.send_signal(sig)
        line = child.stdout.readline().split()
        took = time.monotonic() - sent
        assert line[:2] == ["interrupted", caught.split(".")[-1]], (line, child.stderr.read() if child.poll() else "")
        print(f"{key}: ended {took * 1000:.0f} ms after the signal")
        assert took < 60, f"the wait ended {took:.2f} s after the signal"
        # The holder is unchanged; once it releases, the interrupted waiter's grant is
        # released by its still-running client.
        now = holder.query(key)
        assert now is not None and (now.owner, now.token) == ("holder", held.token)
        assert held.release() == "released"
        deadline = time.monotonic() + 10
        while holder.query(key) is not None:
            assert time.monotonic() < deadline, "the interrupted waiter's grant is still held"
            time.sleep(0.01)
        child.stdin.write("\n")
        child.stdin.flush()
        code = child.wait(10)
        assert code == 0, (code, child.stderr.read())
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_ctrl_c_ends_a_blocking_acquire_at_once_and_leaves_no_grant_held(server: Server) -> None:
    interrupt(server, "int:acquire", "client.acquire('int:acquire', lease=30, wait=120)")


def test_ctrl_c_ends_a_with_block_waiting_to_enter(server: Server) -> None:
    interrupt(server, "int:with", "with client.lock('int:with', lease=30, wait=120):\n        pass")


def test_a_sigterm_handler_that_raises_ends_the_wait(server: Server) -> None:
    handler = "signal.signal(signal.SIGTERM, lambda *a: sys.exit(3))"
    interrupt(server, "int:term", "client.acquire('int:term', lease=30, wait=120)", sig=signal.SIGTERM,
              handler=handler, caught="SystemExit")


def test_ctrl_c_ends_a_hold_hearing_its_places_on_the_main_thread(server: Server) -> None:
    # The main thread waits on the hold's own queue between its places, not in the
    # library: the signal reaches Python there.
    interrupt(server, "int:hold", "client.hold(['int:hold', 'int:hold:2'], lease=30, wait=120, on_place=lambda place: None)")
