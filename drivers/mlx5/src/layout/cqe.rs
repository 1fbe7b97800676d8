//! 64-byte completion queue entries.
//!
//! Layout of `struct mlx5_cqe64` and its error view `struct mlx5_err_cqe` (rdma-core
//! `infiniband/mlx5dv.h`), the fields a requester uses; all **big-endian**. With 128-byte CQEs
//! this is the *second* half of the entry (`cq.c` `get_sw_cqe`).
//!
//! | bytes | field | view |
//! |---|---|---|
//! | 32..36 | `srqn_uidx` | both; low 24 bits: user index (CQE version 1) |
//! | 36..40 | `imm_inval_pkey` | success |
//! | 44..48 | `byte_cnt` | success (read by rdma-core for RDMA READ and atomics only) |
//! | 48..56 | `timestamp` | success |
//! | 54 | `vendor_err_synd` | error → `wc.vendor_err` |
//! | 55 | `syndrome` | error ([`Syndrome`]) |
//! | 56 | `s_wqe_opcode` | top byte of `sop_drop_qpn`: the send WQE's opcode |
//! | 57..60 | `qpn` | low 24 bits of `sop_drop_qpn` |
//! | 60..62 | `wqe_counter` | counter of the completed WQE; slot = `wqe_counter & (wqe_cnt-1)` |
//! | 62 | `signature` | |
//! | 63 | `op_own` | `opcode << 4 \| inline-scatter bits 3:2 \| se bit 1 \| owner bit 0` |
//!
//! House rule: the CQE lives in DMA memory, so the data path checks ownership on the `op_own`
//! byte with [`sw_owned`], issues the `udma_from_device_barrier` equivalent, copies the 64 bytes
//! out, and only then parses the copy with [`Cqe`].

use rdma_pmd::{Completion, QpNum, Result, WcOpcode, WcStatus};

use super::codes::{CqeOpcode, SendOpcode, Syndrome};
use super::{be, view};

pub(crate) mod field {
    pub const FLAGS_RQPN: usize = 24;
    pub const HDS_IP_EXT: usize = 28;
    pub const L4_HDR_TYPE_ETC: usize = 29;
    pub const VLAN_INFO: usize = 30;
    pub const SRQN_UIDX: usize = 32;
    pub const IMM_INVAL_PKEY: usize = 36;
    pub const BYTE_CNT: usize = 44;
    pub const TIMESTAMP: usize = 48;
    pub const VENDOR_ERR_SYND: usize = 54;
    pub const SYNDROME: usize = 55;
    pub const SOP_DROP_QPN: usize = 56;
    pub const WQE_COUNTER: usize = 60;
    pub const SIGNATURE: usize = 62;
    pub const OP_OWN: usize = 63;
}

/// Length of a CQE (the 64-byte half that holds `mlx5_cqe64`).
pub const LEN: usize = 64;
/// `op_own` of an entry the device has not written yet (`cq.c` initialises every entry so).
pub const OP_OWN_INVALID: u8 = 0xf0;

/// Index of a CQ's consumer-index doorbell record (`MLX5_CQ_SET_CI`).
pub const CQ_SET_CI: usize = 0;
/// Index of a CQ's arm doorbell record (`MLX5_CQ_ARM_DB`).
pub const CQ_ARM_DB: usize = 1;

/// The 4 bytes (memory order) to store at `dbrec[CQ_SET_CI]` once the consumer index is `ci`:
/// `htobe32(ci & 0xffffff)` (`cq.c` `update_cons_index`).
#[inline]
pub const fn cq_ci_dbrec(ci: u32) -> [u8; 4] {
    (ci & 0x00ff_ffff).to_be_bytes()
}

/// The provider's ownership test (`cq.c` `get_sw_cqe`): the entry polled at consumer index
/// `ci` in a CQ of `cqe_cnt` entries (a power of two) belongs to software iff its opcode is not
/// `MLX5_CQE_INVALID` and its owner bit equals `!!(ci & cqe_cnt)`, which flips every lap.
#[inline]
pub const fn sw_owned(op_own: u8, ci: u32, cqe_cnt: u32) -> bool {
    sw_owned_in_lap(op_own, (ci & cqe_cnt != 0) as u8)
}

/// [`sw_owned`] for an entry of a lap whose owner bit software expects is `owner` (0 or 1):
/// the opcode (high nibble) is not `0xf` and bit 0 is `owner`.
///
/// Stated as one test: `op_own ^ owner` keeps the opcode and clears bit 0 iff the owner bit
/// is the expected one, and adding `0x10` to it carries into bit 8 iff the opcode is `0xf`.
#[inline(always)]
pub const fn sw_owned_in_lap(op_own: u8, owner: u8) -> bool {
    debug_assert!(owner <= 1);
    ((op_own ^ owner) as u32 + 0x10) & 0x101 == 0
}

