//! The 64-byte CQEs the model writes (`struct mlx5_cqe64` and its error view
//! `struct mlx5_err_cqe`, rdma-core `providers/mlx5/mlx5dv.h`; kernel `include/linux/mlx5/cq.h`).
//!
//! | off | size | field |
//! |---|---|---|
//! | 24 | 4 | `flags_rqpn`: responder CQEs carry the source QPN in bits 23:0, "GRH present" in 29:28 and the RoCE L3 header type in 25:24 (rdma-core `cq.c` `handle_responder`, kernel `hw/mlx5/cq.c` `handle_responder`) |
//! | 29 | 1 | `l4_l3_hdr_type`: Ethernet receive CQEs: L4 header type in bits 6:4, L3 header type in 3:2, VLAN stripped in bit 0 (kernel `device.h` `get_cqe_l4_hdr_type`, `cqe_has_vlan`) |
//! | 30 | 2 | `vlan_info`: the stripped VLAN tag's TCI |
//! | 32 | 4 | `srqn_uidx` (user index with CQE version 1; the model writes 0) |
//! | 36 | 4 | `imm_inval_pkey`: the immediate, bytes as they were in the send WQE; for a GSI receive without immediate, the P_Key in bits 15:0 (the kernel's `handle_responder` looks it up for QP1) |
//! | 44 | 4 | `byte_cnt` |
//! | 48 | 8 | `timestamp` (model: nanoseconds since the model started) |
//! | 54 | 1 | `vendor_err_synd` (error CQEs; see [`crate::counters::Reason::vendor_code`]) |
//! | 55 | 1 | `syndrome` (error CQEs) |
//! | 56 | 4 | `sop_drop_qpn`: requester CQEs `s_wqe_opcode << 24 \| qpn`, responder CQEs `qpn` |
//! | 60 | 2 | `wqe_counter` |
//! | 62 | 1 | `signature` |
//! | 63 | 1 | `op_own`: `opcode << 4 \| owner` |
//!
//! All multi-byte fields are big-endian. The owner bit is the lap parity of the CQ producer
//! index (`!!(pi & cqe_cnt)`, the test in rdma-core `cq.c` `get_sw_cqe`).

use crate::be::{put16, put32, put64};
use crate::codes::{CqeOpcode, Syndrome};

/// Bytes of a CQE.
pub const CQE_LEN: usize = 64;
/// Offset of `op_own`, written last.
pub const OP_OWN: usize = 63;

/// What a CQE says, before it becomes bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqeRepr {
    /// Opcode (high nibble of `op_own`).
    pub opcode: CqeOpcode,
    /// Owner bit (bit 0 of `op_own`).
    pub owner: bool,
    /// `wqe_counter`.
    pub wqe_counter: u16,
    /// The QP the CQE reports on (24 bits).
    pub qpn: u32,
    /// For requester CQEs: the send WQE's opcode (top byte of `sop_drop_qpn`).
    pub s_wqe_opcode: u8,
    /// `byte_cnt`.
    pub byte_cnt: u32,
    /// `timestamp`.
    pub timestamp: u64,
    /// `srqn_uidx`.
    pub srqn_uidx: u32,
    /// Responder CQEs: the immediate bytes.
    pub imm: [u8; 4],
    /// Responder CQEs: the source QPN (`flags_rqpn` bits 23:0).
    pub rqpn: u32,
    /// Responder CQEs: `flags_rqpn` bits 31:24 (GRH present in bits 5:4 of this byte, the
    /// RoCE L3 header type in bits 1:0).
    pub flags: u8,
    /// Ethernet receive CQEs: `l4_l3_hdr_type` (byte 29).
    pub hdr_type: u8,
    /// Ethernet receive CQEs: `vlan_info` (bytes 30..32), the TCI of a stripped tag.
    pub vlan_info: u16,
    /// Error CQEs: syndrome.
    pub syndrome: Option<Syndrome>,
    /// Error CQEs: vendor syndrome.
    pub vendor_err: u8,
}

impl CqeRepr {
    /// A blank CQE of `opcode` for `qpn`.
    pub fn new(opcode: CqeOpcode, qpn: u32) -> Self {
        CqeRepr {
            opcode,
            owner: false,
            wqe_counter: 0,
            qpn,
            s_wqe_opcode: 0,
            byte_cnt: 0,
            timestamp: 0,
            srqn_uidx: 0,
            imm: [0; 4],
            rqpn: 0,
            flags: 0,
            hdr_type: 0,
            vlan_info: 0,
            syndrome: None,
            vendor_err: 0,
        }
    }

    /// Write the CQE into `out` (every byte is written; reserved ones are zero).
    pub fn emit(&self, out: &mut [u8; CQE_LEN]) {
        out.fill(0);
        put32(out, 24, u32::from(self.flags) << 24 | (self.rqpn & 0x00ff_ffff));
        out[29] = self.hdr_type;
        put16(out, 30, self.vlan_info);
        put32(out, 32, self.srqn_uidx);
        out[36..40].copy_from_slice(&self.imm);
        match self.syndrome {
            None => {
                put32(out, 44, self.byte_cnt);
                put64(out, 48, self.timestamp);
            }
            Some(s) => {
                // The error view (`mlx5_err_cqe`) has reserved bytes 36..54 and no timestamp.
                out[54] = self.vendor_err;
                out[55] = u8::from(s);
            }
        }
        let top = match self.opcode {
            CqeOpcode::Req | CqeOpcode::ReqErr => u32::from(self.s_wqe_opcode) << 24,
            _ => 0,
        };
        put32(out, 56, top | (self.qpn & 0x00ff_ffff));
        put16(out, 60, self.wqe_counter);
        out[OP_OWN] = (u8::from(self.opcode) << 4) | u8::from(self.owner);
    }
}
