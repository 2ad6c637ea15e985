// threads.test.mjs: how completions reach JavaScript. The package's path — native
// futures on a completion queue, whose descriptor a libuv worker polls — never makes a
// client thread wait for the event loop; a koffi-registered callback would (this file
// shows it on a connection's reader, which is why the package does not use one). 1,000 acquires waiting at once
// add no thread and cost the event loop nothing, nor 1,000 holds told their places; a process exits by itself when no
// operation is pending, stays alive while one is, and close() does not hang.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { Client, Timeout } from "../index.mjs";
import { SECRET, Server, key, until } from "./support.mjs";

const require = createRequire(import.meta.url);
const { koffi, C, PATH } = require("../lib/native.cjs");
const here = path.dirname(fileURLToPath(import.meta.url));

let server;
let client;

before(async () => {
  server = await Server.start();
  client = new Client({ addrs: [server.addr], authToken: SECRET, owner: "node-threads" });
});

after(async () => {
  await client?.close();
  await server?.stop();
});

/** Blocks this thread (the event loop) for `ms`. */
function blockFor(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** How many of the client's connection readers wait in a futex (and not for their
 * socket) right now: a reader held by something else than the network. */
function readersHeld() {
  let held = 0;
  for (const task of fs.readdirSync("/proc/self/task")) {
    try {
      const comm = fs.readFileSync(`/proc/self/task/${task}/comm`, "utf8");
      if (comm.startsWith("ticketing-conn") && fs.readFileSync(`/proc/self/task/${task}/wchan`, "utf8").includes("futex")) held++;
    } catch {
      // the thread ended meanwhile
    }
  }
  return held;
}

/**
 * An acquire queued behind a holder of the same client; the holder's release is started
 * and this thread's event loop is then blocked while the grant comes. `how` is how the
 * acquire's future reports: "queue" (the package's way) or "callback" (a
 * koffi-registered callback). Returns in how many of 20 samples, taken while the loop
 * stayed blocked after the grant, a connection reader of the client was held.
 */
async function readerHeldWhileLoopBlocked(how) {
  const k = key(how);
  const holder = client.withOwner(`node-threads-${how}`);
  const held = await holder.acquire(k, { lease: 30 });
  const queue = [null];
  assert.equal(C.queue_new(queue, [null]), 0);
  const future = [null];
  assert.equal(C.acquire_start(client._handle, k, 30e9, 10e9, future, [null]), 0);
  let called = false;
  let registered = null;
  if (how === "callback") {
    const proto = koffi.proto("void ticketing_callback_test(void *future, void *ctx)");
    const setCallback = koffi
      .load(PATH)
      .func("int ticketing_future_set_callback(void *future, ticketing_callback_test *callback, void *ctx, _Out_ void **error_out)");
    registered = koffi.register(() => {
      called = true;
    }, koffi.pointer(proto));
    assert.equal(setCallback(future[0], registered, null, [null]), 0);
  } else {
    assert.equal(C.future_set_queue(future[0], queue[0], 1, [null]), 0);
  }
  await until(async () => (await client.query(k))?.waiters === 1, "the acquire queued");

  // The holder's release goes out; from here until the samples are taken, this thread
  // does not return to its event loop.
  const release = [null];
  assert.equal(C.release_start(holder._handle, k, held.token, release, [null]), 0);
  const end = Date.now() + 5000;
  while (C.future_is_ready(future[0]) !== 1 && Date.now() < end) blockFor(1);
  assert.equal(C.future_is_ready(future[0]), 1, "granted while the loop was blocked");
  let samples = 0;
  for (let i = 0; i < 20; i++) {
    blockFor(10);
    if (readersHeld() > 0) samples++;
  }
  assert.equal(called, false, "no JavaScript ran while the loop was blocked");

  // Back to the loop: a pending koffi callback runs now, and its reader goes on.
  await until(() => how !== "callback" || called, "the callback ran");
  await until(() => readersHeld() === 0, "no reader held");
  const lock = [null];
  assert.equal(C.future_get_lock(future[0], lock, [null]), 0);
  C.future_free(future[0]);
  C.lock_free(lock[0]); // released in the background
  C.future_free(release[0]);
  if (registered) koffi.unregister(registered);
  C.queue_free(queue[0]);
  await until(async () => (await client.query(k)) === null, "the key free again");
  await holder.close();
  return samples;
}

test("a completion queue never holds a client thread while the event loop is busy", async () => {
  assert.ok((await readerHeldWhileLoopBlocked("queue")) <= 1);
});

test("a koffi-registered callback holds the client's reader until the event loop runs it (not used)", async () => {
  // koffi relays a call from a foreign thread to the JS thread and waits there for it to
  // run (its source: CallData::RelayAsync): the connection's reader reads nothing
  // meanwhile.
  assert.ok((await readerHeldWhileLoopBlocked("callback")) >= 19);
});

function threads() {
  return fs.readdirSync("/proc/self/task").length;
}

function mainThreadTicks() {
  const stat = fs.readFileSync(`/proc/self/task/${process.pid}/stat`, "utf8").split(")").pop().trim().split(" ");
  return Number(stat[11]) + Number(stat[12]); // utime + stime, in clock ticks
}

