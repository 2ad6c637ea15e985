//! The command-line interface: `ticketing server | acquire | release | query | status
//! | top | run | demo | admin | bench`. Every subcommand takes `--help`.
//!
//! Exit status: 0 success; 1 a definitive "no" (busy, timeout, not holder); 2 usage or
//! configuration error; 3 outcome unknown, no server reachable, or (for `run`) the
//! lease ran out — and, at once, a mistake retrying cannot fix (the secret, the
//! certificate, TLS or plain, a peer port). `admin`, `demo` and `bench` say in their
//! help what each status means for them. docs/cli.md lists the same texts
//! (tests/cli_docs.rs compares them).

mod admin;
mod bench;
mod bench_holds;
mod bench_settings;
mod bench_tally;
mod commands;
mod demo;
pub mod histogram;
mod hold;
mod top;
mod views;
mod zipf;

use std::time::{Duration, Instant};

use getopts::{Matches, Options};

use crate::client::{
    split_addrs, AcquireError, BuildError, Client, ClientBuilder, ClientError, Direct, Lock, ReleaseError,
    DEFAULT_ADDR,
};

/// Success.
pub const EXIT_OK: i32 = 0;
/// A definitive "no": busy, timeout, not holder.
pub const EXIT_NO: i32 = 1;
/// Usage or configuration error.
pub const EXIT_USAGE: i32 = 2;
/// Indeterminate outcome, no server reachable, the lease ran out under `run`, or a
/// mistake retrying cannot fix (the secret, the certificate, TLS or plain, a peer port).
pub const EXIT_UNKNOWN: i32 = 3;

/// Time budget of QUERY and STATUS from the command line.
pub const CLI_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Default lease of `acquire` and `run`, in seconds.
pub const LEASE_S_DEFAULT: u64 = 30;

const EXIT_CODES: &str = "\
Exit status:
  0  success
  1  busy, timeout or not holder (a definitive no)
  2  usage or configuration error
  3  outcome unknown, no server or leader reachable in time, overloaded, or the
     lease ran out (run); at once, a mistake retrying cannot fix: the secret, the
     certificate, TLS or plain, a peer port (a line names it)";

/// The environment of `ticketing admin`: the operator secret instead of the client's.
const ADMIN_ENV: &str = "\
Environment:
  TICKETING_ADDRS                 comma-separated server addresses (default 127.0.0.1:5225)
  TICKETING_PEER_AUTH_TOKEN       the operator (peer) secret, >= 16 bytes (or _FILE)
  TICKETING_PEER_AUTH_TOKEN_FILE  file holding it
  TICKETING_TLS_CA                PEM CA bundle; turns TLS on
  TICKETING_CLUSTER_NAME          the cluster's name: nodes of another name or none are
                                  sent nothing
  RUST_LOG                        log filter (default warn)";

const CLIENT_ENV: &str = "\
Environment:
  TICKETING_ADDRS             comma-separated server addresses (default 127.0.0.1:5225)
  TICKETING_AUTH_TOKEN        shared secret, >= 16 bytes (or TICKETING_AUTH_TOKEN_FILE)
  TICKETING_AUTH_TOKEN_FILE   file holding the secret
  TICKETING_TLS_CA            PEM CA bundle; turns TLS on
  TICKETING_OWNER             owner of acquire, release and run (default cli-USER@HOST)
  TICKETING_CLUSTER_NAME      the cluster's name: nodes of another name or none are sent
                              nothing (without it: nodes of two fencing domains are)
  RUST_LOG                    log filter (default warn)";

