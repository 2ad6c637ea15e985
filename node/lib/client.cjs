// client.cjs: Client and Lock, thin wrappers over the C ABI's futures
// (include/ticketing.h): each method starts the native client's operation and returns a
// promise its completion queue settles. Every behaviour — routing to the leader,
// pipelining, reconnecting, never resending a written acquire, deadlines, the release
// queue, resolving — is the native client's (docs/client.md); this file only converts
// arguments and results and rejects with the error class of each kind.
"use strict";

const { C, K, OUTCOMES, RESOLUTION, dispatch } = require("./native.cjs");
const { Cancelled, InvalidArgument, Indeterminate, NotHolder, TicketingError, fromHandle } = require("./errors.cjs");

const clients = new FinalizationRegistry((handle) => C.client_free(handle));
// A lock collected unreleased goes to the client's background release queue.
const locks = new FinalizationRegistry((handle) => C.lock_free(handle));

function describe(value) {
  if (value === null || value === undefined) return String(value);
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "object" || typeof value === "function") return `a ${value.constructor?.name ?? typeof value}`;
  return `${typeof value} ${String(value)}`;
}

/** `value` as the NUL-terminated UTF-8 string the C ABI reads. */
function text(value, name) {
  if (typeof value !== "string") throw new InvalidArgument(`${name} must be a string, not ${describe(value)}`);
  if (value.includes("\0")) throw new InvalidArgument(`${name} contains a NUL character`);
  return value;
}

/** Refuses what is not a finite, non-negative number of seconds. */
function seconds(value, name) {
  if (typeof value !== "number" || !Number.isFinite(value)) {
    throw new InvalidArgument(`${name} must be a finite number of seconds, not ${describe(value)}`);
  }
  if (value < 0) throw new InvalidArgument(`${name} is ${value} s; it must not be negative`);
  return value;
}

/**
 * A lease or a wait in seconds as the C ABI's nanoseconds, to the nearest one: the native
 * library alone checks them (a lease is whole seconds, a wait at most 300 s), alike
 * for every language.
 */
function nanos(value, name) {
  // Beyond any limit: the largest exact integer, which the client refuses as out of range.
  return Math.min(Math.round(seconds(value, name) * 1e9), Number.MAX_SAFE_INTEGER);
}

/** A timeout in seconds as whole milliseconds, the rest rounded up. */
function millis(value, name) {
  return Math.min(Math.ceil(seconds(value, name) * 1000), Number.MAX_SAFE_INTEGER);
}

/** The options object of `call`, with no key but `allowed`. */
function options(value, call, allowed) {
  if (value === undefined || value === null) return {};
  if (typeof value !== "object") throw new InvalidArgument(`${call}: options must be an object, not ${describe(value)}`);
  for (const key of Object.keys(value)) {
    if (!allowed.includes(key)) {
      throw new InvalidArgument(`${call}: unknown option ${JSON.stringify(key)}; the options are ${allowed.join(", ")}`);
    }
  }
  return value;
}

function abortSignal(signal) {
  if (signal === undefined || signal === null) return null;
  if (typeof signal !== "object" || typeof signal.aborted !== "boolean" || typeof signal.addEventListener !== "function") {
    throw new InvalidArgument(`signal must be an AbortSignal, not ${describe(signal)}`);
  }
  return signal;
}

/** The future a `ticketing_*_start` made, or the error its refusal means. */
function started(kind, future, error) {
  if (kind !== K.ok || !future[0]) throw fromHandle(kind, error[0]);
  return future[0];
}

/** Awaits the native `future`: `read(future, cause)` takes its outcome (and frees it);
 * `places` ({ tag, onPlace }) hears a hold's places in line meanwhile.
 * An abort of `signal` cancels the operation by the C ABI's rule; the outcome then is
 * what the cancel made of it (Cancelled, or Indeterminate for an acquire already
 * sent), with the signal's reason as the error's `cause`. */
function run(future, read, signal, places = null) {
  const dispatcher = dispatch();
  const { promise, entry } = dispatcher.start(future, read, places);
  if (signal) {
    const onAbort = () => {
      entry.cause = signal.reason;
      dispatcher.cancel(entry);
    };
    if (signal.aborted) {
      onAbort();
    } else {
      signal.addEventListener("abort", onAbort, { once: true });
      entry.onSettle = () => signal.removeEventListener("abort", onAbort);
    }
  }
  return promise;
}

