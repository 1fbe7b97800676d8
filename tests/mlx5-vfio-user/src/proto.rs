//! vfio-user messages: the header, the command numbers and the payloads this server reads and
//! writes.
//!
//! Source: QEMU `docs/interop/vfio-user.rst` ("Header", "Commands" and one section per
//! command); the structures it borrows (`vfio_region_info`, `vfio_irq_info`, `vfio_irq_set`)
//! and their flag bits are the VFIO uapi's (`include/uapi/linux/vfio.h`). All fields are in the
//! host's byte order.

use std::fmt;

/// Bytes of the header that starts every message.
pub const HDR_LEN: usize = 16;
/// The largest `count` of a REGION_READ/WRITE this server accepts (the spec's default
/// `max_data_xfer_size`, which it also announces).
pub const MAX_DATA_XFER: u32 = 1 << 20;
/// The largest message this server reads: a header, a region access header and a full data
/// transfer. Anything larger is a framing failure (the connection cannot be resynchronized).
pub const MAX_MSG: u32 = (HDR_LEN + 16) as u32 + MAX_DATA_XFER;
/// File descriptors one message may carry (announced as `max_msg_fds`).
pub const MAX_MSG_FDS: usize = 16;

/// The protocol version this server speaks: 0.1 (the spec's only published version).
pub const VERSION_MAJOR: u16 = 0;
/// See [`VERSION_MAJOR`].
pub const VERSION_MINOR: u16 = 1;

/// Header flags (offset 8): bits 0-3 the type, bit 4 no-reply, bit 5 error.
pub mod flags {
    /// Mask of the type bits.
    pub const TYPE_MASK: u32 = 0xf;
    /// A command.
    pub const TYPE_COMMAND: u32 = 0;
    /// A reply.
    pub const TYPE_REPLY: u32 = 1;
    /// The sender wants no reply (QEMU's posted region writes).
    pub const NO_REPLY: u32 = 1 << 4;
    /// The reply reports an error; the header's error field holds the errno.
    pub const ERROR: u32 = 1 << 5;
}

/// A command number (the spec's "Commands" table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// `VFIO_USER_VERSION` (1).
    Version,
    /// `VFIO_USER_DMA_MAP` (2).
    DmaMap,
    /// `VFIO_USER_DMA_UNMAP` (3).
    DmaUnmap,
    /// `VFIO_USER_DEVICE_GET_INFO` (4).
    DeviceGetInfo,
    /// `VFIO_USER_DEVICE_GET_REGION_INFO` (5).
    GetRegionInfo,
    /// `VFIO_USER_DEVICE_GET_REGION_IO_FDS` (6).
    GetRegionIoFds,
    /// `VFIO_USER_DEVICE_GET_IRQ_INFO` (7).
    GetIrqInfo,
    /// `VFIO_USER_DEVICE_SET_IRQS` (8).
    SetIrqs,
    /// `VFIO_USER_REGION_READ` (9).
    RegionRead,
    /// `VFIO_USER_REGION_WRITE` (10).
    RegionWrite,
    /// `VFIO_USER_DMA_READ` (11, server to client).
    DmaRead,
    /// `VFIO_USER_DMA_WRITE` (12, server to client).
    DmaWrite,
    /// `VFIO_USER_DEVICE_RESET` (13).
    DeviceReset,
    /// `VFIO_USER_REGION_WRITE_MULTI` (15; only sent if the server announced `write_multiple`).
    RegionWriteMulti,
    /// `VFIO_USER_DEVICE_FEATURE` (16).
    DeviceFeature,
    /// `VFIO_USER_MIG_DATA_READ` (17).
    MigDataRead,
    /// `VFIO_USER_MIG_DATA_WRITE` (18).
    MigDataWrite,
    /// Anything else.
    Unknown(u16),
}

