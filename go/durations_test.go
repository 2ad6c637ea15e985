// The local timeouts (a resolve's, a close's) in the C ABI's milliseconds by the one rule
// of every binding (docs/architecture.md): whole milliseconds, a sub-millisecond rest
// rounded up, so a timeout never ends before the duration asked for.

package ticketing

import (
	"testing"
	"time"
)

func TestALocalTimeoutIsWholeMillisecondsRoundedUp(t *testing.T) {
	for _, c := range []struct {
		d  time.Duration
		ms int64
	}{
		{0, 0},
		{time.Nanosecond, 1},
		{time.Millisecond, 1},
		{1500 * time.Microsecond, 2},
		{1999999 * time.Nanosecond, 2},
		{15 * time.Second, 15000},
		{-1500 * time.Microsecond, -1}, // refused by the library as negative
	} {
		if got := int64(millis(c.d)); got != c.ms {
			t.Errorf("millis(%v) = %d ms, want %d", c.d, got, c.ms)
		}
	}
}