view!(
    /// A 64-byte CQE.
    Cqe,
    LEN,
    "a CQE"
);

impl<T: AsRef<[u8]>> Cqe<T> {
    fn b(&self) -> &[u8] {
        self.as_bytes()
    }

    /// `op_own` (byte 63).
    #[inline]
    pub fn op_own(&self) -> u8 {
        self.b()[field::OP_OWN]
    }

    /// The CQE opcode (high nibble of `op_own`; `mlx5dv_get_cqe_opcode`).
    #[inline]
    pub fn opcode(&self) -> CqeOpcode {
        CqeOpcode::from(self.op_own() >> 4)
    }

    /// The owner bit (bit 0 of `op_own`; `mlx5dv_get_cqe_owner`).
    #[inline]
    pub fn owner(&self) -> bool {
        self.op_own() & 1 != 0
    }

    /// Whether software owns this entry at consumer index `ci` of a `cqe_cnt`-entry CQ.
    pub fn sw_owned(&self, ci: u32, cqe_cnt: u32) -> bool {
        sw_owned(self.op_own(), ci, cqe_cnt)
    }

    /// `flags_rqpn` (bytes 24..28, big-endian): on a responder CQE of a UD QP, the source
    /// QP in bits 23..0 and the GRH flags in bits 29..28.
    #[inline]
    pub fn flags_rqpn(&self) -> u32 {
        be::get32(self.b(), field::FLAGS_RQPN)
    }

    /// `srqn_uidx` (bytes 32..36, big-endian), all 32 bits.
    #[inline]
    pub fn srqn_uidx(&self) -> u32 {
        be::get32(self.b(), field::SRQN_UIDX)
    }

    /// The user index: low 24 bits of `srqn_uidx` (CQE version 1).
    #[inline]
    pub fn uidx(&self) -> u32 {
        self.srqn_uidx() & 0x00ff_ffff
    }

    /// `imm_inval_pkey` (bytes 36..40, big-endian).
    #[inline]
    pub fn imm_inval_pkey(&self) -> u32 {
        be::get32(self.b(), field::IMM_INVAL_PKEY)
    }

    /// `hds_ip_ext` (byte 28) of a raw packet's CQE: `MLX5_CQE_L2_OK` (bit 0), `_L3_OK`
    /// (bit 1), `_L4_OK` (bit 2), where the RQ checks checksums.
    #[inline]
    pub fn hds_ip_ext(&self) -> u8 {
        self.b()[field::HDS_IP_EXT]
    }

    /// `l4_hdr_type_etc` (byte 29) of a raw packet's CQE: L4 header type in bits 6..4, L3
    /// header type in bits 3..2 (kernel `get_cqe_l3_hdr_type`), and bit 0 set when the
    /// device stripped a VLAN tag into [`vlan_info`](Self::vlan_info)
    /// (`MLX5_CQE_VLAN_STRIPPED`).
    #[inline]
    pub fn l4_hdr_type_etc(&self) -> u8 {
        self.b()[field::L4_HDR_TYPE_ETC]
    }

    /// Whether the device stripped a VLAN tag from the frame.
    #[inline]
    pub fn vlan_stripped(&self) -> bool {
        self.l4_hdr_type_etc() & 1 != 0
    }

    /// `vlan_info` (bytes 30..32, big-endian): the stripped tag's TCI.
    #[inline]
    pub fn vlan_info(&self) -> u16 {
        be::get16(self.b(), field::VLAN_INFO)
    }

    /// `byte_cnt` (bytes 44..48, big-endian).
    #[inline]
    pub fn byte_cnt(&self) -> u32 {
        be::get32(self.b(), field::BYTE_CNT)
    }

    /// `timestamp` (bytes 48..56, big-endian). Meaningless in an error CQE, whose bytes 54/55
    /// hold the syndromes.
    #[inline]
    pub fn timestamp(&self) -> u64 {
        be::get64(self.b(), field::TIMESTAMP)
    }

    /// `sop_drop_qpn` / `s_wqe_opcode_qpn` (bytes 56..60, big-endian).
    #[inline]
    pub fn sop_drop_qpn(&self) -> u32 {
        be::get32(self.b(), field::SOP_DROP_QPN)
    }

