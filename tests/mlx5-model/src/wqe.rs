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

/// WQE basic blocks a WQE of `ds` units occupies: `ceil(ds * 16 / 64)`, at least 1.
pub fn wqebbs(ds: u8) -> u32 {
    (u32::from(ds) * DS_UNIT as u32).div_ceil(WQEBB as u32).max(1)
}