const U32_MAX = 2 ** 32 - 1;

/** A hold's count or capacity as the C ABI's uint32: a whole number (the type's rule);
 * beyond the type, the nearest end of it, which the native library refuses as out of
 * its limits (it alone checks them). */
function permits(value, name) {
  if (typeof value !== "number" || !Number.isInteger(value)) {
    throw new InvalidArgument(`${name} must be a whole number of permits, not ${describe(value)}`);
  }
  return Math.min(Math.max(value, 0), U32_MAX);
}

/** The keys of client.hold as the C ABI's parts: each a key string (count 1 of
 * capacity 1: the key's exclusive lock) or { key, count = 1, capacity = 1 }. */
function parts(keys) {
  if (!Array.isArray(keys)) {
    throw new InvalidArgument(
      `hold: keys must be an array of keys or { key, count, capacity } objects, not ${describe(keys)}`,
    );
  }
  return keys.map((part, i) => {
    if (typeof part === "string") return { key: text(part, `keys[${i}]`), count: 1, capacity: 1 };
    if (part === null || typeof part !== "object") {
      throw new InvalidArgument(`keys[${i}] must be a key or a { key, count, capacity } object, not ${describe(part)}`);
    }
    options(part, `hold: keys[${i}]`, ["key", "count", "capacity"]);
    return {
      key: text(part.key, `keys[${i}].key`),
      count: permits(part.count ?? 1, `keys[${i}].count`),
      capacity: permits(part.capacity ?? 1, `keys[${i}].capacity`),
    };
  });
}

/** A place in line as the package gives it: { ahead, grantsPerSecond, etaMs } (etaMs
 * null while the key's grant rate is not measured yet). */
function place(ahead, grantsPerKs) {
  return {
    ahead,
    grantsPerSecond: grantsPerKs / 1000,
    etaMs: grantsPerKs === 0 ? null : Math.round((ahead * 1_000_000) / grantsPerKs),
  };
}

function readPool(future, cause) {
  const info = [{}];
  const error = [null];
  let kind;
  try {
    kind = C.future_get_pool(future, info, error);
  } finally {
    C.future_free(future);
  }
  if (kind !== K.ok) throw fromHandle(kind, error[0], cause);
  const p = info[0];
  return {
    capacity: p.capacity,
    inUse: p.in_use,
    holds: p.holds,
    waiters: p.waiters,
    oldestWait: Number(p.oldest_wait_ms) / 1000,
    holders: p.holders.slice(0, p.holders_len).map((h) => ({
      owner: h.owner,
      token: BigInt(h.token),
      count: h.count,
      leaseLeft: Number(h.lease_left_ms) / 1000,
    })),
  };
}

function readLock(client, key) {
  return (future, cause) => {
    const lock = [null];
    const error = [null];
    let kind;
    try {
      kind = C.future_get_lock(future, lock, error);
    } finally {
      C.future_free(future);
    }
    if (kind !== K.ok || !lock[0]) throw fromHandle(kind, error[0], cause);
    return new Lock(lock[0], client, key, client._owner);
  };
}

function readRelease(future, cause) {
  const outcome = [0];
  const error = [null];
  let kind;
  try {
    kind = C.future_get_release(future, outcome, error);
  } finally {
    C.future_free(future);
  }
  if (kind !== K.ok) throw fromHandle(kind, error[0], cause);
  return OUTCOMES.get(outcome[0]);
}

function readQuery(future, cause) {
  const held = [0];
  const holder = [{}];
  const error = [null];
  let kind;
  try {
    kind = C.future_get_query(future, held, holder, error);
  } finally {
    C.future_free(future);
  }
  if (kind !== K.ok) throw fromHandle(kind, error[0], cause);
  if (!held[0]) return null;
  const h = holder[0];
  return { owner: h.owner, token: BigInt(h.token), leaseLeft: Number(h.lease_left_ms) / 1000, waiters: h.waiters };
}

