// index.d.cts: the package's TypeScript types, for both entry points (index.d.mts re-exports
// them for index.mjs): Client, Lock, Holder, holds and pools, and the error classes under
// TicketingError.

/** Options of `new Client(...)`. */
export interface ClientOptions {
  /** Seed addresses "host:port" (an array, or one string with commas); one live member is enough. */
  addrs: readonly string[] | string;
  /** The client secret, at least 16 bytes. */
  authToken: string | Uint8Array;
  /** Names this client (1..255 bytes, no control characters); default host-pid-random. */
  owner?: string | null;
  /** Path of a PEM CA bundle: turns TLS on. */
  tlsCa?: string | null;
  /** The name of the cluster this client serves (its nodes' TICKETING_CLUSTER_NAME; 1..63
   * ASCII letters, digits, ".", "_", "-"): a node that reports another name or none is
   * sent nothing, and calls reject with Unavailable naming both names. Without it the
   * client compares the fencing domains its nodes report instead. */
  clusterName?: string | null;
}

/** Options of `client.acquire(...)` and `client.withLock(...)`. */
export interface AcquireOptions {
  /** Lease in seconds, whole, 1..250 (default 30). */
  lease?: number;
  /** Longest wait in the key's queue, seconds, 0..300 (acquire: default 0, one immediate try; withLock: default 5). */
  wait?: number;
  /** Aborting it stops the acquire: Cancelled if it was not sent yet, else Indeterminate
   * (never sent again; a grant that comes anyway is released by the client). */
  signal?: AbortSignal;
}

/** One key of `client.hold`: a key string (its exclusive lock: count 1 of capacity 1)
 * or `count` of the key's `capacity` permits. */
export type HoldKey = string | { key: string; count?: number; capacity?: number };

/** A waiting hold's place in line. */
export interface Place {
  /** Requests before it in the longest of its keys' queues. */
  ahead: number;
  /** Grants per second the key saw lately; 0 while not measured yet. */
  grantsPerSecond: number;
  /** The estimated wait in milliseconds (ahead ÷ grantsPerSecond); null while the grant rate is 0. */
  etaMs: number | null;
}

/** Options of `client.hold(...)`: acquire's, and `onPlace`. */
export interface HoldOptions extends AcquireOptions {
  /** Hears the hold's place in line while it waits, on the event loop: when it queues,
   * then at most once a second while the place changes; never after the outcome. */
  onPlace?: (place: Place) => void;
}

/** A key a lock holds, with its permits. */
export interface LockKey {
  readonly key: string;
  readonly count: number;
  readonly capacity: number;
}

/** One hold in a pool. */
export interface PoolHolder {
  owner: string;
  /** The hold's fencing token. */
  token: bigint;
  /** Permits of the key it holds. */
  count: number;
  /** Seconds of lease left on the leader's clock when it answered. */
  leaseLeft: number;
}

/** A key read as a pool, as the leader answered. */
export interface Pool {
  /** The key's capacity; 0 when nobody holds the key or waits for it. */
  capacity: number;
  /** Permits held. */
  inUse: number;
  /** Holds on the key. */
  holds: number;
  /** Requests waiting for it. */
  waiters: number;
  /** Seconds the first waiter has waited. */
  oldestWait: number;
  /** The oldest holds (at most 8), oldest first. */
  holders: PoolHolder[];
}

/** What a release found: "released"; "notHolder" (the lease had already ended);
 * "releasedOrExpired" (an earlier attempt's answer was lost). The value is the library's
 * name of the outcome (ticketing_release_outcome_name), in camelCase. */
export type ReleaseOutcome = "released" | "notHolder" | "releasedOrExpired";

/** Who holds a key, as the leader answered. */
export interface Holder {
  owner: string;
  /** The holder's fencing token. */
  token: bigint;
  /** Seconds of lease left on the leader's clock when it answered. */
  leaseLeft: number;
  /** Acquires queued for the key. */
  waiters: number;
}

/** A held lock. */
export declare class Lock {
  private constructor();
  /** The key; for a hold of several keys, one of them (the library's first: see `keys`). */
  readonly key: string;
  /** Every key it holds with its permits, in the order the hold named them (one for an acquire). */
  readonly keys: readonly LockKey[];
  readonly owner: string;
  /** The fencing token: larger than every earlier grant's. Pass it to every write. */
  readonly token: bigint;
  /** The lease granted, in seconds. */
  readonly lease: number;
  /** Seconds left until the local deadline; 0 once passed or released. */
  readonly remaining: number;
  /** True once the local deadline has passed. */
  readonly expired: boolean;
  /** True once a release came back with an outcome. */
  readonly released: boolean;
  /** The local deadline as a `performance.now()` instant (milliseconds): work under the
   * lock must be done, or stopped, by then. */
  readonly deadline: number;
  /** Fires at the local deadline, never before (its reason a "TimeoutError"
   * DOMException); never once the lock is released. Its timer is unref'd. */
  readonly signal: AbortSignal;
  /** Releases; at most 5 s. Rejects with ReleaseUnconfirmed, Unavailable, ReleaseQueueFull
   * (the lock stays releasable) or InvalidArgument (released already). */
  release(): Promise<ReleaseOutcome>;
  /** `await using lock = await client.acquire(...)`: released at the end of the block. */
  [Symbol.asyncDispose](): Promise<void>;
}

