//! The send ring's bookkeeping: which WQE sits where, what it borrowed, and how completions
//! retire it.
//!
//! The ring is `N` WQE basic blocks of 64 bytes (a power of two, at most 2^15 so that the
//! 16-bit WQE counter tells a full ring from an empty one). Three 16-bit counters run over it:
//!
//! ```text
//!   tail ........ pi ............... cursor
//!   oldest WQE    first block after  next free block of
//!   not retired   the last commit    the open batch
//! ```
//!
//! Per WQE, its first block's slot records the `wr_id`, the first region it reads, and a
//! 16-bit word (its size, whether it asked for a completion, how many further region
//! references it queued); further region references go to a queue of `4 * N` entries, in
//! posting order, so WQEs retire them from its head. All of it lives in driver memory, and
//! every push writes the slot's `Meta` whole: the ring itself is device-writable DMA memory, so
//! nothing that decides how to retire a WQE is ever read back from it, and a batch leaked with
//! `mem::forget` leaves nothing behind that a later WQE in the same slot would inherit. A WQE with `n`
//! non-empty SGEs has `ds = 2 + n` and so `ceil((2 + n) / 4)` blocks, and references at most
//! `n` regions (one per run of SGEs from the same region): four entries per block always
//! suffice, and a WQE reading one region touches only its slot. Inline requests copy their
//! bytes into the WQE and hold no reference.
//!
//! # What a completion retires (rdma-core `providers/mlx5/cq.c` semantics)
//!
//! A requester CQE names one WQE by its counter (`wqe_counter`); every WQE before it is retired
//! too (their regions are released, their blocks freed). What the user sees:
//!
//! * **success CQE** for WQE *w*: one completion for *w*. Earlier WQEs completed successfully
//!   (an RC send queue completes in order) and, being unsignalled, report nothing — as in
//!   `mlx5_parse_cqe`, which moves `tail` past them (`wq->tail = wq->wqe_head[idx] + 1`).
//! * **error CQE** for *w* (not a flush): *w* is reported with the syndrome's status and the
//!   vendor syndrome, signalled or not; earlier WQEs succeeded and are retired silently. The
//!   QP is now in error and refuses new posts ([`rdma_pmd::Error::NotConnected`]).
//! * **flush CQE** (`WR_FLUSH_ERR`): the device flushes every WQE still outstanding after an
//!   error, each with its own CQE whether signalled or not, and each is reported once with
//!   `WrFlushErr`. Should a device flush several WQEs with one CQE, the WQEs it skips after the
//!   QP entered error were not executed either, so each of them is reported as flushed too:
//!   every outstanding request completes exactly once. (Before any error, i.e. the first flush
//!   after a user-requested move to ERR, skipped WQEs had executed and stay silent.)
//!
//! A signalled WQE skipped by a later success CQE (which a conforming device does not
//! produce) is still reported, as a success, so no signalled request is ever lost.

use core::ptr;

use rdma_pmd::post::SourceKind;
use rdma_pmd::{
    Caps, Completion, DestKind, DeviceFault, Error, QpNum, RegionUse, RemoteBuf, Result, SendFlags,
    SendOp, SendQueue, SendRequest, Sge, WcOpcode, WcStatus,
};
use rdma_pmd_hal::{access, barrier, Dma, DmaBuf, Mmio};

use crate::control::{Control, Uar};
use crate::datapath::wqe::{atomic_sge, FixedRing, Head, RawRing, WqeBuilder, WqeShape, HEADER_DS};
use crate::layout::codes::CqeOpcode;
use crate::layout::codes::SendOpcode;
use crate::layout::codes::SEND_WQE_BB;
use crate::layout::cqe::{Cqe, CqeRepr};
use crate::layout::wqe::{bf_len, sq_dbrec, SND_DBR};
use crate::qp::{Qp, QpState};

/// Region references the ring can hold per block: a WQE of `b` blocks holds at most `4b - 2`.
const REFS_PER_BB: usize = 4;

/// What the driver keeps about the WQE starting at a slot, in one word written at every push:
/// `ds` in bits 0..6, "asked for a completion" in bit 6, the further region references it
/// queued in bits 7..13, "inline payload" in bit 13.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Meta(u16);

impl Meta {
    const SIGNALED: u16 = 1 << 6;
    const MORE_SHIFT: u32 = 7;
    const INLINE: u16 = 1 << 13;

    #[inline(always)]
    fn new(ds: u8, signaled: bool, more: u8) -> Meta {
        // `ds <= MAX_DS` (63) and `more <= 4 * 16 - 2`: both fit their fields.
        Meta(
            (ds & 0x3f) as u16
                | (signaled as u16) << 6
                | ((more & 0x3f) as u16) << Self::MORE_SHIFT,
        )
    }

    /// Size in 16-byte units.
    #[inline(always)]
    fn ds(self) -> u8 {
        (self.0 & 0x3f) as u8
    }

    /// Size in blocks; at least one, so that no walk over the ring can stand still.
    #[inline(always)]
    fn wqebbs(self) -> u16 {
        (WqeShape::from_ds(self.ds()).wqebbs as u16).max(1)
    }

    #[inline(always)]
    fn signaled(self) -> bool {
        self.0 & Self::SIGNALED != 0
    }

