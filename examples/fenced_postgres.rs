//! Fencing done right, against a real PostgreSQL: two workers sell the same seat.
//!
//! ```sh
//! cargo run --release --example fenced_postgres
//! ```
//!
//! With no configuration it starts an in-process standalone Ticketing node and a
//! throw-away PostgreSQL server (`initdb` in a temp dir, unix socket only; needs
//! Debian's `postgresql` package, run as `nobody` when started as root). To use your
//! own: `TICKETING_ADDRS` + `TICKETING_AUTH_TOKEN` for Ticketing, `FENCE_PG` (a libpq
//! connection string, e.g. `host=/run/postgresql user=app dbname=app`) for PostgreSQL;
//! the example creates the tables `seats` and `sales` there if missing.
//!
//! The story (docs/fencing.md tells it with the SQL):
//!
//! 1. Worker A acquires `seat:N` with a 1 s lease, gets token a, and stalls (a GC
//!    pause, a slow disk, a stopped VM) until long after its lease ended.
//! 2. Worker B was queued for the key; the lease expiry hands it the lock with token
//!    b > a. B sells the seat.
//! 3. A wakes up, unaware that it lost the lock, and sells the seat too — unless the
//!    database rejects its write because it carries an older token than one the
//!    database has already seen.
//!
//! Three runs: **fenced** (compare-and-advance of the seat's high-water token in the
//! SAME transaction as the sale, A stalls before it) → sold once, to B; **fenced, stall
//! inside the transaction** → sold once, to A (its write committed before B's, and B's
//! transaction saw it); **unsafe** (the token is checked and advanced in one step, the
//! sale written in a separate one, A stalls between them) → sold twice.
//!
//! `tests/fencing_postgres.rs` includes this file and runs the same functions against
//! a real `ticketing server` process and a real PostgreSQL server.

use std::error::Error;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use ticketing::client::{Client, ReleaseOutcome};

/// Any error of the example.
pub type BoxError = Box<dyn Error + Send + Sync>;

/// A's lease. The shortest there is, so the stall outlives it quickly.
pub const LEASE_A: Duration = Duration::from_secs(1);
/// B's lease: plenty for one sale.
pub const LEASE_B: Duration = Duration::from_secs(10);
/// How long B may wait in the queue (A's lease must end first).
pub const WAIT_B: Duration = Duration::from_secs(10);
/// Upper bound of every wait between the two workers; beyond it the run fails.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(20);

/// The schema: one row per seat with its high-water fencing token, and a ledger of
/// sales (each row is a customer who was charged: two rows for one seat = sold twice).
pub const SCHEMA: &str = include_str!("fenced_postgres.sql");

/// Fencing done right, one statement: compare-and-advance the high-water token; the
/// row stays locked until COMMIT, so nothing can slip in between check and write.
pub const SQL_FENCE_CHECK: &str =
    "UPDATE seats SET fence = $2 WHERE id = $1 AND fence < $2 RETURNING sold_to";
/// The business write.
pub const SQL_SELL: &str = "UPDATE seats SET sold_to = $2 WHERE id = $1";
/// The ledger entry of the business write.
pub const SQL_LEDGER: &str = "INSERT INTO sales (seat_id, buyer, token) VALUES ($1, $2, $3)";

/// How the sale is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// Fence check-and-advance and the sale in ONE transaction.
    Fenced,
    /// UNSAFE: fence check-and-advance committed on its own, the sale in a later step.
    UnsafeSeparateSteps,
}

/// Where worker A stalls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stall {
    /// After acquiring, before touching the database.
    BeforeSale,
    /// After the fence check passed, before the sale is written (inside the
    /// transaction for `Fenced`, between the two steps for `UnsafeSeparateSteps`).
    AfterFenceCheck,
}

/// What one attempt to sell did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sale {
    /// Written and committed.
    Sold,
    /// The seat was already sold (to this buyer): nothing written.
    AlreadySold(String),
    /// The database has seen a newer token for this row: the writer is a zombie whose
    /// lease has ended. Nothing written.
    Rejected,
}

impl fmt::Display for Sale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sale::Sold => write!(f, "SOLD"),
            Sale::AlreadySold(to) => write!(f, "already sold to {to}, nothing written"),
            Sale::Rejected => write!(f, "REJECTED by the fence (a newer token has written), nothing written"),
        }
    }
}

/// A fencing token as PostgreSQL's bigint. Tokens are microsecond timestamps (about
/// 2^51 today), far below 2^63.
pub fn fence_value(token: u64) -> i64 {
    i64::try_from(token).expect("fencing token below 2^63")
}

