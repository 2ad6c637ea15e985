// Lock: a held lock — its fencing token, keys, lease and deadline — and its release.
package dev.ticketing;

import java.lang.ref.Cleaner;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;

/**
 * A held lock: the server granted {@link #key()} to {@link #owner()} under fencing token
 * {@link #token()}, larger than every earlier grant's. Pass the token to every write the
 * critical section makes.
 *
 * <p>A lock of a {@link Hold} holds several keys ({@link #keys()}, {@link #permits()}),
 * all under one token; its release ends them all.
 *
 * <p>{@link #close()} releases it, so try-with-resources releases it when the block ends,
 * also on an exception. A lock that becomes unreachable unreleased is released in the
 * background (the native lock's drop); release it instead. Safe to use from any thread.
 */
public final class Lock implements AutoCloseable {
    private static final Cleaner CLEANER = Cleaner.create();

    /** The native lock; 0 once released for good. Freed when the Lock is unreachable. */
    private static final class Handle implements Runnable {
        long lock;

        Handle(long lock) {
            this.lock = lock;
        }

        @Override
        public synchronized void run() {
            if (lock != 0) {
                NativeLib.ticketing_lock_free(lock); // unreleased: the client's background queue releases it
                lock = 0;
            }
        }
    }

    private final Handle handle;
    private final Cleaner.Cleanable cleanable;
    private final Executor executor;
    private final String key;
    private final String owner;
    private final long token;
    private final Duration lease;
    private final List<Permits> permits;
    private final long deadlineNanos;
    private final Instant deadline;
    /** Completed at the deadline; made at the first {@link #expiry()}. */
    private CompletableFuture<Void> expiry;

    Lock(long lock, Executor executor) {
        this.handle = new Handle(lock);
        this.cleanable = CLEANER.register(this, handle);
        this.executor = executor;
        this.key = NativeLib.string(NativeLib.ticketing_lock_key(lock));
        this.owner = NativeLib.string(NativeLib.ticketing_lock_owner(lock));
        this.token = NativeLib.ticketing_lock_token(lock);
        this.lease = Duration.ofMillis(NativeLib.ticketing_lock_lease_ms(lock));
        this.permits = permitsOf(lock);
        // The native deadline is on ticketing_now_ns's monotonic clock; nanoTime read after
        // it makes the offset, so any delay between the two reads moves the deadline later,
        // never earlier.
        long deadlineNs = NativeLib.ticketing_lock_deadline_ns(lock);
        long nativeNow = NativeLib.ticketing_now_ns();
        long javaNow = System.nanoTime();
        Instant wallNow = Instant.now();
        this.deadlineNanos = javaNow + (deadlineNs - nativeNow);
        this.deadline = wallNow.plusNanos(deadlineNs - nativeNow);
    }

    private static List<Permits> permitsOf(long lock) {
        long n = NativeLib.ticketing_lock_key_count(lock);
        List<Permits> permits = new ArrayList<>((int) n);
        for (long i = 0; i < n; i++) {
            long[] key = new long[1];
            int[] count = new int[1];
            int[] capacity = new int[1];
            long[] error = new long[1];
            int kind = NativeLib.ticketing_lock_key_at(lock, i, key, count, capacity, error);
            if (kind != Abi.OK) {
                throw Errors.of(kind, error[0], null);
            }
            permits.add(new Permits(NativeLib.string(key[0]), count[0], capacity[0]));
        }
        return List.copyOf(permits);
    }

    /** The fencing token: larger than every earlier grant's (tokens stay below 2^63). */
    public long token() {
        return token;
    }

    /**
     * The key this lock holds; of a hold's lock, the key its release and {@link
     * Client#query} go by (its first key of capacity 1, else its first key).
     */
    public String key() {
        return key;
    }

    /** Every key this lock holds, in the order the hold named them: one for an acquire's lock. */
    public List<String> keys() {
        return permits.stream().map(Permits::key).toList();
    }

    /**
     * Every key this lock holds with the permits it holds of each and the key's capacity,
     * in the order the hold named them: {@code (key, 1, 1)} for an acquire's lock.
     */
    public List<Permits> permits() {
        return permits;
    }

    /**
     * The local deadline on {@link System#nanoTime()}'s clock (the monotonic clock; compare
     * it with {@code System.nanoTime()}, never with another clock): the instant before the
     * request was written plus the lease. The server's lease never ends before it: work
     * under the lock must be done, or stopped, by then. Fixed at the grant; a release does
     * not move it.
     */
    public long deadlineNanos() {
        return deadlineNanos;
    }

    /**
     * {@link #deadlineNanos()} as a wall-clock Instant, converted once at the grant: for
     * showing and logging. A wall clock can jump; to wait for the deadline use {@link
     * #expiry()}, {@link #remaining()} or {@link #deadlineNanos()}.
     */
    public Instant deadline() {
        return deadline;
    }

