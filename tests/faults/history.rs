//! The history of a fault run: every client operation (plain ACQUIREs, counted and
//! multi-key HOLDs, releases, QUERY and POOL reads) with its invoke and complete times
//! (microseconds on one monotonic clock, counted from the start of the run), every
//! write the fenced resource saw, and every fault the nemesis injected. Written as JSON
//! lines so a run can be checked again later (`TICKETING_FAULT_REPLAY`).

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

/// One key of a HOLD: `count` of the key's `capacity` permits.
#[derive(Clone, Debug, PartialEq)]
pub struct Part {
    pub key: String,
    pub count: u32,
    pub capacity: u32,
}

/// What a POOL read of a key answered: capacity (0 when the key had no holder and no
/// waiter), permits in use, holds, and the tokens of the oldest holds it listed (at
/// most 8).
#[derive(Clone, Debug, PartialEq)]
pub enum PoolOutcome {
    Seen { capacity: u32, in_use: u32, holds: u32, tokens: Vec<u64> },
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
    /// A HOLD (docs/protocol.md §5.7): all of `parts` with one token, or nothing. The
    /// outcomes are an ACQUIRE's; `Granted`'s token is the hold's one token.
    Hold {
        client: u32,
        thread: u32,
        parts: Vec<Part>,
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
    /// A POOL read of `key` (linearizable, like QUERY).
    Pool {
        client: u32,
        thread: u32,
        key: String,
        invoke: u64,
        complete: u64,
        outcome: PoolOutcome,
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

/// An ACQUIRE's or a HOLD's outcome as the tail of its JSON object.
fn acq_tail(outcome: &AcqOutcome) -> String {
    match outcome {
        AcqOutcome::Granted { token, sent, deadline } => {
            format!(",\"outcome\":\"granted\",\"token\":{token},\"sent\":{sent},\"deadline\":{deadline}")
        }
        AcqOutcome::Busy => ",\"outcome\":\"busy\"".into(),
        AcqOutcome::Timeout => ",\"outcome\":\"timeout\"".into(),
        AcqOutcome::NotLeader => ",\"outcome\":\"not_leader\"".into(),
        AcqOutcome::Unavailable => ",\"outcome\":\"unavailable\"".into(),
        AcqOutcome::Overloaded => ",\"outcome\":\"overloaded\"".into(),
        AcqOutcome::Invalid(why) => format!(",\"outcome\":\"invalid\",\"why\":{}", esc(why)),
        AcqOutcome::Indeterminate(why) => format!(",\"outcome\":\"indeterminate\",\"why\":{}", esc(why)),
    }
}

impl Event {
    pub fn to_json(&self) -> String {
        match self {
            Event::Acquire { client, thread, key, lease_ms, wait_ms, invoke, complete, outcome } => {
                let head = format!(
                    "{{\"type\":\"acquire\",\"client\":{client},\"thread\":{thread},\"key\":{},\"lease_ms\":{lease_ms},\"wait_ms\":{wait_ms},\"invoke\":{invoke},\"complete\":{complete}",
                    esc(key)
                );
                format!("{head}{}}}", acq_tail(outcome))
            }
            Event::Hold { client, thread, parts, lease_ms, wait_ms, invoke, complete, outcome } => {
                let list = |f: &dyn Fn(&Part) -> String| parts.iter().map(f).collect::<Vec<_>>().join(",");
                format!(
                    "{{\"type\":\"hold\",\"client\":{client},\"thread\":{thread},\"keys\":[{}],\"counts\":[{}],\"capacities\":[{}],\"lease_ms\":{lease_ms},\"wait_ms\":{wait_ms},\"invoke\":{invoke},\"complete\":{complete}{}}}",
                    list(&|p| esc(&p.key)),
                    list(&|p| p.count.to_string()),
                    list(&|p| p.capacity.to_string()),
                    acq_tail(outcome)
                )
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
            Event::Pool { client, thread, key, invoke, complete, outcome } => {
                let tail = match outcome {
                    PoolOutcome::Seen { capacity, in_use, holds, tokens } => format!(
                        ",\"outcome\":\"seen\",\"capacity\":{capacity},\"in_use\":{in_use},\"holds\":{holds},\"tokens\":[{}]",
                        tokens.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(",")
                    ),
                    PoolOutcome::Failed(w) => format!(",\"outcome\":\"failed\",\"why\":{}", esc(w)),
                };
                format!(
                    "{{\"type\":\"pool\",\"client\":{client},\"thread\":{thread},\"key\":{},\"invoke\":{invoke},\"complete\":{complete}{tail}}}",
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
        let list = |k: &str| -> Result<&Vec<J>, String> {
            match m.get(k) {
                Some(J::A(v)) => Ok(v),
                _ => Err(format!("missing list {k:?} in {line}")),
            }
        };
        let strs = |k: &str| -> Result<Vec<String>, String> {
            list(k)?
                .iter()
                .map(|v| match v {
                    J::S(s) => Ok(s.clone()),
                    _ => Err(format!("{k:?} holds a non-string in {line}")),
                })
                .collect()
        };
        let nums = |k: &str| -> Result<Vec<u64>, String> {
            list(k)?
                .iter()
                .map(|v| match v {
                    J::N(n) => Ok(*n),
                    _ => Err(format!("{k:?} holds a non-number in {line}")),
                })
                .collect()
        };
        let why = || s("why").unwrap_or_default();
        let acq_outcome = || -> Result<AcqOutcome, String> {
            Ok(match s("outcome")?.as_str() {
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
            })
        };
        Ok(match s("type")?.as_str() {
            "acquire" => Event::Acquire {
                client: n("client")? as u32,
                thread: n("thread")? as u32,
                key: s("key")?,
                lease_ms: n("lease_ms")?,
                wait_ms: n("wait_ms")?,
                invoke: n("invoke")?,
                complete: n("complete")?,
                outcome: acq_outcome()?,
            },
            "hold" => {
                let keys = strs("keys")?;
                let (counts, capacities) = (nums("counts")?, nums("capacities")?);
                if counts.len() != keys.len() || capacities.len() != keys.len() {
                    return Err(format!("keys, counts and capacities differ in length in {line}"));
                }
                Event::Hold {
                    client: n("client")? as u32,
                    thread: n("thread")? as u32,
                    parts: keys
                        .into_iter()
                        .zip(counts.iter().zip(&capacities))
                        .map(|(key, (c, cap))| Part { key, count: *c as u32, capacity: *cap as u32 })
                        .collect(),
                    lease_ms: n("lease_ms")?,
                    wait_ms: n("wait_ms")?,
                    invoke: n("invoke")?,
                    complete: n("complete")?,
                    outcome: acq_outcome()?,
                }
            }
            "pool" => Event::Pool {
                client: n("client")? as u32,
                thread: n("thread")? as u32,
                key: s("key")?,
                invoke: n("invoke")?,
                complete: n("complete")?,
                outcome: match s("outcome")?.as_str() {
                    "seen" => PoolOutcome::Seen {
                        capacity: n("capacity")? as u32,
                        in_use: n("in_use")? as u32,
                        holds: n("holds")? as u32,
                        tokens: nums("tokens")?,
                    },
                    _ => PoolOutcome::Failed(why()),
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
    A(Vec<J>),
}

/// Parses one flat JSON object whose values are strings, unsigned integers, booleans
/// or lists of strings or of integers (exactly what `to_json` writes).
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
    let scalar = |i: &mut usize| -> Result<J, String> {
        Ok(match chars.get(*i) {
            Some('"') => J::S(string(i)?),
            Some('t') if chars[*i..].starts_with(&['t', 'r', 'u', 'e']) => {
                *i += 4;
                J::B(true)
            }
            Some('f') if chars[*i..].starts_with(&['f', 'a', 'l', 's', 'e']) => {
                *i += 5;
                J::B(false)
            }
            Some(c) if c.is_ascii_digit() => {
                let start = *i;
                while *i < chars.len() && chars[*i].is_ascii_digit() {
                    *i += 1;
                }
                let s: String = chars[start..*i].iter().collect();
                J::N(s.parse().map_err(|_| err("number"))?)
            }
            _ => return Err(err("value")),
        })
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
        let v = if chars.get(i) == Some(&'[') {
            i += 1;
            let mut items = Vec::new();
            loop {
                skip_ws(&mut i);
                if chars.get(i) == Some(&']') {
                    i += 1;
                    break;
                }
                items.push(scalar(&mut i)?);
                skip_ws(&mut i);
                match chars.get(i) {
                    Some(',') => i += 1,
                    Some(']') => {
                        i += 1;
                        break;
                    }
                    _ => return Err(err("expected , or ]")),
                }
            }
            J::A(items)
        } else {
            scalar(&mut i)?
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