/// Sells `seat` to `who` under `token`, the right way: one transaction that first
/// compares-and-advances the seat's high-water token, then writes the sale.
/// `stall` runs after the fence check, inside the open transaction.
pub fn sell_fenced(
    db: &mut postgres::Client,
    seat: i32,
    who: &str,
    token: u64,
    stall: &mut dyn FnMut(),
) -> Result<Sale, postgres::Error> {
    let fence = fence_value(token);
    let mut tx = db.transaction()?;
    // 0 rows: the row has seen this token or a newer one. Dropping `tx` rolls back.
    let Some(row) = tx.query_opt(SQL_FENCE_CHECK, &[&seat, &fence])? else {
        return Ok(Sale::Rejected);
    };
    // Read under the row lock this transaction now holds, so it is current.
    if let Some(buyer) = row.get::<_, Option<String>>(0) {
        return Ok(Sale::AlreadySold(buyer));
    }
    stall();
    tx.execute(SQL_SELL, &[&seat, &who])?;
    tx.execute(SQL_LEDGER, &[&seat, &who, &fence])?;
    tx.commit()?;
    Ok(Sale::Sold)
}

/// UNSAFE — do not copy. The same check, committed on its own; the sale written in a
/// second transaction. A writer that stalls between the two writes long after a newer
/// holder has written.
pub fn sell_unsafe(
    db: &mut postgres::Client,
    seat: i32,
    who: &str,
    token: u64,
    stall: &mut dyn FnMut(),
) -> Result<Sale, postgres::Error> {
    let fence = fence_value(token);
    // Step 1, autocommit: check and advance the high-water token.
    let Some(row) = db.query_opt(SQL_FENCE_CHECK, &[&seat, &fence])? else {
        return Ok(Sale::Rejected);
    };
    if let Some(buyer) = row.get::<_, Option<String>>(0) {
        return Ok(Sale::AlreadySold(buyer));
    }
    stall();
    // Step 2, a separate transaction: nothing ties it to step 1 any more.
    let mut tx = db.transaction()?;
    tx.execute(SQL_SELL, &[&seat, &who])?;
    tx.execute(SQL_LEDGER, &[&seat, &who, &fence])?;
    tx.commit()?;
    Ok(Sale::Sold)
}

/// Where the two services are.
#[derive(Clone, Debug)]
pub struct Setup {
    /// Ticketing client addresses.
    pub addrs: Vec<String>,
    /// Ticketing auth token.
    pub auth_token: Vec<u8>,
    /// libpq connection string.
    pub pg: String,
}

/// What a run did.
#[derive(Debug)]
pub struct Outcome {
    pub a_token: u64,
    pub b_token: u64,
    pub a: Sale,
    pub b: Sale,
    /// The ledger for the seat: (buyer, token) in insertion order.
    pub sales: Vec<(String, i64)>,
    /// The seat row afterwards.
    pub sold_to: Option<String>,
    pub fence: i64,
    /// What happened, in order, with milliseconds since the start.
    pub timeline: Vec<String>,
}

impl Outcome {
    /// True when the seat was sold to exactly one buyer.
    pub fn sold_once(&self) -> bool {
        self.sales.len() == 1 && self.sold_to.as_deref() == Some(self.sales[0].0.as_str())
    }
}

#[derive(Default)]
struct Flags {
    a_holds: bool,
    b_granted: bool,
    b_done: bool,
}

/// The two workers' shared notes: flags with a condition variable, and the timeline.
struct Stage {
    start: Instant,
    flags: Mutex<Flags>,
    changed: Condvar,
    timeline: Mutex<Vec<String>>,
}

impl Stage {
    fn say(&self, text: impl fmt::Display) {
        let line = format!("{:>6} ms  {text}", self.start.elapsed().as_millis());
        self.timeline.lock().unwrap().push(line);
    }

    fn set(&self, f: impl FnOnce(&mut Flags)) {
        f(&mut self.flags.lock().unwrap());
        self.changed.notify_all();
    }

    /// Waits until `ready` holds; an error after [`STEP_TIMEOUT`].
    fn wait(&self, what: &str, ready: impl Fn(&Flags) -> bool) -> Result<(), BoxError> {
        let deadline = Instant::now() + STEP_TIMEOUT;
        let mut flags = self.flags.lock().unwrap();
        while !ready(&flags) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("timed out waiting for {what}").into());
            }
            flags = self.changed.wait_timeout(flags, left).unwrap().0;
        }
        Ok(())
    }
}

