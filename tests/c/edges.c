/* The C ABI at the edges of a process (run by tests/c_edges.rs against a real server):
 * releases from exit handlers and thread destructors, a failed release retried through
 * the same handle, counts refused before anything is read, handles used after free,
 * and panics that stay off standard error.
 *
 * Usage: edges ADDR SECRET MODE [KEY]. Prints one line per fact checked; exits 1 with a
 * line starting "FAILED" when a check fails. Modes that need the test harness to act
 * (stop the server) print "ready: ..." and wait for a line on standard input. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ticketing.h"

static const char *g_addr, *g_secret;
static ticketing_client *g_client;
static ticketing_lock *g_lock;

#include "check.h"

static ticketing_client *new_client(void) {
    ticketing_client *client = NULL;
    ticketing_error *err = NULL;
    int rc = ticketing_client_new(&g_addr, 1, (const uint8_t *)g_secret, strlen(g_secret), NULL, NULL, &client, &err);
    CHECK(rc == TICKETING_OK, "client_new: %s", ticketing_error_message(err));
    return client;
}

static ticketing_lock *acquire(ticketing_client *client, const char *key) {
    ticketing_lock *lock = NULL;
    ticketing_error *err = NULL;
    int rc = ticketing_acquire(client, key, 20 * TICKETING_NS_PER_S, 5 * TICKETING_NS_PER_S, &lock, &err);
    CHECK(rc == TICKETING_OK, "acquire %s: %s %s", key, ticketing_kind_name(rc), ticketing_error_message(err));
    return lock;
}

/* Releases g_lock and prints the outcome under `where`. */
static void release_and_report(const char *where, ticketing_lock *lock) {
    int outcome = 0;
    ticketing_error *err = NULL;
    int rc = ticketing_lock_release(lock, &outcome, &err);
    if (rc == TICKETING_OK) {
        printf("%s release: %s\n", where, outcome == TICKETING_RELEASED ? "released" : "other outcome");
    } else {
        printf("%s release: FAILED %s: %s\n", where, ticketing_kind_name(rc), ticketing_error_message(err));
        ticketing_error_free(err);
    }
    fflush(stdout);
    ticketing_lock_free(lock);
}

static void at_exit(void) { release_and_report("atexit", g_lock); }

static pthread_key_t g_key;
static void key_destructor(void *lock) { release_and_report("pthread_key destructor", lock); }

static void *thread_with_key(void *key) {
    ticketing_lock *lock = acquire(g_client, key);
    pthread_setspecific(g_key, lock);
    return NULL; /* the destructor releases it as the thread ends */
}

static void wait_for_harness(const char *what) {
    char line[64];
    printf("ready: %s\n", what);
    fflush(stdout);
    CHECK(fgets(line, sizeof line, stdin) != NULL, "no word from the harness after %s", what);
}

static double seconds_since(const struct timespec *start) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - start->tv_sec) + (double)(now.tv_nsec - start->tv_nsec) / 1e9;
}

/* The server is paused by the harness, then resumed: the first release is unconfirmed
 * and the lock stays releasable; the retry learns the first one went through. */
static void release_retry_paused(const char *key) {
    ticketing_lock *lock = acquire(g_client, key);
    wait_for_harness("acquired; pause the server");
    int outcome = 0;
    ticketing_error *err = NULL;
    int rc = ticketing_lock_release(lock, &outcome, &err);
    /* Sent and unanswered (unconfirmed), or — when the client found the silent
     * connection dead first — never sent (unavailable): either way not confirmed, and the
     * client's own check releases it once a server answers. */
    CHECK(rc == TICKETING_UNCONFIRMED || rc == TICKETING_UNAVAILABLE, "release on a paused server: %s",
          ticketing_kind_name(rc));
    CHECK(rc == TICKETING_UNAVAILABLE || ticketing_error_is_retryable(err) == 0,
          "unconfirmed is not retryable (it may have executed)");
    ticketing_error_free(err);
    CHECK(ticketing_lock_remaining_ms(lock) > 0, "an unconfirmed lock still counts down its lease");
    wait_for_harness("release unconfirmed; resume the server");
    rc = ticketing_lock_release(lock, &outcome, &err);
    CHECK(rc == TICKETING_OK, "the retry: %s %s", ticketing_kind_name(rc), ticketing_error_message(err));
    /* Released now, or by the first attempt or the client's check: never "not holder". */
    CHECK(outcome == TICKETING_RELEASED_OR_EXPIRED || outcome == TICKETING_RELEASED, "the retry's outcome is %d",
          outcome);
    printf("retry after unconfirmed: %s\n", outcome == TICKETING_RELEASED ? "released" : "released_or_expired");
    rc = ticketing_lock_release(lock, &outcome, &err);
    CHECK(rc == TICKETING_INVALID && strstr(ticketing_error_message(err), "already released"),
          "a third release: %s", ticketing_kind_name(rc));
    ticketing_error_free(err);
    CHECK(ticketing_lock_remaining_ms(lock) == 0, "a released lock has no time left");
    ticketing_lock_free(lock);
    printf("release after success: invalid, already released\n");
}

