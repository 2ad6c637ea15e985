// Package ticketing is the Go client of Ticketing, a lock service: a thin binding over
// the native client's C ABI (include/ticketing.h, the static libticketing.a), so every
// rule — leader first, pipelining, reconnects, an ACQUIRE never resent once written,
// indeterminate outcomes, the release queue — is the native client's. Operations run
// as the C ABI's futures: a goroutine waiting on one holds no OS thread. docs/go.md.
package ticketing

/*
#include <stdlib.h>
#include "ticketing.h"
*/
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// Config is what a client needs.
type Config struct {
	// Addrs are seed addresses "host:port": one live member of the cluster is enough.
	Addrs []string
	// AuthToken is the client secret (at least 16 bytes).
	AuthToken string
	// Owner is sent with every acquire and release (1..255 bytes); empty for the
	// default host-pid-random, unique per client.
	Owner string
	// TLSCAFile is the path of a PEM CA bundle: turns TLS on; empty for plain TCP.
	TLSCAFile string
	// ClusterName is the name of the cluster this client serves (its nodes'
	// TICKETING_CLUSTER_NAME): a node that reports another name or none is sent nothing,
	// and operations end in ErrUnavailable naming both names. Empty for none: the client
	// then compares the fencing domains its nodes report instead (docs/go.md, "One
	// cluster per client").
	ClusterName string
}

// Client is one native client: connections, the release queue and background threads,
// shared by any number of goroutines. One per process is the intended use.
type Client struct {
	mu    sync.RWMutex
	h     *C.ticketing_client
	owner string
}

// Holder is who holds a key, as the leader answered a Query.
type Holder struct {
	Owner     string
	Token     uint64
	LeaseLeft time.Duration // lease left on the leader's clock when it answered
	Waiters   uint32        // acquires queued for the key
}

var (
	abiOnce sync.Once
	abiErr  error
)

// abiChecked compares the library's ABI version with the header's, once.
func abiChecked() error {
	abiOnce.Do(func() {
		// The library's monotonic clock starts here, before any lock's deadline is read.
		C.ticketing_now_ns()
		if v := uint32(C.ticketing_version()); v != C.TICKETING_ABI_VERSION {
			abiErr = &Error{Kind: KindInternal, Message: fmt.Sprintf(
				"libticketing speaks ABI version %d and this module version %d: rebuild with `go generate`",
				v, C.TICKETING_ABI_VERSION)}
		}
	})
	return abiErr
}

// untilDeadline is the time left until deadline, 0 once past.
func untilDeadline(deadline time.Time) time.Duration {
	if left := time.Until(deadline); left > 0 {
		return left
	}
	return 0
}

// answerMargin is how much earlier than ctx's deadline an acquire asks the server to end
// its wait, so that the server's TIMEOUT (a definitive "not acquired") normally arrives
// before the deadline: a tenth of the time left, at most 100 ms.
func answerMargin(left time.Duration) time.Duration {
	if m := left / 10; m < 100*time.Millisecond {
		return m
	}
	return 100 * time.Millisecond
}

// LibraryVersion is the native library's release, e.g. "0.2.0".
func LibraryVersion() string { return C.GoString(C.ticketing_version_string()) }

