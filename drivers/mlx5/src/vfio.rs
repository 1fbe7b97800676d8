//! Opening a ConnectX function through VFIO (feature `vfio`, Linux).
//!
//! [`open`] checks that the PCI function is one `mlx5_core` drives, by the vendor and device
//! ids the kernel has already read from config space (sysfs), before anything is opened: a
//! wrong address fails without the device being enabled, reset or mapped. It then opens the
//! function through VFIO, turns on memory decoding and bus mastering, maps BAR0 (the
//! initialization segment, command-queue doorbell and UAR pages) and creates DMA memory for a
//! 64-bit capable device. The result's [`Mlx5Vfio::bar0`] and [`Mlx5Vfio::dma`] are the
//! [`Mmio`](rdma_pmd_hal::Mmio) and [`Dma`](rdma_pmd_hal::Dma) the HCA bring-up over the
//! command interface and [`crate::Mlx5`] take.
//!
//! ```no_run
//! let hca = rdma_pmd_mlx5::vfio::open("0000:3b:00.0")?;
//! println!("{} at {}", hca.model().name, hca.device().addr());
//! # Ok::<(), rdma_pmd_mlx5::vfio::OpenError>(())
//! ```

use core::fmt;

use rdma_pmd_hal::vfio::{
    sysfs_ids, DmaConfig, DmaMask, Pages, PciAddr, PciIds, VfioBar, VfioDevice, VfioDma, VfioError,
};

/// PCI vendor id of Mellanox Technologies (now NVIDIA networking), `PCI_VENDOR_ID_MELLANOX`.
pub const MELLANOX_VENDOR: u16 = 0x15b3;

/// A device `mlx5_core` binds to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Model {
    /// PCI device id.
    pub device: u16,
    /// Product name, as the kernel's table comments it.
    pub name: &'static str,
    /// A virtual function (`MLX5_PCI_DEV_IS_VF`).
    pub vf: bool,
}

const fn pf(device: u16, name: &'static str) -> Model {
    Model { device, name, vf: false }
}

const fn vf(device: u16, name: &'static str) -> Model {
    Model { device, name, vf: true }
}

/// Device ids of `mlx5_core_pci_table` in the kernel's
/// `drivers/net/ethernet/mellanox/mlx5/core/main.c` (mainline, up to the ConnectX-10
/// NVLink-C2C entry), all under vendor [`MELLANOX_VENDOR`].
pub const MODELS: &[Model] = &[
    pf(0x1011, "Connect-IB"),
    vf(0x1012, "Connect-IB VF"),
    pf(0x1013, "ConnectX-4"),
    vf(0x1014, "ConnectX-4 VF"),
    pf(0x1015, "ConnectX-4 Lx"),
    vf(0x1016, "ConnectX-4 Lx VF"),
    pf(0x1017, "ConnectX-5, PCIe 3.0"),
    vf(0x1018, "ConnectX-5 VF"),
    pf(0x1019, "ConnectX-5 Ex"),
    vf(0x101a, "ConnectX-5 Ex VF"),
    pf(0x101b, "ConnectX-6"),
    vf(0x101c, "ConnectX-6 VF"),
    pf(0x101d, "ConnectX-6 Dx"),
    vf(0x101e, "ConnectX family mlx5Gen VF"),
    pf(0x101f, "ConnectX-6 Lx"),
    pf(0x1021, "ConnectX-7"),
    pf(0x1023, "ConnectX-8"),
    pf(0x1025, "ConnectX-9"),
    pf(0x1027, "ConnectX-10"),
    pf(0x2101, "ConnectX-10 NVLink-C2C"),
    pf(0xa2d2, "BlueField integrated ConnectX-5"),
    vf(0xa2d3, "BlueField integrated ConnectX-5 VF"),
    pf(0xa2d6, "BlueField-2 integrated ConnectX-6 Dx"),
    pf(0xa2dc, "BlueField-3 integrated ConnectX-7"),
    pf(0xa2df, "BlueField-4 integrated ConnectX-8"),
];

/// The model of `ids`, if `mlx5_core` drives it.
pub fn model(ids: PciIds) -> Option<&'static Model> {
    if ids.vendor != MELLANOX_VENDOR {
        return None;
    }
    MODELS.iter().find(|m| m.device == ids.device)
}

