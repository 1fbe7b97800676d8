//! A guest's RAM as a device reaches it: regions mapped from the file descriptors a VMM hands
//! over (vfio-user `VFIO_USER_DMA_MAP`: IOVA, size, fd, file offset, protection), reached by
//! bus address through [`BusMemory`].
//!
//! This is the memory seam of a device model served on a PCI bus: QEMU backs guest RAM with a
//! shared memfd (`memory-backend-memfd,share=on`) and passes that fd with each DMA map, so the
//! device process maps the same pages with `mmap(MAP_SHARED)` and its DMA is ordinary loads and
//! stores. Without a guest IOMMU the IOVA is the guest physical address.
//!
//! Accesses follow [`HeapDma`](crate::mem::HeapDma)'s rules exactly: one access lies inside one
//! region (a range that spans two adjacent regions is a DMA fault, as it would be on an IOMMU
//! that mapped them separately), bytes move with [`crate::access`]'s relaxed atomics, a read
//! ends with an `Acquire` fence and a write starts with a `Release` fence, and an unmap waits
//! for the accesses in flight (the region table is behind a `RwLock`; the pages are unmapped
//! only after the write lock is taken). The guest's CPUs store to the same pages with their own
//! instructions; the atomics make the device side free of data races in Rust's model, and the
//! fences are the device halves of the guest driver's barriers.

use std::collections::BTreeMap;
use std::fmt;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::access;
use crate::mem::BusMemory;
use rdma_pmd::BusAddr;

/// What the device may do in a region (the `flags` of `VFIO_USER_DMA_MAP`: bit 0 readable,
/// bit 1 writeable).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prot {
    /// The device may read (DMA from memory).
    pub read: bool,
    /// The device may write (DMA to memory).
    pub write: bool,
}

impl Prot {
    /// Readable and writeable.
    pub const RW: Prot = Prot { read: true, write: true };
    /// Readable only.
    pub const RO: Prot = Prot { read: true, write: false };
}

/// Why a map or unmap was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestRamError {
    /// A zero-sized region, or one whose end overflows the bus address space or `usize`.
    BadRange {
        /// Start of the range.
        iova: u64,
        /// Its size.
        len: u64,
    },
    /// The range overlaps a region that is already mapped (vfio-user: `EEXIST`).
    Overlap {
        /// Start of the range asked for.
        iova: u64,
        /// Its size.
        len: u64,
        /// Start of the region it overlaps.
        existing: u64,
    },
    /// No region was mapped with exactly this start and size.
    NotMapped {
        /// Start of the range.
        iova: u64,
        /// Its size.
        len: u64,
    },
    /// `mmap` refused the fd, offset or protection.
    Mmap {
        /// Its errno.
        errno: i32,
    },
}

impl GuestRamError {
    /// The errno a VMM should see for this error.
    pub fn errno(&self) -> i32 {
        match self {
            GuestRamError::BadRange { .. } => libc::EINVAL,
            GuestRamError::Overlap { .. } => libc::EEXIST,
            GuestRamError::NotMapped { .. } => libc::ENOENT,
            GuestRamError::Mmap { errno } => *errno,
        }
    }
}

impl fmt::Display for GuestRamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GuestRamError::BadRange { iova, len } => {
                write!(f, "bad DMA range {len:#x} bytes at {iova:#x}")
            }
            GuestRamError::Overlap { iova, len, existing } => write!(
                f,
                "DMA range {len:#x} bytes at {iova:#x} overlaps the region at {existing:#x}"
            ),
            GuestRamError::NotMapped { iova, len } => {
                write!(f, "no DMA region of {len:#x} bytes at {iova:#x}")
            }
            GuestRamError::Mmap { errno } => {
                write!(f, "mmap of a DMA region failed: errno {errno}")
            }
        }
    }
}

impl std::error::Error for GuestRamError {}

/// The access a lookup checks the region's protection for.
#[derive(Clone, Copy)]
enum Need {
    Read,
    Write,
    /// Only that the range is mapped ([`BusMemory::mapped`]).
    Nothing,
}

/// One mapped region. Owns its mapping: dropping it unmaps the pages.
#[derive(Debug)]
struct Region {
    ptr: NonNull<u8>,
    len: usize,
    prot: Prot,
}

// SAFETY: the region is a private mapping of shared pages that is never handed out as a
// reference; every access goes through `crate::access` (atomics), so threads cannot race on it.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what `mmap` returned in `GuestRam::map`, and the
        // region is dropped only after it left the table under the write lock, so no access
        // is in flight and none can start.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Guest RAM mapped from a VMM's file descriptors, by bus address.
#[derive(Debug, Default)]
pub struct GuestRam {
    regions: RwLock<BTreeMap<u64, Region>>,
}

impl GuestRam {
    /// No regions: every access faults until the VMM maps some.
    pub fn new() -> Self {
        GuestRam::default()
    }

