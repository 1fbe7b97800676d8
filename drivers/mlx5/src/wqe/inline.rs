//! The inline data segment: payload bytes carried inside the WQE itself.
//!
//! rdma-core's provider writes it as `struct mlx5_wqe_inline_seg { __be32 byte_count; }`
//! (`providers/mlx5/wqe.h`) followed by the payload (`qp.c` `set_data_inl_seg`). mlx5dv.h's own
//! `struct mlx5_wqe_inl_data_seg` declares the count as a host `uint32_t`, but the value is
//! **big-endian** on the wire:
//!
//! | bytes | field | encoding |
//! |---|---|---|
//! | 0..4 | `byte_count` | `len \| MLX5_INLINE_SEG` (bit 31), big-endian |
//! | 4..4+len | payload | the bytes, in order; padded to a 16-byte multiple (padding is don't-care) |
//!
//! The segment occupies `ceil((4 + len) / 16)` `ds` units; with `len == 0` the provider writes
//! no segment at all (0 units). In a ring, payload that reaches the end of a 64-byte block simply
//! continues in the next block's slot (which may be slot 0 after the ring's end).

use rdma_pmd::{Error, Result};

use crate::opcode::{INLINE_SEG, SEND_WQE_DS};

mod field {
    use core::ops::Range;
    pub const BYTE_COUNT: Range<usize> = 0..4;
    pub const PAYLOAD: usize = 4;
}

/// Length of the segment header in bytes.
pub const HEADER_LEN: usize = 4;

/// `ds` units an inline payload of `len` bytes occupies (0 for an empty payload).
#[inline]
pub const fn ds_units(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        (HEADER_LEN + len).div_ceil(SEND_WQE_DS)
    }
}

/// A typed view of an inline segment (header and payload) laid out contiguously.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InlineSeg<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> InlineSeg<T> {
    /// Wrap a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Self {
        InlineSeg { buffer }
    }

    /// Wrap a buffer that holds the header and the whole payload it announces.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let s = Self::new_unchecked(buffer);
        s.check_len()?;
        Ok(s)
    }

    /// Whether the buffer holds the header and the payload it announces.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN || b.len() < HEADER_LEN + self.len() {
            return Err(Error::InvalidArgument("buffer shorter than its inline segment"));
        }
        Ok(())
    }

    /// The raw `byte_count` word (bytes 0..4, big-endian), flag included.
    pub fn byte_count(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::BYTE_COUNT];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Whether the `MLX5_INLINE_SEG` flag (bit 31 of `byte_count`) is set.
    pub fn is_inline(&self) -> bool {
        self.byte_count() & INLINE_SEG != 0
    }

    /// Payload length in bytes (`byte_count` without the flag).
    pub fn len(&self) -> usize {
        (self.byte_count() & !INLINE_SEG) as usize
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The payload bytes.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..field::PAYLOAD + self.len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> InlineSeg<T> {
    /// Set the header for `len` payload bytes (bytes 0..4, big-endian, flag set).
    pub fn set_len(&mut self, len: u32) {
        self.buffer.as_mut()[field::BYTE_COUNT].copy_from_slice(&(len | INLINE_SEG).to_be_bytes());
    }

    /// The payload bytes, for writing (length as announced by the header).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = self.len();
        &mut self.buffer.as_mut()[field::PAYLOAD..field::PAYLOAD + len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_builds_the_public_vector_inline() {
        // write_inline_20, bytes 32..56.
        let mut b = [0u8; 24];
        b[..4].copy_from_slice(&[0x80, 0x00, 0x00, 0x14]);
        for (k, x) in b[4..].iter_mut().enumerate() {
            *x = 0x30 + k as u8;
        }
        let s = InlineSeg::new_checked(&b[..]).unwrap();
        assert!(s.is_inline());
        assert_eq!(s.len(), 20);
        assert_eq!(s.payload()[0], 0x30);
        assert_eq!(ds_units(20), 2);
        let mut out = [0u8; 24];
        let mut w = InlineSeg::new_unchecked(&mut out[..]);
        w.set_len(20);
        w.payload_mut().copy_from_slice(&b[4..]);
        assert_eq!(out, b);
        assert!(InlineSeg::new_checked(&b[..23]).is_err());
    }

    #[test]
    fn ds_units_follow_set_data_inl_seg() {
        assert_eq!(ds_units(0), 0);
        assert_eq!(ds_units(1), 1);
        assert_eq!(ds_units(12), 1);
        assert_eq!(ds_units(13), 2);
        assert_eq!(ds_units(220), 14);
    }
}
