// Places in line on their way from the client's threads to each hold's listener: one
// native callback for the whole library, and per hold the latest place and its delivery.
package dev.ticketing;

import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executor;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Consumer;

/**
 * The C ABI calls one {@link #CALLBACK} (kept for the life of the class: JNA holds
 * callbacks weakly) with each waiting hold's place and the context this class gave that
 * hold, an id in {@link #WAITING}. The callback never blocks and runs no program code:
 * it keeps the place as the hold's latest and, unless a delivery is under way already,
 * hands one to the listener's executor. A delivery gives the listener the latest place,
 * so places reach it one at a time, in order; one slower than the line skips the places
 * it missed. No thread is kept per waiting hold: an entry in a map.
 */
final class Places {
    private Places() {}

    private static final ConcurrentHashMap<Long, Sink> WAITING = new ConcurrentHashMap<>();
    private static final AtomicLong IDS = new AtomicLong();
    static final NativeLib.PlaceCallback CALLBACK = Places::placed;

    static {
        NativeLib.keepAttached(CALLBACK);
    }

    /** One waiting hold's listener, its executor and the place not yet delivered. */
    static final class Sink {
        final long id = IDS.incrementAndGet();
        private final Consumer<Place> listener;
        private final Executor executor;
        private final AtomicReference<Place> latest = new AtomicReference<>();
        private final AtomicBoolean delivering = new AtomicBoolean();
        private volatile boolean ended;

        private Sink(Consumer<Place> listener, Executor executor) {
            this.listener = listener;
            this.executor = executor;
        }

        private void offer(Place place) {
            latest.set(place);
            schedule();
        }

        private void schedule() {
            if (!delivering.compareAndSet(false, true)) {
                return; // the delivery under way takes the latest place
            }
            try {
                executor.execute(this::deliver);
            } catch (RejectedExecutionException rejected) {
                delivering.set(false); // an executor shut down: its places are dropped
            }
        }

        private void deliver() {
            Place place = latest.getAndSet(null);
            if (place != null && !ended) {
                try {
                    listener.accept(place);
                } catch (RuntimeException | Error ignored) {
                    // The listener's own failure: the hold goes on.
                }
            }
            delivering.set(false);
            if (latest.get() != null && !ended) {
                schedule(); // a place came while the listener ran
            }
        }

        /** The hold's future is ready: no place comes any more, and none is delivered from now on. */
        void end() {
            ended = true;
            WAITING.remove(id);
        }
    }

    /** A new waiting hold's sink, registered before the hold starts (its first place may come at once). */
    static Sink register(Consumer<Place> listener, Executor executor) {
        Sink sink = new Sink(listener, executor);
        WAITING.put(sink.id, sink);
        return sink;
    }

    /** The callback, on a client thread: must not block, and nothing may cross into the native caller. */
    private static void placed(int ahead, int grantsPerKs, long ctx) {
        try {
            Sink sink = WAITING.get(ctx);
            if (sink != null) {
                sink.offer(new Place(Integer.toUnsignedLong(ahead), Integer.toUnsignedLong(grantsPerKs)));
            }
        } catch (Throwable ignored) {
            // only an executor's own failure could come here; the place is dropped
        }
    }
}
