// CancelledException: the C ABI's "cancelled" kind.
package dev.ticketing;

/** An operation cancelled before it was sent (an acquire: not acquired), or a cancelled query or release (a release goes on in the background and the lock is releasable again). A blocking call interrupted ends with it, its cause the InterruptedException. */
public class CancelledException extends TicketingException {
    private static final long serialVersionUID = 1L;

    CancelledException(String message, boolean retryable) {
        super("cancelled", message, retryable);
    }
}
