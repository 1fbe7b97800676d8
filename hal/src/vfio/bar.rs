//! A PCI BAR mapped through VFIO, accessed with volatile loads and stores.

use std::ptr::NonNull;
use std::sync::Arc;

use super::device::{DeviceFile, RegionInfo};
use super::error::VfioError;
use super::pci::PciAddr;
use crate::mmio::{check, Mmio};
use std::os::fd::AsRawFd;

/// A BAR `mmap`ed from the VFIO device file. Unmapped on drop.
///
/// vfio-pci maps BARs uncached (`pgprot_noncached`), so stores reach the device in program
/// order; the `write_wc64` burst is eight ordinary 64-bit stores here (a write-combining
/// mapping would need the BAR's `resource0_wc` file, which VFIO does not offer).
#[derive(Debug)]
pub struct VfioBar {
    base: NonNull<u8>,
    len: usize,
    index: u32,
    // Keeps the device file open while the mapping exists.
    _file: Arc<DeviceFile>,
}

// SAFETY: the mapping is device registers, not Rust data; every access is a volatile load or
// store, which any thread may issue. Ordering between threads is the driver's business.
unsafe impl Send for VfioBar {}
// SAFETY: as above; `&VfioBar` hands out no references into the mapping.
unsafe impl Sync for VfioBar {}

impl VfioBar {
    pub(crate) fn map(
        file: Arc<DeviceFile>,
        dev: PciAddr,
        info: RegionInfo,
    ) -> Result<Self, VfioError> {
        let len = usize::try_from(info.size).map_err(|_| VfioError::Region {
            dev,
            index: info.index,
            why: "BAR larger than memory",
        })?;
        // SAFETY: a fresh shared mapping of the device file at the region's offset; the kernel
        // checks the range against the BAR. No existing memory is touched.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.fd.as_raw_fd(),
                info.offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(VfioError::last_os("mmap BAR", &file.path));
        }
        let base = NonNull::new(p.cast::<u8>()).expect("mmap does not return NULL on success");
        Ok(VfioBar { base, len, index: info.index, _file: file })
    }

    /// The BAR number.
    pub fn index(&self) -> u32 {
        self.index
    }

    #[inline(always)]
    fn ptr<T>(&self, off: usize) -> *mut T {
        let w = core::mem::size_of::<T>();
        check(off, w, w, self.len);
        self.base.as_ptr().wrapping_add(off).cast()
    }
}

impl Drop for VfioBar {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `map`; no references into it exist.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

// SAFETY: each access is one volatile load/store of the stated width at an in-range, aligned
// offset (checked by `ptr`/`check`, which panic otherwise); `write_wc64` stores eight ascending
// u64s.
unsafe impl Mmio for VfioBar {
    fn size(&self) -> usize {
        self.len
    }
    fn read_u32(&self, off: usize) -> u32 {
        // SAFETY: in range and aligned; the mapping lives as long as `self`.
        unsafe { self.ptr::<u32>(off).read_volatile() }
    }
    fn write_u32(&self, off: usize, value: u32) {
        // SAFETY: as above.
        unsafe { self.ptr::<u32>(off).write_volatile(value) }
    }
    fn read_u64(&self, off: usize) -> u64 {
        // SAFETY: as above.
        unsafe { self.ptr::<u64>(off).read_volatile() }
    }
    fn write_u64(&self, off: usize, value: u64) {
        // SAFETY: as above.
        unsafe { self.ptr::<u64>(off).write_volatile(value) }
    }
    fn write_wc64(&self, off: usize, block: &[u64; 8]) {
        check(off, 64, 64, self.len);
        for (i, w) in block.iter().enumerate() {
            // SAFETY: inside the window (all 64 bytes checked above).
            unsafe { self.ptr::<u64>(off + 8 * i).write_volatile(*w) }
        }
    }
}
