/* The conformance driver of the C ABI (docs/conformance.md): commands on standard
 * input, one outcome line each on standard output, each command on a thread of its own
 * so that many callers share the one client. Built by tests/conformance.rs. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ticketing.h"

#define NAMES_MAX 4096

static ticketing_client *g_client;
static pthread_mutex_t g_out = PTHREAD_MUTEX_INITIALIZER, g_state = PTHREAD_MUTEX_INITIALIZER;
static char *g_names[NAMES_MAX];
static ticketing_lock *g_locks[NAMES_MAX];
static ticketing_error *g_indeterminate[NAMES_MAX];

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void say(const char *line) {
    pthread_mutex_lock(&g_out);
    fputs(line, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    pthread_mutex_unlock(&g_out);
}

/* The slot of `name`, made on first use. */
static int slot(const char *name) {
    pthread_mutex_lock(&g_state);
    int found = -1;
    for (int i = 0; i < NAMES_MAX && found < 0; i++) {
        if (g_names[i] == NULL) {
            g_names[i] = strdup(name);
            found = i;
        } else if (strcmp(g_names[i], name) == 0) {
            found = i;
        }
    }
    pthread_mutex_unlock(&g_state);
    return found;
}

static const char *cause_name(int cause) {
    static const char *names[] = {"", "connection_lost", "server_unknown", "no_answer", "protocol_violation",
                                  "expired_on_arrival", "cancelled"};
    return cause >= 1 && cause <= 6 ? names[cause] : "other";
}

static const char *outcome_name(int outcome) {
    return outcome == TICKETING_RELEASED ? "released"
           : outcome == TICKETING_NOT_HOLDER ? "not_holder"
                                             : "released_or_expired";
}

static void failed(char *out, size_t size, const char *name, int rc, ticketing_error *err, uint64_t ms) {
    int n = snprintf(out, size, "%s %s retryable=%d ms=%llu", name, ticketing_kind_name(rc),
                     ticketing_error_is_retryable(err), (unsigned long long)ms);
    if (rc == TICKETING_INDETERMINATE)
        n += snprintf(out + n, size - (size_t)n, " cause=%s", cause_name(ticketing_error_cause(err)));
    snprintf(out + n, size - (size_t)n, " : %s", ticketing_error_message(err));
}

/* A lock's keys as KEY:COUNT:CAPACITY,... after " keys=". */
static void keys_word(char *out, size_t size, ticketing_lock *lock) {
    size_t n = strlen(out);
    n += (size_t)snprintf(out + n, size - n, " keys=");
    for (size_t i = 0; i < ticketing_lock_key_count(lock) && n < size; i++) {
        const char *key = NULL;
        uint32_t count = 0, capacity = 0;
        ticketing_lock_key_at(lock, i, &key, &count, &capacity, NULL);
        n += (size_t)snprintf(out + n, size - n, "%s%s:%u:%u", i ? "," : "", key, count, capacity);
    }
}

/* A hold's place, said as it comes (on a client thread: say only takes a mutex). */
static void on_place(uint32_t ahead, uint32_t grants_per_ks, void *ctx) {
    char out[512];
    long long eta = grants_per_ks ? (long long)((uint64_t)ahead * 1000000u / grants_per_ks) : -1;
    snprintf(out, sizeof out, "%s place %u eta_ms=%lld", (const char *)ctx, ahead, eta);
    say(out);
}

