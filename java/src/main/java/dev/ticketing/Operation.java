// One operation of the C ABI under way: its future, the callback that hears it is ready,
// the blocking wait (interruptible, cancelling by the C ABI's rule) and the async form.
package dev.ticketing;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executor;
import java.util.concurrent.ForkJoinPool;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;

/**
 * A {@code ticketing_future} and who still uses it. The callback (one for the whole
 * library, on a client thread) only signals: the outcome is taken on the waiting thread
 * (a blocking call) or on the client's executor (an async one), so no program code ever
 * runs on the client's threads, and a waiting thread — a virtual one too — parks in
 * Java, not in a native call.
 *
 * <p>The future is freed once its outcome was taken and no cancel is in progress: a
 * reference count, 1 for the taker, one more for each cancel running.
 */
final class Operation {
    /** Reads a ready future's outcome (never frees it). */
    interface Taker<T> {
        T take(long future);
    }

    /** Runs one {@code ticketing_*_start}: fills future[0], or returns an error kind and fills error[0]. */
    interface Starter {
        int start(long[] future, long[] error);
    }

    private static final ConcurrentHashMap<Long, Operation> PENDING = new ConcurrentHashMap<>();
    private static final AtomicLong IDS = new AtomicLong();
    /** The one callback of every future; kept here for the life of the class (JNA holds it weakly). */
    private static final NativeLib.FutureDone DONE = Operation::ready;

    static {
        NativeLib.keepAttached(DONE);
    }

    /** Where a completion the client's executor rejected runs: the JVM's common pool. */
    private static final Executor FALLBACK = ForkJoinPool.commonPool();

    private final long future;
    private final AtomicInteger users = new AtomicInteger(1);
    private Runnable onReady;
    /** Runs first when the future is ready (a hold's places end there), or null. */
    private Runnable atReady;

    private Operation(long future) {
        this.future = future;
    }

    /** Starts an operation; a refusal before anything started is thrown (nothing was sent). */
    static Operation start(Starter starter) {
        long[] future = new long[1];
        long[] error = new long[1];
        int kind = starter.start(future, error);
        if (kind != Abi.OK || future[0] == 0) {
            throw Errors.of(kind, error[0], null);
        }
        return new Operation(future[0]);
    }

    /** Runs {@code action} (which must not block) first when the future is ready; before it is watched. */
    Operation atReady(Runnable action) {
        this.atReady = action;
        return this;
    }

    /** The callback: on a client thread, on the thread that set it, or on a cancelling one. */
    private static void ready(long future, long ctx) {
        try {
            Operation op = PENDING.remove(ctx);
            if (op != null) {
                op.onReady.run();
            }
        } catch (Throwable ignored) {
            // Nothing may cross into the native caller; onReady only signals.
        }
    }

    private void watch(Runnable signal) {
        Runnable first = atReady;
        this.onReady = first == null ? signal : () -> {
            first.run();
            signal.run();
        };
        long id = IDS.incrementAndGet();
        PENDING.put(id, this);
        if (NativeLib.ticketing_future_set_callback(future, DONE, id, 0) != Abi.OK) {
            // Only a second callback is refused, and this is the first.
            PENDING.remove(id);
            this.onReady.run();
        }
    }

    /**
     * Stops waiting by the C ABI's rule (ticketing_future_cancel): an acquire not yet sent
     * ends cancelled, one already written indeterminate (its grant, if one comes, released
     * by the client). True when the operation was still running.
     */
    boolean cancel() {
        int u;
        do {
            u = users.get();
            if (u == 0) {
                return false; // taken and freed: it had ended
            }
        } while (!users.compareAndSet(u, u + 1));
        try {
            return NativeLib.ticketing_future_cancel(future) == 1;
        } finally {
            unref();
        }
    }

    private void unref() {
        if (users.decrementAndGet() == 0) {
            NativeLib.ticketing_future_free(future);
        }
    }

