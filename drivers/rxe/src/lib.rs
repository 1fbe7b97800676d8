//! # rdma-pmd-rxe: the rdma-pmd posting API on Linux soft-RoCE, through rdma-core
//!
//! A std backend of the core posting API ([`rdma_pmd::post`]) for `rdma_rxe` (or any verbs
//! device), linked against the system's `libibverbs` and `librdmacm`:
//!
//! * [`Conn`] / [`Listener`]: connection setup with librdmacm's endpoint API
//!   (`rdma_getaddrinfo`, `rdma_create_ep`, `rdma_listen`, `rdma_get_request`);
//! * [`Region`]: a registered buffer (`ibv_reg_mr` with [`Access::MSGS`] as `rdma_reg_msgs`
//!   or [`Access::WRITE`] as `rdma_reg_write`) that embeds a [`RegionUse`](rdma_pmd::RegionUse),
//!   hands out [`LocalBuf`](rdma_pmd::LocalBuf)s and refuses [`Region::dereg`] with
//!   [`Error::RegionBusy`] (`EBUSY`) while posted requests use it;
//! * [`RxeQp`]: an RC or UD queue pair implementing [`SendQueue`](rdma_pmd::SendQueue) and
//!   [`RecvQueue`](rdma_pmd::RecvQueue), so every form of [`Post`](rdma_pmd::Post) works on
//!   it: writes, sends (to a [`UdDest`](rdma_pmd::UdDest) on UD), READs, compare-and-swap,
//!   fetch-and-add, inline, raw, and batches posted as one chained `ibv_post_send` on commit;
//!   receives scatter into [`DestBuf`](rdma_pmd::DestBuf)s from [`Region::dest`]. Completions
//!   are busy-polled with `ibv_poll_cq` (no completion channel, no sleeping).
//!
//! ```no_run
//! use rdma_pmd::{Post, RemoteBuf, Rkey, SendFlags, Completion};
//! use rdma_pmd_rxe::{Conn, QpConfig, Region, RxeQp};
//!
//! let conn = Conn::resolve("10.0.0.1", 7471)?;
//! let src = Region::msgs(&conn, 4096)?;
//! let mut qp = RxeQp::create(&conn, QpConfig::default())?;
//! qp.connect(&[])?;
//! let remote = RemoteBuf::new(0x7f00_0000_0000, Rkey(0x1234)); // from the peer's private data
//! src.write(0, b"hello")?;
//! qp.post_writev(1, &[src.buf(0, 5)?], SendFlags::SIGNALED, remote)?;
//! let mut wc = [Completion::default(); 1];
//! qp.poll_bounded(&mut wc, 10_000_000)?;
//! # Ok::<(), rdma_pmd::Error>(())
//! ```
//!
//! ## Why a C shim
//!
//! `ibv_post_send`, `ibv_post_recv` and `ibv_poll_cq` are `static inline` in
//! `infiniband/verbs.h`: they call through `qp->context->ops`, a table whose layout is private
//! to rdma-core and has changed between releases. A ten-line C file (`c/shim.c`, built with the
//! `cc` crate) compiles those inline functions against the installed header, so the call is
//! exactly what a C program gets, with no struct layout of rdma-core's internals copied into
//! Rust. The same file exposes three `rdma_cm_id` fields and the sizes and offsets the layout
//! tests compare against.
//!
//! ## Lifetimes
//!
//! A [`Region`] borrows its [`Conn`]; an [`RxeQp<'r>`] borrows the `Conn` and accepts only
//! buffers borrowed for `'r`, so regions outlive the queue pair and the queue pair is destroyed
//! (and every request it held released) before any region can be freed.

#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod cm;
#[allow(missing_docs, clippy::undocumented_unsafe_blocks)]
pub mod ffi;
mod mr;
pub mod peer;
mod qp;

pub use cm::{Conn, Listener};
pub use mr::{Access, Region};
pub use qp::{QpConfig, RxeQp};

use rdma_pmd::{Errno, Error};

/// The current `errno` as a device error (rdma-core reports failures there).
pub(crate) fn last_errno() -> Error {
    let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(Errno::EIO.0);
    Error::Device(Errno(if e == 0 { Errno::EIO.0 } else { e }))
}
