//! In-memory implementations for tests and the device model (std).
//!
//! * [`MemBar`]: a BAR backed by ordinary memory. A [`BarHandler`] (the device model) is told
//!   after every store and before every load, so it can react to doorbells and keep registers
//!   current, the way hardware would.
//! * [`HeapDma`]: DMA memory from the heap with bus addresses deliberately different from CPU
//!   addresses (an IOVA window), so a driver that hands the device a CPU pointer is caught. The
//!   model reaches the memory through [`HeapDma::read`] and [`HeapDma::write`], which translate
//!   bus addresses ([`HeapDma::translate`]) as a device behind an IOMMU would.
//!
//! The model runs on its own thread, so unlike a real device it is inside the Rust memory
//! model: both windows are only ever accessed with the relaxed atomics of [`crate::access`], by
//! the driver and by the model alike, so there is no data race however the two interleave.
//! Ordering is the driver's barriers ([`crate::barrier`], which are Release/Acquire fences)
//! paired with the model's: [`HeapDma::read`] ends with an `Acquire` fence and
//! [`HeapDma::write`] starts with a `Release` fence, the device-side halves of the same
//! fence–fence synchronization.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, RwLock};

use crate::access;
use crate::dma::{Dma, DmaBuf};
use crate::error::HalError;
use crate::mmio::{check, Mmio};
use rdma_pmd::BusAddr;

/// Memory behind a [`MemBar`], shared with its handler.
#[derive(Debug)]
pub struct BarMem {
    ptr: NonNull<u64>,
    len: usize,
}

// SAFETY: the memory is heap-owned and never handed out as a reference; every access is a
// relaxed atomic load or store (`crate::access`) of an aligned 4- or 8-byte word, or of a
// byte, so threads sharing it cannot race.
unsafe impl Send for BarMem {}
// SAFETY: as above: `&BarMem` only allows atomic accesses.
unsafe impl Sync for BarMem {}

impl BarMem {
    fn new(len: usize) -> Self {
        let words = len.div_ceil(8).max(1);
        let layout = Layout::array::<u64>(words).expect("BAR size");
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) }.cast::<u64>();
        BarMem { ptr: NonNull::new(ptr).expect("out of memory for a BAR"), len: words * 8 }
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the window is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// One relaxed atomic 32-bit load.
    #[inline]
    pub fn read_u32(&self, off: usize) -> u32 {
        check(off, 4, 4, self.len);
        // SAFETY: in bounds and aligned (checked); the window is only accessed atomically.
        unsafe { access::load_u32(self.ptr.as_ptr().cast::<u8>().add(off).cast()) }
    }

    /// One relaxed atomic 32-bit store.
    #[inline]
    pub fn write_u32(&self, off: usize, v: u32) {
        check(off, 4, 4, self.len);
        // SAFETY: as in `read_u32`.
        unsafe { access::store_u32(self.ptr.as_ptr().cast::<u8>().add(off).cast(), v) }
    }

    /// One relaxed atomic 64-bit load.
    #[inline]
    pub fn read_u64(&self, off: usize) -> u64 {
        check(off, 8, 8, self.len);
        // SAFETY: as in `read_u32`.
        unsafe { access::load_u64(self.ptr.as_ptr().add(off / 8)) }
    }

    /// One relaxed atomic 64-bit store.
    #[inline]
    pub fn write_u64(&self, off: usize, v: u64) {
        check(off, 8, 8, self.len);
        // SAFETY: as in `read_u32`.
        unsafe { access::store_u64(self.ptr.as_ptr().add(off / 8), v) }
    }

    /// Eight relaxed atomic 64-bit stores in ascending order at a 64-byte aligned `off` (one
    /// bounds check for the block).
    #[inline]
    pub fn write_block(&self, off: usize, block: &[u64; 8]) {
        check(off, 64, 64, self.len);
        // SAFETY: the 64 bytes at `off` are in bounds and aligned (checked).
        let p = unsafe { self.ptr.as_ptr().add(off / 8) };
        for (i, w) in block.iter().enumerate() {
            // SAFETY: `i < 8`, inside the checked block; only accessed atomically.
            unsafe { access::store_u64(p.add(i), *w) }
        }
    }

    /// Copy bytes out (for handlers), with relaxed atomic loads split as [`crate::access`]
    /// describes: an aligned 4- or 8-byte read is one load of that width, as the driver's
    /// store to the register was.
    pub fn read_bytes(&self, off: usize, out: &mut [u8]) {
        check(off, out.len(), 1, self.len);
        // SAFETY: in bounds (checked); only accessed atomically; `out` is ordinary memory.
        unsafe { access::load_bytes(self.ptr.as_ptr().cast::<u8>().add(off), out) }
    }
}