fn top_usage() -> String {
    format!(
        "\
ticketing {version} — a FIFO lock service with leases, hand-off and fencing tokens

Usage: ticketing COMMAND [OPTIONS]

Commands:
  server                       run a node (configured by the environment)
  acquire KEY                  take KEY and print its fencing token
  release KEY TOKEN            give KEY back
  query KEY                    show who holds KEY
  status                       show the STATUS of the node(s)
  top                          live view: nodes, lock rates, longest queues
  run KEY -- CMD [ARGS...]     run CMD while holding KEY
  demo                         run a self-contained demonstration (~{demo_s} s)
  admin replace OLD NEW@ADDR   replace voter OLD by the joined node NEW (cluster)
  admin members                the leader's view of the voters and standbys
  admin transfer-leader [ID]   hand leadership to voter ID (or the one the leader picks)
  admin found ADDR,ADDR,ADDR   found a new cluster of waiting join nodes (once)
  bench [SCENARIO]             load generator: pairs/s, latency percentiles

Options:
  -h, --help                   this help (also after any command)
  -V, --version                version, git commit and build profile

{CLIENT_ENV}

{EXIT_CODES}
",
        version = env!("CARGO_PKG_VERSION"),
        demo_s = demo::seconds(false)
    )
}

/// The `--version` line.
pub fn version_line() -> String {
    // Both set by build.rs.
    let commit = option_env!("TICKETING_GIT_COMMIT").unwrap_or("unknown");
    let profile = option_env!("TICKETING_BUILD_PROFILE").unwrap_or(if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    });
    // A binary built with `+crt-static` (scripts/build-static.sh) says so.
    let linkage = if cfg!(target_feature = "crt-static") { ", static" } else { "" };
    format!("ticketing {} (commit {commit}, {profile} build{linkage})", env!("CARGO_PKG_VERSION"))
}

/// Runs the CLI with `args` (including the program name) and returns the exit status.
pub fn main(args: Vec<String>) -> i32 {
    let command = args.get(1).map(String::as_str);
    let rest = if args.len() > 2 { &args[2..] } else { &[] };
    if command != Some("server") {
        init_logging();
    }
    match command {
        None => {
            eprint!("{}", top_usage());
            EXIT_USAGE
        }
        Some("-h" | "--help" | "help") => {
            print!("{}", top_usage());
            EXIT_OK
        }
        Some("-V" | "--version" | "version") => {
            println!("{}", version_line());
            EXIT_OK
        }
        Some("server") => server(rest),
        Some("acquire") => commands::acquire(rest),
        Some("release") => commands::release(rest),
        Some("query") => commands::query(rest),
        Some("status") => commands::status(rest),
        Some("run") => hold::run(rest),
        Some("demo") => demo::demo(rest),
        Some("admin") => admin::admin(rest),
        Some("top") => top::top(rest),
        Some("bench") => bench::bench(rest),
        Some(other) => {
            eprintln!("ticketing: unknown command {other:?}; see ticketing --help");
            EXIT_USAGE
        }
    }
}

fn init_logging() {
    let env = env_logger::Env::default().default_filter_or("warn");
    let _ = env_logger::Builder::from_env(env).format_timestamp_millis().try_init();
}

fn server(args: &[String]) -> i32 {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        print!(
            "Usage: ticketing server\n\nRuns one node until SIGTERM or SIGINT, configured by the environment \
             only.\n\nOptions:\n    -h, --help          print this help\n\n{}",
            crate::config::HELP
        );
        return EXIT_OK;
    }
    if let Some(extra) = args.first() {
        eprintln!("ticketing server: unexpected argument {extra:?}; it is configured by the environment (see --help)");
        return EXIT_USAGE;
    }
    crate::server::run_from_env()
}

/// Options every client command shares: `--addr` and `--help`. Commands that take or
/// give back locks add `--owner` ([`owner_option`]).
fn client_options() -> Options {
    let mut opts = Options::new();
    opts.optmulti(
        "",
        "addr",
        "server address host:port (repeatable or comma-separated; default $TICKETING_ADDRS or 127.0.0.1:5225)",
        "ADDR",
    );
    opts.optflag("h", "help", "print this help");
    opts
}

/// [`client_options`] with `--owner`: for the commands that take or give back locks.
fn lock_options() -> Options {
    let mut opts = client_options();
    owner_option(&mut opts);
    opts
}

fn owner_option(opts: &mut Options) {
    opts.optopt("", "owner", "owner string (default $TICKETING_OWNER or cli-USER@HOST)", "OWNER");
}

