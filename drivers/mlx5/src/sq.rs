//! The send ring's bookkeeping: which WQE sits where, what it borrowed, and how completions
//! retire it.
//!
//! The ring is `N` WQE basic blocks of 64 bytes (a power of two, at most 2^15 so that the
//! 16-bit WQE counter tells a full ring from an empty one). Three 16-bit counters run over it:
//!
//! ```text
//!   tail ........ committed ........ pi
//!   oldest WQE    first WQE not yet  next free block
//!   not retired   rung (batch)
//! ```
//!
//! Per WQE, its first block's slot records the `wr_id`, its size in blocks, whether it asked
//! for a completion, and the first region it reads; further region references go to a queue
//! of `4 * N` entries, in posting order, so WQEs retire them from its head. A WQE with `n`
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
    Completion, Errno, Error, LocalBuf, QpNum, RegionUse, Result, WcOpcode, WcStatus, WriteRequest,
};

use crate::cqe::CqeRepr;
use crate::opcode::CqeOpcode;
use crate::wqe::{RawRing, WqeBuilder, WqeInfo};

/// Region references the ring can hold per block: a WQE of `b` blocks holds at most `4b - 2`.
const REFS_PER_BB: usize = 4;

/// What the ring remembers about the WQE starting at a slot (24 bytes).
#[derive(Clone, Copy, Debug, Default)]
struct Slot<'r> {
    wr_id: u64,
    /// The first region the WQE reads, the only one in the common case.
    first: Option<&'r RegionUse>,
    wqebbs: u8,
    signaled: bool,
    /// Further region references, at the head of the reference queue when the WQE retires.
    more: u8,
}

/// A CQE being turned into completions: retire WQEs from `tail` up to `target`.
#[derive(Clone, Copy, Debug)]
struct Pending {
    target: u16,
    status: WcStatus,
    vendor_err: u32,
    opcode: WcOpcode,
    /// Report WQEs skipped on the way as flushed.
    flush_skipped: bool,
}

