// Counted and multi-key holds against a real server: all or nothing, one token for every
// key, counted stock never over its capacity, a capacity mismatch naming both numbers,
// limits passed to the native library and its errors mapped, pool reads, async forms, an
// indeterminate hold resolved as the whole hold.
package dev.ticketing;

import static dev.ticketing.ClientTest.eventually;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;

@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(120)
class HoldTest {
    static final Duration LEASE = Duration.ofSeconds(30);

    TestServer server;
    Client client;
    Client other;

    @BeforeAll
    void start() throws Exception {
        server = new TestServer();
        client = server.client("java-hold-a");
        other = server.client("java-hold-b");
    }

    @AfterAll
    void stop() {
        if (client != null) {
            client.close();
        }
        if (other != null) {
            other.close();
        }
        if (server != null) {
            server.close();
        }
    }

    @Test
    void aMultiKeyAcquireIsAllOrNothingUnderOneToken() throws Exception {
        List<String> seats = List.of("seat:12:1", "seat:12:2", "seat:12:3", "seat:12:4");
        Lock blocker = other.acquire("seat:12:3", LEASE, Duration.ZERO);
        assertThrows(BusyException.class, () -> client.acquire(seats, LEASE, Duration.ZERO));
        for (String seat : List.of("seat:12:1", "seat:12:2", "seat:12:4")) {
            assertTrue(client.query(seat).isEmpty(), seat + " is not held: nothing was");
        }
        CompletableFuture<Lock> waiting = client.acquireAsync(seats, LEASE, Duration.ofSeconds(20));
        eventually(Duration.ofSeconds(5), "the hold queued", () -> client.pool("seat:12:3").waiters() == 1);
        assertTrue(client.query("seat:12:1").isEmpty(), "a waiting hold holds nothing");
        assertFalse(waiting.isDone());
        blocker.release();
        try (Lock lock = waiting.get()) {
            assertEquals(seats, lock.keys());
            assertEquals("seat:12:1", lock.key());
            for (String seat : seats) {
                assertEquals(lock.token(), client.query(seat).orElseThrow().token(), seat + " under the hold's token");
                assertEquals(new Permits(seat, 1, 1), lock.permits().get(seats.indexOf(seat)));
            }
        }
        for (String seat : seats) {
            assertTrue(client.query(seat).isEmpty(), "the release ended " + seat + " too");
        }
    }

    @Test
    void countedPermitsAndThePoolRead() {
        Pool none = client.pool("stock:read");
        assertEquals(new Pool(0, 0, 0, 0, Duration.ZERO, List.of()), none);
        try (Lock a = client.hold(LEASE, Duration.ZERO).permits("stock:read", 2, 5).acquire();
                Lock b = other.hold(LEASE, Duration.ZERO).permits("stock:read", 2, 5).acquire()) {
            assertTrue(b.token() > a.token());
            assertEquals(List.of(new Permits("stock:read", 2, 5)), a.permits());
            assertThrows(BusyException.class,
                    () -> client.hold(LEASE, Duration.ZERO).permits("stock:read", 2, 5).acquire(),
                    "2 more do not fit in the 1 left");
            try (Lock c = client.hold(LEASE, Duration.ZERO).permits("stock:read", 1, 5).acquire()) {
                Pool pool = client.pool("stock:read");
                assertEquals(5, pool.capacity());
                assertEquals(5, pool.inUse());
                assertEquals(3, pool.holds());
                assertEquals(0, pool.waiters());
                assertEquals(List.of(a.token(), b.token(), c.token()),
                        pool.holders().stream().map(Pool.Holding::token).toList(), "oldest first");
                Pool.Holding first = pool.holders().get(0);
                assertEquals("java-hold-a", first.owner());
                assertEquals(2, first.count());
                assertTrue(first.leaseLeft().compareTo(Duration.ofSeconds(25)) > 0, first.toString());
            }
        }
        assertEquals(0, client.pool("stock:read").capacity(), "forgotten once nobody holds it");
    }

    @Test
    void countedStockIsNeverOverItsCapacity() throws Exception {
        int capacity = 5;
        AtomicInteger inUse = new AtomicInteger();
        AtomicInteger most = new AtomicInteger();
        ExecutorService threads = Executors.newFixedThreadPool(12);
        try {
            List<Future<?>> done = new ArrayList<>();
            for (int t = 0; t < 12; t++) {
                Client c = t % 2 == 0 ? client : other;
                done.add(threads.submit(() -> {
                    for (int round = 0; round < 5; round++) {
                        int count = ThreadLocalRandom.current().nextInt(1, 4);
                        try (Lock lock = c.hold(LEASE, Duration.ofSeconds(60)).permits("stock:sale", count, capacity)
                                .acquire()) {
                            assertEquals(count, lock.permits().get(0).count());
                            int now = inUse.addAndGet(count);
                            most.accumulateAndGet(now, Math::max);
                            assertTrue(now <= capacity, now + " permits held of " + capacity);
                            Thread.yield();
                            inUse.addAndGet(-count);
                        }
                    }
                    return null;
                }));
            }
            for (Future<?> f : done) {
                f.get();
            }
        } finally {
            threads.shutdownNow();
        }
        assertTrue(most.get() <= capacity);
        assertTrue(most.get() > 1, "holds overlapped (at most " + most.get() + " permits at once)");
        assertEquals(0, client.pool("stock:sale").inUse());
    }