/// Parses `args`; on `--help` prints the usage and returns `Err(0)`, on a usage
/// error prints it and returns `Err(2)`.
fn parse(opts: &Options, args: &[String], usage: &str, about: &str) -> Result<Matches, i32> {
    parse_with_help(opts, args, usage, about, CLIENT_ENV, EXIT_CODES)
}

/// A command's `--help`: usage, what it does, its options, the environment it reads
/// and what its exit statuses mean. Every command's help has all five.
fn help_text(opts: &Options, usage: &str, about: &str, env: &str, exits: &str) -> String {
    let brief = format!("Usage: {usage}\n\n{about}");
    format!("{}\n{env}\n\n{exits}\n", opts.usage(&brief))
}

/// [`parse`], with `env` and `exits` as the help's environment and exit statuses.
fn parse_with_help(
    opts: &Options,
    args: &[String],
    usage: &str,
    about: &str,
    env: &str,
    exits: &str,
) -> Result<Matches, i32> {
    let matches = match opts.parse(args) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("ticketing: {e}\n{}", opts.short_usage(usage));
            return Err(EXIT_USAGE);
        }
    };
    if matches.opt_present("help") {
        print!("{}", help_text(opts, usage, about, env, exits));
        return Err(EXIT_OK);
    }
    Ok(matches)
}

/// The owner the CLI uses when none is configured: stable across invocations, so
/// `acquire` in one process and `release` in the next agree.
fn cli_owner() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "user".into());
    let host = crate::sys::hostname().unwrap_or_else(|| "host".into());
    format!("cli-{user}@{host}")
}

/// Builds the client from the environment and the common options.
fn build_client(matches: &Matches) -> Result<Client, i32> {
    client_builder(matches, ClientBuilder::from_env().words(&crate::client::CLI_WORDS))
}

/// The one-request-per-connection asker of the views (`status`, `top`), configured as
/// [`build_client`] configures a client.
fn build_direct(matches: &Matches) -> Result<Direct, i32> {
    direct_from(matches, ClientBuilder::from_env())
}

/// [`build_direct`] from `builder` (the operator secret's, for `admin members`).
fn direct_from(matches: &Matches, builder: ClientBuilder) -> Result<Direct, i32> {
    let from = addrs_source(matches);
    configured(matches, builder).build_direct().map_err(|e| {
        eprintln!("ticketing: {}", build_error(&e, from));
        EXIT_USAGE
    })
}

/// Builds the client of `ticketing admin`: it authenticates with the operator (peer)
/// secret, `TICKETING_PEER_AUTH_TOKEN` or `TICKETING_PEER_AUTH_TOKEN_FILE`, because
/// the servers refuse admin requests on connections that proved only the client secret.
fn build_admin_client(matches: &Matches) -> Result<Client, i32> {
    client_builder(matches, admin_builder()?)
}

/// The builder of `ticketing admin`'s client: the environment, with the operator secret.
fn admin_builder() -> Result<ClientBuilder, i32> {
    let mut builder = ClientBuilder::from_env();
    if !builder.operator_secret_from_env() {
        eprintln!(
            "ticketing admin: TICKETING_PEER_AUTH_TOKEN (or TICKETING_PEER_AUTH_TOKEN_FILE) is required: \
             admin operations need the cluster's peer (operator) secret"
        );
        return Err(EXIT_USAGE);
    };
    Ok(builder)
}

fn client_builder(matches: &Matches, builder: ClientBuilder) -> Result<Client, i32> {
    let from = addrs_source(matches);
    configured(matches, builder).build().map_err(|e| {
        eprintln!("ticketing: {}", build_error(&e, from));
        EXIT_USAGE
    })
}

/// `builder` with the command's addresses, owner and request budget.
fn configured(matches: &Matches, mut builder: ClientBuilder) -> ClientBuilder {
    let addrs: Vec<String> = matches.opt_strs("addr").iter().flat_map(|a| split_addrs(a)).collect();
    if !addrs.is_empty() {
        builder = builder.replace_addrs(addrs);
    }
    // `opts_present` first: commands without `--owner` have no such option (and
    // getopts panics when asked for an option it does not know).
    let given = matches.opts_present(&["owner".to_owned()]).then(|| matches.opt_str("owner")).flatten();
    let owner = given
        .or_else(|| std::env::var("TICKETING_OWNER").ok().filter(|o| !o.is_empty()))
        .unwrap_or_else(cli_owner);
    builder.owner(owner).request_timeout(CLI_REQUEST_TIMEOUT)
}

