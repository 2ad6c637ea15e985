//! One driver process of a library under test: the commands written to it and the
//! outcome lines read back (docs/conformance.md), each outcome waited for by name.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

/// A parsed outcome line: `NAME WORD ARGS... [key=value]... [: message]`.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub name: String,
    /// `granted`, `busy`, `released`, `free`, `held`, `resolved`, an error kind, ...
    pub word: String,
    pub args: Vec<String>,
    pub fields: HashMap<String, String>,
    pub message: String,
    pub line: String,
}

impl Outcome {
    fn parse(line: &str) -> Option<Outcome> {
        let (head, message) = match line.split_once(" : ") {
            Some((h, m)) => (h, m.to_owned()),
            None => (line, String::new()),
        };
        let mut words = head.split_whitespace();
        let name = words.next()?.to_owned();
        let word = words.next()?.to_owned();
        let (mut args, mut fields) = (Vec::new(), HashMap::new());
        for w in words {
            match w.split_once('=') {
                Some((k, v)) => {
                    fields.insert(k.to_owned(), v.to_owned());
                }
                None => args.push(w.to_owned()),
            }
        }
        Some(Outcome { name, word, args, fields, message, line: line.to_owned() })
    }

    /// The token of a `granted` (or `resolved held`).
    pub fn token(&self) -> u64 {
        let t = if self.word == "resolved" { self.args.get(1) } else { self.args.first() };
        t.and_then(|t| t.parse().ok()).unwrap_or_else(|| panic!("no token in {:?}", self.line))
    }

    /// The driver's monotonic clock at the grant or just before the release.
    pub fn at(&self) -> u64 {
        self.fields
            .get("at")
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("no at= in {:?}", self.line))
    }

    /// How long the call took, as the driver measured it.
    pub fn ms(&self) -> u64 {
        self.fields
            .get("ms")
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("no ms= in {:?}", self.line))
    }

    pub fn retryable(&self) -> bool {
        self.fields.get("retryable").map(String::as_str) == Some("1")
    }
}

/// How to start one library's driver.
#[derive(Clone, Debug)]
pub struct Launch {
    pub program: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// A running driver; killed when dropped.
pub struct Driver {
    pub label: String,
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    /// Outcomes read but not asked for yet, by name.
    pending: HashMap<String, Outcome>,
    /// Place lines of holds, by name, oldest first.
    places: HashMap<String, Vec<Outcome>>,
    /// Everything it printed, for failure messages.
    pub transcript: Vec<String>,
}

/// The client's settings for one driver.
pub struct Settings<'a> {
    pub addrs: &'a str,
    pub token: &'a str,
    pub owner: &'a str,
    pub tls_ca: Option<&'a str>,
    /// The cluster's name the client is given (`None`: none).
    pub cluster_name: Option<&'a str>,
}

impl Driver {
    /// Starts the driver and waits for its `ready` (or `config-error`).
    pub fn start(launch: &Launch, label: &str, settings: &Settings<'_>) -> Result<Driver, String> {
        let mut command = Command::new(&launch.program);
        command.args(&launch.args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        for (k, v) in &launch.env {
            command.env(k, v);
        }
        command
            .env("TICKETING_ADDRS", settings.addrs)
            .env("TICKETING_AUTH_TOKEN", settings.token)
            .env("TICKETING_OWNER", settings.owner)
            .env("TICKETING_TLS_CA", settings.tls_ca.unwrap_or(""))
            .env("TICKETING_CLUSTER_NAME", settings.cluster_name.unwrap_or(""));
        let mut child = command.spawn().map_err(|e| format!("cannot start {}: {e}", launch.program))?;
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut driver = Driver {
            label: label.to_owned(),
            child,
            stdin,
            lines,
            pending: HashMap::new(),
            places: HashMap::new(),
            transcript: Vec::new(),
        };
        let first =
            driver.next_line(Duration::from_secs(30)).ok_or_else(|| format!("{label}: no ready line"))?;
        if first != "ready" {
            return Err(format!("{label}: {first}"));
        }
        Ok(driver)
    }

    fn next_line(&mut self, within: Duration) -> Option<String> {
        let line = self.lines.recv_timeout(within).ok()?;
        self.transcript.push(line.clone());
        Some(line)
    }

    /// Sends one command line.
    pub fn send(&mut self, line: &str) {
        self.transcript.push(format!("> {line}"));
        writeln!(self.stdin, "{line}").and_then(|()| self.stdin.flush()).unwrap_or_else(|e| {
            panic!("{}: the driver stopped reading ({e}):\n{}", self.label, self.transcript.join("\n"))
        });
    }

    /// The outcome named `name`, waiting up to `within`.
    pub fn outcome(&mut self, name: &str, within: Duration) -> Outcome {
        let deadline = Instant::now() + within;
        loop {
            if let Some(o) = self.pending.remove(name) {
                return o;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_line(left) {
                Some(line) => match Outcome::parse(&line) {
                    Some(o) => self.keep(o),
                    None => panic!("{}: a line that is no outcome: {line:?}", self.label),
                },
                None => panic!(
                    "{}: no outcome named {name} within {within:?}; transcript:\n{}",
                    self.label,
                    self.transcript.join("\n")
                ),
            }
        }
    }

    /// An outcome kept for its name; a hold's place (`NAME place …`, which comes before
    /// the hold's outcome, several per name) kept apart.
    fn keep(&mut self, o: Outcome) {
        if o.word == "place" {
            self.places.entry(o.name.clone()).or_default().push(o);
        } else {
            self.pending.insert(o.name.clone(), o);
        }
    }

    /// The next place line of the hold `name`, waiting up to `within`.
    pub fn place(&mut self, name: &str, within: Duration) -> Outcome {
        let deadline = Instant::now() + within;
        loop {
            if let Some(places) = self.places.get_mut(name).filter(|p| !p.is_empty()) {
                return places.remove(0);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_line(left).map(|line| (Outcome::parse(&line), line)) {
                Some((Some(o), _)) => self.keep(o),
                Some((None, line)) => panic!("{}: a line that is no outcome: {line:?}", self.label),
                None => panic!(
                    "{}: no place of {name} within {within:?}; transcript:\n{}",
                    self.label,
                    self.transcript.join("\n")
                ),
            }
        }
    }

    /// The place lines of `name` read so far and not yet taken.
    pub fn places_of(&mut self, name: &str) -> Vec<Outcome> {
        self.places.remove(name).unwrap_or_default()
    }

    /// Sends `line` and waits for the outcome of its name.
    pub fn call(&mut self, line: &str, within: Duration) -> Outcome {
        let name = line.split_whitespace().nth(1).unwrap().to_owned();
        self.send(line);
        self.outcome(&name, within)
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    /// Any outcome that arrives within `within` (one not yet asked for by name).
    pub fn poll(&mut self, within: Duration) -> Option<Outcome> {
        if let Some(name) = self.pending.keys().next().cloned() {
            return self.pending.remove(&name);
        }
        let deadline = Instant::now() + within;
        loop {
            let line = self.next_line(deadline.saturating_duration_since(Instant::now()))?;
            let o =
                Outcome::parse(&line).unwrap_or_else(|| panic!("{}: not an outcome: {line:?}", self.label));
            if o.word != "place" {
                return Some(o);
            }
            self.keep(o);
        }
    }
}
