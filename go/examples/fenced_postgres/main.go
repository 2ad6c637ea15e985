// Fencing against PostgreSQL from Go (docs/go.md, docs/fencing.md).
//
// Worker A is granted seat:N with a 1 s lease and stalls (a GC pause, a swapped-out
// process, a stopped VM); worker B queues for the key and gets it, with a larger token,
// when A's lease ends, and sells the seat. A wakes up and tries to sell too: its write
// carries the older token, so the database rejects it. Sold once, to B.
//
//	TICKETING_ADDRS=127.0.0.1:5225 TICKETING_AUTH_TOKEN=... \
//	FENCE_PG="host=/run/postgresql dbname=postgres" go run .
//
// A module of its own (pgx through database/sql), so that the library has no
// dependency. Exits 0 when the seat was sold exactly once, to B; 1 otherwise.
// tests/go_package.rs runs it against a real `ticketing server` and a throw-away
// PostgreSQL.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	ticketing "github.com/ticketing-lock/ticketing/go"
)

// sellFenced sells seat to who under fencing token token, or refuses.
func sellFenced(ctx context.Context, db *sql.DB, seat int, who string, token uint64) (string, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return "", err
	}
	defer func() { _ = tx.Rollback() }()
	// 1. compare-and-advance the high-water mark; the row stays locked until COMMIT
	var soldTo sql.NullString
	err = tx.QueryRowContext(ctx,
		"UPDATE seats SET fence = $1 WHERE id = $2 AND fence < $1 RETURNING sold_to",
		int64(token), seat).Scan(&soldTo)
	if errors.Is(err, sql.ErrNoRows) {
		return "rejected", nil // a newer token has written: our lease is over; stop
	} else if err != nil {
		return "", err
	}
	if soldTo.Valid {
		return "already sold", nil // read under the row lock, so it is current
	}
	// 2. the business writes, in the same transaction
	if _, err := tx.ExecContext(ctx, "UPDATE seats SET sold_to = $1 WHERE id = $2", who, seat); err != nil {
		return "", err
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO sales (seat_id, buyer, token) VALUES ($1, $2, $3)",
		seat, who, int64(token)); err != nil {
		return "", err
	}
	return "sold", tx.Commit()
}

func run() error {
	ctx := context.Background()
	addrs := strings.Split(getenv("TICKETING_ADDRS", "127.0.0.1:5225"), ",")
	seat, err := strconv.Atoi(getenv("FENCE_SEAT", "42"))
	if err != nil {
		return err
	}
	key := fmt.Sprintf("seat:%d", seat)
	start := time.Now()
	say := func(who, what string) {
		fmt.Printf("%6d ms  %s  %s\n", time.Since(start).Milliseconds(), who, what)
	}

	db, err := sql.Open("pgx", os.Getenv("FENCE_PG"))
	if err != nil {
		return err
	}
	defer db.Close()
	// The schema of docs/fencing.md §2, shared with examples/fenced_postgres.rs.
	schema, err := os.ReadFile(getenv("FENCE_SCHEMA", "../../../examples/fenced_postgres.sql"))
	if err != nil {
		return err
	}
	for _, statement := range strings.Split(string(schema), ";") {
		if strings.TrimSpace(statement) == "" {
			continue
		}
		if _, err := db.ExecContext(ctx, statement); err != nil {
			return err
		}
	}
	if _, err := db.ExecContext(ctx, "DELETE FROM sales WHERE seat_id = $1", seat); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx,
		"INSERT INTO seats (id) VALUES ($1) ON CONFLICT (id) DO UPDATE SET sold_to = NULL, fence = 0", seat); err != nil {
		return err
	}

	client, err := ticketing.New(ticketing.Config{Addrs: addrs, AuthToken: os.Getenv("TICKETING_AUTH_TOKEN")})
	if err != nil {
		return err
	}
	defer client.Close()
	aClient, err := client.WithOwner("fence-A")
	if err != nil {
		return err
	}
	bClient, err := client.WithOwner("fence-B")
	if err != nil {
		return err
	}
	results := map[string]string{}
	bDone := make(chan error, 1)

	lockA, err := aClient.Acquire(ctx, key, time.Second, 0)
	if err != nil {
		return err
	}
	say("A", fmt.Sprintf("granted, token %d, lease %v", lockA.Token(), lockA.Lease()))
	go func() {
		say("B", "queues for the key behind A")
		bDone <- bClient.WithLock(ctx, key, 10*time.Second, 10*time.Second, func(ctx context.Context, l *ticketing.Lock) error {
			say("B", fmt.Sprintf("granted at A's lease expiry, token %d", l.Token()))
			result, err := sellFenced(ctx, db, seat, "B", l.Token())
			results["B"] = result
			say("B", fmt.Sprintf("sells with token %d: %s", l.Token(), result))
			return err
		})
	}()
	say("A", "stalls (GC pause, swapped out, VM stopped...)")
	select {
	case err := <-bDone:
		if err != nil {
			return err
		}
	case <-time.After(20 * time.Second):
		return errors.New("B never sold")
	}
	say("A", fmt.Sprintf("wakes up, lease left locally: %v; goes on with its sale", lockA.Remaining()))
	result, err := sellFenced(ctx, db, seat, "A", lockA.Token())
	if err != nil {
		return err
	}
	results["A"] = result
	say("A", fmt.Sprintf("sells with token %d: %s", lockA.Token(), result))
	outcome, err := lockA.Release(ctx)
	say("A", fmt.Sprintf("release: %v", outcome))
	if err != nil {
		return err
	}
	var soldTo sql.NullString
	var fence int64
	if err := db.QueryRowContext(ctx, "SELECT sold_to, fence FROM seats WHERE id = $1", seat).Scan(&soldTo, &fence); err != nil {
		return err
	}
	var sales int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM sales WHERE seat_id = $1", seat).Scan(&sales); err != nil {
		return err
	}
	say("-", fmt.Sprintf("seat %d: sold_to=%s, fence=%d, sales %d", seat, soldTo.String, fence, sales))
	if results["A"] != "rejected" || results["B"] != "sold" || soldTo.String != "B" || sales != 1 {
		return errors.New("NOT sold once")
	}
	fmt.Println("sold once, to B")
	return nil
}

func getenv(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func main() {
	if err := run(); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
}
