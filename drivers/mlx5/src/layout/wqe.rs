//! The segments of a send WQE, and the scatter entry of a receive WQE.
//!
//! An RC RDMA WRITE WQE is a control segment ([`CtrlSeg`]), a remote-address segment
//! ([`RaddrSeg`]), then either data segments ([`DataSeg`]) or one inline segment
//! ([`InlineSeg`]). Each is rdma-core's `infiniband/mlx5dv.h` struct of the same name, filled
//! as `providers/mlx5/qp.c` fills it; every multi-byte field is **big-endian**.
//!
//! **Control segment** (`struct mlx5_wqe_ctrl_seg`, 16 bytes):
//!
//! | bytes | field | encoding |
//! |---|---|---|
//! | 0..4 | `opmod_idx_opcode` | `opmod << 24 \| wqe_index << 8 \| opcode` (`mlx5dv_set_ctrl_seg`) |
//! | 4..8 | `qpn_ds` | `qpn << 8 \| ds`; `ds` is 6 bits (kernel `MLX5_WQE_CTRL_DS_MASK`) |
//! | 8 | `signature` | 0 unless the QP computes WQE signatures |
//! | 9..11 | `dci_stream_channel_id` | 0 for RC (`qp.c` zeroes bytes 8..11 first) |
//! | 11 | `fm_ce_se` | [`FmCeSe`] |
//! | 12..16 | `imm` | immediate data as sent on the wire |
//!
//! **Remote-address segment** (`struct mlx5_wqe_raddr_seg`, 16 bytes, `set_raddr_seg`):
//! `raddr` at 0..8, `rkey` at 8..12, a reserved word at 12..16 written as 0.
//!
//! **Data segment** (`struct mlx5_wqe_data_seg`, 16 bytes, `mlx5dv_set_data_seg`):
//! `byte_count` at 0..4, `lkey` at 4..8, `addr` at 8..16. A receive WQE is a list of these,
//! ended by one with the invalid lkey [`INVALID_LKEY`] (`mlx5_post_recv`).
//!
//! **Inline segment** (`struct mlx5_wqe_inline_seg` of `providers/mlx5/wqe.h`, `set_data_inl_seg`):
//! `byte_count = len | MLX5_INLINE_SEG` at 0..4 (big-endian on the wire, although mlx5dv.h's
//! `struct mlx5_wqe_inl_data_seg` declares a host `uint32_t`), then the payload, padded to a
//! 16-byte multiple. It takes `ceil((4 + len) / 16)` `ds` units, and none at all when empty. In
//! a ring, payload that reaches the end of a 64-byte block continues in the next block's slot.
//!
//! **Doorbell record** of the work queues: `dbrec[MLX5_RCV_DBR]` and `dbrec[MLX5_SND_DBR]`, the
//! big-endian counters the device reads after the doorbell ([`sq_dbrec`]), and the BlueFlame
//! length rule of `post_send_db` ([`bf_len`]).

use rdma_pmd::{Lkey, QpNum, RemoteBuf, Rkey, Sge};

use super::be;
use super::codes::{FmCeSe, SendOpcode, INLINE_SEG, MAX_DS, SEND_WQE_BB, SEND_WQE_DS};
use super::view;

/// Length of each fixed segment in bytes (one `ds` unit).
pub const SEG_LEN: usize = 16;

/// `MLX5_INVALID_LKEY`: ends a receive WQE's scatter list.
pub const INVALID_LKEY: u32 = 0x100;

pub(crate) mod ctrl {
    pub const OPMOD_IDX_OPCODE: usize = 0;
    pub const QPN_DS: usize = 4;
    pub const SIGNATURE: usize = 8;
    pub const DCI_STREAM: usize = 9;
    pub const FM_CE_SE: usize = 11;
    pub const IMM: usize = 12;
}

pub(crate) mod raddr {
    pub const RADDR: usize = 0;
    pub const RKEY: usize = 8;
    pub const RESERVED: usize = 12;
}

pub(crate) mod data {
    pub const BYTE_COUNT: usize = 0;
    pub const LKEY: usize = 4;
    pub const ADDR: usize = 8;
}

mod inline {
    pub const BYTE_COUNT: usize = 0;
    pub const PAYLOAD: usize = 4;
}