impl From<u16> for Command {
    fn from(v: u16) -> Self {
        match v {
            1 => Command::Version,
            2 => Command::DmaMap,
            3 => Command::DmaUnmap,
            4 => Command::DeviceGetInfo,
            5 => Command::GetRegionInfo,
            6 => Command::GetRegionIoFds,
            7 => Command::GetIrqInfo,
            8 => Command::SetIrqs,
            9 => Command::RegionRead,
            10 => Command::RegionWrite,
            11 => Command::DmaRead,
            12 => Command::DmaWrite,
            13 => Command::DeviceReset,
            15 => Command::RegionWriteMulti,
            16 => Command::DeviceFeature,
            17 => Command::MigDataRead,
            18 => Command::MigDataWrite,
            other => Command::Unknown(other),
        }
    }
}

impl From<Command> for u16 {
    fn from(c: Command) -> u16 {
        match c {
            Command::Version => 1,
            Command::DmaMap => 2,
            Command::DmaUnmap => 3,
            Command::DeviceGetInfo => 4,
            Command::GetRegionInfo => 5,
            Command::GetRegionIoFds => 6,
            Command::GetIrqInfo => 7,
            Command::SetIrqs => 8,
            Command::RegionRead => 9,
            Command::RegionWrite => 10,
            Command::DmaRead => 11,
            Command::DmaWrite => 12,
            Command::DeviceReset => 13,
            Command::RegionWriteMulti => 15,
            Command::DeviceFeature => 16,
            Command::MigDataRead => 17,
            Command::MigDataWrite => 18,
            Command::Unknown(v) => v,
        }
    }
}

/// A UNIX errno as a reply carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    /// Malformed or out-of-range request.
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    /// Unknown command.
    pub const ENOSYS: Errno = Errno(libc::ENOSYS);
    /// Known command this device does not implement.
    pub const ENOTSUP: Errno = Errno(libc::ENOTSUP);
    /// Device feature not offered (what Linux's vfio-pci answers for one).
    pub const ENOTTY: Errno = Errno(libc::ENOTTY);
    /// A DMA range that cannot be mapped or is not mapped.
    pub const EFAULT: Errno = Errno(libc::EFAULT);
    /// A DMA map over an existing one (the spec names this errno).
    pub const EEXIST: Errno = Errno(libc::EEXIST);
    /// Unmap of a range that was never mapped.
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    /// The device itself failed.
    pub const EIO: Errno = Errno(libc::EIO);
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

/// The 16-byte header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Message ID, echoed in the reply.
    pub id: u16,
    /// Command number.
    pub command: u16,
    /// Size of the whole message, header included.
    pub size: u32,
    /// [`flags`].
    pub flags: u32,
    /// Errno of an error reply; reserved in commands.
    pub error: u32,
}

impl Header {
    /// Parse the first 16 bytes.
    pub fn parse(b: &[u8; HDR_LEN]) -> Header {
        let f = Fields(b);
        Header {
            id: f.u16(0).unwrap_or(0),
            command: f.u16(2).unwrap_or(0),
            size: f.u32(4).unwrap_or(0),
            flags: f.u32(8).unwrap_or(0),
            error: f.u32(12).unwrap_or(0),
        }
    }

    /// The 16 bytes.
    pub fn emit(&self) -> [u8; HDR_LEN] {
        let mut b = [0u8; HDR_LEN];
        b[0..2].copy_from_slice(&self.id.to_ne_bytes());
        b[2..4].copy_from_slice(&self.command.to_ne_bytes());
        b[4..8].copy_from_slice(&self.size.to_ne_bytes());
        b[8..12].copy_from_slice(&self.flags.to_ne_bytes());
        b[12..16].copy_from_slice(&self.error.to_ne_bytes());
        b
    }

    /// The reply to this command: success with `payload_len` bytes of payload, or an error
    /// (header only, as the spec requires).
    pub fn reply(&self, result: Result<usize, Errno>) -> Header {
        let (size, flags, error) = match result {
            Ok(n) => (HDR_LEN + n, flags::TYPE_REPLY, 0),
            Err(e) => (HDR_LEN, flags::TYPE_REPLY | flags::ERROR, e.0 as u32),
        };
        Header { id: self.id, command: self.command, size: size as u32, flags, error }
    }
}

