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
//! All of the bookkeeping lives in driver memory, and every push writes what it owns whole:
//! the ring itself is device-writable DMA memory, so nothing that decides how to retire a WQE
//! is ever read back from it, and a batch leaked with `mem::forget` leaves nothing behind that
//! a later WQE in the same slot would inherit.
//!
//! # Retiring in one step
//!
//! A CQE names the last WQE it retires by its counter; the provider (`cq.c`) retires
//! everything before it with `wq->tail = wq->wqe_head[idx] + 1`. This ring does the same in
//! constant time, whatever the number of WQEs retired, from what each push recorded:
//!
//! * **Per slot** (the WQE's first block): its `wr_id`, and a `Meta` word: size, signalling,
//!   inline, a *start* bit, the request's ordinal (requests committed before it, mod 2^16) and
//!   the signalled requests committed before it (mod 2^16). Every other block of a WQE gets a
//!   word without the start bit. Every block in `[tail, pi)` belongs to an outstanding WQE
//!   whose push wrote its word, so a counter in that window whose word has no start bit is
//!   inside a WQE (a [`DeviceFault::InsideWqe`](rdma_pmd::DeviceFault::InsideWqe)), and one whose word has it names an
//!   outstanding WQE: no word from an earlier lap can pass for one. Requests retired by the
//!   CQE are the difference of two ordinals; whether a signalled one is among those it skips
//!   is the difference of two signalled counts.
//! * **Runs of one region.** Most requests read one region, and consecutive ones usually the
//!   same one. A push that reads another region than the previous one (or none after one)
//!   starts a *run*: an entry (region, ordinal of its first request) in a queue of `2N`.
//!   Each request still [`acquire`](RegionUse::acquire)s its region at the push, so
//!   [`RegionUse::in_flight`] counts requests as before, but retirement releases a run's
//!   retired requests with one [`Released::release_many`] (one atomic add: the queue may
//!   live on another thread than the region): the work is per run passed, not per WQE, and
//!   the run a poll keeps retiring from is counted down once, at the end of the poll. The queue holds at most one run per live request plus the last one (which stays
//!   while later pushes may extend it), so `2N` entries always suffice.
//! * **Further regions.** A request reading several regions queues the ones after its first
//!   in a reference queue of `4N` entries, each tagged with the request's ordinal; retirement
//!   releases the entries whose tag it passes. A WQE with `n` non-empty SGEs has `ds = 2 + n`
//!   and so `ceil((2 + n) / 4)` blocks, and references at most `n` regions (one per run of
//!   SGEs from the same region): four entries per block always suffice. Inline requests copy
//!   their bytes into the WQE and hold no reference.
//!
//! A CQE that needs more than one completion written (a flush covering several WQEs after
//! an error, or a signalled WQE skipped) goes through a slower path that retires one WQE at a
//! time, so that the completions can span several polls.
//!
//! This file holds the ring and the posting side; `send/retire.rs` how requester CQEs retire
//! WQEs; the crate's `qp/send.rs` the QP's [`SendQueue`](rdma_pmd::SendQueue) over the ring.

use rdma_pmd::post::{Source, SourceKind};
use rdma_pmd::{
    DestKind, Error, RegionUse, Released, RemoteBuf, Result, SendFlags, SendOp, SendRequest, Sge,
};

use crate::datapath::doorbell::Last;
use crate::datapath::wqe::{atomic_sge, Capture, FixedRing, Head, RawRing, WqeBuilder};

/// Region references the ring can hold per block: a WQE of `b` blocks holds at most `4b - 2`.
const REFS_PER_BB: usize = 4;

/// Run entries per block: `2N` in all (see the module docs).
const RUNS_PER_BB: usize = 2;

/// Most blocks one WQE takes: `ceil(63 * 16 / 64)`.
const MAX_WQEBBS: usize = (crate::layout::codes::MAX_DS as usize).div_ceil(4);

mod meta;
mod retire;

