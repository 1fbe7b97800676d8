//! The device behind the socket: the model, its guest memory, its MSI-X vectors, its
//! configuration space, and what each vfio-user command does to them.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use rdma_pmd::BusAddr;
use rdma_pmd_hal::guest_ram::{GuestRam, Prot};
use rdma_pmd_mlx5_model::fw::{Firmware, FwConfig};
use rdma_pmd_mlx5_model::{Interrupts, Model, ModelConfig, UAR_PAGE};

use crate::config::{ConfigSpace, MSIX_BAR, MSIX_VECTORS};
use crate::msix::Msix;
use crate::proto::{
    irq_set, Command, DmaMap, DmaUnmap, Errno, Fields, IrqSet, Put, RegionAccess, DMA_MAP_READ,
    DMA_MAP_WRITE, DMA_UNMAP_ALL, MAX_DATA_XFER, MAX_MSG_FDS, VERSION_MAJOR, VERSION_MINOR,
};
use crate::regions::{self, MsixBar, BAR0, CONFIG, NUM_REGIONS};

/// IRQ indexes of vfio-pci (`VFIO_PCI_INTX_IRQ_INDEX` .. `VFIO_PCI_REQ_IRQ_INDEX`).
pub const NUM_IRQS: u32 = 5;
/// `VFIO_PCI_MSIX_IRQ_INDEX`.
pub const MSIX_IRQ: u32 = 2;
/// `VFIO_DEVICE_FLAGS_RESET | VFIO_DEVICE_FLAGS_PCI`.
pub const DEVICE_FLAGS: u32 = (1 << 0) | (1 << 1);
/// `VFIO_IRQ_INFO_EVENTFD`.
pub const IRQ_INFO_EVENTFD: u32 = 1 << 0;
/// `VFIO_IRQ_INFO_MASKABLE`.
pub const IRQ_INFO_MASKABLE: u32 = 1 << 1;
/// `VFIO_IRQ_INFO_NORESIZE`.
pub const IRQ_INFO_NORESIZE: u32 = 1 << 3;

/// What the server counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// DMA_MAPs that succeeded (with an fd or without).
    pub dma_maps: u64,
    /// DMA ranges that came without an fd (recorded, not reachable by the device).
    pub dma_maps_unmappable: u64,
    /// DMA_UNMAPs that succeeded.
    pub dma_unmaps: u64,
    /// Commands answered with an error.
    pub errors: u64,
    /// Commands that failed but asked for no reply (posted writes).
    pub unreplied_errors: u64,
    /// Device resets.
    pub resets: u64,
}

/// A powered-on function: the model and its firmware (which serves the initialization segment
/// and the command queue in BAR0 page 0). Fields drop in order: the firmware's thread stops
/// before the model's engine.
pub struct Live {
    /// The firmware.
    pub fw: Firmware,
    /// The model.
    pub model: Model,
}

impl Live {
    /// Contract breaks the model and its firmware saw: validation failures of the data path,
    /// and commands refused at delivery (a bad command entry or mailbox).
    pub fn violations(&self) -> u64 {
        self.model.counters().validation_failures + self.fw.delivery_errors().len() as u64
    }
}

/// The device.
pub struct Device {
    uar_pages: u32,
    ram: Arc<GuestRam>,
    /// DMA ranges the VMM announced without an fd (ROM): start -> size.
    unmappable: BTreeMap<u64, u64>,
    msix: Arc<Msix>,
    live: Option<Live>,
    config: ConfigSpace,
    msix_bar: MsixBar,
    versioned: bool,
    /// Validation failures of models dropped by resets.
    earlier_violations: u64,
    /// Counters.
    pub stats: Stats,
}

impl Device {
    /// A device whose BAR0 has `uar_pages` pages (a power of two, at least 2).
    pub fn new(uar_pages: u32) -> Result<Device, String> {
        if uar_pages < 2 || !uar_pages.is_power_of_two() {
            return Err(format!("--uar-pages {uar_pages}: a power of two, at least 2"));
        }
        let ram = Arc::new(GuestRam::new());
        let msix = Arc::new(Msix::new(MSIX_VECTORS));
        let model = Self::build(uar_pages, &ram, &msix).map_err(|e| format!("model: {e}"))?;
        Ok(Device {
            uar_pages,
            ram,
            unmappable: BTreeMap::new(),
            msix,
            live: Some(model),
            config: ConfigSpace::new(Self::bar0_size_of(uar_pages)),
            msix_bar: MsixBar::default(),
            versioned: false,
            earlier_violations: 0,
            stats: Stats::default(),
        })
    }

