//! Timers of the leader's lock table: one compact queue per kind (leases by key slot,
//! waits by waiter), ordered by (deadline, tie-break).
//!
//! A timer is 24 bytes in one vector plus a 4-byte position per id; it refers to its
//! key or waiter by number, never by a copy of the key. Why a position-indexed binary
//! heap and not a timing wheel: the lock-table thread sleeps until the earliest
//! deadline, so it must know that deadline exactly after every change (the heap's top,
//! O(1)); removing a timer when a lock is released is O(log n) through its position,
//! so no dead timers pile up and none wakes the thread for nothing; and on equal
//! deadlines the order (token, or waiter sequence) is the same on every run.

/// One timer: `id` (a key slot or a waiter) is due at `deadline_ms`; among equal
/// deadlines the smaller `order` first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timer {
    pub deadline_ms: u64,
    pub order: u64,
    pub id: u32,
}

impl Timer {
    fn key(&self) -> (u64, u64) {
        (self.deadline_ms, self.order)
    }
}

const NONE: u32 = u32::MAX;

/// A min-queue of timers with at most one timer per id.
#[derive(Clone, Debug, Default)]
pub struct TimerQueue {
    heap: Vec<Timer>,
    /// `pos[id]`: where id's timer is in `heap`, or `NONE`.
    pos: Vec<u32>,
}

impl TimerQueue {
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The earliest timer.
    pub fn first(&self) -> Option<&Timer> {
        self.heap.first()
    }

    /// The timer of `id`, if it has one.
    pub fn get(&self, id: u32) -> Option<&Timer> {
        match self.pos.get(id as usize) {
            Some(&p) if p != NONE => Some(&self.heap[p as usize]),
            _ => None,
        }
    }

    /// Sets `id`'s timer (replacing the one it had).
    pub fn insert(&mut self, timer: Timer) {
        self.remove(timer.id);
        let id = timer.id as usize;
        if self.pos.len() <= id {
            self.pos.resize(id + 1, NONE);
        }
        self.heap.push(timer);
        let at = self.heap.len() - 1;
        self.pos[id] = at as u32;
        self.sift_up(at);
    }

    /// Removes and returns `id`'s timer.
    pub fn remove(&mut self, id: u32) -> Option<Timer> {
        let p = *self.pos.get(id as usize)?;
        if p == NONE {
            return None;
        }
        Some(self.remove_at(p as usize))
    }

    /// Removes and returns the earliest timer.
    pub fn pop(&mut self) -> Option<Timer> {
        if self.heap.is_empty() {
            None
        } else {
            Some(self.remove_at(0))
        }
    }

    pub fn clear(&mut self) {
        self.heap.clear();
        self.pos.clear();
    }

    /// Replaces everything with `timers` (ids distinct) in O(n).
    pub fn rebuild(&mut self, timers: Vec<Timer>) {
        self.heap = timers;
        self.pos.clear();
        let max_id = self.heap.iter().map(|t| t.id as usize + 1).max().unwrap_or(0);
        self.pos.resize(max_id, NONE);
        for (at, t) in self.heap.iter().enumerate() {
            debug_assert_eq!(self.pos[t.id as usize], NONE, "one timer per id");
            self.pos[t.id as usize] = at as u32;
        }
        for at in (0..self.heap.len() / 2).rev() {
            self.sift_down(at);
        }
    }

    fn remove_at(&mut self, at: usize) -> Timer {
        let last = self.heap.len() - 1;
        self.swap(at, last);
        let timer = self.heap.pop().expect("not empty");
        self.pos[timer.id as usize] = NONE;
        if at < self.heap.len() {
            self.sift_down(at);
            self.sift_up(at);
        }
        timer
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.pos[self.heap[a].id as usize] = a as u32;
        self.pos[self.heap[b].id as usize] = b as u32;
    }

    fn sift_up(&mut self, mut at: usize) {
        while at > 0 {
            let parent = (at - 1) / 2;
            if self.heap[at].key() >= self.heap[parent].key() {
                break;
            }
            self.swap(at, parent);
            at = parent;
        }
    }

    fn sift_down(&mut self, mut at: usize) {
        loop {
            let (l, r) = (2 * at + 1, 2 * at + 2);
            let mut least = at;
            if l < self.heap.len() && self.heap[l].key() < self.heap[least].key() {
                least = l;
            }
            if r < self.heap.len() && self.heap[r].key() < self.heap[least].key() {
                least = r;
            }
            if least == at {
                return;
            }
            self.swap(at, least);
            at = least;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn pops_in_order_and_removes_by_id(ops in proptest::collection::vec((0u32..40, 0u64..50, any::<bool>()), 0..300)) {
            let mut q = TimerQueue::default();
            let mut model = std::collections::BTreeMap::<u32, (u64, u64)>::new();
            for (id, deadline, remove) in ops {
                if remove {
                    let got = q.remove(id).map(|t| (t.deadline_ms, t.order));
                    prop_assert_eq!(got, model.remove(&id));
                } else {
                    q.insert(Timer { deadline_ms: deadline, order: u64::from(id), id });
                    model.insert(id, (deadline, u64::from(id)));
                }
                prop_assert_eq!((q.len(), q.is_empty()), (model.len(), model.is_empty()));
                let least = model.iter().map(|(id, (d, o))| (*d, *o, *id)).min();
                prop_assert_eq!(q.first().map(|t| (t.deadline_ms, t.order, t.id)), least);
            }
            let mut sorted: Vec<_> = model.iter().map(|(id, (d, o))| (*d, *o, *id)).collect();
            sorted.sort();
            let mut popped = Vec::new();
            while let Some(t) = q.pop() {
                popped.push((t.deadline_ms, t.order, t.id));
            }
            prop_assert_eq!(popped, sorted);
        }
    }

    #[test]
    fn rebuild_orders_like_inserts() {
        let timers: Vec<Timer> = (0..100u32)
            .map(|i| Timer { deadline_ms: u64::from(i * 7 % 13), order: u64::from(i), id: i })
            .collect();
        let mut q = TimerQueue::default();
        q.rebuild(timers.clone());
        let mut expected: Vec<_> = timers.iter().map(|t| (t.deadline_ms, t.order)).collect();
        expected.sort();
        let got: Vec<_> = std::iter::from_fn(|| q.pop()).map(|t| (t.deadline_ms, t.order)).collect();
        assert_eq!(got, expected);
    }
}
