//! The VFIO user API: ioctl numbers and the structures they pass, as the kernel's
//! `include/uapi/linux/vfio.h` defines them (checked against the installed header by the tests
//! at the bottom of this file).
//!
//! Every VFIO ioctl is `_IO(VFIO_TYPE, VFIO_BASE + n)`: no direction and no size are encoded,
//! the structures carry their own `argsz` instead. [`ioc`] is the generic `_IOC` encoding of
//! `include/uapi/asm-generic/ioctl.h` (x86, arm64, riscv; not powerpc, mips or sparc, whose
//! direction bits differ).

#![allow(missing_docs)] // field names are the header's; each struct names its C original

use core::mem::{offset_of, size_of};

/// `_IOC_NONE`.
const IOC_NONE: u64 = 0;
const IOC_NRSHIFT: u32 = 0;
const IOC_TYPESHIFT: u32 = 8;
const IOC_SIZESHIFT: u32 = 16;
const IOC_DIRSHIFT: u32 = 30;

/// `_IOC(dir, type, nr, size)` of `asm-generic/ioctl.h`.
pub const fn ioc(dir: u64, ty: u8, nr: u8, size: u16) -> u64 {
    (dir << IOC_DIRSHIFT)
        | ((ty as u64) << IOC_TYPESHIFT)
        | ((nr as u64) << IOC_NRSHIFT)
        | ((size as u64) << IOC_SIZESHIFT)
}

/// `_IO(type, nr)`.
pub const fn io(ty: u8, nr: u8) -> u64 {
    ioc(IOC_NONE, ty, nr, 0)
}

/// `VFIO_TYPE`: the ioctl type byte, `';'`.
pub const VFIO_TYPE: u8 = b';';
/// `VFIO_BASE`: the first VFIO ioctl number.
pub const VFIO_BASE: u8 = 100;

/// `_IO(VFIO_TYPE, VFIO_BASE + n)`.
const fn vfio_io(n: u8) -> u64 {
    io(VFIO_TYPE, VFIO_BASE + n)
}

/// `VFIO_API_VERSION`: what `VFIO_GET_API_VERSION` returns.
pub const VFIO_API_VERSION: i32 = 0;
/// `VFIO_TYPE1v2_IOMMU`: the type1 IOMMU with v2 unmap semantics.
pub const VFIO_TYPE1V2_IOMMU: u64 = 3;

pub const VFIO_GET_API_VERSION: u64 = vfio_io(0);
pub const VFIO_CHECK_EXTENSION: u64 = vfio_io(1);
pub const VFIO_SET_IOMMU: u64 = vfio_io(2);
pub const VFIO_GROUP_GET_STATUS: u64 = vfio_io(3);
pub const VFIO_GROUP_SET_CONTAINER: u64 = vfio_io(4);
pub const VFIO_GROUP_UNSET_CONTAINER: u64 = vfio_io(5);
pub const VFIO_GROUP_GET_DEVICE_FD: u64 = vfio_io(6);
pub const VFIO_DEVICE_GET_INFO: u64 = vfio_io(7);
pub const VFIO_DEVICE_GET_REGION_INFO: u64 = vfio_io(8);
pub const VFIO_DEVICE_RESET: u64 = vfio_io(11);
pub const VFIO_IOMMU_GET_INFO: u64 = vfio_io(12);
pub const VFIO_IOMMU_MAP_DMA: u64 = vfio_io(13);
pub const VFIO_IOMMU_UNMAP_DMA: u64 = vfio_io(14);

/// `VFIO_GROUP_FLAGS_VIABLE`: every device of the group is bound to a VFIO driver (or none).
pub const VFIO_GROUP_FLAGS_VIABLE: u32 = 1 << 0;
/// `VFIO_GROUP_FLAGS_CONTAINER_SET`.
pub const VFIO_GROUP_FLAGS_CONTAINER_SET: u32 = 1 << 1;

/// `VFIO_DEVICE_FLAGS_RESET`.
pub const VFIO_DEVICE_FLAGS_RESET: u32 = 1 << 0;
/// `VFIO_DEVICE_FLAGS_PCI`.
pub const VFIO_DEVICE_FLAGS_PCI: u32 = 1 << 1;

/// `VFIO_REGION_INFO_FLAG_READ`.
pub const VFIO_REGION_INFO_FLAG_READ: u32 = 1 << 0;
/// `VFIO_REGION_INFO_FLAG_WRITE`.
pub const VFIO_REGION_INFO_FLAG_WRITE: u32 = 1 << 1;
/// `VFIO_REGION_INFO_FLAG_MMAP`.
pub const VFIO_REGION_INFO_FLAG_MMAP: u32 = 1 << 2;

/// `VFIO_PCI_BAR0_REGION_INDEX` (BARn is `n`).
pub const VFIO_PCI_BAR0_REGION_INDEX: u32 = 0;
/// `VFIO_PCI_CONFIG_REGION_INDEX`.
pub const VFIO_PCI_CONFIG_REGION_INDEX: u32 = 7;