/// Creates the tables if needed and makes `seat` unsold with fence 0 and no sales.
pub fn reset_seat(db: &mut postgres::Client, seat: i32) -> Result<(), postgres::Error> {
    db.batch_execute(SCHEMA)?;
    db.execute(
        "INSERT INTO seats (id, sold_to, fence) VALUES ($1, NULL, 0)
         ON CONFLICT (id) DO UPDATE SET sold_to = NULL, fence = 0",
        &[&seat],
    )?;
    db.execute("DELETE FROM sales WHERE seat_id = $1", &[&seat])?;
    Ok(())
}

fn client(setup: &Setup, owner: &str) -> Result<Client, BoxError> {
    Ok(Client::builder().addrs(setup.addrs.clone()).auth_token(&setup.auth_token).owner(owner).build()?)
}

fn sell(
    variant: Variant,
    db: &mut postgres::Client,
    seat: i32,
    who: &str,
    token: u64,
    stall: &mut dyn FnMut(),
) -> Result<Sale, postgres::Error> {
    match variant {
        Variant::Fenced => sell_fenced(db, seat, who, token, stall),
        Variant::UnsafeSeparateSteps => sell_unsafe(db, seat, who, token, stall),
    }
}

/// A's stall: until its lease has certainly ended and B holds the key, then until B
/// has finished its sale or is blocked inside PostgreSQL (waiting for a row lock A
/// holds). So the interleaving is the same on every run, fast machine or slow.
fn stall_a(stage: &Stage, watch: &mut postgres::Client, deadline: Instant) -> Result<(), BoxError> {
    std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
    stage.say("A  (stalled) its lease has ended; it does not know");
    stage.wait("B's grant", |f| f.b_granted)?;
    let until = Instant::now() + STEP_TIMEOUT;
    loop {
        if stage.flags.lock().unwrap().b_done {
            return Ok(());
        }
        let waiting: i64 = watch
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE wait_event_type = 'Lock' AND datname = current_database()",
                &[],
            )?
            .get(0);
        if waiting > 0 {
            stage.say("A  (stalled) B's transaction is blocked on the seat row A's transaction locked");
            return Ok(());
        }
        if Instant::now() >= until {
            return Err("B neither finished nor blocked".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs the two-worker story once on `seat` (key `seat:N`) and reports what happened.
pub fn run_scenario(setup: &Setup, variant: Variant, stall: Stall, seat: i32) -> Result<Outcome, BoxError> {
    let mut db = postgres::Client::connect(&setup.pg, postgres::NoTls)?;
    reset_seat(&mut db, seat)?;
    let key = format!("seat:{seat}");
    let stage = Arc::new(Stage {
        start: Instant::now(),
        flags: Mutex::default(),
        changed: Condvar::new(),
        timeline: Mutex::default(),
    });
    stage.say(format!("--- {variant:?}, A stalls {stall:?} ---"));

    let worker_b = {
        let (setup, stage, key) = (setup.clone(), Arc::clone(&stage), key.clone());
        std::thread::spawn(move || -> Result<(u64, Sale), BoxError> {
            let tickets = client(&setup, "worker-B")?;
            let mut db = postgres::Client::connect(&setup.pg, postgres::NoTls)?;
            stage.wait("A's grant", |f| f.a_holds)?;
            stage.say("B  queues for the key behind A");
            let lock = tickets.acquire(&key, LEASE_B, WAIT_B)?;
            let token = lock.token();
            stage.say(format!("B  granted at A's lease expiry, token {token}"));
            stage.set(|f| f.b_granted = true);
            let sale = sell(variant, &mut db, seat, "B", token, &mut || {})?;
            stage.say(format!("B  sells with token {token}: {sale}"));
            stage.set(|f| f.b_done = true);
            lock.release()?;
            Ok((token, sale))
        })
    };

    let worker_a = || -> Result<(u64, Sale), BoxError> {
        let tickets = client(setup, "worker-A")?;
        let mut db = postgres::Client::connect(&setup.pg, postgres::NoTls)?;
        let mut watch = postgres::Client::connect(&setup.pg, postgres::NoTls)?;
        let lock = tickets.acquire(&key, LEASE_A, Duration::ZERO)?;
        let (token, deadline) = (lock.token(), lock.deadline());
        stage.say(format!("A  granted, token {token}, lease {LEASE_A:?}"));
        stage.set(|f| f.a_holds = true);
        let mut stalled: Result<(), BoxError> = Ok(());
        let mut pause = || {
            stage.say("A  stalls (GC pause, swapped out, VM stopped...)");
            stalled = stall_a(&stage, &mut watch, deadline);
            stage.say("A  wakes up and goes on with its sale");
        };
        let sale = match stall {
            Stall::BeforeSale => {
                pause();
                sell(variant, &mut db, seat, "A", token, &mut || {})?
            }
            Stall::AfterFenceCheck => {
                let mut after_check = || {
                    stage.say(format!("A  fence check passed with token {token}"));
                    pause();
                };
                sell(variant, &mut db, seat, "A", token, &mut after_check)?
            }
        };
        stalled?;
        stage.say(format!("A  sells with token {token}: {sale}"));
        match lock.release()? {
            ReleaseOutcome::Released => stage.say("A  release: released"),
            ReleaseOutcome::NotHolder => stage.say("A  release: not holder (its lease had ended)"),
            other => stage.say(format!("A  release: {other}")),
        }
        Ok((token, sale))
    };
    let a = worker_a();
    if a.is_err() {
        // Unblock B if A failed before granting it anything to wait for.
        stage.set(|f| f.a_holds = true);
    }
    let b = worker_b.join().map_err(|_| "worker B panicked")?;
    let ((a_token, a), (b_token, b)) = (a?, b?);

    let sales = db
        .query("SELECT buyer, token FROM sales WHERE seat_id = $1 ORDER BY id", &[&seat])?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect::<Vec<(String, i64)>>();
    let row = db.query_one("SELECT sold_to, fence FROM seats WHERE id = $1", &[&seat])?;
    let (sold_to, fence): (Option<String>, i64) = (row.get(0), row.get(1));
    stage.say(format!(
        "seat {seat}: sold_to={}, fence={fence}, sales ledger: {sales:?}",
        sold_to.as_deref().unwrap_or("NULL")
    ));
    let timeline = std::mem::take(&mut *stage.timeline.lock().unwrap());
    Ok(Outcome { a_token, b_token, a, b, sales, sold_to, fence, timeline })
}

// ---------------------------------------------------------------------------------
// A throw-away PostgreSQL server.

/// A private PostgreSQL server in a temp dir, listening on a unix socket (and on a TCP
/// port of 127.0.0.1 when asked to). Stopped (fast shutdown) and deleted when dropped.
pub struct Postgres {
    child: Child,
    dir: tempfile::TempDir,
    /// libpq connection string for it (the unix socket).
    pub conn: String,
}

/// The directory holding `initdb` and `postgres`: the newest
/// `/usr/lib/postgresql/*/bin` (Debian's layout), else the `PATH`.
pub fn postgres_bin_dir() -> Option<PathBuf> {
    let has_both = |d: &Path| d.join("initdb").is_file() && d.join("postgres").is_file();
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            has_both(&bin).then_some((version, bin))
        })
        .collect();
    debian.sort();
    if let Some((_, bin)) = debian.pop() {
        return Some(bin);
    }
    std::env::split_paths(&std::env::var_os("PATH")?).find(|d| has_both(d))
}

/// `(uid, gid)` of `user` from /etc/passwd.
fn passwd_ids(user: &str) -> Option<(u32, u32)> {
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        (f.len() > 3 && f[0] == user).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
    })
}

