//! The client simulator's callers: they acquire, release, resolve, query, adopt and
//! cancel through the core, and what each outcome must be is checked as it completes.

use super::*;

impl World {
    // ----- callers -------------------------------------------------------------------------------

    /// Starts an acquire for caller `c` (a scenario's callers use `usize::MAX`).
    pub fn acquire(
        &mut self,
        c: usize,
        key: &str,
        owner: &str,
        lease_s: u8,
        wait: Duration,
    ) -> Result<OpId, String> {
        let owner: Arc<str> = Arc::from(owner);
        let now = self.instant(self.now);
        let op = self.core.acquire(c, key, &owner, lease_s, wait, None, now);
        let bound = us(wait.max(CONNECT_WAIT_MIN) + wait + COMMIT_MARGIN);
        note!(self, "c{c} acquire {key} as {owner} (lease {lease_s} s, wait {wait:?}): {op:?}");
        self.checker.started(
            op,
            OpKind::Acquire { key: key.into(), owner: owner.to_string(), hold: None },
            self.now,
            bound,
        )?;
        self.drain()?;
        Ok(op)
    }

    /// Starts a HOLD of `parts` for caller `c`; `place`: it asks for its places in line,
    /// which the caller's function notes under the hold's number.
    pub fn hold(
        &mut self,
        c: usize,
        parts: Vec<HoldPart>,
        owner: &str,
        lease_s: u8,
        wait: Duration,
        place: bool,
    ) -> Result<OpId, String> {
        let owner: Arc<str> = Arc::from(owner);
        let now = self.instant(self.now);
        let number = self.place_ops.len() as u64 + 1;
        let on_place = place.then(|| {
            let told = Arc::clone(&self.places);
            Arc::new(move |p: Place| told.lock().unwrap().push((number, p)))
                as Arc<dyn Fn(Place) + Send + Sync>
        });
        let op = self.core.hold(c, parts.clone(), on_place, &owner, lease_s, wait, now);
        if place {
            self.place_ops.insert(number, op);
        }
        let bound = us(wait.max(CONNECT_WAIT_MIN) + wait + COMMIT_MARGIN);
        note!(
            self,
            "c{c} hold {parts:?} as {owner} (lease {lease_s} s, wait {wait:?}, place {place}): {op:?}"
        );
        let kind = OpKind::Acquire {
            key: hold_key(&parts).into(),
            owner: owner.to_string(),
            hold: Some((parts, place)),
        };
        self.checker.started(op, kind, self.now, bound)?;
        self.drain()?;
        Ok(op)
    }

    /// The keys of a HOLD a caller makes: one stock key's permits (its capacity stated
    /// wrong now and then: `E 1` while the key has holders or waiters), or 2–4 keys of
    /// the plain and stock ones, all or nothing.
    fn draw_parts(&mut self) -> Vec<HoldPart> {
        let mut pool: Vec<(String, u32)> = (0..self.p.keys)
            .map(|i| (format!("k{i}"), 1))
            .chain(self.p.stocks.iter().enumerate().map(|(i, &c)| (format!("s{i}"), c)))
            .collect();
        let n = if self.rng.chance(400) {
            // Counted: a stock key alone.
            pool.retain(|(k, _)| k.starts_with('s'));
            1
        } else {
            self.rng.range(2, 4) as usize
        };
        let mut parts = Vec::new();
        while parts.len() < n && !pool.is_empty() {
            let (key, capacity) = pool.swap_remove(self.rng.below(pool.len() as u64) as usize);
            let count = self.rng.range(1, u64::from(capacity)) as u32;
            let capacity = if capacity > 1 && self.rng.chance(20) { capacity + 1 } else { capacity };
            parts.push(HoldPart { key, count, capacity });
        }
        parts
    }

    pub fn release(
        &mut self,
        c: Option<usize>,
        key: &str,
        owner: &str,
        token: u64,
    ) -> Result<Option<OpId>, String> {
        let owner: Arc<str> = Arc::from(owner);
        self.checker.gave_up(token, self.now, c.is_some());
        let op = self
            .core
            .release(c, key, &owner, token, self.instant(self.now))
            .map_err(|e| format!("release refused: {e}"))?;
        note!(
            self,
            "c{c:?} release {key} {token}: {op:?}, next {:?}",
            self.core.op_deadline(op).map(|i| self.t_of(i))
        );
        let op = if c.is_some() {
            self.checker.started(op, OpKind::Release, self.now, us(RELEASE_DEADLINE))?;
            Some(op)
        } else {
            None
        };
        self.drain()?;
        Ok(op)
    }