/** The keys of lock `handle`, in the order the hold named them: [{ key, count, capacity }]. */
function lockKeys(handle) {
  const keys = [];
  const count = Number(C.lock_key_count(handle));
  for (let i = 0; i < count; i++) {
    const key = [null];
    const permits_ = [0];
    const capacity = [0];
    const error = [null];
    const kind = C.lock_key_at(handle, i, key, permits_, capacity, error);
    if (kind !== K.ok) throw fromHandle(kind, error[0]);
    keys.push(Object.freeze({ key: key[0], count: permits_[0], capacity: capacity[0] }));
  }
  return Object.freeze(keys);
}

/** Aborts `controller` at the library's deadline `deadlineNs` (ticketing_now_ns's
 * clock), never before it: a timer that fires early (Node's timers run on the loop's
 * cached time) is set again for the rest. `state.timer` is the timer pending (null once
 * fired), for release to clear. Unref'd: it never keeps the process alive. It holds no
 * reference to the lock, which the garbage collector may take meanwhile. */
function armDeadline(state, controller, deadlineNs, reason) {
  const left = Number(deadlineNs - BigInt(C.now_ns())) / 1e6;
  if (left <= 0) {
    state.timer = null;
    controller.abort(reason());
    return;
  }
  state.timer = setTimeout(armDeadline, Math.ceil(left), state, controller, deadlineNs, reason);
  state.timer.unref();
}

/**
 * A held lock: `key`, `owner`, the fencing `token` (a bigint larger than every earlier
 * grant's: pass it to every write the critical section makes), `lease` in seconds;
 * `keys`, every key it holds with its permits (one for an acquire, 1..16 for a hold);
 * `deadline` and `signal`, its local deadline as a performance.now() instant and as an
 * AbortSignal. `await lock.release()`; `await using lock = await client.acquire(...)`
 * releases at the end of the block. A lock garbage-collected unreleased is released in
 * the background.
 */
class Lock {
  /** `key` and `owner`, when the caller knows them (the acquire's), spare reading them
   * back from the handle. */
  constructor(handle, client, key, owner) {
    Object.defineProperty(this, "_handle", { value: handle, writable: true });
    Object.defineProperty(this, "_client", { value: client, writable: true });
    Object.defineProperty(this, "_releasing", { value: false, writable: true });
    // performance.now() read before the library's clock: the deadline stated is never
    // after the one the library keeps.
    const now = performance.now();
    const deadlineNs = BigInt(C.lock_deadline_ns(handle));
    Object.defineProperty(this, "_deadlineNs", { value: deadlineNs });
    Object.defineProperty(this, "_deadline", { value: { timer: null, signal: null } });
    this.key = key ?? C.lock_key(handle);
    this.owner = owner ?? C.lock_owner(handle);
    this.token = BigInt(C.lock_token(handle));
    this.lease = Number(C.lock_lease_ms(handle)) / 1000;
    this.keys = lockKeys(handle);
    this.deadline = now + Number(deadlineNs - BigInt(C.now_ns())) / 1e6;
    locks.register(this, handle, this);
  }

  /**
   * An AbortSignal that fires at the lock's local deadline (`deadline`), never before:
   * pass it to the work done under the lock (fetch, streams, timers, your own checks),
   * which then stops in time instead of learning from the store's rejection. Its reason
   * is a DOMException named "TimeoutError" (as AbortSignal.timeout's). Made at first
   * use, with one unref'd timer (it never keeps the process alive), cleared by release:
   * a released lock's signal never fires.
   */
  get signal() {
    const state = this._deadline;
    if (state.signal === null) {
      const controller = new AbortController();
      state.signal = controller.signal;
      if (this._handle) {
        const what = `the lease of ${this.toString()} reached its local deadline: the keys may be someone else's now`;
        armDeadline(state, controller, this._deadlineNs, () => new DOMException(what, "TimeoutError"));
      }
    }
    return state.signal;
  }

  /** Seconds left until the local deadline (the instant before the acquire was written
   * plus the lease; the server's lease never ends before it); 0 once passed or released. */
  get remaining() {
    return this._handle ? Number(C.lock_remaining_ms(this._handle)) / 1000 : 0;
  }

