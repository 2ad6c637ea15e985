/* A ticket sale against PostgreSQL from C (libpq, pthreads): buyers take 2 of 100 tickets through a counted key, and families hold 4 adjacent seats, all or nothing (docs/c.md, docs/fencing.md §2.1).
 *
 *     cc -std=c11 -pthread -I include -I "$(pg_config --includedir)" include/examples/ticket_sale.c \
 *        -L target/release -lticketing -lpq -o ticket_sale
 *     TICKETING_ADDRS=127.0.0.1:5225 TICKETING_AUTH_TOKEN=... \
 *     FENCE_PG="host=/run/postgresql dbname=postgres" LD_LIBRARY_PATH=target/release ./ticket_sale
 *
 * The stock. 60 buyers want 2 tickets each of a sale of 100. Each holds 1 of the 8
 * permits of the key "checkout:<sale>" (ticketing_hold with the part {key, 1, 8}: at most
 * 8 checkouts at once, the rest wait in arrival order and hear their place in line),
 * then decrements the stock with the store's own conditional write (only while 2 are
 * left, in the same statement) and records the order with the hold's token, in one
 * transaction. 50 buyers get 2 tickets, 10 are told it is sold out: nothing is
 * oversold, even by a checkout that outlived its lease.
 *
 * The seats. Three families each hold the keys of 4 adjacent seats in ONE hold
 * (granted all at once or not at all, one token for the 4), two of them overlapping and
 * naming their seats in opposite orders (no deadlock), while a single buyer takes one
 * seat of the first family's block with a plain ticketing_acquire. Each fences every
 * seat row it writes with its token, in one transaction: a family buys all 4 seats or
 * none.
 *
 * The schemas are examples/fenced_postgres.sql and examples/ticket_sale.sql, read from
 * $SALE_SCHEMA_DIR (default: examples, for a run from the repository's root). Exits 0
 * when nothing was oversold and no seat was sold twice; 1 otherwise, or on any error.
 * The same sale as examples/ticket_sale.rs; tests/c_examples.rs builds it and runs it
 * against a real `ticketing server` and a throw-away PostgreSQL.
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "ticketing.h"

enum { STOCK = 100, EACH = 2, BUYERS = 60, CHECKOUTS = 8, SEATS = 10, FAMILY = 4 };
#define LEASE_NS (30 * TICKETING_NS_PER_S)
#define WAIT_NS (120 * TICKETING_NS_PER_S)

/* The sale's conditional decrement (no row when fewer than $2 are left) and its order. */
static const char SQL_TAKE[] =
    "UPDATE stock SET left_count = left_count - $2 WHERE sale_id = $1 AND left_count >= $2 RETURNING left_count";
static const char SQL_ORDER[] = "INSERT INTO orders (sale_id, buyer, count, token) VALUES ($1, $2, $3, $4)";
/* The seats' fence (compare-and-advance of the row's high-water token), sale and ledger. */
static const char SQL_FENCE[] = "UPDATE seats SET fence = $2 WHERE id = $1 AND fence < $2 RETURNING sold_to";
static const char SQL_SELL[] = "UPDATE seats SET sold_to = $2 WHERE id = $1";
static const char SQL_LEDGER[] = "INSERT INTO sales (seat_id, buyer, token) VALUES ($1, $2, $3)";

/* Set by the first error of any thread; every error is printed where it happens. */
static atomic_bool failed;

static void fail(const char *format, ...) {
    va_list args;
    va_start(args, format);
    char line[1024];
    vsnprintf(line, sizeof line, format, args);
    va_end(args);
    fprintf(stderr, "ticket_sale: %s\n", line);
    atomic_store(&failed, true);
}

/* Reports a failed ticketing call and frees its error. */
static void fail_ticketing(const char *who, const char *what, int rc, ticketing_error *err) {
    const char *kind = ticketing_kind_name(rc);
    fail("%s: %s: %s: %s", who, what, kind ? kind : "?", err ? ticketing_error_message(err) : "");
    ticketing_error_free(err);
}

/* Runs `sql` with text parameters; the result when its status is `want`, else NULL
 * after reporting the store's message. */
