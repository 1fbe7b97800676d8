//! Command outcomes: the delivery status of the entry and the status of the command itself,
//! and the errno each maps to.
//!
//! * Delivery status: `status_own[7:1]` of the command entry (`MLX5_CMD_DELIVERY_STAT_*`, kernel
//!   `cmd.c`); non-zero means firmware could not even read the command. Errno as the kernel's
//!   `deliv_status_to_err`.
//! * Command status: byte 0 of every command output, with a 32-bit syndrome at bytes 4..8
//!   (`MLX5_CMD_STAT_*`, `include/linux/mlx5/device.h`). Errno as rdma-core's
//!   `providers/mlx5/mlx5_vfio.c` `cmd_status_to_err` (the kernel's `cmd_status_to_err` returns
//!   the same values, negated).
//!
//! A [`CmdError`] reaches the core as a typed value: a refused command as
//! [`Error::Firmware`] (opcode, status, syndrome and the errno of the table below), a firmware
//! that broke the protocol as [`Error::Fault`] naming what it did.

use core::fmt;

use rdma_pmd::{DeviceFault, Errno, Error, FirmwareFault};
use rdma_pmd_hal::HalError;

use crate::control::init_seg::Health;

/// `EBADR` (Linux): the kernel's answer to signature and token errors.
pub const EBADR: Errno = Errno(53);
/// `ENOMSG` (Linux): the kernel's answer to length and descriptor errors.
pub const ENOMSG: Errno = Errno(42);

/// Delivery status of a command entry (`status_own >> 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryStatus {
    /// 0x0.
    Ok,
    /// 0x1: bad signature.
    SignatureError,
    /// 0x2: token mismatch.
    TokenError,
    /// 0x3: bad mailbox block number.
    BadBlockNumber,
    /// 0x4: output pointer not aligned.
    OutPtrAlign,
    /// 0x5: input pointer not aligned.
    InPtrAlign,
    /// 0x6: firmware error.
    FwError,
    /// 0x7: bad input length.
    InLength,
    /// 0x8: bad output length.
    OutLength,
    /// 0x9: reserved fields not cleared.
    ReservedNotCleared,
    /// 0x10: bad command descriptor.
    CmdDescriptor,
    /// Any other value.
    Unknown(u8),
}

impl From<u8> for DeliveryStatus {
    fn from(v: u8) -> Self {
        match v {
            0x0 => DeliveryStatus::Ok,
            0x1 => DeliveryStatus::SignatureError,
            0x2 => DeliveryStatus::TokenError,
            0x3 => DeliveryStatus::BadBlockNumber,
            0x4 => DeliveryStatus::OutPtrAlign,
            0x5 => DeliveryStatus::InPtrAlign,
            0x6 => DeliveryStatus::FwError,
            0x7 => DeliveryStatus::InLength,
            0x8 => DeliveryStatus::OutLength,
            0x9 => DeliveryStatus::ReservedNotCleared,
            0x10 => DeliveryStatus::CmdDescriptor,
            other => DeliveryStatus::Unknown(other),
        }
    }
}

impl From<DeliveryStatus> for u8 {
    fn from(s: DeliveryStatus) -> u8 {
        match s {
            DeliveryStatus::Ok => 0x0,
            DeliveryStatus::SignatureError => 0x1,
            DeliveryStatus::TokenError => 0x2,
            DeliveryStatus::BadBlockNumber => 0x3,
            DeliveryStatus::OutPtrAlign => 0x4,
            DeliveryStatus::InPtrAlign => 0x5,
            DeliveryStatus::FwError => 0x6,
            DeliveryStatus::InLength => 0x7,
            DeliveryStatus::OutLength => 0x8,
            DeliveryStatus::ReservedNotCleared => 0x9,
            DeliveryStatus::CmdDescriptor => 0x10,
            DeliveryStatus::Unknown(raw) => raw,
        }
    }
}