    fn build(
        uar_pages: u32,
        ram: &Arc<GuestRam>,
        msix: &Arc<Msix>,
    ) -> Result<Live, rdma_pmd::Error> {
        let interrupts: Arc<dyn Interrupts> = msix.clone();
        let model = Model::with_config(ModelConfig {
            uar_pages,
            memory: Some(ram.clone()),
            interrupts: Some(interrupts),
            ..Default::default()
        })?;
        let fw = Firmware::start(&model, FwConfig::default())?;
        Ok(Live { fw, model })
    }

    fn bar0_size_of(uar_pages: u32) -> u64 {
        u64::from(uar_pages) * UAR_PAGE as u64
    }

    /// Bytes of BAR0.
    pub fn bar0_size(&self) -> u64 {
        Self::bar0_size_of(self.uar_pages)
    }

    /// The MSI-X vectors.
    pub fn msix(&self) -> &Arc<Msix> {
        &self.msix
    }

    /// The guest memory the model reaches.
    pub fn ram(&self) -> &Arc<GuestRam> {
        &self.ram
    }

    /// The current model and firmware (none only after a reset that failed to build them).
    pub fn live(&self) -> Option<&Live> {
        self.live.as_ref()
    }

    /// Contract breaks ([`Live::violations`]) of every model this device has had.
    pub fn violations(&self) -> u64 {
        self.earlier_violations + self.live.as_ref().map_or(0, Live::violations)
    }

    /// Execute one command: the reply payload, or the errno of the error reply.
    pub fn handle(
        &mut self,
        command: Command,
        body: &[u8],
        fds: Vec<OwnedFd>,
    ) -> Result<Vec<u8>, Errno> {
        let r = self.dispatch(command, body, fds);
        if r.is_err() {
            self.stats.errors += 1;
        }
        r
    }

    fn dispatch(
        &mut self,
        command: Command,
        body: &[u8],
        fds: Vec<OwnedFd>,
    ) -> Result<Vec<u8>, Errno> {
        // Only DMA_MAP and SET_IRQS carry fds; any others are refused (and closed on drop).
        if !fds.is_empty() && !matches!(command, Command::DmaMap | Command::SetIrqs) {
            return Err(Errno::EINVAL);
        }
        if !self.versioned && command != Command::Version {
            return Err(Errno::EINVAL);
        }
        match command {
            Command::Version => self.version(body),
            Command::DmaMap => self.dma_map(body, fds),
            Command::DmaUnmap => self.dma_unmap(body),
            Command::DeviceGetInfo => self.device_info(body),
            Command::GetRegionInfo => self.region_info(body),
            Command::GetIrqInfo => self.irq_info(body),
            Command::SetIrqs => self.set_irqs(body, fds),
            Command::RegionRead => self.region_read(body),
            Command::RegionWrite => self.region_write(body),
            Command::DeviceReset => self.reset(body),
            // The device offers no device features (Linux's vfio-pci answers ENOTTY for one it
            // lacks, which QEMU reads as "not supported").
            Command::DeviceFeature => Err(Errno::ENOTTY),
            // Known, not offered: no io fds, no write_multiple announced, no migration.
            Command::GetRegionIoFds
            | Command::RegionWriteMulti
            | Command::MigDataRead
            | Command::MigDataWrite => Err(Errno::ENOTSUP),
            // Server-to-client commands arriving at the server.
            Command::DmaRead | Command::DmaWrite => Err(Errno::EINVAL),
            Command::Unknown(_) => Err(Errno::ENOSYS),
        }
    }

    /// VERSION: the spec's rules: same major, minor at most the client's, capabilities a subset
    /// of the client's. The client's JSON must be NUL-terminated UTF-8 text of one object; its
    /// capabilities are looked up by name only (the server needs none of their values: it
    /// sends no data-bearing command to the client).
    fn version(&mut self, body: &[u8]) -> Result<Vec<u8>, Errno> {
        if self.versioned {
            return Err(Errno::EINVAL);
        }
        let f = Fields(body);
        let major = f.u16(0).ok_or(Errno::EINVAL)?;
        let minor = f.u16(2).ok_or(Errno::EINVAL)?;
        if major != VERSION_MAJOR {
            return Err(Errno::ENOTSUP);
        }
        let json = match &body[4..] {
            [] => "",
            [text @ .., 0] => {
                let t = std::str::from_utf8(text).map_err(|_| Errno::EINVAL)?.trim();
                if !(t.starts_with('{') && t.ends_with('}')) || t.contains('\0') {
                    return Err(Errno::EINVAL);
                }
                t
            }
            _ => return Err(Errno::EINVAL),
        };
        let mut caps = Vec::new();
        if json.contains("\"max_msg_fds\"") {
            caps.push(format!("\"max_msg_fds\":{MAX_MSG_FDS}"));
        }
        if json.contains("\"max_data_xfer_size\"") {
            caps.push(format!("\"max_data_xfer_size\":{MAX_DATA_XFER}"));
        }
        let reply_json = format!("{{\"capabilities\":{{{}}}}}", caps.join(","));
        let mut v = Vec::new();
        v.extend_from_slice(&major.to_ne_bytes());
        v.extend_from_slice(&minor.min(VERSION_MINOR).to_ne_bytes());
        v.extend_from_slice(reply_json.as_bytes());
        v.push(0);
        self.versioned = true;
        Ok(v)
    }

