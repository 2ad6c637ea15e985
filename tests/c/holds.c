/* Counted and multi-key holds through the C ABI against a real server (run by
 * tests/c_holds.rs): a blocking counted hold and its keys, a multi-key hold's future
 * told its place in line and granted whole once the keys are free, the arguments the
 * library refuses before any I/O, places through a completion queue, a capacity the server refuses naming both numbers,
 * and a lock's deadline on the library's clock.
 *
 * Usage: holds ADDR SECRET. Prints one line per fact checked; a failed check prints a
 * line starting "FAILED" and exits 1. */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <time.h>

#include "ticketing.h"

#include "check.h"

#define LEASE (30 * TICKETING_NS_PER_S)
#define WAIT (20 * TICKETING_NS_PER_S)

static const char *g_secret;

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

/* A refused hold: its kind, no lock, and an error whose message contains `words`. */
static void refused(ticketing_client *client, const ticketing_hold_part *parts, size_t n, const char *words) {
    ticketing_lock *lock = (ticketing_lock *)1;
    ticketing_error *err = NULL;
    int rc = ticketing_hold(client, parts, n, LEASE, WAIT, NULL, NULL, &lock, &err);
    CHECK(rc == TICKETING_INVALID, "expected invalid for '%s', got %s", words, ticketing_kind_name(rc));
    CHECK(lock == NULL, "a refused hold leaves *lock_out NULL");
    CHECK(strstr(ticketing_error_message(err), words) != NULL, "message %s does not say '%s'",
          ticketing_error_message(err), words);
    ticketing_error_free(err);
}

static atomic_int g_places;
static atomic_uint g_ahead;

static void on_place(uint32_t ahead, uint32_t grants_per_ks, void *ctx) {
    (void)grants_per_ks;
    CHECK(ctx == (void *)&g_places, "the place callback gets its own context");
    atomic_store(&g_ahead, ahead);
    atomic_fetch_add(&g_places, 1);
}

/* The next tag of `queue`, waiting for its descriptor (a hang guard of 60 s). */
static uint64_t next_tag(ticketing_queue *queue) {
    uint64_t tag = 0;
    while (ticketing_queue_take(queue, &tag, 1) == 0) {
        struct pollfd fd = {ticketing_queue_fd(queue), POLLIN, 0};
        CHECK(poll(&fd, 1, 60000) == 1, "no tag in the queue within 60 s");
    }
    return tag;
}