static void *command(void *arg) {
    char *line = arg, *save = NULL;
    char *verb = strtok_r(line, " \t", &save), *name = strtok_r(NULL, " \t", &save);
    char *a = strtok_r(NULL, " \t", &save), *b = strtok_r(NULL, " \t", &save), *c = strtok_r(NULL, " \t", &save);
    char out[2048];
    uint64_t start = now_ns();
#define MS ((now_ns() - start) / 1000000u)
    if (!verb || !name) {
        free(line);
        return NULL;
    }
    int s = slot(name);
    ticketing_error *err = NULL;
    if (strcmp(verb, "acquire") == 0 && a && b && c) {
        ticketing_lock *lock = NULL;
        /* Seconds as the ABI's nanoseconds, to the nearest one: the library decides the rest. */
        int64_t lease_ns = (int64_t)(strtod(b, NULL) * 1e9 + 0.5), wait_ns = (int64_t)(strtod(c, NULL) * 1e9 + 0.5);
        int rc = ticketing_acquire(g_client, a, lease_ns, wait_ns, &lock, &err);
        if (rc == TICKETING_OK) {
            snprintf(out, sizeof out, "%s granted %llu at=%llu ms=%llu", name,
                     (unsigned long long)ticketing_lock_token(lock), (unsigned long long)now_ns(), (unsigned long long)MS);
            g_locks[s] = lock;
        } else {
            failed(out, sizeof out, name, rc, err, MS);
            if (rc == TICKETING_INDETERMINATE) g_indeterminate[s] = err;
            else ticketing_error_free(err);
        }
    } else if (strcmp(verb, "hold") == 0 && a && b && c) {
        char *places = c, *part;
        ticketing_hold_part parts[TICKETING_HOLD_KEYS_MAX + 1];
        size_t n = 0;
        while ((part = strtok_r(NULL, " \t", &save)) && n <= TICKETING_HOLD_KEYS_MAX) {
            char *fields = NULL, *key = strtok_r(part, ":", &fields), *count = strtok_r(NULL, ":", &fields);
            char *capacity = strtok_r(NULL, ":", &fields);
            parts[n++] = (ticketing_hold_part){key, count ? (uint32_t)strtoul(count, NULL, 10) : 0,
                                               capacity ? (uint32_t)strtoul(capacity, NULL, 10) : 0};
        }
        int64_t lease_ns = (int64_t)(strtod(a, NULL) * 1e9 + 0.5), wait_ns = (int64_t)(strtod(b, NULL) * 1e9 + 0.5);
        ticketing_lock *lock = NULL;
        int asks = places && strcmp(places, "1") == 0;
        int rc = ticketing_hold(g_client, parts, n, lease_ns, wait_ns, asks ? on_place : NULL, name, &lock, &err);
        if (rc == TICKETING_OK) {
            snprintf(out, sizeof out, "%s granted %llu at=%llu ms=%llu", name,
                     (unsigned long long)ticketing_lock_token(lock), (unsigned long long)now_ns(), (unsigned long long)MS);
            keys_word(out, sizeof out, lock);
            g_locks[s] = lock;
        } else {
            failed(out, sizeof out, name, rc, err, MS);
            if (rc == TICKETING_INDETERMINATE) g_indeterminate[s] = err;
            else ticketing_error_free(err);
        }
    } else if (strcmp(verb, "pool") == 0 && a) {
        ticketing_pool_info pool;
        int rc = ticketing_pool(g_client, a, &pool, &err);
        if (rc == TICKETING_OK) {
            snprintf(out, sizeof out, "%s pool %u %u %u %u ms=%llu", name, pool.capacity, pool.in_use, pool.holds,
                     pool.waiters, (unsigned long long)MS);
        } else {
            failed(out, sizeof out, name, rc, err, MS);
            ticketing_error_free(err);
        }
    } else if (strcmp(verb, "watch") == 0) {
        ticketing_lock *lock = g_locks[s];
        if (!lock) {
            snprintf(out, sizeof out, "%s invalid retryable=0 ms=0 : no lock named %s", name, name);
        } else {
            /* The C idiom: the deadline on the library's clock, slept until. */
            int64_t left = ticketing_lock_deadline_ns(lock) - ticketing_now_ns();
            uint64_t stated = now_ns() + (uint64_t)(left > 0 ? left : 0);
            while ((left = ticketing_lock_deadline_ns(lock) - ticketing_now_ns()) > 0) {
                struct timespec t = {left / 1000000000, left % 1000000000};
                nanosleep(&t, NULL);
            }
            snprintf(out, sizeof out, "%s deadline at=%llu deadline=%llu", name, (unsigned long long)now_ns(),
                     (unsigned long long)stated);
        }
    } else if (strcmp(verb, "release") == 0) {
        ticketing_lock *lock = g_locks[s];
        g_locks[s] = NULL;
        if (!lock) {
            snprintf(out, sizeof out, "%s invalid retryable=0 ms=0 : no lock named %s", name, name);
        } else {
            int outcome = 0;
            uint64_t at = now_ns();
            int rc = ticketing_lock_release(lock, &outcome, &err);
            if (rc == TICKETING_OK)
                snprintf(out, sizeof out, "%s %s at=%llu ms=%llu", name, outcome_name(outcome), (unsigned long long)at,
                         (unsigned long long)MS);
            else {
                failed(out, sizeof out, name, rc, err, MS);
                ticketing_error_free(err);
            }
            ticketing_lock_free(lock);
        }
    } else if (strcmp(verb, "query") == 0 && a) {
        int held = 0;
        ticketing_holder holder;
        int rc = ticketing_query(g_client, a, &held, &holder, &err);
        if (rc != TICKETING_OK) {
            failed(out, sizeof out, name, rc, err, MS);
            ticketing_error_free(err);
        } else if (held) {
            snprintf(out, sizeof out, "%s held %s %llu %u ms=%llu", name, holder.owner,
                     (unsigned long long)holder.token, holder.waiters, (unsigned long long)MS);
        } else {
            snprintf(out, sizeof out, "%s free ms=%llu", name, (unsigned long long)MS);
        }
    } else if (strcmp(verb, "resolve") == 0 && a) {
        ticketing_error *attempt = g_indeterminate[s];
        g_indeterminate[s] = NULL;
        if (!attempt) {
            snprintf(out, sizeof out, "%s invalid retryable=0 ms=0 : no indeterminate acquire named %s", name, name);
        } else {
            int resolution = 0;
            ticketing_lock *lock = NULL;
            int rc = ticketing_resolve(g_client, attempt, (int64_t)(strtod(a, NULL) * 1000), &resolution, &lock, &err);
            if (rc != TICKETING_OK) {
                failed(out, sizeof out, name, rc, err, MS);
                ticketing_error_free(err);
            } else if (resolution == TICKETING_HELD) {
                snprintf(out, sizeof out, "%s resolved held %llu at=%llu ms=%llu", name,
                         (unsigned long long)ticketing_lock_token(lock), (unsigned long long)now_ns(),
                         (unsigned long long)MS);
                const char *first = NULL;
                uint32_t count = 0, capacity = 0;
                ticketing_lock_key_at(lock, 0, &first, &count, &capacity, NULL);
                if (ticketing_lock_key_count(lock) > 1 || count != 1 || capacity != 1) keys_word(out, sizeof out, lock);
                g_locks[s] = lock;
            } else {
                snprintf(out, sizeof out, "%s resolved %s ms=%llu", name,
                         resolution == TICKETING_NOT_HELD ? "not_held" : "unknown", (unsigned long long)MS);
            }
            ticketing_error_free(attempt);
        }
    } else {
        snprintf(out, sizeof out, "%s invalid retryable=0 ms=0 : unknown command %s", name, verb);
    }
    say(out);
    free(line);
    return NULL;
}