/* The server is killed by the harness: the release is unavailable (never sent), marked
 * retryable, and a retry through the same handle is another attempt, not "already
 * released". */
static void release_retry_dead(const char *key) {
    ticketing_lock *lock = acquire(g_client, key);
    wait_for_harness("acquired; kill the server");
    int outcome = 0, held = 0;
    ticketing_error *err = NULL;
    /* A release written before the client saw the connection close would be
     * unconfirmed, not unavailable: wait until the client knows nothing answers. */
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (ticketing_query(g_client, key, &held, NULL, NULL) != TICKETING_UNAVAILABLE)
        CHECK(seconds_since(&start) < 30, "the client still reaches a killed server");
    for (int attempt = 1; attempt <= 2; attempt++) {
        int rc = ticketing_lock_release(lock, &outcome, &err);
        CHECK(rc == TICKETING_UNAVAILABLE, "release %d on a dead server: %s %s", attempt, ticketing_kind_name(rc),
              ticketing_error_message(err));
        CHECK(ticketing_error_is_retryable(err) == 1, "a refused connection is retryable");
        ticketing_error_free(err);
    }
    printf("release on a dead server: unavailable twice, retryable\n");
    ticketing_lock_free(lock);
}

static void limits(void) {
    ticketing_client *client = NULL;
    ticketing_error *err = NULL;
    const char *addrs[] = {g_addr};
    int rc = ticketing_client_new(addrs, (size_t)1 << 40, (const uint8_t *)g_secret, strlen(g_secret), NULL, NULL,
                                  &client, &err);
    CHECK(rc == TICKETING_INVALID && client == NULL, "a huge addrs_len: %s", ticketing_kind_name(rc));
    CHECK(strstr(ticketing_error_message(err), "addrs_len") != NULL, "%s", ticketing_error_message(err));
    printf("huge addrs_len: invalid: %s\n", ticketing_error_message(err));
    ticketing_error_free(err);
    rc = ticketing_client_new(addrs, 1, (const uint8_t *)g_secret, (size_t)1 << 40, NULL, NULL, &client, &err);
    CHECK(rc == TICKETING_INVALID && strstr(ticketing_error_message(err), "auth_token_len"), "huge secret");
    ticketing_error_free(err);
    printf("huge auth_token_len: invalid\n");
}

static void use_after_free(const char *key) {
    ticketing_client *client = new_client();
    ticketing_lock *lock = acquire(client, key);
    ticketing_error *err = NULL;
    /* A lock passed as a client, a client as a lock. */
    ticketing_lock *other = NULL;
    int rc = ticketing_acquire((ticketing_client *)lock, key, 1 * TICKETING_NS_PER_S, 0, &other, &err);
    CHECK(rc == TICKETING_INVALID && strstr(ticketing_error_message(err), "not a live ticketing_client"),
          "a lock as a client: %s", ticketing_kind_name(rc));
    ticketing_error_free(err);
    int outcome = 0;
    rc = ticketing_lock_release((ticketing_lock *)client, &outcome, &err);
    CHECK(rc == TICKETING_INVALID && strstr(ticketing_error_message(err), "not a live ticketing_lock"),
          "a client as a lock: %s", ticketing_kind_name(rc));
    ticketing_error_free(err);
    printf("wrong kind of handle: invalid\n");
    ticketing_lock_free(lock); /* released in the background */
    rc = ticketing_lock_release(lock, &outcome, &err);
    CHECK(rc == TICKETING_INVALID && strstr(ticketing_error_message(err), "not a live ticketing_lock"),
          "a freed lock: %s", ticketing_kind_name(rc));
    ticketing_error_free(err);
    CHECK(ticketing_lock_token(lock) == 0 && ticketing_lock_key(lock) == NULL, "a freed lock's getters");
    printf("lock used after free: invalid\n");
    ticketing_client_free(client);
    ticketing_holder holder;
    int held = 0;
    rc = ticketing_query(client, key, &held, &holder, &err);
    CHECK(rc == TICKETING_INVALID && strstr(ticketing_error_message(err), "not a live ticketing_client"),
          "a freed client: %s", ticketing_kind_name(rc));
    ticketing_error_free(err);
    CHECK(ticketing_client_owner(client) == NULL, "a freed client's owner");
    printf("client used after free: invalid\n");
}

