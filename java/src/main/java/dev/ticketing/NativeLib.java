// The C ABI (include/ticketing.h) as JNA direct-mapped methods, and the loading of the
// libticketing.so this jar carries (or the one TICKETING_LIBRARY names).
package dev.ticketing;

import com.sun.jna.Callback;
import com.sun.jna.CallbackThreadInitializer;
import com.sun.jna.Native;
import com.sun.jna.NativeLibrary;
import com.sun.jna.Pointer;
import com.sun.jna.Structure;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.time.Instant;
import java.util.Locale;
import java.util.stream.Stream;

/**
 * Every handle of the C ABI is a {@code long} here (a pointer on a 64-bit platform),
 * every string passed in a NUL-terminated UTF-8 {@code byte[]}, every out-parameter a
 * one-element array. Nothing here blocks on the network but the calls named in {@link
 * Client#close()}: operations run as the C ABI's futures.
 */
final class NativeLib {
    /** The ABI version this library speaks ({@code TICKETING_ABI_VERSION}). */
    static final int ABI_VERSION = 3;

    /** The jar's copy of the library, at JNA's name for the platform. */
    static final String RESOURCE = "/linux-x86-64/libticketing.so";

    /** Where the library was loaded from. */
    static final String PATH;

    /** The prefix of the temporary directory the jar's copy is extracted to. */
    static final String TEMP_PREFIX = "ticketing-native";

    /** How old a leftover temporary directory must be before it is removed (see {@link #removeStale}). */
    static final Duration STALE_AFTER = Duration.ofHours(1);

    static {
        Path extracted = extracted();
        PATH = extracted != null ? extracted.toString() : configured();
        try {
            Native.register(NativeLib.class, NativeLibrary.getInstance(PATH));
        } finally {
            if (extracted != null) {
                // Loaded (or not loadable): the file is needed no more. A loaded library
                // stays mapped, so nothing is left behind on any exit, a crash included.
                remove(extracted);
                removeStale(extracted.getParent().getParent());
            }
        }
        int version = ticketing_version();
        if (version != ABI_VERSION) {
            throw new UnsatisfiedLinkError("ticketing: " + PATH + " has ABI version " + version
                    + ", this library needs " + ABI_VERSION
                    + ": use the libticketing.so of the same checkout as this jar");
        }
    }

    private NativeLib() {}

    /** Forces the library to load (and its ABI version to be checked) now. */
    static void load() {}

    /** The library TICKETING_LIBRARY (or -Dticketing.library) names, or null. */
    private static String configured() {
        String configured = System.getProperty("ticketing.library");
        if (configured == null || configured.isEmpty()) {
            configured = System.getenv("TICKETING_LIBRARY");
        }
        return configured == null || configured.isEmpty() ? null : configured;
    }

    /**
     * The jar's copy of the library, extracted to a new temporary directory (under
     * java.io.tmpdir) for loading; null when TICKETING_LIBRARY names another.
     */
    private static Path extracted() {
        if (configured() != null) {
            return null;
        }
        String os = System.getProperty("os.name", "").toLowerCase(Locale.ROOT);
        String arch = System.getProperty("os.arch", "").toLowerCase(Locale.ROOT);
        if (!os.startsWith("linux") || !(arch.equals("amd64") || arch.equals("x86_64"))) {
            throw new UnsatisfiedLinkError("ticketing: this jar carries libticketing.so for linux-x86-64 only, "
                    + "not " + os + "-" + arch + ": set TICKETING_LIBRARY (or -Dticketing.library) to a "
                    + "libticketing built for this platform by `cargo build --release`");
        }
        try (InputStream in = NativeLib.class.getResourceAsStream(RESOURCE)) {
            if (in == null) {
                throw new UnsatisfiedLinkError("ticketing: " + RESOURCE + " is missing from the jar: build it with "
                        + "`mvn install` in java/ (it runs cargo), or set TICKETING_LIBRARY");
            }
            Path dir = Files.createTempDirectory(TEMP_PREFIX);
            Path file = dir.resolve("libticketing.so");
            try {
                Files.copy(in, file, StandardCopyOption.REPLACE_EXISTING);
            } catch (IOException e) {
                remove(file);
                throw e;
            }
            return file;
        } catch (IOException e) {
            throw new UnsatisfiedLinkError("ticketing: cannot extract " + RESOURCE + " to a temporary file: " + e);
        }
    }

