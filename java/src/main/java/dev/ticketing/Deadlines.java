// Deadlines: the one scheduler thread that completes every lock's expiry future at the
// lock's deadline, on System.nanoTime's clock, never before it.
package dev.ticketing;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import java.util.concurrent.ForkJoinPool;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;

/**
 * One daemon thread for the whole library, started at the first {@link Lock#expiry()}:
 * a lock's expiry is a scheduled task on it, not a thread. At the deadline the task
 * hands the completion to the client's executor, so no program stage runs on this
 * thread. A task that wakes early (it never should: the scheduler waits on nanoTime)
 * waits again for the rest.
 */
final class Deadlines {
    private Deadlines() {}

    private static final ScheduledThreadPoolExecutor TIMER = timer();

    private static ScheduledThreadPoolExecutor timer() {
        ScheduledThreadPoolExecutor timer = new ScheduledThreadPoolExecutor(1, task -> {
            Thread thread = new Thread(task, "ticketing-deadlines");
            thread.setDaemon(true);
            return thread;
        });
        timer.setRemoveOnCancelPolicy(true);
        return timer;
    }

    /** A future completed on {@code executor} once System.nanoTime() reaches {@code deadlineNanos}. */
    static CompletableFuture<Void> at(long deadlineNanos, Executor executor) {
        CompletableFuture<Void> expired = new CompletableFuture<>();
        schedule(expired, deadlineNanos, executor);
        return expired;
    }

    private static void schedule(CompletableFuture<Void> expired, long deadlineNanos, Executor executor) {
        long left = deadlineNanos - System.nanoTime();
        if (left > 0) {
            TIMER.schedule(() -> schedule(expired, deadlineNanos, executor), left, TimeUnit.NANOSECONDS);
            return;
        }
        try {
            executor.execute(() -> expired.complete(null));
        } catch (RejectedExecutionException rejected) {
            ForkJoinPool.commonPool().execute(() -> expired.complete(null));
        }
    }
}