    /**
     * A future completed (with null) at the lock's deadline — when {@link
     * System#nanoTime()} reaches {@link #deadlineNanos()}, never before — on the client's
     * executor: stop the work under the lock with it, e.g. {@code
     * lock.expiry().thenRun(worker::cancel)}, or {@code orTimeout}-style races with the
     * work's own future. No thread is kept per lock: one scheduler thread serves every
     * lock. Each call returns a new dependent future (cancelling it cancels nothing else);
     * it completes at the deadline also after a release.
     */
    public CompletableFuture<Void> expiry() {
        synchronized (this) {
            if (expiry == null) {
                expiry = Deadlines.at(deadlineNanos, executor);
            }
            return expiry.copy();
        }
    }

    /** The owner it was granted to. */
    public String owner() {
        return owner;
    }

    /** The lease the server granted. */
    public Duration lease() {
        return lease;
    }

    /**
     * Time left until the lock's local deadline (the instant before the acquire was
     * written plus the lease; the server's lease never ends before it); zero once passed
     * or once released.
     */
    public Duration remaining() {
        synchronized (handle) {
            return handle.lock == 0 ? Duration.ZERO : Duration.ofMillis(NativeLib.ticketing_lock_remaining_ms(handle.lock));
        }
    }

    /** True once the local deadline has passed (or the lock was released): the key may be someone else's now. */
    public boolean isExpired() {
        return remaining().isZero();
    }

    /**
     * Releases the lock and waits for the server's answer: {@link ReleaseOutcome#RELEASED},
     * {@link ReleaseOutcome#NOT_HOLDER} (the lease had already ended) or {@link
     * ReleaseOutcome#RELEASED_OR_EXPIRED}. Throws {@link ReleaseUnconfirmedException},
     * {@link UnavailableException} or {@link ReleaseQueueFullException} when the release is
     * not confirmed (the lock stays releasable: call release again, or drop it and the
     * client's background queue releases it); {@link InvalidArgumentException} when it
     * was released already or a release of it is under way. Interrupted, it throws {@link
     * CancelledException} (the release goes on in the background; the lock stays
     * releasable). Blocks at most 5 s.
     */
    public ReleaseOutcome release() {
        if (Thread.currentThread().isInterrupted()) {
            throw Client.interruptedBeforeStart("release");
        }
        return start().await(this::outcome);
    }

    /** {@link #release()} as a future, completed on the client's executor. */
    public CompletableFuture<ReleaseOutcome> releaseAsync() {
        return start().async(this::outcome, executor, null);
    }

    private Operation start() {
        synchronized (handle) {
            long lock = handle.lock;
            if (lock == 0) {
                throw Errors.invalid("the lock on " + key + " (token " + token + ") was released already");
            }
            return Operation.start((future, error) -> NativeLib.ticketing_lock_release_start(lock, future, error));
        }
    }

    private ReleaseOutcome outcome(long future) {
        int[] outcome = new int[1];
        long[] error = new long[1];
        int kind = NativeLib.ticketing_future_get_release(future, outcome, error);
        if (kind != Abi.OK) {
            throw Errors.of(kind, error[0], null);
        }
        cleanable.clean(); // released for good: nothing left for the native handle to do
        return ReleaseOutcome.of(outcome[0]);
    }

    /**
     * Releases the lock, for try-with-resources; a second close does nothing. Throws what
     * {@link #release()} throws, and {@link NotHolderException} when the lease had ended
     * before the release (the key may have been someone else's meanwhile: only the
     * fencing token protected the writes); thrown from the end of a block that is
     * already failing, these are added to its exception as suppressed. On an interrupted
     * thread it waits for nothing: the release goes to the client's background queue and
     * the interrupt status stays set.
     */
    @Override
    public void close() {
        synchronized (handle) {
            if (handle.lock == 0) {
                return;
            }
        }
        if (Thread.currentThread().isInterrupted()) {
            cleanable.clean();
            return;
        }
        ReleaseOutcome outcome;
        try {
            outcome = release();
        } catch (CancelledException e) {
            if (e.isInterrupted()) {
                cleanable.clean(); // the release goes on; the background queue makes sure of it
                return;
            }
            throw e;
        }
        if (outcome == ReleaseOutcome.NOT_HOLDER) {
            throw new NotHolderException("the lease on " + key + " (token " + token + ") had ended before the "
                    + "release: the key may have been granted to someone else meanwhile; only the fencing token "
                    + "protected the writes", false);
        }
    }

    /** Gives the lock up without waiting: the client's background queue releases it. */
    void abandon() {
        cleanable.clean();
    }

    @Override
    public String toString() {
        String keys = permits.size() == 1 ? "key=" + key : "keys=" + keys();
        return "Lock[" + keys + ", owner=" + owner + ", token=" + token + ", remaining=" + remaining() + "]";
    }
}
