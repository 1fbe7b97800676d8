//! Memory the device writes: RDMA READ destinations, receive buffers and atomic results.
//!
//! A posted READ, receive or atomic writes its local buffers at some time after the post
//! returns, until its completion (or flush) is reaped. Reading or writing such a buffer from the
//! CPU meanwhile sees half-written data at best, so the types keep safe code away from it, the
//! way embedded DMA transfers do (the `embedded-dma` crate's `WriteBuffer`, a HAL's
//! `Transfer::wait()` that hands the buffer back; virtio-drivers' `receive_begin` /
//! `receive_complete`), without allocation:
//!
//! 1. **A [`DestBuf`] is owned, not shared.** It is neither `Copy` nor `Clone`; a backend makes
//!    one from an exclusive borrow of its region (`&'r mut`), so while any `DestBuf<'r>` of a
//!    region exists, nothing else reaches that region's bytes. [`DestBuf::split_off`] carves it
//!    into disjoint pieces. Its bytes are read and written through [`DestBuf::read`] /
//!    [`DestBuf::write`], which copy with the relaxed atomic accesses of [`crate::access`], so
//!    even a peer's RDMA WRITE into the same region cannot make them a data race.
//! 2. **Posting moves it into a [`Pending`], or locks it in its [`DestSlot`].** `post_readv`,
//!    `post_recvv` and the atomics take the buffers by value and return them inside a
//!    `Pending<B>`, which offers no access to them. (A refused post hands them back in
//!    [`Refused`].) Buffers posted again and again can instead stay in place in a `DestSlot`:
//!    `post_readv_in`, `post_recvv_in` and `post_dest_in` build the request from them where
//!    they lie and mark the slot busy, and a busy slot offers no access to them either.
//! 3. **Only its retirement hands it back.** [`Pending::reclaim`] returns the buffers once the
//!    queue reports the request retired (its completion, or a later one on the same queue, or
//!    its flush, was reaped); before that it returns the `Pending` again ([`DestSlot::get`]
//!    makes the same check, and opens the slot in place). The check is two integer compares:
//!    each queue numbers its requests in posting order, per direction, and counts how many
//!    have retired, in order, as mlx5 and every RC/UD work queue completes them
//!    ([`Retired`]). A [`QueueId`] unique in the process keeps a `Pending` of one queue from
//!    being reclaimed by another.
//!
//! What is left is leaking, which is safe: a `Pending` (or busy `DestSlot`) that is dropped or
//! `mem::forget`-ten keeps its buffers out of reach for good (their region stays borrowed until
//! `'r` ends, and the request keeps the region's in-flight count until it retires or its queue
//! is destroyed), and a queue dropped with requests outstanding leaves their `Pending`s
//! unreclaimable.
//! A request posted into a [`crate::Batch`] that is then dropped (`ibv_wr_abort`) was never
//! posted; its `Pending` is reclaimed once a later request with its number retires, which is
//! harmless, because the device never had its buffers.
//!
//! Reading a buffer that a posted request may still write does not compile:
//!
//! ```compile_fail,E0382
//! # fn f<'r, Q: rdma_pmd::Post<'r>>(q: &mut Q, buf: rdma_pmd::DestBuf<'r>) {
//! let pending = q.post_read(1, buf, rdma_pmd::SendFlags::SIGNALED, rdma_pmd::RemoteBuf::default());
//! let mut out = [0u8; 8];
//! buf.read(0, &mut out); // `buf` was moved into the request
//! # }
//! ```
//!
//! ```compile_fail,E0599
//! # fn f<'r, Q: rdma_pmd::Post<'r>>(q: &mut Q, buf: rdma_pmd::DestBuf<'r>) {
//! let pending = q.post_read(1, buf, rdma_pmd::SendFlags::SIGNALED, rdma_pmd::RemoteBuf::default())
//!     .ok().unwrap();
//! let mut out = [0u8; 8];
//! pending.read(0, &mut out); // a pending request offers no access to its buffers
//! # }
//! ```

use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};

use crate::access;
use crate::addr::Lkey;
use crate::error::{Error, Result};
use crate::region::RegionUse;
use crate::sge::Sge;

