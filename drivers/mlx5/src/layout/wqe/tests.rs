//! The segment layouts against rdma-core's `mlx5dv.h` structs (offsets and sizes) and against
//! the public conformance vectors' bytes (parse, then build into a poisoned buffer).

use core::mem::offset_of;

use super::*;
use crate::layout::abi;

#[test]
fn ctrl_table_matches_mlx5dv_h() {
    type C = abi::mlx5_wqe_ctrl_seg;
    assert_eq!(offset_of!(C, opmod_idx_opcode), ctrl::OPMOD_IDX_OPCODE);
    assert_eq!(offset_of!(C, qpn_ds), ctrl::QPN_DS);
    assert_eq!(offset_of!(C, signature), ctrl::SIGNATURE);
    assert_eq!(offset_of!(C, dci_stream_channel_id), ctrl::DCI_STREAM);
    assert_eq!(offset_of!(C, fm_ce_se), ctrl::FM_CE_SE);
    assert_eq!(offset_of!(C, imm), ctrl::IMM);
    assert_eq!(core::mem::size_of::<C>(), SEG_LEN);
}

#[test]
fn parses_the_public_vector_ctrl() {
    // write_imm_1sge_signaled, bytes 0..16 (an independent vector built with
    // mlx5dv_set_ctrl_seg).
    let b = [
        0x00, 0x00, 0x0e, 0x09, 0x00, 0x01, 0x23, 0x03, 0x00, 0x00, 0x00, 0x08, 0xde, 0xad, 0xbe,
        0xef,
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
    let enc = CtrlSeg::encode(
        14,
        SendOpcode::RdmaWriteImm,
        QpNum(0x123),
        3,
        FmCeSe::CQ_UPDATE,
        0xdead_beef,
    );
    assert_eq!(enc, b);
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

#[test]
fn raddr_table_matches_mlx5dv_h() {
    type C = abi::mlx5_wqe_raddr_seg;
    assert_eq!(offset_of!(C, raddr), raddr::RADDR);
    assert_eq!(offset_of!(C, rkey), raddr::RKEY);
    assert_eq!(offset_of!(C, reserved), raddr::RESERVED);
    assert_eq!(core::mem::size_of::<C>(), SEG_LEN);
}

#[test]
fn parses_and_builds_the_public_vector_raddr() {
    // write_1sge_signaled, bytes 16..32.
    let b = [0x00, 0x00, 0x7f, 0x00, 0x11, 0x22, 0x33, 0x44, 0xa1, 0xb2, 0xc3, 0xd4, 0, 0, 0, 0];
    let r = RaddrSeg::new_checked(&b[..]).unwrap();
    assert_eq!(r.raddr(), 0x7f00_1122_3344);
    assert_eq!(r.rkey(), Rkey(0xa1b2_c3d4));
    assert_eq!(r.reserved(), 0);
    let mut out = [0x5au8; 16];
    let mut w = RaddrSeg::new_unchecked(&mut out[..]);
    w.set_raddr(0x7f00_1122_3344);
    w.set_rkey(Rkey(0xa1b2_c3d4));
    w.clear_reserved();
    assert_eq!(out, b);
    assert_eq!(RaddrSeg::encode(RemoteBuf::new(0x7f00_1122_3344, Rkey(0xa1b2_c3d4))), b);
}

#[test]
fn data_table_matches_mlx5dv_h() {
    type C = abi::mlx5_wqe_data_seg;
    assert_eq!(offset_of!(C, byte_count), data::BYTE_COUNT);
    assert_eq!(offset_of!(C, lkey), data::LKEY);
    assert_eq!(offset_of!(C, addr), data::ADDR);
    assert_eq!(core::mem::size_of::<C>(), SEG_LEN);
}

#[test]
fn parses_and_builds_the_public_vector_data_seg() {
    // write_1sge_signaled, bytes 32..48 (mlx5dv_set_data_seg).
    let b = [
        0x00, 0x00, 0x10, 0x00, 0x11, 0x22, 0x33, 0x44, 0x00, 0x00, 0x7f, 0xab, 0xcd, 0xef, 0x00,
        0x00,
    ];
    let d = DataSeg::new_checked(&b[..]).unwrap();
    let sge = Sge::new(0x7fab_cdef_0000, 4096, Lkey(0x1122_3344));
    assert_eq!(d.sge(), sge);
    let mut out = [0xeeu8; 16];
    DataSeg::new_unchecked(&mut out[..]).set_sge(&sge);
    assert_eq!(out, b);
    assert_eq!(DataSeg::encode(&sge), b);
    let (lo, hi) = halves(DataSeg::encode(&sge));
    assert_eq!((&lo[..], &hi[..]), (&b[..8], &b[8..]));
}

#[test]
fn parses_and_builds_the_public_vector_inline() {
    // write_inline_20, bytes 32..56.
    let mut b = [0u8; 24];
    b[..4].copy_from_slice(&[0x80, 0x00, 0x00, 0x14]);
    for (k, x) in b[4..].iter_mut().enumerate() {
        *x = 0x30 + k as u8;
    }
    let s = InlineSeg::new_checked(&b[..]).unwrap();
    assert!(s.is_inline());
    assert_eq!(s.len(), 20);
    assert_eq!(s.payload()[0], 0x30);
    assert_eq!(inline_ds_units(20), 2);
    let mut out = [0u8; 24];
    let mut w = InlineSeg::new_unchecked(&mut out[..]);
    w.set_len(20);
    w.payload_mut().copy_from_slice(&b[4..]);
    assert_eq!(out, b);
    assert_eq!(InlineSeg::encode_header(20), b[..4]);
    assert!(InlineSeg::new_checked(&b[..23]).unwrap().check_payload().is_err());
    assert!(InlineSeg::new_checked(&b[..3]).is_err());
}

#[test]
fn ds_units_follow_set_data_inl_seg() {
    assert_eq!(inline_ds_units(0), 0);
    assert_eq!(inline_ds_units(1), 1);
    assert_eq!(inline_ds_units(12), 1);
    assert_eq!(inline_ds_units(13), 2);
    assert_eq!(inline_ds_units(220), 14);
}

#[test]
fn doorbell_values_follow_the_provider() {
    assert_eq!(sq_dbrec(1), [0, 0, 0, 1]);
    assert_eq!(sq_dbrec(0xffff), [0, 0, 0xff, 0xff]);
    assert_eq!(bf_len(1, 3, 256), 64);
    assert_eq!(bf_len(1, 5, 256), 128);
    assert_eq!(bf_len(1, 16, 256), 256);
    assert_eq!(bf_len(1, 17, 256), 0);
    assert_eq!(bf_len(1, 1, 256), 0);
    assert_eq!(bf_len(2, 3, 256), 0);
    assert_eq!(bf_len(1, 3, 0), 0);
}
