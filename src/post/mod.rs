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

use core::marker::PhantomData;

use crate::addr::{QpNum, RemoteBuf, UdDest};
use crate::completion::Completion;
use crate::dest::{Dest, DestBuf, DestList, DestSlot, Pending, QueueId, Refused, Retired, Side};
use crate::error::{Error, Result};
use crate::flags::SendFlags;
use crate::region::LocalBuf;
use crate::sge::Sge;

/// What a send queue accepts, fixed when it is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Caps {
    /// Requests of the smallest size that fit at once (`ibv_qp_cap.max_send_wr`).
    pub max_send_wr: u32,
    /// Scatter-gather elements per request (`ibv_qp_cap.max_send_sge`).
    pub max_sge: u32,
    /// Inline payload bytes per request (`ibv_qp_cap.max_inline_data`).
    pub max_inline: u32,
}

/// Where a write's payload comes from.
#[derive(Clone, Copy, Debug)]
pub enum SourceKind<'a, 'r> {
    /// Registered buffers, gathered in order.
    Sgl(&'a [LocalBuf<'r>]),
    /// Plain bytes, copied into the request (no registration).
    Inline(&'a [&'a [u8]]),
    /// Raw scatter-gather elements; only reachable through `unsafe` ([`Source::raw`]).
    #[non_exhaustive]
    Raw(&'a [Sge]),
}

/// The payload of a write request. Construct with [`Source::sgl`], [`Source::inline`] or the
/// `unsafe` [`Source::raw`].
#[derive(Clone, Copy, Debug)]
pub struct Source<'a, 'r>(SourceKind<'a, 'r>);

impl<'a, 'r> Source<'a, 'r> {
    /// Registered buffers.
    #[inline]
    pub const fn sgl(sgl: &'a [LocalBuf<'r>]) -> Self {
        Source(SourceKind::Sgl(sgl))
    }

    /// Bytes to copy inline.
    #[inline]
    pub const fn inline(data: &'a [&'a [u8]]) -> Self {
        Source(SourceKind::Inline(data))
    }

    /// Raw elements, as `ibv_post_send` takes them.
    ///
    /// # Safety
    /// Every element must name memory registered under its `lkey` that stays allocated and
    /// registered until the request's completion is reaped. With [`SendFlags::INLINE`] each
    /// `addr` must instead be a CPU address readable for `length` bytes during the post.
    #[allow(unsafe_code)]
    pub const unsafe fn raw(sgl: &'a [Sge]) -> Self {
        Source(SourceKind::Raw(sgl))
    }

    /// The payload, for backends.
    #[inline]
    pub const fn kind(&self) -> &SourceKind<'a, 'r> {
        &self.0
    }

    /// Number of elements (buffers or inline pieces).
    #[inline]
    pub fn count(&self) -> usize {
        match self.0 {
            SourceKind::Sgl(s) => s.len(),
            SourceKind::Inline(s) => s.len(),
            SourceKind::Raw(s) => s.len(),
        }
    }

    /// Hand the payload's bytes, in order, to `f` for an inline copy. Plain inline pieces go
    /// as they are; the bytes of registered buffers (and, under [`Source::raw`]'s contract,
    /// raw elements) are first copied into a bounce buffer of [`INLINE_CHUNK`] bytes on the
    /// stack, so that no reference into memory the device shares is ever formed. This is the
    /// one place that reads a source's bytes through its raw parts: backends stay safe.
    #[inline]
    pub fn for_each_inline_chunk(&self, mut f: impl FnMut(&[u8])) {
        match self.0 {
            SourceKind::Inline(pieces) => pieces.iter().for_each(|p| f(p)),
            SourceKind::Sgl(bufs) => {
                for b in bufs {
                    bounce(b.as_ptr(), b.len(), &mut f);
                }
            }
            SourceKind::Raw(sges) => {
                for e in sges {
                    bounce(e.addr as usize as *const u8, e.length as usize, &mut f);
                }
            }
        }
    }

    /// Total payload bytes, or `None` if it overflows 32 bits (an RDMA message is at most
    /// 2^31 bytes).
    #[inline]
    pub fn total_len(&self) -> Option<u32> {
        let mut total: u64 = 0;
        match self.0 {
            SourceKind::Sgl(s) => s.iter().for_each(|b| total += b.len() as u64),
            SourceKind::Inline(s) => s.iter().for_each(|b| total += b.len() as u64),
            SourceKind::Raw(s) => s.iter().for_each(|e| total += e.length as u64),
        }
        if total > 1 << 31 {
            None
        } else {
            Some(total as u32)
        }
    }
}

