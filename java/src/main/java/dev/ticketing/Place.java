// Place: a waiting hold's place in line, and the wait it lets one estimate.
package dev.ticketing;

import java.time.Duration;
import java.util.Optional;

/**
 * A waiting hold's place in line ({@link Hold#onPlace}): {@code ahead} requests before it
 * in the longest of its keys' queues, and {@code grantsPerKs} thousandths of a grant per
 * second that key saw lately (0: not measured yet).
 */
public record Place(long ahead, long grantsPerKs) {
    /** Grants per second the key saw lately (0 while not measured yet). */
    public double grantsPerSecond() {
        return grantsPerKs / 1000.0;
    }

    /**
     * The estimated wait, {@code ahead × 1000 ÷ grantsPerKs} seconds (to the nanosecond,
     * rounded down); empty while the grant rate is not measured yet ({@code grantsPerKs}
     * 0).
     */
    public Optional<Duration> estimatedWait() {
        if (grantsPerKs <= 0) {
            return Optional.empty();
        }
        long thousandths = ahead * 1000; // ahead and grantsPerKs are at most 2^32 - 1: no overflow
        long seconds = thousandths / grantsPerKs;
        long nanos = (thousandths % grantsPerKs) * 1_000_000_000L / grantsPerKs;
        return Optional.of(Duration.ofSeconds(seconds, nanos));
    }
}
