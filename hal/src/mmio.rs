//! MMIO regions (PCI BARs).

/// A memory-mapped device register window, such as a PCI BAR.
///
/// Offsets are bytes from the start of the window. Values are passed as the CPU stores them:
/// `write_u32(off, v)` performs one 32-bit store of `v` in native byte order. Device registers
/// that are big-endian (all of mlx5's) are written with the `_be` helpers, which convert first.
///
/// # Safety
/// For implementors:
/// * every access is exactly one load or store of the stated width at `base + off`, never
///   split, merged, elided or reordered with other accesses to this window by the compiler: a
///   volatile access on a real device's window (the device is outside the Rust memory model),
///   a relaxed atomic one ([`crate::access`]) on a window that another Rust thread serves
///   (`mem::MemBar`), so that the two cannot race;
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

/// A register window at a raw CPU address: the one place that turns [`Mmio`] calls into
/// volatile loads and stores. [`crate::baremetal::IdentityBar`] and the VFIO BAR are windows
/// with a different origin (a fixed physical address, an `mmap` of the device file).
#[derive(Debug)]
pub struct RawWindow {
    base: core::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: the window is device registers, not Rust data; every access is a volatile load or
// store, which any thread may issue. Ordering between threads is the driver's business.
unsafe impl Send for RawWindow {}
// SAFETY: as above; `&RawWindow` hands out no references into the window.
unsafe impl Sync for RawWindow {}

impl RawWindow {
    /// The `len` bytes of registers at `base`.
    ///
    /// # Safety
    /// `[base, base + len)` must be a device's register window (mapped uncached, or
    /// write-combining where BlueFlame is used), valid for volatile accesses and used by
    /// nothing else for the lifetime of this value.
    pub unsafe fn new(base: core::ptr::NonNull<u8>, len: usize) -> Self {
        RawWindow { base, len }
    }

    /// First byte of the window.
    pub fn base(&self) -> core::ptr::NonNull<u8> {
        self.base
    }

    #[inline(always)]
    fn ptr<T>(&self, off: usize) -> *mut T {
        let w = core::mem::size_of::<T>();
        check(off, w, w, self.len);
        self.base.as_ptr().wrapping_add(off).cast()
    }
}

// SAFETY: each access is one volatile load/store of the stated width at an in-range, aligned
// offset (checked by `ptr`/`check`, which panic otherwise); `write_wc64` stores eight ascending
// u64s.
unsafe impl Mmio for RawWindow {
    #[inline]
    fn size(&self) -> usize {
        self.len
    }
    #[inline]
    fn read_u32(&self, off: usize) -> u32 {
        // SAFETY: in range and aligned (checked); the constructor's caller vouched for the
        // window.
        unsafe { self.ptr::<u32>(off).read_volatile() }
    }
    #[inline]
    fn write_u32(&self, off: usize, value: u32) {
        // SAFETY: as above.
        unsafe { self.ptr::<u32>(off).write_volatile(value) }
    }
    #[inline]
    fn read_u64(&self, off: usize) -> u64 {
        // SAFETY: as above.
        unsafe { self.ptr::<u64>(off).read_volatile() }
    }
    #[inline]
    fn write_u64(&self, off: usize, value: u64) {
        // SAFETY: as above.
        unsafe { self.ptr::<u64>(off).write_volatile(value) }
    }
    #[inline]
    fn write_wc64(&self, off: usize, block: &[u64; 8]) {
        check(off, 64, 64, self.len);
        for (i, w) in block.iter().enumerate() {
            // SAFETY: inside the window (all 64 bytes checked above).
            unsafe { self.ptr::<u64>(off + 8 * i).write_volatile(*w) }
        }
    }
}

/// `unsafe impl Mmio for $ty` by forwarding every call to its [`RawWindow`] field `$win`.
macro_rules! mmio_through_window {
    ($ty:ty, $win:ident) => {
        // SAFETY: every call is forwarded unchanged to the `RawWindow`, which upholds the
        // contract.
        unsafe impl $crate::mmio::Mmio for $ty {
            #[inline(always)]
            fn size(&self) -> usize {
                self.$win.size()
            }
            #[inline(always)]
            fn read_u32(&self, off: usize) -> u32 {
                self.$win.read_u32(off)
            }
            #[inline(always)]
            fn write_u32(&self, off: usize, value: u32) {
                self.$win.write_u32(off, value)
            }
            #[inline(always)]
            fn read_u64(&self, off: usize) -> u64 {
                self.$win.read_u64(off)
            }
            #[inline(always)]
            fn write_u64(&self, off: usize, value: u64) {
                self.$win.write_u64(off, value)
            }
            #[inline(always)]
            fn write_wc64(&self, off: usize, block: &[u64; 8]) {
                self.$win.write_wc64(off, block)
            }
        }
    };
}
pub(crate) use mmio_through_window;

/// Panic unless `[off, off + width)` lies in a window of `size` bytes and `off` is aligned to
/// `align`. Shared by the implementations.
#[inline(always)]
pub(crate) fn check(off: usize, width: usize, align: usize, size: usize) {
    assert!(
        off.is_multiple_of(align) && off.checked_add(width).is_some_and(|end| end <= size),
        "MMIO access of {width} bytes at {off:#x} outside a {size:#x}-byte window or misaligned"
    );
}
