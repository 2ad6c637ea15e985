// Counted and multi-key holds through the Java library, blocking and async, beside
// Redisson's RPermitExpirableSemaphore and RedissonMultiLock, its blocking and async
// forms (scripts/java-holds-bench.sh); and 10,000 async holds waiting with places in
// line on one key through one client.
//
//   java -cp ... JavaHoldsBench run SYSTEM WORKLOAD ADDRS N DURATION_S WARMUP_S
//       SYSTEM: java (N platform threads, blocking), java-async (N concurrent
//       acquireAsync chains), redisson (N threads), redisson-async (N async chains);
//       all on ONE client. WORKLOAD: stock (1 of a stock of 1000, released at once),
//       multi (4 keys of the caller's own at once, released at once).
//   java -cp ... JavaHoldsBench waiters ADDRS N
//       N holds with a place listener wait on one key, held by a second client; its
//       release starts the hand-offs (every waiter releases at once when granted).
//
// One JSON line per run, as Bench's (p50_us, p99_us of a pair).

import dev.ticketing.Client;
import dev.ticketing.Hold;
import dev.ticketing.Lock;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executor;
import java.util.concurrent.ForkJoinPool;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Supplier;
import java.util.stream.Stream;
import org.redisson.Redisson;
import org.redisson.RedissonMultiLock;
import org.redisson.api.RLock;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

public final class JavaHoldsBench {
    static final int STOCK = 1000;
    static final int KEYS_PER_HOLD = 4;
    static final Duration LEASE = Duration.ofSeconds(30);
    static final Duration WAIT = Duration.ofSeconds(5);

    static Client client(String addrs, String owner) {
        return Client.builder().addrs(addrs.split(",")).authToken(System.getenv("TICKETING_AUTH_TOKEN"))
                .owner(owner).build();
    }

    static String prefix(String system) {
        return "java-holds-" + system + "-" + ProcessHandle.current().pid() + "-";
    }

    static List<String> keysOf(String base) {
        List<String> keys = new ArrayList<>();
        for (int i = 0; i < KEYS_PER_HOLD; i++) {
            keys.add(base + "-" + i);
        }
        return keys;
    }

    // ---- blocking: N platform threads, Bench.measure --------------------------------

    static Bench.LockSystem ticketing(String addrs, boolean stock) {
        Client client = client(addrs, "java-holds-bench");
        String stockKey = prefix("java") + "stock";
        return new Bench.LockSystem() {
            public Bench.Pair pairFor(String key) {
                if (stock) {
                    Hold hold = client.hold(LEASE, WAIT).permits(stockKey, 1, STOCK);
                    return () -> hold.acquire().release();
                }
                List<String> keys = keysOf(key);
                return () -> client.acquire(keys, LEASE, WAIT).release();
            }

            public void close() {
                client.close();
            }
        };
    }

    // ---- async: N chains of pairs, each starting its next pair when one ends -----------

    interface AsyncSystem extends AutoCloseable {
        /** The chain's pair: a new future of one acquire and its release each call. */
        Supplier<CompletableFuture<?>> pairFor(String key, long chain);

        @Override
        void close();
    }

    static AsyncSystem ticketingAsync(String addrs, boolean stock) {
        Client client = client(addrs, "java-holds-bench-async");
        String stockKey = prefix("java-async") + "stock";
        return new AsyncSystem() {
            public Supplier<CompletableFuture<?>> pairFor(String key, long chain) {
                Hold hold = stock ? client.hold(LEASE, WAIT).permits(stockKey, 1, STOCK)
                        : client.hold(LEASE, WAIT).keys(keysOf(key));
                return () -> hold.acquireAsync().thenCompose(Lock::releaseAsync);
            }

            public void close() {
                client.close();
            }
        };
    }

    static RedissonClient redissonClient(String addr, int connections) {
        Config config = new Config();
        config.useSingleServer().setAddress("redis://" + addr).setConnectionPoolSize(connections)
                .setConnectionMinimumIdleSize(connections);
        return Redisson.create(config);
    }

