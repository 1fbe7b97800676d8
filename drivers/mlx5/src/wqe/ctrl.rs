//! The control segment: the first 16 bytes of every send WQE.
//!
//! Layout of `struct mlx5_wqe_ctrl_seg` (rdma-core `infiniband/mlx5dv.h`, packed, 16 bytes); all
//! multi-byte fields are **big-endian**:
//!
//! | bytes | field | encoding |
//! |---|---|---|
//! | 0..4 | `opmod_idx_opcode` | `opmod << 24 \| wqe_index << 8 \| opcode` (`mlx5dv_set_ctrl_seg`) |
//! | 4..8 | `qpn_ds` | `qpn << 8 \| ds`; `ds` is 6 bits (kernel `MLX5_WQE_CTRL_DS_MASK`) |
//! | 8 | `signature` | 0 unless the QP computes WQE signatures |
//! | 9..11 | `dci_stream_channel_id` | 0 for RC (`qp.c` zeroes bytes 8..11 first) |
//! | 11 | `fm_ce_se` | [`FmCeSe`] |
//! | 12..16 | `imm` | immediate data as sent on the wire |

use rdma_pmd::{Error, QpNum, Result};

use crate::opcode::{FmCeSe, SendOpcode, MAX_DS};

mod field {
    use core::ops::Range;
    pub const OPMOD_IDX_OPCODE: Range<usize> = 0..4;
    pub const QPN_DS: Range<usize> = 4..8;
    pub const SIGNATURE: usize = 8;
    pub const DCI_STREAM: Range<usize> = 9..11;
    pub const FM_CE_SE: usize = 11;
    pub const IMM: Range<usize> = 12..16;
}

/// Length of the control segment in bytes.
pub const LEN: usize = 16;

