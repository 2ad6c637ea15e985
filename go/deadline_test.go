// The lock's own deadline against a real server: Lock.Deadline is the instant before the
// request was written plus the lease, Lock.Context ends at it (and not before), and the
// scoped forms hand their function such a ctx.

package ticketing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	ticketing "github.com/ticketing-lock/ticketing/go"
)

func TestTheLocksContextEndsAtItsDeadlineAndNotBefore(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	c := newClient(t, s, "deadline")
	before := time.Now()
	lock, err := c.Acquire(ctx, "deadline:seat", time.Second, 0)
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	// The instant before the request was written, plus the lease.
	deadline := lock.Deadline()
	if deadline.Before(before.Add(time.Second)) || deadline.After(after.Add(time.Second)) {
		t.Fatalf("deadline %v after the acquire's start, %v after its return; lease 1 s",
			deadline.Sub(before), deadline.Sub(after))
	}
	held, cancel := lock.Context(ctx)
	defer cancel()
	if d, ok := held.Deadline(); !ok || !d.Equal(deadline) {
		t.Fatalf("ctx.Deadline() %v %v, the lock's %v", d, ok, deadline)
	}
	if held.Err() != nil && time.Now().Before(deadline) {
		t.Fatalf("ended before the deadline: %v", held.Err())
	}
	select {
	case <-held.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the lock's ctx did not end within 20 s of a 1 s lease")
	}
	if now := time.Now(); now.Before(deadline) {
		t.Fatalf("the ctx ended %v before the lock's deadline", deadline.Sub(now))
	}
	if !errors.Is(held.Err(), context.DeadlineExceeded) || lock.Remaining() != 0 {
		t.Fatalf("after the deadline: %v, %v remaining", held.Err(), lock.Remaining())
	}
	// A parent that ends sooner ends it sooner.
	second, err := c.Acquire(ctx, "deadline:other", 30*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	parent, stop := context.WithTimeout(ctx, time.Second)
	defer stop()
	short, cancelShort := second.Context(parent)
	defer cancelShort()
	if d, _ := short.Deadline(); !d.Before(second.Deadline()) {
		t.Fatalf("a 1 s parent: ctx deadline %v, lock's %v", d, second.Deadline())
	}
	granted := second.Deadline()
	if _, err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !second.Deadline().Equal(granted) {
		t.Fatalf("the deadline changed with the release: %v, then %v", granted, second.Deadline())
	}
}

func TestTheScopedFormsPassACtxEndingAtTheLocksDeadline(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	c := newClient(t, s, "scoped")
	// Work that overruns a 1 s lease learns it from its ctx.
	var inside context.Context
	err := c.WithLock(ctx, "scoped:seat", time.Second, 0, func(ctx context.Context, l *ticketing.Lock) error {
		inside = ctx
		if d, ok := ctx.Deadline(); !ok || !d.Equal(l.Deadline()) {
			t.Errorf("WithLock's ctx deadline %v %v, the lock's %v", d, ok, l.Deadline())
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Second):
			t.Error("WithLock's ctx did not end within 20 s of a 1 s lease")
		}
		if time.Now().Before(l.Deadline()) {
			t.Error("WithLock's ctx ended before the lock's deadline")
		}
		return ctx.Err()
	})
	if !errors.Is(err, context.DeadlineExceeded) || inside == nil {
		t.Fatalf("WithLock returned %v", err)
	}
	// A function that returns in time: its ctx is cancelled once it returned.
	var keys []ticketing.Part
	err = c.WithLockAll(ctx, []string{"scoped:a", "scoped:b"}, 30*time.Second, 0,
		func(ctx context.Context, l *ticketing.Lock) error {
			inside, keys = ctx, l.Keys()
			if d, ok := ctx.Deadline(); !ok || !d.Equal(l.Deadline()) || ctx.Err() != nil {
				t.Errorf("WithLockAll's ctx: deadline %v %v (lock's %v), %v", d, ok, l.Deadline(), ctx.Err())
			}
			return nil
		})
	if err != nil || len(keys) != 2 || !errors.Is(inside.Err(), context.Canceled) {
		t.Fatalf("WithLockAll: %v, keys %+v, ctx after it %v", err, keys, inside.Err())
	}
	if h := holder(t, c, "scoped:b"); h != nil {
		t.Fatalf("scoped:b held after WithLockAll: %+v", h)
	}
}
