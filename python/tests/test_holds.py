"""Counted and multi-key holds of the blocking client against a real server: all or
nothing, a stock never over its capacity, a capacity mismatch naming both numbers,
pools, places in line heard on the caller's own thread, and the lock's ``expires_at``."""

from __future__ import annotations

import threading
import time
from typing import Callable, List, Tuple

import pytest

import ticketing
from conftest import SECRET, Server
from ticketing import Permits


def client_of(server: Server, owner: str) -> ticketing.Client:
    assert server.addr is not None
    return ticketing.Client([server.addr], auth_token=SECRET, owner=owner)


def wait_for(fact: Callable[[], bool], what: str, timeout: float = 20) -> None:
    """Waits until `fact()` holds, polling; fails naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not fact():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        time.sleep(0.01)


def test_a_hold_takes_every_key_at_once_or_none(server: Server) -> None:
    a, b = client_of(server, "all-a"), client_of(server, "all-b")
    held = a.acquire("all:seat:2", lease=30)
    # One key of the two is held: nothing is taken, not even the free one.
    with pytest.raises(ticketing.Busy):
        b.hold(["all:seat:1", "all:seat:2"], lease=30, wait=0)
    assert b.query("all:seat:1") is None
    granted: List[ticketing.Lock] = []
    t = threading.Thread(target=lambda: granted.append(b.hold(["all:seat:1", "all:seat:2"], lease=30, wait=20)))
    t.start()
    wait_for(lambda: b.pool("all:seat:1").waiters == 1, "the hold queued on seat 1")
    # Waiting, it holds nothing: seat 1 is free of holders while it waits for seat 2.
    assert b.pool("all:seat:1").in_use == 0 and b.query("all:seat:1") is None
    assert held.release() == "released"
    t.join(30)
    (lock,) = granted
    assert lock.keys == (Permits("all:seat:1", 1, 1), Permits("all:seat:2", 1, 1))
    # One grant, one token for both keys.
    assert [b.query(k).token for k in ("all:seat:1", "all:seat:2")] == [lock.token] * 2  # type: ignore[union-attr]
    assert lock.token > held.token
    # Its release ends the whole hold; `with` does the same.
    assert lock.release() == "released"
    assert b.query("all:seat:1") is None and b.query("all:seat:2") is None
    with b.hold(["all:seat:3", Permits("all:stock", 3, 10)], lease=30) as lock:
        assert b.pool("all:stock").in_use == 3 and b.query("all:seat:3") is not None
    assert b.pool("all:stock").capacity == 0 and b.query("all:seat:3") is None


def test_a_counted_stock_is_never_over_its_capacity(server: Server) -> None:
    client = client_of(server, "stock-office")
    key = "stock:sale-7"
    first = client.hold([Permits(key, 2, 5)], lease=30)
    second = client.with_owner("stock-second").hold([Permits(key, 2, 5)], lease=30)
    pool = client.pool(key)
    assert (pool.capacity, pool.in_use, pool.holds, pool.waiters) == (5, 4, 2, 0)
    assert {(h.owner, h.token, h.count) for h in pool.holders} == {
        ("stock-office", first.token, 2), ("stock-second", second.token, 2)}
    assert all(0 < h.lease_left <= 30 for h in pool.holders)
    # 1 permit is free: 2 more do not fit.
    with pytest.raises(ticketing.Busy):
        client.hold([Permits(key, 2, 5)], lease=30, wait=0)
    first.release()
    second.release()

    # Twelve buyers of 2 at once: at no grant more than 5 permits are held.
    errors: List[BaseException] = []
    seen: List[int] = []
    holding = [0]
    guard = threading.Lock()

    def buy(i: int) -> None:
        try:
            lock = client.with_owner(f"stock-buyer-{i}").hold([Permits(key, 2, 5)], lease=30, wait=30)
            with guard:
                holding[0] += 2
                assert holding[0] <= 5, f"{holding[0]} permits held of 5"
            seen.append(client.pool(key).in_use)
            with guard:
                holding[0] -= 2
            assert lock.release() == "released"
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=buy, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:3]
    assert len(seen) == 12 and all(0 < s <= 5 for s in seen), seen
    assert client.pool(key).capacity == 0


def test_a_capacity_other_than_the_keys_is_refused_naming_both_numbers(server: Server) -> None:
    client = client_of(server, "capacity-office")
    lock = client.hold([Permits("capacity:stock", 1, 5)], lease=30)
    with pytest.raises(ticketing.InvalidArgument) as refused:
        client.hold([Permits("capacity:stock", 1, 6)], lease=30, wait=0)
    assert not refused.value.retryable
    assert "6" in str(refused.value) and "5" in str(refused.value)
    assert client.pool("capacity:stock").in_use == 1
    lock.release()


def test_bad_holds_are_refused_before_any_io(server: Server) -> None:
    client = client_of(server, "bad-office")
    with pytest.raises(TypeError, match="keys must be a list"):
        client.hold("bad:seat:1", lease=30)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"keys\[1\]"):
        client.hold(["bad:seat:1", 7], lease=30)  # type: ignore[list-item]
    with pytest.raises(ticketing.InvalidArgument, match=r"keys\[0\].count"):
        client.hold([Permits("bad:stock", -1, 5)], lease=30)
    # The library's own rules, passed through.
    with pytest.raises(ticketing.InvalidArgument, match="named twice"):
        client.hold(["bad:seat:1", "bad:seat:1"], lease=30)
    with pytest.raises(ticketing.InvalidArgument, match=r"1 to 16 keys \(client.hold\(keys\)\)"):
        client.hold([f"bad:seat:{i}" for i in range(17)], lease=30)
    with pytest.raises(ticketing.InvalidArgument, match="1 to 16 keys"):
        client.hold([], lease=30)
    # Named as the caller wrote it: Permits(key, count, capacity).
    with pytest.raises(ticketing.InvalidArgument) as over:
        client.hold([Permits("bad:stock", 6, 5)], lease=30)
    assert str(over.value).endswith('Permits("bad:stock", 6, 5): the count must be 1 to the capacity'), over.value
    with pytest.raises(ticketing.InvalidArgument, match="lease"):
        client.hold(["bad:seat:1"], lease=1.5)
    assert client.query("bad:seat:1") is None and client.pool("bad:stock").capacity == 0


def test_places_come_decreasing_on_the_callers_own_thread(server: Server) -> None:
    client = client_of(server, "place-holder")
    key = "places:seat:1"
    held = client.acquire(key, lease=30)
    places: List[Tuple[int, int]] = []  # (ahead, thread ident)
    errors: List[BaseException] = []

    def waiter(i: int) -> None:
        """Queued ahead of the caller; once granted, keeps the key until the caller has
        heard that it is `i` ahead of it (a fact, not a sleep), then lets go."""
        try:
            lock = client.with_owner(f"place-waiter-{i}").acquire(key, lease=30, wait=30)
            wait_for(lambda: any(ahead == 1 - i for ahead, _ in places), f"the place {1 - i}")
            lock.release()
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = []
    for i in range(2):
        threads.append(threading.Thread(target=waiter, args=(i,)))
        threads[-1].start()
        wait_for(lambda: client.query(key).waiters == i + 1, f"waiter {i} queued")  # type: ignore[union-attr]

    def release_once_queued() -> None:
        wait_for(lambda: bool(places), "the caller's first place")
        held.release()

    threading.Thread(target=release_once_queued).start()
    lock = client.with_owner("place-caller").hold(
        [key], lease=30, wait=60, on_place=lambda p: places.append((p.ahead, threading.get_ident())))
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert [ahead for ahead, _ in places] == [2, 1, 0]
    assert {ident for _, ident in places} == {threading.get_ident()}
    assert lock.release() == "released"


def test_what_on_place_raises_cancels_the_hold_and_goes_on_up(server: Server) -> None:
    client = client_of(server, "raising-office")
    key = "raising:seat:1"
    held = client.acquire(key, lease=30)

    def refuse(place: ticketing.Place) -> None:
        raise RuntimeError(f"{place.ahead} ahead: too long a line")

    with pytest.raises(RuntimeError, match="0 ahead"):
        client.with_owner("raising-waiter").hold([key], lease=30, wait=60, on_place=refuse)
    # Cancelled as the futures' rule says: its request was written, so it stays in line
    # on the server, and the grant it gets once the holder lets go is released by the
    # client — no grant is left held.
    assert client.query(key).owner == "raising-office"  # type: ignore[union-attr]
    assert held.release() == "released"
    wait_for(lambda: client.query(key) is None and client.pool(key).waiters == 0, "the key free")


def test_a_place_estimates_the_wait_from_the_grant_rate() -> None:
    assert ticketing.Place._of(3, 1500) == ticketing.Place(3, 1.5, 2.0)
    assert ticketing.Place._of(3, 0).estimated_wait is None


def test_expires_at_is_the_locks_deadline_on_time_monotonic(server: Server) -> None:
    client = client_of(server, "expiry-office")
    before = time.monotonic()
    lock = client.acquire("expiry:seat:1", lease=5)
    after = time.monotonic()
    # The deadline is the instant before the request was written plus the lease.
    assert before + 5 - 0.001 <= lock.expires_at <= after + 5
    assert abs((lock.expires_at - time.monotonic()) - lock.remaining) < 0.01
    assert lock.expires_at == lock.expires_at  # read once: the same instant
    hold = client.hold(["expiry:seat:2", Permits("expiry:stock", 1, 3)], lease=7)
    assert time.monotonic() + 6 < hold.expires_at <= time.monotonic() + 7
    lock.release()
    hold.release()
