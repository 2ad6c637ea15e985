// ReleaseQueueFullException: the C ABI's "queue_full" kind.
package dev.ticketing;

/** The client's release queue is full: the release was not sent, the key stays held until released or its lease ends. Release the same lock again soon (retryable). */
public class ReleaseQueueFullException extends TicketingException {
    private static final long serialVersionUID = 1L;

    ReleaseQueueFullException(String message, boolean retryable) {
        super("queue_full", message, retryable);
    }
}
