//! Work completions.

use crate::addr::QpNum;

/// Define a code enum with an `Unknown(raw)` arm and lossless conversions to and from its raw
/// integer (the pattern of smoltcp's `enum_with_unknown!`): hardware and ABI codes that this
/// crate does not know survive a round trip unchanged.
///
/// ```
/// rdma_pmd::code_enum! {
///     /// A colour code.
///     Colour: u8 {
///         /// Red.
///         Red = 1,
///     }
/// }
/// assert_eq!(Colour::from(1), Colour::Red);
/// assert_eq!(u8::from(Colour::from(7)), 7);
/// ```
#[macro_export]
macro_rules! code_enum {
    ($(#[$m:meta])* $name:ident : $t:ty { $($(#[$vm:meta])* $v:ident = $n:expr,)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vm])* $v,)*
            /// A value this crate does not know; kept verbatim.
            Unknown($t),
        }

        impl From<$t> for $name {
            #[inline]
            fn from(raw: $t) -> Self {
                Self::from_raw(raw)
            }
        }

        impl $name {
            /// The code of a raw value (usable in constants, unlike `From`).
            #[inline]
            pub const fn from_raw(raw: $t) -> Self {
                match raw {
                    $($n => $name::$v,)*
                    other => $name::Unknown(other),
                }
            }

            /// The raw value (usable in constants, unlike `From`).
            #[inline]
            pub const fn raw(self) -> $t {
                match self {
                    $($name::$v => $n,)*
                    $name::Unknown(other) => other,
                }
            }
        }

        impl From<$name> for $t {
            #[inline]
            fn from(v: $name) -> $t {
                v.raw()
            }
        }
    };
}

code_enum! {
    /// Completion status, numbered like rdma-core's `enum ibv_wc_status` (`infiniband/verbs.h`).
    WcStatus: u32 {
        /// `IBV_WC_SUCCESS`.
        Success = 0,
        /// `IBV_WC_LOC_LEN_ERR`: a local length was invalid.
        LocLenErr = 1,
        /// `IBV_WC_LOC_QP_OP_ERR`: the work request was malformed for this QP.
        LocQpOpErr = 2,
        /// `IBV_WC_LOC_EEC_OP_ERR`.
        LocEecOpErr = 3,
        /// `IBV_WC_LOC_PROT_ERR`: a local key or access right did not allow the access.
        LocProtErr = 4,
        /// `IBV_WC_WR_FLUSH_ERR`: the QP was in error; the request was not executed.
        WrFlushErr = 5,
        /// `IBV_WC_MW_BIND_ERR`.
        MwBindErr = 6,
        /// `IBV_WC_BAD_RESP_ERR`.
        BadRespErr = 7,
        /// `IBV_WC_LOC_ACCESS_ERR`.
        LocAccessErr = 8,
        /// `IBV_WC_REM_INV_REQ_ERR`: the responder found the request invalid.
        RemInvReqErr = 9,
        /// `IBV_WC_REM_ACCESS_ERR`: bad rkey, bounds or rights at the responder.
        RemAccessErr = 10,
        /// `IBV_WC_REM_OP_ERR`.
        RemOpErr = 11,
        /// `IBV_WC_RETRY_EXC_ERR`: transport retries exhausted.
        RetryExcErr = 12,
        /// `IBV_WC_RNR_RETRY_EXC_ERR`.
        RnrRetryExcErr = 13,
        /// `IBV_WC_LOC_RDD_VIOL_ERR`.
        LocRddViolErr = 14,
        /// `IBV_WC_REM_INV_RD_REQ_ERR`.
        RemInvRdReqErr = 15,
        /// `IBV_WC_REM_ABORT_ERR`.
        RemAbortErr = 16,
        /// `IBV_WC_INV_EECN_ERR`.
        InvEecnErr = 17,
        /// `IBV_WC_INV_EEC_STATE_ERR`.
        InvEecStateErr = 18,
        /// `IBV_WC_FATAL_ERR`.
        FatalErr = 19,
        /// `IBV_WC_RESP_TIMEOUT_ERR`.
        RespTimeoutErr = 20,
        /// `IBV_WC_GENERAL_ERR`.
        GeneralErr = 21,
    }
}

code_enum! {
    /// Completion opcode, numbered like rdma-core's `enum ibv_wc_opcode`.
    WcOpcode: u32 {
        /// `IBV_WC_SEND`.
        Send = 0,
        /// `IBV_WC_RDMA_WRITE` (also reported for RDMA WRITE with immediate on the requester).
        RdmaWrite = 1,
        /// `IBV_WC_RDMA_READ`.
        RdmaRead = 2,
        /// `IBV_WC_COMP_SWAP`: an atomic compare-and-swap.
        CompSwap = 3,
        /// `IBV_WC_FETCH_ADD`: an atomic fetch-and-add.
        FetchAdd = 4,
        /// `IBV_WC_RECV`: a receive consumed by a SEND (with or without immediate).
        Recv = 128,
        /// `IBV_WC_RECV_RDMA_WITH_IMM`: responder side of a write with immediate.
        RecvRdmaWithImm = 129,
    }
}

