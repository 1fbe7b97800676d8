//! MMIO regions (PCI BARs).

/// A memory-mapped device register window, such as a PCI BAR.
///
/// Offsets are bytes from the start of the window. Values are passed as the CPU stores them:
/// `write_u32(off, v)` performs one 32-bit store of `v` in native byte order. Device registers
/// that are big-endian (all of mlx5's) are written with the `_be` helpers, which convert first.
///
/// # Safety
/// For implementors:
/// * every access is exactly one volatile load or store of the stated width at `base + off`,
///   never split, merged, elided or reordered with other accesses to this window by the
///   compiler;
/// * [`write_u64`](Mmio::write_u64) is one 64-bit store (the mlx5 doorbell relies on the device
///   seeing both halves together);
/// * [`write_wc64`](Mmio::write_wc64) stores the 64 bytes in ascending order as whole 64-bit
///   stores, so that a write-combining mapping can emit them as one burst;
/// * an offset that is out of range or not aligned to the width panics instead of touching
///   memory outside the window.
///
/// Callers need no `unsafe`: the window is exclusively the device's, and no Rust reference into
/// it is ever formed.
pub unsafe trait Mmio {
    /// Size of the window in bytes.
    fn size(&self) -> usize;
    /// One 32-bit load.
    fn read_u32(&self, off: usize) -> u32;
    /// One 32-bit store.
    fn write_u32(&self, off: usize, value: u32);
    /// One 64-bit load.
    fn read_u64(&self, off: usize) -> u64;
    /// One 64-bit store.
    fn write_u64(&self, off: usize, value: u64);
    /// Copy one 64-byte block (BlueFlame chunk) with eight ascending 64-bit stores.
    /// `off` must be 64-byte aligned.
    fn write_wc64(&self, off: usize, block: &[u64; 8]);

    /// Read a big-endian 32-bit register.
    #[inline]
    fn read_be32(&self, off: usize) -> u32 {
        u32::from_be(self.read_u32(off))
    }
    /// Write a big-endian 32-bit register.
    #[inline]
    fn write_be32(&self, off: usize, value: u32) {
        self.write_u32(off, value.to_be())
    }
    /// Write a 64-bit register whose bytes in memory order are `bytes`.
    #[inline]
    fn write_bytes8(&self, off: usize, bytes: [u8; 8]) {
        self.write_u64(off, u64::from_ne_bytes(bytes))
    }
}

// SAFETY: every call is forwarded unchanged to the window behind the reference, which upholds
// the contract itself.
unsafe impl<M: Mmio + ?Sized> Mmio for &M {
    #[inline(always)]
    fn size(&self) -> usize {
        (**self).size()
    }
    #[inline(always)]
    fn read_u32(&self, off: usize) -> u32 {
        (**self).read_u32(off)
    }
    #[inline(always)]
    fn write_u32(&self, off: usize, value: u32) {
        (**self).write_u32(off, value)
    }
    #[inline(always)]
    fn read_u64(&self, off: usize) -> u64 {
        (**self).read_u64(off)
    }
    #[inline(always)]
    fn write_u64(&self, off: usize, value: u64) {
        (**self).write_u64(off, value)
    }
    #[inline(always)]
    fn write_wc64(&self, off: usize, block: &[u64; 8]) {
        (**self).write_wc64(off, block)
    }
}

/// Panic unless `[off, off + width)` lies in a window of `size` bytes and `off` is aligned to
/// `align`. Shared by the implementations.
#[inline(always)]
pub(crate) fn check(off: usize, width: usize, align: usize, size: usize) {
    assert!(
        off.is_multiple_of(align) && off.checked_add(width).is_some_and(|end| end <= size),
        "MMIO access of {width} bytes at {off:#x} outside a {size:#x}-byte window or misaligned"
    );
}
