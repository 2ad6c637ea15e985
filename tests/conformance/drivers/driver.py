"""The conformance driver of the Python package (docs/conformance.md): commands on
standard input, one outcome line each on standard output. Blocking (a thread per
command, all sharing one ``ticketing.Client``), or with ``--aio`` a task per command on
one event loop sharing one ``ticketing.aio.Client``."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from typing import Any, Dict, List, Set, Tuple

import ticketing
import ticketing.aio

_OUT = threading.Lock()


def say(line: str) -> None:
    with _OUT:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def ms(start: float) -> int:
    return int((time.monotonic() - start) * 1000)


def failed(name: str, e: ticketing.Error, start: float) -> str:
    cause = f" cause={e.cause}" if isinstance(e, ticketing.Indeterminate) else ""
    return f"{name} {e.kind} retryable={int(e.retryable)} ms={ms(start)}{cause} : {e}"


class State:
    def __init__(self) -> None:
        self.locks: Dict[str, Any] = {}
        self.indeterminate: Dict[str, ticketing.Indeterminate] = {}
        #: The names of holds (their lines list the lock's keys).
        self.holds: Set[str] = set()


def hold_args(args: List[str]) -> Tuple[float, float, bool, List[ticketing.Permits]]:
    """`hold`'s arguments after NAME: LEASE_S WAIT_S PLACES KEY:COUNT:CAPACITY… (a key
    may hold colons: its count and capacity are the last two fields)."""
    parts = []
    for word in args[3:]:
        key, count, capacity = word.rsplit(":", 2)
        parts.append(ticketing.Permits(key, int(count), int(capacity)))
    return float(args[0]), float(args[1]), args[2] == "1", parts


def keys(name: str, lock: Any, state: State) -> str:
    """The ` keys=…` of a hold's line (nothing for an acquire's)."""
    if name not in state.holds:
        return ""
    return " keys=" + ",".join(f"{k.key}:{k.count}:{k.capacity}" for k in lock.keys)


def place(name: str, p: ticketing.Place) -> str:
    eta = -1 if p.estimated_wait is None else round(p.estimated_wait * 1000)
    return f"{name} place {p.ahead} eta_ms={eta}"


def deadline(name: str, lock: Any) -> str:
    """`watch`'s line once the idiom fired: now, and the deadline as the lock states it
    (both CLOCK_MONOTONIC, the clock of time.monotonic)."""
    return f"{name} deadline at={time.monotonic_ns()} deadline={int(lock.expires_at * 1e9)}"


def settings() -> Dict[str, Any]:
    env = os.environ
    ca = env.get("TICKETING_TLS_CA") or None
    return dict(addrs=[a for a in env.get("TICKETING_ADDRS", "").split(",") if a],
                auth_token=env.get("TICKETING_AUTH_TOKEN", ""), owner=env.get("TICKETING_OWNER", "").replace("\\0", "\0") or None, tls_ca=ca,
                cluster_name=env.get("TICKETING_CLUSTER_NAME") or None)


def blocking(words: List[str], client: ticketing.Client, state: State) -> str:
    verb, name, args = words[0], words[1], words[2:]
    start = time.monotonic()
    try:
        if verb == "acquire":
            lock = client.acquire(args[0], lease=float(args[1]), wait=float(args[2]))
            state.locks[name] = lock
            return f"{name} granted {lock.token} at={time.monotonic_ns()} ms={ms(start)}"
        if verb == "release":
            lock = state.locks.pop(name, None)
            if lock is None:
                return f"{name} invalid retryable=0 ms=0 : no lock named {name}"
            at = time.monotonic_ns()
            return f"{name} {lock.release()} at={at} ms={ms(start)}"
        if verb == "query":
            holder = client.query(args[0])
            if holder is None:
                return f"{name} free ms={ms(start)}"
            return f"{name} held {holder.owner} {holder.token} {holder.waiters} ms={ms(start)}"
        if verb == "resolve":
            err = state.indeterminate.pop(name, None)
            if err is None:
                return f"{name} invalid retryable=0 ms=0 : no indeterminate acquire named {name}"
            try:
                lock = client.resolve(err, float(args[0]))
            except ticketing.Indeterminate:
                return f"{name} resolved unknown ms={ms(start)}"
            if lock is None:
                return f"{name} resolved not_held ms={ms(start)}"
            state.locks[name] = lock
            return f"{name} resolved held {lock.token} at={time.monotonic_ns()} ms={ms(start)}{keys(name, lock, state)}"
        if verb == "hold":
            lease, wait, places, parts = hold_args(args)
            state.holds.add(name)
            on_place = (lambda p: say(place(name, p))) if places else None
            lock = client.hold(parts, lease=lease, wait=wait, on_place=on_place)
            state.locks[name] = lock
            return f"{name} granted {lock.token} at={time.monotonic_ns()} ms={ms(start)}{keys(name, lock, state)}"
        if verb == "pool":
            pool = client.pool(args[0])
            return f"{name} pool {pool.capacity} {pool.in_use} {pool.holds} {pool.waiters} ms={ms(start)}"
        if verb == "watch":
            lock = state.locks.get(name)
            if lock is None:
                return f"{name} invalid retryable=0 ms=0 : no lock named {name}"
            # The blocking client's idiom: a wait until lock.expires_at.
            while (left := lock.expires_at - time.monotonic()) > 0:
                time.sleep(left)
            return deadline(name, lock)
        return f"{name} invalid retryable=0 ms=0 : unknown command {verb}"
    except ticketing.Indeterminate as e:
        state.indeterminate[name] = e
        return failed(name, e, start)
    except ticketing.Error as e:
        return failed(name, e, start)
    except ValueError as e:  # a command's word that is not a number, a part without its fields
        return f"{name} invalid retryable=0 ms=0 : {e}"


async def asynchronous(words: List[str], client: ticketing.aio.Client, state: State) -> str:
    verb, name, args = words[0], words[1], words[2:]
    start = time.monotonic()
    try:
        if verb == "acquire":
            lock = await client.acquire(args[0], lease=float(args[1]), wait=float(args[2]))
            state.locks[name] = lock
            return f"{name} granted {lock.token} at={time.monotonic_ns()} ms={ms(start)}"
        if verb == "release":
            lock = state.locks.pop(name, None)
            if lock is None:
                return f"{name} invalid retryable=0 ms=0 : no lock named {name}"
            at = time.monotonic_ns()
            return f"{name} {await lock.release()} at={at} ms={ms(start)}"
        if verb == "query":
            holder = await client.query(args[0])
            if holder is None:
                return f"{name} free ms={ms(start)}"
            return f"{name} held {holder.owner} {holder.token} {holder.waiters} ms={ms(start)}"
        if verb == "resolve":
            err = state.indeterminate.pop(name, None)
            if err is None:
                return f"{name} invalid retryable=0 ms=0 : no indeterminate acquire named {name}"
            try:
                lock = await client.resolve(err, float(args[0]))
            except ticketing.Indeterminate:
                return f"{name} resolved unknown ms={ms(start)}"
            if lock is None:
                return f"{name} resolved not_held ms={ms(start)}"
            state.locks[name] = lock
            return f"{name} resolved held {lock.token} at={time.monotonic_ns()} ms={ms(start)}{keys(name, lock, state)}"
        if verb == "hold":
            lease, wait, places, parts = hold_args(args)
            state.holds.add(name)
            hold = client.hold(parts, lease=lease, wait=wait, places=places)
            if places:
                async for p in hold.places():
                    say(place(name, p))
            lock = await hold
            state.locks[name] = lock
            return f"{name} granted {lock.token} at={time.monotonic_ns()} ms={ms(start)}{keys(name, lock, state)}"
        if verb == "pool":
            pool = await client.pool(args[0])
            return f"{name} pool {pool.capacity} {pool.in_use} {pool.holds} {pool.waiters} ms={ms(start)}"
        if verb == "watch":
            lock = state.locks.get(name)
            if lock is None:
                return f"{name} invalid retryable=0 ms=0 : no lock named {name}"
            # asyncio's idiom: the scope that cancels its block at the deadline.
            try:
                async with lock.deadline_scope():
                    await asyncio.Event().wait()
            except TimeoutError:
                return deadline(name, lock)
            raise AssertionError("the deadline scope ended without cancelling")
        return f"{name} invalid retryable=0 ms=0 : unknown command {verb}"
    except ticketing.Indeterminate as e:
        state.indeterminate[name] = e
        return failed(name, e, start)
    except ticketing.Error as e:
        return failed(name, e, start)
    except ValueError as e:  # a command's word that is not a number, a part without its fields
        return f"{name} invalid retryable=0 ms=0 : {e}"


def main_blocking() -> None:
    try:
        client = ticketing.Client(**settings())
    except ticketing.Error as e:
        say(f"config-error : {e}")
        return
    say("ready")
    state = State()
    threads = []
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "quit":
            break
        t = threading.Thread(target=lambda w=words: say(blocking(w, client, state)))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()


async def main_aio() -> None:
    try:
        client = ticketing.aio.Client(**settings())
    except ticketing.Error as e:
        say(f"config-error : {e}")
        return
    say("ready")
    state = State()
    loop = asyncio.get_running_loop()
    lines: "asyncio.Queue[str]" = asyncio.Queue()
    def read() -> None:
        # Standard input is read on a thread of its own: the loop stays free for the calls.
        for line in sys.stdin:
            loop.call_soon_threadsafe(lines.put_nowait, line)
        loop.call_soon_threadsafe(lines.put_nowait, "quit")

    threading.Thread(target=read, daemon=True).start()
    tasks = []

    async def run(words: List[str]) -> None:
        say(await asynchronous(words, client, state))

    while True:
        words = (await lines.get()).split()
        if not words:
            continue
        if words[0] == "quit":
            break
        tasks.append(asyncio.ensure_future(run(words)))
    await asyncio.gather(*tasks)


if __name__ == "__main__":
    if "--aio" in sys.argv:
        asyncio.run(main_aio())
    else:
        main_blocking()