    /// Region references queued beyond the slot's first.
    #[inline(always)]
    fn more(self) -> u8 {
        (self.0 >> Self::MORE_SHIFT) as u8 & 0x3f
    }

    /// The WQE carries its payload inline.
    #[inline(always)]
    fn with_inline(self, inline: bool) -> Meta {
        Meta(self.0 | (inline as u16) << 13)
    }

    #[inline(always)]
    fn inline(self) -> bool {
        self.0 & Self::INLINE != 0
    }
}

/// A CQE being turned into completions: retire WQEs from `tail` up to `target`.
#[derive(Clone, Copy, Debug)]
struct Pending {
    target: u16,
    status: WcStatus,
    vendor_err: u32,
    opcode: WcOpcode,
    /// `byte_len` of the completion: the CQE's byte count for a READ, 8 for an atomic
    /// (`cq.c` `handle_good_req`), 0 otherwise.
    byte_len: u32,
    /// Report WQEs skipped on the way as flushed.
    flush_skipped: bool,
}

/// `wc.byte_len` of a successful requester completion (`cq.c` `handle_good_req`): the CQE's
/// byte count for an RDMA READ, 8 for an atomic, nothing (0) for writes and sends.
#[inline]
pub fn requester_byte_len(op: SendOpcode, byte_cnt: u32) -> u32 {
    match op {
        SendOpcode::RdmaRead => byte_cnt,
        SendOpcode::AtomicCs | SendOpcode::AtomicFa => rdma_pmd::post::ATOMIC_LEN,
        _ => 0,
    }
}

/// Where an open batch stands: the next free block, the free blocks left, what was pushed.
///
/// It is the mlx5 [`rdma_pmd::SendQueue::Cursor`]: it lives in the caller's
/// [`rdma_pmd::Batch`], so across a batch it stays in registers, and the ring's own counters
/// change once, at [`SendRing::commit`].
#[derive(Clone, Copy, Debug)]
pub struct SqCursor {
    /// WQE counter of the next free block.
    pi: u16,
    /// `pi` when the ring is full: the first block past the free ones at `begin` (equal to
    /// `pi` for a closed cursor).
    limit: u16,
    /// Blocks beyond the first of every request pushed: with `pi`, it gives the number of
    /// requests without a counter that every post would have to update (most requests are
    /// one block, for which this adds zero, which the compiler drops).
    extra: u16,
    /// Blocks of the last request pushed (1 before any, a value that the one-block requests
    /// then keep, again without an update).
    last_bbs: u16,
    /// Next free region-reference entry.
    ref_head: u32,
    /// Whether the QP may post at all; a closed cursor refuses every request.
    open: bool,
    /// The ring's builder, copied: as a local of the caller's loop, the compiler knows that
    /// the ring's stores cannot change it, so it is not reloaded on every post.
    builder: WqeBuilder,
}

impl SqCursor {
    /// Move past a request of `bbs` blocks just written at `pi`.
    #[inline(always)]
    fn advance(&mut self, bbs: u16) {
        self.pi = self.pi.wrapping_add(bbs);
        self.extra = self.extra.wrapping_add(bbs - 1);
        self.last_bbs = bbs;
    }
}

/// Entry `i` (free-running) of a reference queue of `4 * N` entries.
#[inline(always)]
fn ref_entry<'a, 'r, const N: usize>(
    refs: &'a mut [[Option<&'r RegionUse>; REFS_PER_BB]; N],
    i: u32,
) -> &'a mut Option<&'r RegionUse> {
    let i = i as usize;
    &mut refs[(i / REFS_PER_BB) & (N - 1)][i % REFS_PER_BB]
}

