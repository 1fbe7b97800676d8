//! Connection management: the IB CM protocol (IBTA vol. 1 ch. 12, as the kernel's
//! `drivers/infiniband/core/cm.c` implements it) over QP1, with rdma_cm's IP addressing
//! (`cma.c`), so that a driver without a kernel connects to and accepts connections from
//! unmodified librdmacm programs.
//!
//! * [`mad`]: the MAD header and the CM messages as typed views ([`field`] reads their bits);
//! * [`cma`]: rdma_cm's private-data header and service IDs;
//! * [`timing`]: `cm.c`'s timeout arithmetic and rdma_cm's defaults;
//! * [`backend`]: what the CM needs from a backend ([`MadPort`]: MADs on QP1) and from a data
//!   QP ([`CmQp`]: its transitions);
//! * [`Cm`]: the connection table and state machine.
//!
//! # Use
//!
//! The CM is polled from the application's busy loop with the time ([`Micros`]); it has no
//! threads, locks, allocation or system calls, and every table is fixed-size (`N`
//! connections, `E` undelivered events, [`MAX_LISTENERS`] ports). Each wait is bounded by
//! `cm.c`'s timeouts and retries; each outcome is an [`Event`] or an [`crate::Error`]:
//!
//! | peer did | event | errno (librdmacm) |
//! |---|---|---|
//! | REP, then we sent RTU / RTU after our REP | [`EventKind::Established`] | |
//! | REJ (nobody listens: reason 8; `rdma_reject`: 28) | [`EventKind::Rejected`] | `ECONNREFUSED` |
//! | no answer through the retries | [`EventKind::Unreachable`] | `ETIMEDOUT` |
//! | DREQ, or DREP to ours | [`EventKind::Disconnected`] | |
//!
//! With rdma_cm's defaults ([`CmConfig::new`]) a REQ waits 2 × 2^(16−8) + 2^(20−8) =
//! 4608 ms for its answer and is sent 16 times in all, so a silent peer is unreachable after
//! about 74 s; the REP's tries wait the requester's response timeout (4096 ms by default).
//! [`CmConfig`] changes the bound.
//!
//! Active: [`Cm::connect`] → REQ; on REP the CM moves the QP (lent to [`Cm::poll`] through
//! a [`QpSet`]) to RTR and RTS and sends RTU. Passive: [`Cm::listen`], an incoming REQ
//! gives [`EventKind::ConnectRequest`], [`Cm::get_request`] shows it, [`Cm::accept`] moves
//! the QP to RTS and sends REP (RTU → established), or [`Cm::reject`] sends REJ.
//! [`Cm::disconnect`] from either side → DREQ/DREP, then timewait.
//!
//! # Untrusted input
//!
//! Every MAD comes from the wire: views refuse short buffers, every field is read with no
//! trust in lengths or states, and a MAD that is malformed or does not fit the state of the
//! connection it names is dropped and counted ([`CmStats`]). A MAD changes only the
//! connection its communication IDs name.
//!
//! # Interop
//!
//! The `wire` tier (`drivers/mlx5/tests/wire_cm.rs`) runs this CM on the mlx5 driver against
//! the Linux kernel's rdma_cm on rxe, with unmodified librdmacm programs in both roles:
//! `rping`, `rdma_server`/`rdma_client`, `ucmatose` (four connections), and the project's
//! `examples/c/cm_writev.c` (`rdma_post_writev`); REJ both ways, MRA, disconnects from either
//! side, `ETIMEDOUT`. See `DESIGN.md`.
//!
//! # Limits
//!
//! RC over RoCE (v2, or any port where GIDs are IP addresses); `RDMA_PS_TCP` service IDs; no
//! alternate paths (LAP/APR), no SIDR, no IB subnet administration; the peer's MAC comes from
//! the backend's neighbour table ([`MadPort::resolve`]); a DREQ is answered at once.

pub mod backend;
pub mod cma;
mod conn;
pub mod field;
pub mod mad;
pub mod timing;
mod types;

pub use backend::{CmQp, MadAddr, MadPort, NoQps, QpPath, QpSet, QpStep, RemoteAccess};
pub use conn::Cm;
pub use types::{
    AcceptParams, CmConfig, CmStats, ConfigError, ConnId, ConnRequest, ConnState, ConnectParams,
    Event, EventKind, Micros, QpParams, MAX_LISTENERS, REJ_USER_DATA, REP_USER_DATA, REQ_USER_DATA,
};

#[cfg(test)]
mod tests;
