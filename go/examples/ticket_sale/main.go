// A ticket sale against PostgreSQL from Go (docs/go.md, docs/fencing.md §2.1): buyers
// take 2 of 100 tickets through a stock key, and families hold 4 adjacent seats, all or
// nothing.
//
//	TICKETING_ADDRS=127.0.0.1:5225 TICKETING_AUTH_TOKEN=... \
//	FENCE_PG="host=/run/postgresql dbname=postgres" go run .
//
// The stock. 60 buyers want 2 tickets each of a sale of 100. Each takes 1 of the 8
// permits of the key checkout:<sale> (at most 8 checkouts at once; the others wait in
// arrival order and are told their place in line), then decrements the stock with the
// store's own conditional write (only while 2 are left, in the same statement) and
// records the order with the hold's token, in one transaction: 50 buyers get 2
// tickets, 10 are told it is sold out, and nothing is oversold even if a checkout
// outlived its lease.
//
// The seats. Each seat is a key of capacity 1. Three families each hold the keys of 4
// adjacent seats in one hold (all at once or not at all, one token for the 4), two of
// them overlapping and naming their seats in opposite orders (no deadlock), while a
// single buyer takes one seat of the first family's block with a plain Acquire. Each
// buyer fences every seat row it writes with its token, in one transaction: a family
// buys all 4 seats or none.
//
// A module of its own (pgx through database/sql), as go/examples/fenced_postgres.
// Exits 0 when nothing was oversold and no seat was sold twice; 1 otherwise.
// tests/go_package.rs runs it against a real `ticketing server` and a throw-away
// PostgreSQL.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	ticketing "github.com/ticketing-lock/ticketing/go"
)

const (
	stock     = 100 // tickets on sale
	each      = 2   // tickets each buyer wants
	buyers    = 60  // more than the stock serves
	checkouts = 8   // checkouts at once: the capacity of the sale's key
	lease     = 30 * time.Second
	wait      = 120 * time.Second
)

// The sale's conditional decrement (0 rows when fewer than $2 are left) and its order.
const (
	sqlTake  = "UPDATE stock SET left_count = left_count - $2 WHERE sale_id = $1 AND left_count >= $2 RETURNING left_count"
	sqlOrder = "INSERT INTO orders (sale_id, buyer, count, token) VALUES ($1, $2, $3, $4)"
)

// The seats' fence (compare-and-advance of the row's high-water token), sale and ledger.
const (
	sqlFence  = "UPDATE seats SET fence = $2 WHERE id = $1 AND fence < $2 RETURNING sold_to"
	sqlSell   = "UPDATE seats SET sold_to = $2 WHERE id = $1"
	sqlLedger = "INSERT INTO sales (seat_id, buyer, token) VALUES ($1, $2, $3)"
)

// checkout is one buyer's checkout under its permit: the conditional decrement and the
// order, one transaction. false: sold out, nothing written.
func checkout(ctx context.Context, db *sql.DB, sale int, who string, token uint64) (bool, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }()
	var left int
	err = tx.QueryRowContext(ctx, sqlTake, sale, each).Scan(&left)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil // sold out (or fewer than 2 left)
	} else if err != nil {
		return false, err
	}
	if _, err := tx.ExecContext(ctx, sqlOrder, sale, who, each, int64(token)); err != nil {
		return false, err
	}
	return true, tx.Commit()
}

// sellStock runs the stock sale: every buyer at once, each as an owner of its own.
func sellStock(ctx context.Context, c *ticketing.Client, db *sql.DB, sale int) error {
	if _, err := db.ExecContext(ctx, "INSERT INTO stock (sale_id, left_count) VALUES ($1, $2) "+
		"ON CONFLICT (sale_id) DO UPDATE SET left_count = $2", sale, stock); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, "DELETE FROM orders WHERE sale_id = $1", sale); err != nil {
		return err
	}
	key := []ticketing.Part{{Key: fmt.Sprintf("checkout:%d", sale), Count: 1, Capacity: checkouts}}
	var inside, most, told, bought, soldOut atomic.Int32
	errs := make(chan error, buyers)
	var wg sync.WaitGroup
	for i := 0; i < buyers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			who := fmt.Sprintf("buyer-%d", i)
			buyer, err := c.WithOwner(who)
			if err != nil {
				errs <- err
				return
			}
			defer buyer.Close()
			var placed atomic.Bool
			// Counted once per buyer, from the client's thread: it returns at once.
			onPlace := ticketing.OnPlace(func(ticketing.Place) {
				if !placed.Swap(true) {
					told.Add(1)
				}
			})
			err = buyer.WithLockPermits(ctx, key, lease, wait, func(ctx context.Context, l *ticketing.Lock) error {
				now := inside.Add(1)
				defer inside.Add(-1)
				for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
				}
				// ctx ends at the permit's deadline: a checkout that overruns stops.
				ok, err := checkout(ctx, db, sale, who, l.Token())
				if ok {
					bought.Add(1)
				} else if err == nil {
					soldOut.Add(1)
				}
				return err
			}, onPlace)
			if err != nil {
				errs <- fmt.Errorf("%s: %w", who, err)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	if err, failed := <-errs; failed {
		return err
	}
	var left, ordered int
	if err := db.QueryRowContext(ctx, "SELECT left_count FROM stock WHERE sale_id = $1", sale).Scan(&left); err != nil {
		return err
	}
	if err := db.QueryRowContext(ctx, "SELECT coalesce(sum(count), 0) FROM orders WHERE sale_id = $1", sale).
		Scan(&ordered); err != nil {
		return err
	}
	fmt.Printf("stock of %d, %d buyers of %d: %d bought, %d sold out; %d tickets ordered, %d left; "+
		"at most %d checkouts at once (capacity %d); %d buyers told their place in line\n",
		stock, buyers, each, bought.Load(), soldOut.Load(), ordered, left, most.Load(), checkouts, told.Load())
	if ordered > stock || ordered+left != stock || most.Load() > checkouts {
		return errors.New("oversold")
	}
	return nil
}

