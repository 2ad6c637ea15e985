// The held lock: its fencing token, keys and lease, its local deadline (and a ctx that
// ends at it or at the release), and its release.

package ticketing

/*
#include "ticketing.h"
*/
import "C"

import (
	"context"
	"runtime"
	"sync"
	"time"
)

// ReleaseOutcome is what a release found. Each means the key is no longer held under the
// lock's token.
type ReleaseOutcome int

const (
	// Released: the next waiter has the key, or it is free.
	Released ReleaseOutcome = C.TICKETING_RELEASED
	// NotHolder: the lease had already ended (another may have held the key meanwhile).
	NotHolder ReleaseOutcome = C.TICKETING_NOT_HOLDER
	// ReleasedOrExpired: `N` after an earlier attempt's answer was lost.
	ReleasedOrExpired ReleaseOutcome = C.TICKETING_RELEASED_OR_EXPIRED
)

// String is the library's name of the outcome ("released", "not_holder",
// "released_or_expired"; "unknown" for another number, where the library has none).
func (o ReleaseOutcome) String() string {
	return nameOr(C.ticketing_release_outcome_name(C.int(o)), "unknown")
}

// Lock is a held lock. A Lock dropped unreleased is released in the background once the
// garbage collector finds it; release it instead.
type Lock struct {
	client *Client
	token  uint64
	key    string
	owner  string
	lease  time.Duration
	keys   []Part
	// deadline is the lock's local deadline (ticketing_lock_deadline_ns) as a time.Time
	// with a monotonic reading.
	deadline time.Time

	mu sync.Mutex
	h  *C.ticketing_lock // nil once released for good
	// contexts are the cancels of the ctxs Context made and whose cancel was not called
	// yet, by number: the release that ends the hold calls them (no goroutine per ctx).
	contexts    map[uint64]context.CancelFunc
	nextContext uint64
}

func (c *Client) newLock(h *C.ticketing_lock) *Lock {
	// The library's clock first, then Go's: the deadline comes out no earlier than the
	// library's (by the nanoseconds between the two reads), so a ctx that ends at it
	// never ends before the lock's deadline.
	now := C.ticketing_now_ns()
	goNow := time.Now()
	deadline := goNow.Add(time.Duration(C.ticketing_lock_deadline_ns(h) - now))
	keys := make([]Part, int(C.ticketing_lock_key_count(h)))
	for i := range keys {
		var key *C.char
		var count, capacity C.uint32_t
		if C.ticketing_lock_key_at(h, C.size_t(i), &key, &count, &capacity, nil) == C.TICKETING_OK {
			keys[i] = Part{Key: C.GoString(key), Count: uint32(count), Capacity: uint32(capacity)}
		}
	}
	l := &Lock{
		client: c,
		token:  uint64(C.ticketing_lock_token(h)),
		key:    C.GoString(C.ticketing_lock_key(h)),
		owner:  C.GoString(C.ticketing_lock_owner(h)),
		lease:  time.Duration(C.ticketing_lock_lease_ms(h)) * time.Millisecond,
		keys:   keys,

		deadline: deadline,
		h:        h,
	}
	runtime.SetFinalizer(l, func(l *Lock) {
		if l.h != nil {
			C.ticketing_lock_free(l.h) // unreleased: the client's background queue releases it
		}
	})
	return l
}

// Token is the fencing token: larger than every earlier grant's. Pass it to every write
// the critical section makes.
func (l *Lock) Token() uint64 { return l.token }

// Key is the key the lock holds; for a hold of several keys, its first key of capacity
// 1, else its first key (the key Query and the client's records use).
func (l *Lock) Key() string { return l.key }

// Keys are the keys the lock holds, in the order the acquire named them, each with its
// count and capacity: one Part{key, 1, 1} for Acquire's lock. Release ends them all.
func (l *Lock) Keys() []Part { return append([]Part(nil), l.keys...) }

// Deadline is the lock's local deadline: the instant before its request was written plus
// the lease (the server's lease never ends before it). Work under the lock must be done,
// or stopped, by then. It carries a monotonic reading, so it is immune to wall-clock
// steps; it stays the same after a release.
func (l *Lock) Deadline() time.Time { return l.deadline }

// Context is a ctx derived from parent that ends at the lock's Deadline, or as soon as
// the lock is released (a Release that returns an outcome; at once when the lock was
// released already), or earlier when parent ends or cancel is called: ctx.Deadline()
// reports the lock's deadline (parent's when that is earlier), ctx.Err() is
// context.DeadlineExceeded once it passed and context.Canceled after the release. Give
// it to the work done under the lock so that work that overruns the lease stops; call
// cancel when the work is done, as with context.WithDeadline.
func (l *Lock) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithDeadline(parent, l.deadline)
	l.mu.Lock()
	if l.h == nil {
		l.mu.Unlock()
		cancel() // released already: the ctx is over before it is handed out
		return ctx, cancel
	}
	if l.contexts == nil {
		l.contexts = make(map[uint64]context.CancelFunc)
	}
	id := l.nextContext
	l.nextContext++
	l.contexts[id] = cancel
	l.mu.Unlock()
	return ctx, func() {
		l.mu.Lock()
		delete(l.contexts, id)
		l.mu.Unlock()
		cancel()
	}
}

// openContexts is how many ctxs of Context the release would still cancel (tests).
func (l *Lock) openContexts() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.contexts)
}

// Owner is the owner it was granted to.
func (l *Lock) Owner() string { return l.owner }

// Lease is the lease the server granted.
func (l *Lock) Lease() time.Duration { return l.lease }

// Remaining is the time left until the lock's local deadline (the instant before the
// acquire was written plus the lease; the server's lease never ends before it); 0 once
// passed or once released.
func (l *Lock) Remaining() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h == nil {
		return 0
	}
	return time.Duration(C.ticketing_lock_remaining_ms(l.h)) * time.Millisecond
}

// Release releases the lock and waits for the server's answer: Released, NotHolder (the
// lease had already ended) or ReleasedOrExpired. Errors: ErrUnconfirmed (sent, no answer
// within 5 s: the client keeps checking and releases it), ErrUnavailable (never sent),
// ErrQueueFull (never sent), ErrInvalid (released already, or a release of it under
// way); after any but ErrInvalid the lock stays releasable: call Release again. ctx
// ending first is ErrCancelled (wrapping ctx's error): the release goes on in the
// background and the lock is releasable again. An outcome (any of the three) ends the
// ctxs Context made; an error does not.
func (l *Lock) Release(ctx context.Context) (ReleaseOutcome, error) {
	l.mu.Lock()
	if l.h == nil {
		l.mu.Unlock()
		return 0, &Error{Kind: KindInvalid, Message: "the lock " + l.key + " was released already"}
	}
	h := l.h
	var f *C.ticketing_future
	var e *C.ticketing_error
	rc := C.ticketing_lock_release_start(h, &f, &e)
	l.mu.Unlock()
	if rc != C.TICKETING_OK {
		return 0, l.client.failure(rc, e, nil)
	}
	fu := watch(f)
	defer fu.free()
	outcome, err := l.client.released(fu, fu.wait(ctx))
	if err != nil {
		return 0, err
	}
	l.mu.Lock()
	if l.h == h {
		C.ticketing_lock_free(h) // released for good: nothing left for the handle to do
		l.h = nil
	}
	contexts := l.contexts
	l.contexts = nil
	l.mu.Unlock()
	// The hold is over: the ctxs of Context end now (called outside l.mu).
	for _, cancel := range contexts {
		cancel()
	}
	return outcome, nil
}
