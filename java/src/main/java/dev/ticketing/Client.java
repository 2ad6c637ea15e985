// Client: the Java face of one native client (include/ticketing.h) — its builder, and
// acquire, holds, release, query, pool and resolve, each blocking or as a CompletableFuture.
package dev.ticketing;

import com.sun.jna.Memory;
import com.sun.jna.StringArray;
import java.lang.ref.Cleaner;
import java.lang.ref.Reference;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executor;
import java.util.concurrent.ForkJoinPool;
import java.util.function.Consumer;
import java.util.concurrent.locks.ReentrantReadWriteLock;

/**
 * A client of a Ticketing node or cluster: connections, the release queue and background
 * threads, shared by any number of threads. One per process is the intended use: its
 * requests are pipelined. Every behaviour — routing to the leader, reconnecting, never
 * resending a written acquire, the release queue and its deadline, resolving — is the
 * native client's; this class converts arguments and results.
 *
 * <pre>{@code
 * try (Client client = Client.builder().addrs("10.0.0.1:5225").authToken(secret).owner("box-office-7").build();
 *      Lock lock = client.acquire("seat:42", Duration.ofSeconds(30), Duration.ofSeconds(5))) {
 *     sellSeat(42, lock.token());
 * }
 * }</pre>
 *
 * <p>Blocking calls wait in Java, on the operation's future, never inside a native call:
 * on a virtual thread they unmount, and {@link Thread#interrupt()} ends them at once
 * (the operation is cancelled by the rule of an async cancel, the interrupt status stays
 * set, and the exception's cause is the InterruptedException). Async calls complete
 * their CompletableFuture on the builder's executor (default {@link
 * ForkJoinPool#commonPool()}), never on a client thread; cancelling one cancels the
 * operation: an acquire not yet sent is not acquired, one already written becomes
 * indeterminate and a grant that comes anyway is released by the client.
 */
public final class Client implements AutoCloseable {
    private static final Cleaner CLEANER = Cleaner.create();
    private static final long INT64_MAX = Long.MAX_VALUE;

    /** The native client; 0 once closed. Freed when the Client is unreachable. */
    private static final class Handle implements Runnable {
        volatile long client;

        Handle(long client) {
            this.client = client;
        }

        @Override
        public void run() {
            long c = client;
            client = 0;
            if (c != 0) {
                NativeLib.ticketing_client_free(c);
            }
        }
    }

    private final Handle handle;
    private final Cleaner.Cleanable cleanable;
    private final ReentrantReadWriteLock closing = new ReentrantReadWriteLock();
    private final String owner;
    private final Executor executor;

    private Client(long client, Executor executor) {
        this.handle = new Handle(client);
        this.cleanable = CLEANER.register(this, handle);
        this.owner = NativeLib.string(NativeLib.ticketing_client_owner(client));
        this.executor = executor;
    }

    /** A builder: {@code Client.builder().addrs(...).authToken(...).build()}. */
    public static Builder builder() {
        return new Builder();
    }

    /** The native library's release, e.g. "0.2.0". */
    public static String libraryVersion() {
        return NativeLib.string(NativeLib.ticketing_version_string());
    }

    /**
     * Where the native library was loaded from. The jar's own copy is deleted as soon as it
     * is loaded (it stays mapped), so that path no longer exists.
     */
    public static String libraryPath() {
        return NativeLib.PATH;
    }

    /** What a client needs: the seed addresses and the secret; the rest is optional. */
    public static final class Builder {
        private final List<String> addrs = new ArrayList<>();
        private byte[] authToken;
        private String owner;
        private String tlsCaFile;
        private String clusterName;
        private Executor executor = ForkJoinPool.commonPool();

        private Builder() {}

        /** Seed addresses "host:port": one live member of the cluster is enough. */
        public Builder addrs(String... addrs) {
            return addrs(Arrays.asList(addrs));
        }

        /** Seed addresses "host:port": one live member of the cluster is enough. */
        public Builder addrs(List<String> addrs) {
            for (String a : addrs) {
                if (a == null) {
                    throw new ConfigException("addrs: an address is null", false);
                }
                this.addrs.add(a);
            }
            return this;
        }

