//! A ring of fixed-size entries in device-visible memory, indexed by a free-running counter.
//!
//! A completion queue is read at `(counter & mask) * stride + field` on every poll. Through
//! [`DmaBuf`] each such read is bounds-checked, although the ring's geometry never changes:
//! [`DmaRing`] checks once, when it is made, that `2^log` entries of `STRIDE` bytes lie inside
//! its block, and from then on an index is masked into the ring and a field's place in the
//! entry is a constant checked at compile time, so no access can leave the block and none
//! needs a run-time check.

use crate::access;
use crate::dma::DmaBuf;
use crate::error::HalError;

/// `2^log` entries of `STRIDE` bytes at the start of a [`DmaBuf`] it owns; entry `i` is the one
/// at `i & (2^log - 1)`. Accesses are relaxed atomics through [`crate::access`], as with
/// `DmaBuf`, and ordering is the caller's, with [`crate::barrier`].
#[derive(Debug)]
pub struct DmaRing<const STRIDE: usize> {
    buf: DmaBuf,
    /// `2^log - 1`.
    mask: u32,
}

impl<const STRIDE: usize> DmaRing<STRIDE> {
    /// The entries of `buf`, which must hold `2^log` of them, with its CPU address aligned to
    /// 8 bytes (every [`crate::Dma`] block aligned to 8 or more is).
    pub fn new(buf: DmaBuf, log: u8) -> Result<Self, (DmaBuf, HalError)> {
        const { assert!(STRIDE != 0 && STRIDE.is_multiple_of(8), "entries of whole words") };
        let fits = log < 32
            && (STRIDE as u64) << log <= buf.len() as u64
            && (buf.cpu().as_ptr() as usize).is_multiple_of(8);
        if !fits {
            let (len, align) = (buf.len(), 8);
            return Err((buf, HalError::BadLayout { len, align }));
        }
        let mask = ((1u64 << log) - 1) as u32;
        Ok(DmaRing { buf, mask })
    }

    /// The number of entries.
    pub fn entries(&self) -> u32 {
        self.mask + 1
    }

    /// The block the entries live in.
    pub fn buf(&self) -> &DmaBuf {
        &self.buf
    }

    /// The block back, to be freed.
    pub fn into_buf(self) -> DmaBuf {
        self.buf
    }

    /// The address of word `AT / 8` of entry `idx` (masked into the ring).
    #[inline(always)]
    fn word<const AT: usize>(&self, idx: u32) -> *mut u64 {
        const { assert!(AT.is_multiple_of(8) && AT + 8 <= STRIDE, "a word inside the entry") };
        let off = (idx & self.mask) as usize * STRIDE + AT;
        self.buf.cpu().as_ptr().wrapping_add(off).cast()
    }

    /// One relaxed atomic 64-bit load (native order) of the word at byte `AT` of entry `idx`.
    #[inline(always)]
    pub fn load_u64<const AT: usize>(&self, idx: u32) -> u64 {
        // SAFETY: `idx & mask` is below the entry count and `AT + 8 <= STRIDE`, and `new`
        // checked that every entry lies inside the block, whose CPU address is 8-aligned, as
        // `STRIDE` and `AT` are; the block is valid for reads and every access to it is atomic
        // (as in `DmaBuf::read_u32`).
        unsafe { access::load_u64(self.word::<AT>(idx)) }
    }

    /// `K` relaxed atomic 64-bit loads (native order) of consecutive words of entry `idx`, from
    /// byte `AT`, in ascending order.
    #[inline(always)]
    pub fn load_u64s<const AT: usize, const K: usize>(&self, idx: u32) -> [u64; K] {
        const { assert!(K != 0 && AT + 8 * K <= STRIDE, "words inside the entry") };
        let p = self.word::<AT>(idx);
        // SAFETY: as in `load_u64`; the `K` words from `AT` lie inside entry `idx & mask`
        // (checked at compile time above).
        core::array::from_fn(|k| unsafe { access::load_u64(p.add(k)) })
    }

    /// One relaxed atomic 64-bit store (native order) to the word at byte `AT` of entry `idx`.
    #[inline(always)]
    pub fn store_u64<const AT: usize>(&self, idx: u32, v: u64) {
        // SAFETY: as in `load_u64`, for writes.
        unsafe { access::store_u64(self.word::<AT>(idx), v) }
    }
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;
    use crate::mem::HeapDma;
    use crate::Dma;

    #[test]
    fn refuses_a_block_too_small_for_its_entries() {
        let dma = HeapDma::new();
        let buf = dma.alloc(3 * 64, 64).unwrap();
        let (buf, e) = DmaRing::<64>::new(buf, 2).unwrap_err();
        assert!(matches!(e, HalError::BadLayout { len: 192, .. }));
        let ring = DmaRing::<64>::new(buf, 1).unwrap();
        assert_eq!(ring.entries(), 2);
        // SAFETY: no device.
        unsafe { dma.free(ring.into_buf()) };
        let buf = dma.alloc(64, 64).unwrap();
        let (buf, _) = DmaRing::<64>::new(buf, 32).unwrap_err();
        // SAFETY: no device.
        unsafe { dma.free(buf) };
    }

    #[test]
    fn an_index_wraps_into_the_ring_and_a_field_is_at_its_offset() {
        let dma = HeapDma::new();
        let ring = DmaRing::<64>::new(dma.alloc(4 * 64, 64).unwrap(), 2).unwrap();
        for i in 0..4u32 {
            ring.store_u64::<56>(i, 0x100 + i as u64);
        }
        // Entry 5 is entry 1; its last word is at byte 64 + 56 of the block.
        assert_eq!(ring.load_u64::<56>(5), 0x101);
        assert_eq!(ring.buf().read_u64(64 + 56), 0x101);
        ring.buf().write_u64(3 * 64 + 40, 7);
        ring.buf().write_u64(3 * 64 + 48, 8);
        assert_eq!(ring.load_u64s::<40, 3>(u32::MAX), [7, 8, 0x103]);
        // SAFETY: no device.
        unsafe { dma.free(ring.into_buf()) };
        assert_eq!(dma.live_blocks(), 0);
    }
}
