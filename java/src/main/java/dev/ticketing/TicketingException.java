// The root of every exception of the library: the C ABI's error kind, its message, and
// whether the outcome is definitive.
package dev.ticketing;

/**
 * Every failure of this library: one subclass per error kind of the C ABI. Unchecked, as
 * an operation's failure is the caller's to handle where it can, and never needs a
 * {@code throws} clause on the way.
 *
 * <p>An error of a kind this library has no subclass for (a libticketing newer than
 * this jar) is a {@code TicketingException} whose {@link #kind()} is the library's name of
 * it, definitive and retryable as the library says.
 *
 * <p>{@link #isDefinitive()} says whether the outcome is known: true when the operation
 * certainly did not take effect (an acquire: the key is NOT held by this call; a release:
 * not sent), false when it may have ({@link IndeterminateException}: the key MAY be held;
 * {@link ReleaseUnconfirmedException}: the release may have happened). {@link
 * #isRetryable()} says whether the request was certainly not executed and a new try soon
 * may succeed (not leader, overloaded, a passing unavailability, a full release queue).
 *
 * <p>A blocking call whose thread is interrupted ends at once with the exception of its
 * cancelled operation ({@link CancelledException} when nothing was sent, {@link
 * IndeterminateException} when an acquire had been written), whose cause is the {@link
 * InterruptedException}; the thread's interrupt status stays set ({@link
 * #isInterrupted()}).
 */
public class TicketingException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final String kind;
    private final boolean retryable;
    private final boolean definitive;

    /** An exception of the C ABI's kind {@code kind}, definitive as the library says of it. */
    TicketingException(String kind, String message, boolean retryable) {
        this(kind, message, retryable, Abi.isDefinitive(kind));
    }

    TicketingException(String kind, String message, boolean retryable, boolean definitive) {
        super(message);
        this.kind = kind;
        this.retryable = retryable;
        this.definitive = definitive;
    }

    /** The C ABI's name of the kind: "busy", "timeout", "indeterminate", ... */
    public String kind() {
        return kind;
    }

    /** True when the request was certainly not executed and a new try soon may succeed. */
    public boolean isRetryable() {
        return retryable;
    }

    /**
     * True when the outcome is known: the operation certainly did not take effect (an
     * acquire: the key is not held by this call). False for an indeterminate acquire and
     * an unconfirmed release.
     */
    public boolean isDefinitive() {
        return definitive;
    }

    /** True when the call ended because its thread was interrupted (the cause is the InterruptedException). */
    public boolean isInterrupted() {
        return getCause() instanceof InterruptedException;
    }
}
