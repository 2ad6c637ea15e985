// client.test.mjs: the API against a real standalone node — grant and token, FIFO
// hand-off, busy and timeout, release outcomes, query, withLock (released after, also on
// throw), await-using disposal, 64 concurrent operations on one client, bad arguments
// (errors naming the options), a wrong secret, a closed client, and CommonJS next to ESM.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { after, before, test } from "node:test";

import {
  Busy,
  Client,
  ConfigError,
  InvalidArgument,
  Lock,
  NotHolder,
  TicketingError,
  Timeout,
  Unavailable,
} from "../index.mjs";
import { SECRET, Server, key, until } from "./support.mjs";

let server;
let client;

before(async () => {
  server = await Server.start();
  client = new Client({ addrs: [server.addr], authToken: SECRET, owner: "node-tests" });
});

after(async () => {
  await client?.close();
  await server?.stop();
});

test("a grant carries a bigint token; the holder is what query sees; release frees the key", async () => {
  const k = key("grant");
  const lock = await client.acquire(k, { lease: 30, wait: 5 });
  assert.ok(lock instanceof Lock);
  assert.equal(typeof lock.token, "bigint");
  assert.ok(lock.token > 0n);
  assert.equal(lock.key, k);
  assert.equal(lock.owner, "node-tests");
  assert.equal(lock.lease, 30);
  assert.ok(lock.remaining > 29 && lock.remaining <= 30);
  const holder = await client.query(k);
  assert.deepEqual(Object.keys(holder).sort(), ["leaseLeft", "owner", "token", "waiters"]);
  assert.equal(holder.owner, "node-tests");
  assert.equal(holder.token, lock.token);
  assert.equal(holder.waiters, 0);
  assert.ok(holder.leaseLeft > 29 && holder.leaseLeft <= 30);
  assert.equal(await lock.release(), "released");
  assert.equal(lock.released, true);
  assert.equal(lock.remaining, 0);
  assert.equal(await client.query(k), null);
  // Released once: a second release is a mistake, said as such.
  await assert.rejects(lock.release(), (e) => e instanceof InvalidArgument && /released already/.test(e.message));
});

test("tokens increase across grants and keys", async () => {
  let last = 0n;
  for (let i = 0; i < 6; i++) {
    const lock = await client.acquire(key(`tokens${i % 3}`), { lease: 5 });
    assert.ok(lock.token > last, `${lock.token} after ${last}`);
    last = lock.token;
    await lock.release();
  }
});

test("busy with no wait, timeout after the wait: both definitive, not retryable", async () => {
  const k = key("busy");
  const other = client.withOwner("node-tests-other");
  const lock = await client.acquire(k, { lease: 30 });
  await assert.rejects(other.acquire(k, { lease: 30, wait: 0 }), (e) => {
    assert.ok(e instanceof Busy && e instanceof TicketingError);
    assert.equal(e.kind, "busy");
    assert.equal(e.definitive, true);
    assert.equal(e.retryable, false);
    return true;
  });
  const start = performance.now();
  await assert.rejects(other.acquire(k, { lease: 30, wait: 0.5 }), (e) => e instanceof Timeout && e.definitive);
  const took = performance.now() - start;
  // The server's T after the wait (not the 30 s lease running out): at least the
  // wait; 20 s only against a hang.
  assert.ok(took >= 450 && took < 20000, `the 0.5 s wait took ${took} ms`);
  await lock.release();
  await other.close();
});

test("waiters are granted in arrival order, each token above the last", async () => {
  const k = key("fifo");
  const holder = await client.acquire(k, { lease: 30 });
  const waiters = ["a", "b", "c"].map((name) => client.withOwner(`fifo-${name}`));
  const granted = [];
  const pending = [];
  for (const [i, w] of waiters.entries()) {
    pending.push(
      w.acquire(k, { lease: 30, wait: 20 }).then(async (lock) => {
        granted.push([w.owner, lock.token]);
        await lock.release();
      }),
    );
    // Each seen queued on the server before the next asks.
    await until(async () => (await client.query(k))?.waiters === i + 1, `waiter ${i + 1} queued`);
  }
  await holder.release();
  await Promise.all(pending);
  assert.deepEqual(
    granted.map(([owner]) => owner),
    ["fifo-a", "fifo-b", "fifo-c"],
  );
  assert.ok(granted[0][1] > holder.token && granted[1][1] > granted[0][1] && granted[2][1] > granted[1][1]);
  await Promise.all(waiters.map((w) => w.close()));
});

