// The counted and multi-key scenarios of the Go benchmark (scripts/go-holds-bench.sh):
// `holds -scenario stock|multi` times pairs through the Go module or the anchor a Go
// developer would build (etcd slot mutexes for a stock, redsync's 4 mutexes in sorted
// order for a multi-key hold); `holds -scenario waiters` lines up 10,000 goroutines on
// one key with their places in line and counts the process's OS threads; `holds-report`
// turns the JSON lines (the Rust client's too) into docs/benchmarks.md's tables.

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
	ticketing "github.com/ticketing-lock/ticketing/go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// holdResult is one run of `holds`: a pairs scenario's result, or the waiters' figures.
type holdResult struct {
	Scenario string `json:"scenario"`
	result
	Load1 float64 `json:"load1"`

	// waiters only
	Waiters        int     `json:"waiters,omitempty"`
	QueuedS        float64 `json:"queued_s,omitempty"`
	ThreadsBefore  int     `json:"threads_before,omitempty"`
	ThreadsWaiting int     `json:"threads_waiting,omitempty"`
	ThreadsMax     int     `json:"threads_max,omitempty"`
	HandoffsPerS   float64 `json:"handoffs_per_s,omitempty"`
	Places         int64   `json:"places,omitempty"`
	PlacedHolds    int64   `json:"placed_holds,omitempty"`
	WorstTickMs    float64 `json:"worst_tick_late_ms,omitempty"`
}

// The stock's capacity and the keys of a multi-key hold, as the Rust client's
// `ticketing bench stock --permits 1000 --count 1` and `multi --keys-per-hold 4`.
const (
	stockCapacity = 1000
	keysPerHold   = 4
)

func holdsMain(args []string) {
	fs := flag.NewFlagSet("holds", flag.ExitOnError)
	scenario := fs.String("scenario", "stock", "stock, multi or waiters")
	system := fs.String("system", "ticketing", "ticketing, or the anchor: etcd (stock), redis (multi)")
	addrs := fs.String("addrs", "", "comma-separated addresses")
	n := fs.Int("goroutines", 64, "goroutines sharing one client (waiters: how many wait)")
	duration := fs.Duration("duration", 10*time.Second, "measured time")
	warmup := fs.Duration("warmup", time.Second, "unmeasured time first")
	must(fs.Parse(args))
	addrList := strings.Split(*addrs, ",")
	var r holdResult
	if *scenario == "waiters" {
		r = waiters(addrList, *n)
	} else {
		makePair, closeAll := holdSetup(*scenario, *system, addrList, *n)
		r.result = measure(makePair, *n, *duration, *warmup)
		closeAll()
	}
	r.Scenario, r.System, r.Load1 = *scenario, *system, load1()
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
}

