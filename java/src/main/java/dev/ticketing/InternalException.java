// InternalException: the C ABI's "internal" kind.
package dev.ticketing;

/** A bug in libticketing (a Rust panic, caught at the C boundary): report it. */
public class InternalException extends TicketingException {
    private static final long serialVersionUID = 1L;

    InternalException(String message, boolean retryable) {
        super("internal", message, retryable);
    }
}
