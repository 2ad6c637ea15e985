/*
 * ticketing_client_new_named against real servers, built with `cc` by tests/c_abi.rs:
 *
 *   cluster_name BLUE_ADDR UNNAMED_ADDR SECRET
 *
 * BLUE_ADDR is a server started with TICKETING_CLUSTER_NAME=blue, UNNAMED_ADDR one
 * without a name. A bad name is TICKETING_CONFIG naming cluster_name (a binding's own
 * setting through `binding`); a client named "blue" acquires there, as does one given
 * NULL; one named "green" there, and one named at the unnamed server, is sent nothing:
 * TICKETING_UNAVAILABLE, not retryable, before its wait ran out, naming both names.
 * Prints one line per check group and "cluster name: N checks passed"; exits 1 at the
 * first failed check.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ticketing.h"

static int checks;

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "FAILED %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                     \
            fprintf(stderr, "\n");                                            \
            exit(1);                                                          \
        }                                                                     \
        checks++;                                                             \
    } while (0)

/* The longest wait an acquire is given here: a refusal that trying again could fix
 * waits up to it for a connection; the refusals checked here are said without it. */
#define WAIT_MS 20000

static const char *message(const ticketing_error *e) {
    return e ? ticketing_error_message(e) : "(no error object)";
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *secret;

static int named(const char *binding, const char *name, const char *addr, ticketing_client **client,
                 ticketing_error **e) {
    const char *addrs[] = {addr};
    return ticketing_client_new_named(binding, name, addrs, 1, (const uint8_t *)secret, strlen(secret), "c-named",
                                      NULL, client, e);
}

static ticketing_client *client_of(const char *name, const char *addr) {
    ticketing_client *c = NULL;
    ticketing_error *e = NULL;
    int rc = named(NULL, name, addr, &c, &e);
    CHECK(rc == TICKETING_OK && c != NULL, "client_new_named(%s): %s", name ? name : "NULL", message(e));
    return c;
}

/* The client given `name` acquires at `addr` and releases. */
static void acquires(const char *name, const char *addr, const char *key) {
    ticketing_client *c = client_of(name, addr);
    ticketing_lock *lock = NULL;
    ticketing_error *e = NULL;
    int rc = ticketing_acquire(c, key, 30 * TICKETING_NS_PER_S, 0, &lock, &e);
    CHECK(rc == TICKETING_OK, "%s at %s: %s %s", name ? name : "NULL", addr, ticketing_kind_name(rc), message(e));
    int outcome = 0;
    rc = ticketing_lock_release(lock, &outcome, NULL);
    CHECK(rc == TICKETING_OK && outcome == TICKETING_RELEASED, "release: %d %d", rc, outcome);
    ticketing_lock_free(lock);
    ticketing_client_free(c);
}

/* The client given `name` is sent nothing at `addr`: unavailable, lasting, before its
 * wait ran out, the message holding each of `says` (NULL-terminated). */
static void refused(const char *name, const char *addr, const char *const *says) {
    ticketing_client *c = client_of(name, addr);
    ticketing_lock *lock = NULL;
    ticketing_error *e = NULL;
    double start = now_s();
    int rc = ticketing_acquire(c, "c:named", 30 * TICKETING_NS_PER_S, WAIT_MS * TICKETING_NS_PER_MS, &lock, &e);
    double took = now_s() - start;
    CHECK(rc == TICKETING_UNAVAILABLE && lock == NULL, "%s at %s: %s %s", name, addr, ticketing_kind_name(rc),
          message(e));
    CHECK(ticketing_error_is_retryable(e) == 0, "a lasting mistake: %s", message(e));
    CHECK(took < WAIT_MS / 1000.0, "the refusal waited out the wait (%.3f s)", took);
    for (const char *const *word = says; *word; word++)
        CHECK(strstr(ticketing_error_message(e), *word) != NULL, "no %s in: %s", *word, ticketing_error_message(e));
    printf("%s at %s: %s\n", name, addr, ticketing_error_message(e));
    ticketing_error_free(e);
    ticketing_client_free(c);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s BLUE_ADDR UNNAMED_ADDR SECRET\n", argv[0]);
        return 2;
    }
    const char *blue = argv[1], *unnamed = argv[2];
    secret = argv[3];

    /* A bad name: TICKETING_CONFIG naming the setting as the binding names it. */
    const struct {
        const char *binding, *name, *says;
    } bad[] = {
        {NULL, "blue cluster", "bad cluster name (cluster_name): \"blue cluster\" may hold only ASCII letters"},
        {"c", "", "bad cluster name (cluster_name): \"\" must be 1 to 63 bytes"},
        {NULL, "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "1 to 63 bytes"},
        {"python", "blue/green", "(cluster_name=)"},
        {"go", "blue/green", "(Config.ClusterName)"},
        {"java", "blue/green", "(clusterName)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ticketing_client *c = NULL;
        ticketing_error *e = NULL;
        int rc = named(bad[i].binding, bad[i].name, blue, &c, &e);
        CHECK(rc == TICKETING_CONFIG && c == NULL, "%s: %s", bad[i].name, ticketing_kind_name(rc));
        CHECK(strstr(ticketing_error_message(e), bad[i].says) != NULL, "no %s in: %s", bad[i].says,
              ticketing_error_message(e));
        ticketing_error_free(e);
    }
    printf("bad names: config\n");

    acquires("blue", blue, "c:named:1");
    acquires(NULL, blue, "c:named:2");
    acquires(NULL, unnamed, "c:named:3");
    printf("blue at blue, and no name anywhere: acquired\n");

    const char *both[] = {"the node reports cluster name \"blue\"", "serves cluster \"green\" only (cluster_name)",
                          NULL};
    refused("green", blue, both);
    const char *none[] = {"the node reports no cluster name", "serves cluster \"green\" only (cluster_name)", NULL};
    refused("green", unnamed, none);

    printf("cluster name: %d checks passed\n", checks);
    return 0;
}