/// Bounds-checked native-endian reads from a payload.
#[derive(Clone, Copy)]
pub struct Fields<'a>(pub &'a [u8]);

impl Fields<'_> {
    /// The u16 at `off`, if the payload holds it.
    pub fn u16(&self, off: usize) -> Option<u16> {
        Some(u16::from_ne_bytes(self.0.get(off..off + 2)?.try_into().ok()?))
    }
    /// The u32 at `off`, if the payload holds it.
    pub fn u32(&self, off: usize) -> Option<u32> {
        Some(u32::from_ne_bytes(self.0.get(off..off + 4)?.try_into().ok()?))
    }
    /// The u64 at `off`, if the payload holds it.
    pub fn u64(&self, off: usize) -> Option<u64> {
        Some(u64::from_ne_bytes(self.0.get(off..off + 8)?.try_into().ok()?))
    }
}

/// Append native-endian fields to a reply payload.
pub trait Put {
    /// Append a u32.
    fn put_u32(&mut self, v: u32);
    /// Append a u64.
    fn put_u64(&mut self, v: u64);
}

impl Put for Vec<u8> {
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_ne_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_ne_bytes());
    }
}

/// `VFIO_USER_DMA_MAP` request (32 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaMap {
    /// Bit 0 readable, bit 1 writeable.
    pub flags: u32,
    /// File offset of the region in the fd (0 without an fd).
    pub offset: u64,
    /// DMA (bus) address.
    pub address: u64,
    /// Size in bytes.
    pub size: u64,
}

/// DMA map flag: the device may read.
pub const DMA_MAP_READ: u32 = 1 << 0;
/// DMA map flag: the device may write.
pub const DMA_MAP_WRITE: u32 = 1 << 1;

impl DmaMap {
    /// Bytes of the structure.
    pub const LEN: usize = 32;

    /// Parse a request payload: exactly the structure, `argsz` equal to its size, no unknown
    /// flag.
    pub fn parse(p: &[u8]) -> Result<DmaMap, Errno> {
        let f = Fields(p);
        if p.len() != Self::LEN || f.u32(0) != Some(Self::LEN as u32) {
            return Err(Errno::EINVAL);
        }
        let m = DmaMap {
            flags: f.u32(4).ok_or(Errno::EINVAL)?,
            offset: f.u64(8).ok_or(Errno::EINVAL)?,
            address: f.u64(16).ok_or(Errno::EINVAL)?,
            size: f.u64(24).ok_or(Errno::EINVAL)?,
        };
        if m.flags & !(DMA_MAP_READ | DMA_MAP_WRITE) != 0 {
            return Err(Errno::EINVAL);
        }
        Ok(m)
    }

    /// The payload bytes (for clients).
    pub fn emit(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::LEN);
        v.put_u32(Self::LEN as u32);
        v.put_u32(self.flags);
        v.put_u64(self.offset);
        v.put_u64(self.address);
        v.put_u64(self.size);
        v
    }
}

/// `VFIO_USER_DMA_UNMAP` request and reply (24 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaUnmap {
    /// The largest reply the client takes.
    pub argsz: u32,
    /// [`DMA_UNMAP_ALL`]; bit 0 (dirty bitmap) is refused.
    pub flags: u32,
    /// DMA address of the mapping.
    pub address: u64,
    /// Its size.
    pub size: u64,
}

/// `VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP`: not offered (no dirty tracking).
pub const DMA_UNMAP_DIRTY_BITMAP: u32 = 1 << 0;
/// `VFIO_DMA_UNMAP_FLAG_ALL`: unmap everything (address and size 0).
pub const DMA_UNMAP_ALL: u32 = 1 << 1;

impl DmaUnmap {
    /// Bytes of the structure.
    pub const LEN: usize = 24;