impl Drop for BarMem {
    fn drop(&mut self) {
        let layout = Layout::array::<u64>(self.len / 8).expect("BAR size");
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr.as_ptr().cast(), layout) }
    }
}

/// What a device behind a [`MemBar`] does when the driver touches it.
pub trait BarHandler: Send + Sync {
    /// After a store of `len` bytes at `off` (4, 8, or 64 for a write-combining block).
    fn on_write(&self, mem: &BarMem, off: usize, len: usize);
    /// Before a load of `len` bytes at `off`; may update the register first.
    fn on_read(&self, _mem: &BarMem, _off: usize, _len: usize) {}
}

/// A BAR in ordinary memory, optionally watched by a [`BarHandler`].
#[derive(Clone)]
pub struct MemBar {
    mem: Arc<BarMem>,
    handler: Option<Arc<dyn BarHandler>>,
}

impl MemBar {
    /// A zeroed BAR of `len` bytes that nothing watches (stores just land in memory).
    pub fn new(len: usize) -> Self {
        MemBar { mem: Arc::new(BarMem::new(len)), handler: None }
    }

    /// A zeroed BAR of `len` bytes whose accesses `handler` sees.
    pub fn with_handler(len: usize, handler: Arc<dyn BarHandler>) -> Self {
        MemBar { mem: Arc::new(BarMem::new(len)), handler: Some(handler) }
    }

    /// The memory behind the BAR (what the device side sees).
    pub fn mem(&self) -> &Arc<BarMem> {
        &self.mem
    }
}

// SAFETY: every access is one relaxed atomic access of the stated width (BarMem), which the
// compiler may not split or tear, and this impl issues each exactly once, in program order;
// bounds and alignment are checked, and `write_wc64` stores eight ascending u64s.
unsafe impl Mmio for MemBar {
    #[inline]
    fn size(&self) -> usize {
        self.mem.len
    }
    #[inline]
    fn read_u32(&self, off: usize) -> u32 {
        if let Some(h) = &self.handler {
            h.on_read(&self.mem, off, 4);
        }
        self.mem.read_u32(off)
    }
    #[inline]
    fn write_u32(&self, off: usize, value: u32) {
        self.mem.write_u32(off, value);
        if let Some(h) = &self.handler {
            h.on_write(&self.mem, off, 4);
        }
    }
    #[inline]
    fn read_u64(&self, off: usize) -> u64 {
        if let Some(h) = &self.handler {
            h.on_read(&self.mem, off, 8);
        }
        self.mem.read_u64(off)
    }
    #[inline]
    fn write_u64(&self, off: usize, value: u64) {
        self.mem.write_u64(off, value);
        if let Some(h) = &self.handler {
            h.on_write(&self.mem, off, 8);
        }
    }
    #[inline]
    fn write_wc64(&self, off: usize, block: &[u64; 8]) {
        self.mem.write_block(off, block);
        if let Some(h) = &self.handler {
            h.on_write(&self.mem, off, 64);
        }
    }
}

/// Base of the IOVA window [`HeapDma`] hands out: far from any heap address on Linux x86_64, so
/// a CPU pointer passed as a bus address never translates.
pub const IOVA_BASE: u64 = 0x0000_00e0_0000_0000;

#[derive(Debug)]
struct Mapping {
    cpu: usize,
    len: usize,
    layout: Layout,
}

/// Memory as a device reaches it: by bus address, through its IOMMU.
///
/// This is the seam between a device model and whatever memory its driver hands it: the
/// in-process [`HeapDma`], or a guest's RAM mapped from the file descriptors a VMM passes over
/// vfio-user. A device model holds one of these and nothing else to touch host memory, so the
/// same model serves a driver in its own process and a guest kernel on a PCI bus.
///
/// Each method is one DMA transaction: all of it lands, or (outside every mapping) none of it,
/// and the device sees a DMA fault.
pub trait BusMemory: Send + Sync + std::fmt::Debug {
    /// Copy `out.len()` bytes from bus address `bus`, as the device's DMA read, then an
    /// `Acquire` fence. False on a DMA fault.
    fn read(&self, bus: BusAddr, out: &mut [u8]) -> bool;
    /// A `Release` fence, then copy `data` to bus address `bus`, as the device's DMA write.
    /// False on a DMA fault.
    fn write(&self, bus: BusAddr, data: &[u8]) -> bool;
    /// Whether `len` bytes at `bus` lie inside one mapping (a check only: the mapping may go
    /// as soon as this returns).
    fn mapped(&self, bus: BusAddr, len: usize) -> bool;
}

