"""Counted and multi-key holds through the Python package beside the Rust client and
redis-py (scripts/python-holds-bench.sh runs it and writes the table).

    python3 holds_bench.py run --case stock|multi --system SYSTEM --addrs A[,B,...] \
        --callers 64 --duration 10 --warmup 1 [--ticketing target/release/ticketing]
    python3 holds_bench.py waiters --addrs A[,B,...] --waiters 10000 [--uvloop]
    python3 holds_bench.py report results.jsonl

`run` prints one JSON line: pairs, pairs/s, p50/p99 of one pair (take + give back) in
ms, errors, the 1-minute load average at its end. CALLERS callers share one client
(threads on a blocking client, tasks on one event loop), lease 30 s, wait 5 s:

- stock: every caller takes 1 of the 1,000 permits of one key and gives it back;
- multi: every caller takes 4 keys of its own at once and gives them back.

SYSTEM is one of
- ticketing-threads: `ticketing.Client.hold([Permits(key, 1, 1000)])` (stock) or
  `hold([k1, k2, k3, k4])` (multi), then `lock.release()`;
- ticketing-asyncio: the same through `ticketing.aio.Client`, awaited;
- rust: `ticketing bench stock --threads 64 --permits 1000 --count 1` or `ticketing
  bench multi --threads 64 --keys-per-hold 4` (the Rust client, one client object),
  its JSON turned into this one's;
- redis-threads / redis-asyncio: redis-py (blocking, one `Redis` with its connection
  pool; asyncio, one `redis.asyncio.Redis` over a `BlockingConnectionPool` of 100).
  stock: a counting semaphore on a sorted set, the one of "Redis in Action" §6.3.2
  (`acquire_semaphore`) made atomic in one Lua script (`register_script`): drop the
  members older than the timeout (ZREMRANGEBYSCORE), then ZADD (identifier, now) if
  ZCARD < 1000; released by ZREM; a caller that finds no permit polls every 10 ms up
  to its wait. multi: redis-py `Lock`s (`lock(key, timeout=30, blocking_timeout=5)`)
  over the 4 keys taken in sorted order, released in reverse.

`waiters` (asyncio): WAITERS holds with places in line (`client.hold([key],
places=True)`) waiting on one key through one client, while another owner on the same
client holds it; once all are in line it lets go, and each waiter releases as soon as
it is granted, so the line is handed off one after another. It reports the threads of
the process (/proc/self/task) before and while they wait, places received,
hand-offs/s, and the event loop's worst stall: a task ticking every 1 ms
(`asyncio.sleep(0.001)`) records how late each tick wakes, per phase.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from typing import Any, Awaitable, Callable, Dict, List

SECRET = os.environ.get("TICKETING_AUTH_TOKEN", "")
PERMITS = 1000
KEYS_PER_HOLD = 4
LEASE, WAIT = 30, 5

# Redis in Action §6.3.2's acquire_semaphore in one script: KEYS[1] the semaphore's
# sorted set; ARGV identifier, now (s), timeout (s), limit.
SEMAPHORE_ACQUIRE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[2]) - tonumber(ARGV[3]))
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[4]) then
    redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
    return 1
end
return 0
"""
POLL = 0.01


def blocking_pair(case: str, system: str, addrs: List[str], tag: str) -> Callable[[int], None]:
    """One take + give back by caller `t`, through one client shared by every thread."""
    if system == "ticketing-threads":
        import ticketing
        from ticketing import Permits

        client = ticketing.Client(addrs, auth_token=SECRET, owner=f"pyholds-{os.getpid()}")
        if case == "stock":
            stock = [Permits(f"{tag}:stock", 1, PERMITS)]

            def pair(t: int) -> None:
                client.hold(stock, lease=LEASE, wait=WAIT).release()
        else:
            def pair(t: int) -> None:
                client.hold([f"{tag}:{t}:{j}" for j in range(KEYS_PER_HOLD)], lease=LEASE, wait=WAIT).release()
        return pair
    import redis

    host, port = addrs[0].rsplit(":", 1)
    r = redis.Redis(host=host, port=int(port))
    if case == "stock":
        acquire = r.register_script(SEMAPHORE_ACQUIRE)
        key = f"{tag}:stock"

        def pair(t: int) -> None:
            identifier = str(uuid.uuid4())
            deadline = time.monotonic() + WAIT
            while not acquire(keys=[key], args=[identifier, time.time(), LEASE, PERMITS]):
                if time.monotonic() >= deadline:
                    raise RuntimeError("no permit within the wait")
                time.sleep(POLL)
            r.zrem(key, identifier)
        return pair

    def pair(t: int) -> None:
        taken = []
        try:
            for key in sorted(f"{tag}:{t}:{j}" for j in range(KEYS_PER_HOLD)):
                lock = r.lock(key, timeout=LEASE, blocking_timeout=WAIT)
                if not lock.acquire():
                    raise RuntimeError(f"{key} not acquired")
                taken.append(lock)
        finally:
            for lock in reversed(taken):
                lock.release()
    return pair


