//! MSI-X vectors as eventfds (vfio IRQ index 2).
//!
//! QEMU emulates the MSI-X table itself and hands the server one eventfd per vector with
//! `VFIO_USER_DEVICE_SET_IRQS` (`DATA_EVENTFD | ACTION_TRIGGER`); the device interrupts by
//! writing an 8-byte 1 to the vector's eventfd (the spec: "The server may trigger the IRQ by
//! writing 1 to the eventfd"). A vector without an eventfd is dropped and counted. A masked
//! vector (`ACTION_MASK`) latches its interrupt as pending and delivers it when unmasked, as
//! the PCI spec's MSI-X pending bits do.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use rdma_pmd_mlx5_model::Interrupts;

#[derive(Debug, Default)]
struct Vector {
    fd: Option<OwnedFd>,
    masked: bool,
    pending: bool,
}

/// The function's MSI-X vectors: the model's [`Interrupts`] sink.
#[derive(Debug)]
pub struct Msix {
    vectors: Mutex<Vec<Vector>>,
    raised: AtomicU64,
    dropped: AtomicU64,
}

impl Msix {
    /// `count` vectors, none with an eventfd, none masked.
    pub fn new(count: u16) -> Msix {
        Msix {
            vectors: Mutex::new((0..count).map(|_| Vector::default()).collect()),
            raised: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    fn table(&self) -> MutexGuard<'_, Vec<Vector>> {
        self.vectors.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Vectors of the function.
    pub fn count(&self) -> u32 {
        self.table().len() as u32
    }

    /// Interrupts delivered to an eventfd.
    pub fn raised(&self) -> u64 {
        self.raised.load(Ordering::Relaxed)
    }

    /// Interrupts dropped: no eventfd for the vector, a vector out of range, or a failed write.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Give vectors `start..start + fds.len()` these eventfds (closing any they had).
    pub fn assign(&self, start: u32, fds: Vec<OwnedFd>) {
        let mut t = self.table();
        for (v, fd) in t.iter_mut().skip(start as usize).zip(fds) {
            v.fd = Some(fd);
        }
    }

    /// Take the eventfds of vectors `start..start + count`.
    pub fn deassign(&self, start: u32, count: u32) {
        for v in self.table().iter_mut().skip(start as usize).take(count as usize) {
            v.fd = None;
            v.pending = false;
        }
    }

    /// Mask (`true`) or unmask vector `v`; an unmask delivers a pending interrupt.
    pub fn set_masked(&self, v: u32, masked: bool) {
        let mut t = self.table();
        let Some(vec) = t.get_mut(v as usize) else { return };
        vec.masked = masked;
        if !masked && vec.pending {
            vec.pending = false;
            self.deliver(vec);
        }
    }

    /// Raise vector `v` (the model's interrupt, or the client's `ACTION_TRIGGER`).
    pub fn fire(&self, v: u32) {
        let mut t = self.table();
        let Some(vec) = t.get_mut(v as usize) else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        if vec.masked {
            vec.pending = true;
        } else {
            self.deliver(vec);
        }
    }

    fn deliver(&self, vec: &Vector) {
        let Some(fd) = &vec.fd else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live local buffer to an fd we own.
        let n = unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        if n == 8 {
            self.raised.fetch_add(1, Ordering::Relaxed);
        } else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Interrupts for Msix {
    fn raise(&self, vector: u16) {
        self.fire(u32::from(vector));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    pub(crate) fn eventfd() -> OwnedFd {
        // SAFETY: plain syscall; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        assert!(fd >= 0);
        // SAFETY: a fresh fd nothing else owns.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }

    fn count(fd: &OwnedFd) -> u64 {
        let mut b = [0u8; 8];
        // SAFETY: reads 8 bytes into a local buffer.
        let n = unsafe { libc::read(fd.as_raw_fd(), b.as_mut_ptr().cast(), 8) };
        if n == 8 {
            u64::from_ne_bytes(b)
        } else {
            0
        }
    }

    #[test]
    fn raise_writes_the_vectors_eventfd_and_drops_the_rest() {
        let m = Msix::new(8);
        let e = eventfd();
        let dup = e.try_clone().unwrap();
        m.assign(3, vec![dup]);
        m.raise(3);
        m.raise(3);
        assert_eq!(count(&e), 2);
        m.raise(2); // no eventfd
        m.raise(8); // no such vector
        assert_eq!((m.raised(), m.dropped()), (2, 2));
        m.deassign(3, 1);
        m.raise(3);
        assert_eq!(count(&e), 0);
        assert_eq!(m.dropped(), 3);
    }

    #[test]
    fn a_masked_vector_holds_its_interrupt_until_unmasked() {
        let m = Msix::new(2);
        let e = eventfd();
        m.assign(0, vec![e.try_clone().unwrap()]);
        m.set_masked(0, true);
        m.raise(0);
        m.raise(0);
        assert_eq!(count(&e), 0);
        m.set_masked(0, false);
        assert_eq!(count(&e), 1, "one pending interrupt, delivered once");
        assert_eq!((m.raised(), m.dropped()), (1, 0));
    }
}
