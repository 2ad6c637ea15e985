// The lock's own deadline against a real server: Lock.Deadline is the instant before the
// request was written plus the lease, Lock.Context ends at it (and not before) or at the
// release, and the scoped forms hand their function such a ctx.

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

func TestTheLocksContextEndsAtTheRelease(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	c := newClient(t, s, "released")
	lock, err := c.Acquire(ctx, "released:seat", 30*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	held, cancel := lock.Context(ctx)
	defer cancel()
	parent, stopParent := context.WithCancel(ctx)
	defer stopParent()
	child, cancelChild := lock.Context(parent)
	defer cancelChild()
	if held.Err() != nil || child.Err() != nil || ticketing.OpenContexts(lock) != 2 {
		t.Fatalf("before the release: %v, %v, %d open", held.Err(), child.Err(), ticketing.OpenContexts(lock))
	}
	outcome, err := lock.Release(ctx)
	if err != nil || outcome != ticketing.Released {
		t.Fatalf("release: %v, %v", outcome, err)
	}
	// Ended by the release itself, 30 s before the deadline: no wait.
	for name, ended := range map[string]context.Context{"held": held, "child": child} {
		select {
		case <-ended.Done():
		default:
			t.Fatalf("%s: the ctx is not done once Release returned", name)
		}
		if !errors.Is(ended.Err(), context.Canceled) {
			t.Fatalf("%s: after the release %v, want context.Canceled", name, ended.Err())
		}
	}
	if n := ticketing.OpenContexts(lock); n != 0 {
		t.Fatalf("%d ctxs left after the release", n)
	}
	// A ctx of a lock released already is over when it is handed out.
	late, cancelLate := lock.Context(ctx)
	select {
	case <-late.Done():
	default:
		t.Fatal("Context after the release: not done")
	}
	if !errors.Is(late.Err(), context.Canceled) || ticketing.OpenContexts(lock) != 0 {
		t.Fatalf("Context after the release: %v, %d open", late.Err(), ticketing.OpenContexts(lock))
	}
	cancelLate()
}

func TestAReleaseCancelledByItsCtxLeavesTheLocksContextOpen(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	c := newClient(t, s, "cancelled")
	lock, err := c.Acquire(ctx, "cancelled:seat", 30*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	held, cancel := lock.Context(ctx)
	defer cancel()
	gone, stop := context.WithCancel(ctx)
	stop()
	// The release starts, then its ctx (ended already) cancels the wait for the answer,
	// unless the answer was there first: either way Release says which.
	if _, err := lock.Release(gone); err != nil {
		if !errors.Is(err, ticketing.ErrCancelled) {
			t.Fatalf("a release with an ended ctx: %v", err)
		}
		if held.Err() != nil || ticketing.OpenContexts(lock) != 1 {
			t.Fatalf("an error that leaves the lock releasable ended its ctx: %v, %d open",
				held.Err(), ticketing.OpenContexts(lock))
		}
		if _, err := lock.Release(ctx); err != nil {
			t.Fatalf("the release again: %v", err)
		}
	}
	if !errors.Is(held.Err(), context.Canceled) || ticketing.OpenContexts(lock) != 0 {
		t.Fatalf("after the release's outcome: %v, %d open", held.Err(), ticketing.OpenContexts(lock))
	}
}

func TestTheCancelOfTheLocksContextForgetsIt(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	c := newClient(t, s, "forget")
	lock, err := c.Acquire(ctx, "forget:seat", 30*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	for i := 0; i < 1000; i++ {
		_, cancel := lock.Context(ctx)
		cancel()
	}
	if n := ticketing.OpenContexts(lock); n != 0 {
		t.Fatalf("%d ctxs kept after 1000 Context and cancel", n)
	}
	first, cancelFirst := lock.Context(ctx)
	second, cancelSecond := lock.Context(ctx)
	defer cancelSecond()
	cancelFirst()
	cancelFirst() // a second call does nothing, as context's own cancel
	if n := ticketing.OpenContexts(lock); n != 1 ||
		!errors.Is(first.Err(), context.Canceled) || second.Err() != nil {
		t.Fatalf("one of two cancelled: %d open, %v, %v", n, first.Err(), second.Err())
	}
	// A parent that is cancelled still ends its ctx, as before.
	parent, stopParent := context.WithCancel(ctx)
	child, cancelChild := lock.Context(parent)
	defer cancelChild()
	stopParent()
	<-child.Done() // parent's cancel propagates before it returns; never blocks
	if !errors.Is(child.Err(), context.Canceled) || second.Err() != nil {
		t.Fatalf("after the parent's cancel: %v, the other %v", child.Err(), second.Err())
	}
}

func TestTheScopedFormsCtxEndsAtAReleaseInsideAndAfterTheyReturn(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	c := newClient(t, s, "scoped-release")
	var inside context.Context
	err := c.WithLock(ctx, "scoped-release:seat", 30*time.Second, 0,
		func(ctx context.Context, l *ticketing.Lock) error {
			inside = ctx
			if ctx.Err() != nil {
				t.Errorf("WithLock's ctx ended before anything: %v", ctx.Err())
			}
			return nil
		})
	if err != nil || !errors.Is(inside.Err(), context.Canceled) {
		t.Fatalf("WithLock: %v, its ctx after it returned %v", err, inside.Err())
	}
	// A function that releases the lock itself: its ctx ends at that release.
	err = c.WithLockPermits(ctx, []ticketing.Part{{Key: "scoped-release:stock", Count: 2, Capacity: 5}},
		30*time.Second, 0, func(ctx context.Context, l *ticketing.Lock) error {
			if _, err := l.Release(context.Background()); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
			default:
				t.Error("WithLockPermits's ctx not done after the function released the lock")
			}
			if !errors.Is(ctx.Err(), context.Canceled) {
				t.Errorf("WithLockPermits's ctx after the release: %v", ctx.Err())
			}
			return nil
		})
	// The scoped release then finds the lock released already.
	if !errors.Is(err, ticketing.ErrInvalid) {
		t.Fatalf("WithLockPermits after a release inside: %v", err)
	}
	if h := holder(t, c, "scoped-release:stock"); h != nil {
		t.Fatalf("the stock held after WithLockPermits: %+v", h)
	}
}
