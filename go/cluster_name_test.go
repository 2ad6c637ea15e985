// Config.ClusterName against real servers: a client named as its server's
// TICKETING_CLUSTER_NAME serves, and one named otherwise (or pointed at a server without
// a name) is sent nothing: ErrUnavailable, not retryable, naming both names and the field.

package ticketing_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	ticketing "github.com/ticketing-lock/ticketing/go"
)

// refusalWait is a wait the refusal must not sit out: an unavailability that trying
// again could fix waits up to it for a connection; this one is said without waiting.
const refusalWait = 20 * time.Second

func namedClient(t *testing.T, s *server, name, owner string) *ticketing.Client {
	t.Helper()
	c, err := ticketing.New(ticketing.Config{Addrs: []string{s.addr}, AuthToken: secret, Owner: owner, ClusterName: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// refused acquires through c and checks the refusal: ErrUnavailable, not retryable,
// before the wait ran out, its message holding every one of says.
func refused(t *testing.T, c *ticketing.Client, key string, says ...string) {
	t.Helper()
	started := time.Now()
	_, err := c.Acquire(context.Background(), key, 30*time.Second, refusalWait)
	if !errors.Is(err, ticketing.ErrUnavailable) || ticketing.IsRetryable(err) {
		t.Fatalf("want a lasting ErrUnavailable, got %v", err)
	}
	if took := time.Since(started); took >= refusalWait {
		t.Fatalf("the refusal waited out the wait (%v): %v", took, err)
	}
	for _, word := range says {
		if !strings.Contains(err.Error(), word) {
			t.Errorf("no %q in: %v", word, err)
		}
	}
}

func TestAClientNamedAsItsServerAcquiresAndOneNamedOtherwiseIsSentNothing(t *testing.T) {
	blue := startServer(t, "TICKETING_CLUSTER_NAME=blue")
	ctx := context.Background()
	right := namedClient(t, blue, "blue", "blue-office")
	lock, err := right.Acquire(ctx, "named:seat:1", 30*time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	if outcome, err := lock.Release(ctx); err != nil || outcome != ticketing.Released {
		t.Fatalf("release: %v %v", outcome, err)
	}
	wrong := namedClient(t, blue, "green", "green-office")
	refused(t, wrong, "named:seat:2", `"blue"`, `"green"`, "Config.ClusterName")
	// Nothing was sent: the key was never asked for.
	if h, err := right.Query(ctx, "named:seat:2"); err != nil || h != nil {
		t.Fatalf("named:seat:2: %+v %v", h, err)
	}
}

func TestANamedClientIsSentNothingByAServerWithoutAName(t *testing.T) {
	unnamed := startServer(t)
	c := namedClient(t, unnamed, "green", "green-office")
	refused(t, c, "named:seat:3", `"green"`, "no cluster name", "Config.ClusterName")
}