    /// DMA_MAP: with one fd, map it into [`GuestRam`]; without, record the range as one the
    /// device cannot reach (QEMU sends ROM that way; the spec lets the server reach such
    /// memory with DMA_READ/WRITE messages, which this server does not send).
    fn dma_map(&mut self, body: &[u8], mut fds: Vec<OwnedFd>) -> Result<Vec<u8>, Errno> {
        let m = DmaMap::parse(body)?;
        if fds.len() > 1 || m.size == 0 {
            return Err(Errno::EINVAL);
        }
        if m.address.checked_add(m.size).is_none() {
            // A range that wraps the bus address space.
            return Err(Errno::EFAULT);
        }
        if self.ram.overlapping_region(BusAddr(m.address), m.size).is_some()
            || self.unmappable_overlap(m.address, m.size)
        {
            return Err(Errno::EEXIST);
        }
        match fds.pop() {
            Some(fd) => {
                let prot =
                    Prot { read: m.flags & DMA_MAP_READ != 0, write: m.flags & DMA_MAP_WRITE != 0 };
                self.ram
                    .map(BusAddr(m.address), m.size, fd.as_fd(), m.offset, prot)
                    .map_err(|e| Errno(e.errno()))?;
            }
            None => {
                self.unmappable.insert(m.address, m.size);
                self.stats.dma_maps_unmappable += 1;
            }
        }
        self.stats.dma_maps += 1;
        Ok(Vec::new())
    }

    fn unmappable_overlap(&self, start: u64, size: u64) -> bool {
        let end = start + size;
        self.unmappable.range(..end).next_back().is_some_and(|(&s, &l)| s + l > start)
    }

    /// DMA_UNMAP: exactly one earlier mapping (or all of them); the reply is the request.
    fn dma_unmap(&mut self, body: &[u8]) -> Result<Vec<u8>, Errno> {
        let u = DmaUnmap::parse(body)?;
        if u.flags & DMA_UNMAP_ALL != 0 {
            self.ram.unmap_all();
            self.unmappable.clear();
        } else if self.unmappable.get(&u.address) == Some(&u.size) {
            self.unmappable.remove(&u.address);
        } else {
            // `GuestRam::unmap` returns once no DMA is in flight on the region.
            self.ram.unmap(BusAddr(u.address), u.size).map_err(|e| Errno(e.errno()))?;
        }
        self.stats.dma_unmaps += 1;
        Ok(u.emit())
    }

    /// DEVICE_GET_INFO: a PCI device with reset, 9 regions, 5 IRQ indexes.
    fn device_info(&self, body: &[u8]) -> Result<Vec<u8>, Errno> {
        let argsz = Fields(body).u32(0).ok_or(Errno::EINVAL)?;
        if body.len() != 16 || argsz < 16 {
            return Err(Errno::EINVAL);
        }
        let mut v = Vec::with_capacity(16);
        v.put_u32(16);
        v.put_u32(DEVICE_FLAGS);
        v.put_u32(NUM_REGIONS);
        v.put_u32(NUM_IRQS);
        Ok(v)
    }

    fn region_info(&self, body: &[u8]) -> Result<Vec<u8>, Errno> {
        let f = Fields(body);
        let argsz = f.u32(0).ok_or(Errno::EINVAL)? as usize;
        let index = f.u32(8).ok_or(Errno::EINVAL)?;
        if body.len() != regions::REGION_INFO_LEN
            || argsz < regions::REGION_INFO_LEN
            || index >= NUM_REGIONS
        {
            return Err(Errno::EINVAL);
        }
        Ok(regions::info(index, self.bar0_size()))
    }

    /// GET_IRQ_INFO: MSI-X has [`MSIX_VECTORS`] vectors signalled by eventfd, maskable, set as
    /// a whole (NORESIZE); INTx, MSI, ERR and REQ have none.
    fn irq_info(&self, body: &[u8]) -> Result<Vec<u8>, Errno> {
        let f = Fields(body);
        let argsz = f.u32(0).ok_or(Errno::EINVAL)?;
        let index = f.u32(8).ok_or(Errno::EINVAL)?;
        if body.len() != 16 || argsz < 16 || index >= NUM_IRQS {
            return Err(Errno::EINVAL);
        }
        let (flags, count) = if index == MSIX_IRQ {
            (IRQ_INFO_EVENTFD | IRQ_INFO_MASKABLE | IRQ_INFO_NORESIZE, self.msix.count())
        } else {
            (IRQ_INFO_EVENTFD, 0)
        };
        let mut v = Vec::with_capacity(16);
        v.put_u32(16);
        v.put_u32(flags);
        v.put_u32(index);
        v.put_u32(count);
        Ok(v)
    }

