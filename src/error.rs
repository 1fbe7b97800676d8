//! Errors of the posting surface, and their errno.
//!
//! The errno of each error is the one rdma-core's mlx5 provider returns from `ibv_post_send` for
//! the same mistake (librdmacm's `rdma_post_writev` passes it through unchanged via
//! `rdma_seterrno`):
//!
//! | error | errno | where rdma-core decides it |
//! |---|---|---|
//! | too many SGEs | `ENOMEM` | `providers/mlx5/qp.c` `_mlx5_post_send`: `wr->num_sge > qp->sq.max_gs` |
//! | inline payload too large | `ENOMEM` | `qp.c` `set_data_inl_seg`: `inl > qp->max_inline_data` |
//! | send queue full | `ENOMEM` | `qp.c` `_mlx5_post_send`: `mlx5_wq_overflow()` |
//! | QP not ready to send (before connect) | `EINVAL` | kernel `rdma_rxe` `rxe_post_send`: `qp state < IB_QPS_RTS` |
//! | bad argument, unknown key, out of bounds | `EINVAL` | verbs' argument checks |
//! | region still in use | `EBUSY` | `ibv_dereg_mr` on an MR still bound (kernel `ib_dereg_mr`) |
//! | a bounded wait ran out | `ETIMEDOUT` | |
//!
//! mlx5 itself does not check the QP state on post (the HCA drops or flushes the request); this
//! crate refuses early, as rxe does, because a request that can never execute is a caller bug.

use core::fmt;

use crate::addr::QpNum;

/// A POSIX error number, as librdmacm reports it in `errno`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Errno(pub i32);

#[allow(missing_docs)]
impl Errno {
    pub const EPERM: Errno = Errno(1);
    pub const EIO: Errno = Errno(5);
    pub const EAGAIN: Errno = Errno(11);
    pub const ENOMEM: Errno = Errno(12);
    pub const EFAULT: Errno = Errno(14);
    pub const EBUSY: Errno = Errno(16);
    pub const ENODEV: Errno = Errno(19);
    pub const EINVAL: Errno = Errno(22);
    pub const ENOSPC: Errno = Errno(28);
    pub const EOPNOTSUPP: Errno = Errno(95);
    pub const ENOTCONN: Errno = Errno(107);
    pub const ETIMEDOUT: Errno = Errno(110);
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "errno {}", self.0)
    }
}

