// The library against real servers: grant and token, FIFO hand-off, busy and timeout,
// release outcomes, query, try-with-resources, 64 threads on one client, 1,000 async
// waits without a thread each, cancel of a written acquire, an interrupted wait, bad
// arguments, a wrong secret, a paused server's indeterminate acquire and its resolve,
// async completion off the client's threads.
package dev.ticketing;

import static org.junit.jupiter.api.Assertions.assertAll;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executor;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.function.Executable;

@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@Timeout(120)
class ClientTest {
    static final Duration LEASE = Duration.ofSeconds(30);

    TestServer server;
    Client client;
    Client other;

    @BeforeAll
    void start() throws Exception {
        server = new TestServer();
        client = server.client("java-a");
        other = server.client("java-b");
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

    /** Polls a fact (not a sleep standing in for one) until it holds or `limit` passes. */
    static void eventually(Duration limit, String what, BooleanSupplier fact) throws InterruptedException {
        long end = System.nanoTime() + limit.toNanos();
        while (!fact.getAsBoolean()) {
            if (System.nanoTime() > end) {
                fail("not within " + limit + ": " + what);
            }
            Thread.sleep(10);
        }
    }

    int waiters(String key) {
        return client.query(key).map(Holder::waiters).orElse(-1);
    }

    @Test
    void grantTokenQueryRelease() {
        long before;
        try (Lock first = client.acquire("grant", LEASE, Duration.ZERO)) {
            before = first.token();
            assertTrue(before > 0);
            assertEquals("grant", first.key());
            assertEquals("java-a", first.owner());
            assertEquals(LEASE, first.lease());
            assertTrue(first.remaining().compareTo(Duration.ofSeconds(25)) > 0);
            Holder h = client.query("grant").orElseThrow();
            assertEquals("java-a", h.owner());
            assertEquals(before, h.token());
            assertEquals(0, h.waiters());
            assertTrue(h.leaseLeft().compareTo(Duration.ofSeconds(25)) > 0);
        }
        assertEquals(Optional.empty(), client.query("grant"));
        Lock second = client.acquire("grant", LEASE, Duration.ZERO);
        assertTrue(second.token() > before, "tokens increase");
        assertEquals(ReleaseOutcome.RELEASED, second.release());
        assertTrue(second.isExpired(), "released: nothing remains");
        InvalidArgumentException twice = assertThrows(InvalidArgumentException.class, second::release);
        assertTrue(twice.getMessage().contains("released already"), twice.getMessage());
        second.close(); // a second close does nothing
    }

    @Test
    void waitersAreGrantedInArrivalOrder() throws Exception {
        Lock holder = other.acquire("fifo", LEASE, Duration.ZERO);
        List<CompletableFuture<Lock>> waiting = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            waiting.add(client.acquireAsync("fifo", LEASE, Duration.ofSeconds(20)));
            int queued = i + 1;
            eventually(Duration.ofSeconds(5), "waiter " + queued + " queued", () -> waiters("fifo") == queued);
        }
        assertEquals(ReleaseOutcome.RELEASED, holder.release());
        long last = holder.token();
        for (int i = 0; i < 3; i++) {
            Lock lock = waiting.get(i).get(10, TimeUnit.SECONDS);
            for (int j = i + 1; j < 3; j++) {
                assertFalse(waiting.get(j).isDone(), "waiter " + j + " granted before waiter " + i);
            }
            assertTrue(lock.token() > last);
            last = lock.token();
            assertEquals(ReleaseOutcome.RELEASED, lock.release());
        }
    }

