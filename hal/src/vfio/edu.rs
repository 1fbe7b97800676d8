//! The backend against a real vfio-pci device: QEMU's `edu` (vendor 0x1234, device 0x11e8).
//!
//! These tests need the device, bound to vfio-pci, named by `RDMA_PMD_VFIO_EDU` (a PCI
//! address), 2 MiB hugepages reserved, root, and an IOMMU. `cargo xtask test --tier vfio` boots
//! a guest that has all of that and runs them there with `--ignored --test-threads=1` (one VFIO
//! group can be opened by one user at a time).
//!
//! `edu` (QEMU `hw/misc/edu.c`, `docs/specs/edu.rst`): BAR0 is 1 MiB; 0x00 identification
//! (0x010000ed), 0x04 liveness (reads the bitwise NOT of the last write); DMA registers 0x80
//! source, 0x88 destination, 0x90 count, 0x98 command (bit 0 start/busy, bit 1 direction:
//! 1 = device to RAM). The device's own buffer is 4096 bytes at device address 0x40000. The
//! device drives 28 address lines unless QEMU is told otherwise (`dma_mask`), and truncates
//! wider addresses silently.

use std::time::{Duration, Instant};

use super::*;
use crate::barrier;
use crate::{BusAddr, Dma, DmaBuf, HalError, Mmio};

const ID: usize = 0x00;
const LIVENESS: usize = 0x04;
const DMA_SRC: usize = 0x80;
const DMA_DST: usize = 0x88;
const DMA_CNT: usize = 0x90;
const DMA_CMD: usize = 0x98;
const CMD_START: u64 = 1 << 0;
const CMD_TO_RAM: u64 = 1 << 1;
/// The device's buffer, as the DMA engine addresses it.
const EDU_BUF: u64 = 0x40000;
/// Longest transfer: 4095, since QEMU 7.2 aborts on a full 4096-byte one (off-by-one bounds
/// check in `edu_check_range`).
const MAX_XFER: usize = 4095;
/// `edu`'s address lines.
const EDU_MASK: DmaMask = DmaMask::bits(28);

fn edu_addr() -> PciAddr {
    let s = std::env::var("RDMA_PMD_VFIO_EDU").expect(
        "RDMA_PMD_VFIO_EDU must name the vfio-pci bound edu device (cargo xtask test --tier vfio)",
    );
    s.parse().expect("RDMA_PMD_VFIO_EDU is a PCI address")
}

struct Edu {
    // Field order is drop order: the BAR is unmapped before the device closes.
    bar: VfioBar,
    dev: VfioDevice,
}

impl Edu {
    fn open() -> Self {
        Self::with(VfioDevice::open(edu_addr()).expect("open edu through VFIO"))
    }

    fn with(dev: VfioDevice) -> Self {
        dev.enable_dma().expect("enable bus mastering");
        let bar = dev.map_bar(0).expect("map BAR0");
        Edu { bar, dev }
    }

    fn dma(&self, src: u64, dst: u64, len: usize, cmd: u64) {
        assert!(len <= MAX_XFER);
        // Orders the CPU's stores to the DMA buffer before the command that makes edu read it.
        barrier::to_device();
        self.bar.write_u64(DMA_SRC, src);
        self.bar.write_u64(DMA_DST, dst);
        self.bar.write_u64(DMA_CNT, len as u64);
        self.bar.write_u64(DMA_CMD, cmd | CMD_START);
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.bar.read_u32(DMA_CMD) as u64 & CMD_START != 0 {
            assert!(Instant::now() < deadline, "edu DMA did not complete in 20 s");
            std::thread::sleep(Duration::from_millis(2));
        }
        // Orders the completion read above before the CPU's loads of what the device wrote.
        barrier::from_device();
    }

    /// RAM (IOVA) → device buffer at `off`.
    fn to_device(&self, iova: BusAddr, off: u64, len: usize) {
        self.dma(iova.0, EDU_BUF + off, len, 0);
    }

    /// Device buffer at `off` → RAM (IOVA).
    fn to_ram(&self, off: u64, iova: BusAddr, len: usize) {
        self.dma(EDU_BUF + off, iova.0, len, CMD_TO_RAM);
    }

    fn dma_mem(&self, pages: Pages) -> VfioDma {
        self.dev.dma(DmaConfig { mask: EDU_MASK, pages }).expect("DMA allocator")
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(seed as u32 * 7) as u8 ^ 0x5a)
        .collect()
}

