// The runnable examples of docs/go.md ("Counted and multi-key holds"): go test runs them
// against one standalone node, started by the first example and stopped after the tests,
// and compares what they print.

package ticketing_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"sync"
	"testing"
	"time"

	ticketing "github.com/ticketing-lock/ticketing/go"
)

var exampleNode struct {
	once sync.Once
	s    *server
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if exampleNode.s != nil {
		exampleNode.s.stop()
	}
	os.Exit(code)
}

// exampleClient is a client of the examples' node, acquiring as owner.
func exampleClient(owner string) *ticketing.Client {
	exampleNode.once.Do(func() { exampleNode.s, exampleNode.err = launch() })
	if exampleNode.err != nil {
		log.Fatal(exampleNode.err)
	}
	c, err := ticketing.New(ticketing.Config{Addrs: []string{exampleNode.s.addr}, AuthToken: secret, Owner: owner})
	if err != nil {
		log.Fatal(err)
	}
	return c
}

// Four adjacent seats, together or not at all.
func ExampleClient_AcquireAll() {
	c := exampleClient("family-a")
	defer c.Close()
	ctx := context.Background()
	seats := []string{"seat:12:1", "seat:12:2", "seat:12:3", "seat:12:4"}
	lock, err := c.AcquireAll(ctx, seats, 30*time.Second, 10*time.Second)
	if err != nil {
		log.Fatal(err) // ErrBusy, ErrTimeout, ...: not one seat is held
	}
	for _, k := range lock.Keys() {
		fmt.Println(k.Key, "held under the hold's one token")
	}
	outcome, err := lock.Release(ctx) // ends every seat
	fmt.Println(outcome, err)
	// Output:
	// seat:12:1 held under the hold's one token
	// seat:12:2 held under the hold's one token
	// seat:12:3 held under the hold's one token
	// seat:12:4 held under the hold's one token
	// released <nil>
}

// 2 tickets of a stock of 100, and the stock read as a pool meanwhile.
func ExampleClient_AcquirePermits() {
	c := exampleClient("buyer-17")
	defer c.Close()
	ctx := context.Background()
	tickets := []ticketing.Part{{Key: "stock:sale-7", Count: 2, Capacity: 100}}
	err := c.WithLockPermits(ctx, tickets, 30*time.Second, 10*time.Second,
		func(ctx context.Context, lock *ticketing.Lock) error {
			pool, err := c.Pool(ctx, "stock:sale-7")
			if err != nil {
				return err
			}
			fmt.Printf("%d of %d in use by %d hold(s), %d waiting\n", pool.InUse, pool.Capacity, pool.Holds, pool.Waiters)
			fmt.Println("the oldest:", pool.Holders[0].Owner, pool.Holders[0].Count, pool.Holders[0].Token == lock.Token())
			// Decrement the stored stock only while 2 are left, in the store's own
			// conditional write (docs/fencing.md §2.1), with lock.Token() for the audit.
			return nil
		})
	fmt.Println(err)
	// Output:
	// 2 of 100 in use by 1 hold(s), 0 waiting
	// the oldest: buyer-17 2 true
	// <nil>
}

// A buyer told its place in line while it waits.
func ExamplePlacesTo() {
	c := exampleClient("box-office")
	defer c.Close()
	ctx := context.Background()
	first, err := c.Acquire(ctx, "seat:7:1", 30*time.Second, 0)
	if err != nil {
		log.Fatal(err)
	}
	places := make(chan ticketing.Place, 1) // buffered: the latest place waits there
	go func() {
		for p := range places {
			say := fmt.Sprint(p.Ahead, " ahead")
			if wait, known := p.EstimatedWait(); known && wait > 0 { // unknown: no grant rate yet
				say += fmt.Sprint(", about ", wait.Round(time.Second))
			}
			fmt.Println(say)
			first.Release(ctx) // (here, to let the buyer in)
		}
	}()
	lock, err := c.AcquireAll(ctx, []string{"seat:7:1"}, 30*time.Second, 60*time.Second, ticketing.PlacesTo(places))
	close(places) // no place is sent after the acquire returned
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("granted", lock.Keys()[0].Key)
	lock.Release(ctx)
	// Output:
	// 0 ahead
	// granted seat:7:1
}

// Work under a lock stops at the lock's deadline: its ctx says so.
func ExampleLock_Context() {
	c := exampleClient("slow-checkout")
	defer c.Close()
	ctx := context.Background()
	lock, err := c.Acquire(ctx, "seat:9:1", time.Second, 0)
	if err != nil {
		log.Fatal(err)
	}
	held, cancel := lock.Context(ctx)
	defer cancel()
	deadline, _ := held.Deadline()
	fmt.Println(deadline.Equal(lock.Deadline()))
	select {
	case <-time.After(time.Minute): // a checkout that takes longer than the 1 s lease
	case <-held.Done():
	}
	fmt.Println(held.Err())
	// Output:
	// true
	// context deadline exceeded
}
