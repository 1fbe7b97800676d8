//! Parsing PCI addresses, the sysfs files VFIO set-up reads, and the few config-space registers this
//! backend touches (PCI Local Bus Specification 3.0, section 6.2; the kernel's
//! `include/uapi/linux/pci_regs.h`).

use core::str::FromStr;

use super::addr::PciAddr;
use super::error::{GroupPeers, Peer, SysPath, VfioError};

/// `PCI_VENDOR_ID`: 16-bit vendor id at config offset 0x00 (little-endian).
pub const PCI_VENDOR_ID: u64 = 0x00;
/// `PCI_DEVICE_ID`: 16-bit device id at config offset 0x02.
pub const PCI_DEVICE_ID: u64 = 0x02;
/// `PCI_COMMAND`: 16-bit command register at config offset 0x04.
pub const PCI_COMMAND: u64 = 0x04;

bitflags::bitflags! {
    /// Bits of the command register this backend sets.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Command: u16 {
        /// `PCI_COMMAND_MEMORY`: the device answers accesses to its memory BARs.
        const MEMORY = 1 << 1;
        /// `PCI_COMMAND_MASTER`: the device may issue DMA (bus mastering).
        const MASTER = 1 << 2;
        /// Bits not interpreted here, kept as read.
        const _ = !0;
    }
}

impl FromStr for PciAddr {
    type Err = VfioError;

    /// `DDDD:BB:DD.F` or `BB:DD.F` (domain 0), hexadecimal.
    fn from_str(s: &str) -> Result<Self, VfioError> {
        let bad = || VfioError::BadPciAddr(SysPath::new(s));
        let (rest, func) = s.rsplit_once('.').ok_or_else(bad)?;
        let parts: Vec<&str> = rest.split(':').collect();
        let (domain, bus, dev) = match parts.as_slice() {
            [d, b, v] if d.len() <= 4 => (*d, *b, *v),
            [b, v] => ("0", *b, *v),
            _ => return Err(bad()),
        };
        let hex = |t: &str, max: u32| {
            if t.is_empty() || t.len() > 4 || !t.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(bad());
            }
            u32::from_str_radix(t, 16).ok().filter(|v| *v <= max).ok_or_else(bad)
        };
        Ok(PciAddr {
            domain: hex(domain, 0xffff)? as u16,
            bus: hex(bus, 0xff)? as u8,
            device: hex(dev, 0x1f)? as u8,
            function: hex(func, 7)? as u8,
        })
    }
}

/// Vendor and device id of a PCI function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PciIds {
    /// Vendor id (`0x15b3` for Mellanox/NVIDIA).
    pub vendor: u16,
    /// Device id.
    pub device: u16,
}

/// The sysfs directory of a PCI function.
pub fn sysfs_dir(addr: PciAddr) -> String {
    format!("/sys/bus/pci/devices/{addr}")
}

/// [`VfioError::NoDevice`] if no function has address `addr`.
fn exists(addr: PciAddr) -> Result<(), VfioError> {
    if std::path::Path::new(&sysfs_dir(addr)).exists() {
        Ok(())
    } else {
        Err(VfioError::NoDevice { dev: addr })
    }
}

fn read_trimmed(path: &str) -> Result<String, VfioError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|e| VfioError::io("read", path, &e))
}

fn parse_hex_u16(path: &str) -> Result<u16, VfioError> {
    let text = read_trimmed(path)?;
    let digits = text.strip_prefix("0x").unwrap_or(&text);
    u16::from_str_radix(digits, 16).map_err(|_| VfioError::BadSysfs { path: SysPath::new(path) })
}

/// Vendor and device id as sysfs reports them (`vendor`, `device`): the kernel's cached copy
/// of config space, read without opening the device.
pub fn sysfs_ids(addr: PciAddr) -> Result<PciIds, VfioError> {
    exists(addr)?;
    let dir = sysfs_dir(addr);
    Ok(PciIds {
        vendor: parse_hex_u16(&format!("{dir}/vendor"))?,
        device: parse_hex_u16(&format!("{dir}/device"))?,
    })
}

/// The IOMMU group of a PCI function: the number at the end of the `iommu_group` link.
pub fn iommu_group(addr: PciAddr) -> Result<u32, VfioError> {
    exists(addr)?;
    let link = format!("{}/iommu_group", sysfs_dir(addr));
    let target = std::fs::read_link(&link).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => VfioError::NoIommuGroup { dev: addr },
        _ => VfioError::io("readlink", &link, &e),
    })?;
    target
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok())
        .ok_or(VfioError::BadSysfs { path: SysPath::new(&link) })
}

