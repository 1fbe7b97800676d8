//! # rdma-pmd-mlx5: a userspace poll-mode backend for mlx5 (ConnectX) HCAs
//!
//! Reaches the device only through `rdma-pmd-hal`, so it stays `#![no_std]` without an
//! allocator. See the modules for the WQE/CQE layouts, the send ring, CQ polling and the
//! control seam ([`control::Control`]) through which resources are created.
//!
//! ## The tree
//!
//! | where | what |
//! |---|---|
//! | [`layout`] | every byte layout shared with the HCA, each stated once: WQE segments, CQE, doorbell values, codes, and the command layouts generated from the kernel's `mlx5_ifc.h` ([`layout::ifc`]) |
//! | [`datapath`] | one module per direction: the send queue (post, retire), the WQE encoder, the doorbell, completion queue rings, the receive queue |
//! | [`device`], [`qp`], [`mr`] | lifecycle: the opened device, queue pairs and their states, registered regions |
//! | [`eth`], [`net`] | the Ethernet (raw packet) port and the ARP it answers and sends: frames the HCA does not handle itself |
//! | [`control`] | the control path: the [`control::Control`] seam, the command interface ([`control::cmd`]), HCA bring-up ([`control::bringup`]) and the firmware-backed seam ([`control::fw::FwControl`]) |
//! | `testing` (`testing` feature) | the fakes of the data path's seams: a null control seam, a CQE writer |
//! | `vectors` (`std` feature) | reader and runner for the conformance vector format |
//!
//! ## Posting one WRITE: what the data path calls
//!
//! ```
//! use rdma_pmd::{QpNum, RemoteBuf, Rkey, Lkey, SendFlags, Sge};
//! use rdma_pmd_mlx5::{layout::wqe as seg, datapath::wqe::{WqeBuilder, SliceRing}};
//!
//! let builder = WqeBuilder::new(QpNum(0x123)).max_sge(30);
//! let mut mem = [0u8; 64 * 64];
//! // The data path uses `RawRing` over the DMA ring instead.
//! let mut ring = SliceRing::new(&mut mem, 64).unwrap();
//! let sgl = [Sge::new(0x7fab_cdef_0000, 4096, Lkey(0x1122_3344))];
//! let pi = 0;
//! let info = builder
//!     .write_sges(&mut ring, pi, 64, &sgl, SendFlags::SIGNALED, RemoteBuf::new(0x7f00_1122_3344, Rkey(0xa1b2_c3d4)), None)
//!     .unwrap();
//! // barrier, then:
//! assert_eq!(seg::sq_dbrec(info.next_pi()), [0, 0, 0, 1]);       // dbrec[SND_DBR]
//! assert_eq!(seg::bf_len(1, info.shape.ds, 256), 64);            // BlueFlame bytes
//! assert_eq!(info.doorbell, [0, 0, 0, 8, 0, 1, 0x23, 3]);             // or this 64-bit UAR store
//! ```
#![cfg_attr(not(any(feature = "std", test)), no_std)]
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod cm;
pub mod control;
pub mod datapath;
pub mod device;
pub mod eth;
pub mod layout;
pub mod mr;
pub mod net;
pub mod qp;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(any(test, feature = "std"))]
pub mod vectors;
#[cfg(feature = "vfio")]
pub mod vfio;

pub use datapath::wqe::{RawRing, SliceRing, WqeBuilder, WqeInfo, WqeShape, WqeSink};
pub use device::{Mlx5, SharedDma};
pub use eth::{EthConfig, EthPort, EthStats};
pub use layout::codes::{CqeOpcode, FmCeSe, SendOpcode, Syndrome};
pub use layout::cqe::{Cqe, CqeRepr};
pub use mr::Region;
pub use qp::{ConnectOpts, Qp, QpConfig, QpState};
