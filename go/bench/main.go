// The Go lock benchmark (scripts/go-bench.sh): N goroutines sharing one client, each on
// a key of its own, acquire+release pairs for a duration — through the Ticketing
// module, etcd's concurrency.Mutex (client v3) or redsync over go-redis. `run` prints
// one JSON line; `report` turns those lines into the Markdown table of
// docs/benchmarks.md (medians over the rounds, ratios to Ticketing). `holds` and
// `holds-report` are the counted and multi-key scenarios (holds.go).
//
// A module of its own, so that the library's go.mod has no dependency.

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
	ticketing "github.com/ticketing-lock/ticketing/go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

type result struct {
	System     string  `json:"system"`
	Goroutines int     `json:"goroutines"`
	Pairs      int     `json:"pairs"`
	PairsPerS  float64 `json:"pairs_per_s"`
	P50Us      float64 `json:"p50_us"`
	P99Us      float64 `json:"p99_us"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
}

// pair is one acquire+release of the goroutine's own key.
type pair func(ctx context.Context) error

func setup(system string, addrs []string, n int) (func(g int) pair, func()) {
	ctx := context.Background()
	switch system {
	case "ticketing":
		c, err := ticketing.New(ticketing.Config{Addrs: addrs, AuthToken: os.Getenv("TICKETING_AUTH_TOKEN")})
		must(err)
		return func(g int) pair {
			key := fmt.Sprintf("bench:go:%d", g)
			return func(ctx context.Context) error {
				lock, err := c.Acquire(ctx, key, 30*time.Second, 5*time.Second)
				if err != nil {
					return err
				}
				_, err = lock.Release(ctx)
				return err
			}
		}, func() { _ = c.Close() }
	case "etcd":
		cli, err := clientv3.New(clientv3.Config{Endpoints: addrs, DialTimeout: 5 * time.Second})
		must(err)
		session, err := concurrency.NewSession(cli, concurrency.WithTTL(30))
		must(err)
		return func(g int) pair {
			m := concurrency.NewMutex(session, fmt.Sprintf("/bench/go/%d", g))
			return func(ctx context.Context) error {
				if err := m.Lock(ctx); err != nil {
					return err
				}
				return m.Unlock(ctx)
			}
		}, func() { _ = session.Close(); _ = cli.Close() }
	case "redis":
		client := goredislib.NewClient(&goredislib.Options{Addr: addrs[0], PoolSize: n + 8})
		must(client.Ping(ctx).Err())
		rs := redsync.New(goredis.NewPool(client))
		return func(g int) pair {
			m := rs.NewMutex(fmt.Sprintf("bench:go:%d", g), redsync.WithExpiry(30*time.Second))
			return func(ctx context.Context) error {
				if err := m.LockContext(ctx); err != nil {
					return err
				}
				_, err := m.UnlockContext(ctx)
				return err
			}
		}, func() { _ = client.Close() }
	}
	fmt.Fprintf(os.Stderr, "unknown system %q: ticketing, etcd or redis\n", system)
	os.Exit(2)
	return nil, nil
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(system string, addrs []string, n int, duration, warmup time.Duration) result {
	makePair, closeAll := setup(system, addrs, n)
	defer closeAll()
	r := measure(makePair, n, duration, warmup)
	r.System = system
	return r
}

// measure runs n goroutines, goroutine g doing makePair(g)'s pairs back to back for
// warmup+duration, and times the pairs started after the warm-up.
func measure(makePair func(g int) pair, n int, duration, warmup time.Duration) result {
	ctx := context.Background()
	start := time.Now()
	measureFrom, end := start.Add(warmup), start.Add(warmup+duration)
	var mu sync.Mutex
	var all []time.Duration
	errors, firstError := 0, ""
	var wg sync.WaitGroup
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			p := makePair(g)
			var mine []time.Duration
			errs, first := 0, ""
			for {
				t0 := time.Now()
				if t0.After(end) {
					break
				}
				err := p(ctx)
				if t0.Before(measureFrom) {
					continue
				}
				if err != nil {
					errs++
					if first == "" {
						first = err.Error()
					}
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			all = append(all, mine...)
			errors += errs
			if firstError == "" {
				firstError = first
			}
			mu.Unlock()
		}(g)
	}
	wg.Wait()
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	r := result{Goroutines: n, Pairs: len(all), Errors: errors, FirstError: firstError}
	r.PairsPerS = float64(len(all)) / duration.Seconds()
	if len(all) > 0 {
		r.P50Us = float64(all[len(all)/2].Microseconds())
		r.P99Us = float64(all[len(all)*99/100].Microseconds())
	}
	return r
}

func median(xs []float64) float64 {
	sort.Float64s(xs)
	if len(xs) == 0 {
		return 0
	}
	if len(xs)%2 == 0 {
		return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	return xs[len(xs)/2]
}

func report(path string) {
	f, err := os.Open(path)
	must(err)
	defer f.Close()
	type key struct {
		system string
		n      int
	}
	rates, p50s, p99s := map[key][]float64{}, map[key][]float64{}, map[key][]float64{}
	errs := map[key]int{}
	counts := map[int]bool{}
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		var r result
		must(json.Unmarshal(scanner.Bytes(), &r))
		k := key{r.System, r.Goroutines}
		rates[k] = append(rates[k], r.PairsPerS)
		p50s[k] = append(p50s[k], r.P50Us)
		p99s[k] = append(p99s[k], r.P99Us)
		errs[k] += r.Errors
		counts[r.Goroutines] = true
	}
	var ns []int
	for n := range counts {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	fmt.Println("| goroutines | system | pairs/s | p50 | p99 | errors | Ticketing ÷ it |")
	fmt.Println("|-----------:|--------|--------:|----:|----:|-------:|---------------:|")
	names := map[string]string{
		"ticketing": "Ticketing (Go module, 3 nodes)",
		"etcd":      "etcd `concurrency.Mutex` (3 nodes)",
		"redis":     "redsync over go-redis (1 Redis)",
	}
	for _, n := range ns {
		ours := median(append([]float64{}, rates[key{"ticketing", n}]...))
		for _, s := range []string{"ticketing", "etcd", "redis"} {
			k := key{s, n}
			if len(rates[k]) == 0 {
				continue
			}
			rate := median(append([]float64{}, rates[k]...))
			ratio := "—"
			if s != "ticketing" && rate > 0 {
				ratio = fmt.Sprintf("%.1f×", ours/rate)
			}
			fmt.Printf("| %d | %s | %.0f | %.2f ms | %.2f ms | %d | %s |\n", n, names[s], rate,
				median(p50s[k])/1000, median(p99s[k])/1000, errs[k], ratio)
		}
	}
}

func main() {
	if len(os.Args) > 2 && os.Args[1] == "report" {
		report(os.Args[2])
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "holds" {
		holdsMain(os.Args[2:])
		return
	}
	if len(os.Args) > 2 && os.Args[1] == "holds-report" {
		holdsReport(os.Args[2])
		return
	}
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	system := fs.String("system", "ticketing", "ticketing, etcd or redis")
	addrs := fs.String("addrs", "", "comma-separated addresses")
	n := fs.Int("goroutines", 64, "goroutines sharing one client")
	duration := fs.Duration("duration", 10*time.Second, "measured time")
	warmup := fs.Duration("warmup", time.Second, "unmeasured time first")
	if len(os.Args) < 2 || os.Args[1] != "run" {
		fmt.Fprintln(os.Stderr, "usage: bench run -system S -addrs A [-goroutines N -duration D -warmup W] | bench report FILE\n"+
			"       bench holds -scenario stock|multi|waiters -system S -addrs A [...] | bench holds-report FILE")
		os.Exit(2)
	}
	must(fs.Parse(os.Args[2:]))
	out, _ := json.Marshal(run(*system, strings.Split(*addrs, ","), *n, *duration, *warmup))
	fmt.Println(string(out))
}
