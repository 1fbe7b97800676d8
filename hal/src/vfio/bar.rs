//! A PCI BAR mapped through VFIO, accessed with volatile loads and stores.

use std::ptr::NonNull;
use std::sync::Arc;

use super::addr::PciAddr;
use super::error::VfioError;
use super::region::{DeviceFile, RegionInfo};
use crate::mmio::{mmio_through_window, RawWindow};
use std::os::fd::AsRawFd;

/// A BAR `mmap`ed from the VFIO device file. Unmapped on drop.
///
/// vfio-pci maps BARs uncached (`pgprot_noncached`), so stores reach the device in program
/// order; the `write_wc64` burst is eight ordinary 64-bit stores here (a write-combining
/// mapping would need the BAR's `resource0_wc` file, which VFIO does not offer).
#[derive(Debug)]
pub struct VfioBar {
    win: RawWindow,
    len: usize,
    index: u32,
    // Keeps the device file open while the mapping exists.
    _file: Arc<DeviceFile>,
}

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
        // SAFETY: the mapping is the BAR's registers, ours alone until `drop` unmaps it.
        let win = unsafe { RawWindow::new(base, len) };
        Ok(VfioBar { win, len, index: info.index, _file: file })
    }

    /// The BAR number.
    pub fn index(&self) -> u32 {
        self.index
    }
}

impl Drop for VfioBar {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `map`; no references into it exist.
        unsafe { libc::munmap(self.win.base().as_ptr().cast(), self.len) };
    }
}

mmio_through_window!(VfioBar, win);
