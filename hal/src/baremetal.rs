//! Identity-mapped bare metal: physical address = virtual address = bus address.
//!
//! For unikernels and appliances that map all memory 1:1 and have no IOMMU in the way. No
//! allocator is needed: DMA memory comes from a pool the caller provides (a `static`), handed
//! out in 4 KiB pages under a `spin` lock (taken only at setup, never on the data path).

use core::ptr::NonNull;

use spin::Mutex;

use crate::clock::Clock;
use crate::dma::{Dma, DmaBuf};
use crate::error::HalError;
use crate::mmio::{mmio_through_window, RawWindow};
use rdma_pmd::BusAddr;

/// A BAR mapped at a fixed virtual address (identity mapped: the BAR's physical address).
#[derive(Debug)]
pub struct IdentityBar {
    win: RawWindow,
}

impl IdentityBar {
    /// The BAR at bus address `bar` (what the BAR register holds; = physical = virtual
    /// address under identity mapping), `len` bytes long. Any architecture.
    ///
    /// Fails with [`HalError::BadLayout`] for a BAR at address 0, an empty one, or one that
    /// does not fit the address space.
    ///
    /// # Safety
    /// `[bar, bar + len)` must be the device's register window, mapped uncached (or
    /// write-combining where BlueFlame is used) at the same virtual address, used by nothing
    /// else for the lifetime of this value.
    pub unsafe fn new(bar: BusAddr, len: usize) -> Result<Self, HalError> {
        let bad = HalError::BadLayout { len, align: 0 };
        let start = usize::try_from(bar.0).map_err(|_| bad)?;
        if len == 0 || start.checked_add(len).is_none() {
            return Err(bad);
        }
        let base = NonNull::new(start as *mut u8).ok_or(bad)?;
        // SAFETY: forwarded to our caller (identity mapping: the virtual address is `bar`).
        Ok(IdentityBar { win: unsafe { RawWindow::new(base, len) } })
    }
}

mmio_through_window!(IdentityBar, win);

const PAGE: usize = 4096;

struct Pool<const PAGES: usize> {
    base: usize,
    used: [bool; PAGES],
}

/// DMA memory carved from a caller-provided, identity-mapped pool of `PAGES` 4 KiB pages.
pub struct StaticDma<const PAGES: usize> {
    pool: Mutex<Pool<PAGES>>,
}

impl<const PAGES: usize> StaticDma<PAGES> {
    /// Manage `PAGES` pages starting at `base`.
    ///
    /// # Safety
    /// `[base, base + PAGES * 4096)` must be 4 KiB-aligned memory, identity mapped (its virtual
    /// address is its physical and bus address), reachable by the device, and used by nothing
    /// else while this allocator lives.
    pub unsafe fn new(base: NonNull<u8>) -> Self {
        StaticDma { pool: Mutex::new(Pool { base: base.as_ptr() as usize, used: [false; PAGES] }) }
    }

    /// Pages not handed out.
    pub fn free_pages(&self) -> usize {
        self.pool.lock().used.iter().filter(|u| !**u).count()
    }
}

// SAFETY: blocks are whole pages of the pool, never handed out twice, zeroed before use;
// identity mapping makes the bus address equal to the CPU address; alignment up to the pool's
// own page alignment times the run start is honoured by searching aligned runs.
unsafe impl<const PAGES: usize> Dma for StaticDma<PAGES> {
    fn alloc(&self, len: usize, align: usize) -> Result<DmaBuf, HalError> {
        if len == 0 || !align.is_power_of_two() {
            return Err(HalError::BadLayout { len, align });
        }
        let pages = len.div_ceil(PAGE);
        let mut pool = self.pool.lock();
        let base = pool.base;
        let mut start = 0;
        while start + pages <= PAGES {
            let addr = base + start * PAGE;
            if !addr.is_multiple_of(align) {
                start += 1;
                continue;
            }
            if let Some(busy) = pool.used[start..start + pages].iter().position(|u| *u) {
                start += busy + 1;
                continue;
            }
            pool.used[start..start + pages].iter_mut().for_each(|u| *u = true);
            let cpu = NonNull::new(addr as *mut u8).ok_or(HalError::OutOfMemory { len })?;
            // SAFETY: the pages are inside the pool and were free; zero them for the contract.
            unsafe { core::ptr::write_bytes(cpu.as_ptr(), 0, pages * PAGE) };
            // SAFETY: identity mapped, exclusive until `free`.
            return Ok(unsafe { DmaBuf::from_raw_parts(cpu, BusAddr(addr as u64), len) });
        }
        Err(HalError::OutOfMemory { len })
    }

