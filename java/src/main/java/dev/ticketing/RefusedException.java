// RefusedException: the C ABI's "refused" kind.
package dev.ticketing;

/** The server refused the request; the message says why. */
public class RefusedException extends TicketingException {
    private static final long serialVersionUID = 1L;

    RefusedException(String message, boolean retryable) {
        super("refused", message, retryable);
    }
}
