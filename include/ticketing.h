/*
 * ticketing.h: the C ABI of the official Ticketing client (libticketing).
 *
 * Every function here wraps one call of the Rust client `ticketing::client`
 * (docs/client.md), named in its comment; the behaviour is that call's: leader first,
 * pipelining, reconnect with backoff, an ACQUIRE never resent once a byte of it was
 * written, `Indeterminate` when its outcome is unknown, the bounded release queue with
 * its 5 s deadline. Nothing is re-implemented here. docs/c.md has a walk-through.
 *
 * Link: -lticketing (libticketing.so), or libticketing.a followed by
 * -lgcc_s -lutil -lrt -lpthread -lm -ldl. Both come from `cargo build --release`.
 *
 * RULES FOR EVERY FUNCTION
 *
 * Threads. A ticketing_client, a ticketing_lock and a ticketing_error may be used by
 * any number of threads at once, except that the *_free function of a handle must be
 * its last use: no other call on that handle may run or follow.
 *
 * Status. Functions that can fail return an int: TICKETING_OK (0), or one of the
 * TICKETING_* kinds below. When `error_out` is not NULL, *error_out is set to NULL on
 * success and to a new ticketing_error on failure (the caller frees it with
 * ticketing_error_free); pass NULL when the kind is enough. Other out-pointers are
 * written only on success, except that *lock_out is set to NULL on failure.
 *
 * Ownership. Every pointer a function returns through an out-parameter is owned by the
 * caller and freed with the matching *_free function: ticketing_client_free,
 * ticketing_lock_free, ticketing_error_free. Strings returned by getters
 * (ticketing_lock_key, ticketing_error_message, ...) belong to their handle and stay
 * valid until it is freed; never free them. ticketing_version_string() and
 * ticketing_kind_name() return static strings. Strings passed in are only read during
 * the call and never kept: copy-in, nothing to keep alive. Passing NULL to a *_free
 * function does nothing.
 *
 * Input. Strings are NUL-terminated UTF-8. A NULL where a value is required, a string
 * that is not UTF-8, or a number out of range is TICKETING_INVALID with a message
 * naming the argument; nothing is sent. Durations are int64_t milliseconds; a negative
 * one is TICKETING_INVALID.
 *
 * Panics. No Rust panic crosses this boundary: each call catches it and returns
 * TICKETING_INTERNAL with the panic's message (a getter returns 0 or NULL). A
 * TICKETING_INTERNAL is a bug in libticketing; the handles stay usable.
 *
 * Blocking. Each function's comment says how long it can block at most. Functions
 * without such a line never block on the network.
 */
#ifndef TICKETING_H
#define TICKETING_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this header describes; ticketing_version() returns the library's. A
 * binding checks that the two are equal before its first call. */
#define TICKETING_ABI_VERSION 1

/* ---- Status and error kinds ------------------------------------------------------ */

#define TICKETING_OK 0
/* acquire: `B`, the key is held and the wait was 0 (or its queue is full). Not acquired. */
#define TICKETING_BUSY 1
/* acquire: `T`, the wait ran out before this caller's turn. Not acquired. */
#define TICKETING_TIMEOUT 2
/* `M`: the node does not lead and did not execute the request; the client sends the next
 * one to the leader it named (ticketing_error_leader). Retry. */
#define TICKETING_NOT_LEADER 3
/* A field out of its limits (docs/protocol.md), a NULL or non-UTF-8 argument, or `E 1`. */
#define TICKETING_INVALID 4
/* `E 4`: the server has too many requests pending. Not executed; retry later. */
#define TICKETING_OVERLOADED 5
/* No connection could take the request in time: nothing was sent. The message names the
 * last connection error (refused, the auth token, TLS). Retry. */
#define TICKETING_UNAVAILABLE 6
/* acquire: the request was sent and no definitive answer came (connection lost, `U`, no
 * answer within wait + 5 s). The key MAY be held: do not enter the critical section.
 * ticketing_resolve finds out later; when nobody resolves it, the client finds out by
 * itself and releases a grant that happened anyway (no grant is left orphaned). */
#define TICKETING_INDETERMINATE 7
/* query: sent, but no answer within the request timeout (10 s). */
#define TICKETING_NO_ANSWER 8
/* release: no `R` or `N` within the release deadline (5 s). The key may still be held; the
 * client keeps checking in the background and releases it once a leader answers, while
 * its lease may run. */