impl DeliveryStatus {
    /// The errno the kernel's `deliv_status_to_err` returns.
    pub fn errno(self) -> Errno {
        match self {
            DeliveryStatus::Ok => Errno(0),
            DeliveryStatus::SignatureError | DeliveryStatus::TokenError => EBADR,
            DeliveryStatus::BadBlockNumber
            | DeliveryStatus::OutPtrAlign
            | DeliveryStatus::InPtrAlign => Errno::EFAULT,
            DeliveryStatus::InLength
            | DeliveryStatus::OutLength
            | DeliveryStatus::CmdDescriptor
            | DeliveryStatus::ReservedNotCleared => ENOMSG,
            DeliveryStatus::FwError => Errno::EIO,
            DeliveryStatus::Unknown(_) => Errno::EINVAL,
        }
    }
}

/// Status of an executed command (byte 0 of its output).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmdStatus {
    /// 0x0.
    Ok,
    /// 0x1: internal error.
    InternalError,
    /// 0x2: bad operation (unknown opcode or op_mod).
    BadOp,
    /// 0x3: bad parameter.
    BadParam,
    /// 0x4: bad system state.
    BadSysState,
    /// 0x5: bad resource.
    BadResource,
    /// 0x6: resource busy.
    ResourceBusy,
    /// 0x8: limits exceeded.
    LimitsExceeded,
    /// 0x9: bad resource state.
    BadResourceState,
    /// 0xa: bad index.
    BadIndex,
    /// 0xf: no resources.
    NoResources,
    /// 0x10: bad QP state.
    BadQpState,
    /// 0x30: bad packet.
    BadPacket,
    /// 0x40: too many outstanding CQEs.
    BadSizeOutstandingCqes,
    /// 0x50: bad input length.
    BadInputLength,
    /// 0x51: bad output length.
    BadOutputLength,
    /// Any other value.
    Unknown(u8),
}

impl From<u8> for CmdStatus {
    fn from(v: u8) -> Self {
        match v {
            0x0 => CmdStatus::Ok,
            0x1 => CmdStatus::InternalError,
            0x2 => CmdStatus::BadOp,
            0x3 => CmdStatus::BadParam,
            0x4 => CmdStatus::BadSysState,
            0x5 => CmdStatus::BadResource,
            0x6 => CmdStatus::ResourceBusy,
            0x8 => CmdStatus::LimitsExceeded,
            0x9 => CmdStatus::BadResourceState,
            0xa => CmdStatus::BadIndex,
            0xf => CmdStatus::NoResources,
            0x10 => CmdStatus::BadQpState,
            0x30 => CmdStatus::BadPacket,
            0x40 => CmdStatus::BadSizeOutstandingCqes,
            0x50 => CmdStatus::BadInputLength,
            0x51 => CmdStatus::BadOutputLength,
            other => CmdStatus::Unknown(other),
        }
    }
}

impl From<CmdStatus> for u8 {
    fn from(s: CmdStatus) -> u8 {
        match s {
            CmdStatus::Ok => 0x0,
            CmdStatus::InternalError => 0x1,
            CmdStatus::BadOp => 0x2,
            CmdStatus::BadParam => 0x3,
            CmdStatus::BadSysState => 0x4,
            CmdStatus::BadResource => 0x5,
            CmdStatus::ResourceBusy => 0x6,
            CmdStatus::LimitsExceeded => 0x8,
            CmdStatus::BadResourceState => 0x9,
            CmdStatus::BadIndex => 0xa,
            CmdStatus::NoResources => 0xf,
            CmdStatus::BadQpState => 0x10,
            CmdStatus::BadPacket => 0x30,
            CmdStatus::BadSizeOutstandingCqes => 0x40,
            CmdStatus::BadInputLength => 0x50,
            CmdStatus::BadOutputLength => 0x51,
            CmdStatus::Unknown(raw) => raw,
        }
    }
}

impl CmdStatus {
    /// The errno rdma-core's mlx5 (`cmd_status_to_err`) reports for this status.
    pub fn errno(self) -> Errno {
        match self {
            CmdStatus::Ok => Errno(0),
            CmdStatus::InternalError
            | CmdStatus::BadSysState
            | CmdStatus::BadInputLength
            | CmdStatus::BadOutputLength
            | CmdStatus::Unknown(_) => Errno::EIO,
            CmdStatus::BadOp
            | CmdStatus::BadParam
            | CmdStatus::BadResource
            | CmdStatus::BadResourceState
            | CmdStatus::BadIndex
            | CmdStatus::BadQpState
            | CmdStatus::BadPacket
            | CmdStatus::BadSizeOutstandingCqes => Errno::EINVAL,
            CmdStatus::ResourceBusy => Errno::EBUSY,
            CmdStatus::LimitsExceeded => Errno::ENOMEM,
            CmdStatus::NoResources => Errno::EAGAIN,
        }
    }
}

