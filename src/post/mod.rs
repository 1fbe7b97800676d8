//! The posting API, modelled on librdmacm's `rdma_post_writev`.
//!
//! ```text
//! int rdma_post_writev(struct rdma_cm_id *id, void *context, struct ibv_sge *sgl, int nsge,
//!                      int flags, uint64_t remote_addr, uint32_t rkey);
//! ```
//!
//! becomes [`Post::post_writev`]`(context, sgl, flags, RemoteBuf { addr, rkey })`:
//! `context` comes back as [`Completion::wr_id`](crate::Completion::wr_id), errors carry the errno
//! librdmacm would set, and the SGEs are [`LocalBuf`]s borrowed from registered regions, so the
//! buffers outlive the request (see [`crate::region`]).
//!
//! A backend implements the primitives of [`SendQueue`] (open a batch, push a request into the
//! ring without telling the device, ring the doorbell for what was pushed, roll back what was
//! pushed, poll completions, report capabilities). Everything else, the single post, the batch
//! with one doorbell, inline and immediate forms and the raw unsafe form, is written here once.
//!
//! An open batch's position in the ring (the backend's [`SendQueue::Cursor`]) lives in the
//! [`Batch`], a local of the caller's loop, not in the queue: the queue's memory escapes (its
//! ring and the regions' counters are written through raw pointers and shared references the
//! compiler cannot tell apart from it), so a position kept there is stored and reloaded on
//! every request, while a local one stays in registers for the whole batch.
//!
//! Semantics copied from rdma-core:
//! * zero SGEs is a valid zero-length RDMA WRITE; zero-length SGEs are skipped by mlx5;
//! * with [`SendFlags::INLINE`] the bytes are copied into the request at post time and need no
//!   registration ([`Post::post_write_inline`]); with registered buffers and `INLINE`, the
//!   registered bytes are copied the same way;
//! * a batch is `ibv_wr_start` / `ibv_wr_*` / `ibv_wr_complete` (one doorbell) and dropping it
//!   uncommitted is `ibv_wr_abort`.
//!
//! The request types are in `post/request.rs`, the receive queue in `post/recv.rs`, the batch
//! in `post/batch.rs`.

use core::marker::PhantomData;

use crate::addr::{QpNum, RemoteBuf, UdDest};
use crate::completion::Completion;
use crate::dest::{Dest, DestBuf, DestList, DestSlot, Pending, QueueId, Refused, Retired, Side};
use crate::error::{Error, Result};
use crate::flags::SendFlags;
use crate::region::LocalBuf;
use crate::sge::Sge;

mod batch;
mod recv;
mod request;

pub use batch::Batch;
pub use recv::{RecvCaps, RecvQueue};
pub use request::{
    check_message, AtomicOp, Caps, SendOp, SendRequest, Source, SourceKind, ATOMIC_LEN,
    INLINE_CHUNK, MAX_MESSAGE,
};

/// The error of a post from a [`DestSlot`] whose request has not retired.
#[cold]
fn slot_busy() -> Error {
    Error::InvalidArgument("the slot's request has not retired")
}