use meta::{run_key, Meta, Stamp};
pub use retire::requester_byte_len;
use retire::Pending;

/// Where an open batch stands: the next free block, the free blocks left, what was pushed.
///
/// It is the mlx5 [`rdma_pmd::SendQueue::Cursor`]: it lives in the caller's
/// [`rdma_pmd::Batch`], so across a batch it stays in registers, and the ring's own counters
/// change once, at the ring's `commit`.
#[derive(Clone, Copy, Debug)]
pub struct SqCursor {
    /// WQE counter of the next free block.
    pi: u16,
    /// `pi` when the ring is full: the first block past the free ones at `begin` (equal to
    /// `pi` for a closed cursor).
    limit: u16,
    /// Blocks of the last request pushed (1 before any).
    last_bbs: u16,
    /// Next free run entry.
    run_head: u16,
    /// The extra-block and signalled counts before the next request.
    stamp: Stamp,
    /// [`run_key`] of the last run.
    run_key: usize,
    /// Next free region-reference entry.
    ref_head: u32,
    /// Whether the QP may post at all; a closed cursor refuses every request.
    open: bool,
    /// The ring's builder, copied: as a local of the caller's loop, the compiler knows that
    /// the ring's stores cannot change it, so it is not reloaded on every post.
    builder: WqeBuilder,
}

/// Requests pushed and checked whose doorbell is not rung yet: what [`SendRing::commit`] and
/// the single posts hand the QP, which rings the doorbell and then gives it to
/// [`SendRing::close`]. The ring's counters move at `close`, after the doorbell: they are
/// driver memory nothing the device reads depends on, and stored after the doorbell they are
/// not among the stores its fences (`wc_start`, `wc_flush`) wait for. Nothing between the two
/// can fail: the doorbell's registers were checked against the BAR when the UAR was taken.
#[must_use = "the ring must close over what the doorbell announced"]
#[derive(Debug)]
pub(crate) struct Staged {
    /// The last of the requests, for the doorbell.
    pub last: Last,
    /// How many requests.
    pub nreq: u32,
    at: SqCursor,
}

impl Staged {
    /// The WQE counter after the requests: the doorbell record's value.
    #[inline(always)]
    pub fn pi(&self) -> u16 {
        self.at.pi
    }
}

/// Entry `i` (free-running) of a queue of `K * N` entries held as `[[T; K]; N]`.
#[inline(always)]
fn entry<T, const K: usize, const N: usize>(q: &mut [[T; K]; N], i: u32) -> &mut T {
    let i = i as usize;
    &mut q[(i / K) & (N - 1)][i % K]
}