static PGresult *run(PGconn *db, const char *who, const char *sql, int n, const char *const *params,
                     ExecStatusType want) {
    PGresult *res = n == 0 ? PQexec(db, sql) : PQexecParams(db, sql, n, NULL, params, NULL, NULL, 0);
    if (res != NULL && PQresultStatus(res) == want)
        return res;
    fail("%s: %.60s...: %s", who, sql, res != NULL ? PQresultErrorMessage(res) : PQerrorMessage(db));
    PQclear(res);
    return NULL;
}

/* A statement whose rows are not read: 1 when it succeeded. */
static int exec_ok(PGconn *db, const char *who, const char *sql, int n, const char *const *params) {
    PGresult *res = run(db, who, sql, n, params, PGRES_COMMAND_OK);
    PQclear(res);
    return res != NULL;
}

static PGconn *connect_db(const char *conninfo, const char *who) {
    PGconn *db = PQconnectdb(conninfo);
    if (PQstatus(db) != CONNECTION_OK) {
        fail("%s: cannot connect to FENCE_PG: %s", who, PQerrorMessage(db));
        PQfinish(db);
        return NULL;
    }
    return db;
}

/* The first column of the first row of a one-row query, as a number; -1 on failure. */
static long query_number(PGconn *db, const char *sql, int n, const char *const *params) {
    PGresult *res = run(db, "main", sql, n, params, PGRES_TUPLES_OK);
    if (res == NULL)
        return -1;
    long value = PQntuples(res) == 1 ? strtol(PQgetvalue(res, 0, 0), NULL, 10) : -1;
    PQclear(res);
    return value;
}

/* ---- The stock ---------------------------------------------------------------- */

struct sale {
    ticketing_client *client;
    const char *conninfo;
    int id;
    char key[32];
    pthread_barrier_t start;
    pthread_mutex_t mu; /* guards the counts below */
    int inside, most_inside, bought, sold_out, told_place;
};

struct buyer {
    struct sale *sale;
    int index;
    atomic_bool told; /* set by on_place, on a thread of the client's */
};

/* Heard while the buyer waits for a permit: where it stands. It must not block. */
static void on_place(uint32_t ahead, uint32_t grants_per_ks, void *ctx) {
    (void)ahead;
    (void)grants_per_ks; /* the estimated wait: ahead * 1000 / grants_per_ks seconds */
    atomic_store(&((struct buyer *)ctx)->told, true);
}

/* `who`'s checkout under its permit: the conditional decrement and the order, one
 * transaction, no statement waiting past the permit's deadline. 1: bought; 0: sold out,
 * nothing written; -1: failed (reported). */
static int checkout(PGconn *db, int sale, const char *who, const ticketing_lock *lock) {
    char sale_s[16], each_s[16], token_s[24], timeout[64];
    snprintf(sale_s, sizeof sale_s, "%d", sale);
    snprintf(each_s, sizeof each_s, "%d", EACH);
    snprintf(token_s, sizeof token_s, "%" PRIu64, ticketing_lock_token(lock));
    int64_t left_ms = (ticketing_lock_deadline_ns(lock) - ticketing_now_ns()) / TICKETING_NS_PER_MS;
    if (left_ms < 1) {
        fail("%s: the permit's lease ended before the checkout began", who);
        return -1;
    }
    snprintf(timeout, sizeof timeout, "SET LOCAL statement_timeout = %" PRId64, left_ms);
    if (!exec_ok(db, who, "BEGIN", 0, NULL))
        return -1;
    int outcome = -1;
    const char *take[] = {sale_s, each_s};
    PGresult *taken = NULL;
    if (exec_ok(db, who, timeout, 0, NULL) && (taken = run(db, who, SQL_TAKE, 2, take, PGRES_TUPLES_OK))) {
        if (PQntuples(taken) == 0) {
            outcome = 0; /* sold out (fewer than 2 left): nothing to commit */
        } else {
            const char *order[] = {sale_s, who, each_s, token_s};
            if (exec_ok(db, who, SQL_ORDER, 4, order))
                outcome = exec_ok(db, who, "COMMIT", 0, NULL) ? 1 : -1;
        }
    }
    PQclear(taken);
    if (outcome == 1)
        return 1;
    if (!exec_ok(db, who, "ROLLBACK", 0, NULL))
        return -1;
    return outcome;
}