/// The send ring of one QP. See the module docs.
pub struct SendRing<'r, const N: usize> {
    sink: RawRing,
    builder: WqeBuilder,
    pi: u16,
    committed: u16,
    tail: u16,
    /// Requests pushed since the last commit.
    pushed: u32,
    /// Counter and `ds` of the last request pushed since the last commit.
    last: (u16, u8),
    /// What the builder wrote last (an out-parameter, so its fields are stored and reloaded at
    /// the same width).
    info: WqeInfo,
    /// Committed requests not retired yet.
    outstanding: u32,
    in_error: bool,
    pending: Option<Pending>,
    slots: [Slot<'r>; N],
    /// The region references of outstanding WQEs, in posting order: a queue of `4 * N`
    /// entries (`refs[i / 4][i % 4]`) indexed by free-running counters.
    refs: [[Option<&'r RegionUse>; REFS_PER_BB]; N],
    /// Next free reference entry.
    ref_head: u32,
    /// Oldest reference entry in use.
    ref_tail: u32,
    /// `ref_head` at the last commit.
    ref_committed: u32,
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
        if crate::wqe::WqeSink::wqe_cnt(&sink) as usize != N {
            return Err(Error::InvalidArgument("sink size differs from the ring's"));
        }
        Ok(SendRing {
            sink,
            builder,
            pi: 0,
            committed: 0,
            tail: 0,
            pushed: 0,
            last: (0, 0),
            info: WqeInfo::EMPTY,
            outstanding: 0,
            in_error: false,
            pending: None,
            slots: [Slot::default(); N],
            refs: [[None; REFS_PER_BB]; N],
            ref_head: 0,
            ref_tail: 0,
            ref_committed: 0,
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

    /// Requests pushed since the last commit.
    pub fn pushed(&self) -> u32 {
        self.pushed
    }

    /// Whether an error CQE was seen (the QP is in error).
    pub fn in_error(&self) -> bool {
        self.in_error
    }

    /// Write `req` into the ring after the last pushed WQE, and count the regions it reads.
    /// Changes nothing on error.
    #[inline(always)]
    pub fn push(&mut self, req: &WriteRequest<'_, 'r>) -> Result<()> {
        let room = self.room();
        self.builder.write_into(&mut self.sink, self.pi, room, req, &mut self.info)?;
        let (shape, signaled, next_pi) =
            (self.info.shape, self.info.signaled(), self.info.next_pi());
        // The bytes are in free blocks that the device does not read until `pi` is published, so
        // a refusal below leaves the ring as it was.
        let (first, more) = match *req.source.kind() {
            SourceKind::Sgl(bufs) if !req.is_inline() => self.acquire(bufs)?,
            _ => (None, 0),
        };
        let pi = self.pi;
        self.slots[pi as usize & Self::MASK] =
            Slot { wr_id: req.wr_id, first, wqebbs: shape.wqebbs, signaled, more };
        self.pi = next_pi;
        self.pushed += 1;
        self.last = (pi, shape.ds);
        Ok(())
    }

    #[inline(always)]
    fn ref_at(&mut self, i: u32) -> &mut Option<&'r RegionUse> {
        let i = i as usize;
        &mut self.refs[(i / REFS_PER_BB) & Self::MASK][i % REFS_PER_BB]
    }

    /// Acquire each run of non-empty buffers from the same region: the first reference is
    /// returned (it goes to the WQE's slot), the others are queued and counted. On failure
    /// nothing stays acquired or queued.
    #[inline]
    fn acquire(&mut self, bufs: &[LocalBuf<'r>]) -> Result<(Option<&'r RegionUse>, u8)> {
        // The common case: one buffer.
        if let [b] = bufs {
            if b.is_empty() {
                return Ok((None, 0));
            }
            b.region().acquire()?;
            return Ok((Some(b.region()), 0));
        }
        // An empty element is not in the WQE (the builder skips it): nothing reads it.
        let mut it = bufs.iter().filter(|b| !b.is_empty());
        let Some(b) = it.next() else { return Ok((None, 0)) };
        let first = b.region();
        first.acquire()?;
        // At most `4 * wqebbs - 2` references (one per non-empty element), and the WQE's blocks
        // were free: the queue has room.
        let start = self.ref_head;
        let mut prev = first;
        for b in it {
            let r = b.region();
            if ptr::eq(r, prev) {
                continue;
            }
            if let Err(e) = r.acquire() {
                first.release();
                self.release_refs(start, self.ref_head);
                self.ref_head = start;
                return Err(e);
            }
            *self.ref_at(self.ref_head) = Some(r);
            self.ref_head = self.ref_head.wrapping_add(1);
            prev = r;
        }
        Ok((Some(first), self.ref_head.wrapping_sub(start) as u8))
    }

    /// Release the references queued in `[from, to)`.
    #[inline]
    fn release_refs(&mut self, from: u32, to: u32) {
        let mut i = from;
        while i != to {
            if let Some(r) = *self.ref_at(i) {
                r.release();
            }
            i = i.wrapping_add(1);
        }
    }

    /// Close the batch: returns the counter and `ds` of the last WQE pushed and how many were
    /// pushed, for the doorbell, or `None` if nothing was pushed.
    #[inline]
    pub fn commit(&mut self) -> Option<((u16, u8), u32)> {
        if self.pushed == 0 {
            return None;
        }
        let n = self.pushed;
        self.pushed = 0;
        self.committed = self.pi;
        self.ref_committed = self.ref_head;
        self.outstanding += n;
        Some((self.last, n))
    }

    /// Release the first references of the WQEs in `[from, to)`.
    fn release_firsts(&self, from: u16, to: u16) {
        let mut p = from;
        while p != to {
            let m = &self.slots[p as usize & Self::MASK];
            if let Some(r) = m.first {
                r.release();
            }
            p = p.wrapping_add(m.wqebbs as u16);
        }
    }

    /// Forget every WQE pushed since the last commit, releasing its regions.
    pub fn abort(&mut self) {
        self.release_firsts(self.committed, self.pi);
        self.release_refs(self.ref_committed, self.ref_head);
        self.ref_head = self.ref_committed;
        self.pi = self.committed;
        self.pushed = 0;
    }

    /// Whether a CQE is still being turned into completions.
    pub fn has_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Take a requester CQE. Its completions come out of [`drain`](Self::drain).
    pub fn on_cqe(&mut self, cqe: &CqeRepr) -> Result<()> {
        debug_assert!(self.pending.is_none());
        if !matches!(cqe.opcode, CqeOpcode::Req | CqeOpcode::ReqErr) {
            return Err(Error::Device(Errno::EIO));
        }
        let inflight = self.committed.wrapping_sub(self.tail);
        if cqe.wqe_counter.wrapping_sub(self.tail) >= inflight {
            // A completion for a WQE that is not outstanding.
            return Err(Error::Device(Errno::EIO));
        }
        let status = cqe.status();
        self.pending = Some(Pending {
            target: cqe.wqe_counter,
            status,
            vendor_err: cqe.vendor_err(),
            opcode: cqe.s_wqe_opcode.wc_opcode().unwrap_or(WcOpcode::RdmaWrite),
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
            let m = self.slots[head as usize & Self::MASK];
            let report = if head == p.target {
                self.pending = None;
                if m.signaled || p.status != WcStatus::Success {
                    Some((p.status, p.vendor_err, p.opcode))
                } else {
                    None
                }
            } else if p.target.wrapping_sub(head) < m.wqebbs as u16 {
                // The CQE names a block inside this WQE, not its start.
                self.pending = None;
                return Err(Error::Device(Errno::EIO));
            } else if p.flush_skipped {
                Some((WcStatus::WrFlushErr, 0, WcOpcode::RdmaWrite))
            } else if m.signaled {
                Some((WcStatus::Success, 0, WcOpcode::RdmaWrite))
            } else {
                None
            };
            if let Some((status, vendor_err, opcode)) = report {
                let mut c = Completion::new(m.wr_id, status, opcode, qpn);
                c.vendor_err = vendor_err;
                out[n] = c;
                n += 1;
            }
            if let Some(r) = m.first {
                r.release();
            }
            if m.more != 0 {
                self.retire_refs(m.more);
            }
            self.tail = head.wrapping_add(m.wqebbs as u16);
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
            let m = &self.slots[head as usize & Self::MASK];
            if m.signaled || m.more != 0 || target.wrapping_sub(head) < m.wqebbs as u16 {
                break;
            }
            if let Some(r) = m.first {
                r.release();
            }
            head = head.wrapping_add(m.wqebbs as u16);
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
        self.abort();
        self.release_firsts(self.tail, self.committed);
        self.release_refs(self.ref_tail, self.ref_head);
        self.ref_tail = self.ref_head;
        self.tail = self.committed;
        self.outstanding = 0;
        self.pending = None;
    }
}