test("a release after the lease ended answers notHolder", async () => {
  const k = key("expired");
  const lock = await client.acquire(k, { lease: 1 });
  await until(async () => lock.expired && (await client.query(k)) === null, "the 1 s lease ended", 5000);
  assert.equal(await lock.release(), "notHolder");
});

test("a release by key and token, as a client kept them", async () => {
  const k = key("by-token");
  const lock = await client.acquire(k, { lease: 30 });
  assert.equal(await client.release(k, lock.token), "released");
  assert.equal(await client.release(k, lock.token), "notHolder");
});

test("withLock releases after the callback, and also when it throws", async () => {
  const k = key("with");
  const value = await client.withLock(k, { lease: 30, wait: 5 }, async (lock) => {
    assert.equal((await client.query(k)).token, lock.token);
    return "sold";
  });
  assert.equal(value, "sold");
  assert.equal(await client.query(k), null);

  const boom = new Error("the sale failed");
  let held;
  await assert.rejects(
    client.withLock(k, { lease: 30, wait: 5 }, async (lock) => {
      held = lock;
      throw boom;
    }),
    (e) => e === boom,
  );
  assert.equal(held.released, true);
  assert.equal(await client.query(k), null);
});

test("withLock whose lease ended before the callback did rejects with NotHolder", async () => {
  const k = key("with-expired");
  await assert.rejects(
    client.withLock(k, { lease: 1, wait: 0 }, async (lock) => {
      await until(async () => lock.expired && (await client.query(k)) === null, "the lease ended", 5000);
    }),
    (e) => e instanceof NotHolder && /only the fencing token protected the writes/.test(e.message),
  );
});

test("await using: Symbol.asyncDispose releases a lock and closes a client", async () => {
  assert.equal(typeof Symbol.asyncDispose, "symbol", "this Node has Symbol.asyncDispose");
  const k = key("dispose");
  const own = new Client({ addrs: [server.addr], authToken: SECRET });
  const lock = await own.acquire(k, { lease: 30 });
  // What `await using lock = ...` runs at the end of its block.
  await lock[Symbol.asyncDispose]();
  assert.equal(lock.released, true);
  assert.equal(await client.query(k), null);
  await lock[Symbol.asyncDispose](); // released already: nothing to do
  await own[Symbol.asyncDispose]();
  await assert.rejects(own.acquire(k), (e) => e instanceof InvalidArgument && /closed/.test(e.message));
});

test("64 concurrent acquires on one client: all granted, distinct tokens, all released", async () => {
  const keys = Array.from({ length: 64 }, (_, i) => key(`many${i}`));
  const locks = await Promise.all(keys.map((k) => client.acquire(k, { lease: 30, wait: 5 })));
  assert.equal(new Set(locks.map((l) => l.token)).size, 64);
  const outcomes = await Promise.all(locks.map((l) => l.release()));
  assert.deepEqual(new Set(outcomes), new Set(["released"]));
  // And 64 callers on one key: one at a time, never two inside.
  const hot = key("hot");
  let inside = 0;
  let most = 0;
  await Promise.all(
    Array.from({ length: 64 }, (_, i) =>
      client.withOwner(`hot-${i}`).withLock(hot, { lease: 30, wait: 60 }, async () => {
        inside += 1;
        most = Math.max(most, inside);
        await new Promise((r) => setImmediate(r));
        inside -= 1;
      }),
    ),
  );
  assert.equal(most, 1);
});

