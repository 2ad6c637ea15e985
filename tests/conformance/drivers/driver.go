// The conformance driver of the Go module (docs/conformance.md): commands on standard
// input (acquire, release, query, resolve, hold, pool, watch), one outcome line each on
// standard output (a hold's places before it), each command in a goroutine of its
// own, all sharing one ticketing.Client. Built by tests/conformance/libraries.rs as a
// program that uses go/ through `replace`.

package main

/*
#include <time.h>
static unsigned long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
}
*/
import "C"

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	ticketing "github.com/ticketing-lock/ticketing/go"
)

var (
	out   sync.Mutex
	state sync.Mutex
	locks = map[string]*ticketing.Lock{}
	pend  = map[string]*ticketing.IndeterminateError{}
	holds = map[string]bool{} // names of holds (their lines list the lock's keys)
)

// nowNS is CLOCK_MONOTONIC, which every process on the machine shares.
func nowNS() uint64 { return uint64(C.now_ns()) }

func say(line string) {
	out.Lock()
	defer out.Unlock()
	fmt.Println(line)
}

func seconds(s string) time.Duration {
	f, _ := strconv.ParseFloat(s, 64)
	return time.Duration(f * float64(time.Second))
}

func failed(name string, err error, start time.Time) string {
	var e *ticketing.Error
	if !errors.As(err, &e) {
		return fmt.Sprintf("%s internal retryable=0 ms=%d : %v", name, ms(start), err)
	}
	retryable := 0
	if e.Retryable {
		retryable = 1
	}
	cause := ""
	var ind *ticketing.IndeterminateError
	if errors.As(err, &ind) {
		cause = " cause=" + ind.Cause
	}
	return fmt.Sprintf("%s %s retryable=%d ms=%d%s : %s", name, e.Kind, retryable, ms(start), cause, e.Message)
}

func ms(start time.Time) int64 { return time.Since(start).Milliseconds() }

// parts reads KEY:COUNT:CAPACITY words (a key may hold ':' itself: the last two fields
// are the numbers); a word that is not one is passed on as a key with count and
// capacity 0, for the library to refuse.
func parts(words []string) []ticketing.Part {
	out := make([]ticketing.Part, len(words))
	for i, w := range words {
		out[i] = ticketing.Part{Key: w}
		fields := strings.Split(w, ":")
		if len(fields) < 3 {
			continue
		}
		count, err1 := strconv.ParseUint(fields[len(fields)-2], 10, 32)
		capacity, err2 := strconv.ParseUint(fields[len(fields)-1], 10, 32)
		if err1 == nil && err2 == nil {
			out[i] = ticketing.Part{Key: strings.Join(fields[:len(fields)-2], ":"), Count: uint32(count),
				Capacity: uint32(capacity)}
		}
	}
	return out
}

// keysOf is the lock's keys as the library reports them: KEY:COUNT:CAPACITY,…
func keysOf(lock *ticketing.Lock) string {
	var keys []string
	for _, p := range lock.Keys() {
		keys = append(keys, fmt.Sprintf("%s:%d:%d", p.Key, p.Count, p.Capacity))
	}
	return strings.Join(keys, ",")
}

// granted is the line of a lock just granted (or adopted by resolve), kept under name.
func granted(name, word string, lock *ticketing.Lock, start time.Time) string {
	state.Lock()
	locks[name] = lock
	hold := holds[name]
	state.Unlock()
	line := fmt.Sprintf("%s %s %d at=%d ms=%d", name, word, lock.Token(), nowNS(), ms(start))
	if hold {
		line += " keys=" + keysOf(lock)
	}
	return line
}

