//! Drives one lock service with acquire+release pairs and prints one JSON line, or
//! turns such lines into the comparison table and SVG chart.
//!
//! ```text
//! ticketing-compare run --system ticketing|etcd|redis --addrs A,B,C --workers N
//!                       [--scenario uncontended|hot] [--duration S] [--warmup S]
//! ticketing-compare report RESULTS.jsonl SVG_OUT     (markdown table on stdout)
//! ```
//!
//! Every worker has its own connection and does acquire → release in a loop:
//! - ticketing: the official client (one `Client` per worker), lease 10 s; the hot
//!   case waits up to 10 s in the server's FIFO queue.
//! - etcd: its v3 lock API through the HTTP/JSON gateway: one lease per worker
//!   (`/v3/lease/grant`, TTL 600 s, like etcd's concurrency.Session), then
//!   `/v3/lock/lock` {name, lease} and `/v3/lock/unlock` {key}. Lock blocks in
//!   etcd until the worker's turn (FIFO by revision).
//! - redis: `SET key token NX PX 10000`, then a compare-and-delete Lua script
//!   (EVALSHA); a busy SET is retried after 200 µs (there is no queue).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ticketing::cli::histogram::Histogram;
use ticketing::client::Client;

type Result<T> = std::result::Result<T, String>;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let code = match args.get(1).map(String::as_str) {
        Some("run") => run(&args[2..]),
        Some("report") => report(&args[2..]),
        _ => Err("usage: ticketing-compare run --system S --addrs A --workers N [--scenario uncontended|hot] \
                  [--duration S] [--warmup S] | report RESULTS.jsonl SVG_OUT"
            .into()),
    };
    if let Err(e) = code {
        eprintln!("ticketing-compare: {e}");
        std::process::exit(2);
    }
}

fn opt<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map(String::as_str)
}

// ---------------------------------------------------------------- systems

trait Locker: Send {
    /// Takes `key`; returns what release needs.
    fn acquire(&mut self, key: &str) -> Result<String>;
    fn release(&mut self, key: &str, handle: &str) -> Result<()>;
}

struct TicketingLocker {
    client: Client,
    hot: bool,
}

