// native.cjs: the koffi declarations of include/ticketing.h, the library they load (its
// ABI version checked before any other call), and the completion queue through which
// every operation's native future reports back to this thread's event loop.
"use strict";

const fs = require("node:fs");
const path = require("node:path");
const koffi = require("koffi");

/** The ABI version this package was written against (TICKETING_ABI_VERSION). */
const ABI_VERSION = 3;
const NAME = process.platform === "darwin" ? "libticketing.dylib" : "libticketing.so";

/** Where the library is: $TICKETING_LIBRARY, else node/native/ (where the install step
 * puts the one cargo built). */
function libraryPath() {
  const configured = process.env.TICKETING_LIBRARY;
  if (configured) return configured;
  const bundled = path.join(__dirname, "..", "native", NAME);
  if (fs.existsSync(bundled)) return bundled;
  throw new Error(
    `ticketing: the native library is missing: no ${bundled} and TICKETING_LIBRARY is not set. ` +
      "Install the package from the repository with `npm install ./node` (its install step builds the " +
      "library with cargo), or set TICKETING_LIBRARY to a libticketing.so built by `cargo build --release --lib`.",
  );
}

const PATH = libraryPath();
let lib;
try {
  lib = koffi.load(PATH);
} catch (e) {
  throw new Error(`ticketing: cannot load ${PATH}: ${e.message}`);
}

const version = lib.func("uint32_t ticketing_version(void)");
if (version() !== ABI_VERSION) {
  throw new Error(
    `ticketing: ${PATH} has ABI version ${version()}, this package needs ${ABI_VERSION}: ` +
      "reinstall the package from the same repository checkout as the library",
  );
}

const Holder = koffi.struct("ticketing_holder", {
  token: "uint64_t",
  lease_left_ms: "uint64_t",
  waiters: "uint32_t",
  owner_len: "uint32_t",
  owner: "char[256]",
});

const HoldPart = koffi.struct("ticketing_hold_part", {
  key: "const char *",
  count: "uint32_t",
  capacity: "uint32_t",
});

const PoolHolder = koffi.struct("ticketing_pool_holder", {
  token: "uint64_t",
  lease_left_ms: "uint64_t",
  count: "uint32_t",
  owner_len: "uint32_t",
  owner: "char[256]",
});

const PoolInfo = koffi.struct("ticketing_pool_info", {
  capacity: "uint32_t",
  in_use: "uint32_t",
  holds: "uint32_t",
  waiters: "uint32_t",
  oldest_wait_ms: "uint64_t",
  holders_len: "uint32_t",
  holders: koffi.array(PoolHolder, 8),
});