/// Devices of IOMMU group `group` other than `me`, with their drivers: the first four (bound
/// ones first, then by address), and the count.
pub fn group_peers(group: u32, me: PciAddr) -> Result<(GroupPeers, usize), VfioError> {
    let dir = format!("/sys/kernel/iommu_groups/{group}/devices");
    let mut all: Vec<Peer> = std::fs::read_dir(&dir)
        .map_err(|e| VfioError::io("readdir", &dir, &e))?
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .filter(|a| *a != me)
        .map(|a| Peer::new(a, bound_driver(a).as_deref()))
        .collect();
    all.sort_by_key(|p| (p.driver().is_none(), p.addr));
    let mut peers: GroupPeers = [None; 4];
    for (slot, p) in peers.iter_mut().zip(&all) {
        *slot = Some(*p);
    }
    Ok((peers, all.len()))
}

/// A PCI function of this host as sysfs lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    /// Its address.
    pub addr: PciAddr,
    /// Vendor and device id.
    pub ids: PciIds,
    /// The driver it is bound to, if any.
    pub driver: Option<String>,
    /// Its IOMMU group, if it has one.
    pub iommu_group: Option<u32>,
}

/// The PCI functions of this host with vendor id `vendor`, by address: what to bind, and
/// what it is bound to now. Functions whose sysfs files cannot be read are left out.
pub fn functions(vendor: u16) -> Result<Vec<Function>, VfioError> {
    let dir = "/sys/bus/pci/devices";
    let mut found: Vec<Function> = std::fs::read_dir(dir)
        .map_err(|e| VfioError::io("readdir", dir, &e))?
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<PciAddr>().ok()))
        .filter_map(|addr| {
            let ids = sysfs_ids(addr).ok().filter(|i| i.vendor == vendor)?;
            Some(Function {
                addr,
                ids,
                driver: bound_driver(addr),
                iommu_group: iommu_group(addr).ok(),
            })
        })
        .collect();
    found.sort_by_key(|f| f.addr);
    Ok(found)
}

/// The driver a PCI function is bound to, if any (`driver` link).
pub fn bound_driver(addr: PciAddr) -> Option<String> {
    let link = format!("{}/driver", sysfs_dir(addr));
    std::fs::read_link(link).ok()?.file_name()?.to_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_addresses() {
        let a: PciAddr = "0000:3b:00.0".parse().unwrap();
        assert_eq!(a, PciAddr { domain: 0, bus: 0x3b, device: 0, function: 0 });
        assert_eq!(a.to_string(), "0000:3b:00.0");
        let b: PciAddr = "af:1f.7".parse().unwrap();
        assert_eq!(b.to_string(), "0000:af:1f.7");
        assert_eq!("10000:00:00.0".parse::<PciAddr>().ok(), None);
        for bad in
            ["", "3b:00", "0000:3b:20.0", "0000:3b:00.8", "00:00:00:00.0", "zz:00.0", "0:+1:00.0"]
        {
            assert!(bad.parse::<PciAddr>().is_err(), "{bad:?} parsed");
        }
        let e = "3b:00".parse::<PciAddr>().unwrap_err().to_string();
        assert!(e.contains("\"3b:00\" is not a PCI address"), "{e}");
    }

    #[test]
    fn command_bits_are_the_spec_ones() {
        // pci_regs.h: PCI_COMMAND_MEMORY 0x2, PCI_COMMAND_MASTER 0x4.
        assert_eq!(Command::MEMORY.bits(), 0x2);
        assert_eq!(Command::MASTER.bits(), 0x4);
        assert_eq!((Command::from_bits_retain(0x0401) | Command::MASTER).bits(), 0x0405);
    }

    #[test]
    fn a_missing_device_is_named_as_such() {
        let a: PciAddr = "ffff:ff:1f.7".parse().unwrap();
        assert_eq!(iommu_group(a).unwrap_err(), VfioError::NoDevice { dev: a });
        assert_eq!(sysfs_ids(a).unwrap_err(), VfioError::NoDevice { dev: a });
    }

    #[test]
    fn listing_finds_every_function_of_the_vendor_asked_for() {
        // Whatever this host has: take the first function sysfs lists, then its vendor's list
        // holds it, sorted, and nothing of another vendor.
        let first = std::fs::read_dir("/sys/bus/pci/devices")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<PciAddr>().ok()))
            .min();
        let Some(first) = first else {
            assert!(functions(0x15b3).map(|l| l.is_empty()).unwrap_or(true));
            return;
        };
        let vendor = sysfs_ids(first).unwrap().vendor;
        let all = functions(vendor).unwrap();
        assert!(all.iter().any(|f| f.addr == first), "{first} missing from {all:?}");
        assert!(all.iter().all(|f| f.ids.vendor == vendor));
        assert!(all.windows(2).all(|w| w[0].addr < w[1].addr));
    }
}
