//! Ring arithmetic on free-running counters.
//!
//! Hardware rings (send queues, completion queues) are power-of-two arrays indexed by counters
//! that only ever increase and wrap at their integer width. The slot is the counter masked by the
//! ring size; occupancy is the wrapping difference of producer and consumer; the owner/lap parity
//! is the counter's bit just above the slot bits. Keeping the counters free-running (never reduced
//! modulo the ring size) is what lets a full ring be told from an empty one.

use crate::error::{Error, Result};

/// The geometry of a power-of-two ring of `size` slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ring {
    log_size: u8,
}

impl Ring {
    /// Largest supported ring: 2^24 slots (mlx5 CQ/QP sizes are well below).
    pub const MAX_LOG_SIZE: u8 = 24;

    /// A ring of `size` slots; `size` must be a power of two in `1..=2^24`.
    pub const fn new(size: u32) -> Result<Self> {
        if size == 0 || !size.is_power_of_two() || size > (1 << Self::MAX_LOG_SIZE) {
            return Err(Error::InvalidArgument("ring size must be a power of two up to 2^24"));
        }
        Ok(Ring { log_size: size.trailing_zeros() as u8 })
    }

    /// A ring of `2^log_size` slots.
    pub const fn with_log_size(log_size: u8) -> Result<Self> {
        if log_size > Self::MAX_LOG_SIZE {
            return Err(Error::InvalidArgument("ring log size above 24"));
        }
        Ok(Ring { log_size })
    }

    /// Number of slots.
    #[inline]
    pub const fn size(self) -> u32 {
        1 << self.log_size
    }

    /// log2 of the number of slots.
    #[inline]
    pub const fn log_size(self) -> u8 {
        self.log_size
    }

    /// Mask that turns a counter into a slot index.
    #[inline]
    pub const fn mask(self) -> u32 {
        self.size() - 1
    }

    /// The slot a free-running counter points at.
    #[inline]
    pub const fn slot(self, counter: u32) -> u32 {
        counter & self.mask()
    }

    /// Slots in use between a consumer and a producer counter of the same width `bits`
    /// (16 for the mlx5 WQE counter, 32 for plain counters).
    #[inline]
    pub const fn used(self, producer: u32, consumer: u32, bits: u32) -> u32 {
        wrapping_diff(producer, consumer, bits)
    }

    /// Free slots, given producer and consumer counters of width `bits`.
    #[inline]
    pub const fn free(self, producer: u32, consumer: u32, bits: u32) -> u32 {
        self.size().saturating_sub(self.used(producer, consumer, bits))
    }

    /// The lap parity of a counter: flips every time the counter passes the end of the ring.
    /// This is the software-ownership bit mlx5 CQEs are checked against.
    #[inline]
    pub const fn parity(self, counter: u32) -> bool {
        counter & self.size() != 0
    }

    /// Slots from `counter`'s slot to the end of the ring (how far a contiguous copy may go).
    #[inline]
    pub const fn till_end(self, counter: u32) -> u32 {
        self.size() - self.slot(counter)
    }
}

/// `a - b` for counters that wrap at `bits` bits (1..=32).
#[inline]
pub const fn wrapping_diff(a: u32, b: u32, bits: u32) -> u32 {
    let mask = if bits >= 32 { u32::MAX } else { (1u32 << bits) - 1 };
    a.wrapping_sub(b) & mask
}

/// Round `n` up to a multiple of `align` (a power of two).
#[inline]
pub const fn align_up(n: usize, align: usize) -> usize {
    (n + align - 1) & !(align - 1)
}

/// `ceil(n / d)` for `d > 0`.
#[inline]
pub const fn div_ceil(n: usize, d: usize) -> usize {
    n.div_ceil(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry() {
        let r = Ring::new(64).unwrap();
        assert_eq!(r.mask(), 63);
        assert_eq!(r.slot(0xffff), 63);
        assert_eq!(r.slot(0x10000), 0);
        assert!(Ring::new(0).is_err());
        assert!(Ring::new(48).is_err());
        assert!(Ring::new(1 << 25).is_err());
        assert_eq!(r.till_end(62), 2);
    }

    #[test]
    fn sixteen_bit_counters_wrap() {
        let r = Ring::new(64).unwrap();
        // producer wrapped past 0xffff, consumer not yet
        assert_eq!(r.used(2, 0xfffe, 16), 4);
        assert_eq!(r.free(2, 0xfffe, 16), 60);
        assert_eq!(r.used(10, 10, 16), 0);
        assert_eq!(wrapping_diff(0, u32::MAX, 32), 1);
    }

    #[test]
    fn parity_flips_each_lap() {
        let r = Ring::new(256).unwrap();
        assert!(!r.parity(5));
        assert!(r.parity(256 + 5));
        assert!(!r.parity(512 + 5));
    }

    #[test]
    fn alignment_helpers() {
        assert_eq!(align_up(48, 64), 64);
        assert_eq!(align_up(64, 64), 64);
        assert_eq!(div_ceil(4 + 20, 16), 2);
        assert_eq!(div_ceil(0, 16), 0);
    }
}
