//! The PCI configuration space of the function (vfio region 7): a ConnectX-5 physical function.
//!
//! Type 0 header (PCI Local Bus 3.0 §6.1; offsets as `include/uapi/linux/pci_regs.h`):
//!
//! | offset | register | value |
//! |---|---|---|
//! | 0x00 | vendor, device | 0x15b3 (Mellanox), 0x1017 (ConnectX-5 PF: the kernel's `mlx5_core_pci_table` in `drivers/net/ethernet/mellanox/mlx5/core/main.c`) |
//! | 0x04 | command, status | command: I/O, memory, bus master, parity, SERR, INTx disable writable; status: capability list |
//! | 0x08 | revision, class | 0, class 0x020000 (Ethernet controller) |
//! | 0x10 | BAR0/1 | 64-bit prefetchable memory, `uar_pages * 4096` bytes: the model's BAR |
//! | 0x18 | BAR2 | 32-bit memory, 4096 bytes: the MSI-X table (0x000) and PBA (0x800) |
//! | 0x2c | subsystem | 0x15b3, 0x0008 (any value: the kernel does not look at it) |
//! | 0x34 | capabilities | 0x40 |
//! | 0x3c | interrupt line, pin | line writable; pin 0 (no INTx, as the IRQ info says) |
//! | 0x40 | MSI-X capability | [`MSIX_VECTORS`] vectors, table in BAR2 at 0, PBA in BAR2 at 0x800 (PCI 3.0 §6.8.2) |
//!
//! The capability list is the MSI-X capability alone (its next pointer is 0). No PCI Express
//! capability: Linux's mlx5_core only logs its absence (`../shared/notes/vfio-user.md`).
//!
//! Writes keep the writable bits of each byte ([`ConfigSpace`]'s write mask) and leave the rest:
//! a BAR takes its address bits only, so writing all ones reads back the size mask as on real
//! hardware; the status register's error bits are never set, so its write-one-to-clear bits
//! are read-only zeros here.

use crate::proto::Errno;

/// Bytes of the configuration space (conventional PCI: no extended space).
pub const CONFIG_SIZE: usize = 256;
/// MSI-X vectors of the function.
pub const MSIX_VECTORS: u16 = 8;
/// The BAR that holds the MSI-X table and PBA.
pub const MSIX_BAR: u32 = 2;
/// Size of that BAR.
pub const MSIX_BAR_SIZE: usize = 4096;
/// Offset of the MSI-X table in it.
pub const MSIX_TABLE_OFFSET: u32 = 0;
/// Offset of the pending bit array in it.
pub const MSIX_PBA_OFFSET: u32 = 0x800;
/// PCI vendor ID: Mellanox.
pub const VENDOR_ID: u16 = 0x15b3;
/// PCI device ID: ConnectX-5 (physical function).
pub const DEVICE_ID: u16 = 0x1017;
/// Class code: network controller, Ethernet.
pub const CLASS_CODE: u32 = 0x02_00_00;
/// Subsystem device ID.
pub const SUBSYSTEM_ID: u16 = 0x0008;
/// Where the MSI-X capability sits.
pub const MSIX_CAP: usize = 0x40;
/// Capability ID of MSI-X.
pub const CAP_ID_MSIX: u8 = 0x11;

/// The configuration space: its bytes, and per byte the bits a write may change.
#[derive(Clone, Debug)]
pub struct ConfigSpace {
    bytes: [u8; CONFIG_SIZE],
    wmask: [u8; CONFIG_SIZE],
}

impl ConfigSpace {
    /// The power-on configuration space of a function whose BAR0 is `bar0_size` bytes (a power
    /// of two, at least 4096).
    pub fn new(bar0_size: u64) -> ConfigSpace {
        let mut c = ConfigSpace { bytes: [0; CONFIG_SIZE], wmask: [0; CONFIG_SIZE] };
        c.set16(0x00, VENDOR_ID);
        c.set16(0x02, DEVICE_ID);
        // Command: I/O space (0), memory space (1), bus master (2), parity (6), SERR (8), INTx
        // disable (10).
        c.mask16(0x04, 0x0547);
        // Status: capability list (4).
        c.set16(0x06, 1 << 4);
        c.set32(0x08, CLASS_CODE << 8);
        // Cache line size.
        c.wmask[0x0c] = 0xff;
        // BAR0: memory (bit 0 = 0), 64-bit (bits 2:1 = 2), prefetchable (bit 3).
        c.set32(0x10, 0b1100);
        c.mask32(0x10, !(bar0_size as u32).wrapping_sub(1) & !0xf);
        // BAR1: the upper half of BAR0's address.
        c.mask32(0x14, (!(bar0_size.wrapping_sub(1)) >> 32) as u32);
        // BAR2: 32-bit memory, not prefetchable.
        c.mask32(0x18, !(MSIX_BAR_SIZE as u32 - 1));
        c.set16(0x2c, VENDOR_ID);
        c.set16(0x2e, SUBSYSTEM_ID);
        c.bytes[0x34] = MSIX_CAP as u8;
        c.wmask[0x3c] = 0xff;
        // MSI-X: ID, next 0, message control (table size - 1 in bits 10:0; function mask (14)
        // and enable (15) writable), table offset/BIR, PBA offset/BIR.
        c.bytes[MSIX_CAP] = CAP_ID_MSIX;
        c.set16(MSIX_CAP + 2, MSIX_VECTORS - 1);
        c.mask16(MSIX_CAP + 2, 0xc000);
        c.set32(MSIX_CAP + 4, MSIX_TABLE_OFFSET | MSIX_BAR);
        c.set32(MSIX_CAP + 8, MSIX_PBA_OFFSET | MSIX_BAR);
        c
    }

