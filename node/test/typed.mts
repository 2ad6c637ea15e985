// typed.mts: the package used from TypeScript (strict), with `await using`: compiled by
// types.test.mjs with the package's own index.d.ts, then run against a real node.
import { Busy, Client, Indeterminate, TicketingError, type ClientOptions, type Holder, type Lock, type ReleaseOutcome } from "ticketing";

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
}

await main();