/// Bytes of a registered or raw source copied out per step of [`Source::for_each_inline_chunk`].
pub const INLINE_CHUNK: usize = 64;

/// Copy `len` bytes at `p` through a stack buffer into `f`, a chunk at a time.
#[inline]
fn bounce(p: *const u8, len: usize, f: &mut impl FnMut(&[u8])) {
    let mut buf = [0u8; INLINE_CHUNK];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(INLINE_CHUNK);
        // SAFETY: `p` is readable for `len` bytes: a `LocalBuf`'s pointer is, by
        // `LocalBuf::from_raw_parts`' contract, for as long as the buffer is borrowed (it is,
        // by the source), and a raw element's address is, by `Source::raw`'s contract, for the
        // duration of the post. The copy is made of atomic accesses (a peer may be writing the
        // region) and forms no reference into that memory.
        #[allow(unsafe_code)]
        unsafe {
            crate::access::load_bytes(p.add(done), &mut buf[..n])
        };
        f(&buf[..n]);
        done += n;
    }
}

/// What a send-queue request does (`ibv_send_wr.opcode` and the fields it uses).
#[derive(Clone, Copy, Debug)]
pub enum SendOp<'a, 'r> {
    /// `IBV_WR_RDMA_WRITE`, or `IBV_WR_RDMA_WRITE_WITH_IMM` with `imm`.
    Write {
        /// The payload.
        source: Source<'a, 'r>,
        /// Where it goes.
        remote: RemoteBuf,
        /// Immediate data: a number, sent big-endian, that the peer reads back as
        /// `be32toh(wc.imm_data)`.
        imm: Option<u32>,
    },
    /// `IBV_WR_SEND`, or `IBV_WR_SEND_WITH_IMM` with `imm`; to a datagram destination on a UD
    /// or GSI queue pair.
    Send {
        /// The payload.
        source: Source<'a, 'r>,
        /// Immediate data, as for writes.
        imm: Option<u32>,
        /// The destination of a datagram (UD and GSI queue pairs only).
        ud: Option<UdDest>,
    },
    /// `IBV_WR_RDMA_READ`: the remote bytes are scattered into `dest`.
    Read {
        /// Where the bytes land.
        dest: Dest<'a, 'r>,
        /// What is read.
        remote: RemoteBuf,
    },
    /// `IBV_WR_ATOMIC_CMP_AND_SWP` or `IBV_WR_ATOMIC_FETCH_AND_ADD` on the 8 bytes at `remote`
    /// (8-aligned); the value found there is written into the first 8 bytes of `dest`.
    Atomic {
        /// Where the original value lands (one element of at least 8 bytes).
        dest: Dest<'a, 'r>,
        /// The remote 8 bytes.
        remote: RemoteBuf,
        /// Which operation, with its operands.
        op: AtomicOp,
    },
}

/// The two atomics of the verbs (8 bytes each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    /// Store `swap` if the remote value equals `compare`.
    CompareSwap {
        /// The value expected.
        compare: u64,
        /// The value stored on a match.
        swap: u64,
    },
    /// Add `add` to the remote value.
    FetchAdd {
        /// The addend.
        add: u64,
    },
}

/// Bytes an atomic reads and writes.
pub const ATOMIC_LEN: u32 = 8;

/// One send-queue request: `ibv_send_wr` for the operations this API posts.
#[derive(Clone, Copy, Debug)]
pub struct SendRequest<'a, 'r> {
    /// Comes back as the completion's `wr_id` (`context` of `rdma_post_writev`).
    pub wr_id: u64,
    /// `ibv_send_flags`.
    pub flags: SendFlags,
    /// The operation.
    pub op: SendOp<'a, 'r>,
}

impl<'a, 'r> SendRequest<'a, 'r> {
    /// An RDMA WRITE (with immediate if `imm` is set).
    #[inline(always)]
    pub const fn write(
        wr_id: u64,
        source: Source<'a, 'r>,
        flags: SendFlags,
        remote: RemoteBuf,
        imm: Option<u32>,
    ) -> Self {
        SendRequest { wr_id, flags, op: SendOp::Write { source, remote, imm } }
    }

    /// The payload of a WRITE or SEND.
    #[inline(always)]
    pub fn source(&self) -> Option<&Source<'a, 'r>> {
        match &self.op {
            SendOp::Write { source, .. } | SendOp::Send { source, .. } => Some(source),
            _ => None,
        }
    }