    /// The send WQE opcode of a requester CQE (byte 56).
    #[inline]
    pub fn s_wqe_opcode(&self) -> SendOpcode {
        SendOpcode::from(self.s_wqe_opcode_raw())
    }

    /// [`s_wqe_opcode`](Self::s_wqe_opcode) as the raw byte (byte 56).
    #[inline]
    pub fn s_wqe_opcode_raw(&self) -> u8 {
        self.b()[field::SOP_DROP_QPN]
    }

    /// The QP number (bytes 57..60, big-endian, 24 bits).
    #[inline]
    pub fn qpn(&self) -> QpNum {
        QpNum(self.sop_drop_qpn() & QpNum::MAX)
    }

    /// The counter of the completed WQE (bytes 60..62, big-endian).
    #[inline]
    pub fn wqe_counter(&self) -> u16 {
        be::get16(self.b(), field::WQE_COUNTER)
    }

    /// The signature byte (byte 62).
    #[inline]
    pub fn signature(&self) -> u8 {
        self.b()[field::SIGNATURE]
    }

    /// Error view: the vendor syndrome (byte 54), reported as `wc.vendor_err`.
    #[inline]
    pub fn vendor_err_synd(&self) -> u8 {
        self.b()[field::VENDOR_ERR_SYND]
    }

    /// Error view: the syndrome (byte 55).
    #[inline]
    pub fn syndrome(&self) -> Syndrome {
        Syndrome::from(self.syndrome_raw())
    }

    /// Error view: the syndrome byte as it is.
    #[inline]
    pub fn syndrome_raw(&self) -> u8 {
        self.b()[field::SYNDROME]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Cqe<T> {
    /// Set `op_own` (byte 63).
    pub fn set_op_own(&mut self, v: u8) {
        self.as_bytes_mut()[field::OP_OWN] = v;
    }

    /// Set `srqn_uidx` (bytes 32..36, big-endian).
    pub fn set_srqn_uidx(&mut self, v: u32) {
        be::set32(self.as_bytes_mut(), field::SRQN_UIDX, v);
    }

    /// Set `imm_inval_pkey` (bytes 36..40, big-endian).
    pub fn set_imm_inval_pkey(&mut self, v: u32) {
        be::set32(self.as_bytes_mut(), field::IMM_INVAL_PKEY, v);
    }

    /// Set `byte_cnt` (bytes 44..48, big-endian).
    pub fn set_byte_cnt(&mut self, v: u32) {
        be::set32(self.as_bytes_mut(), field::BYTE_CNT, v);
    }

    /// Set `timestamp` (bytes 48..56, big-endian).
    pub fn set_timestamp(&mut self, v: u64) {
        be::set64(self.as_bytes_mut(), field::TIMESTAMP, v);
    }

    /// Set the send opcode and QP number (bytes 56..60, big-endian; QP number 24 bits).
    pub fn set_s_wqe_opcode_qpn(&mut self, op: SendOpcode, qpn: QpNum) {
        let v = (u8::from(op) as u32) << 24 | (qpn.0 & QpNum::MAX);
        be::set32(self.as_bytes_mut(), field::SOP_DROP_QPN, v);
    }

    /// Set the WQE counter (bytes 60..62, big-endian).
    pub fn set_wqe_counter(&mut self, v: u16) {
        be::set16(self.as_bytes_mut(), field::WQE_COUNTER, v);
    }

    /// Error view: set the vendor syndrome (byte 54) and syndrome (byte 55).
    pub fn set_error(&mut self, syndrome: Syndrome, vendor_err: u8) {
        let b = self.as_bytes_mut();
        b[field::VENDOR_ERR_SYND] = vendor_err;
        b[field::SYNDROME] = u8::from(syndrome);
    }
}

/// What a requester needs from a CQE, decoded once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqeRepr {
    /// The raw `op_own` byte.
    pub op_own: u8,
    /// The CQE opcode.
    pub opcode: CqeOpcode,
    /// The owner bit.
    pub owner: bool,
    /// Counter of the completed WQE.
    pub wqe_counter: u16,
    /// QP number.
    pub qpn: QpNum,
    /// Opcode of the completed send WQE.
    pub s_wqe_opcode: SendOpcode,
    /// `byte_cnt`.
    pub byte_cnt: u32,
    /// `srqn_uidx`, all 32 bits.
    pub srqn_uidx: u32,
    /// `timestamp`, for CQEs that are not errors.
    pub timestamp: Option<u64>,
    /// `(syndrome, vendor_err_synd)`, for error CQEs.
    pub error: Option<(Syndrome, u8)>,
}

impl CqeRepr {
    /// Decode a CQE.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(cqe: &Cqe<T>) -> Result<CqeRepr> {
        cqe.check_len()?;
        let opcode = cqe.opcode();
        let err = opcode.is_error();
        Ok(CqeRepr {
            op_own: cqe.op_own(),
            opcode,
            owner: cqe.owner(),
            wqe_counter: cqe.wqe_counter(),
            qpn: cqe.qpn(),
            s_wqe_opcode: cqe.s_wqe_opcode(),
            byte_cnt: cqe.byte_cnt(),
            srqn_uidx: cqe.srqn_uidx(),
            timestamp: if err { None } else { Some(cqe.timestamp()) },
            error: if err { Some((cqe.syndrome(), cqe.vendor_err_synd())) } else { None },
        })
    }

