// The errors: one sentinel per error kind of the C ABI (include/ticketing.h), matched with
// errors.Is; *Error carries the kind, the native client's message and whether a new try
// soon may succeed; *IndeterminateError is the acquire whose outcome is unknown.

package ticketing

/*
#include <stdlib.h>
#include "ticketing.h"
*/
import "C"

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"
)

// Kind is the C ABI's error kind.
type Kind int

// The kinds, as include/ticketing.h numbers them.
const (
	KindBusy          Kind = C.TICKETING_BUSY
	KindTimeout       Kind = C.TICKETING_TIMEOUT
	KindNotLeader     Kind = C.TICKETING_NOT_LEADER
	KindInvalid       Kind = C.TICKETING_INVALID
	KindOverloaded    Kind = C.TICKETING_OVERLOADED
	KindUnavailable   Kind = C.TICKETING_UNAVAILABLE
	KindIndeterminate Kind = C.TICKETING_INDETERMINATE
	KindNoAnswer      Kind = C.TICKETING_NO_ANSWER
	KindUnconfirmed   Kind = C.TICKETING_UNCONFIRMED
	KindQueueFull     Kind = C.TICKETING_QUEUE_FULL
	KindProtocol      Kind = C.TICKETING_PROTOCOL
	KindRefused       Kind = C.TICKETING_REFUSED
	KindConfig        Kind = C.TICKETING_CONFIG
	KindInternal      Kind = C.TICKETING_INTERNAL
	KindCancelled     Kind = C.TICKETING_CANCELLED
	// KindNotHolder is not a kind of the C ABI: WithLock's error when the release found
	// that the lease had ended before it (the outcome NotHolder).
	KindNotHolder Kind = 1000
)

// String is the C ABI's name of the kind ("busy", "timeout", "not_leader", ...;
// "unknown" for a number the library has no kind of).
func (k Kind) String() string {
	if k == KindNotHolder {
		return "not_holder"
	}
	return nameOr(C.ticketing_kind_name(C.int(k)), "unknown")
}

// nameOr is a name from the library's tables (ticketing_kind_name, ...), or other where
// the library has none: its *_name functions return NULL past the end of their table.
func nameOr(name *C.char, other string) string {
	if name == nil {
		return other
	}
	return C.GoString(name)
}

// The sentinels, one per kind: errors.Is(err, ticketing.ErrBusy).
var (
	// ErrBusy: the key is held and the wait was 0 (or its queue is full). Not acquired.
	ErrBusy = errors.New("ticketing: busy")
	// ErrTimeout: the wait ran out before this caller's turn. Not acquired.
	ErrTimeout = errors.New("ticketing: timeout")
	// ErrNotLeader: the node does not lead and did not execute the request. Retry.
	ErrNotLeader = errors.New("ticketing: not leader")
	// ErrInvalid: an argument out of its limits; the message names it. Nothing was sent.
	ErrInvalid = errors.New("ticketing: invalid argument")
	// ErrOverloaded: the server has too many requests pending. Not executed; back off.
	ErrOverloaded = errors.New("ticketing: overloaded")
	// ErrUnavailable: no connection could take the request: nothing was sent.
	ErrUnavailable = errors.New("ticketing: unavailable")
	// ErrIndeterminate: the acquire was sent and no definitive answer came: the key MAY
	// be held. The error is an *IndeterminateError.
	ErrIndeterminate = errors.New("ticketing: indeterminate")
	// ErrNoAnswer: a query was sent and no answer came within 10 s.
	ErrNoAnswer = errors.New("ticketing: no answer")
	// ErrUnconfirmed: no answer to a release within its 5 s deadline.
	ErrUnconfirmed = errors.New("ticketing: release unconfirmed")
	// ErrQueueFull: the client's release queue is full; the release was not sent.
	ErrQueueFull = errors.New("ticketing: release queue full")
	// ErrProtocol: the server broke the protocol.
	ErrProtocol = errors.New("ticketing: protocol error")
	// ErrRefused: the server refused the request; the message says why.
	ErrRefused = errors.New("ticketing: refused")
	// ErrConfig: the Config was refused; the message names what is wrong.
	ErrConfig = errors.New("ticketing: configuration refused")
	// ErrInternal: a bug in libticketing.
	ErrInternal = errors.New("ticketing: internal error")
	// ErrCancelled: the operation was cancelled (its ctx ended) before it was sent.
	ErrCancelled = errors.New("ticketing: cancelled")
	// ErrNotHolder: WithLock's release found that the lease had ended before it: the
	// key may have been granted to another meanwhile; only the fencing token protected
	// the writes.
	ErrNotHolder = errors.New("ticketing: not holder")
)

var sentinels = map[Kind]error{
	KindBusy: ErrBusy, KindTimeout: ErrTimeout, KindNotLeader: ErrNotLeader, KindInvalid: ErrInvalid,
	KindOverloaded: ErrOverloaded, KindUnavailable: ErrUnavailable, KindIndeterminate: ErrIndeterminate,
	KindNoAnswer: ErrNoAnswer, KindUnconfirmed: ErrUnconfirmed, KindQueueFull: ErrQueueFull,
	KindProtocol: ErrProtocol, KindRefused: ErrRefused, KindConfig: ErrConfig, KindInternal: ErrInternal,
	KindCancelled: ErrCancelled, KindNotHolder: ErrNotHolder,
}