    /// The request's payload is copied inline: a WRITE or SEND whose flag asks for it or whose
    /// source is plain bytes.
    #[inline]
    pub fn is_inline(&self) -> bool {
        match self.source() {
            Some(s) => {
                self.flags.contains(SendFlags::INLINE) || matches!(s.0, SourceKind::Inline(_))
            }
            None => false,
        }
    }

    /// Check the request against a queue's capabilities, as rdma-core's provider does before it
    /// writes anything, and its size and remote range as an RDMA message allows
    /// ([`check_message`]). Service-specific rules (a datagram destination only on UD
    /// queue pairs) are the backend's.
    #[inline]
    pub fn check(&self, caps: &Caps) -> Result<()> {
        match &self.op {
            SendOp::Write { source, remote, .. } => {
                let len =
                    source.total_len().ok_or(Error::InvalidArgument("message above 2 GiB"))?;
                check_message(len as u64, *remote)?;
                self.check_payload(source, len, caps)
            }
            SendOp::Send { source, .. } => {
                let len =
                    source.total_len().ok_or(Error::InvalidArgument("message above 2 GiB"))?;
                check_message(len as u64, RemoteBuf::default())?;
                self.check_payload(source, len, caps)
            }
            SendOp::Read { dest, remote } => {
                if self.flags.contains(SendFlags::INLINE) {
                    return Err(Error::InvalidArgument("an RDMA READ cannot be inline"));
                }
                let len = dest.total_len().ok_or(Error::InvalidArgument("message above 2 GiB"))?;
                check_message(len as u64, *remote)?;
                if dest.count() > caps.max_sge as usize {
                    return Err(Error::TooManySges {
                        given: dest.count(),
                        max: caps.max_sge as usize,
                    });
                }
                Ok(())
            }
            SendOp::Atomic { dest, remote, .. } => {
                if self.flags.contains(SendFlags::INLINE) {
                    return Err(Error::InvalidArgument("an atomic cannot be inline"));
                }
                match dest.sge(0) {
                    Some(e) if dest.count() == 1 && e.length >= ATOMIC_LEN => {}
                    _ => {
                        return Err(Error::InvalidArgument(
                            "an atomic's result needs one buffer of at least 8 bytes",
                        ))
                    }
                }
                check_message(ATOMIC_LEN as u64, *remote)
            }
        }
    }

    #[inline(always)]
    fn check_payload(&self, source: &Source<'_, '_>, len: u32, caps: &Caps) -> Result<()> {
        if self.is_inline() {
            if len > caps.max_inline {
                return Err(Error::InlineTooLarge {
                    len: len as usize,
                    max: caps.max_inline as usize,
                });
            }
        } else if source.count() > caps.max_sge as usize {
            return Err(Error::TooManySges { given: source.count(), max: caps.max_sge as usize });
        }
        Ok(())
    }
}

/// The largest RDMA message: 2^31 bytes (IBTA vol. 1 §9.4, "message size"; the kernel's
/// rdma_rxe refuses longer sends with EINVAL).
pub const MAX_MESSAGE: u64 = 1 << 31;

/// Refuse a message of `len` bytes to `remote` that no RDMA transport can carry: longer than
/// [`MAX_MESSAGE`], or a remote range that wraps past 2^64 (one ending at byte 2^64 - 1 is
/// fine). The first check every backend's
/// push makes; the fast paths call it with the length they sum anyway.
#[inline(always)]
pub fn check_message(len: u64, remote: RemoteBuf) -> Result<()> {
    // Both rules in one compare: `len` may not pass the smaller of `MAX_MESSAGE` and the
    // bytes from `addr` to 2^64 (a range may end at byte 2^64 - 1, not past it). Those bytes
    // are `!addr + 1`, which is 2^64 for `addr == 0` (no 64-bit value) and above
    // `MAX_MESSAGE` whenever `!addr >= MAX_MESSAGE - 1`, so the bound is taken as
    // `min(!addr, MAX_MESSAGE - 1) + 1`, which neither overflows nor exceeds `MAX_MESSAGE`.
    if len > (!remote.addr).min(MAX_MESSAGE - 1) + 1 {
        return Err(message_refused(len));
    }
    Ok(())
}

/// The error of a post from a [`DestSlot`] whose request has not retired.
#[cold]
fn slot_busy() -> Error {
    Error::InvalidArgument("the slot's request has not retired")
}

