//! Why bring-up or teardown failed.

use core::fmt;

use rdma_pmd::{DeviceFault, Errno, Error};
use rdma_pmd_hal::HalError;

use crate::control::cmd::CmdError;
use crate::control::init_seg::Health;

/// Why the HCA could not be brought up, driven, or torn down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HcaError {
    /// Firmware kept `initializing` set past the bound.
    FwInitTimeout {
        /// The bound, in nanoseconds.
        waited_ns: u64,
    },
    /// The health buffer reports a syndrome.
    Health(Health),
    /// Firmware speaks another command interface revision.
    CmdifRev {
        /// What it reports.
        found: u16,
    },
    /// A command of a step failed.
    Cmd {
        /// The step (command name).
        step: &'static str,
        /// How.
        error: CmdError,
    },
    /// Firmware supports neither ISSI 1 nor ISSI 0.
    Issi {
        /// `supported_issi_dw0`.
        supported: u32,
    },
    /// Firmware asked for more pages than the pool has left.
    PagePoolExhausted {
        /// Pages asked for.
        requested: u32,
        /// Pages left.
        free: usize,
    },
    /// Firmware returned a page that was not lent, or more pages than asked.
    BadPageReturn {
        /// The address (or count) it returned.
        addr: u64,
    },
    /// Pages still lent to firmware when teardown gave up reclaiming.
    PagesNotReturned {
        /// How many.
        outstanding: usize,
    },
    /// Firmware returned a value that cannot be right (out of range for what it is used as:
    /// an index into the BAR, a shift amount, a count, a number already in use). Nothing was
    /// done with it.
    BadFirmwareValue {
        /// Where it came from: `command_out.field`, `cmd_hca_cap.field` or `event.field`.
        field: &'static str,
        /// What firmware said (the raw field).
        value: u64,
    },
    /// Memory for queues could not be had.
    Hal(HalError),
}

impl HcaError {
    /// The errno reported for this error.
    pub fn errno(&self) -> Errno {
        Error::from(*self).errno()
    }
}

impl From<HalError> for HcaError {
    fn from(e: HalError) -> Self {
        HcaError::Hal(e)
    }
}

impl fmt::Display for HcaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HcaError::FwInitTimeout { waited_ns } => {
                write!(f, "firmware still initializing after {waited_ns} ns")
            }
            HcaError::Health(h) => write!(f, "firmware unhealthy: {h}"),
            HcaError::CmdifRev { found } => {
                write!(f, "command interface revision {found}, driver speaks 5")
            }
            HcaError::Cmd { step, error } => write!(f, "{step}: {error}"),
            HcaError::Issi { supported } => {
                write!(f, "no usable ISSI (supported mask {supported:#x})")
            }
            HcaError::PagePoolExhausted { requested, free } => {
                write!(f, "firmware asked for {requested} pages, {free} left in the pool")
            }
            HcaError::BadPageReturn { addr } => {
                write!(f, "firmware returned {addr:#x}, which was not lent")
            }
            HcaError::PagesNotReturned { outstanding } => {
                write!(f, "{outstanding} pages still held by firmware")
            }
            HcaError::BadFirmwareValue { field, value } => {
                write!(f, "firmware returned {field} = {value:#x}, which cannot be used")
            }
            HcaError::Hal(e) => write!(f, "{e}"),
        }
    }
}

impl From<HcaError> for Error {
    /// Firmware that broke its contract becomes the [`DeviceFault`] naming what it did; a
    /// refused command keeps its step's name ([`CmdError::into_error`]).
    fn from(e: HcaError) -> Self {
        match e {
            HcaError::FwInitTimeout { .. } => Error::Timeout("firmware initialization"),
            HcaError::Health(h) => h.fault().into(),
            HcaError::CmdifRev { .. } | HcaError::Issi { .. } => {
                Error::Unsupported("firmware command interface")
            }
            HcaError::Cmd { step, error } => error.into_error(step),
            HcaError::PagePoolExhausted { .. } => Error::Device(Errno::ENOMEM),
            HcaError::BadPageReturn { addr } => DeviceFault::BadPageReturn { addr }.into(),
            HcaError::BadFirmwareValue { field, value } => {
                DeviceFault::BadFirmwareValue { field, value }.into()
            }
            HcaError::PagesNotReturned { outstanding } => {
                DeviceFault::PagesNotReturned { outstanding }.into()
            }
            HcaError::Hal(h) => h.into(),
        }
    }
}