/// A Mellanox function of this host, what it is, and what it is bound to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// Address, ids, bound driver and IOMMU group, as sysfs lists them.
    pub function: rdma_pmd_hal::vfio::Function,
    /// The model, if `mlx5_core` drives it (`None`: ConnectX-3 or older, or a bridge).
    pub model: Option<&'static Model>,
}

impl Found {
    /// Whether [`open`] can take it as it is: an mlx5 function bound to vfio-pci.
    pub fn ready(&self) -> bool {
        self.model.is_some() && self.function.driver.as_deref() == Some("vfio-pci")
    }
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fun = &self.function;
        write!(f, "{} {:04x}:{:04x} ", fun.addr, fun.ids.vendor, fun.ids.device)?;
        match self.model {
            Some(m) => write!(f, "{}", m.name)?,
            None => write!(f, "(not an mlx5 function)")?,
        }
        match &fun.driver {
            Some(d) => write!(f, ", driver {d}")?,
            None => write!(f, ", no driver")?,
        }
        match fun.iommu_group {
            Some(g) => write!(f, ", IOMMU group {g}"),
            None => write!(f, ", no IOMMU group (IOMMU off)"),
        }
    }
}

/// The Mellanox functions of this host, by address, with the model and driver binding of
/// each: the first thing to look at before binding one to vfio-pci (docs/VFIO.md).
pub fn functions() -> Result<std::vec::Vec<Found>, VfioError> {
    Ok(rdma_pmd_hal::vfio::functions(MELLANOX_VENDOR)?
        .into_iter()
        .map(|function| Found { model: model(function.ids), function })
        .collect())
}

/// The smallest BAR0 that holds the initialization segment (PRM "Initialization Segment":
/// the first 4 KiB page of BAR0).
pub const MIN_BAR0: usize = 4096;

/// Why [`open`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenError {
    /// The function is not one `mlx5_core` drives; nothing was opened.
    NotMlx5 {
        /// Its vendor id.
        vendor: u16,
        /// Its device id.
        device: u16,
    },
    /// BAR0 is smaller than the initialization segment.
    Bar0TooSmall {
        /// Its size.
        size: usize,
    },
    /// A VFIO step failed (the address, sysfs, the group, the container, the device).
    Vfio(VfioError),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::NotMlx5 { vendor, device } => {
                write!(f, "not an mlx5 device (vendor {vendor:#06x}, device {device:#06x})")?;
                if *vendor == MELLANOX_VENDOR {
                    write!(
                        f,
                        ": a Mellanox device mlx5_core does not drive (ConnectX-3 or older?)"
                    )?;
                }
                Ok(())
            }
            OpenError::Bar0TooSmall { size } => {
                write!(f, "BAR0 is {size:#x} bytes, smaller than the initialization segment")
            }
            OpenError::Vfio(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for OpenError {}

impl From<VfioError> for OpenError {
    fn from(e: VfioError) -> Self {
        OpenError::Vfio(e)
    }
}

/// An mlx5 function opened through VFIO: what the control path and [`crate::Mlx5`] take.
#[derive(Debug)]
pub struct Mlx5Vfio {
    // Field order is drop order: DMA memory is unmapped and BAR0 unmapped before the device
    // file closes.
    dma: VfioDma,
    bar0: VfioBar,
    device: VfioDevice,
    model: &'static Model,
}

impl Mlx5Vfio {
    /// BAR0: initialization segment, command doorbell, UAR pages.
    pub fn bar0(&self) -> &VfioBar {
        &self.bar0
    }

    /// Device-visible memory in the function's IOMMU address space.
    pub fn dma(&self) -> &VfioDma {
        &self.dma
    }

    /// The VFIO device (config space, regions, container).
    pub fn device(&self) -> &VfioDevice {
        &self.device
    }

    /// Which ConnectX this is.
    pub fn model(&self) -> &'static Model {
        self.model
    }

    /// The parts, for [`crate::Mlx5::open`] and the command interface. Drop the DMA memory
    /// and BAR before the device.
    pub fn into_parts(self) -> (VfioBar, VfioDma, VfioDevice) {
        (self.bar0, self.dma, self.device)
    }
}

