//! rdma_cm's IP private-data header and service IDs (`drivers/infiniband/core/cma.c`).
//!
//! A REQ sent by rdma_cm for an IP address starts its private data with `struct cma_hdr`
//! (36 bytes): `cma_version` (`CMA_VERSION` = 0), `ip_version` in the high nibble of the
//! second byte, the requester's port, then the source and destination addresses, 16 bytes
//! each (`union cma_ip_addr`: IPv4 in the last four bytes). The application's private data
//! follows it. The service ID is `(port space << 16) + port` (`cma_get_service_id`).

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::mad::MadError;

/// Bytes in `struct cma_hdr`.
pub const CMA_HDR_LEN: usize = 36;
/// `CMA_VERSION`.
pub const CMA_VERSION: u8 = 0;
/// `RDMA_PS_TCP` (`enum rdma_ucm_port_space`, `include/uapi/rdma/rdma_user_cm.h`): the port
/// space of connected (RC) rdma_cm IDs.
pub const RDMA_PS_TCP: u16 = 0x0106;

/// `cma_get_service_id`: the service ID of `port` in port space `ps`.
pub const fn service_id(ps: u16, port: u16) -> u64 {
    ((ps as u64) << 16) + port as u64
}

/// A view over the `cma_hdr` at the start of a REQ's private data.
#[derive(Clone, Copy, Debug)]
pub struct CmaHdr<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> CmaHdr<T> {
    /// A view over `buf`, which must hold at least [`CMA_HDR_LEN`] bytes.
    pub fn new_checked(buf: T) -> Result<Self, MadError> {
        let len = buf.as_ref().len();
        if len < CMA_HDR_LEN {
            return Err(MadError::TooShort { len });
        }
        Ok(CmaHdr { buf })
    }

    /// `cma_version`.
    pub fn cma_version(&self) -> u8 {
        self.buf.as_ref()[0]
    }
    /// IP version: the high nibble of `ip_version` (`cma_get_ip_ver`).
    pub fn ip_version(&self) -> u8 {
        self.buf.as_ref()[1] >> 4
    }
    /// `port` (big-endian): the requester's port.
    pub fn port(&self) -> u16 {
        let b = self.buf.as_ref();
        u16::from_be_bytes([b[2], b[3]])
    }
    /// `src_addr`, 16 bytes.
    pub fn src_addr(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buf.as_ref()[4..20]);
        a
    }
    /// `dst_addr`, 16 bytes.
    pub fn dst_addr(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buf.as_ref()[20..36]);
        a
    }

    /// The header as addresses: `(source, destination)`, the source with the port; `None`
    /// unless the version is [`CMA_VERSION`] and the IP version 4 or 6 (what `cma.c`
    /// `cma_get_net_info`/`cma_save_ip_info` accept).
    pub fn addrs(&self) -> Option<(SocketAddr, IpAddr)> {
        if self.cma_version() != CMA_VERSION {
            return None;
        }
        let (src, dst) = (self.src_addr(), self.dst_addr());
        let ip = |a: [u8; 16], v4: bool| -> IpAddr {
            if v4 {
                IpAddr::V4(Ipv4Addr::new(a[12], a[13], a[14], a[15]))
            } else {
                IpAddr::V6(Ipv6Addr::from(a))
            }
        };
        let v4 = match self.ip_version() {
            4 => true,
            6 => false,
            _ => return None,
        };
        Some((SocketAddr::new(ip(src, v4), self.port()), ip(dst, v4)))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CmaHdr<T> {
    /// `cma_format_hdr` for an IP connection from `src` (address and port) to `dst`: both
    /// addresses must be of one family.
    pub fn emit(&mut self, src: SocketAddr, dst: IpAddr) -> crate::Result<()> {
        let b = &mut self.buf.as_mut()[..CMA_HDR_LEN];
        b.fill(0);
        b[0] = CMA_VERSION;
        b[2..4].copy_from_slice(&src.port().to_be_bytes());
        match (src.ip(), dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                b[1] = 4 << 4;
                b[16..20].copy_from_slice(&s.octets());
                b[32..36].copy_from_slice(&d.octets());
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                b[1] = 6 << 4;
                b[4..20].copy_from_slice(&s.octets());
                b[20..36].copy_from_slice(&d.octets());
            }
            _ => {
                return Err(crate::Error::InvalidArgument(
                    "source and destination of two IP families",
                ))
            }
        }
        Ok(())
    }
}
