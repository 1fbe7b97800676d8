use core::cell::Cell;

use rdma_pmd::{BusAddr, Error, Gid, Mac, QpNum};
use rdma_pmd_hal::Clock;

use super::*;
use crate::control::bringup::{bitmap_words, HcaConfig, PagePool};
use crate::control::cmd::CmdConfig;
use crate::control::{calc_flow_label, flow_label_to_udp_sport};
use crate::testing::fw::{default_state, only_fields, script};

struct Ticks(Cell<u64>);
impl Clock for Ticks {
    fn now_ns(&self) -> u64 {
        let t = self.0.get() + 1_000;
        self.0.set(t);
        t
    }
}

use crate::testing::fw::example_caps as caps;

fn g(buf: &[u8], f: ifc::Field, outer: ifc::Field) -> u64 {
    ifc::get(buf, f.within(outer))
}

#[test]
fn create_mkey_mtt_fields() {
    let p = MkeyParams {
        pd: Pdn(0x123),
        start: 0x7f00_0000_0800,
        len: 3 * 4096,
        access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        translation: Translation::Mtt { base: BusAddr(0xe0_0010_0000), page_shift: 12 },
    };
    let (c, pas) = create_mkey_cmd(&p, 0x5a).unwrap();
    let m = create_mkey_in::MEMORY_KEY_MKEY_ENTRY;
    assert_eq!(&c[0..2], &[0x02, 0x00], "opcode CREATE_MKEY, big-endian");
    assert_eq!(g(&c, mkc::ACCESS_MODE_1_0, m), 1, "MTT");
    assert_eq!(
        (g(&c, mkc::LW, m), g(&c, mkc::LR, m), g(&c, mkc::RW, m), g(&c, mkc::RR, m)),
        (1, 1, 1, 0)
    );
    assert_eq!(g(&c, mkc::A, m), 0);
    assert_eq!(g(&c, mkc::QPN, m), 0xff_ffff);
    assert_eq!(g(&c, mkc::MKEY_7_0, m), 0x5a);
    assert_eq!(g(&c, mkc::PD, m), 0x123);
    assert_eq!(g(&c, mkc::START_ADDR, m), 0x7f00_0000_0800);
    assert_eq!(g(&c, mkc::LEN, m), 3 * 4096);
    assert_eq!(g(&c, mkc::LOG_PAGE_SIZE, m), 12);
    // Start 0x800 into its page, 3 pages long: 4 pages touched, 2 octwords.
    assert_eq!(g(&c, mkc::TRANSLATIONS_OCTWORD_SIZE, m), 2);
    assert_eq!(ifc::get(&c, create_mkey_in::TRANSLATIONS_OCTWORD_ACTUAL_SIZE), 2);
    match pas {
        Pas::LinearPadded { base, step, count, total } => {
            assert_eq!((base, step, count, total), (0xe0_0010_0000, 4096, 4, 4));
        }
        other => panic!("{other:?}"),
    }
    // The MTT list starts right after the fixed part (`klm_pas_mtt` at byte 0x110).
    assert_eq!(create_mkey_in::KLM_PAS_MTT.byte(), c.len());
    let k = |f: ifc::Field| f.within(m);
    only_fields(
        &c,
        &[
            create_mkey_in::OPCODE,
            create_mkey_in::TRANSLATIONS_OCTWORD_ACTUAL_SIZE,
            k(mkc::ACCESS_MODE_1_0),
            k(mkc::LW),
            k(mkc::LR),
            k(mkc::RW),
            k(mkc::RR),
            k(mkc::QPN),
            k(mkc::MKEY_7_0),
            k(mkc::PD),
            k(mkc::START_ADDR),
            k(mkc::LEN),
            k(mkc::TRANSLATIONS_OCTWORD_SIZE),
            k(mkc::LOG_PAGE_SIZE),
        ],
    );
}

#[test]
fn create_mkey_mtt_pads_odd_lists_and_checks_alignment() {
    let mut p = MkeyParams {
        pd: Pdn(1),
        start: 0x1000,
        len: 4096,
        access: Access::empty(),
        translation: Translation::Mtt { base: BusAddr(0x10_0000), page_shift: 12 },
    };
    let (c, pas) = create_mkey_cmd(&p, 1).unwrap();
    assert_eq!(ifc::get(&c, create_mkey_in::TRANSLATIONS_OCTWORD_ACTUAL_SIZE), 1);
    assert_eq!(pas.len(), 2, "one page, padded to an octword");
    // The pad entry is 0, as in the kernel's zeroed command, not the next page's address.
    assert_eq!((pas.get(0), pas.get(1)), (0x10_0000, 0));
    p.translation = Translation::Mtt { base: BusAddr(0x10_0800), page_shift: 12 };
    assert!(matches!(create_mkey_cmd(&p, 1), Err(Error::InvalidArgument(_))));
}