static void double_free(const char *key) {
    ticketing_client *client = new_client();
    ticketing_lock *lock = acquire(client, key);
    ticketing_lock_free(lock);
    printf("freeing the lock again\n");
    fflush(stdout);
    ticketing_lock_free(lock); /* aborts */
    printf("FAILED: a double free went on\n");
}

static volatile int g_records;
static char g_record[512];
static void on_log(void *ctx, int level, const char *target, const char *message) {
    (void)ctx;
    if (level == TICKETING_LOG_ERROR && strcmp(target, "ticketing::panic") == 0 && g_records == 0) {
        snprintf(g_record, sizeof g_record, "%s", message);
        __atomic_store_n(&g_records, 1, __ATOMIC_RELEASE);
    }
}

static void panics(int logged) {
    ticketing_error *err = NULL;
    if (logged) {
        int rc = ticketing_set_logger(on_log, NULL, TICKETING_LOG_WARN, &err);
        CHECK(rc == TICKETING_OK, "set_logger: %s", ticketing_error_message(err));
        rc = ticketing_set_logger(on_log, NULL, 6, &err);
        CHECK(rc == TICKETING_INVALID, "a level out of range");
        ticketing_error_free(err);
    }
    int rc = ticketing_test_panic(0);
    CHECK(rc == TICKETING_INTERNAL, "a panic in a call: %s", ticketing_kind_name(rc));
    rc = ticketing_test_panic(1);
    CHECK(rc == TICKETING_INTERNAL, "a panic on a client thread: %s", ticketing_kind_name(rc));
    printf("panics: internal, twice\n");
    if (logged) {
        struct timespec start;
        clock_gettime(CLOCK_MONOTONIC, &start);
        while (!__atomic_load_n(&g_records, __ATOMIC_ACQUIRE)) {
            CHECK(seconds_since(&start) < 10, "no log record of the panic within 10 s");
            nanosleep(&(struct timespec){0, 1000000}, NULL);
        }
        CHECK(strstr(g_record, "a test panic") != NULL, "the record: %s", g_record);
        printf("the logger got: %s\n", g_record);
        rc = ticketing_set_logger(NULL, NULL, TICKETING_LOG_OFF, NULL);
        CHECK(rc == TICKETING_OK, "set_logger(NULL)");
    }
}

/* The wait check: a blocking acquire on a held key, stopped by the check's third
 * answer; a release and a query that come back at once never call it. */
static volatile int g_checks;
static int stop_on_third(void *ctx) {
    (void)ctx;
    return ++g_checks >= 3;
}