  /** True once the local deadline has passed: the key may be someone else's now. */
  get expired() {
    return this.remaining === 0;
  }

  /** True once a release came back with an outcome. */
  get released() {
    return this._handle === null;
  }

  /**
   * Releases and resolves to the server's answer: "released", "notHolder" (the lease had
   * already ended) or "releasedOrExpired" (an earlier attempt's answer was lost). Rejects
   * with ReleaseUnconfirmed, Unavailable or ReleaseQueueFull when not confirmed (the lock
   * stays releasable: call it again), InvalidArgument when released already. At most 5 s.
   */
  async release() {
    const handle = this._handle;
    if (!handle) throw new InvalidArgument(`the lock on ${JSON.stringify(this.key)} was released already`);
    const future = [null];
    const error = [null];
    const started_ = started(C.lock_release_start(handle, future, error), future, error);
    this._releasing = true;
    try {
      const outcome = await run(started_, readRelease, null);
      // Released for good: the handle has nothing left to do.
      if (this._handle === handle) {
        this._handle = null;
        clearTimeout(this._deadline.timer);
        this._deadline.timer = null;
        locks.unregister(this);
        C.lock_free(handle);
      }
      return outcome;
    } finally {
      this._releasing = false;
    }
  }

  /** `await using`: releases unless released already (or a release is under way). */
  async [Symbol.asyncDispose ?? Symbol.for("Symbol.asyncDispose")]() {
    if (this._handle && !this._releasing) await this.release();
  }

  toString() {
    const keys = this.keys.length === 1 ? JSON.stringify(this.key) : JSON.stringify(this.keys.map((k) => k.key));
    return `Lock(${this.keys.length === 1 ? "key" : "keys"}=${keys}, owner=${JSON.stringify(this.owner)}, token=${this.token})`;
  }
}

const CLIENT_OPTIONS = ["addrs", "authToken", "owner", "tlsCa", "clusterName"];

/**
 * A client of a Ticketing node or cluster; share one per process. Makes no connection
 * here (connections are made in the background, on the client's own threads).
 *
 *   new Client({ addrs: ["10.0.0.1:5225"], authToken: "…", owner: "box-office-7" })
 *
 * addrs: seed addresses "host:port" (an array, or one string with commas); one live
 * member is enough. authToken: the client secret (a string or bytes, at least 16).
 * owner: names this client (1..255 bytes; default host-pid-random). tlsCa: path of a
 * PEM CA bundle: turns TLS on. clusterName: the name of the cluster this client serves
 * (its nodes' TICKETING_CLUSTER_NAME): a node that reports another name or none is sent
 * nothing, and calls reject with Unavailable naming both names; without it the client
 * compares the fencing domains its nodes report instead.
 */
class Client {
  constructor(opts) {
    if (opts === undefined || opts === null || typeof opts !== "object") {
      throw new InvalidArgument(`new Client(options): options must be an object { addrs, authToken, owner, tlsCa, clusterName }, not ${describe(opts)}`);
    }
    options(opts, "new Client", CLIENT_OPTIONS);
    let addrs = opts.addrs;
    if (typeof addrs === "string") addrs = addrs.split(",").filter((a) => a !== "");
    if (!Array.isArray(addrs)) throw new InvalidArgument(`addrs must be an array of "host:port" strings, not ${describe(addrs)}`);
    addrs = addrs.map((a, i) => text(a, `addrs[${i}]`));
    let token = opts.authToken;
    if (typeof token === "string") {
      token = Buffer.from(text(token, "authToken"), "utf8");
    } else if (token instanceof Uint8Array) {
      token = Buffer.from(token);
    } else if (token === undefined || token === null) {
      throw new InvalidArgument(
        `authToken is missing (${token}): give new Client the cluster's client secret, ` +
          "e.g. authToken: process.env.TICKETING_AUTH_TOKEN (and check that variable is set)",
      );
    } else {
      throw new InvalidArgument(`authToken must be a string or a Uint8Array, not ${describe(token)}`);
    }
    const owner = opts.owner === undefined || opts.owner === null ? null : text(opts.owner, "owner");
    const tlsCa = opts.tlsCa === undefined || opts.tlsCa === null ? null : text(opts.tlsCa, "tlsCa");
    const name =
      opts.clusterName === undefined || opts.clusterName === null ? null : text(opts.clusterName, "clusterName");
    const client = [null];
    const error = [null];
    // "node": the client's messages name these options (authToken, tlsCa, clusterName).
    const kind = C.client_new_named("node", name, addrs, addrs.length, token, token.length, owner, tlsCa, client, error);
    if (kind !== K.ok || !client[0]) throw fromHandle(kind, error[0]);
    this._adopt(client[0]);
  }