def async_pair(case: str, system: str, addrs: List[str], tag: str) -> Callable[[int], Awaitable[None]]:
    """The asyncio twin of `blocking_pair`: one client shared by every task."""
    if system == "ticketing-asyncio":
        import ticketing.aio
        from ticketing import Permits

        client = ticketing.aio.Client(addrs, auth_token=SECRET, owner=f"pyholds-aio-{os.getpid()}")
        if case == "stock":
            stock = [Permits(f"{tag}:stock", 1, PERMITS)]

            async def pair(t: int) -> None:
                lock = await client.hold(stock, lease=LEASE, wait=WAIT)
                await lock.release()
        else:
            async def pair(t: int) -> None:
                lock = await client.hold([f"{tag}:{t}:{j}" for j in range(KEYS_PER_HOLD)], lease=LEASE, wait=WAIT)
                await lock.release()
        return pair
    import redis.asyncio

    host, port = addrs[0].rsplit(":", 1)
    # As bench/python/aio_bench.py: the default pool raises MaxConnectionsError past
    # 100 connections; the blocking pool of the same size waits for one.
    pool = redis.asyncio.BlockingConnectionPool(host=host, port=int(port), max_connections=100, timeout=None)
    r = redis.asyncio.Redis(connection_pool=pool)
    if case == "stock":
        acquire = r.register_script(SEMAPHORE_ACQUIRE)
        key = f"{tag}:stock"

        async def pair(t: int) -> None:
            identifier = str(uuid.uuid4())
            deadline = time.monotonic() + WAIT
            while not await acquire(keys=[key], args=[identifier, time.time(), LEASE, PERMITS]):
                if time.monotonic() >= deadline:
                    raise RuntimeError("no permit within the wait")
                await asyncio.sleep(POLL)
            await r.zrem(key, identifier)
        return pair

    async def pair(t: int) -> None:
        taken = []
        try:
            for key in sorted(f"{tag}:{t}:{j}" for j in range(KEYS_PER_HOLD)):
                lock = r.lock(key, timeout=LEASE, blocking_timeout=WAIT)
                if not await lock.acquire():
                    raise RuntimeError(f"{key} not acquired")
                taken.append(lock)
        finally:
            for lock in reversed(taken):
                await lock.release()
    return pair


def cpu_s() -> float:
    """CPU this process has used (user + system, every thread), in seconds."""
    t = os.times()
    return t.user + t.system


def summary(args: argparse.Namespace, latencies: List[float], errors: int, last_error: List[str],
            cpu: float, all_pairs: int) -> Dict[str, Any]:
    latencies.sort()
    n = len(latencies)

    def pct(p: float) -> float:
        return round(latencies[min(n - 1, int(p * n))] * 1000, 3) if n else 0.0

    return {"case": args.case, "system": args.system, "callers": args.callers, "duration": args.duration,
            "pairs": n, "pairs_per_s": round(n / args.duration), "p50_ms": pct(0.50), "p99_ms": pct(0.99),
            "errors": errors, "last_error": last_error[0] if last_error else None,
            "cpu_us_per_pair": round(cpu / max(all_pairs, 1) * 1e6, 1), "load": os.getloadavg()[0]}


