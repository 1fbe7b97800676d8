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
