//! Every offset the layouts state, against the C compiler's reading of the installed
//! `<infiniband/mlx5dv.h>` (Debian's libibverbs-dev, which the test tiers install): a small C
//! program prints `offsetof` of each field, and each must equal ours.

use std::process::Command;
use std::string::String;
use std::vec::Vec;

use super::cqe::field as cqe;
use super::wqe::{atomic, av, ctrl, data, eth, raddr, DATAGRAM_LEN};

/// `(C expression, our value)`.
fn table() -> Vec<(&'static str, usize)> {
    vec![
        ("offsetof(struct mlx5_wqe_ctrl_seg, opmod_idx_opcode)", ctrl::OPMOD_IDX_OPCODE),
        ("offsetof(struct mlx5_wqe_ctrl_seg, qpn_ds)", ctrl::QPN_DS),
        ("offsetof(struct mlx5_wqe_ctrl_seg, signature)", ctrl::SIGNATURE),
        ("offsetof(struct mlx5_wqe_ctrl_seg, fm_ce_se)", ctrl::FM_CE_SE),
        ("offsetof(struct mlx5_wqe_ctrl_seg, imm)", ctrl::IMM),
        ("offsetof(struct mlx5_wqe_raddr_seg, raddr)", raddr::RADDR),
        ("offsetof(struct mlx5_wqe_raddr_seg, rkey)", raddr::RKEY),
        ("offsetof(struct mlx5_wqe_data_seg, byte_count)", data::BYTE_COUNT),
        ("offsetof(struct mlx5_wqe_data_seg, lkey)", data::LKEY),
        ("offsetof(struct mlx5_wqe_data_seg, addr)", data::ADDR),
        ("offsetof(struct mlx5_wqe_atomic_seg, swap_add)", atomic::SWAP_ADD),
        ("offsetof(struct mlx5_wqe_atomic_seg, compare)", atomic::COMPARE),
        ("sizeof(struct mlx5_wqe_atomic_seg)", 16),
        ("sizeof(struct mlx5_wqe_datagram_seg)", DATAGRAM_LEN),
        ("offsetof(struct mlx5_wqe_av, key.qkey.qkey)", av::QKEY),
        ("offsetof(struct mlx5_wqe_av, dqp_dct)", av::DQP_DCT),
        ("offsetof(struct mlx5_wqe_av, stat_rate_sl)", av::STAT_RATE_SL),
        ("offsetof(struct mlx5_wqe_av, fl_mlid)", av::FL_MLID),
        ("offsetof(struct mlx5_wqe_av, rlid)", av::RLID),
        ("offsetof(struct mlx5_wqe_av, rmac)", av::RMAC),
        ("offsetof(struct mlx5_wqe_av, tclass)", av::TCLASS),
        ("offsetof(struct mlx5_wqe_av, hop_limit)", av::HOP_LIMIT),
        ("offsetof(struct mlx5_wqe_av, grh_gid_fl)", av::GRH_GID_FL),
        ("offsetof(struct mlx5_wqe_av, rgid)", av::RGID),
        ("offsetof(struct mlx5_cqe64, flags_rqpn)", cqe::FLAGS_RQPN),
        ("offsetof(struct mlx5_cqe64, hds_ip_ext)", cqe::HDS_IP_EXT),
        ("offsetof(struct mlx5_cqe64, l4_hdr_type_etc)", cqe::L4_HDR_TYPE_ETC),
        ("offsetof(struct mlx5_cqe64, vlan_info)", cqe::VLAN_INFO),
        ("offsetof(struct mlx5_wqe_eth_seg, cs_flags)", eth::CS_FLAGS),
        ("offsetof(struct mlx5_wqe_eth_seg, mss)", eth::MSS),
        ("offsetof(struct mlx5_wqe_eth_seg, inline_hdr_sz)", eth::INLINE_HDR_SZ),
        ("offsetof(struct mlx5_wqe_eth_seg, inline_hdr_start)", eth::INLINE_HDR_START),
        ("offsetof(struct mlx5_wqe_eth_seg, inline_hdr)", eth::INLINE_HDR_START + 2),
        ("offsetof(struct mlx5_cqe64, srqn_uidx)", cqe::SRQN_UIDX),
        ("offsetof(struct mlx5_cqe64, imm_inval_pkey)", cqe::IMM_INVAL_PKEY),
        ("offsetof(struct mlx5_cqe64, byte_cnt)", cqe::BYTE_CNT),
        ("offsetof(struct mlx5_cqe64, timestamp)", cqe::TIMESTAMP),
        ("offsetof(struct mlx5_cqe64, sop_drop_qpn)", cqe::SOP_DROP_QPN),
        ("offsetof(struct mlx5_cqe64, wqe_counter)", cqe::WQE_COUNTER),
        ("offsetof(struct mlx5_cqe64, op_own)", cqe::OP_OWN),
        ("offsetof(struct mlx5_err_cqe, vendor_err_synd)", cqe::VENDOR_ERR_SYND),
        ("offsetof(struct mlx5_err_cqe, syndrome)", cqe::SYNDROME),
        ("MLX5_EXTENDED_UD_AV", super::wqe::EXTENDED_UD_AV as usize),
        ("MLX5_INVALID_LKEY", super::wqe::INVALID_LKEY as usize),
    ]
}

#[test]
fn offsets_match_the_installed_mlx5dv_h() {
    let t = table();
    let mut src = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/mlx5dv.h>\nint main(void) {\n",
    );
    for (expr, _) in &t {
        src.push_str(&format!("  printf(\"%lu\\n\", (unsigned long)({expr}));\n"));
    }
    src.push_str("  return 0;\n}\n");
    let dir = std::env::temp_dir().join(format!("rdma-pmd-mlx5dv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (c, exe) = (dir.join("offsets.c"), dir.join("offsets"));
    std::fs::write(&c, src).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc).arg("-o").arg(&exe).arg(&c).status();
    assert!(
        matches!(built, Ok(s) if s.success()),
        "{cc} could not compile against <infiniband/mlx5dv.h>: install libibverbs-dev"
    );
    let out = Command::new(&exe).output().unwrap();
    let got: Vec<usize> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(got.len(), t.len());
    for ((expr, ours), c) in t.iter().zip(got) {
        assert_eq!(*ours, c, "{expr}: ours {ours}, mlx5dv.h {c}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
