// The exception of each C ABI error kind, made from a failed call's ticketing_error.
package dev.ticketing;

final class Errors {
    private Errors() {}

    /** The exception for a failed call's error handle, which it takes over (frees or keeps). */
    static TicketingException of(int kind, long error, Client client) {
        String message = error == 0 ? null : NativeLib.string(NativeLib.ticketing_error_message(error));
        if (message == null) {
            message = NativeLib.string(NativeLib.ticketing_kind_name(kind));
        }
        boolean retryable = error != 0 && NativeLib.ticketing_error_is_retryable(error) == 1;
        if (kind == NativeLib.INDETERMINATE && error != 0) {
            // Kept (freed with the exception): resolve needs the acquire's state.
            return new IndeterminateException(message, retryable, NativeLib.ticketing_error_cause(error), error,
                    client);
        }
        try {
            switch (kind) {
                case NativeLib.BUSY: return new BusyException(message, retryable);
                case NativeLib.TIMEOUT: return new TimeoutException(message, retryable);
                case NativeLib.NOT_LEADER:
                    return new NotLeaderException(message, retryable,
                            error == 0 ? null : NativeLib.string(NativeLib.ticketing_error_leader(error)));
                case NativeLib.INVALID: return new InvalidArgumentException(message, retryable);
                case NativeLib.OVERLOADED: return new OverloadedException(message, retryable);
                case NativeLib.UNAVAILABLE: return new UnavailableException(message, retryable);
                case NativeLib.NO_ANSWER: return new NoAnswerException(message, retryable);
                case NativeLib.UNCONFIRMED: return new ReleaseUnconfirmedException(message, retryable);
                case NativeLib.QUEUE_FULL: return new ReleaseQueueFullException(message, retryable);
                case NativeLib.PROTOCOL: return new ProtocolException(message, retryable);
                case NativeLib.REFUSED: return new RefusedException(message, retryable);
                case NativeLib.CONFIG: return new ConfigException(message, retryable);
                case NativeLib.CANCELLED: return new CancelledException(message, retryable);
                default: return new InternalException(message, retryable);
            }
        } finally {
            if (error != 0) {
                NativeLib.ticketing_error_free(error);
            }
        }
    }

    static InvalidArgumentException invalid(String message) {
        return new InvalidArgumentException(message, false);
    }
}