        /** The client secret (at least 16 bytes), as UTF-8. */
        public Builder authToken(String authToken) {
            this.authToken = authToken == null ? null : authToken.getBytes(StandardCharsets.UTF_8);
            return this;
        }

        /** The client secret (at least 16 bytes). */
        public Builder authToken(byte[] authToken) {
            this.authToken = authToken == null ? null : authToken.clone();
            return this;
        }

        /** Sent with every acquire and release (1 to 255 bytes); default host-pid-random, unique per client. */
        public Builder owner(String owner) {
            this.owner = owner;
            return this;
        }

        /** A PEM CA bundle: turns TLS on (default: plain TCP). */
        public Builder tlsCaFile(Path tlsCaFile) {
            this.tlsCaFile = tlsCaFile == null ? null : tlsCaFile.toString();
            return this;
        }

        /** A PEM CA bundle: turns TLS on (default: plain TCP). */
        public Builder tlsCaFile(String tlsCaFile) {
            this.tlsCaFile = tlsCaFile;
            return this;
        }

        /**
         * The name of the cluster this client serves (its nodes' TICKETING_CLUSTER_NAME): a
         * node that reports another name or none is sent nothing, and calls end in an
         * {@link UnavailableException} naming both names. Default (null): none, and the
         * client compares the fencing domains its nodes report instead.
         */
        public Builder clusterName(String clusterName) {
            this.clusterName = clusterName;
            return this;
        }

        /**
         * Where async calls complete their futures (default ForkJoinPool.commonPool()). A
         * completion it rejects (RejectedExecutionException: shut down) ends the future
         * with that exception, completed on ForkJoinPool.commonPool(), never on a client
         * thread; the outcome is dropped (a lock acquired meanwhile is released).
         */
        public Builder executor(Executor executor) {
            if (executor == null) {
                throw new ConfigException("executor is null", false);
            }
            this.executor = executor;
            return this;
        }

        /**
         * Creates the client. No network I/O happens here: connections are made in the
         * background, and an unreachable server is an {@link UnavailableException} of the
         * first operation. Throws {@link ConfigException} naming the setting to fix.
         */
        public Client build() {
            NativeLib.load();
            if (authToken == null) {
                throw new ConfigException("no authToken: give Client.builder() the client secret (at least 16 bytes)",
                        false);
            }
            for (String a : addrs) {
                noNul(a, "addrs");
            }
            byte[] ownerBytes = owner == null ? null : NativeLib.cString(noNul(owner, "owner"));
            byte[] ca = tlsCaFile == null ? null : NativeLib.cString(noNul(tlsCaFile, "tlsCaFile"));
            byte[] name = clusterName == null ? null : NativeLib.cString(noNul(clusterName, "clusterName"));
            StringArray array = new StringArray(addrs.isEmpty() ? new String[] {""} : addrs.toArray(new String[0]),
                    "UTF-8");
            long[] client = new long[1];
            long[] error = new long[1];
            // "java": the client's messages name this builder's methods (authToken, tlsCaFile,
            // clusterName).
            int kind = NativeLib.ticketing_client_new_named(NativeLib.cString("java"), name, array, addrs.size(),
                    authToken, authToken.length, ownerBytes, ca, client, error);
            Reference.reachabilityFence(array);
            if (kind != Abi.OK) {
                throw Errors.of(kind, error[0], null);
            }
            return new Client(client[0], executor);
        }

        private static String noNul(String s, String what) {
            if (s.indexOf('\0') >= 0) {
                throw new ConfigException(what + " contains a NUL character", false);
            }
            return s;
        }
    }

    /** The owner this client acquires and releases as. */
    public String owner() {
        return owner;
    }

