// holds.test.mjs: counted and multi-key holds, pool reads and places in line against a
// real standalone node — all or nothing, a stock never over its capacity, a capacity
// mismatch naming both numbers, places reported and decreasing, the AbortSignal, bad
// arguments named.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Busy, Client, Indeterminate, InvalidArgument, Lock } from "../index.mjs";
import { SECRET, Server, key, until } from "./support.mjs";

let server;
let client;

before(async () => {
  server = await Server.start();
  client = new Client({ addrs: [server.addr], authToken: SECRET, owner: "node-holds" });
});

after(async () => {
  await client?.close();
  await server?.stop();
});

test("a multi-key hold is all or nothing: it waits holding nothing, then one token for every key", async () => {
  const [a, b] = [key("all-a"), key("all-b")];
  const other = client.withOwner("node-holds-other");
  const blocker = await other.acquire(b, { lease: 30 });
  await assert.rejects(client.hold([a, b], { lease: 30 }), (e) => e instanceof Busy && e.definitive);
  assert.equal((await client.pool(a)).capacity, 0, "a busy hold took nothing");

  const pending = client.hold([a, b], { lease: 30, wait: 20 });
  await until(async () => (await client.pool(b)).waiters === 1, "the hold queued on b");
  const waiting = await client.pool(a);
  assert.equal(waiting.inUse, 0, "a waiting hold holds none of its keys");
  assert.equal(waiting.waiters, 1, "it waits in the queue of every key it names");

  await blocker.release();
  const lock = await pending;
  assert.ok(lock instanceof Lock);
  assert.deepEqual(lock.keys, [
    { key: a, count: 1, capacity: 1 },
    { key: b, count: 1, capacity: 1 },
  ]);
  assert.equal((await client.query(a)).token, lock.token);
  assert.equal((await client.query(b)).token, lock.token);
  assert.equal(await lock.release(), "released");
  assert.equal(await client.query(a), null, "the release ended the whole hold");
  assert.equal(await client.query(b), null);
  await other.close();
});

test("a counted stock is never over its capacity; the pool says who holds it", async () => {
  const stock = key("stock");
  const buyers = ["a", "b", "c"].map((name) => client.withOwner(`buyer-${name}`));
  const first = await buyers[0].hold([{ key: stock, count: 2, capacity: 5 }], { lease: 30 });
  const second = await buyers[1].hold([{ key: stock, count: 2, capacity: 5 }], { lease: 30 });
  assert.deepEqual(first.keys, [{ key: stock, count: 2, capacity: 5 }]);
  // 4 of 5 in use: a third pair does not fit, and waits.
  let third = null;
  const pending = buyers[2].hold([{ key: stock, count: 2, capacity: 5 }], { lease: 30, wait: 20 }).then((l) => (third = l));
  await until(async () => (await client.pool(stock)).waiters === 1, "the third buyer queued");
  const pool = await client.pool(stock);
  assert.equal(pool.capacity, 5);
  assert.equal(pool.inUse, 4);
  assert.equal(pool.holds, 2);
  assert.deepEqual(
    pool.holders.map((h) => [h.owner, h.token, h.count]),
    [
      ["buyer-a", first.token, 2],
      ["buyer-b", second.token, 2],
    ],
  );
  assert.ok(pool.holders.every((h) => h.leaseLeft > 0 && h.leaseLeft <= 30));
  assert.ok(pool.oldestWait >= 0);
  assert.equal(third, null, "granted over the capacity");

  await first.release();
  await pending;
  assert.ok(third.token > second.token);
  const after_ = await client.pool(stock);
  assert.equal(after_.inUse, 4);
  assert.equal(after_.waiters, 0);
  await Promise.all([second.release(), third.release()]);
  assert.equal((await client.pool(stock)).capacity, 0, "a key nobody holds or waits for is forgotten");
  await Promise.all(buyers.map((b) => b.close()));
});

test("a capacity other than the key's is refused, naming both numbers; the library checks the limits", async () => {
  const stock = key("mismatch");
  const lock = await client.hold([{ key: stock, count: 1, capacity: 10 }], { lease: 30 });
  await assert.rejects(client.hold([{ key: stock, count: 1, capacity: 11 }]), (e) => {
    assert.ok(e instanceof InvalidArgument, e.stack);
    assert.match(e.message, /11/);
    assert.match(e.message, /10/);
    return true;
  });
  await assert.rejects(client.hold([stock, stock]), (e) => e instanceof InvalidArgument && /twice/.test(e.message));
  // Named as the caller wrote it: the part's { key, count, capacity }.
  await assert.rejects(
    client.hold([{ key: key("over"), count: 3, capacity: 2 }]),
    (e) => e instanceof InvalidArgument && /\{ key: ".*over", count: 3, capacity: 2 \}: the count must be 1 to the capacity/.test(e.message),
  );
  await assert.rejects(client.hold([{ key: key("huge"), count: 1, capacity: 2 ** 40 }]), InvalidArgument);
  await assert.rejects(client.hold([]), (e) => e instanceof InvalidArgument && /1 to 16 keys \(client\.hold\(keys\)\)/.test(e.message));
  await lock.release();
});