/// A backend's send queue (with its completion queue): the primitives every posting form is
/// built from.
///
/// `'r` is the lifetime of the registered regions the queue may read from; a queue never
/// outlives it.
///
/// Contract for implementors:
/// * [`begin`](SendQueue::begin) opens a batch and returns its cursor; the caller threads that
///   cursor through the batch's pushes and hands it back to exactly one `commit` or `abort`,
///   or forgets it (a leaked [`Batch`]); between `begin` and that call the caller touches the
///   queue through nothing else;
/// * [`push`](SendQueue::push) checks the request ([`SendRequest::check`] or the same checks
///   on its own path), then either writes the whole request into the ring (not yet visible
///   to the device) and advances the cursor by that one request, returning `Ok`, or changes
///   neither and returns the error; so the `k`-th request accepted at a cursor (from 0) is
///   number [`posted`](SendQueue::posted)` + k`, the number [`Retired`] counts it by;
/// * [`commit`](SendQueue::commit) makes every request pushed at the cursor visible with one
///   doorbell (with nothing pushed it changes nothing);
/// * [`abort`](SendQueue::abort) forgets every request pushed at the cursor, releasing what
///   they acquired, as if they had never been pushed;
/// * a cursor that is forgotten instead leaves the queue as if its requests had never been
///   pushed, except that the regions they acquired stay counted (a leak, never a shift of
///   another request's accounting): the next `begin` starts where the forgotten one did;
/// * [`poll`](SendQueue::poll) never blocks: it fills at most `out.len()` completions and
///   returns how many. Every committed request that asked for a completion (or failed, or was
///   flushed) is reported exactly once.
///
/// The four cursor primitives are `unsafe` to call: a cursor used twice, after a later
/// `begin`, or on another queue would break the queue's accounting. [`Post`] and
/// [`Batch`] are the safe API over them; a backend still keeps memory safe when they are
/// misused (its loops are bounded and its retirement reads only its own bookkeeping).
pub trait SendQueue<'r>: Retired {
    /// Where an open batch stands: the backend's ring position and what was pushed at it.
    /// Backends with nothing to keep there use `()`.
    type Cursor: Copy;
    /// What the queue accepts.
    fn caps(&self) -> Caps;
    /// The local QP number.
    fn qp_num(&self) -> QpNum;
    /// Open a batch.
    ///
    /// # Safety
    /// The cursor is used only on this queue, and only until it is committed, aborted, or a
    /// later `begin` on this queue.
    #[allow(unsafe_code)]
    unsafe fn begin(&mut self) -> Self::Cursor;
    /// Write one request into the ring at `at` without ringing the doorbell.
    ///
    /// # Safety
    /// `at` came from this queue's latest `begin` and was not committed or aborted yet.
    #[allow(unsafe_code)]
    unsafe fn push(&mut self, at: &mut Self::Cursor, req: &SendRequest<'_, 'r>) -> Result<()>;
    /// Requests pushed at `at` (meaningless, but harmless, for a cursor that is not live).
    fn pushed(&self, at: &Self::Cursor) -> u32;
    /// Requests committed so far, since the queue was created: the number the next request
    /// pushed after a fresh `begin` gets ([`Retired`] counts against it).
    fn posted(&self) -> u64;
    /// Ring the doorbell for everything pushed at `at`.
    ///
    /// # Safety
    /// As for [`push`](Self::push); afterwards `at` is dead.
    #[allow(unsafe_code)]
    unsafe fn commit(&mut self, at: Self::Cursor);
    /// Forget everything pushed at `at`.
    ///
    /// # Safety
    /// As for [`push`](Self::push); afterwards `at` is dead.
    #[allow(unsafe_code)]
    unsafe fn abort(&mut self, at: Self::Cursor);
    /// Push one request and ring the doorbell for it alone: [`begin`](Self::begin),
    /// [`push`](Self::push), then [`commit`](Self::commit), or [`abort`](Self::abort) when
    /// the push is refused, which is what this default does. A backend may override it with a
    /// path that skips what a batch needs and a lone request does not; it must leave the
    /// queue exactly as that sequence would.
    // Not always inlined: `Post::post` is, at every call site of every posting call, and a
    // backend's whole push would go with it.
    #[inline]
    fn post_one(&mut self, req: &SendRequest<'_, 'r>) -> Result<()> {
        // SAFETY: the cursor lives in this call only and is handed back exactly once.
        #[allow(unsafe_code)]
        unsafe {
            let mut at = self.begin();
            if let Err(e) = self.push(&mut at, req) {
                self.abort(at);
                return Err(e);
            }
            self.commit(at);
        }
        Ok(())
    }
    /// Reap completions into `out`; returns how many were written. Never blocks.
    fn poll(&mut self, out: &mut [Completion]) -> Result<usize>;
    /// Requests committed and not retired yet. A request retires when its completion is
    /// reaped, or, unsignalled, when a later completion implies it executed: an unsignalled
    /// request that executed with no later completion (no signalled request after it, no
    /// flush) stays counted here, and its regions busy, until one arrives or the queue is
    /// destroyed, as in rdma-core.
    fn outstanding(&self) -> u32;
}

mod sealed {
    /// Only queues and batches post: the numbers they give [`super::Pending`]s and
    /// [`super::DestSlot`]s come from the backend's [`super::SendQueue`], whose
    /// [`super::Retired`] is an `unsafe` promise.
    pub trait Sealed {}
    impl<'r, Q: super::SendQueue<'r> + ?Sized> Sealed for Q {}
    impl<'r, Q: super::SendQueue<'r> + ?Sized> Sealed for super::Batch<'_, 'r, Q> {}
}