/// An owned, exclusive byte range of a registered region that the device may write.
///
/// Only backends create these ([`DestBuf::from_raw_parts`]), from an exclusive borrow of a
/// region; see the [module docs](self).
pub struct DestBuf<'r> {
    region: &'r RegionUse,
    ptr: NonNull<u8>,
    addr: u64,
    /// The length (low half) and the lkey (high half) in one word, as `ibv_sge` lays them out:
    /// a buffer is four words, not five, when it is moved, and a device's data segment takes
    /// both from one load.
    len_key: u64,
}

impl core::fmt::Debug for DestBuf<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DestBuf")
            .field("region", &self.region)
            .field("ptr", &self.ptr)
            .field("addr", &self.addr)
            .field("len", &self.len32())
            .field("lkey", &self.lkey())
            .finish()
    }
}

impl<'r> DestBuf<'r> {
    /// Assemble a buffer from its parts.
    ///
    /// # Safety
    /// `ptr` must point to `len` bytes that stay allocated for `'r`, that the device reaches as
    /// `addr` under `lkey` while `region` is registered, and that nothing else reaches for `'r`
    /// except through this value (the caller holds the region exclusively, or split it into
    /// disjoint `DestBuf`s); `region` must be the [`RegionUse`] of the region `lkey` names.
    #[allow(unsafe_code)]
    #[inline]
    pub const unsafe fn from_raw_parts(
        region: &'r RegionUse,
        ptr: NonNull<u8>,
        addr: u64,
        len: u32,
        lkey: Lkey,
    ) -> Self {
        Self { region, ptr, addr, len_key: Self::pack(len, lkey) }
    }

    /// The word of `len` and `lkey`.
    #[inline(always)]
    const fn pack(len: u32, lkey: Lkey) -> u64 {
        (lkey.0 as u64) << 32 | len as u64
    }

    /// Length in bytes, as the device is given it.
    #[inline(always)]
    fn len32(&self) -> u32 {
        self.len_key as u32
    }

    /// The key the device is given.
    #[inline(always)]
    fn lkey(&self) -> Lkey {
        Lkey((self.len_key >> 32) as u32)
    }

    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len32() as usize
    }

    /// Whether the buffer is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len32() == 0
    }

    /// The region's in-flight accounting (for backends).
    #[inline]
    pub fn region(&self) -> &'r RegionUse {
        self.region
    }

    /// The scatter element the device is given.
    #[inline]
    pub fn sge(&self) -> Sge {
        Sge::new(self.addr, self.len32(), self.lkey())
    }

    /// The address of the first byte in the region's key space (what the device is given).
    #[inline]
    pub fn addr(&self) -> u64 {
        self.addr
    }

    fn check(&self, off: usize, len: usize) -> Result<()> {
        match off.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(Error::OutOfBounds),
        }
    }

    /// Copy `out.len()` bytes from offset `off` into `out`.
    pub fn read(&self, off: usize, out: &mut [u8]) -> Result<()> {
        self.check(off, out.len())?;
        // SAFETY: the range is inside the buffer, which is allocated for `'r`
        // (`from_raw_parts`); the copy is made of atomic accesses and forms no reference.
        #[allow(unsafe_code)]
        unsafe {
            access::load_bytes(self.ptr.as_ptr().add(off), out)
        };
        Ok(())
    }

    /// Copy `data` to offset `off`.
    pub fn write(&mut self, off: usize, data: &[u8]) -> Result<()> {
        self.check(off, data.len())?;
        // SAFETY: as in `read`.
        #[allow(unsafe_code)]
        unsafe {
            access::store_bytes(self.ptr.as_ptr().add(off), data)
        };
        Ok(())
    }

    /// Set `len` bytes from offset `off` to `byte`.
    pub fn fill(&mut self, off: usize, len: usize, byte: u8) -> Result<()> {
        self.check(off, len)?;
        // SAFETY: as in `read`.
        #[allow(unsafe_code)]
        unsafe {
            access::fill_bytes(self.ptr.as_ptr().add(off), len, byte)
        };
        Ok(())
    }

    /// Split the buffer at `at`: `self` keeps `[0, at)` and the returned buffer holds
    /// `[at, len)`. [`Error::OutOfBounds`] if `at > len`.
    pub fn split_off(&mut self, at: usize) -> Result<DestBuf<'r>> {
        self.check(at, 0)?;
        let at32 = at as u32;
        let tail = DestBuf {
            region: self.region,
            ptr: NonNull::new(self.ptr.as_ptr().wrapping_add(at)).ok_or(Error::OutOfBounds)?,
            addr: self.addr.wrapping_add(at as u64),
            len_key: Self::pack(self.len32() - at32, self.lkey()),
        };
        self.len_key = Self::pack(at32, self.lkey());
        Ok(tail)
    }
}