/// The two 8-byte halves of a 16-byte segment, in memory order: what the ring sinks store.
#[inline(always)]
pub fn halves(seg: [u8; SEG_LEN]) -> ([u8; 8], [u8; 8]) {
    let mut lo = [0u8; 8];
    let mut hi = [0u8; 8];
    lo.copy_from_slice(&seg[..8]);
    hi.copy_from_slice(&seg[8..]);
    (lo, hi)
}

view!(
    /// A control segment.
    CtrlSeg,
    SEG_LEN,
    "a control segment"
);

impl<T: AsRef<[u8]>> CtrlSeg<T> {
    /// `opmod_idx_opcode` as one number (bytes 0..4, big-endian).
    pub fn opmod_idx_opcode(&self) -> u32 {
        be::get32(self.as_bytes(), ctrl::OPMOD_IDX_OPCODE)
    }

    /// Opcode modifier (byte 0); 0 for RDMA operations.
    pub fn opmod(&self) -> u8 {
        self.as_bytes()[ctrl::OPMOD_IDX_OPCODE]
    }

    /// The 16-bit WQE counter the WQE was posted at (bytes 1..3, big-endian).
    pub fn wqe_index(&self) -> u16 {
        (self.opmod_idx_opcode() >> 8) as u16
    }

    /// The send opcode (byte 3).
    pub fn opcode(&self) -> SendOpcode {
        SendOpcode::from(self.as_bytes()[ctrl::OPMOD_IDX_OPCODE + 3])
    }

    /// `qpn_ds` as one number (bytes 4..8, big-endian).
    pub fn qpn_ds(&self) -> u32 {
        be::get32(self.as_bytes(), ctrl::QPN_DS)
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
        self.as_bytes()[ctrl::SIGNATURE]
    }

    /// `dci_stream_channel_id` (bytes 9..11, big-endian); 0 for RC.
    pub fn dci_stream_channel_id(&self) -> u16 {
        be::get16(self.as_bytes(), ctrl::DCI_STREAM)
    }

    /// Fence mode, completion and solicited-event bits (byte 11).
    pub fn fm_ce_se(&self) -> FmCeSe {
        FmCeSe::from_bits_retain(self.as_bytes()[ctrl::FM_CE_SE])
    }

