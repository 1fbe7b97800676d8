//! Firmware page accounting: the host pages the driver lends the firmware.
//!
//! The firmware asks for pages in stages (PRM "Firmware Pages"; kernel `pagealloc.c`):
//! *boot* pages after `ENABLE_HCA` (`QUERY_PAGES` op_mod 1), *init* pages before `INIT_HCA`
//! (op_mod 2), and at run time more (or fewer) through page request events (op_mod 3 reports
//! the outstanding balance). The driver lends pages with `MANAGE_PAGES` give and takes them back
//! with `MANAGE_PAGES` take once the firmware no longer needs them (after `TEARDOWN_HCA`, or
//! after a negative request).

use std::collections::BTreeSet;

/// Bytes of a firmware page (`MLX5_ADAPTER_PAGE_SIZE`).
pub const PAGE_SIZE: u64 = 4096;

/// What the firmware holds and needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pages {
    given: BTreeSet<u64>,
    /// Pages needed after `ENABLE_HCA` (before capabilities and registers are used).
    pub boot: u32,
    /// Further pages needed before `INIT_HCA`.
    pub init: u32,
    /// Pages needed at run time beyond boot + init (raised by a page request, lowered by an
    /// offer to return pages); what the driver still owes is [`required`](Self::required)
    /// minus [`held`](Self::held).
    pub runtime: i64,
    /// Whether the HCA is initialized (needs boot + init + runtime) or only enabled (boot).
    pub initialized: bool,
    /// Whether the function is enabled (needs anything at all).
    pub enabled: bool,
    /// Pages given over the firmware's life.
    pub total_given: u64,
    /// Pages taken back over the firmware's life.
    pub total_taken: u64,
}

/// A snapshot for tests and diagnostics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageStats {
    /// Pages the firmware holds now.
    pub held: usize,
    /// Pages it needs now.
    pub required: usize,
    /// Pages given over its life.
    pub total_given: u64,
    /// Pages taken back over its life.
    pub total_taken: u64,
}

impl Pages {
    /// Accounting for a firmware that needs `boot` and `init` pages.
    pub fn new(boot: u32, init: u32) -> Self {
        Pages { boot, init, ..Pages::default() }
    }

    /// Pages held now.
    pub fn held(&self) -> usize {
        self.given.len()
    }

    /// Whether the firmware holds the page at `addr`.
    pub fn holds(&self, addr: u64) -> bool {
        self.given.contains(&addr)
    }

    /// The held pages, ascending.
    pub fn held_pages(&self) -> impl Iterator<Item = u64> + '_ {
        self.given.iter().copied()
    }

    /// Pages needed in the current state.
    ///
    /// Before `INIT_HCA` nothing is committed: a driver whose bring-up failed takes every page
    /// back before `DISABLE_HCA` (kernel `mlx5_function_setup` error path); the commands that
    /// need pages check what is held. From `INIT_HCA` to `TEARDOWN_HCA` boot + init + run-time
    /// pages are locked.
    pub fn required(&self) -> usize {
        if !self.initialized {
            return 0;
        }
        (i64::from(self.boot) + i64::from(self.init) + self.runtime).max(0) as usize
    }

    /// `QUERY_PAGES` `num_pages` for `boot`/`init`/`regular`: positive = still wanted, negative
    /// = could be returned (regular only).
    pub fn query(&self, stage: super::codes::PagesStage) -> i32 {
        use super::codes::PagesStage;
        let held = self.held() as i64;
        if !self.enabled && !matches!(stage, PagesStage::Regular) {
            return 0;
        }
        let want = match stage {
            PagesStage::Boot => i64::from(self.boot) - held,
            PagesStage::Init => i64::from(self.boot) + i64::from(self.init) - held,
            // Between ENABLE_HCA and INIT_HCA the stages speak, not the balance.
            _ if self.enabled && !self.initialized => 0,
            _ => self.required() as i64 - held,
        };
        let want = if matches!(stage, PagesStage::Regular) { want } else { want.max(0) };
        want.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
    }

    /// Take ownership of `pages` (already checked: aligned, reachable, distinct, not held).
    pub fn give(&mut self, pages: &[u64]) {
        for p in pages {
            self.given.insert(*p);
        }
        self.total_given += pages.len() as u64;
    }

    /// Give back up to `max` pages the firmware does not need; returns them.
    pub fn take(&mut self, max: usize) -> Vec<u64> {
        let spare = self.held().saturating_sub(self.required());
        let n = spare.min(max);
        let out: Vec<u64> = self.given.iter().rev().take(n).copied().collect();
        for p in &out {
            self.given.remove(p);
        }
        self.total_taken += out.len() as u64;
        out
    }

    /// The driver cannot give what was asked for (`MANAGE_PAGES` allocation-fail): the
    /// firmware makes do with what it holds.
    pub fn allocation_failed(&mut self) {
        let short = self.required() as i64 - self.held() as i64;
        if self.initialized && short > 0 {
            self.runtime -= short;
        }
    }

    /// A snapshot.
    pub fn stats(&self) -> PageStats {
        PageStats {
            held: self.held(),
            required: self.required(),
            total_given: self.total_given,
            total_taken: self.total_taken,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::codes::PagesStage;
    use super::*;

    #[test]
    fn stages_add_up() {
        let mut p = Pages::new(3, 5);
        assert_eq!(p.query(PagesStage::Boot), 0, "nothing is needed before ENABLE_HCA");
        p.enabled = true;
        assert_eq!(p.query(PagesStage::Boot), 3);
        p.give(&[0x1000, 0x2000, 0x3000]);
        assert_eq!(p.query(PagesStage::Boot), 0);
        assert_eq!(p.query(PagesStage::Init), 5);
        assert_eq!(p.query(PagesStage::Regular), 0);
        assert_eq!(p.required(), 0, "nothing is locked before INIT_HCA");
        assert_eq!(p.take(10).len(), 3, "a failed bring-up takes its pages back");
        assert_eq!(p.query(PagesStage::Boot), 3);
        p.give(&[0x1000, 0x2000, 0x3000]);
        p.give(&[0x4000, 0x5000, 0x6000, 0x7000, 0x8000]);
        p.initialized = true;
        assert_eq!(p.query(PagesStage::Regular), 0);
        assert!(p.take(10).is_empty(), "locked from INIT_HCA on");
        p.runtime += 2;
        assert_eq!(p.query(PagesStage::Regular), 2);
        p.give(&[0x9000]);
        assert_eq!(p.query(PagesStage::Regular), 1);
        p.runtime -= 3;
        assert_eq!(p.query(PagesStage::Regular), -2, "one more than needed, plus one offered");
        assert_eq!(p.take(5), vec![0x9000, 0x8000]);
        assert_eq!(p.query(PagesStage::Regular), 0);
        p.runtime += 2;
        p.allocation_failed();
        assert_eq!(p.query(PagesStage::Regular), 0);
        p.initialized = false;
        p.enabled = false;
        assert_eq!(p.query(PagesStage::Regular), -7);
        assert_eq!(p.take(100).len(), 7);
        assert_eq!(p.held(), 0);
        assert_eq!((p.stats().total_given, p.stats().total_taken), (12, 12));
    }
}