/// Open the mlx5 function at `addr` (`0000:3b:00.0`), bound to vfio-pci. See the module docs.
pub fn open(addr: &str) -> Result<Mlx5Vfio, OpenError> {
    let addr: PciAddr = addr.parse()?;
    // Config-space ids as the kernel cached them: no VFIO file is opened yet.
    let ids = sysfs_ids(addr)?;
    let model = model(ids).ok_or(OpenError::NotMlx5 { vendor: ids.vendor, device: ids.device })?;
    let device = VfioDevice::open(addr)?;
    // Same answer through the device's own config region (guards against a sysfs mix-up).
    let seen = device.ids()?;
    if seen != ids {
        return Err(OpenError::NotMlx5 { vendor: seen.vendor, device: seen.device });
    }
    device.enable_dma()?;
    let bar0 = device.map_bar(0)?;
    if rdma_pmd_hal::Mmio::size(&bar0) < MIN_BAR0 {
        return Err(OpenError::Bar0TooSmall { size: rdma_pmd_hal::Mmio::size(&bar0) });
    }
    // mlx5 devices address 64 bits (the kernel driver sets a 64-bit DMA mask).
    let dma = device.dma(DmaConfig { mask: DmaMask::bits(64), pages: Pages::Auto })?;
    Ok(Mlx5Vfio { dma, bar0, device, model })
}

/// Why [`with_device`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpError {
    /// Opening the function failed (not an mlx5, VFIO).
    Open(OpenError),
    /// The HCA bring-up or teardown over the command interface failed.
    Hca(crate::control::bringup::HcaError),
    /// Opening the device context (UAR, PD) failed.
    Device(rdma_pmd::Error),
}

impl fmt::Display for UpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpError::Open(e) => write!(f, "{e}"),
            UpError::Hca(e) => write!(f, "HCA bring-up: {e}"),
            UpError::Device(e) => write!(f, "device context: {e}"),
        }
    }
}

impl std::error::Error for UpError {}

/// The device [`with_device`] hands over: resources come from firmware commands.
pub type VfioMlx5<'h, 'a> = crate::Mlx5<
    &'a rdma_pmd_hal::vfio::VfioBar,
    crate::SharedDma<&'a rdma_pmd_hal::vfio::VfioDma>,
    crate::control::fw::FwControl<'h, 'a>,
>;