#define TICKETING_UNCONFIRMED 9
/* release: the release queue is full; nothing was sent. The lease ends the hold. */
#define TICKETING_QUEUE_FULL 10
/* The server broke the protocol (an answer of the wrong kind). */
#define TICKETING_PROTOCOL 11
/* `E 5`: a request refused by the server; the message says why. */
#define TICKETING_REFUSED 12
/* ticketing_client_new: the configuration was refused (no address, a bad address, a short
 * auth token, a bad owner, an unreadable CA file, ...). */
#define TICKETING_CONFIG 13
/* A Rust panic was caught: a bug in libticketing. */
#define TICKETING_INTERNAL 14

/* Outcomes of a release (*outcome_out). All three mean the key is no longer held under
 * the lock's token. */
#define TICKETING_RELEASED 1            /* `R`: released; the next waiter has it, or it is free */
#define TICKETING_NOT_HOLDER 2          /* `N`: not the holder: the lease had already ended */
#define TICKETING_RELEASED_OR_EXPIRED 3 /* `N` after an earlier attempt's answer was lost */

/* Outcomes of ticketing_resolve (*resolution_out). */
#define TICKETING_HELD 1     /* the grant did happen: *lock_out holds it */
#define TICKETING_NOT_HELD 2 /* certainly not held by that acquire */
#define TICKETING_UNKNOWN 3  /* still unknown: do not enter the critical section */

/* Why an acquire is indeterminate (ticketing_error_cause). */
#define TICKETING_CAUSE_CONNECTION_LOST 1    /* the connection broke after bytes were written */
#define TICKETING_CAUSE_SERVER_UNKNOWN 2     /* `U`: the server cannot tell whether it committed */
#define TICKETING_CAUSE_NO_ANSWER 3          /* nothing within wait + the commit margin (5 s) */
#define TICKETING_CAUSE_PROTOCOL_VIOLATION 4 /* an answer of the wrong kind */
#define TICKETING_CAUSE_EXPIRED_ON_ARRIVAL 5 /* `G` came after the lease had run out locally */

/* ---- Types -------------------------------------------------------------------------- */

/* A client: connections, the release queue and background threads, shared by every
 * thread that holds the pointer. */
typedef struct ticketing_client ticketing_client;
/* A held lock (key, owner, fencing token, local deadline). */
typedef struct ticketing_lock ticketing_lock;
/* A failed call's kind, message and details. Immutable. */
typedef struct ticketing_error ticketing_error;

/* What ticketing_query fills in for a held key. The caller owns the storage. */
typedef struct ticketing_holder {
    uint64_t token;         /* the holder's fencing token */
    uint64_t lease_left_ms; /* lease left on the leader's clock when it answered */
    uint32_t waiters;       /* acquires queued for the key */
    uint32_t owner_len;     /* bytes of owner, without the NUL */
    char owner[256];        /* the holder's owner, NUL-terminated (owners are 1..=255 bytes) */
} ticketing_holder;

/* ---- Versions ----------------------------------------------------------------------- */

/* The library's ABI version: TICKETING_ABI_VERSION of the header it was built with. */
uint32_t ticketing_version(void);

/* The library's release, e.g. "0.2.0" (the crate's version). Static string. */
const char *ticketing_version_string(void);

/* The name of a status or error kind: "ok", "busy", "timeout", "not_leader", "invalid",
 * "overloaded", "unavailable", "indeterminate", "no_answer", "unconfirmed",
 * "queue_full", "protocol", "refused", "config", "internal"; "unknown" for any other
 * number. Static string. */
const char *ticketing_kind_name(int kind);

/* ---- The client --------------------------------------------------------------------- */

/* Creates a client. Wraps ClientBuilder::new().addrs(..).auth_token(..).owner(..)
 * .tls_ca_file(..).build().
 *
 * addrs, addrs_len: seed addresses "host:port" (one live member of the cluster is
 *   enough; the client finds the leader and the other members).
 * auth_token, auth_token_len: the client secret, any bytes, at least 16.
 * owner: the owner string sent with every acquire and release (1..=255 bytes, no control
 *   characters); NULL for the default host-pid-random, unique per client.
 * tls_ca_file: path of a PEM CA bundle: turns TLS on; NULL for plain TCP.
 * *client_out: the new client, on success.
 *
 * Errors: TICKETING_CONFIG (the message names what is wrong), TICKETING_INVALID.
 * Does no network I/O (connections are made in the background). Blocks at most for
 * reading the CA file. */