    static AsyncSystem redissonAsync(String addr, boolean stock, int chains) {
        RedissonClient client = redissonClient(addr, chains);
        RPermitExpirableSemaphore semaphore = client.getPermitExpirableSemaphore(prefix("redisson-async") + "stock");
        if (stock && !semaphore.trySetPermits(STOCK)) {
            throw new IllegalStateException("the semaphore exists already");
        }
        return new AsyncSystem() {
            public Supplier<CompletableFuture<?>> pairFor(String key, long chain) {
                if (stock) {
                    return () -> semaphore.tryAcquireAsync(WAIT.toSeconds(), LEASE.toSeconds(), TimeUnit.SECONDS)
                            .toCompletableFuture().thenCompose(id -> {
                                if (id == null) {
                                    return CompletableFuture.failedFuture(
                                            new IllegalStateException("no permit within 5 s"));
                                }
                                return semaphore.releaseAsync(id).toCompletableFuture();
                            });
                }
                RLock[] locks = new RLock[KEYS_PER_HOLD];
                for (int i = 0; i < KEYS_PER_HOLD; i++) {
                    locks[i] = client.getLock(key + "-" + i);
                }
                RedissonMultiLock lock = new RedissonMultiLock(locks);
                // A chain runs on whichever thread completes its stages: it is its own
                // "thread" to Redisson's reentrant locks, by an id of its own.
                long owner = 1_000_000L + chain;
                return () -> lock.tryLockAsync(WAIT.toSeconds(), LEASE.toSeconds(), TimeUnit.SECONDS, owner)
                        .toCompletableFuture().thenCompose(locked -> {
                            if (!locked) {
                                return CompletableFuture.failedFuture(
                                        new IllegalStateException("not acquired within 5 s"));
                            }
                            return lock.unlockAsync(owner).toCompletableFuture();
                        });
            }

            public void close() {
                client.shutdown();
            }
        };
    }

    /** Runs `chains` chains of pairs of `s` (closed after), and prints the JSON line. */
    static void measureAsync(String system, String workload, AsyncSystem lockSystem, int chains, double durationS,
            double warmupS) throws Exception {
        AtomicLong errors = new AtomicLong();
        AtomicReference<String> lastError = new AtomicReference<>();
        long[][] samples = new long[chains][];
        int[] counts = new int[chains];
        String prefix = prefix(system);
        try (AsyncSystem s = lockSystem) {
            CountDownLatch done = new CountDownLatch(chains);
            List<Supplier<CompletableFuture<?>>> pairs = new ArrayList<>();
            for (int c = 0; c < chains; c++) {
                pairs.add(s.pairFor(prefix + c, c));
                samples[c] = new long[1 << 14];
            }
            long t0 = System.nanoTime();
            long from = t0 + (long) (warmupS * 1e9);
            long until = from + (long) (durationS * 1e9);
            for (int c = 0; c < chains; c++) {
                int me = c;
                Runnable[] next = new Runnable[1];
                next[0] = () -> {
                    long start = System.nanoTime();
                    if (start >= until) {
                        done.countDown();
                        return;
                    }
                    CompletableFuture<?> pair;
                    try {
                        pair = pairs.get(me).get();
                    } catch (RuntimeException e) {
                        pair = CompletableFuture.failedFuture(e);
                    }
                    // A pair that ended already starts the next elsewhere (never deeper);
                    // else the next starts where this one completes.
                    boolean already = pair.isDone();
                    pair.whenComplete((r, e) -> {
                        if (e != null) {
                            errors.incrementAndGet();
                            lastError.set(e.toString());
                        } else if (start >= from) {
                            if (counts[me] == samples[me].length) {
                                samples[me] = Arrays.copyOf(samples[me], counts[me] * 2);
                            }
                            samples[me][counts[me]++] = System.nanoTime() - start;
                        }
                        if (already) {
                            ForkJoinPool.commonPool().execute(next[0]);
                        } else {
                            next[0].run();
                        }
                    });
                };
                next[0].run();
            }
            if (!done.await((long) (warmupS + durationS + 60), TimeUnit.SECONDS)) {
                throw new IllegalStateException("the chains did not end");
            }
        }
        print(system, workload, chains, samples, counts, durationS, errors.get(), lastError.get());
    }

    static void print(String system, String workload, int n, long[][] samples, int[] counts, double durationS,
            long errors, String lastError) {
        int total = Arrays.stream(counts).sum();
        long[] all = new long[total];
        int at = 0;
        for (int t = 0; t < n; t++) {
            System.arraycopy(samples[t], 0, all, at, counts[t]);
            at += counts[t];
        }
        Arrays.sort(all);
        long p50 = total == 0 ? 0 : all[total / 2] / 1000;
        long p99 = total == 0 ? 0 : all[Math.min(total - 1, (int) (total * 0.99))] / 1000;
        System.out.printf(Locale.ROOT,
                "{\"system\":\"%s\",\"workload\":\"%s\",\"callers\":%d,\"pairs\":%d,\"pairs_per_s\":%.1f,"
                        + "\"p50_us\":%d,\"p99_us\":%d,\"errors\":%d,\"last_error\":%s}%n",
                system, workload, n, total, total / durationS, p50, p99, errors,
                lastError == null ? "null" : "\"" + lastError.replace("\"", "'") + "\"");
    }