    private <T> T take(Taker<T> taker) {
        try {
            return taker.take(future);
        } finally {
            unref();
        }
    }

    /**
     * Waits for the outcome on this thread. An interrupt cancels the operation, keeps the
     * thread's interrupt status, and ends the call at once with the cancelled operation's
     * exception, its cause the InterruptedException; an operation that had ended before
     * the cancel keeps its own outcome.
     */
    <T> T await(Taker<T> taker) {
        CompletableFuture<Void> ready = new CompletableFuture<>();
        watch(() -> ready.complete(null));
        try {
            ready.get();
        } catch (InterruptedException interrupted) {
            boolean stopped = cancel();
            ready.join(); // cancel made it ready; its callback may still be finishing on a client thread
            Thread.currentThread().interrupt();
            try {
                return take(taker);
            } catch (TicketingException e) {
                if (stopped && e.getCause() == null) {
                    e.initCause(interrupted);
                }
                throw e;
            }
        } catch (ExecutionException e) {
            throw new IllegalStateException(e); // never completed exceptionally
        }
        return take(taker);
    }

    /**
     * The outcome as a CompletableFuture completed on {@code executor} (never on a client
     * thread). Cancelling it cancels the operation by the C ABI's rule; an outcome that
     * comes anyway and can no longer be delivered goes to {@code discard} (a lock is
     * released in the background).
     *
     * <p>An executor that rejects the completion (one shut down) gets no outcome: the
     * future completes exceptionally with its RejectedExecutionException, as a
     * CompletableFuture's own async stage on such an executor does; the outcome is taken
     * and discarded. That completion runs on {@link #FALLBACK}, never on the client
     * thread the callback is on, so no stage of the program runs there.
     */
    <T> CompletableFuture<T> async(Taker<T> taker, Executor executor, Consumer<T> discard) {
        OperationFuture<T> result = new OperationFuture<>(this);
        watch(() -> {
            try {
                executor.execute(() -> result.finish(taker, discard));
            } catch (RejectedExecutionException rejected) {
                elsewhere(() -> result.reject(taker, discard, rejected));
            }
        });
        return result;
    }

    /** Runs {@code task} on {@link #FALLBACK}, or on a thread of its own should that refuse too. */
    private static void elsewhere(Runnable task) {
        try {
            FALLBACK.execute(task);
        } catch (RejectedExecutionException saturated) {
            Thread thread = new Thread(task, "ticketing-rejected-completion");
            thread.setDaemon(true);
            thread.start();
        }
    }

    /** The future an async call returns: its cancel reaches the native operation. */
    static final class OperationFuture<T> extends CompletableFuture<T> {
        private final Operation op;

        OperationFuture(Operation op) {
            this.op = op;
        }

        @Override
        public boolean cancel(boolean mayInterruptIfRunning) {
            boolean cancelled = super.cancel(mayInterruptIfRunning);
            if (cancelled) {
                op.cancel();
            }
            return cancelled;
        }

        @Override
        public <U> CompletableFuture<U> newIncompleteFuture() {
            return new CompletableFuture<>();
        }

        /**
         * Takes the outcome and discards it, and completes with the executor's rejection;
         * an exceptional outcome (an indeterminate acquire, say) stays attached to it as a
         * suppressed exception.
         */
        private void reject(Taker<T> taker, Consumer<T> discard, RejectedExecutionException rejected) {
            try {
                T value = op.take(taker);
                if (discard != null) {
                    discard.accept(value);
                }
            } catch (Throwable outcome) {
                rejected.addSuppressed(outcome);
            }
            completeExceptionally(rejected);
        }

        private void finish(Taker<T> taker, Consumer<T> discard) {
            T value;
            try {
                value = op.take(taker);
            } catch (Throwable e) {
                completeExceptionally(e);
                return;
            }
            if (!complete(value) && discard != null) {
                discard.accept(value);
            }
        }
    }
}
