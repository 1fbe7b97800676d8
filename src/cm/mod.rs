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
//! about 74 s; the REP's tries wait the requester's response timeout (4096 ms by default,
//! and at most that). [`CmConfig`] changes the bounds; see "Bounded times" below.
//!
//! Active: [`Cm::connect`] → REQ; on REP the CM moves the QP (lent to [`Cm::poll`] through
//! a [`QpSet`]) to RTR and RTS and sends RTU. Passive: [`Cm::listen`], an incoming REQ
//! gives [`EventKind::ConnectRequest`], [`Cm::get_request`] shows it, [`Cm::accept`] moves
//! the QP to RTS and sends REP (RTU → established), or [`Cm::reject`] sends REJ.
//! [`Cm::disconnect`] from either side → DREQ/DREP, then timewait.
//!
//! [`Cm::destroy`] ends a connection in any state at once, as `rdma_destroy_id` does
//! (`cm.c` `cm_destroy_id`): a REQ of ours is withdrawn (REJ "timeout" with our CA GUID), a
//! request we received and did not complete is rejected (REJ 28), an established connection
//! gets a DREQ, one already disconnecting nothing more; its QP goes to ERR, the slot is
//! free, the handle refused and no event follows. It cancels a connect in progress.
//!
//! # Untrusted input
//!
//! Every MAD comes from the wire: views refuse short buffers, every field is read with no
//! trust in lengths or states, and a MAD that is malformed or does not fit the state of the
//! connection it names is dropped and counted ([`CmStats`]). A MAD changes only the
//! connection its communication IDs name. A REQ or REP with CA GUID 0 is malformed: `cm.c`
//! finds duplicates by the peer's GUID and communication ID, and GUID 0 names no CA.
//!
//! **Bounded times.** Every timer a peer chooses is cut to a bound in [`CmConfig`] (counted
//! in [`CmStats::clamped`]); with the defaults:
//!
//! | peer's field | used for | bound (default) |
//! |---|---|---|
//! | REQ local CM response timeout | each REP try | [`CmConfig::max_peer_response_timeout`] 20: 4096 ms |
//! | REQ max CM retries | REP tries | [`CmConfig::max_peer_cm_retries`] 15 |
//! | MRA service timeout | the stretched try | [`CmConfig::max_mra_service_timeout`] 24: 65,536 ms |
//! | REQ ACK timeout, REP ACK delay (`av.timeout`) | the data QP's ACK timeout, timewait, the MRA's path term | [`CmConfig::max_ack_timeout`] 19: 2048 ms |
//!
//! A connection takes at most one MRA (a repeated one is a duplicate). So a REQ is
//! unanswered for at most 4608 ms + 16 × (65,536 + 512) ms ≈ 17.7 min when MRA-ed (16 ×
//! 4608 ms ≈ 74 s without), a REP or DREQ at most one try plus 16 × (65,536 + 2048) ms, a
//! timewait 2048 ms; a slot is free by then (an unanswered request waits for the
//! application: [`Cm::accept`], [`Cm::reject`] or [`Cm::destroy`]). [`CmConfig::check`] (at [`Cm::new`]) refuses values
//! wider than their wire fields, so no timer arithmetic can overflow (it also saturates).
//!
//! **Handles never alias.** A slot's generation has 64 bits and a slot whose generation
//! would wrap is retired ([`CmStats::retired`]): a released [`ConnId`] is refused for ever,
//! however often a peer cycles its slot (a REQ, then a REJ "timeout").
//!
//! **Spoofed REQs.** `cm.c` tears down an established connection (DREQ) when a new REQ
//! repeats its peer's CA GUID and QPN (`cm_match_req`: a stale connection), or a REP does
//! (`cm_rep_handler`). Here that happens only when the MAD comes from the connection's own
//! peer (the GRH source GID is the connection's peer GID); from any other GID the REQ or REP
//! is rejected (REJ "stale connection", [`CmStats::spoofed`]) and the connection is left
//! alone. This deviates from `cm.c`, which trusts the fields; it costs nothing with rdma_cm
//! peers, whose re-used QP reconnects from the same GID. What a spoofer can still do is
//! what the protocol lets anyone who knows a connection's IDs do: a REQ repeating a pending
//! request's communication ID and GUID draws an MRA or REJ to the real peer; a REJ, DREQ or
//! MRA naming the right communication IDs acts on that connection (`cm.c` checks no source
//! either). It cannot make a handle name another connection, hold a slot past the bounds
//! above, or tear down an established connection it is not the peer of.
//!
//! **A full send queue.** A MAD the port cannot take yet ([`crate::Error::QueueFull`]) is
//! not a send error: a REQ, REP or DREQ waits in its connection and goes first on the next
//! [`Cm::poll`] (its retry timer runs meanwhile, so a queue that stays full ends the
//! connection within its retries); an answer (RTU, DREP, MRA) waits in its connection (two
//! at most), and the event it completes ([`EventKind::Established`] after the RTU,
//! [`EventKind::Disconnected`] after the DREP) is raised only once it left, or when the
//! connection's time runs out (then the answer is dropped and counted); the last MAD of a
//! connection already freed (destroy, reject) waits in a ring of four. Answers to MADs that
//! match no connection (a REJ to a REQ nobody listens for, the DREP to an unknown DREQ, a
//! SIDR_REP) and repeated answers to a peer's retry are dropped and counted
//! ([`CmStats::send_dropped`]) when the queue is full: the peer retries.
//!
//! **SIDR.** A SIDR_REQ (UD service resolution, e.g. `udaddy`) is answered with a SIDR_REP
//! of status 1 (`IB_SIDR_UNSUPPORTED`, what `cm.c` sends when no UD service listens), so that
//! rdma_cm's requester fails at once (`cma_sidr_rep_handler`: UNREACHABLE) instead of after
//! its retries.
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
//! alternate paths (LAP/APR), no SIDR (refused), no IB subnet administration; the peer's MAC comes from
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
