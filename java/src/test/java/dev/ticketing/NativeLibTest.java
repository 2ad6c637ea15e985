// The jar's copy of libticketing.so leaves nothing in the temporary directory: a JVM
// that loads it and exits normally, or dies at once, leaves no ticketing-native*
// directory under its java.io.tmpdir; leftovers of a process that died between
// extracting and loading (untouched for over an hour) are removed, a fresh one is not.
package dev.ticketing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

@Timeout(120)
class NativeLibTest {
    /** LoadAndExit in a JVM of its own with {@code tmp} as java.io.tmpdir: its exit status and output. */
    static Run run(Path tmp, String how) throws IOException, InterruptedException {
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        String classpath = System.getProperty("surefire.test.class.path", System.getProperty("java.class.path"));
        ProcessBuilder pb = new ProcessBuilder(java, "-Djava.io.tmpdir=" + tmp, "-cp", classpath,
                LoadAndExit.class.getName(), how);
        pb.environment().remove("TICKETING_LIBRARY"); // the jar's own copy, extracted
        pb.redirectErrorStream(true);
        Process p = pb.start();
        p.getOutputStream().close();
        if (!p.waitFor(60, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            fail("the JVM did not exit within 60 s");
        }
        String output = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        return new Run(p.exitValue(), output);
    }

    record Run(int status, String output) {}

    static List<String> leftovers(Path tmp) throws IOException {
        try (Stream<Path> entries = Files.list(tmp)) {
            return entries.map(e -> e.getFileName().toString()).filter(n -> n.startsWith("ticketing-native"))
                    .sorted().collect(Collectors.toList());
        }
    }

    /** A directory as an extraction leaves it, last touched {@code age} ago. */
    static void leftover(Path tmp, String name, Duration age) throws IOException {
        Path dir = Files.createDirectory(tmp.resolve(name));
        Path file = Files.write(dir.resolve("libticketing.so"), new byte[] {0x7f, 'E', 'L', 'F'});
        FileTime then = FileTime.from(Instant.now().minus(age));
        Files.setLastModifiedTime(file, then);
        Files.setLastModifiedTime(dir, then);
    }

    @Test
    void aNormalExitLeavesNoExtractedLibrary(@TempDir Path tmp) throws Exception {
        Run run = run(tmp, "exit");
        assertEquals(0, run.status(), run.output());
        assertTrue(run.output().contains("from " + tmp.resolve("ticketing-native")), run.output());
        assertEquals(List.of(), leftovers(tmp));
        // Removed once loaded, not at exit: a process killed while it runs leaves nothing either.
        assertTrue(run.output().contains("file still there: false"), run.output());
    }

    @Test
    void aCrashRightAfterLoadingLeavesNoExtractedLibrary(@TempDir Path tmp) throws Exception {
        Run run = run(tmp, "crash");
        assertEquals(3, run.status(), run.output());
        assertTrue(run.output().contains("from " + tmp.resolve("ticketing-native")), run.output());
        assertEquals(List.of(), leftovers(tmp));
    }

    @Test
    void staleLeftoversAreRemovedAndFreshOnesKept(@TempDir Path tmp) throws Exception {
        leftover(tmp, "ticketing-native-stale", Duration.ofHours(2));
        leftover(tmp, "ticketing-native-fresh", Duration.ZERO);
        Path other = Files.createDirectory(tmp.resolve("ticketing-native-other"));
        Files.write(other.resolve("notes.txt"), new byte[] {1});
        Files.setLastModifiedTime(other, FileTime.from(Instant.now().minus(Duration.ofHours(2))));
        Run run = run(tmp, "exit");
        assertEquals(0, run.status(), run.output());
        // The fresh one may be another process's, about to load it; the other holds more than a copy.
        assertEquals(List.of("ticketing-native-fresh", "ticketing-native-other"), leftovers(tmp));
    }
}
