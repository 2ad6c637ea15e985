"""The package at the edges of a process, against a real server: a lock released from an
``atexit`` handler or a thread-local destructor is released (the key is free the moment
the interpreter has exited); a panic inside the native library reaches ``logging`` and
nothing else; a failed release leaves the lock releasable. Each scenario runs in a
fresh interpreter, as an application would."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ticketing
from conftest import SECRET, Server

_PACKAGE = str(Path(ticketing.__file__).resolve().parent.parent)


def run_script(body: str, server: Server) -> subprocess.CompletedProcess[str]:
    """Runs ``body`` in a new interpreter with this package importable, ``ADDR`` and
    ``SECRET`` defined."""
    assert server.addr is not None
    prelude = f"import ticketing\nADDR = {server.addr!r}\nSECRET = {SECRET!r}\n"
    env = dict(os.environ)
    env["PYTHONPATH"] = _PACKAGE + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(body)],
        env=env, capture_output=True, text=True, timeout=60,
    )


def assert_free(server: Server, key: str) -> None:
    assert server.addr is not None
    checker = ticketing.Client([server.addr], auth_token=SECRET, owner="edge-checker")
    assert checker.query(key) is None, f"{key} is still held after the interpreter exited"


def test_a_release_from_an_atexit_handler_frees_the_key(server: Server) -> None:
    done = run_script("""
        import atexit
        client = ticketing.Client([ADDR], auth_token=SECRET, owner="atexit-office")
        lock = client.acquire("edge:atexit", lease=20, wait=5)
        atexit.register(lambda: print("atexit release:", lock.release(), flush=True))
        print("acquired", flush=True)
    """, server)
    assert done.returncode == 0, done.stderr
    assert "atexit release: released" in done.stdout, (done.stdout, done.stderr)
    assert done.stderr == ""
    assert_free(server, "edge:atexit")


def test_a_release_from_a_thread_local_destructor_frees_the_key(server: Server) -> None:
    done = run_script("""
        import threading
        client = ticketing.Client([ADDR], auth_token=SECRET, owner="local-office")
        local = threading.local()

        class Guard:
            def __init__(self, lock):
                self.lock = lock
            def __del__(self):
                print("destructor release:", self.lock.release(), flush=True)

        def work():
            local.guard = Guard(client.acquire("edge:local", lease=20, wait=5))

        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
        print("thread ended", flush=True)
    """, server)
    assert done.returncode == 0, done.stderr
    assert "destructor release: released" in done.stdout, (done.stdout, done.stderr)
    assert_free(server, "edge:local")


def test_a_panic_inside_the_library_reaches_logging_and_nothing_else(server: Server) -> None:
    panic = """
        import ticketing._native as n
        client = ticketing.Client([ADDR], auth_token=SECRET, owner="panic-office")
        assert n.blocking.ticketing_test_panic(0) == 14
        assert n.blocking.ticketing_test_panic(1) == 14
        print("panicked twice", flush=True)
    """
    quiet = run_script(panic, server)
    assert quiet.returncode == 0 and "panicked twice" in quiet.stdout, quiet.stderr
    assert quiet.stderr == "", quiet.stderr
    logged = run_script(textwrap.dedent("""
        import logging, threading
        got = threading.Event()
        class Catch(logging.Handler):
            def emit(self, record):
                if record.name == "ticketing.panic" and "a test panic" in record.getMessage():
                    print("logged:", record.levelname, record.name, flush=True)
                    got.set()
        logging.getLogger("ticketing").addHandler(Catch())
    """) + textwrap.dedent(panic) + """
assert got.wait(10), "no log record within 10 s"
""", server)
    assert logged.returncode == 0, logged.stderr
    assert "logged: ERROR ticketing.panic" in logged.stdout, (logged.stdout, logged.stderr)
    assert logged.stderr == "", logged.stderr


def test_a_release_that_failed_leaves_the_lock_releasable(own_server: Server) -> None:
    assert own_server.addr is not None
    client = ticketing.Client([own_server.addr], auth_token=SECRET, owner="retry-office")
    lock = client.acquire("edge:retry", lease=20, wait=5)
    own_server.pause()
    try:
        # Sent and unanswered, or (the client found the silent connection dead first)
        # never sent: either way not confirmed, and the lock stays releasable.
        with pytest.raises((ticketing.ReleaseUnconfirmed, ticketing.Unavailable)):
            lock.release()
    finally:
        own_server.signal(__import__("signal").SIGCONT)
    # Released now, or already by the first attempt or the client's own check: never
    # "not_holder".
    assert lock.release() in ("released", "released_or_expired")
    assert client.query("edge:retry") is None