int ticketing_client_new(const char *const *addrs, size_t addrs_len, const uint8_t *auth_token,
                         size_t auth_token_len, const char *owner, const char *tls_ca_file,
                         ticketing_client **client_out, ticketing_error **error_out);

/* ticketing_client_new for a language binding built on this ABI: the client's messages
 * then name that language's settings where they name a fix (the Python package's
 * `tls_ca=` keyword, say, where a C caller reads "tls_ca_file"). binding: "python",
 * or NULL or "c" for this header's argument names (as ticketing_client_new); any other
 * is TICKETING_INVALID. Otherwise as ticketing_client_new. */
int ticketing_client_new_for(const char *binding, const char *const *addrs, size_t addrs_len,
                             const uint8_t *auth_token, size_t auth_token_len, const char *owner,
                             const char *tls_ca_file, ticketing_client **client_out,
                             ticketing_error **error_out);

/* A new handle on the same client (connections, release queue) that acquires and
 * releases as `owner`. Wraps Client::with_owner. Use one owner per logical caller when
 * ticketing_resolve must tell an indeterminate acquire's grant from another grant to the
 * same owner. Free it with ticketing_client_free. Never blocks. */
int ticketing_client_with_owner(const ticketing_client *client, const char *owner,
                                ticketing_client **client_out, ticketing_error **error_out);

/* The owner this handle acquires as. Wraps Client::owner. Valid until the handle is
 * freed. NULL if client is NULL. */
const char *ticketing_client_owner(const ticketing_client *client);

/* Waits until every release the client still has to make (freed locks, late grants,
 * releases in progress) is finished, or timeout_ms passes. Wraps Client::close.
 * *drained_out (may be NULL) is 1 when none was left, 0 when the timeout came first.
 * The handle stays valid: free it with ticketing_client_free. Blocks at most
 * timeout_ms. */
int ticketing_client_close(const ticketing_client *client, int64_t timeout_ms, int *drained_out,
                           ticketing_error **error_out);

/* Frees the handle (drops the Rust Client). Never blocks. The connections close once
 * the last handle and the last lock of the client are gone and the releases still
 * queued are done; locks taken through this handle stay valid. */
void ticketing_client_free(ticketing_client *client);

/* ---- Acquire, release, query, resolve ---------------------------------------------- */

/* Acquires `key` for lease_ms (whole seconds, 1 000..=250 000 ms), queueing at most
 * wait_ms (0..=300 000; 0 is one immediate try). Wraps Client::acquire.
 *
 * TICKETING_OK: *lock_out is the held lock (free it with ticketing_lock_free; release it
 * with ticketing_lock_release first, or freeing it releases it in the background).
 * Definitive, the key is NOT held by this call: TICKETING_BUSY, TICKETING_TIMEOUT,
 * TICKETING_NOT_LEADER, TICKETING_INVALID, TICKETING_OVERLOADED, TICKETING_UNAVAILABLE.
 * TICKETING_INDETERMINATE: it MAY be held; do not enter the critical section; keep the
 * error to pass to ticketing_resolve. lock_out must not be NULL.
 *
 * Blocks at most max(wait, 3 s) to put the request on a connection, then what is left
 * of wait plus the commit margin (5 s) for the answer. */
int ticketing_acquire(const ticketing_client *client, const char *key, int64_t lease_ms, int64_t wait_ms,
                      ticketing_lock **lock_out, ticketing_error **error_out);

/* Finds out, without sending it again, whether the indeterminate acquire `error` (a
 * TICKETING_INDETERMINATE error from ticketing_acquire) holds its key after all. Wraps
 * Client::resolve: it waits until the acquire's grant can no longer happen (its send
 * instant + its wait + 5 s), then asks the leader.
 *
 * *resolution_out: TICKETING_HELD (*lock_out is the lock, adopted: free it as any
 * other), TICKETING_NOT_HELD, or TICKETING_UNKNOWN (not known within timeout_ms: do not
 * enter the critical section). Any other kind of error resolves as TICKETING_NOT_HELD.
 * Safe only when the acquire's owner did not acquire the same key meanwhile (see
 * ticketing_client_with_owner). resolution_out and lock_out must not be NULL.
 * Blocks at most timeout_ms. */