impl Locker for TicketingLocker {
    fn acquire(&mut self, key: &str) -> Result<String> {
        let wait = if self.hot { Duration::from_secs(10) } else { Duration::from_secs(1) };
        let lock = self.client.acquire(key, Duration::from_secs(10), wait).map_err(|e| e.to_string())?;
        Ok(lock.into_token().to_string())
    }
    fn release(&mut self, key: &str, handle: &str) -> Result<()> {
        let token: u64 = handle.parse().map_err(|_| "bad token")?;
        match self.client.release(key, token) {
            Ok(ticketing::client::ReleaseOutcome::Released) => Ok(()),
            Ok(other) => Err(other.to_string()),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// A tiny HTTP/1.1 keep-alive JSON client for etcd's gateway.
struct EtcdLocker {
    stream: BufReader<TcpStream>,
    host: String,
    lease: String,
}

impl EtcdLocker {
    fn connect(addr: &str) -> Result<EtcdLocker> {
        let stream = TcpStream::connect(addr).map_err(|e| format!("etcd {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
        let mut locker = EtcdLocker { stream: BufReader::new(stream), host: addr.into(), lease: String::new() };
        let body = locker.post("/v3/lease/grant", "{\"TTL\":600}")?;
        locker.lease = json_field(&body, "ID").ok_or_else(|| format!("lease grant: {body}"))?;
        Ok(locker)
    }

    fn post(&mut self, path: &str, body: &str) -> Result<String> {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.host,
            body.len()
        );
        self.stream.get_mut().write_all(request.as_bytes()).map_err(|e| e.to_string())?;
        let mut status = String::new();
        self.stream.read_line(&mut status).map_err(|e| e.to_string())?;
        let mut length = None;
        let mut chunked = false;
        loop {
            let mut line = String::new();
            if self.stream.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
                return Err("connection closed".into());
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                length = v.trim().parse::<usize>().ok();
            } else if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
                chunked = true;
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                let mut size = String::new();
                self.stream.read_line(&mut size).map_err(|e| e.to_string())?;
                let n = usize::from_str_radix(size.trim(), 16).map_err(|_| "bad chunk")?;
                let mut chunk = vec![0; n + 2];
                self.stream.read_exact(&mut chunk).map_err(|e| e.to_string())?;
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        } else {
            let n = length.ok_or("no content-length")?;
            body.resize(n, 0);
            self.stream.read_exact(&mut body).map_err(|e| e.to_string())?;
        }
        let body = String::from_utf8_lossy(&body).into_owned();
        if !status.contains(" 200 ") {
            return Err(format!("{}: {body}", status.trim()));
        }
        Ok(body)
    }
}

impl Locker for EtcdLocker {
    fn acquire(&mut self, key: &str) -> Result<String> {
        let body = format!("{{\"name\":\"{}\",\"lease\":\"{}\"}}", base64(key.as_bytes()), self.lease);
        let answer = self.post("/v3/lock/lock", &body)?;
        json_field(&answer, "key").ok_or_else(|| format!("lock: {answer}"))
    }
    fn release(&mut self, _key: &str, handle: &str) -> Result<()> {
        self.post("/v3/lock/unlock", &format!("{{\"key\":\"{handle}\"}}")).map(|_| ())
    }
}

const UNLOCK_SCRIPT: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/// RESP over one connection.
struct RedisLocker {
    stream: BufReader<TcpStream>,
    sha: String,
    worker: usize,
    counter: u64,
    hot: bool,
}

#[derive(Debug, PartialEq)]
enum Resp {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<String>),
}

impl RedisLocker {
    fn connect(addr: &str, worker: usize, hot: bool) -> Result<RedisLocker> {
        let stream = TcpStream::connect(addr).map_err(|e| format!("redis {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
        let mut r = RedisLocker { stream: BufReader::new(stream), sha: String::new(), worker, counter: 0, hot };
        match r.command(&["SCRIPT", "LOAD", UNLOCK_SCRIPT])? {
            Resp::Bulk(Some(sha)) => r.sha = sha,
            other => return Err(format!("SCRIPT LOAD: {other:?}")),
        }
        Ok(r)
    }

    fn command(&mut self, parts: &[&str]) -> Result<Resp> {
        let mut out = format!("*{}\r\n", parts.len());
        for p in parts {
            out.push_str(&format!("${}\r\n{p}\r\n", p.len()));
        }
        self.stream.get_mut().write_all(out.as_bytes()).map_err(|e| e.to_string())?;
        let mut line = String::new();
        self.stream.read_line(&mut line).map_err(|e| e.to_string())?;
        let line = line.trim_end();
        let (kind, rest) = line.split_at(1.min(line.len()));
        Ok(match kind {
            "+" => Resp::Simple(rest.into()),
            "-" => Resp::Error(rest.into()),
            ":" => Resp::Int(rest.parse().map_err(|_| "bad int")?),
            "$" => {
                let n: i64 = rest.parse().map_err(|_| "bad length")?;
                if n < 0 {
                    Resp::Bulk(None)
                } else {
                    let mut buf = vec![0; n as usize + 2];
                    self.stream.read_exact(&mut buf).map_err(|e| e.to_string())?;
                    buf.truncate(n as usize);
                    Resp::Bulk(Some(String::from_utf8_lossy(&buf).into_owned()))
                }
            }
            _ => return Err(format!("unexpected reply {line:?}")),
        })
    }
}

impl Locker for RedisLocker {
    fn acquire(&mut self, key: &str) -> Result<String> {
        self.counter += 1;
        let token = format!("w{}-{}", self.worker, self.counter);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.command(&["SET", key, &token, "NX", "PX", "10000"])? {
                Resp::Simple(ok) if ok == "OK" => return Ok(token),
                Resp::Bulk(None) if self.hot && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_micros(200))
                }
                Resp::Bulk(None) => return Err("busy".into()),
                other => return Err(format!("SET: {other:?}")),
            }
        }
    }
    fn release(&mut self, key: &str, handle: &str) -> Result<()> {
        let sha = self.sha.clone();
        match self.command(&["EVALSHA", &sha, "1", key, handle])? {
            Resp::Int(1) => Ok(()),
            other => Err(format!("unlock: {other:?}")),
        }
    }
}

fn base64(data: &[u8]) -> String {
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The string value of `"name":"…"` (or a bare number) in a flat JSON text.
fn json_field(json: &str, name: &str) -> Option<String> {
    let at = json.find(&format!("\"{name}\""))? + name.len() + 2;
    let rest = json[at..].trim_start().strip_prefix(':')?.trim_start();
    if let Some(s) = rest.strip_prefix('"') {
        Some(s[..s.find('"')?].to_string())
    } else {
        let end = rest.find(|c: char| !(c.is_ascii_digit() || "-+.eE".contains(c))).unwrap_or(rest.len());
        Some(rest[..end].to_string())
    }
}

// ---------------------------------------------------------------- run

fn run(args: &[String]) -> Result<()> {
    let system = opt(args, "--system").ok_or("--system")?.to_string();
    let addrs: Vec<String> = opt(args, "--addrs").ok_or("--addrs")?.split(',').map(str::to_string).collect();
    let workers: usize = opt(args, "--workers").unwrap_or("1").parse().map_err(|_| "--workers")?;
    let scenario = opt(args, "--scenario").unwrap_or("uncontended").to_string();
    let hot = scenario == "hot";
    let duration = Duration::from_secs_f64(opt(args, "--duration").unwrap_or("10").parse().map_err(|_| "--duration")?);
    let warmup = Duration::from_secs_f64(opt(args, "--warmup").unwrap_or("1").parse().map_err(|_| "--warmup")?);
    let token = std::env::var("TICKETING_AUTH_TOKEN").unwrap_or_default();
    let prefix = format!("cmp-{}-{}", std::process::id(), Instant::now().elapsed().as_nanos());

    let mut lockers: Vec<Box<dyn Locker>> = Vec::new();
    for w in 0..workers {
        let locker: Box<dyn Locker> = match system.as_str() {
            "ticketing" => {
                let client = Client::builder()
                    .addrs(addrs.iter())
                    .auth_token(&token)
                    .owner(format!("cmp-{w}"))
                    .build()
                    .map_err(|e| e.to_string())?;
                Box::new(TicketingLocker { client, hot })
            }
            // Spread connections over the members like a client library would.
            "etcd" => Box::new(EtcdLocker::connect(&addrs[w % addrs.len()])?),
            "redis" => Box::new(RedisLocker::connect(&addrs[0], w, hot)?),
            other => return Err(format!("unknown system {other}")),
        };
        lockers.push(locker);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let recording = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = lockers
        .into_iter()
        .enumerate()
        .map(|(w, mut locker)| {
            let (stop, recording) = (stop.clone(), recording.clone());
            let key = if hot { format!("{prefix}-hot") } else { format!("{prefix}-w{w}") };
            std::thread::spawn(move || {
                let mut hist = Histogram::new();
                let mut errors: BTreeMap<String, u64> = BTreeMap::new();
                let mut first_error = None;
                while !stop.load(Ordering::Relaxed) {
                    let record = recording.load(Ordering::Relaxed);
                    let t0 = Instant::now();
                    let outcome = locker.acquire(&key).and_then(|h| locker.release(&key, &h));
                    match outcome {
                        Ok(()) if record => hist.record(t0.elapsed().as_nanos() as u64),
                        Ok(()) => {}
                        Err(e) => {
                            let kind: String = e.chars().take(40).collect();
                            if first_error.is_none() {
                                first_error = Some(e);
                            }
                            if record {
                                *errors.entry(kind).or_default() += 1;
                            }
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                }
                (hist, errors, first_error)
            })
        })
        .collect();
    std::thread::sleep(warmup);
    recording.store(true, Ordering::SeqCst);
    let start = Instant::now();
    std::thread::sleep(duration);
    let elapsed = start.elapsed();
    stop.store(true, Ordering::SeqCst);
    let mut hist = Histogram::new();
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    for t in threads {
        let (h, e, first) = t.join().map_err(|_| "worker panicked")?;
        hist.merge(&h);
        for (k, v) in e {
            *errors.entry(k).or_default() += v;
        }
        if let Some(first) = first {
            eprintln!("{system}: first error: {first}");
        }
    }
    let errors_total: u64 = errors.values().sum();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "{{\"system\":\"{system}\",\"scenario\":\"{scenario}\",\"workers\":{workers},\"pairs\":{},\
         \"pairs_per_s\":{:.1},\"p50_ms\":{:.4},\"p99_ms\":{:.4},\"max_ms\":{:.4},\"errors\":{errors_total},\
         \"load1\":{}}}",
        hist.count(),
        hist.count() as f64 / elapsed.as_secs_f64(),
        hist.quantile(0.5) as f64 / 1e6,
        hist.quantile(0.99) as f64 / 1e6,
        hist.max() as f64 / 1e6,
        load.split_whitespace().next().unwrap_or("0"),
    );
    Ok(())
}

// ---------------------------------------------------------------- report

#[derive(Default, Clone)]
struct Row {
    rates: Vec<f64>,
    p50: Vec<f64>,
    p99: Vec<f64>,
    errors: u64,
    load: Vec<f64>,
}

fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn num(line: &str, name: &str) -> f64 {
    json_field(line, name).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)
}

fn report(args: &[String]) -> Result<()> {
    let [results, svg_out] = args else { return Err("report RESULTS.jsonl SVG_OUT".into()) };
    let text = std::fs::read_to_string(results).map_err(|e| format!("{results}: {e}"))?;
    // (hot?, workers, scenario) → system → row: the hot-key case last
    let mut cases: BTreeMap<(bool, u64, String), BTreeMap<String, Row>> = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with('{')) {
        let system = json_field(line, "system").unwrap_or_default();
        let scenario = json_field(line, "scenario").unwrap_or_default();
        let workers = num(line, "workers") as u64;
        let row = cases.entry((scenario == "hot", workers, scenario)).or_default().entry(system).or_default();
        row.rates.push(num(line, "pairs_per_s"));
        row.p50.push(num(line, "p50_ms"));
        row.p99.push(num(line, "p99_ms"));
        row.errors += num(line, "errors") as u64;
        row.load.push(num(line, "load1"));
    }
    let systems = ["ticketing", "etcd", "redis"];
    println!("| case | system | pairs/s | p50 ms | p99 ms | errors | runs | load avg | ticketing ÷ this |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut bars: Vec<(String, Vec<(String, f64)>)> = Vec::new();
    for ((_, workers, scenario), rows) in &cases {
        let case = if scenario == "hot" {
            format!("hot key, {workers} waiters")
        } else {
            format!("{workers} worker{}", if *workers == 1 { "" } else { "s" })
        };
        let ours = rows.get("ticketing").map(|r| median(&r.rates));
        let mut group = Vec::new();
        for system in systems {
            let Some(row) = rows.get(system) else { continue };
            let rate = median(&row.rates);
            let ratio = match ours {
                Some(o) if system != "ticketing" && rate > 0.0 => format!("{:.1}×", o / rate),
                _ => "—".into(),
            };
            println!(
                "| {case} | {system} | {:.0} | {:.3} | {:.3} | {} | {} | {:.1} | {ratio} |",
                rate,
                median(&row.p50),
                median(&row.p99),
                row.errors,
                row.rates.len(),
                median(&row.load),
            );
            group.push((system.to_string(), rate));
        }
        bars.push((case, group));
    }
    std::fs::write(svg_out, svg(&bars)).map_err(|e| format!("{svg_out}: {e}"))?;
    Ok(())
}

/// A grouped bar chart, log scale, hand-written SVG.
fn svg(groups: &[(String, Vec<(String, f64)>)]) -> String {
    let colors = [("ticketing", "#2b7bb9"), ("etcd", "#e0a030"), ("redis", "#c0392b")];
    let (left, top, height, group_w, bar_w) = (70.0, 40.0, 260.0, 150.0, 36.0);
    let width = left + group_w * groups.len() as f64 + 20.0;
    let (lo, hi) = (100f64.log10(), 100_000f64.log10());
    let y = |v: f64| top + height - ((v.max(100.0).log10() - lo) / (hi - lo)).clamp(0.0, 1.0) * height;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{:.0}\" font-family=\"sans-serif\" font-size=\"11\">\n\
         <text x=\"{left}\" y=\"20\" font-size=\"13\">acquire+release pairs per second (log scale), same machine, loopback</text>\n",
        top + height + 60.0
    );
    for v in [100.0, 1_000.0, 10_000.0, 100_000.0] {
        s += &format!(
            "<line x1=\"{left}\" x2=\"{:.0}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/><text x=\"{:.0}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
            width - 20.0,
            y(v),
            y(v),
            left - 6.0,
            y(v) + 4.0,
            v as u64
        );
    }
    for (g, (case, bars)) in groups.iter().enumerate() {
        let x0 = left + g as f64 * group_w + 10.0;
        for (b, (system, rate)) in bars.iter().enumerate() {
            let color = colors.iter().find(|(n, _)| n == system).map_or("#888", |c| c.1);
            let x = x0 + b as f64 * (bar_w + 6.0);
            s += &format!(
                "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{bar_w}\" height=\"{:.1}\" fill=\"{color}\"><title>{system}: {rate:.0}/s</title></rect>\n\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"9\">{rate:.0}</text>\n",
                y(*rate),
                top + height - y(*rate),
                x + bar_w / 2.0,
                y(*rate) - 3.0
            );
        }
        s += &format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{case}</text>\n",
            x0 + 1.5 * (bar_w + 6.0) - 3.0,
            top + height + 16.0
        );
    }
    for (i, (name, color)) in colors.iter().enumerate() {
        let x = left + i as f64 * 110.0;
        s += &format!(
            "<rect x=\"{x}\" y=\"{:.0}\" width=\"12\" height=\"12\" fill=\"{color}\"/><text x=\"{:.0}\" y=\"{:.0}\">{name}</text>\n",
            top + height + 32.0,
            x + 16.0,
            top + height + 42.0
        );
    }
    s += "</svg>\n";
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_and_json() {
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(json_field("{\"header\":{},\"ID\":\"7587\",\"TTL\":\"600\"}", "ID").as_deref(), Some("7587"));
        assert_eq!(json_field("{\"a\": 12}", "a").as_deref(), Some("12"));
        assert_eq!(json_field("{\"p\":0.9830,\"q\":1}", "p").as_deref(), Some("0.9830"));
    }
}
