//! Time, so that every wait has a bound.

/// A monotonic clock.
pub trait Clock {
    /// Nanoseconds since an arbitrary fixed point; never decreases.
    fn now_ns(&self) -> u64;
}

/// A point in time after which a bounded wait gives up.
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    at_ns: u64,
}

impl Deadline {
    /// `timeout_ns` from now on `clock`.
    pub fn after(clock: &(impl Clock + ?Sized), timeout_ns: u64) -> Self {
        Deadline { at_ns: clock.now_ns().saturating_add(timeout_ns) }
    }

    /// Whether the deadline has passed.
    pub fn expired(&self, clock: &(impl Clock + ?Sized)) -> bool {
        clock.now_ns() >= self.at_ns
    }
}

/// The operating system's monotonic clock.
#[cfg(feature = "std")]
#[derive(Clone, Copy, Debug)]
pub struct StdClock {
    origin: std::time::Instant,
}

#[cfg(feature = "std")]
impl Default for StdClock {
    fn default() -> Self {
        StdClock { origin: std::time::Instant::now() }
    }
}

#[cfg(feature = "std")]
impl Clock for StdClock {
    fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now_ns(&self) -> u64 {
        (**self).now_ns()
    }
}