int ticketing_resolve(const ticketing_client *client, const ticketing_error *error, int64_t timeout_ms,
                      int *resolution_out, ticketing_lock **lock_out, ticketing_error **error_out);

/* Releases the lock and waits for the server's answer. Wraps Lock::release.
 * *outcome_out (may be NULL): TICKETING_RELEASED, TICKETING_NOT_HOLDER or
 * TICKETING_RELEASED_OR_EXPIRED. Errors: TICKETING_UNCONFIRMED (the key may still be
 * held; the client keeps checking and releases it), TICKETING_UNAVAILABLE (no server
 * could take it: never sent, the key stays held until its lease ends; at once when every
 * connection failed with a lasting mistake), TICKETING_QUEUE_FULL (the key may
 * stay held until its lease ends), TICKETING_INVALID (already released). The
 * handle stays allocated: free it with ticketing_lock_free.
 * Blocks at most the release deadline, 5 s. */
int ticketing_lock_release(ticketing_lock *lock, int *outcome_out, ticketing_error **error_out);

/* Releases `key` held by this handle's owner under `token` (a token kept elsewhere; the
 * CLI's `release`). Wraps Client::release. Outcomes and errors as ticketing_lock_release.
 * Blocks at most the release deadline, 5 s. */
int ticketing_release(const ticketing_client *client, const char *key, uint64_t token, int *outcome_out,
                      ticketing_error **error_out);

/* Who holds `key`, linearizably (answered by the leader). Wraps Client::query.
 * *held_out is 1 and *holder_out filled when the key is held, 0 when it is free
 * (holder_out untouched). held_out must not be NULL; holder_out may be NULL.
 * Errors: TICKETING_UNAVAILABLE, TICKETING_NO_ANSWER, TICKETING_INVALID, ...
 * Blocks at most the request timeout, 10 s. */
int ticketing_query(const ticketing_client *client, const char *key, int *held_out,
                    ticketing_holder *holder_out, ticketing_error **error_out);

/* ---- The lock ----------------------------------------------------------------------- */

/* The fencing token: larger than every earlier grant's. Pass it to every write the
 * critical section makes (docs/fencing.md). Wraps Lock::token. 0 if lock is NULL. */
uint64_t ticketing_lock_token(const ticketing_lock *lock);

/* The key and the owner the lock was granted to. Wrap Lock::key and Lock::owner. Valid
 * until the lock is freed. NULL if lock is NULL. */
const char *ticketing_lock_key(const ticketing_lock *lock);
const char *ticketing_lock_owner(const ticketing_lock *lock);

/* The lease the server granted, in ms. Wraps Lock::lease. */
uint64_t ticketing_lock_lease_ms(const ticketing_lock *lock);

/* Time left until the lock's local deadline (the instant before the ACQUIRE was written
 * plus the lease; the server's lease never ends before it), in ms; 0 once passed or
 * once released. Wraps Lock::remaining. */
uint64_t ticketing_lock_remaining_ms(const ticketing_lock *lock);

/* Frees the handle. If it was not released, the release goes to the client's background
 * queue (dropping a Rust Lock): it never blocks. */
void ticketing_lock_free(ticketing_lock *lock);

/* ---- Errors ------------------------------------------------------------------------- */

/* The kind: one of the TICKETING_* kinds above (never TICKETING_OK).
 * TICKETING_INVALID if error is NULL. */
int ticketing_error_kind(const ticketing_error *error);

/* What happened and what to do, in words (the Rust error's Display). Valid until the
 * error is freed. */
const char *ticketing_error_message(const ticketing_error *error);

/* For TICKETING_INDETERMINATE: one of the TICKETING_CAUSE_* values
 * (AcquireError::indeterminate_cause); 0 for other kinds. */
int ticketing_error_cause(const ticketing_error *error);

/* For TICKETING_NOT_LEADER: the leader's client address when the node knew it; NULL
 * otherwise. Valid until the error is freed. */
const char *ticketing_error_leader(const ticketing_error *error);

/* 1 when the request was certainly not executed and a new try soon may succeed
 * (NOT_LEADER, OVERLOADED, UNAVAILABLE: AcquireError::is_retryable,
 * ClientError::is_retryable); 0 otherwise. */
int ticketing_error_is_retryable(const ticketing_error *error);

/* Frees the error. */
void ticketing_error_free(ticketing_error *error);

#ifdef __cplusplus
}
#endif

#endif /* TICKETING_H */
