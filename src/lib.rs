//! # rdma-pmd: safe RDMA posting, in which a buffer cannot be freed or deregistered under the device
//!
//! The allocator-free core of an RDMA poll-mode driver. Its posting API is the librdmacm
//! family (`post_writev`, `post_readv`, `post_sendv`, `post_recvv`, with their single,
//! batched, inline and raw forms), and it is safe: a posted work request borrows its buffers
//! and counts their regions in flight, so the borrow checker and [`region`] refuse to free or
//! deregister a buffer the device may still read or write, until its completion is polled.
//! Backends (mlx5 for ConnectX, rxe for Soft-RoCE) implement four primitives per queue;
//! everything above them, and the connection manager ([`cm`]), is written once here.
//!
//! This crate holds what every backend shares and nothing that touches hardware:
//!
//! * [`Sge`]: a scatter-gather element, layout-identical to rdma-core's `struct ibv_sge`;
//! * [`SendFlags`]: the `ibv_send_flags` bits a write honours;
//! * typed handles ([`Lkey`], [`Rkey`], [`QpNum`], [`BusAddr`]) so a key is never confused with
//!   an address or a queue number;
//! * [`Completion`] and [`WcStatus`]: work completions numbered like `ibv_wc`;
//! * [`Error`]: small `Copy` errors with one [`Error::errno`] mapping at the librdmacm surface;
//! * [`psn`]: unpredictable 24-bit initial PSNs from a user-supplied seed;
//! * [`ring`]: power-of-two ring arithmetic on free-running counters;
//! * [`region`]: the borrow and in-flight rules that keep a registered buffer alive (and
//!   registered) while a posted work request still reads it;
//! * [`post`]: the posting API modelled on librdmacm's `rdma_post_writev`, with its single,
//!   batched, inline and raw forms, written once over a backend's [`post::SendQueue`].
//!
//! The crate is `#![no_std]` and has no `alloc` in its dependency graph; the optional `std`
//! feature only adds `std::error::Error` impls.
#![no_std]
#![deny(unsafe_code)]
#![deny(missing_docs)]

#[cfg(feature = "std")]
extern crate std;

pub mod access;
pub mod addr;
pub mod cm;
pub mod completion;
pub mod dest;
pub mod error;
pub mod flags;
pub mod post;
pub mod psn;
pub mod region;
pub mod ring;
pub mod sge;

pub use addr::{BusAddr, Gid, Lkey, Mac, QpNum, RemoteBuf, Rkey, RoceAddr, UdDest, GSI_QKEY};
pub use completion::{Completion, WcFlags, WcOpcode, WcStatus};
pub use dest::{
    Dest, DestBuf, DestKind, DestList, DestSlot, Pending, QueueId, Refused, Retired, Side,
};
pub use error::{DeviceFault, Errno, Error, FirmwareFault, Result};
pub use flags::SendFlags;
pub use post::{
    AtomicOp, Batch, Caps, Post, Posted, RecvCaps, RecvQueue, SendOp, SendQueue, SendRequest,
    Source,
};
pub use psn::PsnGen;
pub use region::{LocalBuf, RegionUse, Released};
pub use sge::Sge;
