// The conformance driver of the Java library (docs/conformance.md): commands on standard
// input, one outcome line each on standard output, all sharing one dev.ticketing.Client.
// Blocking, a thread per command; with --async, every command through the library's
// CompletableFuture forms, its line written when the future completes. Compiled with
// javac by tests/conformance/libraries.rs against the library's jar.

import dev.ticketing.Client;
import dev.ticketing.Hold;
import dev.ticketing.Holder;
import dev.ticketing.IndeterminateException;
import dev.ticketing.Lock;
import dev.ticketing.Place;
import dev.ticketing.Pool;
import dev.ticketing.ReleaseOutcome;
import dev.ticketing.TicketingException;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.stream.Collectors;

public final class Driver {
    static final Map<String, Lock> LOCKS = new ConcurrentHashMap<>();
    static final Map<String, IndeterminateException> PENDING = new ConcurrentHashMap<>();
    /** The names of holds (their granted and resolved lines carry keys=). */
    static final Set<String> HOLDS = ConcurrentHashMap.newKeySet();

    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    /** CLOCK_MONOTONIC in nanoseconds on Linux: every process on the machine shares it. */
    static long now() {
        return System.nanoTime();
    }

    static long ms(long start) {
        return (System.nanoTime() - start) / 1_000_000;
    }

    static Duration seconds(String s) {
        return Duration.ofNanos(new BigDecimal(s).movePointRight(9).longValue());
    }

    static String failed(String name, TicketingException e, long start) {
        String cause = e instanceof IndeterminateException
                ? " cause=" + ((IndeterminateException) e).cause().name().toLowerCase(Locale.ROOT) : "";
        return name + " " + e.kind() + " retryable=" + (e.isRetryable() ? 1 : 0) + " ms=" + ms(start) + cause
                + " : " + e.getMessage();
    }

    static String outcome(ReleaseOutcome o) {
        return o.name().toLowerCase(Locale.ROOT);
    }

    static String granted(String name, Lock lock, long start) {
        LOCKS.put(name, lock);
        return name + " granted " + lock.token() + " at=" + now() + " ms=" + ms(start) + keys(name, lock);
    }

    /** `keys=KEY:COUNT:CAPACITY,…` as the lock reports them, for a hold's lines. */
    static String keys(String name, Lock lock) {
        if (!HOLDS.contains(name)) {
            return "";
        }
        return " keys=" + lock.permits().stream().map(p -> p.key() + ":" + p.count() + ":" + p.capacity())
                .collect(Collectors.joining(","));
    }

    /**
     * `hold NAME LEASE_S WAIT_S PLACES KEY:COUNT:CAPACITY…` as the library's hold: keys
     * that are all exclusive, without places, go as a List<String> to acquire(List, ...);
     * the others through hold(...).permits(...). A key may hold ':' (the last two fields
     * are the count and the capacity).
     */
    static Hold hold(Client client, String name, String[] args) {
        HOLDS.add(name);
        Hold hold = client.hold(seconds(args[0]), seconds(args[1]));
        for (int i = 3; i < args.length; i++) {
            String part = args[i];
            int cap = part.lastIndexOf(':');
            int cnt = part.lastIndexOf(':', cap - 1);
            if (cnt < 0) {
                throw new IllegalArgumentException("hold: " + part + " is not KEY:COUNT:CAPACITY");
            }
            hold.permits(part.substring(0, cnt), Integer.parseInt(part.substring(cnt + 1, cap)),
                    Integer.parseInt(part.substring(cap + 1)));
        }
        if (args[2].equals("1")) {
            // On the client's thread itself (Runnable::run), so that every place is written
            // before the outcome, as the C ABI calls it; a line on standard output is short.
            hold.onPlace(place -> say(placeLine(name, place)), Runnable::run);
        }
        return hold;
    }

    /** The keys of a hold whose parts are all KEY:1:1 and that asks for no places, else null. */
    static List<String> exclusiveKeys(String[] args) {
        if (!args[2].equals("0")) {
            return null;
        }
        List<String> keys = new ArrayList<>();
        for (int i = 3; i < args.length; i++) {
            if (!args[i].endsWith(":1:1")) {
                return null;
            }
            keys.add(args[i].substring(0, args[i].length() - 4));
        }
        return keys;
    }