    // ---- 10,000 waiters ---------------------------------------------------------------

    static int threads() {
        try (Stream<Path> tasks = Files.list(Path.of("/proc/self/task"))) {
            return (int) tasks.count();
        } catch (IOException e) {
            return -1;
        }
    }

    /**
     * A timer ticking every 1 ms whose ticks run on `executor` (the client's: the one
     * completing the futures and delivering the places): each tick's lateness is the time
     * from when it was due to when it ran. `phase` picks the slot the worst goes in.
     */
    static final class Ticker {
        final ScheduledExecutorService timer = new ScheduledThreadPoolExecutor(1, r -> {
            Thread t = new Thread(r, "stall-ticker");
            t.setDaemon(true);
            return t;
        });
        final Executor executor;
        final long[] worstNs = new long[3];
        final long[] ticks = new long[3];
        volatile int phase;
        volatile boolean stopped;
        volatile int maxThreads;
        private long due;
        private long lastCount;

        Ticker(Executor executor) {
            this.executor = executor;
        }

        void start() {
            due = System.nanoTime() + 1_000_000;
            timer.schedule(() -> executor.execute(this::tick), 1, TimeUnit.MILLISECONDS);
        }

        private void tick() {
            long now = System.nanoTime();
            int p = phase;
            worstNs[p] = Math.max(worstNs[p], now - due);
            ticks[p]++;
            if (now - lastCount > 100_000_000L) { // the threads, every 100 ms
                lastCount = now;
                maxThreads = Math.max(maxThreads, threads());
            }
            if (stopped) {
                return;
            }
            due = now + 1_000_000;
            timer.schedule(() -> executor.execute(this::tick), 1, TimeUnit.MILLISECONDS);
        }

        void stop() {
            stopped = true;
            timer.shutdown();
        }
    }

    /**
     * The control: a thread of its own sleeping 1 ms at a time (parkNanos), its worst
     * lateness per phase. It waits on nothing of the client's: what it sees late is the
     * machine (the CPU shared with other processes) or the JVM (a pause), not the
     * executor.
     */
    static final class Control extends Thread {
        final Ticker ticker;
        final long[] worstNs = new long[3];

        Control(Ticker ticker) {
            super("stall-control");
            setDaemon(true);
            this.ticker = ticker;
        }

        @Override
        public void run() {
            while (!ticker.stopped) {
                long due = System.nanoTime() + 1_000_000;
                java.util.concurrent.locks.LockSupport.parkNanos(1_000_000);
                int p = ticker.phase;
                worstNs[p] = Math.max(worstNs[p], System.nanoTime() - due);
            }
        }
    }