/// The error of a message [`check_message`] refuses: too long, or else a remote range that
/// wraps.
#[cold]
fn message_refused(len: u64) -> Error {
    if len > MAX_MESSAGE {
        Error::InvalidArgument("message above 2 GiB")
    } else {
        Error::InvalidArgument("remote range wraps past 2^64")
    }
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
        for _ in 0..max_polls.max(1) {
            let n = self.poll(out)?;
            if n > 0 {
                return Ok(n);
            }
            core::hint::spin_loop();
        }
        Err(Error::Timeout("a completion"))
    }
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

/// What a receive queue accepts, fixed when it is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RecvCaps {
    /// Receives posted at once (`ibv_qp_cap.max_recv_wr`).
    pub max_recv_wr: u32,
    /// Scatter elements per receive (`ibv_qp_cap.max_recv_sge`).
    pub max_recv_sge: u32,
}

/// A backend's receive queue: `rdma_post_recvv` and its completions.
///
/// Contract for implementors: [`push_recv`](RecvQueue::push_recv) either makes the whole
/// receive visible to the device (its regions counted busy) and numbers it
/// [`recv_posted`](RecvQueue::recv_posted) (then one more), or changes nothing and returns the
/// error; receives retire in order, each reported exactly once by
/// [`poll_recv`](RecvQueue::poll_recv) (success, error or flush), and
/// [`Retired::retired`]`(Side::Recv)` counts them.
pub trait RecvQueue<'r>: Retired {
    /// What the queue accepts.
    fn recv_caps(&self) -> RecvCaps;
    /// Receives posted so far (the number the next one gets).
    fn recv_posted(&self) -> u64;
    /// Post one receive scattering into `dest` (no elements: a receive for a WRITE WITH
    /// IMMEDIATE or an empty SEND).
    ///
    /// # Safety
    /// The memory of `dest` must not be read or written by the caller until the receive
    /// retires (the core moves owned buffers into a [`Pending`]; raw elements carry
    /// [`Dest::raw`]'s contract).
    #[allow(unsafe_code)]
    unsafe fn push_recv(&mut self, wr_id: u64, dest: Dest<'_, 'r>) -> Result<()>;
    /// Reap receive completions into `out`; returns how many were written. Never blocks.
    fn poll_recv(&mut self, out: &mut [Completion]) -> Result<usize>;
    /// Receives posted and not retired.
    fn recv_outstanding(&self) -> u32;

    /// `rdma_post_recvv`: a receive scattering into `bufs`, which come back from the
    /// [`Pending`] once it retires.
    #[inline]
    fn post_recvv<B: DestList<'r>>(&mut self, wr_id: u64, bufs: B) -> Posted<B> {
        let (queue, seq) = (self.queue_id(), self.recv_posted());
        // SAFETY: on success the buffers go into the `Pending`, which keeps them out of reach
        // until the receive retires; on failure the device never saw them.
        #[allow(unsafe_code)]
        let res = unsafe { self.push_recv(wr_id, Dest::bufs(bufs.bufs())) };
        match res {
            Ok(()) => Ok(Pending::new(bufs, queue, Side::Recv, seq)),
            Err(error) => Err(Refused { error, bufs }),
        }
    }

    /// `rdma_post_recvv` into the buffers of `slot`, in place: they stay out of reach until
    /// the receive retires ([`DestSlot::get`]). Refused, with the slot unchanged, if it is
    /// busy.
    #[inline]
    fn post_recvv_in<B: DestList<'r>>(&mut self, wr_id: u64, slot: &mut DestSlot<B>) -> Result<()> {
        if !slot.is_idle() {
            return Err(slot_busy());
        }
        let (queue, seq) = (self.queue_id(), self.recv_posted());
        // Busy before the receive can reach the device (see `DestSlot`).
        let dest = Dest::bufs(slot.lend(queue, Side::Recv, seq).bufs());
        // SAFETY: the buffers stay in the slot, which keeps them out of reach until the
        // receive retires; on failure the device never saw them.
        #[allow(unsafe_code)]
        let res = unsafe { self.push_recv(wr_id, dest) };
        if res.is_err() {
            slot.refused();
        }
        res
    }

    /// `rdma_post_recv`: one buffer.
    #[inline]
    fn post_recv(&mut self, wr_id: u64, buf: DestBuf<'r>) -> Posted<DestBuf<'r>> {
        self.post_recvv(wr_id, buf)
    }

    /// A receive with no buffer: what the target of a WRITE WITH IMMEDIATE (or of a
    /// zero-byte SEND) posts.
    #[inline]
    fn post_recv_empty(&mut self, wr_id: u64) -> Result<()> {
        // SAFETY: no memory is handed over.
        #[allow(unsafe_code)]
        unsafe {
            self.push_recv(wr_id, Dest::bufs(&[]))
        }
    }

    /// `rdma_post_recvv` with raw elements.
    ///
    /// # Safety
    /// As [`Dest::raw`].
    #[allow(unsafe_code)]
    unsafe fn post_recvv_raw(&mut self, wr_id: u64, sgl: &[Sge]) -> Result<()> {
        // SAFETY: forwarded to our caller.
        unsafe { self.push_recv(wr_id, Dest::raw(sgl)) }
    }

    /// Busy-poll the receive side until at least one completion arrives or `max_polls` polls
    /// found nothing.
    fn poll_recv_bounded(&mut self, out: &mut [Completion], max_polls: u64) -> Result<usize> {
        for _ in 0..max_polls.max(1) {
            let n = self.poll_recv(out)?;
            if n > 0 {
                return Ok(n);
            }
            core::hint::spin_loop();
        }
        Err(Error::Timeout("a receive completion"))
    }
}

