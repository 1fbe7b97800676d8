//! The completion side of the send ring: requester CQEs retire WQEs and release what they
//! borrowed.
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

use rdma_pmd::{Completion, DeviceFault, QpNum, Result, WcOpcode, WcStatus};

use super::{entry, Meta, SendRing, REFS_PER_BB};
use crate::layout::codes::SendOpcode;

/// A CQE being turned into completions one WQE at a time: retire WQEs from `tail` up to
/// `target`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pending {
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

impl<'r, const N: usize> SendRing<'r, N> {
    /// Release the references queued in `[from, to)`: entries this ring acquired for WQEs
    /// the device can no longer read (rolled back, or the QP destroyed). At most the queue's
    /// `4N` entries, whatever the bounds say.
    #[inline]
    pub(super) fn release_refs(&mut self, from: u32, to: u32) {
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
    /// [`RegionUse::release_many`](rdma_pmd::RegionUse::release_many). Returns the run
    /// holding `to` (or the last).
    #[inline]
    pub(super) fn release_runs(&mut self, mut r: u16, head: u16, from: u16, to: u16) -> u16 {
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
    pub(crate) fn on_success(
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
    pub(crate) fn on_error(
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

#[cfg(test)]
mod tests {
    use super::*;

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