static void wait_check(const char *key) {
    ticketing_client *holder = new_client(), *client = new_client();
    ticketing_error *err = NULL;
    CHECK(ticketing_set_wait_check(stop_on_third, NULL, 0, &err) == TICKETING_INVALID, "slice 0 is refused");
    ticketing_error_free(err);
    /* A call answered within its slice never calls the check (a long slice here, so
     * that a busy machine's slow answer still comes within it). */
    CHECK(ticketing_set_wait_check(stop_on_third, NULL, 2000, NULL) == TICKETING_OK, "set_wait_check");
    ticketing_lock *held = acquire(holder, key);
    CHECK(g_checks == 0, "a call answered within its slice never checks");
    CHECK(ticketing_set_wait_check(stop_on_third, NULL, 20, NULL) == TICKETING_OK, "set_wait_check 20 ms");
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    ticketing_lock *lock = NULL;
    int rc = ticketing_acquire(client, key, 20 * TICKETING_NS_PER_S, 20 * TICKETING_NS_PER_S, &lock, &err);
    double took = seconds_since(&start);
    CHECK((rc == TICKETING_INDETERMINATE && ticketing_error_cause(err) == TICKETING_CAUSE_CANCELLED) ||
              rc == TICKETING_CANCELLED,
          "a stopped wait: %s", ticketing_kind_name(rc));
    CHECK(g_checks == 3 && took < 2.0, "stopped at the third check (%d checks, %.3f s)", g_checks, took);
    printf("wait check: %s after %d checks, %.0f ms\n", ticketing_kind_name(rc), g_checks, took * 1000);
    ticketing_error_free(err);
    /* A future blocked on waits as a blocking call does: the check stops it too, and the
     * future is ready with the cancelled outcome. */
    g_checks = 0;
    ticketing_future *future = NULL;
    rc = ticketing_acquire_start(client, key, 20 * TICKETING_NS_PER_S, 20 * TICKETING_NS_PER_S, &future, NULL);
    CHECK(rc == TICKETING_OK, "acquire_start: %s", ticketing_kind_name(rc));
    clock_gettime(CLOCK_MONOTONIC, &start);
    int ready = 0;
    rc = ticketing_future_block_until_ready(future, -1, &ready, NULL);
    took = seconds_since(&start);
    CHECK(rc == TICKETING_OK && ready == 1, "block_until_ready: %s, ready %d", ticketing_kind_name(rc), ready);
    CHECK(g_checks == 3 && took < 2.0, "stopped at the third check (%d checks, %.3f s)", g_checks, took);
    rc = ticketing_future_get_lock(future, &lock, &err);
    CHECK((rc == TICKETING_INDETERMINATE && ticketing_error_cause(err) == TICKETING_CAUSE_CANCELLED) ||
              rc == TICKETING_CANCELLED,
          "a stopped block_until_ready: %s", ticketing_kind_name(rc));
    printf("block_until_ready wait check: %s after %d checks\n", ticketing_kind_name(rc), g_checks);
    ticketing_error_free(err);
    ticketing_future_free(future);
    /* Another thread's calls have no check: it is the calling thread's. */
    CHECK(ticketing_set_wait_check(NULL, NULL, 20, NULL) == TICKETING_OK, "removed");
    release_and_report("holder", held);
    /* The stopped waiter's grant, if the server makes one at the holder's release, is
     * this client's to release: close waits for that before the process may end. */
    int drained = 0;
    CHECK(ticketing_client_close(client, 10000, &drained, NULL) == TICKETING_OK && drained,
          "the stopped waiter's grant was released before close returned");
    ticketing_client_free(client);
    ticketing_client_free(holder);
}

/* Appends the C string `text` to `buf` (of `cap` bytes) at `*len`, cutting what does not
 * fit; safe after fork() (strlen and memcpy only). */
static void append(char *buf, size_t cap, size_t *len, const char *text) {
    size_t n = text == NULL ? 0 : strlen(text);
    if (n > cap - *len) {
        n = cap - *len;
    }
    memcpy(buf + *len, text, n);
    *len += n;
}

/* How long the parent waits for the forked child: its calls fail without any I/O, so
 * this is thousands of times what they take; a child still running then is killed and
 * the check fails naming it. */
#define CHILD_DEADLINE_S 60

/* The child of after_fork. The parent has other threads (the client's), and any lock
 * one of them held at the fork — the allocator's, stdio's — stays held here for good:
 * from fork() to _exit this uses only what is safe then. No printf, no malloc: the
 * library calls under test (which allocate nothing and take no lock in a forked
 * child, docs/c.md "After fork()"), string copies into a buffer on the stack, write(2)
 * and _exit. Its report goes to the parent through `out`. */
static void after_fork_child(ticketing_client *client, ticketing_lock *held, const char *key, int out) {
    ticketing_lock *lock = NULL;
    ticketing_error *err = NULL, *again = NULL;
    int rc = ticketing_acquire(client, key, 20 * TICKETING_NS_PER_S, 1 * TICKETING_NS_PER_S, &lock, &err);
    int held_flag = 0;
    int rc_query = ticketing_query(client, key, &held_flag, NULL, &again);
    const char *message = ticketing_error_message(err);
    /* The facts: the after-fork error (unavailable, not retryable, saying why), and
     * one object for both calls: it is static, nothing was allocated to report it,
     * and no call went as far as the client's connections. */
    int refused = rc == TICKETING_UNAVAILABLE && lock == NULL && ticketing_error_is_retryable(err) == 0 &&
                  message != NULL && strstr(message, "before a fork") != NULL;
    int same = rc_query == TICKETING_UNAVAILABLE && again == err;
    char line[1024];
    size_t len = 0;
    append(line, sizeof line, &len, "child: ");
    append(line, sizeof line, &len, ticketing_kind_name(rc));
    append(line, sizeof line, &len, same ? ", the same error object twice: " : ", FAILED: another error object: ");
    append(line, sizeof line, &len, message);
    append(line, sizeof line, &len, "\n");
    if (!refused) {
        append(line, sizeof line, &len, "FAILED: the child's call did not fail with the after-fork error\n");
    }
    ssize_t wrote = write(out, line, len);
    /* Freeing in the child touches nothing of the parent's, and frees nothing. */
    ticketing_error_free(err);
    ticketing_error_free(again);
    ticketing_lock_free(held);
    ticketing_client_free(client);
    _exit(refused && same && wrote == (ssize_t)len ? 0 : 1);
}