    @Test
    void busyAndTimeoutAreDefinitive() {
        try (Lock held = other.acquire("busy", LEASE, Duration.ZERO)) {
            BusyException busy = assertThrows(BusyException.class,
                    () -> client.acquire("busy", LEASE, Duration.ZERO));
            assertTrue(busy.isDefinitive());
            assertFalse(busy.isRetryable());
            assertEquals("busy", busy.kind());
            long start = System.nanoTime();
            TimeoutException timeout = assertThrows(TimeoutException.class,
                    () -> client.acquire("busy", LEASE, Duration.ofMillis(500)));
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            // The server's T after the wait (not the 30 s lease running out): at least
            // the wait; 20 s only against a hang.
            assertTrue(ms >= 450 && ms < 20000, "timeout after " + ms + " ms");
            assertTrue(timeout.isDefinitive());
            assertEquals(held.token(), client.query("busy").orElseThrow().token());
        }
    }

    @Test
    void releaseOutcomesAndReleaseByToken() throws Exception {
        Lock lock = client.acquire("outcomes", Duration.ofSeconds(1), Duration.ZERO);
        eventually(Duration.ofSeconds(5), "the lease ended on the server",
                () -> client.query("outcomes").isEmpty());
        assertEquals(ReleaseOutcome.NOT_HOLDER, lock.release());

        Lock late = client.acquire("outcomes", Duration.ofSeconds(1), Duration.ZERO);
        eventually(Duration.ofSeconds(5), "the lease ended on the server",
                () -> client.query("outcomes").isEmpty());
        NotHolderException notHolder = assertThrows(NotHolderException.class, late::close);
        assertTrue(notHolder.getMessage().contains("fencing token"), notHolder.getMessage());

        Lock kept = client.acquire("outcomes", LEASE, Duration.ZERO);
        assertEquals(ReleaseOutcome.RELEASED, client.release("outcomes", kept.token()));
        assertEquals(ReleaseOutcome.RELEASED_OR_EXPIRED.compareTo(ReleaseOutcome.NOT_HOLDER) > 0, true);
        assertEquals(ReleaseOutcome.NOT_HOLDER, client.releaseAsync("outcomes", kept.token()).get(5, TimeUnit.SECONDS));
        kept.abandon();
    }

