//! What one `ticketing bench` run does: its scenario and settings, read from the
//! command line and checked (docs/cli.md, "ticketing bench").

use std::time::Duration;

use getopts::Matches;

use super::bench_holds::Shape;

/// What the workers do.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Scenario {
    /// Each worker its own keys: the pure cost of a pair.
    Uncontended,
    /// Every worker queues on one key: hand-offs per second.
    Hot,
    /// Zipf-distributed keys over `--keys`; with a short wait some time out.
    Mixed,
    /// Acquires `--keys` distinct keys and keeps them (no release): for memory figures.
    Hold,
    /// Every worker takes `--count` of the `--permits` (1000) of one key: a stock.
    Stock,
    /// As stock with `--permits` 10: a hot pool, grants/s = hand-offs per second.
    Pool,
    /// Each worker holds `--keys-per-hold` keys of its own at once.
    Multi,
}

impl Scenario {
    pub(super) fn name(self) -> &'static str {
        match self {
            Scenario::Uncontended => "uncontended",
            Scenario::Hot => "hot",
            Scenario::Mixed => "mixed",
            Scenario::Hold => "hold",
            Scenario::Stock => "stock",
            Scenario::Pool => "pool",
            Scenario::Multi => "multi",
        }
    }
    fn parse(text: &str) -> Option<Scenario> {
        match text {
            "uncontended" => Some(Scenario::Uncontended),
            "hot" => Some(Scenario::Hot),
            "mixed" => Some(Scenario::Mixed),
            "hold" => Some(Scenario::Hold),
            "stock" => Some(Scenario::Stock),
            "pool" => Some(Scenario::Pool),
            "multi" => Some(Scenario::Multi),
            _ => None,
        }
    }
}

/// Everything one run needs.
#[derive(Clone, Debug)]
pub struct Settings {
    pub scenario: Scenario,
    pub connections: usize,
    pub threads: usize,
    pub duration: Duration,
    pub warmup: Duration,
    pub lease: Duration,
    pub wait: Duration,
    pub hold: Duration,
    pub keys: usize,
    pub zipf: f64,
    pub rate: f64,
    /// stock and pool: permits taken per hold and the key's capacity.
    pub count: u32,
    pub permits: u32,
    /// multi: keys per hold.
    pub keys_per_hold: usize,
    /// hot: each waiter asks for its place in line.
    pub position: bool,
}

impl Settings {
    /// The HOLD a worker makes, or `None` for a v1 ACQUIRE.
    pub(super) fn shape(&self) -> Option<Shape> {
        match self.scenario {
            Scenario::Stock | Scenario::Pool => {
                Some(Shape::Stock { count: self.count, capacity: self.permits })
            }
            Scenario::Multi => Some(Shape::Multi { keys: self.keys_per_hold }),
            Scenario::Hot if self.position => Some(Shape::Placed),
            _ => None,
        }
    }
}

fn number<T: std::str::FromStr>(matches: &Matches, name: &str) -> Result<Option<T>, String> {
    match matches.opt_str(name) {
        None => Ok(None),
        Some(text) => {
            text.parse::<T>().map(Some).map_err(|_| format!("--{name} {text:?} is not a valid number"))
        }
    }
}

pub(super) fn settings(matches: &Matches) -> Result<Settings, String> {
    let scenario = match matches.free.as_slice() {
        [] => Scenario::Uncontended,
        [one] => Scenario::parse(one).ok_or_else(|| format!("unknown scenario {one:?}"))?,
        _ => return Err("at most one scenario".into()),
    };
    let connections: usize = number(matches, "connections")?.unwrap_or(1);
    if connections == 0 || connections > 10_000 {
        return Err("--connections must be 1..=10000".into());
    }
    let threads: usize = match (number::<usize>(matches, "threads")?, number::<usize>(matches, "pipeline")?) {
        (Some(_), Some(_)) => return Err("give --threads or --pipeline, not both".into()),
        (Some(t), None) => t,
        (None, Some(d)) => connections * d,
        (None, None) => connections,
    };
    if threads == 0 || threads > 10_000 {
        return Err("--threads must be 1..=10000".into());
    }
    let seconds = |name: &str, default: f64| -> Result<Duration, String> {
        let s: f64 = number(matches, name)?.unwrap_or(default);
        if !(0.0..=86_400.0).contains(&s) {
            return Err(format!("--{name} must be 0..=86400 seconds"));
        }
        Ok(Duration::from_secs_f64(s))
    };
    let duration = seconds("duration", 10.0)?;
    if duration.is_zero() {
        return Err("--duration must be > 0".into());
    }
    let warmup = seconds("warmup", 1.0)?;
    let lease_s: u64 = number(matches, "lease")?.unwrap_or(10);
    if !(1..=250).contains(&lease_s) {
        return Err("--lease must be 1..=250 seconds".into());
    }
    let default_wait = match scenario {
        Scenario::Uncontended | Scenario::Hold | Scenario::Multi => 1000,
        Scenario::Hot | Scenario::Stock | Scenario::Pool => 10_000,
        Scenario::Mixed => 5,
    };
    let wait_ms: u64 = number(matches, "wait")?.unwrap_or(default_wait);
    if wait_ms > 300_000 {
        return Err("--wait must be 0..=300000 ms".into());
    }
    let hold_ms: u64 = number(matches, "hold")?.unwrap_or(if scenario == Scenario::Mixed { 1 } else { 0 });
    let keys: usize = number(matches, "keys")?.unwrap_or(if scenario == Scenario::Mixed { 1000 } else { 1 });
    if keys == 0 || keys > 10_000_000 {
        return Err("--keys must be 1..=10000000".into());
    }
    let zipf: f64 = number(matches, "zipf")?.unwrap_or(1.0);
    if !(0.0..=10.0).contains(&zipf) {
        return Err("--zipf must be 0..=10".into());
    }
    let rate: f64 = number(matches, "rate")?.unwrap_or(0.0);
    if !(0.0..=10_000_000.0).contains(&rate) {
        return Err("--rate must be 0..=10000000".into());
    }
    let permits: u32 =
        number(matches, "permits")?.unwrap_or(if scenario == Scenario::Pool { 10 } else { 1000 });
    let count: u32 = number(matches, "count")?.unwrap_or(1);
    if !(1..=1_000_000).contains(&permits) || !(1..=permits).contains(&count) {
        return Err("--permits must be 1..=1000000 and --count 1..=--permits".into());
    }
    let keys_per_hold: usize = number(matches, "keys-per-hold")?.unwrap_or(4);
    if !(1..=16).contains(&keys_per_hold) {
        return Err("--keys-per-hold must be 1..=16".into());
    }
    let position = matches.opt_present("position");
    if position && scenario != Scenario::Hot {
        return Err("--position goes with the hot scenario".into());
    }
    Ok(Settings {
        count,
        permits,
        keys_per_hold,
        position,
        rate,
        scenario,
        connections,
        threads,
        duration,
        warmup,
        lease: Duration::from_secs(lease_s),
        wait: Duration::from_millis(wait_ms),
        hold: Duration::from_millis(hold_ms),
        keys,
        zipf,
    })
}