    static String placeLine(String name, Place place) {
        long eta = place.estimatedWait().map(Duration::toMillis).orElse(-1L);
        return name + " place " + place.ahead() + " eta_ms=" + eta;
    }

    static String pool(String name, Pool pool, long start) {
        return name + " pool " + pool.capacity() + " " + pool.inUse() + " " + pool.holds() + " " + pool.waiters()
                + " ms=" + ms(start);
    }

    /** `watch NAME`: the lock's expiry future, the library's idiom for its deadline. */
    static Lock watched(String name) {
        Lock lock = LOCKS.get(name);
        if (lock == null) {
            throw new IllegalArgumentException("no lock named " + name);
        }
        return lock;
    }

    static String fired(String name, Lock lock) {
        return name + " deadline at=" + now() + " deadline=" + lock.deadlineNanos();
    }

    static String holder(String name, Optional<Holder> h, long start) {
        if (h.isEmpty()) {
            return name + " free ms=" + ms(start);
        }
        Holder holder = h.get();
        return name + " held " + holder.owner() + " " + holder.token() + " " + holder.waiters() + " ms=" + ms(start);
    }

    static String resolved(String name, Optional<Lock> lock, long start) {
        if (lock.isEmpty()) {
            return name + " resolved not_held ms=" + ms(start);
        }
        LOCKS.put(name, lock.get());
        return name + " resolved held " + lock.get().token() + " at=" + now() + " ms=" + ms(start)
                + keys(name, lock.get());
    }

    static String error(String name, String verb, Throwable t, long start) {
        if (t instanceof CompletionException && t.getCause() != null) {
            t = t.getCause();
        }
        if (t instanceof IllegalArgumentException) {
            return name + " invalid retryable=0 ms=0 : " + t.getMessage();
        }
        if (!(t instanceof TicketingException)) {
            return name + " internal retryable=0 ms=" + ms(start) + " : " + t;
        }
        if (verb.equals("resolve") && t instanceof IndeterminateException) {
            return name + " resolved unknown ms=" + ms(start);
        }
        if (t instanceof IndeterminateException) {
            PENDING.put(name, (IndeterminateException) t);
        }
        return failed(name, (TicketingException) t, start);
    }

    /** A command on its own thread, through the blocking calls. */
    static String blocking(Client client, String verb, String name, String[] args) {
        long start = System.nanoTime();
        try {
            switch (verb) {
                case "acquire":
                    return granted(name, client.acquire(args[0], seconds(args[1]), seconds(args[2])), start);
                case "release": {
                    Lock lock = LOCKS.remove(name);
                    if (lock == null) {
                        return name + " invalid retryable=0 ms=0 : no lock named " + name;
                    }
                    long at = now();
                    return name + " " + outcome(lock.release()) + " at=" + at + " ms=" + ms(start);
                }
                case "query":
                    return holder(name, client.query(args[0]), start);
                case "hold": {
                    List<String> keys = exclusiveKeys(args);
                    HOLDS.add(name);
                    Lock lock = keys != null ? client.acquire(keys, seconds(args[0]), seconds(args[1]))
                            : hold(client, name, args).acquire();
                    return granted(name, lock, start);
                }
                case "pool":
                    return pool(name, client.pool(args[0]), start);
                case "watch": {
                    Lock lock = watched(name);
                    lock.expiry().join();
                    return fired(name, lock);
                }
                case "resolve": {
                    IndeterminateException e = PENDING.remove(name);
                    if (e == null) {
                        return name + " invalid retryable=0 ms=0 : no indeterminate acquire named " + name;
                    }
                    return resolved(name, e.resolve(seconds(args[0])), start);
                }
                default:
                    return name + " invalid retryable=0 ms=0 : unknown command " + verb;
            }
        } catch (RuntimeException e) {
            return error(name, verb, e, start);
        }
    }

