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
 * Counts. addrs_len is at most 64 and auth_token_len at most 4096; a larger count is
 * TICKETING_INVALID before anything is read or allocated.
 *
 * Panics. No Rust panic crosses this boundary: each call catches it and returns
 * TICKETING_INTERNAL with the panic's message (a getter returns 0 or NULL). A
 * TICKETING_INTERNAL is a bug in libticketing; the handles stay usable. The host's
 * standard error stays the host's: a panic inside the library, on the caller's thread
 * or on one of the client's own threads, prints nothing; it becomes a log record
 * (level TICKETING_LOG_ERROR, target "ticketing::panic") that reaches the host only
 * through ticketing_set_logger. The one exception is misuse that would corrupt memory
 * (below): one line on standard error, then abort().
 *
 * Exit handlers. Every function works from the places a program ends: an atexit()
 * handler, a C++ global or static object's destructor, a pthread_key_create()
 * destructor, a thread-local object's destructor. A lock released there is released
 * (the call blocks as it does anywhere else, while the client's own threads do the
 * I/O); a lock freed there is handed to the background queue, which the process may
 * not live long enough to send: release it instead.
 *
 * Misuse. Handles are tagged: a handle passed where another kind belongs, or used after
 * its *_free, is TICKETING_INVALID ("... is not a live ticketing_lock ...") from a call
 * that returns a status, 0 or NULL from a getter, and a *_free of such a handle (a
 * double free) prints one line and aborts the process. This is best effort — memory
 * freed and reused by another handle of the same kind cannot be told apart — so these
 * stay mistakes to fix, not a way to test whether a handle is alive. A *_free while
 * another thread's call on the same handle is still running does not pull the handle
 * from under that call: the call finishes with its own reference, and the handle's
 * memory is let go when it returns.
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
/* A Rust panic was caught: a bug in libticketing (or the system refused a pipe or a thread). */
#define TICKETING_INTERNAL 14
/* A future's operation was cancelled before it was sent (an acquire: not acquired), or a
 * cancelled query or release (a release goes on in the background). */