/// A typed view of a control segment over any byte buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtrlSeg<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> CtrlSeg<T> {
    /// Wrap a buffer without checking its length (accessors panic if it is short).
    pub const fn new_unchecked(buffer: T) -> Self {
        CtrlSeg { buffer }
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
            return Err(Error::InvalidArgument("buffer shorter than a control segment"));
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

    /// `opmod_idx_opcode` as one number (bytes 0..4, big-endian).
    pub fn opmod_idx_opcode(&self) -> u32 {
        self.be32(field::OPMOD_IDX_OPCODE)
    }

    /// Opcode modifier (byte 0); 0 for RDMA operations.
    pub fn opmod(&self) -> u8 {
        self.buffer.as_ref()[field::OPMOD_IDX_OPCODE.start]
    }

    /// The 16-bit WQE counter the WQE was posted at (bytes 1..3, big-endian).
    pub fn wqe_index(&self) -> u16 {
        (self.opmod_idx_opcode() >> 8) as u16
    }

    /// The send opcode (byte 3).
    pub fn opcode(&self) -> SendOpcode {
        SendOpcode::from(self.buffer.as_ref()[field::OPMOD_IDX_OPCODE.end - 1])
    }

    /// `qpn_ds` as one number (bytes 4..8, big-endian).
    pub fn qpn_ds(&self) -> u32 {
        self.be32(field::QPN_DS)
    }

    /// The QP number (bytes 4..7, big-endian, 24 bits).
    pub fn qpn(&self) -> QpNum {
        QpNum(self.qpn_ds() >> 8)
    }

    /// WQE size in 16-byte units (low 6 bits of byte 7; the top two bits are not part of the
    /// field).
    pub fn ds(&self) -> u8 {
        (self.qpn_ds() & MAX_DS) as u8
    }

    /// The WQE signature byte (byte 8).
    pub fn signature(&self) -> u8 {
        self.buffer.as_ref()[field::SIGNATURE]
    }

    /// `dci_stream_channel_id` (bytes 9..11, big-endian); 0 for RC.
    pub fn dci_stream_channel_id(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::DCI_STREAM];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Fence mode, completion and solicited-event bits (byte 11).
    pub fn fm_ce_se(&self) -> FmCeSe {
        FmCeSe::from_bits_retain(self.buffer.as_ref()[field::FM_CE_SE])
    }

    /// Immediate data (bytes 12..16) read as a big-endian number: the value the responder
    /// reads back as `be32toh(wc.imm_data)`.
    pub fn imm(&self) -> u32 {
        self.be32(field::IMM)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CtrlSeg<T> {
    fn set_be32(&mut self, r: core::ops::Range<usize>, v: u32) {
        self.buffer.as_mut()[r].copy_from_slice(&v.to_be_bytes());
    }

    /// Set opmod, WQE counter and opcode (bytes 0..4, big-endian).
    pub fn set_opmod_idx_opcode(&mut self, opmod: u8, wqe_index: u16, opcode: SendOpcode) {
        let v = (opmod as u32) << 24 | (wqe_index as u32) << 8 | u8::from(opcode) as u32;
        self.set_be32(field::OPMOD_IDX_OPCODE, v);
    }

    /// Set QP number (low 24 bits kept) and `ds` (low 6 bits kept), bytes 4..8 big-endian.
    pub fn set_qpn_ds(&mut self, qpn: QpNum, ds: u8) {
        self.set_be32(field::QPN_DS, (qpn.0 & QpNum::MAX) << 8 | (ds as u32 & MAX_DS));
    }

    /// Set the signature byte (byte 8).
    pub fn set_signature(&mut self, sig: u8) {
        self.buffer.as_mut()[field::SIGNATURE] = sig;
    }

    /// Set `dci_stream_channel_id` (bytes 9..11, big-endian).
    pub fn set_dci_stream_channel_id(&mut self, v: u16) {
        self.buffer.as_mut()[field::DCI_STREAM].copy_from_slice(&v.to_be_bytes());
    }

    /// Set the `fm_ce_se` byte (byte 11).
    pub fn set_fm_ce_se(&mut self, v: FmCeSe) {
        self.buffer.as_mut()[field::FM_CE_SE] = v.bits();
    }

    /// Set the immediate data (bytes 12..16, big-endian).
    pub fn set_imm(&mut self, imm: u32) {
        self.set_be32(field::IMM, imm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::mlx5_wqe_ctrl_seg as C;
    use core::mem::offset_of;

    #[test]
    fn field_table_matches_mlx5dv_h() {
        assert_eq!(offset_of!(C, opmod_idx_opcode), field::OPMOD_IDX_OPCODE.start);
        assert_eq!(offset_of!(C, qpn_ds), field::QPN_DS.start);
        assert_eq!(offset_of!(C, signature), field::SIGNATURE);
        assert_eq!(offset_of!(C, dci_stream_channel_id), field::DCI_STREAM.start);
        assert_eq!(offset_of!(C, fm_ce_se), field::FM_CE_SE);
        assert_eq!(offset_of!(C, imm), field::IMM.start);
        assert_eq!(core::mem::size_of::<C>(), LEN);
    }

    #[test]
    fn parses_the_public_vector_ctrl() {
        // write_imm_1sge_signaled, bytes 0..16 (an independent vector built with
        // mlx5dv_set_ctrl_seg).
        let b = [
            0x00, 0x00, 0x0e, 0x09, 0x00, 0x01, 0x23, 0x03, 0x00, 0x00, 0x00, 0x08, 0xde, 0xad,
            0xbe, 0xef,
        ];
        let c = CtrlSeg::new_checked(&b[..]).unwrap();
        assert_eq!(c.opmod(), 0);
        assert_eq!(c.wqe_index(), 14);
        assert_eq!(c.opcode(), SendOpcode::RdmaWriteImm);
        assert_eq!(c.qpn(), QpNum(0x123));
        assert_eq!(c.ds(), 3);
        assert_eq!(c.signature(), 0);
        assert_eq!(c.dci_stream_channel_id(), 0);
        assert_eq!(c.fm_ce_se(), FmCeSe::CQ_UPDATE);
        assert_eq!(c.imm(), 0xdead_beef);

        let mut out = [0xa5u8; 16];
        let mut w = CtrlSeg::new_unchecked(&mut out[..]);
        w.set_opmod_idx_opcode(0, 14, SendOpcode::RdmaWriteImm);
        w.set_qpn_ds(QpNum(0x123), 3);
        w.set_signature(0);
        w.set_dci_stream_channel_id(0);
        w.set_fm_ce_se(FmCeSe::CQ_UPDATE);
        w.set_imm(0xdead_beef);
        assert_eq!(out, b);
        assert!(CtrlSeg::new_checked(&b[..15]).is_err());
    }

    #[test]
    fn ds_is_six_bits_and_qpn_24() {
        let mut out = [0u8; 16];
        let mut w = CtrlSeg::new_unchecked(&mut out[..]);
        w.set_qpn_ds(QpNum(0xff12_3456), 0xff);
        assert_eq!(w.qpn(), QpNum(0x12_3456));
        assert_eq!(w.ds(), 0x3f);
    }
}
