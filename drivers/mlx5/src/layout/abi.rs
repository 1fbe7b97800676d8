//! `#[repr(C)]` mirrors of rdma-core's `infiniband/mlx5dv.h` structures.
//!
//! They are never used to access device memory (the typed views in [`crate::datapath::wqe`] and
//! [`crate::layout::cqe`] do that, with explicit byte order). They exist so that the byte-range tables
//! of those views are checked, at compile time and in tests, against the C declarations: each
//! field below has the C type's size, and the offsets follow from C layout rules. The big-endian
//! C fields (`__be32`, ...) are declared with their width only.
#![allow(non_camel_case_types, missing_docs)]

use core::mem::{offset_of, size_of};

/// `struct mlx5_wqe_ctrl_seg` (`__attribute__((packed, aligned(4)))`).
#[repr(C, packed)]
pub struct mlx5_wqe_ctrl_seg {
    pub opmod_idx_opcode: u32,
    pub qpn_ds: u32,
    pub signature: u8,
    pub dci_stream_channel_id: u16,
    pub fm_ce_se: u8,
    pub imm: u32,
}

/// `struct mlx5_wqe_raddr_seg`.
#[repr(C)]
pub struct mlx5_wqe_raddr_seg {
    pub raddr: u64,
    pub rkey: u32,
    pub reserved: u32,
}

/// `struct mlx5_wqe_data_seg`.
#[repr(C)]
pub struct mlx5_wqe_data_seg {
    pub byte_count: u32,
    pub lkey: u32,
    pub addr: u64,
}

/// `struct mlx5_wqe_inl_data_seg` (header only).
#[repr(C)]
pub struct mlx5_wqe_inl_data_seg {
    pub byte_count: u32,
}

/// `struct mlx5_cqe64`; the leading 32-byte union (responder fields, tag-matching CQE, TMH) is
/// kept as bytes.
#[repr(C)]
pub struct mlx5_cqe64 {
    pub union0: [u8; 32],
    pub srqn_uidx: u32,
    pub imm_inval_pkey: u32,
    pub app: u8,
    pub app_op: u8,
    pub app_info: u16,
    pub byte_cnt: u32,
    pub timestamp: u64,
    pub sop_drop_qpn: u32,
    pub wqe_counter: u16,
    pub signature: u8,
    pub op_own: u8,
}

/// `struct mlx5_err_cqe`: the error view of the same 64 bytes.
#[repr(C)]
pub struct mlx5_err_cqe {
    pub rsvd0: [u8; 32],
    pub srqn: u32,
    pub rsvd1: [u8; 18],
    pub vendor_err_synd: u8,
    pub syndrome: u8,
    pub s_wqe_opcode_qpn: u32,
    pub wqe_counter: u16,
    pub signature: u8,
    pub op_own: u8,
}

const _: () = {
    assert!(size_of::<mlx5_wqe_ctrl_seg>() == 16);
    assert!(offset_of!(mlx5_wqe_ctrl_seg, fm_ce_se) == 11);
    assert!(offset_of!(mlx5_wqe_ctrl_seg, imm) == 12);
    assert!(size_of::<mlx5_wqe_raddr_seg>() == 16);
    assert!(size_of::<mlx5_wqe_data_seg>() == 16);
    assert!(size_of::<mlx5_wqe_inl_data_seg>() == 4);
    assert!(size_of::<mlx5_cqe64>() == 64);
    assert!(size_of::<mlx5_err_cqe>() == 64);
    assert!(offset_of!(mlx5_cqe64, srqn_uidx) == 32);
    assert!(offset_of!(mlx5_cqe64, byte_cnt) == 44);
    assert!(offset_of!(mlx5_cqe64, timestamp) == 48);
    assert!(offset_of!(mlx5_cqe64, sop_drop_qpn) == 56);
    assert!(offset_of!(mlx5_cqe64, wqe_counter) == 60);
    assert!(offset_of!(mlx5_cqe64, op_own) == 63);
    assert!(offset_of!(mlx5_err_cqe, vendor_err_synd) == 54);
    assert!(offset_of!(mlx5_err_cqe, syndrome) == 55);
    assert!(offset_of!(mlx5_err_cqe, s_wqe_opcode_qpn) == 56);
    assert!(offset_of!(mlx5_err_cqe, wqe_counter) == 60);
};
