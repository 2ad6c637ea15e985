// lock_bench.mjs: one benchmark run for scripts/node-bench.sh — in this one Node process,
// LOOPS concurrent async loops share one client of SYSTEM, each acquiring and releasing a
// key of its own for DURATION seconds after WARMUP; prints one JSON line (pairs/s, p50 and
// p99 of a pair in ms, errors).
//
//   node bench/node/lock_bench.mjs ticketing 127.0.0.1:15325,... 64 10 1
//   node bench/node/lock_bench.mjs redis 127.0.0.1:16479 64 10 1
//
// ticketing: the package's Client (acquire with wait 0, lease 30 s; lock.release()).
// redis: redlock 5 over one ioredis connection (acquire with a 30 s TTL and no retries;
// lock.release()). Environment: TICKETING_AUTH_TOKEN for ticketing.
import Redis from "ioredis";
import Redlock from "redlock";
import { Client } from "ticketing";

const [system, addrs, loopsArg = "64", durationArg = "10", warmupArg = "1"] = process.argv.slice(2);
const loops = Number(loopsArg);
const duration = Number(durationArg) * 1000;
const warmup = Number(warmupArg) * 1000;

async function lockers() {
  if (system === "ticketing") {
    const client = new Client({ addrs: addrs.split(","), authToken: process.env.TICKETING_AUTH_TOKEN ?? "" });
    return {
      pair: async (key) => {
        const lock = await client.acquire(key, { lease: 30, wait: 0 });
        await lock.release();
      },
      close: () => client.close(),
    };
  }
  if (system === "redis") {
    const [host, port] = addrs.split(":");
    const redis = new Redis({ host, port: Number(port), lazyConnect: true });
    await redis.connect();
    const redlock = new Redlock([redis], { retryCount: 0 });
    return {
      pair: async (key) => {
        const lock = await redlock.acquire([key], 30_000);
        await lock.release();
      },
      close: () => redis.quit(),
    };
  }
  throw new Error(`unknown system ${system}: ticketing or redis`);
}

const { pair, close } = await lockers();
const latencies = [];
let errors = 0;
let firstError = "";
const begin = performance.now();
const measureFrom = begin + warmup;
const end = measureFrom + duration;

async function loop(i) {
  const key = `node-bench:${process.pid}:${i}`;
  for (;;) {
    const start = performance.now();
    if (start >= end) return;
    try {
      await pair(key);
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
console.log(
  JSON.stringify({
    system,
    loops,
    pairs: latencies.length,
    seconds: duration / 1000,
    pairs_per_s: Math.round(latencies.length / (duration / 1000)),
    p50_ms: Number(at(0.5).toFixed(3)),
    p99_ms: Number(at(0.99).toFixed(3)),
    errors,
    ...(firstError ? { first_error: firstError } : {}),
  }),
);
process.exit(0);
