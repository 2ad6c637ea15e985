fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("server") => std::process::exit(ticketing::server::run_from_env()),
        _ => {
            eprintln!("usage: ticketing server");
            std::process::exit(2);
        }
    }
}