/// Send [`MAX_XFER`] bytes from `src` (at `src_off`) through the device buffer into `dst` (at
/// `dst_off`) and compare byte for byte; bytes of `dst` around the target must keep their
/// poison. `src` and `dst` may be the same block (disjoint ranges).
fn round_trip(edu: &Edu, src: &DmaBuf, src_off: usize, dst: &DmaBuf, dst_off: usize, seed: u8) {
    round_trip_n(edu, src, src_off, dst, dst_off, seed, MAX_XFER)
}

fn round_trip_n(
    edu: &Edu,
    src: &DmaBuf,
    src_off: usize,
    dst: &DmaBuf,
    dst_off: usize,
    seed: u8,
    len: usize,
) {
    let data = pattern(seed, len);
    dst.fill(0xee);
    src.write_bytes(src_off, &data);
    edu.to_device(src.bus().add(src_off as u64), 0, len);
    edu.to_ram(0, dst.bus().add(dst_off as u64), len);
    let mut back = vec![0u8; len];
    dst.read_bytes(dst_off, &mut back);
    let first_bad = back.iter().zip(&data).position(|(a, b)| a != b);
    assert_eq!(first_bad, None, "round trip differs at byte {first_bad:?} ({len} bytes)");
    if dst_off > 0 {
        let mut b = [0u8; 1];
        dst.read_bytes(dst_off - 1, &mut b);
        assert_eq!(b[0], 0xee, "byte before the target overwritten");
    }
    if dst_off + len < dst.len() {
        let mut b = [0u8; 1];
        dst.read_bytes(dst_off + len, &mut b);
        assert_eq!(b[0], 0xee, "byte after the target overwritten");
    }
}

fn hugepages_free() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").expect("read /proc/meminfo");
    text.lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("HugePages_Free in /proc/meminfo")
}

/// The kernel log (`klogctl(SYSLOG_ACTION_READ_ALL)`).
fn kernel_log() -> String {
    let mut buf = vec![0u8; 1 << 20];
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::klogctl(3, buf.as_mut_ptr().cast(), buf.len() as i32) };
    assert!(n >= 0, "klogctl: {}", std::io::Error::last_os_error());
    String::from_utf8_lossy(&buf[..n as usize]).into_owned()
}

/// Write a marker line into the kernel log; returns it.
fn log_marker(what: &str) -> String {
    let line = format!("rdma-pmd-test: {what} {:?}", Instant::now());
    std::fs::write("/dev/kmsg", &line).expect("write /dev/kmsg");
    line
}

