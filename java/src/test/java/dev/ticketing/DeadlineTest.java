// The lock's own deadline against a real server: deadlineNanos between the call's start
// and its return plus the lease, expiry() completing at it and not before, on the
// client's executor, one scheduler thread for many locks.
package dev.ticketing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.management.ManagementFactory;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;

@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(60)
class DeadlineTest {
    TestServer server;
    ExecutorService executor;
    Client client;

    @BeforeAll
    void start() throws Exception {
        server = new TestServer();
        executor = Executors.newSingleThreadExecutor(r -> new Thread(r, "app-executor"));
        client = Client.builder().addrs(server.addr).authToken(TestServer.SECRET).owner("java-deadline")
                .executor(executor).build();
    }

    @AfterAll
    void stop() {
        if (client != null) {
            client.close();
        }
        if (executor != null) {
            executor.shutdownNow();
        }
        if (server != null) {
            server.close();
        }
    }

    record Fired(long nanos, String thread, boolean expired) {}

    @Test
    void expiryCompletesAtTheDeadlineAndNotBefore() {
        Duration lease = Duration.ofSeconds(2);
        long before = System.nanoTime();
        Instant wallBefore = Instant.now();
        Lock lock = client.hold(lease, Duration.ZERO).key("deadline").acquire();
        long after = System.nanoTime();
        Instant wallAfter = Instant.now();
        long deadline = lock.deadlineNanos();
        assertTrue(deadline - (before + lease.toNanos()) >= 0, "not before the call's start plus the lease");
        assertTrue(deadline - (after + lease.toNanos()) <= 0, "not after its return plus the lease");
        assertFalse(lock.deadline().isBefore(wallBefore.plus(lease).minusMillis(50)), lock.deadline().toString());
        assertFalse(lock.deadline().isAfter(wallAfter.plus(lease).plusMillis(50)), lock.deadline().toString());

        CompletableFuture<Void> expiry = lock.expiry();
        CompletableFuture<Fired> fired = expiry.thenApply(
                v -> new Fired(System.nanoTime(), Thread.currentThread().getName(), lock.isExpired()));
        CompletableFuture<Void> another = lock.expiry();
        assertTrue(another != expiry, "each call a future of its own");
        another.cancel(true);
        assertFalse(expiry.isDone(), "cancelling one cancels nothing else");
        Fired at = fired.join(); // @Timeout bounds the wait
        assertTrue(at.nanos() - deadline >= 0, "fired " + (deadline - at.nanos()) + " ns before the deadline");
        assertTrue(at.expired(), "the lock says expired too");
        assertEquals("app-executor", at.thread(), "on the client's executor");
        assertTrue(lock.expiry().isDone(), "a later call is complete at once");
        // The server's lease ends at or after the local deadline (its clock starts at the
        // commit, after the request was written): a release just after it may still find it.
        ReleaseOutcome outcome = lock.release();
        assertTrue(outcome == ReleaseOutcome.NOT_HOLDER || outcome == ReleaseOutcome.RELEASED, outcome.toString());
    }

    @Test
    void manyLocksShareOneSchedulerThread() {
        List<Lock> locks = new ArrayList<>();
        for (int i = 0; i < 5; i++) {
            locks.add(client.acquire("warm-" + i, Duration.ofSeconds(250), Duration.ZERO));
            locks.get(i).expiry(); // the scheduler thread, made once
        }
        int before = ManagementFactory.getThreadMXBean().getThreadCount();
        List<CompletableFuture<Void>> expiries = new ArrayList<>();
        for (int i = 0; i < 200; i++) {
            Lock lock = client.acquire("many-" + i, Duration.ofSeconds(250), Duration.ZERO);
            locks.add(lock);
            expiries.add(lock.expiry());
        }
        int during = ManagementFactory.getThreadMXBean().getThreadCount();
        assertTrue(during - before < 5, "threads went from " + before + " to " + during);
        assertTrue(expiries.stream().noneMatch(CompletableFuture::isDone));
        for (Lock lock : locks) {
            assertEquals(ReleaseOutcome.RELEASED, lock.release());
        }
    }
}