impl BusMemory for HeapDma {
    fn read(&self, bus: BusAddr, out: &mut [u8]) -> bool {
        HeapDma::read(self, bus, out)
    }
    fn write(&self, bus: BusAddr, data: &[u8]) -> bool {
        HeapDma::write(self, bus, data)
    }
    fn mapped(&self, bus: BusAddr, len: usize) -> bool {
        self.translate(bus, len).is_some()
    }
}

/// Heap-backed DMA memory with its own IOVA space.
#[derive(Debug, Default)]
pub struct HeapDma {
    map: RwLock<(u64, BTreeMap<u64, Mapping>)>,
}

impl HeapDma {
    /// An empty allocator, shared between a driver and a device model.
    pub fn new() -> Arc<Self> {
        Arc::new(HeapDma::default())
    }

    /// The CPU address of `len` bytes at bus address `bus`, if they lie inside one live block.
    /// This is the model's IOMMU: anything else is a DMA fault. The address is for checks
    /// only: the block may be freed as soon as this returns, so move bytes with
    /// [`read`](Self::read) and [`write`](Self::write), which keep the mapping alive while they
    /// copy.
    pub fn translate(&self, bus: BusAddr, len: usize) -> Option<NonNull<u8>> {
        let map = self.map.read().expect("dma map poisoned");
        Self::lookup(&map.1, bus, len)
    }

    fn lookup(map: &BTreeMap<u64, Mapping>, bus: BusAddr, len: usize) -> Option<NonNull<u8>> {
        let (start, m) = map.range(..=bus.0).next_back()?;
        let off = bus.0 - start;
        let end = off.checked_add(len as u64)?;
        if end > m.len as u64 {
            return None;
        }
        NonNull::new((m.cpu + off as usize) as *mut u8)
    }

    /// Run `f` on the CPU address of `len` bytes at `bus` with the mapping held: `free` (which
    /// takes the map's write lock) waits until `f` is done, as an IOMMU unmap waits for DMA in
    /// flight. The lock also orders the model's accesses in `f` before the deallocation
    /// (unlock, then the write lock's acquire), which the driver's fences alone would not do for
    /// the model's last store. False, without calling `f`, on a DMA fault.
    fn with_mapped(&self, bus: BusAddr, len: usize, f: impl FnOnce(*mut u8)) -> bool {
        let map = self.map.read().expect("dma map poisoned");
        let Some(p) = Self::lookup(&map.1, bus, len) else { return false };
        f(p.as_ptr());
        drop(map);
        true
    }

    /// Copy `out.len()` bytes from bus address `bus`, as the device's DMA read: relaxed
    /// atomic loads split as [`crate::access`] describes (so a 4-byte doorbell record is one
    /// 32-bit load, matching the driver's store), then an `Acquire` fence. False on a DMA
    /// fault.
    ///
    /// The fence pairs with the driver's [`crate::barrier::to_device`] (a `Release` fence): if
    /// these loads saw a store the driver made after its barrier (a doorbell record), every
    /// access before the barrier (the WQE stores) happens before whatever the model does next.
    pub fn read(&self, bus: BusAddr, out: &mut [u8]) -> bool {
        let ok = self.with_mapped(bus, out.len(), |p| {
            // SAFETY: `with_mapped` found the range inside a live block and keeps it mapped
            // (allocated) until we return; the driver and the model access the block only
            // atomically; `out` is a Rust buffer, not DMA memory.
            unsafe { access::load_bytes(p, out) }
        });
        // Orders the loads above before every later access of the model (see the doc above).
        fence(Ordering::Acquire);
        ok
    }

