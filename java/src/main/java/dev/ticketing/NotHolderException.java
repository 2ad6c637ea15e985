// NotHolderException: the C ABI's "not_holder" kind.
package dev.ticketing;

/** Thrown by {@link Lock#close()} when the lease had already ended before the release: the key may have been granted to someone else meanwhile, and only the fencing token protected the critical section's writes. */
public class NotHolderException extends TicketingException {
    private static final long serialVersionUID = 1L;

    NotHolderException(String message, boolean retryable) {
        super("not_holder", message, retryable, true);
    }
}
