// Places in line against a real server: reported on the listener's executor when the
// hold queues and as the line moves, never increasing; 1,000 waiting holds with
// listeners on one key take no thread each; and the estimated wait's arithmetic.
package dev.ticketing;

import static dev.ticketing.ClientTest.eventually;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;

@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(120)
class PlacesTest {
    static final Duration LEASE = Duration.ofSeconds(30);

    TestServer server;
    Client client;
    Client other;

    @BeforeAll
    void start() throws Exception {
        server = new TestServer();
        client = server.client("java-places-a");
        other = server.client("java-places-b");
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

    record Seen(Place place, String thread) {}

    @Test
    void placesAreReportedAndDecrease() throws Exception {
        Lock first = other.acquire("line", LEASE, Duration.ZERO);
        List<CompletableFuture<Lock>> ahead = new ArrayList<>();
        for (int i = 1; i <= 3; i++) {
            ahead.add(other.hold(LEASE, Duration.ofSeconds(60)).key("line").acquireAsync());
            int queued = i;
            eventually(Duration.ofSeconds(5), "waiter " + i + " queued", () -> other.pool("line").waiters() == queued);
        }
        ExecutorService listeners = Executors.newSingleThreadExecutor(r -> new Thread(r, "app-places"));
        List<Seen> seen = new CopyOnWriteArrayList<>();
        try {
            CompletableFuture<Lock> mine = client.hold(LEASE, Duration.ofSeconds(60)).key("line")
                    .onPlace(p -> seen.add(new Seen(p, Thread.currentThread().getName())), listeners).acquireAsync();
            eventually(Duration.ofSeconds(5), "a place when it queued", () -> !seen.isEmpty());
            assertEquals(3, seen.get(0).place().ahead(), seen.toString());
            first.release();
            for (CompletableFuture<Lock> waiter : ahead) {
                Lock lock = waiter.get();
                long left = 2 - ahead.indexOf(waiter);
                eventually(Duration.ofSeconds(5), "the place " + left,
                        () -> seen.get(seen.size() - 1).place().ahead() == left);
                lock.release();
            }
            try (Lock lock = mine.get()) {
                assertEquals(List.of("line"), lock.keys());
            }
        } finally {
            listeners.shutdownNow();
        }
        List<Long> aheads = seen.stream().map(s -> s.place().ahead()).toList();
        for (int i = 1; i < aheads.size(); i++) {
            assertTrue(aheads.get(i) <= aheads.get(i - 1), "never increasing: " + aheads);
        }
        assertEquals(List.of(3L, 2L, 1L, 0L), aheads.stream().distinct().toList(), "every place as the line moved");
        for (Seen s : seen) {
            assertEquals("app-places", s.thread(), "on the listener's executor, not a client thread");
            assertEquals(s.place().grantsPerKs() > 0, s.place().estimatedWait().isPresent(), s.toString());
        }
    }

    /** The process's threads: /proc/self/task where there is one, else the JVM's count. */
    static int threads() {
        try (Stream<Path> tasks = Files.list(Path.of("/proc/self/task"))) {
            return (int) tasks.count();
        } catch (IOException | UnsupportedOperationException e) {
            return ManagementFactory.getThreadMXBean().getThreadCount();
        }
    }

    @Test
    void aThousandWaitingHoldsWithPlacesTakeNoThreadEach() throws Exception {
        // The path of scripts/java-holds-bench.sh's 10,000 waiters, smaller: async holds
        // with a place listener, all on one key, through one client.
        int n = 1000;
        Lock first = other.acquire("line-1000", LEASE, Duration.ZERO);
        int before = threads();
        AtomicLong places = new AtomicLong();
        AtomicIntegerArray told = new AtomicIntegerArray(n);
        List<CompletableFuture<ReleaseOutcome>> line = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            int me = i;
            line.add(client.hold(LEASE, Duration.ofSeconds(60)).key("line-1000").onPlace(p -> {
                places.incrementAndGet();
                told.incrementAndGet(me);
            }).acquireAsync().thenCompose(Lock::releaseAsync));
        }
        eventually(Duration.ofSeconds(20), n + " holds queued", () -> other.pool("line-1000").waiters() == n);
        eventually(Duration.ofSeconds(20), "every waiter told its place", () -> {
            for (int i = 0; i < n; i++) {
                if (told.get(i) == 0) {
                    return false;
                }
            }
            return true;
        });
        int during = threads();
        System.out.println(n + " holds waiting with places: threads " + before + " before, " + during + " during, "
                + places.get() + " places");
        assertTrue(during - before < 20, "threads went from " + before + " to " + during + ": a thread per waiter?");
        first.release();
        CompletableFuture.allOf(line.toArray(new CompletableFuture<?>[0])).get(60, TimeUnit.SECONDS);
        for (CompletableFuture<ReleaseOutcome> waiter : line) {
            assertEquals(ReleaseOutcome.RELEASED, waiter.get());
        }
        assertTrue(threads() - before < 20, "threads after the hand-offs: " + threads());
    }

    @Test
    void theEstimatedWaitIsAheadTimesAThousandOverGrantsPerKs() {
        assertEquals(Optional.empty(), new Place(5, 0).estimatedWait(), "unknown while the rate is not measured");
        assertEquals(Optional.of(Duration.ofSeconds(2)), new Place(3, 1500).estimatedWait());
        assertEquals(Optional.of(Duration.ofNanos(333_333_333_333L)), new Place(1, 3).estimatedWait());
        assertEquals(Optional.of(Duration.ZERO), new Place(0, 7).estimatedWait());
        long max = 0xFFFF_FFFFL;
        assertEquals(Optional.of(Duration.ofSeconds(max * 1000)), new Place(max, 1).estimatedWait(), "no overflow");
        assertEquals(1.5, new Place(0, 1500).grantsPerSecond());
    }
}