test("1,000 acquires waiting at once: no thread per operation, no work on the event loop", async () => {
  const holder = client.withOwner("node-threads-holder");
  const keys = Array.from({ length: 10 }, (_, i) => key(`wait${i}`));
  const held = await Promise.all(keys.map((k) => holder.acquire(k, { lease: 30 })));
  // One waiting first: the worker that polls the queue exists from then on.
  const one = client.acquire(keys[0], { lease: 30, wait: 1.5 }).catch((e) => e);
  await until(async () => (await client.query(keys[0]))?.waiters === 1, "one waiter queued");
  const before = threads();
  const waiting = Array.from({ length: 1000 }, (_, i) =>
    client.withOwner(`w${i}`).acquire(keys[i % 10], { lease: 30, wait: 1.5 }).catch((e) => e),
  );
  await until(async () => (await client.query(keys[9]))?.waiters === 100, "1,000 waiters queued");
  const during = threads();
  const ticks = mainThreadTicks();
  await new Promise((r) => setTimeout(r, 1000)); // an interval to measure, not a synchronization
  const spent = mainThreadTicks() - ticks;
  const outcomes = await Promise.all([one, ...waiting]);
  assert.ok(outcomes.every((e) => e instanceof Timeout), "every waiter timed out");
  console.log(`threads: ${before} with one acquire waiting, ${during} with 1,001; event loop CPU over 1 s of waiting: ${spent * 10} ms`);
  assert.ok(during <= before + 1, `${during} threads with 1,001 waiting, ${before} with one`);
  assert.ok(spent <= 10, `the event loop spent ${spent} ticks while everything waited`);
  await Promise.all(held.map((l) => l.release()));
  await holder.close();
});

test("1,000 holds waiting with their places in line: no thread per hold, places through the queue", async () => {
  const holder = client.withOwner("node-threads-hold-holder");
  const keys = Array.from({ length: 10 }, (_, i) => key(`hold${i}`));
  const held = await Promise.all(keys.map((k) => holder.hold([{ key: k, count: 2, capacity: 2 }], { lease: 30 })));
  const one = client.hold([{ key: keys[0], count: 1, capacity: 2 }], { lease: 30, wait: 3, onPlace: () => {} }).catch((e) => e);
  await until(async () => (await client.pool(keys[0])).waiters === 1, "one hold queued");
  const before = threads();
  const told = new Set();
  const waiting = Array.from({ length: 1000 }, (_, i) =>
    client
      .withOwner(`h${i}`)
      .hold([{ key: keys[i % 10], count: 1, capacity: 2 }], { lease: 30, wait: 3, onPlace: () => told.add(i) })
      .catch((e) => e),
  );
  await until(() => told.size === 1000, "every hold told its place");
  const during = threads();
  const outcomes = await Promise.all([one, ...waiting]);
  assert.ok(outcomes.every((e) => e instanceof Timeout), "every hold timed out");
  console.log(`threads: ${before} with one hold waiting, ${during} with 1,001 told their places`);
  assert.ok(during <= before + 1, `${during} threads with 1,001 holds waiting, ${before} with one`);
  await Promise.all(held.map((l) => l.release()));
  await holder.close();
});

/** Runs `code` (an ES module) in a new Node process; resolves to [exit code, output, ms]. */
function runNode(code, env) {
  return new Promise((resolve) => {
    const start = performance.now();
    const child = spawn(process.execPath, ["--input-type=module", "-e", code], {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    child.stdout.on("data", (d) => (output += d));
    child.stderr.on("data", (d) => (output += d));
    const timer = setTimeout(() => child.kill("SIGKILL"), 20_000);
    child.on("exit", (code_, signal) => {
      clearTimeout(timer);
      resolve([code_ ?? signal, output, performance.now() - start]);
    });
  });
}

const index = JSON.stringify(path.join(here, "..", "index.mjs"));

test("a process exits by itself once nothing is pending, even with its client never closed", async () => {
  const k = key("exit");
  const [code, output] = await runNode(
    `import { Client } from ${index};
     const client = new Client({ addrs: [process.env.ADDR], authToken: process.env.SECRET });
     const lock = await client.acquire(${JSON.stringify(k)}, { lease: 30 });
     console.log(await lock.release());`,
    { ADDR: server.addr, SECRET },
  );
  assert.equal(code, 0, output);
  assert.match(output, /released/);
});

test("a pending operation keeps the process alive until it ends; close() does not wait for it", async () => {
  const k = key("pending");
  const held = await client.acquire(k, { lease: 30 });
  const [code, output, ms] = await runNode(
    `import { Client } from ${index};
     const client = new Client({ addrs: [process.env.ADDR], authToken: process.env.SECRET });
     client.acquire(${JSON.stringify(k)}, { lease: 30, wait: 2 }).then(() => console.log("granted"), (e) => console.log("acquire:", e.kind));
     await client.query(${JSON.stringify(k)});
     const start = performance.now();
     console.log("closed", await client.close({ timeout: 5 }), Math.round(performance.now() - start));`,
    { ADDR: server.addr, SECRET },
  );
  assert.equal(code, 0, output);
  assert.match(output, /acquire: timeout/);
  const closedIn = Number(/closed true (\d+)/.exec(output)?.[1]);
  assert.ok(closedIn < 1000, output);
  assert.ok(ms >= 2000, `the process ended after ${ms} ms, before its 2 s wait`);
  await held.release();
});