/// Wait (up to 5 s) for a kernel log line after `marker` containing all of `needles`.
fn log_after(marker: &str, needles: &[&str]) -> Option<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let log = kernel_log();
        if let Some(i) = log.rfind(marker) {
            if let Some(l) = log[i..].lines().find(|l| needles.iter().all(|n| l.contains(n))) {
                return Some(l.to_string());
            }
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Read the first 64 bytes of config space the way `lspci` does, through sysfs, not VFIO.
fn sysfs_command(addr: PciAddr) -> u16 {
    let cfg = std::fs::read(format!("/sys/bus/pci/devices/{addr}/config")).expect("sysfs config");
    u16::from_le_bytes([cfg[4], cfg[5]])
}

#[test]
#[ignore = "needs a vfio-pci bound edu device: cargo xtask test --tier vfio"]
fn a_open_identifies_edu_through_config_space_and_bar0() {
    let edu = Edu::open();
    let addr = edu_addr();
    let ids = edu.dev.ids().unwrap();
    assert_eq!((ids.vendor, ids.device), (0x1234, 0x11e8), "config-space IDs");
    assert_eq!(sysfs_ids(addr).unwrap(), ids, "sysfs and the VFIO config region agree");
    assert_eq!(edu.dev.group().number(), iommu_group(addr).unwrap());
    assert_eq!(bound_driver(addr).as_deref(), Some("vfio-pci"));
    assert_eq!(edu.bar.size(), 1 << 20, "edu BAR0 is 1 MiB");
    assert!(edu.dev.num_regions() >= 9, "vfio-pci reports BARs, ROM, config, VGA");
    assert_eq!(edu.bar.read_u32(ID), 0x0100_00ed, "identification register");
    for v in [0x1234_5678u32, 0, 0xffff_ffff, 0xa5a5_0f0f] {
        edu.bar.write_u32(LIVENESS, v);
        assert_eq!(edu.bar.read_u32(LIVENESS), !v, "liveness register inverts {v:#x}");
    }
}

#[test]
#[ignore = "needs a vfio-pci bound edu device: cargo xtask test --tier vfio"]
fn b_config_space_command_register_reaches_the_device() {
    let edu = Edu::open();
    let cmd = edu.dev.command().unwrap();
    assert!(cmd.contains(Command::MEMORY | Command::MASTER), "{cmd:?}");
    // What the kernel's own config accessors see (sysfs), not VFIO's view of it.
    assert_eq!(sysfs_command(edu.dev.addr()) & 0x6, 0x6, "sysfs sees MEMORY|MASTER");
    // Config space is little-endian: the class code (0x00ff) and header type come back too.
    let class = edu.dev.config_read_u32(0x08).unwrap() >> 8;
    assert_eq!(class, 0x00_ff00, "edu's class code: unclassified device");
    let mut past_end = [0u8; 4];
    let size = edu.dev.region_info(uapi::VFIO_PCI_CONFIG_REGION_INDEX).unwrap().size;
    let e = edu.dev.config_read(size - 2, &mut past_end).unwrap_err();
    assert!(matches!(e, VfioError::Region { index: 7, .. }), "{e}");
    assert!(e.to_string().starts_with(&format!("device {} region 7: ", edu.dev.addr())), "{e}");
    let bar6 = edu.dev.map_bar(6).unwrap_err();
    assert!(matches!(bar6, VfioError::Region { index: 6, .. }), "{bar6}");
    let bar1 = edu.dev.map_bar(1).unwrap_err();
    assert!(bar1.to_string().contains("size 0"), "{bar1}");
}

#[test]
#[ignore = "needs a vfio-pci bound edu device: cargo xtask test --tier vfio"]
fn c_dma_round_trip_on_4k_pages() {
    let edu = Edu::open();
    let dma = edu.dma_mem(Pages::Small);
    let src = dma.alloc(3 * PAGE_4K, PAGE_4K).unwrap();
    let dst = dma.alloc(2 * PAGE_4K, 64).unwrap();
    for b in [&src, &dst] {
        let back = dma.backing(b).unwrap();
        assert_eq!(back.page_size, PAGE_4K);
        assert_ne!(b.bus().0, b.cpu().as_ptr() as u64, "an IOVA, not the CPU address");
        let mut z = vec![1u8; b.len()];
        b.read_bytes(0, &mut z);
        assert!(z.iter().all(|x| *x == 0), "fresh DMA memory is zeroed");
    }
    // Page-crossing source and destination.
    round_trip(&edu, &src, 100, &dst, 3000, 1);
    round_trip(&edu, &src, 2 * PAGE_4K, &dst, 1, 2);
    assert_eq!(dma.live_blocks(), 2);
    // SAFETY: the device is idle (every DMA above completed).
    unsafe {
        dma.free(src);
        dma.free(dst);
    }
    assert_eq!(dma.live_blocks(), 0);
}

#[test]
#[ignore = "needs a vfio-pci bound edu device: cargo xtask test --tier vfio"]
fn d_dma_round_trip_on_a_2m_hugepage() {
    let edu = Edu::open();
    let dma = edu.dma_mem(Pages::Huge);
    let before = hugepages_free();
    assert!(before >= 2, "the guest reserves 2 MiB hugepages (HugePages_Free {before})");
    let huge = dma.alloc(PAGE_2M, PAGE_2M).unwrap();
    assert_eq!(hugepages_free(), before - 1, "one hugepage taken");
    let back = dma.backing(&huge).unwrap();
    assert_eq!((back.page_size, back.mapped), (PAGE_2M, PAGE_2M));
    assert!(huge.bus().is_aligned(PAGE_2M as u64));
    assert_eq!(huge.cpu().as_ptr() as usize % PAGE_2M, 0);
    // Through the whole page: start, across the middle 4 KiB boundary, the very end.
    round_trip(&edu, &huge, 0, &huge, PAGE_2M / 2 - 2000, 3);
    round_trip(&edu, &huge, PAGE_2M - MAX_XFER, &huge, 8192, 4);
    // And into a 4 KiB-page block of another allocator on the same container.
    let small = edu.dma_mem(Pages::Small);
    let s = small.alloc(PAGE_4K, PAGE_4K).unwrap();
    round_trip(&edu, &huge, 12345, &s, 0, 5);
    // SAFETY: the device is idle.
    unsafe {
        small.free(s);
        dma.free(huge);
    }
    assert_eq!(hugepages_free(), before, "the hugepage went back to the pool");
}

#[test]
#[ignore = "needs a vfio-pci bound edu device: cargo xtask test --tier vfio"]
fn e_auto_pages_pick_hugepages_for_big_blocks_only() {
    let edu = Edu::open();
    let dma = edu.dma_mem(Pages::Auto);
    let big = dma.alloc(3 << 20, 4096).unwrap();
    let small = dma.alloc(256, 64).unwrap();
    assert_eq!(dma.backing(&big).unwrap().page_size, PAGE_2M);
    assert_eq!(dma.backing(&big).unwrap().mapped, 4 << 20, "rounded up to whole hugepages");
    assert_eq!(dma.backing(&small).unwrap().page_size, PAGE_4K);
    round_trip_n(&edu, &big, (3 << 20) - 200, &small, 56, 6, 200);
    // SAFETY: the device is idle.
    unsafe {
        dma.free(big);
        dma.free(small);
    }
}

#[test]
#[ignore = "needs a vfio-pci bound edu device: cargo xtask test --tier vfio"]
fn f_iovas_respect_the_28_bit_mask() {
    let edu = Edu::open();
    let dma = edu.dma_mem(Pages::Auto);
    let ranges = dma.iova_ranges();
    assert!(!ranges.is_empty() && ranges.iter().all(|r| r.end < 1 << 28), "{ranges:?}");
    let blocks: Vec<DmaBuf> = (0..6)
        .map(|i| {
            if i % 2 == 0 { dma.alloc(PAGE_2M, PAGE_2M) } else { dma.alloc(5000, 4096) }.unwrap()
        })
        .collect();
    for b in &blocks {
        assert!(
            b.bus().0 + b.len() as u64 <= 1 << 28,
            "IOVA {} + {:#x} above 2^28",
            b.bus(),
            b.len()
        );
    }
    // The highest block, right under the mask, works with a device that has only 28 lines.
    let top = blocks.iter().max_by_key(|b| b.bus().0).unwrap();
    assert!(top.bus().0 + top.len() as u64 > (1 << 28) - (8 << 20), "top-down placement");
    round_trip(&edu, top, 0, top, 2 * MAX_XFER, 7);
    for b in blocks {
        // SAFETY: the device is idle.
        unsafe { dma.free(b) };
    }
}

#[test]
#[ignore = "needs a vfio-pci bound edu device: cargo xtask test --tier vfio"]
fn g_a_too_wide_mask_breaks_dma_on_a_28_bit_device() {
    // The control: telling the allocator the device has 64 lines places the block high, edu
    // drops the upper address bits, and the data never arrives. This is what the mask is for.
    let edu = Edu::open();
    let wide = edu.dev.dma(DmaConfig { mask: DmaMask::bits(64), pages: Pages::Small }).unwrap();
    let good = edu.dma_mem(Pages::Small);
    let high = wide.alloc(PAGE_4K, PAGE_4K).unwrap();
    let low = good.alloc(PAGE_4K, PAGE_4K).unwrap();
    assert!(high.bus().0 >= 1 << 28, "a 64-bit mask places {} above 2^28", high.bus());
    assert!(low.bus().0 < 1 << 28);
    let data = pattern(8, 64);
    low.write_bytes(0, &data);
    edu.to_device(low.bus(), 0, 64);
    high.fill(0xee);
    edu.to_ram(0, high.bus(), 64);
    let mut got = [0u8; 64];
    high.read_bytes(0, &mut got);
    assert!(got.iter().all(|b| *b == 0xee), "a write truncated to 28 bits must not land here");
    // SAFETY: the device is idle.
    unsafe {
        wide.free(high);
        good.free(low);
    }
}

#[test]
#[ignore = "needs a vfio-pci bound edu device: cargo xtask test --tier vfio"]
fn h_unmapped_iova_faults_in_the_iommu() {
    let edu = Edu::open();
    let dma = edu.dma_mem(Pages::Small);
    let probe = dma.alloc(PAGE_4K, PAGE_4K).unwrap();
    let victim = dma.alloc(PAGE_4K, PAGE_4K).unwrap();
    let stale = victim.bus();
    // Prove the mapping works, then take it away.
    round_trip(&edu, &probe, 0, &victim, 0, 9);
    // SAFETY: the device is idle.
    unsafe { dma.free(victim) };
    let container = edu.dev.container();

    // Device reads from the unmapped IOVA: the IOMMU blocks it and the device gets zeros.
    let marker = log_marker("read fault");
    probe.write_bytes(0, &[0x77; 64]);
    edu.to_device(probe.bus(), 0, 64); // device buffer := 0x77...
    edu.to_device(stale, 0, 64); // from nowhere
    probe.fill(0xee);
    edu.to_ram(0, probe.bus(), 64);
    let mut got = [0u8; 64];
    probe.read_bytes(0, &mut got);
    assert_eq!(got, [0u8; 64], "a blocked DMA read delivers zeros");
    let line = log_after(&marker, &["DMAR", "PTE Read access is not set"]);
    assert!(line.is_some(), "no DMAR read fault in the kernel log");
    eprintln!("kernel: {}", line.unwrap());

    // Device writes to an IOVA whose memory still exists but is no longer mapped: dropped.
    // SAFETY: a fresh private anonymous page, unmapped below.
    let page = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            PAGE_4K,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(page, libc::MAP_FAILED);
    let iova = 0x0800_0000u64;
    // SAFETY: the page is ours and stays mapped until the munmap at the end.
    unsafe { container.map_dma(page as usize, iova, PAGE_4K as u64) }.unwrap();
    // SAFETY: in bounds of the page.
    let read = |i: usize| unsafe { (page as *const u8).add(i).read_volatile() };
    // SAFETY: in bounds of the page.
    let fill = |v: u8| unsafe { core::ptr::write_bytes(page as *mut u8, v, PAGE_4K) };
    probe.write_bytes(0, &[0x42; 64]);
    edu.to_device(probe.bus(), 0, 64);
    fill(0xee);
    edu.to_ram(0, BusAddr(iova), 64);
    assert_eq!(read(0), 0x42, "mapped: the write lands");
    assert_eq!(container.unmap_dma(iova, PAGE_4K as u64).unwrap(), PAGE_4K as u64);
    let marker = log_marker("write fault");
    fill(0xee);
    edu.to_ram(0, BusAddr(iova), 64);
    assert!((0..64).all(|i| read(i) == 0xee), "unmapped: the write is dropped");
    let line = log_after(&marker, &["DMAR", "PTE Write access is not set"]);
    assert!(line.is_some(), "no DMAR write fault in the kernel log");
    eprintln!("kernel: {}", line.unwrap());
    // SAFETY: the page mapped above; no longer reachable by the device.
    unsafe { libc::munmap(page, PAGE_4K) };
    // SAFETY: the device is idle.
    unsafe { dma.free(probe) };
}

#[test]
#[ignore = "needs a vfio-pci bound edu device: cargo xtask test --tier vfio"]
fn i_teardown_releases_everything_and_the_device_reopens() {
    let before = hugepages_free();
    {
        let edu = Edu::open();
        // The group is exclusive while open: a second open fails, naming the step and file.
        let again = VfioDevice::open(edu_addr()).unwrap_err();
        assert_eq!(again.errno(), Some(libc::EBUSY), "{again}");
        let group = edu.dev.group().number();
        assert!(
            again.to_string().starts_with(&format!("open on /dev/vfio/{group} failed: errno 16")),
            "{again}"
        );
        let dma = edu.dma_mem(Pages::Huge);
        let kept = dma.alloc(PAGE_2M, PAGE_2M).unwrap();
        kept.write_u64(0, 0x1122_3344_5566_7788);
        assert_eq!(hugepages_free(), before - 1);
        // Dropping the allocator with a block still out unmaps it from the IOMMU and returns
        // the hugepage, while the stale handle stays harmless to read.
        drop(dma);
        assert_eq!(hugepages_free(), before, "hugepage returned on drop");
        assert_eq!(kept.read_u64(0), 0, "the stale handle reads fresh zero memory");
        drop(edu);
    }
    for round in 0..2 {
        let edu = Edu::open();
        let dma = edu.dma_mem(Pages::Auto);
        let a = dma.alloc(PAGE_4K, PAGE_4K).unwrap();
        let b = dma.alloc(PAGE_2M, PAGE_2M).unwrap();
        round_trip(&edu, &a, 0, &b, PAGE_2M - MAX_XFER, 10 + round);
        assert_eq!(edu.bar.read_u32(ID), 0x0100_00ed);
        // SAFETY: the device is idle.
        unsafe {
            dma.free(a);
            dma.free(b);
        }
    }
    assert_eq!(hugepages_free(), before);
}

#[test]
#[ignore = "needs a vfio-pci bound edu device sharing its group: cargo xtask test --tier vfio"]
fn j_non_viable_group_names_the_other_devices() {
    // A second edu behind a PCI bridge, next to a virtio device bound to virtio-pci: one IOMMU
    // group that VFIO must refuse.
    let shared: PciAddr = std::env::var("RDMA_PMD_VFIO_EDU_SHARED")
        .expect("RDMA_PMD_VFIO_EDU_SHARED names an edu that shares its IOMMU group")
        .parse()
        .expect("a PCI address");
    assert_eq!(bound_driver(shared).as_deref(), Some("vfio-pci"));
    let group = iommu_group(shared).unwrap();
    let dir = format!("/sys/kernel/iommu_groups/{group}/devices");
    let mut peers: Vec<PciAddr> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .filter(|a| *a != shared)
        .collect();
    peers.sort();
    let busy = peers
        .iter()
        .copied()
        .find(|a| bound_driver(*a).as_deref() == Some("virtio-pci"))
        .expect("a virtio-pci bound device in the group");
    let e = VfioDevice::open(shared).unwrap_err();
    match e {
        VfioError::GroupNotViable { group: g, others, count } => {
            assert_eq!(g, group);
            assert_eq!(count, peers.len());
            let first = others[0].expect("at least one other device");
            assert_eq!((first.addr, first.driver()), (busy, Some("virtio-pci")), "bound first");
        }
        other => panic!("expected GroupNotViable, got {other}"),
    }
    let text = e.to_string();
    assert!(text.contains(&format!("IOMMU group {group} is not viable")), "{text}");
    assert!(text.contains(&format!("{busy} (driver virtio-pci)")), "{text}");
    eprintln!("error: {text}");
    // The refusal left nothing behind: the group file opens again (and is refused again).
    assert!(matches!(VfioDevice::open(shared), Err(VfioError::GroupNotViable { .. })));
}

#[test]
#[ignore = "needs a vfio-pci bound edu device: cargo xtask test --tier vfio"]
fn k_auto_pages_fall_back_to_4k_when_no_hugepage_is_free() {
    const NR: &str = "/proc/sys/vm/nr_hugepages";
    let reserved = std::fs::read_to_string(NR).unwrap();
    std::fs::write(NR, "0").unwrap();
    assert_eq!(hugepages_free(), 0);
    let edu = Edu::open();
    let auto = edu.dma_mem(Pages::Auto);
    let huge = edu.dma_mem(Pages::Huge);
    let e = huge.alloc(PAGE_2M, PAGE_2M).unwrap_err();
    let block = auto.alloc(PAGE_2M, PAGE_2M);
    std::fs::write(NR, reserved.trim()).unwrap();
    assert!(matches!(e, HalError::Os { step: "mmap 2 MiB hugepages", .. }), "{e}");
    let block = block.unwrap();
    let back = auto.backing(&block).unwrap();
    assert_eq!((back.page_size, back.mapped), (PAGE_4K, PAGE_2M));
    assert!(block.bus().is_aligned(PAGE_2M as u64), "alignment still honoured");
    assert_eq!(block.cpu().as_ptr() as usize % PAGE_2M, 0);
    round_trip(&edu, &block, PAGE_2M - MAX_XFER, &block, 0, 12);
    // SAFETY: the device is idle.
    unsafe { auto.free(block) };
}

/// `capget`/`capset` on the calling thread (capabilities are per thread on Linux).
fn thread_caps(set: Option<[u32; 6]>) -> [u32; 6] {
    // `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
    let mut header = [0x2008_0522u32, 0];
    let mut data = set.unwrap_or([0; 6]);
    let nr = if set.is_some() { libc::SYS_capset } else { libc::SYS_capget };
    // SAFETY: header and data are the v3 layouts (`__user_cap_header_struct`, two
    // `__user_cap_data_struct`s of effective/permitted/inheritable), valid for the call.
    let r = unsafe { libc::syscall(nr, header.as_mut_ptr(), data.as_mut_ptr()) };
    assert_eq!(r, 0, "capget/capset: {}", std::io::Error::last_os_error());
    data
}

#[test]
#[ignore = "needs a vfio-pci bound edu device: cargo xtask test --tier vfio"]
fn l_memlock_limit_is_named_when_pinning_exceeds_it() {
    // What an unprivileged user meets: without CAP_IPC_LOCK, VFIO charges pinned pages to
    // RLIMIT_MEMLOCK. Drop the capability from this thread's effective set and lower the limit.
    const CAP_IPC_LOCK: u32 = 14;
    let caps = thread_caps(None);
    let mut less = caps;
    less[0] &= !(1 << CAP_IPC_LOCK); // effective, first word
    let mut old = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `old` is a valid rlimit to fill.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut old) }, 0);
    let low = libc::rlimit { rlim_cur: 1 << 20, rlim_max: old.rlim_max };
    let edu = Edu::open();
    let dma = edu.dma_mem(Pages::Small);
    thread_caps(Some(less));
    // SAFETY: a valid rlimit; lowering the soft limit needs no privilege.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &low) }, 0);
    let small = dma.alloc_with(256 << 10, 4096, Pages::Small);
    let big = dma.alloc_with(4 << 20, 4096, Pages::Small);
    // SAFETY: restoring the soft limit to what it was (not above the hard limit).
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &old) }, 0);
    thread_caps(Some(caps));
    let small = small.expect("256 KiB fits under a 1 MiB limit");
    let e = big.unwrap_err();
    assert_eq!(e.errno(), Some(libc::ENOMEM), "{e}");
    let text = e.to_string();
    assert!(text.starts_with("VFIO_IOMMU_MAP_DMA on /dev/vfio/vfio failed: errno 12"), "{text}");
    assert!(text.contains("locked-memory limit (ulimit -l)"), "{text}");
    eprintln!("error: {text}");
    assert_eq!(dma.live_blocks(), 1, "the failed block left nothing behind");
    round_trip(&edu, &small, 0, &small, 8192, 13);
    // SAFETY: the device is idle.
    unsafe { dma.free(small) };
}

