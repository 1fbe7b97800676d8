//! Bit fields of CM MADs, in the notation of the IBTA tables (vol. 1 ch. 12).
//!
//! The kernel's `include/rdma/ibta_vol1_c12.h` names every CM field by its byte offset within
//! the message (after the 24-byte MAD header), its bit offset in the table's `Byte[Bit]`
//! notation (bit 0 is the most significant bit of the byte) and its width. A [`Field`] holds
//! exactly those three numbers, measured from the start of the MAD, and [`get`]/[`set`] walk
//! the bits most significant first: every field is big-endian, including those that cross a
//! byte (a 24-bit QPN, a 20-bit flow label) or sit only 4-byte aligned (the REP's CA GUID).

/// Bytes in the MAD common header (`IB_MGMT_MAD_HDR`, `include/rdma/ib_mad.h`): CM offsets
/// in `ibta_vol1_c12.h` count from its end.
pub const MAD_HDR_LEN: usize = 24;

/// A field: `width` bits starting at bit `bit` (0 = most significant) of byte `byte` of the
/// MAD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// Byte offset from the start of the MAD.
    pub byte: usize,
    /// First bit within that byte, 0 being the most significant.
    pub bit: u8,
    /// Width in bits, 1 to 64.
    pub width: u8,
}

impl Field {
    /// A field at CM offset `byte` (after the MAD header), as `ibta_vol1_c12.h` writes it.
    pub const fn cm(byte: usize, bit: u8, width: u8) -> Field {
        Field { byte: byte + MAD_HDR_LEN, bit, width }
    }

    /// One past the last byte the field touches.
    pub const fn end(self) -> usize {
        (self.byte * 8 + self.bit as usize + self.width as usize).div_ceil(8)
    }
}

/// The value of `f` in `buf`, or 0 where `buf` is too short (views check their length first,
/// so this only guards against misuse).
pub fn get(buf: &[u8], f: Field) -> u64 {
    if buf.len() < f.end() {
        return 0;
    }
    let start = f.byte * 8 + f.bit as usize;
    let mut v = 0u64;
    for i in start..start + f.width as usize {
        let bit = (buf[i / 8] >> (7 - i % 8)) & 1;
        v = (v << 1) | bit as u64;
    }
    v
}

/// Store the low `f.width` bits of `v` into `f` in `buf`, leaving every other bit as it was
/// (nothing is written where `buf` is too short).
pub fn set(buf: &mut [u8], f: Field, v: u64) {
    if buf.len() < f.end() {
        return;
    }
    let start = f.byte * 8 + f.bit as usize;
    let w = f.width as usize;
    for k in 0..w {
        let i = start + k;
        let bit = ((v >> (w - 1 - k)) & 1) as u8;
        let mask = 1u8 << (7 - i % 8);
        buf[i / 8] = (buf[i / 8] & !mask) | (bit * mask);
    }
}
