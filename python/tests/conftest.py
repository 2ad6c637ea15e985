"""Real `ticketing server` processes for the tests, on loopback only, always stopped.

The binary is $TICKETING_BIN, else `ticketing` on PATH, else the repository's
target/release/ticketing. tests/python_package.rs (run by `cargo test`) sets
TICKETING_BIN and TICKETING_LIBRARY to what that cargo run built.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

SECRET = "python-test-secret-0123456789"
PEER_SECRET = "python-test-peer-secret-0123456789"


def binary() -> str:
    configured = os.environ.get("TICKETING_BIN")
    if configured:
        return configured
    on_path = shutil.which("ticketing")
    if on_path:
        return on_path
    built = Path(__file__).resolve().parents[2] / "target" / "release" / "ticketing"
    if built.is_file():
        return str(built)
    pytest.exit("no ticketing binary: set TICKETING_BIN or run `cargo build --release`", returncode=2)
    raise AssertionError("unreachable")


def _free(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def free_port_pair() -> int:
    """A client port p, free with p + 1000 (the peer port) on 127.0.0.1..=3, below the
    kernel's ephemeral range (tests/common/ports.rs does the same for the Rust tests)."""
    rng = random.Random(os.getpid() * 7919 + time.monotonic_ns())
    for _ in range(2000):
        p = rng.randrange(12_000, 31_000)
        if all(_free(f"127.0.0.{i}", q) for i in (1, 2, 3) for q in (p, p + 1000)):
            return p
    raise RuntimeError("no free port pair on 127.0.0.1..=3")


ADDR_IN_USE = "Address already in use"
ATTEMPTS = 5


class AddressInUse(RuntimeError):
    """The server exited before it listened because its address was taken."""


class Server:
    """One `ticketing server` process; its log lines are collected as they come.
    Raises AddressInUse when it could not bind its address."""

    def __init__(self, env: Dict[str, str]) -> None:
        full = {"TICKETING_AUTH_TOKEN": SECRET, "RUST_LOG": "info"}
        full.update(env)
        self.process = subprocess.Popen(
            [binary(), "server"], env=full, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True,
        )
        self.log: List[str] = []
        self.addr: Optional[str] = None
        self._listening = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self._listening.wait(10) or self.addr is None:
            self.stop()
            log = "\n".join(self.log)
            if ADDR_IN_USE in log:
                raise AddressInUse("its address was taken; its log:\n" + log)
            raise RuntimeError("the server did not listen within 10 s; its log:\n" + log)

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.log.append(line.rstrip("\n"))
            if " listening on " in line and self.addr is None:
                self.addr = line.split(" listening on ", 1)[1].split()[0]
                self._listening.set()
        self._listening.set()

    def signal(self, sig: int) -> None:
        self.process.send_signal(sig)

    def pause(self) -> None:
        """SIGSTOP, then wait until every thread of the process is stopped: the signal
        is delivered asynchronously, and a thread still running could answer."""
        self.process.send_signal(signal.SIGSTOP)
        tasks = Path(f"/proc/{self.process.pid}/task")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            states = []
            for task in tasks.iterdir():
                try:
                    # The state follows the command name, which is in parentheses.
                    states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
                except (OSError, IndexError):
                    pass
            if states and all(state in ("T", "t") for state in states):
                return
            time.sleep(0.005)
        raise RuntimeError(f"the server did not stop: thread states {states}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()  # SIGKILL ends a stopped process too
        self.process.wait(10)


class Cluster:
    """Three nodes on 127.0.0.{1,2,3}, one port (docs/configuration.md, cluster mode),
    started again on another port pair when a node found its address taken: another
    process can bind a port between its check and the node's bind."""

    def __init__(self, n: int = 3) -> None:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                self._start(n, free_port_pair())
                return
            except AddressInUse as taken:
                if attempt == ATTEMPTS:
                    raise RuntimeError(f"a port was taken on each of {ATTEMPTS} attempts") from taken

    def _start(self, n: int, port: int) -> None:
        self.port = port
        self.addrs = [f"127.0.0.{i}:{self.port}" for i in range(1, n + 1)]
        peers = ",".join(f"{i}@{a}" for i, a in enumerate(self.addrs, 1))
        self.nodes: List[Optional[Server]] = []
        try:
            for i, addr in enumerate(self.addrs, 1):
                self.nodes.append(Server({
                    "TICKETING_LISTEN": addr,
                    "TICKETING_NODE_ID": str(i),
                    "TICKETING_CLUSTER_SELF": addr,
                    "TICKETING_CLUSTER_PEERS": peers,
                    "TICKETING_CLUSTER_STATE": "new",
                    "TICKETING_PEER_AUTH_TOKEN": PEER_SECRET,
                }))
        except Exception:
            self.stop()
            raise

    def role(self, i: int) -> str:
        """The node's role as its STATUS says (`ticketing status --node`)."""
        out = subprocess.run(
            [binary(), "status", "--node", "--addr", self.addrs[i]],
            env={"TICKETING_AUTH_TOKEN": SECRET}, capture_output=True, text=True, timeout=15,
        )
        for line in out.stdout.splitlines():
            if line.startswith("role="):
                return line[5:]
        return "?"

    def leader(self, timeout: float = 15.0) -> int:
        """Index of the node that says it leads, waiting up to ``timeout``."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for i, node in enumerate(self.nodes):
                if node is not None and self.role(i) == "leader":
                    return i
            time.sleep(0.1)
        raise RuntimeError(f"no leader within {timeout} s")

    def kill(self, i: int) -> None:
        node = self.nodes[i]
        if node is not None:
            node.stop()
            self.nodes[i] = None

    def stop(self) -> None:
        for node in self.nodes:
            if node is not None:
                node.stop()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    """A standalone node shared by a module's tests (each uses keys of its own)."""
    s = Server({"TICKETING_LISTEN": "127.0.0.1:0"})
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def own_server() -> Iterator[Server]:
    """A standalone node for one test (one that pauses or kills it)."""
    s = Server({"TICKETING_LISTEN": "127.0.0.1:0"})
    try:
        yield s
    finally:
        if s.process.poll() is None:
            s.signal(signal.SIGCONT)
        s.stop()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster(3)
    try:
        yield c
    finally:
        c.stop()
