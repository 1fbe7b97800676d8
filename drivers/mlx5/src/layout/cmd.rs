//! The two structures of the command interface, as typed views over bytes (big-endian).
//!
//! * [`Entry`]: one 64-byte command queue entry, `struct mlx5_cmd_layout` of the kernel's
//!   `include/linux/mlx5/device.h` (PRM "Command Queue Entry"):
//!
//! | bytes | field |
//! |---|---|
//! | 0 | `type` (7: PCIe command transport) |
//! | 4..8 | `inlen` |
//! | 8..16 | `in_ptr` (first input mailbox) |
//! | 16..32 | `in[4]`: the first 16 input bytes |
//! | 32..48 | `out[4]`: the first 16 output bytes |
//! | 48..56 | `out_ptr` (first output mailbox) |
//! | 56..60 | `outlen` |
//! | 60 | `token` |
//! | 61 | `sig` |
//! | 63 | `status_own`: `[7:1]` delivery status, `[0]` ownership (1: hardware) |
//!
//! * [`Block`]: one 576-byte mailbox, `struct mlx5_cmd_prot_block`: 512 data bytes, `next`
//!   (bus address of the next block) at 560, `block_num` at 568, `token` at 573, `ctrl_sig` at
//!   574, `sig` at 575.

use super::{be, view};

/// Size of a command queue entry.
pub const ENTRY_SIZE: usize = 64;
/// Bytes of input (and of output) carried inline in the entry.
pub const INLINE: usize = 16;
/// Data bytes per mailbox block (`MLX5_CMD_DATA_BLOCK_SIZE`).
pub const BLOCK_DATA: usize = 512;
/// Size of a mailbox block (`sizeof(struct mlx5_cmd_prot_block)`).
pub const BLOCK_SIZE: usize = 576;
/// Spacing of blocks in memory: the kernel's pool rounds 576 up to a power of two, which also
/// keeps each block's bus address aligned as `next`/`in_ptr` require.
pub const BLOCK_STRIDE: usize = 1024;
/// `MLX5_PCI_CMD_XPORT`.
pub const CMD_TYPE_PCI: u8 = 7;
/// Ownership bit of `status_own`: set while hardware owns the entry (`CMD_OWNER_HW`).
pub const OWNER_HW: u8 = 0x1;

mod entry {
    use core::ops::Range;
    pub const TYPE: usize = 0;
    pub const INLEN: usize = 4;
    pub const IN_PTR: usize = 8;
    pub const IN: Range<usize> = 16..32;
    pub const OUT: Range<usize> = 32..48;
    pub const OUT_PTR: usize = 48;
    pub const OUTLEN: usize = 56;
    pub const TOKEN: usize = 60;
    pub const SIG: usize = 61;
    pub const STATUS_OWN: usize = 63;
}

mod block {
    use core::ops::Range;
    pub const DATA: Range<usize> = 0..512;
    pub const NEXT: usize = 560;
    pub const BLOCK_NUM: usize = 568;
    pub const TOKEN: usize = 573;
    pub const CTRL_SIG: usize = 574;
    pub const SIG: usize = 575;
}

view!(
    /// A command queue entry.
    Entry,
    ENTRY_SIZE,
    "a command queue entry"
);

