//! Firmware command layouts: fields addressed by (bit offset, width) over big-endian bytes.
//!
//! The PRM, and the kernel's `include/linux/mlx5/mlx5_ifc.h` that transcribes it, describe every
//! command and context as a sequence of bit fields numbered from the most significant bit of
//! byte 0: a field at bit offset `o` of width `w` occupies bits `o .. o + w` of the big-endian
//! bit stream, so its most significant bit is bit `7 - o % 8` of byte `o / 8`. That is what the
//! kernel's `MLX5_SET`/`MLX5_GET` compute, one 32-bit big-endian word at a time.
//!
//! [`generated`] holds the offsets, produced mechanically from the header by `cargo xtask ifc`
//! (and checked against it by the `ifc_header` test). [`get`] and [`set`] read and write any
//! field up to 64 bits wide; nested layouts compose with [`Field::within`] and arrays with
//! [`Field::at`].

#[rustfmt::skip]
pub mod generated;

pub use generated::consts;

/// A field of a firmware layout: `width` bits starting `bit` bits from the start (PRM order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Field {
    /// Offset in bits from the most significant bit of byte 0.
    pub bit: u32,
    /// Width in bits.
    pub width: u32,
}

impl Field {
    /// A field at bit `bit`, `width` bits wide.
    pub const fn new(bit: u32, width: u32) -> Self {
        Field { bit, width }
    }

    /// This field of a layout that is nested at `outer` (e.g. `qpc::PD.within(create_qp_in::QPC)`).
    pub const fn within(self, outer: Field) -> Self {
        Field { bit: outer.bit + self.bit, width: self.width }
    }

    /// Element `i` of an array whose element 0 is `self`.
    pub const fn at(self, i: u32) -> Self {
        Field { bit: self.bit + i * self.width, width: self.width }
    }

    /// First byte of the field (for byte-aligned fields).
    pub const fn byte(self) -> usize {
        (self.bit / 8) as usize
    }

    /// Byte range of a byte-aligned field.
    pub const fn bytes(self) -> core::ops::Range<usize> {
        self.byte()..((self.bit + self.width) / 8) as usize
    }

    /// The largest value the field holds.
    pub const fn max(self) -> u64 {
        if self.width >= 64 {
            u64::MAX
        } else {
            (1u64 << self.width) - 1
        }
    }
}

/// Read field `f` (at most 64 bits) from the big-endian layout in `buf`.
///
/// Panics if the field lies outside `buf` or is wider than 64 bits.
pub fn get(buf: &[u8], f: Field) -> u64 {
    assert!(f.width <= 64, "field of {} bits", f.width);
    let mut v = 0u64;
    let mut bit = f.bit as usize;
    let end = bit + f.width as usize;
    while bit < end {
        let byte = buf[bit / 8];
        let shift_in_byte = bit % 8;
        let take = (8 - shift_in_byte).min(end - bit);
        let chunk = (byte >> (8 - shift_in_byte - take)) & ((1u16 << take) - 1) as u8;
        v = (v << take) | chunk as u64;
        bit += take;
    }
    v
}

/// Write `value` into field `f` of the big-endian layout in `buf`, leaving other bits alone.
///
/// Panics if the field lies outside `buf`, is wider than 64 bits, or `value` does not fit (a
/// truncated command field is a driver bug, never something to send to firmware).
pub fn set(buf: &mut [u8], f: Field, value: u64) {
    assert!(f.width <= 64, "field of {} bits", f.width);
    assert!(value <= f.max(), "value {value:#x} does not fit a {}-bit field", f.width);
    let mut bit = f.bit as usize;
    let end = bit + f.width as usize;
    while bit < end {
        let shift_in_byte = bit % 8;
        let take = (8 - shift_in_byte).min(end - bit);
        let remaining_after = end - bit - take;
        let chunk = ((value >> remaining_after) & ((1u64 << take) - 1)) as u8;
        let pos = 8 - shift_in_byte - take;
        let mask = (((1u16 << take) - 1) as u8) << pos;
        let b = &mut buf[bit / 8];
        *b = (*b & !mask) | (chunk << pos);
        bit += take;
    }
}

