//! Numeric codes the model reads or writes, as enums with an `Unknown(raw)` arm.
//!
//! Sources: rdma-core `providers/mlx5/mlx5dv.h` (`MLX5_OPCODE_*`, `MLX5_CQE_*`,
//! `MLX5_CQE_SYNDROME_*`), the kernel's `include/linux/mlx5/qp.h` and `cq.h`.

use rdma_pmd::code_enum;
code_enum! {
    /// Send WQE opcode: bits 7:0 of the control segment's `opmod_idx_opcode`
    /// (`MLX5_OPCODE_*`, mlx5dv.h). The model executes the RC verbs (WRITE, WRITE WITH
    /// IMMEDIATE, SEND, SEND WITH IMMEDIATE, READ, compare-and-swap, fetch-and-add) and UD
    /// SEND (WITH IMMEDIATE).
    SendOpcode: u8 {
        /// `MLX5_OPCODE_NOP`.
        Nop = 0x00,
        /// `MLX5_OPCODE_RDMA_WRITE`.
        RdmaWrite = 0x08,
        /// `MLX5_OPCODE_RDMA_WRITE_IMM`.
        RdmaWriteImm = 0x09,
        /// `MLX5_OPCODE_SEND`.
        Send = 0x0a,
        /// `MLX5_OPCODE_SEND_IMM`.
        SendImm = 0x0b,
        /// `MLX5_OPCODE_RDMA_READ`.
        RdmaRead = 0x10,
        /// `MLX5_OPCODE_ATOMIC_CS`: 8-byte compare and swap.
        AtomicCs = 0x11,
        /// `MLX5_OPCODE_ATOMIC_FA`: 8-byte fetch and add.
        AtomicFa = 0x12,
    }
}

code_enum! {
    /// CQE opcode: the high nibble of `op_own` (`MLX5_CQE_*`, mlx5dv.h).
    CqeOpcode: u8 {
        /// `MLX5_CQE_REQ`: a send WQE completed.
        Req = 0,
        /// `MLX5_CQE_RESP_WR_IMM`: an RDMA WRITE WITH IMMEDIATE consumed a receive WQE.
        RespWrImm = 1,
        /// `MLX5_CQE_RESP_SEND`: a SEND consumed a receive WQE.
        RespSend = 2,
        /// `MLX5_CQE_RESP_SEND_IMM`: a SEND WITH IMMEDIATE consumed a receive WQE.
        RespSendImm = 3,
        /// `MLX5_CQE_REQ_ERR`: a send WQE completed in error (or was flushed).
        ReqErr = 13,
        /// `MLX5_CQE_RESP_ERR`: a receive WQE completed in error (or was flushed).
        RespErr = 14,
        /// `MLX5_CQE_INVALID`: the value software initialises entries with.
        Invalid = 15,
    }
}

code_enum! {
    /// Error CQE syndrome, byte 55 of an error CQE (`MLX5_CQE_SYNDROME_*`, mlx5dv.h).
    Syndrome: u8 {
        /// `LOCAL_LENGTH_ERR`: the gather list exceeds the largest message (2 GiB).
        LocalLength = 0x01,
        /// `LOCAL_QP_OP_ERR`: a malformed WQE (opcode, index, QPN, DS, segments).
        LocalQpOp = 0x02,
        /// `LOCAL_PROT_ERR`: an lkey that does not exist, is in another PD, or is exceeded.
        LocalProt = 0x04,
        /// `WR_FLUSH_ERR`: the QP was in error when the WQE was reached.
        WrFlush = 0x05,
        /// `REMOTE_INVAL_REQ_ERR`: the responder could not parse the request.
        RemoteInvalReq = 0x12,
        /// `REMOTE_ACCESS_ERR`: the rkey, its rights, its PD or its bounds refused the write.
        RemoteAccess = 0x13,
        /// `REMOTE_OP_ERR`: the responder failed to execute the request.
        RemoteOp = 0x14,
        /// `TRANSPORT_RETRY_EXC_ERR`: the request or its acknowledgement never arrived.
        TransportRetryExc = 0x15,
        /// `RNR_RETRY_EXC_ERR`: the responder had no receive WQE, RNR retries ran out.
        RnrRetryExc = 0x16,
    }
}