def run_threads(args: argparse.Namespace) -> Dict[str, Any]:
    tag = f"pyholds:{args.case}:{os.getpid()}"
    pair = blocking_pair(args.case, args.system, args.addrs.split(","), tag)
    for _ in range(3):  # connect (and warm every path) before the clock starts
        try:
            pair(args.callers)
        except Exception:
            time.sleep(0.2)
    cpu_start = cpu_s()
    measure_from = time.monotonic() + args.warmup
    end = measure_from + args.duration
    latencies: List[List[float]] = [[] for _ in range(args.callers)]
    errors = [0] * args.callers
    done = [0] * args.callers
    last_error: List[str] = []

    def work(t: int) -> None:
        mine = latencies[t]
        while True:
            before = time.monotonic()
            if before >= end:
                return
            try:
                pair(t)
            except Exception as e:  # counted and shown, never silent
                errors[t] += 1
                last_error[:] = [repr(e)]
                continue
            done[t] += 1
            after = time.monotonic()
            if before >= measure_from and after <= end:
                mine.append(after - before)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(args.callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cpu = cpu_s() - cpu_start
    return summary(args, [x for per in latencies for x in per], sum(errors), last_error, cpu, sum(done))


async def run_asyncio(args: argparse.Namespace) -> Dict[str, Any]:
    tag = f"pyholds:{args.case}:{os.getpid()}"
    pair = async_pair(args.case, args.system, args.addrs.split(","), tag)
    for _ in range(3):
        try:
            await pair(args.callers)
        except Exception:
            await asyncio.sleep(0.2)
    cpu_start = cpu_s()
    measure_from = time.monotonic() + args.warmup
    end = measure_from + args.duration
    latencies: List[float] = []
    errors = [0]
    done = [0]
    last_error: List[str] = []

    async def task(t: int) -> None:
        while True:
            before = time.monotonic()
            if before >= end:
                return
            try:
                await pair(t)
            except Exception as e:  # counted and shown, never silent
                errors[0] += 1
                last_error[:] = [repr(e)]
                continue
            done[0] += 1
            after = time.monotonic()
            if before >= measure_from and after <= end:
                latencies.append(after - before)

    await asyncio.gather(*(task(t) for t in range(args.callers)))
    cpu = cpu_s() - cpu_start
    return summary(args, latencies, errors[0], last_error, cpu, done[0])


def run_rust(args: argparse.Namespace) -> Dict[str, Any]:
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    scenario = (["stock", "--permits", str(PERMITS), "--count", "1"] if args.case == "stock"
                else ["multi", "--keys-per-hold", str(KEYS_PER_HOLD)])
    out = subprocess.run(
        [args.ticketing, "bench", *scenario, "--threads", str(args.callers), "--addr", args.addrs,
         "--duration", str(args.duration), "--warmup", str(args.warmup), "--lease", str(LEASE),
         "--wait", str(WAIT * 1000), "--json", "--quiet"],
        check=True, capture_output=True, text=True, timeout=args.duration + args.warmup + 60).stdout
    bench = json.loads(out)
    errors = bench.get("errors_total", 0)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - children.ru_utime) + (after.ru_stime - children.ru_stime)
    # The bench counts the measured pairs only: the warm-up's, at the same rate, estimated.
    all_pairs = bench["pairs_per_s"] * (args.duration + args.warmup)
    return {"case": args.case, "system": "rust", "callers": args.callers, "duration": args.duration,
            "pairs": bench["pairs"], "pairs_per_s": round(bench["pairs_per_s"]),
            "p50_ms": round(bench["latency_ms"]["p50"], 3), "p99_ms": round(bench["latency_ms"]["p99"], 3),
            "errors": errors, "last_error": None, "cpu_us_per_pair": round(cpu / max(all_pairs, 1) * 1e6, 1),
            "load": os.getloadavg()[0]}


def threads_now() -> int:
    return len(os.listdir("/proc/self/task"))


def rss_kib() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