impl<T: AsRef<[u8]>> Entry<T> {
    /// `type` (byte 0).
    pub fn cmd_type(&self) -> u8 {
        self.as_bytes()[entry::TYPE]
    }
    /// `inlen`, big-endian.
    pub fn inlen(&self) -> u32 {
        be::get32(self.as_bytes(), entry::INLEN)
    }
    /// `in_ptr`, big-endian.
    pub fn in_ptr(&self) -> u64 {
        be::get64(self.as_bytes(), entry::IN_PTR)
    }
    /// The 16 inline input bytes.
    pub fn inline_in(&self) -> &[u8] {
        &self.as_bytes()[entry::IN]
    }
    /// The 16 inline output bytes.
    pub fn inline_out(&self) -> &[u8] {
        &self.as_bytes()[entry::OUT]
    }
    /// `out_ptr`, big-endian.
    pub fn out_ptr(&self) -> u64 {
        be::get64(self.as_bytes(), entry::OUT_PTR)
    }
    /// `outlen`, big-endian.
    pub fn outlen(&self) -> u32 {
        be::get32(self.as_bytes(), entry::OUTLEN)
    }
    /// `token`.
    pub fn token(&self) -> u8 {
        self.as_bytes()[entry::TOKEN]
    }
    /// `sig`.
    pub fn sig(&self) -> u8 {
        self.as_bytes()[entry::SIG]
    }
    /// Whether hardware owns the entry (`status_own[0]`).
    pub fn hw_owned(&self) -> bool {
        self.as_bytes()[entry::STATUS_OWN] & OWNER_HW != 0
    }
    /// Delivery status (`status_own[7:1]`).
    pub fn delivery_status(&self) -> u8 {
        self.as_bytes()[entry::STATUS_OWN] >> 1
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Entry<T> {
    /// Set `type`.
    pub fn set_cmd_type(&mut self, v: u8) {
        self.as_bytes_mut()[entry::TYPE] = v;
    }
    /// Set `inlen`.
    pub fn set_inlen(&mut self, v: u32) {
        be::set32(self.as_bytes_mut(), entry::INLEN, v);
    }
    /// Set `in_ptr`.
    pub fn set_in_ptr(&mut self, v: u64) {
        be::set64(self.as_bytes_mut(), entry::IN_PTR, v);
    }
    /// The inline input bytes, to fill.
    pub fn inline_in_mut(&mut self) -> &mut [u8] {
        &mut self.as_bytes_mut()[entry::IN]
    }
    /// The inline output bytes, to clear.
    pub fn inline_out_mut(&mut self) -> &mut [u8] {
        &mut self.as_bytes_mut()[entry::OUT]
    }
    /// Set `out_ptr`.
    pub fn set_out_ptr(&mut self, v: u64) {
        be::set64(self.as_bytes_mut(), entry::OUT_PTR, v);
    }
    /// Set `outlen`.
    pub fn set_outlen(&mut self, v: u32) {
        be::set32(self.as_bytes_mut(), entry::OUTLEN, v);
    }
    /// Set `token`.
    pub fn set_token(&mut self, v: u8) {
        self.as_bytes_mut()[entry::TOKEN] = v;
    }
    /// Set `status_own` from a delivery status and the ownership bit.
    pub fn set_status_own(&mut self, delivery: u8, hw_owned: bool) {
        self.as_bytes_mut()[entry::STATUS_OWN] = (delivery << 1) | hw_owned as u8;
    }
}

/// Byte offset of `status_own` in an entry (the driver polls it alone).
pub const STATUS_OWN_OFFSET: usize = entry::STATUS_OWN;

view!(
    /// A mailbox block.
    Block,
    BLOCK_SIZE,
    "a mailbox block"
);

impl<T: AsRef<[u8]>> Block<T> {
    /// The 512 data bytes.
    pub fn data(&self) -> &[u8] {
        &self.as_bytes()[block::DATA]
    }
    /// `next`, big-endian.
    pub fn next(&self) -> u64 {
        be::get64(self.as_bytes(), block::NEXT)
    }
    /// `block_num`, big-endian.
    pub fn block_num(&self) -> u32 {
        be::get32(self.as_bytes(), block::BLOCK_NUM)
    }
    /// `token`.
    pub fn token(&self) -> u8 {
        self.as_bytes()[block::TOKEN]
    }
    /// `ctrl_sig`.
    pub fn ctrl_sig(&self) -> u8 {
        self.as_bytes()[block::CTRL_SIG]
    }
    /// `sig`.
    pub fn sig(&self) -> u8 {
        self.as_bytes()[block::SIG]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Block<T> {
    /// Set `next`.
    pub fn set_next(&mut self, v: u64) {
        be::set64(self.as_bytes_mut(), block::NEXT, v);
    }
    /// Set `block_num`.
    pub fn set_block_num(&mut self, v: u32) {
        be::set32(self.as_bytes_mut(), block::BLOCK_NUM, v);
    }
    /// Set `token`.
    pub fn set_token(&mut self, v: u8) {
        self.as_bytes_mut()[block::TOKEN] = v;
    }
}

/// Byte offset of `token` in a block (the driver checks it on outputs).
pub const BLOCK_TOKEN: usize = block::TOKEN;

/// Byte range of the control part of a block (`next` .. `sig`), written separately from data.
pub const BLOCK_CTRL: core::ops::Range<usize> = block::NEXT..BLOCK_SIZE;

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    /// `struct mlx5_cmd_layout` as device.h declares it (big-endian fields by width only).
    #[repr(C)]
    #[allow(dead_code)]
    struct mlx5_cmd_layout {
        ty: u8,
        rsvd0: [u8; 3],
        inlen: u32,
        in_ptr: u64,
        in_: [u32; 4],
        out: [u32; 4],
        out_ptr: u64,
        outlen: u32,
        token: u8,
        sig: u8,
        rsvd1: u8,
        status_own: u8,
    }

    /// `struct mlx5_cmd_prot_block`.
    #[repr(C)]
    #[allow(dead_code)]
    struct mlx5_cmd_prot_block {
        data: [u8; 512],
        rsvd0: [u8; 48],
        next: u64,
        block_num: u32,
        rsvd1: u8,
        token: u8,
        ctrl_sig: u8,
        sig: u8,
    }

    #[test]
    fn offsets_match_device_h() {
        assert_eq!(size_of::<mlx5_cmd_layout>(), ENTRY_SIZE);
        assert_eq!(offset_of!(mlx5_cmd_layout, inlen), entry::INLEN);
        assert_eq!(offset_of!(mlx5_cmd_layout, in_ptr), entry::IN_PTR);
        assert_eq!(offset_of!(mlx5_cmd_layout, in_), entry::IN.start);
        assert_eq!(offset_of!(mlx5_cmd_layout, out), entry::OUT.start);
        assert_eq!(offset_of!(mlx5_cmd_layout, out_ptr), entry::OUT_PTR);
        assert_eq!(offset_of!(mlx5_cmd_layout, outlen), entry::OUTLEN);
        assert_eq!(offset_of!(mlx5_cmd_layout, token), entry::TOKEN);
        assert_eq!(offset_of!(mlx5_cmd_layout, sig), entry::SIG);
        assert_eq!(offset_of!(mlx5_cmd_layout, status_own), entry::STATUS_OWN);
        assert_eq!(size_of::<mlx5_cmd_prot_block>(), BLOCK_SIZE);
        assert_eq!(offset_of!(mlx5_cmd_prot_block, next), block::NEXT);
        assert_eq!(offset_of!(mlx5_cmd_prot_block, block_num), block::BLOCK_NUM);
        assert_eq!(offset_of!(mlx5_cmd_prot_block, token), block::TOKEN);
        assert_eq!(offset_of!(mlx5_cmd_prot_block, ctrl_sig), block::CTRL_SIG);
        assert_eq!(offset_of!(mlx5_cmd_prot_block, sig), block::SIG);
    }

    #[test]
    fn entry_builds_into_poisoned_buffer() {
        let mut e = Entry::new_checked([0xa5u8; 64]).unwrap();
        e.set_cmd_type(CMD_TYPE_PCI);
        e.set_inlen(0x110);
        e.set_in_ptr(0x0000_00e0_0000_1000);
        e.inline_in_mut().copy_from_slice(&[0x05, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        e.inline_out_mut().fill(0);
        e.set_out_ptr(0x0000_00e0_0000_2000);
        e.set_outlen(0x10);
        e.set_token(0x2a);
        e.set_status_own(0, true);
        let b = e.into_inner();
        assert_eq!(b[0], 7);
        assert_eq!(&b[1..4], &[0xa5; 3], "reserved bytes untouched");
        assert_eq!(&b[4..8], &[0, 0, 1, 0x10]);
        assert_eq!(&b[8..16], &[0, 0, 0, 0xe0, 0, 0, 0x10, 0]);
        assert_eq!(&b[16..18], &[0x05, 0x00]);
        assert_eq!(&b[48..56], &[0, 0, 0, 0xe0, 0, 0, 0x20, 0]);
        assert_eq!(&b[56..60], &[0, 0, 0, 0x10]);
        assert_eq!(b[60], 0x2a);
        assert_eq!(b[62], 0xa5);
        assert_eq!(b[63], 0x01);
        assert!(e.hw_owned());
        assert_eq!(e.inlen(), 0x110);
        assert_eq!(e.token(), 0x2a);
    }

    #[test]
    fn status_own_decodes_delivery_status_and_owner() {
        let mut raw = [0u8; 64];
        raw[63] = 0x07 << 1; // bad input length, owner bit clear: returned to software
        let e = Entry::new_checked(&raw[..]).unwrap();
        assert!(!e.hw_owned());
        assert_eq!(e.delivery_status(), 7);
    }

    #[test]
    fn block_control_fields() {
        let mut b = Block::new_unchecked([0x5au8; BLOCK_SIZE]);
        b.set_next(0x0000_00e0_0000_0400);
        b.set_block_num(3);
        b.set_token(9);
        let raw = b.into_inner();
        assert_eq!(&raw[560..568], &[0, 0, 0, 0xe0, 0, 0, 0x04, 0]);
        assert_eq!(&raw[568..572], &[0, 0, 0, 3]);
        assert_eq!(raw[572], 0x5a);
        assert_eq!(raw[573], 9);
        assert_eq!(b.next(), 0x0000_00e0_0000_0400);
        assert_eq!(b.block_num(), 3);
        assert!(Block::new_checked([0u8; 575]).is_err());
        assert!(Entry::new_checked([0u8; 63]).is_err());
    }
}
