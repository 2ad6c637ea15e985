// Holder: who holds a key, as the leader answered a query.
package dev.ticketing;

import java.time.Duration;

/**
 * Who holds a key ({@link Client#query(String)}): the holder's owner and fencing token,
 * the lease left on the leader's clock when it answered, and how many acquires wait.
 */
public record Holder(String owner, long token, Duration leaseLeft, int waiters) {}
