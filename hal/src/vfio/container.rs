//! The VFIO container (one IOMMU address space) and IOMMU groups attached to it.
//!
//! Set-up order, as `Documentation/driver-api/vfio.rst` prescribes: open `/dev/vfio/vfio`,
//! check `VFIO_GET_API_VERSION` and `VFIO_CHECK_EXTENSION(VFIO_TYPE1v2_IOMMU)`; open the group,
//! check `VFIO_GROUP_GET_STATUS` says it is viable; `VFIO_GROUP_SET_CONTAINER`; then, once,
//! `VFIO_SET_IOMMU`. DMA mappings belong to the container and live while a group is attached.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};

use super::addr::PciAddr;
use super::error::VfioError;
use super::iova::{DmaMask, IovaAllocator, IovaRange};
use super::pci;
use super::sys;
use super::uapi::*;
use rdma_pmd::BusAddr;

/// Path of the container device.
pub const CONTAINER_PATH: &str = "/dev/vfio/vfio";

/// An open VFIO container: one IOMMU address space (type1 v2), and the allocator of its IOVAs
/// (shared by every device and every [`VfioDma`](super::VfioDma) on it).
#[derive(Debug)]
pub struct Container {
    fd: OwnedFd,
    /// Created by the first `VFIO_SET_IOMMU`, from the IOMMU's valid ranges.
    iova: Mutex<Option<IovaAllocator>>,
}

impl Container {
    /// Open `/dev/vfio/vfio` and check the API version and the type1 v2 IOMMU.
    pub fn open() -> Result<Arc<Self>, VfioError> {
        let fd = sys::open_rw(CONTAINER_PATH)?;
        let version =
            sys::ioctl_val(&fd, VFIO_GET_API_VERSION, 0, "VFIO_GET_API_VERSION", CONTAINER_PATH)?;
        if version != VFIO_API_VERSION {
            return Err(VfioError::ApiVersion { got: version });
        }
        let ext = sys::ioctl_val(
            &fd,
            VFIO_CHECK_EXTENSION,
            VFIO_TYPE1V2_IOMMU as libc::c_ulong,
            "VFIO_CHECK_EXTENSION",
            CONTAINER_PATH,
        )?;
        if ext != 1 {
            return Err(VfioError::NoType1v2);
        }
        Ok(Arc::new(Container { fd, iova: Mutex::new(None) }))
    }

    fn iova(&self) -> MutexGuard<'_, Option<IovaAllocator>> {
        self.iova.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `VFIO_SET_IOMMU(VFIO_TYPE1v2_IOMMU)`, the first time a group is attached; then learn the
    /// valid IOVA ranges.
    fn set_iommu_once(&self) -> Result<(), VfioError> {
        let mut iova = self.iova();
        if iova.is_some() {
            return Ok(());
        }
        sys::ioctl_val(
            &self.fd,
            VFIO_SET_IOMMU,
            VFIO_TYPE1V2_IOMMU as libc::c_ulong,
            "VFIO_SET_IOMMU",
            CONTAINER_PATH,
        )?;
        *iova = Some(IovaAllocator::new(&self.query_iova_ranges()?));
        Ok(())
    }

    /// The valid IOVA ranges below `mask` (empty before a group is attached).
    pub fn iova_ranges_below(&self, mask: DmaMask) -> Vec<IovaRange> {
        self.iova().as_ref().map(|a| a.ranges_below(mask)).unwrap_or_default()
    }

    /// Reserve `len` bytes of IOVA space aligned to `align`, below `mask`.
    pub(crate) fn iova_alloc(
        &self,
        len: u64,
        align: u64,
        mask: DmaMask,
    ) -> Result<BusAddr, VfioError> {
        match self.iova().as_mut() {
            Some(a) => a.alloc(len, align, mask),
            None => Err(VfioError::IovaExhausted { len, mask: mask.get() }),
        }
    }

    /// Give back IOVA space reserved by [`iova_alloc`](Self::iova_alloc).
    pub(crate) fn iova_free(&self, iova: BusAddr) {
        if let Some(a) = self.iova().as_mut() {
            a.free(iova);
        }
    }

