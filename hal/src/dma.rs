//! Device-visible (DMA) memory.

use core::ptr::NonNull;

use crate::access;
use crate::error::HalError;
use rdma_pmd::BusAddr;

/// A block of device-visible memory: its CPU address, its bus address, its length.
///
/// The device may read or write the block at any time after its bus address was handed to it,
/// so the CPU side never holds a Rust reference into it: every access is a relaxed atomic load
/// or store through the methods below (which use [`crate::access`]), ordered against the
/// device with [`crate::barrier`]. Out-of-range accesses panic.
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

    /// The address the CPU uses. Raw: dereference only through [`crate::access`].
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

    /// One relaxed atomic 32-bit load (native order).
    #[inline]
    pub fn read_u32(&self, off: usize) -> u32 {
        // SAFETY: in bounds and aligned (checked by `at`); the block is valid for reads, and
        // every access to it, ours and the device's, is atomic (`crate::access`). Ordering is
        // the caller's, with `crate::barrier`.
        unsafe { access::load_u32(self.at::<u32>(off)) }
    }

    /// One relaxed atomic 32-bit store (native order).
    #[inline]
    pub fn write_u32(&self, off: usize, v: u32) {
        // SAFETY: as in `read_u32`, for writes.
        unsafe { access::store_u32(self.at::<u32>(off), v) }
    }

    /// One relaxed atomic 64-bit load (native order).
    #[inline]
    pub fn read_u64(&self, off: usize) -> u64 {
        // SAFETY: as in `read_u32`.
        unsafe { access::load_u64(self.at::<u64>(off)) }
    }

    /// `K` relaxed atomic 64-bit loads (native order) of consecutive words from `off`, in
    /// ascending order, with one bounds check for all of them.
    #[inline]
    pub fn read_u64s<const K: usize>(&self, off: usize) -> [u64; K] {
        assert!(
            off.is_multiple_of(8) && off.checked_add(8 * K).is_some_and(|e| e <= self.len),
            "DMA access of {K} words at {off:#x} outside a {:#x}-byte block",
            self.len
        );
        let p = self.cpu.as_ptr().wrapping_add(off).cast::<u64>();
        // SAFETY: the `K` words from `off` are in bounds and aligned (checked above); the block
        // is valid for reads and every access to it is atomic, as in `read_u32`.
        core::array::from_fn(|k| unsafe { access::load_u64(p.add(k)) })
    }

    /// One relaxed atomic 64-bit store (native order).
    #[inline]
    pub fn write_u64(&self, off: usize, v: u64) {
        // SAFETY: as in `read_u32`, for writes.
        unsafe { access::store_u64(self.at::<u64>(off), v) }
    }

    /// Copy bytes out of the block, starting at `off`, with relaxed atomic loads split as
    /// [`crate::access`] describes (so a 1-byte read is one byte load, an aligned 4-byte read
    /// one 32-bit load).
    pub fn read_bytes(&self, off: usize, out: &mut [u8]) {
        let end = off.checked_add(out.len()).expect("DMA range overflows");
        assert!(end <= self.len, "DMA read [{off:#x}, {end:#x}) outside {:#x} bytes", self.len);
        // SAFETY: in bounds (checked above); the block is valid for reads and only ever
        // accessed atomically; `out` is ordinary memory.
        unsafe { access::load_bytes(self.cpu.as_ptr().add(off), out) }
    }

    /// Copy bytes into the block, starting at `off`, with relaxed atomic stores split as
    /// [`crate::access`] describes.
    pub fn write_bytes(&self, off: usize, data: &[u8]) {
        let end = off.checked_add(data.len()).expect("DMA range overflows");
        assert!(end <= self.len, "DMA write [{off:#x}, {end:#x}) outside {:#x} bytes", self.len);
        // SAFETY: in bounds (checked above); the block is valid for writes and only ever
        // accessed atomically; `data` is ordinary memory.
        unsafe { access::store_bytes(self.cpu.as_ptr().add(off), data) }
    }

    /// Fill the whole block with `byte` (relaxed atomic stores).
    pub fn fill(&self, byte: u8) {
        // SAFETY: the whole block, valid for writes, only ever accessed atomically.
        unsafe { access::fill_bytes(self.cpu.as_ptr(), self.len, byte) }
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
