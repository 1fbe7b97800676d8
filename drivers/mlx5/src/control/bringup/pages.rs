//! The pool of 4 KiB pages handed to firmware (`MANAGE_PAGES`), without an allocator.
//!
//! Firmware has no memory of its own for its tables (ICM): it asks the driver for pages at boot
//! (`QUERY_PAGES` boot and init) and at run time (`PAGE_REQUEST` events), and gives them back
//! on request and at teardown (kernel `pagealloc.c`, rdma-core `mlx5_vfio.c`
//! `mlx5_vfio_give_pages`/`mlx5_vfio_reclaim_pages`). Here the pages are carved out of one DMA
//! block sized by the caller at setup; which page is lent is tracked in a bitmap the caller
//! provides storage for (one bit per page, [`bitmap_words`]).

use rdma_pmd_hal::{Dma, DmaBuf, HalError};

/// Firmware page size (`MLX5_ADAPTER_PAGE_SIZE`).
pub const FW_PAGE: usize = 4096;

/// Words of bitmap storage for `pages` pages.
pub const fn bitmap_words(pages: usize) -> usize {
    pages.div_ceil(64)
}

/// Pages lent to firmware, out of a fixed pool.
#[derive(Debug)]
pub struct PagePool<'s> {
    block: Option<DmaBuf>,
    lent: &'s mut [u64],
    pages: usize,
    in_use: usize,
    high_water: usize,
}

impl<'s> PagePool<'s> {
    /// A pool of `pages` pages tracked in `bitmap` (at least [`bitmap_words`]`(pages)` words).
    /// No memory is taken until [`reserve`](Self::reserve).
    pub fn new(bitmap: &'s mut [u64], pages: usize) -> Self {
        assert!(bitmap.len() >= bitmap_words(pages), "bitmap too small for {pages} pages");
        bitmap.fill(0);
        PagePool { block: None, lent: bitmap, pages, in_use: 0, high_water: 0 }
    }

    /// Take the pool's memory from `dma` (once).
    pub fn reserve(&mut self, dma: &dyn Dma) -> Result<(), HalError> {
        if self.block.is_none() && self.pages > 0 {
            self.block = Some(dma.alloc(self.pages * FW_PAGE, FW_PAGE)?);
        }
        Ok(())
    }

    /// Pages in the pool.
    pub fn capacity(&self) -> usize {
        self.pages
    }

    /// Pages lent to firmware now.
    pub fn in_use(&self) -> usize {
        self.in_use
    }

    /// Most pages ever lent at once.
    pub fn high_water(&self) -> usize {
        self.high_water
    }

    /// Pages still free.
    pub fn free(&self) -> usize {
        if self.block.is_some() {
            self.pages - self.in_use
        } else {
            0
        }
    }

    /// Lend one page: its bus address.
    pub fn take(&mut self) -> Option<u64> {
        let base = self.block.as_ref()?.bus().0;
        for (w, word) in self.lent.iter_mut().enumerate() {
            if *word == u64::MAX {
                continue;
            }
            let bit = (!*word).trailing_zeros() as usize;
            let page = w * 64 + bit;
            if page >= self.pages {
                return None;
            }
            *word |= 1 << bit;
            self.in_use += 1;
            self.high_water = self.high_water.max(self.in_use);
            return Some(base + (page * FW_PAGE) as u64);
        }
        None
    }

    /// Take back the page at `bus`. False if it is not a page of this pool that was lent.
    pub fn give_back(&mut self, bus: u64) -> bool {
        let Some(block) = self.block.as_ref() else { return false };
        let base = block.bus().0;
        if bus < base || !(bus - base).is_multiple_of(FW_PAGE as u64) {
            return false;
        }
        let page = ((bus - base) / FW_PAGE as u64) as usize;
        if page >= self.pages {
            return false;
        }
        let (w, bit) = (page / 64, page % 64);
        if self.lent[w] & (1 << bit) == 0 {
            return false;
        }
        self.lent[w] &= !(1 << bit);
        self.in_use -= 1;
        true
    }

    /// Give the memory back to `dma` if firmware holds none of it. Returns the number of pages
    /// still lent (then the memory is kept: firmware may still write it).
    pub fn release(&mut self, dma: &dyn Dma) -> usize {
        if self.in_use != 0 {
            return self.in_use;
        }
        if let Some(b) = self.block.take() {
            // SAFETY: every page lent was returned by firmware (`in_use` is zero), so the device
            // no longer uses any of the block.
            unsafe { dma.free(b) };
        }
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_pmd_hal::mem::HeapDma;

    #[test]
    fn lends_distinct_pages_and_takes_only_its_own_back() {
        let dma = HeapDma::new();
        let mut bits = [0u64; bitmap_words(70)];
        let mut pool = PagePool::new(&mut bits, 70);
        assert_eq!(pool.take(), None, "nothing before reserve");
        pool.reserve(&*dma).unwrap();
        let pages: Vec<u64> = (0..70).map(|_| pool.take().unwrap()).collect();
        assert_eq!(pool.take(), None, "pool exhausted");
        let mut sorted = pages.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 70);
        assert!(pages.iter().all(|p| p % 4096 == 0));
        assert_eq!(pool.in_use(), 70);
        assert_eq!(pool.release(&*dma), 70, "memory kept while lent");
        assert!(!pool.give_back(pages[3] + 8), "not a page boundary");
        assert!(!pool.give_back(0x1000), "not ours");
        assert!(pool.give_back(pages[3]));
        assert!(!pool.give_back(pages[3]), "not lent twice");
        for p in pages.iter().filter(|p| **p != pages[3]) {
            assert!(pool.give_back(*p));
        }
        assert_eq!(pool.high_water(), 70);
        assert_eq!(pool.release(&*dma), 0);
        assert_eq!(dma.live_blocks(), 0);
    }
}