func holdSetup(scenario, system string, addrs []string, n int) (func(g int) pair, func()) {
	switch scenario + " " + system {
	case "stock ticketing", "multi ticketing":
		c, err := ticketing.New(ticketing.Config{Addrs: addrs, AuthToken: os.Getenv("TICKETING_AUTH_TOKEN")})
		must(err)
		return func(g int) pair {
			var parts []ticketing.Part
			if scenario == "stock" {
				parts = []ticketing.Part{{Key: "bench:go:stock", Count: 1, Capacity: stockCapacity}}
			} else {
				for i := 0; i < keysPerHold; i++ {
					parts = append(parts, ticketing.Part{Key: fmt.Sprintf("bench:go:multi:%d:%d", g, i), Count: 1, Capacity: 1})
				}
			}
			return func(ctx context.Context) error {
				lock, err := c.AcquirePermits(ctx, parts, 30*time.Second, 5*time.Second)
				if err != nil {
					return err
				}
				_, err = lock.Release(ctx)
				return err
			}
		}, func() { _ = c.Close() }
	case "stock etcd":
		// A stock of N on etcd as Go developers build it: N slot keys, each a
		// concurrency.Mutex; a taker tries TryLock on the slots from a random one on
		// until one is free. A session (lease) per goroutine: two goroutines of one
		// session would share the mutex's key, and both believe they hold the slot.
		cli, err := clientv3.New(clientv3.Config{Endpoints: addrs, DialTimeout: 5 * time.Second})
		must(err)
		var mu sync.Mutex
		var sessions []*concurrency.Session
		return func(g int) pair {
				session, err := concurrency.NewSession(cli, concurrency.WithTTL(30))
				must(err)
				mu.Lock()
				sessions = append(sessions, session)
				mu.Unlock()
				return func(ctx context.Context) error {
					first := rand.IntN(stockCapacity)
					for i := 0; i < stockCapacity; i++ {
						m := concurrency.NewMutex(session, fmt.Sprintf("/bench/go/stock/slot-%d", (first+i)%stockCapacity))
						err := m.TryLock(ctx)
						if errors.Is(err, concurrency.ErrLocked) {
							continue
						}
						if err != nil {
							return err
						}
						return m.Unlock(ctx)
					}
					return fmt.Errorf("all %d slots taken", stockCapacity)
				}
			}, func() {
				for _, s := range sessions {
					_ = s.Close()
				}
				_ = cli.Close()
			}
	case "multi redis":
		// 4 redsync mutexes taken in sorted key order (no deadlock between holds that
		// share keys), released in reverse.
		client := goredislib.NewClient(&goredislib.Options{Addr: addrs[0], PoolSize: n + 8})
		must(client.Ping(context.Background()).Err())
		rs := redsync.New(goredis.NewPool(client))
		return func(g int) pair {
			keys := make([]string, keysPerHold)
			for i := range keys {
				keys[i] = fmt.Sprintf("bench:go:multi:%d:%d", g, i)
			}
			sort.Strings(keys)
			ms := make([]*redsync.Mutex, len(keys))
			for i, k := range keys {
				ms[i] = rs.NewMutex(k, redsync.WithExpiry(30*time.Second))
			}
			return func(ctx context.Context) error {
				var err error
				taken := 0
				for ; taken < len(ms); taken++ {
					if err = ms[taken].LockContext(ctx); err != nil {
						break
					}
				}
				for i := taken - 1; i >= 0; i-- {
					if _, e := ms[i].UnlockContext(ctx); e != nil && err == nil {
						err = e
					}
				}
				return err
			}
		}, func() { _ = client.Close() }
	}
	fmt.Fprintf(os.Stderr, "no system %q for scenario %q: stock has ticketing and etcd, multi ticketing and redis\n",
		system, scenario)
	os.Exit(2)
	return nil, nil
}

// osThreads is the number of OS threads of this process.
func osThreads() int {
	tasks, err := os.ReadDir("/proc/self/task")
	must(err)
	return len(tasks)
}

func load1() float64 {
	var l float64
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Sscan(string(b), &l)
	}
	return l
}