/// Why a post, a poll or a resource operation was refused.
///
/// Every refusal leaves the queues as they were: nothing was written to the ring and no doorbell
/// was rung.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// More scatter-gather elements than the send queue accepts.
    TooManySges {
        /// How many were given.
        given: usize,
        /// The queue's limit.
        max: usize,
    },
    /// Inline payload larger than the queue's inline limit.
    InlineTooLarge {
        /// Bytes given.
        len: usize,
        /// The queue's limit.
        max: usize,
    },
    /// The send queue has too few free slots for the request.
    QueueFull {
        /// Slots the request needs.
        needed: u32,
        /// Slots free now.
        free: u32,
    },
    /// The queue pair is not connected (not in RTS): nothing can be posted yet.
    NotConnected,
    /// A local key that names no registered region, or a region already deregistered.
    BadLkey,
    /// A local buffer or remote range outside its region, or a length that overflows.
    OutOfBounds,
    /// A region cannot be deregistered: posted requests still use it.
    RegionBusy {
        /// Requests still in flight that reference the region.
        in_flight: u32,
    },
    /// A region already counts the most requests it can (`region::MAX_IN_FLIGHT`); only
    /// requests leaked with `mem::forget` get it there.
    TooManyInFlight,
    /// An argument is invalid; the text says which.
    InvalidArgument(&'static str),
    /// The operation is not supported by this backend or device.
    Unsupported(&'static str),
    /// A bounded wait ran out.
    Timeout(&'static str),
    /// A backend or firmware failure, carried as the errno rdma-core would report.
    Device(Errno),
    /// The device broke its contract; the fault says what it did. `EIO` at the librdmacm
    /// surface. The entry that carried it was consumed and nothing else moved.
    Fault(DeviceFault),
}

/// What a device that broke its contract did: the value of [`Error::Fault`].
///
/// Every one of these is something a conforming HCA never does; the driver refuses the entry
/// instead of trusting it, so its queues keep counting right.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeviceFault {
    /// A send completion names a WQE counter that is not outstanding.
    NotOutstanding {
        /// The counter it named.
        counter: u16,
    },
    /// A send completion names a block inside a multi-block WQE, not the WQE's first.
    InsideWqe {
        /// The counter it named.
        counter: u16,
    },
    /// A completion for another queue pair.
    WrongQp {
        /// The QP number it carried.
        qpn: QpNum,
    },
    /// A completion whose opcode does not belong on the queue it arrived on.
    UnexpectedOpcode {
        /// The CQE opcode (`op_own >> 4`).
        opcode: u8,
    },
    /// A receive completion while no receive was posted.
    NoReceivePosted,
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = core::result::Result<T, E>;

impl Error {
    /// The errno librdmacm's `rdma_post_writev` (through the mlx5 provider) reports for this error.
    pub fn errno(&self) -> Errno {
        match self {
            Error::TooManySges { .. }
            | Error::InlineTooLarge { .. }
            | Error::QueueFull { .. }
            | Error::TooManyInFlight => Errno::ENOMEM,
            Error::NotConnected
            | Error::BadLkey
            | Error::OutOfBounds
            | Error::InvalidArgument(_) => Errno::EINVAL,
            Error::RegionBusy { .. } => Errno::EBUSY,
            Error::Unsupported(_) => Errno::EOPNOTSUPP,
            Error::Timeout(_) => Errno::ETIMEDOUT,
            Error::Device(e) => *e,
            Error::Fault(_) => Errno::EIO,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::TooManySges { given, max } => {
                write!(f, "{given} scatter-gather elements given, the queue takes at most {max}")
            }
            Error::InlineTooLarge { len, max } => {
                write!(f, "{len} bytes of inline data, the queue takes at most {max}")
            }
            Error::QueueFull { needed, free } => {
                write!(f, "send queue full: request needs {needed} slots, {free} free")
            }
            Error::NotConnected => f.write_str("queue pair not connected (not in RTS)"),
            Error::BadLkey => f.write_str("local key names no registered region"),
            Error::OutOfBounds => f.write_str("buffer outside its registered region"),
            Error::RegionBusy { in_flight } => {
                write!(f, "region still used by {in_flight} posted requests")
            }
            Error::TooManyInFlight => f.write_str("region counts the most requests it can"),
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            Error::Unsupported(what) => write!(f, "not supported: {what}"),
            Error::Timeout(what) => write!(f, "timed out waiting for {what}"),
            Error::Device(e) => write!(f, "device error ({e})"),
            Error::Fault(d) => write!(f, "device fault: {d}"),
        }
    }
}

impl fmt::Display for DeviceFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceFault::NotOutstanding { counter } => {
                write!(f, "completion for WQE {counter:#06x}, which is not outstanding")
            }
            DeviceFault::InsideWqe { counter } => {
                write!(f, "completion for block {counter:#06x}, inside a WQE")
            }
            DeviceFault::WrongQp { qpn } => write!(f, "completion for QP {:#x}", qpn.0),
            DeviceFault::UnexpectedOpcode { opcode } => {
                write!(f, "completion opcode {opcode:#x} does not belong on this queue")
            }
            DeviceFault::NoReceivePosted => f.write_str("receive completion with none posted"),
        }
    }
}

impl From<DeviceFault> for Error {
    fn from(d: DeviceFault) -> Error {
        Error::Fault(d)
    }
}

#[cfg(feature = "std")]
impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_mapping_follows_the_mlx5_provider() {
        assert_eq!(Error::TooManySges { given: 40, max: 30 }.errno().0, 12);
        assert_eq!(Error::InlineTooLarge { len: 512, max: 220 }.errno().0, 12);
        assert_eq!(Error::QueueFull { needed: 1, free: 0 }.errno().0, 12);
        assert_eq!(Error::NotConnected.errno().0, 22);
        assert_eq!(Error::RegionBusy { in_flight: 1 }.errno().0, 16);
        assert_eq!(Error::Timeout("x").errno().0, 110);
        assert_eq!(Error::TooManyInFlight.errno().0, 12);
        assert_eq!(Error::Fault(DeviceFault::NoReceivePosted).errno(), Errno::EIO);
    }
}
