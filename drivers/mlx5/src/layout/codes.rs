//! Codes and flag bits of the mlx5 send and completion queues.
//!
//! Every value comes from rdma-core's `infiniband/mlx5dv.h` (the enums named on each item); the
//! syndrome → [`WcStatus`] mapping is the one `providers/mlx5/cq.c` `mlx5_handle_error_cqe`
//! applies. Codes are enums with an `Unknown(raw)` arm so that a value this crate does not know
//! survives a round trip unchanged.

use rdma_pmd::{code_enum, WcOpcode, WcStatus};

code_enum! {
    /// Send WQE opcode: the low byte of the control segment's `opmod_idx_opcode`, and the top
    /// byte of a requester CQE's `sop_drop_qpn` (`MLX5_OPCODE_*`, mlx5dv.h).
    SendOpcode: u8 {
        /// `MLX5_OPCODE_NOP`.
        Nop = 0x00,
        /// `MLX5_OPCODE_SEND_INVAL`.
        SendInval = 0x01,
        /// `MLX5_OPCODE_RDMA_WRITE`.
        RdmaWrite = 0x08,
        /// `MLX5_OPCODE_RDMA_WRITE_IMM`.
        RdmaWriteImm = 0x09,
        /// `MLX5_OPCODE_SEND`.
        Send = 0x0a,
        /// `MLX5_OPCODE_SEND_IMM`.
        SendImm = 0x0b,
        /// `MLX5_OPCODE_TSO`.
        Tso = 0x0e,
        /// `MLX5_OPCODE_RDMA_READ`.
        RdmaRead = 0x10,
        /// `MLX5_OPCODE_ATOMIC_CS`.
        AtomicCs = 0x11,
        /// `MLX5_OPCODE_ATOMIC_FA`.
        AtomicFa = 0x12,
        /// `MLX5_OPCODE_ATOMIC_MASKED_CS`.
        AtomicMaskedCs = 0x14,
        /// `MLX5_OPCODE_ATOMIC_MASKED_FA`.
        AtomicMaskedFa = 0x15,
        /// `MLX5_OPCODE_FMR`.
        Fmr = 0x19,
        /// `MLX5_OPCODE_LOCAL_INVAL`.
        LocalInval = 0x1b,
        /// `MLX5_OPCODE_CONFIG_CMD`.
        ConfigCmd = 0x1f,
        /// `MLX5_OPCODE_SET_PSV`.
        SetPsv = 0x20,
        /// `MLX5_OPCODE_UMR`.
        Umr = 0x25,
        /// `MLX5_OPCODE_TAG_MATCHING`.
        TagMatching = 0x28,
        /// `MLX5_OPCODE_FLOW_TBL_ACCESS`.
        FlowTblAccess = 0x2c,
        /// `MLX5_OPCODE_MMO`.
        Mmo = 0x2f,
    }
}

impl SendOpcode {
    /// The `ibv_wc_opcode` rdma-core reports for a successful requester completion of this
    /// send opcode (`cq.c` `handle_good_req`), for the opcodes this driver posts.
    pub const fn wc_opcode(self) -> Option<WcOpcode> {
        match self {
            SendOpcode::RdmaWrite | SendOpcode::RdmaWriteImm => Some(WcOpcode::RdmaWrite),
            SendOpcode::Send | SendOpcode::SendImm | SendOpcode::SendInval => Some(WcOpcode::Send),
            SendOpcode::RdmaRead => Some(WcOpcode::RdmaRead),
            SendOpcode::AtomicCs => Some(WcOpcode::CompSwap),
            SendOpcode::AtomicFa => Some(WcOpcode::FetchAdd),
            _ => None,
        }
    }
}

code_enum! {
    /// CQE opcode: the high nibble of `op_own` (`mlx5dv_get_cqe_opcode`; `MLX5_CQE_*`,
    /// mlx5dv.h).
    CqeOpcode: u8 {
        /// `MLX5_CQE_REQ`: a send WQE completed successfully.
        Req = 0,
        /// `MLX5_CQE_RESP_WR_IMM`: responder side of an RDMA WRITE with immediate.
        RespWrImm = 1,
        /// `MLX5_CQE_RESP_SEND`.
        RespSend = 2,
        /// `MLX5_CQE_RESP_SEND_IMM`.
        RespSendImm = 3,
        /// `MLX5_CQE_RESP_SEND_INV`.
        RespSendInv = 4,
        /// `MLX5_CQE_RESIZE_CQ`.
        ResizeCq = 5,
        /// `MLX5_CQE_NO_PACKET`.
        NoPacket = 6,
        /// `MLX5_CQE_SIG_ERR`.
        SigErr = 12,
        /// `MLX5_CQE_REQ_ERR`: a send WQE completed in error (error view applies).
        ReqErr = 13,
        /// `MLX5_CQE_RESP_ERR`: a receive completed in error (error view applies).
        RespErr = 14,
        /// `MLX5_CQE_INVALID`: the entry was never written (the provider initialises every
        /// entry to `op_own = 0xf0`, `cq.c`).
        Invalid = 15,
    }
}

