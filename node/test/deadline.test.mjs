// deadline.test.mjs: the lock's own deadline as Node's idiom — lock.deadline (a
// performance.now() instant) and lock.signal, an AbortSignal that fires at it and not
// before, whose timer a release clears and which never keeps the process alive.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { Client } from "../index.mjs";
import { SECRET, Server, key } from "./support.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
let server;
let client;

before(async () => {
  server = await Server.start();
  client = new Client({ addrs: [server.addr], authToken: SECRET, owner: "node-deadline" });
});

after(async () => {
  await client?.close();
  await server?.stop();
});

/** Resolves with performance.now() when `signal` fires. */
const fired = (signal) => new Promise((resolve) => signal.addEventListener("abort", () => resolve(performance.now()), { once: true }));

test("lock.deadline is the local deadline: the acquire's instant plus the lease, on performance.now()", async () => {
  const before_ = performance.now();
  const lock = await client.acquire(key("deadline"), { lease: 30 });
  const after_ = performance.now();
  assert.equal(typeof lock.deadline, "number");
  // The instant before the request was written, plus the lease.
  assert.ok(lock.deadline >= before_ + 30_000 - 1 && lock.deadline <= after_ + 30_000, `${before_} ${lock.deadline} ${after_}`);
  assert.ok(Math.abs(lock.deadline - performance.now() - lock.remaining * 1000) < 50);
  await lock.release();
});

test("lock.signal fires at the deadline and not before, with a TimeoutError naming the lock", async () => {
  const k = key("signal");
  const lock = await client.acquire(k, { lease: 1 });
  const signal = lock.signal;
  assert.ok(signal instanceof AbortSignal);
  assert.equal(lock.signal, signal, "one signal per lock");
  assert.equal(signal.aborted, false);
  const at = await fired(signal);
  assert.ok(at >= lock.deadline, `fired ${lock.deadline - at} ms before the deadline`);
  assert.equal(lock.expired, true, "the library's clock agrees the deadline has passed");
  assert.equal(signal.reason.name, "TimeoutError");
  assert.match(signal.reason.message, new RegExp(`${k}.*local deadline`));
  // Fired once: no timer is left.
  assert.equal(lock._deadline.timer, null);
  // The server's lease ends at or after the local deadline: either outcome may come.
  assert.ok(["released", "notHolder"].includes(await lock.release()));
});

test("a hold's signal fires at its deadline too", async () => {
  const lock = await client.hold([key("hold-a"), { key: key("hold-b"), count: 2, capacity: 4 }], { lease: 1 });
  const at = await fired(lock.signal);
  assert.ok(at >= lock.deadline);
});

test("a released lock's timer is cleared: its signal never fires", async () => {
  const lock = await client.acquire(key("cleared"), { lease: 1 });
  const signal = lock.signal;
  assert.notEqual(lock._deadline.timer, null, "the timer is set at the signal's first use");
  await lock.release();
  assert.equal(lock._deadline.timer, null, "release cleared the timer");
  // A later lock's deadline, past the released one's: by then it would have fired.
  const later = await client.acquire(key("later"), { lease: 1 });
  assert.ok(later.deadline > lock.deadline);
  await fired(later.signal);
  assert.equal(signal.aborted, false);
  // A released lock's signal made only now never fires either.
  const unused = await client.acquire(key("unused"), { lease: 30 });
  await unused.release();
  assert.equal(unused.signal.aborted, false);
  assert.equal(unused._deadline.timer, null);
});

test("the deadline's timer never keeps the process alive", () => {
  // A process holding a 250 s lock whose signal waits: it exits when its work is done.
  const script = `
    import { Client } from ${JSON.stringify(path.join(here, "..", "index.mjs"))};
    const client = new Client({ addrs: [process.env.ADDR], authToken: process.env.SECRET });
    const lock = await client.acquire(process.env.KEY, { lease: 250 });
    lock.signal.addEventListener("abort", () => console.log("fired"));
    console.log(lock.signal.aborted ? "aborted" : "waiting");
  `;
  const ran = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
    encoding: "utf8",
    env: { ...process.env, ADDR: server.addr, SECRET, KEY: key("alive") },
    // A deadline against a hang only: the lease is 250 s.
    timeout: 60_000,
  });
  assert.equal(ran.signal, null, `killed: the process stayed alive\n${ran.stderr}`);
  assert.equal(ran.status, 0, ran.stderr);
  assert.equal(ran.stdout.trim(), "waiting");
});
