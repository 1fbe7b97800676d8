//! Errors of the VFIO backend: each names the step that failed, the file it was done on, and
//! the errno, without allocating (paths are kept in a fixed inline buffer).

use core::fmt;

use super::addr::PciAddr;
use crate::error::HalError;

/// A file system path kept inline (truncated with `...` beyond [`SysPath::CAP`] bytes), so
/// errors stay `Copy`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SysPath {
    buf: [u8; SysPath::CAP],
    len: u8,
    truncated: bool,
}

impl SysPath {
    /// Bytes kept.
    pub const CAP: usize = 64;

    /// Keep (the start of) `path`.
    pub fn new(path: &str) -> Self {
        let mut buf = [0u8; Self::CAP];
        let mut len = path.len().min(Self::CAP);
        while !path.is_char_boundary(len) {
            len -= 1;
        }
        buf[..len].copy_from_slice(&path.as_bytes()[..len]);
        SysPath { buf, len: len as u8, truncated: len < path.len() }
    }

    /// The path kept.
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.buf[..self.len as usize]).unwrap_or("?")
    }
}

impl fmt::Display for SysPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())?;
        if self.truncated {
            f.write_str("...")?;
        }
        Ok(())
    }
}

impl fmt::Debug for SysPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl From<&str> for SysPath {
    fn from(s: &str) -> Self {
        SysPath::new(s)
    }
}

/// Another device of an IOMMU group, and the driver it is bound to (if any).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Its address.
    pub addr: PciAddr,
    driver: [u8; 15],
    driver_len: u8,
}

impl Peer {
    /// `addr`, bound to `driver` (names longer than 15 bytes are cut).
    pub fn new(addr: PciAddr, driver: Option<&str>) -> Self {
        let mut buf = [0u8; 15];
        let name = driver.unwrap_or("");
        let mut n = name.len().min(buf.len());
        while !name.is_char_boundary(n) {
            n -= 1;
        }
        buf[..n].copy_from_slice(&name.as_bytes()[..n]);
        Peer { addr, driver: buf, driver_len: n as u8 }
    }

    /// The driver it is bound to.
    pub fn driver(&self) -> Option<&str> {
        let n = self.driver_len as usize;
        (n > 0).then(|| core::str::from_utf8(&self.driver[..n]).unwrap_or("?"))
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.driver() {
            Some(d) => write!(f, "{} (driver {d})", self.addr),
            None => write!(f, "{} (no driver)", self.addr),
        }
    }
}

/// Other devices named in a [`VfioError::GroupNotViable`] error: the first four, those bound
/// to a driver first.
pub type GroupPeers = [Option<Peer>; 4];

/// Why a VFIO operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VfioError {
    /// A system call failed.
    Os {
        /// What was being done (an ioctl name, `open`, `mmap`, ...).
        step: &'static str,
        /// The file it was done on.
        path: SysPath,
        /// Its errno.
        errno: i32,
    },
    /// A read or write of a device region moved fewer bytes than asked.
    Short {
        /// `pread` or `pwrite`, and of what.
        step: &'static str,
        /// The device file.
        path: SysPath,
        /// Bytes asked for.
        want: usize,
        /// Bytes moved.
        got: usize,
    },
    /// Not a PCI address of the form `DDDD:BB:DD.F` (or `BB:DD.F`).
    BadPciAddr(SysPath),
    /// No PCI function has this address (`/sys/bus/pci/devices/<addr>` does not exist).
    NoDevice {
        /// The address asked for.
        dev: PciAddr,
    },
    /// The function exists but belongs to no IOMMU group: the IOMMU is off (or absent), so
    /// VFIO cannot isolate it.
    NoIommuGroup {
        /// The function.
        dev: PciAddr,
    },
    /// A sysfs file held something unexpected.
    BadSysfs {
        /// The file.
        path: SysPath,
    },
    /// `VFIO_GET_API_VERSION` returned an API this code does not speak.
    ApiVersion {
        /// The version the kernel reported.
        got: i32,
    },
    /// The kernel's VFIO has no type1 v2 IOMMU backend (`VFIO_CHECK_EXTENSION`).
    NoType1v2,
    /// Some device of the IOMMU group is bound to a driver other than vfio-pci, so the group
    /// cannot be used.
    GroupNotViable {
        /// The group number.
        group: u32,
        /// Other devices of the group (bind them to vfio-pci or unbind them).
        others: GroupPeers,
        /// How many others there are in all.
        count: usize,
    },
    /// The device is not a PCI device (`VFIO_DEVICE_FLAGS_PCI` unset).
    NotPci {
        /// The device.
        dev: PciAddr,
    },
    /// A region that must exist has size 0, or cannot be used as asked.
    Region {
        /// The device.
        dev: PciAddr,
        /// Region index (BAR number, 7 for config space).
        index: u32,
        /// What is missing (`"empty"`, `"not mmap-able"`, `"not readable"`, ...).
        why: &'static str,
    },
    /// No free IOVA range of this size and alignment below the DMA mask.
    IovaExhausted {
        /// Bytes asked for.
        len: u64,
        /// The DMA mask.
        mask: u64,
    },
    /// A size or alignment that cannot be honoured.
    BadLayout {
        /// Bytes asked for.
        len: usize,
        /// Alignment asked for.
        align: usize,
    },
}