    /// The IOVA ranges the IOMMU accepts (`VFIO_IOMMU_GET_INFO`, capability `IOVA_RANGE`);
    /// empty when the kernel does not report them (before Linux 5.4).
    fn query_iova_ranges(&self) -> Result<Vec<IovaRange>, VfioError> {
        let step = "VFIO_IOMMU_GET_INFO";
        let mut info =
            VfioIommuType1Info { argsz: argsz::<VfioIommuType1Info>(), ..Default::default() };
        // SAFETY: the kernel writes at most `argsz` bytes of `vfio_iommu_type1_info`.
        unsafe { sys::ioctl_ptr(&self.fd, VFIO_IOMMU_GET_INFO, &mut info, step, CONTAINER_PATH)? };
        if info.flags & VFIO_IOMMU_INFO_CAPS == 0 || info.argsz as usize <= size_of_val(&info) {
            return Ok(Vec::new());
        }
        // Again with room for the capability chain. u64 words keep the buffer 8-byte aligned.
        let len = info.argsz as usize;
        let mut buf = vec![0u64; len.div_ceil(8)];
        let head = buf.as_mut_ptr().cast::<VfioIommuType1Info>();
        // SAFETY: `buf` holds at least `size_of::<VfioIommuType1Info>()` aligned bytes.
        unsafe { head.write(VfioIommuType1Info { argsz: len as u32, ..Default::default() }) };
        // SAFETY: the kernel writes at most `argsz` = `len` bytes, all inside `buf`.
        unsafe { sys::ioctl_ptr(&self.fd, VFIO_IOMMU_GET_INFO, head, step, CONTAINER_PATH)? };
        let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
        Ok(parse_iova_ranges(&bytes[..len]))
    }

    /// Map `len` bytes of this process at `vaddr` to `iova`, readable and writable by devices.
    ///
    /// # Safety
    /// `[vaddr, vaddr + len)` must be memory of this process that stays mapped, and is not
    /// handed to anything that minds device writes, until [`unmap_dma`](Self::unmap_dma).
    pub unsafe fn map_dma(&self, vaddr: usize, iova: u64, len: u64) -> Result<(), VfioError> {
        let mut map = VfioIommuType1DmaMap {
            argsz: argsz::<VfioIommuType1DmaMap>(),
            flags: VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE,
            vaddr: vaddr as u64,
            iova,
            size: len,
        };
        // SAFETY: the kernel reads the structure; the memory it names is the caller's promise.
        unsafe {
            sys::ioctl_ptr(
                &self.fd,
                VFIO_IOMMU_MAP_DMA,
                &mut map,
                "VFIO_IOMMU_MAP_DMA",
                CONTAINER_PATH,
            )
        }?;
        Ok(())
    }

    /// Remove the mapping at `iova` (exactly as mapped); returns the bytes unmapped.
    pub fn unmap_dma(&self, iova: u64, len: u64) -> Result<u64, VfioError> {
        let mut unmap = VfioIommuType1DmaUnmap {
            argsz: argsz::<VfioIommuType1DmaUnmap>(),
            flags: 0,
            iova,
            size: len,
        };
        // SAFETY: the kernel reads the structure and writes back `size`; no bitmap is asked for.
        unsafe {
            sys::ioctl_ptr(
                &self.fd,
                VFIO_IOMMU_UNMAP_DMA,
                &mut unmap,
                "VFIO_IOMMU_UNMAP_DMA",
                CONTAINER_PATH,
            )
        }?;
        Ok(unmap.size)
    }
}

/// The IOVA ranges in a `vfio_iommu_type1_info` reply (the structure and its capability chain).
pub(crate) fn parse_iova_ranges(reply: &[u8]) -> Vec<IovaRange> {
    let u16_at = |o: usize| reply.get(o..o + 2).map(|b| u16::from_ne_bytes([b[0], b[1]]));
    let u32_at = |o: usize| reply.get(o..o + 4).map(|b| u32::from_ne_bytes(b.try_into().unwrap()));
    let u64_at = |o: usize| reply.get(o..o + 8).map(|b| u64::from_ne_bytes(b.try_into().unwrap()));
    let mut out = Vec::new();
    let mut cap =
        u32_at(core::mem::offset_of!(VfioIommuType1Info, cap_offset)).unwrap_or(0) as usize;
    // The kernel appends capabilities, so each `next` lies beyond the one before: anything
    // else ends the walk (no loops).
    while cap != 0 {
        let (Some(id), Some(next)) = (u16_at(cap), u32_at(cap + 4)) else { break };
        if id == VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE {
            let n = u32_at(cap + 8).unwrap_or(0) as usize;
            let first = cap + size_of::<VfioIommuType1InfoCapIovaRange>();
            for i in 0..n {
                let at = first + i * size_of::<VfioIovaRange>();
                if let (Some(start), Some(end)) = (u64_at(at), u64_at(at + 8)) {
                    out.push(IovaRange { start, end });
                }
            }
        }
        if next as usize <= cap {
            break;
        }
        cap = next as usize;
    }
    out
}

/// An IOMMU group, open and attached to a container.
#[derive(Debug)]
pub struct Group {
    // Field order is drop order: the group file closes (detaching from the container) before
    // this handle's reference to the container goes.
    fd: OwnedFd,
    number: u32,
    path: String,
    container: Arc<Container>,
}