// Every handle is an opaque pointer (a BigInt for koffi); out-parameters are
// one-element arrays.
const fn = (signature) => lib.func(signature);
// A function the library may be too old to have.
const newer = (signature) => {
  try {
    return fn(signature);
  } catch (e) {
    throw new Error(
      `ticketing: ${PATH} is older than this package (${e.message}): rebuild it ` +
        "(`cargo build --release --lib`) or reinstall the package from the same checkout",
    );
  }
};
const C = {
  version,
  version_string: fn("const char *ticketing_version_string(void)"),
  kind_name: fn("const char *ticketing_kind_name(int kind)"),
  kind_is_definitive: fn("int ticketing_kind_is_definitive(int kind)"),
  cause_name: fn("const char *ticketing_cause_name(int cause)"),
  release_outcome_name: fn("const char *ticketing_release_outcome_name(int outcome)"),
  resolution_name: fn("const char *ticketing_resolution_name(int resolution)"),

  // A library without it is older than this package: said at load, naming the fix.
  client_new_named: newer(
    "int ticketing_client_new_named(const char *binding, const char *cluster_name, const char **addrs, " +
      "size_t addrs_len, const uint8_t *auth_token, size_t auth_token_len, const char *owner, " +
      "const char *tls_ca_file, _Out_ void **client_out, _Out_ void **error_out)",
  ),
  client_with_owner: fn(
    "int ticketing_client_with_owner(void *client, const char *owner, _Out_ void **client_out, _Out_ void **error_out)",
  ),
  client_owner: fn("const char *ticketing_client_owner(void *client)"),
  // Blocks up to timeout_ms: only ever called through .async (a libuv worker thread).
  client_close: fn(
    "int ticketing_client_close(void *client, int64_t timeout_ms, _Out_ int *drained_out, _Out_ void **error_out)",
  ),
  client_free: fn("void ticketing_client_free(void *client)"),

  lock_token: fn("uint64_t ticketing_lock_token(void *lock)"),
  lock_key: fn("const char *ticketing_lock_key(void *lock)"),
  lock_owner: fn("const char *ticketing_lock_owner(void *lock)"),
  lock_lease_ms: fn("uint64_t ticketing_lock_lease_ms(void *lock)"),
  lock_remaining_ms: fn("uint64_t ticketing_lock_remaining_ms(void *lock)"),
  lock_free: fn("void ticketing_lock_free(void *lock)"),
  lock_key_count: newer("size_t ticketing_lock_key_count(void *lock)"),
  lock_key_at: newer(
    "int ticketing_lock_key_at(void *lock, size_t index, _Out_ const char **key_out, _Out_ uint32_t *count_out, " +
      "_Out_ uint32_t *capacity_out, _Out_ void **error_out)",
  ),
  now_ns: newer("int64_t ticketing_now_ns(void)"),
  lock_deadline_ns: newer("int64_t ticketing_lock_deadline_ns(void *lock)"),

  error_kind: fn("int ticketing_error_kind(void *error)"),
  error_message: fn("const char *ticketing_error_message(void *error)"),
  error_cause: fn("int ticketing_error_cause(void *error)"),
  error_leader: fn("const char *ticketing_error_leader(void *error)"),
  error_is_retryable: fn("int ticketing_error_is_retryable(void *error)"),
  error_free: fn("void ticketing_error_free(void *error)"),

  // Futures: none of these blocks.
  acquire_start: fn(
    "int ticketing_acquire_start(void *client, const char *key, int64_t lease_ns, int64_t wait_ns, " +
      "_Out_ void **future_out, _Out_ void **error_out)",
  ),
  // Always given a NULL on_place: a hold that asks for its places is started queued (below).
  hold_start: newer(
    "int ticketing_hold_start(void *client, const ticketing_hold_part *parts, size_t parts_len, " +
      "int64_t lease_ns, int64_t wait_ns, void *on_place, void *place_ctx, _Out_ void **future_out, _Out_ void **error_out)",
  ),
  // Places come through the completion queue (place_tag), never a callback on a client thread.
  hold_start_queued: newer(
    "int ticketing_hold_start_queued(void *client, const ticketing_hold_part *parts, size_t parts_len, " +
      "int64_t lease_ns, int64_t wait_ns, void *queue, uint64_t place_tag, _Out_ void **future_out, _Out_ void **error_out)",
  ),
  future_take_place: newer(
    "int ticketing_future_take_place(void *future, _Out_ uint32_t *ahead_out, _Out_ uint32_t *grants_per_ks_out)",
  ),
  pool_start: newer("int ticketing_pool_start(void *client, const char *key, _Out_ void **future_out, _Out_ void **error_out)"),
  future_get_pool: newer(
    "int ticketing_future_get_pool(void *future, _Out_ ticketing_pool_info *pool_out, _Out_ void **error_out)",
  ),
  lock_release_start: fn("int ticketing_lock_release_start(void *lock, _Out_ void **future_out, _Out_ void **error_out)"),
  release_start: fn(
    "int ticketing_release_start(void *client, const char *key, uint64_t token, _Out_ void **future_out, _Out_ void **error_out)",
  ),
  query_start: fn("int ticketing_query_start(void *client, const char *key, _Out_ void **future_out, _Out_ void **error_out)"),
  resolve_start: fn(
    "int ticketing_resolve_start(void *client, void *error, int64_t timeout_ms, _Out_ void **future_out, _Out_ void **error_out)",
  ),
  future_is_ready: fn("int ticketing_future_is_ready(void *future)"),
  future_set_queue: fn("int ticketing_future_set_queue(void *future, void *queue, uint64_t tag, _Out_ void **error_out)"),
  future_cancel: fn("int ticketing_future_cancel(void *future)"),
  future_get_lock: fn("int ticketing_future_get_lock(void *future, _Out_ void **lock_out, _Out_ void **error_out)"),
  future_get_release: fn("int ticketing_future_get_release(void *future, _Out_ int *outcome_out, _Out_ void **error_out)"),
  future_get_query: fn(
    "int ticketing_future_get_query(void *future, _Out_ int *held_out, _Out_ ticketing_holder *holder_out, _Out_ void **error_out)",
  ),
  future_get_resolve: fn(
    "int ticketing_future_get_resolve(void *future, _Out_ int *resolution_out, _Out_ void **lock_out, _Out_ void **error_out)",
  ),
  future_free: fn("void ticketing_future_free(void *future)"),
  queue_new: fn("int ticketing_queue_new(_Out_ void **queue_out, _Out_ void **error_out)"),
  queue_fd: fn("int ticketing_queue_fd(void *queue)"),
  queue_take: fn("size_t ticketing_queue_take(void *queue, void *tags, size_t max)"),
  queue_free: fn("void ticketing_queue_free(void *queue)"),
  // poll(2), found through the library's own dependencies (libc): waits for the queue's
  // descriptor on a libuv worker thread (.async), never on the event loop.
  poll: fn("int poll(void *fds, unsigned long nfds, int timeout)"),
};

