/*
 * The C ABI (include/ticketing.h) against a real `ticketing server`, built with `cc` by
 * tests/c_abi.rs, once against libticketing.so and once against libticketing.a:
 *
 *   ticketing_test ADDR SECRET
 *
 * acquire, query, release and their outcomes; busy and timeout; bad arguments; a wrong
 * secret; then THREADS threads sharing one client take turns on one key, checking that
 * no two are ever inside at once and that tokens only grow. Prints one line per check
 * group and "c test: N checks passed"; exits 1 at the first failed check.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ticketing.h"

#define THREADS 8
#define ROUNDS 40

static atomic_int checks;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "FAILED %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
            exit(1);                                                       \
        }                                                                  \
        atomic_fetch_add(&checks, 1);                                      \
    } while (0)

static const char *message(const ticketing_error *e) {
    return e ? ticketing_error_message(e) : "(no error object)";
}

static ticketing_client *client_of(const char *addr, const char *secret, const char *owner) {
    const char *addrs[] = {addr};
    ticketing_client *c = NULL;
    ticketing_error *e = NULL;
    int rc = ticketing_client_new(addrs, 1, (const uint8_t *)secret, strlen(secret), owner, NULL, &c, &e);
    CHECK(rc == TICKETING_OK && c != NULL && e == NULL, "client_new: %d %s", rc, message(e));
    return c;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* --- several threads, one client, one key ------------------------------------------ */

