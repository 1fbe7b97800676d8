//! The remote-address segment of an RDMA WRITE (bytes 16..32 of the WQE).
//!
//! Layout of `struct mlx5_wqe_raddr_seg` (rdma-core `infiniband/mlx5dv.h`, 16 bytes,
//! **big-endian**), filled by `providers/mlx5/qp.c` `set_raddr_seg`:
//!
//! | bytes | field | encoding |
//! |---|---|---|
//! | 0..8 | `raddr` | remote virtual address, big-endian |
//! | 8..12 | `rkey` | remote key, big-endian |
//! | 12..16 | `reserved` | written as 0 |

use rdma_pmd::{Error, Result, Rkey};

mod field {
    use core::ops::Range;
    pub const RADDR: Range<usize> = 0..8;
    pub const RKEY: Range<usize> = 8..12;
    pub const RESERVED: Range<usize> = 12..16;
}

/// Length of the segment in bytes.
pub const LEN: usize = 16;

/// A typed view of a remote-address segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaddrSeg<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> RaddrSeg<T> {
    /// Wrap a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Self {
        RaddrSeg { buffer }
    }

    /// Wrap a buffer of at least [`LEN`] bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let s = Self::new_unchecked(buffer);
        s.check_len()?;
        Ok(s)
    }

    /// Whether the buffer holds a whole segment.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < LEN {
            return Err(Error::InvalidArgument("buffer shorter than a raddr segment"));
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Remote address (bytes 0..8, big-endian).
    pub fn raddr(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.buffer.as_ref()[field::RADDR]);
        u64::from_be_bytes(b)
    }

    /// Remote key (bytes 8..12, big-endian).
    pub fn rkey(&self) -> Rkey {
        let mut b = [0u8; 4];
        b.copy_from_slice(&self.buffer.as_ref()[field::RKEY]);
        Rkey(u32::from_be_bytes(b))
    }

    /// The reserved word (bytes 12..16, big-endian); 0 in every WQE rdma-core writes.
    pub fn reserved(&self) -> u32 {
        let mut b = [0u8; 4];
        b.copy_from_slice(&self.buffer.as_ref()[field::RESERVED]);
        u32::from_be_bytes(b)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RaddrSeg<T> {
    /// Set the remote address (bytes 0..8, big-endian).
    pub fn set_raddr(&mut self, addr: u64) {
        self.buffer.as_mut()[field::RADDR].copy_from_slice(&addr.to_be_bytes());
    }

    /// Set the remote key (bytes 8..12, big-endian).
    pub fn set_rkey(&mut self, rkey: Rkey) {
        self.buffer.as_mut()[field::RKEY].copy_from_slice(&rkey.0.to_be_bytes());
    }

    /// Zero the reserved word (bytes 12..16).
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[field::RESERVED].fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::mlx5_wqe_raddr_seg as C;
    use core::mem::offset_of;

    #[test]
    fn field_table_matches_mlx5dv_h() {
        assert_eq!(offset_of!(C, raddr), field::RADDR.start);
        assert_eq!(offset_of!(C, rkey), field::RKEY.start);
        assert_eq!(offset_of!(C, reserved), field::RESERVED.start);
        assert_eq!(core::mem::size_of::<C>(), LEN);
    }

    #[test]
    fn parses_and_builds_the_public_vector_raddr() {
        // write_1sge_signaled, bytes 16..32.
        let b =
            [0x00, 0x00, 0x7f, 0x00, 0x11, 0x22, 0x33, 0x44, 0xa1, 0xb2, 0xc3, 0xd4, 0, 0, 0, 0];
        let r = RaddrSeg::new_checked(&b[..]).unwrap();
        assert_eq!(r.raddr(), 0x7f00_1122_3344);
        assert_eq!(r.rkey(), Rkey(0xa1b2_c3d4));
        assert_eq!(r.reserved(), 0);
        let mut out = [0x5au8; 16];
        let mut w = RaddrSeg::new_unchecked(&mut out[..]);
        w.set_raddr(0x7f00_1122_3344);
        w.set_rkey(Rkey(0xa1b2_c3d4));
        w.clear_reserved();
        assert_eq!(out, b);
    }
}
