// The conformance driver of the Node.js package (docs/conformance.md): commands on
// standard input, one outcome line each on standard output, each command an async task
// of its own on one event loop, all sharing one Client. Its argument is the package's
// directory (node/ of the repository).
import path from "node:path";
import readline from "node:readline";
import { pathToFileURL } from "node:url";

const ticketing = await import(pathToFileURL(path.join(process.argv[2] ?? "node", "index.mjs")).href);
const { Client, Indeterminate, TicketingError } = ticketing;

const OUTCOMES = { released: "released", notHolder: "not_holder", releasedOrExpired: "released_or_expired" };

function say(line) {
  process.stdout.write(`${line}\n`);
}

/** CLOCK_MONOTONIC in nanoseconds (libuv's hrtime), which every process on the machine shares. */
const now = () => process.hrtime.bigint();
const ms = (start) => Math.floor(performance.now() - start);

function failed(name, e, start) {
  if (!(e instanceof TicketingError)) return `${name} internal retryable=0 ms=${ms(start)} : ${e?.stack ?? e}`;
  const cause = e instanceof Indeterminate ? ` cause=${e.reason}` : "";
  return `${name} ${e.kind} retryable=${e.retryable ? 1 : 0} ms=${ms(start)}${cause} : ${e.message}`;
}

const locks = new Map();
const indeterminate = new Map();
// Names of holds (their resolve's line lists the keys too).
const holds = new Set();

/** A lock's keys as an outcome line's `keys=`. */
const keysOf = (lock) => `keys=${lock.keys.map((k) => `${k.key}:${k.count}:${k.capacity}`).join(",")}`;

/** KEY:COUNT:CAPACITY (the key may hold colons itself) as the package's hold key. */
function holdKey(word) {
  const [capacity, count, ...key] = word.split(":").reverse();
  return { key: key.reverse().join(":"), count: Number(count), capacity: Number(capacity) };
}

/** An instant on performance.now()'s clock (milliseconds) as CLOCK_MONOTONIC
 * nanoseconds, rounded down. */
function monotonic(instant) {
  const hr = now();
  return hr + BigInt(Math.floor((instant - performance.now()) * 1e6));
}

async function command(client, [verb, name, ...args]) {
  const start = performance.now();
  try {
    if (verb === "acquire" && args.length === 3) {
      const lock = await client.acquire(args[0], { lease: Number(args[1]), wait: Number(args[2]) });
      locks.set(name, lock);
      return `${name} granted ${lock.token} at=${now()} ms=${ms(start)}`;
    }
    if (verb === "hold" && args.length >= 4) {
      const [lease, wait, places, ...keys] = args;
      const onPlace =
        places === "1" ? (place) => say(`${name} place ${place.ahead} eta_ms=${place.etaMs ?? -1}`) : undefined;
      holds.add(name);
      const lock = await client.hold(keys.map(holdKey), { lease: Number(lease), wait: Number(wait), onPlace });
      locks.set(name, lock);
      return `${name} granted ${lock.token} at=${now()} ms=${ms(start)} ${keysOf(lock)}`;
    }
    if (verb === "pool" && args.length === 1) {
      const pool = await client.pool(args[0]);
      return `${name} pool ${pool.capacity} ${pool.inUse} ${pool.holds} ${pool.waiters} ms=${ms(start)}`;
    }
    if (verb === "watch" && args.length === 0) {
      const lock = locks.get(name);
      if (lock === undefined) return `${name} invalid retryable=0 ms=0 : no lock named ${name}`;
      const signal = lock.signal;
      if (!signal.aborted) await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
      const at = now();
      return `${name} deadline at=${at} deadline=${monotonic(lock.deadline)}`;
    }
    if (verb === "release") {
      const lock = locks.get(name);
      locks.delete(name);
      if (lock === undefined) return `${name} invalid retryable=0 ms=0 : no lock named ${name}`;
      const at = now();
      return `${name} ${OUTCOMES[await lock.release()]} at=${at} ms=${ms(start)}`;
    }
    if (verb === "query" && args.length === 1) {
      const holder = await client.query(args[0]);
      if (holder === null) return `${name} free ms=${ms(start)}`;
      return `${name} held ${holder.owner} ${holder.token} ${holder.waiters} ms=${ms(start)}`;
    }
    if (verb === "resolve" && args.length === 1) {
      const err = indeterminate.get(name);
      indeterminate.delete(name);
      if (err === undefined) return `${name} invalid retryable=0 ms=0 : no indeterminate acquire named ${name}`;
      let lock;
      try {
        lock = await client.resolve(err, { timeout: Number(args[0]) });
      } catch (e) {
        if (e === err) return `${name} resolved unknown ms=${ms(start)}`;
        throw e;
      }
      if (lock === null) return `${name} resolved not_held ms=${ms(start)}`;
      locks.set(name, lock);
      const keys = holds.has(name) ? ` ${keysOf(lock)}` : "";
      return `${name} resolved held ${lock.token} at=${now()} ms=${ms(start)}${keys}`;
    }
    return `${name} invalid retryable=0 ms=0 : unknown command ${verb}`;
  } catch (e) {
    if (e instanceof Indeterminate) indeterminate.set(name, e);
    return failed(name, e, start);
  }
}

let client;
try {
  const env = process.env;
  client = new Client({
    addrs: (env.TICKETING_ADDRS ?? "").split(",").filter((a) => a !== ""),
    authToken: env.TICKETING_AUTH_TOKEN ?? "",
    owner: (env.TICKETING_OWNER ?? "").replaceAll("\\0", "\0") || null,
    tlsCa: env.TICKETING_TLS_CA || null,
    clusterName: env.TICKETING_CLUSTER_NAME || null,
  });
} catch (e) {
  say(`config-error : ${e.message}`);
  process.exit(0);
}
say("ready");

const running = [];
for await (const line of readline.createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  const words = line.trim().split(/\s+/).filter((w) => w !== "");
  if (words.length === 0) continue;
  if (words[0] === "quit") break;
  if (words.length < 2) continue;
  running.push(command(client, words).then(say));
}
await Promise.all(running);
await client.close();
process.exit(0);