static void *buy_tickets(void *arg) {
    struct buyer *me = arg;
    struct sale *sale = me->sale;
    char who[32];
    snprintf(who, sizeof who, "buyer-%d", me->index);
    PGconn *db = connect_db(sale->conninfo, who);
    ticketing_client *as_me = NULL;
    ticketing_error *err = NULL;
    int rc = ticketing_client_with_owner(sale->client, who, &as_me, &err);
    if (rc != TICKETING_OK)
        fail_ticketing(who, "ticketing_client_with_owner", rc, err);
    pthread_barrier_wait(&sale->start); /* every buyer at once, even one that failed */
    int bought = -1;
    if (db != NULL && as_me != NULL) {
        ticketing_hold_part permit = {sale->key, 1, CHECKOUTS};
        ticketing_lock *lock = NULL;
        rc = ticketing_hold(as_me, &permit, 1, LEASE_NS, WAIT_NS, on_place, me, &lock, &err);
        if (rc != TICKETING_OK) {
            fail_ticketing(who, "ticketing_hold", rc, err);
        } else {
            pthread_mutex_lock(&sale->mu);
            if (++sale->inside > sale->most_inside)
                sale->most_inside = sale->inside;
            pthread_mutex_unlock(&sale->mu);
            bought = checkout(db, sale->id, who, lock);
            pthread_mutex_lock(&sale->mu);
            sale->inside--;
            pthread_mutex_unlock(&sale->mu);
            int outcome = 0;
            rc = ticketing_lock_release(lock, &outcome, &err);
            if (rc != TICKETING_OK)
                fail_ticketing(who, "ticketing_lock_release", rc, err);
            ticketing_lock_free(lock);
        }
    }
    pthread_mutex_lock(&sale->mu);
    sale->bought += bought == 1;
    sale->sold_out += bought == 0;
    sale->told_place += atomic_load(&me->told);
    pthread_mutex_unlock(&sale->mu);
    ticketing_client_free(as_me);
    PQfinish(db);
    return NULL;
}

/* The stock sale: BUYERS threads sharing one client, each with its own owner. Returns
 * 1 when it ran (the counts and *ordered, *left filled), 0 on an error (reported). */
static int run_sale(ticketing_client *client, const char *conninfo, PGconn *db, struct sale *sale, long *ordered,
                    long *left) {
    char sale_s[16], stock_s[16];
    snprintf(sale_s, sizeof sale_s, "%d", sale->id);
    snprintf(stock_s, sizeof stock_s, "%d", STOCK);
    const char *reset[] = {sale_s, stock_s};
    if (!exec_ok(db, "main",
                 "INSERT INTO stock (sale_id, left_count) VALUES ($1, $2) "
                 "ON CONFLICT (sale_id) DO UPDATE SET left_count = $2",
                 2, reset) ||
        !exec_ok(db, "main", "DELETE FROM orders WHERE sale_id = $1", 1, reset))
        return 0;
    sale->client = client;
    sale->conninfo = conninfo;
    snprintf(sale->key, sizeof sale->key, "checkout:%d", sale->id);
    if (pthread_barrier_init(&sale->start, NULL, BUYERS) != 0 || pthread_mutex_init(&sale->mu, NULL) != 0) {
        fail("cannot make the buyers' barrier and mutex");
        return 0;
    }
    struct buyer buyers[BUYERS];
    pthread_t threads[BUYERS];
    for (int i = 0; i < BUYERS; i++) {
        buyers[i].sale = sale;
        buyers[i].index = i;
        atomic_init(&buyers[i].told, false);
        if (pthread_create(&threads[i], NULL, buy_tickets, &buyers[i]) != 0) {
            /* The others wait at the barrier for a buyer that never comes. */
            fprintf(stderr, "ticket_sale: cannot start buyer %d\n", i);
            exit(1);
        }
    }
    for (int i = 0; i < BUYERS; i++)
        pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&sale->start);
    pthread_mutex_destroy(&sale->mu);
    *left = query_number(db, "SELECT left_count FROM stock WHERE sale_id = $1", 1, reset);
    *ordered = query_number(db, "SELECT coalesce(sum(count), 0) FROM orders WHERE sale_id = $1", 1, reset);
    return *left >= 0 && *ordered >= 0;
}

