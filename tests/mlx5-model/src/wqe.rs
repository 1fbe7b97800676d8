//! Send WQE segments, read the way the HCA reads them.
//!
//! Layouts (all fields big-endian), from rdma-core `providers/mlx5/mlx5dv.h`
//! (`struct mlx5_wqe_ctrl_seg`, `mlx5_wqe_raddr_seg`, `mlx5_wqe_data_seg`), `providers/mlx5/wqe.h`
//! (`struct mlx5_wqe_inline_seg`) and `qp.c` (`_mlx5_post_send`):
//!
//! | segment | off | size | field |
//! |---|---|---|---|
//! | ctrl | 0 | 4 | `opmod_idx_opcode`: opmod 31:24, WQE index 23:8, opcode 7:0 |
//! | ctrl | 4 | 4 | `qpn_ds`: QPN 31:8, reserved 7:6, DS (16-byte units) 5:0 |
//! | ctrl | 8 | 1 | `signature` |
//! | ctrl | 9 | 2 | `dci_stream_channel_id` (0 for RC) |
//! | ctrl | 11 | 1 | `fm_ce_se`: fence 7:5, CE 3:2 (`0x08` = CQE always), SE 1 |
//! | ctrl | 12 | 4 | immediate (opaque bytes) |
//! | raddr | 0 | 8 | remote virtual address |
//! | raddr | 8 | 4 | rkey |
//! | raddr | 12 | 4 | reserved |
//! | data | 0 | 4 | `byte_count` (bit 31 clear); 0 means 2^31 bytes |
//! | data | 4 | 4 | lkey |
//! | data | 8 | 8 | local virtual address |
//! | inline | 0 | 4 | `0x8000_0000 \| len`, then `len` bytes, padded to 16 |
//! | atomic | 0 | 8 | `swap_add`: the swap value (CAS) or the addend (FAA) |
//! | atomic | 8 | 8 | `compare` (CAS; 0 for FAA) |
//! | datagram | 0 | 4 | `qkey` |
//! | datagram | 4 | 4 | reserved (the low half of a DC key) |
//! | datagram | 8 | 4 | `dqp_dct`: extended-AV flag 31 (`MLX5_EXTENDED_UD_AV`), destination QPN 23:0 |
//! | datagram | 12 | 1 | `stat_rate_sl` |
//! | datagram | 13 | 1 | `fl_mlid` |
//! | datagram | 14 | 2 | `rlid`: on RoCE v2 the UDP source port (`mlx5_ah_set_udp_sport`) |
//! | datagram | 16 | 4 | reserved |
//! | datagram | 20 | 6 | `rmac`: destination MAC |
//! | datagram | 26 | 1 | `tclass` |
//! | datagram | 27 | 1 | `hop_limit` |
//! | datagram | 28 | 4 | `grh_gid_fl`: GRH 30 (0 on RoCE), source GID index 27:20, flow label 19:0 |
//! | datagram | 32 | 16 | `rgid`: destination GID |
//!
//! Which segments a WQE carries depends on the opcode and the QP's service, as
//! `_mlx5_post_send` builds them: RC READ and WRITE: ctrl, raddr, data; RC atomics: ctrl,
//! raddr, atomic, one 8-byte data segment for the result (`set_data_ptr_seg_atomic`); RC
//! SEND: ctrl, data or inline; UD and GSI SEND: ctrl, datagram (the 48-byte
//! `struct mlx5_wqe_av` the provider copies from the address handle, `set_datagram_seg`),
//! data or inline.

use crate::be::{get16, get32, get64};
use crate::codes::SendOpcode;

/// One WQE basic block (`MLX5_SEND_WQE_BB`).
pub const WQEBB: usize = 64;
/// The DS unit (`MLX5_SEND_WQE_DS`).
pub const DS_UNIT: usize = 16;
/// Bit 31 of a segment's first word marks an inline segment (`MLX5_INLINE_SEG`).
pub const INLINE_FLAG: u32 = 0x8000_0000;
/// A data segment `byte_count` of 0 means this many bytes (PRM, send data segment: the count is
/// 31 bits wide and 0 encodes 2^31). rdma-core's `_mlx5_post_send` skips zero-length SGEs for
/// that reason.
pub const ZERO_BYTE_COUNT_MEANS: u64 = 1 << 31;
/// The largest message an RC QP carries (`log_max_msg` = 31 on ConnectX).
pub const MAX_MSG: u64 = 1 << 31;
/// The one data segment of an atomic WQE gathers exactly this many bytes
/// (`MLX5_ATOMIC_SIZE`, provider `set_data_ptr_seg_atomic`).
pub const ATOMIC_SIZE: u64 = 8;
/// `MLX5_EXTENDED_UD_AV`: bit 31 of `dqp_dct`, set by the provider on every UD WQE.
pub const EXTENDED_UD_AV: u32 = 0x8000_0000;
/// `MLX5_WQE_CTRL_CQ_UPDATE`: CE = 2, "always generate a CQE".
pub const CE_ALWAYS: u8 = 0x08;