/// The send ring of one QP. See the module docs.
pub struct SendRing<'r, const N: usize> {
    sink: FixedRing<N>,
    builder: WqeBuilder,
    /// The WQE counter after the last committed WQE.
    pi: u16,
    /// The oldest WQE not retired.
    tail: u16,
    /// Committed requests not retired yet.
    outstanding: u32,
    /// Requests committed since the ring was made (so `posted - outstanding` have retired).
    posted: u64,
    in_error: bool,
    pending: Option<Pending>,
    /// A fault found by a poll that had already written completions: returned by the next
    /// poll, so that those completions reach the caller.
    fault: Option<Error>,
    /// The `wr_id` of the WQE starting at each slot.
    wr_ids: [u64; N],
    /// The first region the WQE starting at each slot reads (the only one in the common
    /// case).
    firsts: [Option<&'r RegionUse>; N],
    /// Size, signalling and further references of the WQE starting at each slot.
    meta: [Meta; N],
    /// The region references of outstanding WQEs, in posting order: a queue of `4 * N`
    /// entries (`refs[i / 4][i % 4]`) indexed by free-running counters.
    refs: [[Option<&'r RegionUse>; REFS_PER_BB]; N],
    /// Next free reference entry after the last committed WQE.
    ref_head: u32,
    /// Oldest reference entry in use.
    ref_tail: u32,
}

impl<'r, const N: usize> SendRing<'r, N> {
    const GEOMETRY: () = assert!(
        N.is_power_of_two() && N <= 1 << 15,
        "send ring size must be a power of two up to 2^15 blocks"
    );
    const MASK: usize = N - 1;

    /// A ring writing through `sink` (which must have `N` slots) with `builder`.
    pub fn new(sink: RawRing, builder: WqeBuilder) -> Result<Self> {
        #[allow(clippy::let_unit_value)]
        let () = Self::GEOMETRY;
        Ok(SendRing {
            sink: FixedRing::new(sink)?,
            builder,
            pi: 0,
            tail: 0,
            outstanding: 0,
            posted: 0,
            in_error: false,
            pending: None,
            fault: None,
            wr_ids: [0; N],
            firsts: [None; N],
            meta: [Meta(0); N],
            refs: [[None; REFS_PER_BB]; N],
            ref_head: 0,
            ref_tail: 0,
        })
    }

    /// The WQE counter of the next free block.
    pub fn pi(&self) -> u16 {
        self.pi
    }

    /// The counter of the oldest WQE not retired.
    pub fn tail(&self) -> u16 {
        self.tail
    }

    /// Free blocks.
    #[inline]
    pub fn room(&self) -> u32 {
        N as u32 - self.pi.wrapping_sub(self.tail) as u32
    }

    /// Committed requests not retired yet.
    pub fn outstanding(&self) -> u32 {
        self.outstanding
    }

    /// Requests committed since the ring was made.
    pub fn posted(&self) -> u64 {
        self.posted
    }

    /// Requests retired since the ring was made (in order: completed, implied by a later
    /// completion, flushed, or released at teardown).
    pub fn retired(&self) -> u64 {
        self.posted - self.outstanding as u64
    }

    /// Whether an error CQE was seen (the QP is in error).
    pub fn in_error(&self) -> bool {
        self.in_error
    }

    /// Open a batch at the end of the ring. With `open` false (the QP cannot post) every push
    /// at the cursor is refused with [`Error::NotConnected`].
    #[inline(always)]
    pub fn begin(&self, open: bool) -> SqCursor {
        SqCursor {
            pi: self.pi,
            // No request fits in no room: a closed cursor is refused by the size check, and
            // the error is mended below, off the data path.
            limit: if open { self.pi.wrapping_add(self.room() as u16) } else { self.pi },
            extra: 0,
            last_bbs: 1,
            ref_head: self.ref_head,
            open,
            builder: self.builder,
        }
    }

    /// Requests pushed at the cursor.
    #[inline(always)]
    pub fn pushed(&self, at: &SqCursor) -> u32 {
        (at.pi.wrapping_sub(self.pi).wrapping_sub(at.extra)) as u32
    }

    /// Write `req` into the ring at the cursor, and count the regions it names. Changes
    /// nothing (the cursor included) on error.
    #[inline(always)]
    pub fn push(&mut self, at: &mut SqCursor, req: &SendRequest<'_, 'r>) -> Result<()> {
        match &req.op {
            SendOp::Write { source, remote, imm } if !req.is_inline() => match *source.kind() {
                SourceKind::Sgl([b]) => {
                    let region = Some(b.region());
                    self.push_one(at, req.wr_id, b.sge(), region, req.flags, *remote, *imm)
                }
                SourceKind::Raw { 0: [e], .. } => {
                    self.push_one(at, req.wr_id, *e, None, req.flags, *remote, *imm)
                }
                SourceKind::Sgl(bufs) => {
                    let head = Head::Write { remote: *remote, imm: *imm };
                    self.push_gather(at, req, head, bufs, |b| b.sge(), |b| b.region())
                }
                _ => self.push_any(at, req),
            },
            // One-element SENDs and READs on a connected QP: one block, straight-line, as
            // for writes.
            SendOp::Send { source, imm, ud: None }
                if !req.is_inline() && !at.builder.is_datagram() =>
            {
                match *source.kind() {
                    SourceKind::Sgl([b]) => {
                        let head = Head::Send { imm: *imm };
                        self.push_one_head(
                            at,
                            req.wr_id,
                            b.sge(),
                            Some(b.region()),
                            req.flags,
                            head,
                        )
                    }
                    SourceKind::Raw { 0: [e], .. } => {
                        let head = Head::Send { imm: *imm };
                        self.push_one_head(at, req.wr_id, *e, None, req.flags, head)
                    }
                    _ => self.push_other(at, req),
                }
            }
            SendOp::Read { dest, remote }
                if !req.flags.contains(SendFlags::INLINE) && !at.builder.is_datagram() =>
            {
                let head = Head::Read { remote: *remote };
                match *dest.kind() {
                    DestKind::Bufs([d]) => self.push_one_head(
                        at,
                        req.wr_id,
                        d.sge(),
                        Some(d.region()),
                        req.flags,
                        head,
                    ),
                    DestKind::Raw([e]) => {
                        self.push_one_head(at, req.wr_id, *e, None, req.flags, head)
                    }
                    _ => self.push_other(at, req),
                }
            }
            _ => self.push_other(at, req),
        }
    }

    /// [`push_one`](Self::push_one) after any one-block head.
    #[inline(always)]
    fn push_one_head(
        &mut self,
        at: &mut SqCursor,
        wr_id: u64,
        e: Sge,
        region: Option<&'r RegionUse>,
        flags: SendFlags,
        head: Head<'_>,
    ) -> Result<()> {
        let builder = at.builder;
        let room = at.limit.wrapping_sub(at.pi) as u32;
        let ds = match builder.emit_one_head(&mut self.sink.view(), at.pi, room, e, flags, head) {
            Ok(ds) => ds,
            Err(err) => return Err(if at.open { err } else { Error::NotConnected }),
        };
        let first = match region {
            Some(r) if e.length != 0 => {
                r.acquire()?;
                Some(r)
            }
            _ => None,
        };
        let slot = at.pi as usize & Self::MASK;
        self.wr_ids[slot] = wr_id;
        self.set_first(slot, first);
        self.meta[slot] = Meta::new(ds, builder.signals(flags), 0);
        at.advance(1);
        Ok(())
    }

    /// [`push`](Self::push) of everything but a registered gather WRITE: SENDs, READs and
    /// atomics count the regions of their registered buffers; inline payloads and raw
    /// elements hold none.
    #[inline(always)]
    fn push_other(&mut self, at: &mut SqCursor, req: &SendRequest<'_, 'r>) -> Result<()> {
        let head = match at.builder.head(req) {
            Ok(h) => h,
            Err(_) if !at.open => return Err(Error::NotConnected),
            Err(e) => return Err(e),
        };
        match &req.op {
            SendOp::Send { source, .. } if !req.is_inline() => match *source.kind() {
                SourceKind::Sgl(bufs) => {
                    self.push_gather(at, req, head, bufs, |b| b.sge(), |b| b.region())
                }
                _ => self.push_any_head(at, req, head),
            },
            SendOp::Read { dest, .. } => match *dest.kind() {
                DestKind::Bufs(bufs) => {
                    self.push_gather(at, req, head, bufs, |d| d.sge(), |d| d.region())
                }
                DestKind::Raw(_) => self.push_any_head(at, req, head),
            },
            SendOp::Atomic { dest, .. } => match *dest.kind() {
                DestKind::Bufs(bufs @ [_]) => {
                    let sge = |d: &rdma_pmd::DestBuf<'r>| {
                        atomic_sge(d.sge()).unwrap_or(Sge::new(0, 0, rdma_pmd::Lkey(0)))
                    };
                    if bufs.iter().any(|d| d.len() < rdma_pmd::post::ATOMIC_LEN as usize) {
                        return Err(Error::InvalidArgument(
                            "an atomic's result needs at least 8 bytes",
                        ));
                    }
                    self.push_gather(at, req, head, bufs, sge, |d| d.region())
                }
                _ => self.push_any_head(at, req, head),
            },
            _ => self.push_any_head(at, req, head),
        }
    }

    /// [`push`](Self::push) of a gather write from one element (read from `region` when it
    /// is a registered buffer): the common case, one block, written straight-line.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn push_one(
        &mut self,
        at: &mut SqCursor,
        wr_id: u64,
        e: Sge,
        region: Option<&'r RegionUse>,
        flags: SendFlags,
        remote: RemoteBuf,
        imm: Option<u32>,
    ) -> Result<()> {
        let builder = at.builder;
        let room = at.limit.wrapping_sub(at.pi) as u32;
        if let Err(err) =
            builder.emit_one(&mut self.sink.view(), at.pi, room, e, flags, remote, imm)
        {
            return Err(if at.open { err } else { Error::NotConnected });
        }
        // An empty element is not in the WQE: nothing reads it.
        let first = match region {
            Some(r) if e.length != 0 => {
                r.acquire()?;
                Some(r)
            }
            _ => None,
        };
        let slot = at.pi as usize & Self::MASK;
        self.wr_ids[slot] = wr_id;
        self.set_first(slot, first);
        let ds = HEADER_DS as u8 + (e.length != 0) as u8;
        self.meta[slot] = Meta::new(ds, builder.signals(flags), 0);
        at.advance(1);
        Ok(())
    }

    /// [`push`](Self::push) of a request over registered buffers (a gather WRITE or SEND
    /// of two or more, a READ's scatter list, an atomic's result): the WQE is written and its
    /// regions counted in one pass over the list.
    #[inline(always)]
    fn push_gather<T>(
        &mut self,
        at: &mut SqCursor,
        req: &SendRequest<'_, 'r>,
        head: Head<'_>,
        bufs: &[T],
        sge: impl Fn(&T) -> Sge,
        region: impl Fn(&T) -> &'r RegionUse,
    ) -> Result<()> {
        let builder = at.builder;
        let room = at.limit.wrapping_sub(at.pi) as u32;
        let start = at.ref_head;
        // The regions, in order: the first is returned for the slot, every later change of
        // region is queued (consecutive elements from one region count once).
        let mut first: Option<&'r RegionUse> = None;
        let mut prev: Option<&'r RegionUse> = None;
        let mut head_ref = start;
        let refs = &mut self.refs;
        let res = builder.emit_gather(
            &mut self.sink.view(),
            at.pi,
            room,
            bufs,
            sge,
            |b| {
                let r = region(b);
                if prev.is_some_and(|p| ptr::eq(p, r)) {
                    return Ok(());
                }
                r.acquire()?;
                if first.is_none() {
                    first = Some(r);
                } else {
                    *ref_entry(refs, head_ref) = Some(r);
                    head_ref = head_ref.wrapping_add(1);
                }
                prev = Some(r);
                Ok(())
            },
            req.flags,
            head,
        );
        let shape = match res {
            Ok(s) => s,
            Err(e) => {
                if let Some(f) = first {
                    // SAFETY: acquired above for this WQE, which is never committed.
                    unsafe { f.release() };
                }
                self.release_refs(start, head_ref);
                return Err(if at.open { e } else { Error::NotConnected });
            }
        };
        let slot = at.pi as usize & Self::MASK;
        self.wr_ids[slot] = req.wr_id;
        self.set_first(slot, first);
        let more = head_ref.wrapping_sub(start) as u8;
        self.meta[slot] = Meta::new(shape.ds, builder.signals(req.flags), more);
        at.ref_head = head_ref;
        at.advance(shape.wqebbs as u16);
        Ok(())
    }

    /// [`push`](Self::push) of the other requests: inline ones, and raw elements other than
    /// one.
    #[inline(always)]
    fn push_any(&mut self, at: &mut SqCursor, req: &SendRequest<'_, 'r>) -> Result<()> {
        let head = match at.builder.head(req) {
            Ok(h) => h,
            Err(_) if !at.open => return Err(Error::NotConnected),
            Err(e) => return Err(e),
        };
        self.push_any_head(at, req, head)
    }

    /// [`push_any`](Self::push_any) with the head already made.
    #[inline(always)]
    fn push_any_head(
        &mut self,
        at: &mut SqCursor,
        req: &SendRequest<'_, 'r>,
        head: Head<'_>,
    ) -> Result<()> {
        // A copy, so that the ring's stores (which the compiler must assume may alias the
        // queue) do not force the builder's fields to be reloaded.
        let builder = at.builder;
        let room = at.limit.wrapping_sub(at.pi) as u32;
        let shape = match builder.emit_head(&mut self.sink.view(), at.pi, room, req, head) {
            Ok(s) => s,
            Err(_) if !at.open => return Err(Error::NotConnected),
            Err(e) => return Err(e),
        };
        // Inline payloads are copied into the WQE and raw elements are the caller's to keep
        // alive: neither holds a region.
        let slot = at.pi as usize & Self::MASK;
        self.wr_ids[slot] = req.wr_id;
        self.set_first(slot, None);
        self.meta[slot] =
            Meta::new(shape.ds, builder.signals(req.flags), 0).with_inline(req.is_inline());
        at.advance(shape.wqebbs as u16);
        Ok(())
    }

    /// Record the first region of the WQE at `slot`. A post that reads the region of the
    /// WQE this slot held a lap ago (the common case) leaves the word as it is: the array's
    /// cache lines then stay clean, and the post moves a line less to memory per four WQEs.
    #[inline(always)]
    fn set_first(&mut self, slot: usize, first: Option<&'r RegionUse>) {
        let f = &mut self.firsts[slot];
        let same = match (*f, first) {
            (Some(a), Some(b)) => ptr::eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if !same {
            *f = first;
        }
    }

    #[inline(always)]
    fn ref_at(&mut self, i: u32) -> &mut Option<&'r RegionUse> {
        ref_entry(&mut self.refs, i)
    }

    /// Release the references queued in `[from, to)`: entries this ring acquired for WQEs
    /// the device can no longer read (retired, rolled back, or the QP destroyed). At most the
    /// queue's `4 * N` entries, whatever the bounds say.
    #[inline]
    fn release_refs(&mut self, from: u32, to: u32) {
        let n = to.wrapping_sub(from).min((REFS_PER_BB * N) as u32);
        for k in 0..n {
            if let Some(r) = self.ref_at(from.wrapping_add(k)).take() {
                // SAFETY: each queued entry answers one `acquire` of `push_gather`, and is
                // taken out here, so it is released once.
                unsafe { r.release() };
            }
        }
    }

    /// Close the batch: the WQEs pushed at the cursor join the ring. Returns the last of them
    /// and how many there were, for the doorbell, or `None` if none was pushed.
    #[inline]
    pub fn commit(&mut self, at: SqCursor) -> Option<(Last, u32)> {
        let pushed = self.pushed(&at);
        // A cursor that is not this ring's live one (committed twice, or from another ring:
        // a broken `unsafe` contract) can claim blocks past the free space; rung, it would
        // make the device read slots still in use. It is dropped instead.
        if pushed == 0 || at.pi.wrapping_sub(self.pi) as u32 > self.room() || pushed > N as u32 {
            return None;
        }
        let last = at.pi.wrapping_sub(at.last_bbs);
        self.pi = at.pi;
        self.ref_head = at.ref_head;
        self.outstanding += pushed;
        self.posted += pushed as u64;
        let m = self.meta[last as usize & Self::MASK];
        Some((Last { pi: last, ds: m.ds(), inline: m.inline() }, pushed))
    }

    /// Release the first region of the WQE at `slot`: the WQE is retired, rolled back or its
    /// QP destroyed, so the device no longer reads it. The reference stays in the slot, so
    /// that the next push reading the same region need not store it again ([`set_first`]).
    ///
    /// [`set_first`]: Self::set_first
    #[inline(always)]
    fn release_first(&mut self, slot: usize) {
        if let Some(r) = self.firsts[slot] {
            // SAFETY: every push writes its slot's first region (acquired when it is
            // `Some`), and each WQE passes through here once: retirement moves `tail` past
            // it, a rollback forgets it, teardown walks only `[tail, pi)`. So this answers the
            // push's one `acquire`.
            unsafe { r.release() };
        }
    }

    /// Release the regions of the WQEs in `[from, to)` (their further references are the
    /// next entries from `*refs`), walking at most the ring's `N` blocks.
    fn release_wqes(&mut self, from: u16, to: u16, refs: &mut u32) {
        let mut p = from;
        let mut left = to.wrapping_sub(from).min(N as u16);
        while left != 0 {
            let slot = p as usize & Self::MASK;
            let m = self.meta[slot];
            self.release_first(slot);
            let more = m.more() as u32;
            self.release_refs(*refs, refs.wrapping_add(more));
            *refs = refs.wrapping_add(more);
            let bbs = m.wqebbs().min(left);
            p = p.wrapping_add(bbs);
            left -= bbs;
        }
    }

    /// Forget every WQE pushed at the cursor, releasing its regions.
    ///
    /// A cursor that is never given back (its batch leaked with `mem::forget`) leaves its
    /// requests' regions counted busy for good: safe, as a leak is, and those regions' memory
    /// is leaked with them when they are dropped. The next push at the same slots overwrites
    /// every word of the bookkeeping they wrote, so the accounting of later WQEs is unchanged.
    pub fn abort(&mut self, at: SqCursor) {
        let mut refs = self.ref_head;
        self.release_wqes(self.pi, at.pi, &mut refs);
    }

    /// Whether a CQE is still being turned into completions.
    pub fn has_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Take a requester CQE. Its completions come out of [`drain`](Self::drain).
    #[inline]
    pub fn on_cqe(&mut self, cqe: &CqeRepr) -> Result<()> {
        debug_assert!(self.pending.is_none());
        if !matches!(cqe.opcode, CqeOpcode::Req | CqeOpcode::ReqErr) {
            return Err(DeviceFault::UnexpectedOpcode { opcode: cqe.opcode.into() }.into());
        }
        let inflight = self.pi.wrapping_sub(self.tail);
        if cqe.wqe_counter.wrapping_sub(self.tail) >= inflight {
            return Err(DeviceFault::NotOutstanding { counter: cqe.wqe_counter }.into());
        }
        let status = cqe.status();
        let byte_len = requester_byte_len(cqe.s_wqe_opcode, cqe.byte_cnt);
        self.pending = Some(Pending {
            target: cqe.wqe_counter,
            status,
            vendor_err: cqe.vendor_err(),
            opcode: cqe.s_wqe_opcode.wc_opcode().unwrap_or(WcOpcode::RdmaWrite),
            byte_len,
            flush_skipped: status == WcStatus::WrFlushErr && self.in_error,
        });
        if status != WcStatus::Success {
            self.in_error = true;
        }
        Ok(())
    }

    /// Retire WQEs for the pending CQE, writing the completions the user sees into `out`.
    /// Returns how many were written; stops early when `out` is full (the rest follows on the
    /// next call).
    #[inline]
    pub fn drain(&mut self, out: &mut [Completion], qpn: QpNum) -> Result<usize> {
        let mut n = 0;
        while let Some(p) = self.pending {
            if !p.flush_skipped {
                self.retire_silent(p.target);
            }
            if n == out.len() {
                break;
            }
            let head = self.tail;
            let slot = head as usize & Self::MASK;
            let wr_id = self.wr_ids[slot];
            let w = self.meta[slot];
            let report = if head == p.target {
                self.pending = None;
                if w.signaled() || p.status != WcStatus::Success {
                    Some((p.status, p.vendor_err, p.opcode, p.byte_len))
                } else {
                    None
                }
            } else if p.target.wrapping_sub(head) < w.wqebbs() {
                self.pending = None;
                return Err(DeviceFault::InsideWqe { counter: p.target }.into());
            } else if p.flush_skipped {
                Some((WcStatus::WrFlushErr, 0, WcOpcode::RdmaWrite, 0))
            } else if w.signaled() {
                Some((WcStatus::Success, 0, WcOpcode::RdmaWrite, 0))
            } else {
                None
            };
            if let Some((status, vendor_err, opcode, byte_len)) = report {
                let mut c = Completion::new(wr_id, status, opcode, qpn);
                c.vendor_err = vendor_err;
                if status == WcStatus::Success {
                    c.byte_len = byte_len;
                }
                out[n] = c;
                n += 1;
            }
            self.release_first(slot);
            if w.more() != 0 {
                self.retire_refs(w.more());
            }
            self.tail = head.wrapping_add(w.wqebbs());
            self.outstanding -= 1;
        }
        Ok(n)
    }

    /// Retire, in one tight loop, the WQEs before `target` that report nothing (unsignalled,
    /// holding at most one region), stopping at the first that needs the general path.
    #[inline]
    fn retire_silent(&mut self, target: u16) {
        let mut head = self.tail;
        let mut retired = 0;
        while head != target {
            let slot = head as usize & Self::MASK;
            let w = self.meta[slot];
            if w.signaled() || w.more() != 0 || target.wrapping_sub(head) < w.wqebbs() {
                break;
            }
            self.release_first(slot);
            head = head.wrapping_add(w.wqebbs());
            retired += 1;
        }
        self.tail = head;
        self.outstanding -= retired;
    }

    /// Release the references of the oldest WQE, which retires.
    #[inline]
    fn retire_refs(&mut self, n: u8) {
        let to = self.ref_tail.wrapping_add(n as u32);
        self.release_refs(self.ref_tail, to);
        self.ref_tail = to;
    }

    /// Release every region still referenced by a pushed or committed WQE and forget them all:
    /// for teardown, once the device can no longer read the ring (the QP is destroyed).
    pub fn release_everything(&mut self) {
        let mut refs = self.ref_tail;
        self.release_wqes(self.tail, self.pi, &mut refs);
        self.release_refs(self.ref_tail, self.ref_head);
        self.ref_tail = self.ref_head;
        self.tail = self.pi;
        self.outstanding = 0;
        self.pending = None;
    }
}

