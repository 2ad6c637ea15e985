//! Measurements on real processes, not tests: each prints figures that docs/ cite and
//! asserts nothing of its own. `scripts/measure.sh NAME` runs one (the names below);
//! the checks with bounds are tests under tests/.

#[path = "../../tests/common/mod.rs"]
mod common;

mod failover;
mod handover;
mod raw_throughput;
mod rolling;
mod stop;

const USAGE: &str = "usage: measure failover|replacement|handover|rolling|raw-throughput|stop|readyz";

fn main() {
    // `cargo bench` adds `--bench`; the first other argument names the measurement.
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    match args.first().map(String::as_str) {
        Some("failover") => failover::failover(),
        Some("replacement") => failover::replacement(),
        Some("handover") => handover::run(),
        Some("rolling") => rolling::run(),
        Some("raw-throughput") => raw_throughput::run(),
        Some("stop") => stop::run(),
        Some("readyz") => stop::readyz_run(),
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    }
}