// New creates a client. It does no network I/O: connections are made in the
// background, and an unreachable server is an ErrUnavailable of the first operation.
// Errors: ErrConfig (the message names the Config field), ErrInvalid.
func New(cfg Config) (*Client, error) {
	if err := abiChecked(); err != nil {
		return nil, err
	}
	texts := append(append([]string{}, cfg.Addrs...), cfg.Owner, cfg.TLSCAFile, cfg.ClusterName)
	for i, s := range texts {
		if strings.IndexByte(s, 0) >= 0 {
			field := fmt.Sprintf("Config.Addrs[%d]", i)
			switch i - len(cfg.Addrs) {
			case 0:
				field = "Config.Owner"
			case 1:
				field = "Config.TLSCAFile"
			case 2:
				field = "Config.ClusterName"
			}
			return nil, &Error{Kind: KindConfig, Message: fmt.Sprintf("%s %q contains a NUL byte", field, s)}
		}
	}
	addrs := make([]*C.char, len(cfg.Addrs)+1)
	for i, a := range cfg.Addrs {
		addrs[i] = C.CString(a)
	}
	defer func() {
		for _, p := range addrs {
			C.free(unsafe.Pointer(p))
		}
	}()
	token := C.CBytes([]byte(cfg.AuthToken))
	defer C.free(token)
	var owner, ca *C.char
	if cfg.Owner != "" {
		owner = C.CString(cfg.Owner)
		defer C.free(unsafe.Pointer(owner))
	}
	if cfg.TLSCAFile != "" {
		ca = C.CString(cfg.TLSCAFile)
		defer C.free(unsafe.Pointer(ca))
	}
	var name *C.char
	if cfg.ClusterName != "" {
		name = C.CString(cfg.ClusterName)
		defer C.free(unsafe.Pointer(name))
	}
	binding := C.CString("go")
	defer C.free(unsafe.Pointer(binding))
	var h *C.ticketing_client
	var e *C.ticketing_error
	rc := C.ticketing_client_new_named(binding, name, &addrs[0], C.size_t(len(cfg.Addrs)), (*C.uint8_t)(token),
		C.size_t(len(cfg.AuthToken)), owner, ca, &h, &e)
	if rc != C.TICKETING_OK {
		return nil, (*Client)(nil).failure(rc, e, nil)
	}
	return &Client{h: h, owner: C.GoString(C.ticketing_client_owner(h))}, nil
}

// WithOwner is a new handle on the same client (connections, release queue) that
// acquires and releases as owner: one owner per logical caller when Resolve must tell an
// indeterminate acquire's grant from another grant to the same owner. Close it too.
func (c *Client) WithOwner(owner string) (*Client, error) {
	o, err := cString("owner", owner)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(o))
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.h == nil {
		return nil, closedError()
	}
	var h *C.ticketing_client
	var e *C.ticketing_error
	if rc := C.ticketing_client_with_owner(c.h, o, &h, &e); rc != C.TICKETING_OK {
		return nil, c.failure(rc, e, nil)
	}
	return &Client{h: h, owner: C.GoString(C.ticketing_client_owner(h))}, nil
}

// Owner is the owner this client acquires as.
func (c *Client) Owner() string { return c.owner }

// closeTimeout is how long Close waits for the releases still to make.
const closeTimeout = 5 * time.Second

// Close waits until every release the client still has to make is finished (at most
// 5 s), then frees the native client. Locks taken through it stay valid; any later call
// on the client is ErrInvalid. A second Close does nothing.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.h == nil {
		return nil
	}
	var e *C.ticketing_error
	rc := C.ticketing_client_close(c.h, millis(closeTimeout), nil, &e)
	C.ticketing_client_free(c.h)
	c.h = nil
	if rc != C.TICKETING_OK {
		return c.failure(rc, e, nil)
	}
	return nil
}

// cString copies a key for the C ABI; a NUL inside is refused (C would cut it there).
func cString(name, s string) (*C.char, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, &Error{Kind: KindInvalid, Message: fmt.Sprintf("%s %q contains a NUL byte", name, s)}
	}
	return C.CString(s), nil
}

// startGate lets at most GOMAXPROCS goroutines into a native start at once. A cgo call
// that lasts (the native client's locks, a busy machine's preemption) keeps its OS
// thread, and the Go scheduler starts another thread for the goroutines behind it: a
// burst of 10,000 starts could leave hundreds of threads. Gated, the others park here.
var startGate = make(chan struct{}, runtime.GOMAXPROCS(0))

// start runs one ticketing_*_start under the client's read lock (Close waits for it).
func (c *Client) start(run func(h *C.ticketing_client, f **C.ticketing_future, e **C.ticketing_error) C.int) (*future, error) {
	startGate <- struct{}{}
	defer func() { <-startGate }()
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.h == nil {
		return nil, closedError()
	}
	var f *C.ticketing_future
	var e *C.ticketing_error
	if rc := run(c.h, &f, &e); rc != C.TICKETING_OK {
		return nil, c.failure(rc, e, nil)
	}
	return watch(f), nil
}