// ---------------------------------------------------------------------------------------------
// The doorbell: the store sequence of rdma-core's `post_send_db` (`providers/mlx5/qp.c`), once
// for every way of posting.
//
// 1. the WQEs are already in the ring (stores through `RawRing`);
// 2. `barrier::to_device`: those stores reach memory before the doorbell record says so;
// 3. `dbrec[SND_DBR] = htobe32(pi & 0xffff)` (`layout::wqe::sq_dbrec`);
// 4. `barrier::wc_start` (`mmio_wc_start`): the record before any write-combining store;
// 5. either a BlueFlame copy of the last WQE (one WQE posted, the policy allows it, and
//    `1 < ds <= bf_size / 16`: `layout::wqe::bf_len` bytes in 64-byte write-combining chunks,
//    the source wrapping at the ring's end), or one 64-bit store of the last WQE's first 8 bytes;
// 6. `barrier::wc_flush` (`mmio_flush_writes`): the write-combining buffer leaves the CPU now;
// 7. the next doorbell uses the other half of the BlueFlame register (`offset ^= bf_size`).
//
// The register is at byte `BF_OFFSET` of the QP's UAR page (`MLX5_BF_OFFSET` in rdma-core's
// `providers/mlx5/mlx5.h`; the PRM's UAR page layout puts BlueFlame register 0 there).
// ---------------------------------------------------------------------------------------------