async def waiters(args: argparse.Namespace) -> Dict[str, Any]:
    import ticketing.aio

    addrs = args.addrs.split(",")
    client = ticketing.aio.Client(addrs, auth_token=SECRET, owner=f"pyholds-waiter-{os.getpid()}")
    holder = client.with_owner(f"pyholds-holder-{os.getpid()}")
    key = f"pyholds:line:{os.getpid()}"
    held = await holder.acquire(key, lease=120, wait=5)
    await client.pool(key)  # every path warm before the threads are counted
    threads_before, rss_before = threads_now(), rss_kib()

    # The ticker: the worst lateness of a 1 ms timer, per phase.
    phase = ["queue"]
    stalls: Dict[str, float] = {"queue": 0.0, "wait": 0.0, "handoff": 0.0}
    # How much of each phase's worst stall the loop's thread ran (the rest it was off
    # the CPU: other processes of the machine ran, or it waited in the kernel).
    stall_cpu: Dict[str, float] = {"queue": 0.0, "wait": 0.0, "handoff": 0.0}
    ticks: Dict[str, int] = {"queue": 0, "wait": 0, "handoff": 0}
    ticking = [True]
    # Python's own cyclic garbage collector, which stops the loop too: its worst pause
    # per phase, beside the stalls.
    gc_pauses: Dict[str, float] = {"queue": 0.0, "wait": 0.0, "handoff": 0.0}
    gc_started = [0.0]

    def on_gc(step: str, info: Dict[str, int]) -> None:
        if step == "start":
            gc_started[0] = time.monotonic()
        else:
            p = phase[0]
            gc_pauses[p] = max(gc_pauses[p], time.monotonic() - gc_started[0])

    gc.callbacks.append(on_gc)

    async def ticker() -> None:
        while ticking[0]:
            before, cpu_before = time.monotonic(), time.thread_time()
            await asyncio.sleep(0.001)
            late = time.monotonic() - before - 0.001
            p = phase[0]
            ticks[p] += 1
            if late > stalls[p]:
                stalls[p] = late
                stall_cpu[p] = time.thread_time() - cpu_before

    places = [0] * args.waiters
    first_ahead = [-1] * args.waiters
    granted = [0]
    failed: List[str] = []
    last_grant = [0.0]
    all_granted = asyncio.Event()

    async def waiter(i: int) -> None:
        try:
            hold = client.hold([key], lease=30, wait=300, places=True)
            async for place in hold.places():
                if places[i] == 0:
                    first_ahead[i] = place.ahead
                places[i] += 1
            lock = await hold
            granted[0] += 1
            last_grant[0] = time.monotonic()
            await lock.release()
        except Exception as e:  # counted and shown, never silent
            failed.append(repr(e))
        if granted[0] + len(failed) == args.waiters:
            all_granted.set()

    tick = asyncio.ensure_future(ticker())
    started = time.monotonic()
    tasks = []
    # Started 100 a loop turn: what one turn runs is the program's, not the library's.
    for i in range(args.waiters):
        tasks.append(asyncio.ensure_future(waiter(i)))
        if i % 100 == 99:
            await asyncio.sleep(0)
    while (await holder.pool(key)).waiters < args.waiters:
        await asyncio.sleep(0.05)
    queued_after = time.monotonic() - started
    phase[0] = "wait"
    threads_waiting, rss_waiting = threads_now(), rss_kib()
    await asyncio.sleep(args.hold)  # the line waits, places told, while the holder holds
    threads_waiting = max(threads_waiting, threads_now())
    phase[0] = "handoff"
    released_at = time.monotonic()
    await held.release()
    await all_granted.wait()
    handoff_s = last_grant[0] - released_at
    ticking[0] = False
    await tick
    gc.callbacks.remove(on_gc)
    await asyncio.gather(*tasks)
    places_total = sum(places)
    return {"mode": "waiters", "waiters": args.waiters, "loop": "uvloop" if args.uvloop else "asyncio",
            "threads_before": threads_before, "threads_waiting": threads_waiting,
            "rss_before_kib": rss_before, "rss_waiting_kib": rss_waiting,
            "queued_after_s": round(queued_after, 3), "granted": granted[0], "failed": len(failed),
            "last_failure": failed[-1] if failed else None,
            "handoff_s": round(handoff_s, 3), "handoffs_per_s": round(granted[0] / handoff_s) if handoff_s > 0 else 0,
            "places": places_total, "waiters_without_place": places.count(0),
            "first_ahead_max": max(first_ahead),
            "worst_stall_ms": {p: round(s * 1000, 2) for p, s in stalls.items()}, "ticks": ticks,
            "worst_stall_on_cpu_ms": {p: round(s * 1000, 2) for p, s in stall_cpu.items()},
            "worst_gc_ms": {p: round(s * 1000, 2) for p, s in gc_pauses.items()},
            "load": os.getloadavg()[0]}


SYSTEMS = ("ticketing-threads", "ticketing-asyncio", "rust", "redis-threads", "redis-asyncio")
ANCHOR = {"stock": "redis-py sorted-set semaphore (Lua)", "multi": "redis-py Locks on 4 keys, sorted"}