    @Test
    void tryWithResourcesReleasesOnAnException() {
        AtomicReference<Lock> seen = new AtomicReference<>();
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> {
            try (Lock lock = client.acquire("with", LEASE, Duration.ZERO)) {
                seen.set(lock);
                throw new IllegalStateException("the critical section failed");
            }
        });
        assertEquals("the critical section failed", e.getMessage());
        assertEquals(0, e.getSuppressed().length);
        assertEquals(Optional.empty(), client.query("with"));
        assertTrue(seen.get().isExpired());
    }

    @Test
    void sixtyFourThreadsShareOneClient() throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(64);
        AtomicInteger inside = new AtomicInteger();
        Set<Long> tokens = ConcurrentHashMap.newKeySet();
        List<Future<?>> done = new ArrayList<>();
        CountDownLatch go = new CountDownLatch(1);
        for (int t = 0; t < 64; t++) {
            int me = t;
            done.add(pool.submit(() -> {
                go.await();
                for (int i = 0; i < 5; i++) {
                    try (Lock own = client.acquire("own-" + me, LEASE, Duration.ZERO)) {
                        tokens.add(own.token());
                    }
                    try (Lock shared = client.acquire("shared", LEASE, Duration.ofSeconds(60))) {
                        assertEquals(1, inside.incrementAndGet(), "two holders of one key");
                        tokens.add(shared.token());
                        inside.decrementAndGet();
                    }
                }
                return null;
            }));
        }
        go.countDown();
        for (Future<?> f : done) {
            f.get(100, TimeUnit.SECONDS);
        }
        pool.shutdown();
        assertEquals(64 * 10, tokens.size(), "every grant has a token of its own");
        assertEquals(Optional.empty(), client.query("shared"));
    }

    @Test
    void cancellingAWrittenAcquireLeavesNoGrant() throws Exception {
        Lock holder = other.acquire("cancel", LEASE, Duration.ZERO);
        CompletableFuture<Lock> waiting = client.acquireAsync("cancel", LEASE, Duration.ofSeconds(20));
        eventually(Duration.ofSeconds(5), "the acquire queued", () -> waiters("cancel") == 1);
        assertTrue(waiting.cancel(true));
        assertTrue(waiting.isCancelled());
        Holder h = client.query("cancel").orElseThrow();
        assertEquals("java-b", h.owner());
        assertEquals(holder.token(), h.token());
        assertEquals(ReleaseOutcome.RELEASED, holder.release());
        // The cancelled waiter may be granted now: the client releases that grant itself.
        eventually(Duration.ofSeconds(10), "the key is free", () -> client.query("cancel").isEmpty());
        try (Lock again = other.acquire("cancel", LEASE, Duration.ZERO)) {
            assertTrue(again.token() > holder.token());
        }
    }

    @Test
    void anInterruptEndsAWaitAtOnceAndLeavesNoGrant() throws Exception {
        Lock holder = other.acquire("interrupt", LEASE, Duration.ZERO);
        AtomicReference<Throwable> thrown = new AtomicReference<>();
        AtomicReference<Boolean> statusKept = new AtomicReference<>();
        long[] ended = new long[1];
        long start = System.nanoTime();
        Thread waiter = new Thread(() -> {
            try {
                client.acquire("interrupt", LEASE, Duration.ofSeconds(20)).close();
            } catch (Throwable t) {
                thrown.set(t);
            }
            ended[0] = System.nanoTime();
            statusKept.set(Thread.currentThread().isInterrupted());
        });
        waiter.start();
        eventually(Duration.ofSeconds(5), "the acquire queued", () -> waiters("interrupt") == 1);
        while (System.nanoTime() - start < TimeUnit.SECONDS.toNanos(1)) {
            Thread.sleep(5); // the interrupt comes 1 s into the wait
        }
        long interrupted = System.nanoTime();
        waiter.interrupt();
        waiter.join(5000);
        assertFalse(waiter.isAlive());
        long afterInterrupt = TimeUnit.NANOSECONDS.toMillis(ended[0] - interrupted);
        long call = TimeUnit.NANOSECONDS.toMillis(ended[0] - start);
        assertTrue(afterInterrupt <= 200, "the call ended " + afterInterrupt + " ms after the interrupt");
        assertTrue(call >= 1000 && call <= 1200 + Math.max(0, TimeUnit.NANOSECONDS.toMillis(interrupted - start) - 1000),
                "the call took " + call + " ms");
        Throwable t = thrown.get();
        IndeterminateException e = assertInstanceOf(IndeterminateException.class, t);
        assertEquals(IndeterminateException.Cause.CANCELLED, e.cause());
        assertTrue(e.isInterrupted());
        assertInstanceOf(InterruptedException.class, e.getCause());
        assertTrue(statusKept.get(), "the interrupt status stays set");
        Holder h = client.query("interrupt").orElseThrow();
        assertEquals(holder.token(), h.token());
        assertEquals("java-b", h.owner());
        assertEquals(ReleaseOutcome.RELEASED, holder.release());
        eventually(Duration.ofSeconds(10), "the key is free", () -> client.query("interrupt").isEmpty());
        try (Lock again = other.acquire("interrupt", LEASE, Duration.ZERO)) {
            assertTrue(again.token() > holder.token());
        }
    }

    @Test
    void anInterruptedThreadSendsNothing() {
        Thread.currentThread().interrupt();
        try {
            CancelledException e = assertThrows(CancelledException.class,
                    () -> client.acquire("pre-interrupted", LEASE, Duration.ZERO));
            assertTrue(e.isDefinitive());
            assertTrue(e.isInterrupted());
            assertTrue(Thread.currentThread().isInterrupted());
        } finally {
            Thread.interrupted();
        }
        assertEquals(Optional.empty(), client.query("pre-interrupted"));
    }

    @Test
    void asyncFormsCompleteOnTheExecutorNotOnAClientThread() throws Exception {
        Set<String> threads = ConcurrentHashMap.newKeySet();
        ExecutorService executor = Executors.newSingleThreadExecutor(r -> new Thread(r, "app-executor"));
        try (Client c = Client.builder().addrs(server.addr).authToken(TestServer.SECRET).owner("java-async")
                .executor(executor).build()) {
            Lock holder = other.acquire("async", LEASE, Duration.ZERO);
            // Stages added before the outcome comes run where the future is completed.
            CompletableFuture<Lock> waiting = c.acquireAsync("async", LEASE, Duration.ofSeconds(10))
                    .thenApply(l -> {
                        threads.add(Thread.currentThread().getName());
                        return l;
                    });
            eventually(Duration.ofSeconds(5), "the acquire queued", () -> waiters("async") == 1);
            assertEquals(ReleaseOutcome.RELEASED, holder.release());
            Lock lock = waiting.get(5, TimeUnit.SECONDS);
            assertEquals(Set.of("app-executor"), threads);
            Optional<Holder> h = c.queryAsync("async").get(5, TimeUnit.SECONDS);
            assertEquals(lock.token(), h.orElseThrow().token());
            ExecutionException busy = assertThrows(ExecutionException.class,
                    () -> other.acquireAsync("async", LEASE, Duration.ZERO).get(5, TimeUnit.SECONDS));
            assertInstanceOf(BusyException.class, busy.getCause());
            assertEquals(ReleaseOutcome.RELEASED, lock.releaseAsync()
                    .whenComplete((r, x) -> threads.add(Thread.currentThread().getName())).get(5, TimeUnit.SECONDS));
        } finally {
            executor.shutdown();
        }
        for (String name : threads) {
            assertFalse(name.startsWith("ticketing"), "a stage ran on the client's thread " + name);
        }
    }

    @Test
    void anExecutorThatRejectsGetsTheRejectionOffTheClientThreadAndLeavesNoGrant() throws Exception {
        Set<String> threads = ConcurrentHashMap.newKeySet();
        // An executor shut down with the application: it rejects every task.
        Executor rejecting = task -> {
            throw new RejectedExecutionException("the application is shutting down");
        };
        try (Client c = Client.builder().addrs(server.addr).authToken(TestServer.SECRET).owner("java-rejected")
                .executor(rejecting).build()) {
            Lock holder = other.acquire("rejected", LEASE, Duration.ZERO);
            CompletableFuture<Lock> waiting = c.acquireAsync("rejected", LEASE, Duration.ofSeconds(10));
            // Added before the outcome comes: it runs where the future is completed.
            CompletableFuture<Throwable> stage = waiting.handle((lock, failure) -> {
                threads.add(Thread.currentThread().getName());
                return failure;
            });
            eventually(Duration.ofSeconds(5), "the acquire queued", () -> waiters("rejected") == 1);
            assertEquals(ReleaseOutcome.RELEASED, holder.release());
            ExecutionException e = assertThrows(ExecutionException.class, () -> waiting.get(10, TimeUnit.SECONDS));
            assertInstanceOf(RejectedExecutionException.class, e.getCause());
            assertInstanceOf(RejectedExecutionException.class, stage.get(10, TimeUnit.SECONDS));
            assertEquals(1, threads.size(), threads.toString());
            for (String name : threads) {
                assertFalse(name.startsWith("ticketing"), "a stage ran on the client's thread " + name);
            }
            // The grant it could not deliver is released by the client: the key is free again.
            eventually(Duration.ofSeconds(10), "the undelivered grant released",
                    () -> client.query("rejected").isEmpty());
        }
    }

    @Test
    void aThousandAsyncWaitsTakeNoThreadEach() throws Exception {
        List<Lock> held = new ArrayList<>();
        for (int k = 0; k < 10; k++) {
            held.add(other.acquire("many-" + k, LEASE, Duration.ZERO));
        }
        int before = java.lang.management.ManagementFactory.getThreadMXBean().getThreadCount();
        List<CompletableFuture<ReleaseOutcome>> waits = new ArrayList<>();
        for (int i = 0; i < 1000; i++) {
            waits.add(client.acquireAsync("many-" + (i % 10), LEASE, Duration.ofSeconds(60))
                    .thenCompose(Lock::releaseAsync));
        }
        eventually(Duration.ofSeconds(20), "1000 acquires queued", () -> {
            int n = 0;
            for (int k = 0; k < 10; k++) {
                n += waiters("many-" + k);
            }
            return n == 1000;
        });
        int during = java.lang.management.ManagementFactory.getThreadMXBean().getThreadCount();
        System.out.println("1000 async acquires waiting: JVM threads " + before + " before, " + during + " during");
        assertTrue(during - before < 20, "threads went from " + before + " to " + during);
        for (Lock lock : held) {
            assertEquals(ReleaseOutcome.RELEASED, lock.release());
        }
        CompletableFuture.allOf(waits.toArray(new CompletableFuture<?>[0])).get(60, TimeUnit.SECONDS);
        for (CompletableFuture<ReleaseOutcome> w : waits) {
            assertEquals(ReleaseOutcome.RELEASED, w.get());
        }
    }

    @Test
    void badArgumentsNameTheOption() {
        InvalidArgumentException lease = assertThrows(InvalidArgumentException.class,
                () -> client.acquire("k", Duration.ofMillis(1500), Duration.ZERO));
        assertTrue(lease.getMessage().contains("lease"), lease.getMessage());
        InvalidArgumentException wait = assertThrows(InvalidArgumentException.class,
                () -> client.acquire("k", LEASE, Duration.ofSeconds(301)));
        assertTrue(wait.getMessage().contains("wait"), wait.getMessage());
        InvalidArgumentException key = assertThrows(InvalidArgumentException.class,
                () -> client.query("k".repeat(256)));
        assertTrue(key.getMessage().contains("key"), key.getMessage());
        InvalidArgumentException nul = assertThrows(InvalidArgumentException.class,
                () -> client.acquire("a\0b", LEASE, Duration.ZERO));
        assertTrue(nul.getMessage().contains("key"), nul.getMessage());
        assertThrows(InvalidArgumentException.class, () -> client.acquire("k", null, Duration.ZERO));
        ConfigException shortSecret = assertThrows(ConfigException.class,
                () -> Client.builder().addrs(server.addr).authToken("short").build());
        assertTrue(shortSecret.getMessage().contains("16"), shortSecret.getMessage());
        ConfigException noSecret = assertThrows(ConfigException.class,
                () -> Client.builder().addrs(server.addr).build());
        assertTrue(noSecret.getMessage().contains("authToken"), noSecret.getMessage());
        ConfigException noAddr = assertThrows(ConfigException.class,
                () -> Client.builder().authToken(TestServer.SECRET).build());
        assertTrue(noAddr.isDefinitive());
    }

    @Test
    void configurationErrorsNameTheBuilderMethod() {
        record Refusal(Client.Builder builder, List<String> says) {}
        String addr = server.addr;
        String secret = TestServer.SECRET;
        List<Refusal> refusals = List.of(
                new Refusal(Client.builder().authToken(secret), List.of("no server address", "addrs")),
                new Refusal(Client.builder().addrs("nonsense").authToken(secret),
                        List.of("\"nonsense\"", "not host:port", "(addrs)")),
                new Refusal(Client.builder().addrs(addr).authToken("short"), List.of("5 bytes", "authToken")),
                new Refusal(Client.builder().addrs(addr).authToken(secret).owner("o".repeat(256)),
                        List.of("256 bytes", "(owner)")),
                new Refusal(Client.builder().addrs(addr).authToken(secret).tlsCaFile("/nonexistent/ca.pem"),
                        List.of("tlsCaFile")),
                new Refusal(Client.builder().addrs(addr).authToken(secret).clusterName("blue cluster"),
                        List.of("bad cluster name (clusterName)", "ASCII letters")),
                new Refusal(Client.builder().addrs(addr).authToken(secret).clusterName(""),
                        List.of("bad cluster name (clusterName)", "1 to 63 bytes")),
                new Refusal(Client.builder().addrs(addr).authToken(secret).clusterName("blue\0"),
                        List.of("clusterName contains a NUL")));
        List<Executable> checks = new ArrayList<>();
        for (Refusal refusal : refusals) {
            ConfigException e = assertThrows(ConfigException.class, refusal.builder()::build);
            assertTrue(e.isDefinitive());
            for (String word : refusal.says()) {
                checks.add(() -> assertTrue(e.getMessage().contains(word), "no " + word + " in: " + e.getMessage()));
            }
        }
        assertAll(checks);
    }

    @Test
    void aWrongSecretIsSaidAtOnceNamingAuthToken() {
        try (Client wrong = Client.builder().addrs(server.addr).authToken("not-the-secret-0123456789").build()) {
            long start = System.nanoTime();
            // A 100 s wait: a mistake taken for one that trying again could fix would be
            // tried for that long; said at once, it comes well before half of it.
            UnavailableException e = assertThrows(UnavailableException.class,
                    () -> wrong.acquire("wrong-secret", LEASE, Duration.ofSeconds(100)));
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            assertTrue(ms < 50000, "said after " + ms + " ms");
            assertFalse(e.isRetryable());
            assertTrue(e.getMessage().contains("authToken"), e.getMessage());
        }
    }

    @Test
    void aClosedClientRefusesCalls() {
        Client c = server.client("java-closed");
        c.close();
        c.close();
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> c.query("k"));
        assertTrue(e.getMessage().contains("closed"), e.getMessage());
    }

    @Test
    void aPausedServerMakesAnAcquireIndeterminateAndResolveFindsOut() throws Exception {
        try (TestServer own = new TestServer(); Client c = own.client("java-paused")) {
            assertEquals(Optional.empty(), c.query("paused")); // connected
            own.pause();
            long start = System.nanoTime();
            IndeterminateException e = assertThrows(IndeterminateException.class,
                    () -> c.acquire("paused", LEASE, Duration.ZERO));
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            assertFalse(e.isDefinitive());
            assertFalse(e.isRetryable());
            assertTrue(Set.of(IndeterminateException.Cause.NO_ANSWER, IndeterminateException.Cause.CONNECTION_LOST)
                    .contains(e.cause()), e.getMessage());
            assertTrue(e.getMessage().contains("do not enter the critical section"), e.getMessage());
            // Which path answered is the cause; 60 s only against a hang.
            assertTrue(ms < 60000, "indeterminate after " + ms + " ms");
            own.resume();
            Optional<Lock> resolved = e.resolve(Duration.ofSeconds(15));
            if (resolved.isPresent()) {
                assertEquals(ReleaseOutcome.RELEASED, resolved.get().release());
            }
            eventually(Duration.ofSeconds(10), "no grant left held", () -> c.query("paused").isEmpty());
        }
    }

    @Test
    void exceptionsShareOneRoot() {
        List<Class<? extends TicketingException>> kinds = Collections.unmodifiableList(List.of(
                BusyException.class, TimeoutException.class, NotLeaderException.class,
                InvalidArgumentException.class, OverloadedException.class, UnavailableException.class,
                IndeterminateException.class, NoAnswerException.class, ReleaseUnconfirmedException.class,
                ReleaseQueueFullException.class, NotHolderException.class, ProtocolException.class,
                RefusedException.class, ConfigException.class, InternalException.class, CancelledException.class));
        for (Class<? extends TicketingException> k : kinds) {
            assertTrue(RuntimeException.class.isAssignableFrom(k));
        }
    }
}