// Acquire acquires key for lease (whole seconds, 1 s to 250 s), queueing at most
// min(wait, ctx's deadline) (0 is one immediate try; at most 300 s). Arguments out of
// these limits are ErrInvalid at once, whatever ctx's deadline: nothing is sent.
//
// On success the *Lock is held: pass Lock.Token() to every write of the critical
// section, then Release it. Definitive errors, the key NOT held by this call: ErrBusy,
// ErrTimeout, ErrNotLeader, ErrInvalid, ErrOverloaded, ErrUnavailable, ErrCancelled
// (ctx ended before the request was written). *IndeterminateError: the key MAY be held;
// do not enter the critical section. Cancelling ctx after the request was written ends
// the call at once with an *IndeterminateError of cause "cancelled" (wrapping ctx's
// error): a grant that comes anyway is released by the client, unless Resolve adopts it.
// ctx's deadline bounds the wait: the server is asked to end it shortly before the
// deadline (ErrTimeout), and its answer gets up to 1 s past the deadline to arrive.
func (c *Client) Acquire(ctx context.Context, key string, lease, wait time.Duration) (*Lock, error) {
	k, err := cString("key", key)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(k))
	// The caller's own arguments, checked by the native client's rule before ctx's
	// deadline shortens the wait below: a wait out of its limits is ErrInvalid (naming
	// it) whatever the deadline, and nothing is sent.
	var refused *C.ticketing_error
	if rc := C.ticketing_acquire_check(k, nanos(lease), nanos(wait), &refused); rc != C.TICKETING_OK {
		return nil, c.failure(rc, refused, nil)
	}
	return c.acquired(ctx, wait, func(h *C.ticketing_client, wait C.int64_t, f **C.ticketing_future, e **C.ticketing_error) C.int {
		return C.ticketing_acquire_start(h, k, nanos(lease), wait, f, e)
	})
}

// acquired starts an acquire (Acquire's, or a hold's) whose wait ctx's deadline bounds
// — begin gets the wait to send — and waits for its lock as Acquire says.
func (c *Client) acquired(ctx context.Context, wait time.Duration,
	begin func(h *C.ticketing_client, wait C.int64_t, f **C.ticketing_future, e **C.ticketing_error) C.int) (*Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, &Error{Kind: KindCancelled, Message: "ctx ended before the acquire started; nothing was sent",
			ctxErr: err}
	}
	bounded := false
	if deadline, ok := ctx.Deadline(); ok {
		if left := untilDeadline(deadline); left < wait {
			wait, bounded = left-answerMargin(left), true
		}
	}
	fu, err := c.start(func(h *C.ticketing_client, f **C.ticketing_future, e **C.ticketing_error) C.int {
		return begin(h, nanos(wait), f, e)
	})
	if err != nil {
		return nil, err
	}
	defer fu.free()
	var ctxErr error
	if bounded {
		ctxErr = fu.waitBounded(ctx)
	} else {
		ctxErr = fu.wait(ctx)
	}
	var lock *C.ticketing_lock
	var e *C.ticketing_error
	if rc := C.ticketing_future_get_lock(fu.f, &lock, &e); rc != C.TICKETING_OK {
		return nil, c.failure(rc, e, ctxErr)
	}
	return c.newLock(lock), nil
}

// nanos is a lease or a wait in the C ABI's nanoseconds, exactly: the native library
// alone checks them (a lease is whole seconds, a wait at most 300 s), alike for
// every language.
func nanos(d time.Duration) C.int64_t {
	return C.int64_t(d)
}

// millis is a local timeout (a resolve's, a close's) in the C ABI's whole milliseconds,
// a sub-millisecond rest rounded up as every binding rounds it (docs/architecture.md):
// a timeout never ends before the duration asked for.
func millis(d time.Duration) C.int64_t {
	ms := d / time.Millisecond
	if d%time.Millisecond > 0 {
		ms++
	}
	return C.int64_t(ms)
}

