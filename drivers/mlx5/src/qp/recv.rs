//! The receive half of an mlx5 QP's queues: [`RecvQueue`] (`rdma_post_recvv`) and the
//! responder completions its poll reads.

use rdma_pmd::{Completion, Dest, Error, RecvCaps, RecvQueue, Result};
use rdma_pmd_hal::{Dma, Mmio};

use super::{Qp, QpState};
use crate::control::Control;

/// The receive queue: `rdma_post_recvv` (`mlx5_post_recv`) and the responder half of
/// `mlx5_poll_one`.
impl<'r, M: Mmio, D: Dma, C: Control, const SQ: usize, const RQ: usize, const RS: usize>
    RecvQueue<'r> for Qp<'r, M, D, C, SQ, RQ, RS>
{
    fn recv_caps(&self) -> RecvCaps {
        RecvCaps { max_recv_wr: RQ as u32, max_recv_sge: RS as u32 }
    }

    fn recv_posted(&self) -> u64 {
        self.rq.posted()
    }

    /// Allowed from INIT on ([`Error::NotConnected`] before, and in ERR).
    unsafe fn push_recv(&mut self, wr_id: u64, dest: Dest<'_, 'r>) -> Result<()> {
        if !matches!(self.state, QpState::Init | QpState::Rtr | QpState::Rts) {
            return Err(Error::NotConnected);
        }
        self.rq.post(&self.mem.wq, &self.mem.dbrec, wr_id, dest)
    }

    /// A CQE the device should not have written (for another QP, a send opcode, or with no
    /// receive posted) is consumed and reported as an error, after the completions before it
    /// (the next call returns it); the receive ring does not move.
    fn poll_recv(&mut self, out: &mut [Completion]) -> Result<usize> {
        if let Some(e) = self.recv_fault.take() {
            return Err(e);
        }
        let mut n = 0;
        let mut res = Ok(());
        while n < out.len() {
            let Some(raw) = self.mem.rcq.pop() else { break };
            match self.rq.complete(&raw, self.qpn) {
                Ok(c) => {
                    out[n] = c;
                    n += 1;
                }
                Err(e) => {
                    res = Err(e);
                    break;
                }
            }
        }
        self.mem.rcq.publish();
        super::defer_fault(res.map(|()| n), n, &mut self.recv_fault)
    }

    fn recv_outstanding(&self) -> u32 {
        self.rq.outstanding()
    }
}
