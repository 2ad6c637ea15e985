// ReleaseUnconfirmedException: the C ABI's "unconfirmed" kind.
package dev.ticketing;

/** No answer to a release within its 5 s deadline: the key may still be held. Nothing is needed (the client keeps checking in the background and releases it once a leader answers, while its lease may run); or release the same lock again for a definite outcome. */
public class ReleaseUnconfirmedException extends TicketingException {
    private static final long serialVersionUID = 1L;

    ReleaseUnconfirmedException(String message, boolean retryable) {
        super("unconfirmed", message, retryable);
    }
}