/** A numbered table of the library: number -> name, from `first` until the name
 * function's NULL (past the end: "unknown" is a resolution's name, not the end). */
function table(nameOf, first) {
  const names = new Map();
  for (let number = first, name; (name = nameOf(number)) !== null; number++) names.set(number, name);
  return names;
}
const numbers = (names) => Object.fromEntries([...names].map(([number, name]) => [name, number]));
const camel = (name) => name.replace(/_(.)/g, (_, c) => c.toUpperCase());

// The ABI's tables, as the library names them (src/capi/abi.rs declares each once).
/** Status and error kinds (TICKETING_*): number -> name ("ok", "busy", ...). */
const KINDS = table(C.kind_name, 0);
/** Kind name -> number ({ ok: 0, busy: 1, ... }). */
const K = numbers(KINDS);
/** Kind name -> whether an error of it means the operation certainly did not take effect. */
const DEFINITIVE = Object.fromEntries([...KINDS].map(([number, name]) => [name, C.kind_is_definitive(number) !== 0]));
/** Causes of an indeterminate acquire (TICKETING_CAUSE_*): number -> name. */
const CAUSES = table(C.cause_name, 1);
/** Release outcomes: number -> this package's name ("released", "notHolder", ...). */
const OUTCOMES = new Map([...table(C.release_outcome_name, 1)].map(([number, name]) => [number, camel(name)]));
/** Resolutions of an indeterminate acquire: name -> number ({ held: 1, not_held: 2, unknown: 3 }). */
const RESOLUTION = numbers(table(C.resolution_name, 1));

/**
 * This thread's completion queue (one per JS thread: module state is per thread).
 *
 * Every started operation's native future is handed to the queue with a tag. While at
 * least one is pending, one poll(2) on the queue's descriptor waits on a libuv worker
 * thread (koffi's async call, an napi_async_work): the client's own threads only put
 * tags on the queue and never wait for JavaScript; the event loop runs nothing until
 * the descriptor is readable, then takes every ready tag at once and settles each
 * operation's promise. Pending work keeps the process alive (the async work is
 * referenced); with nothing pending nothing is outstanding, so the client never keeps
 * a process from exiting.
 *
 * A hold's places in line come the same way: the future leaves its place tag on the
 * queue (at most one waiting at once) and the event loop reads the latest place with
 * ticketing_future_take_place, until the future's own tag comes.
 */
