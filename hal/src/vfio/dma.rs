//! DMA memory behind the IOMMU: anonymous memory (2 MiB hugepages when available, else 4 KiB
//! pages) mapped into the container with `VFIO_IOMMU_MAP_DMA` at an IOVA from
//! [`IovaAllocator`].
//!
//! One `mmap` and one IOMMU mapping per block: the driver allocates few, long-lived blocks
//! (queues, doorbell records, registered buffers), so simplicity wins over packing.

use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use super::container::Group;
use super::error::VfioError;
use super::iova::{DmaMask, IovaRange};
use crate::dma::{Dma, DmaBuf};
use crate::error::HalError;
use rdma_pmd::BusAddr;

/// A small page.
pub const PAGE_4K: usize = 4096;
/// An x86_64 / arm64 (4 KiB granule) huge page.
pub const PAGE_2M: usize = 2 << 20;

/// The step named when hugepages cannot be had.
const HUGE_MMAP: &str = "mmap 2 MiB hugepages";

/// Which pages back a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pages {
    /// 4 KiB pages.
    Small,
    /// 2 MiB hugepages (`MAP_HUGETLB | MAP_HUGE_2MB`); fails if none are reserved.
    Huge,
    /// Hugepages for blocks of 1 MiB or more (or aligned to 2 MiB), falling back to 4 KiB
    /// pages when none are free; small blocks get 4 KiB pages.
    Auto,
}

/// How a [`VfioDma`] allocates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaConfig {
    /// The device's DMA mask: every IOVA handed out lies below it.
    pub mask: DmaMask,
    /// Page policy for [`Dma::alloc`].
    pub pages: Pages,
}

impl Default for DmaConfig {
    /// A 64-bit capable device, hugepages when they pay off.
    fn default() -> Self {
        DmaConfig { mask: DmaMask::bits(64), pages: Pages::Auto }
    }
}

/// Where a block lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backing {
    /// Its IOVA.
    pub iova: BusAddr,
    /// Bytes mapped (the request rounded up to whole pages).
    pub mapped: usize,
    /// The page size backing it.
    pub page_size: usize,
}

#[derive(Debug)]
struct Block {
    cpu: usize,
    backing: Backing,
}

#[derive(Debug)]
struct State {
    blocks: BTreeMap<u64, Block>,
}

/// Device-visible memory in a VFIO container.
#[derive(Debug)]
pub struct VfioDma {
    state: Mutex<State>,
    config: DmaConfig,
    // Keeps the group attached (and so the container's IOMMU alive) while mappings exist.
    group: Arc<Group>,
}

/// Anonymous memory of `len` bytes (a multiple of `page`), aligned to `align` (≥ `page`).
fn mmap_anon(len: usize, align: usize, page: usize) -> Result<usize, VfioError> {
    let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    if page == PAGE_2M {
        flags |= libc::MAP_HUGETLB | libc::MAP_HUGE_2MB;
    }
    let extra = align.saturating_sub(page);
    let total = len.checked_add(extra).ok_or(VfioError::BadLayout { len, align })?;
    // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
    let p = unsafe {
        libc::mmap(core::ptr::null_mut(), total, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0)
    };
    if p == libc::MAP_FAILED {
        let step = if page == PAGE_2M { HUGE_MMAP } else { "mmap 4 KiB pages" };
        return Err(VfioError::last_os(step, "anonymous memory"));
    }
    let start = p as usize;
    let aligned = start.next_multiple_of(align);
    let (head, tail) = (aligned - start, total - (aligned - start) - len);
    // Trim the over-allocation (both pieces are whole pages of the mapping).
    if head > 0 {
        // SAFETY: the first `head` bytes of the mapping just made, unused.
        unsafe { libc::munmap(p, head) };
    }
    if tail > 0 {
        // SAFETY: the last `tail` bytes of the mapping just made, unused.
        unsafe { libc::munmap((aligned + len) as *mut libc::c_void, tail) };
    }
    Ok(aligned)
}

impl VfioDma {
    pub(crate) fn new(group: Arc<Group>, config: DmaConfig) -> Self {
        VfioDma { state: Mutex::new(State { blocks: BTreeMap::new() }), config, group }
    }

    /// The configuration.
    pub fn config(&self) -> DmaConfig {
        self.config
    }