#[test]
fn create_mkey_physical_has_no_translation() {
    let p = MkeyParams {
        pd: Pdn(2),
        start: 0x20_0000,
        len: 0x1000,
        access: Access::REMOTE_READ,
        translation: Translation::Physical,
    };
    let (c, pas) = create_mkey_cmd(&p, 3).unwrap();
    let m = create_mkey_in::MEMORY_KEY_MKEY_ENTRY;
    assert_eq!(g(&c, mkc::ACCESS_MODE_1_0, m), 0, "PA");
    assert_eq!(g(&c, mkc::RR, m), 1);
    // `mlx5_ib_get_dma_mr`: the PA key spans every address from start on (length64), len 0.
    assert_eq!((g(&c, mkc::LENGTH64, m), g(&c, mkc::LEN, m)), (1, 0));
    assert_eq!(g(&c, mkc::TRANSLATIONS_OCTWORD_SIZE, m), 0);
    assert!(pas.is_empty());
}

#[test]
fn create_cq_fields() {
    let p = CqParams {
        log_size: 8,
        buf: BusAddr(0xe0_0000_4000),
        dbrec: BusAddr(0xe0_0000_9040),
        uar: Uar { index: 9, bar_offset: 9 * 4096 },
    };
    let (c, pas) = create_cq_cmd(&p, 6).unwrap();
    let x = create_cq_in::CQ_CONTEXT;
    assert_eq!(&c[0..2], &[0x04, 0x00]);
    assert_eq!(g(&c, cqc::LOG_CQ_SIZE, x), 8);
    assert_eq!(g(&c, cqc::UAR_PAGE, x), 9);
    assert_eq!(g(&c, cqc::C_EQN_OR_APU_ELEMENT, x), 6);
    assert_eq!(g(&c, cqc::CQE_SZ, x), 0);
    assert_eq!(g(&c, cqc::DBR_ADDR, x), 0xe0_0000_9040);
    assert_eq!(g(&c, cqc::LOG_PAGE_SIZE, x), 0);
    assert_eq!(pas.len(), 4, "256 CQEs of 64 bytes = 4 pages");
    assert_eq!(create_cq_in::PAS.byte(), c.len());
    let bad = CqParams { buf: BusAddr(0xe0_0000_4040), ..p };
    assert!(create_cq_cmd(&bad, 6).is_err());
}

fn qp_params(rq: Option<u8>) -> QpParams {
    QpParams {
        service: Service::Rc,
        pd: Pdn(3),
        send_cq: Cqn(7),
        recv_cq: Cqn(8),
        log_sq_size: 7,
        log_rq_size: rq,
        log_rq_stride: 5,
        buf: BusAddr(0xe0_0002_0000),
        dbrec: BusAddr(0xe0_0003_0008),
        uar: Uar { index: 2, bar_offset: 2 * 4096 },
    }
}