// WithLock acquires key (as Acquire), runs fn with the lock and a ctx that ends at the
// lock's local deadline or its release (Lock.Context: stop the work when it ends), and
// releases the lock when fn returns or panics. It returns fn's error; else the release's
// error, or ErrNotHolder when the lease had ended before the release (only the fencing
// token protected the writes). The release is not cancelled by ctx (it is bounded by
// the client's 5 s release deadline).
func (c *Client) WithLock(ctx context.Context, key string, lease, wait time.Duration,
	fn func(ctx context.Context, lock *Lock) error) error {
	lock, err := c.Acquire(ctx, key, lease, wait)
	if err != nil {
		return err
	}
	return lock.run(ctx, fn)
}

// run is the scoped forms' body: fn with the lock's Context, then the release.
func (l *Lock) run(ctx context.Context, fn func(ctx context.Context, lock *Lock) error) (err error) {
	defer func() {
		outcome, rerr := l.Release(context.Background())
		if err != nil {
			return
		}
		if rerr != nil {
			err = rerr
		} else if outcome == NotHolder {
			err = &Error{Kind: KindNotHolder, Message: fmt.Sprintf(
				"the lease of %s (token %d) had ended before the release: another may have held it meanwhile",
				l.key, l.token)}
		}
	}()
	held, cancel := l.Context(ctx)
	defer cancel()
	return fn(held, l)
}

// Query says who holds key, linearizably (the leader answers): a *Holder, or nil when
// the key is free. Errors: ErrUnavailable, ErrNoAnswer, ErrInvalid, ErrCancelled (ctx
// ended), ...
func (c *Client) Query(ctx context.Context, key string) (*Holder, error) {
	if err := ctx.Err(); err != nil {
		return nil, &Error{Kind: KindCancelled, Message: "ctx ended before the query started", ctxErr: err}
	}
	k, err := cString("key", key)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(k))
	fu, err := c.start(func(h *C.ticketing_client, f **C.ticketing_future, e **C.ticketing_error) C.int {
		return C.ticketing_query_start(h, k, f, e)
	})
	if err != nil {
		return nil, err
	}
	defer fu.free()
	ctxErr := fu.wait(ctx)
	var held C.int
	var holder C.ticketing_holder
	var e *C.ticketing_error
	if rc := C.ticketing_future_get_query(fu.f, &held, &holder, &e); rc != C.TICKETING_OK {
		return nil, c.failure(rc, e, ctxErr)
	}
	if held == 0 {
		return nil, nil
	}
	return &Holder{
		Owner:     C.GoStringN(&holder.owner[0], C.int(holder.owner_len)),
		Token:     uint64(holder.token),
		LeaseLeft: time.Duration(holder.lease_left_ms) * time.Millisecond,
		Waiters:   uint32(holder.waiters),
	}, nil
}

// Release releases key held by this client's owner under token (a token kept
// elsewhere; Lock.Release is the usual way). Outcomes and errors as Lock.Release.
func (c *Client) Release(ctx context.Context, key string, token uint64) (ReleaseOutcome, error) {
	k, err := cString("key", key)
	if err != nil {
		return 0, err
	}
	defer C.free(unsafe.Pointer(k))
	fu, err := c.start(func(h *C.ticketing_client, f **C.ticketing_future, e **C.ticketing_error) C.int {
		return C.ticketing_release_start(h, k, C.uint64_t(token), f, e)
	})
	if err != nil {
		return 0, err
	}
	defer fu.free()
	return c.released(fu, fu.wait(ctx))
}

// released reads a ready release future, of Lock.Release or of Client.Release (ctxErr:
// its ctx's error when the ctx ended the wait).
func (c *Client) released(fu *future, ctxErr error) (ReleaseOutcome, error) {
	var outcome C.int
	var e *C.ticketing_error
	if rc := C.ticketing_future_get_release(fu.f, &outcome, &e); rc != C.TICKETING_OK {
		return 0, c.failure(rc, e, ctxErr)
	}
	return ReleaseOutcome(outcome), nil
}
