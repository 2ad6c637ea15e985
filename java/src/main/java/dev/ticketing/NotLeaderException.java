// NotLeaderException: the C ABI's "not_leader" kind, with the leader the node named.
package dev.ticketing;

import java.util.Optional;

/**
 * The node does not lead and did not execute the request (definitive). The client sends
 * the next request to the leader it named: try again.
 */
public class NotLeaderException extends TicketingException {
    private static final long serialVersionUID = 1L;

    private final String leader;

    NotLeaderException(String message, boolean retryable, String leader) {
        super("not_leader", message, retryable);
        this.leader = leader;
    }

    /** The leader's client address, when the node knew it. */
    public Optional<String> leader() {
        return Optional.ofNullable(leader);
    }
}
