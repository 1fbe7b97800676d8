//! The send half of an mlx5 QP's [`SendQueue`]: single posts, batches and their doorbell,
//! and the requester completions its poll reads.

use rdma_pmd::post::SourceKind;
use rdma_pmd::{
    Caps, Completion, DestKind, DeviceFault, QpNum, RegionUse, RemoteBuf, Result, Rkey, SendFlags,
    SendOp, SendQueue, SendRequest, Sge,
};
use rdma_pmd_hal::{Dma, Mmio};

use super::{Qp, QpState};
use crate::control::Control;
use crate::datapath::doorbell::Captured;
use crate::datapath::send::{SqCursor, Staged};
use crate::datapath::wqe::Head;
use crate::layout::codes::{CqeOpcode, Syndrome};
use crate::layout::cqe::Cqe;

/// The heads [`Qp::post_sge`] writes, as its parameter (a constant, so that each head gets a
/// copy of the path with the head's fields folded in).
const WRITE: u8 = 0;
const SEND: u8 = 1;
const READ: u8 = 2;

/// The head `OP` names, with the request's fields (`remote` is unused for a SEND, `imm` for a
/// READ).
#[inline(always)]
fn head_of<const OP: u8>(remote: RemoteBuf, imm: Option<u32>) -> Head<'static> {
    match OP {
        WRITE => Head::Write { remote, imm },
        SEND => Head::Send { imm },
        _ => Head::Read { remote },
    }
}

impl<'r, M: Mmio, D: Dma, C: Control, const SQ: usize, const RQ: usize, const RS: usize>
    Qp<'r, M, D, C, SQ, RQ, RS>
{
    /// Ring the send doorbell for the WQEs of `staged` (a BlueFlame copy reads the ring), then
    /// let them join the ring.
    #[inline(always)]
    fn ring_sq(&mut self, staged: Staged) {
        let (last, nreq, pi) = (staged.last, staged.nreq, staged.pi());
        self.db.ring(self.dev.mmio(), &self.mem.dbrec, &self.sq.sink, last, nreq, pi);
        self.sq.close(staged);
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
        let open = self.state == QpState::Rts;
        let head = head_of::<OP>(remote, imm);
        let (staged, block) = self.sq.post_sge(open, wr_id, e, region, flags, head)?;
        // The burst from the words just stored, not read back from the ring.
        let src = Captured { pi: staged.last.pi, block, ring: &self.sq.sink };
        let (last, nreq, pi) = (staged.last, staged.nreq, staged.pi());
        self.db.ring(self.dev.mmio(), &self.mem.dbrec, &src, last, nreq, pi);
        self.sq.close(staged);
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
        debug_assert!(OP != READ, "a READ has no inline form");
        let open = self.state == QpState::Rts;
        let head = head_of::<OP>(remote, imm);
        let staged = self.sq.post_inline(open, wr_id, pieces, flags, head)?;
        self.ring_sq(staged);
        Ok(())
    }

    /// [`SendQueue::post_one`] of any request: no cursor leaves the ring, so commit's checks
    /// of one are not needed.
    #[inline(never)]
    fn post_any(&mut self, req: &SendRequest<'_, 'r>) -> Result<()> {
        let staged = self.sq.post_one(self.state == QpState::Rts, req)?;
        self.ring_sq(staged);
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
        if let Some(staged) = self.sq.commit(at) {
            self.ring_sq(staged);
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
        super::defer_fault(res, n, &mut self.sq.fault)
    }

    fn outstanding(&self) -> u32 {
        self.sq.outstanding()
    }
}