    /// Copy `data` to bus address `bus`, as the device's DMA write: a `Release` fence, then
    /// relaxed atomic stores split as [`crate::access`] describes. False on a DMA fault.
    ///
    /// The fence pairs with the driver's [`crate::barrier::from_device`] (an `Acquire` fence):
    /// a driver that sees these stores (a CQE's owner word) and then issues its barrier sees
    /// everything the model did before (the CQE body, written by an earlier `write`; its reads
    /// of the WQEs that the CQE completes).
    pub fn write(&self, bus: BusAddr, data: &[u8]) -> bool {
        // Orders every earlier access of the model before the stores below (see the doc above).
        fence(Ordering::Release);
        self.with_mapped(bus, data.len(), |p| {
            // SAFETY: as in `read`, with the direction reversed.
            unsafe { access::store_bytes(p, data) }
        })
    }

    /// Blocks currently allocated.
    pub fn live_blocks(&self) -> usize {
        self.map.read().expect("dma map poisoned").1.len()
    }
}

// SAFETY: blocks come zeroed from the global allocator with the requested alignment; bus
// addresses are unique, aligned like the CPU address, and translate back to the same bytes
// until `free` removes the mapping.
unsafe impl Dma for HeapDma {
    fn alloc(&self, len: usize, align: usize) -> Result<DmaBuf, HalError> {
        let bad = HalError::BadLayout { len, align };
        if len == 0 || !align.is_power_of_two() {
            return Err(bad);
        }
        let layout = Layout::from_size_align(len, align.max(64)).map_err(|_| bad)?;
        // SAFETY: non-zero size.
        let cpu =
            NonNull::new(unsafe { alloc_zeroed(layout) }).ok_or(HalError::OutOfMemory { len })?;
        let mut map = self.map.write().expect("dma map poisoned");
        let align = layout.align() as u64;
        let bus = (IOVA_BASE + map.0).next_multiple_of(align.max(4096));
        map.0 = bus - IOVA_BASE + (len as u64).next_multiple_of(4096);
        map.1.insert(bus, Mapping { cpu: cpu.as_ptr() as usize, len, layout });
        // SAFETY: `cpu` is a fresh zeroed allocation of `len` bytes, translated from `bus` until
        // freed.
        Ok(unsafe { DmaBuf::from_raw_parts(cpu, BusAddr(bus), len) })
    }

    unsafe fn free(&self, buf: DmaBuf) {
        let mut map = self.map.write().expect("dma map poisoned");
        if let Some(m) = map.1.remove(&buf.bus().0) {
            // SAFETY: allocated in `alloc` with this layout; the caller guarantees the device
            // no longer uses it, and the mapping is gone so the model cannot reach it either:
            // its `read`/`write` hold the read lock while they copy, so taking the write lock
            // above waited for any copy in flight.
            unsafe { dealloc(m.cpu as *mut u8, m.layout) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn bus_addresses_translate_and_differ_from_cpu() {
        let dma = HeapDma::new();
        let a = dma.alloc(100, 64).unwrap();
        let b = dma.alloc(8192, 4096).unwrap();
        assert!(a.bus().is_aligned(64) && b.bus().is_aligned(4096));
        assert_ne!(a.bus().0, a.cpu().as_ptr() as u64);
        a.write_u32(96, 0xdeadbeef);
        let mut out = [0u8; 4];
        assert!(dma.read(a.bus().add(96), &mut out));
        assert_eq!(u32::from_ne_bytes(out), 0xdeadbeef);
        assert!(dma.translate(a.bus().add(97), 4).is_none(), "crosses the end");
        assert!(dma.translate(BusAddr(a.cpu().as_ptr() as u64), 1).is_none());
        // SAFETY: no device uses them.
        unsafe {
            dma.free(a);
            dma.free(b);
        }
        assert_eq!(dma.live_blocks(), 0);
    }

    struct Count(AtomicUsize);
    impl BarHandler for Count {
        fn on_write(&self, _: &BarMem, off: usize, len: usize) {
            if off == 0x800 && len == 64 {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    #[test]
    fn bar_handler_sees_wc_blocks() {
        let h = Arc::new(Count(AtomicUsize::new(0)));
        let bar = MemBar::with_handler(4096, h.clone());
        bar.write_wc64(0x800, &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(h.0.load(Ordering::SeqCst), 1);
        assert_eq!(bar.read_u64(0x808), 2);
        bar.write_be32(0x10, 0x0102_0304);
        let mut b = [0u8; 4];
        bar.mem().read_bytes(0x10, &mut b);
        assert_eq!(b, [1, 2, 3, 4]);
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn out_of_range_mmio_panics() {
        MemBar::new(64).write_u32(64, 0);
    }
}
