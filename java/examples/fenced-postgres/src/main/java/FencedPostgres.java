// Fencing against PostgreSQL from Java through JDBC (docs/java.md, docs/fencing.md).
//
// Worker A is granted seat:N with a 1 s lease and stalls (a GC pause, a swapped-out
// process, a stopped VM); worker B queues for the key and gets it, with a larger token,
// when A's lease ends, and sells the seat. A wakes up and tries to sell too: its write
// carries the older token, so the database rejects it. Sold once, to B.
//
//   TICKETING_ADDRS=127.0.0.1:5225 TICKETING_AUTH_TOKEN=... \
//   FENCE_JDBC='jdbc:postgresql://127.0.0.1:5432/postgres?user=fence' mvn -q compile exec:exec
//
// Exits 0 when the seat was sold exactly once, to B; 1 otherwise. tests/java_package.rs
// runs it against a real `ticketing server` and a throw-away PostgreSQL.

import dev.ticketing.Client;
import dev.ticketing.Lock;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

public final class FencedPostgres {
    static final long START = System.nanoTime();

    static void say(String who, String what) {
        System.out.printf("%6d ms  %s  %s%n", (System.nanoTime() - START) / 1_000_000, who, what);
    }

    /** Sells `seat` to `who` under fencing token `token`, or refuses: "sold", "rejected" or "already sold". */
    static String sellFenced(Connection db, int seat, String who, long token) throws SQLException {
        db.setAutoCommit(false);
        try {
            // 1. compare-and-advance the high-water mark; the row stays locked until COMMIT
            String soldTo;
            try (PreparedStatement fence = db.prepareStatement(
                    "UPDATE seats SET fence = ? WHERE id = ? AND fence < ? RETURNING sold_to")) {
                fence.setLong(1, token);
                fence.setInt(2, seat);
                fence.setLong(3, token);
                try (ResultSet row = fence.executeQuery()) {
                    if (!row.next()) {
                        db.rollback();
                        return "rejected"; // a newer token has written: our lease is over; stop
                    }
                    soldTo = row.getString(1);
                }
            }
            if (soldTo != null) {
                db.rollback();
                return "already sold"; // read under the row lock, so it is current
            }
            // 2. the business writes, in the same transaction
            try (PreparedStatement sell = db.prepareStatement("UPDATE seats SET sold_to = ? WHERE id = ?");
                    PreparedStatement sale = db.prepareStatement(
                            "INSERT INTO sales (seat_id, buyer, token) VALUES (?, ?, ?)")) {
                sell.setString(1, who);
                sell.setInt(2, seat);
                sell.executeUpdate();
                sale.setInt(1, seat);
                sale.setString(2, who);
                sale.setLong(3, token);
                sale.executeUpdate();
            }
            db.commit();
            return "sold";
        } catch (SQLException e) {
            db.rollback();
            throw e;
        } finally {
            db.setAutoCommit(true);
        }
    }

    static String env(String name, String fallback) {
        String v = System.getenv(name);
        return v == null || v.isEmpty() ? fallback : v;
    }

    public static void main(String[] args) throws Exception {
        int seat = Integer.parseInt(env("FENCE_SEAT", "42"));
        String key = "seat:" + seat;
        String jdbc = env("FENCE_JDBC", "jdbc:postgresql://127.0.0.1:5432/postgres?user=fence");
        // The schema of docs/fencing.md §2, shared with examples/fenced_postgres.rs.
        String schema = Files.readString(Path.of(env("FENCE_SCHEMA", "../../../examples/fenced_postgres.sql")));
        Map<String, String> results = new ConcurrentHashMap<>();
        try (Connection dbA = DriverManager.getConnection(jdbc); Connection dbB = DriverManager.getConnection(jdbc);
                Client client = Client.builder().addrs(env("TICKETING_ADDRS", "127.0.0.1:5225").split(","))
                        .authToken(System.getenv("TICKETING_AUTH_TOKEN")).build();
                Client a = client.withOwner("fence-A");
                Client b = client.withOwner("fence-B")) {
            for (String statement : schema.split(";")) {
                if (!statement.isBlank()) {
                    dbA.createStatement().execute(statement);
                }
            }
            try (PreparedStatement reset = dbA.prepareStatement("DELETE FROM sales WHERE seat_id = ?")) {
                reset.setInt(1, seat);
                reset.executeUpdate();
            }
            try (PreparedStatement reset = dbA.prepareStatement(
                    "INSERT INTO seats (id) VALUES (?) ON CONFLICT (id) DO UPDATE SET sold_to = NULL, fence = 0")) {
                reset.setInt(1, seat);
                reset.executeUpdate();
            }

            Lock lockA = a.acquire(key, Duration.ofSeconds(1), Duration.ZERO);
            say("A", "granted, token " + lockA.token() + ", lease " + lockA.lease());
            say("B", "queues for the key behind A");
            CompletableFuture<Void> bSold = b.acquireAsync(key, Duration.ofSeconds(10), Duration.ofSeconds(10))
                    .thenAcceptAsync(lockB -> {
                        try (lockB) {
                            say("B", "granted at A's lease expiry, token " + lockB.token());
                            String result = sellFenced(dbB, seat, "B", lockB.token());
                            results.put("B", result);
                            say("B", "sells with token " + lockB.token() + ": " + result);
                        } catch (SQLException e) {
                            throw new IllegalStateException(e);
                        }
                    });
            say("A", "stalls (GC pause, swapped out, VM stopped...)");
            bSold.get(20, TimeUnit.SECONDS);
            say("A", "wakes up, lease left locally: " + lockA.remaining() + "; goes on with its sale");
            String result = sellFenced(dbA, seat, "A", lockA.token());
            results.put("A", result);
            say("A", "sells with token " + lockA.token() + ": " + result);
            say("A", "release: " + lockA.release().name().toLowerCase());

            String soldTo;
            long fence;
            int sales;
            try (PreparedStatement q = dbA.prepareStatement("SELECT sold_to, fence FROM seats WHERE id = ?")) {
                q.setInt(1, seat);
                try (ResultSet row = q.executeQuery()) {
                    row.next();
                    soldTo = row.getString(1);
                    fence = row.getLong(2);
                }
            }
            try (PreparedStatement q = dbA.prepareStatement("SELECT count(*) FROM sales WHERE seat_id = ?")) {
                q.setInt(1, seat);
                try (ResultSet row = q.executeQuery()) {
                    row.next();
                    sales = row.getInt(1);
                }
            }
            say("-", "seat " + seat + ": sold_to=" + soldTo + ", fence=" + fence + ", sales " + sales);
            if (!"rejected".equals(results.get("A")) || !"sold".equals(results.get("B")) || !"B".equals(soldTo)
                    || sales != 1) {
                System.out.println("NOT sold once");
                System.exit(1);
            }
            System.out.println("sold once, to B");
        }
    }
}