class Dispatcher {
  constructor() {
    const queue = [null];
    const error = [null];
    const kind = C.queue_new(queue, error);
    if (kind !== K.ok) {
      const message = error[0] ? C.error_message(error[0]) : "no pipe could be made";
      if (error[0]) C.error_free(error[0]);
      throw new Error(`ticketing: cannot make a completion queue: ${message}`);
    }
    this.queue = queue[0];
    this.pollfd = Buffer.alloc(8); // struct pollfd { int fd; short events; short revents; }
    this.pollfd.writeInt32LE(C.queue_fd(this.queue), 0);
    this.pollfd.writeInt16LE(1 /* POLLIN */, 4);
    this.tags = new BigUint64Array(256);
    this.waiting = new Map();
    // Place tag -> { future, onPlace } of a hold still pending.
    this.places = new Map();
    this.nextTag = 1;
    this.polling = false;
    this.onPolled = () => {
      this.polling = false;
      this.drain();
      this.arm();
    };
  }

  /** A new tag, for the places of a future about to be started
   * (ticketing_hold_start_queued) and then given to `start`. */
  tag() {
    return this.nextTag++;
  }

  /** Hands `future` to the queue; `read(future)` (which frees it) gives the outcome or
   * throws the error. `places`, when given, is { tag, onPlace }: the future's place tag
   * and what hears each place, onPlace(ahead, grantsPerKs), on the event loop. Returns
   * the promise and the entry (for cancel). */
  start(future, read, places = null) {
    const tag = this.nextTag++;
    let entry;
    const promise = new Promise((resolve, reject) => {
      entry = { future, read, resolve, reject, done: false, onSettle: null };
    });
    // Refused only for a future that has a callback or queue already: never one just
    // started. Were it refused, the promise would never settle: say so at once.
    const error = [null];
    if (C.future_set_queue(future, this.queue, tag, error) !== K.ok) {
      const message = error[0] ? C.error_message(error[0]) : "refused";
      if (error[0]) C.error_free(error[0]);
      C.future_free(future);
      throw new Error(`ticketing: internal: a new future refused the completion queue: ${message}`);
    }
    this.waiting.set(tag, entry);
    if (places) {
      entry.placeTag = places.tag;
      this.places.set(places.tag, { future, onPlace: places.onPlace });
    }
    this.arm();
    return { promise, entry };
  }

  /** Cancels the operation if it is still pending (the future ends at once, and its tag
   * comes through the queue as any other). */
  cancel(entry) {
    if (!entry.done) C.future_cancel(entry.future);
  }

  arm() {
    if (this.polling || this.waiting.size === 0) return;
    this.polling = true;
    C.poll.async(this.pollfd, 1, -1, this.onPolled);
  }

  /** The latest place of a pending hold, to its onPlace; an exception there is thrown
   * on its own (as an event listener's), never into the other completions. */
  place({ future, onPlace }) {
    const ahead = [0];
    const grantsPerKs = [0];
    if (C.future_take_place(future, ahead, grantsPerKs) !== 1) return;
    try {
      onPlace(ahead[0], grantsPerKs[0]);
    } catch (e) {
      process.nextTick(() => {
        throw e;
      });
    }
  }

  drain() {
    for (;;) {
      const count = Number(C.queue_take(this.queue, this.tags, this.tags.length));
      for (let i = 0; i < count; i++) {
        const tag = Number(this.tags[i]);
        const place = this.places.get(tag);
        if (place !== undefined) {
          this.place(place);
          continue;
        }
        const entry = this.waiting.get(tag);
        if (entry === undefined) continue;
        this.waiting.delete(tag);
        // The future is freed below: a place tag of it still to come is ignored.
        if (entry.placeTag !== undefined) this.places.delete(entry.placeTag);
        entry.done = true;
        if (entry.onSettle) entry.onSettle();
        let value;
        try {
          value = entry.read(entry.future, entry.cause);
        } catch (e) {
          entry.reject(e);
          continue;
        }
        entry.resolve(value);
      }
      if (count < this.tags.length) return;
    }
  }
}

let dispatcher = null;

/** This thread's dispatcher, made at first use. */
function dispatch() {
  if (dispatcher === null) dispatcher = new Dispatcher();
  return dispatcher;
}

module.exports = { koffi, C, HoldPart, K, KINDS, DEFINITIVE, OUTCOMES, RESOLUTION, CAUSES, PATH, ABI_VERSION, dispatch };
