//! [`CqWriter`]: the device side of a completion queue.

use core::sync::atomic::{fence, Ordering};

use rdma_pmd::{BusAddr, QpNum};

use crate::control::CqParams;
use crate::layout::codes::{CqeOpcode, SendOpcode, Syndrome};
use crate::layout::cqe::{Cqe, LEN};

/// Writes CQEs into one CQ, as the HCA does: entry `pi & (size - 1)` at the producer index
/// `pi`, the body first, then a release fence, then `op_own` (the opcode in the high nibble,
/// the owner bit of the lap, `pi >> log_size`, in bit 0), so a poller that sees the new owner
/// bit sees the whole entry (`cq.c` `get_sw_cqe`).
///
/// How bytes reach memory is the caller's: every write goes through a `store(bus, bytes)`
/// closure (heap DMA, or volatile stores into identity-mapped memory).
#[derive(Clone, Copy, Debug)]
pub struct CqWriter {
    cq: CqParams,
    pi: u32,
}

impl CqWriter {
    /// The device side of the CQ created with `cq`, nothing written yet.
    pub const fn new(cq: CqParams) -> Self {
        CqWriter { cq, pi: 0 }
    }

    /// The CQ written.
    pub fn cq(&self) -> CqParams {
        self.cq
    }

    /// CQEs written so far (the producer index).
    pub fn produced(&self) -> u32 {
        self.pi
    }

    /// Write `body` as the next CQE, with opcode `op` and the lap's owner bit in `op_own`
    /// (byte 63 of `body` is replaced).
    pub fn write(
        &mut self,
        body: &[u8; LEN],
        op: CqeOpcode,
        mut store: impl FnMut(BusAddr, &[u8]),
    ) {
        let size = 1u32 << self.cq.log_size;
        let at = self.cq.buf.add(u64::from(self.pi & (size - 1)) * LEN as u64);
        let owner = ((self.pi >> self.cq.log_size) & 1) as u8;
        let mut entry = *body;
        Cqe::new_unchecked(&mut entry[..]).set_op_own(u8::from(op) << 4 | owner);
        // `op_own` is the entry's last byte: everything before it is the body.
        let (body, op_own) = entry.split_at(LEN - 1);
        store(at, body);
        // Orders the body before the ownership byte: a poller that sees this lap's owner bit
        // reads a complete entry.
        fence(Ordering::Release);
        store(at.add(body.len() as u64), op_own);
        self.pi = self.pi.wrapping_add(1);
    }

    /// Write a requester CQE for the RDMA WRITE at `wqe_counter` of QP `qpn`: success, or the
    /// error `(syndrome, vendor_err)`.
    pub fn requester(
        &mut self,
        qpn: QpNum,
        wqe_counter: u16,
        error: Option<(Syndrome, u8)>,
        store: impl FnMut(BusAddr, &[u8]),
    ) {
        let mut b = [0u8; LEN];
        let mut c = Cqe::new_unchecked(&mut b[..]);
        c.set_s_wqe_opcode_qpn(SendOpcode::RdmaWrite, qpn);
        c.set_wqe_counter(wqe_counter);
        let op = match error {
            Some((syndrome, vendor_err)) => {
                c.set_error(syndrome, vendor_err);
                CqeOpcode::ReqErr
            }
            None => CqeOpcode::Req,
        };
        self.write(&b, op, store);
    }
}
