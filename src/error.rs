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
//! | a peer's address did not resolve | `EHOSTUNREACH` | kernel `net/core/neighbour.c` (`neigh_invalidate`: a failed entry's queued packets) |
//! | a firmware command failed ([`FirmwareFault`]) | the driver's, for its status | mlx5: `mlx5_vfio.c` `cmd_status_to_err` |
//! | the device broke its contract ([`DeviceFault`]) | `EIO` (see [`DeviceFault::errno`]) | |
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
    pub const ECONNREFUSED: Errno = Errno(111);
    pub const EHOSTUNREACH: Errno = Errno(113);
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
    /// More scatter elements than the receive queue accepts (`mlx5_post_recv` and rxe refuse
    /// it with EINVAL, where a send's excess is ENOMEM).
    TooManyRecvSges {
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
    /// No link-layer address could be found for this IP address: address resolution (ARP)
    /// got no answer within its retries, as the kernel's neighbour code reports `EHOSTUNREACH`.
    Unreachable(core::net::IpAddr),
    /// The peer refused the connection: it rejected it (a CM REJ with this reason), or
    /// nobody listens there. librdmacm reports `ECONNREFUSED` for every REJ
    /// (`librdmacm/cma.c` `ucma_complete`).
    Refused {
        /// The REJ's reason (`enum ib_cm_rej_reason`).
        reason: u16,
    },
    /// A fixed-capacity table is full (connections, listeners, events).
    TableFull(&'static str),
    /// A backend call failed, carried as the errno it returned.
    Device(Errno),
    /// A firmware command was executed and refused: which command, the status and syndrome
    /// firmware answered, and the errno rdma-core reports for that status.
    Firmware(FirmwareFault),
    /// The device broke its contract; the fault says what it did. Its errno is
    /// [`DeviceFault::errno`] (`EIO` for most). On the data path the entry that carried it was
    /// consumed and nothing else moved.
    Fault(DeviceFault),
}

/// A firmware command that firmware executed and refused: the value of [`Error::Firmware`].
///
/// `status` and `syndrome` are the raw bytes 0 and 4..8 of the command's output (for mlx5,
/// `MLX5_CMD_STAT_*` and the syndrome the PRM and firmware tools index); `errno` is what the
/// driver's status table says rdma-core returns for `status`, so that the one mapping from
/// device statuses to errnos stays with the driver that knows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FirmwareFault {
    /// The driver's name for the command (`"CREATE_QP"`); empty when it gave none.
    pub name: &'static str,
    /// The command's opcode.
    pub opcode: u16,
    /// The command status firmware answered.
    pub status: u8,
    /// The syndrome firmware answered (which check failed).
    pub syndrome: u32,
    /// The errno rdma-core reports for `status`.
    pub errno: Errno,
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
    /// A receive completion names another receive WQE than the one it must complete (a plain
    /// receive queue completes in order: the oldest outstanding receive). A duplicated or
    /// misdirected receive CQE is refused before any receive is retired, so no buffer the
    /// device may still write is handed back.
    WrongReceive {
        /// The `wqe_counter` it carried.
        counter: u16,
        /// The counter of the oldest outstanding receive.
        expected: u16,
    },
    /// Firmware kept a command past the bound without handing it back.
    CommandTimeout {
        /// The command's opcode.
        opcode: u16,
    },
    /// A command slot is still owned by firmware: a command posted on it earlier was never
    /// handed back.
    CommandSlotBusy {
        /// The slot.
        slot: u8,
    },
    /// Firmware refused a command entry at delivery (the entry's delivery status): it says the
    /// entry or its mailboxes were malformed, and the driver built them right.
    Undelivered {
        /// The command's opcode.
        opcode: u16,
        /// The delivery status firmware wrote.
        status: u8,
        /// The errno the driver's delivery status table gives (as the kernel's).
        errno: Errno,
    },
    /// Firmware handed a command back with another token than the one posted: the answer is
    /// not to this command.
    TokenMismatch {
        /// The command's opcode.
        opcode: u16,
        /// The token posted.
        expected: u8,
        /// The token found.
        found: u8,
    },
    /// The health buffer reports a fatal error: firmware stopped.
    Unhealthy {
        /// The health syndrome (`synd`).
        syndrome: u8,
        /// The extended syndrome (`ext_synd`).
        ext_syndrome: u16,
    },
    /// Firmware answered a value that cannot be right for what it is used as (an index outside
    /// the BAR, a negative count, a number already in use); nothing was done with it.
    BadFirmwareValue {
        /// Where it came from, as `structure.field`.
        field: &'static str,
        /// What firmware said.
        value: u64,
    },
    /// Firmware returned a page that was not lent to it, or more pages than asked for.
    BadPageReturn {
        /// The address (or count) it returned.
        addr: u64,
    },
    /// Firmware kept pages when it was asked for all of them back; their memory stays lent.
    PagesNotReturned {
        /// Pages still held.
        outstanding: usize,
    },
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
            | Error::TooManyInFlight
            | Error::TableFull(_) => Errno::ENOMEM,
            Error::Refused { .. } => Errno::ECONNREFUSED,
            Error::NotConnected
            | Error::TooManyRecvSges { .. }
            | Error::BadLkey
            | Error::OutOfBounds
            | Error::InvalidArgument(_) => Errno::EINVAL,
            Error::RegionBusy { .. } => Errno::EBUSY,
            Error::Unsupported(_) => Errno::EOPNOTSUPP,
            Error::Timeout(_) => Errno::ETIMEDOUT,
            Error::Unreachable(_) => Errno::EHOSTUNREACH,
            Error::Device(e) => *e,
            Error::Firmware(f) => f.errno,
            Error::Fault(d) => d.errno(),
        }
    }
}

