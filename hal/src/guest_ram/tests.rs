//! `GuestRam` over memfds: what a VMM's DMA_MAP hands a device process.

use super::*;
use std::fs::File;
use std::os::fd::{AsFd, FromRawFd};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

const PAGE: u64 = 4096;

/// A memfd of `pages` pages, open read-write.
fn memfd(pages: u64) -> File {
    // SAFETY: a NUL-terminated name and valid flags; the result is checked.
    let fd = unsafe { libc::memfd_create(c"guest-ram-test".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    let f = unsafe { File::from_raw_fd(fd) };
    f.set_len(pages * PAGE).unwrap();
    f
}

#[test]
fn reads_and_writes_reach_the_file_at_the_mapped_offset() {
    let f = memfd(4);
    let ram = GuestRam::new();
    // File pages 1..3 at bus 0x10_0000.
    ram.map(BusAddr(0x10_0000), 2 * PAGE, f.as_fd(), PAGE, Prot::RW).unwrap();
    f.write_at(b"guest", PAGE + 0x10).unwrap();
    let mut got = [0u8; 5];
    assert!(ram.read(BusAddr(0x10_0010), &mut got));
    assert_eq!(&got, b"guest");
    assert!(ram.write(BusAddr(0x10_0000 + PAGE + 3), b"device"));
    let mut back = [0u8; 6];
    f.read_exact_at(&mut back, 2 * PAGE + 3).unwrap();
    assert_eq!(&back, b"device");
}

#[test]
fn accesses_fault_at_the_region_edges() {
    let f = memfd(2);
    let ram = GuestRam::new();
    let base = 0x4000_0000;
    ram.map(BusAddr(base), 2 * PAGE, f.as_fd(), 0, Prot::RW).unwrap();
    let mut b = [0u8; 8];
    // The last 8 bytes are inside; one byte further is not; below the start is not.
    assert!(ram.read(BusAddr(base + 2 * PAGE - 8), &mut b));
    assert!(!ram.read(BusAddr(base + 2 * PAGE - 7), &mut b));
    assert!(!ram.write(BusAddr(base + 2 * PAGE - 7), &b));
    assert!(!ram.read(BusAddr(base - 1), &mut b));
    assert!(!ram.read(BusAddr(base + 2 * PAGE), &mut [0u8; 1]));
    assert!(!ram.read(BusAddr(u64::MAX - 2), &mut b));
    assert!(ram.mapped(BusAddr(base), 2 * PAGE as usize));
    assert!(!ram.mapped(BusAddr(base), 2 * PAGE as usize + 1));
}

#[test]
fn an_access_spanning_two_adjacent_regions_faults() {
    let f = memfd(2);
    let ram = GuestRam::new();
    ram.map(BusAddr(0), PAGE, f.as_fd(), 0, Prot::RW).unwrap();
    ram.map(BusAddr(PAGE), PAGE, f.as_fd(), PAGE, Prot::RW).unwrap();
    assert!(ram.read(BusAddr(PAGE - 4), &mut [0u8; 4]));
    assert!(!ram.read(BusAddr(PAGE - 4), &mut [0u8; 8]));
}

#[test]
fn a_read_only_region_refuses_device_writes() {
    let f = memfd(1);
    f.write_at(&[0xaa; 16], 0).unwrap();
    let ram = GuestRam::new();
    ram.map(BusAddr(0x2000), PAGE, f.as_fd(), 0, Prot::RO).unwrap();
    assert!(!ram.write(BusAddr(0x2000), &[0x55; 16]));
    let mut b = [0u8; 16];
    assert!(ram.read(BusAddr(0x2000), &mut b));
    assert_eq!(b, [0xaa; 16], "the refused write left memory alone");
    // Write-only: the device may write but not read.
    let ram = GuestRam::new();
    let wo = Prot { read: false, write: true };
    ram.map(BusAddr(0x2000), PAGE, f.as_fd(), 0, wo).unwrap();
    assert!(ram.write(BusAddr(0x2000), &[0x55; 16]));
    assert!(!ram.read(BusAddr(0x2000), &mut b));
    f.read_exact_at(&mut b, 0).unwrap();
    assert_eq!(b, [0x55; 16]);
}

#[test]
fn overlapping_maps_are_refused_and_change_nothing() {
    let f = memfd(4);
    let ram = GuestRam::new();
    ram.map(BusAddr(0x10000), 2 * PAGE, f.as_fd(), 0, Prot::RW).unwrap();
    for (iova, len) in [
        (0x10000, PAGE),            // same start
        (0x10000 - PAGE, 2 * PAGE), // reaches in from below
        (0x10000 + PAGE, 2 * PAGE), // starts inside
        (0x10000 - PAGE, 4 * PAGE), // covers it
    ] {
        assert_eq!(
            ram.map(BusAddr(iova), len, f.as_fd(), 0, Prot::RW),
            Err(GuestRamError::Overlap { iova, len, existing: 0x10000 }),
            "{iova:#x}+{len:#x}"
        );
    }
    assert_eq!(ram.regions(), 1);
    // Touching edges are not overlaps.
    ram.map(BusAddr(0x10000 - PAGE), PAGE, f.as_fd(), 0, Prot::RW).unwrap();
    ram.map(BusAddr(0x10000 + 2 * PAGE), PAGE, f.as_fd(), 0, Prot::RW).unwrap();
    assert_eq!(ram.regions(), 3);
}

#[test]
fn bad_ranges_and_mmap_failures_are_typed_errors() {
    let f = memfd(1);
    let ram = GuestRam::new();
    assert_eq!(
        ram.map(BusAddr(0), 0, f.as_fd(), 0, Prot::RW),
        Err(GuestRamError::BadRange { iova: 0, len: 0 })
    );
    assert_eq!(
        ram.map(BusAddr(u64::MAX - PAGE + 2), PAGE, f.as_fd(), 0, Prot::RW).unwrap_err().errno(),
        libc::EINVAL
    );
    // An offset that is not page-aligned: mmap says EINVAL.
    assert_eq!(
        ram.map(BusAddr(0), PAGE, f.as_fd(), 3, Prot::RW),
        Err(GuestRamError::Mmap { errno: libc::EINVAL })
    );
    // A read-only fd cannot be mapped shared and writeable.
    let path = format!("/proc/self/fd/{}", f.as_raw_fd());
    let ro = File::open(path).unwrap();
    assert_eq!(
        ram.map(BusAddr(0), PAGE, ro.as_fd(), 0, Prot::RW),
        Err(GuestRamError::Mmap { errno: libc::EACCES })
    );
    assert_eq!(ram.regions(), 0);
}

#[test]
fn unmap_needs_the_exact_region_and_leaves_the_others() {
    let f = memfd(2);
    let ram = GuestRam::new();
    // The same file page mapped twice, at two bus addresses.
    ram.map(BusAddr(0x1000_0000), PAGE, f.as_fd(), 0, Prot::RW).unwrap();
    ram.map(BusAddr(0x2000_0000), PAGE, f.as_fd(), 0, Prot::RW).unwrap();
    assert_eq!(
        ram.unmap(BusAddr(0x1000_0000), PAGE / 2),
        Err(GuestRamError::NotMapped { iova: 0x1000_0000, len: PAGE / 2 })
    );
    assert_eq!(ram.unmap(BusAddr(0x1000_0800), PAGE / 2).unwrap_err().errno(), libc::ENOENT);
    assert_eq!(ram.unmap(BusAddr(0x3000_0000), PAGE).unwrap_err().errno(), libc::ENOENT);
    assert_eq!(ram.regions(), 2);
    ram.unmap(BusAddr(0x1000_0000), PAGE).unwrap();
    assert!(!ram.read(BusAddr(0x1000_0000), &mut [0u8; 4]));
    // The other mapping of the same page still works and sees the file.
    assert!(ram.write(BusAddr(0x2000_0000), b"kept"));
    let mut b = [0u8; 4];
    f.read_exact_at(&mut b, 0).unwrap();
    assert_eq!(&b, b"kept");
    // Unmapping twice is refused.
    assert!(ram.unmap(BusAddr(0x1000_0000), PAGE).is_err());
    assert_eq!(ram.unmap_all(), 1);
    assert_eq!(ram.regions(), 0);
}

#[test]
fn the_mapping_outlives_the_fd() {
    let f = memfd(1);
    let ram = GuestRam::new();
    ram.map(BusAddr(0), PAGE, f.as_fd(), 0, Prot::RW).unwrap();
    drop(f);
    assert!(ram.write(BusAddr(8), &[1, 2, 3, 4]));
    let mut b = [0u8; 4];
    assert!(ram.read(BusAddr(8), &mut b));
    assert_eq!(b, [1, 2, 3, 4]);
}

#[test]
fn unmap_while_another_thread_copies_is_safe() {
    // A device thread copies in a loop while the VMM maps and unmaps: every access either
    // completes on live pages or faults; none touches unmapped memory (which would SIGSEGV).
    let f = memfd(16);
    let ram = Arc::new(GuestRam::new());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let dev = {
        let (ram, stop) = (ram.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 16 * PAGE as usize];
            let (mut ok, mut faults) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                if ram.read(BusAddr(0x8000_0000), &mut buf) {
                    ok += 1;
                } else {
                    faults += 1;
                }
            }
            (ok, faults)
        })
    };
    for _ in 0..200 {
        ram.map(BusAddr(0x8000_0000), 16 * PAGE, f.as_fd(), 0, Prot::RW).unwrap();
        std::thread::yield_now();
        ram.unmap(BusAddr(0x8000_0000), 16 * PAGE).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let (ok, faults) = dev.join().unwrap();
    assert!(ok + faults > 0);
}