    /// A caller adopts `token` (`Client::adopt`), its lock ending with the server's lease.
    pub fn adopt(&mut self, token: u64) -> Check {
        let end = self.checker.grants.get(&token).map(|g| g.lease_end).ok_or("no such grant")?;
        let (deadline, now) = (self.instant(end), self.instant(self.now));
        note!(self, "adopt {token}");
        self.core.adopted(token, deadline, now);
        self.checker.adopted(token);
        self.drain()
    }

    pub fn resolve(&mut self, c: usize, acquire: OpId, i: &Indeterminate, end: T) -> Result<OpId, String> {
        let op = self.core.resolve(c, i, self.instant(end), self.instant(self.now));
        note!(self, "c{c} resolve {acquire:?} by {} ms: {op:?}", end / MS);
        self.checker.started(op, OpKind::Resolve { acquire }, self.now, end - self.now)?;
        self.drain()?;
        Ok(op)
    }

    pub fn query(&mut self, c: usize, key: &str, budget: T) -> Result<OpId, String> {
        let request = Request::Query { key: key.to_owned() };
        let op =
            self.core.read(c, request, Target::Any, self.instant(self.now + budget), self.instant(self.now));
        self.checker.started(op, OpKind::Read, self.now, budget)?;
        self.drain()?;
        Ok(op)
    }

    pub(super) fn complete(&mut self, c: usize, op: OpId, outcome: Outcome) -> Check {
        note!(self, "c{c} {op:?} ends: {outcome:?}");
        let lease_end = match &outcome {
            Outcome::Resolve(Resolved::Held(g)) | Outcome::Acquire(Ok(g)) => {
                self.cluster.committed.get(&g.token).map(|h| h.lease_end)
            }
            _ => None,
        };
        self.checker.completed(op, &outcome, self.now, lease_end)?;
        self.check_lasting(&outcome)?;
        if lasting_unavailable(&outcome) {
            self.checker.stats.lasting += 1;
        }
        if c == usize::MAX {
            self.outcomes.insert(op, (self.now, outcome));
            return Ok(());
        }
        let state = std::mem::replace(&mut self.callers[c], Caller::Idle);
        let hold = self.rng.range(10 * MS, 3 * SEC);
        // Often at once: the caller queues its next request while the reader that woke
        // it still holds the pen.
        let think = if self.rng.chance(400) { self.rng.range(1, 20) } else { self.rng.range(0, 400 * MS) };
        match (state, outcome) {
            (Caller::Acquiring { key, owner, .. }, Outcome::Acquire(Ok(g))) => {
                self.callers[c] = Caller::Holding { key, owner, token: g.token };
                self.at(self.now + hold, Ev::Caller { c });
            }
            (
                Caller::Acquiring { shared: false, .. },
                Outcome::Acquire(Err(AcquireError::Indeterminate(i))),
            ) if i.cause() != IndeterminateCause::ExpiredOnArrival && self.rng.chance(500) => {
                let settle = self.t_of(i.settle_at());
                let end = if self.rng.chance(700) {
                    settle.max(self.now) + self.rng.range(0, 10 * SEC)
                } else {
                    self.now + self.rng.below(settle.saturating_sub(self.now) + 1)
                };
                // The state first: the outcome may come at once.
                self.callers[c] = Caller::Resolving { acquire: op, attempt: Box::new(i.clone()) };
                let resolve = self.resolve(c, op, &i, end)?;
                self.maybe_cancel(resolve, end.saturating_sub(self.now));
            }
            // Unknown: sometimes the caller asks again, with time for the whole window.
            (Caller::Resolving { acquire, attempt }, Outcome::Resolve(Resolved::Unknown))
                if self.rng.chance(400) =>
            {
                let end = self.t_of(attempt.settle_at()).max(self.now) + self.rng.range(SEC, 10 * SEC);
                self.callers[c] = Caller::Resolving { acquire, attempt: attempt.clone() };
                self.resolve(c, acquire, &attempt, end)?;
            }
            (Caller::Resolving { .. }, Outcome::Resolve(Resolved::Held(g))) => {
                let (key, owner) = self.resolved_lock(g.token);
                self.callers[c] = Caller::Holding { key, owner, token: g.token };
                self.at(self.now + hold, Ev::Caller { c });
            }
            _ => self.at(self.now + think, Ev::Caller { c }),
        }
        Ok(())
    }