/// What a post that hands buffers to the device returns: the buffers, held until the request
/// retires, or the error with the buffers back.
pub type Posted<B> = core::result::Result<Pending<B>, Refused<B>>;

/// The librdmacm-style posting calls (`rdma_post_writev`, `rdma_post_readv`,
/// `rdma_post_sendv`, the atomics), written once: a queue posts each request with its own
/// doorbell, a [`Batch`] appends it under the batch's one doorbell.
pub trait Post<'r>: sealed::Sealed {
    /// Post one request: on a queue, push it and ring the doorbell; in a batch, append it.
    fn post(&mut self, req: &SendRequest<'_, 'r>) -> Result<()>;

    /// The queue and number the next request posted here gets (for [`Pending`]).
    fn next_seq(&self) -> (QueueId, u64);

    /// Post a request that writes `bufs`, which stay out of reach until it retires.
    #[inline]
    fn post_dest<B: DestList<'r>>(
        &mut self,
        bufs: B,
        req: impl for<'a> FnOnce(Dest<'a, 'r>) -> SendRequest<'a, 'r>,
    ) -> Posted<B> {
        let (queue, seq) = self.next_seq();
        // The `Pending` first, the request built from the buffers inside it: they are moved
        // once, not held aside across the post.
        let p = Pending::new(bufs, queue, Side::Send, seq);
        match self.post(&req(Dest::bufs(p.lent().bufs()))) {
            Ok(()) => Ok(p),
            Err(error) => Err(Refused { error, bufs: p.refused() }),
        }
    }

    /// Post a request that writes the buffers of `slot` where they lie: the slot is busy (its
    /// buffers out of reach) until the request retires. Refused, with the slot unchanged, if
    /// the slot is busy already or the request is.
    #[inline(always)]
    fn post_dest_in<B: DestList<'r>>(
        &mut self,
        slot: &mut DestSlot<B>,
        req: impl for<'a> FnOnce(Dest<'a, 'r>) -> SendRequest<'a, 'r>,
    ) -> Result<()> {
        if !slot.is_idle() {
            return Err(slot_busy());
        }
        let (queue, seq) = self.next_seq();
        // Busy before the request can reach the device (see `DestSlot`).
        let res = self.post(&req(Dest::bufs(slot.lend(queue, Side::Send, seq).bufs())));
        if res.is_err() {
            slot.refused();
        }
        res
    }

    /// `rdma_post_writev`: gather `sgl` into `remote`.
    #[inline(always)]
    fn post_writev(
        &mut self,
        wr_id: u64,
        sgl: &[LocalBuf<'r>],
        flags: SendFlags,
        remote: RemoteBuf,
    ) -> Result<()> {
        self.post(&SendRequest::write(wr_id, Source::sgl(sgl), flags, remote, None))
    }

    /// `rdma_post_write`: one registered buffer.
    #[inline(always)]
    fn post_write(
        &mut self,
        wr_id: u64,
        buf: LocalBuf<'r>,
        flags: SendFlags,
        remote: RemoteBuf,
    ) -> Result<()> {
        self.post_writev(wr_id, core::slice::from_ref(&buf), flags, remote)
    }

    /// RDMA WRITE WITH IMMEDIATE: as `post_writev`, and the peer gets `imm` in a completion.
    #[inline]
    fn post_write_imm(
        &mut self,
        wr_id: u64,
        sgl: &[LocalBuf<'r>],
        flags: SendFlags,
        remote: RemoteBuf,
        imm: u32,
    ) -> Result<()> {
        self.post(&SendRequest::write(wr_id, Source::sgl(sgl), flags, remote, Some(imm)))
    }

    /// Write plain bytes inline (`IBV_SEND_INLINE`): no registration, the bytes may be reused as
    /// soon as this returns.
    #[inline]
    fn post_write_inline(
        &mut self,
        wr_id: u64,
        data: &[&[u8]],
        flags: SendFlags,
        remote: RemoteBuf,
    ) -> Result<()> {
        let flags = flags | SendFlags::INLINE;
        self.post(&SendRequest::write(wr_id, Source::inline(data), flags, remote, None))
    }

    /// `rdma_post_writev` with raw elements, exactly as rdma-core takes them.
    ///
    /// # Safety
    /// As [`Source::raw`]: the memory behind every element must stay allocated and registered
    /// until the request's completion is reaped.
    #[allow(unsafe_code)]
    unsafe fn post_writev_raw(
        &mut self,
        wr_id: u64,
        sgl: &[Sge],
        flags: SendFlags,
        remote: RemoteBuf,
        imm: Option<u32>,
    ) -> Result<()> {
        // SAFETY: forwarded to our caller.
        let source = unsafe { Source::raw(sgl) };
        self.post(&SendRequest::write(wr_id, source, flags, remote, imm))
    }

    /// `rdma_post_sendv`: gather `sgl` into the peer's next receive.
    #[inline]
    fn post_sendv(&mut self, wr_id: u64, sgl: &[LocalBuf<'r>], flags: SendFlags) -> Result<()> {
        let op = SendOp::Send { source: Source::sgl(sgl), imm: None, ud: None };
        self.post(&SendRequest { wr_id, flags, op })
    }

    /// `rdma_post_send`: one registered buffer.
    #[inline]
    fn post_send(&mut self, wr_id: u64, buf: LocalBuf<'r>, flags: SendFlags) -> Result<()> {
        self.post_sendv(wr_id, core::slice::from_ref(&buf), flags)
    }

    /// SEND WITH IMMEDIATE: the peer's receive completion carries `imm`.
    #[inline]
    fn post_send_imm(
        &mut self,
        wr_id: u64,
        sgl: &[LocalBuf<'r>],
        flags: SendFlags,
        imm: u32,
    ) -> Result<()> {
        let op = SendOp::Send { source: Source::sgl(sgl), imm: Some(imm), ud: None };
        self.post(&SendRequest { wr_id, flags, op })
    }

    /// Send plain bytes inline (`IBV_SEND_INLINE`): no registration.
    #[inline]
    fn post_send_inline(&mut self, wr_id: u64, data: &[&[u8]], flags: SendFlags) -> Result<()> {
        let op = SendOp::Send { source: Source::inline(data), imm: None, ud: None };
        self.post(&SendRequest { wr_id, flags: flags | SendFlags::INLINE, op })
    }

    /// A datagram to `dest` (UD and GSI queue pairs): `ibv_post_send` with `wr.ud` set.
    #[inline]
    fn post_send_ud(
        &mut self,
        wr_id: u64,
        source: Source<'_, 'r>,
        flags: SendFlags,
        dest: &UdDest,
        imm: Option<u32>,
    ) -> Result<()> {
        let op = SendOp::Send { source, imm, ud: Some(*dest) };
        self.post(&SendRequest { wr_id, flags, op })
    }

    /// `rdma_post_sendv` with raw elements.
    ///
    /// # Safety
    /// As [`Source::raw`].
    #[allow(unsafe_code)]
    unsafe fn post_sendv_raw(
        &mut self,
        wr_id: u64,
        sgl: &[Sge],
        flags: SendFlags,
        imm: Option<u32>,
        ud: Option<UdDest>,
    ) -> Result<()> {
        // SAFETY: forwarded to our caller.
        let source = unsafe { Source::raw(sgl) };
        self.post(&SendRequest { wr_id, flags, op: SendOp::Send { source, imm, ud } })
    }

    /// `rdma_post_readv`: read `remote` into `bufs`, which come back from the [`Pending`] once
    /// the READ retires.
    #[inline]
    fn post_readv<B: DestList<'r>>(
        &mut self,
        wr_id: u64,
        bufs: B,
        flags: SendFlags,
        remote: RemoteBuf,
    ) -> Posted<B> {
        self.post_dest(bufs, |dest| SendRequest { wr_id, flags, op: SendOp::Read { dest, remote } })
    }

    /// `rdma_post_readv` into the buffers of `slot`, in place: they stay out of reach until
    /// the READ retires ([`DestSlot::get`]). Refused, with the slot unchanged, if it is busy.
    #[inline(always)]
    fn post_readv_in<B: DestList<'r>>(
        &mut self,
        wr_id: u64,
        slot: &mut DestSlot<B>,
        flags: SendFlags,
        remote: RemoteBuf,
    ) -> Result<()> {
        self.post_dest_in(slot, |dest| SendRequest {
            wr_id,
            flags,
            op: SendOp::Read { dest, remote },
        })
    }

    /// `rdma_post_read`: one destination buffer.
    #[inline]
    fn post_read(
        &mut self,
        wr_id: u64,
        buf: DestBuf<'r>,
        flags: SendFlags,
        remote: RemoteBuf,
    ) -> Posted<DestBuf<'r>> {
        self.post_readv(wr_id, buf, flags, remote)
    }

    /// `rdma_post_readv` with raw elements.
    ///
    /// # Safety
    /// As [`Dest::raw`]: the memory must stay allocated and registered, and untouched, until the
    /// READ retires.
    #[allow(unsafe_code)]
    unsafe fn post_readv_raw(
        &mut self,
        wr_id: u64,
        sgl: &[Sge],
        flags: SendFlags,
        remote: RemoteBuf,
    ) -> Result<()> {
        // SAFETY: forwarded to our caller.
        let dest = unsafe { Dest::raw(sgl) };
        self.post(&SendRequest { wr_id, flags, op: SendOp::Read { dest, remote } })
    }

    /// Atomic compare-and-swap of the 8 bytes at `remote` (8-aligned): `swap` is stored if they
    /// hold `compare`; the value found lands in the first 8 bytes of `result`.
    #[inline]
    fn post_cas(
        &mut self,
        wr_id: u64,
        result: DestBuf<'r>,
        flags: SendFlags,
        remote: RemoteBuf,
        compare: u64,
        swap: u64,
    ) -> Posted<DestBuf<'r>> {
        let op = AtomicOp::CompareSwap { compare, swap };
        self.post_dest(result, |dest| SendRequest {
            wr_id,
            flags,
            op: SendOp::Atomic { dest, remote, op },
        })
    }

    /// Atomic fetch-and-add on the 8 bytes at `remote` (8-aligned); the value before the add
    /// lands in the first 8 bytes of `result`.
    #[inline]
    fn post_faa(
        &mut self,
        wr_id: u64,
        result: DestBuf<'r>,
        flags: SendFlags,
        remote: RemoteBuf,
        add: u64,
    ) -> Posted<DestBuf<'r>> {
        let op = AtomicOp::FetchAdd { add };
        self.post_dest(result, |dest| SendRequest {
            wr_id,
            flags,
            op: SendOp::Atomic { dest, remote, op },
        })
    }

    /// Start a batch: requests posted to it are rung with one doorbell on
    /// [`Batch::commit`], or forgotten if the batch is dropped.
    #[inline(always)]
    fn batch(&mut self) -> Batch<'_, 'r, Self>
    where
        Self: SendQueue<'r>,
    {
        // SAFETY: the cursor goes into the batch, which holds the queue's only borrow until it
        // commits, aborts on drop, or is forgotten.
        #[allow(unsafe_code)]
        let at = unsafe { self.begin() };
        let (queue, first) = (self.queue_id(), self.posted());
        Batch { q: self, at, queue, next: first, done: false, _r: PhantomData }
    }

    /// Busy-poll until at least one completion arrives or `max_polls` polls found nothing.
    fn poll_bounded(&mut self, out: &mut [Completion], max_polls: u64) -> Result<usize>
    where
        Self: SendQueue<'r>,
    {
        poll_until(|out| self.poll(out), out, max_polls, "a completion")
    }
}