    fn table(&self) -> RwLockReadGuard<'_, BTreeMap<u64, Region>> {
        // A panic while holding the lock leaves the table consistent (it is only changed by
        // whole inserts and removes), so a poisoned lock is still usable.
        self.regions.read().unwrap_or_else(|e| e.into_inner())
    }

    fn table_mut(&self) -> RwLockWriteGuard<'_, BTreeMap<u64, Region>> {
        self.regions.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Map `len` bytes of `fd` from file offset `offset` at bus address `iova`, shared, with
    /// protection `prot`. Refused if the range is empty or overflows, overlaps a region already
    /// mapped, or `mmap` fails (an offset not page-aligned, an fd not open for the access
    /// `prot` asks, ...). The fd may be closed afterwards: the mapping keeps the pages.
    pub fn map(
        &self,
        iova: BusAddr,
        len: u64,
        fd: BorrowedFd<'_>,
        offset: u64,
        prot: Prot,
    ) -> Result<(), GuestRamError> {
        let bad = GuestRamError::BadRange { iova: iova.0, len };
        let size = usize::try_from(len).map_err(|_| bad)?;
        if len == 0 || iova.0.checked_add(len).is_none() {
            return Err(bad);
        }
        let off = libc::off_t::try_from(offset)
            .map_err(|_| GuestRamError::Mmap { errno: libc::EINVAL })?;
        let mut table = self.table_mut();
        if let Some(existing) = Self::overlapping(&table, iova.0, len) {
            return Err(GuestRamError::Overlap { iova: iova.0, len, existing });
        }
        let mut p = libc::PROT_NONE;
        if prot.read {
            p |= libc::PROT_READ;
        }
        if prot.write {
            p |= libc::PROT_WRITE;
        }
        // SAFETY: a new mapping at an address the kernel picks (no hint), so nothing existing is
        // replaced; the result is checked before use.
        let ptr = unsafe {
            libc::mmap(std::ptr::null_mut(), size, p, libc::MAP_SHARED, fd.as_raw_fd(), off)
        };
        if ptr == libc::MAP_FAILED {
            return Err(GuestRamError::Mmap {
                errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO),
            });
        }
        let ptr =
            NonNull::new(ptr.cast::<u8>()).ok_or(GuestRamError::Mmap { errno: libc::EFAULT })?;
        table.insert(iova.0, Region { ptr, len: size, prot });
        Ok(())
    }

    /// The start of a region that overlaps `[iova, iova + len)`, if any.
    fn overlapping(table: &BTreeMap<u64, Region>, iova: u64, len: u64) -> Option<u64> {
        let end = iova + len;
        // The region starting at or below `iova` overlaps if it reaches past `iova`; a region
        // starting inside the range overlaps by definition.
        if let Some((&s, r)) = table.range(..=iova).next_back() {
            if s + r.len as u64 > iova {
                return Some(s);
            }
        }
        table.range(iova..end).next().map(|(&s, _)| s)
    }

    /// Unmap the region mapped with exactly this start and size, once every access in flight
    /// on any region has finished. A range that is not exactly one region is refused and
    /// nothing changes.
    pub fn unmap(&self, iova: BusAddr, len: u64) -> Result<(), GuestRamError> {
        let mut table = self.table_mut();
        match table.get(&iova.0) {
            Some(r) if r.len as u64 == len => {}
            _ => return Err(GuestRamError::NotMapped { iova: iova.0, len }),
        }
        let region = table.remove(&iova.0);
        drop(table);
        // The pages go here (`Region::drop`), after the write lock waited out every reader.
        drop(region);
        Ok(())
    }

    /// Unmap every region (vfio-user's `VFIO_DMA_UNMAP_FLAG_ALL`). Returns how many there were.
    pub fn unmap_all(&self) -> usize {
        let old = std::mem::take(&mut *self.table_mut());
        old.len()
    }

    /// The start of a mapped region that overlaps `len` bytes at `iova`, if any.
    pub fn overlapping_region(&self, iova: BusAddr, len: u64) -> Option<u64> {
        let end_ok = iova.0.checked_add(len).is_some();
        end_ok.then(|| Self::overlapping(&self.table(), iova.0, len)).flatten()
    }

    /// Regions currently mapped.
    pub fn regions(&self) -> usize {
        self.table().len()
    }

    /// Run `f` on the CPU address of `len` bytes at `bus` with the region held (an unmap
    /// waits until `f` is done). False, without calling `f`, if the range is not inside one
    /// region or the region does not allow the access.
    fn with_region(&self, bus: BusAddr, len: usize, need: Need, f: impl FnOnce(*mut u8)) -> bool {
        let table = self.table();
        let Some((&start, r)) = table.range(..=bus.0).next_back() else { return false };
        let off = bus.0 - start;
        let Some(end) = off.checked_add(len as u64) else { return false };
        let allowed = match need {
            Need::Read => r.prot.read,
            Need::Write => r.prot.write,
            Need::Nothing => true,
        };
        if end > r.len as u64 || !allowed {
            return false;
        }
        // `off < r.len`, which is a `usize`, so the cast is lossless.
        f(r.ptr.as_ptr().wrapping_add(off as usize));
        drop(table);
        true
    }
}

impl BusMemory for GuestRam {
    fn read(&self, bus: BusAddr, out: &mut [u8]) -> bool {
        let ok = self.with_region(bus, out.len(), Need::Read, |p| {
            // SAFETY: `with_region` found the range inside one readable region and keeps it
            // mapped until we return; device-side accesses to it are all atomic; `out` is a
            // Rust buffer, not guest memory.
            unsafe { access::load_bytes(p, out) }
        });
        // Orders the loads above before every later access of the device (pairs with the
        // guest driver's to-device barrier, as in `HeapDma::read`).
        fence(Ordering::Acquire);
        ok
    }

    fn write(&self, bus: BusAddr, data: &[u8]) -> bool {
        // Orders every earlier access of the device before the stores below (pairs with the
        // guest driver's from-device barrier, as in `HeapDma::write`).
        fence(Ordering::Release);
        self.with_region(bus, data.len(), Need::Write, |p| {
            // SAFETY: as in `read`, with the direction reversed, in a writeable region.
            unsafe { access::store_bytes(p, data) }
        })
    }

    fn mapped(&self, bus: BusAddr, len: usize) -> bool {
        self.with_region(bus, len, Need::Nothing, |_| {})
    }
}

#[cfg(test)]
mod tests;
