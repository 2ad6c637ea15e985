//! The history of a fault run: every client operation with its invoke and complete
//! times (microseconds on one monotonic clock, counted from the start of the run),
//! every write the fenced resource saw, and every fault the nemesis injected. Written
//! as JSON lines so a run can be checked again later (`TICKETING_FAULT_REPLAY`).

use std::collections::BTreeMap;
use std::time::Instant;

/// The run's monotonic clock.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    base: Instant,
}

impl Clock {
    pub fn new() -> Clock {
        Clock { base: Instant::now() }
    }
    pub fn now(&self) -> u64 {
        self.at(Instant::now())
    }
    pub fn at(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.base).as_micros() as u64
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum AcqOutcome {
    /// `G`: `sent` is the instant just before the ACQUIRE was written (the client's
    /// deadline minus the lease), `deadline` the client's local deadline.
    Granted {
        token: u64,
        sent: u64,
        deadline: u64,
    },
    Busy,
    Timeout,
    NotLeader,
    Unavailable,
    Overloaded,
    Invalid(String),
    Indeterminate(String),
}

#[derive(Clone, Debug, PartialEq)]
pub enum RelOutcome {
    Released,
    NotHolder,
    Failed(String),
}

#[derive(Clone, Debug, PartialEq)]
pub enum QueryOutcome {
    Holder(u64),
    Free,
    Failed(String),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Acquire {
        client: u32,
        thread: u32,
        key: String,
        lease_ms: u64,
        wait_ms: u64,
        invoke: u64,
        complete: u64,
        outcome: AcqOutcome,
    },
    Release {
        client: u32,
        thread: u32,
        key: String,
        token: u64,
        invoke: u64,
        complete: u64,
        outcome: RelOutcome,
    },
    /// A write to the fenced resource; `seq` is the resource's own serial order.
    Write {
        seq: u64,
        client: u32,
        thread: u32,
        key: String,
        token: u64,
        at: u64,
        accepted: bool,
        zombie: bool,
    },
    Query {
        client: u32,
        thread: u32,
        key: String,
        invoke: u64,
        complete: u64,
        outcome: QueryOutcome,
    },
    /// A fault: injected at `start`, healed at `end`. `healed` is false when the
    /// harness could not heal it (e.g. a replacement that never completed).
    Fault {
        kind: String,
        detail: String,
        start: u64,
        end: u64,
        healed: bool,
    },
}

fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl Event {
    pub fn to_json(&self) -> String {
        match self {
            Event::Acquire { client, thread, key, lease_ms, wait_ms, invoke, complete, outcome } => {
                let head = format!(
                    "{{\"type\":\"acquire\",\"client\":{client},\"thread\":{thread},\"key\":{},\"lease_ms\":{lease_ms},\"wait_ms\":{wait_ms},\"invoke\":{invoke},\"complete\":{complete}",
                    esc(key)
                );
                let tail = match outcome {
                    AcqOutcome::Granted { token, sent, deadline } => {
                        format!(",\"outcome\":\"granted\",\"token\":{token},\"sent\":{sent},\"deadline\":{deadline}")
                    }
                    AcqOutcome::Busy => ",\"outcome\":\"busy\"".into(),
                    AcqOutcome::Timeout => ",\"outcome\":\"timeout\"".into(),
                    AcqOutcome::NotLeader => ",\"outcome\":\"not_leader\"".into(),
                    AcqOutcome::Unavailable => ",\"outcome\":\"unavailable\"".into(),
                    AcqOutcome::Overloaded => ",\"outcome\":\"overloaded\"".into(),
                    AcqOutcome::Invalid(why) => format!(",\"outcome\":\"invalid\",\"why\":{}", esc(why)),
                    AcqOutcome::Indeterminate(why) => {
                        format!(",\"outcome\":\"indeterminate\",\"why\":{}", esc(why))
                    }
                };
                format!("{head}{tail}}}")
            }
            Event::Release { client, thread, key, token, invoke, complete, outcome } => {
                let (o, why) = match outcome {
                    RelOutcome::Released => ("released", String::new()),
                    RelOutcome::NotHolder => ("not_holder", String::new()),
                    RelOutcome::Failed(w) => ("failed", format!(",\"why\":{}", esc(w))),
                };
                format!(
                    "{{\"type\":\"release\",\"client\":{client},\"thread\":{thread},\"key\":{},\"token\":{token},\"invoke\":{invoke},\"complete\":{complete},\"outcome\":\"{o}\"{why}}}",
                    esc(key)
                )
            }
            Event::Write { seq, client, thread, key, token, at, accepted, zombie } => format!(
                "{{\"type\":\"write\",\"seq\":{seq},\"client\":{client},\"thread\":{thread},\"key\":{},\"token\":{token},\"at\":{at},\"accepted\":{accepted},\"zombie\":{zombie}}}",
                esc(key)
            ),
            Event::Query { client, thread, key, invoke, complete, outcome } => {
                let tail = match outcome {
                    QueryOutcome::Holder(t) => format!(",\"outcome\":\"holder\",\"token\":{t}"),
                    QueryOutcome::Free => ",\"outcome\":\"free\"".into(),
                    QueryOutcome::Failed(w) => format!(",\"outcome\":\"failed\",\"why\":{}", esc(w)),
                };
                format!(
                    "{{\"type\":\"query\",\"client\":{client},\"thread\":{thread},\"key\":{},\"invoke\":{invoke},\"complete\":{complete}{tail}}}",
                    esc(key)
                )
            }
            Event::Fault { kind, detail, start, end, healed } => format!(
                "{{\"type\":\"fault\",\"kind\":{},\"detail\":{},\"start\":{start},\"end\":{end},\"healed\":{healed}}}",
                esc(kind),
                esc(detail)
            ),
        }
    }

    pub fn from_json(line: &str) -> Result<Event, String> {
        let m = parse_flat(line)?;
        let s = |k: &str| -> Result<String, String> {
            match m.get(k) {
                Some(J::S(v)) => Ok(v.clone()),
                _ => Err(format!("missing string {k:?} in {line}")),
            }
        };
        let n = |k: &str| -> Result<u64, String> {
            match m.get(k) {
                Some(J::N(v)) => Ok(*v),
                _ => Err(format!("missing number {k:?} in {line}")),
            }
        };
        let b = |k: &str| -> Result<bool, String> {
            match m.get(k) {
                Some(J::B(v)) => Ok(*v),
                _ => Err(format!("missing bool {k:?} in {line}")),
            }
        };
        let why = || s("why").unwrap_or_default();
        Ok(match s("type")?.as_str() {
            "acquire" => Event::Acquire {
                client: n("client")? as u32,
                thread: n("thread")? as u32,
                key: s("key")?,
                lease_ms: n("lease_ms")?,
                wait_ms: n("wait_ms")?,
                invoke: n("invoke")?,
                complete: n("complete")?,
                outcome: match s("outcome")?.as_str() {
                    "granted" => {
                        AcqOutcome::Granted { token: n("token")?, sent: n("sent")?, deadline: n("deadline")? }
                    }
                    "busy" => AcqOutcome::Busy,
                    "timeout" => AcqOutcome::Timeout,
                    "not_leader" => AcqOutcome::NotLeader,
                    "unavailable" => AcqOutcome::Unavailable,
                    "overloaded" => AcqOutcome::Overloaded,
                    "invalid" => AcqOutcome::Invalid(why()),
                    "indeterminate" => AcqOutcome::Indeterminate(why()),
                    o => return Err(format!("unknown acquire outcome {o}")),
                },
            },
            "release" => Event::Release {
                client: n("client")? as u32,
                thread: n("thread")? as u32,
                key: s("key")?,
                token: n("token")?,
                invoke: n("invoke")?,
                complete: n("complete")?,
                outcome: match s("outcome")?.as_str() {
                    "released" => RelOutcome::Released,
                    "not_holder" => RelOutcome::NotHolder,
                    _ => RelOutcome::Failed(why()),
                },
            },
            "write" => Event::Write {
                seq: n("seq")?,
                client: n("client")? as u32,
                thread: n("thread")? as u32,
                key: s("key")?,
                token: n("token")?,
                at: n("at")?,
                accepted: b("accepted")?,
                zombie: b("zombie")?,
            },
            "query" => Event::Query {
                client: n("client")? as u32,
                thread: n("thread")? as u32,
                key: s("key")?,
                invoke: n("invoke")?,
                complete: n("complete")?,
                outcome: match s("outcome")?.as_str() {
                    "holder" => QueryOutcome::Holder(n("token")?),
                    "free" => QueryOutcome::Free,
                    _ => QueryOutcome::Failed(why()),
                },
            },
            "fault" => Event::Fault {
                kind: s("kind")?,
                detail: s("detail")?,
                start: n("start")?,
                end: n("end")?,
                healed: b("healed")?,
            },
            t => return Err(format!("unknown event type {t}")),
        })
    }
}

enum J {
    S(String),
    N(u64),
    B(bool),
}

/// Parses one flat JSON object whose values are strings, unsigned integers or booleans
/// (exactly what `to_json` writes).
fn parse_flat(line: &str) -> Result<BTreeMap<String, J>, String> {
    let chars: Vec<char> = line.trim().chars().collect();
    let mut i = 0;
    let err = |what: &str| format!("bad JSON ({what}): {line}");
    let skip_ws = |i: &mut usize| {
        while *i < chars.len() && chars[*i].is_whitespace() {
            *i += 1
        }
    };
    let string = |i: &mut usize| -> Result<String, String> {
        if chars.get(*i) != Some(&'"') {
            return Err(err("expected a string"));
        }
        *i += 1;
        let mut out = String::new();
        while let Some(&c) = chars.get(*i) {
            *i += 1;
            match c {
                '"' => return Ok(out),
                '\\' => {
                    let e = *chars.get(*i).ok_or_else(|| err("escape"))?;
                    *i += 1;
                    match e {
                        'n' => out.push('\n'),
                        't' => out.push('\t'),
                        'u' => {
                            let hex: String =
                                chars.get(*i..*i + 4).ok_or_else(|| err("\\u"))?.iter().collect();
                            *i += 4;
                            let v = u32::from_str_radix(&hex, 16).map_err(|_| err("\\u"))?;
                            out.push(char::from_u32(v).unwrap_or('?'));
                        }
                        other => out.push(other),
                    }
                }
                c => out.push(c),
            }
        }
        Err(err("unterminated string"))
    };
    let mut map = BTreeMap::new();
    skip_ws(&mut i);
    if chars.get(i) != Some(&'{') {
        return Err(err("expected {"));
    }
    i += 1;
    loop {
        skip_ws(&mut i);
        if chars.get(i) == Some(&'}') {
            break;
        }
        let k = string(&mut i)?;
        skip_ws(&mut i);
        if chars.get(i) != Some(&':') {
            return Err(err("expected :"));
        }
        i += 1;
        skip_ws(&mut i);
        let v = match chars.get(i) {
            Some('"') => J::S(string(&mut i)?),
            Some('t') if chars[i..].starts_with(&['t', 'r', 'u', 'e']) => {
                i += 4;
                J::B(true)
            }
            Some('f') if chars[i..].starts_with(&['f', 'a', 'l', 's', 'e']) => {
                i += 5;
                J::B(false)
            }
            Some(c) if c.is_ascii_digit() => {
                let start = i;
                while i < chars.len() && chars[i].is_ascii_digit() {
                    i += 1;
                }
                let s: String = chars[start..i].iter().collect();
                J::N(s.parse().map_err(|_| err("number"))?)
            }
            _ => return Err(err("value")),
        };
        map.insert(k, v);
        skip_ws(&mut i);
        match chars.get(i) {
            Some(',') => i += 1,
            Some('}') => break,
            _ => return Err(err("expected , or }")),
        }
    }
    Ok(map)
}
