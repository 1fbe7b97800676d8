//! The scatter-gather element.

use crate::addr::Lkey;

/// One scatter-gather element: `length` bytes at `addr` inside the region named by `lkey`.
///
/// Layout-identical to rdma-core's `struct ibv_sge` (`infiniband/verbs.h`: `uint64_t addr;
/// uint32_t length; uint32_t lkey;`, 16 bytes, host byte order), so a slice of them can be handed
/// to `ibv_post_send` or `rdma_post_writev` without copying. The compile-time assertions below
/// pin that layout; `drivers/rxe` checks it again against the C header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(C)]
pub struct Sge {
    /// Address in the memory key's address space (a virtual address for verbs MRs).
    pub addr: u64,
    /// Length in bytes. Zero is allowed: the element is then skipped.
    pub length: u32,
    /// The local key of the registered region holding the bytes.
    pub lkey: Lkey,
}

impl Sge {
    /// An element of `length` bytes at `addr` under `lkey`.
    pub const fn new(addr: u64, length: u32, lkey: Lkey) -> Self {
        Self { addr, length, lkey }
    }
}

const _: () = {
    assert!(core::mem::size_of::<Sge>() == 16);
    assert!(core::mem::align_of::<Sge>() == 8);
};

#[cfg(test)]
mod tests {
    use super::*;
    use memoffset::span_of;

    #[test]
    fn layout_matches_ibv_sge() {
        // struct ibv_sge { uint64_t addr; uint32_t length; uint32_t lkey; }
        assert_eq!(span_of!(Sge, addr), 0..8);
        assert_eq!(span_of!(Sge, length), 8..12);
        assert_eq!(span_of!(Sge, lkey), 12..16);
    }
}