/// Copy `bytes` into a byte-aligned field (GIDs, MACs).
pub fn set_bytes(buf: &mut [u8], f: Field, bytes: &[u8]) {
    assert!(f.bit.is_multiple_of(8) && f.width as usize == bytes.len() * 8, "byte field mismatch");
    buf[f.bytes()].copy_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::generated::{create_qp_in, qpc};
    use super::*;

    #[test]
    fn get_and_set_follow_mlx5_set_bit_order() {
        // MLX5_SET(qpc, qpc, pd, 0xabcdef): qpc dword 1 holds `... drain_sigerr[1] pd[24]`, so
        // the PD lands in bytes 5..8 of the context, big-endian.
        let mut b = [0u8; qpc::SIZE];
        set(&mut b, qpc::PD, 0xab_cdef);
        assert_eq!(&b[4..8], &[0x00, 0xab, 0xcd, 0xef]);
        assert_eq!(get(&b, qpc::PD), 0xab_cdef);
        // A 4-bit field at the top of dword 0 (state) and a 2-bit field mid-byte (pm_state).
        set(&mut b, qpc::STATE, 0xa);
        assert_eq!(b[0], 0xa0);
        set(&mut b, qpc::PM_STATE, 3);
        // pm_state sits at bits 0x13..0x15 (after reserved_at_10[2] and isolate_vl_tc[1]):
        // byte 2, bits 4..3.
        assert_eq!(b[2], 0b0001_1000);
        assert_eq!(get(&b, qpc::PM_STATE), 3);
        assert_eq!(get(&b, qpc::STATE), 0xa);
        assert_eq!(get(&b, qpc::PD), 0xab_cdef);
    }

    #[test]
    fn sixty_four_bit_fields_and_neighbours_survive() {
        let mut b = [0xffu8; qpc::SIZE];
        set(&mut b, qpc::DBR_ADDR, 0x0102_0304_0506_0708);
        let o = qpc::DBR_ADDR.byte();
        assert_eq!(&b[o..o + 8], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(b[o - 1], 0xff);
        assert_eq!(b[o + 8], 0xff);
        assert_eq!(get(&b, qpc::DBR_ADDR), 0x0102_0304_0506_0708);
    }

    #[test]
    fn nested_and_array_fields_compose() {
        // create_qp_in.qpc starts at byte 0x18, after six header dwords.
        assert_eq!(create_qp_in::QPC.byte(), 0x18);
        let pd = qpc::PD.within(create_qp_in::QPC);
        assert_eq!(pd.bit, 0x18 * 8 + 0x28);
        // pas[] follows the 0x110-byte fixed part; element 2 is 16 bytes further.
        assert_eq!(create_qp_in::PAS.at(2).byte(), 0x110 + 16);
    }

    #[test]
    #[should_panic(expected = "does not fit")]
    fn oversized_values_are_refused() {
        let mut b = [0u8; qpc::SIZE];
        set(&mut b, qpc::LOG_SQ_SIZE, 16);
    }
}

#[cfg(test)]
mod prop {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any field of up to 64 bits round-trips and leaves every other bit alone.
        #[test]
        fn set_then_get_round_trips(
            bit in 0u32..448,
            width in 1u32..=64,
            value: u64,
            fill: u8,
        ) {
            let f = Field::new(bit, width);
            let v = value & f.max();
            let mut buf = [fill; 64];
            let before = buf;
            set(&mut buf, f, v);
            prop_assert_eq!(get(&buf, f), v);
            for b in 0..512u32 {
                if b < bit || b >= bit + width {
                    let mask = 0x80u8 >> (b % 8);
                    prop_assert_eq!(buf[(b / 8) as usize] & mask, before[(b / 8) as usize] & mask);
                }
            }
        }

        /// Dword-contained fields agree with the kernel's MLX5_SET arithmetic: dword
        /// `bit / 32`, shift `32 - width - bit % 32`, big-endian.
        #[test]
        fn matches_mlx5_set_within_a_dword(dw in 0u32..8, lo in 0u32..32, width in 1u32..=32, value: u32) {
            prop_assume!(lo + width <= 32);
            let f = Field::new(dw * 32 + lo, width);
            let v = (value as u64) & f.max();
            let mut buf = [0u8; 32];
            set(&mut buf, f, v);
            let word = u32::from_be_bytes(buf[(dw * 4) as usize..(dw * 4 + 4) as usize].try_into().unwrap());
            let shift = 32 - width - lo;
            prop_assert_eq!(word as u64, v << shift);
        }
    }
}
