// ConfigException: the C ABI's "config" kind.
package dev.ticketing;

/** The client's configuration was refused (no address, a bad address, an auth token under 16 bytes, a bad owner, an unreadable CA file): the message names the builder method to fix. */
public class ConfigException extends TicketingException {
    private static final long serialVersionUID = 1L;

    ConfigException(String message, boolean retryable) {
        super("config", message, retryable);
    }
}