    unsafe fn free(&self, buf: DmaBuf) {
        let mut pool = self.pool.lock();
        let first = (buf.cpu().as_ptr() as usize - pool.base) / PAGE;
        let pages = buf.len().div_ceil(PAGE);
        pool.used[first..first + pages].iter_mut().for_each(|u| *u = false);
    }
}

/// A clock on the CPU's free-running counter, for bare metal without an OS timer: the
/// time-stamp counter (`rdtsc`) on x86_64, the generic timer's virtual count (`CNTVCT_EL0`)
/// on aarch64. Elsewhere there is no such counter and construction fails.
///
/// Ticks become nanoseconds exactly, `ticks * 10^9 / hz` in 128-bit arithmetic: no
/// intermediate overflows, and the result fits `u64` for 584 years at 1 GHz (more at any
/// faster counter; it saturates past that, never wraps). It never decreases while the counter
/// does not (an invariant TSC; the generic timer is architecturally monotonic).
#[derive(Clone, Copy, Debug)]
pub struct TscClock {
    /// Counter ticks per second (never 0).
    hz: u64,
}

impl TscClock {
    /// A clock on a counter of `ticks_per_us` ticks per microsecond (the caller knows its
    /// invariant TSC rate). Refused: a rate of 0, or an architecture without a counter.
    pub fn new(ticks_per_us: u64) -> Result<Self, HalError> {
        Self::from_hz(
            ticks_per_us
                .checked_mul(1_000_000)
                .ok_or(HalError::Unsupported("counter rate above 2^64 Hz"))?,
        )
    }

    /// A clock on a counter of `hz` ticks per second. Refused: a rate of 0, or an architecture
    /// without a counter.
    pub fn from_hz(hz: u64) -> Result<Self, HalError> {
        if !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
            return Err(HalError::Unsupported("no free-running CPU counter on this architecture"));
        }
        if hz == 0 {
            return Err(HalError::Unsupported("counter rate of 0 Hz"));
        }
        Ok(TscClock { hz })
    }

    /// A clock on the generic timer at the rate firmware programmed into `CNTFRQ_EL0`.
    /// Refused when that register reads 0 (firmware did not set it).
    #[cfg(target_arch = "aarch64")]
    pub fn generic_timer() -> Result<Self, HalError> {
        let hz: u64;
        // SAFETY: reading CNTFRQ_EL0 has no side effect and touches no memory; EL0 may read
        // it whenever the timer is usable at all (as it must be for CNTVCT_EL0).
        unsafe {
            core::arch::asm!("mrs {}, cntfrq_el0", out(reg) hz, options(nomem, nostack, preserves_flags))
        };
        Self::from_hz(hz & 0xffff_ffff)
    }

    /// Counter ticks per second.
    pub fn hz(&self) -> u64 {
        self.hz
    }

    /// Nanoseconds at a count of `ticks`: `ticks * 10^9 / hz`, exact (rounded down), saturating
    /// at `u64::MAX`.
    pub fn ns_at(&self, ticks: u64) -> u64 {
        let ns = ticks as u128 * 1_000_000_000 / self.hz as u128;
        u64::try_from(ns).unwrap_or(u64::MAX)
    }
}

/// The counter: `rdtsc` on x86_64, `CNTVCT_EL0` on aarch64 (after an `isb`, so that the read
/// is not taken early, as the kernel's `arch_timer_read_cntvct_el0`).
#[inline]
fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc reads a counter; it has no memory effects.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(target_arch = "aarch64")]
    {
        let t: u64;
        // SAFETY: `isb` and reading CNTVCT_EL0 touch no memory and have no side effect; a
        // `TscClock` exists on aarch64 only through its constructors, which callers use where
        // the generic timer is accessible at their exception level.
        unsafe {
            core::arch::asm!("isb", "mrs {}, cntvct_el0", out(reg) t, options(nostack, preserves_flags))
        };
        t
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        // Unreachable: `TscClock::from_hz` refuses these architectures.
        0
    }
}

