//! The fakes of the data path's seams, shared by the crate's unit tests, the posting benchmark
//! and the freestanding example (built with the `testing` feature, or in this crate's tests).
//!
//! * [`NullControl`]: the [`Control`](crate::control::Control) seam without firmware behind
//!   it. It hands out numbers and records what it was asked in fixed-capacity tables, so a test
//!   can look where the HCA would (the rings and doorbell records of a QP, a CQ's buffer).
//! * [`CqWriter`]: the device side of a completion queue. It writes CQEs through the
//!   [`Cqe`](crate::layout::cqe::Cqe) view into the ring a [`CqParams`](crate::control::CqParams)
//!   describes, the way the HCA does (body, release fence, `op_own` with the lap's owner bit),
//!   over whatever reaches the memory: heap DMA, or static identity-mapped memory.
//!
//! Both are `no_std` and allocate nothing. This crate's own tests also have, here, the fakes
//! that need std: the recording BAR (`bar`) and the scripted firmware of the command
//! interface (`fw`).

#[cfg(test)]
pub(crate) mod bar;
mod control;
mod cqe;
#[cfg(test)]
pub(crate) mod fw;
#[cfg(test)]
pub(crate) mod seeded;

pub use control::{NullControl, Table, CAPS, TABLE};
pub use cqe::CqWriter;

#[cfg(test)]
mod tests;