export declare class Client {
  constructor(options: ClientOptions);
  /** The owner this client acquires and releases as. */
  readonly owner: string;
  /** The same client (connections, release queue) acquiring and releasing as `owner`. */
  withOwner(owner: string): Client;
  /** Acquires `key`. Rejects with a definitive error (Busy, Timeout, NotLeader,
   * Overloaded, Unavailable, InvalidArgument, Cancelled: not acquired) or with
   * Indeterminate (the key MAY be held: do not enter the critical section). */
  acquire(key: string, options?: AcquireOptions): Promise<Lock>;
  /** Holds every key of `keys` (1 to 16) at once, `count` of each key's `capacity`
   * permits: one Lock whose release ends the whole hold. Rejects as acquire. */
  hold(keys: readonly HoldKey[], options?: HoldOptions): Promise<Lock>;
  /** `hold` with its places as an async iterator that ends when the hold is granted or
   * fails (a place not yet taken is replaced by a newer one); `lock` is hold's promise. */
  holdInLine(
    keys: readonly HoldKey[],
    options?: AcquireOptions,
  ): { lock: Promise<Lock>; places: AsyncIterableIterator<Place> };
  /** `key` read as a pool. At most 10 s. */
  pool(key: string, options?: { signal?: AbortSignal }): Promise<Pool>;
  /** Acquires `key`, runs `fn(lock)` and releases when it settles, also when it throws.
   * Rejects with NotHolder when `fn` succeeded but the lease had ended before the release. */
  withLock<T>(key: string, options: AcquireOptions | undefined, fn: (lock: Lock) => T | Promise<T>): Promise<T>;
  withLock<T>(key: string, fn: (lock: Lock) => T | Promise<T>): Promise<T>;
  /** Releases `key` held by this client's owner under `token`. */
  release(key: string, token: bigint | number): Promise<ReleaseOutcome>;
  /** Who holds `key`: null when it is free. At most 10 s. */
  query(key: string, options?: { signal?: AbortSignal }): Promise<Holder | null>;
  /** Whether the indeterminate acquire `err` holds its key after all: the Lock (adopted),
   * null (not held), or `err` thrown again (still unknown after `timeout` seconds, default 15). */
  resolve(err: TicketingError, options?: { timeout?: number; signal?: AbortSignal }): Promise<Lock | null>;
  /** Waits (at most `timeout` seconds, default 5) for the releases still to make, then frees
   * the client. True when none was left. */
  close(options?: { timeout?: number }): Promise<boolean>;
  /** `await using client = new Client(...)`: closed at the end of the block. */
  [Symbol.asyncDispose](): Promise<void>;
}

/** Root of every error of this package. */
export declare class TicketingError extends Error {
  constructor(message: string, options?: { retryable?: boolean; cause?: unknown });
  /** The C ABI's name of the kind: "busy", "timeout", "not_leader", "invalid", ... (the
   * library's name, read at load; a kind with no class here is a plain TicketingError). */
  readonly kind: string;
  /** True when the operation certainly did not take effect (an acquire: the key is not
   * held by it); false for Indeterminate and ReleaseUnconfirmed; as the library says. */
  readonly definitive: boolean;
  /** True when the request was certainly not executed and a new try soon may succeed. */
  readonly retryable: boolean;
}
/** acquire: the key is held and the wait was 0 (or its queue is full). Not acquired. */
export declare class Busy extends TicketingError {}
/** acquire: the wait ran out before this caller's turn. Not acquired. */
export declare class Timeout extends TicketingError {}
/** The node does not lead and did not execute the request. Try again. */
export declare class NotLeader extends TicketingError {
  /** The leader's address, when the node knew it. */
  readonly leader: string | null;
}
/** An argument out of its limits or of the wrong type; the message names it. */
export declare class InvalidArgument extends TicketingError {}
/** The server has too many requests pending. Not executed; back off. */
export declare class Overloaded extends TicketingError {}
/** No connection could take the request: nothing was sent. */
export declare class Unavailable extends TicketingError {}
/** acquire: sent, and no definitive answer came. The key MAY be held: do not enter the
 * critical section; `client.resolve(err)` finds out. */
export declare class Indeterminate extends TicketingError {
  /** Why: "connection_lost", "server_unknown", "no_answer", "protocol_violation",
   * "expired_on_arrival", "cancelled". */
  readonly reason: string;
}
/** query: no answer within 10 s. */
export declare class NoAnswer extends TicketingError {}
/** release: no answer within 5 s; the key may still be held; the client keeps checking. */
export declare class ReleaseUnconfirmed extends TicketingError {}
/** release: the release queue is full; nothing was sent. */
export declare class ReleaseQueueFull extends TicketingError {}
/** withLock: the lease had ended before the callback did. */
export declare class NotHolder extends TicketingError {}
/** The server broke the protocol. */
export declare class ProtocolError extends TicketingError {}
/** The server refused the request; the message says why. */
export declare class Refused extends TicketingError {}
/** The client's options were refused; the message names what is wrong. */
export declare class ConfigError extends TicketingError {}
/** A bug in libticketing. */
export declare class InternalError extends TicketingError {}
/** An operation stopped by its AbortSignal before it was sent: nothing happened. */
export declare class Cancelled extends TicketingError {}

/** The native library's release, e.g. "0.2.0". */
export declare function libraryVersion(): string;
/** Where the native library was loaded from. */
export declare function libraryPath(): string;
