//! Device-visible (DMA) memory.

use core::ptr::NonNull;

use crate::error::HalError;
use rdma_pmd::BusAddr;

/// A block of device-visible memory: its CPU address, its bus address, its length.
///
/// The device may read or write the block at any time after its bus address was handed to it,
/// so the CPU side never holds a Rust reference into it: every access is a volatile load or
/// store through the methods below, ordered against the device with [`crate::barrier`].
/// Out-of-range accesses panic.
#[derive(Debug)]
pub struct DmaBuf {
    cpu: NonNull<u8>,
    bus: BusAddr,
    len: usize,
}

// SAFETY: a DmaBuf is an exclusive handle to memory that is not thread-local; moving it to
// another thread moves that exclusivity with it.
unsafe impl Send for DmaBuf {}

impl DmaBuf {
    /// Assemble a handle.
    ///
    /// # Safety
    /// `cpu` must point to `len` bytes, valid for reads and writes until the handle is given back
    /// to the [`Dma`] that made it, and the device must reach exactly those bytes at `bus`.
    pub unsafe fn from_raw_parts(cpu: NonNull<u8>, bus: BusAddr, len: usize) -> Self {
        DmaBuf { cpu, bus, len }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the block is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address the device uses.
    pub fn bus(&self) -> BusAddr {
        self.bus
    }

    /// The address the CPU uses. Raw: dereference only with volatile accesses.
    pub fn cpu(&self) -> NonNull<u8> {
        self.cpu
    }

    #[inline(always)]
    fn at<T>(&self, off: usize) -> *mut T {
        let size = core::mem::size_of::<T>();
        assert!(
            off.is_multiple_of(size) && off.checked_add(size).is_some_and(|e| e <= self.len),
            "DMA access of {size} bytes at {off:#x} outside a {:#x}-byte block",
            self.len
        );
        self.cpu.as_ptr().wrapping_add(off).cast()
    }

    /// One volatile 32-bit load (native order).
    #[inline]
    pub fn read_u32(&self, off: usize) -> u32 {
        // SAFETY: in bounds and aligned (checked by `at`); the block is valid for reads.
        unsafe { self.at::<u32>(off).read_volatile() }
    }

    /// One volatile 32-bit store (native order).
    #[inline]
    pub fn write_u32(&self, off: usize, v: u32) {
        // SAFETY: in bounds and aligned (checked by `at`); the block is valid for writes.
        unsafe { self.at::<u32>(off).write_volatile(v) }
    }

    /// One volatile 64-bit load (native order).
    #[inline]
    pub fn read_u64(&self, off: usize) -> u64 {
        // SAFETY: in bounds and aligned (checked by `at`); the block is valid for reads.
        unsafe { self.at::<u64>(off).read_volatile() }
    }

    /// One volatile 64-bit store (native order).
    #[inline]
    pub fn write_u64(&self, off: usize, v: u64) {
        // SAFETY: in bounds and aligned (checked by `at`); the block is valid for writes.
        unsafe { self.at::<u64>(off).write_volatile(v) }
    }

    /// Copy bytes out of the block, starting at `off`.
    pub fn read_bytes(&self, off: usize, out: &mut [u8]) {
        let end = off.checked_add(out.len()).expect("DMA range overflows");
        assert!(end <= self.len, "DMA read [{off:#x}, {end:#x}) outside {:#x} bytes", self.len);
        for (i, b) in out.iter_mut().enumerate() {
            // SAFETY: in bounds (checked above); the block is valid for reads.
            *b = unsafe { self.cpu.as_ptr().add(off + i).read_volatile() };
        }
    }

    /// Copy bytes into the block, starting at `off`.
    pub fn write_bytes(&self, off: usize, data: &[u8]) {
        let end = off.checked_add(data.len()).expect("DMA range overflows");
        assert!(end <= self.len, "DMA write [{off:#x}, {end:#x}) outside {:#x} bytes", self.len);
        for (i, b) in data.iter().enumerate() {
            // SAFETY: in bounds (checked above); the block is valid for writes.
            unsafe { self.cpu.as_ptr().add(off + i).write_volatile(*b) };
        }
    }

    /// Fill the whole block with `byte`.
    pub fn fill(&self, byte: u8) {
        for i in 0..self.len {
            // SAFETY: i < len; the block is valid for writes.
            unsafe { self.cpu.as_ptr().add(i).write_volatile(byte) };
        }
    }
}

/// An allocator of device-visible memory.
///
/// # Safety
/// For implementors:
/// * [`alloc`](Dma::alloc) returns a block of at least `len` zeroed bytes, aligned to `align`
///   both at its CPU address and at its bus address, that no one else uses, and that the device
///   reaches at the returned bus address (mapped in the IOMMU, if there is one) until it is
///   given back with [`free`](Dma::free);
/// * bus addresses respect the device's DMA mask.
pub unsafe trait Dma {
    /// A zeroed block of `len` bytes aligned to `align` (a power of two).
    fn alloc(&self, len: usize, align: usize) -> Result<DmaBuf, HalError>;

    /// Give a block back.
    ///
    /// # Safety
    /// The device must no longer access the block (its queue destroyed, its key revoked).
    unsafe fn free(&self, buf: DmaBuf);

    /// The page size the device's address translation uses (4 KiB unless told otherwise).
    fn page_size(&self) -> usize {
        4096
    }
}
