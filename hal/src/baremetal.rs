//! Identity-mapped bare metal: physical address = virtual address = bus address.
//!
//! For unikernels and appliances that map all memory 1:1 and have no IOMMU in the way. No
//! allocator is needed: DMA memory comes from a pool the caller provides (a `static`), handed
//! out in 4 KiB pages under a `spin` lock (taken only at setup, never on the data path).

use core::ptr::NonNull;

use spin::Mutex;
use x86_64::{PhysAddr, VirtAddr};

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
    /// The BAR at physical (= virtual) address `phys`, `len` bytes long.
    ///
    /// # Safety
    /// `[phys, phys + len)` must be the device's register window, mapped uncached (or
    /// write-combining where BlueFlame is used) at the same virtual address, used by nothing
    /// else for the lifetime of this value.
    pub unsafe fn new(phys: PhysAddr, len: usize) -> Self {
        let base = NonNull::new(VirtAddr::new(phys.as_u64()).as_mut_ptr::<u8>())
            .expect("a BAR at physical address 0");
        // SAFETY: forwarded to our caller (identity mapping: the virtual address is `phys`).
        IdentityBar { win: unsafe { RawWindow::new(base, len) } }
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

/// A clock on the x86 time-stamp counter, for bare metal without an OS timer.
#[derive(Clone, Copy, Debug)]
pub struct TscClock {
    /// TSC ticks per microsecond (the caller knows its invariant TSC rate).
    pub ticks_per_us: u64,
}

impl Clock for TscClock {
    fn now_ns(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: rdtsc reads a counter; it has no memory effects.
        let t = unsafe { core::arch::x86_64::_rdtsc() };
        #[cfg(not(target_arch = "x86_64"))]
        let t = 0u64;
        t.saturating_mul(1000) / self.ticks_per_us.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C, align(4096))]
    struct Arena([u8; 8 * PAGE]);

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
}