// waiters: a holder takes one key; n goroutines wait for it in AcquirePermits with
// OnPlace, all through one client; once all are queued (the key's pool says so) the
// holder releases and each waiter releases as soon as it is granted, a chain of n
// hand-offs. A goroutine sleeping 1 ms at a time records its worst lateness meanwhile.
func waiters(addrs []string, n int) holdResult {
	ctx := context.Background()
	c, err := ticketing.New(ticketing.Config{Addrs: addrs, AuthToken: os.Getenv("TICKETING_AUTH_TOKEN")})
	must(err)
	defer c.Close()
	key := fmt.Sprintf("bench:go:line:%d:%d", os.Getpid(), time.Now().UnixNano())
	parts := []ticketing.Part{{Key: key, Count: 1, Capacity: 1}}
	holder, err := c.AcquirePermits(ctx, parts, 120*time.Second, 0)
	must(err)
	r := holdResult{Waiters: n, ThreadsBefore: osThreads()}

	begun := time.Now()
	var phase atomic.Value
	phase.Store("before the waiters")
	stop := make(chan struct{})
	var worst atomic.Int64 // ns
	var threadsMax atomic.Int64
	var bg sync.WaitGroup
	bg.Add(2)
	go func() {
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			want := time.Now().Add(time.Millisecond)
			time.Sleep(time.Millisecond)
			if late := int64(time.Since(want)); late > worst.Load() {
				worst.Store(late)
			}
		}
	}()
	go func() {
		defer bg.Done()
		for {
			if t := int64(osThreads()); t > threadsMax.Load() {
				// On stderr, the moments the threads grew by 16 or more, and in what phase.
				if t >= threadsMax.Load()+16 {
					fmt.Fprintf(os.Stderr, "waiters: %d OS threads at %.2f s (%s)\n", t,
						time.Since(begun).Seconds(), phase.Load())
				}
				threadsMax.Store(t)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()

	var places, placed, granted, errs atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	phase.Store("starting the waiters")
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var told atomic.Bool
			lock, err := c.AcquirePermits(ctx, parts, 30*time.Second, 120*time.Second,
				ticketing.OnPlace(func(ticketing.Place) {
					places.Add(1)
					if !told.Swap(true) {
						placed.Add(1)
					}
				}))
			if err == nil {
				granted.Add(1)
				_, err = lock.Release(ctx)
			}
			if err != nil {
				errs.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
		}()
	}
	phase.Store("waiting for all to queue")
	// Queued: the leader counts n waiters on the key (120 s only against a hang).
	for {
		p, err := c.Pool(ctx, key)
		must(err)
		if int(p.Waiters) >= n {
			break
		}
		if time.Since(start) > 120*time.Second {
			must(fmt.Errorf("%d of %d waiters queued after 120 s", p.Waiters, n))
		}
		time.Sleep(100 * time.Millisecond) // polling the pool: the leader's count is the fact
	}
	r.QueuedS = time.Since(start).Seconds()
	r.ThreadsWaiting = osThreads()
	phase.Store("handing off")
	handoff := time.Now()
	_, err = holder.Release(ctx)
	must(err)
	wg.Wait()
	elapsed := time.Since(handoff)
	close(stop)
	bg.Wait()

	r.Goroutines, r.Pairs, r.Errors = n, int(granted.Load()), int(errs.Load())
	if e, ok := firstErr.Load().(string); ok {
		r.FirstError = e
	}
	r.HandoffsPerS = float64(granted.Load()) / elapsed.Seconds()
	r.Places, r.PlacedHolds = places.Load(), placed.Load()
	r.ThreadsMax = int(threadsMax.Load())
	r.WorstTickMs = float64(worst.Load()) / 1e6
	return r
}

// rustLine is a run of `ticketing bench ... --json` as the script wraps it.
type rustLine struct {
	Scenario string  `json:"scenario"`
	Load1    float64 `json:"load1"`
	Rust     struct {
		Threads     int     `json:"threads"`
		Pairs       int     `json:"pairs"`
		PairsPerS   float64 `json:"pairs_per_s"`
		ErrorsTotal int     `json:"errors_total"`
		LatencyMs   struct {
			P50 float64 `json:"p50"`
			P99 float64 `json:"p99"`
		} `json:"latency_ms"`
	} `json:"rust"`
}

func holdsReport(path string) {
	f, err := os.Open(path)
	must(err)
	defer f.Close()
	var runs []holdResult
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		var probe struct {
			Rust json.RawMessage `json:"rust"`
		}
		must(json.Unmarshal(scanner.Bytes(), &probe))
		if probe.Rust != nil {
			var l rustLine
			must(json.Unmarshal(scanner.Bytes(), &l))
			runs = append(runs, holdResult{Scenario: l.Scenario, Load1: l.Load1, result: result{
				System: "rust", Goroutines: l.Rust.Threads, Pairs: l.Rust.Pairs, PairsPerS: l.Rust.PairsPerS,
				P50Us: l.Rust.LatencyMs.P50 * 1000, P99Us: l.Rust.LatencyMs.P99 * 1000, Errors: l.Rust.ErrorsTotal}})
			continue
		}
		var r holdResult
		must(json.Unmarshal(scanner.Bytes(), &r))
		runs = append(runs, r)
	}
	names := map[string]string{
		"stock ticketing": "Go module: `AcquirePermits` 1 of 1,000",
		"stock rust":      "Rust client: `ticketing bench stock`, 64 threads",
		"stock etcd":      "etcd `concurrency.Mutex.TryLock` over 1,000 slot keys",
		"multi ticketing": "Go module: `AcquireAll` of 4 keys",
		"multi rust":      "Rust client: `ticketing bench multi`, 64 threads",
		"multi redis":     "redsync: 4 `Mutex.LockContext` in sorted key order",
	}
	targets := map[string]string{"stock rust": " (target ≥ 0.8×)"}
	tables := 0
	// gap is the blank line between two tables.
	gap := func() {
		if tables > 0 {
			fmt.Println()
		}
		tables++
	}
	for _, scenario := range []string{"stock", "multi"} {
		bySystem := map[string][]holdResult{}
		for _, r := range runs {
			if r.Scenario == scenario {
				bySystem[r.System] = append(bySystem[r.System], r)
			}
		}
		ours := bySystem["ticketing"]
		if len(ours) == 0 {
			continue
		}
		gap()
		fmt.Printf("| %s: 64 goroutines / threads, one client | pairs/s | p50 | p99 | errors | Go module ÷ it, per round | median | load average (1 min) |\n", scenario)
		fmt.Println("|---|---:|---:|---:|---:|---|---:|---|")
		for _, system := range []string{"ticketing", "rust", "etcd", "redis"} {
			rs := bySystem[system]
			if len(rs) == 0 {
				continue
			}
			var rates, p50, p99, loads, ratios []float64
			errs := 0
			for i, r := range rs {
				rates, p50, p99 = append(rates, r.PairsPerS), append(p50, r.P50Us), append(p99, r.P99Us)
				loads, errs = append(loads, r.Load1), errs+r.Errors
				if i < len(ours) && r.PairsPerS > 0 {
					ratios = append(ratios, ours[i].PairsPerS/r.PairsPerS)
				}
			}
			per, med := "—", "—"
			if system != "ticketing" {
				var parts []string
				for _, x := range ratios {
					parts = append(parts, fmt.Sprintf("%.2f×", x))
				}
				per = strings.Join(parts, ", ")
				med = fmt.Sprintf("**%.2f×**%s", median(append([]float64{}, ratios...)), targets[scenario+" "+system])
			}
			sort.Float64s(loads)
			fmt.Printf("| %s | %.0f | %.2f ms | %.2f ms | %d | %s | %s | %.2f–%.2f |\n", names[scenario+" "+system],
				median(rates), median(p50)/1000, median(p99)/1000, errs, per, med, loads[0], loads[len(loads)-1])
		}
	}
	var ws []holdResult
	for _, r := range runs {
		if r.Scenario == "waiters" {
			ws = append(ws, r)
		}
	}
	if len(ws) > 0 {
		gap()
		fmt.Println("| waiters: goroutines in `AcquirePermits` with `OnPlace`, one key, one client | queued in | OS threads before | while they wait | most seen | hand-offs/s | places received | holds told a place | worst lateness of a 1 ms sleep | errors | load average (1 min) |")
		fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for i, r := range ws {
			fmt.Printf("| round %d: %d goroutines | %.1f s | %d | %d | %d | %.0f | %d | %d | %.1f ms | %d | %.2f |\n", i+1,
				r.Waiters, r.QueuedS, r.ThreadsBefore, r.ThreadsWaiting, r.ThreadsMax, r.HandoffsPerS, r.Places,
				r.PlacedHolds, r.WorstTickMs, r.Errors, r.Load1)
		}
	}
}