    /// The IOVA ranges blocks may come from (the IOMMU's, clipped to the mask).
    pub fn iova_ranges(&self) -> Vec<IovaRange> {
        self.group.container().iova_ranges_below(self.config.mask)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A zeroed block of `len` bytes aligned to `align` on the given pages.
    pub fn alloc_with(&self, len: usize, align: usize, pages: Pages) -> Result<DmaBuf, VfioError> {
        if len == 0 || !align.is_power_of_two() {
            return Err(VfioError::BadLayout { len, align });
        }
        match pages {
            Pages::Small => self.alloc_on(len, align, PAGE_4K),
            Pages::Huge => self.alloc_on(len, align, PAGE_2M),
            Pages::Auto if len >= PAGE_2M / 2 || align >= PAGE_2M => {
                match self.alloc_on(len, align, PAGE_2M) {
                    // No hugepage free (ENOMEM) or none configured (EINVAL): small pages.
                    // A failing VFIO_IOMMU_MAP_DMA is not retried: it would fail again.
                    Err(VfioError::Os { step: HUGE_MMAP, errno, .. })
                        if errno == libc::ENOMEM || errno == libc::EINVAL =>
                    {
                        self.alloc_on(len, align, PAGE_4K)
                    }
                    r => r,
                }
            }
            Pages::Auto => self.alloc_on(len, align, PAGE_4K),
        }
    }

    fn alloc_on(&self, len: usize, align: usize, page: usize) -> Result<DmaBuf, VfioError> {
        let mapped =
            len.checked_next_multiple_of(page).ok_or(VfioError::BadLayout { len, align })?;
        let align = align.max(page);
        let container = self.group.container();
        let mut st = self.lock();
        let iova = container.iova_alloc(mapped as u64, align as u64, self.config.mask)?;
        let cpu = match mmap_anon(mapped, align, page) {
            Ok(c) => c,
            Err(e) => {
                container.iova_free(iova);
                return Err(e);
            }
        };
        // SAFETY: `cpu` is a fresh private mapping of `mapped` bytes owned by this block until
        // `free`/drop unmaps it from the IOMMU first.
        if let Err(e) = unsafe { container.map_dma(cpu, iova.0, mapped as u64) } {
            // SAFETY: the mapping made above, never handed out.
            unsafe { libc::munmap(cpu as *mut libc::c_void, mapped) };
            container.iova_free(iova);
            return Err(e);
        }
        let backing = Backing { iova, mapped, page_size: page };
        st.blocks.insert(iova.0, Block { cpu, backing });
        let ptr = NonNull::new(cpu as *mut u8).expect("mmap never returns NULL on success");
        // SAFETY: `len` ≤ `mapped` bytes at `cpu`, zeroed (fresh anonymous memory), valid until
        // `free`; the IOMMU translates `iova` to exactly these pages.
        Ok(unsafe { DmaBuf::from_raw_parts(ptr, iova, len) })
    }

    /// Where `buf` lives, if it is a live block of this allocator.
    pub fn backing(&self, buf: &DmaBuf) -> Option<Backing> {
        let st = self.lock();
        st.blocks
            .get(&buf.bus().0)
            .filter(|b| b.cpu == buf.cpu().as_ptr() as usize)
            .map(|b| b.backing)
    }

    /// Blocks allocated and not freed.
    pub fn live_blocks(&self) -> usize {
        self.lock().blocks.len()
    }

    /// Unmap a block from the IOMMU and return its memory to the system.
    fn release(&self, st: &mut State, iova: u64, keep_address: bool) -> Result<(), VfioError> {
        let Some(b) = st.blocks.remove(&iova) else { return Ok(()) };
        let container = self.group.container();
        let unmapped = container.unmap_dma(iova, b.backing.mapped as u64);
        container.iova_free(BusAddr(iova));
        let addr = b.cpu as *mut libc::c_void;
        if keep_address {
            // A handle may still point here (the allocator is dropped before its blocks were
            // given back): replace the pages with fresh, lazily allocated ordinary memory, so
            // hugepages return to the pool and the stale handle reads zeros instead of freed
            // memory.
            // SAFETY: MAP_FIXED over our own block, which the device can no longer reach.
            unsafe {
                libc::mmap(
                    addr,
                    b.backing.mapped,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
        } else {
            // SAFETY: the block's own mapping; the caller of `free` gave up its handle.
            unsafe { libc::munmap(addr, b.backing.mapped) };
        }
        unmapped.map(|_| ())
    }
}

// SAFETY: blocks are fresh anonymous mappings (zeroed), never shared between blocks; the CPU
// address and the IOVA are both aligned to max(align, page size); the IOMMU maps the IOVA to
// exactly those pages until `free`; IOVAs lie below the configured DMA mask and inside the
// IOMMU's valid ranges.
unsafe impl Dma for VfioDma {
    fn alloc(&self, len: usize, align: usize) -> Result<DmaBuf, HalError> {
        self.alloc_with(len, align, self.config.pages).map_err(HalError::from)
    }

    unsafe fn free(&self, buf: DmaBuf) {
        let mut st = self.lock();
        let iova = buf.bus().0;
        if st.blocks.get(&iova).is_some_and(|b| b.cpu == buf.cpu().as_ptr() as usize) {
            // An unmap failure leaves nothing to undo: the pages are released either way.
            let _ = self.release(&mut st, iova, false);
        }
    }
}

impl Drop for VfioDma {
    fn drop(&mut self) {
        let mut st = self.lock();
        let live: Vec<u64> = st.blocks.keys().copied().collect();
        for iova in live {
            let _ = self.release(&mut st, iova, true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `[addr, addr + len)` is mapped (`mincore` fails with ENOMEM on holes).
    fn mapped(addr: usize, len: usize) -> bool {
        let mut vec = vec![0u8; len.div_ceil(PAGE_4K)];
        // SAFETY: `vec` has one byte per page of the range; mincore only reads page tables.
        unsafe { libc::mincore(addr as *mut libc::c_void, len, vec.as_mut_ptr()) == 0 }
    }

    #[test]
    fn anonymous_blocks_are_aligned_zeroed_and_released() {
        for (len, align) in [(PAGE_4K, PAGE_4K), (3 * PAGE_4K, 64 << 10), (PAGE_2M, PAGE_2M)] {
            let cpu = mmap_anon(len, align, PAGE_4K).unwrap();
            assert_eq!(cpu % align, 0, "{len:#x} aligned to {align:#x}");
            assert!(mapped(cpu, len));
            let p = cpu as *mut u8;
            // SAFETY: `len` bytes at `cpu` were just mapped read/write for this test.
            unsafe {
                assert!((0..len).all(|i| p.add(i).read_volatile() == 0), "zeroed");
                p.add(len - 1).write_volatile(0xa5);
                libc::munmap(p.cast(), len);
            }
        }
    }

    #[test]
    fn absurd_layouts_are_refused_before_any_system_call() {
        let e = mmap_anon(usize::MAX - PAGE_4K + 1, PAGE_2M, PAGE_4K).unwrap_err();
        assert!(matches!(e, VfioError::BadLayout { .. }), "{e}");
    }
}