  _adopt(handle) {
    Object.defineProperty(this, "_handle", { value: handle, writable: true });
    Object.defineProperty(this, "_owner", { value: C.client_owner(handle) });
    clients.register(this, handle, this);
  }

  _live() {
    if (!this._handle) throw new InvalidArgument("this Client is closed");
    return this._handle;
  }

  /** The owner this client acquires and releases as. */
  get owner() {
    this._live();
    return this._owner;
  }

  /** The same client (connections, release queue) acquiring and releasing as `owner`:
   * one owner per logical caller when resolve must tell an indeterminate acquire's
   * grant from another grant to the same owner. Close it as any client. */
  withOwner(owner) {
    const client = [null];
    const error = [null];
    const kind = C.client_with_owner(this._live(), text(owner, "owner"), client, error);
    if (kind !== K.ok || !client[0]) throw fromHandle(kind, error[0]);
    const other = Object.create(Client.prototype);
    other._adopt(client[0]);
    return other;
  }

  /**
   * Acquires `key` for `lease` seconds (whole, 1..250; default 30), queueing at most
   * `wait` seconds (0..300; default 0: one immediate try). Resolves to the Lock.
   * Rejects, definitive (not acquired), with Busy, Timeout, NotLeader, Overloaded,
   * Unavailable, InvalidArgument, Cancelled; or with Indeterminate: the key MAY be held —
   * do not enter the critical section; `client.resolve(err)` finds out. An abort of
   * `signal` before the request was written ends it Cancelled; after, Indeterminate
   * (never sent again; a grant that comes anyway is released by the client).
   */
  async acquire(key, opts) {
    const o = options(opts, "acquire", ["lease", "wait", "signal"]);
    return this._acquire(key, o.lease ?? 30, o.wait ?? 0, abortSignal(o.signal));
  }

  async _acquire(key, lease, wait, signal) {
    const handle = this._live();
    const k = text(key, "key");
    const leaseNs = nanos(lease, "lease");
    const waitNs = nanos(wait, "wait");
    if (signal?.aborted) {
      throw new Cancelled("the signal was aborted before the acquire started: nothing was sent", { cause: signal.reason });
    }
    const future = [null];
    const error = [null];
    const f = started(C.acquire_start(handle, k, leaseNs, waitNs, future, error), future, error);
    return run(f, readLock(this, k), signal);
  }

  /**
   * Holds every key of `keys` at once — an array of 1 to 16 distinct keys, each a key
   * string (its exclusive lock) or `{ key, count, capacity }` (`count` of the key's
   * `capacity` permits; both default to 1) — for `lease` seconds, queueing at most
   * `wait` seconds (defaults and limits as acquire's). Resolves to one Lock of every key
   * (`lock.keys`), whose release ends the whole hold. Granted all at once, in arrival
   * order, or not at all: while it waits it holds nothing. `onPlace(place)`, when given,
   * hears the hold's place in line while it waits, on the event loop: { ahead,
   * grantsPerSecond, etaMs } (`etaMs` the estimated wait in milliseconds, null while the
   * key's grant rate is not measured yet), when it queues and then at most once a second
   * while the place changes. Rejects as acquire does; InvalidArgument (from the native
   * library, which alone checks the limits) for a key named twice, a count or capacity
   * out of range, or a capacity other than the one the key has (naming both numbers).
   */
  async hold(keys, opts) {
    const o = options(opts, "hold", ["lease", "wait", "signal", "onPlace"]);
    const handle = this._live();
    const p = parts(keys);
    const leaseNs = nanos(o.lease ?? 30, "lease");
    const waitNs = nanos(o.wait ?? 0, "wait");
    const signal = abortSignal(o.signal);
    const onPlace = o.onPlace ?? null;
    if (onPlace !== null && typeof onPlace !== "function") {
      throw new InvalidArgument(`hold: onPlace must be a function, not ${describe(onPlace)}`);
    }
    if (signal?.aborted) {
      throw new Cancelled("the signal was aborted before the hold started: nothing was sent", { cause: signal.reason });
    }
    const future = [null];
    const error = [null];
    if (onPlace === null) {
      const f = started(C.hold_start(handle, p, p.length, leaseNs, waitNs, null, null, future, error), future, error);
      return run(f, readLock(this), signal);
    }
    // Places come through this thread's completion queue under a tag of their own.
    const dispatcher = dispatch();
    const tag = dispatcher.tag();
    const f = started(
      C.hold_start_queued(handle, p, p.length, leaseNs, waitNs, dispatcher.queue, tag, future, error),
      future,
      error,
    );
    return run(f, readLock(this), signal, { tag, onPlace: (ahead, grantsPerKs) => onPlace(place(ahead, grantsPerKs)) });
  }