// buySeats buys every seat of seats under token in one transaction, fencing each row
// before reading it: all or none.
func buySeats(ctx context.Context, db *sql.DB, seats []int, who string, token uint64) (bool, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }()
	for _, seat := range seats {
		var soldTo sql.NullString
		err := tx.QueryRowContext(ctx, sqlFence, seat, int64(token)).Scan(&soldTo)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && soldTo.Valid) {
			return false, nil // a newer token has written the row, or the seat is sold
		} else if err != nil {
			return false, err
		}
	}
	for _, seat := range seats {
		if _, err := tx.ExecContext(ctx, sqlSell, seat, who); err != nil {
			return false, err
		}
		if _, err := tx.ExecContext(ctx, sqlLedger, seat, who, int64(token)); err != nil {
			return false, err
		}
	}
	return true, tx.Commit()
}

// sellSeats runs the seat sale over the seats first..first+9: three families of 4
// adjacent seats (the first two overlapping, named in opposite orders) and one buyer of
// a single seat, all at once.
func sellSeats(ctx context.Context, c *ticketing.Client, db *sql.DB, first int) error {
	for seat := first; seat < first+10; seat++ {
		if _, err := db.ExecContext(ctx, "INSERT INTO seats (id, sold_to, fence) VALUES ($1, NULL, 0) "+
			"ON CONFLICT (id) DO UPDATE SET sold_to = NULL, fence = 0", seat); err != nil {
			return err
		}
	}
	if _, err := db.ExecContext(ctx, "DELETE FROM sales WHERE seat_id >= $1 AND seat_id < $1 + 10", first); err != nil {
		return err
	}
	want := map[string][]int{
		"family-a": {first, first + 1, first + 2, first + 3},
		"family-b": {first + 5, first + 4, first + 3, first + 2},
		"family-c": {first + 6, first + 7, first + 8, first + 9},
		"single":   {first + 1},
	}
	var mu sync.Mutex
	got := map[string]string{}
	errs := make(chan error, len(want))
	var wg sync.WaitGroup
	for who, seats := range want {
		wg.Add(1)
		go func(who string, seats []int) {
			defer wg.Done()
			buyer, err := c.WithOwner(who)
			if err != nil {
				errs <- err
				return
			}
			defer buyer.Close()
			keys := make([]string, len(seats))
			for i, seat := range seats {
				keys[i] = fmt.Sprintf("seat:%d", seat)
			}
			buy := func(ctx context.Context, l *ticketing.Lock) error {
				ok, err := buySeats(ctx, db, seats, who, l.Token())
				mu.Lock()
				defer mu.Unlock()
				if ok {
					got[who] = fmt.Sprintf("seats %v, token %d", seats, l.Token())
				} else {
					got[who] = fmt.Sprintf("nothing (a seat was taken), token %d", l.Token())
				}
				return err
			}
			if len(keys) == 1 {
				err = buyer.WithLock(ctx, keys[0], lease, wait, buy)
			} else {
				err = buyer.WithLockAll(ctx, keys, lease, wait, buy)
			}
			if err != nil {
				errs <- fmt.Errorf("%s: %w", who, err)
			}
		}(who, seats)
	}
	wg.Wait()
	close(errs)
	if err, failed := <-errs; failed {
		return err
	}
	names := make([]string, 0, len(got))
	for who := range got {
		names = append(names, who)
	}
	sort.Strings(names)
	for _, who := range names {
		fmt.Printf("%s: %s\n", who, got[who])
	}
	var twice int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM (SELECT seat_id FROM sales WHERE seat_id >= $1 "+
		"AND seat_id < $1 + 10 GROUP BY seat_id HAVING count(*) > 1) AS t", first).Scan(&twice); err != nil {
		return err
	}
	served := func(who string) bool { return strings.HasPrefix(got[who], "seats") }
	if twice > 0 || !served("family-c") || served("family-a") == served("family-b") {
		return fmt.Errorf("seats sold twice: %d, or not one overlapping family served: %v", twice, got)
	}
	return nil
}

func run() error {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("FENCE_PG"))
	if err != nil {
		return err
	}
	defer db.Close()
	// The schemas of docs/fencing.md §2 and §2.1, shared with examples/ticket_sale.rs.
	for _, file := range []string{"fenced_postgres.sql", "ticket_sale.sql"} {
		schema, err := os.ReadFile(getenv("SALE_SCHEMA_DIR", "../../../examples") + "/" + file)
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
	}
	c, err := ticketing.New(ticketing.Config{Addrs: strings.Split(getenv("TICKETING_ADDRS", "127.0.0.1:5225"), ","),
		AuthToken: os.Getenv("TICKETING_AUTH_TOKEN")})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := sellStock(ctx, c, db, 1); err != nil {
		return err
	}
	return sellSeats(ctx, c, db, 201)
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