mod sealed {
    pub trait Sealed {}
}

/// What a READ, receive or atomic can be given to write: one [`DestBuf`], an array of them, or
/// (with the `std` feature) a `Vec` of them.
///
/// Sealed: the elements a request is built from must be the ones the [`Pending`] keeps, which
/// only these owning containers guarantee.
pub trait DestList<'r>: sealed::Sealed {
    /// The buffers, in scatter order.
    fn bufs(&self) -> &[DestBuf<'r>];
}

impl sealed::Sealed for DestBuf<'_> {}
impl<'r> DestList<'r> for DestBuf<'r> {
    #[inline]
    fn bufs(&self) -> &[DestBuf<'r>] {
        core::slice::from_ref(self)
    }
}

impl<const N: usize> sealed::Sealed for [DestBuf<'_>; N] {}
impl<'r, const N: usize> DestList<'r> for [DestBuf<'r>; N] {
    #[inline]
    fn bufs(&self) -> &[DestBuf<'r>] {
        self
    }
}

#[cfg(feature = "std")]
impl sealed::Sealed for std::vec::Vec<DestBuf<'_>> {}
/// A list whose length is known only at run time (with the `std` feature).
#[cfg(feature = "std")]
impl<'r> DestList<'r> for std::vec::Vec<DestBuf<'r>> {
    #[inline]
    fn bufs(&self) -> &[DestBuf<'r>] {
        self
    }
}

/// Where a READ, receive or atomic writes: owned buffers (only the core's posting calls build
/// this form) or, through `unsafe`, raw scatter elements.
#[derive(Clone, Copy, Debug)]
pub struct Dest<'a, 'r>(DestKind<'a, 'r>);

/// The two forms of a [`Dest`], for backends.
#[derive(Clone, Copy, Debug)]
pub enum DestKind<'a, 'r> {
    /// Buffers the request owns until it retires.
    Bufs(&'a [DestBuf<'r>]),
    /// Raw elements under [`Dest::raw`]'s contract.
    Raw(&'a [Sge]),
}

impl<'a, 'r> Dest<'a, 'r> {
    /// Owned buffers: the caller moves them into a [`Pending`] once the post succeeds.
    #[inline]
    pub(crate) const fn bufs(b: &'a [DestBuf<'r>]) -> Self {
        Dest(DestKind::Bufs(b))
    }

    /// Raw elements, as `ibv_post_recv` and `ibv_post_send` take them.
    ///
    /// # Safety
    /// Every element must name memory registered under its `lkey` (with local write) that stays
    /// allocated and registered, and that nothing reads or writes, until the request's
    /// completion (or flush) is reaped.
    #[allow(unsafe_code)]
    #[inline]
    pub const unsafe fn raw(sges: &'a [Sge]) -> Self {
        Dest(DestKind::Raw(sges))
    }

    /// The form, for backends.
    #[inline]
    pub const fn kind(&self) -> &DestKind<'a, 'r> {
        &self.0
    }

    /// Number of elements.
    #[inline]
    pub fn count(&self) -> usize {
        match self.0 {
            DestKind::Bufs(b) => b.len(),
            DestKind::Raw(s) => s.len(),
        }
    }

    /// Total bytes, or `None` above 2^31.
    #[inline]
    pub fn total_len(&self) -> Option<u32> {
        let total: u64 = match self.0 {
            DestKind::Bufs(b) => b.iter().map(|d| d.len32() as u64).sum(),
            DestKind::Raw(s) => s.iter().map(|e| e.length as u64).sum(),
        };
        if total > 1 << 31 {
            None
        } else {
            Some(total as u32)
        }
    }

    /// The `i`-th element as the device is given it.
    #[inline]
    pub fn sge(&self, i: usize) -> Option<Sge> {
        match self.0 {
            DestKind::Bufs(b) => b.get(i).map(DestBuf::sge),
            DestKind::Raw(s) => s.get(i).copied(),
        }
    }
}

/// A queue's identity, unique among the queues of the process (a counter, never reused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QueueId(u64);

static NEXT_QUEUE: AtomicU64 = AtomicU64::new(1);

