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
//!   inside a WQE (a [`DeviceFault::InsideWqe`]), and one whose word has it names an
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
//!
//! A CQE that names no outstanding WQE's first block is refused before anything is retired
//! or released.

use rdma_pmd::post::{Source, SourceKind};
use rdma_pmd::{
    Caps, Completion, DestKind, DeviceFault, Error, QpNum, RegionUse, Released, RemoteBuf, Result,
    Rkey, SendFlags, SendOp, SendQueue, SendRequest, Sge, WcOpcode, WcStatus,
};
use rdma_pmd_hal::{Dma, Mmio};

use crate::control::Control;
use crate::datapath::doorbell::{Captured, Last};
use crate::datapath::wqe::{atomic_sge, Capture, FixedRing, Head, RawRing, WqeBuilder};
use crate::layout::codes::CqeOpcode;
use crate::layout::codes::SendOpcode;
use crate::layout::codes::Syndrome;
use crate::layout::cqe::Cqe;
use crate::qp::{Qp, QpState};

/// Region references the ring can hold per block: a WQE of `b` blocks holds at most `4b - 2`.
const REFS_PER_BB: usize = 4;

/// Run entries per block: `2N` in all (see the module docs).
const RUNS_PER_BB: usize = 2;

/// Most blocks one WQE takes: `ceil(63 * 16 / 64)`.
const MAX_WQEBBS: usize = (crate::layout::codes::MAX_DS as usize).div_ceil(4);

/// What the driver keeps about the WQE starting at a slot, in one word written at every push:
/// `ds` in bits 0..6, "asked for a completion" in bit 6, "inline payload" in bit 13, "first
/// block of a WQE" in bit 14, then the push's [`Stamp`]: the blocks beyond the first of every
/// request committed before it in bits 16..32 (mod 2^16) and the signalled requests committed
/// before it in bits 48..64 (mod 2^16; bits 32..48 are unused). The other blocks of a WQE hold
/// [`Meta::INTERIOR`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Meta(u64);

impl Meta {
    const SIGNALED: u64 = 1 << 6;
    const INLINE: u64 = 1 << 13;
    const START: u64 = 1 << 14;
    /// The word of a block that is not the first of its WQE (nor, at first, of any).
    const INTERIOR: Meta = Meta(0);

    #[inline(always)]
    fn new(ds: u8, signaled: bool, stamp: Stamp) -> Meta {
        // `ds <= MAX_DS` (63): it fits its field.
        Meta((ds & 0x3f) as u64 | (signaled as u64) << 6 | Self::START | stamp.0)
    }

    /// Size in 16-byte units.
    #[inline(always)]
    fn ds(self) -> u8 {
        (self.0 & 0x3f) as u8
    }

    /// Size in blocks, `ceil(ds / 4)` (as [`WqeShape::from_ds`](crate::datapath::wqe::WqeShape::from_ds)), worked out as
    /// `(ds - 1) / 4 + 1` in the 6 bits of the field: never zero, so that no walk over the ring
    /// can stand still (a `ds` of 0, which no push records, reads as 16 blocks).
    #[inline(always)]
    fn wqebbs(self) -> u16 {
        (((self.0 as u16).wrapping_sub(1) & 0x3f) >> 2) + 1
    }

    #[inline(always)]
    fn signaled(self) -> bool {
        self.0 & Self::SIGNALED != 0
    }

    /// The WQE carries its payload inline.
    #[inline(always)]
    fn with_inline(self, inline: bool) -> Meta {
        Meta(self.0 | (inline as u64) << 13)
    }

    #[inline(always)]
    fn inline(self) -> bool {
        self.0 & Self::INLINE != 0
    }

    /// Whether a WQE starts at this block.
    #[inline(always)]
    fn is_start(self) -> bool {
        self.0 & Self::START != 0
    }

    /// Whether a WQE starts at this block with `sigs` signalled requests before it: one
    /// compare for the two tests of a CQE's common case.
    #[inline(always)]
    fn starts_after(self, sigs: u16) -> bool {
        let mask = Self::START | (u16::MAX as u64) << Stamp::SIGS_SHIFT;
        self.0 & mask == Self::START | (sigs as u64) << Stamp::SIGS_SHIFT
    }

    /// The ordinal (requests committed before it, mod 2^16) of the request starting at
    /// counter `pi`: every block before it was the first of a request or one of the extra
    /// blocks counted in the stamp.
    #[inline(always)]
    fn ord(self, pi: u16) -> u16 {
        pi.wrapping_sub(Stamp(self.0).extra())
    }

