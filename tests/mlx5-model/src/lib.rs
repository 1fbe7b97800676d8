//! # rdma-pmd-mlx5-model: a software mlx5 (ConnectX) HCA that examines the driver
//!
//! The model reads what the driver writes — doorbells and BlueFlame copies in the BAR, WQEs
//! and doorbell records in DMA memory — parses every byte itself (big-endian, from the
//! documented layouts, not from the driver's code), executes the verbs a ConnectX executes —
//! RC RDMA WRITE (WITH IMMEDIATE), SEND (WITH IMMEDIATE) into posted receive WQEs, RDMA READ,
//! 8-byte compare-and-swap and fetch-and-add, and UD and GSI (QP1) datagrams — and writes
//! CQEs back the way the hardware does. Its Ethernet path ([`eth`]) sends the frames of
//! Ethernet SQs out of a port and steers received frames through NIC RX flow tables into
//! RQs, so a driver can speak ARP through it. Everything it refuses or finds odd is counted and
//! logged with a reason, so tests can assert that the driver did exactly what it claims.
//!
//! The model exists to examine the driver, so it is written from the documented hardware
//! behaviour (rdma-core's provider and headers, the kernel's mlx5 headers, the IB spec as
//! rxe implements it), never from the driver's data path: a misreading shared by both would
//! otherwise pass unnoticed.
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
//! * each send WQE's segments as the opcode and the QP's service lay them out: control,
//!   remote-address, atomic, datagram (address vector), data and inline ([`engine`]'s
//!   `validate` stage); each lkey (exists, PD, bounds, translation, and local write where the
//!   HCA writes: READ destinations, atomic results); at the RC responder the QP's and the
//!   rkey's right for the operation (`rwe`/`rw`, `rre`/`rr`, `rae`/`a`), PD, bounds,
//!   translation, atomic alignment, PSN, opcode sequence and packet lengths, in the order
//!   of rxe's responder (`responder::check`, applied by [`transport`]);
//! * receive WQEs: their scatter lists, each entry's lkey (with local write) as data reaches
//!   it, room for the whole message ([`responder`]'s `recv`); a datagram's Q_Key and its
//!   destination QP (1 = the port's GSI QP);
//! * CQ consumer index (overflow) ([`cq`]); command fields ([`commands`]);
//! * Ethernet send WQEs: opcode, WQE index, SQN, DS, no offload the model does not
//!   advertise, the inline headers the SQ's inline mode needs, each lkey; receive WQEs: each
//!   lkey with local write, room for the frame ([`eth`]).
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
//!   `MLX5_INLINE_SEG`, `MLX5_INVALID_LKEY`, `mlx5_wqe_atomic_seg`,
//!   `mlx5_wqe_datagram_seg`/`mlx5_wqe_av`), `wqe.h` (`mlx5_wqe_inline_seg`), `qp.c`
//!   (`_mlx5_post_send`, `post_send_db`, `mlx5_bf_copy`, `_set_atomic_seg`,
//!   `set_datagram_seg`, `set_data_ptr_seg_atomic`, `mlx5_post_recv`), `verbs.c`
//!   (`mlx5_create_ah`: what a RoCE address vector holds), `cq.c` (`get_sw_cqe`,
//!   `mlx5_arm_cq`, `handle_responder`: what a responder CQE reports);
//! * the kernel's `include/linux/mlx5/qp.h` (`MLX5_WQE_CTRL_DS_MASK`, fence modes),
//!   `cq.h`, `device.h` (event types), `mlx5_ifc.h` (command fields);
//! * the kernel's `hw/mlx5/cq.c` `handle_responder` (`flags_rqpn` GRH and L3 type bits, the
//!   QP1 P_Key), `mlx5/core/main.c` (`MLX5_ATOMIC_REQ_MODE_BE`/`_HOST_ENDIANNESS`);
//! * the InfiniBand specification's transport chapter (RC responder checks, R_Key not
//!   checked for a zero-length request, RNR NAK, class C errors moving the responder QP to
//!   ERR; UD: unreliable, no RNR, Q_Keys with the high bit set replaced by the QP's), as the
//!   kernel's rxe implements them (`rxe_resp.c`, `rxe_recv.c`).
//!
//! ## Modelling choices (not hardware facts)
//!
//! * The transport is packets ([`transport`]): RC messages are cut by the path MTU into
//!   RoCE v2 frames with 24-bit PSNs, acknowledged (coalesced ACKs, NAKs, RNR NAKs), and
//!   retransmitted go-back-N on a sequence NAK, an RNR wait or the local ACK timeout, whose
//!   length the model bounds to 10..100 ms ([`transport::timer`]: 14, 67 ms, is waited in
//!   full) so that "retry exceeded" (0x15) arrives quickly. A request that reaches nobody (no route, a
//!   target QP not ready or of another transport, an ACK path that does not lead back) is
//!   retried `retry_cnt` times and then completes with 0x15, as on a network.
//! * The requester learns a remote error from the NAK only: `vendor_err` says which NAK
//!   (invalid request, remote access, remote operational); the responder's log names the
//!   check that failed.
//! * A SEND is scattered into its receive WQE when its last packet arrives (a WRITE is placed
//!   packet by packet), so a receive too short for a message is refused before any of it is
//!   written; a READ or atomic whose local
//!   buffer lacks local write fails before the request is sent (real hardware may have
//!   written part of the message, or sent the request, first; the CQEs are the same).
//! * Atomics are big-endian: the responder's 8 bytes are read and written as a big-endian
//!   integer and the original value lands big-endian in the requester's buffer (the reset
//!   `atomic_req_8B_endianness_mode`; the model's firmware offers no atomic capability page
//!   to change it).
//! * A UD QP's path MTU is 1024 bytes ([`responder::UD_MTU`]). A UD receive's first 40 bytes
//!   hold the datagram's IP header as [`grh`] describes (RoCE v2 over IPv4: 20 zero bytes,
//!   then the IPv4 header, IP identification 0).
//! * A receive that fails (too short, a bad or read-only lkey) completes with `RESP_ERR` and
//!   moves the receiving QP to ERR, for UD as for RC; the RC sender gets 0x12 for length,
//!   0x14 (remote operational) for the others.
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
pub mod eth;
pub mod fw;
pub mod grh;
mod model;
mod objects;
pub mod peers;
pub mod responder;
pub mod roce;
pub mod transport;
mod wire;
pub mod wqe;

pub use codes::{CqeOpcode, SendOpcode, Syndrome};
pub use counters::{Counters, Event, Reason, Violation};
pub use direct::ModelControl;
pub use model::{CqeFault, Gid, Interrupts, Model, ModelConfig, PortSlot, UAR_PAGE};
pub use objects::{ModelCaps, QpState};
pub use wire::Wire;

/// Offsets inside a UAR page.
pub mod uar {
    pub use crate::bar::{BF_BASE, BF_HALF, CQ_DOORBELL};
}

#[cfg(test)]
mod tests;