int main(void) {
    const char *addrs_env = getenv("TICKETING_ADDRS"), *token = getenv("TICKETING_AUTH_TOKEN");
    const char *owner = getenv("TICKETING_OWNER"), *ca = getenv("TICKETING_TLS_CA");
    const char *name = getenv("TICKETING_CLUSTER_NAME");
    if (owner && strstr(owner, "\\0")) {
        /* The protocol's NUL: a C string ends at its first NUL, so it cannot carry one. */
        say("unsupported : a C string ends at its first NUL: an owner cannot hold one");
        return 0;
    }
    char *addrs_copy = strdup(addrs_env ? addrs_env : ""), *save = NULL;
    const char *addrs[64];
    size_t n = 0;
    for (char *p = strtok_r(addrs_copy, ",", &save); p && n < 64; p = strtok_r(NULL, ",", &save)) addrs[n++] = p;
    ticketing_error *err = NULL;
    int rc = ticketing_client_new_named(NULL, name && *name ? name : NULL, addrs, n,
                                        (const uint8_t *)(token ? token : ""), token ? strlen(token) : 0,
                                        owner && *owner ? owner : NULL, ca && *ca ? ca : NULL, &g_client, &err);
    if (rc != TICKETING_OK) {
        char out[1024];
        snprintf(out, sizeof out, "config-error : %s", ticketing_error_message(err));
        say(out);
        return 0;
    }
    say("ready");
    pthread_t threads[NAMES_MAX];
    size_t count = 0;
    char line[4096];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\r\n")] = 0;
        if (strcmp(line, "quit") == 0) break;
        if (count == NAMES_MAX) break;
        pthread_create(&threads[count++], NULL, command, strdup(line));
    }
    for (size_t i = 0; i < count; i++) pthread_join(threads[i], NULL);
    ticketing_client_free(g_client);
    free(addrs_copy);
    return 0;
}
