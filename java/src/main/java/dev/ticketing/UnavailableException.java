// UnavailableException: the C ABI's "unavailable" kind.
package dev.ticketing;

/** No connection could take the request in time: nothing was sent (definitive). The message names the last connection error (refused, the auth token, TLS); {@link #isRetryable()} is false when every connection failed with a mistake that trying again cannot fix (the secret, a certificate, TLS on one side only). */
public class UnavailableException extends TicketingException {
    private static final long serialVersionUID = 1L;

    UnavailableException(String message, boolean retryable) {
        super("unavailable", message, retryable);
    }
}