    /** n holds waiting on `key` through `client`; their futures end when each has released. */
    static List<CompletableFuture<?>> line(Client client, String key, int n, AtomicLong places,
            AtomicIntegerArray placed, AtomicLong granted, AtomicLong lastGrant) {
        List<CompletableFuture<?>> line = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            int me = i;
            line.add(client.hold(LEASE, Duration.ofSeconds(120)).key(key).onPlace(place -> {
                places.incrementAndGet();
                if (placed != null) {
                    placed.incrementAndGet(me);
                }
            }).acquireAsync().thenCompose(lock -> {
                granted.incrementAndGet();
                lastGrant.accumulateAndGet(System.nanoTime(), Math::max);
                return lock.releaseAsync();
            }));
        }
        return line;
    }

    static void waitQueued(Client client, String key, int n, long timeoutS) throws InterruptedException {
        long until = System.nanoTime() + timeoutS * 1_000_000_000L;
        while (client.pool(key).waiters() < n) {
            if (System.nanoTime() > until) {
                throw new IllegalStateException("fewer than " + n + " waiters on " + key + " after " + timeoutS + " s");
            }
            Thread.sleep(20);
        }
    }

    static void waiters(String addrs, int n) throws Exception {
        String prefix = prefix("waiters");
        try (Client client = client(addrs, "java-holds-waiters"); Client holder = client(addrs, "java-holds-holder")) {
            // Warm-up: 1,000 waiters on a key of their own, not measured (JIT, connections).
            AtomicLong ignored = new AtomicLong();
            Lock warm = holder.acquire(prefix + "warm", LEASE, WAIT);
            List<CompletableFuture<?>> warmLine = line(client, prefix + "warm", 1000, ignored, null, new AtomicLong(),
                    new AtomicLong());
            waitQueued(client, prefix + "warm", 1000, 30);
            warm.release();
            CompletableFuture.allOf(warmLine.toArray(new CompletableFuture<?>[0])).get(120, TimeUnit.SECONDS);
            System.gc();
            Thread.sleep(500);

            String key = prefix + "hot";
            Lock held = holder.acquire(key, LEASE, WAIT);
            int before = threads();
            Ticker ticker = new Ticker(ForkJoinPool.commonPool()); // the client's executor
            Control control = new Control(ticker);
            ticker.start();
            control.start();
            Thread.sleep(2000); // phase 0: nothing under way, the machine's own lateness
            ticker.phase = 1; // queueing and waiting
            AtomicLong places = new AtomicLong();
            AtomicIntegerArray placed = new AtomicIntegerArray(n);
            AtomicLong granted = new AtomicLong();
            AtomicLong lastGrant = new AtomicLong();
            long q0 = System.nanoTime();
            List<CompletableFuture<?>> waiting = line(client, key, n, places, placed, granted, lastGrant);
            waitQueued(client, key, n, 60);
            double queuedS = (System.nanoTime() - q0) / 1e9;
            int waitingThreads = threads();
            // They wait for 2 s: each is told its place when it queues.
            Thread.sleep(2000);
            waitingThreads = Math.max(waitingThreads, threads());
            long placesWhileWaiting = places.get();
            ticker.phase = 2; // the hand-offs
            long h0 = System.nanoTime();
            held.release();
            AtomicLong errors = new AtomicLong();
            AtomicReference<String> lastError = new AtomicReference<>();
            for (CompletableFuture<?> f : waiting) {
                try {
                    f.get(180, TimeUnit.SECONDS);
                } catch (Exception e) {
                    errors.incrementAndGet();
                    lastError.set(e.toString());
                }
            }
            double handoffS = (lastGrant.get() - h0) / 1e9;
            ticker.stop();
            int told = 0;
            for (int i = 0; i < n; i++) {
                if (placed.get(i) > 0) {
                    told++;
                }
            }
            System.out.printf(Locale.ROOT,
                    "{\"system\":\"java-async\",\"workload\":\"waiters\",\"waiters\":%d,\"queued_s\":%.3f,"
                            + "\"granted\":%d,\"handoff_s\":%.3f,\"handoffs_per_s\":%.1f,\"places\":%d,"
                            + "\"places_while_waiting\":%d,\"waiters_told_a_place\":%d,\"threads_before\":%d,"
                            + "\"threads_waiting\":%d,\"threads_max\":%d,\"worst_stall_waiting_ms\":%.3f,"
                            + "\"worst_stall_handoffs_ms\":%.3f,\"worst_stall_idle_ms\":%.3f,"
                            + "\"control_worst_ms\":[%.3f,%.3f,%.3f],\"ticks\":%d,\"errors\":%d,\"last_error\":%s}%n",
                    n, queuedS, granted.get(), handoffS, granted.get() / handoffS, places.get(), placesWhileWaiting,
                    told, before, waitingThreads, Math.max(ticker.maxThreads, waitingThreads),
                    ticker.worstNs[1] / 1e6, ticker.worstNs[2] / 1e6, ticker.worstNs[0] / 1e6,
                    control.worstNs[0] / 1e6, control.worstNs[1] / 1e6, control.worstNs[2] / 1e6,
                    ticker.ticks[1] + ticker.ticks[2], errors.get(),
                    lastError.get() == null ? "null" : "\"" + lastError.get().replace("\"", "'") + "\"");
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length == 7 && args[0].equals("run")) {
            String system = args[1];
            String workload = args[2];
            boolean stock = workload.equals("stock");
            if (!stock && !workload.equals("multi")) {
                throw new IllegalArgumentException("workload: stock or multi, not " + workload);
            }
            int n = Integer.parseInt(args[4]);
            double duration = Double.parseDouble(args[5]);
            double warmup = Double.parseDouble(args[6]);
            switch (system) {
                case "java" -> Bench.measure(system, ticketing(args[3], stock), n, duration, warmup);
                case "redisson" -> Bench.measure(system,
                        HoldsBench.redisson(args[3], stock, n), n, duration, warmup);
                case "java-async" -> measureAsync(system, workload, ticketingAsync(args[3], stock), n, duration,
                        warmup);
                case "redisson-async" -> measureAsync(system, workload, redissonAsync(args[3], stock, n), n,
                        duration, warmup);
                default -> throw new IllegalArgumentException("system: java, java-async, redisson, redisson-async");
            }
        } else if (args.length == 3 && args[0].equals("waiters")) {
            waiters(args[1], Integer.parseInt(args[2]));
        } else {
            System.err.println("usage: JavaHoldsBench run java|java-async|redisson|redisson-async stock|multi ADDRS N"
                    + " DURATION_S WARMUP_S | JavaHoldsBench waiters ADDRS N");
            System.exit(2);
        }
        System.exit(0);
    }
}
