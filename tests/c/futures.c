/* Futures of the C ABI against a real server (run by tests/c_futures.rs): blocking on
 * one, a callback, a completion queue watched with poll(2), cancel before and after the
 * request was sent, a future freed before it was ready, the rules for getting an
 * outcome, and 10 000 acquires waiting at once on one client without a thread each.
 *
 * Usage: futures ADDR SECRET MODE. Prints one line per fact checked; a failed check
 * prints a line starting "FAILED" and exits 1. */
#define _POSIX_C_SOURCE 200809L
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ticketing.h"

#include "check.h"

static const char *g_addr, *g_secret;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static ticketing_client *new_client(const char *addr, const char *owner) {
    ticketing_client *client = NULL;
    ticketing_error *err = NULL;
    int rc = ticketing_client_new(&addr, 1, (const uint8_t *)g_secret, strlen(g_secret), owner, NULL, &client, &err);
    CHECK(rc == TICKETING_OK, "client_new: %s", ticketing_error_message(err));
    return client;
}

static ticketing_lock *acquire_now(ticketing_client *client, const char *key) {
    ticketing_lock *lock = NULL;
    int rc = ticketing_acquire(client, key, 30 * TICKETING_NS_PER_S, 5 * TICKETING_NS_PER_S, &lock, NULL);
    CHECK(rc == TICKETING_OK, "acquire %s: %s", key, ticketing_kind_name(rc));
    return lock;
}

/* Waits (bounded) until `key` has `waiters` queued on the server: a fact, not a sleep. */
static void wait_for_waiters(ticketing_client *client, const char *key, uint32_t waiters) {
    double start = now_s();
    for (;;) {
        int held = 0;
        ticketing_holder holder;
        int rc = ticketing_query(client, key, &held, &holder, NULL);
        if (rc == TICKETING_OK && held && holder.waiters >= waiters) return;
        CHECK(now_s() - start < 10, "%s never had %u waiters", key, waiters);
        sleep_ms(2);
    }
}

/* Waits (bounded) until `key` is free. */
static void wait_for_free(ticketing_client *client, const char *key, double within) {
    double start = now_s();
    for (;;) {
        int held = 1;
        int rc = ticketing_query(client, key, &held, NULL, NULL);
        if (rc == TICKETING_OK && !held) return;
        CHECK(now_s() - start < within, "%s is still held after %.1f s", key, within);
        sleep_ms(5);
    }
}

static int block(ticketing_future *future) {
    int ready = 0;
    int rc = ticketing_future_block_until_ready(future, 30000, &ready, NULL);
    CHECK(rc == TICKETING_OK && ready == 1, "block_until_ready: %s, ready %d", ticketing_kind_name(rc), ready);
    return ready;
}

static volatile int g_called;
static ticketing_future *g_called_with;
static void on_ready(ticketing_future *future, void *ctx) {
    g_called_with = future;
    __atomic_add_fetch(&g_called, *(int *)ctx, __ATOMIC_SEQ_CST);
}