/// Open the mlx5 function at `addr`, bring its HCA up over the command interface (lending
/// firmware up to `pool_pages` pages of 4 KiB), open the device context, run `f` on it, and
/// tear everything down again (every firmware page reclaimed) in one call.
///
/// Everything `f` creates (regions, queue pairs) borrows the device and is gone before the
/// teardown. `f` also gets what firmware reported at bring-up.
pub fn with_device<R>(
    addr: &str,
    pool_pages: usize,
    cfg: crate::control::bringup::HcaConfig,
    f: impl FnOnce(&VfioMlx5<'_, '_>, &crate::control::bringup::BringupReport) -> R,
) -> Result<R, UpError> {
    use crate::control::bringup::{bitmap_words, Hca, PagePool};
    let dev = open(addr).map_err(UpError::Open)?;
    let mut cfg = cfg;
    if dev.model().vf {
        // A VF does not own the host endianness register (kernel `set_hca_ctrl`).
        cfg.function = crate::control::bringup::Function::Virtual;
    }
    let clock = rdma_pmd_hal::StdClock::default();
    let mut bits = std::vec![0u64; bitmap_words(pool_pages)];
    let pool = PagePool::new(&mut bits, pool_pages);
    let mut hca = Hca::bring_up(dev.bar0(), dev.dma(), &clock, pool, cfg).map_err(UpError::Hca)?;
    let report = *hca.report();
    let out = {
        let ctl = crate::control::fw::FwControl::new(&mut hca);
        let mlx5 = crate::Mlx5::open(dev.bar0(), crate::SharedDma(dev.dma()), ctl)
            .map_err(UpError::Device);
        mlx5.map(|m| f(&m, &report))
    };
    let down = hca.teardown().map_err(UpError::Hca);
    let r = out?;
    down?;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_the_kernels() {
        let cx5 = model(PciIds { vendor: 0x15b3, device: 0x1017 }).unwrap();
        assert_eq!((cx5.name, cx5.vf), ("ConnectX-5, PCIe 3.0", false));
        assert!(model(PciIds { vendor: 0x15b3, device: 0x101e }).unwrap().vf);
        assert!(model(PciIds { vendor: 0x15b3, device: 0x1003 }).is_none(), "ConnectX-3 is mlx4");
        assert!(model(PciIds { vendor: 0x1234, device: 0x1017 }).is_none(), "vendor matters");
        let found = Found {
            function: rdma_pmd_hal::vfio::Function {
                addr: "0000:3b:00.0".parse().unwrap(),
                ids: PciIds { vendor: 0x15b3, device: 0x1017 },
                driver: Some("vfio-pci".into()),
                iommu_group: Some(12),
            },
            model: Some(cx5),
        };
        assert!(found.ready());
        assert_eq!(
            found.to_string(),
            "0000:3b:00.0 15b3:1017 ConnectX-5, PCIe 3.0, driver vfio-pci, IOMMU group 12"
        );
        let cx3 = Found {
            function: rdma_pmd_hal::vfio::Function {
                driver: Some("mlx4_core".into()),
                iommu_group: None,
                ids: PciIds { vendor: 0x15b3, device: 0x1007 },
                ..found.function.clone()
            },
            model: model(PciIds { vendor: 0x15b3, device: 0x1007 }),
        };
        assert!(!cx3.ready());
        assert!(cx3
            .to_string()
            .ends_with("(not an mlx5 function), driver mlx4_core, no IOMMU group (IOMMU off)"));
        // This host has no ConnectX: the listing is empty, not an error.
        assert!(functions().unwrap().iter().all(|f| f.function.ids.vendor == MELLANOX_VENDOR));
        assert_eq!(MODELS.len(), 25);
        let mut ids: Vec<u16> = MODELS.iter().map(|m| m.device).collect();
        ids.dedup();
        assert_eq!(ids.len(), MODELS.len(), "no duplicates");
    }

    #[test]
    fn errors_read_well() {
        let e = OpenError::NotMlx5 { vendor: 0x1234, device: 0x11e8 };
        assert_eq!(e.to_string(), "not an mlx5 device (vendor 0x1234, device 0x11e8)");
        let mlx4 = OpenError::NotMlx5 { vendor: 0x15b3, device: 0x1003 }.to_string();
        assert!(mlx4.starts_with("not an mlx5 device (vendor 0x15b3, device 0x1003): a Mellanox"));
        let bad = open("3b:00").unwrap_err().to_string();
        assert!(bad.contains("is not a PCI address"), "{bad}");
        let absent = open("ffff:ff:1f.7").unwrap_err().to_string();
        assert!(absent.starts_with("no PCI function at ffff:ff:1f.7"), "{absent}");
    }

    fn edu_addr() -> String {
        std::env::var("RDMA_PMD_VFIO_EDU")
            .expect("RDMA_PMD_VFIO_EDU must name the vfio-pci bound edu device (cargo xtask test --tier vfio)")
    }

    #[test]
    #[ignore = "needs a vfio-pci bound edu device: cargo xtask test --tier vfio"]
    fn edu_is_refused_before_the_device_is_touched() {
        let addr = edu_addr();
        let e = open(&addr).unwrap_err();
        assert_eq!(e, OpenError::NotMlx5 { vendor: 0x1234, device: 0x11e8 });
        assert_eq!(e.to_string(), "not an mlx5 device (vendor 0x1234, device 0x11e8)");
        // While another user holds the group, `open` still answers "not an mlx5 device", not
        // EBUSY: it never reached the VFIO group.
        let held = VfioDevice::open(addr.parse().unwrap()).expect("the group is free afterwards");
        assert_eq!(open(&addr).unwrap_err(), OpenError::NotMlx5 { vendor: 0x1234, device: 0x11e8 });
        drop(held);
        // The one-call form refuses it the same way, before any bring-up.
        let e = with_device(&addr, 64, Default::default(), |_, _| ()).unwrap_err();
        assert_eq!(e, UpError::Open(OpenError::NotMlx5 { vendor: 0x1234, device: 0x11e8 }));
        // And nothing was left open: the device opens again.
        let again = VfioDevice::open(addr.parse().unwrap()).expect("reopen");
        assert_eq!(again.ids().unwrap(), PciIds { vendor: 0x1234, device: 0x11e8 });
    }
}