    /// The completion status (`cq.c` `mlx5_parse_cqe`: success for `MLX5_CQE_REQ`,
    /// `mlx5_handle_error_cqe` for error CQEs).
    #[inline]
    pub fn status(&self) -> WcStatus {
        match self.error {
            Some((s, _)) => s.wc_status(),
            None => WcStatus::Success,
        }
    }

    /// `wc.vendor_err`: the vendor syndrome of an error CQE, else 0.
    #[inline]
    pub fn vendor_err(&self) -> u32 {
        self.error.map(|(_, v)| v as u32).unwrap_or(0)
    }

    /// The work completion of a requester CQE, with the `wr_id` the data path recorded for
    /// slot `wqe_counter & (wqe_cnt - 1)`. `byte_len` is set as `cq.c` `handle_good_req` sets
    /// it (only RDMA READ reports one among the opcodes listed there).
    pub fn completion(&self, wr_id: u64) -> Completion {
        let mut c = Completion::new(
            wr_id,
            self.status(),
            self.s_wqe_opcode.wc_opcode().unwrap_or(WcOpcode::RdmaWrite),
            self.qpn,
        );
        c.vendor_err = self.vendor_err();
        if self.error.is_none() && self.s_wqe_opcode == SendOpcode::RdmaRead {
            c.byte_len = self.byte_cnt;
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::abi::{mlx5_cqe64 as C, mlx5_err_cqe as E};
    use core::mem::offset_of;

    fn hex(s: &str) -> [u8; 64] {
        let mut out = [0u8; 64];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap();
        }
        out
    }

    #[test]
    fn the_consumer_index_record_is_24_bits_big_endian() {
        assert_eq!(cq_ci_dbrec(0x0123_4567), [0, 0x23, 0x45, 0x67]);
    }

    #[test]
    fn field_table_matches_mlx5dv_h() {
        assert_eq!(offset_of!(C, srqn_uidx), field::SRQN_UIDX);
        assert_eq!(offset_of!(C, imm_inval_pkey), field::IMM_INVAL_PKEY);
        assert_eq!(offset_of!(C, byte_cnt), field::BYTE_CNT);
        assert_eq!(offset_of!(C, timestamp), field::TIMESTAMP);
        assert_eq!(offset_of!(C, sop_drop_qpn), field::SOP_DROP_QPN);
        assert_eq!(offset_of!(C, wqe_counter), field::WQE_COUNTER);
        assert_eq!(offset_of!(C, signature), field::SIGNATURE);
        assert_eq!(offset_of!(C, op_own), field::OP_OWN);
        assert_eq!(offset_of!(E, vendor_err_synd), field::VENDOR_ERR_SYND);
        assert_eq!(offset_of!(E, syndrome), field::SYNDROME);
        assert_eq!(offset_of!(E, s_wqe_opcode_qpn), field::SOP_DROP_QPN);
        assert_eq!(offset_of!(E, srqn), field::SRQN_UIDX);
    }

    #[test]
    fn parses_the_public_error_vector() {
        // req_err_remote_access from the public vector file.
        let b = hex(concat!(
            "0000000000000000000000000000000000000000000000000000000000000000",
            "0000004200000000000000000000000000000000000088130812",
            "34ab000100d0"
        ));
        let c = Cqe::new_checked(&b[..]).unwrap();
        assert_eq!(c.opcode(), CqeOpcode::ReqErr);
        assert!(!c.owner());
        assert_eq!(c.syndrome(), Syndrome::RemoteAccessErr);
        assert_eq!(c.vendor_err_synd(), 0x88);
        assert_eq!(c.s_wqe_opcode(), SendOpcode::RdmaWrite);
        assert_eq!(c.qpn(), QpNum(0x1234ab));
        assert_eq!(c.wqe_counter(), 1);
        assert_eq!(c.uidx(), 0x42);
        assert!(c.sw_owned(7, 256));
        assert!(!c.sw_owned(256 + 7, 256));
        let r = CqeRepr::parse(&c).unwrap();
        assert_eq!(r.status(), WcStatus::RemAccessErr);
        let wc = r.completion(99);
        assert_eq!((wc.wr_id, wc.vendor_err, wc.qp_num), (99, 0x88, QpNum(0x1234ab)));

        let mut out = [0u8; 64];
        let mut w = Cqe::new_unchecked(&mut out[..]);
        w.set_srqn_uidx(0x42);
        w.set_error(Syndrome::RemoteAccessErr, 0x88);
        w.set_s_wqe_opcode_qpn(SendOpcode::RdmaWrite, QpNum(0x1234ab));
        w.set_wqe_counter(1);
        w.set_op_own(0xd0);
        assert_eq!(out, b);
    }

    proptest::proptest! {
        #[test]
        fn parse_of_build_round_trips(
            opcode in 0u8..16,
            owner in proptest::bool::ANY,
            wqe_counter in proptest::num::u16::ANY,
            qpn in proptest::num::u32::ANY,
            s_op in proptest::num::u8::ANY,
            byte_cnt in proptest::num::u32::ANY,
            ts in proptest::num::u64::ANY,
            uidx in proptest::num::u32::ANY,
            imm in proptest::num::u32::ANY,
            syndrome in proptest::num::u8::ANY,
            vendor in proptest::num::u8::ANY,
            ci in proptest::num::u32::ANY,
            log_cnt in 0u32..24,
        ) {
            let mut b = [0u8; 64];
            let mut w = Cqe::new_unchecked(&mut b[..]);
            w.set_srqn_uidx(uidx);
            w.set_imm_inval_pkey(imm);
            w.set_byte_cnt(byte_cnt);
            let err = CqeOpcode::from(opcode).is_error();
            if err {
                w.set_error(Syndrome::from(syndrome), vendor);
            } else {
                w.set_timestamp(ts);
            }
            w.set_s_wqe_opcode_qpn(SendOpcode::from(s_op), QpNum(qpn));
            w.set_wqe_counter(wqe_counter);
            w.set_op_own(opcode << 4 | owner as u8);
            let r = CqeRepr::parse(&Cqe::new_unchecked(&b[..])).unwrap();
            proptest::prop_assert_eq!(u8::from(r.opcode), opcode);
            proptest::prop_assert_eq!(r.owner, owner);
            proptest::prop_assert_eq!(r.wqe_counter, wqe_counter);
            proptest::prop_assert_eq!(r.qpn, QpNum(qpn & QpNum::MAX));
            proptest::prop_assert_eq!(u8::from(r.s_wqe_opcode), s_op);
            proptest::prop_assert_eq!((r.byte_cnt, r.srqn_uidx), (byte_cnt, uidx));
            proptest::prop_assert_eq!(Cqe::new_unchecked(&b[..]).imm_inval_pkey(), imm);
            proptest::prop_assert_eq!(&b[36..40], &imm.to_be_bytes()[..]);
            if err {
                proptest::prop_assert_eq!(r.error, Some((Syndrome::from(syndrome), vendor)));
                proptest::prop_assert_eq!(r.status(), Syndrome::from(syndrome).wc_status());
                proptest::prop_assert_eq!(r.completion(7).vendor_err, vendor as u32);
            } else {
                proptest::prop_assert_eq!(r.timestamp, Some(ts));
                proptest::prop_assert_eq!(r.status(), WcStatus::Success);
            }
            let cnt = 1u32 << log_cnt;
            let want = opcode != 0xf && owner == (ci & cnt != 0);
            proptest::prop_assert_eq!(sw_owned(b[63], ci, cnt), want);
        }
    }

    #[test]
    fn ownership_flips_each_lap_and_skips_invalid() {
        assert!(sw_owned(0x00, 5, 256));
        assert!(!sw_owned(0x01, 5, 256));
        assert!(sw_owned(0x01, 256 + 5, 256));
        assert!(!sw_owned(OP_OWN_INVALID, 5, 256));
        assert!(!sw_owned(0xf1, 256 + 5, 256));
    }

    #[test]
    fn the_one_test_ownership_is_the_providers_two_for_every_byte() {
        for op_own in 0..=u8::MAX {
            for owner in 0..=1u8 {
                let want = op_own >> 4 != 0xf && op_own & 1 == owner;
                assert_eq!(sw_owned_in_lap(op_own, owner), want, "{op_own:#x} {owner}");
            }
        }
    }
}
