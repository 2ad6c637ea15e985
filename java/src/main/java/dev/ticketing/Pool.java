// Pool: a key read as a pool of permits, as the leader answered.
package dev.ticketing;

import java.time.Duration;
import java.util.List;

/**
 * A key as a pool of permits ({@link Client#pool(String)}), linearizably: its capacity (0
 * when nobody holds the key or waits for it), the permits in use, the holds on it, the
 * requests waiting for it and how long the first of them has waited, and its oldest
 * holds (at most 8), oldest first.
 */
public record Pool(int capacity, int inUse, int holds, int waiters, Duration oldestWait, List<Holding> holders) {
    /** Keeps an unmodifiable copy of the holders. */
    public Pool {
        holders = List.copyOf(holders);
    }

    /**
     * One hold in a {@link Pool}: its owner and fencing token, the permits of the key it
     * holds, and the lease left on the leader's clock when it answered.
     */
    public record Holding(String owner, long token, int count, Duration leaseLeft) {}
}