/// Call `poll` on `out` until it returns at least one completion, at most `max_polls` times
/// (at least once): the bounded wait of [`Post::poll_bounded`] and
/// [`RecvQueue::poll_recv_bounded`], which times out naming `what` it waited for.
pub(crate) fn poll_until(
    mut poll: impl FnMut(&mut [Completion]) -> Result<usize>,
    out: &mut [Completion],
    max_polls: u64,
    what: &'static str,
) -> Result<usize> {
    for _ in 0..max_polls.max(1) {
        let n = poll(out)?;
        if n > 0 {
            return Ok(n);
        }
        core::hint::spin_loop();
    }
    Err(Error::Timeout(what))
}

impl<'r, Q: SendQueue<'r> + ?Sized> Post<'r> for Q {
    /// Push the request and ring the doorbell for it alone ([`SendQueue::post_one`]).
    // Always inlined, so that a backend's `post_one` sees the request as its caller built it
    // and can pick its path there. A backend keeps what it inlines small: the posting calls
    // are always inlined too, so every call site takes it (a whole push there makes a crate
    // that posts in many places compile for tens of minutes).
    #[inline(always)]
    fn post(&mut self, req: &SendRequest<'_, 'r>) -> Result<()> {
        self.post_one(req)
    }

    #[inline]
    fn next_seq(&self) -> (QueueId, u64) {
        (self.queue_id(), self.posted())
    }
}

#[cfg(test)]
mod tests;