    /** Deletes the extracted file and its directory; at exit should that fail now. */
    private static void remove(Path file) {
        Path dir = file.getParent();
        try {
            Files.deleteIfExists(file);
            Files.deleteIfExists(dir);
        } catch (IOException | RuntimeException e) {
            // Files registered later are deleted first: the file, then its directory.
            dir.toFile().deleteOnExit();
            file.toFile().deleteOnExit();
        }
    }

    /**
     * Removes what a process that died between extracting and loading its copy left in
     * {@code tmp} (and what earlier releases of this library, which kept the copy until
     * exit, left after a crash): {@code ticketing-native*} directories holding nothing but
     * a libticketing.so, untouched for {@link #STALE_AFTER}. That is far longer than any
     * process takes from extracting to loading, so it is never a copy another process is
     * still about to load; one already loaded may go (it stays mapped). Best effort: what
     * cannot be removed (another user's) stays.
     */
    static void removeStale(Path tmp) {
        Instant before = Instant.now().minus(STALE_AFTER);
        try (DirectoryStream<Path> dirs = Files.newDirectoryStream(tmp, TEMP_PREFIX + "*")) {
            for (Path dir : dirs) {
                try {
                    if (!Files.isDirectory(dir, LinkOption.NOFOLLOW_LINKS)
                            || !Files.getLastModifiedTime(dir).toInstant().isBefore(before)) {
                        continue;
                    }
                    Path file = dir.resolve("libticketing.so");
                    try (Stream<Path> entries = Files.list(dir)) {
                        if (entries.anyMatch(e -> !e.equals(file))) {
                            continue; // not only our copy: not ours to remove
                        }
                    }
                    if (Files.exists(file, LinkOption.NOFOLLOW_LINKS) && !Files
                            .getLastModifiedTime(file, LinkOption.NOFOLLOW_LINKS).toInstant().isBefore(before)) {
                        continue;
                    }
                    Files.deleteIfExists(file);
                    Files.deleteIfExists(dir);
                } catch (IOException | RuntimeException e) {
                    // another process removed it first, or it is not ours: leave it
                }
            }
        } catch (IOException | RuntimeException e) {
            // an unreadable temporary directory: nothing to clean
        }
    }

    /** A NUL-terminated UTF-8 copy of a string known to hold no NUL. */
    static byte[] cString(String s) {
        byte[] utf8 = s.getBytes(StandardCharsets.UTF_8);
        byte[] out = new byte[utf8.length + 1];
        System.arraycopy(utf8, 0, out, 0, utf8.length);
        return out;
    }

    /** A C string the library returned, or null for NULL. */
    static String string(long p) {
        return p == 0 ? null : new Pointer(p).getString(0, "UTF-8");
    }

    // ---- Versions --------------------------------------------------------------------
    static native int ticketing_version();
    static native long ticketing_version_string();
    static native long ticketing_kind_name(int kind);
    static native int ticketing_kind_is_definitive(int kind);
    static native long ticketing_cause_name(int cause);
    static native long ticketing_release_outcome_name(int outcome);
    static native long ticketing_resolution_name(int resolution);

    // ---- The client ------------------------------------------------------------------
    static native int ticketing_client_new_named(byte[] binding, byte[] clusterName, Pointer addrs, long addrsLen,
            byte[] authToken, long authTokenLen, byte[] owner, byte[] tlsCaFile, long[] clientOut, long[] errorOut);
    static native int ticketing_client_with_owner(long client, byte[] owner, long[] clientOut, long[] errorOut);
    static native long ticketing_client_owner(long client);
    static native int ticketing_client_close(long client, long timeoutMs, int[] drainedOut, long[] errorOut);
    static native void ticketing_client_free(long client);

    // ---- Futures -----------------------------------------------------------------------
    static native int ticketing_acquire_start(long client, byte[] key, long leaseNs, long waitNs, long[] futureOut,
            long[] errorOut);
    static native int ticketing_lock_release_start(long lock, long[] futureOut, long[] errorOut);
    static native int ticketing_release_start(long client, byte[] key, long token, long[] futureOut,
            long[] errorOut);
    static native int ticketing_query_start(long client, byte[] key, long[] futureOut, long[] errorOut);
    static native int ticketing_resolve_start(long client, long error, long timeoutMs, long[] futureOut,
            long[] errorOut);