/// Why a firmware command failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmdError {
    /// Firmware still owned the entry when the bound ran out.
    Timeout {
        /// The command.
        opcode: u16,
        /// The bound, in nanoseconds.
        waited_ns: u64,
    },
    /// The command timed out and the health buffer reports a syndrome.
    Health {
        /// The command.
        opcode: u16,
        /// What the health buffer says.
        health: Health,
    },
    /// Firmware could not accept the entry.
    Delivery {
        /// The command.
        opcode: u16,
        /// Why.
        status: DeliveryStatus,
    },
    /// Firmware executed the command and refused it.
    Failed {
        /// The command.
        opcode: u16,
        /// Its op_mod.
        op_mod: u16,
        /// Command status.
        status: CmdStatus,
        /// Syndrome (which check failed; see the PRM or `mlxfwreset`/`mstdump` tooling).
        syndrome: u32,
    },
    /// The input or output does not fit the mailboxes the queue was set up with.
    TooLarge {
        /// The command.
        opcode: u16,
        /// Bytes needed.
        len: usize,
        /// Bytes available.
        max: usize,
    },
    /// The slot is still owned by firmware (an earlier command on it never completed).
    SlotBusy {
        /// The slot.
        slot: usize,
    },
    /// Firmware handed the entry back with another token than the one posted, in the entry or
    /// in an output mailbox: the answer is not to this command (or the control fields were
    /// overwritten), and what firmware does with the queue is unknown.
    TokenMismatch {
        /// The command.
        opcode: u16,
        /// The token posted.
        expected: u8,
        /// The token found.
        found: u8,
    },
    /// The command queue geometry firmware reports cannot be used.
    BadGeometry {
        /// log2 of the number of entries.
        log_size: u8,
        /// log2 of the entry stride.
        log_stride: u8,
    },
    /// Memory for the queue or its mailboxes could not be had.
    Hal(HalError),
}

impl CmdError {
    /// The errno reported for this error (that of the core error it becomes).
    pub fn errno(&self) -> Errno {
        Error::from(*self).errno()
    }

    /// The core error for this one, naming the command `name` (the driver's name for it, such
    /// as `"CREATE_QP"`) when firmware refused it.
    pub fn into_error(self, name: &'static str) -> Error {
        match self {
            CmdError::Failed { opcode, status, syndrome, .. } => Error::Firmware(FirmwareFault {
                name,
                opcode,
                status: status.into(),
                syndrome,
                errno: status.errno(),
            }),
            CmdError::Timeout { opcode, .. } => DeviceFault::CommandTimeout { opcode }.into(),
            CmdError::Health { health, .. } => health.fault().into(),
            CmdError::Delivery { opcode, status } => {
                DeviceFault::Undelivered { opcode, status: status.into(), errno: status.errno() }
                    .into()
            }
            CmdError::TokenMismatch { opcode, expected, found } => {
                DeviceFault::TokenMismatch { opcode, expected, found }.into()
            }
            // Slots are numbered below `SLOTS` (2).
            CmdError::SlotBusy { slot } => DeviceFault::CommandSlotBusy { slot: slot as u8 }.into(),
            CmdError::TooLarge { .. } => Error::InvalidArgument("command exceeds its mailboxes"),
            CmdError::BadGeometry { .. } => Error::Unsupported("command queue geometry"),
            CmdError::Hal(h) => h.into(),
        }
    }
}

impl From<HalError> for CmdError {
    fn from(e: HalError) -> Self {
        CmdError::Hal(e)
    }
}