/* ---- The seats ---------------------------------------------------------------- */

struct seat_buyer {
    const char *who;
    int seats[FAMILY];
    int n;
    ticketing_client *client;
    const char *conninfo;
    pthread_barrier_t *start;
    int bought; /* 1: all its seats; 0: nothing (a seat was taken); -1: failed */
    uint64_t token;
};

/* Every seat of `b` under `token`, fencing each row (compare-and-advance of its
 * high-water token) before reading it, in one transaction: all or none. 1, 0 or -1 as
 * seat_buyer.bought. */
static int buy_seats(PGconn *db, const struct seat_buyer *b, uint64_t token) {
    char token_s[24], seat_s[FAMILY][16];
    snprintf(token_s, sizeof token_s, "%" PRIu64, token);
    for (int i = 0; i < b->n; i++)
        snprintf(seat_s[i], sizeof seat_s[i], "%d", b->seats[i]);
    if (!exec_ok(db, b->who, "BEGIN", 0, NULL))
        return -1;
    int outcome = 1;
    for (int i = 0; i < b->n && outcome == 1; i++) {
        const char *fence[] = {seat_s[i], token_s};
        PGresult *row = run(db, b->who, SQL_FENCE, 2, fence, PGRES_TUPLES_OK);
        if (row == NULL)
            outcome = -1;
        else if (PQntuples(row) == 0 || !PQgetisnull(row, 0, 0))
            outcome = 0; /* a newer token has written it, or it is sold: roll back */
        PQclear(row);
    }
    for (int i = 0; i < b->n && outcome == 1; i++) {
        const char *sell[] = {seat_s[i], b->who};
        const char *ledger[] = {seat_s[i], b->who, token_s};
        if (!exec_ok(db, b->who, SQL_SELL, 2, sell) || !exec_ok(db, b->who, SQL_LEDGER, 3, ledger))
            outcome = -1;
    }
    if (outcome == 1)
        return exec_ok(db, b->who, "COMMIT", 0, NULL) ? 1 : -1;
    return exec_ok(db, b->who, "ROLLBACK", 0, NULL) ? outcome : -1;
}

static void *buy_block(void *arg) {
    struct seat_buyer *b = arg;
    b->bought = -1;
    PGconn *db = connect_db(b->conninfo, b->who);
    ticketing_client *as_me = NULL;
    ticketing_error *err = NULL;
    int rc = ticketing_client_with_owner(b->client, b->who, &as_me, &err);
    if (rc != TICKETING_OK)
        fail_ticketing(b->who, "ticketing_client_with_owner", rc, err);
    pthread_barrier_wait(b->start);
    if (db != NULL && as_me != NULL) {
        char keys[FAMILY][32];
        ticketing_hold_part parts[FAMILY];
        for (int i = 0; i < b->n; i++) {
            snprintf(keys[i], sizeof keys[i], "seat:%d", b->seats[i]);
            parts[i] = (ticketing_hold_part){keys[i], 1, 1};
        }
        ticketing_lock *lock = NULL;
        if (b->n == 1)
            rc = ticketing_acquire(as_me, keys[0], LEASE_NS, WAIT_NS, &lock, &err);
        else
            rc = ticketing_hold(as_me, parts, (size_t)b->n, LEASE_NS, WAIT_NS, NULL, NULL, &lock, &err);
        if (rc != TICKETING_OK) {
            fail_ticketing(b->who, b->n == 1 ? "ticketing_acquire" : "ticketing_hold", rc, err);
        } else {
            b->token = ticketing_lock_token(lock);
            b->bought = buy_seats(db, b, b->token);
            rc = ticketing_lock_release(lock, NULL, &err);
            if (rc != TICKETING_OK)
                fail_ticketing(b->who, "ticketing_lock_release", rc, err);
            ticketing_lock_free(lock);
        }
    }
    ticketing_client_free(as_me);
    PQfinish(db);
    return NULL;
}