#[test]
fn create_qp_fields() {
    let (c, pas) = create_qp_cmd(&qp_params(Some(6)), &caps()).unwrap();
    let x = create_qp_in::QPC;
    assert_eq!(&c[0..2], &[0x05, 0x00]);
    assert_eq!(g(&c, qpc::ST, x), 0, "RC");
    assert_eq!(g(&c, qpc::PM_STATE, x), 3, "migrated");
    assert_eq!(g(&c, qpc::PD, x), 3);
    assert_eq!(g(&c, qpc::UAR_PAGE, x), 2);
    assert_eq!(g(&c, qpc::LOG_MSG_MAX, x), 30);
    assert_eq!(g(&c, qpc::LOG_RQ_SIZE, x), 6);
    assert_eq!(g(&c, qpc::LOG_RQ_STRIDE, x), 1, "32-byte stride in 16-byte units");
    assert_eq!(g(&c, qpc::RQ_TYPE, x), 0);
    assert_eq!(g(&c, qpc::LOG_SQ_SIZE, x), 7);
    assert_eq!(g(&c, qpc::NO_SQ, x), 0);
    assert_eq!(g(&c, qpc::CQN_SND, x), 7);
    assert_eq!(g(&c, qpc::CQN_RCV, x), 8);
    assert_eq!(g(&c, qpc::DBR_ADDR, x), 0xe0_0003_0008);
    assert_eq!(g(&c, qpc::TS_FORMAT, x), 0, "no format offered: free running");
    // `create_kernel_qp`: fast registration and the reserved lkey; CQE v1: "no user index".
    assert_eq!((g(&c, qpc::FRE, x), g(&c, qpc::RLKY, x)), (1, 1));
    assert_eq!(g(&c, qpc::USER_INDEX, x), 0xff_ffff);
    assert_eq!((g(&c, qpc::XRCD, x), g(&c, qpc::SRQN_RMPN_XRQN, x)), (0, 0));
    // RQ 64 x 32 B = 2 KiB, SQ 128 x 64 B = 8 KiB: 10 KiB, 3 pages.
    assert_eq!(pas.len(), 3);
    assert_eq!(create_qp_in::PAS.byte(), c.len());
    let q = |f: ifc::Field| f.within(x);
    only_fields(
        &c,
        &[
            create_qp_in::OPCODE,
            q(qpc::ST),
            q(qpc::PM_STATE),
            q(qpc::PD),
            q(qpc::UAR_PAGE),
            q(qpc::LOG_MSG_MAX),
            q(qpc::LOG_RQ_SIZE),
            q(qpc::LOG_RQ_STRIDE),
            q(qpc::LOG_SQ_SIZE),
            q(qpc::CQN_SND),
            q(qpc::CQN_RCV),
            q(qpc::DBR_ADDR),
            q(qpc::FRE),
            q(qpc::RLKY),
            q(qpc::USER_INDEX),
        ],
    );

    let (c, pas) = create_qp_cmd(&qp_params(None), &caps()).unwrap();
    assert_eq!(g(&c, qpc::RQ_TYPE, x), ZERO_LEN_RQ);
    assert_eq!(g(&c, qpc::LOG_RQ_SIZE, x), 0);
    assert_eq!(pas.len(), 2);
}

#[test]
fn rst2init_fields() {
    let t = Transition::RstToInit { port: 1, access: Access::REMOTE_WRITE | Access::REMOTE_READ };
    let (c, len) = modify_qp_cmd(QpNum(0xabcdef), &t, 1, &caps()).unwrap();
    assert_eq!(len, rst2init_qp_in::SIZE);
    assert_eq!(&c[0..2], &[0x05, 0x02]);
    assert_eq!(&c[9..12], &[0xab, 0xcd, 0xef], "qpn in bytes 9..12");
    let x = rst2init_qp_in::QPC;
    let path = qpc::PRIMARY_ADDRESS_PATH.within(x);
    assert_eq!(g(&c, ads::VHCA_PORT_NUM, path), 1);
    assert_eq!((g(&c, qpc::RWE, x), g(&c, qpc::RRE, x), g(&c, qpc::RAE, x)), (1, 1, 0));
    assert_eq!(g(&c, qpc::PM_STATE, x), 3);
}