impl CqeOpcode {
    /// Whether the error view (`struct mlx5_err_cqe`: syndrome, vendor syndrome) applies.
    #[inline]
    pub fn is_error(self) -> bool {
        matches!(self, CqeOpcode::ReqErr | CqeOpcode::RespErr)
    }
}

code_enum! {
    /// Error CQE syndrome (byte 55 of `struct mlx5_err_cqe`; `MLX5_CQE_SYNDROME_*`,
    /// mlx5dv.h).
    Syndrome: u8 {
        /// `MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR`.
        LocalLengthErr = 0x01,
        /// `MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR`.
        LocalQpOpErr = 0x02,
        /// `MLX5_CQE_SYNDROME_LOCAL_PROT_ERR`.
        LocalProtErr = 0x04,
        /// `MLX5_CQE_SYNDROME_WR_FLUSH_ERR`.
        WrFlushErr = 0x05,
        /// `MLX5_CQE_SYNDROME_MW_BIND_ERR`.
        MwBindErr = 0x06,
        /// `MLX5_CQE_SYNDROME_BAD_RESP_ERR`.
        BadRespErr = 0x10,
        /// `MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR`.
        LocalAccessErr = 0x11,
        /// `MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR`.
        RemoteInvalReqErr = 0x12,
        /// `MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR`.
        RemoteAccessErr = 0x13,
        /// `MLX5_CQE_SYNDROME_REMOTE_OP_ERR`.
        RemoteOpErr = 0x14,
        /// `MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR`.
        TransportRetryExcErr = 0x15,
        /// `MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR`.
        RnrRetryExcErr = 0x16,
        /// `MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR`.
        RemoteAbortedErr = 0x22,
    }
}

impl Syndrome {
    /// The work-completion status rdma-core reports for this syndrome: the `switch` of
    /// `providers/mlx5/cq.c` `mlx5_handle_error_cqe`, with `IBV_WC_GENERAL_ERR` for every
    /// syndrome it does not name. (The vendor syndrome goes to `wc.vendor_err` unchanged; see
    /// [`crate::layout::cqe::CqeRepr::vendor_err`].)
    pub const fn wc_status(self) -> WcStatus {
        match self {
            Syndrome::LocalLengthErr => WcStatus::LocLenErr,
            Syndrome::LocalQpOpErr => WcStatus::LocQpOpErr,
            Syndrome::LocalProtErr => WcStatus::LocProtErr,
            Syndrome::WrFlushErr => WcStatus::WrFlushErr,
            Syndrome::MwBindErr => WcStatus::MwBindErr,
            Syndrome::BadRespErr => WcStatus::BadRespErr,
            Syndrome::LocalAccessErr => WcStatus::LocAccessErr,
            Syndrome::RemoteInvalReqErr => WcStatus::RemInvReqErr,
            Syndrome::RemoteAccessErr => WcStatus::RemAccessErr,
            Syndrome::RemoteOpErr => WcStatus::RemOpErr,
            Syndrome::TransportRetryExcErr => WcStatus::RetryExcErr,
            Syndrome::RnrRetryExcErr => WcStatus::RnrRetryExcErr,
            Syndrome::RemoteAbortedErr => WcStatus::RemAbortErr,
            Syndrome::Unknown(_) => WcStatus::GeneralErr,
        }
    }

    /// [`wc_status`](Self::wc_status) of the syndrome byte `raw`, from a table of all 256:
    /// one load on the error path, where the `match` is a jump through a table.
    #[inline(always)]
    pub fn wc_status_of_raw(raw: u8) -> WcStatus {
        WC_STATUS_BY_SYNDROME[raw as usize]
    }
}

/// [`Syndrome::wc_status`] by raw syndrome byte.
const WC_STATUS_BY_SYNDROME: [WcStatus; 256] = {
    let mut t = [WcStatus::GeneralErr; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = Syndrome::from_raw(i as u8).wc_status();
        i += 1;
    }
    t
};