impl Group {
    /// Open the group of `addr`, check it is viable, attach it to `container` and set the
    /// container's IOMMU type.
    pub fn open(addr: PciAddr, container: &Arc<Container>) -> Result<Arc<Self>, VfioError> {
        let number = pci::iommu_group(addr)?;
        let path = format!("/dev/vfio/{number}");
        let fd = sys::open_rw(&path)?;
        let mut status = VfioGroupStatus { argsz: argsz::<VfioGroupStatus>(), flags: 0 };
        // SAFETY: the kernel writes a `vfio_group_status` of `argsz` bytes.
        unsafe {
            sys::ioctl_ptr(&fd, VFIO_GROUP_GET_STATUS, &mut status, "VFIO_GROUP_GET_STATUS", &path)
        }?;
        if status.flags & VFIO_GROUP_FLAGS_VIABLE == 0 {
            let (others, count) = pci::group_peers(number, addr)?;
            return Err(VfioError::GroupNotViable { group: number, others, count });
        }
        let cfd = container.fd.as_raw_fd();
        // SAFETY: VFIO_GROUP_SET_CONTAINER reads one `int` (the container fd) at the pointer.
        unsafe {
            sys::ioctl_ptr(
                &fd,
                VFIO_GROUP_SET_CONTAINER,
                &cfd as *const i32 as *mut i32,
                "VFIO_GROUP_SET_CONTAINER",
                &path,
            )
        }?;
        container.set_iommu_once()?;
        Ok(Arc::new(Group { fd, number, path, container: container.clone() }))
    }

    /// The group number (`/dev/vfio/<number>`).
    pub fn number(&self) -> u32 {
        self.number
    }

    /// The container the group is attached to.
    pub fn container(&self) -> &Arc<Container> {
        &self.container
    }

    /// `VFIO_GROUP_GET_DEVICE_FD` for `addr`.
    pub(crate) fn device_fd(&self, addr: PciAddr) -> Result<OwnedFd, VfioError> {
        let name = std::ffi::CString::new(addr.to_string()).expect("no NUL in a PCI address");
        // SAFETY: the kernel reads a NUL-terminated device name at the pointer.
        let fd = unsafe {
            sys::ioctl_ptr(
                &self.fd,
                VFIO_GROUP_GET_DEVICE_FD,
                name.as_ptr() as *mut libc::c_char,
                "VFIO_GROUP_GET_DEVICE_FD",
                &self.path,
            )
        }?;
        // SAFETY: the ioctl returned a new descriptor that nothing else owns.
        Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iova_range_capability_is_parsed_from_a_reply() {
        // A reply as Linux 6.1 gives it for an Intel IOMMU with a 39-bit width: the 24-byte
        // info structure, then the IOVA_RANGE capability (header 8, nr_iovas 4, reserved 4)
        // with two ranges around the MSI window.
        let mut r = Vec::new();
        r.extend_from_slice(&64u32.to_ne_bytes()); // argsz
        r.extend_from_slice(&(VFIO_IOMMU_INFO_CAPS | 1).to_ne_bytes()); // flags
        r.extend_from_slice(&0x4020_1000u64.to_ne_bytes()); // iova_pgsizes
        r.extend_from_slice(&24u32.to_ne_bytes()); // cap_offset
        r.extend_from_slice(&0u32.to_ne_bytes());
        r.extend_from_slice(&1u16.to_ne_bytes()); // id IOVA_RANGE
        r.extend_from_slice(&1u16.to_ne_bytes()); // version
        r.extend_from_slice(&0u32.to_ne_bytes()); // next: none
        r.extend_from_slice(&2u32.to_ne_bytes()); // nr_iovas
        r.extend_from_slice(&0u32.to_ne_bytes());
        for (s, e) in [(0u64, 0xfedf_ffffu64), (0xfef0_0000, (1 << 39) - 1)] {
            r.extend_from_slice(&s.to_ne_bytes());
            r.extend_from_slice(&e.to_ne_bytes());
        }
        assert_eq!(
            parse_iova_ranges(&r),
            vec![
                IovaRange { start: 0, end: 0xfedf_ffff },
                IovaRange { start: 0xfef0_0000, end: (1 << 39) - 1 }
            ]
        );
        // A chain that points outside the reply, or loops, ends quietly.
        r[16..20].copy_from_slice(&4000u32.to_ne_bytes());
        assert!(parse_iova_ranges(&r).is_empty());
        r[16..20].copy_from_slice(&24u32.to_ne_bytes());
        r[28..32].copy_from_slice(&24u32.to_ne_bytes());
        assert_eq!(parse_iova_ranges(&r).len(), 2, "a looping chain is read once");
    }
}