static ticketing_client *shared;
static atomic_int inside;
static pthread_mutex_t token_mutex = PTHREAD_MUTEX_INITIALIZER;
static uint64_t last_token;
static atomic_int grants;

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        ticketing_lock *lock = NULL;
        ticketing_error *e = NULL;
        int rc = ticketing_acquire(shared, "c:hot", 10 * TICKETING_NS_PER_S, 10 * TICKETING_NS_PER_S, &lock, &e);
        CHECK(rc == TICKETING_OK, "thread acquire: %s %s", ticketing_kind_name(rc), message(e));
        CHECK(atomic_fetch_add(&inside, 1) == 0, "two holders of c:hot at once");
        uint64_t token = ticketing_lock_token(lock);
        pthread_mutex_lock(&token_mutex);
        CHECK(token > last_token, "token %llu after %llu", (unsigned long long)token,
              (unsigned long long)last_token);
        last_token = token;
        pthread_mutex_unlock(&token_mutex);
        atomic_fetch_sub(&inside, 1);
        int outcome = 0;
        rc = ticketing_lock_release(lock, &outcome, &e);
        CHECK(rc == TICKETING_OK && outcome == TICKETING_RELEASED, "thread release: %d %d %s", rc, outcome,
              message(e));
        ticketing_lock_free(lock);
        atomic_fetch_add(&grants, 1);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s ADDR SECRET\n", argv[0]);
        return 2;
    }
    const char *addr = argv[1], *secret = argv[2];

    CHECK(ticketing_version() == TICKETING_ABI_VERSION, "ABI %u, header %d", ticketing_version(),
          TICKETING_ABI_VERSION);
    printf("library %s, ABI %u\n", ticketing_version_string(), ticketing_version());

    /* acquire, query, release */
    ticketing_client *a = client_of(addr, secret, "c-office-a");
    CHECK(strcmp(ticketing_client_owner(a), "c-office-a") == 0, "owner %s", ticketing_client_owner(a));
    ticketing_lock *lock = NULL;
    ticketing_error *e = NULL;
    int rc = ticketing_acquire(a, "c:seat:1", 10 * TICKETING_NS_PER_S, 0, &lock, &e);
    CHECK(rc == TICKETING_OK && lock != NULL && e == NULL, "acquire: %s %s", ticketing_kind_name(rc), message(e));
    uint64_t token = ticketing_lock_token(lock);
    CHECK(token > 0, "token %llu", (unsigned long long)token);
    CHECK(strcmp(ticketing_lock_key(lock), "c:seat:1") == 0, "key %s", ticketing_lock_key(lock));
    CHECK(strcmp(ticketing_lock_owner(lock), "c-office-a") == 0, "owner %s", ticketing_lock_owner(lock));
    CHECK(ticketing_lock_lease_ms(lock) == 10000, "lease %llu", (unsigned long long)ticketing_lock_lease_ms(lock));
    uint64_t left = ticketing_lock_remaining_ms(lock);
    CHECK(left > 8000 && left <= 10000, "remaining %llu", (unsigned long long)left);

    int held = -1;
    ticketing_holder holder;
    memset(&holder, 0, sizeof holder);
    rc = ticketing_query(a, "c:seat:1", &held, &holder, &e);
    CHECK(rc == TICKETING_OK && held == 1, "query: %d %d %s", rc, held, message(e));
    CHECK(holder.token == token && strcmp(holder.owner, "c-office-a") == 0 && holder.owner_len == 10,
          "holder %llu %s", (unsigned long long)holder.token, holder.owner);
    CHECK(holder.lease_left_ms > 5000 && holder.waiters == 0, "lease left %llu waiters %u",
          (unsigned long long)holder.lease_left_ms, holder.waiters);
    printf("acquire and query: token %llu\n", (unsigned long long)token);

    /* busy and timeout, from another owner */
    ticketing_client *b = NULL;
    rc = ticketing_client_with_owner(a, "c-office-b", &b, &e);
    CHECK(rc == TICKETING_OK, "with_owner: %s", message(e));
    ticketing_lock *other = (ticketing_lock *)1;
    rc = ticketing_acquire(b, "c:seat:1", 10 * TICKETING_NS_PER_S, 0, &other, &e);
    CHECK(rc == TICKETING_BUSY && other == NULL, "busy: %s", ticketing_kind_name(rc));
    CHECK(ticketing_error_kind(e) == TICKETING_BUSY && strcmp(ticketing_kind_name(rc), "busy") == 0, "kind");
    CHECK(strstr(ticketing_error_message(e), "busy") != NULL, "message %s", ticketing_error_message(e));
    CHECK(ticketing_error_is_retryable(e) == 0 && ticketing_error_cause(e) == 0, "busy is final");
    ticketing_error_free(e);
    double start = now_s();
    rc = ticketing_acquire(b, "c:seat:1", 10 * TICKETING_NS_PER_S, 300 * TICKETING_NS_PER_MS, &other, &e);
    double took = now_s() - start;
    CHECK(rc == TICKETING_TIMEOUT, "timeout: %s %s", ticketing_kind_name(rc), message(e));
    CHECK(took >= 0.25 && took < 3.0, "the wait took %.3f s", took);
    ticketing_error_free(e);
    printf("busy and timeout: ok (the wait took %.3f s)\n", took);

    /* release and its outcomes */
    int outcome = 0;
    rc = ticketing_lock_release(lock, &outcome, &e);
    CHECK(rc == TICKETING_OK && outcome == TICKETING_RELEASED, "release: %d %d %s", rc, outcome, message(e));
    CHECK(ticketing_lock_remaining_ms(lock) == 0, "released locks have no time left");
    rc = ticketing_lock_release(lock, &outcome, &e);
    CHECK(rc == TICKETING_INVALID, "second release: %d", rc);
    CHECK(strstr(ticketing_error_message(e), "already released") != NULL, "%s", ticketing_error_message(e));
    ticketing_error_free(e);
    ticketing_lock_free(lock);
    rc = ticketing_release(a, "c:seat:1", token, &outcome, NULL);
    CHECK(rc == TICKETING_OK && outcome == TICKETING_NOT_HOLDER, "stale release: %d %d", rc, outcome);
    rc = ticketing_query(a, "c:seat:1", &held, NULL, NULL);
    CHECK(rc == TICKETING_OK && held == 0, "free after release: %d %d", rc, held);
    printf("release: released, then not holder\n");

    /* a freed lock is released in the background */
    rc = ticketing_acquire(b, "c:seat:2", 10 * TICKETING_NS_PER_S, 0, &lock, NULL);
    CHECK(rc == TICKETING_OK, "acquire seat 2: %d", rc);
    ticketing_lock_free(lock);
    int drained = 0;
    rc = ticketing_client_close(b, 5000, &drained, NULL);
    CHECK(rc == TICKETING_OK && drained == 1, "close: %d %d", rc, drained);
    rc = ticketing_query(a, "c:seat:2", &held, NULL, NULL);
    CHECK(rc == TICKETING_OK && held == 0, "freed lock released: %d %d", rc, held);
    ticketing_client_free(b);

    /* bad arguments */
    rc = ticketing_acquire(a, NULL, 10 * TICKETING_NS_PER_S, 0, &lock, &e);
    CHECK(rc == TICKETING_INVALID && strcmp(ticketing_error_message(e), "key is NULL") == 0, "NULL key: %d", rc);
    ticketing_error_free(e);
    rc = ticketing_acquire(a, "c:seat:3", 0, 0, &lock, &e);
    CHECK(rc == TICKETING_INVALID && strstr(ticketing_error_message(e), "lease") != NULL, "lease 0: %s",
          message(e));
    ticketing_error_free(e);
    rc = ticketing_acquire(a, "c:seat:3", 10 * TICKETING_NS_PER_S, -1, &lock, NULL);
    CHECK(rc == TICKETING_INVALID, "negative wait: %d", rc);
    printf("bad arguments: invalid\n");

    /* several threads sharing one client */
    shared = a;
    pthread_t threads[THREADS];
    start = now_s();
    for (int i = 0; i < THREADS; i++) CHECK(pthread_create(&threads[i], NULL, worker, NULL) == 0, "thread");
    for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
    CHECK(atomic_load(&grants) == THREADS * ROUNDS, "grants %d", atomic_load(&grants));
    printf("threads: %d threads x %d turns on one key in %.2f s, tokens increasing\n", THREADS, ROUNDS,
           now_s() - start);
    ticketing_client_free(a);

    /* a wrong secret: a mistake that trying again cannot fix, said at once */
    ticketing_client *wrong = client_of(addr, "not-the-server-secret-0123", "c-office-w");
    rc = ticketing_acquire(wrong, "c:seat:4", 10 * TICKETING_NS_PER_S, 0, &lock, &e);
    CHECK(rc == TICKETING_UNAVAILABLE && ticketing_error_is_retryable(e) == 0, "wrong secret: %s",
          ticketing_kind_name(rc));
    CHECK(strstr(ticketing_error_message(e), "auth token") != NULL, "%s", ticketing_error_message(e));
    printf("wrong secret: %s\n", ticketing_error_message(e));
    ticketing_error_free(e);
    ticketing_client_free(wrong);

    printf("c test: %d checks passed\n", atomic_load(&checks));
    return 0;
}
