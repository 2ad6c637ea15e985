"""asyncio lock clients side by side (scripts/python-aio-bench.sh runs it and writes the
table): N tasks on one event loop sharing one client, each acquire+release on its own
keys; and N acquires waiting at once on held keys, with the process's threads and RSS.

    python3 aio_bench.py pairs --system ticketing|redis --addrs A[,B,...] --tasks 1000 \
        --duration 10 --warmup 1 [--uvloop]
    python3 aio_bench.py waits --addrs A[,B,...] --waits 10000 [--uvloop]
    python3 aio_bench.py report results.jsonl

- ticketing: `ticketing.aio.Client` (`await client.acquire(key, lease=30, wait=5)`,
  `await lock.release()`);
- redis: redis-py's asyncio `Lock` (`redis.asyncio.Redis().lock(key, timeout=30,
  blocking_timeout=5)`, `await lock.acquire()`, `await lock.release()`), over a
  `BlockingConnectionPool` of 100 connections (the default pool's size; the default pool
  raises `MaxConnectionsError` when more tasks than that use it at once).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
from typing import Awaitable, Callable, List

SECRET = os.environ.get("TICKETING_AUTH_TOKEN", "")


def pair_function(system: str, addrs: List[str]) -> Callable[[str], Awaitable[None]]:
    if system == "ticketing":
        import ticketing.aio

        client = ticketing.aio.Client(addrs, auth_token=SECRET, owner=f"aiobench-{os.getpid()}")

        async def pair(key: str) -> None:
            lock = await client.acquire(key, lease=30, wait=5)
            await lock.release()

        return pair
    if system == "redis":
        import redis.asyncio

        host, port = addrs[0].rsplit(":", 1)
        # redis-py's asyncio pool holds 100 connections by default and raises
        # MaxConnectionsError past them; its blocking pool of the same size waits for
        # one instead, which is what a service with more tasks than that uses.
        pool = redis.asyncio.BlockingConnectionPool(host=host, port=int(port), max_connections=100, timeout=None)
        r = redis.asyncio.Redis(connection_pool=pool)

        async def pair(key: str) -> None:
            lock = r.lock(key, timeout=30, blocking_timeout=5)
            if not await lock.acquire():
                raise RuntimeError("not acquired")
            await lock.release()

        return pair
    raise SystemExit(f"unknown system {system}")


def status(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


async def pairs(args: argparse.Namespace) -> dict:
    pair = pair_function(args.system, args.addrs.split(","))
    for _ in range(3):
        try:
            await pair(f"aiobench:probe:{os.getpid()}")
        except Exception:
            await asyncio.sleep(0.2)
    start = time.monotonic()
    measure_from, end = start + args.warmup, start + args.warmup + args.duration
    latencies: List[float] = []
    errors = [0]
    last_error: List[str] = []

    async def task(t: int) -> None:
        i = 0
        while True:
            before = time.monotonic()
            if before >= end:
                return
            i += 1
            try:
                await pair(f"aiobench:{os.getpid()}:{t}:{i % 8}")
            except Exception as e:  # counted and shown, never silent
                errors[0] += 1
                last_error[:] = [repr(e)]
                continue
            after = time.monotonic()
            if before >= measure_from and after <= end:
                latencies.append(after - before)

    await asyncio.gather(*(task(t) for t in range(args.tasks)))
    latencies.sort()
    n = len(latencies)

    def pct(p: float) -> float:
        return round(latencies[min(n - 1, int(p * n))] * 1000, 3) if n else 0.0

    return {
        "mode": "pairs", "system": args.system, "tasks": args.tasks, "loop": loop_name(args),
        "duration": args.duration, "pairs": n, "pairs_per_s": round(n / args.duration),
        "p50_ms": pct(0.5), "p99_ms": pct(0.99), "errors": errors[0],
        "last_error": last_error[0] if last_error else None, "threads": threading.active_count(),
        "os_threads": status("Threads"), "load": os.getloadavg()[0],
    }


async def waits(args: argparse.Namespace) -> dict:
    """`--waits` acquires waiting at once on 100 keys held by another client, until
    their wait (3 s) ends; what the process holds meanwhile."""
    import ticketing
    import ticketing.aio

    addrs = args.addrs.split(",")
    holder = ticketing.aio.Client(addrs, auth_token=SECRET, owner=f"aiobench-holder-{os.getpid()}")
    client = ticketing.aio.Client(addrs, auth_token=SECRET, owner=f"aiobench-waiter-{os.getpid()}")
    keys = [f"aiobench:wait:{os.getpid()}:{k}" for k in range(100)]
    held = [await holder.acquire(k, lease=60, wait=5) for k in keys]
    before = {"os_threads": status("Threads"), "rss_kib": status("VmRSS")}
    outcomes = {"timeout": 0, "other": 0}

    async def wait(i: int) -> None:
        try:
            await client.acquire(keys[i % len(keys)], lease=30, wait=3)
            outcomes["other"] += 1
        except ticketing.Timeout:
            outcomes["timeout"] += 1
        except Exception:
            outcomes["other"] += 1

    started = time.monotonic()
    tasks = [asyncio.ensure_future(wait(i)) for i in range(args.waits)]
    # Measured once every waiter is queued on the server.
    async def queued() -> int:
        total = 0
        for k in keys:
            held = await holder.query(k)
            total += held.waiters if held else 0
        return total

    while await queued() < args.waits:
        await asyncio.sleep(0.05)
    during = {"os_threads": status("Threads"), "rss_kib": status("VmRSS"),
              "queued_after_s": round(time.monotonic() - started, 3)}
    await asyncio.gather(*tasks)
    for lock in held:
        await lock.release()
    return {"mode": "waits", "waits": args.waits, "loop": loop_name(args), "before": before, "during": during,
            "outcomes": outcomes, "load": os.getloadavg()[0]}


def loop_name(args: argparse.Namespace) -> str:
    return "uvloop" if args.uvloop else "asyncio"


def report(args: argparse.Namespace) -> None:
    rows = [json.loads(line) for line in open(args.results) if line.strip()]

    def median(values: List[float]) -> float:
        values = sorted(values)
        mid = len(values) // 2
        return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2

    print("| loop | tasks | system | pairs/s | p50 ms | p99 ms | errors | runs | load avg | ticketing ÷ this |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    pair_rows = [r for r in rows if r["mode"] == "pairs"]
    for loop in sorted({r["loop"] for r in pair_rows}):
        for tasks in sorted({r["tasks"] for r in pair_rows if r["loop"] == loop}):
            medians = {}
            for system in ("ticketing", "redis"):
                mine = [r for r in pair_rows if (r["system"], r["tasks"], r["loop"]) == (system, tasks, loop)]
                if mine:
                    medians[system] = (median([r["pairs_per_s"] for r in mine]), median([r["p50_ms"] for r in mine]),
                                       median([r["p99_ms"] for r in mine]), sum(r["errors"] for r in mine),
                                       len(mine), median([r["load"] for r in mine]))
            for system, (rate, p50, p99, errors, runs, load) in medians.items():
                ratio = "—" if system == "ticketing" or "ticketing" not in medians else \
                    f"{medians['ticketing'][0] / rate:.2f}×"
                print(f"| {loop} | {tasks} | {system} | {rate:.0f} | {p50:.3f} | {p99:.3f} | {errors} | {runs} | "
                      f"{load:.1f} | {ratio} |")
    for r in rows:
        if r["mode"] == "waits":
            print(f"\n{r['waits']} acquires waiting at once ({r['loop']}): {r['during']['os_threads']} threads "
                  f"(before: {r['before']['os_threads']}), RSS {r['during']['rss_kib'] / 1024:.1f} MiB (before: "
                  f"{r['before']['rss_kib'] / 1024:.1f} MiB), all queued {r['during']['queued_after_s']} s after the "
                  f"first started; {r['outcomes']['timeout']} timed out, {r['outcomes']['other']} other outcomes; "
                  f"load {r['load']:.1f}.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pairs")
    p.add_argument("--system", required=True, choices=["ticketing", "redis"])
    p.add_argument("--addrs", required=True)
    p.add_argument("--tasks", type=int, default=1000)
    p.add_argument("--duration", type=float, default=10)
    p.add_argument("--warmup", type=float, default=1)
    p.add_argument("--uvloop", action="store_true")
    w = sub.add_parser("waits")
    w.add_argument("--addrs", required=True)
    w.add_argument("--waits", type=int, default=10_000)
    w.add_argument("--uvloop", action="store_true")
    r = sub.add_parser("report")
    r.add_argument("results")
    args = parser.parse_args()
    if args.command == "report":
        report(args)
        return
    if args.uvloop:
        import uvloop

        uvloop.install()
    result = asyncio.run(pairs(args) if args.command == "pairs" else waits(args))
    print(json.dumps(result))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