    /// SET_IRQS, as the spec's table of data and action flags says.
    fn set_irqs(&mut self, body: &[u8], fds: Vec<OwnedFd>) -> Result<Vec<u8>, Errno> {
        let s = IrqSet::parse(body)?;
        if s.index >= NUM_IRQS {
            return Err(Errno::EINVAL);
        }
        let data = s.flags & irq_set::DATA_MASK;
        let action = s.flags & irq_set::ACTION_MASK_BITS;
        // "A count (and start) of 0, with DATA_NONE, disables all interrupts of the index."
        if s.count == 0 {
            if data != irq_set::DATA_NONE || s.start != 0 || !fds.is_empty() {
                return Err(Errno::EINVAL);
            }
            if s.index == MSIX_IRQ && action == irq_set::ACTION_TRIGGER {
                self.msix.deassign(0, self.msix.count());
            }
            return Ok(Vec::new());
        }
        let total = if s.index == MSIX_IRQ { self.msix.count() } else { 0 };
        match s.start.checked_add(s.count) {
            Some(end) if end <= total => {}
            _ => return Err(Errno::EINVAL),
        }
        let selected: Vec<u32> = (0..s.count)
            .filter(|&i| data != irq_set::DATA_BOOL || s.data[i as usize] != 0)
            .map(|i| s.start + i)
            .collect();
        match (data, action) {
            (irq_set::DATA_EVENTFD, irq_set::ACTION_TRIGGER) => {
                if fds.is_empty() {
                    // "If no file descriptors are provided, this de-assigns the specified
                    // previously configured interrupts."
                    self.msix.deassign(s.start, s.count);
                } else if fds.len() == s.count as usize {
                    self.msix.assign(s.start, fds);
                } else {
                    return Err(Errno::EINVAL);
                }
            }
            // Eventfds signalled on mask or unmask: not offered.
            (irq_set::DATA_EVENTFD, _) => return Err(Errno::ENOTSUP),
            (_, _) if !fds.is_empty() => return Err(Errno::EINVAL),
            (_, irq_set::ACTION_TRIGGER) => selected.iter().for_each(|&v| self.msix.fire(v)),
            (_, irq_set::ACTION_MASK) => {
                selected.iter().for_each(|&v| self.msix.set_masked(v, true))
            }
            (_, _) => selected.iter().for_each(|&v| self.msix.set_masked(v, false)),
        }
        Ok(Vec::new())
    }

    fn region_read(&mut self, body: &[u8]) -> Result<Vec<u8>, Errno> {
        let a = RegionAccess::parse(body, false)?;
        let mut data = vec![0u8; a.count as usize];
        match a.region {
            BAR0 => regions::bar0_read(
                &self.live.as_ref().ok_or(Errno::EIO)?.model.bar(),
                a.offset,
                &mut data,
            )?,
            MSIX_BAR => self.msix_bar.read(a.offset, &mut data)?,
            CONFIG => self.config.read(a.offset, &mut data)?,
            _ => return Err(Errno::EINVAL),
        }
        Ok(RegionAccess { data: &data, ..a }.emit())
    }

    fn region_write(&mut self, body: &[u8]) -> Result<Vec<u8>, Errno> {
        let a = RegionAccess::parse(body, true)?;
        match a.region {
            BAR0 => regions::bar0_write(
                &self.live.as_ref().ok_or(Errno::EIO)?.model.bar(),
                a.offset,
                a.data,
            )?,
            MSIX_BAR => self.msix_bar.write(a.offset, a.data)?,
            CONFIG => self.config.write(a.offset, a.data)?,
            _ => return Err(Errno::EINVAL),
        }
        Ok(RegionAccess { data: &[], ..a }.emit())
    }

    /// DEVICE_RESET: the function returns to its power-on state: a new model and firmware (the
    /// old ones' threads stop first, so it touches guest memory no more), the power-on configuration
    /// space and BAR2. DMA mappings and eventfds stay: they are the VMM's, and QEMU re-arms
    /// the vectors itself around a reset.
    fn reset(&mut self, body: &[u8]) -> Result<Vec<u8>, Errno> {
        if !body.is_empty() {
            return Err(Errno::EINVAL);
        }
        if let Some(old) = self.live.take() {
            self.earlier_violations += old.violations();
            drop(old);
        }
        self.config = ConfigSpace::new(self.bar0_size());
        self.msix_bar = MsixBar::default();
        self.stats.resets += 1;
        self.live =
            Some(Self::build(self.uar_pages, &self.ram, &self.msix).map_err(|_| Errno::EIO)?);
        Ok(Vec::new())
    }
}
