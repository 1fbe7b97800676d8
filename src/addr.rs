//! Typed handles: memory keys, queue-pair numbers and bus addresses.
//!
//! Each is a newtype so that the compiler refuses an `Rkey` where an `Lkey` belongs, or a CPU
//! address where the device needs a bus address (IOVA).

use core::fmt;

macro_rules! handle {
    ($(#[$m:meta])* $name:ident($t:ty), $fmt:literal) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        #[repr(transparent)]
        pub struct $name(pub $t);

        impl $name {
            /// The raw value, in host byte order.
            #[inline]
            pub const fn get(self) -> $t {
                self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "(", $fmt, ")"), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, $fmt, self.0)
            }
        }
    };
}

handle!(
    /// Local memory key: names a registered region to the local HCA (`ibv_mr.lkey`).
    Lkey(u32), "{:#x}"
);
handle!(
    /// Remote memory key: names a registered region on the peer (`ibv_mr.rkey`), granting the
    /// access it was registered with.
    Rkey(u32), "{:#x}"
);
handle!(
    /// Queue-pair number. Only the low 24 bits are meaningful on the wire.
    QpNum(u32), "{:#x}"
);
handle!(
    /// An address as the device sees it on the bus: a physical address on bare metal, an IOVA
    /// behind an IOMMU. Never dereferenced by the CPU.
    BusAddr(u64), "{:#x}"
);

impl QpNum {
    /// Largest QP number that fits the 24-bit wire field.
    pub const MAX: u32 = 0x00ff_ffff;
}

impl BusAddr {
    /// This address plus `off` bytes.
    #[inline]
    pub const fn add(self, off: u64) -> BusAddr {
        BusAddr(self.0.wrapping_add(off))
    }

    /// Whether the address is a multiple of `align` (a power of two).
    #[inline]
    pub const fn is_aligned(self, align: u64) -> bool {
        self.0 & (align - 1) == 0
    }
}

/// The target of an RDMA WRITE: an address inside a region the peer registered, and the key
/// that grants access to it (`remote_addr`, `rkey` of `rdma_post_writev`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RemoteBuf {
    /// Virtual address in the peer's memory key space.
    pub addr: u64,
    /// The peer's remote key.
    pub rkey: Rkey,
}

impl RemoteBuf {
    /// A remote target.
    pub const fn new(addr: u64, rkey: Rkey) -> Self {
        Self { addr, rkey }
    }

    /// The same region, `off` bytes further.
    pub const fn offset(self, off: u64) -> Self {
        Self { addr: self.addr.wrapping_add(off), rkey: self.rkey }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_transparent() {
        assert_eq!(core::mem::size_of::<Lkey>(), 4);
        assert_eq!(core::mem::size_of::<BusAddr>(), 8);
        assert!(BusAddr(0x1000).is_aligned(0x1000));
        assert!(!BusAddr(0x1008).is_aligned(0x10));
        assert_eq!(BusAddr(0x10).add(0x20), BusAddr(0x30));
    }
}

/// A 128-bit global identifier: an IPv6 address, or for RoCE v2 over IPv4 the IPv4-mapped
/// address `::ffff:a.b.c.d` (IBTA annex A17).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(transparent)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The IPv4-mapped GID of `a.b.c.d`.
    pub const fn from_ipv4(ip: [u8; 4]) -> Gid {
        Gid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, ip[0], ip[1], ip[2], ip[3]])
    }

    /// The IPv4 address, if the GID is IPv4-mapped.
    pub const fn ipv4(&self) -> Option<[u8; 4]> {
        let g = &self.0;
        if g[0] == 0
            && g[1] == 0
            && g[2] == 0
            && g[3] == 0
            && g[4] == 0
            && g[5] == 0
            && g[6] == 0
            && g[7] == 0
            && g[8] == 0
            && g[9] == 0
            && g[10] == 0xff
            && g[11] == 0xff
        {
            Some([g[12], g[13], g[14], g[15]])
        } else {
            None
        }
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some([a, b, c, d]) = self.ipv4() {
            return write!(f, "Gid(::ffff:{a}.{b}.{c}.{d})");
        }
        write!(f, "Gid(")?;
        for (i, w) in self.0.chunks_exact(2).enumerate() {
            let sep = if i == 0 { "" } else { ":" };
            write!(f, "{sep}{:x}", u16::from_be_bytes([w[0], w[1]]))?;
        }
        write!(f, ")")
    }
}

/// An Ethernet MAC address.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(transparent)]
pub struct Mac(pub [u8; 6]);

impl fmt::Debug for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.0;
        write!(
            f,
            "Mac({:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x})",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

/// Where a RoCE v2 packet goes: what an address handle holds (`ibv_ah_attr` with its
/// `ibv_global_route`, on Ethernet).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct RoceAddr {
    /// Destination GID.
    pub dgid: Gid,
    /// Destination MAC (of the peer, or of the next hop).
    pub dmac: Mac,
    /// Index of the source GID in the port's table.
    pub sgid_index: u8,
    /// UDP source port (flow entropy); 0 lets the backend choose.
    pub udp_sport: u16,
    /// IP hop limit (TTL).
    pub hop_limit: u8,
    /// IP traffic class (DSCP and ECN).
    pub traffic_class: u8,
    /// IPv6 flow label (20 bits).
    pub flow_label: u32,
    /// Service level (`ibv_ah_attr.sl`): on Ethernet, 3 bits of 802.1p priority reach the wire.
    pub sl: u8,
    /// Static rate limit, an `enum ibv_rate` value (`IBV_RATE_MAX` = 0: none).
    pub static_rate: u8,
}

/// The destination of a UD send (`ibv_send_wr.wr.ud`): address, QP and Q_Key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct UdDest {
    /// Where the datagram goes.
    pub addr: RoceAddr,
    /// The destination QP (1: the port's GSI QP).
    pub qpn: QpNum,
    /// The Q_Key the datagram carries (a value with bit 31 set means "the sending QP's").
    pub qkey: u32,
}

/// The Q_Key of general services management datagrams, which QP1 accepts (IBTA §13.4.6.1).
pub const GSI_QKEY: u32 = 0x8001_0000;
