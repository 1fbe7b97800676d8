//! HAL errors.

use core::fmt;

/// Why a HAL operation failed. Small and `Copy`, so it can travel in no_std errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HalError {
    /// No device-visible memory left of the requested size and alignment.
    OutOfMemory {
        /// Bytes asked for.
        len: usize,
    },
    /// A size or alignment that the implementation cannot honour (zero, not a power of two...).
    BadLayout {
        /// Bytes asked for.
        len: usize,
        /// Alignment asked for.
        align: usize,
    },
    /// An operating-system call failed.
    Os {
        /// The step that failed (e.g. "VFIO_IOMMU_MAP_DMA").
        step: &'static str,
        /// Its errno.
        errno: i32,
    },
    /// The device or platform does not offer what was asked.
    Unsupported(&'static str),
}

impl fmt::Display for HalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HalError::OutOfMemory { len } => write!(f, "no DMA memory left for {len} bytes"),
            HalError::BadLayout { len, align } => {
                write!(f, "cannot allocate {len} bytes aligned to {align}")
            }
            HalError::Os { step, errno } => write!(f, "{step} failed: errno {errno}"),
            HalError::Unsupported(what) => write!(f, "not supported: {what}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for HalError {}

impl From<HalError> for rdma_pmd::Error {
    fn from(e: HalError) -> Self {
        use rdma_pmd::Errno;
        match e {
            HalError::OutOfMemory { .. } => rdma_pmd::Error::Device(Errno::ENOMEM),
            HalError::BadLayout { .. } => rdma_pmd::Error::InvalidArgument("DMA layout"),
            HalError::Os { errno, .. } => rdma_pmd::Error::Device(Errno(errno)),
            HalError::Unsupported(w) => rdma_pmd::Error::Unsupported(w),
        }
    }
}
