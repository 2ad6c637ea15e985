// The Java benchmark (scripts/java-bench.sh): THREADS platform threads sharing one client,
// each on a key of its own, doing acquire+release pairs for DURATION seconds — through
// this library against a Ticketing cluster, or through Redisson's RLock or RFairLock
// against one Redis. One JSON line per run; `report` turns the lines into a table.
//
//   java -cp ... Bench run SYSTEM ADDRS THREADS DURATION_S WARMUP_S   # SYSTEM: ticketing, rlock, rfairlock
//   java -cp ... Bench report results.jsonl

import dev.ticketing.Client;
import dev.ticketing.Lock;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.redisson.Redisson;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

public final class Bench {
    /** One acquire+release pair on the thread's own key. */
    interface Pair {
        void run() throws Exception;
    }

    interface LockSystem extends AutoCloseable {
        Pair pairFor(String key);
    }

    static LockSystem ticketing(String addrs) {
        Client client = Client.builder().addrs(addrs.split(",")).authToken(System.getenv("TICKETING_AUTH_TOKEN"))
                .owner("java-bench").build();
        return new LockSystem() {
            public Pair pairFor(String key) {
                return () -> {
                    Lock lock = client.acquire(key, Duration.ofSeconds(30), Duration.ofSeconds(5));
                    lock.release();
                };
            }

            public void close() {
                client.close();
            }
        };
    }

    static LockSystem redisson(String addr, boolean fair, int threads) {
        Config config = new Config();
        config.useSingleServer().setAddress("redis://" + addr).setConnectionPoolSize(threads)
                .setConnectionMinimumIdleSize(threads);
        RedissonClient client = Redisson.create(config);
        return new LockSystem() {
            public Pair pairFor(String key) {
                RLock lock = fair ? client.getFairLock(key) : client.getLock(key);
                return () -> {
                    if (!lock.tryLock(5, 30, TimeUnit.SECONDS)) {
                        throw new IllegalStateException("not acquired within 5 s");
                    }
                    lock.unlock();
                };
            }

            public void close() {
                client.shutdown();
            }
        };
    }

    static void run(String system, String addrs, int threads, double durationS, double warmupS) throws Exception {
        measure(system, system.equals("ticketing") ? ticketing(addrs)
                : redisson(addrs, system.equals("rfairlock"), threads), threads, durationS, warmupS);
    }

