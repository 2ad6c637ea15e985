// The counted and multi-key holds of other systems (scripts/holds-compare.sh): THREADS
// platform threads sharing one client do pairs for DURATION seconds, through Curator's
// InterProcessSemaphoreV2 and InterProcessMultiLock on ZooKeeper, or Redisson's
// RPermitExpirableSemaphore and RedissonMultiLock on Redis. One JSON line per run, as
// Bench's.
//
//   java -cp ... HoldsBench run SYSTEM ADDRS THREADS DURATION_S WARMUP_S
//   SYSTEM: zk-stock, zk-multi, redisson-stock, redisson-multi
//
// stock: every thread takes 1 of the STOCK (1000) permits of one semaphore and gives it
// back. multi: every thread takes the 4 locks of its own keys at once and releases them.

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMultiLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryNTimes;
import org.redisson.Redisson;
import org.redisson.RedissonMultiLock;
import org.redisson.api.RLock;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

public final class HoldsBench {
    static final int STOCK = 1000;
    static final int KEYS_PER_HOLD = 4;

    static Bench.LockSystem zookeeper(String addrs, boolean stock) {
        CuratorFramework client = CuratorFrameworkFactory.newClient(addrs, new RetryNTimes(3, 100));
        client.start();
        String base = "/holds-bench-" + ProcessHandle.current().pid();
        InterProcessSemaphoreV2 semaphore = new InterProcessSemaphoreV2(client, base + "/stock", STOCK);
        return new Bench.LockSystem() {
            public Bench.Pair pairFor(String key) {
                if (stock) {
                    return () -> {
                        Lease lease = semaphore.acquire(5, TimeUnit.SECONDS);
                        if (lease == null) {
                            throw new IllegalStateException("no permit within 5 s");
                        }
                        semaphore.returnLease(lease);
                    };
                }
                List<String> paths = new ArrayList<>();
                for (int i = 0; i < KEYS_PER_HOLD; i++) {
                    paths.add(base + "/" + key + "-" + i);
                }
                InterProcessMultiLock lock = new InterProcessMultiLock(client, paths);
                return () -> {
                    if (!lock.acquire(5, TimeUnit.SECONDS)) {
                        throw new IllegalStateException("not acquired within 5 s");
                    }
                    lock.release();
                };
            }

            public void close() {
                client.close();
            }
        };
    }

    static Bench.LockSystem redisson(String addr, boolean stock, int threads) {
        Config config = new Config();
        config.useSingleServer().setAddress("redis://" + addr).setConnectionPoolSize(threads)
                .setConnectionMinimumIdleSize(threads);
        RedissonClient client = Redisson.create(config);
        RPermitExpirableSemaphore semaphore =
                client.getPermitExpirableSemaphore("holds-bench-" + ProcessHandle.current().pid() + "-stock");
        if (stock && !semaphore.trySetPermits(STOCK)) {
            throw new IllegalStateException("the semaphore exists already");
        }
        return new Bench.LockSystem() {
            public Bench.Pair pairFor(String key) {
                if (stock) {
                    return () -> {
                        String id = semaphore.tryAcquire(5, 30, TimeUnit.SECONDS);
                        if (id == null) {
                            throw new IllegalStateException("no permit within 5 s");
                        }
                        semaphore.release(id);
                    };
                }
                RLock[] locks = new RLock[KEYS_PER_HOLD];
                for (int i = 0; i < KEYS_PER_HOLD; i++) {
                    locks[i] = client.getLock(key + "-" + i);
                }
                RedissonMultiLock lock = new RedissonMultiLock(locks);
                return () -> {
                    if (!lock.tryLock(5, 30, TimeUnit.SECONDS)) {
                        throw new IllegalStateException("not acquired within 5 s");
                    }
                    lock.unlock();
                };
            }

            public void close() {
                client.shutdown();
            }
        };
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 6 || !args[0].equals("run")) {
            System.err.println("usage: HoldsBench run zk-stock|zk-multi|redisson-stock|redisson-multi ADDRS THREADS"
                    + " DURATION_S WARMUP_S");
            System.exit(2);
        }
        String system = args[1];
        int threads = Integer.parseInt(args[3]);
        boolean stock = system.endsWith("-stock");
        Bench.LockSystem s = system.startsWith("zk-") ? zookeeper(args[2], stock) : redisson(args[2], stock, threads);
        Bench.measure(system, s, threads, Double.parseDouble(args[4]), Double.parseDouble(args[5]));
        System.exit(0);
    }
}
