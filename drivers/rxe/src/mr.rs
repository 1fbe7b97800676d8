//! Registered memory: page-aligned buffers registered with `ibv_reg_mr`, handing out
//! [`LocalBuf`]s and refusing deregistration while posted requests use them.

use core::cell::Cell;
use core::ptr::NonNull;
use std::alloc::{self, Layout};

use rdma_pmd::{DestBuf, Error, Lkey, LocalBuf, RegionUse, RemoteBuf, Result, Rkey};

use crate::cm::Conn;
use crate::{ffi, last_errno};

bitflags::bitflags! {
    /// Access rights of a registration, with the values of `enum ibv_access_flags`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Access: i32 {
        /// `IBV_ACCESS_LOCAL_WRITE`: the local device may write (receives land here).
        const LOCAL_WRITE = 1;
        /// `IBV_ACCESS_REMOTE_WRITE`: peers may RDMA WRITE here (needs `LOCAL_WRITE`).
        const REMOTE_WRITE = 1 << 1;
        /// `IBV_ACCESS_REMOTE_READ`: peers may RDMA READ from here.
        const REMOTE_READ = 1 << 2;
        /// `IBV_ACCESS_REMOTE_ATOMIC`: peers may run atomics on 8-byte words here (needs
        /// `LOCAL_WRITE`).
        const REMOTE_ATOMIC = 1 << 3;
    }
}

impl Access {
    /// What `rdma_reg_msgs` asks for: sources of writes and sends, receive buffers.
    pub const MSGS: Access = Access::LOCAL_WRITE;
    /// What `rdma_reg_write` asks for: targets of the peer's RDMA WRITEs.
    pub const WRITE: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE);
    /// What `rdma_reg_read` asks for: sources of the peer's RDMA READs.
    pub const READ: Access = Access::LOCAL_WRITE.union(Access::REMOTE_READ);
    /// Every remote right: target of the peer's writes, reads and atomics.
    pub const REMOTE: Access =
        Access::WRITE.union(Access::REMOTE_READ).union(Access::REMOTE_ATOMIC);
}

const PAGE: usize = 4096;

/// A registered, page-aligned, zero-initialised buffer of one [`Conn`]'s protection domain.
///
/// The bytes are shared with the device: they are read and written only through raw copies
/// ([`write`](Region::write), [`read`](Region::read)), never through references, since the
/// device (or a peer) may change them at any time the registration allows.
#[derive(Debug)]
pub struct Region<'c> {
    mem: NonNull<u8>,
    len: usize,
    mr: NonNull<ffi::ibv_mr>,
    lkey: Lkey,
    rkey: Rkey,
    use_: RegionUse,
    /// `ibv_dereg_mr` has not succeeded yet: the device may still reach the bytes. Kept here
    /// rather than read from `use_`, whose "deregistered" mark only stops new posts.
    mr_live: Cell<bool>,
    _conn: &'c Conn,
}

