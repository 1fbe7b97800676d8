//! Memory registration: device-visible buffers the HCA may read (and peers may write) by key.
//!
//! A [`Region`] owns a block of DMA memory from the HAL and the memory key (`CREATE_MKEY`) that
//! names it to the device, plus the [`RegionUse`] that counts posted requests reading it:
//!
//! * **MTT mode** ([`Mlx5::reg`]): the key's virtual range starts at the block's CPU address
//!   (as a verbs MR's does) and translates, page by page, onto the bus-contiguous block.
//! * **Physical mode** ([`Mlx5::reg_physical`]): the key's addresses *are* bus addresses, for
//!   identity-mapped bare metal.
//!
//! Safety rules, from [`rdma_pmd::region`]: [`Region::slice`] hands out [`LocalBuf`]s that borrow
//! the region, and a QP that accepts them (`Qp<'r, ..>` takes only `LocalBuf<'r>`) cannot
//! outlive it, so the memory is never freed under the device. [`Region::dereg`] destroys the
//! key early, and is refused with [`Error::RegionBusy`] while posted requests still use it.
//!
//! The CPU reads and writes the bytes only through [`Region::read`], [`Region::write`] and
//! [`Region::fill`] (volatile, word at a time): the device or a peer may write them at any time,
//! so no Rust reference into them is formed.

use core::cell::Cell;
use core::ptr::NonNull;

use rdma_pmd::{DestBuf, Error, Lkey, LocalBuf, RegionUse, RemoteBuf, Result, Rkey};
use rdma_pmd_hal::{access, Dma, DmaBuf, Mmio};

use crate::control::{Access, Control, Mkey, MkeyParams, Translation};
use crate::device::Mlx5;

/// A registered block of device-visible memory. See the module docs.
pub struct Region<'d, M: Mmio, D: Dma, C: Control> {
    dev: &'d Mlx5<M, D, C>,
    /// `Some` until dropped.
    buf: Option<DmaBuf>,
    mkey: Mkey,
    /// The key-space address of byte 0.
    start: u64,
    len: usize,
    access: Access,
    usage: RegionUse,
    /// Whether the memory key still exists in the device.
    key_live: Cell<bool>,
}

impl<M: Mmio, D: Dma, C: Control> Mlx5<M, D, C> {
    /// Allocate `len` bytes of device-visible memory and register them in MTT mode: addresses
    /// in the key's space are the block's CPU addresses, as with `ibv_reg_mr`.
    pub fn reg(&self, len: usize, access: Access) -> Result<Region<'_, M, D, C>> {
        Region::new(self, len, access, false)
    }

    /// Allocate and register `len` bytes in physical-address mode: key-space addresses are bus
    /// addresses (identity-mapped bare metal, where they equal CPU addresses).
    pub fn reg_physical(&self, len: usize, access: Access) -> Result<Region<'_, M, D, C>> {
        Region::new(self, len, access, true)
    }
}

impl<'d, M: Mmio, D: Dma, C: Control> Region<'d, M, D, C> {
    fn new(dev: &'d Mlx5<M, D, C>, len: usize, access: Access, physical: bool) -> Result<Self> {
        if len == 0 || len > u32::MAX as usize {
            return Err(Error::InvalidArgument("region length must be in 1..=u32::MAX"));
        }
        let page = dev.dma().page_size();
        if !page.is_power_of_two() {
            return Err(Error::InvalidArgument("DMA page size not a power of two"));
        }
        let buf = dev.dma().alloc(len, page)?;
        let (start, translation) = if physical {
            (buf.bus().0, Translation::Physical)
        } else {
            let base = buf.bus();
            let t = Translation::Mtt { base, page_shift: page.trailing_zeros() as u8 };
            (buf.cpu().as_ptr() as u64, t)
        };
        let p = MkeyParams { pd: dev.pd(), start, len: len as u64, access, translation };
        let mkey = match dev.control().create_mkey(&p) {
            Ok(k) => k,
            Err(e) => {
                // SAFETY: no key was created, so the device cannot reach the block.
                unsafe { dev.dma().free(buf) };
                return Err(e);
            }
        };
        Ok(Region {
            dev,
            buf: Some(buf),
            mkey,
            start,
            len,
            access,
            usage: RegionUse::new(),
            key_live: Cell::new(true),
        })
    }