/// A refused client configuration in the CLI's words: the setting it came from, an
/// address's `from` (`--addr` or `TICKETING_ADDRS`), is named.
pub(crate) fn build_error(e: &BuildError, from: &str) -> String {
    match e {
        BuildError::BadAddr(addr) => format!("address {addr:?} ({from}) is not host:port"),
        BuildError::NoAuthToken => {
            "no auth token given: set TICKETING_AUTH_TOKEN (or TICKETING_AUTH_TOKEN_FILE) \
                                    to the cluster's client secret"
                .into()
        }
        BuildError::BadClusterName(why) => format!("TICKETING_CLUSTER_NAME: {why}"),
        other => other.to_string(),
    }
}

/// Where a command's addresses come from, as its messages name it.
fn addrs_source(matches: &Matches) -> &'static str {
    if matches.opt_strs("addr").iter().any(|a| !split_addrs(a).is_empty()) {
        "--addr"
    } else {
        "TICKETING_ADDRS"
    }
}

/// The addresses a command talks to (for display).
fn addrs_of(matches: &Matches) -> Vec<String> {
    let given: Vec<String> = matches.opt_strs("addr").iter().flat_map(|a| split_addrs(a)).collect();
    if !given.is_empty() {
        return given;
    }
    let env = split_addrs(&std::env::var("TICKETING_ADDRS").unwrap_or_default());
    if env.is_empty() {
        vec![DEFAULT_ADDR.to_owned()]
    } else {
        env
    }
}

fn lease_wait(matches: &Matches) -> Result<(Duration, Duration), i32> {
    let lease = match matches.opt_str("lease") {
        None => LEASE_S_DEFAULT,
        Some(text) => match text.parse::<u64>() {
            Ok(s) if (1..=250).contains(&s) => s,
            _ => {
                eprintln!("ticketing: --lease {text:?}: must be whole seconds 1..=250");
                return Err(EXIT_USAGE);
            }
        },
    };
    let wait = match matches.opt_str("wait") {
        None => 0,
        Some(text) => match text.parse::<u64>() {
            Ok(ms) if ms <= 300_000 => ms,
            _ => {
                eprintln!("ticketing: --wait {text:?}: must be milliseconds 0..=300000");
                return Err(EXIT_USAGE);
            }
        },
    };
    Ok((Duration::from_secs(lease), Duration::from_millis(wait)))
}

fn lease_wait_options(opts: &mut Options) {
    opts.optopt("", "lease", "lease in whole seconds, 1..=250 (default 30)", "S");
    opts.optopt("", "wait", "how long to queue, in milliseconds, 0..=300000 (default 0: one try)", "MS");
}

/// Pause before trying again after an outcome that executed nothing (no leader known,
/// overloaded, unreachable); after an `M` naming the leader the next try is at once.
const CLI_RETRY_PAUSE: Duration = Duration::from_millis(100);

/// How long a command may try, from when it started: what its failure line says it
/// waited, when it did wait that long.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    pub(crate) started: Instant,
    pub(crate) length: Duration,
}

impl Budget {
    /// A budget of `length` from now.
    pub(crate) fn of(length: Duration) -> Budget {
        Budget { started: Instant::now(), length }
    }

    /// The budget of `acquire` and `run`: `max(wait, CLI_REQUEST_TIMEOUT)`.
    pub(crate) fn acquire(wait: Duration) -> Budget {
        Budget::of(wait.max(CLI_REQUEST_TIMEOUT))
    }

    fn end(&self) -> Instant {
        self.started + self.length
    }