    /** Runs `threads` threads of pairs of `s` (closed after), and prints the JSON line. */
    static void measure(String system, LockSystem lockSystem, int threads, double durationS, double warmupS)
            throws Exception {
        AtomicLong errors = new AtomicLong();
        AtomicReference<String> lastError = new AtomicReference<>();
        long[][] samples = new long[threads][];
        int[] counts = new int[threads];
        String prefix = "java-bench-" + system + "-" + ProcessHandle.current().pid() + "-";
        try (LockSystem s = lockSystem) {
            CountDownLatch go = new CountDownLatch(1);
            long[] window = new long[2];
            List<Thread> list = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                int me = t;
                Pair pair = s.pairFor(prefix + t);
                samples[t] = new long[1 << 14];
                Thread thread = new Thread(() -> {
                    try {
                        go.await();
                    } catch (InterruptedException e) {
                        return;
                    }
                    while (true) {
                        long start = System.nanoTime();
                        if (start >= window[1]) {
                            return;
                        }
                        try {
                            pair.run();
                        } catch (Exception e) {
                            errors.incrementAndGet();
                            lastError.set(e.toString());
                            continue;
                        }
                        if (start >= window[0]) {
                            if (counts[me] == samples[me].length) {
                                samples[me] = Arrays.copyOf(samples[me], counts[me] * 2);
                            }
                            samples[me][counts[me]++] = System.nanoTime() - start;
                        }
                    }
                });
                list.add(thread);
                thread.start();
            }
            long t0 = System.nanoTime();
            window[0] = t0 + (long) (warmupS * 1e9);
            window[1] = window[0] + (long) (durationS * 1e9);
            go.countDown();
            for (Thread thread : list) {
                thread.join();
            }
        }
        int total = Arrays.stream(counts).sum();
        long[] all = new long[total];
        int at = 0;
        for (int t = 0; t < threads; t++) {
            System.arraycopy(samples[t], 0, all, at, counts[t]);
            at += counts[t];
        }
        Arrays.sort(all);
        long p50 = total == 0 ? 0 : all[total / 2] / 1000;
        long p99 = total == 0 ? 0 : all[Math.min(total - 1, (int) (total * 0.99))] / 1000;
        System.out.printf(Locale.ROOT,
                "{\"system\":\"%s\",\"threads\":%d,\"pairs\":%d,\"pairs_per_s\":%.1f,\"p50_us\":%d,\"p99_us\":%d,"
                        + "\"errors\":%d,\"last_error\":%s}%n",
                system, threads, total, total / durationS, p50, p99, errors.get(),
                lastError.get() == null ? "null" : "\"" + lastError.get().replace("\"", "'") + "\"");
    }

    static final Map<String, String> NAMES = new LinkedHashMap<>();

    static {
        NAMES.put("ticketing", "Ticketing (Java library, 3 nodes)");
        NAMES.put("rlock", "Redisson `RLock` (1 Redis)");
        NAMES.put("rfairlock", "Redisson `RFairLock` (1 Redis)");
    }

    static double median(List<Double> xs) {
        List<Double> s = new ArrayList<>(xs);
        s.sort(null);
        int n = s.size();
        return n % 2 == 1 ? s.get(n / 2) : (s.get(n / 2 - 1) + s.get(n / 2)) / 2;
    }

    static double field(String line, String name) {
        Matcher m = Pattern.compile("\"" + name + "\":([0-9.]+)").matcher(line);
        return m.find() ? Double.parseDouble(m.group(1)) : 0;
    }

    static void report(Path results) throws Exception {
        Map<String, List<String>> by = new LinkedHashMap<>();
        for (String line : Files.readAllLines(results)) {
            Matcher m = Pattern.compile("\"system\":\"([a-z]+)\"").matcher(line);
            if (m.find()) {
                by.computeIfAbsent(m.group(1), k -> new ArrayList<>()).add(line);
            }
        }
        Map<String, double[]> med = new LinkedHashMap<>();
        for (String system : NAMES.keySet()) {
            List<String> lines = by.get(system);
            if (lines == null) {
                continue;
            }
            double[] v = new double[5];
            String[] fields = {"pairs_per_s", "p50_us", "p99_us", "errors", "threads"};
            for (int i = 0; i < fields.length; i++) {
                List<Double> xs = new ArrayList<>();
                for (String l : lines) {
                    xs.add(field(l, fields[i]));
                }
                v[i] = i == 3 ? xs.stream().mapToDouble(Double::doubleValue).sum() : median(xs);
            }
            med.put(system, v);
        }
        System.out.println("| threads | system | pairs/s | p50 | p99 | errors | Ticketing ÷ it |");
        System.out.println("|--------:|--------|--------:|----:|----:|-------:|---------------:|");
        double[] t = med.get("ticketing");
        for (Map.Entry<String, double[]> e : med.entrySet()) {
            double[] v = e.getValue();
            String ratio = e.getKey().equals("ticketing") || t == null ? "—"
                    : String.format(Locale.ROOT, "%.2f×", t[0] / v[0]);
            System.out.printf(Locale.ROOT, "| %d | %s | %.0f | %.2f ms | %.2f ms | %.0f | %s |%n", (long) v[4],
                    NAMES.get(e.getKey()), v[0], v[1] / 1000, v[2] / 1000, v[3], ratio);
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length == 6 && args[0].equals("run")) {
            run(args[1], args[2], Integer.parseInt(args[3]), Double.parseDouble(args[4]), Double.parseDouble(args[5]));
        } else if (args.length == 2 && args[0].equals("report")) {
            report(Path.of(args[1]));
        } else {
            System.err.println("usage: Bench run SYSTEM ADDRS THREADS DURATION_S WARMUP_S | Bench report FILE");
            System.exit(2);
        }
        System.exit(0);
    }
}