impl Clock for TscClock {
    fn now_ns(&self) -> u64 {
        self.ns_at(ticks())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C, align(4096))]
    struct Arena([u8; 8 * PAGE]);

    #[test]
    fn identity_bar_takes_a_bus_address_on_any_architecture() {
        let mut regs = [0u64; 8];
        let at = BusAddr(regs.as_mut_ptr() as u64);
        {
            // SAFETY: `regs` is 64 bytes of ours, reached only through `bar` while it lives.
            let bar = unsafe { IdentityBar::new(at, 64) }.unwrap();
            crate::Mmio::write_u32(&bar, 8, 0x1234_5678);
            assert_eq!(crate::Mmio::read_u32(&bar, 8), 0x1234_5678);
            assert_eq!(crate::Mmio::size(&bar), 64);
        }
        assert_eq!(regs[1].to_ne_bytes()[..4], 0x1234_5678u32.to_ne_bytes());
        let bad = |len| HalError::BadLayout { len, align: 0 };
        // SAFETY: each call fails before anything is mapped.
        unsafe {
            assert_eq!(IdentityBar::new(BusAddr(0), 64).unwrap_err(), bad(64));
            assert_eq!(IdentityBar::new(at, 0).unwrap_err(), bad(0));
            assert_eq!(IdentityBar::new(BusAddr(u64::MAX - 8), 64).unwrap_err(), bad(64));
        }
    }

    #[test]
    fn pool_hands_out_aligned_zeroed_pages_and_takes_them_back() {
        let arena = Box::leak(Box::new(Arena([0xa5; 8 * PAGE])));
        // SAFETY: the leaked arena is ours alone, page aligned; "identity mapped" in a test
        // means only that the CPU address is reported as the bus address.
        let dma = unsafe { StaticDma::<8>::new(NonNull::from(&mut arena.0).cast()) };
        let a = dma.alloc(100, 64).unwrap();
        assert_eq!(a.bus().0, a.cpu().as_ptr() as u64);
        assert_eq!(a.read_u32(0), 0);
        let b = dma.alloc(3 * PAGE, 2 * PAGE).unwrap();
        assert!(b.bus().is_aligned(2 * PAGE as u64));
        assert!(dma.alloc(8 * PAGE, 64).is_err());
        // SAFETY: no device.
        unsafe {
            dma.free(a);
            dma.free(b);
        }
        assert_eq!(dma.free_pages(), 8);
    }

    const YEAR_S: u64 = 31_557_600; // 365.25 days

    #[test]
    fn nanoseconds_stay_exact_for_years_at_gigahertz_rates() {
        for ghz in [1u64, 3, 5] {
            let c = TscClock::new(ghz * 1000).unwrap();
            // 71 days at 3 GHz is where `ticks * 1000` passed 2^64.
            for secs in [1u64, 71 * 86_400, 72 * 86_400, YEAR_S, 10 * YEAR_S, 100 * YEAR_S] {
                let ticks = secs * ghz * 1_000_000_000;
                assert_eq!(c.ns_at(ticks), secs * 1_000_000_000, "{ghz} GHz, {secs} s");
                // A tick later is later, by what one tick is worth.
                assert_eq!(c.ns_at(ticks + ghz), secs * 1_000_000_000 + 1, "{ghz} GHz");
            }
            // The counter's end is 2^64 ticks: 5.8, 195 and 117 years; exact up to it.
            let end = c.ns_at(u64::MAX);
            assert_eq!(
                end as u128,
                u64::MAX as u128 * 1_000_000_000 / (ghz as u128 * 1_000_000_000)
            );
        }
    }

    #[test]
    fn nanoseconds_never_decrease_and_keep_moving() {
        // A rate that is not a whole number of ticks per microsecond (a 19.2 MHz generic timer)
        // and a fast TSC, across the ranges where the old product overflowed.
        for hz in [19_200_000u64, 3_000_000_000, 5_000_000_000] {
            let c = TscClock::from_hz(hz).unwrap();
            // 2^58 ticks is 475 years at 19.2 MHz; the counter's end only at GHz rates (below 1 GHz
            // the nanoseconds saturate first, after 584 years).
            let end = if hz >= 1_000_000_000 { u64::MAX - (1 << 20) } else { 1 << 58 };
            for base in [0u64, 1 << 40, 1 << 54, 1 << 58, end] {
                let mut last = c.ns_at(base);
                let mut moved = false;
                for k in 1..(1u64 << 16) {
                    let now = c.ns_at(base + k * 16);
                    assert!(now >= last, "{hz} Hz at {base:#x} + {k}");
                    moved |= now > last;
                    last = now;
                }
                assert!(moved, "{hz} Hz at {base:#x}: the clock stopped");
            }
        }
        assert_eq!(
            TscClock::from_hz(19_200_000).unwrap().ns_at(19_200_000 * 3600),
            3_600_000_000_000
        );
    }

    #[test]
    fn a_zero_rate_is_refused_and_the_clock_runs() {
        assert!(TscClock::new(0).is_err());
        assert!(TscClock::from_hz(0).is_err());
        assert!(TscClock::new(u64::MAX).is_err());
        // On the build machine's own counter: time moves forward.
        let c = TscClock::new(3000).unwrap();
        let a = c.now_ns();
        let mut b = c.now_ns();
        for _ in 0..1_000_000 {
            if b > a {
                break;
            }
            b = c.now_ns();
        }
        assert!(b > a);
    }
}
