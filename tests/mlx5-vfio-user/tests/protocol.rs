//! The server driven through real vfio-user messages by an in-process client, over a socket
//! pair (and, in the last tests, the binary over a socket path). The client writes every
//! message by hand from the spec's layouts, so a server that misreads a field fails here.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdma_pmd_mlx5_vfio_user::device::{Device, Stats};
use rdma_pmd_mlx5_vfio_user::proto::{
    flags, irq_set, DmaMap, DmaUnmap, Header, IrqSet, RegionAccess, DMA_UNMAP_ALL,
};
use rdma_pmd_mlx5_vfio_user::server::{self, Fatal};
use rdma_pmd_mlx5_vfio_user::sock;

const VERSION: u16 = 1;
const DMA_MAP: u16 = 2;
const DMA_UNMAP: u16 = 3;
const GET_INFO: u16 = 4;
const REGION_INFO: u16 = 5;
const IRQ_INFO: u16 = 7;
const SET_IRQS: u16 = 8;
const READ: u16 = 9;
const WRITE: u16 = 10;
const DMA_READ: u16 = 11;
const RESET: u16 = 13;
const FEATURE: u16 = 16;

const PAGE: u64 = 4096;
/// Where the test maps its guest memory.
const RAM_BASE: u64 = 0x1_0000_0000;

/// What the server thread hands back when the client hangs up.
struct Ended {
    outcome: Result<(), Fatal>,
    stats: Stats,
    regions: usize,
    raised: u64,
    dropped: u64,
    violations: u64,
}

/// A client connected to a server thread.
struct Client {
    sock: UnixStream,
    id: u16,
    server: Option<JoinHandle<Ended>>,
}

/// A reply: header and payload.
struct Reply {
    header: Header,
    body: Vec<u8>,
}