  /**
   * `hold` with its places in line as an async iterator: returns `{ lock, places }` at
   * once — `lock` the promise `hold` returns, `places` an async iterator of the hold's
   * places (as `onPlace` hears them) that ends when the hold is granted or fails. A place
   * not yet taken is replaced by a newer one, so a slow reader sees the latest. Options
   * as `hold`'s but `onPlace`.
   *
   *     const { lock, places } = client.holdInLine(seats, { lease: 30, wait: 120 });
   *     for await (const p of places) show(`#${p.ahead + 1}`);
   *     await using held = await lock;
   */
  holdInLine(keys, opts) {
    const o = options(opts, "holdInLine", ["lease", "wait", "signal"]);
    let latest = null;
    let wake = null;
    let settled = false;
    const poke = () => {
      const w = wake;
      wake = null;
      if (w) w();
    };
    const lock = this.hold(keys, { ...o, onPlace: (place) => {
      latest = place;
      poke();
    } });
    const end = () => {
      settled = true;
      poke();
    };
    lock.then(end, end);
    async function* places() {
      for (;;) {
        if (latest !== null) {
          const place = latest;
          latest = null;
          yield place;
        } else if (settled) {
          return;
        } else {
          await new Promise((resolve) => {
            wake = resolve;
          });
        }
      }
    }
    return { lock, places: places() };
  }

  /** `key` read as a pool, as the leader answers: { capacity, inUse, holds, waiters,
   * oldestWait (seconds), holders: the oldest holds (at most 8), each { owner, token
   * (bigint), count, leaseLeft (seconds) } }; capacity 0 when nobody holds the key or
   * waits for it. Rejects as query does. At most 10 s. */
  async pool(key, opts) {
    const o = options(opts, "pool", ["signal"]);
    const handle = this._live();
    const k = text(key, "key");
    const signal = abortSignal(o.signal);
    const future = [null];
    const error = [null];
    return run(started(C.pool_start(handle, k, future, error), future, error), readPool, signal);
  }

  /**
   * Acquires `key` (options as acquire; `wait` defaults to 5 s here), calls `fn(lock)` and
   * releases when it settles — also when it throws. Resolves to what `fn` resolved to.
   * When `fn` succeeded but the lease had ended before the release (the key may have been
   * granted to another meanwhile), rejects with NotHolder.
   */
  async withLock(key, opts, fn) {
    if (typeof opts === "function" && fn === undefined) {
      fn = opts;
      opts = undefined;
    }
    if (typeof fn !== "function") throw new InvalidArgument(`withLock: the callback must be a function, not ${describe(fn)}`);
    const o = options(opts, "withLock", ["lease", "wait", "signal"]);
    const lock = await this._acquire(key, o.lease ?? 30, o.wait ?? 5, abortSignal(o.signal));
    let result;
    try {
      result = await fn(lock);
    } catch (e) {
      if (!lock.released) {
        try {
          await lock.release();
        } catch {
          // The callback's error is the one to see; the client keeps checking the release.
        }
      }
      throw e;
    }
    if (lock.released) return result;
    const outcome = await lock.release();
    if (outcome === "notHolder") {
      throw new NotHolder(
        `the lease on ${JSON.stringify(lock.key)} (token ${lock.token}) had ended before the callback did: the key ` +
          "may have been granted to someone else meanwhile; only the fencing token protected the writes",
      );
    }
    return result;
  }

