// Counted and multi-key holds: several keys at once (AcquireAll), permits of keys of more
// capacity (AcquirePermits), their scoped forms, and the hold's place in line (OnPlace,
// PlacesTo) — one ticketing_hold_start future each (docs/go.md, "Counted and multi-key
// holds").

package ticketing

/*
#include <stdint.h>
#include <stdlib.h>
#include "ticketing.h"
int ticketing_go_hold_start(const ticketing_client *client, const ticketing_hold_part *parts, size_t parts_len,
                            int64_t lease_ns, int64_t wait_ns, int places, uintptr_t sink,
                            ticketing_future **future_out, ticketing_error **error_out);
*/
import "C"

import (
	"context"
	"fmt"
	"sync"
	"time"
	"unsafe"
)

// Part is one key of a hold: Count of the key's Capacity permits. Part{key, 1, 1} is
// the key's exclusive lock (what Acquire takes). Every request on a key states the same
// capacity: the server refuses another while the key has holders or waiters.
type Part struct {
	Key      string
	Count    uint32 // permits taken, 1 to Capacity
	Capacity uint32 // the key's permits, 1 to 1,000,000
}

// Place is where a waiting hold stands in line.
type Place struct {
	// Ahead is how many requests are before it in the longest of its keys' queues
	// (0: it is next).
	Ahead uint32
	// GrantsPerSecond is the grant rate the key saw lately; 0 while not measured yet.
	GrantsPerSecond float64
}

// EstimatedWait is how long the requests ahead take at the recent grant rate, and true;
// (0, false) while the rate is not measured yet (GrantsPerSecond 0). An estimate: the
// holders may release sooner or keep their whole lease.
func (p Place) EstimatedWait() (time.Duration, bool) {
	if p.GrantsPerSecond <= 0 {
		return 0, false
	}
	d := float64(p.Ahead) / p.GrantsPerSecond * float64(time.Second)
	if d >= float64(1<<63-1) {
		return time.Duration(1<<63 - 1), true
	}
	return time.Duration(d), true
}

// HoldOption is an option of AcquireAll, AcquirePermits and their scoped forms.
type HoldOption func(*holdOptions)

type holdOptions struct {
	onPlace func(Place)
	places  chan Place
}

// OnPlace calls f with the hold's place in line when it queues and then at most once a
// second while the place changes; never after the acquire returned. f runs on a thread
// of the native client and must not block (it delays the client's other news): hand
// the place on, as PlacesTo does.
func OnPlace(f func(Place)) HoldOption {
	return func(o *holdOptions) { o.onPlace = f }
}

// PlacesTo sends the hold's places in line to ch, which must be buffered: a send never
// waits, and when ch is full the oldest place in it is replaced by the newer one, so a
// slow reader finds the latest place. No place is sent after the acquire returned: close
// ch then, if a goroutine ranges over it.
func PlacesTo(ch chan Place) HoldOption {
	return func(o *holdOptions) { o.places = ch }
}

// AcquireAll holds every key of keys at once — each key's exclusive lock — for lease,
// queueing at most min(wait, ctx's deadline): one *Lock with one fencing token for all
// of them, whose Release ends them all. It is granted only when no earlier request
// naming one of the keys still waits and every key is free; until then it waits
// holding nothing, so holds naming the same keys in other orders never deadlock (the
// price: strict FIFO, a request at the head of a key's queue blocks a later one).
// Arguments, outcomes and errors are Acquire's; 1 to 16 distinct keys (ErrInvalid
// otherwise, from the native library).
func (c *Client) AcquireAll(ctx context.Context, keys []string, lease, wait time.Duration, opts ...HoldOption) (*Lock, error) {
	parts := make([]Part, len(keys))
	for i, k := range keys {
		parts[i] = Part{Key: k, Count: 1, Capacity: 1}
	}
	return c.hold(ctx, parts, "keys[%d]", lease, wait, opts)
}

// AcquirePermits holds Count of the Capacity permits of every key of parts at once,
// for lease, queueing at most min(wait, ctx's deadline): 2 of a stock of 100 tickets is
// Part{"stock:sale-7", 2, 100}. It is granted, as one *Lock with one fencing token
// whose Release ends the whole hold, only when no earlier request naming one of its
// keys still waits and every key has its count free; until then it waits holding
// nothing. A capacity other than the key's (while the key has holders or waiters) is
// ErrInvalid naming both numbers; the other arguments, outcomes and errors are
// AcquireAll's.
func (c *Client) AcquirePermits(ctx context.Context, parts []Part, lease, wait time.Duration, opts ...HoldOption) (*Lock, error) {
	return c.hold(ctx, parts, "parts[%d].Key", lease, wait, opts)
}

