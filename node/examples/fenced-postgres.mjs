// fenced-postgres.mjs: fencing against PostgreSQL from Node.js with `pg` (docs/node.md,
// docs/fencing.md).
//
// Worker A is granted seat:N with a 1 s lease and stalls (a long synchronous job on its
// event loop, a swapped-out process, a stopped VM); worker B queues for the key and gets
// it, with a larger token, when A's lease ends, and sells the seat. A wakes up and tries
// to sell too: its write carries the older token, so the database rejects it. Sold once,
// to B.
//
//   TICKETING_ADDRS=127.0.0.1:5225 TICKETING_AUTH_TOKEN=... \
//   FENCE_PG="host=/run/postgresql dbname=postgres" node examples/fenced-postgres.mjs
//
// FENCE_PG is a libpq keyword/value string or a postgresql:// URL. `pg` is a
// devDependency of the package (npm install in node/), not a dependency: the library
// needs nothing of it. Exits 0 when the seat was sold exactly once, to B; 1 otherwise.
// tests/node_package.rs runs it against a real `ticketing server` and a throw-away
// PostgreSQL.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

import pg from "pg";
import { Client } from "ticketing";

/** Sells `seat` to `who` under fencing `token`, or refuses: one transaction. */
async function sellFenced(db, seat, who, token) {
  await db.query("BEGIN");
  try {
    // 1. compare-and-advance the high-water mark; the row stays locked until COMMIT
    //    (the token is a bigint: passed as text, compared as bigint)
    const fenced = await db.query("UPDATE seats SET fence = $1 WHERE id = $2 AND fence < $1 RETURNING sold_to", [
      token.toString(),
      seat,
    ]);
    if (fenced.rowCount === 0) {
      await db.query("ROLLBACK");
      return "rejected"; // a newer token has written: our lease is over; stop
    }
    if (fenced.rows[0].sold_to !== null) {
      await db.query("ROLLBACK");
      return "already sold"; // read under the row lock, so it is current
    }
    // 2. the business writes, in the same transaction
    await db.query("UPDATE seats SET sold_to = $1 WHERE id = $2", [who, seat]);
    await db.query("INSERT INTO sales (seat_id, buyer, token) VALUES ($1, $2, $3)", [seat, who, token.toString()]);
    await db.query("COMMIT");
    return "sold";
  } catch (e) {
    await db.query("ROLLBACK");
    throw e;
  }
}

/** FENCE_PG as `pg`'s options: a URL, or libpq's `key=value` words. */
function pgOptions(conn) {
  if (conn.includes("://")) return { connectionString: conn };
  const words = Object.fromEntries(conn.split(/\s+/).filter(Boolean).map((w) => w.split("=", 2)));
  return { host: words.host, port: words.port && Number(words.port), user: words.user, password: words.password, database: words.dbname };
}

const here = path.dirname(fileURLToPath(import.meta.url));
const seat = Number(process.env.FENCE_SEAT ?? 42);
const key = `seat:${seat}`;
const start = performance.now();
const say = (who, what) => console.log(`${String(Math.round(performance.now() - start)).padStart(6)} ms  ${who}  ${what}`);

// Two connections: each worker's transaction is its own.
const [dbA, dbB] = [new pg.Client(pgOptions(process.env.FENCE_PG ?? "")), new pg.Client(pgOptions(process.env.FENCE_PG ?? ""))];
await dbA.connect();
await dbB.connect();
// The schema of docs/fencing.md §2, shared with examples/fenced_postgres.rs.
await dbA.query(fs.readFileSync(process.env.FENCE_SCHEMA ?? path.join(here, "..", "..", "examples", "fenced_postgres.sql"), "utf8"));
await dbA.query("DELETE FROM sales WHERE seat_id = $1", [seat]);
await dbA.query("INSERT INTO seats (id) VALUES ($1) ON CONFLICT (id) DO UPDATE SET sold_to = NULL, fence = 0", [seat]);

const client = new Client({
  addrs: (process.env.TICKETING_ADDRS ?? "127.0.0.1:5225").split(","),
  authToken: process.env.TICKETING_AUTH_TOKEN ?? "",
});
const a = client.withOwner("fence-A");
const b = client.withOwner("fence-B");
const results = {};

const lockA = await a.acquire(key, { lease: 1, wait: 0 });
say("A", `granted, token ${lockA.token}, lease ${lockA.lease} s`);
say("B", "queues for the key behind A");
const bSold = b.withLock(key, { lease: 10, wait: 10 }, async (lock) => {
  say("B", `granted at A's lease expiry, token ${lock.token}`);
  results.B = await sellFenced(dbB, seat, "B", lock.token);
  say("B", `sells with token ${lock.token}: ${results.B}`);
});
say("A", "stalls (a long synchronous job, swapped out, VM stopped...)");
await bSold;
say("A", `wakes up, lease left locally: ${lockA.remaining} s; goes on with its sale`);
results.A = await sellFenced(dbA, seat, "A", lockA.token);
say("A", `sells with token ${lockA.token}: ${results.A}`);
say("A", `release: ${await lockA.release()}`);

const row = (await dbA.query("SELECT sold_to, fence FROM seats WHERE id = $1", [seat])).rows[0];
const sales = (await dbA.query("SELECT buyer, token FROM sales WHERE seat_id = $1", [seat])).rows;
await Promise.all([dbA.end(), dbB.end(), client.close()]);
const once = sales.length === 1 && sales[0].buyer === "B" && row.sold_to === "B" && results.A === "rejected";
console.log(
  once
    ? `sold once, to B (fence ${row.fence}); A's late write was rejected`
    : `NOT sold once to B: ${JSON.stringify({ row, sales, results })}`,
);
process.exit(once ? 0 : 1);
