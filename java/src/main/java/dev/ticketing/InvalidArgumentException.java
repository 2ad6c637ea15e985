// InvalidArgumentException: the C ABI's "invalid" kind.
package dev.ticketing;

/** An argument out of its limits (lease whole seconds 1 to 250, wait 0 to 300 s, key and owner 1 to 255 bytes, no NUL), a released lock, or a closed client. Nothing was sent: fix the argument the message names. */
public class InvalidArgumentException extends TicketingException {
    private static final long serialVersionUID = 1L;

    InvalidArgumentException(String message, boolean retryable) {
        super("invalid", message, retryable);
    }
}