#[test]
fn init2rtr_roce_v2_path_fields() {
    let dgid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2];
    let t = Transition::InitToRtr {
        remote_qpn: QpNum(0x77),
        path: Path::RoceV2 {
            dgid,
            dmac: [0x02, 0x11, 0x22, 0x33, 0x44, 0x55],
            sgid_index: 3,
            udp_sport: 0xc123,
            hop_limit: 0,
            traffic_class: 0x6a,
            flow_label: 0x1_2345,
            sl: 0xd,
        },
        mtu: 3,
        rq_psn: 0x12_3456,
    };
    let (c, len) = modify_qp_cmd(QpNum(5), &t, 1, &caps()).unwrap();
    assert_eq!(len, init2rtr_qp_in::SIZE);
    assert_eq!(&c[0..2], &[0x05, 0x03]);
    let x = init2rtr_qp_in::QPC;
    let path = qpc::PRIMARY_ADDRESS_PATH.within(x);
    assert_eq!(g(&c, qpc::MTU, x), 3);
    assert_eq!(g(&c, qpc::REMOTE_QPN, x), 0x77);
    assert_eq!(g(&c, qpc::NEXT_RCV_PSN, x), 0x12_3456);
    assert_eq!(g(&c, qpc::LOG_MSG_MAX, x), 30);
    assert_eq!(g(&c, qpc::MIN_RNR_NAK, x), MIN_RNR_NAK);
    assert_eq!(g(&c, ads::GRH, path), 0, "mlx5_set_path sets grh only for InfiniBand");
    assert_eq!(g(&c, ads::SRC_ADDR_INDEX, path), 3);
    assert_eq!(g(&c, ads::HOP_LIMIT, path), 64, "0 means the default");
    assert_eq!(g(&c, ads::TCLASS, path), 0x6a);
    assert_eq!(g(&c, ads::FLOW_LABEL, path), 0x1_2345);
    assert_eq!(g(&c, ads::DSCP, path), 0x6a >> 2);
    assert_eq!(g(&c, ads::ETH_PRIO, path), 0xd & 7);
    assert_eq!(g(&c, ads::SL, path), 0, "the IB SL field stays clear on RoCE");
    assert_eq!(ifc::get(&c, init2rtr_qp_in::OPT_PARAM_MASK), 0);
    assert_eq!(g(&c, ads::UDP_SPORT, path), 0xc123);
    assert_eq!(g(&c, ads::RMAC_47_32, path), 0x0211);
    assert_eq!(g(&c, ads::RMAC_31_0, path), 0x2233_4455);
    assert_eq!(g(&c, ads::VHCA_PORT_NUM, path), 1);
    assert_eq!(g(&c, ads::FL, path), 0);
    let gid = ads::RGID_RIP.within(path).byte();
    assert_eq!(&c[gid..gid + 16], &dgid);
    assert_eq!(ads::RGID_RIP_COUNT, 16);
    let fixed = HcaCaps { roce_sw_udp_sport: false, ..caps() };
    let (c2, _) = modify_qp_cmd(QpNum(5), &t, 1, &fixed).unwrap();
    assert_eq!(g(&c2, ads::UDP_SPORT, path), 0, "firmware picks the port");
    let q = |f: ifc::Field| f.within(x);
    let a = |f: ifc::Field| f.within(path);
    only_fields(
        &c,
        &[
            init2rtr_qp_in::OPCODE,
            init2rtr_qp_in::QPN,
            q(qpc::MTU),
            q(qpc::LOG_MSG_MAX),
            q(qpc::REMOTE_QPN),
            q(qpc::NEXT_RCV_PSN),
            q(qpc::LOG_RRA_MAX),
            q(qpc::MIN_RNR_NAK),
            a(ads::SRC_ADDR_INDEX),
            a(ads::HOP_LIMIT),
            a(ads::TCLASS),
            a(ads::FLOW_LABEL),
            a(ads::DSCP),
            a(ads::ETH_PRIO),
            ifc::Field::new(a(ads::RGID_RIP).bit, 128),
            a(ads::UDP_SPORT),
            a(ads::VHCA_PORT_NUM),
            a(ads::RMAC_47_32),
            a(ads::RMAC_31_0),
        ],
    );
}

#[test]
fn init2rtr_loopback_forces_loopback() {
    let t = Transition::InitToRtr { remote_qpn: QpNum(6), path: Path::Loopback, mtu: 5, rq_psn: 0 };
    let (c, _) = modify_qp_cmd(QpNum(5), &t, 1, &caps()).unwrap();
    let path = qpc::PRIMARY_ADDRESS_PATH.within(init2rtr_qp_in::QPC);
    assert_eq!(g(&c, ads::FL, path), 1);
    assert_eq!(g(&c, ads::GRH, path), 0);
    // Without the force-loopback capability of the RoCE state in use, fl is not set: the
    // caller is told to give a RoCE path to its own GID.
    let no_fl = HcaCaps { fl_when_roce_enabled: false, ..caps() };
    assert!(matches!(modify_qp_cmd(QpNum(5), &t, 1, &no_fl), Err(Error::Unsupported(_))));
    let off =
        HcaCaps { roce: false, fl_when_roce_enabled: true, fl_when_roce_disabled: false, ..caps() };
    assert!(matches!(modify_qp_cmd(QpNum(5), &t, 1, &off), Err(Error::Unsupported(_))));
    let off_fl = HcaCaps { roce: false, fl_when_roce_enabled: false, ..caps() };
    assert!(modify_qp_cmd(QpNum(5), &t, 1, &off_fl).is_ok());
    let bad =
        Transition::InitToRtr { remote_qpn: QpNum(6), path: Path::Loopback, mtu: 9, rq_psn: 0 };
    assert!(modify_qp_cmd(QpNum(5), &bad, 1, &caps()).is_err());
}

