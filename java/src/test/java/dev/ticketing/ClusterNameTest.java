// clusterName against real servers: a client named as its server's TICKETING_CLUSTER_NAME
// acquires (blocking and async), and one named otherwise, or pointed at a server without
// a name, is sent nothing: UnavailableException, not retryable, naming both names.
package dev.ticketing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;

@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(120)
class ClusterNameTest {
    static final Duration LEASE = Duration.ofSeconds(30);
    /**
     * A wait the refusal must not sit out: an unavailability that trying again could fix
     * waits up to it for a connection; this one is said without waiting, well before
     * half of it.
     */
    static final Duration WAIT = Duration.ofSeconds(100);

    TestServer blue;
    TestServer unnamed;

    @BeforeAll
    void start() throws Exception {
        blue = new TestServer(Map.of("TICKETING_CLUSTER_NAME", "blue"));
        unnamed = new TestServer();
    }

    @AfterAll
    void stop() {
        if (blue != null) {
            blue.close();
        }
        if (unnamed != null) {
            unnamed.close();
        }
    }

    static Client named(TestServer server, String name, String owner) {
        return Client.builder().addrs(server.addr).authToken(TestServer.SECRET).owner(owner).clusterName(name).build();
    }

    /** The acquire's refusal: unavailable, not retryable, before the wait ran out. */
    static UnavailableException refused(Client c, String key) {
        long start = System.nanoTime();
        UnavailableException e = assertThrows(UnavailableException.class, () -> c.acquire(key, LEASE, WAIT));
        long took = System.nanoTime() - start;
        assertTrue(took < WAIT.toNanos() / 2, "the refusal sat out the wait: " + TimeUnit.NANOSECONDS.toMillis(took)
                + " ms");
        assertFalse(e.isRetryable(), e.getMessage());
        return e;
    }

    @Test
    void aClientNamedAsItsServerAcquires() {
        try (Client c = named(blue, "blue", "java-blue")) {
            Lock lock = c.acquire("named-1", LEASE, Duration.ZERO);
            assertTrue(lock.token() > 0);
            assertEquals(ReleaseOutcome.RELEASED, lock.release());
            Lock async = c.acquireAsync("named-1", LEASE, Duration.ZERO).join();
            assertEquals(ReleaseOutcome.RELEASED, async.releaseAsync().join());
        }
    }

    @Test
    void aClientNamedOtherwiseIsSentNothingAndSaysBothNames() {
        try (Client green = named(blue, "green", "java-green"); Client right = named(blue, "blue", "java-check")) {
            String message = refused(green, "named-2").getMessage();
            assertTrue(message.contains("\"blue\"") && message.contains("\"green\"") && message.contains("clusterName"),
                    message);
            CompletionException async = assertThrows(CompletionException.class,
                    () -> green.acquireAsync("named-2", LEASE, WAIT).join());
            assertInstanceOf(UnavailableException.class, async.getCause());
            assertEquals(Optional.empty(), right.query("named-2")); // never asked for
        }
    }

    @Test
    void aNamedClientIsSentNothingByAServerWithoutAName() {
        try (Client green = named(unnamed, "green", "java-green")) {
            String message = refused(green, "named-3").getMessage();
            assertTrue(message.contains("\"green\"") && message.contains("no cluster name")
                    && message.contains("clusterName"), message);
        }
    }
}