    /// In a seed that cancels, sometimes cancels `op` within `within` from now.
    pub(super) fn maybe_cancel(&mut self, op: OpId, within: T) {
        if self.p.cancels > 0 && self.rng.chance(self.p.cancels) {
            let at = self.now + self.rng.below(within + 1);
            self.at(at, Ev::Cancel { op });
        }
    }

    /// The caller of `op` cancels it: a running operation ends at once (its caller hears
    /// of it in this very drain); an ended one is left alone. The core says which it
    /// was, and that must match what the caller had heard.
    pub fn cancel(&mut self, op: OpId) -> Check {
        let told = self.checker.is_done(op);
        let running = self.core.cancel(op, self.instant(self.now));
        note!(self, "cancel {op:?}: {}", if running { "was running" } else { "had ended" });
        if running == told {
            return Err(format!(
                "cancel of {op:?} said {} but its caller had {}heard its outcome",
                if running { "running" } else { "ended" },
                if told { "" } else { "not " }
            ));
        }
        self.drain()?;
        if running {
            self.checker.stats.cancelled += 1;
            if !self.checker.is_done(op) {
                return Err(format!("{op:?} was cancelled while running but its caller never heard"));
            }
        }
        Ok(())
    }

    pub(super) fn resolved_lock(&self, token: u64) -> (String, Arc<str>) {
        let g = &self.checker.grants[&token];
        (g.key.clone(), Arc::from(g.owner.as_str()))
    }

    pub(super) fn caller(&mut self, c: usize) -> Check {
        match self.callers[c].clone() {
            Caller::Idle if !self.healing => {
                self.calls += 1;
                let key = format!("k{}", self.rng.below(self.p.keys as u64));
                if self.rng.chance(120) {
                    let budget = self.rng.range(200 * MS, 10 * SEC);
                    self.callers[c] = Caller::Reading;
                    let op = self.query(c, &key, budget)?;
                    self.maybe_cancel(op, budget);
                    return Ok(());
                }
                let shared = self.p.one_owner || self.rng.chance(200);
                let owner = match (self.p.one_owner, shared) {
                    (true, _) => "client".to_owned(),
                    (false, true) => format!("c{c}"),
                    (false, false) => format!("c{c}-{}", self.calls),
                };
                let lease = self.rng.range(u64::from(self.p.leases.0), u64::from(self.p.leases.1)) as u8;
                let wait = match self.rng.below(10) {
                    0..=2 => 0,
                    3..=8 => self.rng.range(50, 3000),
                    _ => self.rng.range(3000, 10_000),
                };
                let hold = self.p.holds > 0 && self.rng.chance(self.p.holds);
                let parts = if hold { self.draw_parts() } else { Vec::new() };
                let key = if hold { hold_key(&parts).to_owned() } else { key };
                self.callers[c] =
                    Caller::Acquiring { key: key.clone(), owner: Arc::from(owner.as_str()), shared };
                let op = if hold {
                    let place = self.rng.chance(500);
                    self.hold(c, parts, &owner, lease, Duration::from_millis(wait), place)?
                } else {
                    self.acquire(c, &key, &owner, lease, Duration::from_millis(wait))?
                };
                self.maybe_cancel(op, wait * MS + 2 * SEC);
                Ok(())
            }
            Caller::Holding { key, owner, token } => {
                if self.rng.chance(500) {
                    self.callers[c] = Caller::Idle;
                    self.release(None, &key, &owner, token)?;
                    let think = self.rng.range(0, 200 * MS);
                    self.at(self.now + think, Ev::Caller { c });
                } else {
                    self.callers[c] = Caller::Releasing;
                    if let Some(op) = self.release(Some(c), &key, &owner, token)? {
                        self.maybe_cancel(op, 5 * SEC);
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}