    /// Signalled requests committed before it, mod 2^16.
    #[inline(always)]
    fn sigs_before(self) -> u16 {
        Stamp(self.0).sigs()
    }
}

/// The counts a push records in its [`Meta`]: the blocks beyond the first of the requests
/// before it (bits 16..32), from which its ordinal follows, and the signalled requests before
/// it (bits 48..64). A one-block request changes only the second, with one addition. A batch
/// holds at most `N <= 2^15` blocks, so the block count carries into the unused bits 32..48 at
/// most once per batch, and the signalled count's carry leaves the word; [`SendRing::begin`]
/// builds the stamp afresh from the ring's counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp(u64);

impl Stamp {
    const EXTRA_SHIFT: u32 = 16;
    const SIGS_SHIFT: u32 = 48;

    #[inline(always)]
    fn new(extra: u16, sigs: u16) -> Stamp {
        Stamp((extra as u64) << Self::EXTRA_SHIFT | (sigs as u64) << Self::SIGS_SHIFT)
    }

    /// Blocks beyond the first of each request before, mod 2^16.
    #[inline(always)]
    fn extra(self) -> u16 {
        (self.0 >> Self::EXTRA_SHIFT) as u16
    }

    /// Signalled requests before, mod 2^16.
    #[inline(always)]
    fn sigs(self) -> u16 {
        (self.0 >> Self::SIGS_SHIFT) as u16
    }

    /// Past one more request of `bbs` blocks, signalled or not.
    #[inline(always)]
    fn advance(&mut self, signaled: bool, bbs: u16) {
        self.0 = self
            .0
            .wrapping_add(((bbs - 1) as u64) << Self::EXTRA_SHIFT)
            .wrapping_add((signaled as u64) << Self::SIGS_SHIFT);
    }
}

/// The key a run is told by: its region's address, 0 for requests that read none. The
/// [`RegionUse`] the push counted stands for its region, so that a push that extends the last
/// run needs no [`Released`] reference at all.
#[inline(always)]
fn run_key(r: Option<&RegionUse>) -> usize {
    r.map_or(0, |r| r as *const RegionUse as usize)
}

/// A CQE being turned into completions one WQE at a time: retire WQEs from `tail` up to
/// `target`.
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

/// What the retirement of a requester CQE needs from it.
#[derive(Clone, Copy, Debug)]
struct Done {
    /// `wqe_counter`: the last WQE it retires.
    counter: u16,
    status: WcStatus,
    vendor_err: u32,
    /// What the opcode of the WQE it names reports.
    kind: ReqKind,
    byte_cnt: u32,
}

/// `wc.byte_len` of a successful requester completion (`cq.c` `handle_good_req`): the CQE's
/// byte count for an RDMA READ, 8 for an atomic, nothing (0) for writes and sends.
#[inline]
pub const fn requester_byte_len(op: SendOpcode, byte_cnt: u32) -> u32 {
    match op {
        SendOpcode::RdmaRead => byte_cnt,
        SendOpcode::AtomicCs | SendOpcode::AtomicFa => rdma_pmd::post::ATOMIC_LEN,
        _ => 0,
    }
}

/// What a success CQE reports for the send opcode it carries, [`SendOpcode::wc_opcode`] and
/// [`requester_byte_len`] tabulated by raw opcode, so that the poll's common case looks them
/// up once instead of matching the opcode three times. The byte length is either the CQE's
/// byte count or a constant: `(byte_cnt & keep) | fixed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ReqKind {
    opcode: WcOpcode,
    keep: u32,
    fixed: u32,
}

impl ReqKind {
    const fn of(op: SendOpcode) -> ReqKind {
        let opcode = match op.wc_opcode() {
            Some(o) => o,
            None => WcOpcode::RdmaWrite,
        };
        let fixed = requester_byte_len(op, 0);
        ReqKind { opcode, keep: requester_byte_len(op, u32::MAX) & !fixed, fixed }
    }

    /// The completion's `byte_len` for a CQE byte count of `byte_cnt`.
    #[inline(always)]
    const fn byte_len(self, byte_cnt: u32) -> u32 {
        (byte_cnt & self.keep) | self.fixed
    }
}