impl Postgres {
    /// Runs `initdb` and starts `postgres` on a unix socket only (no TCP port to collide
    /// with anything); waits until it accepts connections. PostgreSQL refuses to run as
    /// root: as root, both run as `nobody`.
    pub fn start() -> Result<Postgres, BoxError> {
        Postgres::start_listening(None)
    }

    /// As [`Postgres::start`], and also listening on 127.0.0.1:`port`, for clients
    /// that speak TCP only (JDBC).
    pub fn start_with_tcp(port: u16) -> Result<Postgres, BoxError> {
        Postgres::start_listening(Some(port))
    }

    fn start_listening(tcp: Option<u16>) -> Result<Postgres, BoxError> {
        use std::os::unix::fs::MetadataExt;
        use std::os::unix::process::CommandExt;

        let bin = postgres_bin_dir().ok_or("PostgreSQL is not installed (no initdb/postgres found)")?;
        let dir = tempfile::Builder::new().prefix("fenced-pg-").tempdir()?;
        let as_user = if std::fs::metadata("/proc/self")?.uid() == 0 {
            let ids = passwd_ids("nobody").ok_or("running as root and there is no user `nobody`")?;
            std::os::unix::fs::chown(dir.path(), Some(ids.0), Some(ids.1))?;
            Some(ids)
        } else {
            None
        };
        let command = |name: &str| {
            let mut c = Command::new(bin.join(name));
            c.env("LC_ALL", "C").env_remove("PGDATA").stdin(Stdio::null()).current_dir(dir.path());
            if let Some((uid, gid)) = as_user {
                c.uid(uid).gid(gid);
            }
            c
        };
        let data = dir.path().join("data");
        let out = command("initdb")
            .arg("-D")
            .arg(&data)
            .args(["--auth=trust", "--username=fence", "--encoding=UTF8", "--no-sync", "--no-instructions"])
            .output()?;
        if !out.status.success() {
            return Err(format!("initdb failed: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        let log = std::fs::File::create(dir.path().join("postgres.log"))?;
        if let Some((uid, gid)) = as_user {
            std::os::unix::fs::chown(dir.path().join("postgres.log"), Some(uid), Some(gid))?;
        }
        let child = command("postgres")
            .arg("-D")
            .arg(&data)
            .arg("-k")
            .arg(dir.path())
            .arg("-c")
            .arg(if tcp.is_some() { "listen_addresses=127.0.0.1" } else { "listen_addresses=" })
            .args(["-p", &tcp.unwrap_or(5432).to_string(), "-c", "fsync=off"])
            .args(["-c", "synchronous_commit=off", "-c", "full_page_writes=off"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        let conn =
            format!("host={} port={} user=fence dbname=postgres", dir.path().display(), tcp.unwrap_or(5432));
        let mut pg = Postgres { child, dir, conn };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if postgres::Client::connect(&pg.conn, postgres::NoTls).is_ok() {
                return Ok(pg);
            }
            if let Some(status) = pg.child.try_wait()? {
                return Err(format!("postgres exited with {status}: {}", pg.log()).into());
            }
            if Instant::now() >= deadline {
                return Err(format!("postgres not ready within 30 s: {}", pg.log()).into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("postgres.log")).unwrap_or_default()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGINT = fast shutdown: backends end, the postmaster exits.
        let _ = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------

/// The services an example runs against, as configured (`TICKETING_ADDRS` +
/// `TICKETING_AUTH_TOKEN`, `FENCE_PG`) or else started here: an in-process standalone
/// node and a throw-away PostgreSQL, returned to be stopped by the caller.
pub fn services() -> Result<(Setup, Option<ticketing::server::Server>, Option<Postgres>), BoxError> {
    // Ticketing: the configured service, or an in-process standalone node.
    let mut server = None;
    let (addrs, auth_token) = match std::env::var("TICKETING_ADDRS") {
        Ok(addrs) => {
            let token =
                std::env::var("TICKETING_AUTH_TOKEN").map_err(|_| "TICKETING_AUTH_TOKEN is not set")?;
            (ticketing::client::split_addrs(&addrs), token.into_bytes())
        }
        Err(_) => {
            let token = ticketing::proto::handshake::fresh_nonce().to_vec();
            let config = ticketing::config::Config::standalone("127.0.0.1:0".parse()?, token.clone());
            let node = ticketing::server::Server::start(config)?;
            let addr = node.local_addr().to_string();
            println!("in-process Ticketing node on {addr}");
            server = Some(node);
            (vec![addr], token)
        }
    };
    // PostgreSQL: the configured one, or a throw-away server.
    let mut postgres = None;
    let pg = match std::env::var("FENCE_PG") {
        Ok(conn) => conn,
        Err(_) => {
            let started = Postgres::start()?;
            println!("throw-away PostgreSQL at {}", started.conn);
            let conn = started.conn.clone();
            postgres = Some(started);
            conn
        }
    };
    Ok((Setup { addrs, auth_token, pg }, server, postgres))
}

fn main() -> Result<(), BoxError> {
    let (setup, server, postgres) = services()?;
    let mut wrong = 0;
    let runs = [
        (Variant::Fenced, Stall::BeforeSale, 1),
        (Variant::Fenced, Stall::AfterFenceCheck, 2),
        (Variant::UnsafeSeparateSteps, Stall::AfterFenceCheck, 3),
    ];
    for (variant, stall, seat) in runs {
        let outcome = run_scenario(&setup, variant, stall, seat)?;
        println!();
        for line in &outcome.timeline {
            println!("{line}");
        }
        let verdict = if outcome.sold_once() { "sold ONCE" } else { "sold TWICE" };
        println!("=> {variant:?}: {verdict}");
        if variant == Variant::Fenced && !outcome.sold_once() {
            wrong += 1;
        }
    }
    drop(postgres);
    if let Some(node) = server {
        node.shutdown();
    }
    if wrong > 0 {
        return Err(format!("{wrong} fenced run(s) sold a seat twice").into());
    }
    Ok(())
}