impl QueueId {
    /// No queue: what an idle [`DestSlot`] holds ([`QueueId::new`] never returns it).
    pub(crate) const IDLE: QueueId = QueueId(0);

    /// A fresh identity (a backend takes one when it creates a queue: control path).
    pub fn new() -> Self {
        QueueId(NEXT_QUEUE.fetch_add(1, Ordering::Relaxed))
    }
}

impl Default for QueueId {
    fn default() -> Self {
        Self::new()
    }
}

/// The direction of a work queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The send queue (READs and atomics write local memory).
    Send,
    /// The receive queue.
    Recv,
}

/// How far a queue's requests have retired, per direction: what [`Pending::reclaim`] asks.
///
/// Requests of one direction are numbered from 0 in posting order (committed or not: a
/// rolled-back request's number is given again); `retired(side)` is how many of them have
/// retired, which work queues do in order.
///
/// # Safety
/// Implementors guarantee that a request counts as retired only once the device can no longer
/// write its buffers (its completion, a later completion of the same queue, or its flush was
/// reaped, or the queue was destroyed), that the numbers match the ones the queue's posting
/// primitives ([`crate::SendQueue::posted`], [`crate::RecvQueue::recv_posted`]) gave (on a
/// send queue, the `k`-th push accepted at a cursor, from 0, is number `posted() + k`, as a
/// [`crate::Batch`] counts them), and that
/// `queue_id` is the queue's own, taken from [`QueueId::new`]. [`Pending::reclaim`] hands
/// buffers back on their word.
#[allow(unsafe_code)]
pub unsafe trait Retired {
    /// The queue's identity.
    fn queue_id(&self) -> QueueId;
    /// Requests of `side` retired so far.
    fn retired(&self, side: Side) -> u64;
}

/// Buffers of a posted request, out of reach until the request retires.
#[must_use = "dropping a Pending leaks its buffers; reclaim it after the completion"]
#[derive(Debug)]
pub struct Pending<B> {
    bufs: B,
    queue: QueueId,
    side: Side,
    seq: u64,
}

impl<B> Pending<B> {
    /// Wrap `bufs` of request `seq` of `side` on `queue` (the core's posting calls do).
    #[inline]
    pub(crate) fn new(bufs: B, queue: QueueId, side: Side, seq: u64) -> Self {
        Pending { bufs, queue, side, seq }
    }

    /// Whether `q` (the queue it was posted on) has retired the request.
    #[inline]
    pub fn is_done(&self, q: &(impl Retired + ?Sized)) -> bool {
        q.queue_id() == self.queue && q.retired(self.side) > self.seq
    }

    /// The buffers back, if `q` retired the request; else `self` again.
    #[inline]
    pub fn reclaim(self, q: &(impl Retired + ?Sized)) -> core::result::Result<B, Self> {
        if self.is_done(q) {
            Ok(self.bufs)
        } else {
            Err(self)
        }
    }

    /// The request's number in its queue and direction.
    #[inline]
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The buffers, for building the request (the core's posting calls, before posting).
    #[inline(always)]
    pub(crate) fn lent(&self) -> &B {
        &self.bufs
    }

    /// The buffers of a request that was refused (the device never saw them).
    #[inline(always)]
    pub(crate) fn refused(self) -> B {
        self.bufs
    }
}

/// Buffers that stay in one place across the requests that write them: the in-place form of
/// [`Pending`], for buffers posted again and again (a ring of READ destinations, receive
/// buffers).
///
/// A slot is *idle* (its buffers are the caller's, through [`get`](Self::get) and
/// [`get_idle`](Self::get_idle)) or *busy* (a request posted from it, by
/// [`Post::post_readv_in`](crate::Post::post_readv_in),
/// [`Post::post_dest_in`](crate::Post::post_dest_in) or
/// [`RecvQueue::post_recvv_in`](crate::RecvQueue::post_recvv_in), may still write them, and
/// the slot offers no access to them). Posting from a busy slot is refused; a busy slot turns
/// idle in [`get`](Self::get) once the queue it was posted on reports the request retired,
/// the same check as [`Pending::reclaim`]. Nothing is moved: a request is built from the
/// buffers where they lie, so a slot of several buffers costs no copies to post or to take
/// back.
///
/// The slot is marked busy before the request is posted (and idle again if the post is
/// refused), so a post that unwinds half-way leaves it busy: its buffers stay out of reach,
/// as a [`Pending`] dropped by the unwinding would. Dropping or leaking a busy slot is a leak,
/// as for a [`Pending`].
///
/// ```compile_fail,E0616
/// # fn f<'r, Q: rdma_pmd::Post<'r>>(q: &mut Q, buf: rdma_pmd::DestBuf<'r>) {
/// let mut slot = rdma_pmd::DestSlot::new(buf);
/// q.post_readv_in(1, &mut slot, rdma_pmd::SendFlags::SIGNALED, rdma_pmd::RemoteBuf::default())
///     .unwrap();
/// let mut out = [0u8; 8];
/// slot.bufs.read(0, &mut out); // a busy slot offers no access to its buffers
/// # }
/// ```
#[derive(Debug)]
pub struct DestSlot<B> {
    bufs: B,
    /// The queue of the request in flight; [`QueueId::IDLE`] when there is none.
    queue: QueueId,
    side: Side,
    seq: u64,
}

impl<B> DestSlot<B> {
    /// An idle slot holding `bufs`.
    #[inline]
    pub const fn new(bufs: B) -> Self {
        DestSlot { bufs, queue: QueueId::IDLE, side: Side::Send, seq: 0 }
    }