def report(args: argparse.Namespace) -> None:
    rows = [json.loads(line) for line in open(args.results) if line.strip()]
    pair_rows = [r for r in rows if r.get("mode") != "waiters"]

    def median(values: List[float]) -> float:
        values = sorted(values)
        mid = len(values) // 2
        return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2

    print("| case | system | pairs/s | p50 ms | p99 ms | client CPU µs/pair | errors | runs | load avg (1 min, per run) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    medians: Dict[tuple, float] = {}
    for case in dict.fromkeys(r["case"] for r in pair_rows):
        for system in SYSTEMS:
            mine = [r for r in pair_rows if (r["case"], r["system"]) == (case, system)]
            if not mine:
                continue
            rate = medians[case, system] = median([r["pairs_per_s"] for r in mine])
            name = system if not system.startswith("redis") else f"{system}: {ANCHOR[case]}"
            print(f"| {case} | {name} | {rate:,.0f} | {median([r['p50_ms'] for r in mine]):.3f} | "
                  f"{median([r['p99_ms'] for r in mine]):.3f} | {median([r['cpu_us_per_pair'] for r in mine]):.0f} | "
                  f"{sum(r['errors'] for r in mine)} | {len(mine)} | "
                  + ", ".join(f"{r['load']:.2f}" for r in mine) + " |")
    # Ratios within a round: the n-th run of each system belongs to round n.
    print()
    print("| case | ratio | per round | median | target |")
    print("|---|---|---|---:|---|")
    targets = {("stock", "ticketing-threads", "rust"): 0.8, ("stock", "ticketing-asyncio", "rust"): 0.8}
    for case in dict.fromkeys(r["case"] for r in pair_rows):
        runs = {s: [r["pairs_per_s"] for r in pair_rows if (r["case"], r["system"]) == (case, s)] for s in SYSTEMS}
        for mine in ("ticketing-threads", "ticketing-asyncio"):
            anchor = "redis-threads" if mine.endswith("threads") else "redis-asyncio"
            for other in ("rust", anchor):
                per = [a / b for a, b in zip(runs[mine], runs[other]) if b]
                if not per:
                    continue
                target = targets.get((case, mine, other))
                med = median(per)
                verdict = "—" if target is None else f"≥ {target}× ({'met' if med >= target else 'missed'})"
                print(f"| {case} | {mine} ÷ {other} | " + ", ".join(f"{x:.2f}×" for x in per)
                      + f" | **{med:.2f}×** | {verdict} |")
    for r in rows:
        if r.get("mode") != "waiters":
            continue
        s = r["worst_stall_ms"]
        worst = max(s["wait"], s["handoff"])
        print()
        print(f"| {r['waiters']:,} holds with places, one key, one client ({r['loop']}) | |")
        print("|---|---|")
        print(f"| threads (/proc/self/task) before → while waiting | {r['threads_before']} → {r['threads_waiting']} |")
        print(f"| RSS before → while waiting | {r['rss_before_kib'] / 1024:.1f} → {r['rss_waiting_kib'] / 1024:.1f} MiB |")
        print(f"| all in line after | {r['queued_after_s']} s (started 100 a loop turn) |")
        print(f"| hand-offs | {r['granted']:,} granted in {r['handoff_s']} s: **{r['handoffs_per_s']:,}/s**; "
              f"{r['failed']} failed |")
        print(f"| places received | {r['places']:,} ({r['places'] / r['waiters']:.2f} per waiter; "
              f"{r['waiters_without_place']} waiters without one; the last in line told {r['first_ahead_max']:,} ahead) |")
        g, c = r["worst_gc_ms"], r["worst_stall_on_cpu_ms"]
        print(f"| worst stall of a 1 ms timer while waiting / handed off | {s['wait']} / {s['handoff']} ms "
              f"(target ≤ 10 ms: {'met' if worst <= 10 else 'missed'}), of which the loop's thread ran "
              f"{c['wait']} / {c['handoff']} ms; Python's GC, its longest pause: {g['wait']} / {g['handoff']} ms |")
        print(f"| worst stall while the holds were started and lined up | {s['queue']} ms, of which the loop's "
              f"thread ran {c['queue']} ms; Python's GC, its longest pause: {g['queue']} ms |")
        print(f"| load average (1 min) at the end | {r['load']:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run")
    p.add_argument("--case", required=True, choices=["stock", "multi"])
    p.add_argument("--system", required=True, choices=SYSTEMS)
    p.add_argument("--addrs", required=True)
    p.add_argument("--callers", type=int, default=64)
    p.add_argument("--duration", type=float, default=10)
    p.add_argument("--warmup", type=float, default=1)
    p.add_argument("--ticketing", default="ticketing", help="the ticketing binary (system rust)")
    w = sub.add_parser("waiters")
    w.add_argument("--addrs", required=True)
    w.add_argument("--waiters", type=int, default=10_000)
    w.add_argument("--hold", type=float, default=2, help="s the holder keeps the key once all are in line")
    w.add_argument("--uvloop", action="store_true")
    r = sub.add_parser("report")
    r.add_argument("results")
    args = parser.parse_args()
    if args.command == "report":
        report(args)
        return
    if args.command == "waiters":
        if args.uvloop:
            import uvloop

            uvloop.install()
        result = asyncio.run(waiters(args))
    elif args.system == "rust":
        result = run_rust(args)
    elif args.system.endswith("asyncio"):
        result = asyncio.run(run_asyncio(args))
    else:
        result = run_threads(args)
    print(json.dumps(result))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
