//! The address of a PCI function: the value every other part of the VFIO backend names a
//! device by (its errors included), so it depends on nothing here. Parsing one, which can
//! fail with a [`VfioError`](super::VfioError), is in `pci.rs`.

use core::fmt;

/// A PCI function address, `domain:bus:device.function` (`0000:3b:00.0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddr {
    /// PCI segment (domain).
    pub domain: u16,
    /// Bus number.
    pub bus: u8,
    /// Device number (0..32).
    pub device: u8,
    /// Function number (0..8).
    pub function: u8,
}

impl fmt::Display for PciAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}:{:02x}:{:02x}.{:x}", self.domain, self.bus, self.device, self.function)
    }
}