impl WcStatus {
    /// Whether the request completed successfully.
    pub fn is_ok(self) -> bool {
        self == WcStatus::Success
    }
}

/// One work completion, as `ibv_poll_cq` reports it (the fields a write needs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The `context` given when the request was posted (`ibv_wc.wr_id`).
    pub wr_id: u64,
    /// How it ended.
    pub status: WcStatus,
    /// What it was. Valid only when `status` is `Success` (as with verbs).
    pub opcode: WcOpcode,
    /// Vendor syndrome of an error completion (`ibv_wc.vendor_err`), 0 otherwise.
    pub vendor_err: u32,
    /// Bytes transferred, where the backend reports it (0 for requester writes on mlx5).
    pub byte_len: u32,
    /// The local QP the request was posted on (or received on).
    pub qp_num: QpNum,
    /// Immediate data of a received SEND or RDMA WRITE WITH IMMEDIATE, as the number the
    /// sender posted (`be32toh(ibv_wc.imm_data)` when `IBV_WC_WITH_IMM` is set); `None`
    /// otherwise.
    pub imm: Option<u32>,
    /// The sending QP of a received datagram (`ibv_wc.src_qp`; UD and GSI receives only).
    pub src_qp: QpNum,
    /// A received datagram's first 40 bytes hold a GRH (`IBV_WC_GRH`).
    pub grh: bool,
}

bitflags::bitflags! {
    /// `enum ibv_wc_flags`, the bits a completion of this API can carry.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct WcFlags: u32 {
        /// `IBV_WC_GRH`: the receive buffer starts with a 40-byte GRH.
        const GRH = 1 << 0;
        /// `IBV_WC_WITH_IMM`: `imm` is valid.
        const WITH_IMM = 1 << 1;
    }
}

impl Completion {
    /// A completion with status and opcode set and everything else zero.
    pub const fn new(wr_id: u64, status: WcStatus, opcode: WcOpcode, qp_num: QpNum) -> Self {
        Self {
            wr_id,
            status,
            opcode,
            vendor_err: 0,
            byte_len: 0,
            qp_num,
            imm: None,
            src_qp: QpNum(0),
            grh: false,
        }
    }

    /// `ibv_wc.wc_flags`: [`WcFlags::GRH`] and [`WcFlags::WITH_IMM`] as the fields say.
    #[inline]
    pub const fn flags(&self) -> WcFlags {
        let mut bits = 0;
        if self.grh {
            bits |= WcFlags::GRH.bits();
        }
        if self.imm.is_some() {
            bits |= WcFlags::WITH_IMM.bits();
        }
        WcFlags::from_bits_retain(bits)
    }
}

impl Default for Completion {
    fn default() -> Self {
        Self::new(0, WcStatus::Success, WcOpcode::RdmaWrite, QpNum(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcode_and_flag_numbers_match_ibv_wc() {
        // <infiniband/verbs.h>: enum ibv_wc_opcode, enum ibv_wc_flags.
        let ops = [
            (WcOpcode::Send, 0),
            (WcOpcode::RdmaWrite, 1),
            (WcOpcode::RdmaRead, 2),
            (WcOpcode::CompSwap, 3),
            (WcOpcode::FetchAdd, 4),
            (WcOpcode::Recv, 128),
            (WcOpcode::RecvRdmaWithImm, 129),
        ];
        for (op, n) in ops {
            assert_eq!(u32::from(op), n);
            assert_eq!(WcOpcode::from(n), op);
        }
        assert_eq!(WcFlags::GRH.bits(), 1);
        assert_eq!(WcFlags::WITH_IMM.bits(), 2);
        let mut c = Completion::default();
        assert_eq!(c.flags(), WcFlags::empty());
        c.imm = Some(7);
        c.grh = true;
        assert_eq!(c.flags(), WcFlags::GRH | WcFlags::WITH_IMM);
    }

    #[test]
    fn status_numbers_match_ibv_wc_status() {
        assert_eq!(u32::from(WcStatus::Success), 0);
        assert_eq!(u32::from(WcStatus::WrFlushErr), 5);
        assert_eq!(u32::from(WcStatus::RemAccessErr), 10);
        assert_eq!(u32::from(WcStatus::RetryExcErr), 12);
        assert_eq!(u32::from(WcStatus::GeneralErr), 21);
        assert_eq!(WcStatus::from(99), WcStatus::Unknown(99));
        for n in 0..32 {
            assert_eq!(u32::from(WcStatus::from(n)), n);
        }
    }

    #[test]
    fn opcode_numbers_match_ibv_wc_opcode() {
        assert_eq!(u32::from(WcOpcode::RdmaWrite), 1);
        assert_eq!(u32::from(WcOpcode::RecvRdmaWithImm), 129);
    }
}