/* The seat sale over seats first..first+9: every buyer at once, each family's seats in
 * one hold. Prints what each bought; returns the seats sold twice, or -1 on an error. */
static long run_seats(ticketing_client *client, const char *conninfo, PGconn *db, int first, int *served_right) {
    struct seat_buyer buyers[] = {
        {.who = "family-a", .seats = {first, first + 1, first + 2, first + 3}, .n = 4},
        {.who = "family-b", .seats = {first + 5, first + 4, first + 3, first + 2}, .n = 4}, /* overlaps a */
        {.who = "family-c", .seats = {first + 6, first + 7, first + 8, first + 9}, .n = 4},
        {.who = "single", .seats = {first + 1}, .n = 1},
    };
    enum { N = sizeof buyers / sizeof buyers[0] };
    char first_s[16];
    snprintf(first_s, sizeof first_s, "%d", first);
    const char *range[] = {first_s};
    if (!exec_ok(db, "main",
                 "INSERT INTO seats (id, sold_to, fence) SELECT id, NULL, 0 FROM generate_series($1::int, $1::int + 9) "
                 "AS id ON CONFLICT (id) DO UPDATE SET sold_to = NULL, fence = 0",
                 1, range) ||
        !exec_ok(db, "main", "DELETE FROM sales WHERE seat_id >= $1 AND seat_id < $1::int + 10", 1, range))
        return -1;
    pthread_barrier_t start;
    if (pthread_barrier_init(&start, NULL, N) != 0) {
        fail("cannot make the seat buyers' barrier");
        return -1;
    }
    pthread_t threads[N];
    for (int i = 0; i < N; i++) {
        buyers[i].client = client;
        buyers[i].conninfo = conninfo;
        buyers[i].start = &start;
        if (pthread_create(&threads[i], NULL, buy_block, &buyers[i]) != 0) {
            fprintf(stderr, "ticket_sale: cannot start %s\n", buyers[i].who);
            exit(1);
        }
    }
    for (int i = 0; i < N; i++)
        pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < N; i++) {
        if (buyers[i].bought < 0)
            continue; /* reported */
        printf("%s: ", buyers[i].who);
        if (buyers[i].bought == 0) {
            printf("nothing (a seat was taken)");
        } else {
            printf("seats [");
            for (int s = 0; s < buyers[i].n; s++)
                printf("%s%d", s ? ", " : "", buyers[i].seats[s]);
            printf("]");
        }
        printf(", token %" PRIu64 "\n", buyers[i].token);
    }
    /* family-c always gets its block; of the overlapping a and b, exactly one. */
    *served_right = buyers[2].bought == 1 && (buyers[0].bought == 1) != (buyers[1].bought == 1);
    return query_number(db,
                        "SELECT count(*) FROM (SELECT seat_id FROM sales WHERE seat_id >= $1 "
                        "AND seat_id < $1::int + 10 GROUP BY seat_id HAVING count(*) > 1) AS t",
                        1, range);
}

/* ---- Setup -------------------------------------------------------------------- */

/* The schemas of docs/fencing.md §2 and §2.1, shared with examples/ticket_sale.rs. */
static int create_schema(PGconn *db) {
    const char *dir = getenv("SALE_SCHEMA_DIR");
    const char *files[] = {"fenced_postgres.sql", "ticket_sale.sql"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir && *dir ? dir : "examples", files[i]);
        FILE *f = fopen(path, "rb");
        if (f == NULL) {
            fail("cannot open %s (SALE_SCHEMA_DIR names the directory of the schemas)", path);
            return 0;
        }
        char *text = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&text, &len);
        int c;
        while (mem != NULL && (c = fgetc(f)) != EOF)
            fputc(c, mem);
        int read_ok = mem != NULL && !ferror(f) && fclose(mem) == 0;
        fclose(f);
        int ok = read_ok && exec_ok(db, "main", text, 0, NULL); /* PQexec runs every statement */
        if (!read_ok)
            fail("cannot read %s", path);
        free(text);
        if (!ok)
            return 0;
    }
    return 1;
}