/// When a single post's doorbell is a BlueFlame copy of its WQE: the provider's
/// `(inl || ctx->prefer_bf)` and `shut_up_bf` conditions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BlueFlame {
    /// Every single post whose WQE fits (rdma-core's default: `MLX5_POST_SEND_PREFER_BF`
    /// unset).
    #[default]
    Prefer,
    /// Single inline posts only (`MLX5_POST_SEND_PREFER_BF=0`).
    InlineOnly,
    /// Never: always the 8-byte doorbell (`MLX5_SHUT_UP_BF=1`).
    Off,
}

/// Byte offset of the first BlueFlame (doorbell) register in a UAR page (`MLX5_BF_OFFSET`).
pub const BF_OFFSET: usize = 0x800;

/// One send queue's doorbell: the BlueFlame register it rings and which half is next.
#[derive(Debug)]
pub struct SqDoorbell {
    /// BAR offset of the register's first half.
    reg: usize,
    /// Size of one half (`mlx5dv_qp.bf.size`); 0 disables BlueFlame.
    half: usize,
    /// The half the next doorbell goes to (0 or `half`).
    offset: usize,
    policy: BlueFlame,
}

/// The last WQE a doorbell announces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Last {
    /// Its WQE counter.
    pub pi: u16,
    /// Its size in 16-byte units.
    pub ds: u8,
    /// Whether its payload is inline.
    pub inline: bool,
}