static void basics(void) {
    ticketing_client *client = new_client(g_addr, "futures-a");
    ticketing_error *err = NULL;
    ticketing_future *f = NULL;
    int rc = ticketing_acquire_start(client, "f:basic", 30 * TICKETING_NS_PER_S, 0, &f, &err);
    CHECK(rc == TICKETING_OK && f != NULL, "acquire_start: %s", ticketing_error_message(err));
    ticketing_lock *lock = NULL;
    block(f);
    CHECK(ticketing_future_is_ready(f) == 1, "ready");
    rc = ticketing_future_get_release(f, NULL, &err);
    CHECK(rc == TICKETING_INVALID && strstr(ticketing_error_message(err), "ticketing_future_get_lock"),
          "the wrong getter names the right one");
    ticketing_error_free(err);
    rc = ticketing_future_get_lock(f, &lock, &err);
    CHECK(rc == TICKETING_OK && lock && ticketing_lock_token(lock) > 0, "get_lock: %s", ticketing_kind_name(rc));
    ticketing_lock *again = NULL;
    rc = ticketing_future_get_lock(f, &again, &err);
    CHECK(rc == TICKETING_INVALID && again == NULL, "a second get");
    ticketing_error_free(err);
    ticketing_future_free(f);
    printf("acquire future: granted, outcome taken once\n");

    /* The release, heard through a callback. */
    int one = 1;
    rc = ticketing_lock_release_start(lock, &f, &err);
    CHECK(rc == TICKETING_OK, "lock_release_start: %s", ticketing_error_message(err));
    ticketing_future *second = NULL;
    rc = ticketing_lock_release_start(lock, &second, &err);
    CHECK(rc == TICKETING_INVALID && second == NULL, "a second release while one runs");
    ticketing_error_free(err);
    rc = ticketing_future_set_callback(f, on_ready, &one, NULL);
    CHECK(rc == TICKETING_OK, "set_callback");
    rc = ticketing_future_set_callback(f, on_ready, &one, &err);
    CHECK(rc == TICKETING_INVALID, "a second callback");
    ticketing_error_free(err);
    double start = now_s();
    while (__atomic_load_n(&g_called, __ATOMIC_SEQ_CST) == 0) {
        CHECK(now_s() - start < 10, "the callback never ran");
        sleep_ms(1);
    }
    CHECK(g_called_with == f, "the callback got its own future");
    int outcome = 0;
    rc = ticketing_future_get_release(f, &outcome, NULL);
    CHECK(rc == TICKETING_OK && outcome == TICKETING_RELEASED, "release outcome %d", outcome);
    ticketing_future_free(f);
    CHECK(ticketing_lock_remaining_ms(lock) == 0, "released for good");
    ticketing_lock_free(lock);
    /* A callback set on a ready future runs at once, on this thread. */
    rc = ticketing_query_start(client, "f:basic", &f, NULL);
    CHECK(rc == TICKETING_OK, "query_start");
    block(f);
    g_called = 0;
    rc = ticketing_future_set_callback(f, on_ready, &one, NULL);
    CHECK(rc == TICKETING_OK && g_called == 1, "the callback of a ready future ran before set_callback returned");
    int held = 1;
    rc = ticketing_future_get_query(f, &held, NULL, NULL);
    CHECK(rc == TICKETING_OK && held == 0, "query: free");
    ticketing_future_free(f);
    printf("release future: callback once, released; a ready future's callback runs at once\n");

    /* Arguments refused at the start: no future. */
    rc = ticketing_acquire_start(client, "f:basic", 1500 * TICKETING_NS_PER_MS, 0, &f, &err);
    CHECK(rc == TICKETING_INVALID && f == NULL, "lease 1.5 s refused at start");
    ticketing_error_free(err);
    rc = ticketing_query_start(client, "", &f, &err);
    CHECK(rc == TICKETING_INVALID && f == NULL, "an empty key refused at start");
    ticketing_error_free(err);
    printf("bad arguments: refused at start, no future\n");
    ticketing_client_free(client);
}

static void queue(void) {
    ticketing_client *a = new_client(g_addr, "futures-holder"), *b = new_client(g_addr, "futures-b");
    ticketing_lock *held = acquire_now(a, "f:queue");
    ticketing_queue *q = NULL;
    int rc = ticketing_queue_new(&q, NULL);
    CHECK(rc == TICKETING_OK && q, "queue_new");
    int fd = ticketing_queue_fd(q);
    CHECK(fd >= 0, "queue fd");
    struct pollfd p = {fd, POLLIN, 0};
    CHECK(poll(&p, 1, 0) == 0, "an empty queue's descriptor is not readable");
    ticketing_future *busy = NULL, *free_key = NULL;
    rc = ticketing_acquire_start(b, "f:queue", 30 * TICKETING_NS_PER_S, 0, &busy, NULL);
    CHECK(rc == TICKETING_OK, "acquire_start busy");
    rc = ticketing_acquire_start(b, "f:queue-free", 30 * TICKETING_NS_PER_S, 0, &free_key, NULL);
    CHECK(rc == TICKETING_OK, "acquire_start free");
    ticketing_future_set_queue(busy, q, 41, NULL);
    ticketing_future_set_queue(free_key, q, 42, NULL);
    uint64_t tags[8];
    size_t got = 0;
    int seen41 = 0, seen42 = 0;
    double start = now_s();
    while (got < 2) {
        CHECK(now_s() - start < 15, "only %zu tags came", got);
        int n = poll(&p, 1, 1000);
        if (n <= 0) continue;
        size_t k = ticketing_queue_take(q, tags, 8);
        for (size_t i = 0; i < k; i++) {
            seen41 |= tags[i] == 41;
            seen42 |= tags[i] == 42;
        }
        got += k;
    }
    CHECK(seen41 && seen42, "the tags 41 and 42");
    CHECK(poll(&p, 1, 0) == 0, "the descriptor is quiet once the tags are taken");
    ticketing_lock *lock = NULL;
    ticketing_error *err = NULL;
    rc = ticketing_future_get_lock(busy, &lock, &err);
    CHECK(rc == TICKETING_BUSY, "busy: %s", ticketing_kind_name(rc));
    ticketing_error_free(err);
    rc = ticketing_future_get_lock(free_key, &lock, NULL);
    CHECK(rc == TICKETING_OK, "the free key: %s", ticketing_kind_name(rc));
    ticketing_lock_release(lock, NULL, NULL);
    ticketing_lock_free(lock);
    ticketing_future_free(busy);
    ticketing_future_free(free_key);
    printf("queue: two tags through the descriptor, busy and granted\n");
    ticketing_lock_release(held, NULL, NULL);
    ticketing_lock_free(held);
    ticketing_queue_free(q);
    ticketing_client_free(a);
    ticketing_client_free(b);
}