// Error is every error of this package: errors.As(err, &e) with e a *ticketing.Error.
type Error struct {
	// Kind is the C ABI's kind.
	Kind Kind
	// Message is the native client's text: what happened and what to do.
	Message string
	// Retryable is true when the request was certainly not executed and a new try soon
	// may succeed (not leader, overloaded, a passing unavailable, a full release queue).
	Retryable bool
	// Leader is, for KindNotLeader, the leader's address when the node knew it.
	Leader string
	// ctxErr is the context's error when the operation was cancelled by its ctx.
	ctxErr error
}

func (e *Error) Error() string {
	return "ticketing: " + e.Kind.String() + ": " + e.Message
}

// Is matches the sentinel of the error's kind.
func (e *Error) Is(target error) bool {
	return target == sentinels[e.Kind]
}

// Unwrap gives the ctx's error (context.Canceled, context.DeadlineExceeded) when the
// operation was cancelled by its ctx.
func (e *Error) Unwrap() error {
	return e.ctxErr
}

// IsRetryable reports whether err is an error of this package after which a new try soon
// may succeed (Error.Retryable).
func IsRetryable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Retryable
}

// IndeterminateError is an acquire that was sent and got no definitive answer (the
// connection was lost, the server could not tell, no answer in time, or its ctx ended
// after it was written): the key MAY be held under a token this program never learned.
// Do not enter the critical section. Resolve finds out without sending it again; when
// nobody resolves it, the client finds out by itself and releases a grant that happened
// anyway (no grant is left orphaned).
type IndeterminateError struct {
	// Err has the kind (KindIndeterminate), the message and Retryable (false).
	Err *Error
	// Cause says why: "connection_lost", "server_unknown", "no_answer",
	// "protocol_violation", "expired_on_arrival" or "cancelled".
	Cause string

	client *Client
	native *nativeError
}

// nativeError owns the C error that ticketing_resolve needs.
type nativeError struct {
	mu sync.Mutex
	p  *C.ticketing_error
}

func (ind *IndeterminateError) Error() string { return ind.Err.Error() }

// Unwrap gives the *Error, so errors.Is(err, ErrIndeterminate) and errors.As(err, &e)
// with e a *Error hold, and through it the ctx's error when its ctx ended.
func (ind *IndeterminateError) Unwrap() error { return ind.Err }

// causeName is the library's name of an indeterminate acquire's cause
// (ticketing_cause_name), "" for none.
func causeName(cause C.int) string {
	return nameOr(C.ticketing_cause_name(cause), "")
}

// Resolve waits until this acquire's grant can no longer happen (its send instant + its
// wait + 5 s), then asks the leader. It returns the *Lock when the grant did happen
// (adopted: use it and release it), (nil, nil) when the key is certainly not held by
// it, and (nil, ind) itself when it is still unknown at ctx's deadline (15 s when ctx
// has none) or when ctx is cancelled. Wraps ticketing_resolve_start.
func (ind *IndeterminateError) Resolve(ctx context.Context) (*Lock, error) {
	if ind.client == nil || ind.native == nil {
		return nil, &Error{Kind: KindInvalid, Message: "this IndeterminateError was not returned by a Client"}
	}
	timeout := 15 * time.Second
	if deadline, ok := ctx.Deadline(); ok {
		timeout = untilDeadline(deadline)
	}
	c := ind.client
	c.mu.RLock()
	if c.h == nil {
		c.mu.RUnlock()
		return nil, closedError()
	}
	ind.native.mu.Lock()
	var f *C.ticketing_future
	var e *C.ticketing_error
	rc := C.ticketing_resolve_start(c.h, ind.native.p, millis(timeout), &f, &e)
	ind.native.mu.Unlock()
	runtime.KeepAlive(ind.native)
	c.mu.RUnlock()
	if rc != C.TICKETING_OK {
		return nil, c.failure(rc, e, nil)
	}
	fu := watch(f)
	defer fu.free()
	_ = fu.wait(ctx)
	var resolution C.int
	var lock *C.ticketing_lock
	rc = C.ticketing_future_get_resolve(f, &resolution, &lock, &e)
	if rc != C.TICKETING_OK {
		return nil, c.failure(rc, e, nil)
	}
	switch resolution {
	case C.TICKETING_HELD:
		return c.newLock(lock), nil
	case C.TICKETING_NOT_HELD:
		return nil, nil
	default:
		return nil, ind
	}
}

// failure turns a failed call's kind and ticketing_error (taken over) into the Go error.
func (c *Client) failure(rc C.int, e *C.ticketing_error, ctxErr error) error {
	err := &Error{Kind: Kind(rc), ctxErr: ctxErr}
	if e == nil {
		err.Message = err.Kind.String()
		return err
	}
	err.Message = C.GoString(C.ticketing_error_message(e))
	err.Retryable = C.ticketing_error_is_retryable(e) != 0
	if leader := C.ticketing_error_leader(e); leader != nil {
		err.Leader = C.GoString(leader)
	}
	if err.Kind != KindIndeterminate {
		C.ticketing_error_free(e)
		if err.Kind != KindCancelled {
			err.ctxErr = nil
		}
		return err
	}
	cause := C.ticketing_error_cause(e)
	if cause != C.TICKETING_CAUSE_CANCELLED {
		err.ctxErr = nil
	}
	native := &nativeError{p: e}
	runtime.SetFinalizer(native, func(n *nativeError) { C.ticketing_error_free(n.p) })
	return &IndeterminateError{Err: err, Cause: causeName(cause), client: c, native: native}
}

func closedError() error {
	return &Error{Kind: KindInvalid, Message: "the client is closed (Client.Close was called)"}
}