int main(int argc, char **argv) {
    CHECK(argc == 3, "usage: holds ADDR SECRET");
    g_secret = argv[2];
    ticketing_client *a = new_client(argv[1], "c-a");
    ticketing_client *b = new_client(argv[1], "c-b");

    /* A counted hold: 2 of a stock of 3, one key, the lock says so. */
    ticketing_hold_part stock = {"stock:c", 2, 3};
    ticketing_lock *counted = NULL;
    ticketing_error *err = NULL;
    int rc = ticketing_hold(a, &stock, 1, LEASE, WAIT, NULL, NULL, &counted, &err);
    CHECK(rc == TICKETING_OK, "counted hold: %s", ticketing_error_message(err));
    const char *key = NULL;
    uint32_t count = 0, capacity = 0;
    CHECK(ticketing_lock_key_count(counted) == 1, "one key");
    rc = ticketing_lock_key_at(counted, 0, &key, &count, &capacity, NULL);
    CHECK(rc == TICKETING_OK && strcmp(key, "stock:c") == 0 && count == 2 && capacity == 3,
          "key_at(0): %s %u of %u", key, count, capacity);
    rc = ticketing_lock_key_at(counted, 1, &key, NULL, NULL, &err);
    CHECK(rc == TICKETING_INVALID && strstr(ticketing_error_message(err), "1 key") != NULL, "key_at(1): %s",
          ticketing_error_message(err));
    ticketing_error_free(err);
    int64_t left = ticketing_lock_deadline_ns(counted) - ticketing_now_ns();
    CHECK(left > 25 * TICKETING_NS_PER_S && left <= LEASE, "deadline %lld ns away", (long long)left);
    printf("counted hold: 2 of 3, its key, count and capacity; deadline within the lease\n");

    /* The key as a pool, blocking and through a future. */
    ticketing_pool_info info;
    memset(&info, 0xff, sizeof info);
    rc = ticketing_pool(b, "stock:c", &info, &err);
    CHECK(rc == TICKETING_OK, "pool: %s", ticketing_error_message(err));
    CHECK(info.capacity == 3 && info.in_use == 2 && info.holds == 1 && info.waiters == 0, "pool: %u %u %u %u",
          info.capacity, info.in_use, info.holds, info.waiters);
    CHECK(info.holders_len == 1 && info.holders[0].count == 2 && strcmp(info.holders[0].owner, "c-a") == 0 &&
              info.holders[0].owner_len == 3 && info.holders[0].token == ticketing_lock_token(counted),
          "pool holder: %u %s", info.holders_len, info.holders[0].owner);
    ticketing_future *pf = NULL;
    rc = ticketing_pool_start(b, "stock:c", &pf, NULL);
    CHECK(rc == TICKETING_OK, "pool_start");
    int pready = 0;
    ticketing_future_block_until_ready(pf, -1, &pready, NULL);
    ticketing_lock *wrong = NULL;
    rc = ticketing_future_get_lock(pf, &wrong, &err);
    CHECK(rc == TICKETING_INVALID && strstr(ticketing_error_message(err), "ticketing_future_get_pool") != NULL,
          "a pool future read as a lock: %s", ticketing_error_message(err));
    ticketing_error_free(err);
    ticketing_pool_info again_info;
    rc = ticketing_future_get_pool(pf, &again_info, NULL);
    CHECK(rc == TICKETING_OK && again_info.in_use == 2 && again_info.holders_len == 1, "pool future");
    ticketing_future_free(pf);
    rc = ticketing_pool(b, "stock:c", NULL, &err);
    CHECK(rc == TICKETING_INVALID && strstr(ticketing_error_message(err), "pool_out") != NULL, "NULL pool_out");
    ticketing_error_free(err);
    printf("pool: capacity 3, 2 in use by one hold of c-a, blocking and through a future\n");

    /* The other caller states another capacity: refused, both numbers named. */
    ticketing_hold_part other = {"stock:c", 1, 4};
    refused(b, &other, 1, "3");
    refused(b, &other, 1, "4");
    printf("capacity mismatch: invalid, naming 3 and 4\n");

    /* Arguments refused before any I/O. */
    ticketing_hold_part twice[2] = {{"k", 1, 1}, {"k", 1, 1}};
    refused(b, twice, 2, "twice");
    ticketing_hold_part over = {"k", 3, 2};
    refused(b, &over, 1,
            "ticketing_hold_part {.key = \"k\", .count = 3, .capacity = 2}: the count must be 1 to the capacity");
    ticketing_hold_part empty = {"k", 1, 0};
    refused(b, &empty, 1,
            "ticketing_hold_part {.key = \"k\", .count = 1, .capacity = 0}: the capacity must be 1 to 1000000");
    ticketing_hold_part many[17];
    for (int i = 0; i < 17; i++) many[i] = (ticketing_hold_part){"k", 1, 1};
    refused(b, many, 17, "a hold names 1 to 16 keys (ticketing_hold's parts_len); this one names 17");
    refused(b, many, 0, "this one names 0");
    refused(b, NULL, 1, "parts is NULL");
    ticketing_hold_part nokey = {NULL, 1, 1};
    refused(b, &nokey, 1, "parts[0].key");
    ticketing_future *none = (ticketing_future *)1;
    rc = ticketing_hold_start(b, many, 17, LEASE, WAIT, NULL, NULL, &none, NULL);
    CHECK(rc == TICKETING_INVALID && none == NULL, "a refused start makes no future");
    printf("bad arguments: refused before any I/O, each named\n");

    /* Two seats: a holds both; b's future of the same seats in the other order waits,
     * told its place, and is granted both at once when a releases. */
    ticketing_hold_part seats_a[2] = {{"seat:c:1", 1, 1}, {"seat:c:2", 1, 1}};
    ticketing_hold_part seats_b[2] = {{"seat:c:2", 1, 1}, {"seat:c:1", 1, 1}};
    ticketing_lock *first = NULL;
    rc = ticketing_hold(a, seats_a, 2, LEASE, WAIT, NULL, NULL, &first, &err);
    CHECK(rc == TICKETING_OK, "seats for a: %s", ticketing_error_message(err));
    ticketing_future *fut = NULL;
    rc = ticketing_hold_start(b, seats_b, 2, LEASE, WAIT, on_place, &g_places, &fut, &err);
    CHECK(rc == TICKETING_OK && fut != NULL, "hold_start: %s", ticketing_error_message(err));
    for (int i = 0; atomic_load(&g_places) == 0; i++) {
        CHECK(i < 2000, "no place in line within 20 s");
        sleep_ms(10);
    }
    CHECK(atomic_load(&g_ahead) == 0, "first in line, %u ahead", atomic_load(&g_ahead));
    CHECK(!ticketing_future_is_ready(fut), "not granted while a holds the seats");
    int outcome = 0;
    rc = ticketing_lock_release(first, &outcome, NULL);
    CHECK(rc == TICKETING_OK && outcome == TICKETING_RELEASED, "a releases");
    int ready = 0;
    rc = ticketing_future_block_until_ready(fut, -1, &ready, NULL);
    CHECK(rc == TICKETING_OK && ready == 1, "ready");
    ticketing_lock *second = NULL;
    rc = ticketing_future_get_lock(fut, &second, &err);
    CHECK(rc == TICKETING_OK, "b's hold: %s", ticketing_error_message(err));
    CHECK(ticketing_lock_key_count(second) == 2, "both seats in one lock");
    ticketing_lock_key_at(second, 0, &key, NULL, NULL, NULL);
    CHECK(strcmp(key, "seat:c:2") == 0, "in the order b named them: %s", key);
    ticketing_lock_key_at(second, 1, &key, NULL, NULL, NULL);
    CHECK(strcmp(key, "seat:c:1") == 0, "in the order b named them: %s", key);
    CHECK(ticketing_lock_token(second) > ticketing_lock_token(first), "a later grant, a larger token");
    int places = atomic_load(&g_places);
    printf("multi-key future: told its place, granted both seats at once after the release\n");

    /* The whole hold ends with one release: a can hold one of the seats at once. */
    rc = ticketing_lock_release(second, &outcome, NULL);
    CHECK(rc == TICKETING_OK && outcome == TICKETING_RELEASED, "b releases");
    ticketing_hold_part one = {"seat:c:1", 1, 1};
    ticketing_lock *again = NULL;
    rc = ticketing_hold(a, &one, 1, LEASE, 0, NULL, NULL, &again, &err);
    CHECK(rc == TICKETING_OK, "seat 1 free after b's one release: %s", ticketing_error_message(err));
    CHECK(atomic_load(&g_places) == places, "no place told after the grant");
    printf("one release ends every key; no place after the grant\n");

    /* Places through a completion queue: two queued holds wait behind a's seat; each
     * place leaves its hold's place tag, the future's completion its own tag. */
    ticketing_queue *queue = NULL;
    rc = ticketing_queue_new(&queue, &err);
    CHECK(rc == TICKETING_OK, "queue_new");
    ticketing_hold_part seat = {"seat:q:1", 1, 1};
    ticketing_lock *front = NULL;
    rc = ticketing_hold(a, &seat, 1, LEASE, WAIT, NULL, NULL, &front, &err);
    CHECK(rc == TICKETING_OK, "a holds seat:q:1: %s", ticketing_error_message(err));
    ticketing_future *q1 = NULL, *q2 = NULL;
    rc = ticketing_hold_start_queued(b, &seat, 1, LEASE, WAIT, queue, 11, &q1, &err);
    CHECK(rc == TICKETING_OK, "hold_start_queued: %s", ticketing_error_message(err));
    CHECK(ticketing_future_set_queue(q1, queue, 10, NULL) == TICKETING_OK, "set_queue q1");
    uint32_t ahead = 99, rate = 0;
    CHECK(next_tag(queue) == 11, "q1's first place tag first");
    CHECK(ticketing_future_take_place(q1, &ahead, &rate) == 1 && ahead == 0, "q1 first in line: %u", ahead);
    CHECK(ticketing_future_take_place(q1, &ahead, &rate) == 0, "a place is taken once");
    rc = ticketing_hold_start_queued(b, &seat, 1, LEASE, WAIT, queue, 21, &q2, &err);
    CHECK(rc == TICKETING_OK, "second hold_start_queued");
    CHECK(ticketing_future_set_queue(q2, queue, 20, NULL) == TICKETING_OK, "set_queue q2");
    CHECK(next_tag(queue) == 21, "q2's place tag");
    CHECK(ticketing_future_take_place(q2, &ahead, &rate) == 1 && ahead == 1, "q2 behind q1: %u", ahead);
    CHECK(ticketing_future_take_place(NULL, &ahead, &rate) == 0, "no place from NULL");
    CHECK(ticketing_future_take_place(fut, &ahead, &rate) == 0, "none from a callback hold's future");
    rc = ticketing_lock_release(front, &outcome, NULL);
    CHECK(rc == TICKETING_OK && outcome == TICKETING_RELEASED, "a releases seat:q:1");
    /* q1 is granted (tag 10); q2 moves up to 0 ahead (tag 21), in either order. */
    int q1_done = 0, q2_moved = 0;
    while (!(q1_done && q2_moved)) {
        uint64_t t = next_tag(queue);
        if (t == 10) {
            q1_done = 1;
        } else if (t == 21 && ticketing_future_take_place(q2, &ahead, &rate) == 1) {
            CHECK(ahead == 0, "q2's place after q1's grant: %u", ahead);
            q2_moved = 1;
        } else {
            CHECK(t == 21 || t == 11, "unexpected tag %llu", (unsigned long long)t);
        }
    }
    ticketing_lock *got1 = NULL;
    rc = ticketing_future_get_lock(q1, &got1, &err);
    CHECK(rc == TICKETING_OK, "q1 granted: %s", ticketing_error_message(err));
    CHECK(ticketing_future_take_place(q1, &ahead, &rate) == 0, "no place after the grant");
    rc = ticketing_lock_release(got1, &outcome, NULL);
    CHECK(rc == TICKETING_OK && outcome == TICKETING_RELEASED, "q1 releases");
    uint64_t t;
    while ((t = next_tag(queue)) != 20) CHECK(t == 21, "only q2's tags are left: %llu", (unsigned long long)t);
    ticketing_lock *got2 = NULL;
    rc = ticketing_future_get_lock(q2, &got2, &err);
    CHECK(rc == TICKETING_OK, "q2 granted: %s", ticketing_error_message(err));
    CHECK(ticketing_lock_token(got2) > ticketing_lock_token(got1), "q2 after q1");
    printf("queued places: one tag per new place, decreasing, none after the grant\n");
    ticketing_lock_release(got2, &outcome, NULL);
    ticketing_lock_free(got2);
    ticketing_lock_free(got1);
    ticketing_lock_free(front);
    ticketing_future_free(q2);
    ticketing_future_free(q1);
    ticketing_queue_free(queue);

    ticketing_lock_free(again);
    ticketing_lock_free(second);
    ticketing_lock_free(first);
    ticketing_lock_free(counted);
    ticketing_future_free(fut);
    ticketing_client_free(b);
    ticketing_client_free(a);
    printf("done\n");
    return 0;
}
