// A ticket sale against PostgreSQL from Java through JDBC (docs/java.md, docs/fencing.md
// §2.1): buyers take 2 of 100 tickets through a counted key, families hold 4 adjacent
// seats, all or nothing.
//
// The stock: 60 buyers want 2 tickets each of a sale of 100. Each takes one of the 8
// permits of the key checkout:<sale> (at most 8 checkouts at once; the others wait in
// arrival order and hear their place in line), then decrements the stock with the
// store's own conditional write (only while 2 are left, in the same statement) and
// records the order with the hold's token, in one transaction. 50 buyers get 2 tickets,
// 10 are told it is sold out; nothing is oversold even if a checkout outlived its lease.
//
// The seats: each seat is a key of capacity 1. Three families each hold their 4
// adjacent seats in ONE hold (one token for the 4), two of them overlapping and naming
// their seats in opposite orders (no deadlock), while a single buyer takes one seat of
// the first family's block with a plain acquire. Each writer fences every seat row it
// writes with its token, in one transaction: a family buys all 4 seats or none.
//
//   TICKETING_ADDRS=127.0.0.1:5225 TICKETING_AUTH_TOKEN=... \
//   FENCE_JDBC='jdbc:postgresql://127.0.0.1:5432/postgres?user=fence' mvn -q compile exec:exec
//
// Exits 0 when nothing was oversold and no seat sold twice; 1 otherwise.
// tests/java_package.rs runs it against a real `ticketing server` and a throw-away
// PostgreSQL.

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
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

public final class TicketSale {
    static final int STOCK = 100;
    static final int EACH = 2;
    static final int BUYERS = 60;
    static final int CHECKOUTS = 8;
    static final Duration LEASE = Duration.ofSeconds(30);
    static final Duration WAIT = Duration.ofSeconds(120);

    static String env(String name, String fallback) {
        String v = System.getenv(name);
        return v == null || v.isEmpty() ? fallback : v;
    }

    static void schema(Connection db, String file) throws Exception {
        for (String statement : Files.readString(Path.of(file)).split(";")) {
            if (!statement.replaceAll("(?m)--.*$", "").isBlank()) {
                db.createStatement().execute(statement);
            }
        }
    }

    /** One checkout under a permit: the conditional decrement and the order, one transaction. False: sold out. */
    static boolean checkout(Connection db, int sale, String who, Lock hold) throws SQLException {
        db.setAutoCommit(false);
        try (PreparedStatement take = db.prepareStatement(
                "UPDATE stock SET left_count = left_count - ? WHERE sale_id = ? AND left_count >= ? RETURNING left_count");
                PreparedStatement order = db.prepareStatement(
                        "INSERT INTO orders (sale_id, buyer, count, token) VALUES (?, ?, ?, ?)")) {
            take.setInt(1, EACH);
            take.setInt(2, sale);
            take.setInt(3, EACH);
            try (ResultSet left = take.executeQuery()) {
                if (!left.next()) {
                    db.rollback();
                    return false; // fewer than 2 left: nothing written
                }
            }
            order.setInt(1, sale);
            order.setString(2, who);
            order.setInt(3, EACH);
            order.setLong(4, hold.token());
            order.executeUpdate();
            db.commit();
            return true;
        } catch (SQLException e) {
            db.rollback();
            throw e;
        } finally {
            db.setAutoCommit(true);
        }
    }

    /** Buys every seat under `token` in one transaction, fencing each row first: all or none. */
    static boolean buySeats(Connection db, List<Integer> seats, String who, long token) throws SQLException {
        db.setAutoCommit(false);
        try (PreparedStatement fence = db.prepareStatement(
                "UPDATE seats SET fence = ? WHERE id = ? AND fence < ? RETURNING sold_to");
                PreparedStatement sell = db.prepareStatement("UPDATE seats SET sold_to = ? WHERE id = ?");
                PreparedStatement ledger = db.prepareStatement(
                        "INSERT INTO sales (seat_id, buyer, token) VALUES (?, ?, ?)")) {
            for (int seat : seats) {
                fence.setLong(1, token);
                fence.setInt(2, seat);
                fence.setLong(3, token);
                try (ResultSet row = fence.executeQuery()) {
                    if (!row.next() || row.getString(1) != null) {
                        db.rollback();
                        return false; // a newer token has written the row, or the seat is sold
                    }
                }
            }
            for (int seat : seats) {
                sell.setString(1, who);
                sell.setInt(2, seat);
                sell.executeUpdate();
                ledger.setInt(1, seat);
                ledger.setString(2, who);
                ledger.setLong(3, token);
                ledger.executeUpdate();
            }
            db.commit();
            return true;
        } catch (SQLException e) {
            db.rollback();
            throw e;
        } finally {
            db.setAutoCommit(true);
        }
    }