#[test]
fn rtr2rts_fields() {
    let t = Transition::RtrToRts { sq_psn: 0xab_cdef, timeout: 14, retry_cnt: 7, rnr_retry: 6 };
    let (c, _) = modify_qp_cmd(QpNum(5), &t, 1, &caps()).unwrap();
    assert_eq!(&c[0..2], &[0x05, 0x04]);
    let x = rtr2rts_qp_in::QPC;
    let path = qpc::PRIMARY_ADDRESS_PATH.within(x);
    assert_eq!(g(&c, qpc::NEXT_SEND_PSN, x), 0xab_cdef);
    assert_eq!(g(&c, qpc::RETRY_COUNT, x), 7);
    assert_eq!(g(&c, qpc::RNR_RETRY, x), 6);
    assert_eq!(g(&c, qpc::LOG_SRA_MAX, x), 4);
    assert_eq!(g(&c, qpc::LOG_ACK_REQ_FREQ, x), 8);
    assert_eq!(g(&c, ads::ACK_TIMEOUT, path), 14);
    // Every field given is one RTR2RTS requires of an RC QP: no optional parameter.
    assert_eq!(ifc::get(&c, rtr2rts_qp_in::OPT_PARAM_MASK), 0);
}

#[test]
fn udp_source_port_derived_as_the_kernel_does() {
    // `rdma_flow_label_to_udp_sport`: 14 bits folded from the 20-bit label, from 0xC000.
    assert_eq!(flow_label_to_udp_sport(0), 0xc000);
    assert_eq!(flow_label_to_udp_sport(0xf_ffff), 0xc000 | (0x3fff ^ 0x3f));
    assert_eq!(flow_label_to_udp_sport(0x1_2345), 0xc000 | (0x2345 ^ 0x4));
    // `rdma_calc_flow_label`: the product of both QPNs folded to 20 bits, the same both ways.
    let v: u64 = 0x12 * 0x3456;
    let folded = (v ^ (v >> 20) ^ ((v ^ (v >> 20)) >> 40)) & 0xf_ffff;
    assert_eq!(calc_flow_label(0x12, 0x3456) as u64, folded);
    assert_eq!(calc_flow_label(0x3456, 0x12), calc_flow_label(0x12, 0x3456));
    assert_eq!(calc_flow_label(0xff_ffff, 0xff_ffff), {
        let v: u64 = 0xff_ffff * 0xff_ffff;
        let v = v ^ (v >> 20);
        ((v ^ (v >> 40)) & 0xf_ffff) as u32
    });
    // A path without a port gets the derived one in INIT2RTR.
    let t = Transition::InitToRtr {
        remote_qpn: QpNum(0x3456),
        path: Path::roce_v2(Gid([0; 16]), Mac([2, 0, 0, 0, 0, 1]), 0),
        mtu: 3,
        rq_psn: 0,
    };
    let (c, _) = modify_qp_cmd(QpNum(0x12), &t, 1, &caps()).unwrap();
    let path = qpc::PRIMARY_ADDRESS_PATH.within(init2rtr_qp_in::QPC);
    assert_eq!(
        g(&c, ads::UDP_SPORT, path),
        flow_label_to_udp_sport(calc_flow_label(0x12, 0x3456)) as u64
    );
}

#[test]
fn create_qp_ts_format_follows_the_kernels_default_rule() {
    let x = create_qp_in::QPC;
    let ts = |caps: HcaCaps| {
        let (c, _) = create_qp_cmd(&qp_params(Some(6)), &caps).unwrap();
        g(&c, qpc::TS_FORMAT, x)
    };
    // RoCE on: roce_cap.qp_ts_format decides; off: the general sq_ts_format.
    assert_eq!(ts(HcaCaps { qp_ts_format: 1, ..caps() }), 1, "DEFAULT");
    assert_eq!(ts(HcaCaps { qp_ts_format: 2, ..caps() }), 1);
    assert_eq!(ts(HcaCaps { qp_ts_format: 0, sq_ts_format: 2, ..caps() }), 0);
    assert_eq!(ts(HcaCaps { roce: false, qp_ts_format: 0, sq_ts_format: 2, ..caps() }), 1);
    // CQE version 0 has no user index.
    let (c, _) = create_qp_cmd(&qp_params(Some(6)), &HcaCaps { cqe_version: 0, ..caps() }).unwrap();
    assert_eq!(g(&c, qpc::USER_INDEX, x), 0);
}