/// The send ring of one QP. See the module docs.
///
/// Private to the crate: its methods take a cursor or a [`Staged`] on trust that it came from
/// this ring (they check only that it cannot make the device read slots in use), which the QP
/// that owns the ring guarantees and no other code could.
pub(crate) struct SendRing<'r, const N: usize> {
    pub(crate) sink: FixedRing<N>,
    builder: WqeBuilder,
    /// The WQE counter after the last committed WQE.
    pi: u16,
    /// The oldest WQE not retired.
    tail: u16,
    /// Committed requests not retired yet.
    outstanding: u32,
    /// Requests committed since the ring was made (so `posted - outstanding` have retired).
    posted: u64,
    /// Blocks beyond the first of every committed request, mod 2^16.
    extra: u16,
    /// Signalled requests committed, mod 2^16.
    sigs: u16,
    /// Signalled requests retired, mod 2^16.
    sigs_done: u16,
    in_error: bool,
    pending: Option<Pending>,
    /// A fault found by a poll that had already written completions: returned by the next
    /// poll, so that those completions reach the caller.
    pub(crate) fault: Option<Error>,
    /// The `wr_id` of the WQE starting at each slot.
    wr_ids: [u64; N],
    /// Size, signalling, ordinal and signalled count of the WQE starting at each slot;
    /// [`Meta::INTERIOR`] for the other blocks.
    meta: [Meta; N],
    /// The first region of each run of requests (`None` for requests that read none): a
    /// queue of `2N` entries indexed by free-running counters.
    run_regions: [[Option<&'r Released>; RUNS_PER_BB]; N],
    /// The ordinal of each run's first request.
    run_starts: [[u16; RUNS_PER_BB]; N],
    /// Next free run entry after the last commit.
    run_head: u16,
    /// The run holding the oldest request not retired (or the last run).
    run_tail: u16,
    /// Requests of run `run_tail` retired in this poll and not yet released (see
    /// [`flush_released`](Self::flush_released)): the run's region is counted down once per
    /// poll, not once per CQE.
    unreleased: u32,
    /// [`run_key`] of the last committed run.
    run_key: usize,
    /// The further region references of outstanding WQEs, in posting order: a queue of `4N`
    /// entries (`refs[i / 4][i % 4]`) indexed by free-running counters.
    refs: [[Option<&'r Released>; REFS_PER_BB]; N],
    /// The ordinal of the request each reference entry belongs to.
    ref_ords: [[u16; REFS_PER_BB]; N],
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
        // One empty run (of requests reading no region) to begin with: there is always a last
        // run for a push to extend or follow.
        Ok(SendRing {
            sink: FixedRing::new(sink)?,
            builder,
            pi: 0,
            tail: 0,
            outstanding: 0,
            posted: 0,
            extra: 0,
            sigs: 0,
            sigs_done: 0,
            in_error: false,
            pending: None,
            fault: None,
            wr_ids: [0; N],
            meta: [Meta::INTERIOR; N],
            run_regions: [[None; RUNS_PER_BB]; N],
            run_starts: [[0; RUNS_PER_BB]; N],
            run_head: 1,
            run_tail: 0,
            unreleased: 0,
            run_key: run_key(None),
            refs: [[None; REFS_PER_BB]; N],
            ref_ords: [[0; REFS_PER_BB]; N],
            ref_head: 0,
            ref_tail: 0,
        })
    }

    /// The WQE counter of the next free block.
    pub fn pi(&self) -> u16 {
        self.pi
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

    /// The ordinal of the oldest request not retired, mod 2^16.
    #[inline(always)]
    fn done(&self) -> u16 {
        (self.posted as u16).wrapping_sub(self.outstanding as u16)
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
            last_bbs: 1,
            run_head: self.run_head,
            stamp: Stamp::new(self.extra, self.sigs),
            run_key: self.run_key,
            ref_head: self.ref_head,
            open,
            builder: self.builder,
        }
    }

    /// Requests pushed at the cursor.
    #[inline(always)]
    pub fn pushed(&self, at: &SqCursor) -> u32 {
        at.pi.wrapping_sub(self.pi).wrapping_sub(at.stamp.extra().wrapping_sub(self.extra)) as u32
    }

    /// The ordinal of the next request pushed at the cursor.
    #[inline(always)]
    fn ord_at(at: &SqCursor) -> u16 {
        at.pi.wrapping_sub(at.stamp.extra())
    }
    /// Write `req` into the ring at the cursor, and count the regions it names. Changes
    /// nothing (the cursor included) on error.
    #[inline(always)]
    pub fn push(&mut self, at: &mut SqCursor, req: &SendRequest<'_, 'r>) -> Result<()> {
        if req.is_inline() {
            return self.push_inline(at, req);
        }
        match &req.op {
            SendOp::Write { source, remote, imm } => match *source.kind() {
                SourceKind::Sgl([b]) => {
                    let region = Some(b.region());
                    self.push_one(at, req.wr_id, b.sge(), region, req.flags, *remote, *imm)
                }
                SourceKind::Raw { 0: [e], .. } => {
                    self.push_one(at, req.wr_id, *e, None, req.flags, *remote, *imm)
                }
                // A datagram QP's refusal comes from `push_any`'s head.
                SourceKind::Sgl(bufs) if !at.builder.is_datagram() => {
                    let head = Head::Write { remote: *remote, imm: *imm };
                    self.push_gather(at, req, head, bufs, |b| b.sge(), |b| b.region())
                }
                _ => self.push_any(at, req),
            },
            // One-element SENDs and READs on a connected QP: one block, straight-line, as
            // for writes.
            SendOp::Send { source, imm, ud: None } if !at.builder.is_datagram() => {
                match *source.kind() {
                    SourceKind::Sgl([b]) => {
                        let head = Head::Send { imm: *imm };
                        let region = Some(b.region());
                        self.push_one_head(at, req.wr_id, b.sge(), region, req.flags, head)
                            .map(drop)
                    }
                    SourceKind::Raw { 0: [e], .. } => {
                        let head = Head::Send { imm: *imm };
                        self.push_one_head(at, req.wr_id, *e, None, req.flags, head).map(drop)
                    }
                    _ => self.push_other(at, req),
                }
            }
            SendOp::Read { dest, remote }
                if !req.flags.contains(SendFlags::INLINE) && !at.builder.is_datagram() =>
            {
                let head = Head::Read { remote: *remote };
                match *dest.kind() {
                    DestKind::Bufs([d]) => {
                        let region = Some(d.region());
                        self.push_one_head(at, req.wr_id, d.sge(), region, req.flags, head)
                            .map(drop)
                    }
                    DestKind::Raw([e]) => {
                        self.push_one_head(at, req.wr_id, *e, None, req.flags, head).map(drop)
                    }
                    _ => self.push_other(at, req),
                }
            }
            _ => self.push_other(at, req),
        }
    }

    /// [`push_one`](Self::push_one) after any one-block head. Returns the WQE's block as
    /// written, for a BlueFlame burst.
    #[inline(always)]
    fn push_one_head(
        &mut self,
        at: &mut SqCursor,
        wr_id: u64,
        e: Sge,
        region: Option<&'r RegionUse>,
        flags: SendFlags,
        head: Head<'_>,
    ) -> Result<[u64; 8]> {
        let builder = at.builder;
        let room = at.limit.wrapping_sub(at.pi) as u32;
        // An empty element is not in the WQE: nothing reads it, so it counts no region. The
        // region is counted on the builder's own test of the length.
        let mut first = None;
        let count = || {
            if let Some(r) = region {
                r.acquire()?;
                first = Some(r);
            }
            Ok(())
        };
        // The WQE's words are kept for a BlueFlame burst (a batch has no use for them, and
        // they are dropped unread). It is one block, as `Capture` needs.
        let sink = &mut Capture::new(self.sink.view());
        let ds = match builder.emit_one_with(sink, at.pi, room, e, flags, head, count) {
            Ok(ds) => ds,
            Err(err) => return Err(if at.open { err } else { Error::NotConnected }),
        };
        let block = sink.block;
        self.record(at, wr_id, first, Meta::new(ds, builder.signals(flags), at.stamp), 1);
        Ok(block)
    }

    /// [`push`](Self::push) of everything but a registered gather WRITE: SENDs, READs and
    /// atomics count the regions of their registered buffers; raw
    /// elements hold none.
    #[inline(always)]
    fn push_other(&mut self, at: &mut SqCursor, req: &SendRequest<'_, 'r>) -> Result<()> {
        let head = match at.builder.head(req) {
            Ok(h) => h,
            Err(_) if !at.open => return Err(Error::NotConnected),
            Err(e) => return Err(e),
        };
        match &req.op {
            SendOp::Send { source, .. } => match *source.kind() {
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
        if at.builder.is_datagram() {
            return Err(if at.open {
                Error::InvalidArgument("a datagram QP posts only sends")
            } else {
                Error::NotConnected
            });
        }
        self.push_one_head(at, wr_id, e, region, flags, Head::Write { remote, imm }).map(drop)
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
        // The regions, in order: the first goes to the runs, every later change of region is
        // queued (consecutive elements from one region count once), and tagged with the
        // request's ordinal once the WQE is written.
        let mut first: Option<&'r RegionUse> = None;
        let mut prev = run_key(None);
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
                // The address, not an `Option`: one compare tells the same region, and no
                // element matches the 0 of none before the first.
                let key = run_key(Some(r));
                let was = core::mem::replace(&mut prev, key);
                if was == key {
                    return Ok(());
                }
                r.acquire()?;
                if was == 0 {
                    first = Some(r);
                } else {
                    *entry(refs, head_ref) = Some(r.released());
                    head_ref = head_ref.wrapping_add(1);
                }
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
        // Tagging here rather than in the pass keeps the ordinal out of the loop; a request
        // reading one region queues nothing.
        let ord = Self::ord_at(at);
        let mut k = start;
        while k != head_ref {
            *entry(&mut self.ref_ords, k) = ord;
            k = k.wrapping_add(1);
        }
        at.ref_head = head_ref;
        let meta = Meta::new(shape.ds, builder.signals(req.flags), at.stamp);
        self.record(at, req.wr_id, first, meta, shape.wqebbs as u16);
        Ok(())
    }

    /// [`push`](Self::push) of an inline WRITE or SEND: the payload is copied into the WQE, so
    /// it holds no region.
    #[inline(always)]
    fn push_inline(&mut self, at: &mut SqCursor, req: &SendRequest<'_, 'r>) -> Result<()> {
        let (head, source) = match (at.builder.head(req), req.source()) {
            (Ok(head), Some(source)) => (head, source),
            (Err(_), _) | (Ok(_), None) if !at.open => return Err(Error::NotConnected),
            (Err(e), _) => return Err(e),
            (Ok(_), None) => return Err(Error::InvalidArgument("only a WRITE or SEND is inline")),
        };
        self.push_inline_head(at, req.wr_id, source, req.flags, head)
    }

    /// [`push_inline`](Self::push_inline) with the head already made.
    #[inline(always)]
    fn push_inline_head(
        &mut self,
        at: &mut SqCursor,
        wr_id: u64,
        source: &Source<'_, '_>,
        flags: SendFlags,
        head: Head<'_>,
    ) -> Result<()> {
        let builder = at.builder;
        let room = at.limit.wrapping_sub(at.pi) as u32;
        let shape =
            match builder.write_inline(&mut self.sink.view(), at.pi, room, source, flags, head) {
                Ok(s) => s,
                Err(_) if !at.open => return Err(Error::NotConnected),
                Err(e) => return Err(e),
            };
        let meta = Meta::new(shape.ds, builder.signals(flags), at.stamp).with_inline(true);
        self.record(at, wr_id, None, meta, shape.wqebbs as u16);
        Ok(())
    }

    /// [`push`](Self::push) of the other requests: raw elements other than one (inline ones
    /// take [`push_inline`](Self::push_inline)).
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
        // Raw elements are the caller's to keep alive: they hold no region. (Inline requests
        // take `push_inline`.)
        debug_assert!(!req.is_inline());
        let meta = Meta::new(shape.ds, builder.signals(req.flags), at.stamp);
        self.record(at, req.wr_id, None, meta, shape.wqebbs as u16);
        Ok(())
    }

    /// The bookkeeping of a request of `bbs` blocks just written and counted at the cursor:
    /// its `wr_id` and `meta` in its first slot, [`Meta::INTERIOR`] in its other blocks, and
    /// its first region (`None`: it reads none) to the runs. Moves the cursor past it.
    #[inline(always)]
    fn record(
        &mut self,
        at: &mut SqCursor,
        wr_id: u64,
        first: Option<&'r RegionUse>,
        meta: Meta,
        bbs: u16,
    ) {
        let slot = at.pi as usize & Self::MASK;
        self.wr_ids[slot] = wr_id;
        self.meta[slot] = meta;
        // A WQE has at most `MAX_WQEBBS` blocks (`ds <= 63`). The further blocks of the
        // common sizes (up to four blocks: 14 data segments after a two-unit head) are marked
        // straight-line, each behind one compare; a loop bounded by that maximum takes the
        // rest, so it needs no set-up for a trip count the compiler cannot know.
        debug_assert!(bbs as usize <= MAX_WQEBBS);
        if bbs > 1 {
            let at_k = |k: u16| at.pi.wrapping_add(k) as usize & Self::MASK;
            self.meta[at_k(1)] = Meta::INTERIOR;
            if bbs > 2 {
                self.meta[at_k(2)] = Meta::INTERIOR;
                if bbs > 3 {
                    self.meta[at_k(3)] = Meta::INTERIOR;
                    for k in 4..MAX_WQEBBS as u16 {
                        if k >= bbs {
                            break;
                        }
                        self.meta[at_k(k)] = Meta::INTERIOR;
                    }
                }
            }
        }
        let key = run_key(first);
        if key != at.run_key {
            *entry(&mut self.run_regions, at.run_head as u32) = first.map(RegionUse::released);
            *entry(&mut self.run_starts, at.run_head as u32) = Self::ord_at(at);
            at.run_head = at.run_head.wrapping_add(1);
            at.run_key = key;
        }
        at.stamp.advance(meta.signaled(), bbs);
        at.pi = at.pi.wrapping_add(bbs);
        at.last_bbs = bbs;
    }

    /// Close the batch: the WQEs pushed at the cursor are handed over for the doorbell
    /// (`None` if none was pushed), and join the ring at [`close`](Self::close).
    #[inline(always)]
    pub fn commit(&mut self, at: SqCursor) -> Option<Staged> {
        let pushed = self.pushed(&at);
        // A cursor that is not this ring's live one (committed twice, or from another ring:
        // a broken `unsafe` contract) can claim blocks past the free space; rung, it would
        // make the device read slots still in use. It is dropped instead.
        // (`pushed - 1 >= N`, wrapping: none pushed, or more than fit.)
        if pushed.wrapping_sub(1) >= N as u32 || at.pi.wrapping_sub(self.pi) as u32 > self.room() {
            return None;
        }
        let last = at.pi.wrapping_sub(at.last_bbs);
        Some(Staged { last: self.last_at(last), nreq: pushed, at })
    }

    /// The WQEs of `staged`, their doorbell rung, join the ring: its counters move past them.
    #[inline(always)]
    pub fn close(&mut self, staged: Staged) {
        self.adopt(&staged.at, staged.nreq);
    }

    /// Push `req` as a batch of its own: what [`begin`](Self::begin), [`push`](Self::push)
    /// and [`commit`](Self::commit) do in turn, without commit's checks of the cursor, which
    /// never leaves this call. Returns the WQE for the doorbell, to [`close`](Self::close)
    /// once it is rung; on error nothing changed (a refused push leaves the ring as `begin`
    /// found it, so there is nothing to abort).
    #[inline(always)]
    pub fn post_one(&mut self, open: bool, req: &SendRequest<'_, 'r>) -> Result<Staged> {
        let mut at = self.begin(open);
        self.push(&mut at, req)?;
        Ok(self.staged_one(at))
    }

    /// A request of one element `e` (read from `region` when it is a registered buffer)
    /// under a one-block `head` (a WRITE, a SEND on a connected QP, or a READ), pushed as a
    /// batch of its own: [`post_one`](Self::post_one) of that request, with the request's kind
    /// already told apart by the caller. Errors as `post_one`'s.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn post_sge(
        &mut self,
        open: bool,
        wr_id: u64,
        e: Sge,
        region: Option<&'r RegionUse>,
        flags: SendFlags,
        head: Head<'_>,
    ) -> Result<(Staged, [u64; 8])> {
        self.alone(open, &head, |q, at| q.push_one_head(at, wr_id, e, region, flags, head))
    }

    /// An inline request of `pieces` under `head` (a WRITE or a SEND on a connected QP),
    /// pushed as a batch of its own, as [`post_sge`](Self::post_sge) is.
    #[inline(always)]
    pub fn post_inline(
        &mut self,
        open: bool,
        wr_id: u64,
        pieces: &[&[u8]],
        flags: SendFlags,
        head: Head<'_>,
    ) -> Result<Staged> {
        let source = Source::inline(pieces);
        let push =
            |q: &mut Self, at: &mut SqCursor| q.push_inline_head(at, wr_id, &source, flags, head);
        self.alone(open, &head, push).map(|(staged, ())| staged)
    }

    /// A batch of one request of a connected QP's one-block `head`, pushed by `push`: what
    /// `post_sge` and `post_inline` share. Returns the WQE for the doorbell and what `push`
    /// returned.
    #[inline(always)]
    fn alone<T>(
        &mut self,
        open: bool,
        head: &Head<'_>,
        push: impl FnOnce(&mut Self, &mut SqCursor) -> Result<T>,
    ) -> Result<(Staged, T)> {
        let mut at = self.begin(open);
        if at.builder.is_datagram() {
            return Err(on_datagram(open, head));
        }
        let kept = push(self, &mut at)?;
        Ok((self.staged_one(at), kept))
    }

    /// The one request pushed at `at`, a cursor that never left this ring, for the doorbell.
    #[inline(always)]
    fn staged_one(&self, at: SqCursor) -> Staged {
        // The request starts where the batch did.
        Staged { last: self.last_at(self.pi), nreq: 1, at }
    }

    /// The WQE starting at counter `pi`, pushed in this batch, for the doorbell: its size and
    /// inline flag from the word its push recorded (the slot's bytes are the device's).
    #[inline(always)]
    fn last_at(&self, pi: u16) -> Last {
        let m = self.meta[pi as usize & Self::MASK];
        Last { pi, ds: m.ds(), inline: m.inline() }
    }

    /// Take the `pushed` requests of the live cursor `at` into the ring.
    #[inline(always)]
    fn adopt(&mut self, at: &SqCursor, pushed: u32) {
        self.pi = at.pi;
        self.ref_head = at.ref_head;
        self.run_head = at.run_head;
        self.run_key = at.run_key;
        self.extra = at.stamp.extra();
        self.sigs = at.stamp.sigs();
        self.outstanding += pushed;
        self.posted += pushed as u64;
    }

    /// Forget every WQE pushed at the cursor, releasing its regions.
    ///
    /// A cursor that is never given back (its batch leaked with `mem::forget`) leaves its
    /// requests' regions counted busy for good: safe, as a leak is, and those regions' memory
    /// is leaked with them when they are dropped. The next push at the same slots overwrites
    /// every word of the bookkeeping they wrote, so the accounting of later WQEs is unchanged.
    pub fn abort(&mut self, at: SqCursor) {
        let pushed = self.pushed(&at);
        if pushed == 0 || pushed > N as u32 {
            return;
        }
        // The first pushed request extends the last committed run or starts the next one.
        let from = self.posted as u16;
        self.release_runs(self.run_head.wrapping_sub(1), at.run_head, from, Self::ord_at(&at));
        self.release_refs(self.ref_head, at.ref_head);
    }
}

/// Why a one-block `head` of a connected QP is refused on a datagram QP: what
/// `WqeBuilder::head` says (and, on a queue not in RTS, what every refusal is).
#[cold]
fn on_datagram(open: bool, head: &Head<'_>) -> Error {
    match head {
        _ if !open => Error::NotConnected,
        Head::Send { .. } => Error::InvalidArgument("a send on a datagram QP needs a destination"),
        _ => Error::InvalidArgument("a datagram QP posts only sends"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_pmd::QpNum;

    /// A gather counts each run of elements from one region once: its first region joins
    /// the runs (a new run only when it differs from the last one), its further regions are
    /// queued tagged with its ordinal, empty elements count nothing, and a refused request
    /// leaves the counts and the cursor as they were. A rollback releases everything.
    #[test]
    fn gathers_count_their_regions_by_runs_and_tags() {
        use core::ptr::{self, NonNull};
        use rdma_pmd::{Lkey, LocalBuf, Rkey, Source};

        #[repr(align(64))]
        struct Blocks([u64; 8 * 8]);
        let (a, b, gone) = (RegionUse::new(), RegionUse::new(), RegionUse::new());
        // SAFETY: nothing is in flight on `gone`, and the test owns it.
        unsafe { gone.begin_dereg() }.unwrap();
        let mem = [0u8; 64];
        let buf = |r, len| {
            // SAFETY: `mem` outlives the buffers; nothing copies from them (no inline).
            unsafe { LocalBuf::from_raw_parts(r, NonNull::from(&mem).cast(), 0x1000, len, Lkey(7)) }
        };
        let mut blocks = Blocks([0; 64]);
        let base = NonNull::new(blocks.0.as_mut_ptr().cast::<u8>()).unwrap();
        // SAFETY: `blocks` outlives the ring, is 64-byte aligned and 8 blocks long, and is
        // not otherwise accessed while the ring lives.
        let sink = unsafe { RawRing::new(base, 8) }.unwrap();
        let mut sq = SendRing::<8>::new(sink, WqeBuilder::new(QpNum(1))).unwrap();
        fn write<'a, 'r>(sgl: &'a [LocalBuf<'r>], wr_id: u64) -> SendRequest<'a, 'r> {
            let remote = RemoteBuf::new(0x2000, Rkey(3));
            SendRequest::write(wr_id, Source::sgl(sgl), SendFlags::empty(), remote, None)
        }
        let mut at = sq.begin(true);
        let runs = at.run_head;
        let counts = || (a.in_flight(), b.in_flight());

        // Ordinal 0: A, A, B. A starts a run; B is queued with ordinal 0.
        sq.push(&mut at, &write(&[buf(&a, 8), buf(&a, 8), buf(&b, 8)], 10)).unwrap();
        assert_eq!(counts(), (1, 1));
        assert_eq!(at.run_head, runs.wrapping_add(1));
        assert!(ptr::eq(entry(&mut sq.run_regions, runs as u32).unwrap(), a.released()));
        assert_eq!(at.ref_head, 1);
        assert!(ptr::eq(entry(&mut sq.refs, 0).unwrap(), b.released()));
        assert_eq!(*entry(&mut sq.ref_ords, 0), 0);

        // Ordinal 1: an empty element of B, then A: only A counts, and it extends A's run.
        sq.push(&mut at, &write(&[buf(&b, 0), buf(&a, 8), buf(&a, 4)], 11)).unwrap();
        assert_eq!(counts(), (2, 1));
        assert_eq!((at.run_head, at.ref_head), (runs.wrapping_add(1), 1));

        // Refused: the second region is deregistered. Nothing changes.
        let before = (at.pi, at.run_head, at.ref_head, at.stamp);
        let err = sq.push(&mut at, &write(&[buf(&a, 8), buf(&gone, 8)], 12)).unwrap_err();
        assert_eq!(err, Error::BadLkey);
        assert_eq!(counts(), (2, 1));
        assert_eq!((at.pi, at.run_head, at.ref_head, at.stamp), before);

        // Ordinal 2: B, A. B starts a run; A is queued with ordinal 2.
        sq.push(&mut at, &write(&[buf(&b, 8), buf(&a, 8)], 13)).unwrap();
        assert_eq!(counts(), (3, 2));
        assert_eq!((at.run_head, at.ref_head), (runs.wrapping_add(2), 2));
        assert!(ptr::eq(entry(&mut sq.run_regions, runs as u32 + 1).unwrap(), b.released()));
        assert!(ptr::eq(entry(&mut sq.refs, 1).unwrap(), a.released()));
        assert_eq!(*entry(&mut sq.ref_ords, 1), 2);
        assert_eq!(sq.pushed(&at), 3);

        sq.abort(at);
        assert_eq!(counts(), (0, 0));
    }
}