/* A waiting acquire cancelled after it was written: indeterminate (cancelled), and once
 * the holder lets go, the grant the server makes to it anyway is released by the client. */
static void cancel_written(void) {
    ticketing_client *a = new_client(g_addr, "futures-holder"), *b = new_client(g_addr, "futures-waiter");
    ticketing_lock *held = acquire_now(a, "f:cancel");
    ticketing_future *f = NULL;
    int rc = ticketing_acquire_start(b, "f:cancel", 30 * TICKETING_NS_PER_S, 20 * TICKETING_NS_PER_S, &f, NULL);
    CHECK(rc == TICKETING_OK, "acquire_start");
    wait_for_waiters(a, "f:cancel", 1);
    CHECK(ticketing_future_is_ready(f) == 0, "still waiting");
    CHECK(ticketing_future_cancel(f) == 1, "cancel of a running acquire");
    CHECK(ticketing_future_is_ready(f) == 1, "ready at once after cancel");
    CHECK(ticketing_future_cancel(f) == 0, "a second cancel finds it ended");
    ticketing_lock *lock = NULL;
    ticketing_error *err = NULL;
    rc = ticketing_future_get_lock(f, &lock, &err);
    CHECK(rc == TICKETING_INDETERMINATE && ticketing_error_cause(err) == TICKETING_CAUSE_CANCELLED,
          "cancelled after it was sent: %s cause %d", ticketing_kind_name(rc), ticketing_error_cause(err));
    ticketing_error_free(err);
    ticketing_future_free(f);
    printf("cancel after send: indeterminate, cause cancelled\n");
    /* The holder lets go: the server grants the cancelled waiter, whose client releases it. */
    ticketing_lock_release(held, NULL, NULL);
    ticketing_lock_free(held);
    wait_for_free(a, "f:cancel", 10);
    printf("the cancelled waiter's grant was released\n");

    /* A future freed before it is ready: cancelled the same way. */
    held = acquire_now(a, "f:freed");
    rc = ticketing_acquire_start(b, "f:freed", 30 * TICKETING_NS_PER_S, 20 * TICKETING_NS_PER_S, &f, NULL);
    CHECK(rc == TICKETING_OK, "acquire_start");
    wait_for_waiters(a, "f:freed", 1);
    ticketing_future_free(f);
    ticketing_lock_release(held, NULL, NULL);
    ticketing_lock_free(held);
    wait_for_free(a, "f:freed", 10);
    printf("a freed waiting future: its grant was released\n");
    ticketing_client_free(a);
    ticketing_client_free(b);
}

/* No server answers: an acquire still waiting for a connection is cancelled before any
 * byte was written. `dead` is an address where nothing listens. */
static void cancel_unsent(const char *dead) {
    ticketing_client *client = new_client(dead, "futures-unsent");
    ticketing_future *f = NULL;
    int rc = ticketing_acquire_start(client, "f:unsent", 30 * TICKETING_NS_PER_S, 10 * TICKETING_NS_PER_S, &f, NULL);
    CHECK(rc == TICKETING_OK, "acquire_start");
    CHECK(ticketing_future_is_ready(f) == 0, "waiting for a connection");
    CHECK(ticketing_future_cancel(f) == 1, "cancel");
    ticketing_error *err = NULL;
    ticketing_lock *lock = NULL;
    rc = ticketing_future_get_lock(f, &lock, &err);
    CHECK(rc == TICKETING_CANCELLED, "cancelled before it was sent: %s", ticketing_kind_name(rc));
    CHECK(strstr(ticketing_error_message(err), "not acquired") != NULL, "%s", ticketing_error_message(err));
    ticketing_error_free(err);
    ticketing_future_free(f);
    printf("cancel before send: cancelled, not acquired\n");
    ticketing_client_free(client);
}

