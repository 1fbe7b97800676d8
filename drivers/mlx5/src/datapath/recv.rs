//! The receive ring: receive WQEs with scatter lists, and their completions.
//!
//! A receive WQE is `S` data segments of 16 bytes (`S` a power of two, so the stride
//! `16 * S` is one too, as the PRM's `log_rq_stride` needs). `providers/mlx5/qp.c`
//! `mlx5_post_recv` writes one segment per element of non-zero length and, when fewer than
//! `S` were written, a terminator segment (`byte_count` 0, `lkey` `MLX5_INVALID_LKEY`
//! 0x100, `addr` 0) after them; the device stops scattering there. An empty list is just the
//! terminator: the receive a WRITE WITH IMMEDIATE consumes. After the WQE,
//! `udma_to_device_barrier` and `dbrec[RCV_DBR] = htobe32(head & 0xffff)`.
//!
//! Completions are matched to WQEs in order (`cq.c` `handle_responder`: `wq->tail`), and
//! each must say so: its `wqe_counter`, modulo the ring, is the oldest outstanding WQE's
//! ([`DeviceFault::WrongReceive`] otherwise: rdma-core trusts the order, this driver checks
//! it, as the send side checks its counters), and
//! report `IBV_WC_RECV` for a SEND (`MLX5_CQE_RESP_SEND`, `_SEND_IMM` with the immediate) or
//! `IBV_WC_RECV_RDMA_WITH_IMM` for a write with immediate, `byte_len` from the CQE, and, on a
//! datagram QP, the source QP and GRH flag from `flags_rqpn`.
//!
//! The regions of a receive's buffers are counted busy from the post until its completion
//! (or flush) is reaped, or the QP is destroyed; the buffers themselves are out of the user's
//! reach meanwhile ([`rdma_pmd::Pending`]).

use rdma_pmd::{
    Completion, Dest, DestKind, DeviceFault, Error, QpNum, Released, Result, Sge, WcOpcode,
    WcStatus,
};
use rdma_pmd_hal::{barrier, DmaBuf};

use crate::layout::codes::CqeOpcode;
use crate::layout::cqe::{Cqe, CqeRepr};
use crate::layout::wqe::{DataSeg, INVALID_LKEY, RCV_DBR, SEG_LEN};

