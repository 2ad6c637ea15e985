// docs/java.md's ticket-sale example (its ```java block under "Example: a ticket sale"),
// compiled as written and run as a program of its own against a real server.
package dev.ticketing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.jna.Native;
import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import javax.tools.JavaCompiler;
import javax.tools.ToolProvider;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

@Timeout(120)
class DocsExampleTest {
    static final String HEADING = "## Example: a ticket sale";

    static String example() throws Exception {
        String doc = Files.readString(Path.of("..", "docs", "java.md"));
        int section = doc.indexOf(HEADING);
        assertTrue(section >= 0, "docs/java.md has no " + HEADING);
        int start = doc.indexOf("```java\n", section) + "```java\n".length();
        return doc.substring(start, doc.indexOf("```", start));
    }

    static String location(Class<?> c) throws Exception {
        return Path.of(c.getProtectionDomain().getCodeSource().getLocation().toURI()).toString();
    }

    @Test
    void theTicketSaleExampleRunsAsWritten(@TempDir Path dir) throws Exception {
        Path source = dir.resolve("TicketSale.java");
        Files.writeString(source, example());
        String classpath = String.join(File.pathSeparator, location(Client.class), location(Native.class));
        JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
        assertNotNull(javac, "a JDK's compiler");
        assertEquals(0, javac.run(null, null, null, "-d", dir.toString(), "-cp", classpath, source.toString()),
                "the example compiles");
        try (TestServer server = new TestServer()) {
            ProcessBuilder pb = new ProcessBuilder(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                    "-cp", dir + File.pathSeparator + classpath, "TicketSale");
            pb.environment().put("TICKETING_ADDRS", server.addr);
            pb.environment().put("TICKETING_AUTH_TOKEN", TestServer.SECRET);
            pb.redirectErrorStream(true);
            Process run = pb.start();
            String output;
            try {
                if (!run.waitFor(60, TimeUnit.SECONDS)) {
                    throw new AssertionError("the example did not end within 60 s");
                }
                output = new String(run.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            } finally {
                run.destroyForcibly();
            }
            assertEquals(0, run.exitValue(), output);
            for (String expected : List.of("selling 2 tickets under token ", ": 2 of 100 permits in use",
                    "sold [seat:12:1, seat:12:2, seat:12:3, seat:12:4] under token ", " s from now")) {
                assertTrue(output.contains(expected), "no " + expected + " in:\n" + output);
            }
        }
    }
}
