//! VFIO: drive a PCI device from user space on Linux, behind the IOMMU (feature `vfio`).
//!
//! ```no_run
//! use rdma_pmd_hal::vfio::{DmaConfig, DmaMask, Pages, VfioDevice};
//! use rdma_pmd_hal::{Dma, Mmio};
//!
//! let dev = VfioDevice::open("0000:3b:00.0".parse()?)?;
//! dev.enable_dma()?; // memory decoding + bus mastering in PCI_COMMAND
//! let bar0 = dev.map_bar(0)?;
//! let _fw_rev = bar0.read_be32(0);
//! let dma = dev.dma(DmaConfig { mask: DmaMask::bits(64), pages: Pages::Auto })?;
//! let ring = dma.alloc(64 << 10, 4096)?; // zeroed, IOVA in ring.bus()
//! // SAFETY: the device was never told about `ring`.
//! unsafe { dma.free(ring) };
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! | type | what it is |
//! |---|---|
//! | [`Container`] | `/dev/vfio/vfio`: one IOMMU address space (type1 v2); DMA map/unmap |
//! | [`Group`] | `/dev/vfio/N`: the device's IOMMU group, checked viable, attached to a container |
//! | [`VfioDevice`] | the device file: region info, config space (`pread`/`pwrite`), BARs |
//! | [`VfioBar`] | an `mmap`ed BAR implementing [`Mmio`](crate::Mmio) |
//! | [`VfioDma`] | hugepage / 4 KiB memory mapped at IOVAs from [`IovaAllocator`], implementing [`Dma`](crate::Dma) |
//! | [`VfioError`] | what failed: the step, the file, the errno |
//!
//! The numbers and structures of the kernel interface are in `uapi` (checked against
//! `<linux/vfio.h>` by its tests).
//!
//! Not covered: interrupts (a poll-mode driver needs none), device reset, several devices per
//! group (each group is opened once, for one device), the iommufd/cdev interface, no-IOMMU mode.

mod addr;
mod bar;
mod container;
mod device;
mod dma;
mod error;
mod iova;
mod pci;
mod region;
mod sys;
pub mod uapi;

pub use addr::PciAddr;
pub use bar::VfioBar;
pub use container::{Container, Group, CONTAINER_PATH};
pub use device::VfioDevice;
pub use dma::{Backing, DmaConfig, Pages, VfioDma, PAGE_2M, PAGE_4K};
pub use error::{GroupPeers, Peer, SysPath, VfioError};
pub use iova::{DmaMask, IovaAllocator, IovaRange};
pub use pci::{bound_driver, functions, iommu_group, sysfs_ids, Command, Function, PciIds};
pub use region::RegionInfo;

#[cfg(test)]
mod edu;
