// OverloadedException: the C ABI's "overloaded" kind.
package dev.ticketing;

/** The server has too many requests pending. Not executed (definitive): back off and try again. */
public class OverloadedException extends TicketingException {
    private static final long serialVersionUID = 1L;

    OverloadedException(String message, boolean retryable) {
        super("overloaded", message, retryable);
    }
}