    /** {@code ticketing_callback}: called once when the future is ready. */
    interface FutureDone extends Callback {
        void invoke(long future, long ctx);
    }

    static native int ticketing_future_set_callback(long future, FutureDone callback, long ctx, long errorOut);
    static native int ticketing_future_cancel(long future);
    static native int ticketing_future_get_lock(long future, long[] lockOut, long[] errorOut);
    static native int ticketing_future_get_release(long future, int[] outcomeOut, long[] errorOut);
    static native int ticketing_future_get_query(long future, int[] heldOut, HolderStruct holderOut, long[] errorOut);
    static native int ticketing_future_get_resolve(long future, int[] resolutionOut, long[] lockOut,
            long[] errorOut);
    static native void ticketing_future_free(long future);

    // ---- Holds and pools -------------------------------------------------------------------
    /** {@code ticketing_place_callback}: a waiting hold's place in line (uint32 values). */
    interface PlaceCallback extends Callback {
        void invoke(int ahead, int grantsPerKs, long ctx);
    }

    /** Bytes of one {@code ticketing_hold_part}: {key pointer, uint32 count, uint32 capacity}. */
    static final int HOLD_PART_SIZE = 16;

    static native int ticketing_hold_start(long client, Pointer parts, long partsLen, long leaseNs, long waitNs,
            PlaceCallback onPlace, long placeCtx, long[] futureOut, long[] errorOut);
    static native int ticketing_pool_start(long client, byte[] key, long[] futureOut, long[] errorOut);
    static native int ticketing_future_get_pool(long future, PoolInfoStruct poolOut, long[] errorOut);
    static native long ticketing_now_ns();

    // ---- The lock ------------------------------------------------------------------------
    static native long ticketing_lock_token(long lock);
    static native long ticketing_lock_key(long lock);
    static native long ticketing_lock_owner(long lock);
    static native long ticketing_lock_lease_ms(long lock);
    static native long ticketing_lock_remaining_ms(long lock);
    static native void ticketing_lock_free(long lock);
    static native long ticketing_lock_key_count(long lock);
    static native int ticketing_lock_key_at(long lock, long index, long[] keyOut, int[] countOut, int[] capacityOut,
            long[] errorOut);
    static native long ticketing_lock_deadline_ns(long lock);

    // ---- Errors --------------------------------------------------------------------------
    static native int ticketing_error_kind(long error);
    static native long ticketing_error_message(long error);
    static native int ticketing_error_cause(long error);
    static native long ticketing_error_leader(long error);
    static native int ticketing_error_is_retryable(long error);
    static native void ticketing_error_free(long error);

    /** {@code ticketing_holder}, as the header declares it. */
    @Structure.FieldOrder({"token", "lease_left_ms", "waiters", "owner_len", "owner"})
    public static final class HolderStruct extends Structure {
        public long token;
        public long lease_left_ms;
        public int waiters;
        public int owner_len;
        public byte[] owner = new byte[256];
    }

    /** {@code ticketing_pool_holder}, as the header declares it. */
    @Structure.FieldOrder({"token", "lease_left_ms", "count", "owner_len", "owner"})
    public static final class PoolHolderStruct extends Structure {
        public long token;
        public long lease_left_ms;
        public int count;
        public int owner_len;
        public byte[] owner = new byte[256];
    }

    /** The holds a {@code ticketing_pool_info} lists at most ({@code TICKETING_POOL_HOLDERS_MAX}). */
    static final int POOL_HOLDERS_MAX = 8;

    /** {@code ticketing_pool_info}, as the header declares it. */
    @Structure.FieldOrder({"capacity", "in_use", "holds", "waiters", "oldest_wait_ms", "holders_len", "holders"})
    public static final class PoolInfoStruct extends Structure {
        public int capacity;
        public int in_use;
        public int holds;
        public int waiters;
        public long oldest_wait_ms;
        public int holders_len;
        public PoolHolderStruct[] holders = (PoolHolderStruct[]) new PoolHolderStruct().toArray(POOL_HOLDERS_MAX);
    }

    /** Keeps a callback's client threads attached to the JVM (as daemons) between calls. */
    static void keepAttached(Callback callback) {
        Native.setCallbackThreadInitializer(callback, new CallbackThreadInitializer(true, false, "ticketing-client"));
    }
}