/// The receive ring of one QP: `N` WQEs of `S` scatter entries.
pub struct RecvRing<'r, const N: usize, const S: usize> {
    /// Byte offset of the ring in the QP's work-queue buffer.
    off: usize,
    head: u16,
    tail: u16,
    /// Receives posted since the ring was made.
    posted: u64,
    wr_id: [u64; N],
    /// The regions each posted WQE's entries name (one per non-empty entry).
    regions: [[Option<&'r Released>; S]; N],
}

impl<'r, const N: usize, const S: usize> RecvRing<'r, N, S> {
    const GEOMETRY: () = assert!(
        N.is_power_of_two() && N <= 1 << 15 && S.is_power_of_two() && S * SEG_LEN <= 2048,
        "receive ring: a power of two of WQEs up to 2^15, of a power of two of entries up to 128"
    );
    const MASK: usize = N - 1;
    /// Bytes per WQE.
    pub const STRIDE: usize = S * SEG_LEN;

    /// A ring at byte `off` of the work-queue buffer.
    pub fn new(off: usize) -> Self {
        #[allow(clippy::let_unit_value)]
        let () = Self::GEOMETRY;
        RecvRing { off, head: 0, tail: 0, posted: 0, wr_id: [0; N], regions: [[None; S]; N] }
    }

    /// Receive WQEs posted and not completed.
    pub fn outstanding(&self) -> u32 {
        self.head.wrapping_sub(self.tail) as u32
    }

    /// Receives posted since the ring was made.
    pub fn posted(&self) -> u64 {
        self.posted
    }

    /// Receives retired since the ring was made.
    pub fn retired(&self) -> u64 {
        self.posted - self.outstanding() as u64
    }

    /// Post one receive WQE scattering into `dest` into `buf` and ring the doorbell record.
    /// Refused, with nothing changed: more elements than `S` ([`Error::TooManyRecvSges`], EINVAL
    /// as `mlx5_post_recv`), a full ring ([`Error::QueueFull`], ENOMEM), a deregistered
    /// region ([`Error::BadLkey`]), a message above 2^31 bytes.
    #[inline]
    pub fn post(
        &mut self,
        buf: &DmaBuf,
        dbrec: &DmaBuf,
        wr_id: u64,
        dest: Dest<'_, 'r>,
    ) -> Result<()> {
        if dest.count() > S {
            return Err(Error::TooManyRecvSges { given: dest.count(), max: S });
        }
        if dest.total_len().is_none() {
            return Err(Error::InvalidArgument("message above 2 GiB"));
        }
        if self.outstanding() >= N as u32 {
            return Err(Error::QueueFull { needed: 1, free: 0 });
        }
        let slot = self.head as usize & Self::MASK;
        // Count the regions first: a refusal then leaves the ring as it was.
        let mut held: [Option<&'r Released>; S] = [None; S];
        if let DestKind::Bufs(bufs) = *dest.kind() {
            for (k, b) in bufs.iter().filter(|b| !b.is_empty()).enumerate() {
                if let Err(e) = b.region().acquire() {
                    release(&mut held);
                    return Err(e);
                }
                held[k] = Some(b.region().released());
            }
        }
        let at = self.off + slot * Self::STRIDE;
        let sges = (0..dest.count()).filter_map(|i| dest.sge(i));
        recv_entries(sges, S, |k, seg| put_seg(buf, at + k * SEG_LEN, &seg));
        self.wr_id[slot] = wr_id;
        self.regions[slot] = held;
        self.head = self.head.wrapping_add(1);
        self.posted += 1;
        // The WQE reaches memory before the doorbell record that announces it.
        barrier::to_device();
        dbrec.write_u32(RCV_DBR * 4, (self.head as u32).to_be());
        Ok(())
    }

    /// Turn a receive CQE into a completion for the oldest posted WQE. The CQE is checked
    /// whole (a receive posted, its QP, a responder opcode, its `wqe_counter` naming that
    /// WQE) before the ring moves, so a CQE the device should not have written consumes no
    /// receive.
    pub fn complete(&mut self, raw: &[u8; 64], qpn: QpNum) -> Result<Completion> {
        if self.outstanding() == 0 {
            return Err(DeviceFault::NoReceivePosted.into());
        }
        let cqe = Cqe::new_unchecked(&raw[..]);
        let repr = CqeRepr::parse(&cqe)?;
        if repr.qpn != qpn {
            return Err(DeviceFault::WrongQp { qpn: repr.qpn }.into());
        }
        // Checked before the ring moves: a CQE of the wrong kind consumes no receive.
        if !matches!(
            repr.opcode,
            CqeOpcode::RespWrImm
                | CqeOpcode::RespSend
                | CqeOpcode::RespSendImm
                | CqeOpcode::RespErr
        ) {
            return Err(DeviceFault::UnexpectedOpcode { opcode: repr.opcode.into() }.into());
        }
        // A plain RQ completes in order, and the CQE names the receive it completes: the
        // oldest outstanding one, modulo the ring (the kernel's `mlx5_wq_cyc_ctr2ix`). Any
        // other counter (a duplicated CQE, a skipped receive) retires nothing: retiring
        // anyway would hand back a buffer the device still owns and may write.
        if (repr.wqe_counter ^ self.tail) as usize & Self::MASK != 0 {
            return Err(DeviceFault::WrongReceive {
                counter: repr.wqe_counter,
                expected: self.tail,
            }
            .into());
        }
        let slot = self.tail as usize & Self::MASK;
        self.tail = self.tail.wrapping_add(1);
        // The device is done with the WQE's buffers: its completion is in hand.
        release(&mut self.regions[slot]);
        responder_completion(&cqe, &repr, self.wr_id[slot], qpn)
    }

    /// Release the regions of every receive still posted and forget them: for teardown, once
    /// the device can no longer write them (the QP is destroyed).
    pub fn release_everything(&mut self) {
        let mut t = self.tail;
        while t != self.head {
            release(&mut self.regions[t as usize & Self::MASK]);
            t = t.wrapping_add(1);
        }
        self.tail = self.head;
    }

    /// Start over at the first WQE once the device has let go of the ring (the QP moved to
    /// RESET), releasing what is still posted; `posted` keeps counting.
    pub fn restart(&mut self) {
        self.release_everything();
        self.head = 0;
        self.tail = 0;
    }
}

/// The scatter entries `mlx5_post_recv` writes into a receive WQE of `max` entries for the
/// elements `sges`: one per element of non-zero length, then, when fewer than `max` were
/// written, the terminator (`byte_count` 0, `MLX5_INVALID_LKEY`, address 0). `put(k, entry)`
/// stores entry `k`; returns how many entries were stored. The caller has checked that the
/// elements are at most `max`.
pub fn recv_entries(
    sges: impl Iterator<Item = Sge>,
    max: usize,
    mut put: impl FnMut(usize, Sge),
) -> usize {
    let mut j = 0;
    for e in sges.filter(|e| e.length != 0).take(max) {
        put(j, e);
        j += 1;
    }
    if j < max {
        put(j, Sge::new(0, 0, rdma_pmd::Lkey(INVALID_LKEY)));
        j += 1;
    }
    j
}

/// The completion `cq.c` `handle_responder` makes of a responder CQE (`RESP_SEND`,
/// `RESP_SEND_IMM`, `RESP_WR_IMM`, or `RESP_ERR` through `mlx5_handle_error_cqe`) for the
/// receive known as `wr_id`: `IBV_WC_RECV` or `IBV_WC_RECV_RDMA_WITH_IMM`, `byte_len` from
/// `byte_cnt`, the immediate for the `_IMM` opcodes, and `src_qp` and the GRH flag from
/// `flags_rqpn` (which the provider reports on every QP type; only UD and GSI QPs fill them).
pub fn responder_completion<T: AsRef<[u8]>>(
    cqe: &Cqe<T>,
    repr: &CqeRepr,
    wr_id: u64,
    qpn: QpNum,
) -> Result<Completion> {
    let (opcode, imm) = match repr.opcode {
        CqeOpcode::RespWrImm => (WcOpcode::RecvRdmaWithImm, Some(cqe.imm_inval_pkey())),
        CqeOpcode::RespSend => (WcOpcode::Recv, None),
        CqeOpcode::RespSendImm => (WcOpcode::Recv, Some(cqe.imm_inval_pkey())),
        CqeOpcode::RespErr => (WcOpcode::Recv, None),
        other => return Err(DeviceFault::UnexpectedOpcode { opcode: other.into() }.into()),
    };
    let status = repr.status();
    let mut c = Completion::new(wr_id, status, opcode, qpn);
    if status == WcStatus::Success {
        c.byte_len = repr.byte_cnt;
        c.imm = imm;
        let f = cqe.flags_rqpn();
        c.src_qp = QpNum(f & QpNum::MAX);
        c.grh = (f >> 28) & 3 != 0;
    } else {
        c.vendor_err = repr.vendor_err();
    }
    Ok(c)
}

/// Release (once) each region counted in `held`.
fn release<const S: usize>(held: &mut [Option<&Released>; S]) {
    for h in held.iter_mut() {
        if let Some(r) = h.take() {
            // SAFETY: each entry answers one `acquire` of `post`, made for a receive the
            // device can no longer write (completed, or never rung, or its QP destroyed), and
            // is taken out here, so it is released once.
            unsafe { r.release_many(1) };
        }
    }
}

/// Store one 16-byte scatter entry at byte `at` of `buf`.
#[inline]
fn put_seg(buf: &DmaBuf, at: usize, e: &Sge) {
    let seg = DataSeg::encode(e);
    for (k, w) in seg.chunks_exact(8).enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        buf.write_u64(at + 8 * k, u64::from_ne_bytes(b));
    }
}
