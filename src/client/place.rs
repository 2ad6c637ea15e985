//! A waiting hold's place in line (docs/client.md, "Counted and multi-key holds"): what
//! the server tells a HOLD that asked, and the estimate of its wait.

use std::sync::Arc;
use std::time::Duration;

/// Where a waiting hold stands: `ahead` requests are before it in the longest of its
/// queues, and that key saw `grants_per_ks` thousandths of a grant per second lately.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Place {
    pub ahead: u32,
    /// Thousandths of a grant per second (0: not measured yet).
    pub grants_per_ks: u32,
}

impl Place {
    pub fn new(ahead: u32, grants_per_ks: u32) -> Place {
        Place { ahead, grants_per_ks }
    }

    /// Grants per second on the key lately.
    pub fn grants_per_s(&self) -> f64 {
        f64::from(self.grants_per_ks) / 1000.0
    }

    /// How long the requests ahead take at the recent rate (`None` before a rate is
    /// measured). An estimate: holders may release sooner or keep their whole lease.
    pub fn estimated_wait(&self) -> Option<Duration> {
        (self.grants_per_ks > 0)
            .then(|| Duration::from_secs_f64(f64::from(self.ahead) * 1000.0 / f64::from(self.grants_per_ks)))
    }
}

/// Where a hold's places go: called on a thread of the client's, outside its locks, at
/// most once a second per waiting hold.
pub type OnPlace = Arc<dyn Fn(Place) + Send + Sync>;

/// One place to hand to the caller's function.
#[derive(Clone)]
pub struct PlaceNews {
    pub(crate) call: OnPlace,
    pub place: Place,
}

impl PlaceNews {
    /// Calls the caller's function with the place (on a thread outside the client's
    /// locks; the client simulator calls it as it reads the action).
    pub fn deliver(self) {
        (self.call)(self.place);
    }
}

impl std::fmt::Debug for PlaceNews {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlaceNews").field("place", &self.place).finish()
    }
}

impl PartialEq for PlaceNews {
    fn eq(&self, other: &PlaceNews) -> bool {
        Arc::ptr_eq(&self.call, &other.call) && self.place == other.place
    }
}

impl Eq for PlaceNews {}
