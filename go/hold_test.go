// Counted and multi-key holds against a real server: several keys all or nothing, a
// counted stock never over its capacity, a capacity other than the key's refused naming
// both numbers, pool reads, bad holds refused before any I/O, places in line reported
// and decreasing, and a thousand holds waiting with places on no OS thread each.

package ticketing_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ticketing "github.com/ticketing-lock/ticketing/go"
)

func holder(t *testing.T, c *ticketing.Client, key string) *ticketing.Holder {
	t.Helper()
	h, err := c.Query(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestAHoldOfSeveralKeysIsAllOrNothing(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	a := newClient(t, s, "seat-2-holder")
	b := newClient(t, s, "family")
	seats := []string{"all:seat:1", "all:seat:2", "all:seat:3"}
	middle, err := a.Acquire(ctx, "all:seat:2", 30*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	if keys := middle.Keys(); len(keys) != 1 || keys[0] != (ticketing.Part{Key: "all:seat:2", Count: 1, Capacity: 1}) {
		t.Fatalf("an acquire's keys: %+v", keys)
	}
	// One seat taken: busy, and nothing held of the others.
	if _, err := b.AcquireAll(ctx, seats, 30*time.Second, 0); !errors.Is(err, ticketing.ErrBusy) {
		t.Fatalf("a hold with a seat taken: %v", err)
	}
	if holder(t, a, "all:seat:1") != nil || holder(t, a, "all:seat:3") != nil {
		t.Fatal("a refused hold left a seat held")
	}
	// Waiting, it holds nothing either; granted whole once the seat is released.
	got := make(chan *ticketing.Lock, 1)
	go func() {
		lock, err := b.AcquireAll(ctx, seats, 30*time.Second, 60*time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- lock
	}()
	waitFor(t, "the hold queued for seat 2", func() bool { return waiters(t, a, "all:seat:2") == 1 })
	if holder(t, a, "all:seat:1") != nil || holder(t, a, "all:seat:3") != nil {
		t.Fatal("a waiting hold holds a seat")
	}
	if _, err := middle.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lock := <-got
	if lock == nil {
		t.FailNow()
	}
	want := []ticketing.Part{{"all:seat:1", 1, 1}, {"all:seat:2", 1, 1}, {"all:seat:3", 1, 1}}
	if fmt.Sprint(lock.Keys()) != fmt.Sprint(want) || lock.Token() <= middle.Token() {
		t.Fatalf("the hold's keys %+v, token %d after %d", lock.Keys(), lock.Token(), middle.Token())
	}
	for _, seat := range seats {
		if h := holder(t, a, seat); h == nil || h.Token != lock.Token() || h.Owner != "family" {
			t.Fatalf("%s held by %+v, want token %d", seat, h, lock.Token())
		}
	}
	// One release ends every key.
	if outcome, err := lock.Release(ctx); err != nil || outcome != ticketing.Released {
		t.Fatalf("release %v %v", outcome, err)
	}
	for _, seat := range seats {
		if h := holder(t, a, seat); h != nil {
			t.Fatalf("%s still held after the release: %+v", seat, h)
		}
	}
}

func TestACountedStockIsNeverOverItsCapacity(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	c := newClient(t, s, "stock")
	const capacity = 5
	stock := func(count uint32) []ticketing.Part {
		return []ticketing.Part{{Key: "stock:sale-7", Count: count, Capacity: capacity}}
	}
	// Two holds of 2 go on at once; the pool says so.
	first, err := c.AcquirePermits(ctx, stock(2), 30*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.AcquirePermits(ctx, stock(2), 30*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Pool(ctx, "stock:sale-7")
	if err != nil || p.Capacity != capacity || p.InUse != 4 || p.Holds != 2 || p.Waiters != 0 || len(p.Holders) != 2 ||
		p.Holders[0].Token != first.Token() || p.Holders[1].Token != second.Token() || p.Holders[0].Count != 2 ||
		p.Holders[0].Owner != "stock" || p.Holders[0].LeaseLeft <= 0 || p.Holders[0].LeaseLeft > 30*time.Second {
		t.Fatalf("pool %+v %v", p, err)
	}
	// 2 more do not fit (busy at once); 1 does.
	if _, err := c.AcquirePermits(ctx, stock(2), 30*time.Second, 0); !errors.Is(err, ticketing.ErrBusy) {
		t.Fatalf("over the capacity: %v", err)
	}
	last, err := c.AcquirePermits(ctx, stock(1), 30*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A waiter shows in the pool, with its wait.
	waited := make(chan error, 1)
	go func() {
		waited <- c.WithLockPermits(ctx, stock(3), 30*time.Second, 60*time.Second,
			func(ctx context.Context, l *ticketing.Lock) error {
				if k := l.Keys(); len(k) != 1 || k[0].Count != 3 || k[0].Capacity != capacity {
					return fmt.Errorf("keys %+v", k)
				}
				return nil
			})
	}()
	waitFor(t, "the hold of 3 queued", func() bool {
		p, err := c.Pool(ctx, "stock:sale-7")
		return err == nil && p.Waiters == 1 && p.InUse == 5
	})
	for _, l := range []*ticketing.Lock{first, second, last} {
		if _, err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pool empty", func() bool {
		p, err := c.Pool(ctx, "stock:sale-7")
		return err == nil && p.Capacity == 0 && p.InUse == 0 && p.Holds == 0 && len(p.Holders) == 0
	})
	// 12 buyers of 1 to 3 tickets at once: never more than 5 tickets held, every one sold.
	var held, most, sold atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func(count uint32) {
			defer wg.Done()
			err := c.WithLockPermits(ctx, stock(count), 30*time.Second, 120*time.Second,
				func(context.Context, *ticketing.Lock) error {
					// Counted from the grant to just before the release: never more
					// than the server holds at that instant.
					now := held.Add(int32(count))
					defer held.Add(-int32(count))
					for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
					}
					p, err := c.Pool(ctx, "stock:sale-7")
					if err != nil || p.Capacity != capacity || p.InUse > capacity || p.InUse < count {
						return fmt.Errorf("pool %+v with %d held here: %v", p, count, err)
					}
					sold.Add(int32(count))
					return nil
				})
			if err != nil {
				t.Error(err)
			}
		}(uint32(1 + i%3))
	}
	wg.Wait()
	if most.Load() > capacity || sold.Load() != 24 {
		t.Fatalf("at most %d held at once, %d sold", most.Load(), sold.Load())
	}
}

func TestACapacityOtherThanTheKeysIsInvalidNamingBothNumbers(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	a := newClient(t, s, "first")
	b := newClient(t, s, "second")
	lock, err := a.AcquirePermits(ctx, []ticketing.Part{{Key: "cap:stock", Count: 1, Capacity: 100}}, 30*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.AcquirePermits(ctx, []ticketing.Part{{Key: "cap:stock", Count: 1, Capacity: 50}}, 30*time.Second, 0)
	var e *ticketing.Error
	if !errors.Is(err, ticketing.ErrInvalid) || !errors.As(err, &e) || e.Retryable ||
		!strings.Contains(e.Message, "100") || !strings.Contains(e.Message, "50") {
		t.Fatalf("capacity 50 on a key of 100: %v", err)
	}
	// The key as a lock of its own (capacity 1) is refused too.
	if _, err := b.Acquire(ctx, "cap:stock", 30*time.Second, 0); !errors.Is(err, ticketing.ErrInvalid) {
		t.Fatalf("an acquire of a key of capacity 100: %v", err)
	}
	if _, err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestBadHoldsAreRefusedBeforeAnyIO(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	c := newClient(t, s, "bad-hold")
	if _, err := c.Query(ctx, "bad:seat"); err != nil {
		t.Fatal(err)
	}
	// Stopped: a hold that sent a byte would end Indeterminate, never ErrInvalid.
	s.pause(t)
	defer s.resume()
	many := make([]string, 17)
	for i := range many {
		many[i] = fmt.Sprintf("bad:seat:%d", i)
	}
	deadline, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, tc := range []struct {
		what string
		run  func() error
		says string
	}{
		{"no key", func() error { _, err := c.AcquireAll(ctx, nil, 30*time.Second, 0); return err }, "1 to 16"},
		{"17 keys", func() error { _, err := c.AcquireAll(ctx, many, 30*time.Second, 0); return err }, "1 to 16 keys (AcquireAll's keys"},
		{"a key twice", func() error {
			_, err := c.AcquireAll(ctx, []string{"bad:a", "bad:a"}, 30*time.Second, 0)
			return err
		}, "twice"},
		{"a NUL", func() error {
			_, err := c.AcquireAll(ctx, []string{"bad:a", "bad:\x00"}, 30*time.Second, 0)
			return err
		}, "keys[1]"},
		{"count 0", func() error {
			_, err := c.AcquirePermits(ctx, []ticketing.Part{{Key: "bad:s", Count: 0, Capacity: 5}}, 30*time.Second, 0)
			return err
		}, "count"},
		{"count over capacity", func() error {
			_, err := c.AcquirePermits(ctx, []ticketing.Part{{Key: "bad:s", Count: 6, Capacity: 5}}, 30*time.Second, 0)
			return err
		}, `Part{Key: "bad:s", Count: 6, Capacity: 5}: the count must be 1 to the capacity`},
		{"capacity 0", func() error {
			_, err := c.AcquirePermits(ctx, []ticketing.Part{{Key: "bad:s", Count: 1, Capacity: 0}}, 30*time.Second, 0)
			return err
		}, `Part{Key: "bad:s", Count: 1, Capacity: 0}: the capacity must be`},
		{"a wait of 301 s under a 2 s deadline", func() error {
			_, err := c.AcquireAll(deadline, []string{"bad:a"}, 30*time.Second, 301*time.Second)
			return err
		}, "wait is 301 s"},
		{"an unbuffered places channel", func() error {
			_, err := c.AcquireAll(ctx, []string{"bad:a"}, 30*time.Second, 0, ticketing.PlacesTo(make(chan ticketing.Place)))
			return err
		}, "PlacesTo"},
	} {
		if err := tc.run(); !errors.Is(err, ticketing.ErrInvalid) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v (want ErrInvalid saying %q)", tc.what, err, tc.says)
		}
	}
}

func TestAWaitingHoldIsToldItsPlaceAsItDecreases(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	c := newClient(t, s, "line")
	const key = "line:seat"
	first, err := c.Acquire(ctx, key, 60*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Three waiters ahead, each seen queued before the next.
	granted := make(chan *ticketing.Lock, 3)
	for i := 0; i < 3; i++ {
		go func() {
			l, err := c.Acquire(ctx, key, 60*time.Second, 120*time.Second)
			if err != nil {
				t.Error(err)
			}
			granted <- l
		}()
		waitFor(t, fmt.Sprintf("waiter %d queued", i+1), func() bool { return waiters(t, c, key) == i+1 })
	}
	// The hold asks for its places both ways: a callback and a channel.
	var mu sync.Mutex
	var told []ticketing.Place
	places := make(chan ticketing.Place, 1)
	done := make(chan error, 1)
	var returned atomic.Bool
	go func() {
		done <- c.WithLockAll(ctx, []string{key}, 30*time.Second, 120*time.Second,
			func(context.Context, *ticketing.Lock) error { returned.Store(true); return nil },
			ticketing.OnPlace(func(p ticketing.Place) {
				if returned.Load() {
					t.Error("a place after the grant")
				}
				mu.Lock()
				told = append(told, p)
				mu.Unlock()
			}),
			ticketing.PlacesTo(places))
	}()
	// Each place comes as the line moves: 3 ahead, then 2, 1, 0 as each holder releases.
	holder := first
	for ahead := uint32(3); ; ahead-- {
		deadline := time.After(20 * time.Second)
		for seen := false; !seen; {
			select {
			case p := <-places:
				if p.Ahead < ahead {
					t.Fatalf("told %d ahead before %d", p.Ahead, ahead)
				}
				seen = p.Ahead == ahead
			case <-deadline:
				t.Fatalf("not told %d ahead within 20 s", ahead)
			}
		}
		if _, err := holder.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if ahead == 0 {
			break
		}
		if holder = <-granted; holder == nil {
			t.FailNow()
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(told) < 4 || told[0].Ahead != 3 || told[len(told)-1].Ahead != 0 {
		t.Fatalf("places %+v", told)
	}
	for i, p := range told {
		if i > 0 && p.Ahead >= told[i-1].Ahead {
			t.Fatalf("places not decreasing: %+v", told)
		}
		wait, known := p.EstimatedWait()
		if known != (p.GrantsPerSecond > 0) || (known && wait != time.Duration(float64(p.Ahead)/p.GrantsPerSecond*float64(time.Second))) {
			t.Fatalf("place %+v: estimated wait %v, %v", p, wait, known)
		}
	}
}

func TestAThousandHoldsWaitingWithPlacesHoldNoThreadEach(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	c := newClient(t, s, "queue")
	const key, n = "queue:seat", 1000
	parts := []ticketing.Part{{Key: key, Count: 1, Capacity: 1}}
	first, err := c.AcquirePermits(ctx, parts, 60*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	before := threads(t)
	var placed, granted atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var told atomic.Bool
			lock, err := c.AcquirePermits(ctx, parts, 30*time.Second, 120*time.Second,
				ticketing.OnPlace(func(ticketing.Place) {
					if !told.Swap(true) {
						placed.Add(1)
					}
				}))
			if err != nil {
				t.Error(err)
				return
			}
			granted.Add(1)
			if _, err := lock.Release(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	waitFor(t, "1,000 holds queued, each told its place", func() bool {
		return waiters(t, c, key) == n && placed.Load() == n
	})
	during := threads(t)
	t.Logf("OS threads: %d before, %d with 1,000 holds waiting with places", before, during)
	if during > before+32 {
		t.Errorf("%d OS threads while 1,000 holds wait with places (%d before)", during, before)
	}
	// The line hands the key on, each waiter releasing as soon as it is granted.
	if _, err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if granted.Load() != n {
		t.Fatalf("%d of %d granted", granted.Load(), n)
	}
}

func TestPlaceEstimatedWait(t *testing.T) {
	if d, ok := (ticketing.Place{Ahead: 5}).EstimatedWait(); ok || d != 0 {
		t.Fatalf("no rate yet: %v %v", d, ok)
	}
	if d, ok := (ticketing.Place{Ahead: 5, GrantsPerSecond: 2.5}).EstimatedWait(); !ok || d != 2*time.Second {
		t.Fatalf("5 ahead at 2.5/s: %v %v", d, ok)
	}
	if d, ok := (ticketing.Place{Ahead: 0, GrantsPerSecond: 0.001}).EstimatedWait(); !ok || d != 0 {
		t.Fatalf("next in line: %v %v", d, ok)
	}
}
