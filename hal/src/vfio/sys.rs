//! Thin wrappers over the system calls the backend makes, turning `-1` into a [`VfioError`]
//! that names the step and the file.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::error::VfioError;

/// `open(path, O_RDWR | O_CLOEXEC)`.
pub fn open_rw(path: &str) -> Result<OwnedFd, VfioError> {
    let c = CString::new(path).map_err(|_| VfioError::BadSysfs { path: path.into() })?;
    // SAFETY: `c` is a NUL-terminated string that outlives the call.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(VfioError::last_os("open", path));
    }
    // SAFETY: `fd` was just returned by open and is owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// An ioctl whose argument is an integer (or none); returns the ioctl's non-negative result.
pub fn ioctl_val(
    fd: &impl AsRawFd,
    req: u64,
    arg: libc::c_ulong,
    step: &'static str,
    path: &str,
) -> Result<i32, VfioError> {
    // SAFETY: the VFIO ioctls called this way take an integer argument and touch no memory of
    // this process.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), req as _, arg) };
    if r < 0 {
        return Err(VfioError::last_os(step, path));
    }
    Ok(r)
}

/// An ioctl whose argument points at `arg`.
///
/// # Safety
/// `req` must be an ioctl that reads and/or writes at most `size_of::<T>()` bytes at its
/// argument (VFIO ioctls honour the `argsz` the caller put in `T`), and whatever pointers `T`
/// carries must be valid for what the ioctl does with them.
pub unsafe fn ioctl_ptr<T>(
    fd: &impl AsRawFd,
    req: u64,
    arg: *mut T,
    step: &'static str,
    path: &str,
) -> Result<i32, VfioError> {
    // SAFETY: the caller guarantees `arg` fits what `req` accesses.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), req as _, arg) };
    if r < 0 {
        return Err(VfioError::last_os(step, path));
    }
    Ok(r)
}

/// `pread` of exactly `buf.len()` bytes at `off`.
pub fn pread_exact(
    fd: &impl AsRawFd,
    buf: &mut [u8],
    off: u64,
    step: &'static str,
    path: &str,
) -> Result<(), VfioError> {
    // SAFETY: `buf` is valid for writes of its length.
    let n = unsafe { libc::pread(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), off as i64) };
    if n < 0 {
        return Err(VfioError::last_os(step, path));
    }
    if n as usize != buf.len() {
        return Err(VfioError::Short { step, path: path.into(), want: buf.len(), got: n as usize });
    }
    Ok(())
}

/// `pwrite` of exactly `buf.len()` bytes at `off`.
pub fn pwrite_exact(
    fd: &impl AsRawFd,
    buf: &[u8],
    off: u64,
    step: &'static str,
    path: &str,
) -> Result<(), VfioError> {
    // SAFETY: `buf` is valid for reads of its length.
    let n = unsafe { libc::pwrite(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len(), off as i64) };
    if n < 0 {
        return Err(VfioError::last_os(step, path));
    }
    if n as usize != buf.len() {
        return Err(VfioError::Short { step, path: path.into(), want: buf.len(), got: n as usize });
    }
    Ok(())
}
