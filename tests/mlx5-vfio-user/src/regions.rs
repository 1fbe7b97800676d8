//! The function's vfio regions and how a trapped access reaches each.
//!
//! Region indexes are vfio-pci's (`VFIO_PCI_BAR0_REGION_INDEX` .. `VFIO_PCI_VGA_REGION_INDEX`
//! in `include/uapi/linux/vfio.h`): 0-5 the BARs, 6 the expansion ROM, 7 the configuration
//! space, 8 VGA. This function has BAR0 (the model), BAR2 (the MSI-X table and PBA) and the
//! configuration space; every other region reports size 0 and refuses access.
//!
//! BAR0 accesses go to the model's [`MemBar`], one register access each, as a CPU's MMIO would
//! arrive at the device:
//! - 4- and 8-byte loads and stores, naturally aligned, are the BAR's own `read_u32`/`read_u64`
//!   and `write_u32`/`write_u64` (a 64-byte BlueFlame copy arrives from QEMU as eight 8-byte
//!   stores);
//! - 1- and 2-byte loads read the aligned 32-bit word (running the model's read handler once)
//!   and return the addressed bytes: the kernel reads the health buffer's syndrome bytes so;
//! - an 8-byte store inside a BlueFlame register of a UAR page (page 1 and up, offsets
//!   `0x800..0xa00`) other than at the register's base (0x800, 0x900) lands in the BAR's
//!   memory without running the model's handler. A guest's 64-byte write-combined BlueFlame
//!   copy reaches the device as one burst; QEMU traps it and delivers eight 8-byte stores
//!   (per 64-byte block). The first, at the register's base, is the control segment's head:
//!   it runs the handler as the send doorbell, and the model reads the WQE from the send queue
//!   in guest memory, where the driver wrote it before the copy (rdma-core `post_send_db` and
//!   `mlx5_bf_copy` write the ring first). The rest of the copy would otherwise reach the
//!   model as stores of their own, which no hardware sees. Offsets as the model's `uar`
//!   module (`BF_BASE`, `BF_HALF`; `log_bf_reg_size` 9);
//! - 1- and 2-byte stores are **refused** (`EINVAL`, counted): every ConnectX register the
//!   drivers write is a whole big-endian 32- or 64-bit word (`iowrite32be`, `mmio_write64_be`),
//!   and a narrower store would run the firmware's handler on a partial register, which the
//!   model cannot represent.
//! - any other width, a misaligned access, or one past the BAR: `EINVAL`.

use rdma_pmd_hal::mem::MemBar;
use rdma_pmd_hal::Mmio;
use rdma_pmd_mlx5_model::uar::{BF_BASE, BF_HALF};
use rdma_pmd_mlx5_model::UAR_PAGE;

use crate::config::{CONFIG_SIZE, MSIX_BAR, MSIX_BAR_SIZE};
use crate::proto::{Errno, Put};

/// vfio region index of BAR0.
pub const BAR0: u32 = 0;
/// vfio region index of the configuration space.
pub const CONFIG: u32 = 7;
/// Regions a vfio-pci device reports (BAR0-5, ROM, config, VGA).
pub const NUM_REGIONS: u32 = 9;

/// `VFIO_REGION_INFO_FLAG_READ`.
pub const REGION_READ: u32 = 1 << 0;
/// `VFIO_REGION_INFO_FLAG_WRITE`.
pub const REGION_WRITE: u32 = 1 << 1;

/// Bytes of `struct vfio_region_info`.
pub const REGION_INFO_LEN: usize = 32;

/// The size of region `index` for a BAR0 of `bar0_size` bytes (0 = absent).
pub fn size(index: u32, bar0_size: u64) -> u64 {
    match index {
        BAR0 => bar0_size,
        MSIX_BAR => MSIX_BAR_SIZE as u64,
        CONFIG => CONFIG_SIZE as u64,
        _ => 0,
    }
}

/// `struct vfio_region_info` for region `index`: readable and writeable when present, never
/// mmappable (every access is trapped and sent over the socket), no capabilities. The offset
/// is vfio-pci's convention (`index << 40`); it is only meaningful for mmap.
pub fn info(index: u32, bar0_size: u64) -> Vec<u8> {
    let size = size(index, bar0_size);
    let flags = if size > 0 { REGION_READ | REGION_WRITE } else { 0 };
    let mut v = Vec::with_capacity(REGION_INFO_LEN);
    v.put_u32(REGION_INFO_LEN as u32);
    v.put_u32(flags);
    v.put_u32(index);
    v.put_u32(0); // cap_offset
    v.put_u64(size);
    v.put_u64(u64::from(index) << 40);
    v
}

/// The offset of a `len`-byte BAR0 access at `off` if it is a whole, aligned register access
/// of 1, 2, 4 or 8 bytes inside `bar`.
fn bar0_offset(bar: &MemBar, off: u64, len: usize) -> Result<usize, Errno> {
    if !matches!(len, 1 | 2 | 4 | 8) || off % len as u64 != 0 {
        return Err(Errno::EINVAL);
    }
    let off = usize::try_from(off).map_err(|_| Errno::EINVAL)?;
    match off.checked_add(len) {
        Some(end) if end <= bar.size() => Ok(off),
        _ => Err(Errno::EINVAL),
    }
}

