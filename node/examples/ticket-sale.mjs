// ticket-sale.mjs: a ticket sale against PostgreSQL from Node.js (docs/node.md, docs/fencing.md §2.1):
// buyers take 2 of 100 tickets through a counted key, and families hold 4 adjacent seats,
// all or nothing.
//
//   TICKETING_ADDRS=127.0.0.1:5225 TICKETING_AUTH_TOKEN=... \
//   FENCE_PG="host=/run/postgresql dbname=postgres" node examples/ticket-sale.mjs
//
// The stock: 60 buyers want 2 tickets each of a sale of 100. Each holds 1 of the 8
// permits of the key `checkout:<sale>` (at most 8 checkouts at once, the rest wait in
// arrival order and are told their place in line), then decrements the stock with the
// store's own conditional write (only while 2 are left, in the same statement) and
// records the order with the hold's token, in one transaction: 50 buyers get 2 tickets,
// 10 are told it is sold out, nothing is oversold.
//
// The seats: each seat is a key of capacity 1. Three families each hold the keys of 4
// adjacent seats in ONE hold (one token for the 4), two of them overlapping and naming
// their seats in opposite orders (no deadlock), while a single buyer acquires one seat
// of the first family's block. Each writer fences every seat row with its token in one
// transaction: a family buys all 4 seats or none.
//
// FENCE_PG is a libpq keyword/value string or a postgresql:// URL; `pg` is a
// devDependency of the package. Exits 0 when nothing was oversold and no seat sold
// twice; 1 otherwise. tests/node_package.rs runs it against a real `ticketing server`
// and a throw-away PostgreSQL.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

import pg from "pg";
import { Client } from "ticketing";

const STOCK = 100;
const EACH = 2;
const BUYERS = 60;
const CHECKOUTS = 8;
const SALE = Number(process.env.SALE_ID ?? 1);
const FIRST_SEAT = Number(process.env.FIRST_SEAT ?? 201);

/** FENCE_PG as `pg`'s options: a URL, or libpq's `key=value` words. */
function pgOptions(conn) {
  if (conn.includes("://")) return { connectionString: conn };
  const words = Object.fromEntries(conn.split(/\s+/).filter(Boolean).map((w) => w.split("=", 2)));
  return { host: words.host, port: words.port && Number(words.port), user: words.user, password: words.password, database: words.dbname };
}

/** One checkout under a permit: the conditional decrement and the order, one
 * transaction. False: sold out, nothing written. */
async function checkout(db, who, token) {
  await db.query("BEGIN");
  try {
    const taken = await db.query(
      "UPDATE stock SET left_count = left_count - $2 WHERE sale_id = $1 AND left_count >= $2 RETURNING left_count",
      [SALE, EACH],
    );
    if (taken.rowCount === 0) {
      await db.query("ROLLBACK");
      return false; // sold out (or fewer than EACH left)
    }
    await db.query("INSERT INTO orders (sale_id, buyer, count, token) VALUES ($1, $2, $3, $4)", [SALE, who, EACH, token.toString()]);
    await db.query("COMMIT");
    return true;
  } catch (e) {
    await db.query("ROLLBACK");
    throw e;
  }
}

/** Buys every seat of `seats` under `token` in one transaction, fencing each row
 * (compare-and-advance of its high-water token) before reading it: all or none. */
async function buySeats(db, seats, who, token) {
  await db.query("BEGIN");
  try {
    for (const seat of seats) {
      const fenced = await db.query("UPDATE seats SET fence = $2 WHERE id = $1 AND fence < $2 RETURNING sold_to", [seat, token.toString()]);
      if (fenced.rowCount === 0 || fenced.rows[0].sold_to !== null) {
        await db.query("ROLLBACK");
        return false; // a newer token wrote the row, or the seat is sold
      }
    }
    for (const seat of seats) {
      await db.query("UPDATE seats SET sold_to = $2 WHERE id = $1", [seat, who]);
      await db.query("INSERT INTO sales (seat_id, buyer, token) VALUES ($1, $2, $3)", [seat, who, token.toString()]);
    }
    await db.query("COMMIT");
    return true;
  } catch (e) {
    await db.query("ROLLBACK");
    throw e;
  }
}