test("bad arguments of hold and pool are named", async () => {
  const named = (pattern) => (e) => e instanceof InvalidArgument && pattern.test(e.message);
  await assert.rejects(client.hold("seat"), named(/keys must be an array/));
  await assert.rejects(client.hold([7]), named(/keys\[0\]/));
  await assert.rejects(client.hold([{ key: "a", count: 1.5 }]), named(/keys\[0\]\.count must be a whole number/));
  await assert.rejects(client.hold([{ key: "a", permits: 2 }]), named(/unknown option "permits"/));
  await assert.rejects(client.hold(["a"], { onPlace: 3 }), named(/onPlace must be a function/));
  await assert.rejects(client.hold(["a"], { lease: "30" }), named(/lease must be a finite number/));
  await assert.rejects(client.pool(42), named(/key must be a string/));
});

test("places in line come while the hold waits, decreasing, with an estimate; none after the grant", async () => {
  const k = key("places");
  const holder = await client.acquire(k, { lease: 30 });
  const ahead = [];
  for (const name of ["a", "b"]) {
    ahead.push(client.withOwner(`ahead-${name}`));
    const started = ahead.at(-1).acquire(k, { lease: 30, wait: 30 });
    ahead.at(-1).lock = started;
    await until(async () => (await client.query(k)).waiters === ahead.length, `waiter ${name} queued`);
  }
  const places = [];
  const last = client.withOwner("places-last");
  const pending = last.hold([k], { lease: 30, wait: 30, onPlace: (place) => places.push(place) });
  await until(() => places.length > 0 && places.at(-1).ahead === 2, "the first place: 2 ahead");

  await holder.release();
  await (await ahead[0].lock).release();
  await until(() => places.at(-1).ahead === 0, "the place after two grants: none ahead");
  await (await ahead[1].lock).release();
  const lock = await pending;
  const seen = places.length;

  for (let i = 1; i < places.length; i++) assert.ok(places[i].ahead <= places[i - 1].ahead, JSON.stringify(places));
  for (const p of places) {
    assert.deepEqual(Object.keys(p).sort(), ["ahead", "etaMs", "grantsPerSecond"]);
    if (p.grantsPerSecond === 0) assert.equal(p.etaMs, null);
    else assert.equal(p.etaMs, Math.round((p.ahead * 1000) / p.grantsPerSecond));
  }
  // One more round trip through the queue: a place tag still there is not reported.
  await client.query(k);
  assert.equal(places.length, seen, "a place came after the grant");
  await lock.release();
  await Promise.all([...ahead, last].map((c) => c.close()));
});

test("holdInLine: the places as an async iterator, decreasing, that ends when the hold is granted", async () => {
  const k = key("in-line");
  const holder = await client.acquire(k, { lease: 30 });
  const next = client.withOwner("in-line-next");
  const first = next.acquire(k, { lease: 30, wait: 30 });
  await until(async () => (await client.query(k)).waiters === 1, "one waiter queued");
  const last = client.withOwner("in-line-last");
  const { lock, places } = last.holdInLine([k], { lease: 30, wait: 30 });
  const seen = [];
  for await (const place of places) {
    seen.push(place.ahead);
    if (place.ahead === 1) await holder.release();
    if (place.ahead === 0) await (await first).release();
  }
  assert.deepEqual(seen, [1, 0], "told 1 ahead, then none; the iterator ended at the grant");
  const held = await lock;
  assert.deepEqual(held.keys, [{ key: k, count: 1, capacity: 1 }]);
  await held.release();

  const refused = last.holdInLine([k, k], { lease: 30 });
  const none = [];
  for await (const place of refused.places) none.push(place);
  assert.deepEqual(none, [], "a refused hold's places end at once");
  await assert.rejects(refused.lock, (e) => e instanceof InvalidArgument && /twice/.test(e.message));
  assert.throws(() => last.holdInLine([k], { onPlace: () => {} }), (e) => e instanceof InvalidArgument && /onPlace/.test(e.message));
  await Promise.all([next, last].map((c) => c.close()));
});

test("an AbortSignal stops a waiting hold: indeterminate (it was sent), and the key is left free", async () => {
  const k = key("abort");
  const holder = await client.acquire(k, { lease: 30 });
  const controller = new AbortController();
  const pending = client.hold([k, key("abort-b")], { lease: 30, wait: 30, signal: controller.signal });
  await until(async () => (await client.query(k)).waiters === 1, "the hold queued");
  controller.abort(new Error("the buyer left"));
  await assert.rejects(pending, (e) => e instanceof Indeterminate && e.reason === "cancelled" && e.cause?.message === "the buyer left");
  await holder.release();
  await until(async () => (await client.query(k)) === null, "the key free: no grant left held");
});

test("await using ends a hold at the end of the block (its Symbol.asyncDispose)", async () => {
  const [a, b] = [key("using-a"), key("using-b")];
  const lock = await client.hold([a, { key: b, count: 1, capacity: 3 }], { lease: 30 });
  assert.equal((await client.pool(b)).inUse, 1);
  assert.equal(lock.keys.length, 2);
  // What `await using lock = ...` runs at the end of its block (typed.mts runs the syntax).
  await lock[Symbol.asyncDispose]();
  assert.equal(await client.query(a), null);
  assert.equal((await client.pool(b)).capacity, 0);
});