impl fmt::Display for CmdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CmdError::Timeout { opcode, waited_ns } => {
                write!(f, "command {opcode:#x} not completed after {waited_ns} ns")
            }
            CmdError::Health { opcode, health } => write!(f, "command {opcode:#x}: {health}"),
            CmdError::Delivery { opcode, status } => {
                write!(f, "command {opcode:#x} not delivered: {status:?}")
            }
            CmdError::Failed { opcode, op_mod, status, syndrome } => write!(
                f,
                "command {opcode:#x} (op_mod {op_mod:#x}) failed: {status:?}, syndrome {syndrome:#x}"
            ),
            CmdError::TooLarge { opcode, len, max } => {
                write!(f, "command {opcode:#x} needs {len} bytes, mailboxes hold {max}")
            }
            CmdError::SlotBusy { slot } => write!(f, "command slot {slot} still owned by firmware"),
            CmdError::TokenMismatch { opcode, expected, found } => write!(
                f,
                "command {opcode:#x} answered with token {found:#x}, posted with {expected:#x}"
            ),
            CmdError::BadGeometry { log_size, log_stride } => {
                write!(f, "unusable command queue: 2^{log_size} entries of 2^{log_stride} bytes")
            }
            CmdError::Hal(e) => write!(f, "command queue memory: {e}"),
        }
    }
}

impl From<CmdError> for Error {
    /// As [`CmdError::into_error`], without a command name.
    fn from(e: CmdError) -> Self {
        e.into_error("")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_status_errno_follows_rdma_core() {
        let cases = [
            (0x01, Errno::EIO),
            (0x02, Errno::EINVAL),
            (0x03, Errno::EINVAL),
            (0x04, Errno::EIO),
            (0x05, Errno::EINVAL),
            (0x06, Errno::EBUSY),
            (0x08, Errno::ENOMEM),
            (0x09, Errno::EINVAL),
            (0x0a, Errno::EINVAL),
            (0x0f, Errno::EAGAIN),
            (0x10, Errno::EINVAL),
            (0x30, Errno::EINVAL),
            (0x40, Errno::EINVAL),
            (0x50, Errno::EIO),
            (0x51, Errno::EIO),
            (0x77, Errno::EIO),
        ];
        for (raw, errno) in cases {
            assert_eq!(CmdStatus::from(raw).errno(), errno, "status {raw:#x}");
        }
        assert_eq!(CmdStatus::from(0x77), CmdStatus::Unknown(0x77));
        let e = CmdError::Failed {
            opcode: 0x500,
            op_mod: 0,
            status: CmdStatus::BadParam,
            syndrome: 0x1234,
        };
        let fault = FirmwareFault {
            name: "CREATE_QP",
            opcode: 0x500,
            status: 0x03,
            syndrome: 0x1234,
            errno: Errno::EINVAL,
        };
        assert_eq!(e.into_error("CREATE_QP"), Error::Firmware(fault));
        assert_eq!(Error::from(e), Error::Firmware(FirmwareFault { name: "", ..fault }));
        for raw in 0..=0xff {
            assert_eq!(u8::from(CmdStatus::from(raw)), raw, "status {raw:#x} round trip");
        }
    }

    #[test]
    fn delivery_status_errno_follows_the_kernel() {
        assert_eq!(DeliveryStatus::from(1).errno(), EBADR);
        assert_eq!(DeliveryStatus::from(2).errno(), EBADR);
        assert_eq!(DeliveryStatus::from(3).errno(), Errno::EFAULT);
        assert_eq!(DeliveryStatus::from(5).errno(), Errno::EFAULT);
        assert_eq!(DeliveryStatus::from(6).errno(), Errno::EIO);
        assert_eq!(DeliveryStatus::from(7).errno(), ENOMSG);
        assert_eq!(DeliveryStatus::from(0x10).errno(), ENOMSG);
        assert_eq!(DeliveryStatus::from(0x22), DeliveryStatus::Unknown(0x22));
        assert_eq!(DeliveryStatus::from(0x22).errno(), Errno::EINVAL);
        for raw in 0..=0x7f {
            assert_eq!(u8::from(DeliveryStatus::from(raw)), raw, "status {raw:#x} round trip");
        }
        let e = CmdError::Delivery { opcode: 0x104, status: DeliveryStatus::InLength };
        let fault = DeviceFault::Undelivered { opcode: 0x104, status: 7, errno: ENOMSG };
        assert_eq!((Error::from(e), e.errno()), (fault.into(), ENOMSG));
    }

    #[test]
    fn timeouts_surface_as_etimedout() {
        let e = CmdError::Timeout { opcode: 0x104, waited_ns: 10 };
        assert_eq!(Error::from(e), DeviceFault::CommandTimeout { opcode: 0x104 }.into());
        assert_eq!(Error::from(e).errno(), Errno::ETIMEDOUT);
    }
}
