//! A small receive queue: what the *target* of an RDMA WRITE WITH IMMEDIATE needs.
//!
//! A write with immediate consumes one receive WQE at the responder and produces a receive
//! completion (`MLX5_CQE_RESP_WR_IMM`) carrying the immediate data; the payload itself goes
//! where the writer's remote address says, so the receive WQE scatters nothing. Each receive
//! WQE here is one 16-byte data segment with `byte_count = 0` and the invalid lkey
//! `MLX5_INVALID_LKEY` (0x100), the terminator `providers/mlx5/qp.c` `mlx5_post_recv` writes
//! after the last scatter entry. After the WQE, `udma_to_device_barrier` and
//! `dbrec[RCV_DBR] = htobe32(head & 0xffff)`.
//!
//! Completions are matched to WQEs in order (`cq.c` `handle_responder`: `wq->tail`), and report
//! `IBV_WC_RECV_RDMA_WITH_IMM` with the immediate as the number the writer posted.

use rdma_pmd::{Completion, DeviceFault, Error, QpNum, Result, Sge, WcOpcode, WcStatus};
use rdma_pmd_hal::{barrier, DmaBuf};

use crate::layout::codes::CqeOpcode;
use crate::layout::cqe::{Cqe, CqeRepr};
use crate::layout::wqe::RCV_DBR;
use crate::layout::wqe::{DataSeg, INVALID_LKEY};

/// Bytes per receive WQE (one scatter entry).
pub const STRIDE: usize = 16;

/// The receive ring of one QP.
pub struct RecvRing<const N: usize> {
    /// Byte offset of the ring in the QP's work-queue buffer.
    off: usize,
    head: u16,
    tail: u16,
    wr_id: [u64; N],
}

impl<const N: usize> RecvRing<N> {
    const GEOMETRY: () = assert!(
        N.is_power_of_two() && N <= 1 << 15,
        "receive ring size must be a power of two up to 2^15"
    );
    const MASK: usize = N - 1;

    /// A ring at byte `off` of the work-queue buffer.
    pub fn new(off: usize) -> Self {
        #[allow(clippy::let_unit_value)]
        let () = Self::GEOMETRY;
        RecvRing { off, head: 0, tail: 0, wr_id: [0; N] }
    }

    /// Receive WQEs posted and not completed.
    pub fn outstanding(&self) -> u32 {
        self.head.wrapping_sub(self.tail) as u32
    }

    /// Post one receive WQE (no scatter buffer) into `buf` and ring the doorbell record.
    #[inline]
    pub fn post(&mut self, buf: &DmaBuf, dbrec: &DmaBuf, wr_id: u64) -> Result<()> {
        let used = self.outstanding();
        if used >= N as u32 {
            return Err(Error::QueueFull { needed: 1, free: 0 });
        }
        let slot = self.head as usize & Self::MASK;
        let mut seg = [0u8; STRIDE];
        DataSeg::new_unchecked(&mut seg[..]).set_sge(&Sge::new(0, 0, rdma_pmd::Lkey(INVALID_LKEY)));
        let at = self.off + slot * STRIDE;
        for (k, w) in seg.chunks_exact(8).enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            buf.write_u64(at + 8 * k, u64::from_ne_bytes(b));
        }
        self.wr_id[slot] = wr_id;
        self.head = self.head.wrapping_add(1);
        // The WQE reaches memory before the doorbell record that announces it.
        barrier::to_device();
        dbrec.write_u32(RCV_DBR * 4, (self.head as u32).to_be());
        Ok(())
    }

    /// Turn a receive CQE into a completion for the oldest posted WQE. The CQE is checked
    /// whole (a receive posted, its QP, a responder opcode) before the ring moves, so a CQE
    /// the device should not have written consumes no receive.
    pub fn complete(&mut self, raw: &[u8; 64], qpn: QpNum) -> Result<Completion> {
        if self.outstanding() == 0 {
            return Err(DeviceFault::NoReceivePosted.into());
        }
        let cqe = Cqe::new_unchecked(&raw[..]);
        let repr = CqeRepr::parse(&cqe)?;
        if repr.qpn != qpn {
            return Err(DeviceFault::WrongQp { qpn: repr.qpn }.into());
        }
        let (opcode, imm) = match repr.opcode {
            CqeOpcode::RespWrImm => (WcOpcode::RecvRdmaWithImm, Some(cqe.imm_inval_pkey())),
            CqeOpcode::RespSend => (WcOpcode::Send, None),
            CqeOpcode::RespSendImm => (WcOpcode::Send, Some(cqe.imm_inval_pkey())),
            CqeOpcode::RespErr => (WcOpcode::RecvRdmaWithImm, None),
            other => return Err(DeviceFault::UnexpectedOpcode { opcode: other.into() }.into()),
        };
        let slot = self.tail as usize & Self::MASK;
        self.tail = self.tail.wrapping_add(1);
        let status = repr.status();
        let mut c = Completion::new(self.wr_id[slot], status, opcode, qpn);
        if status == WcStatus::Success {
            c.byte_len = repr.byte_cnt;
            c.imm = imm;
        } else {
            c.vendor_err = repr.vendor_err();
        }
        Ok(c)
    }
}
