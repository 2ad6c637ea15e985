// ProtocolException: the C ABI's "protocol" kind.
package dev.ticketing;

/** The server broke the protocol (an answer of the wrong kind): report it. */
public class ProtocolException extends TicketingException {
    private static final long serialVersionUID = 1L;

    ProtocolException(String message, boolean retryable) {
        super("protocol", message, retryable);
    }
}
