// The futures of the C ABI as Go waits: a callback exported from Go closes a channel,
// so a waiting goroutine parks in the Go scheduler and holds no OS thread.

package ticketing

/*
#cgo CFLAGS: -I${SRCDIR}/../include
#cgo LDFLAGS: -L${SRCDIR}/../target/release -l:libticketing.a -lgcc_s -lutil -lrt -lpthread -lm -ldl
#include <stdint.h>
#include "ticketing.h"
int ticketing_go_set_callback(ticketing_future *future, uintptr_t handle, ticketing_error **error_out);
*/
import "C"

import (
	"context"
	"errors"
	"runtime/cgo"
	"time"
)

// future is one operation of the C ABI under way, and the channel its callback closes.
type future struct {
	f    *C.ticketing_future
	done chan struct{}
}

//export goFutureDone
func goFutureDone(handle C.uintptr_t) {
	h := cgo.Handle(handle)
	close(h.Value().(chan struct{}))
	h.Delete()
}

// watch sets the callback of a future just started. The callback runs exactly once: on
// a client thread, or here when the future is ready already.
func watch(f *C.ticketing_future) *future {
	done := make(chan struct{})
	h := cgo.NewHandle(done)
	if C.ticketing_go_set_callback(f, C.uintptr_t(h), nil) != C.TICKETING_OK {
		// Only a second callback is refused, and this is the first.
		h.Delete()
		panic("ticketing: the future refused its callback")
	}
	return &future{f: f, done: done}
}

// wait parks until the future is ready. When ctx ends first, it cancels the operation by
// the C ABI's rule (ticketing_future_cancel makes the future ready at once) and returns
// ctx's error; the outcome is then the cancelled operation's.
func (fu *future) wait(ctx context.Context) error {
	select {
	case <-fu.done:
		return nil
	case <-ctx.Done():
	}
	C.ticketing_future_cancel(fu.f)
	<-fu.done
	return ctx.Err()
}

// deadlineGrace is how long past ctx's deadline an acquire whose wait that deadline
// bounded still waits for the server's answer before it cancels. The server ends such a
// wait itself at about the deadline; a busy machine may deliver its TIMEOUT a little
// late, and cancelling then would turn a definitive ErrTimeout into an indeterminate.
const deadlineGrace = time.Second

// waitBounded is wait for an acquire whose wait ctx's deadline bounded: when the deadline
// passes first, the server's answer gets deadlineGrace more; an explicit cancel of ctx
// cancels at once, as in wait.
func (fu *future) waitBounded(ctx context.Context) error {
	select {
	case <-fu.done:
		return nil
	case <-ctx.Done():
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		grace := time.NewTimer(deadlineGrace)
		defer grace.Stop()
		select {
		case <-fu.done:
			return nil
		case <-grace.C:
		}
	}
	C.ticketing_future_cancel(fu.f)
	<-fu.done
	return ctx.Err()
}

func (fu *future) free() {
	C.ticketing_future_free(fu.f)
}