#[test]
#[ignore = "needs two vfio-pci bound edu devices: cargo xtask test --tier vfio"]
fn m_two_devices_share_one_container() {
    let second: PciAddr = std::env::var("RDMA_PMD_VFIO_EDU2")
        .expect("RDMA_PMD_VFIO_EDU2 names a second edu alone in its IOMMU group")
        .parse()
        .expect("a PCI address");
    let container = Container::open().unwrap();
    let a = Edu::with(VfioDevice::open_in(edu_addr(), &container).unwrap());
    let b = Edu::with(VfioDevice::open_in(second, &container).unwrap());
    assert_ne!(a.dev.group().number(), b.dev.group().number());
    assert!(std::sync::Arc::ptr_eq(a.dev.container(), b.dev.container()));
    // One IOVA space: blocks for either device never overlap, and both devices reach both.
    let da = a.dma_mem(Pages::Small);
    let db = b.dma_mem(Pages::Huge);
    let x = da.alloc(2 * PAGE_4K, PAGE_4K).unwrap();
    let y = db.alloc(PAGE_2M, PAGE_2M).unwrap();
    let (xs, ys) = (x.bus().0, y.bus().0);
    assert!(xs + x.len() as u64 <= ys || ys + y.len() as u64 <= xs, "{xs:#x} and {ys:#x} overlap");
    // x → device A → y, then y → device B → x.
    let data = pattern(14, MAX_XFER);
    x.write_bytes(0, &data);
    y.fill(0xee);
    a.to_device(x.bus(), 0, MAX_XFER);
    a.to_ram(0, y.bus().add(4096), MAX_XFER);
    x.fill(0);
    b.to_device(y.bus().add(4096), 0, MAX_XFER);
    b.to_ram(0, x.bus().add(100), MAX_XFER);
    let mut back = vec![0u8; MAX_XFER];
    x.read_bytes(100, &mut back);
    assert!(back == data, "data did not make it through both devices");
    // SAFETY: both devices are idle.
    unsafe {
        da.free(x);
        db.free(y);
    }
}
