"""Acquire+release pairs per second through three Python lock clients, N threads
sharing one client each (scripts/python-bench.sh runs it and writes the table).

    python3 lock_bench.py run --system ticketing|redis|etcd --addrs A[,B,...] --threads 16 \
        --duration 10 --warmup 1
    python3 lock_bench.py report results.jsonl

`run` prints one JSON line: pairs, pairs/s, p50/p99 of one pair (acquire + release) in
ms, errors. Every thread takes its own keys (uncontended), with the same lease (30 s)
and wait (5 s) everywhere:

- ticketing: the Python package (`ticketing.Client`, `acquire`, `Lock.release`);
- redis: redis-py's `Lock` (`Redis.lock(key, timeout=30, blocking_timeout=5)`: SET NX
  PX, released by a Lua script);
- etcd: python-etcd3's `Lock` (`client.lock(key, ttl=30)`: a lease and a transaction,
  released by a transaction).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Callable, List

SECRET = os.environ.get("TICKETING_AUTH_TOKEN", "")


def pair_function(system: str, addrs: List[str]) -> Callable[[str], None]:
    """One acquire+release of `key` through one client shared by every thread."""
    if system == "ticketing":
        import ticketing

        client = ticketing.Client(addrs, auth_token=SECRET, owner=f"pybench-{os.getpid()}")

        def pair(key: str) -> None:
            lock = client.acquire(key, lease=30, wait=5)
            lock.release()

        return pair
    host, port = addrs[0].rsplit(":", 1)
    if system == "redis":
        import redis

        r = redis.Redis(host=host, port=int(port))
        # redis-py: Lock.acquire() blocks up to blocking_timeout.
        make, acquire_args = (lambda key: r.lock(key, timeout=30, blocking_timeout=5)), {}
    elif system == "etcd":
        import etcd3

        client = etcd3.client(host=host, port=int(port))
        make, acquire_args = (lambda key: client.lock(key, ttl=30)), {"timeout": 5}
    else:
        raise SystemExit(f"unknown system {system}")

    def pair(key: str) -> None:
        lock = make(key)
        if not lock.acquire(**acquire_args):
            raise RuntimeError("not acquired")
        lock.release()

    return pair


def run(args: argparse.Namespace) -> None:
    pair = pair_function(args.system, args.addrs.split(","))
    # Connect (and warm every path) before the clock starts.
    for _ in range(3):
        try:
            pair(f"pybench:probe:{os.getpid()}")
        except Exception:
            time.sleep(0.2)
    start = time.monotonic()
    measure_from = start + args.warmup
    end = measure_from + args.duration
    latencies: List[List[float]] = [[] for _ in range(args.threads)]
    errors = [0] * args.threads
    last_error: List[str] = []

    def work(t: int) -> None:
        i = 0
        mine = latencies[t]
        while True:
            before = time.monotonic()
            if before >= end:
                return
            try:
                pair(f"pybench:{os.getpid()}:{t}:{i % 64}")
            except Exception as e:  # counted and shown, never silent
                errors[t] += 1
                last_error[:] = [repr(e)]
                continue
            finally:
                i += 1
            after = time.monotonic()
            if before >= measure_from and after <= end:
                mine.append(after - before)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    all_latencies = sorted(x for per in latencies for x in per)
    pairs = len(all_latencies)

    def pct(p: float) -> float:
        return round(all_latencies[min(pairs - 1, int(p * pairs))] * 1000, 3) if pairs else 0.0

    print(json.dumps({
        "system": args.system,
        "threads": args.threads,
        "duration": args.duration,
        "pairs": pairs,
        "pairs_per_s": round(pairs / args.duration),
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "errors": sum(errors),
        "last_error": last_error[0] if last_error else None,
        "load": os.getloadavg()[0],
    }))


def report(args: argparse.Namespace) -> None:
    """The Markdown table of a results file: medians over the rounds per system and
    thread count, and Ticketing's pairs/s over each system's."""
    rows = [json.loads(line) for line in open(args.results) if line.strip()]

    def median(values: List[float]) -> float:
        values = sorted(values)
        mid = len(values) // 2
        return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2

    print("| threads | system | pairs/s | p50 ms | p99 ms | errors | runs | load avg | ticketing ÷ this |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for threads in sorted({r["threads"] for r in rows}):
        medians = {}
        for system in ("ticketing", "redis", "etcd"):
            mine = [r for r in rows if r["system"] == system and r["threads"] == threads]
            if mine:
                medians[system] = (
                    median([r["pairs_per_s"] for r in mine]),
                    median([r["p50_ms"] for r in mine]),
                    median([r["p99_ms"] for r in mine]),
                    sum(r["errors"] for r in mine),
                    len(mine),
                    median([r["load"] for r in mine]),
                )
        for system, (rate, p50, p99, errors, runs, load) in medians.items():
            ratio = "—" if system == "ticketing" else f"{medians['ticketing'][0] / rate:.2f}×"
            print(f"| {threads} | {system} | {rate:.0f} | {p50:.3f} | {p99:.3f} | {errors} | {runs} | "
                  f"{load:.1f} | {ratio} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--system", required=True, choices=["ticketing", "redis", "etcd"])
    r.add_argument("--addrs", required=True)
    r.add_argument("--threads", type=int, default=16)
    r.add_argument("--duration", type=float, default=10)
    r.add_argument("--warmup", type=float, default=1)
    p = sub.add_parser("report")
    p.add_argument("results")
    args = parser.parse_args()
    if args.command == "run":
        run(args)
    else:
        report(args)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
