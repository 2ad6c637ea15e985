// typed.mts: the package used from TypeScript (strict), with `await using`: compiled by
// types.test.mjs with the package's own index.d.ts, then run against a real node.
import {
  Busy,
  Client,
  Indeterminate,
  TicketingError,
  type ClientOptions,
  type HoldKey,
  type Holder,
  type Lock,
  type LockKey,
  type Place,
  type Pool,
  type ReleaseOutcome,
} from "ticketing";

const addr = process.env.ADDR ?? "127.0.0.1:5225";
const authToken = process.env.SECRET ?? "";

// Every option of the declaration (an option it lacked would not compile: strict).
export const options: ClientOptions = { addrs: [addr], authToken, owner: "typed", tlsCa: null, clusterName: null };

async function main(): Promise<void> {
  await using client = new Client({ addrs: [addr], authToken, owner: "typed" });
  const key = `typed-${process.pid}`;
  {
    await using lock = await client.acquire(key, { lease: 30, wait: 5 });
    const token: bigint = lock.token;
    const holder: Holder | null = await client.query(key);
    console.log(`held ${holder?.owner} ${token === holder?.token}`);
  } // released here
  console.log(`after the block: ${(await client.query(key)) === null ? "free" : "held"}`);
  const sold: string = await client.withLock(key, { lease: 30 }, async (lock: Lock) => `sold under ${lock.token}`);
  console.log(sold);
  const lock = await client.acquire(key);
  try {
    await client.withOwner("typed-other").acquire(key, { wait: 0 });
  } catch (e) {
    if (e instanceof Busy) console.log(`busy, definitive ${e.definitive}`);
    else if (e instanceof Indeterminate) console.log(`indeterminate (${e.reason}): ${(await client.resolve(e))?.token}`);
    else if (e instanceof TicketingError) console.log(e.kind);
  }
  const outcome: ReleaseOutcome = await lock.release();
  console.log(outcome);
  {
    const keys: HoldKey[] = [`${key}-seat`, { key: `${key}-stock`, count: 2, capacity: 100 }];
    const places: Place[] = [];
    await using hold = await client.hold(keys, { lease: 30, wait: 5, onPlace: (p: Place) => places.push(p) });
    const held: readonly LockKey[] = hold.keys;
    const pool: Pool = await client.pool(`${key}-stock`);
    const signal: AbortSignal = hold.signal;
    const deadline: number = hold.deadline;
    console.log(`hold ${held.map((k) => `${k.key.slice(key.length)}:${k.count}:${k.capacity}`).join(",")} pool ${pool.inUse}/${pool.capacity} ${pool.holders[0]?.token === hold.token} ${signal.aborted} ${deadline > performance.now()}`);
  }
  {
    const { lock: pending, places } = client.holdInLine([`${key}-line`], { lease: 30, wait: 5 });
    const seen: Place[] = [];
    for await (const p of places) seen.push(p);
    await using inLine = await pending;
    console.log(`in line ${inLine.keys.length} ${seen.length}`);
  }
}

await main();
