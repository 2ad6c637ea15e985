// A key read as a pool: its capacity, permits in use, holds and waiters, the oldest wait
// and the oldest holds (Client.Pool, over ticketing_pool_start).

package ticketing

/*
#include <stdlib.h>
#include "ticketing.h"
*/
import "C"

import (
	"context"
	"time"
	"unsafe"
)

// Pool is a key as a pool of permits, as the leader answered Client.Pool.
type Pool struct {
	// Capacity is the key's permits; 0 when nobody holds the key or waits for it.
	Capacity uint32
	// InUse is the permits held.
	InUse uint32
	// Holds is how many holds are on the key.
	Holds uint32
	// Waiters is how many requests wait for it.
	Waiters uint32
	// OldestWait is how long the first of them has waited.
	OldestWait time.Duration
	// Holders are the oldest holds, oldest first (at most 8).
	Holders []PoolHolder
}

// PoolHolder is one hold of a Pool.
type PoolHolder struct {
	Owner     string
	Token     uint64
	Count     uint32        // permits of the key it holds
	LeaseLeft time.Duration // lease left on the leader's clock when it answered
}

// Pool reads key as a pool, linearizably (the leader answers). Errors are Query's:
// ErrUnavailable, ErrNoAnswer, ErrInvalid, ErrCancelled (ctx ended), ...
func (c *Client) Pool(ctx context.Context, key string) (Pool, error) {
	if err := ctx.Err(); err != nil {
		return Pool{}, &Error{Kind: KindCancelled, Message: "ctx ended before the pool read started", ctxErr: err}
	}
	k, err := cString("key", key)
	if err != nil {
		return Pool{}, err
	}
	defer C.free(unsafe.Pointer(k))
	fu, err := c.start(func(h *C.ticketing_client, f **C.ticketing_future, e **C.ticketing_error) C.int {
		return C.ticketing_pool_start(h, k, f, e)
	})
	if err != nil {
		return Pool{}, err
	}
	defer fu.free()
	ctxErr := fu.wait(ctx)
	var info C.ticketing_pool_info
	var e *C.ticketing_error
	if rc := C.ticketing_future_get_pool(fu.f, &info, &e); rc != C.TICKETING_OK {
		return Pool{}, c.failure(rc, e, ctxErr)
	}
	p := Pool{
		Capacity:   uint32(info.capacity),
		InUse:      uint32(info.in_use),
		Holds:      uint32(info.holds),
		Waiters:    uint32(info.waiters),
		OldestWait: time.Duration(info.oldest_wait_ms) * time.Millisecond,
		Holders:    make([]PoolHolder, int(info.holders_len)),
	}
	for i := range p.Holders {
		h := &info.holders[i]
		p.Holders[i] = PoolHolder{
			Owner:     C.GoStringN(&h.owner[0], C.int(h.owner_len)),
			Token:     uint64(h.token),
			Count:     uint32(h.count),
			LeaseLeft: time.Duration(h.lease_left_ms) * time.Millisecond,
		}
	}
	return p, nil
}