/// Where the send ring lives, for the BlueFlame copy (which reads the WQE back).
#[derive(Clone, Copy, Debug)]
pub struct RingAt<'a> {
    /// The block holding the ring.
    pub buf: &'a DmaBuf,
    /// Byte offset of slot 0 in `buf`.
    pub off: usize,
    /// Number of 64-byte slots (a power of two).
    pub wqe_cnt: u32,
}

impl SqDoorbell {
    /// The doorbell of a QP on `uar` whose BlueFlame halves are `half` bytes (0: none).
    pub fn new(uar: Uar, half: usize, policy: BlueFlame) -> Self {
        SqDoorbell { reg: uar.bar_offset + BF_OFFSET, half, offset: 0, policy }
    }

    /// BAR offset the next doorbell goes to.
    pub fn next_offset(&self) -> usize {
        self.reg + self.offset
    }

    /// Publish every WQE up to counter `pi` (exclusive): `nreq` requests were pushed since the
    /// last doorbell, the last of them at counter `last.pi` with size `last.ds`, inline or not.
    /// `dbrec` is the QP's doorbell record.
    #[inline]
    pub fn ring<M: Mmio>(
        &mut self,
        mmio: &M,
        dbrec: &DmaBuf,
        ring: RingAt<'_>,
        last: Last,
        nreq: u32,
        pi: u16,
    ) {
        // The WQE stores (relaxed atomics, to DMA memory) must be visible to the device before
        // the doorbell record that announces them (udma_to_device_barrier; for the model, the
        // Release fence that its Acquire after loading the record pairs with).
        barrier::to_device();
        dbrec.write_u32(SND_DBR * 4, u32::from_ne_bytes(sq_dbrec(pi)));
        // The record before any write-combining store (mmio_wc_start).
        barrier::wc_start();
        let at = self.reg + self.offset;
        let Last { pi: last_pi, ds, inline } = last;
        let mask = ring.wqe_cnt - 1;
        let bf = match self.policy {
            BlueFlame::Prefer => true,
            BlueFlame::InlineOnly => inline,
            BlueFlame::Off => false,
        };
        let len = if bf { bf_len(nreq, ds, self.half as u32) } else { 0 };
        if len == 0 {
            // The first 8 bytes of the last WQE's control segment, as they are in the ring.
            let head = ring.off + (last_pi as u32 & mask) as usize * SEND_WQE_BB;
            mmio.write_u64(at, ring.buf.read_u64(head));
        } else {
            assert!(
                (ring.buf.cpu().as_ptr() as usize + ring.off).is_multiple_of(8)
                    && ring.off + ring.wqe_cnt as usize * SEND_WQE_BB <= ring.buf.len(),
                "send ring outside its block"
            );
            let base = ring.buf.cpu().as_ptr().wrapping_add(ring.off).cast::<u64>();
            for i in 0..len / SEND_WQE_BB {
                let slot = ((last_pi as u32).wrapping_add(i as u32) & mask) as usize;
                let src = base.wrapping_add(slot * (SEND_WQE_BB / 8));
                // SAFETY: `slot < wqe_cnt`, so the 64 bytes at `src` lie inside the ring, which
                // lies inside the block (asserted above) and is 8-byte aligned; the block is
                // valid for reads while `ring.buf` is borrowed. Atomic (`access`): the device
                // may read (never write) these bytes concurrently, and every access to the ring
                // is atomic.
                let block: [u64; 8] =
                    core::array::from_fn(|k| unsafe { access::load_u64(src.add(k)) });
                mmio.write_wc64(at + i * SEND_WQE_BB, &block);
            }
        }
        // The doorbell (or BlueFlame burst) leaves the write-combining buffer before anything
        // that follows, in particular before the next doorbell to the other half
        // (mmio_flush_writes).
        barrier::wc_flush();
        self.offset ^= self.half;
    }
}