static long status_field(const char *name) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long value = -1;
    size_t len = strlen(name);
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, name, len) == 0 && line[len] == ':') value = strtol(line + len + 1, NULL, 10);
    }
    if (f) fclose(f);
    return value;
}

#define KEYS 100
#define PER_KEY 100
#define WAITS (KEYS * PER_KEY)

/* 10 000 acquires waiting at once through one client: held keys, 100 waiters each. */
static void ten_thousand(void) {
    ticketing_client *holder = new_client(g_addr, "futures-holder"), *client = new_client(g_addr, "futures-many");
    static ticketing_lock *held[KEYS];
    char key[32];
    for (int k = 0; k < KEYS; k++) {
        snprintf(key, sizeof key, "many:%d", k);
        held[k] = acquire_now(holder, key);
    }
    long threads_before = status_field("Threads"), rss_before = status_field("VmRSS");
    ticketing_queue *q = NULL;
    CHECK(ticketing_queue_new(&q, NULL) == TICKETING_OK, "queue_new");
    static ticketing_future *futures[WAITS];
    double started = now_s();
    for (int i = 0; i < WAITS; i++) {
        snprintf(key, sizeof key, "many:%d", i % KEYS);
        /* A long wait: the half of the keys that stay held time their waiters out. */
        int rc = ticketing_acquire_start(client, key, 30 * TICKETING_NS_PER_S, 4 * TICKETING_NS_PER_S, &futures[i], NULL);
        CHECK(rc == TICKETING_OK, "acquire_start %d: %s", i, ticketing_kind_name(rc));
        ticketing_future_set_queue(futures[i], q, (uint64_t)i, NULL);
    }
    double start_took = now_s() - started;
    /* Every waiter is queued on the server before anything is released. */
    for (int k = 0; k < KEYS; k++) {
        snprintf(key, sizeof key, "many:%d", k);
        wait_for_waiters(holder, key, PER_KEY);
    }
    long threads = status_field("Threads"), rss = status_field("VmRSS");
    printf("waiting: %d acquires, started in %.3f s; threads %ld (before %ld); rss %ld KiB (before %ld KiB)\n",
           WAITS, start_took, threads, threads_before, rss, rss_before);
    fflush(stdout);
    /* Half of the keys are let go: their waiters are granted one after another (each
     * releases at once); the other half's waiters time out. */
    for (int k = 0; k < KEYS; k += 2) {
        ticketing_lock_release(held[k], NULL, NULL);
    }
    int granted = 0, timed_out = 0, other = 0, done = 0;
    struct pollfd p = {ticketing_queue_fd(q), POLLIN, 0};
    uint64_t tags[256];
    while (done < WAITS) {
        CHECK(now_s() - started < 60, "only %d of %d futures became ready", done, WAITS);
        if (poll(&p, 1, 1000) <= 0) continue;
        size_t n = ticketing_queue_take(q, tags, 256);
        for (size_t i = 0; i < n; i++) {
            ticketing_lock *lock = NULL;
            int rc = ticketing_future_get_lock(futures[tags[i]], &lock, NULL);
            if (rc == TICKETING_OK) {
                granted++;
                ticketing_lock_free(lock); /* released in the background: the next waiter goes on */
            } else if (rc == TICKETING_TIMEOUT) {
                timed_out++;
            } else {
                other++;
                if (other <= 3) printf("unexpected outcome: %s\n", ticketing_kind_name(rc));
            }
            ticketing_future_free(futures[tags[i]]);
            done++;
        }
    }
    printf("outcomes: %d granted, %d timed out, %d other; threads at the end %ld\n", granted, timed_out, other,
           status_field("Threads"));
    CHECK(other == 0, "every waiter is granted or times out");
    CHECK(granted > 0 && timed_out > 0, "both outcomes happen");
    for (int k = 1; k < KEYS; k += 2) ticketing_lock_release(held[k], NULL, NULL);
    for (int k = 0; k < KEYS; k++) ticketing_lock_free(held[k]);
    ticketing_queue_free(q);
    ticketing_client_free(client);
    ticketing_client_free(holder);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s ADDR SECRET MODE [DEAD_ADDR]\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    g_addr = argv[1];
    g_secret = argv[2];
    const char *mode = argv[3];
    if (strcmp(mode, "basics") == 0) {
        basics();
        queue();
    } else if (strcmp(mode, "cancel") == 0) {
        cancel_written();
        cancel_unsent(argc > 4 ? argv[4] : "127.0.0.1:9");
    } else if (strcmp(mode, "ten-thousand") == 0) {
        ten_thousand();
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    printf("done\n");
    return 0;
}
