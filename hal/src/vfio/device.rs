//! A PCI function opened through VFIO: its regions, config space and BARs.

use std::sync::Arc;

use super::addr::PciAddr;
use super::bar::VfioBar;
use super::container::{Container, Group};
use super::dma::{DmaConfig, VfioDma};
use super::error::VfioError;
use super::pci::{self, Command, PciIds, PCI_COMMAND, PCI_DEVICE_ID, PCI_VENDOR_ID};
use super::region::{DeviceFile, RegionInfo};
use super::sys;
use super::uapi::*;

/// A vfio-pci device: open, with its group attached to its own container.
#[derive(Debug)]
pub struct VfioDevice {
    file: Arc<DeviceFile>,
    addr: PciAddr,
    config: RegionInfo,
    num_regions: u32,
}

impl VfioDevice {
    /// Open `addr` (bound to vfio-pci) in a new container: group, container, IOMMU, device.
    pub fn open(addr: PciAddr) -> Result<Self, VfioError> {
        let container = Container::open()?;
        Self::open_in(addr, &container)
    }

    /// Open `addr` with its group attached to `container` (several devices may share one
    /// IOMMU address space; each group is opened once).
    pub fn open_in(addr: PciAddr, container: &Arc<Container>) -> Result<Self, VfioError> {
        let group = Group::open(addr, container)?;
        let fd = group.device_fd(addr)?;
        // A readable name for errors: the device has no path of its own.
        let path = format!("/dev/vfio/{} (device {addr})", group.number());
        let file = Arc::new(DeviceFile { fd, path, group });
        let mut info = VfioDeviceInfo { argsz: argsz::<VfioDeviceInfo>(), ..Default::default() };
        // SAFETY: the kernel writes at most `argsz` bytes of `vfio_device_info`.
        unsafe {
            sys::ioctl_ptr(
                &file.fd,
                VFIO_DEVICE_GET_INFO,
                &mut info,
                "VFIO_DEVICE_GET_INFO",
                &file.path,
            )
        }?;
        if info.flags & VFIO_DEVICE_FLAGS_PCI == 0 {
            return Err(VfioError::NotPci { dev: addr });
        }
        let mut dev = VfioDevice {
            file,
            addr,
            config: RegionInfo { index: 0, size: 0, offset: 0, flags: 0 },
            num_regions: info.num_regions,
        };
        dev.config = dev.region_info(VFIO_PCI_CONFIG_REGION_INDEX)?;
        if dev.config.size < 64 || dev.config.flags & VFIO_REGION_INFO_FLAG_READ == 0 {
            return Err(VfioError::Region {
                dev: addr,
                index: VFIO_PCI_CONFIG_REGION_INDEX,
                why: "config space missing or not readable",
            });
        }
        Ok(dev)
    }

    /// The PCI address.
    pub fn addr(&self) -> PciAddr {
        self.addr
    }

    /// The IOMMU group this device is in.
    pub fn group(&self) -> &Arc<Group> {
        &self.file.group
    }

    /// The container (IOMMU address space) the device's group is attached to.
    pub fn container(&self) -> &Arc<Container> {
        self.file.group.container()
    }

    /// Number of regions the device reports.
    pub fn num_regions(&self) -> u32 {
        self.num_regions
    }

    /// `VFIO_DEVICE_GET_REGION_INFO` for region `index`.
    pub fn region_info(&self, index: u32) -> Result<RegionInfo, VfioError> {
        let mut ri =
            VfioRegionInfo { argsz: argsz::<VfioRegionInfo>(), index, ..Default::default() };
        // SAFETY: the kernel writes at most `argsz` bytes of `vfio_region_info`; capabilities
        // beyond them are not asked for (it then only raises `argsz`).
        unsafe {
            sys::ioctl_ptr(
                &self.file.fd,
                VFIO_DEVICE_GET_REGION_INFO,
                &mut ri,
                "VFIO_DEVICE_GET_REGION_INFO",
                &self.file.path,
            )
        }?;
        Ok(RegionInfo { index, size: ri.size, offset: ri.offset, flags: ri.flags })
    }

