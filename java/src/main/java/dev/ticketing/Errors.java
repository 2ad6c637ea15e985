// The exception of each C ABI error kind, made from a failed call's ticketing_error.
package dev.ticketing;

final class Errors {
    private Errors() {}

    /**
     * The exception for a failed call's error handle, which it takes over (frees or keeps).
     * The kind's class is found by the library's name of it; a kind this library has no
     * class for (a newer libticketing) is a {@link TicketingException} of that name.
     */
    static TicketingException of(int kind, long error, Client client) {
        String name = Abi.kindName(kind);
        String message = error == 0 ? null : NativeLib.string(NativeLib.ticketing_error_message(error));
        if (message == null) {
            message = name;
        }
        boolean retryable = error != 0 && NativeLib.ticketing_error_is_retryable(error) == 1;
        if (name.equals("indeterminate") && error != 0) {
            // Kept (freed with the exception): resolve needs the acquire's state.
            return new IndeterminateException(message, retryable, NativeLib.ticketing_error_cause(error), error,
                    client);
        }
        try {
            switch (name) {
                case "busy": return new BusyException(message, retryable);
                case "timeout": return new TimeoutException(message, retryable);
                case "not_leader":
                    return new NotLeaderException(message, retryable,
                            error == 0 ? null : NativeLib.string(NativeLib.ticketing_error_leader(error)));
                case "invalid": return new InvalidArgumentException(message, retryable);
                case "overloaded": return new OverloadedException(message, retryable);
                case "unavailable": return new UnavailableException(message, retryable);
                case "no_answer": return new NoAnswerException(message, retryable);
                case "unconfirmed": return new ReleaseUnconfirmedException(message, retryable);
                case "queue_full": return new ReleaseQueueFullException(message, retryable);
                case "protocol": return new ProtocolException(message, retryable);
                case "refused": return new RefusedException(message, retryable);
                case "config": return new ConfigException(message, retryable);
                case "internal": return new InternalException(message, retryable);
                case "cancelled": return new CancelledException(message, retryable);
                default: return new TicketingException(name, message, retryable);
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