    /// Immediate data (bytes 12..16) read as a big-endian number: the value the responder
    /// reads back as `be32toh(wc.imm_data)`.
    pub fn imm(&self) -> u32 {
        be::get32(self.as_bytes(), ctrl::IMM)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CtrlSeg<T> {
    /// Set opmod, WQE counter and opcode (bytes 0..4, big-endian).
    #[inline(always)]
    pub fn set_opmod_idx_opcode(&mut self, opmod: u8, wqe_index: u16, opcode: SendOpcode) {
        let v = (opmod as u32) << 24 | (wqe_index as u32) << 8 | u8::from(opcode) as u32;
        be::set32(self.as_bytes_mut(), ctrl::OPMOD_IDX_OPCODE, v);
    }

    /// Set QP number (low 24 bits kept) and `ds` (low 6 bits kept), bytes 4..8 big-endian.
    #[inline(always)]
    pub fn set_qpn_ds(&mut self, qpn: QpNum, ds: u8) {
        let v = (qpn.0 & QpNum::MAX) << 8 | (ds as u32 & MAX_DS);
        be::set32(self.as_bytes_mut(), ctrl::QPN_DS, v);
    }

    /// Set the signature byte (byte 8).
    #[inline(always)]
    pub fn set_signature(&mut self, sig: u8) {
        self.as_bytes_mut()[ctrl::SIGNATURE] = sig;
    }

    /// Set `dci_stream_channel_id` (bytes 9..11, big-endian).
    #[inline(always)]
    pub fn set_dci_stream_channel_id(&mut self, v: u16) {
        be::set16(self.as_bytes_mut(), ctrl::DCI_STREAM, v);
    }

    /// Set the `fm_ce_se` byte (byte 11).
    #[inline(always)]
    pub fn set_fm_ce_se(&mut self, v: FmCeSe) {
        self.as_bytes_mut()[ctrl::FM_CE_SE] = v.bits();
    }

    /// Set the immediate data (bytes 12..16, big-endian).
    #[inline(always)]
    pub fn set_imm(&mut self, imm: u32) {
        be::set32(self.as_bytes_mut(), ctrl::IMM, imm);
    }
}

impl CtrlSeg<[u8; SEG_LEN]> {
    /// The control segment of an RC WQE as `_mlx5_post_send` fills it: opmod 0, signature
    /// and stream id 0.
    #[inline(always)]
    pub fn encode(
        wqe_index: u16,
        opcode: SendOpcode,
        qpn: QpNum,
        ds: u8,
        fm_ce_se: FmCeSe,
        imm: u32,
    ) -> [u8; SEG_LEN] {
        let mut c = CtrlSeg::new_unchecked([0u8; SEG_LEN]);
        c.set_opmod_idx_opcode(0, wqe_index, opcode);
        c.set_qpn_ds(qpn, ds);
        c.set_fm_ce_se(fm_ce_se);
        c.set_imm(imm);
        c.into_inner()
    }
}

view!(
    /// A remote-address segment.
    RaddrSeg,
    SEG_LEN,
    "a raddr segment"
);

impl<T: AsRef<[u8]>> RaddrSeg<T> {
    /// Remote address (bytes 0..8, big-endian).
    pub fn raddr(&self) -> u64 {
        be::get64(self.as_bytes(), raddr::RADDR)
    }

    /// Remote key (bytes 8..12, big-endian).
    pub fn rkey(&self) -> Rkey {
        Rkey(be::get32(self.as_bytes(), raddr::RKEY))
    }

    /// The reserved word (bytes 12..16, big-endian); 0 in every WQE rdma-core writes.
    pub fn reserved(&self) -> u32 {
        be::get32(self.as_bytes(), raddr::RESERVED)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RaddrSeg<T> {
    /// Set the remote address (bytes 0..8, big-endian).
    #[inline(always)]
    pub fn set_raddr(&mut self, addr: u64) {
        be::set64(self.as_bytes_mut(), raddr::RADDR, addr);
    }

    /// Set the remote key (bytes 8..12, big-endian).
    #[inline(always)]
    pub fn set_rkey(&mut self, rkey: Rkey) {
        be::set32(self.as_bytes_mut(), raddr::RKEY, rkey.0);
    }

    /// Zero the reserved word (bytes 12..16).
    #[inline(always)]
    pub fn clear_reserved(&mut self) {
        be::set32(self.as_bytes_mut(), raddr::RESERVED, 0);
    }
}

impl RaddrSeg<[u8; SEG_LEN]> {
    /// The segment for `remote` (`set_raddr_seg`).
    #[inline(always)]
    pub fn encode(remote: RemoteBuf) -> [u8; SEG_LEN] {
        let mut r = RaddrSeg::new_unchecked([0u8; SEG_LEN]);
        r.set_raddr(remote.addr);
        r.set_rkey(remote.rkey);
        r.into_inner()
    }
}

view!(
    /// A data (pointer) segment: one scatter-gather element.
    DataSeg,
    SEG_LEN,
    "a data segment"
);

impl<T: AsRef<[u8]>> DataSeg<T> {
    /// Byte count (bytes 0..4, big-endian).
    pub fn byte_count(&self) -> u32 {
        be::get32(self.as_bytes(), data::BYTE_COUNT)
    }

    /// Local key (bytes 4..8, big-endian).
    pub fn lkey(&self) -> Lkey {
        Lkey(be::get32(self.as_bytes(), data::LKEY))
    }

    /// Address (bytes 8..16, big-endian).
    pub fn addr(&self) -> u64 {
        be::get64(self.as_bytes(), data::ADDR)
    }

    /// The element this segment describes.
    pub fn sge(&self) -> Sge {
        Sge::new(self.addr(), self.byte_count(), self.lkey())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DataSeg<T> {
    /// Set byte count (bytes 0..4), lkey (4..8) and address (8..16), all big-endian.
    #[inline(always)]
    pub fn set_sge(&mut self, sge: &Sge) {
        let b = self.as_bytes_mut();
        be::set32(b, data::BYTE_COUNT, sge.length);
        be::set32(b, data::LKEY, sge.lkey.0);
        be::set64(b, data::ADDR, sge.addr);
    }
}

impl DataSeg<[u8; SEG_LEN]> {
    /// The segment for `sge` (`mlx5dv_set_data_seg`).
    #[inline(always)]
    pub fn encode(sge: &Sge) -> [u8; SEG_LEN] {
        let mut d = DataSeg::new_unchecked([0u8; SEG_LEN]);
        d.set_sge(sge);
        d.into_inner()
    }
}

/// Length of the inline segment's header in bytes.
pub const INLINE_HEADER_LEN: usize = 4;

/// `ds` units an inline payload of `len` bytes occupies (0 for an empty payload).
#[inline]
pub const fn inline_ds_units(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        (INLINE_HEADER_LEN + len).div_ceil(SEND_WQE_DS)
    }
}

view!(
    /// An inline segment (header and payload) laid out contiguously. `check_len` checks the
    /// header only; [`InlineSeg::check_payload`] checks the payload it announces.
    InlineSeg,
    INLINE_HEADER_LEN,
    "an inline segment header"
);

impl<T: AsRef<[u8]>> InlineSeg<T> {
    /// Whether the buffer holds the header and the payload it announces.
    pub fn check_payload(&self) -> rdma_pmd::Result<()> {
        self.check_len()?;
        if self.as_bytes().len() < INLINE_HEADER_LEN + self.len() {
            return Err(rdma_pmd::Error::InvalidArgument("buffer shorter than its inline segment"));
        }
        Ok(())
    }

    /// The raw `byte_count` word (bytes 0..4, big-endian), flag included.
    pub fn byte_count(&self) -> u32 {
        be::get32(self.as_bytes(), inline::BYTE_COUNT)
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
        &self.as_bytes()[inline::PAYLOAD..inline::PAYLOAD + self.len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> InlineSeg<T> {
    /// Set the header for `len` payload bytes (bytes 0..4, big-endian, flag set).
    #[inline(always)]
    pub fn set_len(&mut self, len: u32) {
        be::set32(self.as_bytes_mut(), inline::BYTE_COUNT, len | INLINE_SEG);
    }

    /// The payload bytes, for writing (length as announced by the header).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = self.len();
        &mut self.as_bytes_mut()[inline::PAYLOAD..inline::PAYLOAD + len]
    }
}

impl InlineSeg<[u8; INLINE_HEADER_LEN]> {
    /// The header for `len` payload bytes.
    #[inline(always)]
    pub fn encode_header(len: u32) -> [u8; INLINE_HEADER_LEN] {
        let mut h = InlineSeg::new_unchecked([0u8; INLINE_HEADER_LEN]);
        h.set_len(len);
        h.into_inner()
    }
}

pub(crate) mod atomic {
    pub const SWAP_ADD: usize = 0;
    pub const COMPARE: usize = 8;
}

/// An atomic segment (`struct mlx5_wqe_atomic_seg`): the operands of a compare-and-swap or a
/// fetch-and-add, after the remote-address segment.
pub struct AtomicSeg;

impl AtomicSeg {
    /// The segment for `op` (`set_atomic_seg`, `providers/mlx5/qp.c`): compare-and-swap puts
    /// the swap value in `swap_add` and the expected one in `compare`; fetch-and-add puts the
    /// addend in `swap_add` and leaves `compare` zero. Both big-endian.
    #[inline(always)]
    pub fn encode(op: rdma_pmd::AtomicOp) -> [u8; SEG_LEN] {
        let (swap_add, compare) = match op {
            rdma_pmd::AtomicOp::CompareSwap { compare, swap } => (swap, compare),
            rdma_pmd::AtomicOp::FetchAdd { add } => (add, 0),
        };
        let mut b = [0u8; SEG_LEN];
        be::set64(&mut b, atomic::SWAP_ADD, swap_add);
        be::set64(&mut b, atomic::COMPARE, compare);
        b
    }
}

/// Bytes of the datagram segment (`struct mlx5_wqe_datagram_seg`, which is one
/// `struct mlx5_wqe_av`): three `ds` units.
pub const DATAGRAM_LEN: usize = 48;

/// `MLX5_EXTENDED_UD_AV`: bit 31 of `dqp_dct`, set on every UD address vector the provider
/// posts (`set_datagram_seg`).
pub const EXTENDED_UD_AV: u32 = 0x8000_0000;

/// Offsets in `struct mlx5_wqe_av` (mlx5dv.h).
pub mod av {
    /// `key.qkey.qkey` (big-endian).
    pub const QKEY: usize = 0;
    /// `dqp_dct`: destination QP | `MLX5_EXTENDED_UD_AV` (big-endian).
    pub const DQP_DCT: usize = 8;
    /// `stat_rate_sl`: static rate in bits 7..4, SL in bits 3..1.
    pub const STAT_RATE_SL: usize = 12;
    /// `fl_mlid`: force loopback bit 7, source path bits in 6..0.
    pub const FL_MLID: usize = 13;
    /// `rlid` (big-endian): on RoCE v2, the UDP source port (`mlx5_create_ah`).
    pub const RLID: usize = 14;
    /// `rmac`: destination MAC, 6 bytes.
    pub const RMAC: usize = 20;
    /// `tclass`.
    pub const TCLASS: usize = 26;
    /// `hop_limit`.
    pub const HOP_LIMIT: usize = 27;
    /// `grh_gid_fl` (big-endian): GRH present bit 30, source GID index bits 27..20, flow
    /// label bits 19..0.
    pub const GRH_GID_FL: usize = 28;
    /// `rgid`: destination GID, 16 bytes.
    pub const RGID: usize = 32;
}

/// The HCA's rate code for an `enum ibv_rate` value: rdma-core's `ib_to_mlx5_rate_table`
/// (IBTA 1.3 table 224, best effort: each rate to the nearest code at or above it, 0 =
/// unlimited for rates the HCA has no code for, and for values past the table).
pub const fn mlx5_rate(ibv_rate: u8) -> u8 {
    const TABLE: [u8; 23] =
        [0, 0, 7, 8, 9, 10, 11, 12, 13, 14, 15, 11, 13, 15, 0, 9, 15, 0, 0, 9, 13, 0, 0];
    if (ibv_rate as usize) < TABLE.len() {
        TABLE[ibv_rate as usize]
    } else {
        0
    }
}

/// The datagram segment of a UD send.
pub struct DatagramSeg;

impl DatagramSeg {
    /// The address vector for `dest`, as `mlx5_create_ah` fills it for a RoCE v2 address
    /// (the UDP source port in `rlid`, three bits of SL, the static rate through the
    /// provider's rate table) and `set_datagram_seg` completes it with the destination QP and
    /// Q_Key.
    #[inline]
    pub fn encode(dest: &rdma_pmd::UdDest) -> [u8; DATAGRAM_LEN] {
        let a = &dest.addr;
        let mut b = [0u8; DATAGRAM_LEN];
        be::set32(&mut b, av::QKEY, dest.qkey);
        be::set32(&mut b, av::DQP_DCT, (dest.qpn.0 & QpNum::MAX) | EXTENDED_UD_AV);
        b[av::STAT_RATE_SL] = mlx5_rate(a.static_rate) << 4 | (a.sl & 7) << 1;
        be::set16(&mut b, av::RLID, a.udp_sport);
        b[av::RMAC..av::RMAC + 6].copy_from_slice(&a.dmac.0);
        b[av::TCLASS] = a.traffic_class;
        b[av::HOP_LIMIT] = a.hop_limit;
        // The GRH bit stays 0 on RoCE (`mlx5_create_ah` sets it only on InfiniBand): the
        // port puts the IP header in front of every packet anyway.
        let gid_fl = (a.sgid_index as u32) << 20 | (a.flow_label & 0xf_ffff);
        be::set32(&mut b, av::GRH_GID_FL, gid_fl);
        b[av::RGID..av::RGID + 16].copy_from_slice(&a.dgid.0);
        b
    }
}

/// Byte offsets of the Ethernet segment (`struct mlx5_wqe_eth_seg`, mlx5dv.h and the
/// kernel's `include/linux/mlx5/qp.h`): software parser offsets and flags at 0..4 and 5 (the
/// driver sets none), checksum flags at 4, LSO `mss` at 6..8, flow table metadata at 8..12,
/// the inline header's size at 12..14 and its first two bytes at 14..16; the rest of the
/// inline header continues in the following 16-byte units of the WQE.
pub mod eth {
    /// `cs_flags` (`MLX5_ETH_WQE_L3_CSUM` 0x40, `_L4_CSUM` 0x80).
    pub const CS_FLAGS: usize = 4;
    /// `mss` (big-endian; LSO only).
    pub const MSS: usize = 6;
    /// `inline_hdr_sz` (big-endian).
    pub const INLINE_HDR_SZ: usize = 12;
    /// `inline_hdr_start[2]`.
    pub const INLINE_HDR_START: usize = 14;
}

/// Bytes of the inline header that fit in the Ethernet segment itself (the kernel's
/// `INL_HDR_START_SZ`).
pub const ETH_INLINE_START: usize = 2;

/// The L2 header the kernel inlines when the inline mode asks for L2 or more of a frame
/// without an IP header (`MLX5E_MIN_INLINE`: `ETH_HLEN + VLAN_HLEN`).
pub const ETH_MIN_INLINE: usize = 18;

view!(
    /// An Ethernet segment.
    EthSeg,
    SEG_LEN,
    "an Ethernet segment"
);

impl<T: AsRef<[u8]>> EthSeg<T> {
    /// `cs_flags`.
    pub fn cs_flags(&self) -> u8 {
        self.as_bytes()[eth::CS_FLAGS]
    }
    /// `mss` (bytes 6..8, big-endian).
    pub fn mss(&self) -> u16 {
        be::get16(self.as_bytes(), eth::MSS)
    }
    /// `inline_hdr_sz` (bytes 12..14, big-endian): the inline header's whole length.
    pub fn inline_hdr_sz(&self) -> u16 {
        be::get16(self.as_bytes(), eth::INLINE_HDR_SZ)
    }
    /// The inline header's first two bytes.
    pub fn inline_hdr_start(&self) -> [u8; ETH_INLINE_START] {
        let b = self.as_bytes();
        [b[eth::INLINE_HDR_START], b[eth::INLINE_HDR_START + 1]]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthSeg<T> {
    /// Set `inline_hdr_sz` and the first two bytes of the header (`header[..2]`, or fewer).
    pub fn set_inline_hdr(&mut self, header: &[u8]) {
        let b = self.as_bytes_mut();
        be::set16(b, eth::INLINE_HDR_SZ, header.len() as u16);
        let n = header.len().min(ETH_INLINE_START);
        b[eth::INLINE_HDR_START..eth::INLINE_HDR_START + n].copy_from_slice(&header[..n]);
    }
}

impl EthSeg<[u8; SEG_LEN]> {
    /// The Ethernet segment of a frame sent without offloads (no checksum, no LSO, no
    /// software parser) whose first `header.len()` bytes are inline: what `mlx5e_sq_xmit`
    /// writes for such a frame.
    pub fn encode(header: &[u8]) -> [u8; SEG_LEN] {
        let mut s = EthSeg::new_unchecked([0u8; SEG_LEN]);
        s.set_inline_hdr(header);
        s.into_inner()
    }
}

/// Index (in 32-bit words) of the receive queue's doorbell record (`MLX5_RCV_DBR`).
pub const RCV_DBR: usize = 0;
/// Index (in 32-bit words) of the send queue's doorbell record (`MLX5_SND_DBR`): byte offset 4
/// of `mlx5dv_qp.dbrec`.
pub const SND_DBR: usize = 1;

/// The 4 bytes (memory order) to store at `dbrec[SND_DBR]` once the WQE counter is `pi`:
/// `htobe32(pi & 0xffff)` (`post_send_db`).
#[inline]
pub const fn sq_dbrec(pi: u16) -> [u8; 4] {
    (pi as u32).to_be_bytes()
}

/// How many bytes of the last WQE to copy to the BlueFlame register, or 0 for the plain
/// 8-byte doorbell.
///
/// `nreq` is the number of WQEs rung by this doorbell, `ds` the last WQE's size, `bf_size` the
/// size of one half of the BlueFlame register (`mlx5dv_qp.bf.size`; 0 when the QP has none).
/// rdma-core uses BlueFlame only for a single WQE with `1 < ds <= bf_size / 16` (and only when
/// the request was inline or the context prefers BlueFlame, which is the send queue's policy),
/// and then copies `align(ds * 16, 64)` bytes.
#[inline]
pub const fn bf_len(nreq: u32, ds: u8, bf_size: u32) -> usize {
    let bytes = ds as usize * SEND_WQE_DS;
    if nreq == 1 && ds > 1 && bytes <= bf_size as usize {
        bytes.next_multiple_of(SEND_WQE_BB)
    } else {
        0
    }
}

#[cfg(test)]
mod tests;
