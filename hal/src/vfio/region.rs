//! An open VFIO device file and what it says of its regions: shared by the device handle
//! ([`VfioDevice`](super::VfioDevice)) and the BARs it maps ([`VfioBar`](super::VfioBar)),
//! which both stand above this file.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use super::container::Group;
use super::uapi::*;

/// What `VFIO_DEVICE_GET_REGION_INFO` says about one region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionInfo {
    /// Region index (BARn is `n`, config space is 7).
    pub index: u32,
    /// Size in bytes (0: not implemented).
    pub size: u64,
    /// Where the region starts in the device file (for `pread`, `pwrite`, `mmap`).
    pub offset: u64,
    /// `VFIO_REGION_INFO_FLAG_*`.
    pub flags: u32,
}

impl RegionInfo {
    /// Whether the region can be `mmap`ed.
    pub fn mmap_ok(&self) -> bool {
        self.flags & VFIO_REGION_INFO_FLAG_MMAP != 0
    }
}

/// The device file, shared by the device handle and its BAR mappings so that it is closed only
/// after the last mapping is gone.
#[derive(Debug)]
pub(crate) struct DeviceFile {
    // Drop order: the device file closes before the group can be detached.
    pub(crate) fd: OwnedFd,
    pub(crate) path: String,
    pub(crate) group: Arc<Group>,
}