#[test]
fn to_err_and_to_rst_carry_only_the_qp() {
    assert_eq!(qp_2err_in::QPN, rst2init_qp_in::QPN, "shared qpn placement");
    assert_eq!(qp_2rst_in::QPN, rst2init_qp_in::QPN);
    let (c, len) = modify_qp_cmd(QpNum(0x10), &Transition::ToErr, 1, &caps()).unwrap();
    assert_eq!((len, &c[0..2], c[11]), (qp_2err_in::SIZE, &[0x05, 0x07][..], 0x10));
    let (c, len) = modify_qp_cmd(QpNum(0x10), &Transition::ToRst, 1, &caps()).unwrap();
    assert_eq!((len, &c[0..2], c[11]), (qp_2rst_in::SIZE, &[0x05, 0x0a][..], 0x10));
}

/// The scripted firmware and what a bring-up over it borrows.
struct Rig {
    fw: std::sync::Arc<crate::testing::fw::FakeFw>,
    bar: rdma_pmd_hal::mem::MemBar,
    dma: std::sync::Arc<rdma_pmd_hal::mem::HeapDma>,
    clock: Ticks,
    bits: Vec<u64>,
}

fn rig(st: std::sync::Arc<std::sync::Mutex<crate::testing::fw::State>>) -> Rig {
    let (fw, bar, dma) = script(st);
    Rig { fw, bar, dma, clock: Ticks(Cell::new(0)), bits: vec![0u64; bitmap_words(512)] }
}

impl Rig {
    fn bring_up(&mut self) -> Hca<'_> {
        let cfg = HcaConfig {
            cmd: CmdConfig { timeout_ns: 2_000_000, ..CmdConfig::default() },
            ..HcaConfig::default()
        };
        let pool = PagePool::new(&mut self.bits, 512);
        Hca::bring_up(&self.bar, &*self.dma, &self.clock, pool, cfg).unwrap()
    }
}

#[test]
fn control_over_commands_end_to_end_on_the_scripted_firmware() {
    let st = default_state();
    let mut r = rig(st);
    let (fw, dma) = (r.fw.clone(), r.dma.clone());
    let mut hca = r.bring_up();
    fw.log.lock().unwrap().clear();
    {
        let mut ctl = FwControl::new(&mut hca);
        assert_eq!(ctl.caps().max_wqe_sz_sq, 1024);
        let uar = ctl.alloc_uar().unwrap();
        assert_eq!(uar, Uar { index: 1, bar_offset: 4096 });
        let pd = ctl.alloc_pd().unwrap();
        assert_eq!(pd, Pdn(3));
        let key = ctl
            .create_mkey(&MkeyParams {
                pd,
                start: 0,
                len: 8192,
                access: Access::LOCAL_WRITE,
                translation: Translation::Mtt { base: BusAddr(0xe0_0000_0000), page_shift: 12 },
            })
            .unwrap();
        assert_eq!(key, Mkey(0x42 << 8 | 1));
        let cq = ctl
            .create_cq(&CqParams {
                log_size: 6,
                buf: BusAddr(0xe0_0000_0000),
                dbrec: BusAddr(0xe0_0000_1000),
                uar,
            })
            .unwrap();
        assert_eq!(cq, Cqn(7));
        let qp = ctl.create_qp(&QpParams { send_cq: cq, recv_cq: cq, ..qp_params(None) }).unwrap();
        assert_eq!(qp, QpNum(0x99));
        for t in [
            Transition::RstToInit { port: 1, access: Access::REMOTE_WRITE },
            Transition::InitToRtr { remote_qpn: qp, path: Path::Loopback, mtu: 5, rq_psn: 0 },
            Transition::RtrToRts { sq_psn: 0, timeout: 14, retry_cnt: 7, rnr_retry: 7 },
            Transition::ToErr,
            Transition::ToRst,
        ] {
            ctl.modify_qp(qp, &t).unwrap();
        }
        let big = QpParams { log_sq_size: 16, ..qp_params(None) };
        assert!(matches!(ctl.create_qp(&big), Err(Error::InvalidArgument(_))));
        ctl.destroy_qp(qp).unwrap();
        ctl.destroy_cq(cq).unwrap();
        ctl.destroy_mkey(key).unwrap();
        ctl.dealloc_pd(pd).unwrap();
        ctl.dealloc_uar(uar).unwrap();
    }
    let log = fw.log.lock().unwrap().clone();
    let ops: Vec<u16> = log.iter().map(|s| s.opcode).collect();
    assert_eq!(
        ops,
        [
            0x802, 0x800, 0x200, 0x400, 0x500, 0x502, 0x503, 0x504, 0x507, 0x50a, 0x501, 0x401,
            0x202, 0x801, 0x803
        ]
    );
    // CREATE_CQ names the completion EQ; CREATE_MKEY carries its two MTT entries.
    let cq_in = &log[3].input;
    assert_eq!(
        ifc::get(cq_in, cqc::C_EQN_OR_APU_ELEMENT.within(create_cq_in::CQ_CONTEXT)),
        hca.comp_eqn() as u64
    );
    let mk = &log[2].input;
    assert_eq!(mk.len(), create_mkey_in::SIZE + 16);
    let e0 = create_mkey_in::KLM_PAS_MTT.byte();
    assert_eq!(&mk[e0..e0 + 16], &[0, 0, 0, 0xe0, 0, 0, 0, 0, 0, 0, 0, 0xe0, 0, 0, 0x10, 0]);
    assert_eq!(ifc::get(&log[12].input, destroy_mkey_in::MKEY_INDEX), 0x42);
    hca.teardown().unwrap();
    assert_eq!(dma.live_blocks(), 0);
}

