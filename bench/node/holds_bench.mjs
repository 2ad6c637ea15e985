// holds_bench.mjs: one run of scripts/node-holds-bench.sh — counted and multi-key holds in
// one Node process, LOOPS concurrent async loops sharing one client, or 10,000 holds
// waiting in line on one key; prints one JSON line.
//
//   node bench/node/holds_bench.mjs stock ticketing 127.0.0.1:19325,... 64 5 1
//   node bench/node/holds_bench.mjs stock redis-semaphore 127.0.0.1:19579 64 5 1
//   node bench/node/holds_bench.mjs multi ticketing 127.0.0.1:19325,... 64 5 1
//   node bench/node/holds_bench.mjs multi redlock 127.0.0.1:19579 64 5 1
//   node bench/node/holds_bench.mjs waiters ticketing 127.0.0.1:19325,... 10000
//
// stock: every loop takes 1 of the 1,000 permits of one key and gives it back at once —
//   ticketing: client.hold([{ key, count: 1, capacity: 1000 }], { lease: 30 });
//   redis-semaphore: its Semaphore (a Lua script over a sorted set, one EVAL to acquire
//   and one to release) of limit 1000 over one ioredis connection, lockTimeout 30 s.
// multi: every loop takes 4 keys of its own at once (sorted) and releases them —
//   ticketing: client.hold([k0, k1, k2, k3], { lease: 30 });
//   redlock: redlock 5's multi-resource acquire of the 4 keys (one Lua script setting
//   them all or none), 30 s TTL, no retries, over one ioredis connection.
// Both: pairs/s and p50/p99 of a pair in ms, errors.
// waiters: 10,000 holds of one client wait on one key behind a holder, each with onPlace;
//   the holder releases and every hold, once granted, releases at once: the key is
//   handed down the line. Reports hand-offs/s, the places heard, the process's threads
//   (/proc/self/task) before and while they wait, and the event loop's worst lateness
//   on a 1 ms timer while they queue, wait and are handed off (and how much of
//   that late interval the main thread ran, and waited for a CPU: /proc's schedstat).
// Environment: TICKETING_AUTH_TOKEN for ticketing. The nodes need TICKETING_MAX_WAITERS
// above N for waiters.
import fs from "node:fs";
import os from "node:os";

import Redis from "ioredis";
import Redlock from "redlock";
import { Semaphore } from "redis-semaphore";
import { Client } from "ticketing";

const [workload, system, addrs, ...rest] = process.argv.slice(2);
const load1 = () => os.loadavg()[0];
const ticketingClient = () => new Client({ addrs: addrs.split(","), authToken: process.env.TICKETING_AUTH_TOKEN ?? "" });

async function redisClient() {
  const [host, port] = addrs.split(":");
  const redis = new Redis({ host, port: Number(port), lazyConnect: true });
  await redis.connect();
  return redis;
}

/** The acquire+release pair of `workload` on `system`, for loop `i`. */
async function pairs() {
  const prefix = `node-holds:${process.pid}`;
  if (workload === "stock" && system === "ticketing") {
    const client = ticketingClient();
    const stock = [{ key: `${prefix}:stock`, count: 1, capacity: 1000 }];
    return {
      pair: async () => {
        const lock = await client.hold(stock, { lease: 30, wait: 0 });
        await lock.release();
      },
      close: () => client.close(),
    };
  }
  if (workload === "stock" && system === "redis-semaphore") {
    const redis = await redisClient();
    return {
      pair: async () => {
        const permit = new Semaphore(redis, `${prefix}:stock`, 1000, { lockTimeout: 30_000, acquireAttemptsLimit: 1 });
        await permit.acquire();
        await permit.release();
      },
      close: () => redis.quit(),
    };
  }
  if (workload === "multi" && system === "ticketing") {
    const client = ticketingClient();
    return {
      pair: async (i) => {
        const lock = await client.hold(
          [0, 1, 2, 3].map((m) => `${prefix}:w${i}:m${m}`),
          { lease: 30, wait: 0 },
        );
        await lock.release();
      },
      close: () => client.close(),
    };
  }
  if (workload === "multi" && system === "redlock") {
    const redis = await redisClient();
    const redlock = new Redlock([redis], { retryCount: 0 });
    return {
      pair: async (i) => {
        const lock = await redlock.acquire([0, 1, 2, 3].map((m) => `${prefix}:w${i}:m${m}`).sort(), 30_000);
        await lock.release();
      },
      close: () => redis.quit(),
    };
  }
  throw new Error(`unknown workload and system ${workload} ${system}: stock ticketing|redis-semaphore, multi ticketing|redlock`);
}

async function pairRun() {
  const [loopsArg = "64", durationArg = "5", warmupArg = "1"] = rest;
  const loops = Number(loopsArg);
  const duration = Number(durationArg) * 1000;
  const warmup = Number(warmupArg) * 1000;
  const { pair, close } = await pairs();
  const latencies = [];
  let errors = 0;
  let firstError = "";
  const measureFrom = performance.now() + warmup;
  const end = measureFrom + duration;
  async function loop(i) {
    for (;;) {
      const start = performance.now();
      if (start >= end) return;
      try {
        await pair(i);
      } catch (e) {
        errors++;
        firstError ||= String(e?.message ?? e);
        continue;
      }
      if (start >= measureFrom) latencies.push(performance.now() - start);
    }
  }
  await Promise.all(Array.from({ length: loops }, (_, i) => loop(i)));
  await close();
  latencies.sort((a, b) => a - b);
  const at = (q) => (latencies.length ? latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] : 0);
  return {
    workload,
    system,
    loops,
    pairs: latencies.length,
    seconds: duration / 1000,
    pairs_per_s: Math.round(latencies.length / (duration / 1000)),
    p50_ms: Number(at(0.5).toFixed(3)),
    p99_ms: Number(at(0.99).toFixed(3)),
    errors,
    ...(firstError ? { first_error: firstError } : {}),
    load1: load1(),
  };
}

