// IndeterminateException: the C ABI's "indeterminate" kind — an acquire whose outcome is
// unknown — and its resolve.
package dev.ticketing;

import java.lang.ref.Cleaner;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;

/**
 * The acquire was sent and no definitive answer came: the key MAY be held under a token
 * this process never learned. Do not enter the critical section.
 *
 * <p>{@link #cause()} says why. {@link #resolve(Duration)} finds out without sending the
 * acquire again; when nobody resolves it, the client finds out by itself and releases a
 * grant that happened anyway (no grant is left orphaned).
 */
public class IndeterminateException extends TicketingException {
    private static final long serialVersionUID = 1L;

    /** Why an acquire is indeterminate ({@code TICKETING_CAUSE_*}). */
    public enum Cause {
        /** The connection broke after bytes of the acquire were written. */
        CONNECTION_LOST,
        /** The server answered that it cannot tell whether it committed the grant. */
        SERVER_UNKNOWN,
        /** No answer within the wait plus the commit margin (5 s). */
        NO_ANSWER,
        /** An answer of the wrong kind. */
        PROTOCOL_VIOLATION,
        /** The grant came after the lease had run out locally. */
        EXPIRED_ON_ARRIVAL,
        /** Its future was cancelled (or its thread interrupted) after it was sent. */
        CANCELLED,
        /** A cause this library does not know. */
        OTHER;

        /** The cause the library names {@code name} ({@code ticketing_cause_name}), else OTHER. */
        static Cause of(String name) {
            for (Cause cause : values()) {
                if (cause != OTHER && cause.name().equalsIgnoreCase(name)) {
                    return cause;
                }
            }
            return OTHER;
        }
    }

    private final Cause cause;
    private final transient Client client;
    private final transient Handle handle;

    /** The native error, freed when the exception is unreachable. */
    private static final class Handle implements Runnable {
        final long error;

        Handle(long error) {
            this.error = error;
        }

        @Override
        public void run() {
            NativeLib.ticketing_error_free(error);
        }
    }

    private static final Cleaner CLEANER = Cleaner.create();

    IndeterminateException(String message, boolean retryable, int cause, long error, Client client) {
        super("indeterminate", message, retryable);
        this.cause = Cause.of(Abi.causeName(cause));
        this.client = client;
        this.handle = new Handle(error);
        CLEANER.register(this, handle);
    }

    /** Why the outcome is unknown. */
    public Cause cause() {
        return cause;
    }

    /**
     * Waits until this acquire's grant can no longer happen (its send instant plus its
     * wait plus 5 s), then asks the leader. Returns the lock if the grant did happen
     * (adopted: use it, or release it), empty if the key is certainly not held by it;
     * throws this exception again when it is still unknown after {@code timeout}. Blocks
     * at most {@code timeout}.
     */
    public Optional<Lock> resolve(Duration timeout) {
        return client().resolve(this, timeout);
    }

    /** {@link #resolve(Duration)} as a future; an outcome still unknown completes it with this exception. */
    public CompletableFuture<Optional<Lock>> resolveAsync(Duration timeout) {
        return client().resolveAsync(this, timeout);
    }

    private Client client() {
        if (client == null) {
            throw Errors.invalid("this IndeterminateException was not thrown by a Client: nothing to resolve");
        }
        return client;
    }

    /** The native error handle (alive while this exception is). */
    long handle() {
        return handle.error;
    }
}