/* TICKETING_ADDRS, comma-separated (default 127.0.0.1:5225), into `addrs`: their count,
 * or 0 when there are more than TICKETING_ADDRS_MAX. `copy` is the caller's to free. */
static size_t parse_addrs(char **copy, const char *addrs[TICKETING_ADDRS_MAX]) {
    const char *env = getenv("TICKETING_ADDRS");
    *copy = strdup(env && *env ? env : "127.0.0.1:5225");
    if (*copy == NULL)
        return 0;
    size_t n = 0;
    char *rest = NULL;
    for (char *addr = strtok_r(*copy, ",", &rest); addr != NULL; addr = strtok_r(NULL, ",", &rest)) {
        if (n == TICKETING_ADDRS_MAX)
            return 0;
        addrs[n++] = addr;
    }
    return n;
}

int main(void) {
    if (ticketing_version() != TICKETING_ABI_VERSION) {
        fprintf(stderr, "ticket_sale: libticketing's ABI is %u, this program's header %d\n", ticketing_version(),
                TICKETING_ABI_VERSION);
        return 1;
    }
    const char *secret = getenv("TICKETING_AUTH_TOKEN");
    const char *conninfo = getenv("FENCE_PG");
    if (secret == NULL || conninfo == NULL) {
        fprintf(stderr, "ticket_sale: set TICKETING_AUTH_TOKEN and FENCE_PG (a libpq connection string)\n");
        return 1;
    }
    char *addrs_copy = NULL;
    const char *addrs[TICKETING_ADDRS_MAX];
    size_t n_addrs = parse_addrs(&addrs_copy, addrs);
    ticketing_client *client = NULL;
    ticketing_error *err = NULL;
    int rc = ticketing_client_new(addrs, n_addrs, (const uint8_t *)secret, strlen(secret), "ticket-sale", NULL,
                                  &client, &err);
    free(addrs_copy); /* the addresses are read during the call only */
    if (rc != TICKETING_OK) {
        fail_ticketing("main", "ticketing_client_new (TICKETING_ADDRS, TICKETING_AUTH_TOKEN)", rc, err);
        return 1;
    }
    PGconn *db = connect_db(conninfo, "main");
    int ok = db != NULL && create_schema(db);

    struct sale sale = {.id = 1};
    long ordered = -1, left = -1;
    if (ok && run_sale(client, conninfo, db, &sale, &ordered, &left))
        printf("stock of %d, %d buyers of %d: %d bought, %d sold out; %ld tickets ordered, %ld left; at most %d "
               "checkouts at once (capacity %d); %d buyers told their place in line\n",
               STOCK, BUYERS, EACH, sale.bought, sale.sold_out, ordered, left, sale.most_inside, CHECKOUTS,
               sale.told_place);
    int served_right = 0;
    long twice = ok ? run_seats(client, conninfo, db, 201, &served_right) : -1;

    int drained = 0;
    rc = ticketing_client_close(client, 5000, &drained, &err);
    if (rc != TICKETING_OK)
        fail_ticketing("main", "ticketing_client_close", rc, err);
    ticketing_client_free(client);
    PQfinish(db);

    if (atomic_load(&failed) || twice < 0)
        return 1; /* an error, printed where it happened */
    int oversold = ordered > STOCK || sale.most_inside > CHECKOUTS || ordered + left != STOCK;
    if (oversold || twice > 0 || !served_right) {
        printf("OVERSOLD: %ld ordered, %ld left, at most %d checkouts at once; %ld seats sold twice; "
               "family-c and exactly one of family-a and family-b served: %s\n",
               ordered, left, sale.most_inside, twice, served_right ? "yes" : "no");
        return 1;
    }
    printf("nothing oversold, no seat sold twice\n");
    return 0;
}