/// The control segment (first 16 bytes of every send WQE).
#[derive(Clone, Copy, Debug)]
pub struct CtrlSeg<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> CtrlSeg<T> {
    /// Bytes of the segment.
    pub const LEN: usize = 16;

    /// A view, if `buf` holds at least [`Self::LEN`] bytes.
    pub fn new_checked(buf: T) -> Option<Self> {
        (buf.as_ref().len() >= Self::LEN).then_some(CtrlSeg { buf })
    }

    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }

    /// `opmod`: bits 31:24 of `opmod_idx_opcode` (byte 0).
    pub fn opmod(&self) -> u8 {
        self.b()[0]
    }

    /// The WQE index (producer counter when posted): bits 23:8 of `opmod_idx_opcode`, BE.
    pub fn wqe_index(&self) -> u16 {
        get16(self.b(), 1)
    }

    /// The opcode: bits 7:0 of `opmod_idx_opcode` (byte 3).
    pub fn opcode(&self) -> SendOpcode {
        SendOpcode::from(self.b()[3])
    }

    /// The raw opcode byte.
    pub fn opcode_raw(&self) -> u8 {
        self.b()[3]
    }

    /// QPN: bits 31:8 of `qpn_ds`, BE.
    pub fn qpn(&self) -> u32 {
        get32(self.b(), 4) >> 8
    }

    /// DS: bits 5:0 of `qpn_ds` (kernel `MLX5_WQE_CTRL_DS_MASK` = 0x3f).
    pub fn ds(&self) -> u8 {
        self.b()[7] & 0x3f
    }

    /// Bits 7:6 of `qpn_ds` (reserved).
    pub fn ds_reserved(&self) -> u8 {
        self.b()[7] >> 6
    }

    /// `signature` (byte 8).
    pub fn signature(&self) -> u8 {
        self.b()[8]
    }

    /// `dci_stream_channel_id` (bytes 9..11, BE); 0 for RC.
    pub fn stream_channel(&self) -> u16 {
        get16(self.b(), 9)
    }

    /// `fm_ce_se` (byte 11).
    pub fn fm_ce_se(&self) -> u8 {
        self.b()[11]
    }

    /// Whether CE asks for a CQE on success (`fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE`).
    pub fn signaled(&self) -> bool {
        self.fm_ce_se() & CE_ALWAYS != 0
    }

    /// The immediate, as the 4 bytes in the WQE (already network order).
    pub fn imm(&self) -> [u8; 4] {
        let b = self.b();
        [b[12], b[13], b[14], b[15]]
    }

    /// The first 8 bytes: what an 8-byte doorbell carries.
    pub fn head(&self) -> [u8; 8] {
        let mut h = [0u8; 8];
        h.copy_from_slice(&self.b()[..8]);
        h
    }
}

/// The remote address segment (16 bytes, right after the control segment).
#[derive(Clone, Copy, Debug)]
pub struct RaddrSeg<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> RaddrSeg<T> {
    /// Bytes of the segment.
    pub const LEN: usize = 16;

    /// A view, if `buf` holds at least [`Self::LEN`] bytes.
    pub fn new_checked(buf: T) -> Option<Self> {
        (buf.as_ref().len() >= Self::LEN).then_some(RaddrSeg { buf })
    }

    /// Remote virtual address (bytes 0..8, BE).
    pub fn raddr(&self) -> u64 {
        get64(self.buf.as_ref(), 0)
    }

    /// rkey (bytes 8..12, BE).
    pub fn rkey(&self) -> u32 {
        get32(self.buf.as_ref(), 8)
    }

    /// Reserved word (bytes 12..16, BE).
    pub fn reserved(&self) -> u32 {
        get32(self.buf.as_ref(), 12)
    }
}

/// A data (pointer) segment, or the header word of an inline segment.
#[derive(Clone, Copy, Debug)]
pub struct DataSeg<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> DataSeg<T> {
    /// Bytes of the segment.
    pub const LEN: usize = 16;

    /// A view, if `buf` holds at least [`Self::LEN`] bytes.
    pub fn new_checked(buf: T) -> Option<Self> {
        (buf.as_ref().len() >= Self::LEN).then_some(DataSeg { buf })
    }

    /// The first word, BE: `byte_count`, or `INLINE_FLAG | len` for an inline segment.
    pub fn byte_count_raw(&self) -> u32 {
        get32(self.buf.as_ref(), 0)
    }