/// `VFIO_DMA_MAP_FLAG_READ`: the device may read the mapping.
pub const VFIO_DMA_MAP_FLAG_READ: u32 = 1 << 0;
/// `VFIO_DMA_MAP_FLAG_WRITE`: the device may write the mapping.
pub const VFIO_DMA_MAP_FLAG_WRITE: u32 = 1 << 1;

/// `VFIO_IOMMU_INFO_CAPS`: `cap_offset` of [`VfioIommuType1Info`] is valid.
pub const VFIO_IOMMU_INFO_CAPS: u32 = 1 << 1;
/// `VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE`: the capability listing the valid IOVA ranges.
pub const VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE: u16 = 1;

/// `struct vfio_group_status`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct VfioGroupStatus {
    pub argsz: u32,
    pub flags: u32,
}

/// `struct vfio_device_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct VfioDeviceInfo {
    pub argsz: u32,
    pub flags: u32,
    pub num_regions: u32,
    pub num_irqs: u32,
    pub cap_offset: u32,
    /// Explicit tail padding, named by the uapi since Linux 6.8; older kernels check `argsz`
    /// against the size without it, which this one exceeds, so both accept it.
    pub pad: u32,
}

/// `struct vfio_region_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct VfioRegionInfo {
    pub argsz: u32,
    pub flags: u32,
    pub index: u32,
    pub cap_offset: u32,
    pub size: u64,
    pub offset: u64,
}

/// `struct vfio_iommu_type1_info` (the header's trailing padding made explicit).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct VfioIommuType1Info {
    pub argsz: u32,
    pub flags: u32,
    pub iova_pgsizes: u64,
    pub cap_offset: u32,
    pub pad: u32,
}

/// `struct vfio_info_cap_header`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct VfioInfoCapHeader {
    pub id: u16,
    pub version: u16,
    pub next: u32,
}

/// `struct vfio_iommu_type1_info_cap_iova_range` without its flexible `iova_ranges[]`, which
/// follow it as [`VfioIovaRange`]s.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct VfioIommuType1InfoCapIovaRange {
    pub header: VfioInfoCapHeader,
    pub nr_iovas: u32,
    pub reserved: u32,
}

/// `struct vfio_iova_range` (inclusive `end`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct VfioIovaRange {
    pub start: u64,
    pub end: u64,
}

/// `struct vfio_iommu_type1_dma_map`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct VfioIommuType1DmaMap {
    pub argsz: u32,
    pub flags: u32,
    pub vaddr: u64,
    pub iova: u64,
    pub size: u64,
}

/// `struct vfio_iommu_type1_dma_unmap` without its flexible `data[]` (unused: no dirty
/// bitmap is asked for).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct VfioIommuType1DmaUnmap {
    pub argsz: u32,
    pub flags: u32,
    pub iova: u64,
    pub size: u64,
}

/// `argsz` of a structure: its size, which the kernel checks against what it knows.
pub const fn argsz<T>() -> u32 {
    size_of::<T>() as u32
}

// Layouts, as `include/uapi/linux/vfio.h` declares them (x86_64 and arm64 agree).
const _: () = {
    assert!(size_of::<VfioGroupStatus>() == 8);
    assert!(size_of::<VfioDeviceInfo>() == 24);
    assert!(offset_of!(VfioDeviceInfo, num_regions) == 8);
    assert!(offset_of!(VfioDeviceInfo, cap_offset) == 16);
    assert!(size_of::<VfioRegionInfo>() == 32);
    assert!(offset_of!(VfioRegionInfo, index) == 8);
    assert!(offset_of!(VfioRegionInfo, size) == 16);
    assert!(offset_of!(VfioRegionInfo, offset) == 24);
    assert!(size_of::<VfioIommuType1Info>() == 24);
    assert!(offset_of!(VfioIommuType1Info, iova_pgsizes) == 8);
    assert!(offset_of!(VfioIommuType1Info, cap_offset) == 16);
    assert!(size_of::<VfioInfoCapHeader>() == 8);
    assert!(size_of::<VfioIommuType1InfoCapIovaRange>() == 16);
    assert!(offset_of!(VfioIommuType1InfoCapIovaRange, nr_iovas) == 8);
    assert!(size_of::<VfioIovaRange>() == 16);
    assert!(size_of::<VfioIommuType1DmaMap>() == 32);
    assert!(offset_of!(VfioIommuType1DmaMap, vaddr) == 8);
    assert!(offset_of!(VfioIommuType1DmaMap, iova) == 16);
    assert!(offset_of!(VfioIommuType1DmaMap, size) == 24);
    assert!(size_of::<VfioIommuType1DmaUnmap>() == 24);
    assert!(offset_of!(VfioIommuType1DmaUnmap, iova) == 8);
    assert!(offset_of!(VfioIommuType1DmaUnmap, size) == 16);
};

#[cfg(test)]
mod tests;