// WithLockAll is AcquireAll, then fn with the lock and a ctx that ends at its deadline
// or its release, then the release, as WithLock.
func (c *Client) WithLockAll(ctx context.Context, keys []string, lease, wait time.Duration,
	fn func(ctx context.Context, lock *Lock) error, opts ...HoldOption) error {
	lock, err := c.AcquireAll(ctx, keys, lease, wait, opts...)
	if err != nil {
		return err
	}
	return lock.run(ctx, fn)
}

// WithLockPermits is AcquirePermits, then fn with the lock and a ctx that ends at its
// deadline or its release, then the release, as WithLock.
func (c *Client) WithLockPermits(ctx context.Context, parts []Part, lease, wait time.Duration,
	fn func(ctx context.Context, lock *Lock) error, opts ...HoldOption) error {
	lock, err := c.AcquirePermits(ctx, parts, lease, wait, opts...)
	if err != nil {
		return err
	}
	return lock.run(ctx, fn)
}

// hold is one ticketing_hold_start: keyName names a key for a NUL inside it.
func (c *Client) hold(ctx context.Context, parts []Part, keyName string, lease, wait time.Duration,
	opts []HoldOption) (*Lock, error) {
	var o holdOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.places != nil && cap(o.places) == 0 {
		return nil, &Error{Kind: KindInvalid, Message: "the channel of PlacesTo is unbuffered: places are never " +
			"waited for, so give it a buffer (make(chan ticketing.Place, 1))"}
	}
	cparts := make([]C.ticketing_hold_part, len(parts))
	defer func() {
		for _, p := range cparts {
			C.free(unsafe.Pointer(p.key))
		}
	}()
	for i, p := range parts {
		k, err := cString(fmt.Sprintf(keyName, i), p.Key)
		if err != nil {
			return nil, err
		}
		cparts[i] = C.ticketing_hold_part{key: k, count: C.uint32_t(p.Count), capacity: C.uint32_t(p.Capacity)}
	}
	// The caller's own lease and wait, checked by the native client's rule before ctx's
	// deadline shortens the wait (as Acquire checks them); every other rule of a hold is
	// the native library's, at the start.
	for _, p := range cparts {
		var refused *C.ticketing_error
		if rc := C.ticketing_acquire_check(p.key, nanos(lease), nanos(wait), &refused); rc != C.TICKETING_OK {
			return nil, c.failure(rc, refused, nil)
		}
	}
	var first *C.ticketing_hold_part
	if len(cparts) > 0 {
		first = &cparts[0]
	}
	var s *sink
	if o.onPlace != nil || o.places != nil {
		s = newSink(o)
		defer s.close()
	}
	return c.acquired(ctx, wait, func(h *C.ticketing_client, wait C.int64_t, f **C.ticketing_future, e **C.ticketing_error) C.int {
		places, id := C.int(0), C.uintptr_t(0)
		if s != nil {
			places, id = 1, C.uintptr_t(s.id)
		}
		return C.ticketing_go_hold_start(h, first, C.size_t(len(cparts)), nanos(lease), wait, places, id, f, e)
	})
}

// sink is where one hold's places go, from the native client's threads, until close.
type sink struct {
	id uintptr
	o  holdOptions

	mu     sync.Mutex
	closed bool
}

// sinks are the holds waiting for places, by the id handed to C as the callback's
// context: a place that comes for an id no longer here (a late one) is dropped.
var (
	sinksMu sync.RWMutex
	sinks   = map[uintptr]*sink{}
	sinkIDs uintptr
)

func newSink(o holdOptions) *sink {
	sinksMu.Lock()
	defer sinksMu.Unlock()
	sinkIDs++
	s := &sink{id: sinkIDs, o: o}
	sinks[s.id] = s
	return s
}

// close ends the sink's places: none is delivered once it returned.
func (s *sink) close() {
	sinksMu.Lock()
	delete(sinks, s.id)
	sinksMu.Unlock()
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

//export goPlace
func goPlace(id C.uintptr_t, ahead, grantsPerKs C.uint32_t) {
	sinksMu.RLock()
	s := sinks[uintptr(id)]
	sinksMu.RUnlock()
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	p := Place{Ahead: uint32(ahead), GrantsPerSecond: float64(grantsPerKs) / 1000}
	if s.o.onPlace != nil {
		s.o.onPlace(p)
	}
	if ch := s.o.places; ch != nil {
		// Never wait on the client's thread: when ch is full, the oldest place in it
		// makes room for this newer one.
		select {
		case ch <- p:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
		select {
		case ch <- p:
		default:
		}
	}
}