    /// Whether no request posted from the slot may still write its buffers.
    #[inline(always)]
    pub fn is_idle(&self) -> bool {
        self.queue == QueueId::IDLE
    }

    /// Whether the slot is idle, or `q` (the queue its request was posted on) has retired
    /// the request.
    #[inline(always)]
    pub fn is_done(&self, q: &(impl Retired + ?Sized)) -> bool {
        // Idle is tested only when the queue differs (no queue has the idle identity), so a
        // busy slot costs the same two compares as a `Pending`.
        if q.queue_id() == self.queue {
            q.retired(self.side) > self.seq
        } else {
            self.is_idle()
        }
    }

    /// The buffers, in place, if the slot is idle or `q` retired its request (the slot is
    /// idle afterwards); else `None`.
    #[inline]
    pub fn get(&mut self, q: &(impl Retired + ?Sized)) -> Option<&mut B> {
        if self.is_done(q) {
            self.queue = QueueId::IDLE;
            Some(&mut self.bufs)
        } else {
            None
        }
    }

    /// The buffers, if the slot is idle.
    #[inline]
    pub fn get_idle(&mut self) -> Option<&mut B> {
        if self.is_idle() {
            Some(&mut self.bufs)
        } else {
            None
        }
    }

    /// The buffers back, out of the slot, if it is idle or `q` retired its request; else the
    /// slot again.
    #[inline]
    pub fn into_inner(self, q: &(impl Retired + ?Sized)) -> core::result::Result<B, Self> {
        if self.is_done(q) {
            Ok(self.bufs)
        } else {
            Err(self)
        }
    }

    /// The number of the request in flight in its queue and direction (`None` when idle).
    #[inline]
    pub fn seq(&self) -> Option<u64> {
        if self.is_idle() {
            None
        } else {
            Some(self.seq)
        }
    }

    /// Mark the slot busy with request `seq` of `side` on `queue`, and lend its buffers for
    /// building that request (the core's posting calls do, before posting).
    #[inline(always)]
    pub(crate) fn lend(&mut self, queue: QueueId, side: Side, seq: u64) -> &B {
        self.queue = queue;
        self.side = side;
        self.seq = seq;
        &self.bufs
    }

    /// Undo [`lend`](Self::lend) for a post that was refused (the device never saw the
    /// buffers).
    #[inline(always)]
    pub(crate) fn refused(&mut self) {
        self.queue = QueueId::IDLE;
    }
}

impl<B> From<Pending<B>> for DestSlot<B> {
    /// A slot busy with the pending request.
    #[inline]
    fn from(p: Pending<B>) -> Self {
        DestSlot { bufs: p.bufs, queue: p.queue, side: p.side, seq: p.seq }
    }
}

/// A refused post: the error, and the buffers back untouched.
#[derive(Debug)]
pub struct Refused<B> {
    /// Why.
    pub error: Error,
    /// The buffers, which the device never saw.
    pub bufs: B,
}

impl<B> From<Refused<B>> for Error {
    fn from(r: Refused<B>) -> Error {
        r.error
    }
}