const here = path.dirname(fileURLToPath(import.meta.url));
const examples = path.join(here, "..", "..", "examples");
const db = new pg.Pool({ ...pgOptions(process.env.FENCE_PG ?? ""), max: CHECKOUTS + 4 });
await db.query(fs.readFileSync(path.join(examples, "fenced_postgres.sql"), "utf8"));
await db.query(fs.readFileSync(path.join(examples, "ticket_sale.sql"), "utf8"));
await db.query("INSERT INTO stock (sale_id, left_count) VALUES ($1, $2) ON CONFLICT (sale_id) DO UPDATE SET left_count = $2", [SALE, STOCK]);
await db.query("DELETE FROM orders WHERE sale_id = $1", [SALE]);
for (let seat = FIRST_SEAT; seat < FIRST_SEAT + 10; seat++) {
  await db.query("INSERT INTO seats (id) VALUES ($1) ON CONFLICT (id) DO UPDATE SET sold_to = NULL, fence = 0", [seat]);
  await db.query("DELETE FROM sales WHERE seat_id = $1", [seat]);
}

const client = new Client({
  addrs: (process.env.TICKETING_ADDRS ?? "127.0.0.1:5225").split(","),
  authToken: process.env.TICKETING_AUTH_TOKEN ?? "",
});

// The stock: every buyer at once, each as its own owner, each told its place in line.
let inside = 0;
let mostInside = 0;
let toldPlace = 0;
const bought = await Promise.all(
  Array.from({ length: BUYERS }, async (_, i) => {
    const who = `buyer-${i}`;
    const buyer = client.withOwner(who);
    let told = false;
    const hold = await buyer.hold([{ key: `checkout:${SALE}`, count: 1, capacity: CHECKOUTS }], {
      lease: 30,
      wait: 120,
      onPlace: () => {
        if (!told) toldPlace += 1;
        told = true;
      },
    });
    inside += 1;
    mostInside = Math.max(mostInside, inside);
    const conn = await db.connect();
    try {
      return await checkout(conn, who, hold.token);
    } finally {
      conn.release();
      inside -= 1;
      await hold.release(); // or `await using hold = …` where the runtime has it
      await buyer.close();
    }
  }),
);
const { rows: orders } = await db.query("SELECT count, token FROM orders WHERE sale_id = $1 ORDER BY id", [SALE]);
const ordered = orders.reduce((sum, o) => sum + o.count, 0);
const left = (await db.query("SELECT left_count FROM stock WHERE sale_id = $1", [SALE])).rows[0].left_count;
console.log(
  `stock of ${STOCK}, ${BUYERS} buyers of ${EACH}: ${bought.filter(Boolean).length} bought, ` +
    `${bought.filter((b) => !b).length} sold out; ${ordered} tickets ordered, ${left} left; at most ${mostInside} ` +
    `checkouts at once (capacity ${CHECKOUTS}); ${toldPlace} buyers told their place in line`,
);

// The seats: three families of 4 adjacent seats (the first two overlapping, named in
// opposite orders) and one buyer of a single seat, all at once.
const seatBuyers = [
  ["family-a", [0, 1, 2, 3]],
  ["family-b", [5, 4, 3, 2]],
  ["family-c", [6, 7, 8, 9]],
  ["single", [1]],
].map(([who, offsets]) => [who, offsets.map((o) => FIRST_SEAT + o)]);
const results = await Promise.all(
  seatBuyers.map(async ([who, seats]) => {
    const buyer = client.withOwner(who);
    const lock =
      seats.length === 1
        ? await buyer.acquire(`seat:${seats[0]}`, { lease: 30, wait: 30 })
        : await buyer.hold(seats.map((s) => `seat:${s}`), { lease: 30, wait: 30 });
    const conn = await db.connect();
    try {
      return [who, (await buySeats(conn, seats, who, lock.token)) ? seats : [], lock.token];
    } finally {
      conn.release();
      await lock.release();
      await buyer.close();
    }
  }),
);
for (const [who, seats, token] of results) {
  console.log(`${who}: ${seats.length ? `seats [${seats.join(", ")}]` : "nothing (a seat was taken)"}, token ${token}`);
}
const twice = (
  await db.query("SELECT seat_id FROM sales WHERE seat_id >= $1 AND seat_id < $1 + 10 GROUP BY seat_id HAVING count(*) > 1", [FIRST_SEAT])
).rows;

await Promise.all([db.end(), client.close()]);
const ok = ordered === STOCK && left === 0 && mostInside <= CHECKOUTS && twice.length === 0;
console.log(ok ? "nothing oversold, no seat sold twice" : `OVERSOLD: ordered ${ordered}, inside ${mostInside}, seats twice ${JSON.stringify(twice)}`);
process.exit(ok ? 0 : 1);
