//! [`TrackDma`]: heap DMA that remembers what it handed out, so that a fuzz iteration can
//! take back what the driver deliberately left to a device that is now gone (a command queue
//! kept after a command never completed, pages firmware never returned). Without it every
//! such input would leak, and a long run would end at libFuzzer's RSS limit.

use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use rdma_pmd::BusAddr;
use rdma_pmd_hal::mem::HeapDma;
use rdma_pmd_hal::{Dma, DmaBuf, HalError};

/// Heap DMA with a record of the live blocks.
pub struct TrackDma {
    /// The DMA space (the fake device reads and writes through it).
    pub heap: Arc<HeapDma>,
    live: Mutex<Vec<(usize, BusAddr, usize)>>,
}

impl TrackDma {
    /// An empty space.
    pub fn new() -> Self {
        TrackDma { heap: HeapDma::new(), live: Mutex::new(Vec::new()) }
    }

    /// Blocks allocated and not given back.
    pub fn live_blocks(&self) -> usize {
        self.live.lock().expect("not poisoned").len()
    }

    /// Free every block still allocated.
    ///
    /// # Safety
    /// No device (fake firmware, CQ writer) may touch any of them again, and nothing the
    /// driver still holds may use them: call once the driver's objects are gone.
    pub unsafe fn reclaim(&self) {
        let blocks = std::mem::take(&mut *self.live.lock().expect("not poisoned"));
        for (cpu, bus, len) in blocks {
            let p = NonNull::new(cpu as *mut u8).expect("an allocated block");
            // SAFETY: the block came from `heap.alloc` with these parts and was not freed
            // (free removes it from `live`); our caller guarantees nobody uses it.
            unsafe { self.heap.free(DmaBuf::from_raw_parts(p, bus, len)) };
        }
    }
}

impl Default for TrackDma {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: every block comes from `HeapDma`, which upholds the contract; the record only
// remembers them.
unsafe impl Dma for TrackDma {
    fn alloc(&self, len: usize, align: usize) -> Result<DmaBuf, HalError> {
        let b = self.heap.alloc(len, align)?;
        self.live.lock().expect("not poisoned").push((b.cpu().as_ptr() as usize, b.bus(), b.len()));
        Ok(b)
    }

    unsafe fn free(&self, buf: DmaBuf) {
        let key = buf.cpu().as_ptr() as usize;
        self.live.lock().expect("not poisoned").retain(|&(cpu, _, _)| cpu != key);
        // SAFETY: forwarded from our caller.
        unsafe { self.heap.free(buf) }
    }

    fn page_size(&self) -> usize {
        self.heap.page_size()
    }
}
