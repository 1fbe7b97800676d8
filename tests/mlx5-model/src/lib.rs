//! # rdma-pmd-mlx5-model: a software mlx5 (ConnectX) HCA that examines the driver
//!
//! The model reads what the driver writes — doorbells and BlueFlame copies in the BAR, WQEs
//! and doorbell records in DMA memory — parses every byte itself (big-endian, from the
//! documented layouts, not from the driver's code), executes RDMA WRITE and RDMA WRITE WITH
//! IMMEDIATE between RC QPs, and writes CQEs back the way the hardware does. Everything it
//! refuses or finds odd is counted and logged with a reason, so tests can assert that the
//! driver did exactly what it claims.
//!
//! ```
//! use rdma_pmd_mlx5::control::Control;
//! use rdma_pmd_mlx5_model::Model;
//!
//! let model = Model::new();
//! let mut ctl = model.control();        // the driver's control seam
//! let _bar = model.bar();               // the BAR the driver maps (rdma_pmd_hal::Mmio)
//! let _dma = model.dma();               // the DMA space the driver allocates from
//! let uar = ctl.alloc_uar().unwrap();
//! assert_eq!((uar.index, uar.bar_offset), (1, 4096));
//! assert_eq!(ctl.caps().log_bf_reg_size, 9);
//! assert_eq!(model.counters().validation_failures, 0);
//! ```
//!
//! ## BAR layout
//!
//! UAR page `i` is at `i * 4096`; ALLOC_UAR hands out `i >= 1` (page 0 is reserved for the
//! initialization segment). In each page: the CQ arm doorbell at 0x20, the send doorbell /
//! BlueFlame register at 0x800 with two 256-byte halves (0x800, 0x900; `log_bf_reg_size` =
//! 9). See [`bar`] for what each store does.
//!
//! ## What is validated
//!
//! * doorbells: the UAR is the QP's, the QP exists and is in RTS (ERR: flush), the halves
//!   alternate, the 8 bytes equal the first 8 bytes of the last WQE posted, the doorbell record
//!   moved forward by at most the ring size; BlueFlame copies have `1 < ds <= 16` and arrive in
//!   order ([`bar`], [`engine`]);
//! * each send WQE's control, remote-address, data and inline segments ([`engine`]'s
//!   `validate` stage), each lkey (exists, PD, bounds, translation) and, at the responder,
//!   the rkey (exists, PD of the target QP, REMOTE_WRITE on key and QP, bounds, translation),
//!   PSN, MTU and the return path ([`responder`]);
//! * CQ consumer index (overflow) ([`cq`]); command fields ([`commands`]).
//!
//! Fatal findings complete the WQE with the error CQE the HCA would write (syndromes in
//! [`Syndrome`]; the `vendor_err` byte says which check, [`Reason::vendor_code`]) and move the
//! QP to ERR, after which every WQE is flushed (`WR_FLUSH_ERR`), one CQE per WQE. Notes are
//! logged and counted but do not change what is executed.
//!
//! ## Sources
//!
//! * rdma-core `providers/mlx5/mlx5dv.h` (`struct mlx5_wqe_ctrl_seg`, `mlx5_wqe_raddr_seg`,
//!   `mlx5_wqe_data_seg`, `struct mlx5_cqe64`, `mlx5_err_cqe`, `MLX5_OPCODE_*`, `MLX5_CQE_*`,
//!   `MLX5_CQE_SYNDROME_*`, `MLX5_SND_DBR`/`MLX5_RCV_DBR`, `MLX5_CQ_DOORBELL`,
//!   `MLX5_INLINE_SEG`, `MLX5_INVALID_LKEY`), `wqe.h` (`mlx5_wqe_inline_seg`), `qp.c`
//!   (`_mlx5_post_send`, `post_send_db`, `mlx5_bf_copy`), `cq.c` (`get_sw_cqe`, `mlx5_arm_cq`);
//! * the kernel's `include/linux/mlx5/qp.h` (`MLX5_WQE_CTRL_DS_MASK`, fence modes),
//!   `cq.h`, `device.h` (event types), `mlx5_ifc.h` (command fields);
//! * the InfiniBand specification, chapter 9.7 (RC responder checks, R_Key not checked for a
//!   zero-length RDMA WRITE, RNR NAK, access errors moving the responder QP to ERR).
//!
//! ## Modelling choices (not hardware facts)
//!
//! * Delivery is synchronous and lossless; "retry exceeded" (0x15) is reported at once for a
//!   request that could never be acknowledged (no route, target QP not ready, PSN or MTU
//!   mismatch, ACK path broken).
//! * RNR retries are spaced by [`engine::RNR_DELAY`].
//! * A DMA (IOMMU) fault while gathering completes with 0x04 and vendor code 0x2f; at the
//!   responder with 0x13 and vendor code 0x3f.
#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod bar;
mod be;
pub mod codes;
pub mod commands;
mod counters;
pub mod cq;
pub mod cqe;
pub mod direct;
pub mod engine;
pub mod fw;
pub mod grh;
mod model;
mod objects;
pub mod responder;
mod wire;
pub mod wqe;

pub use codes::{CqeOpcode, SendOpcode, Syndrome};
pub use counters::{Counters, Event, Reason, Violation};
pub use direct::ModelControl;
pub use model::{CqeFault, Gid, Model, ModelConfig, UAR_PAGE};
pub use objects::{ModelCaps, QpState};
pub use wire::Wire;

/// Offsets inside a UAR page.
pub mod uar {
    pub use crate::bar::{BF_BASE, BF_HALF, CQ_DOORBELL};
}

#[cfg(test)]
mod tests;
