// Permits: one key of a lock, with the permits the lock holds of it and its capacity.
package dev.ticketing;

/**
 * One key a {@link Lock} holds ({@link Lock#permits()}): {@code count} of its {@code
 * capacity} permits; an exclusive key is {@code (key, 1, 1)}.
 */
public record Permits(String key, int count, int capacity) {}