    /// "within 8 s" when the budget was spent (the command waited that long); empty
    /// when the command ended before (every address failed at once).
    fn spent(&self) -> String {
        // A command that ends by its budget ends within a few ms of it.
        if self.started.elapsed() + Duration::from_millis(250) < self.length {
            return String::new();
        }
        let seconds = self.length.as_secs_f64();
        if self.length.subsec_millis() == 0 {
            format!(" within {seconds:.0} s")
        } else {
            format!(" within {seconds:.1} s")
        }
    }
}

/// `acquire` as the CLI does it: outcomes that say the request was not executed (an
/// `M`, `E 4`, no server reachable) are tried again, at the leader an `M` named, until
/// the budget (`max(wait, CLI_REQUEST_TIMEOUT)`) has passed, so a follower's address or
/// a failover in progress does not end the command. The wait sent with each try is
/// what is left of `wait`, so `--wait 0` never queues, and no try is sent after the
/// budget. Worst case: the budget, plus the commit margin (5 s) of a try sent just
/// before its end whose answer does not come.
fn acquire_following(
    client: &Client,
    key: &str,
    lease: Duration,
    wait: Duration,
    budget: Budget,
) -> Result<Lock, AcquireError> {
    following(wait, budget, |left, end| client.acquire_by(key, lease, left, Some(end)))
}

/// Tries `attempt(what is left of wait, the budget's end)` again while its outcome says
/// nothing was executed and the budget lasts (see [`acquire_following`]).
pub(crate) fn following(
    wait: Duration,
    budget: Budget,
    mut attempt: impl FnMut(Duration, Instant) -> Result<Lock, AcquireError>,
) -> Result<Lock, AcquireError> {
    let (wait_end, end) = (budget.started + wait, budget.end());
    loop {
        let left = wait_end.saturating_duration_since(Instant::now());
        match attempt(left, end) {
            Err(e) if e.is_retryable() && Instant::now() < end => {
                log::debug!("not executed ({e}); trying again");
                if !matches!(e, AcquireError::NotLeader { leader: Some(_) }) {
                    std::thread::sleep(CLI_RETRY_PAUSE.min(end.saturating_duration_since(Instant::now())));
                }
            }
            other => return other,
        }
    }
}

/// Prints the final message of a failed command: what failed, then, for each address
/// the client could not connect to, why (refused, the auth token, TLS, ...), and when
/// the nodes it reached know no leader, that the cluster has no quorum.
fn report_failure(client: &Client, command: &str, error: &Failed<'_>, no_leader: bool, budget: Budget) {
    // The connections' failures matter only when the request found no connection or
    // no answer: after a refusal or a definitive answer they are noise (a dial under
    // way would read as a TLS question).
    let reasons = if error.about_connections() { client.connection_errors() } else { Vec::new() };
    // Only when some node answers: with none reachable there is nobody to ask.
    let quorum = if no_leader && client.is_connected() { no_quorum(client) } else { None };
    // A node that knows no cluster yet: that is the news, not "not the leader".
    if let Some(Standing::NotMember(why)) = &quorum {
        eprintln!("ticketing {command}: nothing was done: {why}");
        return;
    }
    eprintln!("ticketing {command}: {}", error.headline(budget));
    for (_, why) in &reasons {
        eprintln!("  {why}");
    }
    if reasons.is_empty() {
        if let Some(why) = error.last_error() {
            eprintln!("  {why}");
        }
    }
    if let Some(Standing::NoQuorum(text)) = quorum {
        eprintln!("  {text}");
    }
}

/// Why the nodes reached know no leader: no quorum, or no cluster yet.
enum Standing {
    NoQuorum(String),
    NotMember(String),
}