    fn set16(&mut self, off: usize, v: u16) {
        self.bytes[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }
    fn set32(&mut self, off: usize, v: u32) {
        self.bytes[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }
    fn mask16(&mut self, off: usize, m: u16) {
        self.wmask[off..off + 2].copy_from_slice(&m.to_le_bytes());
    }
    fn mask32(&mut self, off: usize, m: u32) {
        self.wmask[off..off + 4].copy_from_slice(&m.to_le_bytes());
    }

    /// Copy `out.len()` bytes from `off`. Any width and alignment inside the space.
    pub fn read(&self, off: u64, out: &mut [u8]) -> Result<(), Errno> {
        let r = range(off, out.len())?;
        out.copy_from_slice(&self.bytes[r]);
        Ok(())
    }

    /// Write `data` at `off`: each byte keeps its read-only bits and takes its writable ones.
    pub fn write(&mut self, off: u64, data: &[u8]) -> Result<(), Errno> {
        let r = range(off, data.len())?;
        for (i, &d) in r.zip(data) {
            let m = self.wmask[i];
            self.bytes[i] = (self.bytes[i] & !m) | (d & m);
        }
        Ok(())
    }

    /// The 16-bit register at `off` (little-endian, as PCI).
    pub fn read16(&self, off: usize) -> u16 {
        u16::from_le_bytes([self.bytes[off], self.bytes[off + 1]])
    }

    /// The 32-bit register at `off`.
    pub fn read32(&self, off: usize) -> u32 {
        u32::from_le_bytes(self.bytes[off..off + 4].try_into().unwrap_or([0; 4]))
    }
}

fn range(off: u64, len: usize) -> Result<std::ops::Range<usize>, Errno> {
    let start = usize::try_from(off).map_err(|_| Errno::EINVAL)?;
    let end = start.checked_add(len).ok_or(Errno::EINVAL)?;
    if end > CONFIG_SIZE {
        return Err(Errno::EINVAL);
    }
    Ok(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_class_and_capability_list() {
        let c = ConfigSpace::new(64 * 4096);
        assert_eq!(c.read16(0x00), 0x15b3);
        assert_eq!(c.read16(0x02), 0x1017);
        assert_eq!(c.read32(0x08) >> 8, 0x020000);
        assert_eq!(c.read16(0x06) & (1 << 4), 1 << 4);
        // Walk the capability list: MSI-X, then the end.
        let mut p = c.bytes[0x34] as usize;
        let mut seen = vec![];
        while p != 0 {
            assert!(p >= 0x40 && p % 4 == 0 && p < CONFIG_SIZE, "pointer {p:#x}");
            seen.push(c.bytes[p]);
            p = c.bytes[p + 1] as usize;
            assert!(seen.len() < 48, "loop in the capability list");
        }
        assert_eq!(seen, [CAP_ID_MSIX]);
        assert_eq!(c.read16(MSIX_CAP + 2) & 0x7ff, MSIX_VECTORS - 1);
        assert_eq!(c.read32(MSIX_CAP + 4), 2);
        assert_eq!(c.read32(MSIX_CAP + 8), 0x802);
    }

    #[test]
    fn bars_size_like_hardware_and_read_only_bits_stay() {
        let mut c = ConfigSpace::new(64 * 4096);
        for off in [0x10u64, 0x14, 0x18, 0x1c, 0x20] {
            c.write(off, &[0xff; 4]).unwrap();
        }
        assert_eq!(c.read32(0x10), 0xfffc_000c, "256 KiB, 64-bit prefetchable");
        assert_eq!(c.read32(0x14), 0xffff_ffff);
        assert_eq!(c.read32(0x18), 0xffff_f000, "4 KiB, 32-bit");
        assert_eq!(c.read32(0x1c), 0, "no BAR3");
        c.write(0x00, &[0; 4]).unwrap();
        assert_eq!(c.read16(0x00), 0x15b3, "IDs are read-only");
        c.write(0x04, &0xffff_ffffu32.to_le_bytes()).unwrap();
        assert_eq!(c.read16(0x04), 0x0547);
        assert_eq!(c.read16(0x06), 1 << 4, "status unchanged");
        c.write(MSIX_CAP as u64 + 2, &0xffffu16.to_le_bytes()).unwrap();
        assert_eq!(c.read16(MSIX_CAP + 2), 0xc000 | (MSIX_VECTORS - 1));
        assert_eq!(c.write(255, &[0, 0]), Err(Errno::EINVAL));
        assert_eq!(c.read(u64::MAX, &mut [0]), Err(Errno::EINVAL));
    }
}