  /** Releases `key` held by this client's owner under `token` (a bigint kept
   * elsewhere). Outcomes and errors as Lock.release. */
  async release(key, token) {
    const handle = this._live();
    const k = text(key, "key");
    if (typeof token === "number" && Number.isSafeInteger(token)) token = BigInt(token);
    if (typeof token !== "bigint" || token < 0n || token >= 1n << 64n) {
      throw new InvalidArgument(`token must be a bigint in 0..2**64, not ${describe(token)}`);
    }
    const future = [null];
    const error = [null];
    return run(started(C.release_start(handle, k, token, future, error), future, error), readRelease, null);
  }

  /** Who holds `key`, as the leader answers: null when free, else
   * { owner, token (bigint), leaseLeft (seconds), waiters }. Rejects with NoAnswer,
   * Unavailable, InvalidArgument, ... At most 10 s. */
  async query(key, opts) {
    const o = options(opts, "query", ["signal"]);
    const handle = this._live();
    const k = text(key, "key");
    const signal = abortSignal(o.signal);
    const future = [null];
    const error = [null];
    return run(started(C.query_start(handle, k, future, error), future, error), readQuery, signal);
  }

  /**
   * Whether the indeterminate acquire `err` holds its key after all, found out without
   * sending it again: waits until its grant can no longer happen (its send instant + its
   * wait + 5 s), then asks the leader. Resolves to the Lock (adopted: use or release it)
   * or null (certainly not held); rejects with `err` itself when still unknown after
   * `timeout` seconds (default 15). Any other TicketingError resolves to null.
   */
  async resolve(err, opts) {
    const o = options(opts, "resolve", ["timeout", "signal"]);
    const handle = this._live();
    const timeoutMs = millis(o.timeout ?? 15, "timeout");
    const signal = abortSignal(o.signal);
    if (!(err instanceof TicketingError)) {
      throw new InvalidArgument(`resolve takes the Indeterminate an acquire rejected with, not ${describe(err)}`);
    }
    if (!(err instanceof Indeterminate) || !err._handle) return null;
    const future = [null];
    const error = [null];
    const f = started(C.resolve_start(handle, err._handle, timeoutMs, future, error), future, error);
    return run(
      f,
      (future_, cause) => {
        const resolution = [0];
        const lock = [null];
        const failure = [null];
        let kind;
        try {
          kind = C.future_get_resolve(future_, resolution, lock, failure);
        } finally {
          C.future_free(future_);
        }
        if (kind !== K.ok) throw fromHandle(kind, failure[0], cause);
        if (resolution[0] === RESOLUTION.held && lock[0]) return new Lock(lock[0], this);
        if (resolution[0] === RESOLUTION.not_held) return null;
        throw err;
      },
      signal,
    );
  }

  /**
   * Waits until every release the client still has to make is done (at most `timeout`
   * seconds, default 5, on a worker thread: the event loop stays free), then frees this
   * handle. Resolves to true when nothing was left, false when the timeout came first.
   * Operations still pending end by their own deadlines; locks stay valid.
   */
  async close(opts) {
    const o = options(opts, "close", ["timeout"]);
    const timeoutMs = millis(o.timeout ?? 5, "timeout");
    const handle = this._handle;
    if (!handle) return true;
    this._handle = null;
    clients.unregister(this);
    const drained = [0];
    const error = [null];
    const kind = await new Promise((resolve, reject) => {
      C.client_close.async(handle, timeoutMs, drained, error, (e, rc) => (e ? reject(e) : resolve(rc)));
    }).finally(() => C.client_free(handle));
    if (kind !== K.ok) throw fromHandle(kind, error[0]);
    return drained[0] === 1;
  }

  /** `await using client = new Client(...)`: closes at the end of the block. */
  async [Symbol.asyncDispose ?? Symbol.for("Symbol.asyncDispose")]() {
    await this.close();
  }
}

module.exports = { Client, Lock };