func command(c *ticketing.Client, words []string) string {
	verb, name, args := words[0], words[1], words[2:]
	ctx := context.Background()
	start := time.Now()
	switch {
	case verb == "acquire" && len(args) == 3:
		state.Lock()
		delete(holds, name)
		state.Unlock()
		lock, err := c.Acquire(ctx, args[0], seconds(args[1]), seconds(args[2]))
		if err != nil {
			var ind *ticketing.IndeterminateError
			if errors.As(err, &ind) {
				state.Lock()
				pend[name] = ind
				state.Unlock()
			}
			return failed(name, err, start)
		}
		return granted(name, "granted", lock, start)
	case verb == "release":
		state.Lock()
		lock := locks[name]
		delete(locks, name)
		state.Unlock()
		if lock == nil {
			return fmt.Sprintf("%s invalid retryable=0 ms=0 : no lock named %s", name, name)
		}
		at := nowNS()
		outcome, err := lock.Release(ctx)
		if err != nil {
			return failed(name, err, start)
		}
		return fmt.Sprintf("%s %s at=%d ms=%d", name, outcome, at, ms(start))
	case verb == "query" && len(args) == 1:
		h, err := c.Query(ctx, args[0])
		if err != nil {
			return failed(name, err, start)
		}
		if h == nil {
			return fmt.Sprintf("%s free ms=%d", name, ms(start))
		}
		return fmt.Sprintf("%s held %s %d %d ms=%d", name, h.Owner, h.Token, h.Waiters, ms(start))
	case verb == "resolve" && len(args) == 1:
		state.Lock()
		ind := pend[name]
		delete(pend, name)
		state.Unlock()
		if ind == nil {
			return fmt.Sprintf("%s invalid retryable=0 ms=0 : no indeterminate acquire named %s", name, name)
		}
		rctx, cancel := context.WithTimeout(ctx, seconds(args[0]))
		defer cancel()
		lock, err := ind.Resolve(rctx)
		switch {
		case err == ind:
			return fmt.Sprintf("%s resolved unknown ms=%d", name, ms(start))
		case err != nil:
			return failed(name, err, start)
		case lock == nil:
			return fmt.Sprintf("%s resolved not_held ms=%d", name, ms(start))
		}
		return granted(name, "resolved held", lock, start)
	case verb == "hold" && len(args) >= 4:
		var opts []ticketing.HoldOption
		if args[2] == "1" {
			// Printed from the place callback itself (a short locked write): every
			// place comes out before the outcome line, and none after it.
			opts = append(opts, ticketing.OnPlace(func(p ticketing.Place) {
				eta := int64(-1)
				if wait, known := p.EstimatedWait(); known {
					eta = wait.Milliseconds()
				}
				say(fmt.Sprintf("%s place %d eta_ms=%d", name, p.Ahead, eta))
			}))
		}
		state.Lock()
		holds[name] = true
		state.Unlock()
		lock, err := c.AcquirePermits(ctx, parts(args[3:]), seconds(args[0]), seconds(args[1]), opts...)
		if err != nil {
			var ind *ticketing.IndeterminateError
			if errors.As(err, &ind) {
				state.Lock()
				pend[name] = ind
				state.Unlock()
			}
			return failed(name, err, start)
		}
		return granted(name, "granted", lock, start)
	case verb == "pool" && len(args) == 1:
		p, err := c.Pool(ctx, args[0])
		if err != nil {
			return failed(name, err, start)
		}
		return fmt.Sprintf("%s pool %d %d %d %d ms=%d", name, p.Capacity, p.InUse, p.Holds, p.Waiters, ms(start))
	case verb == "watch" && len(args) == 0:
		state.Lock()
		lock := locks[name]
		state.Unlock()
		if lock == nil {
			return fmt.Sprintf("%s invalid retryable=0 ms=0 : no lock named %s", name, name)
		}
		// The lock's deadline on CLOCK_MONOTONIC: now on it, plus the time until the
		// deadline on Go's monotonic clock.
		deadline := int64(nowNS()) + int64(time.Until(lock.Deadline()))
		held, cancel := lock.Context(ctx)
		defer cancel()
		<-held.Done()
		return fmt.Sprintf("%s deadline at=%d deadline=%d", name, nowNS(), deadline)
	}
	return fmt.Sprintf("%s invalid retryable=0 ms=0 : unknown command %s", name, verb)
}

func main() {
	var addrs []string
	for _, a := range strings.Split(os.Getenv("TICKETING_ADDRS"), ",") {
		if a != "" {
			addrs = append(addrs, a)
		}
	}
	c, err := ticketing.New(ticketing.Config{Addrs: addrs, AuthToken: os.Getenv("TICKETING_AUTH_TOKEN"),
		Owner: strings.ReplaceAll(os.Getenv("TICKETING_OWNER"), `\0`, "\x00"), TLSCAFile: os.Getenv("TICKETING_TLS_CA"),
		ClusterName: os.Getenv("TICKETING_CLUSTER_NAME")})
	if err != nil {
		var e *ticketing.Error
		if errors.As(err, &e) {
			say("config-error : " + e.Message)
		} else {
			say("config-error : " + err.Error())
		}
		return
	}
	defer c.Close()
	say("ready")
	var wg sync.WaitGroup
	scanner := bufio.NewScanner(os.Stdin)
	for scanner.Scan() {
		words := strings.Fields(scanner.Text())
		if len(words) == 0 {
			continue
		}
		if words[0] == "quit" {
			break
		}
		if len(words) < 2 {
			continue
		}
		wg.Add(1)
		go func(words []string) {
			defer wg.Done()
			say(command(c, words))
		}(words)
	}
	wg.Wait()
}