    @Test
    void aCapacityMismatchNamesBothNumbers() {
        try (Lock held = other.hold(LEASE, Duration.ZERO).permits("stock:mismatch", 1, 100).acquire()) {
            assertEquals(100, held.permits().get(0).capacity());
            InvalidArgumentException e = assertThrows(InvalidArgumentException.class,
                    () -> client.hold(LEASE, Duration.ZERO).permits("stock:mismatch", 1, 120).acquire());
            assertTrue(e.getMessage().contains("100") && e.getMessage().contains("120"), e.getMessage());
            assertTrue(e.isDefinitive());
        }
    }

    @Test
    void theNativeLibraryChecksTheParts() {
        Hold empty = client.hold(LEASE, Duration.ZERO);
        InvalidArgumentException none = assertThrows(InvalidArgumentException.class, empty::acquire);
        assertTrue(none.getMessage().contains("1 to 16"), none.getMessage());
        List<String> seventeen = new ArrayList<>();
        for (int i = 0; i < 17; i++) {
            seventeen.add("many:" + i);
        }
        InvalidArgumentException many = assertThrows(InvalidArgumentException.class,
                () -> client.acquire(seventeen, LEASE, Duration.ZERO));
        assertTrue(many.getMessage().contains("17") && many.getMessage().contains("Hold.permits"), many.getMessage());
        InvalidArgumentException twice = assertThrows(InvalidArgumentException.class,
                () -> client.acquire(List.of("twice", "twice"), LEASE, Duration.ZERO));
        assertTrue(twice.getMessage().contains("twice"), twice.getMessage());
        InvalidArgumentException over = assertThrows(InvalidArgumentException.class,
                () -> client.hold(LEASE, Duration.ZERO).permits("over", 3, 2).acquire());
        // Named as the caller wrote it: the builder's permits(key, count, capacity).
        assertTrue(over.getMessage().contains("permits(\"over\", 3, 2): the count must be 1 to the capacity"),
                over.getMessage());
        InvalidArgumentException negative = assertThrows(InvalidArgumentException.class,
                () -> client.hold(LEASE, Duration.ZERO).permits("negative", -1, 2));
        assertTrue(negative.getMessage().contains("permits(\"negative\", -1, 2)"), negative.getMessage());
        InvalidArgumentException lease = assertThrows(InvalidArgumentException.class,
                () -> client.hold(Duration.ofMillis(1500), Duration.ZERO).key("lease").acquire());
        assertTrue(lease.getMessage().contains("lease"), lease.getMessage());
        assertThrows(InvalidArgumentException.class, () -> client.hold(LEASE, Duration.ZERO).key(null).acquire());
        for (String key : List.of("many:0", "twice", "over", "lease")) {
            assertTrue(client.query(key).isEmpty(), key + ": nothing was sent");
        }
    }

    @Test
    void aPausedServerMakesAHoldIndeterminateAndResolveGivesTheWholeHold() throws Exception {
        try (TestServer own = new TestServer(); Client c = own.client("java-hold-paused")) {
            assertEquals(0, c.pool("paused:a").capacity()); // connected
            own.pause();
            IndeterminateException e = assertThrows(IndeterminateException.class,
                    () -> c.hold(LEASE, Duration.ZERO).key("paused:a").permits("paused:b", 2, 3).acquire());
            assertFalse(e.isDefinitive());
            assertTrue(e.getMessage().contains("do not enter the critical section"), e.getMessage());
            own.resume();
            Optional<Lock> resolved = e.resolve(Duration.ofSeconds(15));
            if (resolved.isPresent()) {
                Lock lock = resolved.get();
                assertEquals(List.of(new Permits("paused:a", 1, 1), new Permits("paused:b", 2, 3)), lock.permits());
                assertEquals(lock.token(), c.query("paused:a").orElseThrow().token());
                assertEquals(2, c.pool("paused:b").inUse(), "the grant held every key");
                assertEquals(ReleaseOutcome.RELEASED, lock.release(), "and its release ends them all");
            }
            eventually(Duration.ofSeconds(10), "no grant left held",
                    () -> c.query("paused:a").isEmpty() && c.pool("paused:b").inUse() == 0);
            System.out.println("an indeterminate hold resolved " + (resolved.isPresent() ? "held" : "not held"));
        }
    }

    @Test
    void asyncFormsOfHoldAndPool() throws Exception {
        Lock blocker = other.hold(LEASE, Duration.ZERO).permits("async:stock", 3, 3).acquire();
        CompletableFuture<Lock> waiting = client.hold(LEASE, Duration.ofSeconds(20)).key("async:seat")
                .permits("async:stock", 1, 3).acquireAsync();
        eventually(Duration.ofSeconds(5), "the hold queued", () -> client.poolAsync("async:stock").join().waiters() == 1);
        Pool pool = client.poolAsync("async:stock").get();
        assertEquals(3, pool.inUse());
        assertEquals(1, pool.holds());
        assertTrue(client.query("async:seat").isEmpty(), "holds nothing while it waits");
        blocker.releaseAsync().get();
        try (Lock lock = waiting.get()) {
            assertEquals(List.of("async:seat", "async:stock"), lock.keys());
            assertEquals(List.of(new Permits("async:seat", 1, 1), new Permits("async:stock", 1, 3)), lock.permits());
            assertEquals(1, client.pool("async:stock").inUse());
        }
        // Refused before anything started, as acquireAsync's bad arguments: thrown at once.
        assertThrows(InvalidArgumentException.class, () -> client.acquireAsync(List.of("a", "a"), LEASE, Duration.ZERO));
    }
}
