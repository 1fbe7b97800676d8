//! # rdma-pmd-mlx5: a userspace poll-mode backend for mlx5 (ConnectX) HCAs
//!
//! Reaches the device only through `rdma-pmd-hal`, so it stays `#![no_std]` without an
//! allocator. See the modules for the WQE/CQE layouts, the send ring, CQ polling and the
//! control seam ([`control::Control`]) through which resources are created.
#![cfg_attr(not(any(feature = "std", test)), no_std)]
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod control;