#define TICKETING_CANCELLED 15

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
#define TICKETING_CAUSE_CANCELLED 6          /* its future was cancelled after it was sent */

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
 * "queue_full", "protocol", "refused", "config", "internal", "cancelled"; "unknown" for any other
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
 * "go" (the Go module's Config fields), "java" (the Java library's builder methods), "node" (the Node.js package's options), or NULL or "c" for this header's argument names (as ticketing_client_new); any other
 * is TICKETING_INVALID. Otherwise as ticketing_client_new. */
int ticketing_client_new_for(const char *binding, const char *const *addrs, size_t addrs_len,
                             const uint8_t *auth_token, size_t auth_token_len, const char *owner,
                             const char *tls_ca_file, ticketing_client **client_out,
                             ticketing_error **error_out);

/* ticketing_client_new_for with the name of the cluster this client serves (the nodes'
 * TICKETING_CLUSTER_NAME): each connection reads its node's STATUS first, and a node
 * that reports another name or none is sent nothing (its connection fails as a lasting
 * mistake naming both names). cluster_name: 1 to 63 ASCII letters, digits, '.', '_'
 * and '-' (else TICKETING_CONFIG), or NULL for none: the client then compares the
 * fencing domains its nodes report, and serves nothing while they disagree (docs/c.md,
 * "One cluster per client"). Otherwise as ticketing_client_new_for. */
int ticketing_client_new_named(const char *binding, const char *cluster_name,
                               const char *const *addrs, size_t addrs_len,
                               const uint8_t *auth_token, size_t auth_token_len,
                               const char *owner, const char *tls_ca_file,
                               ticketing_client **client_out, ticketing_error **error_out);

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
 * TICKETING_RELEASED_OR_EXPIRED; the lock is released for good then. Errors:
 * TICKETING_UNCONFIRMED (sent, no answer: the key may still be held; the client keeps
 * checking and releases it), TICKETING_UNAVAILABLE (no server could take it: never
 * sent; at once when every connection failed with a lasting mistake),
 * TICKETING_QUEUE_FULL (never sent), TICKETING_INVALID (released already, a release
 * of it under way on another thread, or refused by the server as invalid).
 * After any error but TICKETING_INVALID the lock stays releasable: call
 * ticketing_lock_release again (a retry after TICKETING_UNCONFIRMED or
 * TICKETING_UNAVAILABLE that gets `N` reports TICKETING_RELEASED_OR_EXPIRED: the first
 * attempt, or the client's own check, may have released it), or
 * free it, which hands the release to the background queue. ticketing_error_is_retryable
 * says whether a retry soon may succeed (1 for a passing TICKETING_UNAVAILABLE and for
 * TICKETING_QUEUE_FULL). The handle stays allocated either way: free it with
 * ticketing_lock_free. Blocks at most the release deadline, 5 s. */
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

/* ---- Futures: operations without a waiting thread ---------------------------------- */

/* Each blocking call above has a twin that returns at once with a future, the outcome
 * to come (FoundationDB's FDBFuture is the model). The program then blocks on it
 * (ticketing_future_block_until_ready), polls it (ticketing_future_is_ready), hears of it
 * once through a callback (ticketing_future_set_callback) or a completion queue
 * (ticketing_future_set_queue, for event loops), or cancels it; once it is ready, one
 * ticketing_future_get_* takes the outcome, and ticketing_future_free frees it. The
 * operation is the very one of the blocking call: the same routing, resend rule,
 * Indeterminate, deadlines. No thread is created or kept per future: 10 000 acquires
 * waiting in queues cost memory, not threads.
 *
 * Starting. A ticketing_*_start function fails (returns an error kind, *future_out
 * NULL) only when its arguments are refused before anything starts — TICKETING_INVALID:
 * NULL, not UTF-8, out of range, the lock already released or being released — and
 * then nothing was sent. Otherwise it returns TICKETING_OK with a new future, which
 * may already be ready (no server can be used, the release queue is full). Starting
 * does no network I/O: a thread of the client writes the request, so the caller may be
 * an event loop.
 *
 * Outcomes. ticketing_future_get_lock (acquire), _get_release (both releases),
 * _get_query and _get_resolve return what the blocking call returns, with the same
 * out-parameters, once: the outcome is taken by the first get (a lock handle is the
 * caller's then), and a second get is TICKETING_INVALID, as is a get before the future
 * is ready or the get of another operation's future.
 *
 * Cancelling. ticketing_future_cancel stops waiting and makes the future ready at once
 * (its callback runs, possibly on the calling thread before cancel returns): an acquire
 * not yet put on a connection ends TICKETING_CANCELLED (nothing sent, not acquired); an
 * acquire already sent ends TICKETING_INDETERMINATE with cause TICKETING_CAUSE_CANCELLED:
 * it is never sent again, and if the server grants it anyway the client releases that
 * grant by itself (the no-orphan rule), unless ticketing_resolve adopts it first. A query
 * ends TICKETING_CANCELLED; a resolve ends with *resolution_out TICKETING_UNKNOWN (the
 * client's background check goes on); a release goes on in the background (its 5 s
 * deadline, then the client's own check) and its future ends TICKETING_CANCELLED; the
 * lock handle is releasable again (a later release answered `N` reports
 * TICKETING_RELEASED_OR_EXPIRED). Freeing a future that is not ready cancels it.
 *
 * Callbacks. A future calls its callback exactly once, when it becomes ready: on a
 * thread of the client (a connection's reader, its timer thread), or on the thread that
 * set the callback — before ticketing_future_set_callback returns — when it is ready
 * already, or on the thread that cancels it. Never while the client holds a lock of its
 * own. The callback must not block: while it runs, that client thread reads nothing
 * else. It may call any function that never blocks (ticketing_future_get_*,
 * ticketing_future_free of its own future, ticketing_*_start, ticketing_lock_free, ...);
 * never a blocking call or ticketing_future_block_until_ready. A program whose
 * callbacks need its own lock (an interpreter's global lock) uses a queue instead.
 *
 * Queues. A completion queue gives a program its ready futures as tags it chose,
 * through a file descriptor its event loop watches: no program code runs on the
 * client's threads. The descriptor is readable exactly while tags wait; never read or
 * write it, take the tags with ticketing_queue_take. One queue serves any number of
 * futures, of any client. */

/* A pending operation. */
typedef struct ticketing_future ticketing_future;
/* Where ready futures leave their tags. */
typedef struct ticketing_queue ticketing_queue;
/* Called once when `future` is ready, with the ctx given to ticketing_future_set_callback. */
typedef void (*ticketing_callback)(ticketing_future *future, void *ctx);

/* The checks ticketing_acquire_start makes of its arguments (the limits of the lease,
 * the wait and the key), alone: no client, no future, no I/O. TICKETING_OK, or
 * TICKETING_INVALID naming the argument. A binding that shortens the wait it starts with
 * (to its caller's deadline) checks the caller's own arguments here first, so that an
 * argument is refused alike whatever the deadline. Never blocks. */
int ticketing_acquire_check(const char *key, int64_t lease_ms, int64_t wait_ms, ticketing_error **error_out);

/* The futures of ticketing_acquire, ticketing_lock_release, ticketing_release,
 * ticketing_query and ticketing_resolve (read with ticketing_future_get_lock, _release,
 * _release, _query, _resolve). ticketing_lock_release_start takes the lock out of its
 * handle until the future is ready; afterwards the handle is released for good or, after
 * an error other than TICKETING_INVALID, releasable again. Never block. */
int ticketing_acquire_start(const ticketing_client *client, const char *key, int64_t lease_ms, int64_t wait_ms,
                            ticketing_future **future_out, ticketing_error **error_out);
int ticketing_lock_release_start(ticketing_lock *lock, ticketing_future **future_out, ticketing_error **error_out);
int ticketing_release_start(const ticketing_client *client, const char *key, uint64_t token,
                            ticketing_future **future_out, ticketing_error **error_out);
int ticketing_query_start(const ticketing_client *client, const char *key, ticketing_future **future_out,
                          ticketing_error **error_out);
int ticketing_resolve_start(const ticketing_client *client, const ticketing_error *error, int64_t timeout_ms,
                            ticketing_future **future_out, ticketing_error **error_out);

/* 1 once the future is ready, else 0. Never blocks. */
int ticketing_future_is_ready(const ticketing_future *future);

/* Waits until the future is ready (*ready_out 1) or timeout_ms passes (*ready_out 0); a
 * negative timeout_ms waits as long as it takes (every operation ends by its own
 * deadline). ready_out may be NULL. Blocks at most timeout_ms. */
int ticketing_future_block_until_ready(const ticketing_future *future, int64_t timeout_ms, int *ready_out,
                                       ticketing_error **error_out);

/* Calls callback(future, ctx) once when the future is ready (see "Callbacks" above).
 * One callback or queue per future: a second is TICKETING_INVALID. Never blocks but for
 * running the callback itself when the future is ready already. */
int ticketing_future_set_callback(ticketing_future *future, ticketing_callback callback, void *ctx,
                                  ticketing_error **error_out);

/* Puts `tag` on `queue` when the future is ready (at once when it is ready already).
 * One callback or queue per future, as above. Never blocks. */
int ticketing_future_set_queue(ticketing_future *future, ticketing_queue *queue, uint64_t tag,
                               ticketing_error **error_out);

/* Stops waiting (see "Cancelling" above): 1 when the operation was still running, 0
 * when it had ended already (or future is not a live future). Never blocks on the
 * network. */
int ticketing_future_cancel(ticketing_future *future);

/* Take the outcome of a ready future (see "Outcomes" above). */
int ticketing_future_get_lock(ticketing_future *future, ticketing_lock **lock_out, ticketing_error **error_out);
int ticketing_future_get_release(ticketing_future *future, int *outcome_out, ticketing_error **error_out);
int ticketing_future_get_query(ticketing_future *future, int *held_out, ticketing_holder *holder_out,
                               ticketing_error **error_out);
int ticketing_future_get_resolve(ticketing_future *future, int *resolution_out, ticketing_lock **lock_out,
                                 ticketing_error **error_out);

/* Frees the future; one not ready yet is cancelled first, and its callback or queue
 * hears of nothing any more. An outcome never taken is dropped (a lock in it is
 * released in the background). Never blocks. */
void ticketing_future_free(ticketing_future *future);

/* A new completion queue. Errors: TICKETING_INTERNAL (no pipe could be made). */
int ticketing_queue_new(ticketing_queue **queue_out, ticketing_error **error_out);

/* The queue's file descriptor: readable exactly while tags wait (for poll, epoll, an
 * event loop's add_reader). Owned by the queue; -1 if queue is not a live queue. */
int ticketing_queue_fd(const ticketing_queue *queue);

/* Takes up to `max` waiting tags into `tags`, oldest first, and returns how many. Never
 * blocks: 0 when none waits. */
size_t ticketing_queue_take(ticketing_queue *queue, uint64_t *tags, size_t max);

/* Frees the queue (futures still naming it keep it until they are ready). */
void ticketing_queue_free(ticketing_queue *queue);

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

/* ---- Logging ------------------------------------------------------------------------ */

/* Levels of ticketing_set_logger, as the Rust `log` crate's. */
#define TICKETING_LOG_OFF 0
#define TICKETING_LOG_ERROR 1
#define TICKETING_LOG_WARN 2
#define TICKETING_LOG_INFO 3
#define TICKETING_LOG_DEBUG 4
#define TICKETING_LOG_TRACE 5

/* Receives one log record of the library: `level` (TICKETING_LOG_ERROR..TRACE), the
 * module it comes from ("ticketing::client::...", "ticketing::panic" for a caught
 * panic) and the message; both strings are valid only during the call. */
typedef void (*ticketing_log_fn)(void *ctx, int level, const char *target, const char *message);

/* Sends the library's log records up to max_level (TICKETING_LOG_OFF..TRACE) to
 * log_fn with ctx; log_fn NULL or max_level TICKETING_LOG_OFF turns them off (the
 * default: the library writes nothing anywhere). log_fn is called on a thread of the
 * library's own ("ticketing-log"), one record at a time, never while the client holds
 * a lock of its own, so it may take the host's locks (Python's GIL) and may call any
 * function here but ticketing_set_logger. Records are queued (4096 at most; more are
 * dropped and counted in a later warning). When this returns, a callback in progress
 * has returned and the previous log_fn is never called again.
 * Errors: TICKETING_INVALID (max_level out of range), TICKETING_CONFIG (the process has
 * a Rust `log` logger of its own: the library's records go there). Blocks at most for a
 * callback in progress. */
int ticketing_set_logger(ticketing_log_fn log_fn, void *ctx, int max_level, ticketing_error **error_out);

/* ---- Waits that answer the host's signals ----------------------------------------- */

/* Called on a waiting thread; nonzero stops the wait. */
typedef int (*ticketing_wait_check_fn)(void *ctx);

/* From now on, a blocking call (ticketing_acquire, ticketing_lock_release,
 * ticketing_release, ticketing_query, ticketing_resolve) made by the calling thread that
 * waits longer than slice_ms calls check(ctx) every slice_ms on that thread — to run the
 * host's own signal handling, as the Python package runs Python's (Ctrl-C) on its main
 * thread, or to see that the thread was interrupted. Each thread sets its own check. A nonzero return stops the wait at once: the operation is
 * cancelled by the rule of ticketing_future_cancel (an acquire not yet sent ends
 * TICKETING_CANCELLED; one already sent TICKETING_INDETERMINATE with cause
 * TICKETING_CAUSE_CANCELLED, its grant, if any, released by the client; a query
 * TICKETING_CANCELLED; a resolve TICKETING_UNKNOWN; a release goes on in the background
 * and the call returns TICKETING_CANCELLED, the lock releasable again), and the call
 * returns that outcome. A call whose outcome comes within slice_ms never calls check.
 * check NULL removes the thread's check. slice_ms is 1..=60 000.
 * Errors: TICKETING_INVALID. Never blocks. */
int ticketing_set_wait_check(ticketing_wait_check_fn check, void *ctx, int64_t slice_ms, ticketing_error **error_out);

/* For libticketing's own tests of the rule above: panics inside the library, in this
 * call (on_client_thread 0) or on a thread of the library's own (1), and returns the
 * TICKETING_INTERNAL that the panic becomes. Never useful to an application. */
int ticketing_test_panic(int on_client_thread);

#ifdef __cplusplus
}
#endif

#endif /* TICKETING_H */
