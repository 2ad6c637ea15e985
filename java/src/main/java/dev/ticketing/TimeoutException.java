// TimeoutException: the C ABI's "timeout" kind.
package dev.ticketing;

/** The wait ran out before this caller's turn; it left the queue. Not acquired (definitive): try again or give up. */
public class TimeoutException extends TicketingException {
    private static final long serialVersionUID = 1L;

    TimeoutException(String message, boolean retryable) {
        super("timeout", message, retryable);
    }
}
