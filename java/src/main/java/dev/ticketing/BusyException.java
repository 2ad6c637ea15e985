// BusyException: the C ABI's "busy" kind.
package dev.ticketing;

/** The key is held and the wait was zero (or its queue is full). Not acquired (definitive): try later or wait longer. */
public class BusyException extends TicketingException {
    private static final long serialVersionUID = 1L;

    BusyException(String message, boolean retryable) {
        super("busy", message, retryable);
    }
}