/// A BAR0 load of `out.len()` bytes at `off` (module docs).
pub fn bar0_read(bar: &MemBar, off: u64, out: &mut [u8]) -> Result<(), Errno> {
    let off = bar0_offset(bar, off, out.len())?;
    match out.len() {
        8 => out.copy_from_slice(&bar.read_u64(off).to_ne_bytes()),
        4 => out.copy_from_slice(&bar.read_u32(off).to_ne_bytes()),
        n => {
            let word = bar.read_u32(off & !3).to_ne_bytes();
            let at = off & 3;
            out.copy_from_slice(&word[at..at + n]);
        }
    }
    Ok(())
}

/// A BAR0 store of `data` at `off` (module docs: 1- and 2-byte stores are refused).
pub fn bar0_write(bar: &MemBar, off: u64, data: &[u8]) -> Result<(), Errno> {
    let off = bar0_offset(bar, off, data.len())?;
    match data.len() {
        8 => {
            let v = u64::from_ne_bytes(data.try_into().map_err(|_| Errno::EINVAL)?);
            if is_blueflame_tail(off) {
                bar.mem().write_u64(off, v);
            } else {
                bar.write_u64(off, v);
            }
        }
        4 => bar.write_u32(off, u32::from_ne_bytes(data.try_into().map_err(|_| Errno::EINVAL)?)),
        _ => return Err(Errno::EINVAL),
    }
    Ok(())
}

/// Whether BAR0 offset `off` is inside a BlueFlame register of a UAR page but not at its
/// base: the tail of a copy that a trapping VMM split into 8-byte stores (module docs).
fn is_blueflame_tail(off: usize) -> bool {
    let (page, o) = (off / UAR_PAGE, off % UAR_PAGE);
    page != 0 && (BF_BASE..BF_BASE + 2 * BF_HALF).contains(&o) && (o - BF_BASE) % BF_HALF != 0
}

/// BAR2: plain memory behind the MSI-X table and PBA (QEMU emulates the table and PBA itself
/// and traps them; what reaches the server is kept and read back).
#[derive(Clone, Debug)]
pub struct MsixBar(Vec<u8>);

impl Default for MsixBar {
    fn default() -> Self {
        MsixBar(vec![0; MSIX_BAR_SIZE])
    }
}

impl MsixBar {
    fn range(off: u64, len: usize) -> Result<std::ops::Range<usize>, Errno> {
        let start = usize::try_from(off).map_err(|_| Errno::EINVAL)?;
        match start.checked_add(len) {
            Some(end) if end <= MSIX_BAR_SIZE => Ok(start..end),
            _ => Err(Errno::EINVAL),
        }
    }

    /// Copy out `out.len()` bytes at `off`.
    pub fn read(&self, off: u64, out: &mut [u8]) -> Result<(), Errno> {
        out.copy_from_slice(&self.0[Self::range(off, out.len())?]);
        Ok(())
    }

    /// Store `data` at `off`.
    pub fn write(&mut self, off: u64, data: &[u8]) -> Result<(), Errno> {
        let r = Self::range(off, data.len())?;
        self.0[r].copy_from_slice(data);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar0_widths_alignment_and_bounds() {
        let bar = MemBar::new(2 * 4096);
        bar0_write(&bar, 0x10, &0x1122_3344_5566_7788u64.to_ne_bytes()).unwrap();
        let mut b8 = [0u8; 8];
        bar0_read(&bar, 0x10, &mut b8).unwrap();
        assert_eq!(u64::from_ne_bytes(b8), 0x1122_3344_5566_7788);
        let mut b1 = [0u8; 1];
        bar0_read(&bar, 0x13, &mut b1).unwrap();
        assert_eq!(b1[0], 0x55u8, "byte 3 of the little-endian word");
        let mut b2 = [0u8; 2];
        bar0_read(&bar, 0x16, &mut b2).unwrap();
        assert_eq!(u16::from_ne_bytes(b2), 0x1122, "the top half of the high word");
        assert_eq!(bar0_write(&bar, 0x10, &[1]), Err(Errno::EINVAL));
        assert_eq!(bar0_write(&bar, 0x10, &[1, 2]), Err(Errno::EINVAL));
        assert_eq!(bar0_read(&bar, 0x12, &mut [0u8; 4]), Err(Errno::EINVAL));
        assert_eq!(bar0_read(&bar, 0x10, &mut [0u8; 3]), Err(Errno::EINVAL));
        assert_eq!(bar0_read(&bar, 0x10, &mut [0u8; 16]), Err(Errno::EINVAL));
        assert_eq!(bar0_read(&bar, 2 * 4096 - 4, &mut [0u8; 8]), Err(Errno::EINVAL));
        assert_eq!(bar0_write(&bar, 2 * 4096, &[0u8; 4]), Err(Errno::EINVAL));
        assert_eq!(bar0_read(&bar, u64::MAX - 7, &mut [0u8; 8]), Err(Errno::EINVAL));
    }
}