/* Waits for the child `pid` that reports through `in`, at most CHILD_DEADLINE_S
 * seconds; then kills it and fails, naming it. Prints what it reported. */
static void wait_for_child(pid_t pid, int in) {
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    char report[2048];
    size_t got = 0;
    int status = 0;
    for (;;) {
        double left = CHILD_DEADLINE_S - seconds_since(&start);
        if (left <= 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            CHECK(0, "the forked child (pid %d) did not exit within %d s: killed; it reported: %.*s", (int)pid,
                  CHILD_DEADLINE_S, (int)got, report);
        }
        /* Its report while it runs; end of file once it has exited. */
        struct pollfd readable = {.fd = in, .events = POLLIN};
        int ready = poll(&readable, 1, (int)(left * 1000) + 1);
        CHECK(ready >= 0 || errno == EINTR, "poll: %s", strerror(errno));
        if (ready <= 0) {
            continue;
        }
        ssize_t n = read(in, report + got, sizeof report - 1 - got);
        CHECK(n >= 0 || errno == EINTR, "read: %s", strerror(errno));
        if (n == 0 || got + (size_t)n == sizeof report - 1) {
            got += n > 0 ? (size_t)n : 0;
            break;
        }
        got += n > 0 ? (size_t)n : 0;
    }
    report[got] = '\0';
    close(in);
    printf("%s", report);
    /* End of file came as it exited: reaped within the same deadline. */
    pid_t reaped;
    while ((reaped = waitpid(pid, &status, WNOHANG)) == 0) {
        if (seconds_since(&start) > CHILD_DEADLINE_S) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            CHECK(0, "the forked child (pid %d) closed its pipe but did not exit within %d s: killed", (int)pid,
                  CHILD_DEADLINE_S);
        }
        struct timespec tick = {0, 1000000}; /* the poll interval of this bounded wait */
        nanosleep(&tick, NULL);
    }
    CHECK(reaped == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "the forked child (pid %d) failed (status %d): its call did not fail at once as it should", (int)pid,
          status);
}

/* A client used after fork(): the child's call fails at once, the parent goes on. */
static void after_fork(const char *key) {
    ticketing_client *client = new_client();
    ticketing_lock *held = acquire(client, "fork:held"); /* held across the fork */
    int report[2];
    CHECK(pipe(report) == 0, "pipe: %s", strerror(errno));
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        close(report[0]);
        after_fork_child(client, held, key, report[1]);
    }
    close(report[1]);
    wait_for_child(pid, report[0]);
    /* The parent goes on: its held lock, a new acquire and release. */
    int held_flag = 1;
    CHECK(ticketing_query(client, key, &held_flag, NULL, NULL) == TICKETING_OK && held_flag == 0, "key free");
    release_and_report("parent after fork", acquire(client, key));
    release_and_report("parent's lock held across the fork", held);
    ticketing_client_free(client);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s ADDR SECRET MODE [KEY]\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    g_addr = argv[1];
    g_secret = argv[2];
    const char *mode = argv[3], *key = argc > 4 ? argv[4] : "edge";
    if (strcmp(mode, "atexit") == 0) {
        g_client = new_client();
        g_lock = acquire(g_client, key);
        /* The client's blocking calls used this thread's storage: gone by atexit time. */
        atexit(at_exit);
        printf("acquired %s; exiting\n", key);
        return 0;
    } else if (strcmp(mode, "pthread-key") == 0) {
        g_client = new_client();
        pthread_key_create(&g_key, key_destructor);
        pthread_t thread;
        pthread_create(&thread, NULL, thread_with_key, (void *)key);
        pthread_join(thread, NULL);
    } else if (strcmp(mode, "release-retry-paused") == 0) {
        g_client = new_client();
        release_retry_paused(key);
    } else if (strcmp(mode, "release-retry-dead") == 0) {
        g_client = new_client();
        release_retry_dead(key);
    } else if (strcmp(mode, "limits") == 0) {
        limits();
    } else if (strcmp(mode, "use-after-free") == 0) {
        use_after_free(key);
    } else if (strcmp(mode, "double-free") == 0) {
        double_free(key);
    } else if (strcmp(mode, "wait-check") == 0) {
        wait_check(key);
    } else if (strcmp(mode, "fork") == 0) {
        after_fork(key);
    } else if (strcmp(mode, "panic-quiet") == 0) {
        panics(0);
    } else if (strcmp(mode, "panic-logged") == 0) {
        panics(1);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    printf("done\n");
    return 0;
}