    /// Parse a request payload.
    pub fn parse(p: &[u8]) -> Result<DmaUnmap, Errno> {
        let f = Fields(p);
        if p.len() != Self::LEN {
            return Err(Errno::EINVAL);
        }
        let u = DmaUnmap {
            argsz: f.u32(0).ok_or(Errno::EINVAL)?,
            flags: f.u32(4).ok_or(Errno::EINVAL)?,
            address: f.u64(8).ok_or(Errno::EINVAL)?,
            size: f.u64(16).ok_or(Errno::EINVAL)?,
        };
        if (u.argsz as usize) < Self::LEN || u.flags & !DMA_UNMAP_ALL != 0 {
            return Err(Errno::EINVAL);
        }
        if u.flags & DMA_UNMAP_ALL != 0 && (u.address != 0 || u.size != 0) {
            return Err(Errno::EINVAL);
        }
        Ok(u)
    }

    /// The payload bytes.
    pub fn emit(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::LEN);
        v.put_u32(self.argsz);
        v.put_u32(self.flags);
        v.put_u64(self.address);
        v.put_u64(self.size);
        v
    }
}

/// `vfio_irq_set` flags (`VFIO_IRQ_SET_*`).
pub mod irq_set {
    /// No data: act on every vector of the range.
    pub const DATA_NONE: u32 = 1 << 0;
    /// One bool byte per vector.
    pub const DATA_BOOL: u32 = 1 << 1;
    /// Eventfds in the message's ancillary data.
    pub const DATA_EVENTFD: u32 = 1 << 2;
    /// Mask.
    pub const ACTION_MASK: u32 = 1 << 3;
    /// Unmask.
    pub const ACTION_UNMASK: u32 = 1 << 4;
    /// Trigger.
    pub const ACTION_TRIGGER: u32 = 1 << 5;
    /// The data bits.
    pub const DATA_MASK: u32 = DATA_NONE | DATA_BOOL | DATA_EVENTFD;
    /// The action bits.
    pub const ACTION_MASK_BITS: u32 = ACTION_MASK | ACTION_UNMASK | ACTION_TRIGGER;
}

/// `VFIO_USER_DEVICE_SET_IRQS` request: `vfio_irq_set` (20 bytes) and its data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IrqSet<'a> {
    /// [`irq_set`] flags: exactly one data and one action bit.
    pub flags: u32,
    /// IRQ index (`VFIO_PCI_*_IRQ_INDEX`).
    pub index: u32,
    /// First vector.
    pub start: u32,
    /// Vectors.
    pub count: u32,
    /// `DATA_BOOL`: one byte per vector.
    pub data: &'a [u8],
}

impl<'a> IrqSet<'a> {
    /// Bytes of `vfio_irq_set` without data.
    pub const LEN: usize = 20;

    /// Parse a request payload: `argsz` equal to the payload, one data and one action flag,
    /// bool data of exactly `count` bytes, no data otherwise.
    pub fn parse(p: &'a [u8]) -> Result<IrqSet<'a>, Errno> {
        let f = Fields(p);
        let argsz = f.u32(0).ok_or(Errno::EINVAL)? as usize;
        if p.len() < Self::LEN || argsz != p.len() {
            return Err(Errno::EINVAL);
        }
        let s = IrqSet {
            flags: f.u32(4).ok_or(Errno::EINVAL)?,
            index: f.u32(8).ok_or(Errno::EINVAL)?,
            start: f.u32(12).ok_or(Errno::EINVAL)?,
            count: f.u32(16).ok_or(Errno::EINVAL)?,
            data: &p[Self::LEN..],
        };
        let data = s.flags & irq_set::DATA_MASK;
        let action = s.flags & irq_set::ACTION_MASK_BITS;
        if s.flags & !(irq_set::DATA_MASK | irq_set::ACTION_MASK_BITS) != 0
            || !data.is_power_of_two()
            || !action.is_power_of_two()
        {
            return Err(Errno::EINVAL);
        }
        let want = if data == irq_set::DATA_BOOL { s.count as usize } else { 0 };
        if s.data.len() != want {
            return Err(Errno::EINVAL);
        }
        Ok(s)
    }

    /// The payload bytes (for clients).
    pub fn emit(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::LEN + self.data.len());
        v.put_u32((Self::LEN + self.data.len()) as u32);
        v.put_u32(self.flags);
        v.put_u32(self.index);
        v.put_u32(self.start);
        v.put_u32(self.count);
        v.extend_from_slice(self.data);
        v
    }
}