impl VfioError {
    /// An [`VfioError::Os`] error for the last errno.
    pub(crate) fn last_os(step: &'static str, path: &str) -> Self {
        VfioError::Os {
            step,
            path: SysPath::new(path),
            errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        }
    }

    /// An [`VfioError::Os`] error from an `io::Error` (std file APIs).
    pub(crate) fn io(step: &'static str, path: &str, e: &std::io::Error) -> Self {
        VfioError::Os { step, path: SysPath::new(path), errno: e.raw_os_error().unwrap_or(0) }
    }

    /// The errno, for errors that come from a system call.
    pub fn errno(&self) -> Option<i32> {
        match self {
            VfioError::Os { errno, .. } => Some(*errno),
            _ => None,
        }
    }
}

impl fmt::Display for VfioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VfioError::Os { step, path, errno } => {
                let text = std::io::Error::from_raw_os_error(*errno).to_string();
                let text = text.split(" (os error").next().unwrap_or(&text);
                write!(f, "{step} on {path} failed: errno {errno} ({text})")?;
                match (*step, *errno) {
                    (_, libc::EACCES) | (_, libc::EPERM)
                        if path.as_str().starts_with("/dev/vfio") =>
                    {
                        write!(f, "; run as root or give this user the group file (and raise RLIMIT_MEMLOCK)")
                    }
                    ("VFIO_IOMMU_MAP_DMA", libc::ENOMEM) => {
                        write!(f, "; the locked-memory limit (ulimit -l) may be too low")
                    }
                    ("open", libc::ENOENT) if path.as_str() == "/dev/vfio/vfio" => {
                        write!(f, "; the vfio modules are not loaded: run `modprobe vfio-pci`")
                    }
                    ("open", libc::ENOENT) if path.as_str().starts_with("/dev/vfio/") => {
                        write!(f, "; is the device bound to vfio-pci? (docs/VFIO.md, step 3)")
                    }
                    _ => Ok(()),
                }
            }
            VfioError::Short { step, path, want, got } => {
                write!(f, "{step} on {path} moved {got} of {want} bytes")
            }
            VfioError::BadPciAddr(s) => {
                write!(f, "{s:?} is not a PCI address (expected DDDD:BB:DD.F, e.g. 0000:3b:00.0)")
            }
            VfioError::NoDevice { dev } => write!(
                f,
                "no PCI function at {dev} (/sys/bus/pci/devices/{dev} does not exist; \
                 `lspci -D -d 15b3:` lists the ConnectX functions of this host)"
            ),
            VfioError::NoIommuGroup { dev } => write!(
                f,
                "PCI function {dev} has no IOMMU group: the IOMMU is off; turn on VT-d or \
                 AMD-Vi in firmware and boot Intel hosts with intel_iommu=on (docs/VFIO.md, step 1)"
            ),
            VfioError::BadSysfs { path } => write!(f, "unexpected contents in {path}"),
            VfioError::ApiVersion { got } => {
                write!(f, "VFIO_GET_API_VERSION on /dev/vfio/vfio returned {got}, expected 0")
            }
            VfioError::NoType1v2 => write!(
                f,
                "VFIO_CHECK_EXTENSION(VFIO_TYPE1v2_IOMMU) on /dev/vfio/vfio: not supported \
                 (is the vfio_iommu_type1 module loaded and the IOMMU on?)"
            ),
            VfioError::GroupNotViable { group, others, count } => {
                write!(f, "IOMMU group {group} is not viable (VFIO_GROUP_GET_STATUS on /dev/vfio/{group}): ")?;
                write!(f, "every device in it must be bound to vfio-pci or to no driver; others in the group:")?;
                for (i, p) in others.iter().flatten().enumerate() {
                    write!(f, "{} {p}", if i > 0 { "," } else { "" })?;
                }
                let shown = others.iter().flatten().count();
                if *count > shown {
                    write!(f, " and {} more", count - shown)?;
                }
                if *count == 0 {
                    write!(f, " none (is the device itself bound to vfio-pci?)")?;
                }
                Ok(())
            }
            VfioError::NotPci { dev } => {
                write!(f, "VFIO_DEVICE_GET_INFO on device {dev}: not a vfio-pci device")
            }
            VfioError::Region { dev, index, why } => {
                write!(f, "device {dev} region {index}: {why}")
            }
            VfioError::IovaExhausted { len, mask } => {
                write!(f, "no free IOVA range of {len:#x} bytes below DMA mask {mask:#x}")
            }
            VfioError::BadLayout { len, align } => {
                write!(f, "cannot allocate {len} bytes of DMA memory aligned to {align}")
            }
        }
    }
}

