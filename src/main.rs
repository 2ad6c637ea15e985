//! The `ticketing` binary: see `ticketing --help` and docs/cli.md.

fn main() {
    std::process::exit(ticketing::cli::main(std::env::args().collect()));
}