impl DeviceFault {
    /// The errno for this fault: `EIO`, the device failed, except for a command never handed
    /// back, `ETIMEDOUT` as for every bounded wait (the kernel's mlx5 `cmd.c` `wait_func`); a
    /// busy command slot or pages kept, `EBUSY` (the resource is still the device's); and a
    /// refused delivery, the errno the driver maps its status to.
    pub fn errno(&self) -> Errno {
        match self {
            DeviceFault::CommandTimeout { .. } => Errno::ETIMEDOUT,
            DeviceFault::CommandSlotBusy { .. } | DeviceFault::PagesNotReturned { .. } => {
                Errno::EBUSY
            }
            DeviceFault::Undelivered { errno, .. } => *errno,
            DeviceFault::NotOutstanding { .. }
            | DeviceFault::InsideWqe { .. }
            | DeviceFault::WrongQp { .. }
            | DeviceFault::UnexpectedOpcode { .. }
            | DeviceFault::NoReceivePosted
            | DeviceFault::WrongReceive { .. }
            | DeviceFault::TokenMismatch { .. }
            | DeviceFault::Unhealthy { .. }
            | DeviceFault::BadFirmwareValue { .. }
            | DeviceFault::BadPageReturn { .. } => Errno::EIO,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::TooManySges { given, max } => {
                write!(f, "{given} scatter-gather elements given, the queue takes at most {max}")
            }
            Error::TooManyRecvSges { given, max } => {
                write!(f, "{given} scatter elements given, the receive queue takes at most {max}")
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
            Error::Unreachable(ip) => write!(f, "{ip} unreachable: address resolution unanswered"),
            Error::Refused { reason } => write!(f, "connection refused (REJ reason {reason})"),
            Error::TableFull(what) => write!(f, "{what} table full"),
            Error::Device(e) => write!(f, "device error ({e})"),
            Error::Firmware(c) => write!(f, "firmware: {c}"),
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
            DeviceFault::WrongReceive { counter, expected } => write!(
                f,
                "receive completion for WQE {counter:#06x}, the oldest posted is {expected:#06x}"
            ),
            DeviceFault::CommandTimeout { opcode } => {
                write!(f, "command {opcode:#x} not handed back within its bound")
            }
            DeviceFault::CommandSlotBusy { slot } => {
                write!(f, "command slot {slot} still owned by firmware")
            }
            DeviceFault::Undelivered { opcode, status, .. } => {
                write!(f, "command {opcode:#x} refused at delivery, status {status:#x}")
            }
            DeviceFault::TokenMismatch { opcode, expected, found } => write!(
                f,
                "command {opcode:#x} answered with token {found:#x}, posted with {expected:#x}"
            ),
            DeviceFault::Unhealthy { syndrome, ext_syndrome } => {
                write!(f, "health syndrome {syndrome:#x} (ext {ext_syndrome:#06x})")
            }
            DeviceFault::BadFirmwareValue { field, value } => {
                write!(f, "firmware returned {field} = {value:#x}, which cannot be used")
            }
            DeviceFault::BadPageReturn { addr } => {
                write!(f, "firmware returned page {addr:#x}, which was not lent")
            }
            DeviceFault::PagesNotReturned { outstanding } => {
                write!(f, "{outstanding} pages still held by firmware")
            }
        }
    }
}

impl fmt::Display for FirmwareFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let FirmwareFault { name, opcode, status, syndrome, errno } = self;
        write!(
            f,
            "{name}({opcode:#x}) failed: status {status:#x}, syndrome {syndrome:#x} ({errno})"
        )
    }
}