impl std::error::Error for VfioError {}

impl From<VfioError> for HalError {
    fn from(e: VfioError) -> Self {
        match e {
            VfioError::Os { step, errno, .. } => HalError::Os { step, errno },
            VfioError::IovaExhausted { len, .. } => HalError::OutOfMemory { len: len as usize },
            VfioError::BadLayout { len, align } => HalError::BadLayout { len, align },
            VfioError::Short { step, .. } => HalError::Os { step, errno: libc::EIO },
            VfioError::BadPciAddr(_) => HalError::Unsupported("malformed PCI address"),
            VfioError::NoDevice { .. } => {
                HalError::Os { step: "find PCI function", errno: libc::ENODEV }
            }
            VfioError::NoIommuGroup { .. } => {
                HalError::Unsupported("device without an IOMMU group")
            }
            VfioError::BadSysfs { .. } => HalError::Unsupported("unexpected sysfs contents"),
            VfioError::ApiVersion { .. } => HalError::Unsupported("VFIO API version"),
            VfioError::NoType1v2 => HalError::Unsupported("VFIO type1v2 IOMMU"),
            VfioError::GroupNotViable { .. } => HalError::Unsupported("non-viable IOMMU group"),
            VfioError::NotPci { .. } => HalError::Unsupported("non-PCI VFIO device"),
            VfioError::Region { why, .. } => HalError::Unsupported(why),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_name_step_path_and_errno() {
        let e = VfioError::Os {
            step: "VFIO_GROUP_SET_CONTAINER",
            path: "/dev/vfio/12".into(),
            errno: libc::EBUSY,
        };
        let s = e.to_string();
        assert_eq!(
            s,
            "VFIO_GROUP_SET_CONTAINER on /dev/vfio/12 failed: errno 16 (Device or resource busy)"
        );
        assert_eq!(HalError::from(e), HalError::Os { step: "VFIO_GROUP_SET_CONTAINER", errno: 16 });
    }

    #[test]
    fn non_viable_group_names_the_other_devices() {
        let mut others: GroupPeers = [None; 4];
        others[0] = Some(Peer::new("0000:3b:00.1".parse().unwrap(), Some("mlx5_core")));
        others[1] = Some(Peer::new("0000:3a:00.0".parse().unwrap(), None));
        let e = VfioError::GroupNotViable { group: 7, others, count: 3 };
        let s = e.to_string();
        assert!(s.contains("IOMMU group 7 is not viable"), "{s}");
        assert!(
            s.ends_with(
                "others in the group: 0000:3b:00.1 (driver mlx5_core), 0000:3a:00.0 (no driver) \
                 and 1 more"
            ),
            "{s}"
        );
        let long = Peer::new("0000:00:00.0".parse().unwrap(), Some("a_very_long_driver_name"));
        assert_eq!(long.driver(), Some("a_very_long_dri"));
    }

    #[test]
    fn set_up_mistakes_say_what_to_do() {
        let dev: PciAddr = "0000:3b:00.0".parse().unwrap();
        let s = VfioError::NoDevice { dev }.to_string();
        assert!(s.starts_with("no PCI function at 0000:3b:00.0"), "{s}");
        assert!(s.contains("lspci -D -d 15b3:"), "{s}");
        let s = VfioError::NoIommuGroup { dev }.to_string();
        assert!(s.contains("has no IOMMU group: the IOMMU is off"), "{s}");
        assert!(s.contains("intel_iommu=on"), "{s}");
        let modules =
            VfioError::Os { step: "open", path: "/dev/vfio/vfio".into(), errno: libc::ENOENT };
        assert!(modules.to_string().ends_with("run `modprobe vfio-pci`"), "{modules}");
        let group =
            VfioError::Os { step: "open", path: "/dev/vfio/12".into(), errno: libc::ENOENT };
        assert!(group.to_string().contains("is the device bound to vfio-pci?"), "{group}");
        assert_eq!(
            HalError::from(VfioError::NoDevice { dev }),
            HalError::Os { step: "find PCI function", errno: libc::ENODEV }
        );
    }

    #[test]
    fn long_paths_are_truncated_visibly() {
        let long = "x".repeat(200);
        let p = SysPath::new(&long);
        assert_eq!(p.as_str().len(), SysPath::CAP);
        assert!(p.to_string().ends_with("..."));
        assert_eq!(SysPath::new("/dev/vfio/vfio").to_string(), "/dev/vfio/vfio");
    }
}