/// `VFIO_USER_REGION_READ`/`WRITE` access header (16 bytes) and, for writes, the data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionAccess<'a> {
    /// Offset into the region.
    pub offset: u64,
    /// Region index.
    pub region: u32,
    /// Bytes.
    pub count: u32,
    /// The bytes to write (empty for a read).
    pub data: &'a [u8],
}

impl<'a> RegionAccess<'a> {
    /// Bytes of the access header.
    pub const LEN: usize = 16;

    /// Parse a READ (`write` false: exactly the header) or a WRITE (the header and `count`
    /// bytes). `count` is at most [`MAX_DATA_XFER`].
    pub fn parse(p: &'a [u8], write: bool) -> Result<RegionAccess<'a>, Errno> {
        let f = Fields(p);
        let a = RegionAccess {
            offset: f.u64(0).ok_or(Errno::EINVAL)?,
            region: f.u32(8).ok_or(Errno::EINVAL)?,
            count: f.u32(12).ok_or(Errno::EINVAL)?,
            data: p.get(Self::LEN..).unwrap_or(&[]),
        };
        let data = if write { a.count as usize } else { 0 };
        if a.count == 0 || a.count > MAX_DATA_XFER || p.len() != Self::LEN + data {
            return Err(Errno::EINVAL);
        }
        Ok(a)
    }

    /// The access header followed by `data` (a write request, or a read reply).
    pub fn emit(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::LEN + self.data.len());
        v.put_u64(self.offset);
        v.put_u32(self.region);
        v.put_u32(self.count);
        v.extend_from_slice(self.data);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_in_host_order() {
        let h = Header { id: 0x1234, command: 9, size: 48, flags: flags::NO_REPLY, error: 0 };
        let b = h.emit();
        assert_eq!(&b[0..2], &0x1234u16.to_ne_bytes());
        assert_eq!(&b[2..4], &9u16.to_ne_bytes());
        assert_eq!(&b[4..8], &48u32.to_ne_bytes());
        assert_eq!(Header::parse(&b), h);
        let e = h.reply(Err(Errno::EFAULT));
        assert_eq!(e.size, 16);
        assert_eq!(e.flags, flags::TYPE_REPLY | flags::ERROR);
        assert_eq!(e.error, libc::EFAULT as u32);
    }

    #[test]
    fn dma_map_needs_exact_size_and_known_flags() {
        let m = DmaMap { flags: 3, offset: 0, address: 0x1000, size: 0x1000 };
        assert_eq!(DmaMap::parse(&m.emit()), Ok(m));
        let mut short = m.emit();
        short.pop();
        assert_eq!(DmaMap::parse(&short), Err(Errno::EINVAL));
        let bad = DmaMap { flags: 4, ..m };
        assert_eq!(DmaMap::parse(&bad.emit()), Err(Errno::EINVAL));
    }

    #[test]
    fn irq_set_wants_one_data_and_one_action() {
        let ok = IrqSet {
            flags: irq_set::DATA_BOOL | irq_set::ACTION_TRIGGER,
            index: 2,
            start: 0,
            count: 2,
            data: &[1, 0],
        };
        assert_eq!(IrqSet::parse(&ok.emit()), Ok(ok.clone()));
        let two_data = IrqSet { flags: irq_set::DATA_BOOL | irq_set::DATA_NONE | 32, ..ok.clone() };
        assert_eq!(IrqSet::parse(&two_data.emit()), Err(Errno::EINVAL));
        let no_action = IrqSet { flags: irq_set::DATA_NONE, data: &[], ..ok.clone() };
        assert_eq!(IrqSet::parse(&no_action.emit()), Err(Errno::EINVAL));
        let short_bools = IrqSet { data: &[1], ..ok };
        assert_eq!(IrqSet::parse(&short_bools.emit()), Err(Errno::EINVAL));
    }
}