    /// Whether this is an inline segment.
    pub fn is_inline(&self) -> bool {
        self.byte_count_raw() & INLINE_FLAG != 0
    }

    /// Inline payload length (low 31 bits of the first word).
    pub fn inline_len(&self) -> usize {
        (self.byte_count_raw() & !INLINE_FLAG) as usize
    }

    /// Length a pointer segment gathers: its `byte_count`, with 0 meaning 2^31 bytes.
    pub fn length(&self) -> u64 {
        match self.byte_count_raw() {
            0 => ZERO_BYTE_COUNT_MEANS,
            n => u64::from(n),
        }
    }

    /// lkey (bytes 4..8, BE).
    pub fn lkey(&self) -> u32 {
        get32(self.buf.as_ref(), 4)
    }

    /// Local virtual address (bytes 8..16, BE).
    pub fn addr(&self) -> u64 {
        get64(self.buf.as_ref(), 8)
    }
}

/// The atomic segment (16 bytes, after the remote address segment of a CAS or FAA).
#[derive(Clone, Copy, Debug)]
pub struct AtomicSeg<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> AtomicSeg<T> {
    /// Bytes of the segment.
    pub const LEN: usize = 16;

    /// A view, if `buf` holds at least [`Self::LEN`] bytes.
    pub fn new_checked(buf: T) -> Option<Self> {
        (buf.as_ref().len() >= Self::LEN).then_some(AtomicSeg { buf })
    }

    /// `swap_add` (bytes 0..8, BE): the swap value of a CAS, the addend of an FAA.
    pub fn swap_add(&self) -> u64 {
        get64(self.buf.as_ref(), 0)
    }

    /// `compare` (bytes 8..16, BE).
    pub fn compare(&self) -> u64 {
        get64(self.buf.as_ref(), 8)
    }
}

/// The datagram segment of a UD or GSI send (`struct mlx5_wqe_datagram_seg`, 48 bytes).
#[derive(Clone, Copy, Debug)]
pub struct DatagramSeg<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> DatagramSeg<T> {
    /// Bytes of the segment.
    pub const LEN: usize = 48;

    /// A view, if `buf` holds at least [`Self::LEN`] bytes.
    pub fn new_checked(buf: T) -> Option<Self> {
        (buf.as_ref().len() >= Self::LEN).then_some(DatagramSeg { buf })
    }

    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }

    /// `qkey` (bytes 0..4, BE).
    pub fn qkey(&self) -> u32 {
        get32(self.b(), 0)
    }

    /// The reserved word after the Q_Key (bytes 4..8, BE).
    pub fn key_reserved(&self) -> u32 {
        get32(self.b(), 4)
    }

    /// `dqp_dct` (bytes 8..12, BE) whole.
    pub fn dqp_dct(&self) -> u32 {
        get32(self.b(), 8)
    }

    /// The destination QPN: bits 23:0 of `dqp_dct`.
    pub fn dqpn(&self) -> u32 {
        self.dqp_dct() & 0x00ff_ffff
    }

    /// `rlid` (bytes 14..16, BE): the UDP source port on RoCE v2.
    pub fn udp_sport(&self) -> u16 {
        get16(self.b(), 14)
    }

    /// `rmac` (bytes 20..26), in wire order.
    pub fn rmac(&self) -> [u8; 6] {
        let mut m = [0u8; 6];
        m.copy_from_slice(&self.b()[20..26]);
        m
    }

    /// `tclass` (byte 26).
    pub fn tclass(&self) -> u8 {
        self.b()[26]
    }

    /// `hop_limit` (byte 27).
    pub fn hop_limit(&self) -> u8 {
        self.b()[27]
    }

    /// `grh_gid_fl` (bytes 28..32, BE) whole.
    pub fn grh_gid_fl(&self) -> u32 {
        get32(self.b(), 28)
    }

    /// The source GID index: bits 27:20 of `grh_gid_fl`.
    pub fn sgid_index(&self) -> u8 {
        (self.grh_gid_fl() >> 20) as u8
    }

    /// The flow label: bits 19:0 of `grh_gid_fl`.
    pub fn flow_label(&self) -> u32 {
        self.grh_gid_fl() & 0x000f_ffff
    }

    /// `rgid` (bytes 32..48): the destination GID.
    pub fn rgid(&self) -> [u8; 16] {
        let mut g = [0u8; 16];
        g.copy_from_slice(&self.b()[32..48]);
        g
    }
}

/// WQE basic blocks a WQE of `ds` units occupies: `ceil(ds * 16 / 64)`, at least 1.
pub fn wqebbs(ds: u8) -> u32 {
    (u32::from(ds) * DS_UNIT as u32).div_ceil(WQEBB as u32).max(1)
}