/// [`ReqKind`] by raw send opcode, one entry for each of the 256 a CQE can carry, so that the
/// lookup needs no range test.
const REQ_KINDS: [ReqKind; 256] = {
    let mut t = [ReqKind::of(SendOpcode::Nop); 256];
    let mut i = 0;
    while i < 256 {
        t[i] = ReqKind::of(SendOpcode::from_raw(i as u8));
        i += 1;
    }
    t
};

#[inline(always)]
fn req_kind(raw: u8) -> ReqKind {
    REQ_KINDS[raw as usize]
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

/// Entry `i` (free-running) of a queue of `K * N` entries held as `[[T; K]; N]`.
#[inline(always)]
fn entry<T, const K: usize, const N: usize>(q: &mut [[T; K]; N], i: u32) -> &mut T {
    let i = i as usize;
    &mut q[(i / K) & (N - 1)][i % K]
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
    fault: Option<Error>,
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

    /// Release the references queued in `[from, to)`: entries this ring acquired for WQEs
    /// the device can no longer read (rolled back, or the QP destroyed). At most the queue's
    /// `4N` entries, whatever the bounds say.
    #[inline]
    fn release_refs(&mut self, from: u32, to: u32) {
        let n = to.wrapping_sub(from).min((REFS_PER_BB * N) as u32);
        for k in 0..n {
            if let Some(r) = entry(&mut self.refs, from.wrapping_add(k)).take() {
                // SAFETY: each queued entry answers one `acquire` of `push_gather`, and is
                // taken out here, so it is released once.
                unsafe { r.release_many(1) };
            }
        }
    }

    /// Release the first regions of the requests with ordinals `[from, to)` (mod 2^16, at
    /// most `2^15` of them): the runs `r..head`, run `r` holding `from` (or ending at it) and
    /// the last extending at least to `to`. Each run's share is released with one
    /// [`RegionUse::release_many`]. Returns the run holding `to` (or the last).
    #[inline]
    fn release_runs(&mut self, mut r: u16, head: u16, from: u16, to: u16) -> u16 {
        let span = to.wrapping_sub(from);
        let mut at = 0u16;
        loop {
            let next = r.wrapping_add(1);
            let last = next == head;
            // Where run `r` ends, as a distance from `from`.
            let end = if last {
                span
            } else {
                entry(&mut self.run_starts, next as u32).wrapping_sub(from)
            };
            let upto = end.min(span);
            if upto != at {
                if let Some(region) = *entry(&mut self.run_regions, r as u32) {
                    // SAFETY: every request of the run acquired the run's region once at its
                    // push; the requests `[from + at, from + upto)` are retired, rolled back
                    // or their QP destroyed, and each passes through here once (retirement
                    // moves `run_tail` and the retired count past them; a rollback forgets
                    // them; teardown releases only what was not retired).
                    unsafe { region.release_many((upto - at) as u32) };
                }
                at = upto;
            }
            if last || end > span {
                return r;
            }
            r = next;
            if end == span {
                return r;
            }
        }
    }

    /// Retire the `count` oldest requests, the last of them the WQE at counter `t` (with
    /// `meta`): release their regions, free their blocks.
    #[inline(always)]
    fn retire_through(&mut self, t: u16, meta: Meta, count: u16) {
        let done = self.done();
        if self.run_tail.wrapping_add(1) == self.run_head {
            // One live run (the common case: one region, or none): it holds all of them.
            // Released with the others of this poll, by one atomic add at its end.
            self.unreleased += count as u32;
        } else {
            self.flush_released();
            let to = done.wrapping_add(count);
            self.run_tail = self.release_runs(self.run_tail, self.run_head, done, to);
        }
        if self.ref_tail != self.ref_head {
            self.release_tagged(done, count);
        }
        self.tail = t.wrapping_add(meta.wqebbs());
        self.outstanding -= count as u32;
        self.sigs_done = meta.sigs_before().wrapping_add(meta.signaled() as u16);
    }

    /// Release the requests of run `run_tail` retired since the last call: every poll ends
    /// with it, so a region's count is exact whenever the caller can look at it.
    #[inline(always)]
    pub fn flush_released(&mut self) {
        if self.unreleased != 0 {
            if let Some(region) = *entry(&mut self.run_regions, self.run_tail as u32) {
                // SAFETY: as in `release_runs`: the `unreleased` requests, the last retired
                // ones, are the run's (the run does not change while some are held: a move of
                // `run_tail` releases them first); each acquired the region once and is
                // released here once.
                unsafe { region.release_many(self.unreleased) };
            }
            self.unreleased = 0;
        }
    }

    /// Release the further references of the `count` requests from ordinal `done` on: the
    /// entries from `ref_tail` whose tag is among them.
    #[cold]
    fn release_tagged(&mut self, done: u16, count: u16) {
        while self.ref_tail != self.ref_head {
            let i = self.ref_tail;
            if entry(&mut self.ref_ords, i).wrapping_sub(done) >= count {
                break;
            }
            if let Some(r) = entry(&mut self.refs, i).take() {
                // SAFETY: each queued entry answers one `acquire` of `push_gather` for the
                // request its tag names, which is retired now; taken out, it is released once.
                unsafe { r.release_many(1) };
            }
            self.ref_tail = i.wrapping_add(1);
        }
    }

    /// Close the batch: the WQEs pushed at the cursor join the ring. Returns the last of them
    /// and how many there were, for the doorbell, or `None` if none was pushed.
    #[inline(always)]
    pub fn commit(&mut self, at: SqCursor) -> Option<(Last, u32)> {
        let pushed = self.pushed(&at);
        // A cursor that is not this ring's live one (committed twice, or from another ring:
        // a broken `unsafe` contract) can claim blocks past the free space; rung, it would
        // make the device read slots still in use. It is dropped instead.
        // (`pushed - 1 >= N`, wrapping: none pushed, or more than fit.)
        if pushed.wrapping_sub(1) >= N as u32 || at.pi.wrapping_sub(self.pi) as u32 > self.room() {
            return None;
        }
        let last = at.pi.wrapping_sub(at.last_bbs);
        self.adopt(&at, pushed);
        Some((self.last_at(last), pushed))
    }

    /// Push `req` as a batch of its own and close it: what [`begin`](Self::begin),
    /// [`push`](Self::push) and [`commit`](Self::commit) do in turn, without commit's checks
    /// of the cursor, which never leaves this call. Returns the WQE for the doorbell; on
    /// error nothing changed (a refused push leaves the ring as `begin` found it, so there is
    /// nothing to abort).
    #[inline(always)]
    pub fn post_one(&mut self, open: bool, req: &SendRequest<'_, 'r>) -> Result<Last> {
        let mut at = self.begin(open);
        self.push(&mut at, req)?;
        // The request starts where the batch did.
        let last = self.pi;
        self.adopt(&at, 1);
        Ok(self.last_at(last))
    }

    /// A request of one element `e` (read from `region` when it is a registered buffer)
    /// under a one-block `head` (a WRITE, a SEND on a connected QP, or a READ), pushed as a
    /// batch of its own and closed: [`post_one`](Self::post_one) of that request, with the
    /// request's kind already told apart by the caller. Errors as `post_one`'s.
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
    ) -> Result<(Last, [u64; 8])> {
        self.alone(open, &head, |q, at| q.push_one_head(at, wr_id, e, region, flags, head))
    }

    /// An inline request of `pieces` under `head` (a WRITE or a SEND on a connected QP),
    /// pushed as a batch of its own and closed, as [`post_sge`](Self::post_sge) is.
    #[inline(always)]
    pub fn post_inline(
        &mut self,
        open: bool,
        wr_id: u64,
        pieces: &[&[u8]],
        flags: SendFlags,
        head: Head<'_>,
    ) -> Result<Last> {
        let source = Source::inline(pieces);
        let push =
            |q: &mut Self, at: &mut SqCursor| q.push_inline_head(at, wr_id, &source, flags, head);
        self.alone(open, &head, push).map(|(last, ())| last)
    }

    /// A batch of one request of a connected QP's one-block `head`, pushed by `push` and
    /// closed: what `post_sge` and `post_inline` share. Returns the WQE for the doorbell and
    /// what `push` returned.
    #[inline(always)]
    fn alone<T>(
        &mut self,
        open: bool,
        head: &Head<'_>,
        push: impl FnOnce(&mut Self, &mut SqCursor) -> Result<T>,
    ) -> Result<(Last, T)> {
        let mut at = self.begin(open);
        if at.builder.is_datagram() {
            return Err(on_datagram(open, head));
        }
        let kept = push(self, &mut at)?;
        // The request starts where the batch did.
        let last = self.pi;
        self.adopt(&at, 1);
        Ok((self.last_at(last), kept))
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

    /// Whether a CQE is still being turned into completions.
    pub fn has_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// The ring's own bookkeeping says that the WQE at `tail` (with `m`), while any is
    /// outstanding, is the oldest one: a WQE starts there, with `done` requests and
    /// `sigs_done` signalled ones before it. Only cursors misused against their `unsafe`
    /// contract can break that.
    #[inline(always)]
    fn debug_check_oldest(&self, m: Meta) {
        debug_assert!(m.starts_after(self.sigs_done) && m.ord(self.tail) == self.done());
    }

    /// A success requester CQE (`MLX5_CQE_REQ`) for WQE `t`, carrying send opcode `raw_op`
    /// and `byte_cnt`: [`on_req`](Self::on_req) in straight line for its common case, a CQE
    /// naming the first block of an outstanding WQE with no signalled request skipped. The
    /// rest goes to `on_req`.
    #[inline(always)]
    fn on_success(
        &mut self,
        t: u16,
        raw_op: u8,
        byte_cnt: u32,
        qpn: QpNum,
        out: &mut Completion,
    ) -> Result<bool> {
        let slot = t as usize & Self::MASK;
        let m = self.meta[slot];
        // The oldest outstanding WQE (every WQE signalled; each flush): nothing is skipped.
        let count = if t == self.tail && self.outstanding != 0 {
            self.debug_check_oldest(m);
            Some(1)
        } else {
            let behind = m.ord(t).wrapping_sub(self.done());
            (t.wrapping_sub(self.tail) < self.pi.wrapping_sub(self.tail)
                && m.starts_after(self.sigs_done)
                && (behind as u32) < self.outstanding)
                .then_some(behind.wrapping_add(1))
        };
        if let Some(count) = count {
            let wr_id = self.wr_ids[slot];
            self.retire_through(t, m, count);
            if !m.signaled() {
                return Ok(false);
            }
            let kind = req_kind(raw_op);
            let mut c = Completion::new(wr_id, WcStatus::Success, kind.opcode, qpn);
            c.byte_len = kind.byte_len(byte_cnt);
            *out = c;
            return Ok(true);
        }
        let done = Done {
            counter: t,
            status: WcStatus::Success,
            vendor_err: 0,
            kind: req_kind(raw_op),
            byte_cnt,
        };
        self.on_req(done, qpn, out)
    }

    /// An error requester CQE (`MLX5_CQE_REQ_ERR`) for WQE `t`: [`on_req`](Self::on_req) in
    /// straight line for its common case, a CQE naming the oldest outstanding WQE, as each of
    /// the flush CQEs after an error does. `status` is never success (every syndrome maps to
    /// an error status). The rest goes to `on_req`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn on_error(
        &mut self,
        t: u16,
        status: WcStatus,
        vendor_err: u32,
        raw_op: u8,
        byte_cnt: u32,
        qpn: QpNum,
        out: &mut Completion,
    ) -> Result<bool> {
        debug_assert!(status != WcStatus::Success);
        let slot = t as usize & Self::MASK;
        let m = self.meta[slot];
        let kind = req_kind(raw_op);
        if t == self.tail && self.outstanding != 0 {
            self.debug_check_oldest(m);
            self.in_error = true;
            let wr_id = self.wr_ids[slot];
            self.retire_through(t, m, 1);
            let mut c = Completion::new(wr_id, status, kind.opcode, qpn);
            c.vendor_err = vendor_err;
            *out = c;
            return Ok(true);
        }
        let done = Done { counter: t, status, vendor_err, kind, byte_cnt };
        self.on_req(done, qpn, out)
    }

    /// Take a requester CQE, decoded into `done`. When it yields at most one completion and
    /// needs no walk (the common case), its WQEs retire at once and the completion, if any, is
    /// written to `out` (returns whether it was); otherwise its completions come out of
    /// [`drain`](Self::drain). A CQE that names no outstanding WQE's first block retires
    /// nothing.
    #[inline(always)]
    fn on_req(&mut self, done: Done, qpn: QpNum, out: &mut Completion) -> Result<bool> {
        debug_assert!(self.pending.is_none());
        let Done { counter: t, status, vendor_err, kind, byte_cnt } = done;
        if t.wrapping_sub(self.tail) >= self.pi.wrapping_sub(self.tail) {
            return Err(DeviceFault::NotOutstanding { counter: t }.into());
        }
        let slot = t as usize & Self::MASK;
        let m = self.meta[slot];
        if !m.is_start() {
            return Err(DeviceFault::InsideWqe { counter: t }.into());
        }
        // The requests retired before the named one. `t` is in the window and its block
        // starts a WQE, so it is an outstanding one's and fewer than `outstanding` precede
        // it; only cursors misused against their `unsafe` contract (one from another ring
        // committed here) can leave a word that says otherwise, and then the walk below,
        // which follows the sizes from `tail`, retires what is there.
        let behind = m.ord(t).wrapping_sub(self.done());
        let count = behind.wrapping_add(1);
        let flush_skipped = status == WcStatus::WrFlushErr && self.in_error;
        let (opcode, byte_len) = (kind.opcode, kind.byte_len(byte_cnt));
        if status != WcStatus::Success {
            self.in_error = true;
        }
        // A signalled request among those skipped, or several flushed: one completion each,
        // written as room allows.
        if m.sigs_before() != self.sigs_done
            || (flush_skipped && behind != 0)
            || behind as u32 >= self.outstanding
        {
            self.pending =
                Some(Pending { target: t, status, vendor_err, opcode, byte_len, flush_skipped });
            return Ok(false);
        }
        let wr_id = self.wr_ids[slot];
        self.retire_through(t, m, count);
        if !m.signaled() && status == WcStatus::Success {
            return Ok(false);
        }
        let mut c = Completion::new(wr_id, status, opcode, qpn);
        c.vendor_err = vendor_err;
        if status == WcStatus::Success {
            c.byte_len = byte_len;
        }
        *out = c;
        Ok(true)
    }

    /// Retire WQEs for the pending CQE one at a time, writing the completions the user sees
    /// into `out`. Returns how many were written; stops early when `out` is full (the rest
    /// follows on the next call).
    pub fn drain(&mut self, out: &mut [Completion], qpn: QpNum) -> Result<usize> {
        let mut n = 0;
        while let Some(p) = self.pending {
            if n == out.len() {
                break;
            }
            let head = self.tail;
            let slot = head as usize & Self::MASK;
            let w = self.meta[slot];
            // `on_req` checked that the target starts an outstanding WQE, so the walk from
            // `tail` meets it; a walk that would pass the committed WQEs stops all the same.
            if head == self.pi || self.outstanding == 0 || !w.is_start() {
                self.pending = None;
                return Err(DeviceFault::InsideWqe { counter: p.target }.into());
            }
            let wr_id = self.wr_ids[slot];
            let report = if head == p.target {
                self.pending = None;
                if w.signaled() || p.status != WcStatus::Success {
                    Some((p.status, p.vendor_err, p.opcode, p.byte_len))
                } else {
                    None
                }
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
            self.retire_through(head, w, 1);
        }
        Ok(n)
    }

    /// Release every region still referenced by a committed WQE and forget them all: for
    /// teardown, once the device can no longer read the ring (the QP is destroyed).
    pub fn release_everything(&mut self) {
        self.flush_released();
        let (done, to) = (self.done(), self.posted as u16);
        self.run_tail = self.release_runs(self.run_tail, self.run_head, done, to);
        self.release_refs(self.ref_tail, self.ref_head);
        self.ref_tail = self.ref_head;
        self.tail = self.pi;
        self.outstanding = 0;
        self.sigs_done = self.sigs;
        self.pending = None;
    }

    /// Whether a poll still owes the caller something: a signalled request not retired, a
    /// completion or fault found and not yet returned, or, after an error CQE, any request
    /// at all (each gets a flush).
    pub fn owes_completions(&self) -> bool {
        self.sigs != self.sigs_done
            || self.pending.is_some()
            || self.fault.is_some()
            || (self.in_error && self.outstanding != 0)
    }

    /// Start over at block 0 once the device has let go of the ring (the QP moved to RESET):
    /// what is still outstanding is released as in
    /// [`release_everything`](Self::release_everything), and the next request keeps its
    /// ordinal (`posted`), so that [`retired`](Self::retired) keeps counting and the runs and
    /// references stay consistent. The ordinal is the block counter less the extra blocks, so
    /// restarting the counter at 0 moves the extra-block count by as much.
    pub fn restart(&mut self) {
        self.release_everything();
        self.pi = 0;
        self.tail = 0;
        self.extra = (self.posted as u16).wrapping_neg();
        self.in_error = false;
        self.fault = None;
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

/// The heads [`Qp::post_sge`] writes, as its parameter (a constant, so that each head gets a
/// copy of the path with the head's fields folded in).
const WRITE: u8 = 0;
const SEND: u8 = 1;
const READ: u8 = 2;

impl<'r, M: Mmio, D: Dma, C: Control, const SQ: usize, const RQ: usize, const RS: usize>
    Qp<'r, M, D, C, SQ, RQ, RS>
{
    /// Ring the send doorbell for the `nreq` WQEs just committed, `last` the last of them.
    #[inline(always)]
    fn ring_sq(&mut self, last: Last, nreq: u32) {
        let pi = self.sq.pi();
        self.db.ring(self.dev.mmio(), &self.mem.dbrec, &self.sq.sink, last, nreq, pi);
    }

    /// [`SendQueue::post_one`] of one element under the head `OP` ([`WRITE`], [`SEND`] or
    /// [`READ`]; `remote` is unused for a SEND, `imm` for a READ). Short enough for the
    /// compiler to inline where it sees fit (then a loop's invariant parts leave the loop).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn post_sge<const OP: u8>(
        &mut self,
        wr_id: u64,
        e: Sge,
        region: Option<&'r RegionUse>,
        flags: SendFlags,
        remote: RemoteBuf,
        imm: Option<u32>,
    ) -> Result<()> {
        let head = match OP {
            WRITE => Head::Write { remote, imm },
            SEND => Head::Send { imm },
            _ => Head::Read { remote },
        };
        let open = self.state == QpState::Rts;
        let (last, block) = self.sq.post_sge(open, wr_id, e, region, flags, head)?;
        // The burst from the words just stored, not read back from the ring.
        let src = Captured { pi: last.pi, block, ring: &self.sq.sink };
        self.db.ring(self.dev.mmio(), &self.mem.dbrec, &src, last, 1, self.sq.pi());
        Ok(())
    }

    /// [`SendQueue::post_one`] of inline `pieces` under the head `OP` ([`WRITE`] or [`SEND`];
    /// `remote` is unused for a SEND). Inlined at the compiler's choice, as `post_sge`.
    #[inline]
    fn post_inline<const OP: u8>(
        &mut self,
        wr_id: u64,
        pieces: &[&[u8]],
        flags: SendFlags,
        remote: RemoteBuf,
        imm: Option<u32>,
    ) -> Result<()> {
        let head = match OP {
            WRITE => Head::Write { remote, imm },
            _ => Head::Send { imm },
        };
        let open = self.state == QpState::Rts;
        let last = self.sq.post_inline(open, wr_id, pieces, flags, head)?;
        self.ring_sq(last, 1);
        Ok(())
    }

    /// [`SendQueue::post_one`] of any request: no cursor leaves the ring, so commit's checks
    /// of one are not needed.
    #[inline(never)]
    fn post_any(&mut self, req: &SendRequest<'_, 'r>) -> Result<()> {
        let last = self.sq.post_one(self.state == QpState::Rts, req)?;
        self.ring_sq(last, 1);
        Ok(())
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

    // Always inlined: the cursor is a caller's local, which an out-of-line call would copy
    // field by field to the stack to pass it.
    #[inline(always)]
    unsafe fn commit(&mut self, at: SqCursor) {
        if let Some((last, nreq)) = self.sq.commit(at) {
            self.ring_sq(last, nreq);
        }
    }

    unsafe fn abort(&mut self, at: SqCursor) {
        self.sq.abort(at);
    }

    /// One request, its own doorbell. This part is inlined where the request is made, so the
    /// request's kind, known there, picks the path: one element under a one-block head (the
    /// common WRITE, SEND and READ) or plain inline bytes each go to a straight-line path of
    /// their own, with their arguments in registers; everything else to the general one,
    /// which is never inlined. A call site so takes at most one short path, never the whole
    /// push (with it, crates that post in many places compiled for tens of minutes).
    #[inline(always)]
    fn post_one(&mut self, req: &SendRequest<'_, 'r>) -> Result<()> {
        let (wr_id, flags) = (req.wr_id, req.flags);
        let copy = flags.contains(SendFlags::INLINE);
        let none = RemoteBuf::new(0, Rkey(0));
        match &req.op {
            SendOp::Write { source, remote, imm } => match *source.kind() {
                SourceKind::Sgl([b]) if !copy => {
                    let region = Some(b.region());
                    return self.post_sge::<WRITE>(wr_id, b.sge(), region, flags, *remote, *imm);
                }
                SourceKind::Raw { 0: [e], .. } if !copy => {
                    return self.post_sge::<WRITE>(wr_id, *e, None, flags, *remote, *imm);
                }
                SourceKind::Inline(pieces) => {
                    return self.post_inline::<WRITE>(wr_id, pieces, flags, *remote, *imm);
                }
                _ => {}
            },
            SendOp::Send { source, imm, ud: None } => match *source.kind() {
                SourceKind::Sgl([b]) if !copy => {
                    let region = Some(b.region());
                    return self.post_sge::<SEND>(wr_id, b.sge(), region, flags, none, *imm);
                }
                SourceKind::Raw { 0: [e], .. } if !copy => {
                    return self.post_sge::<SEND>(wr_id, *e, None, flags, none, *imm);
                }
                SourceKind::Inline(pieces) => {
                    return self.post_inline::<SEND>(wr_id, pieces, flags, none, *imm);
                }
                _ => {}
            },
            SendOp::Read { dest, remote } if !copy => match *dest.kind() {
                DestKind::Bufs([d]) => {
                    let region = Some(d.region());
                    return self.post_sge::<READ>(wr_id, d.sge(), region, flags, *remote, None);
                }
                DestKind::Raw([e]) => {
                    return self.post_sge::<READ>(wr_id, *e, None, flags, *remote, None);
                }
                _ => {}
            },
            _ => {}
        }
        self.post_any(req)
    }

    #[inline]
    fn poll(&mut self, out: &mut [Completion]) -> Result<usize> {
        if let Some(e) = self.sq.fault.take() {
            return Err(e);
        }
        let mut n = 0;
        let res = loop {
            if self.sq.has_pending() {
                match self.sq.drain(&mut out[n..], self.qpn) {
                    Ok(k) => n += k,
                    Err(e) => break Err(e),
                }
                if self.sq.has_pending() {
                    break Ok(n);
                }
            }
            // One test for a full `out` and the index of the completion's slot.
            let Some(slot) = out.get_mut(n) else { break Ok(n) };
            let Some(raw) = self.mem.scq.pop_req() else { break Ok(n) };
            let view = Cqe::new_unchecked(&raw[..]);
            if view.qpn() != self.qpn {
                break Err(DeviceFault::WrongQp { qpn: view.qpn() }.into());
            }
            // A requester CQE is read straight from the entry, as `cq.c` reads it: a success
            // one (`MLX5_CQE_REQ`), the common case, in straight line.
            let t = view.wqe_counter();
            let res = match CqeOpcode::from(view.op_own() >> 4) {
                CqeOpcode::Req => {
                    let (op, cnt) = (view.s_wqe_opcode_raw(), view.byte_cnt());
                    self.sq.on_success(t, op, cnt, self.qpn, slot)
                }
                CqeOpcode::ReqErr => {
                    let status = Syndrome::wc_status_of_raw(view.syndrome_raw());
                    let vendor = view.vendor_err_synd();
                    let (op, cnt) = (view.s_wqe_opcode_raw(), view.byte_cnt());
                    self.sq.on_error(t, status, vendor as u32, op, cnt, self.qpn, slot)
                }
                other => Err(DeviceFault::UnexpectedOpcode { opcode: other.into() }.into()),
            };
            match res {
                Ok(wrote) => n += wrote as usize,
                Err(e) => break Err(e),
            }
        };
        self.mem.scq.publish();
        self.sq.flush_released();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datapath::wqe::WqeShape;

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

    #[test]
    fn a_slot_word_gives_the_blocks_of_every_size() {
        for ds in 0..=63u8 {
            let m = Meta::new(ds, ds % 2 == 0, Stamp::new(0xffff, 0xffff));
            let want = match ds {
                0 => 16,
                _ => WqeShape::from_ds(ds).wqebbs as u16,
            };
            assert_eq!(m.wqebbs(), want, "ds {ds}");
        }
    }

    /// The table says what `wc_opcode` and `requester_byte_len` say, for every raw opcode.
    #[test]
    fn req_kinds_tabulate_the_opcode_rules() {
        for raw in 0..=u8::MAX {
            let op = SendOpcode::from(raw);
            let k = req_kind(raw);
            assert_eq!(k.opcode, op.wc_opcode().unwrap_or(WcOpcode::RdmaWrite), "{raw:#x}");
            for cnt in [0, 1, 8, 0x1234_5678, u32::MAX] {
                assert_eq!(k.byte_len(cnt), requester_byte_len(op, cnt), "{raw:#x} {cnt}");
            }
        }
    }
}