    public static void main(String[] args) throws Exception {
        String jdbc = env("FENCE_JDBC", "jdbc:postgresql://127.0.0.1:5432/postgres?user=fence");
        int sale = 1;
        int firstSeat = 201;
        boolean oversold = false;
        try (Connection db = DriverManager.getConnection(jdbc);
                Client client = Client.builder().addrs(env("TICKETING_ADDRS", "127.0.0.1:5225").split(","))
                        .authToken(System.getenv("TICKETING_AUTH_TOKEN")).build()) {
            // The schemas of docs/fencing.md §2 and §2.1, shared with examples/ticket_sale.rs.
            schema(db, env("FENCE_SCHEMA", "../../../examples/fenced_postgres.sql"));
            schema(db, env("SALE_SCHEMA", "../../../examples/ticket_sale.sql"));
            db.createStatement().execute("INSERT INTO stock (sale_id, left_count) VALUES (" + sale + ", " + STOCK
                    + ") ON CONFLICT (sale_id) DO UPDATE SET left_count = " + STOCK);
            db.createStatement().execute("DELETE FROM orders WHERE sale_id = " + sale);

            // ---- the stock -------------------------------------------------------------
            String key = "checkout:" + sale;
            AtomicInteger inside = new AtomicInteger();
            AtomicInteger most = new AtomicInteger();
            AtomicInteger told = new AtomicInteger();
            CountDownLatch start = new CountDownLatch(1);
            ExecutorService threads = Executors.newFixedThreadPool(BUYERS);
            List<Future<Boolean>> buyers = new ArrayList<>();
            for (int i = 0; i < BUYERS; i++) {
                String who = "buyer-" + i;
                buyers.add(threads.submit(() -> {
                    try (Client buyer = client.withOwner(who); Connection own = DriverManager.getConnection(jdbc)) {
                        AtomicBoolean heard = new AtomicBoolean();
                        start.await();
                        try (Lock hold = buyer.hold(LEASE, WAIT).permits(key, 1, CHECKOUTS)
                                .onPlace(place -> {
                                    if (!heard.getAndSet(true)) {
                                        told.incrementAndGet();
                                    }
                                }).acquire()) {
                            most.accumulateAndGet(inside.incrementAndGet(), Math::max);
                            try {
                                return checkout(own, sale, who, hold);
                            } finally {
                                inside.decrementAndGet();
                            }
                        }
                    }
                }));
            }
            start.countDown();
            int bought = 0;
            int soldOut = 0;
            for (Future<Boolean> buyer : buyers) {
                if (buyer.get()) {
                    bought++;
                } else {
                    soldOut++;
                }
            }
            threads.shutdown();
            int left;
            long ordered;
            try (ResultSet row = db.createStatement().executeQuery(
                    "SELECT (SELECT left_count FROM stock WHERE sale_id = " + sale + "), "
                            + "(SELECT coalesce(sum(count), 0) FROM orders WHERE sale_id = " + sale + ")")) {
                row.next();
                left = row.getInt(1);
                ordered = row.getLong(2);
            }
            System.out.println("stock of " + STOCK + ", " + BUYERS + " buyers of " + EACH + ": " + bought
                    + " bought, " + soldOut + " sold out; " + ordered + " tickets ordered, " + left + " left; at most "
                    + most + " checkouts at once (capacity " + CHECKOUTS + "); " + told
                    + " buyers told their place in line");
            oversold |= ordered > STOCK || ordered + left != STOCK || most.get() > CHECKOUTS;

            // ---- the seats -------------------------------------------------------------
            for (int seat = firstSeat; seat < firstSeat + 10; seat++) {
                db.createStatement().execute("DELETE FROM sales WHERE seat_id = " + seat);
                db.createStatement().execute("INSERT INTO seats (id) VALUES (" + seat
                        + ") ON CONFLICT (id) DO UPDATE SET sold_to = NULL, fence = 0");
            }
            int f = firstSeat;
            Map<String, List<Integer>> wants = new TreeMap<>(Map.of(
                    "family-a", List.of(f, f + 1, f + 2, f + 3),
                    "family-b", List.of(f + 5, f + 4, f + 3, f + 2), // opposite order, overlapping a
                    "family-c", List.of(f + 6, f + 7, f + 8, f + 9),
                    "single", List.of(f + 1)));
            Map<String, String> outcome = new ConcurrentHashMap<>();
            CountDownLatch go = new CountDownLatch(1);
            ExecutorService seatThreads = Executors.newFixedThreadPool(wants.size());
            List<Future<?>> seatBuyers = new ArrayList<>();
            for (Map.Entry<String, List<Integer>> want : wants.entrySet()) {
                String who = want.getKey();
                List<Integer> seats = want.getValue();
                seatBuyers.add(seatThreads.submit(() -> {
                    try (Client buyer = client.withOwner(who); Connection own = DriverManager.getConnection(jdbc)) {
                        go.await();
                        List<String> keys = seats.stream().map(s -> "seat:" + s).toList();
                        try (Lock lock = keys.size() == 1 ? buyer.acquire(keys.get(0), LEASE, WAIT)
                                : buyer.acquire(keys, LEASE, WAIT)) {
                            boolean got = buySeats(own, seats, who, lock.token());
                            outcome.put(who, (got ? "seats " + seats : "nothing (a seat was taken)") + ", token "
                                    + lock.token());
                        }
                    }
                    return null;
                }));
            }
            go.countDown();
            for (Future<?> buyer : seatBuyers) {
                buyer.get();
            }
            seatThreads.shutdown();
            new TreeMap<>(outcome).forEach((who, what) -> System.out.println(who + ": " + what));
            try (ResultSet twice = db.createStatement().executeQuery("SELECT seat_id, count(*) FROM sales WHERE "
                    + "seat_id >= " + f + " AND seat_id < " + (f + 10) + " GROUP BY seat_id HAVING count(*) > 1")) {
                while (twice.next()) {
                    System.out.println("seat " + twice.getInt(1) + " sold " + twice.getInt(2) + " times");
                    oversold = true;
                }
            }
        }
        if (oversold) {
            System.out.println("OVERSOLD");
            System.exit(1);
        }
        System.out.println("nothing oversold, no seat sold twice");
    }
}
