// ReleaseOutcome: what a release found (the C ABI's TICKETING_RELEASED...).
package dev.ticketing;

/** What a release found. Each means the key is no longer held under the lock's token. */
public enum ReleaseOutcome {
    /** Released: the next waiter has the key, or it is free. */
    RELEASED,
    /** Not the holder: the lease had already ended (another may have held the key meanwhile). */
    NOT_HOLDER,
    /** Not the holder after an earlier attempt's answer was lost: released by it, or expired. */
    RELEASED_OR_EXPIRED;

    /** The outcome the library names {@code code} ({@code ticketing_release_outcome_name}). */
    static ReleaseOutcome of(int code) {
        String name = Abi.outcomeName(code);
        for (ReleaseOutcome outcome : values()) {
            if (outcome.name().equalsIgnoreCase(name)) {
                return outcome;
            }
        }
        throw new InternalException("unknown release outcome " + code + " (" + name + ")", false);
    }
}
