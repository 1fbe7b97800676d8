//! The inline payload writer: a request's bytes copied into its WQE after the inline header.

use rdma_pmd::{Error, Result, Source};

use super::{WqeSink, MAX_INLINE};
use crate::layout::codes::SEND_WQE_DS;
use crate::layout::wqe::INLINE_HEADER_LEN;

/// Total inline bytes of a request, refusing sums that overflow.
#[inline(always)]
pub(super) fn inline_len(source: &Source<'_, '_>) -> Result<usize> {
    source
        .total_len()
        .map(|l| l as usize)
        .ok_or(Error::InlineTooLarge { len: usize::MAX, max: MAX_INLINE as usize })
}

/// Streams inline payload into the ring as aligned 8-byte words.
///
/// The payload follows the 4-byte inline header, so its bytes sit 4 (or, after an odd
/// piece, any number) bytes into a ring word. The writer keeps the partial word in a
/// register as a little-endian `u64` (byte `i` of the word in bits `8i..8i + 8`) and merges
/// each 8-byte load of the payload into it with two shifts: no byte-by-byte copy and no
/// read of a word assembled in memory.
pub(super) struct InlineWriter<'s, S: WqeSink + ?Sized> {
    sink: &'s mut S,
    /// Ring offset (unwrapped) of the word `acc` will become.
    off: usize,
    /// The word being filled: its first `n` bytes (in memory order), zero above them.
    acc: u64,
    /// Bytes in `acc`, below 8.
    n: usize,
}

impl<'s, S: WqeSink + ?Sized> InlineWriter<'s, S> {
    /// A writer whose first word starts with the inline header at ring offset `off`.
    #[inline(always)]
    pub(super) fn new(sink: &'s mut S, off: usize, header: [u8; INLINE_HEADER_LEN]) -> Self {
        InlineWriter { sink, off, acc: u32::from_le_bytes(header) as u64, n: INLINE_HEADER_LEN }
    }

    /// Append the low `k` bytes of `w` (`1 <= k <= 8`; the bytes above them zero).
    #[inline(always)]
    fn put(&mut self, w: u64, k: usize) {
        debug_assert!(self.n < 8 && (1..=8).contains(&k));
        debug_assert!(k == 8 || w >> (8 * k) == 0);
        let shift = 8 * self.n as u32;
        self.acc |= w << shift;
        let filled = self.n + k;
        if filled >= 8 {
            self.sink.put8(self.off, self.acc.to_le_bytes());
            self.off += 8;
            // The bytes of `w` that did not fit; none when the word was empty (`shift`
            // 0: two shifts, so that no shift reaches 64).
            self.acc = (w >> (63 - shift)) >> 1;
            self.n = filled - 8;
        } else {
            self.n = filled;
        }
    }

    /// Append `bytes`.
    #[inline(always)]
    pub(super) fn push(&mut self, bytes: &[u8]) {
        let mut bytes = bytes;
        // The common case: the payload starts right after the 4-byte header (or after pieces
        // that left the word half full), the word being filled the first of a 16-byte unit.
        // Then every 16 bytes of payload make one whole unit, stored with one 16-byte store
        // (`put16`, the store every segment is written with), the shifts by a constant.
        const SHIFT: u32 = 8 * INLINE_HEADER_LEN as u32;
        if self.n == INLINE_HEADER_LEN && self.off.is_multiple_of(SEND_WQE_DS) {
            let mut units = bytes.chunks_exact(16);
            for u in &mut units {
                let (mut a, mut b) = ([0u8; 8], [0u8; 8]);
                a.copy_from_slice(&u[..8]);
                b.copy_from_slice(&u[8..]);
                let (a, b) = (u64::from_le_bytes(a), u64::from_le_bytes(b));
                let lo = self.acc | a << SHIFT;
                let hi = a >> (64 - SHIFT) | b << SHIFT;
                self.sink.put16(self.off, lo.to_le_bytes(), hi.to_le_bytes());
                self.off += SEND_WQE_DS;
                self.acc = b >> (64 - SHIFT);
            }
            bytes = units.remainder();
        }
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            self.put(u64::from_le_bytes(b), 8);
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            self.put(load_le_short(rest), rest.len());
        }
    }

    /// Zero-pad the last word and every word up to ring offset `end` (the WQE's `ds * 16`).
    #[inline]
    pub(super) fn finish(mut self, end: usize) {
        if self.n != 0 {
            self.sink.put8(self.off, self.acc.to_le_bytes());
            self.off += 8;
        }
        while self.off < end {
            self.sink.put8(self.off, [0; 8]);
            self.off += 8;
        }
    }
}

/// `b` (1 to 7 bytes) as a little-endian `u64`, zero above: a few overlapping loads rather
/// than a copy of variable length.
#[inline(always)]
pub(super) fn load_le_short(b: &[u8]) -> u64 {
    let n = b.len();
    debug_assert!((1..8).contains(&n));
    if n >= 4 {
        // Two 4-byte loads that overlap when `n < 8`; the overlap holds the same bytes.
        let lo = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64;
        let hi = u32::from_le_bytes([b[n - 4], b[n - 3], b[n - 2], b[n - 1]]) as u64;
        lo | hi << (8 * (n - 4))
    } else {
        // First, middle and last byte: for 1 to 3 bytes that is every byte.
        (b[0] as u64) | (b[n / 2] as u64) << (8 * (n / 2)) | (b[n - 1] as u64) << (8 * (n - 1))
    }
}