bitflags::bitflags! {
    /// The control segment's `fm_ce_se` byte (byte 11): fence mode in bits 7:5, completion
    /// event (CE) in bits 3:2, solicited event (SE) in bit 1. Values from mlx5dv.h's
    /// `MLX5_WQE_CTRL_*` enum; `providers/mlx5/qp.c` ORs them as
    /// `sq_signal_bits | fence | (SIGNALED ? CQ_UPDATE : 0) | (SOLICITED ? SOLICITED : 0)`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct FmCeSe: u8 {
        /// `MLX5_WQE_CTRL_FENCE` (`4 << 5`): what rdma-core userspace sets for
        /// `IBV_SEND_FENCE` (the kernel calls it `MLX5_FENCE_MODE_SMALL_AND_FENCE`).
        const FENCE = 0x80;
        /// `MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE` (`1 << 5`): the provider's `fm_cache` after a
        /// LOCAL_INV or BIND_MW work request.
        const SMALL_FENCE = 0x20;
        /// `MLX5_WQE_CTRL_CQ_UPDATE` (`2 << 2`, CE = 2): always generate a CQE.
        const CQ_UPDATE = 0x08;
        /// `MLX5_WQE_CTRL_SOLICITED` (`1 << 1`): solicited event at the responder.
        const SOLICITED = 0x02;
        /// Any other bit survives a round trip.
        const _ = !0;
    }
}

/// Size of a send WQE basic block (`MLX5_SEND_WQE_BB`, mlx5dv.h): one ring slot.
pub const SEND_WQE_BB: usize = 64;
/// log2 of [`SEND_WQE_BB`] (`MLX5_SEND_WQE_SHIFT`).
pub const SEND_WQE_SHIFT: u32 = 6;
/// The unit of the control segment's `ds` count (`MLX5_SEND_WQE_DS` in the kernel's
/// `mlx5/qp.h`; equal to `sizeof(struct mlx5_wqe_data_seg)`).
pub const SEND_WQE_DS: usize = 16;
/// Largest `ds` the 6-bit field holds (kernel `MLX5_WQE_CTRL_DS_MASK`).
pub const MAX_DS: u32 = 0x3f;
/// Flag ORed into an inline segment's byte count (`MLX5_INLINE_SEG`, mlx5dv.h).
pub const INLINE_SEG: u32 = 0x8000_0000;
/// Bits 2/3 of a requester CQE's `op_own`: data scattered into the CQE
/// (`MLX5_INLINE_SCATTER_32` / `_64`, mlx5dv.h).
pub const INLINE_SCATTER_32: u8 = 0x4;
/// See [`INLINE_SCATTER_32`].
pub const INLINE_SCATTER_64: u8 = 0x8;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_match_mlx5dv_h() {
        assert_eq!(u8::from(SendOpcode::RdmaWrite), 0x08);
        assert_eq!(u8::from(SendOpcode::RdmaWriteImm), 0x09);
        assert_eq!(SendOpcode::from(0x33), SendOpcode::Unknown(0x33));
        assert_eq!(u8::from(CqeOpcode::ReqErr), 13);
        assert_eq!(CqeOpcode::from(15), CqeOpcode::Invalid);
        assert_eq!(FmCeSe::CQ_UPDATE.bits(), 2 << 2);
        assert_eq!(FmCeSe::FENCE.bits(), 4 << 5);
        assert_eq!(FmCeSe::SMALL_FENCE.bits(), 1 << 5);
        assert_eq!(FmCeSe::SOLICITED.bits(), 1 << 1);
        assert_eq!(FmCeSe::from_bits_retain(0x40).bits(), 0x40);
        for raw in 0..=255u8 {
            assert_eq!(u8::from(Syndrome::from(raw)), raw);
            assert_eq!(u8::from(SendOpcode::from(raw)), raw);
            assert_eq!(u8::from(CqeOpcode::from(raw)), raw);
        }
    }

    #[test]
    fn syndromes_map_like_mlx5_handle_error_cqe() {
        let table = [
            (0x01, WcStatus::LocLenErr),
            (0x02, WcStatus::LocQpOpErr),
            (0x04, WcStatus::LocProtErr),
            (0x05, WcStatus::WrFlushErr),
            (0x06, WcStatus::MwBindErr),
            (0x10, WcStatus::BadRespErr),
            (0x11, WcStatus::LocAccessErr),
            (0x12, WcStatus::RemInvReqErr),
            (0x13, WcStatus::RemAccessErr),
            (0x14, WcStatus::RemOpErr),
            (0x15, WcStatus::RetryExcErr),
            (0x16, WcStatus::RnrRetryExcErr),
            (0x22, WcStatus::RemAbortErr),
        ];
        for raw in 0..=255u8 {
            let want = table
                .iter()
                .find(|(s, _)| *s == raw)
                .map(|(_, w)| *w)
                .unwrap_or(WcStatus::GeneralErr);
            assert_eq!(Syndrome::from(raw).wc_status(), want, "syndrome {raw:#x}");
            assert_eq!(Syndrome::wc_status_of_raw(raw), want, "tabulated, {raw:#x}");
        }
        // Numbers as rdma-core's enum ibv_wc_status.
        assert_eq!(u32::from(Syndrome::RemoteAccessErr.wc_status()), 10);
        assert_eq!(u32::from(Syndrome::Unknown(0x93).wc_status()), 21);
    }
}