    /**
     * The same client (connections, release queue) acquiring and releasing as {@code
     * owner}: give each logical caller its own owner when resolve must tell an
     * indeterminate acquire's grant from another grant to the same owner. Close it too
     * (the connections stay while any handle is open). Never blocks.
     */
    public Client withOwner(String owner) {
        byte[] o = text(owner, "owner");
        return run(client -> {
            long[] out = new long[1];
            long[] error = new long[1];
            int kind = NativeLib.ticketing_client_with_owner(client, o, out, error);
            if (kind != Abi.OK) {
                throw Errors.of(kind, error[0], null);
            }
            return new Client(out[0], executor);
        });
    }

    // ---- acquire ------------------------------------------------------------------------

    /**
     * Acquires {@code key} for {@code lease} (whole seconds, 1 s to 250 s), queueing at most
     * {@code wait} (0 to 300 s; zero is one immediate try). Returns the held {@link Lock}:
     * pass its token to every write of the critical section, and close it.
     *
     * <p>Definitive, the key is NOT held by this call: {@link BusyException}, {@link
     * TimeoutException}, {@link NotLeaderException}, {@link OverloadedException}, {@link
     * UnavailableException}, {@link InvalidArgumentException}, {@link CancelledException}
     * (interrupted before it was sent). {@link IndeterminateException}: the key MAY be
     * held; do not enter the critical section, {@link IndeterminateException#resolve}
     * finds out. Blocks at most max(wait, 3 s) to put the request on a connection plus
     * wait + 5 s for the answer.
     */
    public Lock acquire(String key, Duration lease, Duration wait) {
        if (Thread.currentThread().isInterrupted()) {
            throw interruptedBeforeStart("acquire");
        }
        return startAcquire(key, lease, wait).await(this::lockOf);
    }

    /**
     * {@link #acquire} as a future, completed on the client's executor. Cancelling it stops
     * the wait: an acquire not yet sent is not acquired; one already written becomes
     * indeterminate, and a grant that comes anyway is released by the client.
     */
    public CompletableFuture<Lock> acquireAsync(String key, Duration lease, Duration wait) {
        return startAcquire(key, lease, wait).async(this::lockOf, executor, Lock::abandon);
    }

    private Operation startAcquire(String key, Duration lease, Duration wait) {
        byte[] k = text(key, "key");
        long leaseNs = nanos(lease, "lease");
        long waitNs = nanos(wait, "wait");
        return run(client -> Operation.start(
                (future, error) -> NativeLib.ticketing_acquire_start(client, k, leaseNs, waitNs, future, error)));
    }

    // ---- holds --------------------------------------------------------------------------

    /**
     * Starts a counted and multi-key hold for {@code lease} (whole seconds, 1 s to 250 s),
     * queueing at most {@code wait} (0 to 300 s): name its keys with {@link Hold#key} and
     * {@link Hold#permits}, then {@link Hold#acquire()}. Never blocks.
     */
    public Hold hold(Duration lease, Duration wait) {
        return new Hold(this, lease, wait);
    }

    /**
     * Acquires every key of {@code keys} at once, exclusively (1 to 16 keys, each named
     * once): one {@link Lock}, one fencing token, whose release ends them all. {@code
     * hold(lease, wait).keys(keys).acquire()}; errors and blocking as {@link
     * #acquire(String, Duration, Duration)}.
     */
    public Lock acquire(List<String> keys, Duration lease, Duration wait) {
        return hold(lease, wait).keys(keys).acquire();
    }

    /** {@link #acquire(List, Duration, Duration)} as a future, completed on the client's executor. */
    public CompletableFuture<Lock> acquireAsync(List<String> keys, Duration lease, Duration wait) {
        return hold(lease, wait).keys(keys).acquireAsync();
    }

    /** {@link Hold#acquire()}. */
    Lock acquireHold(List<Permits> parts, Duration lease, Duration wait, Consumer<Place> listener,
            Executor listenerExecutor) {
        if (Thread.currentThread().isInterrupted()) {
            throw interruptedBeforeStart("hold");
        }
        return startHold(parts, lease, wait, listener, listenerExecutor).await(this::lockOf);
    }

    /** {@link Hold#acquireAsync()}. */
    CompletableFuture<Lock> acquireHoldAsync(List<Permits> parts, Duration lease, Duration wait,
            Consumer<Place> listener, Executor listenerExecutor) {
        return startHold(parts, lease, wait, listener, listenerExecutor).async(this::lockOf, executor, Lock::abandon);
    }