impl Reply {
    /// The errno of an error reply, 0 for success.
    fn errno(&self) -> i32 {
        assert_eq!(self.header.flags & flags::TYPE_MASK, flags::TYPE_REPLY);
        if self.header.flags & flags::ERROR != 0 {
            assert_eq!(self.header.size, 16, "an error reply is the header alone");
            assert_ne!(self.header.error, 0, "an error reply names its errno");
            self.header.error as i32
        } else {
            0
        }
    }
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes(b[off..off + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_ne_bytes(b[off..off + 8].try_into().unwrap())
}

fn memfd(pages: u64) -> File {
    // SAFETY: a NUL-terminated name; the result is checked.
    let fd = unsafe { libc::memfd_create(c"guest".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: a fresh fd nothing else owns.
    let f = unsafe { File::from_raw_fd(fd) };
    f.set_len(pages * PAGE).unwrap();
    f
}

fn eventfd() -> OwnedFd {
    // SAFETY: plain syscall; checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    assert!(fd >= 0);
    // SAFETY: a fresh fd nothing else owns.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// The eventfd's counter (and reset it); 0 if nothing was written.
fn drain(fd: &OwnedFd) -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: reads 8 bytes into a local buffer.
    let n = unsafe { libc::read(fd.as_raw_fd(), b.as_mut_ptr().cast(), 8) };
    if n == 8 {
        u64::from_ne_bytes(b)
    } else {
        0
    }
}

impl Client {
    /// A fresh device with 64 UAR pages behind a socket pair; VERSION not yet sent.
    fn raw() -> Client {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let server = std::thread::spawn(move || {
            let mut dev = Device::new(64).unwrap();
            let outcome = server::serve(&theirs, &mut dev, false);
            Ended {
                outcome,
                stats: dev.stats,
                regions: dev.ram().regions(),
                raised: dev.msix().raised(),
                dropped: dev.msix().dropped(),
                violations: dev.violations(),
            }
        });
        Client::over(ours, Some(server))
    }

    fn over(sock: UnixStream, server: Option<JoinHandle<Ended>>) -> Client {
        sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Client { sock, id: 0, server }
    }

    /// A fresh device after a successful VERSION.
    fn new() -> Client {
        let mut c = Client::raw();
        let r =
            c.version(b"{\"capabilities\":{\"max_msg_fds\":16,\"max_data_xfer_size\":1048576}}");
        assert_eq!(r.errno(), 0);
        c
    }

    fn send(&mut self, command: u16, flags: u32, payload: &[u8], fds: &[RawFd]) -> u16 {
        self.id = self.id.wrapping_add(1);
        let h = Header { id: self.id, command, size: 16 + payload.len() as u32, flags, error: 0 };
        sock::send(&self.sock, &h, payload, fds).unwrap();
        self.id
    }

    fn recv(&mut self, id: u16, command: u16) -> Reply {
        let m = sock::recv(&self.sock).expect("a reply");
        assert_eq!((m.header.id, m.header.command), (id, command), "reply matches the command");
        assert!(m.fds.is_empty());
        Reply { header: m.header, body: m.body }
    }

    fn call_fds(&mut self, command: u16, payload: &[u8], fds: &[RawFd]) -> Reply {
        let id = self.send(command, flags::TYPE_COMMAND, payload, fds);
        self.recv(id, command)
    }

    fn call(&mut self, command: u16, payload: &[u8]) -> Reply {
        self.call_fds(command, payload, &[])
    }

    fn version(&mut self, json: &[u8]) -> Reply {
        let mut p = vec![0, 0, 1, 0]; // 0.1
        if !json.is_empty() {
            p.extend_from_slice(json);
            p.push(0);
        }
        self.call(VERSION, &p)
    }

    fn map(&mut self, f: Option<&File>, address: u64, size: u64, offset: u64, fl: u32) -> i32 {
        let m = DmaMap { flags: fl, offset, address, size };
        let fds: Vec<RawFd> = f.iter().map(|f| f.as_raw_fd()).collect();
        self.call_fds(DMA_MAP, &m.emit(), &fds).errno()
    }

    fn unmap(&mut self, address: u64, size: u64) -> i32 {
        let u = DmaUnmap { argsz: 24, flags: 0, address, size };
        let r = self.call(DMA_UNMAP, &u.emit());
        if r.errno() == 0 {
            assert_eq!(r.body, u.emit(), "the reply is the request");
        }
        r.errno()
    }

    fn read(&mut self, region: u32, offset: u64, count: u32) -> Result<Vec<u8>, i32> {
        let a = RegionAccess { offset, region, count, data: &[] };
        let r = self.call(READ, &a.emit());
        match r.errno() {
            0 => {
                assert_eq!(r.body.len(), 16 + count as usize);
                assert_eq!(&r.body[..16], &a.emit()[..]);
                Ok(r.body[16..].to_vec())
            }
            e => Err(e),
        }
    }

    fn write(&mut self, region: u32, offset: u64, data: &[u8]) -> i32 {
        let a = RegionAccess { offset, region, count: data.len() as u32, data };
        let r = self.call(WRITE, &a.emit());
        if r.errno() == 0 {
            assert_eq!(r.body, RegionAccess { data: &[], ..a }.emit());
        }
        r.errno()
    }

    /// A big-endian register of BAR0 (the model's byte order, as `ioread32be` sees it).
    fn bar_be32(&mut self, off: u64) -> u32 {
        u32::from_be_bytes(self.read(0, off, 4).unwrap().try_into().unwrap())
    }

    fn set_bar_be32(&mut self, off: u64, v: u32) {
        assert_eq!(self.write(0, off, &v.to_be_bytes()), 0);
    }

    fn irqs(&mut self, fl: u32, start: u32, count: u32, data: &[u8], fds: &[RawFd]) -> i32 {
        let s = IrqSet { flags: fl, index: 2, start, count, data };
        self.call_fds(SET_IRQS, &s.emit(), fds).errno()
    }

    /// Hang up and collect what the server counted.
    fn end(mut self) -> Ended {
        self.sock.shutdown(std::net::Shutdown::Both).unwrap();
        self.server.take().unwrap().join().unwrap()
    }
}

#[test]
fn version_device_info_and_regions() {
    let mut c = Client::raw();
    let r = c.version(
        b"{\"capabilities\":{\"max_msg_fds\":16,\"max_data_xfer_size\":1048576,\"pgsizes\":4096}}",
    );
    assert_eq!(r.errno(), 0);
    assert_eq!(&r.body[..4], &[0, 0, 1, 0], "major 0, minor 1");
    let json = std::str::from_utf8(&r.body[4..r.body.len() - 1]).unwrap();
    assert_eq!(r.body.last(), Some(&0), "NUL-terminated");
    assert_eq!(json, "{\"capabilities\":{\"max_msg_fds\":16,\"max_data_xfer_size\":1048576}}");

    let info = c.call(GET_INFO, &[16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(info.errno(), 0);
    assert_eq!(
        (
            u32_at(&info.body, 0),
            u32_at(&info.body, 4),
            u32_at(&info.body, 8),
            u32_at(&info.body, 12)
        ),
        (16, 0b11, 9, 5),
        "argsz, RESET|PCI, 9 regions, 5 IRQ indexes"
    );
    let region = |c: &mut Client, index: u32| {
        let mut p = vec![0u8; 32];
        p[0..4].copy_from_slice(&32u32.to_ne_bytes());
        p[8..12].copy_from_slice(&index.to_ne_bytes());
        let r = c.call(REGION_INFO, &p);
        (r.errno(), r.body)
    };
    for (index, size) in [(0u32, 64 * PAGE), (1, 0), (2, PAGE), (5, 0), (6, 0), (7, 256), (8, 0)] {
        let (e, b) = region(&mut c, index);
        assert_eq!(e, 0);
        assert_eq!(u32_at(&b, 8), index);
        assert_eq!(u64_at(&b, 16), size, "region {index}");
        assert_eq!(u32_at(&b, 4), if size > 0 { 0b11 } else { 0 }, "READ|WRITE, no MMAP");
    }
    assert_eq!(region(&mut c, 9).0, libc::EINVAL);

    let irq = |c: &mut Client, index: u32| {
        let mut p = vec![0u8; 16];
        p[0..4].copy_from_slice(&16u32.to_ne_bytes());
        p[8..12].copy_from_slice(&index.to_ne_bytes());
        let r = c.call(IRQ_INFO, &p);
        (r.errno(), r.body)
    };
    for index in [0u32, 1, 3, 4] {
        let (e, b) = irq(&mut c, index);
        assert_eq!((e, u32_at(&b, 12)), (0, 0), "IRQ index {index} has no vectors");
    }
    let (e, b) = irq(&mut c, 2);
    assert_eq!((e, u32_at(&b, 12)), (0, 8), "8 MSI-X vectors");
    assert_eq!(u32_at(&b, 4) & 1, 1, "signalled by eventfd");
    assert_eq!(irq(&mut c, 5).0, libc::EINVAL);
    assert!(c.end().outcome.is_ok());
}

#[test]
fn config_space_is_a_connectx5_pf_with_msix() {
    let mut c = Client::new();
    let cfg = c.read(7, 0, 256).unwrap();
    assert_eq!(u16::from_le_bytes([cfg[0], cfg[1]]), 0x15b3);
    assert_eq!(u16::from_le_bytes([cfg[2], cfg[3]]), 0x1017);
    assert_eq!(&cfg[9..12], &[0x00, 0x00, 0x02], "class 0x020000");
    assert_eq!(cfg[0x10] & 0xf, 0b1100, "BAR0: memory, 64-bit, prefetchable");
    assert_eq!(cfg[0x06] & 0x10, 0x10, "capability list");
    assert_eq!(cfg[0x3d], 0, "no INTx pin");
    let cap = cfg[0x34] as usize;
    assert_eq!(cfg[cap], 0x11, "MSI-X");
    assert_eq!(cfg[cap + 1], 0, "the only capability");
    assert_eq!(u16::from_le_bytes([cfg[cap + 2], cfg[cap + 3]]) & 0x7ff, 7, "8 vectors");
    assert_eq!(u32::from_le_bytes(cfg[cap + 4..cap + 8].try_into().unwrap()), 2, "table: BAR2 + 0");
    assert_eq!(
        u32::from_le_bytes(cfg[cap + 8..cap + 12].try_into().unwrap()),
        0x802,
        "PBA: BAR2 + 0x800"
    );
    // BAR sizing through the socket; the command register keeps its writable bits.
    assert_eq!(c.write(7, 0x10, &[0xff; 4]), 0);
    assert_eq!(c.read(7, 0x10, 4).unwrap(), 0xfffc_000cu32.to_le_bytes());
    assert_eq!(c.write(7, 0x04, &0x0006u16.to_le_bytes()), 0);
    assert_eq!(c.read(7, 0x04, 2).unwrap(), 0x0006u16.to_le_bytes());
    assert_eq!(c.write(7, 0x00, &[0, 0]), 0);
    assert_eq!(c.read(7, 0, 2).unwrap(), 0x15b3u16.to_le_bytes(), "IDs are read-only");
    assert_eq!(c.read(7, 250, 8), Err(libc::EINVAL));
    c.end();
}

#[test]
fn bar0_serves_the_initialization_segment() {
    let mut c = Client::new();
    let fw_rev = c.bar_be32(0x00);
    assert_ne!(fw_rev, 0, "fw_rev: minor << 16 | major");
    assert_eq!(c.bar_be32(0x04) >> 16, 5, "cmdif_rev 5 in the top half of 0x04");
    // Narrow reads take the addressed bytes of the big-endian register.
    assert_eq!(c.read(0, 0x04, 1).unwrap(), [0]);
    assert_eq!(c.read(0, 0x05, 1).unwrap(), [5]);
    assert_eq!(c.read(0, 0x04, 2).unwrap(), [0, 5]);
    assert_eq!(c.bar_be32(0x1fc) >> 31, 0, "initializing is clear");
    // An 8-byte read covers fw_rev and cmdif_rev.
    let q = c.read(0, 0x00, 8).unwrap();
    assert_eq!(u32::from_be_bytes(q[0..4].try_into().unwrap()), fw_rev);
    // Stores narrower than a register, misaligned or past the BAR are refused.
    assert_eq!(c.write(0, 0x18, &[1]), libc::EINVAL);
    assert_eq!(c.write(0, 0x18, &[1, 0]), libc::EINVAL);
    assert_eq!(c.read(0, 0x02, 4), Err(libc::EINVAL));
    assert_eq!(c.read(0, 64 * PAGE - 4, 8), Err(libc::EINVAL));
    assert_eq!(c.read(0, 0, 16), Err(libc::EINVAL));
    c.end();
}

#[test]
fn a_blueflame_copy_split_into_8_byte_stores_rings_once_and_breaks_nothing() {
    // QEMU traps the guest's 64-byte write-combined BlueFlame copy and delivers it as eight
    // 8-byte stores. The first (the control segment's head, at the register's base) is the
    // doorbell; the other seven are the rest of the copy and must not reach the model as stores
    // of their own. UAR page 1 is not allocated here, so a store the model handles is a
    // contract break it counts: exactly one (the doorbell) may appear.
    let mut c = Client::new();
    let page1 = PAGE;
    for half in [0x800u64, 0x900] {
        for word in 1..8u64 {
            assert_eq!(c.write(0, page1 + half + word * 8, &word.to_ne_bytes()), 0);
        }
        for block in 1..4u64 {
            assert_eq!(c.write(0, page1 + half + block * 64, &[0; 8]), 0);
        }
    }
    assert_eq!(c.read(0, page1 + 0x818, 8).unwrap(), 3u64.to_ne_bytes(), "the copy is kept");
    let end = c.end();
    assert_eq!(end.violations, 0, "the tail of a copy is no store of its own");
    let mut c = Client::new();
    assert_eq!(c.write(0, page1 + 0x800, &[0; 8]), 0);
    assert_eq!(c.end().violations, 1, "the head is the doorbell: the model sees it");
}

/// `struct mlx5_cmd_layout` (the kernel's `include/linux/mlx5/device.h`): offsets used here.
mod cmd {
    pub const TYPE: usize = 0x00;
    pub const INLEN: usize = 0x04;
    pub const IN: usize = 0x10;
    pub const OUT: usize = 0x20;
    pub const OUTLEN: usize = 0x38;
    pub const TOKEN: usize = 0x3c;
    pub const STATUS_OWN: usize = 0x3f;
    /// `MLX5_PCI_CMD_XPORT`.
    pub const PCI: u8 = 7;
    /// `MLX5_CMD_OP_ENABLE_HCA`.
    pub const ENABLE_HCA: u16 = 0x104;
}

/// Point the firmware's command queue at `RAM_BASE` and run ENABLE_HCA from slot 0 of it: the
/// firmware reads the entry from guest memory and writes the output back. Returns the output
/// status byte.
fn enable_hca(c: &mut Client, ram: &File) -> u8 {
    c.set_bar_be32(0x10, (RAM_BASE >> 32) as u32);
    c.set_bar_be32(0x14, RAM_BASE as u32);
    let mut e = [0u8; 64];
    e[cmd::TYPE] = cmd::PCI;
    e[cmd::INLEN..cmd::INLEN + 4].copy_from_slice(&16u32.to_be_bytes());
    e[cmd::IN..cmd::IN + 2].copy_from_slice(&cmd::ENABLE_HCA.to_be_bytes());
    e[cmd::OUTLEN..cmd::OUTLEN + 4].copy_from_slice(&16u32.to_be_bytes());
    e[cmd::TOKEN] = 0x5a;
    ram.write_at(&e, 0).unwrap();
    ram.write_at(&[1], cmd::STATUS_OWN as u64).unwrap();
    c.set_bar_be32(0x18, 1);
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let mut own = [0u8; 1];
        ram.read_exact_at(&mut own, cmd::STATUS_OWN as u64).unwrap();
        if own[0] & 1 == 0 {
            assert_eq!(own[0] >> 1, 0, "delivered");
            let mut out = [0u8; 1];
            ram.read_exact_at(&mut out, cmd::OUT as u64).unwrap();
            return out[0];
        }
        assert!(Instant::now() < end, "the firmware hands the slot back");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_command_runs_from_guest_memory_mapped_by_dma_map() {
    let mut c = Client::new();
    let ram = memfd(256);
    assert_eq!(c.map(Some(&ram), RAM_BASE, 256 * PAGE, 0, 3), 0);
    assert_eq!(enable_hca(&mut c, &ram), 0, "ENABLE_HCA succeeded");
    assert_eq!(c.unmap(RAM_BASE, 256 * PAGE), 0);
    let end = c.end();
    assert!(end.outcome.is_ok());
    assert_eq!((end.stats.dma_maps, end.stats.dma_unmaps, end.regions), (1, 1, 0));
}

#[test]
fn dma_maps_and_unmaps_with_their_errnos() {
    let mut c = Client::new();
    let ram = memfd(16);
    assert_eq!(c.map(Some(&ram), RAM_BASE, 8 * PAGE, 0, 3), 0);
    assert_eq!(c.map(Some(&ram), RAM_BASE + 4 * PAGE, 8 * PAGE, 0, 3), libc::EEXIST);
    // ROM comes without an fd: recorded, and it still conflicts with what overlaps it.
    assert_eq!(c.map(None, 0xc0000, 0x20000, 0, 1), 0);
    assert_eq!(c.map(Some(&ram), 0xd0000, PAGE, 0, 3), libc::EEXIST);
    assert_eq!(c.map(Some(&ram), 0x1000_0000, PAGE, 5, 3), libc::EINVAL, "offset not page-aligned");
    assert_eq!(c.map(Some(&ram), u64::MAX - PAGE + 1, 2 * PAGE, 0, 3), libc::EFAULT);
    assert_eq!(c.map(Some(&ram), 0x1000_0000, 0, 0, 3), libc::EINVAL);
    assert_eq!(c.map(Some(&ram), 0x1000_0000, PAGE, 0, 0x10), libc::EINVAL, "unknown flag");
    let short = &DmaMap { flags: 3, offset: 0, address: 0, size: PAGE }.emit()[..24];
    assert_eq!(c.call_fds(DMA_MAP, short, &[ram.as_raw_fd()]).errno(), libc::EINVAL);
    let two = [ram.as_raw_fd(), ram.as_raw_fd()];
    let m = DmaMap { flags: 3, offset: 0, address: 0x2000_0000, size: PAGE };
    assert_eq!(c.call_fds(DMA_MAP, &m.emit(), &two).errno(), libc::EINVAL);
    assert_eq!(c.unmap(RAM_BASE, 4 * PAGE), libc::ENOENT, "not the mapped size");
    assert_eq!(c.unmap(0x9000_0000, PAGE), libc::ENOENT);
    assert_eq!(c.unmap(0xc0000, 0x20000), 0);
    assert_eq!(c.unmap(RAM_BASE, 8 * PAGE), 0);
    assert_eq!(c.unmap(RAM_BASE, 8 * PAGE), libc::ENOENT, "twice");
    let dirty = DmaUnmap { argsz: 24, flags: 1, address: RAM_BASE, size: PAGE };
    assert_eq!(c.call(DMA_UNMAP, &dirty.emit()).errno(), libc::EINVAL, "no dirty bitmaps");
    assert_eq!(c.map(Some(&ram), RAM_BASE, 8 * PAGE, 0, 3), 0);
    assert_eq!(c.map(None, 0xc0000, PAGE, 0, 1), 0);
    let all = DmaUnmap { argsz: 24, flags: DMA_UNMAP_ALL, address: 0, size: 0 };
    assert_eq!(c.call(DMA_UNMAP, &all.emit()).errno(), 0);
    assert_eq!(c.map(None, 0xc0000, PAGE, 0, 1), 0, "the ROM record went with UNMAP_ALL");
    let end = c.end();
    assert_eq!((end.stats.dma_maps, end.stats.dma_unmaps, end.regions), (5, 3, 0));
    assert_eq!(end.stats.dma_maps_unmappable, 3);
}

#[test]
fn msix_vectors_fire_their_eventfds() {
    let mut c = Client::new();
    let (e0, e1) = (eventfd(), eventfd());
    let trig = irq_set::DATA_EVENTFD | irq_set::ACTION_TRIGGER;
    assert_eq!(c.irqs(trig, 0, 2, &[], &[e0.as_raw_fd(), e1.as_raw_fd()]), 0);
    // The client triggers vector 1, then vector 0 through a bool array.
    assert_eq!(c.irqs(irq_set::DATA_NONE | irq_set::ACTION_TRIGGER, 1, 1, &[], &[]), 0);
    assert_eq!((drain(&e0), drain(&e1)), (0, 1));
    assert_eq!(c.irqs(irq_set::DATA_BOOL | irq_set::ACTION_TRIGGER, 0, 2, &[1, 0], &[]), 0);
    assert_eq!((drain(&e0), drain(&e1)), (1, 0));
    // Masked: held, then delivered once on unmask.
    assert_eq!(c.irqs(irq_set::DATA_NONE | irq_set::ACTION_MASK, 0, 1, &[], &[]), 0);
    assert_eq!(c.irqs(irq_set::DATA_NONE | irq_set::ACTION_TRIGGER, 0, 1, &[], &[]), 0);
    assert_eq!(drain(&e0), 0);
    assert_eq!(c.irqs(irq_set::DATA_NONE | irq_set::ACTION_UNMASK, 0, 1, &[], &[]), 0);
    assert_eq!(drain(&e0), 1);
    // A vector without an eventfd drops its interrupt.
    assert_eq!(c.irqs(irq_set::DATA_NONE | irq_set::ACTION_TRIGGER, 5, 1, &[], &[]), 0);
    // Eventfds de-assigned by a message without fds, then all of them by count 0.
    assert_eq!(c.irqs(trig, 1, 1, &[], &[]), 0);
    assert_eq!(c.irqs(irq_set::DATA_NONE | irq_set::ACTION_TRIGGER, 1, 1, &[], &[]), 0);
    assert_eq!(drain(&e1), 0);
    assert_eq!(c.irqs(irq_set::DATA_NONE | irq_set::ACTION_TRIGGER, 0, 0, &[], &[]), 0);
    assert_eq!(c.irqs(irq_set::DATA_NONE | irq_set::ACTION_TRIGGER, 0, 1, &[], &[]), 0);
    assert_eq!(drain(&e0), 0);
    // Malformed: past the vectors, a count/fds mismatch, two data flags, other indexes.
    assert_eq!(c.irqs(irq_set::DATA_NONE | irq_set::ACTION_TRIGGER, 7, 2, &[], &[]), libc::EINVAL);
    assert_eq!(c.irqs(trig, 0, 2, &[], &[e0.as_raw_fd()]), libc::EINVAL);
    assert_eq!(c.irqs(irq_set::DATA_NONE | irq_set::DATA_BOOL | 32, 0, 1, &[1], &[]), libc::EINVAL);
    let intx = IrqSet { flags: trig, index: 0, start: 0, count: 1, data: &[] };
    assert_eq!(c.call_fds(SET_IRQS, &intx.emit(), &[e0.as_raw_fd()]).errno(), libc::EINVAL);
    let end = c.end();
    assert_eq!((end.raised, end.dropped), (3, 3));
}

#[test]
fn malformed_messages_get_errnos_and_the_connection_survives() {
    let mut c = Client::raw();
    assert_eq!(c.call(GET_INFO, &[0; 16]).errno(), libc::EINVAL, "before VERSION");
    assert_eq!(c.version(b"[1, 2]").errno(), libc::EINVAL, "not a JSON object");
    let mut p = vec![0, 0, 1, 0];
    p.extend_from_slice(b"{}"); // no NUL
    assert_eq!(c.call(VERSION, &p).errno(), libc::EINVAL);
    assert_eq!(c.call(VERSION, &[1, 0, 0, 0]).errno(), libc::ENOTSUP, "major 1");
    assert_eq!(c.version(b"{}").errno(), 0);
    assert_eq!(c.version(b"{}").errno(), libc::EINVAL, "VERSION twice");
    assert_eq!(c.call(99, &[]).errno(), libc::ENOSYS, "unknown command");
    assert_eq!(c.call(FEATURE, &[0; 16]).errno(), libc::ENOTTY);
    assert_eq!(c.call(DMA_READ, &[0; 16]).errno(), libc::EINVAL, "a server-to-client command");
    assert_eq!(c.call(GET_INFO, &[16, 0, 0, 0]).errno(), libc::EINVAL, "short");
    assert_eq!(c.call(READ, &[0; 15]).errno(), libc::EINVAL);
    assert_eq!(c.read(0, 0, 0), Err(libc::EINVAL), "count 0");
    assert_eq!(c.read(3, 0, 4), Err(libc::EINVAL), "no BAR3");
    assert_eq!(c.read(0, 0, 2 << 20), Err(libc::EINVAL), "over max_data_xfer_size");
    let w = RegionAccess { offset: 0, region: 7, count: 8, data: &[0; 4] };
    assert_eq!(c.call(WRITE, &w.emit()).errno(), libc::EINVAL, "count/data mismatch");
    assert_eq!(c.call(RESET, &[0]).errno(), libc::EINVAL, "reset takes no payload");
    // fds on a command that takes none are refused (and closed).
    let e = eventfd();
    let a = RegionAccess { offset: 0, region: 7, count: 4, data: &[] };
    assert_eq!(c.call_fds(READ, &a.emit(), &[e.as_raw_fd()]).errno(), libc::EINVAL);
    // A reply sent as a command, and unknown header flags.
    let id = c.send(
        GET_INFO,
        flags::TYPE_REPLY,
        &[16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        &[],
    );
    assert_eq!(c.recv(id, GET_INFO).errno(), libc::EINVAL);
    let id = c.send(GET_INFO, 1 << 9, &[16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[]);
    assert_eq!(c.recv(id, GET_INFO).errno(), libc::EINVAL);
    // Still serving.
    let mut info = [0u8; 16];
    info[0] = 16;
    assert_eq!(c.call(GET_INFO, &info).errno(), 0);
    let end = c.end();
    assert!(end.outcome.is_ok());
    assert_eq!(end.stats.errors, 18, "every malformed message above");
}

#[test]
fn posted_writes_take_effect_without_a_reply() {
    let mut c = Client::new();
    let w = RegionAccess { offset: 0x0c, region: 7, count: 1, data: &[0x10] };
    c.send(WRITE, flags::NO_REPLY, &w.emit(), &[]);
    // A failing posted write gets no reply either; it is counted.
    let bad = RegionAccess { offset: 0x18, region: 0, count: 1, data: &[1] };
    c.send(WRITE, flags::NO_REPLY, &bad.emit(), &[]);
    // The next reply is the read's: nothing came back for the posted writes.
    assert_eq!(c.read(7, 0x0c, 1).unwrap(), [0x10]);
    let end = c.end();
    assert_eq!((end.stats.errors, end.stats.unreplied_errors), (1, 1));
}

#[test]
fn reset_restores_power_on_state_and_keeps_dma_mappings() {
    let mut c = Client::new();
    let ram = memfd(256);
    assert_eq!(c.map(Some(&ram), RAM_BASE, 256 * PAGE, 0, 3), 0);
    let e = eventfd();
    let trig = irq_set::DATA_EVENTFD | irq_set::ACTION_TRIGGER;
    assert_eq!(c.irqs(trig, 0, 1, &[], &[e.as_raw_fd()]), 0);
    assert_eq!(enable_hca(&mut c, &ram), 0);
    assert_eq!(c.write(7, 0x04, &0x0006u16.to_le_bytes()), 0);
    assert_eq!(c.call(RESET, &[]).errno(), 0);
    assert_eq!(c.read(7, 0x04, 2).unwrap(), [0, 0], "command register at power-on");
    assert_eq!(c.bar_be32(0x10), 0, "the command queue address is gone with the old firmware");
    // The new firmware runs a command through the mapping made before the reset.
    ram.write_at(&[0u8; 64], 0).unwrap();
    assert_eq!(enable_hca(&mut c, &ram), 0);
    // The eventfd survived too.
    assert_eq!(c.irqs(irq_set::DATA_NONE | irq_set::ACTION_TRIGGER, 0, 1, &[], &[]), 0);
    assert_eq!(drain(&e), 1);
    let end = c.end();
    assert_eq!((end.stats.resets, end.regions), (1, 1));
}

#[test]
fn a_broken_frame_ends_the_connection_with_an_error() {
    let c = Client::new();
    let h = Header { id: 9, command: GET_INFO, size: 8, flags: 0, error: 0 };
    sock::send(&c.sock, &h, &[], &[]).unwrap();
    let end = c.end();
    assert!(matches!(end.outcome, Err(Fatal::Recv(sock::RecvError::BadSize(8)))));
    let c = Client::new();
    let h = Header { id: 9, command: GET_INFO, size: 32, flags: 0, error: 0 };
    sock::send(&c.sock, &h, &[0; 4], &[]).unwrap();
    let end = c.end();
    assert!(matches!(end.outcome, Err(Fatal::Recv(sock::RecvError::Truncated { got: 20 }))));
}

/// Run the binary on a socket path; a client connected to it; its child handle.
fn spawn_binary(dir: &std::path::Path) -> (std::process::Child, Client) {
    use std::io::{BufRead, BufReader};
    let path = dir.join("mlx5.sock");
    // A stale socket file from an earlier run is replaced.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_mlx5-vfio-user"))
        .args(["--socket", path.to_str().unwrap(), "--uar-pages", "32"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert_eq!(line.trim_end(), format!("mlx5-vfio-user: listening on {}", path.display()));
    // Keep stderr drained so the child never blocks on it.
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    let sock = UnixStream::connect(&path).unwrap();
    (child, Client::over(sock, None))
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("mlx5-vfio-user-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn the_binary_serves_one_client_and_prints_its_summary() {
    let dir = temp_dir("ok");
    let (child, mut c) = spawn_binary(&dir);
    assert_eq!(c.version(b"{}").errno(), 0);
    let mut p = vec![0u8; 32];
    p[0] = 32;
    assert_eq!(u64_at(&c.call(REGION_INFO, &p).body, 16), 32 * PAGE, "--uar-pages 32");
    let ram = memfd(4);
    assert_eq!(c.map(Some(&ram), RAM_BASE, 4 * PAGE, 0, 3), 0);
    assert_eq!(c.map(None, 0xc0000, PAGE, 0, 1), 0);
    assert_eq!(c.unmap(RAM_BASE, 4 * PAGE), 0);
    drop(c);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "mlx5-vfio-user: violations 0\n\
         mlx5-vfio-user: msix raised 0 dropped 0\n\
         mlx5-vfio-user: dma maps 2 unmaps 1\n\
         mlx5-vfio-user: fw pages given 0 returned 0\n\
         mlx5-vfio-user: summary end\n"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_binary_exits_non_zero_on_a_protocol_failure_after_its_summary() {
    let dir = temp_dir("fail");
    let (child, c) = spawn_binary(&dir);
    let h = Header { id: 1, command: VERSION, size: 2, flags: 0, error: 0 };
    sock::send(&c.sock, &h, &[], &[]).unwrap();
    drop(c);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8(out.stdout).unwrap().ends_with("mlx5-vfio-user: summary end\n"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_binary_gives_up_when_no_client_comes() {
    let dir = temp_dir("lonely");
    let path = dir.join("mlx5.sock");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mlx5-vfio-user"))
        .args(["--socket", path.to_str().unwrap(), "--accept-timeout", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8(out.stderr).unwrap().contains("no client within 1 s"));
    assert!(!path.exists(), "the socket file is removed");
    let _ = std::fs::remove_dir_all(dir);
}
