// Blocking calls on virtual threads (Java 21 and later) park without pinning a carrier:
// 200 waits on held keys (half of them holds, hearing their places in line) leave the
// carriers free for a query, interrupts end waits, and grants hand over. Run by tests/java_package.rs on one carrier thread that cannot be
// compensated (-Djdk.virtualThreadScheduler.parallelism=1, maxPoolSize=1): a wait that
// pinned its carrier would stop everything. Skipped on an older Java.
package dev.ticketing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.lang.reflect.Method;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

@Timeout(120)
class VirtualThreadsTest {
    static final int KEYS = 10;
    static final int WAITERS = 200;

    static Thread startVirtual(Runnable task) throws Exception {
        Object builder = Thread.class.getMethod("ofVirtual").invoke(null);
        Method start = Class.forName("java.lang.Thread$Builder").getMethod("start", Runnable.class);
        return (Thread) start.invoke(builder, task);
    }

    static int queued(Client client) {
        int n = 0;
        for (int k = 0; k < KEYS; k++) {
            n += client.query("vt-" + k).map(Holder::waiters).orElse(0);
        }
        return n;
    }

    @Test
    void waitsOnVirtualThreadsPinNoCarrier() throws Exception {
        Assumptions.assumeTrue(Runtime.version().feature() >= 21, "virtual threads need Java 21");
        System.out.println("virtual threads: Java " + Runtime.version() + ", carrier parallelism "
                + System.getProperty("jdk.virtualThreadScheduler.parallelism", "default"));
        try (TestServer server = new TestServer(); Client client = server.client("java-vt");
                Client holder = server.client("java-vt-holder")) {
            List<Lock> held = new ArrayList<>();
            for (int k = 0; k < KEYS; k++) {
                held.add(holder.acquire("vt-" + k, Duration.ofSeconds(60), Duration.ZERO));
            }
            AtomicInteger granted = new AtomicInteger();
            AtomicInteger interrupted = new AtomicInteger();
            AtomicInteger other = new AtomicInteger();
            AtomicInteger places = new AtomicInteger();
            List<Thread> threads = new ArrayList<>();
            for (int i = 0; i < WAITERS; i++) {
                String key = "vt-" + (i % KEYS);
                boolean hold = i % 4 >= 2; // both kinds among the interrupted (even) and the granted (odd)
                threads.add(startVirtual(() -> {
                    try (Lock lock = hold
                            ? client.hold(Duration.ofSeconds(30), Duration.ofSeconds(60)).key(key)
                                    .onPlace(place -> places.incrementAndGet()).acquire()
                            : client.acquire(key, Duration.ofSeconds(30), Duration.ofSeconds(60))) {
                        granted.incrementAndGet();
                        assertTrue(lock.token() > 0);
                    } catch (TicketingException e) {
                        (e.isInterrupted() ? interrupted : other).incrementAndGet();
                    }
                }));
            }
            long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (queued(client) < WAITERS) {
                if (System.nanoTime() > end) {
                    fail("only " + queued(client) + " of " + WAITERS + " acquires queued");
                }
                Thread.sleep(20);
            }
            // Every hold hears its place when it queues (on the client's executor, not a thread of its own).
            ClientTest.eventually(Duration.ofSeconds(10), "the " + WAITERS / 2 + " holds heard their places",
                    () -> places.get() >= WAITERS / 2);
            // Every waiter is parked in a wait: a query on another virtual thread still runs.
            CompletableFuture<Optional<Holder>> seen = new CompletableFuture<>();
            long start = System.nanoTime();
            startVirtual(() -> seen.complete(client.query("vt-0")));
            assertEquals(WAITERS / KEYS, seen.get(5, TimeUnit.SECONDS).orElseThrow().waiters());
            long queryMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            // Half of them interrupted: they end at once; the rest are granted in turn.
            for (int i = 0; i < WAITERS; i += 2) {
                threads.get(i).interrupt();
            }
            for (Lock lock : held) {
                lock.release();
            }
            for (Thread t : threads) {
                t.join(60_000);
                assertTrue(!t.isAlive(), "a waiter is still waiting");
            }
            System.out.println("virtual threads: " + WAITERS + " waits, a query meanwhile in " + queryMs
                    + " ms; granted " + granted + ", interrupted " + interrupted + ", other " + other
                    + "; places heard " + places);
            assertEquals(0, other.get());
            assertEquals(WAITERS, granted.get() + interrupted.get());
            assertTrue(granted.get() >= WAITERS / 2);
            for (int k = 0; k < KEYS; k++) {
                String key = "vt-" + k;
                ClientTest.eventually(Duration.ofSeconds(10), key + " free", () -> client.query(key).isEmpty());
            }
        }
    }
}
