// Real `ticketing server` processes for the tests, on loopback only, always stopped:
// $TICKETING_BIN, else the ticketing.bin property (the crate's target/release/ticketing).
package dev.ticketing;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

final class TestServer implements AutoCloseable {
    static final String SECRET = "java-test-secret-0123456789";

    final Process process;
    final List<String> log = new CopyOnWriteArrayList<>();
    volatile String addr;

    static String binary() {
        String bin = System.getenv("TICKETING_BIN");
        if (bin == null || bin.isEmpty()) {
            bin = System.getProperty("ticketing.bin");
        }
        if (bin == null || !Files.isExecutable(Path.of(bin))) {
            throw new IllegalStateException("no ticketing binary at " + bin
                    + ": set TICKETING_BIN or run `cargo build --release` (mvn install does)");
        }
        return bin;
    }

    TestServer() throws IOException, InterruptedException {
        this(Map.of());
    }

    TestServer(Map<String, String> env) throws IOException, InterruptedException {
        ProcessBuilder pb = new ProcessBuilder(binary(), "server");
        pb.environment().clear();
        pb.environment().put("PATH", System.getenv().getOrDefault("PATH", "/usr/bin:/bin"));
        pb.environment().put("TICKETING_AUTH_TOKEN", SECRET);
        pb.environment().put("TICKETING_LISTEN", "127.0.0.1:0");
        pb.environment().put("RUST_LOG", "info");
        pb.environment().putAll(env);
        pb.redirectOutput(ProcessBuilder.Redirect.DISCARD);
        pb.redirectInput(ProcessBuilder.Redirect.PIPE);
        process = pb.start();
        CountDownLatch listening = new CountDownLatch(1);
        Thread reader = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(
                    new InputStreamReader(process.getErrorStream(), StandardCharsets.UTF_8))) {
                for (String line; (line = r.readLine()) != null; ) {
                    log.add(line);
                    int i = line.indexOf(" listening on ");
                    if (i >= 0 && addr == null) {
                        addr = line.substring(i + " listening on ".length()).split("\\s+")[0];
                        listening.countDown();
                    }
                }
            } catch (IOException ignored) {
                // the process ended
            }
            listening.countDown();
        }, "server-log");
        reader.setDaemon(true);
        reader.start();
        if (!listening.await(10, TimeUnit.SECONDS) || addr == null) {
            close();
            throw new IllegalStateException("the server did not listen within 10 s; its log:\n" + String.join("\n", log));
        }
    }

    Client client() {
        return client("java-test-" + ProcessHandle.current().pid());
    }

    Client client(String owner) {
        return Client.builder().addrs(addr).authToken(TestServer.SECRET).owner(owner).build();
    }

    private void signal(String sig) throws IOException, InterruptedException {
        new ProcessBuilder("kill", "-" + sig, Long.toString(process.pid())).inheritIO().start().waitFor();
    }

    /** SIGSTOP, then waits until every thread of the process is stopped. */
    void pause() throws IOException, InterruptedException {
        signal("STOP");
        Path tasks = Path.of("/proc", Long.toString(process.pid()), "task");
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (System.nanoTime() < end) {
            boolean all = true;
            int n = 0;
            try (Stream<Path> list = Files.list(tasks)) {
                for (Path task : (Iterable<Path>) list::iterator) {
                    try {
                        String stat = Files.readString(task.resolve("stat"));
                        String state = stat.substring(stat.lastIndexOf(')') + 1).trim().split("\\s+")[0];
                        n++;
                        all &= state.equals("T") || state.equals("t");
                    } catch (IOException ignored) {
                        // the thread ended
                    }
                }
            }
            if (all && n > 0) {
                return;
            }
            Thread.sleep(5);
        }
        throw new IllegalStateException("the server did not stop");
    }

    void resume() throws IOException, InterruptedException {
        signal("CONT");
    }

    @Override
    public void close() {
        try {
            resume();
        } catch (IOException | InterruptedException ignored) {
            // best effort
        }
        process.destroyForcibly();
        try {
            process.waitFor(10, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