impl From<FirmwareFault> for Error {
    fn from(c: FirmwareFault) -> Error {
        Error::Firmware(c)
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
        assert_eq!(Error::TooManyRecvSges { given: 5, max: 4 }.errno().0, 22);
        assert_eq!(Error::InlineTooLarge { len: 512, max: 220 }.errno().0, 12);
        assert_eq!(Error::QueueFull { needed: 1, free: 0 }.errno().0, 12);
        assert_eq!(Error::NotConnected.errno().0, 22);
        assert_eq!(Error::RegionBusy { in_flight: 1 }.errno().0, 16);
        assert_eq!(Error::Timeout("x").errno().0, 110);
        let ip = core::net::IpAddr::V4(core::net::Ipv4Addr::new(192, 0, 2, 1));
        assert_eq!(Error::Unreachable(ip).errno().0, 113);
        assert_eq!(Error::TooManyInFlight.errno().0, 12);
        assert_eq!(Error::Fault(DeviceFault::NoReceivePosted).errno(), Errno::EIO);
        assert_eq!(
            Error::Fault(DeviceFault::WrongReceive { counter: 0, expected: 1 }).errno(),
            Errno::EIO
        );
    }

    #[test]
    fn a_failed_command_keeps_its_errno_and_says_what_it_was() {
        let f = FirmwareFault {
            name: "CREATE_QP",
            opcode: 0x500,
            status: 0x03,
            syndrome: 0x1234_5678,
            errno: Errno::EINVAL,
        };
        assert_eq!(Error::from(f).errno(), Errno::EINVAL);
        let mut s = Buf::default();
        fmt::write(&mut s, format_args!("{}", Error::from(f))).unwrap();
        assert_eq!(
            s.text(),
            "firmware: CREATE_QP(0x500) failed: status 0x3, syndrome 0x12345678 (errno 22)"
        );
    }

    #[test]
    fn control_path_faults_are_eio_but_where_the_kernel_says_more() {
        let f = |d: DeviceFault| Error::Fault(d).errno();
        assert_eq!(f(DeviceFault::CommandTimeout { opcode: 0x100 }), Errno::ETIMEDOUT);
        assert_eq!(f(DeviceFault::CommandSlotBusy { slot: 0 }), Errno::EBUSY);
        assert_eq!(f(DeviceFault::PagesNotReturned { outstanding: 3 }), Errno::EBUSY);
        let undelivered = DeviceFault::Undelivered { opcode: 0x104, status: 7, errno: Errno(42) };
        assert_eq!(f(undelivered), Errno(42));
        for d in [
            DeviceFault::TokenMismatch { opcode: 0x104, expected: 1, found: 2 },
            DeviceFault::Unhealthy { syndrome: 8, ext_syndrome: 0xbad },
            DeviceFault::BadFirmwareValue { field: "alloc_uar_out.uar", value: 0xff_ffff },
            DeviceFault::BadPageReturn { addr: 0x1000 },
        ] {
            assert_eq!(f(d), Errno::EIO, "{d:?}");
        }
    }

    /// A fixed buffer for `Display` output (the crate has no allocator).
    struct Buf([u8; 128], usize);

    impl Default for Buf {
        fn default() -> Self {
            Buf([0; 128], 0)
        }
    }

    impl Buf {
        fn text(&self) -> &str {
            core::str::from_utf8(&self.0[..self.1]).unwrap()
        }
    }

    impl fmt::Write for Buf {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            let end = self.1 + s.len();
            self.0.get_mut(self.1..end).ok_or(fmt::Error)?.copy_from_slice(s.as_bytes());
            self.1 = end;
            Ok(())
        }
    }
}
