// Hold: the builder of a counted and multi-key hold — its keys, permits and place
// listener — and its acquire, blocking or as a CompletableFuture.
package dev.ticketing;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import java.util.function.Consumer;

/**
 * A hold being built: {@link Client#hold(Duration, Duration)}, then {@link #key} and
 * {@link #permits} for each key (1 to 16 keys), then {@link #acquire()} or {@link
 * #acquireAsync()}: one {@link Lock} of every key, one fencing token, whose release ends
 * them all.
 *
 * <pre>{@code
 * try (Lock lock = client.hold(Duration.ofSeconds(30), Duration.ofSeconds(10))
 *         .key("seat:12:1").key("seat:12:2")           // two adjacent seats, exclusively
 *         .permits("stock:sale-7", 2, 100)             // and 2 of a stock of 100
 *         .onPlace(place -> show(place.ahead(), place.estimatedWait()))
 *         .acquire()) {
 *     sell(lock.token());
 * }
 * }</pre>
 *
 * <p>It is granted all at once only when no request that came earlier and names one of
 * its keys still waits and every key has its count free; until then it waits, up to its
 * wait, holding nothing. The oldest waiter is first everywhere, so holds that name the
 * same keys in other orders never deadlock; the price is strict FIFO: a request at the
 * head blocks a later one that would fit. The native library checks every part (a key
 * named twice, a count above its capacity, 17 keys, a capacity other than the key's —
 * the server's message names both numbers) and the outcomes are those of {@link
 * Client#acquire(String, Duration, Duration)}: {@link BusyException}, {@link
 * TimeoutException}, {@link InvalidArgumentException}, {@link IndeterminateException}
 * (resolve it as an acquire), ... A builder may be acquired more than once.
 */
public final class Hold {
    private final Client client;
    private final Duration lease;
    private final Duration wait;
    private final List<Permits> parts = new ArrayList<>();
    private Consumer<Place> listener;
    private Executor listenerExecutor;

    Hold(Client client, Duration lease, Duration wait) {
        this.client = client;
        this.lease = lease;
        this.wait = wait;
    }

    /** The exclusive lock of {@code key}: {@code permits(key, 1, 1)}. */
    public Hold key(String key) {
        return permits(key, 1, 1);
    }

    /** The exclusive lock of each of {@code keys}, in their order. */
    public Hold keys(List<String> keys) {
        if (keys == null) {
            throw Errors.invalid("keys is null");
        }
        for (String key : keys) {
            key(key);
        }
        return this;
    }

    /**
     * {@code count} of the {@code capacity} permits of {@code key} (count 1 to capacity,
     * capacity 1 to 1,000,000, checked by the native library). Every request on a key
     * states its capacity; while the key has holders or waiters the server refuses
     * another. Negative numbers are refused here: the C ABI's are unsigned.
     */
    public Hold permits(String key, int count, int capacity) {
        if (count < 0 || capacity < 0) {
            throw Errors.invalid("permits(" + quoted(key) + ", " + count + ", " + capacity + "): "
                    + (count < 0 ? "count" : "capacity") + " is negative");
        }
        parts.add(new Permits(key, count, capacity));
        return this;
    }

    /**
     * Hears the hold's place in line while it waits — when it queues, then at most once a
     * second while the place changes — on the client's executor ({@code
     * Client.builder().executor}), never on a client thread. Places reach it one at a
     * time, in order; a listener slower than the line gets the latest place and skips
     * those it missed. None is delivered once the hold's outcome is known (one being
     * delivered then may still finish). An exception it throws is ignored.
     */
    public Hold onPlace(Consumer<Place> listener) {
        return onPlace(listener, null);
    }

    /**
     * {@link #onPlace(Consumer)} on {@code executor}: {@code Runnable::run} runs the
     * listener on the client's thread itself, which it then must not block.
     */
    public Hold onPlace(Consumer<Place> listener, Executor executor) {
        if (listener == null) {
            throw Errors.invalid("onPlace: the listener is null");
        }
        this.listener = listener;
        this.listenerExecutor = executor;
        return this;
    }

    /**
     * Sends the hold and waits for the answer: a {@link Lock} of every key ({@link
     * Lock#permits()}), or why not, as {@link Client#acquire(String, Duration, Duration)}
     * (interrupts too). Blocks at most max(wait, 3 s) to put the request on a connection
     * plus wait + 5 s for the answer.
     */
    public Lock acquire() {
        return client.acquireHold(List.copyOf(parts), lease, wait, listener, listenerExecutor);
    }

    /**
     * {@link #acquire()} as a future, completed on the client's executor; cancelling it
     * stops the wait as it stops an acquire's.
     */
    public CompletableFuture<Lock> acquireAsync() {
        return client.acquireHoldAsync(List.copyOf(parts), lease, wait, listener, listenerExecutor);
    }

    private static String quoted(String key) {
        return key == null ? "null" : "\"" + key + "\"";
    }
}