const threads = () => fs.readdirSync("/proc/self/task").length;

/** The main thread's time on a CPU and waiting for one (run queue), in ms so far. */
const SCHEDSTAT = `/proc/self/task/${process.pid}/schedstat`;
function sched() {
  const [cpu, queued] = fs.readFileSync(SCHEDSTAT, "utf8").split(" ");
  return [Number(cpu) / 1e6, Number(queued) / 1e6];
}

/**
 * A 1 ms timer's worst lateness per phase (`phase(name)` starts one), and how the main
 * thread spent that late interval: on a CPU (the event loop's own work) or waiting in
 * the run queue for one (the machine's other processes); and the longest the thread ran
 * between two ticks — what the loop's own work would stall it on an idle machine.
 */
function stallMeter() {
  const worst = {};
  let phase = "start";
  let last = performance.now();
  let [lastCpu, lastQueued] = sched();
  const timer = setInterval(() => {
    const now = performance.now();
    const [cpu, queued] = sched();
    const w = (worst[phase] ??= { late: 0, cpu: 0, queued: 0, busy: 0 });
    const late = now - last - 1;
    if (late > w.late) Object.assign(w, { late, cpu: cpu - lastCpu, queued: queued - lastQueued });
    w.busy = Math.max(w.busy, cpu - lastCpu);
    [last, lastCpu, lastQueued] = [now, cpu, queued];
  }, 1);
  const ms = (x) => Number(Math.max(x, 0).toFixed(2));
  return {
    phase: (name) => {
      phase = name;
    },
    stop: () => {
      clearInterval(timer);
      return Object.fromEntries(
        Object.entries(worst).map(([k, w]) => [k, { late: ms(w.late), cpu: ms(w.cpu), queued: ms(w.queued), busy: ms(w.busy) }]),
      );
    },
  };
}

/** Resolves once `check()` is true, checking every 50 ms; rejects after `seconds`. */
async function until(check, what, seconds = 120) {
  const deadline = performance.now() + seconds * 1000;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`not within ${seconds} s: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function waitersRun() {
  const n = Number(rest[0] ?? "10000");
  const threadsAtStart = threads();
  const client = ticketingClient();
  const key = `node-holds:${process.pid}:line`;
  const holder = await client.hold([key], { lease: 60, wait: 0 });
  const meter = stallMeter();
  let places = 0;
  const told = new Uint8Array(n);
  let granted = 0;
  let lastGrant = 0;
  let errors = 0;
  let firstError = "";
  // One waiting first: the worker that polls the completion queue exists from then on.
  const one = client.hold([key], { lease: 30, wait: 120, onPlace: () => {} }).then((l) => l.release());
  await until(async () => (await client.pool(key)).waiters === 1, "the first waiter queued");
  const threadsOneWaiting = threads();
  meter.phase("queueing");
  const queuedFrom = performance.now();
  const waiting = [];
  // Started 100 at a time, a turn of the event loop between batches, as requests that
  // come in over time would be.
  for (let i = 0; i < n; i++) {
    waiting.push(
      client
        .hold([key], {
          lease: 30,
          wait: 120,
          onPlace: () => {
            places++;
            told[i] = 1;
          },
        })
        .then(
          (lock) => {
            granted++;
            lastGrant = performance.now();
            return lock.release();
          },
          (e) => {
            errors++;
            firstError ||= String(e?.message ?? e);
          },
        ),
    );
    if (i % 100 === 99) await new Promise((r) => setImmediate(r));
  }
  await until(async () => (await client.pool(key)).waiters === n + 1, `${n} holds queued`);
  const queuedMs = performance.now() - queuedFrom;
  meter.phase("waiting");
  await new Promise((r) => setTimeout(r, 2000)); // two seconds of waiting to measure, not a synchronization
  const threadsWaiting = threads();
  const toldBeforeHandoff = told.reduce((a, b) => a + b, 0);
  const placesBeforeHandoff = places;
  meter.phase("handoff");
  const handoffFrom = performance.now();
  await holder.release();
  await one;
  await Promise.all(waiting);
  const stalls = meter.stop();
  await client.close();
  const handoffS = (lastGrant - handoffFrom) / 1000;
  return {
    workload,
    system,
    waiters: n,
    granted,
    errors,
    ...(firstError ? { first_error: firstError } : {}),
    queued_s: Number((queuedMs / 1000).toFixed(2)),
    handoff_s: Number(handoffS.toFixed(2)),
    handoffs_per_s: Math.round(granted / handoffS),
    places,
    places_before_handoff: placesBeforeHandoff,
    waiters_told: told.reduce((a, b) => a + b, 0),
    waiters_told_before_handoff: toldBeforeHandoff,
    threads_at_start: threadsAtStart,
    threads_one_waiting: threadsOneWaiting,
    threads_waiting: threadsWaiting,
    // Per phase: the worst lateness of the 1 ms timer, how much of that interval the
    // main thread ran and waited for a CPU, and its longest run between two ticks.
    stall_ms: stalls,
    load1: load1(),
  };
}

const result = workload === "waiters" ? await waitersRun() : await pairRun();
console.log(JSON.stringify(result));
process.exit(0);