#[test]
fn datagram_transitions_carry_the_kernels_mtu_and_message_limit() {
    let x = rst2init_qp_in::QPC;
    for gsi in [false, true] {
        let want = if gsi { (1, 8) } else { (5, 12) };
        for t in [
            Transition::RstToInitUd { port: 1, qkey: 0x8001_0000, gsi },
            Transition::InitToRtrUd { gsi },
            Transition::RtrToRtsUd { sq_psn: 9, gsi },
        ] {
            let (c, _) = modify_qp_cmd(QpNum(0x44), &t, 1, &caps()).unwrap();
            assert_eq!((g(&c, qpc::MTU, x), g(&c, qpc::LOG_MSG_MAX, x)), want, "{t:?}");
            assert_eq!(ifc::get(&c, rst2init_qp_in::OPT_PARAM_MASK), 0);
        }
    }
}

#[test]
fn loopback_without_force_loopback_is_a_roce_path_to_our_own_gid() {
    let st = default_state();
    {
        let mut s = st.lock().unwrap();
        s.roce_caps.push((roce_cap::FL_RC_QP_WHEN_ROCE_ENABLED, 0));
        // GID 0: 10.0.0.7 (IPv4: its v4-mapped GID, L3 type 0), MAC 02:00:00:00:00:07, RoCE v2.
        let mut e = vec![0u8; roce_addr_layout::SIZE];
        e[10..16].copy_from_slice(&[0xff, 0xff, 10, 0, 0, 7]);
        e[18..24].copy_from_slice(&[2, 0, 0, 0, 0, 7]);
        e[27] = 2;
        s.roce_address = e;
    }
    let mut r = rig(st);
    let fw = r.fw.clone();
    let mut hca = r.bring_up();
    assert!(!hca.caps().fl_when_roce_enabled);
    fw.log.lock().unwrap().clear();
    {
        let mut ctl = FwControl::new(&mut hca);
        let t =
            Transition::InitToRtr { remote_qpn: QpNum(9), path: Path::Loopback, mtu: 3, rq_psn: 0 };
        ctl.modify_qp(QpNum(9), &t).unwrap();
    }
    let log = fw.log.lock().unwrap();
    let ops: Vec<u16> = log.iter().map(|s| s.opcode).collect();
    assert_eq!(ops, [consts::CMD_OP_QUERY_ROCE_ADDRESS, consts::CMD_OP_INIT2RTR_QP]);
    let c = &log[1].input;
    let path = qpc::PRIMARY_ADDRESS_PATH.within(init2rtr_qp_in::QPC);
    assert_eq!(g(c, ads::FL, path), 0);
    let gid = ads::RGID_RIP.within(path).byte();
    assert_eq!(&c[gid..gid + 16], &Gid::from_ipv4([10, 0, 0, 7]).0);
    assert_eq!(g(c, ads::RMAC_31_0, path), 7);
    assert_eq!(g(c, ads::SRC_ADDR_INDEX, path), 0);
}