    /**
     * The parts as {@code ticketing_hold_part}s passed through unchecked (the native
     * library checks them), and the place listener's sink, registered before the start
     * (the first place may come at once) and ended when the future is ready.
     */
    private Operation startHold(List<Permits> parts, Duration lease, Duration wait, Consumer<Place> listener,
            Executor listenerExecutor) {
        int n = parts.size();
        Memory array = n == 0 ? null : new Memory((long) n * NativeLib.HOLD_PART_SIZE);
        List<Memory> keys = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            Permits part = parts.get(i);
            byte[] k = text(part.key(), "key");
            Memory key = new Memory(k.length);
            key.write(0, k, 0, k.length);
            keys.add(key);
            long at = (long) i * NativeLib.HOLD_PART_SIZE;
            array.setPointer(at, key);
            array.setInt(at + 8, part.count());
            array.setInt(at + 12, part.capacity());
        }
        long leaseNs = nanos(lease, "lease");
        long waitNs = nanos(wait, "wait");
        Places.Sink sink = listener == null ? null
                : Places.register(listener, listenerExecutor == null ? executor : listenerExecutor);
        try {
            Operation op = run(client -> Operation.start((future, error) -> NativeLib.ticketing_hold_start(client,
                    array, n, leaseNs, waitNs, sink == null ? null : Places.CALLBACK, sink == null ? 0 : sink.id,
                    future, error)));
            return sink == null ? op : op.atReady(sink::end);
        } catch (RuntimeException e) {
            if (sink != null) {
                sink.end();
            }
            throw e;
        } finally {
            Reference.reachabilityFence(keys);
            Reference.reachabilityFence(array);
        }
    }

    Lock lockOf(long future) {
        long[] lock = new long[1];
        long[] error = new long[1];
        int kind = NativeLib.ticketing_future_get_lock(future, lock, error);
        if (kind != Abi.OK || lock[0] == 0) {
            throw Errors.of(kind, error[0], this);
        }
        return new Lock(lock[0], executor);
    }

    // ---- release ------------------------------------------------------------------------

    /**
     * Releases {@code key} held by this client's owner under {@code token} (a token kept
     * elsewhere; {@link Lock#release()} is the usual way). Outcomes and errors as
     * Lock.release. Blocks at most 5 s.
     */
    public ReleaseOutcome release(String key, long token) {
        if (Thread.currentThread().isInterrupted()) {
            throw interruptedBeforeStart("release");
        }
        return startRelease(key, token).await(Client::releaseOf);
    }

    /** {@link #release(String, long)} as a future, completed on the client's executor. */
    public CompletableFuture<ReleaseOutcome> releaseAsync(String key, long token) {
        return startRelease(key, token).async(Client::releaseOf, executor, null);
    }

    private Operation startRelease(String key, long token) {
        byte[] k = text(key, "key");
        return run(client -> Operation.start(
                (future, error) -> NativeLib.ticketing_release_start(client, k, token, future, error)));
    }

    private static ReleaseOutcome releaseOf(long future) {
        int[] outcome = new int[1];
        long[] error = new long[1];
        int kind = NativeLib.ticketing_future_get_release(future, outcome, error);
        if (kind != Abi.OK) {
            throw Errors.of(kind, error[0], null);
        }
        return ReleaseOutcome.of(outcome[0]);
    }

    // ---- query --------------------------------------------------------------------------

    /**
     * Who holds {@code key}, answered by the leader (linearizable): the {@link Holder}, or
     * empty when the key is free. Throws {@link UnavailableException}, {@link
     * NoAnswerException}, ... Blocks at most the request timeout (10 s).
     */
    public Optional<Holder> query(String key) {
        if (Thread.currentThread().isInterrupted()) {
            throw interruptedBeforeStart("query");
        }
        return startQuery(key).await(Client::holderOf);
    }

    /** {@link #query(String)} as a future, completed on the client's executor. */
    public CompletableFuture<Optional<Holder>> queryAsync(String key) {
        return startQuery(key).async(Client::holderOf, executor, null);
    }

    private Operation startQuery(String key) {
        byte[] k = text(key, "key");
        return run(client -> Operation.start(
                (future, error) -> NativeLib.ticketing_query_start(client, k, future, error)));
    }

    private static Optional<Holder> holderOf(long future) {
        int[] held = new int[1];
        NativeLib.HolderStruct holder = new NativeLib.HolderStruct();
        long[] error = new long[1];
        int kind = NativeLib.ticketing_future_get_query(future, held, holder, error);
        if (kind != Abi.OK) {
            throw Errors.of(kind, error[0], null);
        }
        if (held[0] == 0) {
            return Optional.empty();
        }
        int ownerLen = Math.min(holder.owner_len, 255);
        String owner = new String(holder.owner, 0, ownerLen, StandardCharsets.UTF_8);
        return Optional.of(new Holder(owner, holder.token, Duration.ofMillis(holder.lease_left_ms), holder.waiters));
    }

    // ---- pool ---------------------------------------------------------------------------

    /**
     * {@code key} as a pool, answered by the leader (linearizable): its capacity (0 when
     * nobody holds it or waits for it), permits in use, holds, waiters, the oldest wait
     * and the oldest holds. Throws as {@link #query(String)}; blocks at most the request
     * timeout (10 s).
     */
    public Pool pool(String key) {
        if (Thread.currentThread().isInterrupted()) {
            throw interruptedBeforeStart("pool");
        }
        return startPool(key).await(Client::poolOf);
    }

    /** {@link #pool(String)} as a future, completed on the client's executor. */
    public CompletableFuture<Pool> poolAsync(String key) {
        return startPool(key).async(Client::poolOf, executor, null);
    }

    private Operation startPool(String key) {
        byte[] k = text(key, "key");
        return run(client -> Operation.start(
                (future, error) -> NativeLib.ticketing_pool_start(client, k, future, error)));
    }

    private static Pool poolOf(long future) {
        NativeLib.PoolInfoStruct info = new NativeLib.PoolInfoStruct();
        long[] error = new long[1];
        int kind = NativeLib.ticketing_future_get_pool(future, info, error);
        if (kind != Abi.OK) {
            throw Errors.of(kind, error[0], null);
        }
        List<Pool.Holding> holders = new ArrayList<>();
        for (int i = 0; i < Math.min(info.holders_len, NativeLib.POOL_HOLDERS_MAX); i++) {
            NativeLib.PoolHolderStruct h = info.holders[i];
            String owner = new String(h.owner, 0, Math.min(h.owner_len, 255), StandardCharsets.UTF_8);
            holders.add(new Pool.Holding(owner, h.token, h.count, Duration.ofMillis(h.lease_left_ms)));
        }
        return new Pool(info.capacity, info.in_use, info.holds, info.waiters, Duration.ofMillis(info.oldest_wait_ms),
                holders);
    }

    // ---- resolve ------------------------------------------------------------------------

    /** {@link IndeterminateException#resolve(Duration)}. */
    Optional<Lock> resolve(IndeterminateException attempt, Duration timeout) {
        if (Thread.currentThread().isInterrupted()) {
            throw interruptedBeforeStart("resolve");
        }
        return startResolve(attempt, timeout).await(future -> resolutionOf(future, attempt));
    }

    /** {@link IndeterminateException#resolveAsync(Duration)}. */
    CompletableFuture<Optional<Lock>> resolveAsync(IndeterminateException attempt, Duration timeout) {
        return startResolve(attempt, timeout).async(future -> resolutionOf(future, attempt), executor,
                held -> held.ifPresent(Lock::abandon));
    }

    private Operation startResolve(IndeterminateException attempt, Duration timeout) {
        long timeoutMs = millis(timeout, "timeout");
        try {
            return run(client -> Operation.start((future, error) -> NativeLib.ticketing_resolve_start(client,
                    attempt.handle(), timeoutMs, future, error)));
        } finally {
            Reference.reachabilityFence(attempt);
        }
    }

    private Optional<Lock> resolutionOf(long future, IndeterminateException attempt) {
        int[] resolution = new int[1];
        long[] lock = new long[1];
        long[] error = new long[1];
        int kind = NativeLib.ticketing_future_get_resolve(future, resolution, lock, error);
        if (kind != Abi.OK) {
            throw Errors.of(kind, error[0], null);
        }
        if (resolution[0] == Abi.HELD && lock[0] != 0) {
            return Optional.of(new Lock(lock[0], executor));
        }
        if (resolution[0] == Abi.NOT_HELD) {
            return Optional.empty();
        }
        throw attempt; // still unknown
    }

    // ---- closing ------------------------------------------------------------------------

    /**
     * Waits until every release this client still has to make is done (at most 5 s), then
     * frees the native client; later calls throw {@link InvalidArgumentException}. Locks
     * taken through it stay valid. A second close does nothing. This one call waits inside
     * the native library.
     */
    @Override
    public void close() {
        ReentrantReadWriteLock.WriteLock write = closing.writeLock();
        write.lock();
        try {
            long c = handle.client;
            if (c == 0) {
                return;
            }
            NativeLib.ticketing_client_close(c, 5000, null, null);
            cleanable.clean();
        } finally {
            write.unlock();
        }
    }

    @Override
    public String toString() {
        return "Client[owner=" + owner + "]";
    }

    // ---- helpers ------------------------------------------------------------------------

    private interface WithHandle<T> {
        T run(long client);
    }

    /** Runs a call that never blocks with the native client, which close waits for. */
    private <T> T run(WithHandle<T> call) {
        ReentrantReadWriteLock.ReadLock read = closing.readLock();
        read.lock();
        try {
            long c = handle.client;
            if (c == 0) {
                throw Errors.invalid("the client is closed");
            }
            return call.run(c);
        } finally {
            read.unlock();
        }
    }

    static CancelledException interruptedBeforeStart(String what) {
        CancelledException e = new CancelledException("the thread was interrupted before the " + what
                + " started: nothing was sent", false);
        e.initCause(new InterruptedException());
        return e;
    }

    /** A string as the NUL-terminated UTF-8 the C ABI reads; a NUL or unpaired surrogate is refused. */
    private static byte[] text(String s, String what) {
        if (s == null) {
            throw Errors.invalid(what + " is null");
        }
        for (int i = 0; i < s.length(); i++) {
            char ch = s.charAt(i);
            if (ch == '\0') {
                throw Errors.invalid(what + " contains a NUL character");
            }
            if (Character.isSurrogate(ch)) {
                boolean paired = Character.isHighSurrogate(ch) && i + 1 < s.length()
                        && Character.isLowSurrogate(s.charAt(i + 1));
                if (!paired) {
                    throw Errors.invalid(what + " is not valid Unicode (an unpaired surrogate at index " + i + ")");
                }
                i++;
            }
        }
        return NativeLib.cString(s);
    }

    /**
     * A lease or a wait in the C ABI's nanoseconds, exactly (saturated past a long): the
     * native library alone checks them (a lease is whole seconds, a wait at most
     * 300 s), alike for every language.
     */
    private static long nanos(Duration d, String what) {
        if (d == null) {
            throw Errors.invalid(what + " is null");
        }
        try {
            return d.toNanos();
        } catch (ArithmeticException e) {
            return d.isNegative() ? -INT64_MAX : INT64_MAX;
        }
    }

    /**
     * A timeout in the C ABI's milliseconds: a sub-millisecond rest counts as a whole
     * millisecond more. The native client checks the range.
     */
    private static long millis(Duration d, String what) {
        if (d == null) {
            throw Errors.invalid(what + " is null");
        }
        try {
            long ms = d.toMillis();
            if (!d.isNegative() && d.minusMillis(ms).getNano() != 0) {
                ms++;
            }
            return ms;
        } catch (ArithmeticException e) {
            return d.isNegative() ? -INT64_MAX : INT64_MAX;
        }
    }
}
