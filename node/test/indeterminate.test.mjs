// indeterminate.test.mjs: the outcomes that are not definitive, against real nodes — an
// AbortSignal on a written acquire (Indeterminate, and the grant that comes anyway is
// released by the client), on one never written (Cancelled), a paused server (SIGSTOP)
// making an acquire Indeterminate and resolve finding out, and one nobody resolves
// leaving no grant held.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Busy, Cancelled, Client, Indeterminate } from "../index.mjs";
import { SECRET, Server, key, until } from "./support.mjs";

let server;
let holderClient;

before(async () => {
  server = await Server.start();
  holderClient = new Client({ addrs: [server.addr], authToken: SECRET, owner: "node-holder" });
});

after(async () => {
  await holderClient?.close();
  await server?.stop();
});

test("aborting a written acquire makes it Indeterminate; its grant, when it comes, is released", async () => {
  const k = key("abort-written");
  const client = new Client({ addrs: [server.addr], authToken: SECRET, owner: "node-aborted" });
  const held = await holderClient.acquire(k, { lease: 30 });
  const controller = new AbortController();
  const pending = client.acquire(k, { lease: 30, wait: 20, signal: controller.signal });
  // Written: the server has it in the key's queue.
  await until(async () => (await holderClient.query(k))?.waiters === 1, "the acquire queued on the server");
  const reason = new Error("the buyer left");
  controller.abort(reason);
  await assert.rejects(pending, (e) => {
    assert.ok(e instanceof Indeterminate, `${e}`);
    assert.equal(e.reason, "cancelled");
    assert.equal(e.definitive, false);
    assert.equal(e.retryable, false);
    assert.equal(e.cause, reason);
    assert.match(e.message, /do not enter the critical section/i);
    return true;
  });
  // The holder is unchanged; once it lets go, the server grants the aborted waiter, and
  // its client releases that grant by itself.
  assert.equal((await holderClient.query(k)).token, held.token);
  assert.equal(await held.release(), "released");
  await until(async () => (await holderClient.query(k)) === null, "the aborted waiter's grant released");
  await client.close();
});

test("aborting an acquire never written ends it Cancelled: nothing was sent", async () => {
  // Nothing listens there: the acquire waits for a connection and is never written.
  const client = new Client({ addrs: ["127.0.0.1:1"], authToken: SECRET });
  const controller = new AbortController();
  const pending = client.acquire(key("abort-unsent"), { lease: 30, wait: 10, signal: controller.signal });
  controller.abort();
  await assert.rejects(pending, (e) => e instanceof Cancelled && e.definitive && e.cause === controller.signal.reason);
  // A query whose signal aborts before it was written: Cancelled too.
  await assert.rejects(client.query(key("abort-query"), { signal: AbortSignal.abort() }), Cancelled);
  // An aborted signal stops an acquire before it starts.
  await assert.rejects(
    client.acquire(key("abort-before"), { signal: AbortSignal.abort() }),
    (e) => e instanceof Cancelled && /nothing was sent/.test(e.message),
  );
  await client.close();
});

test("an acquire to a paused server is Indeterminate; resolve finds out after it resumes", async () => {
  const own = await Server.start();
  const client = new Client({ addrs: [own.addr], authToken: SECRET, owner: "node-paused" });
  const k = key("paused");
  try {
    assert.equal(await client.query(k), null); // connected
    await own.pause();
    let caught;
    const start = performance.now();
    try {
      await client.acquire(k, { lease: 30, wait: 1 });
      assert.fail("granted by a paused server");
    } catch (e) {
      caught = e;
    } finally {
      own.resume();
    }
    assert.ok(caught instanceof Indeterminate, `${caught}`);
    assert.equal(caught.definitive, false);
    assert.equal(caught.retryable, false);
    assert.ok(["connection_lost", "no_answer"].includes(caught.reason), caught.reason);
    console.log(`indeterminate (${caught.reason}) after ${Math.round(performance.now() - start)} ms: ${caught.message}`);
    const lock = await client.resolve(caught, { timeout: 20 });
    const holder = await client.query(k);
    if (lock === null) {
      assert.ok(holder === null || holder.owner !== "node-paused");
    } else {
      assert.equal(holder.token, lock.token);
      assert.equal(await lock.release(), "released");
    }
    // Any other error is not held by construction.
    assert.equal(await client.resolve(new Busy("x")), null);

    // One nobody resolves: the key is free again afterwards, no grant left held.
    const k2 = key("paused-unresolved");
    await own.pause();
    try {
      await assert.rejects(client.acquire(k2, { lease: 30, wait: 0 }), Indeterminate);
    } finally {
      own.resume();
    }
    await until(async () => (await client.query(k2)) === null, "no grant left held", 20_000);
  } finally {
    await client.close();
    await own.stop();
  }
});