    fn buf(&self) -> &DmaBuf {
        // Only `drop` takes it.
        self.buf.as_ref().expect("region memory present until drop")
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (never: registration refuses 0 bytes).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memory key.
    pub fn mkey(&self) -> Mkey {
        self.mkey
    }

    /// The local key (the memory key's value).
    pub fn lkey(&self) -> Lkey {
        self.mkey.lkey()
    }

    /// The remote key to hand a peer (the memory key's value).
    pub fn rkey(&self) -> Rkey {
        self.mkey.rkey()
    }

    /// The rights it was registered with.
    pub fn access(&self) -> Access {
        self.access
    }

    /// The key-space address of byte 0 (what SGEs and a peer's remote address use).
    pub fn addr(&self) -> u64 {
        self.start
    }

    /// The in-flight accounting of posted requests that read the region (read-only to safe
    /// code: only the driver counts a request finished).
    pub fn usage(&self) -> &RegionUse {
        &self.usage
    }

    /// Whether the region is still registered.
    pub fn is_registered(&self) -> bool {
        self.usage.is_registered()
    }

    fn check(&self, off: usize, len: usize) -> Result<()> {
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::OutOfBounds),
        }
    }

    /// The bytes `[off, off + len)` as a buffer to post from (or, by a peer, to write into).
    pub fn slice(&self, off: usize, len: usize) -> Result<LocalBuf<'_>> {
        self.check(off, len)?;
        if !self.usage.is_registered() {
            return Err(Error::BadLkey);
        }
        let ptr =
            NonNull::new(self.buf().cpu().as_ptr().wrapping_add(off)).ok_or(Error::OutOfBounds)?;
        // SAFETY: `ptr` points to `len` bytes of the region's block (checked above), which stay
        // allocated as long as `self` is borrowed; the device reaches them as `start + off`
        // under this key while the region is registered; `usage` is this region's accounting.
        Ok(unsafe {
            LocalBuf::from_raw_parts(
                &self.usage,
                ptr,
                self.start + off as u64,
                len as u32,
                self.mkey.lkey(),
            )
        })
    }

    /// The whole region as one buffer the device may write (a READ destination, a receive
    /// buffer, an atomic's result): the exclusive borrow keeps every other path to the
    /// region's bytes closed for as long as the buffer, or a piece
    /// [`split_off`](DestBuf::split_off) from it, lives. Posted, the buffer comes back from
    /// its [`rdma_pmd::Pending`] once the request retires.
    ///
    /// Reading the region while a READ may still write it does not compile:
    ///
    /// ```compile_fail,E0502
    /// # use rdma_pmd::{Post, SendFlags};
    /// # use rdma_pmd_mlx5::{control::Access, ConnectOpts, Mlx5, QpConfig, SharedDma};
    /// # let model = rdma_pmd_mlx5_model::Model::new();
    /// # let dev = Mlx5::open(model.bar(), SharedDma(model.dma()), model.control())?;
    /// # let src = dev.reg(64, Access::LOCAL_WRITE | Access::REMOTE_READ)?;
    /// let mut dst = dev.reg(64, Access::LOCAL_WRITE)?;
    /// let mut qp = dev.create_qp::<64, 16>(&QpConfig::default())?;
    /// let read = qp.post_read(1, dst.dest()?, SendFlags::SIGNALED, src.remote(0)).ok();
    /// let mut out = [0u8; 8];
    /// dst.read(0, &mut out)?; // the READ may still be writing these bytes
    /// # drop(read);
    /// # Ok::<(), rdma_pmd::Error>(())
    /// ```
    pub fn dest(&mut self) -> Result<DestBuf<'_>> {
        if !self.usage.is_registered() {
            return Err(Error::BadLkey);
        }
        let ptr = NonNull::new(self.buf().cpu().as_ptr()).ok_or(Error::OutOfBounds)?;
        // SAFETY: the region's memory is allocated and registered until it is dropped, which
        // the borrow of `self` outlasts; `self` is borrowed exclusively for the buffer's
        // lifetime, so nothing else reaches the bytes meanwhile; `usage` is this region's.
        Ok(unsafe {
            DestBuf::from_raw_parts(&self.usage, ptr, self.start, self.len as u32, self.mkey.lkey())
        })
    }

    /// The whole region as one buffer.
    pub fn as_buf(&self) -> Result<LocalBuf<'_>> {
        self.slice(0, self.len)
    }

    /// Where a peer writes byte `off` of this region (address and rkey).
    pub fn remote(&self, off: usize) -> RemoteBuf {
        RemoteBuf::new(self.start.wrapping_add(off as u64), self.mkey.rkey())
    }

    /// Copy `out.len()` bytes starting at `off` out of the region.
    pub fn read(&self, off: usize, out: &mut [u8]) -> Result<()> {
        self.check(off, out.len())?;
        self.buf().read_bytes(off, out);
        Ok(())
    }

    /// Copy `data` into the region at `off`.
    pub fn write(&self, off: usize, data: &[u8]) -> Result<()> {
        self.check(off, data.len())?;
        self.buf().write_bytes(off, data);
        Ok(())
    }

    /// Set every byte of the region to `byte`.
    pub fn fill(&self, byte: u8) {
        // SAFETY: the region's `len` bytes lie in its block (allocated at least that large),
        // valid for writes until drop, and only ever accessed atomically, by us and the device.
        unsafe { access::fill_bytes(self.buf().cpu().as_ptr(), self.len, byte) }
    }

    /// Deregister: destroy the memory key so neither the HCA nor a peer can reach the bytes
    /// any more. Refused with [`Error::RegionBusy`] while posted requests still use the region;
    /// afterwards it can no longer be posted from ([`Error::BadLkey`]). The memory itself stays
    /// readable by the CPU until the region is dropped. Deregistering twice is a no-op.
    pub fn dereg(&self) -> Result<()> {
        if !self.key_live.get() {
            return Ok(());
        }
        // SAFETY: this region owns `usage`; the key is destroyed right after, or the mark is
        // taken back.
        unsafe { self.usage.begin_dereg()? };
        if let Err(e) = self.dev.control().destroy_mkey(self.mkey) {
            // SAFETY: as above; the device still holds the key, so the region stays usable.
            unsafe { self.usage.cancel_dereg() };
            return Err(e);
        }
        self.key_live.set(false);
        Ok(())
    }
}

impl<M: Mmio, D: Dma, C: Control> Drop for Region<'_, M, D, C> {
    fn drop(&mut self) {
        let Some(buf) = self.buf.take() else { return };
        // No `LocalBuf` borrows the region any more, so every QP that could hold one is gone and
        // released what it acquired; a non-zero count means a QP was leaked (`mem::forget`) and
        // may still point the device here, so the memory is leaked too.
        if self.dereg().is_err() || self.usage.in_flight() != 0 {
            return;
        }
        // SAFETY: the key is destroyed and no QP that could read the block exists.
        unsafe { self.dev.dma().free(buf) };
    }
}