/// The four primitives of [`rdma_pmd::SendQueue`] on an mlx5 QP, and its completion polling:
/// what rdma-core's `_mlx5_post_send` and `post_send_db` (`qp.c`) and the requester half of
/// `mlx5_poll_one` (`cq.c`) do.
impl<'r, M: Mmio, D: Dma, C: Control, const SQ: usize, const RQ: usize, const RS: usize>
    SendQueue<'r> for Qp<'r, M, D, C, SQ, RQ, RS>
{
    type Cursor = SqCursor;

    fn caps(&self) -> Caps {
        self.caps
    }

    /// The number peers address: 1 for the GSI QP, whose firmware number (the one its WQEs
    /// carry) is the HCA's own, as `ibqp->qp_num` is 1 in mlx5_ib's GSI QP.
    fn qp_num(&self) -> QpNum {
        if self.service == crate::control::Service::Gsi {
            QpNum(1)
        } else {
            self.qpn
        }
    }

    /// Refuses every push unless the QP is in RTS.
    #[inline(always)]
    unsafe fn begin(&mut self) -> SqCursor {
        self.sq.begin(self.state == QpState::Rts)
    }

    #[inline(always)]
    unsafe fn push(&mut self, at: &mut SqCursor, req: &SendRequest<'_, 'r>) -> Result<()> {
        self.sq.push(at, req)
    }

    #[inline(always)]
    fn pushed(&self, at: &SqCursor) -> u32 {
        self.sq.pushed(at)
    }

    #[inline(always)]
    fn posted(&self) -> u64 {
        self.sq.posted()
    }

    #[inline]
    unsafe fn commit(&mut self, at: SqCursor) {
        if let Some((last, nreq)) = self.sq.commit(at) {
            let ring = RingAt { buf: &self.mem.wq, off: self.sq_off, wqe_cnt: SQ as u32 };
            self.db.ring(self.dev.mmio(), &self.mem.dbrec, ring, last, nreq, self.sq.pi());
        }
    }

    unsafe fn abort(&mut self, at: SqCursor) {
        self.sq.abort(at);
    }

    #[inline]
    fn poll(&mut self, out: &mut [Completion]) -> Result<usize> {
        if let Some(e) = self.sq.fault.take() {
            return Err(e);
        }
        let mut n = 0;
        let res = loop {
            match self.sq.drain(&mut out[n..], self.qpn) {
                Ok(k) => n += k,
                Err(e) => break Err(e),
            }
            if n == out.len() || self.sq.has_pending() {
                break Ok(n);
            }
            let Some(raw) = self.mem.scq.pop() else { break Ok(n) };
            let cqe = match CqeRepr::parse(&Cqe::new_unchecked(&raw[..])) {
                Ok(c) => c,
                Err(e) => break Err(e),
            };
            if cqe.qpn != self.qpn {
                break Err(DeviceFault::WrongQp { qpn: cqe.qpn }.into());
            }
            if let Err(e) = self.sq.on_cqe(&cqe) {
                break Err(e);
            }
        };
        self.mem.scq.publish();
        if self.sq.in_error() {
            self.state = QpState::Error;
        }
        // Completions written before a fault are reported now, the fault with the next poll:
        // every request's completion reaches the caller exactly once.
        match res {
            Err(e) if n > 0 => {
                self.sq.fault = Some(e);
                Ok(n)
            }
            res => res,
        }
    }

    fn outstanding(&self) -> u32 {
        self.sq.outstanding()
    }
}
