// errors.cjs: the error classes, one per error kind of the C ABI (include/ticketing.h),
// all under TicketingError. The message is the native client's own text, which names
// this package's options where it names a fix (the client is made with
// ticketing_client_new_named("node", ...)).
"use strict";

const { C, KINDS, DEFINITIVE, CAUSES } = require("./native.cjs");

/** Root of every error of this package. `kind` is the C ABI's name of the kind ("busy",
 * "timeout", ...); `definitive` is true when the operation certainly did not take
 * effect (an acquire: the key is NOT held by it), false when it may have (an
 * indeterminate acquire, an unconfirmed release); `retryable` is true when the request
 * was certainly not executed and a new try soon may succeed. */
class TicketingError extends Error {
  constructor(message, options = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.retryable = Boolean(options.retryable);
  }
  get name() {
    return this.constructor.name;
  }
  get kind() {
    return this.constructor.kind;
  }
  get definitive() {
    return this.constructor.definitive;
  }
}
TicketingError.kind = "error";
TicketingError.definitive = true;

/** The class `name` of the C ABI's kind `kind`, definitive as the library says of it
 * (`definitive` only for a kind of this package's own, not the library's). */
function kindClass(name, kind, definitive = DEFINITIVE[kind]) {
  const cls = { [name]: class extends TicketingError {} }[name];
  cls.kind = kind;
  cls.definitive = definitive;
  return cls;
}

/** acquire: the key is held and the wait was 0 (or its queue is full). Not acquired. */
const Busy = kindClass("Busy", "busy");
/** acquire: the wait ran out before this caller's turn. Not acquired. */
const Timeout = kindClass("Timeout", "timeout");
/** An argument out of its limits or of the wrong type; the message names it. Nothing was sent. */
const InvalidArgument = kindClass("InvalidArgument", "invalid");
/** The server has too many requests pending. Not executed; back off and try again. */
const Overloaded = kindClass("Overloaded", "overloaded");
/** No connection could take the request in time: nothing was sent. The message names
 * the last connection error; `retryable` false: a mistake a retry cannot fix. */
const Unavailable = kindClass("Unavailable", "unavailable");
/** query: sent, no answer within the request timeout (10 s). */
const NoAnswer = kindClass("NoAnswer", "no_answer");
/** release: no answer within the 5 s deadline. The key may still be held; the client
 * keeps checking in the background and releases it. The lock stays releasable. */
const ReleaseUnconfirmed = kindClass("ReleaseUnconfirmed", "unconfirmed");
/** release: the client's release queue is full; nothing was sent. Release again soon. */
const ReleaseQueueFull = kindClass("ReleaseQueueFull", "queue_full");
/** The server broke the protocol: report it. */
const ProtocolError = kindClass("ProtocolError", "protocol");
/** The server refused the request; the message says why. */
const Refused = kindClass("Refused", "refused");
/** The client's options were refused (no address, a bad address, an authToken under 16
 * bytes, a bad owner, an unreadable tlsCa). */
const ConfigError = kindClass("ConfigError", "config");
/** A bug in libticketing (a panic caught at the C boundary): report it. */
const InternalError = kindClass("InternalError", "internal");
/** An operation stopped by its AbortSignal before it was sent: nothing happened. */
const Cancelled = kindClass("Cancelled", "cancelled");
/** withLock: the lease had ended before the callback did (the release found the key no
 * longer held under the lock's token): the key may have been granted to another
 * meanwhile; only the fencing token protected the writes. */
const NotHolder = kindClass("NotHolder", "not_holder", true);

/** The node does not lead and did not execute the request; the client sends the next
 * one to the leader (`leader`, when known). Try again. */
class NotLeader extends TicketingError {
  constructor(message, options = {}) {
    super(message, options);
    this.leader = options.leader ?? null;
  }
}
NotLeader.kind = "not_leader";
NotLeader.definitive = DEFINITIVE[NotLeader.kind];

/** acquire: the request was sent and no definitive answer came: the key MAY be held
 * under a token this process never learned. Do not enter the critical section.
 * `reason` says why ("connection_lost", "server_unknown", "no_answer",
 * "protocol_violation", "expired_on_arrival", "cancelled"). `client.resolve(err)` finds
 * out without sending it again; when nobody resolves it, the client finds out by
 * itself and releases a grant that happened anyway (no grant is left orphaned). */
class Indeterminate extends TicketingError {
  constructor(message, options = {}) {
    super(message, options);
    this.reason = options.reason ?? "";
    // The native error, which resolve needs; freed with this object.
    Object.defineProperty(this, "_handle", { value: options.handle ?? null, writable: true });
    if (this._handle) errorHandles.register(this, this._handle, this);
  }
}
Indeterminate.kind = "indeterminate";
Indeterminate.definitive = DEFINITIVE[Indeterminate.kind];

const errorHandles = new FinalizationRegistry((handle) => C.error_free(handle));

/** A TicketingError of a kind this package has no class for (a library newer than the
 * package): the library's name of the kind, definitive as the library says. */
function generic(name, message, options) {
  const error = new TicketingError(message, options);
  Object.defineProperty(error, "kind", { value: name });
  Object.defineProperty(error, "definitive", { value: DEFINITIVE[name] ?? false });
  return error;
}

/** The error for a failed call's native error `handle` (taken over: freed here, or kept
 * by an Indeterminate until it is collected). `cause` is what stopped the operation
 * (an AbortSignal's reason), if anything did. */
function fromHandle(kind, handle, cause) {
  const name = KINDS.get(kind) ?? C.kind_name(kind) ?? "unknown";
  const cls = BY_NAME.get(name);
  const make = (message, options) => (cls ? new cls(message, options) : generic(name, message, options));
  if (!handle) return make(`${name} (no details)`, { cause });
  const message = C.error_message(handle) ?? "";
  const retryable = C.error_is_retryable(handle) !== 0;
  if (cls === Indeterminate) {
    const reason = CAUSES.get(C.error_cause(handle)) ?? "";
    return new Indeterminate(message, { retryable, reason, handle, cause });
  }
  try {
    if (cls === NotLeader) return new NotLeader(message, { retryable, leader: C.error_leader(handle), cause });
    return make(message, { retryable, cause });
  } finally {
    C.error_free(handle);
  }
}

module.exports = {
  TicketingError,
  Busy,
  Timeout,
  NotLeader,
  InvalidArgument,
  Overloaded,
  Unavailable,
  Indeterminate,
  NoAnswer,
  ReleaseUnconfirmed,
  ReleaseQueueFull,
  NotHolder,
  ProtocolError,
  Refused,
  ConfigError,
  InternalError,
  Cancelled,
  fromHandle,
  errorHandles,
};

// A kind's class by the kind's name (every class above): the names are the library's
// (KINDS, read at load).
const BY_NAME = new Map(
  Object.values(module.exports)
    .filter((cls) => cls.prototype instanceof TicketingError)
    .map((cls) => [cls.kind, cls]),
);
