// Places in line against a real server: reported on the listener's executor when the
// hold queues and as the line moves, never increasing, and the estimated wait's
// arithmetic.
package dev.ticketing;

import static dev.ticketing.ClientTest.eventually;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
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