    /** A command through the CompletableFuture forms: its line is written when it completes. */
    static CompletableFuture<Void> async(Client client, String verb, String name, String[] args) {
        long start = System.nanoTime();
        CompletableFuture<String> line;
        try {
            switch (verb) {
                case "acquire":
                    line = client.acquireAsync(args[0], seconds(args[1]), seconds(args[2]))
                            .thenApply(lock -> granted(name, lock, start));
                    break;
                case "release": {
                    Lock lock = LOCKS.remove(name);
                    if (lock == null) {
                        line = CompletableFuture.completedFuture(name + " invalid retryable=0 ms=0 : no lock named " + name);
                        break;
                    }
                    long at = now();
                    line = lock.releaseAsync().thenApply(o -> name + " " + outcome(o) + " at=" + at + " ms=" + ms(start));
                    break;
                }
                case "query":
                    line = client.queryAsync(args[0]).thenApply(h -> holder(name, h, start));
                    break;
                case "hold": {
                    List<String> keys = exclusiveKeys(args);
                    HOLDS.add(name);
                    line = (keys != null ? client.acquireAsync(keys, seconds(args[0]), seconds(args[1]))
                            : hold(client, name, args).acquireAsync()).thenApply(lock -> granted(name, lock, start));
                    break;
                }
                case "pool":
                    line = client.poolAsync(args[0]).thenApply(p -> pool(name, p, start));
                    break;
                case "watch": {
                    Lock lock = watched(name);
                    line = lock.expiry().thenApply(v -> fired(name, lock));
                    break;
                }
                case "resolve": {
                    IndeterminateException e = PENDING.remove(name);
                    if (e == null) {
                        line = CompletableFuture.completedFuture(
                                name + " invalid retryable=0 ms=0 : no indeterminate acquire named " + name);
                        break;
                    }
                    line = e.resolveAsync(seconds(args[0])).thenApply(l -> resolved(name, l, start));
                    break;
                }
                default:
                    line = CompletableFuture.completedFuture(name + " invalid retryable=0 ms=0 : unknown command " + verb);
            }
        } catch (RuntimeException e) {
            line = CompletableFuture.completedFuture(error(name, verb, e, start));
        }
        return line.handle((ok, t) -> ok != null ? ok : error(name, verb, t, start)).thenAccept(Driver::say);
    }

    public static void main(String[] argv) throws Exception {
        boolean asyncMode = List.of(argv).contains("--async");
        Map<String, String> env = System.getenv();
        List<String> addrs = new ArrayList<>();
        for (String a : env.getOrDefault("TICKETING_ADDRS", "").split(",")) {
            if (!a.isEmpty()) {
                addrs.add(a);
            }
        }
        Client client;
        try {
            Client.Builder builder = Client.builder().addrs(addrs).authToken(env.getOrDefault("TICKETING_AUTH_TOKEN", ""));
            String owner = env.getOrDefault("TICKETING_OWNER", "").replace("\\0", "\0");
            if (!owner.isEmpty()) {
                builder.owner(owner);
            }
            String ca = env.getOrDefault("TICKETING_TLS_CA", "");
            if (!ca.isEmpty()) {
                builder.tlsCaFile(ca);
            }
            String clusterName = env.getOrDefault("TICKETING_CLUSTER_NAME", "");
            if (!clusterName.isEmpty()) {
                builder.clusterName(clusterName);
            }
            client = builder.build();
        } catch (TicketingException e) {
            say("config-error : " + e.getMessage());
            return;
        }
        say("ready");
        List<Thread> threads = new ArrayList<>();
        List<CompletableFuture<Void>> futures = new ArrayList<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String text; (text = in.readLine()) != null; ) {
            String[] words = text.trim().split("\\s+");
            if (words.length == 0 || words[0].isEmpty()) {
                continue;
            }
            if (words[0].equals("quit")) {
                break;
            }
            if (words.length < 2) {
                continue;
            }
            String verb = words[0];
            String name = words[1];
            String[] args = java.util.Arrays.copyOfRange(words, 2, words.length);
            if (asyncMode) {
                futures.add(async(client, verb, name, args));
            } else {
                Thread t = new Thread(() -> say(blocking(client, verb, name, args)));
                t.start();
                threads.add(t);
            }
        }
        for (Thread t : threads) {
            t.join();
        }
        CompletableFuture.allOf(futures.toArray(new CompletableFuture<?>[0])).join();
        client.close();
    }
}