test("bad arguments are InvalidArgument naming the option, before anything is sent", async () => {
  const cases = [
    // In seconds, as they were given: not milliseconds, not a Rust Duration.
    [() => client.acquire(key("bad"), { lease: 0 }), /lease must be whole seconds from 1 to 250, not 0 s$/],
    [() => client.acquire(key("bad"), { lease: 251 }), /lease must be whole seconds from 1 to 250, not 251 s$/],
    [() => client.acquire(key("bad"), { lease: 1.5 }), /lease must be whole seconds from 1 to 250, not 1.5 s$/],
    [() => client.acquire(key("bad"), { lease: -1 }), /lease is -1 s/],
    [() => client.acquire(key("bad"), { lease: "30" }), /lease must be a finite number of seconds/],
    [() => client.acquire(key("bad"), { wait: 301 }), /wait is 301 s; it must be 0 to 300 s$/],
    [() => client.acquire(key("bad"), { wait: NaN }), /wait must be a finite number/],
    [() => client.acquire("k".repeat(256)), /key is 256 bytes/],
    [() => client.acquire(""), /key is 0 bytes/],
    [() => client.acquire(42), /key must be a string/],
    [() => client.acquire("a\0b"), /key contains a NUL/],
    [() => client.acquire(key("bad"), { lease: 30, timeout: 5 }), /unknown option "timeout"; the options are lease, wait, signal/],
    [() => client.acquire(key("bad"), { signal: "stop" }), /signal must be an AbortSignal/],
    [() => client.query("k".repeat(256)), /key is 256 bytes/],
    [() => client.resolve(new Error("x")), /resolve takes the Indeterminate/],
    [() => client.release(key("bad"), -1n), /token must be a bigint/],
  ];
  for (const [call, message] of cases) {
    await assert.rejects(call(), (e) => {
      assert.ok(e instanceof InvalidArgument, `${e}`);
      assert.match(e.message, message);
      assert.equal(e.definitive, true);
      return true;
    });
  }
});

test("the client's options: errors name them", () => {
  const cases = [
    [{ addrs: [], authToken: SECRET }, ConfigError, /no server address/],
    [{ addrs: ["nohost"], authToken: SECRET }, ConfigError, /not host:port/],
    [{ addrs: ["127.0.0.1:1"], authToken: "short" }, ConfigError, /auth token is 5 bytes/],
    [{ addrs: ["127.0.0.1:1"], authToken: SECRET, tlsCa: "/nonexistent/ca.pem" }, ConfigError, /tlsCa/],
    [{ addrs: ["127.0.0.1:1"], authToken: SECRET, owner: "a\nb" }, ConfigError, /owner/],
    [{ addrs: ["127.0.0.1:1"], authToken: SECRET, clusterName: "blue cluster" }, ConfigError, /^bad cluster name \(clusterName\): .*ASCII letters/],
    [{ addrs: ["127.0.0.1:1"], authToken: SECRET, clusterName: "" }, ConfigError, /^bad cluster name \(clusterName\): .*1 to 63 bytes/],
    [{ addrs: ["127.0.0.1:1"], authToken: SECRET, clusterName: 42 }, InvalidArgument, /clusterName must be a string/],
    [{ addrs: "127.0.0.1:1", authToken: 42 }, InvalidArgument, /authToken must be a string or a Uint8Array/],
    // The usual mistake: an environment variable that is not set.
    [{ addrs: "127.0.0.1:1", authToken: undefined }, InvalidArgument, /authToken is missing \(undefined\): give new Client the cluster's client secret/],
    [{ addrs: 5225, authToken: SECRET }, InvalidArgument, /addrs must be an array/],
    [{ addrs: ["127.0.0.1:1"], auth_token: SECRET }, InvalidArgument, /unknown option "auth_token"; the options are addrs, authToken, owner, tlsCa, clusterName$/],
  ];
  for (const [opts, cls, message] of cases) {
    assert.throws(() => new Client(opts), (e) => e instanceof cls && message.test(e.message), JSON.stringify(opts));
  }
  assert.throws(() => new Client(), InvalidArgument);
});

test("a wrong secret is Unavailable, not retryable, at once, naming authToken", async () => {
  const wrong = new Client({ addrs: [server.addr], authToken: "not-the-secret-0123456789" });
  const start = performance.now();
  await assert.rejects(wrong.acquire(key("wrong"), { lease: 30, wait: 10 }), (e) => {
    assert.ok(e instanceof Unavailable, `${e}`);
    assert.equal(e.retryable, false);
    assert.equal(e.definitive, true);
    assert.match(e.message, /authToken given to new Client/);
    return true;
  });
  assert.ok(performance.now() - start < 2000);
  await wrong.close();
});

test("the same classes from CommonJS", () => {
  const require = createRequire(import.meta.url);
  const cjs = require("../index.cjs");
  assert.equal(cjs.Client, Client);
  assert.equal(cjs.Busy, Busy);
  assert.match(cjs.libraryVersion(), /^\d+\.\d+\.\d+/);
});