    fn config_check(&self, off: u64, len: usize) -> Result<(), VfioError> {
        if off.checked_add(len as u64).is_none_or(|end| end > self.config.size) {
            return Err(VfioError::Region {
                dev: self.addr,
                index: VFIO_PCI_CONFIG_REGION_INDEX,
                why: "access beyond config space",
            });
        }
        Ok(())
    }

    /// Read config space bytes at `off` (`pread` at the config region's offset).
    pub fn config_read(&self, off: u64, buf: &mut [u8]) -> Result<(), VfioError> {
        self.config_check(off, buf.len())?;
        sys::pread_exact(
            &self.file.fd,
            buf,
            self.config.offset + off,
            "pread config",
            &self.file.path,
        )
    }

    /// Write config space bytes at `off` (`pwrite`; vfio-pci filters what reaches the device).
    pub fn config_write(&self, off: u64, buf: &[u8]) -> Result<(), VfioError> {
        self.config_check(off, buf.len())?;
        sys::pwrite_exact(
            &self.file.fd,
            buf,
            self.config.offset + off,
            "pwrite config",
            &self.file.path,
        )
    }

    /// A 16-bit config register (little-endian in config space).
    pub fn config_read_u16(&self, off: u64) -> Result<u16, VfioError> {
        let mut b = [0u8; 2];
        self.config_read(off, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    /// A 32-bit config register.
    pub fn config_read_u32(&self, off: u64) -> Result<u32, VfioError> {
        let mut b = [0u8; 4];
        self.config_read(off, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Write a 16-bit config register.
    pub fn config_write_u16(&self, off: u64, v: u16) -> Result<(), VfioError> {
        self.config_write(off, &v.to_le_bytes())
    }

    /// Vendor and device id, from config space.
    pub fn ids(&self) -> Result<PciIds, VfioError> {
        Ok(PciIds {
            vendor: self.config_read_u16(PCI_VENDOR_ID)?,
            device: self.config_read_u16(PCI_DEVICE_ID)?,
        })
    }

    /// The command register.
    pub fn command(&self) -> Result<Command, VfioError> {
        Ok(Command::from_bits_retain(self.config_read_u16(PCI_COMMAND)?))
    }

    /// Turn on memory decoding and bus mastering (vfio-pci leaves bus mastering off after
    /// binding; without it the device's DMA never reaches memory). Returns the new value.
    pub fn enable_dma(&self) -> Result<Command, VfioError> {
        let cmd = self.command()? | Command::MEMORY | Command::MASTER;
        self.config_write_u16(PCI_COMMAND, cmd.bits())?;
        let now = self.command()?;
        if !now.contains(Command::MEMORY | Command::MASTER) {
            return Err(VfioError::Region {
                dev: self.addr,
                index: VFIO_PCI_CONFIG_REGION_INDEX,
                why: "memory decoding / bus mastering did not stick in PCI_COMMAND",
            });
        }
        Ok(now)
    }

    /// `mmap` BAR `index` (0..=5) whole, uncached, shared with the device.
    pub fn map_bar(&self, index: u32) -> Result<VfioBar, VfioError> {
        if index > 5 {
            return Err(VfioError::Region { dev: self.addr, index, why: "not a BAR index" });
        }
        let info = self.region_info(index)?;
        if info.size == 0 {
            return Err(VfioError::Region {
                dev: self.addr,
                index,
                why: "BAR not implemented (size 0)",
            });
        }
        if !info.mmap_ok() {
            return Err(VfioError::Region {
                dev: self.addr,
                index,
                why: "BAR cannot be mmap-ed (I/O port BAR?)",
            });
        }
        VfioBar::map(self.file.clone(), self.addr, info)
    }

    /// DMA memory for this device, mapped in its container.
    pub fn dma(&self, config: DmaConfig) -> Result<VfioDma, VfioError> {
        Ok(VfioDma::new(self.file.group.clone(), config))
    }

    /// The sysfs-reported IDs of `addr`, without opening anything (see [`pci::sysfs_ids`]).
    pub fn peek_ids(addr: PciAddr) -> Result<PciIds, VfioError> {
        pci::sysfs_ids(addr)
    }
}
