// The C ABI's tables (kinds, causes, release outcomes, resolutions), read from the
// library when it loads: src/capi/abi.rs declares each once, and nothing here copies it.
package dev.ticketing;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.IntFunction;

/** Each table is numbered as in include/ticketing.h: kinds from 0, the others from 1. */
final class Abi {
    private Abi() {}

    /** The library's names, number → name: a kind's ({@code ticketing_kind_name}), ... */
    private static final List<String> KINDS = table(NativeLib::ticketing_kind_name, 0);
    private static final List<String> CAUSES = table(NativeLib::ticketing_cause_name, 1);
    private static final List<String> OUTCOMES = table(NativeLib::ticketing_release_outcome_name, 1);
    private static final List<String> RESOLUTIONS = table(NativeLib::ticketing_resolution_name, 1);

    /** Kind name → whether an error of it means the operation certainly did not take effect. */
    private static final Map<String, Boolean> DEFINITIVE = definitive();

    /** The status of a call that succeeded ({@code TICKETING_OK}). */
    static final int OK = KINDS.indexOf("ok");
    /** The resolutions of an indeterminate acquire: the grant did happen; certainly not held. */
    static final int HELD = RESOLUTIONS.indexOf("held") + 1;
    static final int NOT_HELD = RESOLUTIONS.indexOf("not_held") + 1;

    /**
     * The names from {@code first} on until the name function's NULL (past the last:
     * "unknown" is a resolution's name, not the end).
     */
    private static List<String> table(IntFunction<Long> nameOf, int first) {
        List<String> names = new ArrayList<>();
        for (int number = first;; number++) {
            String name = NativeLib.string(nameOf.apply(number));
            if (name == null) {
                return Collections.unmodifiableList(names);
            }
            names.add(name);
        }
    }

    private static Map<String, Boolean> definitive() {
        Map<String, Boolean> definitive = new HashMap<>();
        for (int kind = 0; kind < KINDS.size(); kind++) {
            definitive.put(KINDS.get(kind), NativeLib.ticketing_kind_is_definitive(kind) == 1);
        }
        return Collections.unmodifiableMap(definitive);
    }

    private static String name(List<String> names, int first, int number) {
        int i = number - first;
        return i >= 0 && i < names.size() ? names.get(i) : "unknown";
    }

    /** A kind's name ("busy", ...), "unknown" for a number the library does not have. */
    static String kindName(int kind) {
        return name(KINDS, 0, kind);
    }

    /** True when an error of the kind {@code name} means the operation certainly did not take effect. */
    static boolean isDefinitive(String name) {
        return DEFINITIVE.getOrDefault(name, false);
    }

    /** A cause's name ("connection_lost", ...), "unknown" past the last. */
    static String causeName(int cause) {
        return name(CAUSES, 1, cause);
    }

    /** A release outcome's name ("released", ...), "unknown" past the last. */
    static String outcomeName(int outcome) {
        return name(OUTCOMES, 1, outcome);
    }
}