/// Requests posted with a single doorbell (`ibv_wr_start` ... `ibv_wr_complete`): every
/// [`Post`] form appends to it.
///
/// Dropping the batch without [`commit`](Batch::commit) rolls it back (`ibv_wr_abort`): the
/// ring and the regions' in-flight counts return to where they were. Leaking it
/// (`mem::forget`) is safe but leaks too: its requests are never posted (the next batch or
/// post starts where it did and overwrites them), and the regions they acquired stay counted
/// busy for good, so those regions refuse deregistration and their memory is not freed.
pub struct Batch<'q, 'r, Q: SendQueue<'r> + ?Sized> {
    q: &'q mut Q,
    at: Q::Cursor,
    /// The queue's identity, read when the batch opens.
    queue: QueueId,
    /// The number the next request appended gets (for its [`Pending`]): the queue's
    /// [`posted`](SendQueue::posted) when the batch opened, plus one per request appended
    /// since. Kept here, a local of the caller's loop, rather than worked out from the
    /// queue's fields on every request, which the ring's and the regions' stores force the
    /// compiler to reload (see the module docs).
    next: u64,
    done: bool,
    _r: PhantomData<&'r ()>,
}

impl<'r, Q: SendQueue<'r> + ?Sized> Post<'r> for Batch<'_, 'r, Q> {
    /// Append one request. A refused request changes nothing; the earlier ones stay appended.
    #[inline(always)]
    fn post(&mut self, req: &SendRequest<'_, 'r>) -> Result<()> {
        // SAFETY: `at` is the live cursor of `q`'s latest `begin` (the batch holds `q`
        // exclusively since then) and is handed back only by `commit` or `drop`.
        #[allow(unsafe_code)]
        let res = unsafe { self.q.push(&mut self.at, req) };
        if res.is_ok() {
            self.next += 1;
        }
        res
    }

    #[inline]
    fn next_seq(&self) -> (QueueId, u64) {
        debug_assert_eq!(
            self.next,
            self.q.posted() + self.q.pushed(&self.at) as u64,
            "a push that succeeds appends exactly one request"
        );
        (self.queue, self.next)
    }
}

impl<'r, Q: SendQueue<'r> + ?Sized> Batch<'_, 'r, Q> {
    /// Requests appended so far.
    #[inline(always)]
    pub fn len(&self) -> u32 {
        self.q.pushed(&self.at)
    }

    /// Whether nothing was appended.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Ring one doorbell for every appended request; returns how many were posted.
    #[inline(always)]
    pub fn commit(mut self) -> u32 {
        self.done = true;
        let n = self.len();
        // SAFETY: as in `post`; `done` keeps `drop` from handing the cursor back again.
        #[allow(unsafe_code)]
        unsafe {
            self.q.commit(self.at)
        };
        n
    }
}

impl<'r, Q: SendQueue<'r> + ?Sized> Drop for Batch<'_, 'r, Q> {
    #[inline(always)]
    fn drop(&mut self) {
        if !self.done {
            // SAFETY: as in `post`; the batch was not committed, so the cursor is live.
            #[allow(unsafe_code)]
            unsafe {
                self.q.abort(self.at)
            };
        }
    }
}

#[cfg(test)]
mod tests;
