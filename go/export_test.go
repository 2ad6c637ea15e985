// What the package's own tests (package ticketing_test) may read of its unexported
// state: how many ctxs of Lock.Context a release would still cancel.

package ticketing

// OpenContexts is l.openContexts for the tests.
func OpenContexts(l *Lock) int { return l.openContexts() }
