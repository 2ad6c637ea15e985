"""The Python package against real `ticketing server` processes (conftest.py)."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

import ticketing
from conftest import SECRET, Cluster, Server


def client_of(server: Server, owner: str) -> ticketing.Client:
    assert server.addr is not None
    return ticketing.Client([server.addr], auth_token=SECRET, owner=owner)


def test_the_library_has_the_abi_this_package_speaks() -> None:
    assert ticketing.ABI_VERSION == ticketing._native.quick.ticketing_version() == 3
    assert ticketing.library_version() == ticketing.__version__


def test_a_grant_is_a_lock_with_a_token_and_release_frees_the_key(server: Server) -> None:
    client = client_of(server, "grant-office")
    lock = client.acquire("grant:seat:1", lease=30, wait=0)
    assert isinstance(lock, ticketing.Lock)
    assert (lock.key, lock.owner, lock.lease) == ("grant:seat:1", "grant-office", 30.0)
    assert lock.token > 0
    assert 28 < lock.remaining <= 30 and not lock.expired
    holder = client.query("grant:seat:1")
    assert holder is not None
    assert (holder.owner, holder.token, holder.waiters) == ("grant-office", lock.token, 0)
    assert 25 < holder.lease_left <= 30
    assert lock.release() == "released"
    assert lock.remaining == 0
    assert client.query("grant:seat:1") is None
    # A second release of the same handle is refused locally; a stale token is not the holder.
    with pytest.raises(ticketing.InvalidArgument, match="already released"):
        lock.release()
    assert client.release("grant:seat:1", lock.token) == "not_holder"


def test_waiters_are_granted_in_arrival_order(server: Server) -> None:
    client = client_of(server, "fifo-holder")
    key = "fifo:seat:1"
    first = client.acquire(key, lease=30)
    order: List[int] = []
    errors: List[BaseException] = []

    def wait_in_line(i: int) -> None:
        try:
            lock = client.with_owner(f"fifo-waiter-{i}").acquire(key, lease=30, wait=20)
            order.append(i)
            lock.release()
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = []
    for i in range(6):
        t = threading.Thread(target=wait_in_line, args=(i,))
        t.start()
        threads.append(t)
        # The next one starts once this one is queued: arrival order is i's order.
        deadline = time.monotonic() + 10
        while (h := client.query(key)) is None or h.waiters < i + 1:
            assert time.monotonic() < deadline, f"waiter {i} never queued"
            time.sleep(0.01)
    assert first.release() == "released"
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert order == list(range(6))


def test_busy_and_timeout_are_definitive_errors(server: Server) -> None:
    holder = client_of(server, "busy-holder")
    other = client_of(server, "busy-other")
    lock = holder.acquire("busy:seat:1", lease=30)
    with pytest.raises(ticketing.Busy) as busy:
        other.acquire("busy:seat:1", lease=30, wait=0)
    assert busy.value.kind == "busy" and not busy.value.retryable
    assert "busy" in str(busy.value)
    start = time.monotonic()
    with pytest.raises(ticketing.Timeout) as timeout:
        other.acquire("busy:seat:1", lease=30, wait=0.3)
    took = time.monotonic() - start
    # The server's T after the wait (not the 30 s lease running out): at least the wait;
    # 20 s only against a hang.
    assert 0.25 <= took < 20, took
    assert isinstance(timeout.value, ticketing.Error) and timeout.value.kind == "timeout"
    assert holder.query("busy:seat:1").owner == "busy-holder"  # type: ignore[union-attr]
    lock.release()


def test_tokens_increase_across_grants_and_keys(server: Server) -> None:
    client = client_of(server, "token-office")
    tokens = []
    for i in range(30):
        lock = client.acquire(f"tokens:key:{i % 4}", lease=5)
        tokens.append(lock.token)
        lock.release()
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)


def test_the_context_manager_releases_when_the_block_raises(server: Server) -> None:
    client = client_of(server, "context-office")
    with pytest.raises(ValueError, match="sold out"):
        with client.lock("context:seat:1", lease=30, wait=5) as lock:
            assert client.query("context:seat:1").token == lock.token  # type: ignore[union-attr]
            raise ValueError("sold out")
    assert client.query("context:seat:1") is None
    with client.lock("context:seat:1", lease=30, wait=5) as lock:
        assert lock.token > 0
    assert client.query("context:seat:1") is None
    # A Lock is a context manager too.
    with client.acquire("context:seat:2", lease=30) as lock:
        assert client.query("context:seat:2") is not None
    assert client.query("context:seat:2") is None


def test_a_block_that_outlived_its_lease_raises_not_holder(server: Server) -> None:
    client = client_of(server, "late-office")
    with pytest.raises(ticketing.NotHolder, match="had ended"):
        with client.lock("late:seat:1", lease=1, wait=0) as lock:
            time.sleep(2)  # the server's lease (1 s from its grant) has surely run out
            assert lock.expired
    assert client.query("late:seat:1") is None


def test_a_lock_that_is_collected_unreleased_is_released_in_the_background(server: Server) -> None:
    client = client_of(server, "dropped-office")
    lock = client.acquire("dropped:seat:1", lease=30)
    del lock
    assert client.close(5) is True
    assert client_of(server, "observer").query("dropped:seat:1") is None
    with pytest.raises(ticketing.InvalidArgument, match="closed"):
        client.acquire("dropped:seat:2")


def test_sixteen_threads_share_one_client_and_wait_in_parallel(server: Server) -> None:
    client = client_of(server, "threads-office")
    # One thread waits 1.5 s inside the Rust client for a held key while 16 others make
    # pairs: they must make progress meanwhile, which they could not if the wait held
    # the GIL.
    blocker = client.with_owner("threads-blocker").acquire("threads:held", lease=30)
    waited: List[float] = []
    done_at: List[float] = []

    def wait_for_held() -> None:
        start = time.monotonic()
        with pytest.raises(ticketing.Timeout):
            client.acquire("threads:held", lease=30, wait=1.5)
        waited.append(time.monotonic() - start)
        done_at.append(time.monotonic())

    pairs = [0] * 16
    finished: List[float] = []
    errors: List[BaseException] = []
    inside: Dict[str, int] = {}
    guard = threading.Lock()

    def work(t: int) -> None:
        try:
            for i in range(60):
                key = f"threads:key:{(t + i) % 8}"
                lock = client.acquire(key, lease=10, wait=10)
                with guard:
                    assert key not in inside, f"{key} held twice"
                    inside[key] = t
                with guard:
                    del inside[key]
                assert lock.release() == "released"
                pairs[t] += 1
                finished.append(time.monotonic())
        except BaseException as e:
            errors.append(e)

    waiter = threading.Thread(target=wait_for_held)
    threads = [threading.Thread(target=work, args=(t,)) for t in range(16)]
    waiter.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    waiter.join(10)
    assert not errors, errors[:3]
    assert pairs == [60] * 16
    assert waited and 1.4 <= waited[0] < 4
    during = sum(1 for at in finished if at < done_at[0])
    assert during >= 100, f"only {during} pairs while one thread waited"
    blocker.release()


def test_a_paused_server_makes_the_acquire_indeterminate_and_resolve_finds_out(own_server: Server) -> None:
    client = client_of(own_server, "paused-office")
    assert client.query("paused:seat:1") is None  # connected
    own_server.pause()
    try:
        start = time.monotonic()
        with pytest.raises(ticketing.Indeterminate) as caught:
            client.acquire("paused:seat:1", lease=30, wait=1)
        took = time.monotonic() - start
    finally:
        own_server.signal(signal.SIGCONT)
    err = caught.value
    # A silent connection is found out by its PING within 1 s + 1.5 s: the cause says
    # which path answered; 60 s only against a hang.
    assert took < 60, took
    assert err.cause in ("connection_lost", "no_answer"), err.cause
    assert not err.retryable and "do not enter the critical section" in str(err)
    lock = err.resolve(timeout=20)
    holder = client.query("paused:seat:1")
    print(f"indeterminate ({err.cause}) after {took:.2f} s, resolved as {'held' if lock else 'not held'}")
    if lock is None:
        # Not executed (the server saw the connection close first), or already released.
        assert holder is None or holder.owner != "paused-office"
    else:
        assert holder is not None and (holder.owner, holder.token) == ("paused-office", lock.token)
        assert lock.release() == "released"
        assert client.query("paused:seat:1") is None
    # Any other error resolves as not held, at once.
    assert client.resolve(ticketing.Busy("x"), 0) is None  # type: ignore[arg-type]


def test_a_wrong_secret_is_unavailable_and_says_so(server: Server) -> None:
    assert server.addr is not None
    client = ticketing.Client([server.addr], auth_token="not-the-server-secret-0123", owner="wrong")
    with pytest.raises(ticketing.Unavailable) as caught:
        client.acquire("wrong:seat:1", lease=30, wait=0)
    # A mistake that trying again cannot fix: said at once, and not retryable.
    assert not caught.value.retryable
    assert "the server refused our auth token" in str(caught.value)


TLS_FILES = Path(__file__).resolve().parent / "tls"


def test_a_tls_mistake_names_the_tls_ca_keyword(server: Server) -> None:
    """The fix is said in this package's terms (tls_ca=), not the CLI's variable."""
    tls_server = Server({
        "TICKETING_LISTEN": "127.0.0.1:0",
        "TICKETING_TLS_CERT": str(TLS_FILES / "cert.pem"),
        "TICKETING_TLS_KEY": str(TLS_FILES / "key.pem"),
    })
    try:
        assert tls_server.addr is not None
        plain = ticketing.Client([tls_server.addr], auth_token=SECRET, owner="plain")
        with pytest.raises(ticketing.Unavailable) as caught:
            plain.acquire("tls:seat:1", lease=30, wait=0)
        message = str(caught.value)
        assert "the server speaks TLS and this client does not" in message, message
        assert "tls_ca=" in message and "TICKETING_TLS_CA" not in message, message
        # With tls_ca= the same server serves.
        secure = ticketing.Client([tls_server.addr], auth_token=SECRET, owner="secure",
                                  tls_ca=TLS_FILES / "ca.pem")
        secure.acquire("tls:seat:1", lease=30, wait=0).release()
    finally:
        tls_server.stop()
    # TLS at a plain server: leave tls_ca= out.
    assert server.addr is not None
    wrong = ticketing.Client([server.addr], auth_token=SECRET, owner="tls", tls_ca=TLS_FILES / "ca.pem")
    with pytest.raises(ticketing.Unavailable) as caught:
        wrong.acquire("tls:seat:2", lease=30, wait=0)
    message = str(caught.value)
    assert "does not speak TLS" in message and "leave out tls_ca=" in message, message
    assert "TICKETING_TLS_CA" not in message, message


def test_bad_arguments_are_refused_before_any_io(server: Server) -> None:
    client = client_of(server, "bad-office")
    start = time.monotonic()
    with pytest.raises(ticketing.InvalidArgument, match="NUL"):
        client.acquire("a\0b")
    with pytest.raises(ticketing.InvalidArgument, match="whole seconds"):
        client.acquire("bad:seat:1", lease=1.5)
    with pytest.raises(ticketing.InvalidArgument, match="whole seconds"):
        client.acquire("bad:seat:1", lease=0)
    with pytest.raises(ticketing.InvalidArgument, match="must not be negative"):
        client.acquire("bad:seat:1", wait=-1)
    with pytest.raises(ticketing.InvalidArgument, match="wait"):
        client.acquire("bad:seat:1", wait=301)
    with pytest.raises(ticketing.InvalidArgument, match="finite"):
        client.acquire("bad:seat:1", wait=float("nan"))
    with pytest.raises(ticketing.InvalidArgument):
        client.acquire("bad:seat:1", lease=10**30)
    with pytest.raises(ticketing.InvalidArgument, match="key is 0 bytes"):
        client.acquire("")
    with pytest.raises(ticketing.InvalidArgument, match="not valid Unicode"):
        client.acquire("\udc80")
    with pytest.raises(TypeError):
        client.acquire(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(ticketing.InvalidArgument, match="token"):
        client.release("bad:seat:1", -1)
    assert time.monotonic() - start < 1
    assert isinstance(ticketing.InvalidArgument("x"), ValueError)


def test_configuration_errors_name_the_problem() -> None:
    with pytest.raises(ticketing.ConfigError, match="auth token is 5 bytes"):
        ticketing.Client(["127.0.0.1:5225"], auth_token="short")
    with pytest.raises(ticketing.ConfigError, match="no server address"):
        ticketing.Client([], auth_token=SECRET)
    with pytest.raises(ticketing.ConfigError, match="not host:port"):
        ticketing.Client(["nonsense"], auth_token=SECRET)
    with pytest.raises(ticketing.ConfigError, match="bad owner"):
        ticketing.Client(["127.0.0.1:5225"], auth_token=SECRET, owner="x" * 256)
    with pytest.raises(ticketing.ConfigError, match=r"cannot read /nonexistent/ca.pem \(tls_ca=\)"):
        ticketing.Client(["127.0.0.1:5225"], auth_token=SECRET, tls_ca="/nonexistent/ca.pem")
    with pytest.raises(TypeError):
        ticketing.Client(["127.0.0.1:5225"], auth_token=12345)  # type: ignore[arg-type]
    # Binary secrets are fine.
    ticketing.Client("127.0.0.1:5225", auth_token=bytes(range(20)))


# Errors a caller may meet while the leader changes (docs/python.md): each is
# definitive or indeterminate, never a protocol or internal error.
FAILOVER_ERRORS = (
    ticketing.NotLeader,
    ticketing.Unavailable,
    ticketing.Indeterminate,
    ticketing.Timeout,
    ticketing.Busy,
    ticketing.Overloaded,
    ticketing.ReleaseUnconfirmed,
)


def test_killing_the_leader_mid_loop_never_grants_a_key_twice(cluster: Cluster) -> None:
    leader = cluster.leader()
    client = ticketing.Client(cluster.addrs, auth_token=SECRET, owner="failover")
    keys = [f"failover:seat:{i}" for i in range(3)]
    holders: Dict[str, int] = {}
    last_token: Dict[str, int] = {}
    guard = threading.Lock()
    seen: Dict[str, int] = {}
    violations: List[str] = []
    unexpected: List[BaseException] = []
    grants: List[Tuple[float, str]] = []
    stop = threading.Event()
    killed_at: List[float] = []

    def note(e: BaseException) -> None:
        with guard:
            seen[type(e).__name__] = seen.get(type(e).__name__, 0) + 1

    def work(w: int) -> None:
        me = client.with_owner(f"failover-{w}")
        i = 0
        while not stop.is_set():
            key = keys[(w + i) % len(keys)]
            i += 1
            try:
                lock = me.acquire(key, lease=5, wait=2)
            except FAILOVER_ERRORS as e:
                note(e)
                if isinstance(e, (ticketing.Unavailable, ticketing.NotLeader)):
                    time.sleep(0.05)
                continue
            except BaseException as e:
                unexpected.append(e)
                return
            with guard:
                if key in holders:
                    violations.append(f"{key} granted to {w} while {holders[key]} held it")
                if lock.token <= last_token.get(key, 0):
                    violations.append(f"{key} token {lock.token} after {last_token[key]}")
                holders[key] = w
                last_token[key] = lock.token
                grants.append((time.monotonic(), key))
            time.sleep(0.002)
            with guard:
                del holders[key]
            try:
                lock.release()
            except FAILOVER_ERRORS as e:
                note(e)
            except BaseException as e:
                unexpected.append(e)
                return

    threads = [threading.Thread(target=work, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.5)
        before = len(grants)
        killed_at.append(time.monotonic())
        cluster.kill(leader)
        # Run until 50 grants after the kill, at most 20 s.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with guard:
                after = sum(1 for at, _ in grants if at > killed_at[0])
            if after >= 50:
                break
            time.sleep(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not violations, violations
    assert not unexpected, unexpected
    assert before > 0, "no grant before the kill"
    after_kill = [at for at, _ in grants if at > killed_at[0]]
    assert len(after_kill) >= 50, f"{len(after_kill)} grants after the kill; errors {seen}"
    times = sorted(at for at, _ in grants)
    pause = max(b - a for a, b in zip(times, times[1:]) if b > killed_at[0])
    print(f"failover: {before} grants before the kill, longest pause in grants {pause:.2f} s, errors {seen}")
