// NoAnswerException: the C ABI's "no_answer" kind.
package dev.ticketing;

/** A query was sent and no answer came within the request timeout (10 s): try again. */
public class NoAnswerException extends TicketingException {
    private static final long serialVersionUID = 1L;

    NoAnswerException(String message, boolean retryable) {
        super("no_answer", message, retryable);
    }
}
