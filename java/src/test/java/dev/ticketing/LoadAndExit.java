// A program for NativeLibTest: loads the library from the jar's copy, says where it was
// loaded from and whether that file still exists, then exits normally or, given
// "crash", at once (no shutdown hook, no deleteOnExit: as a killed process would).
package dev.ticketing;

import java.nio.file.Files;
import java.nio.file.Path;

final class LoadAndExit {
    private LoadAndExit() {}

    public static void main(String[] args) {
        String version = Client.libraryVersion();
        String path = Client.libraryPath();
        System.out.println("loaded " + version + " from " + path);
        System.out.println("file still there: " + Files.exists(Path.of(path)));
        System.out.flush();
        if (args.length > 0 && args[0].equals("crash")) {
            Runtime.getRuntime().halt(3);
        }
    }
}