impl<'c> Region<'c> {
    /// Allocate `len` bytes and register them with `access` on `conn`'s device.
    pub fn new(conn: &'c Conn, len: usize, access: Access) -> Result<Region<'c>> {
        if len == 0 || len > u32::MAX as usize {
            return Err(Error::InvalidArgument("region length must be 1..=u32::MAX"));
        }
        let layout = Layout::from_size_align(len, PAGE).map_err(|_| Error::OutOfBounds)?;
        // SAFETY: non-zero size.
        let mem = NonNull::new(unsafe { alloc::alloc_zeroed(layout) })
            .ok_or(Error::Device(rdma_pmd::Errno::ENOMEM))?;
        // SAFETY: the PD is live for 'c; `mem` holds `len` bytes that stay allocated until the
        // registration is gone (Drop).
        let mr = unsafe { ffi::ibv_reg_mr(conn.pd(), mem.as_ptr().cast(), len, access.bits()) };
        let Some(mr) = NonNull::new(mr) else {
            let e = last_errno();
            // SAFETY: allocated above with `layout`, never registered.
            unsafe { alloc::dealloc(mem.as_ptr(), layout) };
            return Err(e);
        };
        // SAFETY: a registration just returned by rdma-core.
        let (lkey, rkey) = unsafe { (Lkey((*mr.as_ptr()).lkey), Rkey((*mr.as_ptr()).rkey)) };
        Ok(Region {
            mem,
            len,
            mr,
            lkey,
            rkey,
            use_: RegionUse::new(),
            mr_live: Cell::new(true),
            _conn: conn,
        })
    }

    /// A source region (`rdma_reg_msgs`).
    pub fn msgs(conn: &'c Conn, len: usize) -> Result<Region<'c>> {
        Region::new(conn, len, Access::MSGS)
    }

    /// A target region for the peer's writes (`rdma_reg_write`).
    pub fn write_target(conn: &'c Conn, len: usize) -> Result<Region<'c>> {
        Region::new(conn, len, Access::WRITE)
    }

    /// A target of every remote access: the peer's writes, reads and atomics.
    pub fn remote_target(conn: &'c Conn, len: usize) -> Result<Region<'c>> {
        Region::new(conn, len, Access::REMOTE)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The whole region as one buffer the device may write (a READ destination, a receive
    /// buffer, an atomic's result; the registration needs [`Access::LOCAL_WRITE`] for the
    /// device to accept it, which rxe checks when it writes, failing the request then). The
    /// exclusive borrow closes every other path to the bytes for as long as the buffer, or a
    /// piece [`split_off`](DestBuf::split_off) from it, lives; posted, the buffer comes back
    /// from its [`rdma_pmd::Pending`] once the request retires.
    pub fn dest(&mut self) -> Result<DestBuf<'_>> {
        if !self.mr_live.get() || !self.use_.is_registered() {
            return Err(Error::BadLkey);
        }
        // SAFETY: the memory is allocated and registered under `lkey` at its virtual address
        // until the region is dropped (or leaked while in flight), which the borrow of `self`
        // outlasts; `self` is borrowed exclusively for the buffer's lifetime, so nothing else
        // reaches the bytes meanwhile; `use_` is this registration's accounting.
        Ok(unsafe {
            DestBuf::from_raw_parts(
                &self.use_,
                self.mem,
                self.mem.as_ptr() as u64,
                self.len as u32,
                self.lkey,
            )
        })
    }

    /// Whether the region is empty (never: regions have at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The local key.
    pub fn lkey(&self) -> Lkey {
        self.lkey
    }

    /// Where a peer writes to reach byte 0 (the address is the buffer's virtual address).
    pub fn remote(&self) -> RemoteBuf {
        RemoteBuf::new(self.mem.as_ptr() as u64, self.rkey)
    }

    /// The in-flight accounting (read-only to safe code: only the queue pair counts a request
    /// finished).
    pub fn usage(&self) -> &RegionUse {
        &self.use_
    }

    /// The bytes `[off, off + len)` as a posting source.
    #[inline]
    pub fn buf(&self, off: usize, len: usize) -> Result<LocalBuf<'_>> {
        let end = off.checked_add(len).ok_or(Error::OutOfBounds)?;
        if end > self.len {
            return Err(Error::OutOfBounds);
        }
        let ptr = NonNull::new(self.mem.as_ptr().wrapping_add(off)).ok_or(Error::OutOfBounds)?;
        // SAFETY: in bounds (checked); the bytes stay allocated and registered under `lkey` at
        // their virtual address while `self` is borrowed (Drop leaks them if still in flight);
        // `use_` is this registration's accounting.
        Ok(unsafe {
            LocalBuf::from_raw_parts(&self.use_, ptr, ptr.as_ptr() as u64, len as u32, self.lkey)
        })
    }

    /// The whole region as a posting source.
    pub fn all(&self) -> LocalBuf<'_> {
        self.buf(0, self.len).expect("whole region is in bounds")
    }

    /// Copy `data` into the region at `off`.
    #[inline]
    pub fn write(&self, off: usize, data: &[u8]) -> Result<()> {
        let end = off.checked_add(data.len()).ok_or(Error::OutOfBounds)?;
        if end > self.len {
            return Err(Error::OutOfBounds);
        }
        // SAFETY: in bounds; raw copy, no reference to device-shared bytes is formed.
        unsafe {
            core::ptr::copy_nonoverlapping(data.as_ptr(), self.mem.as_ptr().add(off), data.len())
        };
        Ok(())
    }

    /// Copy the region's bytes at `off` into `out`. Each byte is read once, with volatile loads,
    /// so a polling loop sees the device's writes.
    #[inline]
    pub fn read(&self, off: usize, out: &mut [u8]) -> Result<()> {
        let end = off.checked_add(out.len()).ok_or(Error::OutOfBounds)?;
        if end > self.len {
            return Err(Error::OutOfBounds);
        }
        if out.len() <= 16 {
            for (i, b) in out.iter_mut().enumerate() {
                // SAFETY: in bounds.
                *b = unsafe { self.mem.as_ptr().add(off + i).read_volatile() };
            }
        } else {
            // Orders the copy after whatever completion the caller reaped.
            core::sync::atomic::fence(core::sync::atomic::Ordering::Acquire);
            // SAFETY: in bounds; raw copy.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    self.mem.as_ptr().add(off),
                    out.as_mut_ptr(),
                    out.len(),
                )
            };
        }
        Ok(())
    }

    /// Deregister (`ibv_dereg_mr`), refused with [`Error::RegionBusy`] (`EBUSY`) while posted
    /// requests use the region. Afterwards the region can no longer be posted from
    /// ([`Error::BadLkey`]); its memory is freed when it is dropped.
    /// A failed `ibv_dereg_mr` leaves the region registered and usable, and is returned.
    pub fn dereg(&self) -> Result<()> {
        if !self.mr_live.get() {
            return Ok(());
        }
        // SAFETY: this region owns `use_`; `ibv_dereg_mr` follows, or the mark is taken back.
        unsafe { self.use_.begin_dereg()? };
        // SAFETY: registered (`mr_live`) and unused by any posted request (`begin_dereg`).
        if unsafe { ffi::ibv_dereg_mr(self.mr.as_ptr()) } != 0 {
            let e = last_errno();
            // SAFETY: as above; the registration is still there.
            unsafe { self.use_.cancel_dereg() };
            return Err(e);
        }
        self.mr_live.set(false);
        Ok(())
    }
}

impl Drop for Region<'_> {
    fn drop(&mut self) {
        if self.use_.in_flight() > 0 {
            // Only reachable if a queue pair was leaked (mem::forget) with requests in flight:
            // the device may still read or write these bytes, so they stay allocated and
            // registered for the life of the process.
            return;
        }
        if self.dereg().is_err() {
            return;
        }
        let layout = Layout::from_size_align(self.len, PAGE).expect("checked in new");
        // SAFETY: allocated in `new` with this layout; no longer registered.
        unsafe { alloc::dealloc(self.mem.as_ptr(), layout) };
    }
}
