//! The data (pointer) segment: one scatter-gather element of a send WQE.
//!
//! Layout of `struct mlx5_wqe_data_seg` (rdma-core `infiniband/mlx5dv.h`, 16 bytes,
//! **big-endian**), filled by `mlx5dv_set_data_seg` and `providers/mlx5/qp.c`
//! `set_data_ptr_seg`:
//!
//! | bytes | field | encoding |
//! |---|---|---|
//! | 0..4 | `byte_count` | length in bytes, big-endian |
//! | 4..8 | `lkey` | local key, big-endian |
//! | 8..16 | `addr` | address in the key's space, big-endian |

use rdma_pmd::{Error, Lkey, Result, Sge};

mod field {
    use core::ops::Range;
    pub const BYTE_COUNT: Range<usize> = 0..4;
    pub const LKEY: Range<usize> = 4..8;
    pub const ADDR: Range<usize> = 8..16;
}

/// Length of the segment in bytes (one `ds` unit).
pub const LEN: usize = 16;

/// A typed view of a data segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataSeg<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> DataSeg<T> {
    /// Wrap a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Self {
        DataSeg { buffer }
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
            return Err(Error::InvalidArgument("buffer shorter than a data segment"));
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn be32(&self, r: core::ops::Range<usize>) -> u32 {
        let b = &self.buffer.as_ref()[r];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Byte count (bytes 0..4, big-endian).
    pub fn byte_count(&self) -> u32 {
        self.be32(field::BYTE_COUNT)
    }

    /// Local key (bytes 4..8, big-endian).
    pub fn lkey(&self) -> Lkey {
        Lkey(self.be32(field::LKEY))
    }

    /// Address (bytes 8..16, big-endian).
    pub fn addr(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.buffer.as_ref()[field::ADDR]);
        u64::from_be_bytes(b)
    }

    /// The element this segment describes.
    pub fn sge(&self) -> Sge {
        Sge::new(self.addr(), self.byte_count(), self.lkey())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DataSeg<T> {
    /// Set byte count (bytes 0..4), lkey (4..8) and address (8..16), all big-endian.
    pub fn set_sge(&mut self, sge: &Sge) {
        let b = self.buffer.as_mut();
        b[field::BYTE_COUNT].copy_from_slice(&sge.length.to_be_bytes());
        b[field::LKEY].copy_from_slice(&sge.lkey.0.to_be_bytes());
        b[field::ADDR].copy_from_slice(&sge.addr.to_be_bytes());
    }
}

/// The two 8-byte words of a data segment in memory order: what the WQE builder stores.
#[inline(always)]
pub(crate) fn words(sge: &Sge) -> ([u8; 8], [u8; 8]) {
    let w0 = ((sge.length as u64) << 32 | sge.lkey.0 as u64).to_be_bytes();
    (w0, sge.addr.to_be_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::mlx5_wqe_data_seg as C;
    use core::mem::offset_of;

    #[test]
    fn field_table_matches_mlx5dv_h() {
        assert_eq!(offset_of!(C, byte_count), field::BYTE_COUNT.start);
        assert_eq!(offset_of!(C, lkey), field::LKEY.start);
        assert_eq!(offset_of!(C, addr), field::ADDR.start);
        assert_eq!(core::mem::size_of::<C>(), LEN);
    }

    #[test]
    fn parses_and_builds_the_public_vector_data_seg() {
        // write_1sge_signaled, bytes 32..48 (mlx5dv_set_data_seg).
        let b = [
            0x00, 0x00, 0x10, 0x00, 0x11, 0x22, 0x33, 0x44, 0x00, 0x00, 0x7f, 0xab, 0xcd, 0xef,
            0x00, 0x00,
        ];
        let d = DataSeg::new_checked(&b[..]).unwrap();
        let sge = Sge::new(0x7fab_cdef_0000, 4096, Lkey(0x1122_3344));
        assert_eq!(d.sge(), sge);
        let mut out = [0xeeu8; 16];
        DataSeg::new_unchecked(&mut out[..]).set_sge(&sge);
        assert_eq!(out, b);
        let (w0, w1) = words(&sge);
        assert_eq!(w0, b[..8]);
        assert_eq!(w1, b[8..]);
    }
}