/// "No quorum", when the reachable nodes confirm it: none of them knows a leader. Says
/// how many of the voters this host reaches. A node that knows no cluster yet says so
/// instead (waiting to be founded, or joining).
fn no_quorum(client: &Client) -> Option<Standing> {
    let status = client.status().ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
            .unwrap_or("")
            .to_owned()
    };
    // A node that knows no cluster yet is no quorum lost: it was never founded, or it
    // has not joined (the runbook is founding, not "Losing a majority").
    if let Some(why) = admin::not_a_member(&status) {
        return Some(Standing::NotMember(why));
    }
    if !field("leader").is_empty() || field("role") == "standalone" {
        return None;
    }
    let voters: Vec<String> = field("voters")
        .split(',')
        .filter_map(|v| v.split_once('@').map(|(_, addr)| addr.to_owned()))
        .collect();
    let mut reached = 0;
    let mut with_leader = 0;
    for addr in &voters {
        if let Ok(text) = client.status_of(addr) {
            reached += 1;
            if text.lines().any(|l| l.strip_prefix("leader=").is_some_and(|v| !v.is_empty())) {
                with_leader += 1;
            }
        }
    }
    if with_leader > 0 {
        return None;
    }
    Some(Standing::NoQuorum(format!(
        "no quorum: the cluster has no leader; {reached} of its {} voters answer from here and none knows a \
         leader (a majority must be up and reach each other; docs/operations.md, \"Losing a majority\")",
        voters.len()
    )))
}

/// A failed command's error, for [`report_failure`].
pub(crate) enum Failed<'a> {
    Acquire(&'a AcquireError),
    Release(&'a ReleaseError),
    Read(&'a ClientError),
}

impl Failed<'_> {
    /// The first line: what failed. When no connection could take the request, the
    /// lines under it (one per address) say why, so the cause is not repeated here.
    fn headline(&self, budget: Budget) -> String {
        match self.unavailable() {
            Some((_, true)) => {
                "no server can be used: nothing was sent, and trying again will not help until \
                                the mistake below is fixed"
                    .into()
            }
            Some((_, false)) => format!(
                "no server reachable{}: nothing was sent (check the addresses and that a server runs)",
                budget.spent()
            ),
            None => match self {
                Failed::Acquire(e) => e.to_string(),
                Failed::Release(e) => e.to_string(),
                Failed::Read(e) => e.to_string(),
            },
        }
    }

    fn unavailable(&self) -> Option<(Option<&str>, bool)> {
        match self {
            Failed::Acquire(AcquireError::Unavailable { last_error, lasting })
            | Failed::Release(ReleaseError::Unavailable { last_error, lasting })
            | Failed::Read(ClientError::Unavailable { last_error, lasting }) => {
                Some((last_error.as_deref(), *lasting))
            }
            _ => None,
        }
    }

    /// True when the cause may be a connection: nothing could take the request, no
    /// answer came, or no leader is known.
    fn about_connections(&self) -> bool {
        match self {
            Failed::Acquire(e) => matches!(
                e,
                AcquireError::Unavailable { .. }
                    | AcquireError::Indeterminate(_)
                    | AcquireError::NotLeader { .. }
            ),
            Failed::Release(e) => matches!(e, ReleaseError::Unavailable { .. } | ReleaseError::Unconfirmed),
            Failed::Read(e) => {
                matches!(
                    e,
                    ClientError::Unavailable { .. } | ClientError::NoAnswer | ClientError::NotLeader { .. }
                )
            }
        }
    }

    fn last_error(&self) -> Option<&str> {
        self.unavailable().and_then(|(last, _)| last)
    }
}

/// Why one node did not answer, in a line: the connection's failure when there was
/// one (it names the address), else the error.
pub(crate) fn why_unanswered(addr: &str, e: &ClientError) -> String {
    match e {
        ClientError::Unavailable { last_error: Some(why), .. } => why.clone(),
        other => format!("{addr}: {other}"),
    }
}

fn acquire_exit(e: &AcquireError) -> i32 {
    match e {
        AcquireError::Busy | AcquireError::Timeout => EXIT_NO,
        AcquireError::Invalid(_) => EXIT_USAGE,
        _ => EXIT_UNKNOWN,
    }
}

fn client_exit(e: &ClientError) -> i32 {
    match e {
        ClientError::Invalid(_) => EXIT_USAGE,
        _ => EXIT_UNKNOWN,
    }
}

fn release_exit(e: &ReleaseError) -> i32 {
    match e {
        ReleaseError::Invalid(_) => EXIT_USAGE,
        _ => EXIT_UNKNOWN,
    }
}
