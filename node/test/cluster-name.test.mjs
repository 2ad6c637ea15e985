// cluster-name.test.mjs: clusterName against real servers — a client named as its server's
// TICKETING_CLUSTER_NAME acquires, and one named otherwise (or pointed at a server without
// a name) is sent nothing: Unavailable, not retryable, naming both names and the option.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Client, Unavailable } from "../index.mjs";
import { SECRET, Server, key } from "./support.mjs";

// A wait the refusal must not sit out: an unavailability that trying again could fix
// waits up to it for a connection; this one is said without waiting.
const WAIT = 20;

let blue;
let unnamed;
const clients = [];

before(async () => {
  [blue, unnamed] = await Promise.all([Server.start({ TICKETING_CLUSTER_NAME: "blue" }), Server.start()]);
});

after(async () => {
  for (const c of clients) await c.close();
  await blue?.stop();
  await unnamed?.stop();
});

function named(server, clusterName, owner) {
  const c = new Client({ addrs: [server.addr], authToken: SECRET, owner, clusterName });
  clients.push(c);
  return c;
}

/** Acquires through `c` and returns the refusal: Unavailable, not retryable, before the
 * wait ran out. */
async function refused(c, name) {
  const start = performance.now();
  let refusal;
  await assert.rejects(c.acquire(key(name), { lease: 30, wait: WAIT }), (e) => {
    assert.ok(e instanceof Unavailable, `${e}`);
    assert.equal(e.retryable, false);
    refusal = e;
    return true;
  });
  assert.ok(performance.now() - start < WAIT * 1000, "the refusal waited out the wait");
  return refusal;
}

test("a client named as its server acquires and releases", async () => {
  const c = named(blue, "blue", "node-blue");
  const lock = await c.acquire(key("named"), { lease: 30, wait: 0 });
  assert.ok(lock.token > 0n);
  assert.equal(await lock.release(), "released");
});

test("a client named otherwise is sent nothing: Unavailable naming both names and clusterName", async () => {
  const k = key("green");
  const e = await refused(named(blue, "green", "node-green"), "green");
  assert.match(e.message, /the node reports cluster name "blue": this client serves cluster "green" only \(clusterName\)/);
  assert.equal(await named(blue, "blue", "node-check").query(k), null); // never asked for
});

test("a named client is sent nothing by a server without a name", async () => {
  const e = await refused(named(unnamed, "green", "node-green"), "unnamed");
  assert.match(e.message, /the node reports no cluster name .*this client serves cluster "green" only \(clusterName\)/);
});
