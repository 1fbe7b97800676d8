//! [`Control`] over firmware commands: resources for the data path on an HCA this driver
//! brought up itself ([`Hca`]).
//!
//! Each method builds the PRM command from the generated `mlx5_ifc.h` offsets (the builders
//! below are plain functions so their bytes can be checked field by field), runs it on the
//! command queue, and decodes the output:
//!
//! | method | command | notes |
//! |---|---|---|
//! | `alloc_uar` / `dealloc_uar` | `ALLOC_UAR` / `DEALLOC_UAR` | UAR page size as bring-up set it (`log_uar_page_sz`: the system page) |
//! | `alloc_pd` / `dealloc_pd` | `ALLOC_PD` / `DEALLOC_PD` | |
//! | `create_mkey` / `destroy_mkey` | `CREATE_MKEY` / `DESTROY_MKEY` | MTT mode: the page list follows the context in the mailboxes; PA mode: none. Key = index << 8 \| variant byte |
//! | `create_cq` / `destroy_cq` | `CREATE_CQ` / `DESTROY_CQ` | 64-byte CQEs, 4 KiB pages, events to the completion EQ |
//! | `create_qp` / `destroy_qp` | `CREATE_QP` / `DESTROY_QP` | RC, migrated path state, zero-length RQ when none |
//! | `modify_qp` | `RST2INIT_QP`, `INIT2RTR_QP`, `RTR2RTS_QP`, `2ERR_QP`, `2RST_QP` | RoCE v2 path (GID, MAC, UDP source port) or forced loopback |
//!
//! The field choices follow the kernel's `mlx5_ib` (`qp.c` `__mlx5_ib_modify_qp`,
//! `mlx5_set_path`; `mr.c`; `cq.c`) and rdma-core's `mlx5_vfio.c`.

use core::net::IpAddr;

use rdma_pmd::{Error, Gid, Mac, QpNum};

use crate::control::bringup::{self, Hca, HcaCaps, HcaError, FW_PAGE};
use crate::control::cmd::Pas;
use crate::control::eth::{self, EthCreate, EthObject, InlineMode};
use crate::control::{
    port_addr, udp_sport_for, Access, Control, CqParams, Cqn, DeviceCaps, Mkey, MkeyParams, Path,
    Pdn, PortMtu, QpParams, Service, Transition, Translation, Uar, DEFAULT_HOP_LIMIT,
};
use crate::layout::ifc::{self, consts, generated::*};

/// `MLX5_ZERO_LEN_RQ` (kernel `include/linux/mlx5/qp.h`): the QP has no receive queue.
pub const ZERO_LEN_RQ: u64 = 0x3;
/// `MLX5_ATOMIC_MODE_IB_COMP` (kernel `include/linux/mlx5/driver.h`): `qpc.atomic_mode` of a
/// QP that serves IB-compatible 8-byte atomics.
pub const ATOMIC_MODE_IB_COMP: u64 = 1;
/// `qpc.qpn` of a memory key not bound to a QP.
const MKEY_NO_QP: u64 = 0xff_ffff;
/// `min_rnr_nak` (RNR NAK timer 12: 0.64 ms), as RDMA CM uses by default.
pub const MIN_RNR_NAK: u64 = 12;

fn input<const N: usize>(opcode: u16) -> [u8; N] {
    bringup::input(opcode, 0)
}

/// `CREATE_MKEY`: the input's fixed part and its MTT list. `variant` becomes `mkey_7_0`.
pub fn create_mkey_cmd(
    p: &MkeyParams,
    variant: u8,
) -> Result<([u8; create_mkey_in::SIZE], Pas<'static>), Error> {
    let mut c: [u8; create_mkey_in::SIZE] = input(consts::CMD_OP_CREATE_MKEY);
    let m = create_mkey_in::MEMORY_KEY_MKEY_ENTRY;
    let set = |c: &mut [u8], f: ifc::Field, v: u64| ifc::set(c, f.within(m), v);
    set(&mut c, mkc::LW, p.access.contains(Access::LOCAL_WRITE) as u64);
    set(&mut c, mkc::LR, 1);
    set(&mut c, mkc::RW, p.access.contains(Access::REMOTE_WRITE) as u64);
    set(&mut c, mkc::RR, p.access.contains(Access::REMOTE_READ) as u64);
    set(&mut c, mkc::A, p.access.contains(Access::REMOTE_ATOMIC) as u64);
    set(&mut c, mkc::QPN, MKEY_NO_QP);
    set(&mut c, mkc::MKEY_7_0, variant as u64);
    set(&mut c, mkc::PD, p.pd.0 as u64);
    set(&mut c, mkc::START_ADDR, p.start);
    set(&mut c, mkc::LEN, p.len);
    let pas = match p.translation {
        Translation::Physical => {
            // The kernel's PA key (`mlx5_ib_get_dma_mr`): `length64` (the key covers every
            // address from `start_addr` on; `len` is then ignored and left 0).
            set(&mut c, mkc::ACCESS_MODE_1_0, consts::MKC_ACCESS_MODE_PA.into());
            set(&mut c, mkc::LENGTH64, 1);
            set(&mut c, mkc::LEN, 0);
            Pas::None
        }
        Translation::Mtt { base, page_shift } => {
            if !(12..=63).contains(&page_shift) || !base.is_aligned(1 << page_shift) {
                return Err(Error::InvalidArgument("MTT base not aligned to its page size"));
            }
            let ps = 1u64 << page_shift;
            let count = ((p.start & (ps - 1)) + p.len).div_ceil(ps).max(1);
            // Octwords (16 bytes) of 8-byte MTT entries, rounded up to whole octwords.
            let octs = count.div_ceil(2);
            set(&mut c, mkc::ACCESS_MODE_1_0, consts::MKC_ACCESS_MODE_MTT.into());
            set(&mut c, mkc::LOG_PAGE_SIZE, page_shift as u64);
            set(&mut c, mkc::TRANSLATIONS_OCTWORD_SIZE, octs);
            ifc::set(&mut c, create_mkey_in::TRANSLATIONS_OCTWORD_ACTUAL_SIZE, octs);
            // The list is padded to whole octwords with one zero entry when odd.
            Pas::LinearPadded {
                base: base.0,
                step: ps,
                count: count as usize,
                total: (octs * 2) as usize,
            }
        }
    };
    Ok((c, pas))
}

/// `CREATE_CQ` for a CQ reporting to EQ `eqn`.
pub fn create_cq_cmd(
    p: &CqParams,
    eqn: u8,
) -> Result<([u8; create_cq_in::SIZE], Pas<'static>), Error> {
    if !p.buf.is_aligned(FW_PAGE as u64) || !p.dbrec.is_aligned(8) {
        return Err(Error::InvalidArgument("CQ buffer not page aligned or doorbell not 8-aligned"));
    }
    let mut c: [u8; create_cq_in::SIZE] = input(consts::CMD_OP_CREATE_CQ);
    let x = create_cq_in::CQ_CONTEXT;
    let set = |c: &mut [u8], f: ifc::Field, v: u64| ifc::set(c, f.within(x), v);
    set(&mut c, cqc::CQE_SZ, 0); // 64-byte CQEs
    set(&mut c, cqc::LOG_CQ_SIZE, p.log_size as u64);
    set(&mut c, cqc::UAR_PAGE, p.uar.index as u64);
    set(&mut c, cqc::C_EQN_OR_APU_ELEMENT, eqn as u64);
    set(&mut c, cqc::LOG_PAGE_SIZE, 0); // 4 KiB pages (relative to 4 KiB)
    set(&mut c, cqc::DBR_ADDR, p.dbrec.0);
    let pages = ((64u64 << p.log_size) as usize).div_ceil(FW_PAGE);
    Ok((c, Pas::Linear { base: p.buf.0, step: FW_PAGE as u64, count: pages }))
}

/// `CREATE_QP` for an RC, UD or GSI QP.
pub fn create_qp_cmd(
    p: &QpParams,
    caps: &HcaCaps,
) -> Result<([u8; create_qp_in::SIZE], Pas<'static>), Error> {
    if !p.buf.is_aligned(FW_PAGE as u64) || !p.dbrec.is_aligned(8) {
        return Err(Error::InvalidArgument("QP buffer not page aligned or doorbell not 8-aligned"));
    }
    if p.log_rq_size.is_some() && !(4..=11).contains(&p.log_rq_stride) {
        return Err(Error::InvalidArgument("receive WQE stride"));
    }
    let mut c: [u8; create_qp_in::SIZE] = input(consts::CMD_OP_CREATE_QP);
    let x = create_qp_in::QPC;
    let set = |c: &mut [u8], f: ifc::Field, v: u64| ifc::set(c, f.within(x), v);
    let st = match p.service {
        Service::Rc => consts::QPC_ST_RC,
        Service::Ud => consts::QPC_ST_UD,
        Service::Gsi => consts::QPC_ST_QP1,
    };
    set(&mut c, qpc::ST, st.into());
    set(&mut c, qpc::PM_STATE, consts::QPC_PM_STATE_MIGRATED.into());
    // As `create_kernel_qp` sets them for every QP whose rings the kernel owns: fast
    // registration enabled and the reserved lkey usable from this QP's WQEs.
    set(&mut c, qpc::FRE, 1);
    set(&mut c, qpc::RLKY, 1);
    if caps.cqe_version == 1 {
        set(&mut c, qpc::USER_INDEX, DEFAULT_USER_INDEX);
    }
    // `xrcd` and `srqn_rmpn_xrqn` stay 0: the kernel names its device-wide default XRCD and
    // SRQ there because it allocated them anyway, but with `rq_type` regular or zero-length
    // firmware reads neither; allocating both only to name them would add two objects.
    set(&mut c, qpc::PD, p.pd.0 as u64);
    set(&mut c, qpc::UAR_PAGE, p.uar.index as u64);
    set(&mut c, qpc::LOG_MSG_MAX, caps.log_max_msg as u64);
    let rq_bytes = match p.log_rq_size {
        Some(log) => {
            set(&mut c, qpc::LOG_RQ_SIZE, log as u64);
            set(&mut c, qpc::LOG_RQ_STRIDE, (p.log_rq_stride - 4) as u64);
            (1u64 << log) << p.log_rq_stride
        }
        None => {
            set(&mut c, qpc::RQ_TYPE, ZERO_LEN_RQ);
            0
        }
    };
    set(&mut c, qpc::LOG_SQ_SIZE, p.log_sq_size as u64);
    set(&mut c, qpc::TS_FORMAT, ts_format(caps));
    set(&mut c, qpc::CQN_SND, p.send_cq.0 as u64);
    set(&mut c, qpc::CQN_RCV, p.recv_cq.0 as u64);
    set(&mut c, qpc::LOG_PAGE_SIZE, 0);
    set(&mut c, qpc::DBR_ADDR, p.dbrec.0);
    let bytes = rq_bytes + (64u64 << p.log_sq_size);
    let pages = (bytes as usize).div_ceil(FW_PAGE);
    Ok((c, Pas::Linear { base: p.buf.0, step: FW_PAGE as u64, count: pages }))
}

/// The QP timestamp format, by the kernel's rule (`mlx5_get_qp_default_ts`): the capability
/// of the transport in use (`roce_cap.qp_ts_format` with RoCE on, `sq_ts_format` otherwise);
/// any format on offer → `DEFAULT` (firmware picks one it supports), none → `FREE_RUNNING`.
fn ts_format(caps: &HcaCaps) -> u64 {
    let offered = if caps.roce { caps.qp_ts_format } else { caps.sq_ts_format };
    if offered != 0 {
        consts::TIMESTAMP_FORMAT_DEFAULT.into()
    } else {
        consts::TIMESTAMP_FORMAT_FREE_RUNNING.into()
    }
}

/// `user_index` of a QP whose CQEs carry one (CQE version 1): the kernel's
/// `MLX5_IB_DEFAULT_UIDX`, "no index", since the driver finds its QP by QPN.
pub const DEFAULT_USER_INDEX: u64 = 0xff_ffff;

/// `log_ack_req_freq` of an RC requester: an AckReq at least every 2^8 packets, what the
/// kernel's own raw-command RC QP (`mlx5/core/fpga/conn.c`, `mlx5_fpga_conn_rts_qp`) sets.
pub const LOG_ACK_REQ_FREQ: u64 = 8;

/// The transition commands share one layout (`rst2init_qp_in` = `init2rtr_qp_in` =
/// `rtr2rts_qp_in`: header, qpn, opt_param_mask, qpc); 2ERR and 2RST carry only the QP.
pub fn modify_qp_cmd(
    qpn: QpNum,
    t: &Transition,
    port: u8,
    caps: &HcaCaps,
) -> Result<([u8; rst2init_qp_in::SIZE], usize), Error> {
    let (opcode, len) = match t {
        Transition::RstToInit { .. } | Transition::RstToInitUd { .. } => {
            (consts::CMD_OP_RST2INIT_QP, rst2init_qp_in::SIZE)
        }
        Transition::InitToRtr { .. } | Transition::InitToRtrUd { .. } => {
            (consts::CMD_OP_INIT2RTR_QP, init2rtr_qp_in::SIZE)
        }
        Transition::RtrToRts { .. } | Transition::RtrToRtsUd { .. } => {
            (consts::CMD_OP_RTR2RTS_QP, rtr2rts_qp_in::SIZE)
        }
        Transition::ToErr => (consts::CMD_OP_2ERR_QP, qp_2err_in::SIZE),
        Transition::ToRst => (consts::CMD_OP_2RST_QP, qp_2rst_in::SIZE),
    };
    let mut c: [u8; rst2init_qp_in::SIZE] = input(opcode);
    ifc::set(&mut c, rst2init_qp_in::QPN, qpn.0 as u64);
    let x = rst2init_qp_in::QPC;
    let path = qpc::PRIMARY_ADDRESS_PATH.within(x);
    let set = |c: &mut [u8], f: ifc::Field, v: u64| ifc::set(c, f.within(x), v);
    let set_path = |c: &mut [u8], f: ifc::Field, v: u64| ifc::set(c, f.within(path), v);
    match *t {
        Transition::RstToInit { port, access } => {
            set(&mut c, qpc::PM_STATE, consts::QPC_PM_STATE_MIGRATED.into());
            set_path(&mut c, ads::VHCA_PORT_NUM, port as u64);
            set(&mut c, qpc::RWE, access.contains(Access::REMOTE_WRITE) as u64);
            set(&mut c, qpc::RRE, access.contains(Access::REMOTE_READ) as u64);
            // The kernel's `to_mlx5_access_flags`: remote atomics need `rae` and an atomic
            // mode; IB-compatible 8-byte atomics (`MLX5_ATOMIC_MODE_IB_COMP`, kernel
            // `include/linux/mlx5/driver.h`) are what every ConnectX offers.
            if access.contains(Access::REMOTE_ATOMIC) {
                set(&mut c, qpc::RAE, 1);
                set(&mut c, qpc::ATOMIC_MODE, ATOMIC_MODE_IB_COMP);
            }
        }
        Transition::RstToInitUd { port, qkey, gsi } => {
            // `__mlx5_ib_modify_qp` for UD/GSI: port, P_Key index 0 (the default P_Key
            // 0xffff of a RoCE port) and the Q_Key.
            datagram_mtu(&mut c, gsi);
            set(&mut c, qpc::PM_STATE, consts::QPC_PM_STATE_MIGRATED.into());
            set_path(&mut c, ads::VHCA_PORT_NUM, port as u64);
            set(&mut c, qpc::Q_KEY, qkey as u64);
        }
        Transition::InitToRtrUd { gsi } => {
            datagram_mtu(&mut c, gsi);
            set_path(&mut c, ads::VHCA_PORT_NUM, port as u64);
        }
        Transition::RtrToRtsUd { sq_psn, gsi } => {
            datagram_mtu(&mut c, gsi);
            set(&mut c, qpc::NEXT_SEND_PSN, (sq_psn & 0xff_ffff) as u64);
        }
        Transition::InitToRtr { remote_qpn, path: peer, mtu, rq_psn } => {
            if !(1..=5).contains(&mtu) {
                return Err(Error::InvalidArgument("path MTU"));
            }
            set(&mut c, qpc::MTU, mtu as u64);
            set(&mut c, qpc::LOG_MSG_MAX, caps.log_max_msg as u64);
            set(&mut c, qpc::REMOTE_QPN, (remote_qpn.0 & 0xff_ffff) as u64);
            set(&mut c, qpc::NEXT_RCV_PSN, (rq_psn & 0xff_ffff) as u64);
            set(&mut c, qpc::LOG_RRA_MAX, caps.log_max_ra_res_qp.min(4) as u64);
            set(&mut c, qpc::MIN_RNR_NAK, MIN_RNR_NAK);
            set_path(&mut c, ads::VHCA_PORT_NUM, port as u64);
            match peer {
                Path::RoceV2 {
                    dgid,
                    dmac,
                    sgid_index,
                    udp_sport,
                    hop_limit,
                    traffic_class,
                    flow_label,
                    sl,
                } => {
                    // `mlx5_set_path` for a RoCE address: no `grh` bit (that is InfiniBand's
                    // LRH/GRH choice; RoCE v2 always has its IP header), the GRH fields as
                    // the IP header's, DSCP from the traffic class, 802.1p from the SL.
                    set_path(&mut c, ads::SRC_ADDR_INDEX, sgid_index as u64);
                    let hop = if hop_limit == 0 { DEFAULT_HOP_LIMIT } else { hop_limit };
                    set_path(&mut c, ads::HOP_LIMIT, hop as u64);
                    set_path(&mut c, ads::TCLASS, traffic_class as u64);
                    set_path(&mut c, ads::FLOW_LABEL, (flow_label & 0xf_ffff) as u64);
                    set_path(&mut c, ads::DSCP, (traffic_class >> 2) as u64);
                    set_path(&mut c, ads::ETH_PRIO, (sl & 7) as u64);
                    ifc::set_bytes(&mut c, full(ads::RGID_RIP, 16).within(path), &dgid);
                    // The source port is the driver's only when firmware lets software choose
                    // it (`roce_cap.sw_r_roce_src_udp_port`, set at bring-up when offered);
                    // 0 means derived as `mlx5_set_path_udp_sport` derives it.
                    if caps.roce_sw_udp_sport {
                        let sport = if udp_sport != 0 {
                            udp_sport
                        } else {
                            udp_sport_for(flow_label, qpn.0 & 0xff_ffff, remote_qpn.0 & 0xff_ffff)
                        };
                        set_path(&mut c, ads::UDP_SPORT, sport as u64);
                    }
                    let mac = u64::from_be_bytes([
                        0, 0, dmac[0], dmac[1], dmac[2], dmac[3], dmac[4], dmac[5],
                    ]);
                    set_path(&mut c, ads::RMAC_47_32, mac >> 32);
                    set_path(&mut c, ads::RMAC_31_0, mac & 0xffff_ffff);
                }
                Path::Loopback => {
                    // Force-loopback is offered per RoCE state (`roce_cap`'s
                    // `fl_rc_qp_when_roce_enabled` / `_disabled`); without it the peer must
                    // be reached by a RoCE path to our own GID, as rdma-core does.
                    if !loopback_forced(caps) {
                        return Err(Error::Unsupported(
                            "force-loopback not offered: connect by a RoCE path to our own GID",
                        ));
                    }
                    set_path(&mut c, ads::FL, 1);
                }
            }
        }
        Transition::RtrToRts { sq_psn, timeout, retry_cnt, rnr_retry } => {
            if timeout > 31 || retry_cnt > 7 || rnr_retry > 7 {
                return Err(Error::InvalidArgument("timeout or retry count"));
            }
            set(&mut c, qpc::NEXT_SEND_PSN, (sq_psn & 0xff_ffff) as u64);
            set(&mut c, qpc::RETRY_COUNT, retry_cnt as u64);
            set(&mut c, qpc::RNR_RETRY, rnr_retry as u64);
            set(&mut c, qpc::LOG_SRA_MAX, caps.log_max_ra_req_qp.min(4) as u64);
            set(&mut c, qpc::LOG_ACK_REQ_FREQ, LOG_ACK_REQ_FREQ);
            set_path(&mut c, ads::ACK_TIMEOUT, timeout as u64);
        }
        Transition::ToErr | Transition::ToRst => {}
    }
    Ok((c, len))
}

/// Whether firmware offers force-loopback RC QPs in the RoCE state in use
/// (`roce_cap.fl_rc_qp_when_roce_enabled`, or `_disabled` with RoCE off).
fn loopback_forced(caps: &HcaCaps) -> bool {
    if caps.roce {
        caps.fl_when_roce_enabled
    } else {
        caps.fl_when_roce_disabled
    }
}

/// The MTU and message limit `__mlx5_ib_modify_qp` gives a datagram QP on every transition:
/// the GSI QP 256 bytes and 2^8 (a MAD), a UD QP 4096 bytes and 2^12 (one packet).
fn datagram_mtu(c: &mut [u8], gsi: bool) {
    let (mtu, log_msg) = if gsi { (1, 8) } else { (5, 12) };
    ifc::set(c, qpc::MTU.within(rst2init_qp_in::QPC), mtu);
    ifc::set(c, qpc::LOG_MSG_MAX.within(rst2init_qp_in::QPC), log_msg);
}

/// The whole of an array field whose element 0 is `f`.
const fn full(f: ifc::Field, count: u32) -> ifc::Field {
    ifc::Field::new(f.bit, f.width * count)
}

/// Resources of an [`Hca`] through firmware commands.
pub struct FwControl<'h, 'a> {
    hca: &'h mut Hca<'a>,
    port: u8,
    variant: u8,
}

impl<'h, 'a> FwControl<'h, 'a> {
    /// Control over `hca`, for QPs on port 1.
    pub fn new(hca: &'h mut Hca<'a>) -> Self {
        Self::with_port(hca, 1)
    }

    /// Control over `hca`, for QPs on `port` (1-based).
    pub fn with_port(hca: &'h mut Hca<'a>, port: u8) -> Self {
        FwControl { hca, port, variant: 0 }
    }

    /// The HCA (for [`Hca::poll_events`]).
    pub fn hca(&mut self) -> &mut Hca<'a> {
        self.hca
    }

    fn run(
        &mut self,
        step: &'static str,
        head: &[u8],
        pas: Pas<'_>,
        out: &mut [u8],
    ) -> Result<(), Error> {
        self.hca.exec(step, head, pas, out).map_err(|e: HcaError| e.into())
    }

    fn simple(
        &mut self,
        step: &'static str,
        opcode: u16,
        f: ifc::Field,
        v: u32,
    ) -> Result<(), Error> {
        let mut c = [0u8; 16];
        ifc::set(&mut c, enable_hca_in::OPCODE, opcode as u64);
        ifc::set(&mut c, f, v as u64);
        self.run(step, &c, Pas::None, &mut [0u8; 16])
    }
}

impl Control for FwControl<'_, '_> {
    fn caps(&self) -> DeviceCaps {
        self.hca.caps().device_caps()
    }

    fn alloc_uar(&mut self) -> Result<Uar, Error> {
        let c: [u8; alloc_uar_in::SIZE] = input(consts::CMD_OP_ALLOC_UAR);
        let mut out = [0u8; alloc_uar_out::SIZE];
        self.run("ALLOC_UAR", &c, Pas::None, &mut out)?;
        let index = ifc::get(&out, alloc_uar_out::UAR) as u32;
        match self.hca.uar(index) {
            Ok(uar) => Ok(uar),
            Err(e) => {
                // A page outside the BAR is of no use; firmware allocated it all the same.
                let _ = self.dealloc_uar(Uar { index, bar_offset: 0 });
                Err(e.into())
            }
        }
    }

    fn dealloc_uar(&mut self, uar: Uar) -> Result<(), Error> {
        self.simple("DEALLOC_UAR", consts::CMD_OP_DEALLOC_UAR, dealloc_uar_in::UAR, uar.index)
    }

    fn alloc_pd(&mut self) -> Result<Pdn, Error> {
        let c: [u8; alloc_pd_in::SIZE] = input(consts::CMD_OP_ALLOC_PD);
        let mut out = [0u8; alloc_pd_out::SIZE];
        self.run("ALLOC_PD", &c, Pas::None, &mut out)?;
        Ok(Pdn(ifc::get(&out, alloc_pd_out::PD) as u32))
    }

    fn dealloc_pd(&mut self, pd: Pdn) -> Result<(), Error> {
        self.simple("DEALLOC_PD", consts::CMD_OP_DEALLOC_PD, dealloc_pd_in::PD, pd.0)
    }

    fn create_mkey(&mut self, p: &MkeyParams) -> Result<Mkey, Error> {
        self.variant = self.variant.wrapping_add(1);
        let (c, pas) = create_mkey_cmd(p, self.variant)?;
        let mut out = [0u8; create_mkey_out::SIZE];
        self.run("CREATE_MKEY", &c, pas, &mut out)?;
        let index = ifc::get(&out, create_mkey_out::MKEY_INDEX) as u32;
        Ok(Mkey(index << 8 | self.variant as u32))
    }

    fn destroy_mkey(&mut self, key: Mkey) -> Result<(), Error> {
        let f = destroy_mkey_in::MKEY_INDEX;
        self.simple("DESTROY_MKEY", consts::CMD_OP_DESTROY_MKEY, f, key.0 >> 8)
    }

    fn create_cq(&mut self, p: &CqParams) -> Result<Cqn, Error> {
        if p.log_size > self.hca.caps().log_max_cq_sz {
            return Err(Error::InvalidArgument("CQ larger than log_max_cq_sz"));
        }
        let (c, pas) = create_cq_cmd(p, self.hca.comp_eqn())?;
        let mut out = [0u8; create_cq_out::SIZE];
        self.run("CREATE_CQ", &c, pas, &mut out)?;
        Ok(Cqn(ifc::get(&out, create_cq_out::CQN) as u32))
    }

    fn destroy_cq(&mut self, cq: Cqn) -> Result<(), Error> {
        self.simple("DESTROY_CQ", consts::CMD_OP_DESTROY_CQ, destroy_cq_in::CQN, cq.0)
    }

    fn create_qp(&mut self, p: &QpParams) -> Result<QpNum, Error> {
        let caps = *self.hca.caps();
        if p.log_sq_size > caps.log_max_qp_sz || p.log_rq_size.unwrap_or(0) > caps.log_max_qp_sz {
            return Err(Error::InvalidArgument("QP larger than log_max_qp_sz"));
        }
        let (c, pas) = create_qp_cmd(p, &caps)?;
        let mut out = [0u8; create_qp_out::SIZE];
        self.run("CREATE_QP", &c, pas, &mut out)?;
        Ok(QpNum(ifc::get(&out, create_qp_out::QPN) as u32))
    }

    /// A loopback connection on a device without force-loopback becomes, as in rdma-core, a
    /// RoCE path to our own first GID and our MAC.
    fn modify_qp(&mut self, qp: QpNum, t: &Transition) -> Result<(), Error> {
        let caps = *self.hca.caps();
        let own;
        let t = match *t {
            Transition::InitToRtr { remote_qpn, path: Path::Loopback, mtu, rq_psn }
                if !loopback_forced(&caps) =>
            {
                let (gid, mac) = self
                    .gid(0)?
                    .ok_or(Error::InvalidArgument("loopback needs GID 0 programmed"))?;
                let path = Path::roce_v2(gid, mac, 0);
                own = Transition::InitToRtr { remote_qpn, path, mtu, rq_psn };
                &own
            }
            _ => t,
        };
        let (c, len) = modify_qp_cmd(qp, t, self.port, &caps)?;
        let step = match t {
            Transition::RstToInit { .. } | Transition::RstToInitUd { .. } => "RST2INIT_QP",
            Transition::InitToRtr { .. } | Transition::InitToRtrUd { .. } => "INIT2RTR_QP",
            Transition::RtrToRts { .. } | Transition::RtrToRtsUd { .. } => "RTR2RTS_QP",
            Transition::ToErr => "2ERR_QP",
            Transition::ToRst => "2RST_QP",
        };
        self.run(step, &c[..len], Pas::None, &mut [0u8; 16])
    }

    fn destroy_qp(&mut self, qp: QpNum) -> Result<(), Error> {
        self.simple("DESTROY_QP", consts::CMD_OP_DESTROY_QP, destroy_qp_in::QPN, qp.0)
    }

    fn mac(&mut self) -> Result<Mac, Error> {
        let mut out = [0u8; query_nic_vport_context_out::SIZE];
        let c = port_addr::query_nic_vport_context_cmd();
        self.run("QUERY_NIC_VPORT_CONTEXT", &c, Pas::None, &mut out)?;
        Ok(port_addr::vport_mac(&out))
    }

    fn set_gid(&mut self, index: u16, addr: IpAddr) -> Result<(), Error> {
        let mac = self.mac()?;
        let c =
            port_addr::set_roce_address_cmd(index, Some((addr, mac)), self.port, self.hca.caps())?;
        self.run("SET_ROCE_ADDRESS", &c, Pas::None, &mut [0u8; 16])
    }

    fn clear_gid(&mut self, index: u16) -> Result<(), Error> {
        let c = port_addr::set_roce_address_cmd(index, None, self.port, self.hca.caps())?;
        self.run("SET_ROCE_ADDRESS", &c, Pas::None, &mut [0u8; 16])
    }

    fn gid(&mut self, index: u16) -> Result<Option<(Gid, Mac)>, Error> {
        let c = port_addr::query_roce_address_cmd(index, self.port, self.hca.caps());
        let mut out = [0u8; query_roce_address_out::SIZE];
        self.run("QUERY_ROCE_ADDRESS", &c, Pas::None, &mut out)?;
        Ok(port_addr::roce_address_entry(&out))
    }

    /// The PMTU register first; a function firmware refuses it to (status, not a fault) falls
    /// back to its vport context, then to 1024.
    fn port_mtu(&mut self) -> Result<PortMtu, Error> {
        let c = port_addr::query_pmtu_cmd(self.port);
        let mut out = [0u8; port_addr::PMTU_CMD_LEN];
        let pmtu = match self.run("ACCESS_REG", &c, Pas::None, &mut out) {
            Ok(()) => Some(port_addr::pmtu_oper(&out)),
            Err(Error::Firmware(_)) => None,
            Err(e) => return Err(e),
        };
        let mut vout = [0u8; query_nic_vport_context_out::SIZE];
        let vc = port_addr::query_nic_vport_context_cmd();
        let vport = match self.run("QUERY_NIC_VPORT_CONTEXT", &vc, Pas::None, &mut vout) {
            Ok(()) => Some(port_addr::vport_mtu(&vout)),
            Err(Error::Firmware(_)) => None,
            Err(e) => return Err(e),
        };
        Ok(port_addr::choose_mtu(pmtu, vport))
    }

    /// The Ethernet offload capabilities (current values), then, where they defer to it, the
    /// NIC vport context (`mlx5_query_min_inline`).
    fn eth_inline(&mut self) -> Result<(u64, InlineMode), Error> {
        let op_mod = eth::CAP_ETHERNET_OFFLOADS << 1 | 1;
        let q: [u8; query_hca_cap_in::SIZE] = bringup::input(consts::CMD_OP_QUERY_HCA_CAP, op_mod);
        let mut out = [0u8; query_hca_cap_out::SIZE];
        self.run("QUERY_HCA_CAP", &q, Pas::None, &mut out)?;
        let cap = ifc::get(
            &out,
            per_protocol_networking_offload_caps::WQE_INLINE_MODE
                .within(query_hca_cap_out::CAPABILITY),
        );
        let mut vport = 0;
        if cap == eth::CAP_INLINE_MODE_VPORT_CONTEXT {
            let mut vout = [0u8; query_nic_vport_context_out::SIZE];
            let vc = port_addr::query_nic_vport_context_cmd();
            self.run("QUERY_NIC_VPORT_CONTEXT", &vc, Pas::None, &mut vout)?;
            let f = nic_vport_context::MIN_WQE_INLINE_MODE
                .within(query_nic_vport_context_out::NIC_VPORT_CONTEXT);
            vport = ifc::get(&vout, f) as u8;
        }
        Ok((cap, eth::min_inline(cap, vport)))
    }

    fn eth_create(&mut self, what: &EthCreate) -> Result<EthObject, Error> {
        use eth::*;
        let caps = *self.hca.caps();
        let mut out = [0u8; 16];
        let num = |out: &[u8; 16], f: ifc::Field| ifc::get(out, f) as u32;
        Ok(match *what {
            EthCreate::TransportDomain => {
                let c = alloc_transport_domain_cmd();
                self.run("ALLOC_TRANSPORT_DOMAIN", &c, Pas::None, &mut out)?;
                EthObject::TransportDomain(Tdn(num(
                    &out,
                    alloc_transport_domain_out::TRANSPORT_DOMAIN,
                )))
            }
            EthCreate::Tis(td) => {
                self.run("CREATE_TIS", &create_tis_cmd(td), Pas::None, &mut out)?;
                EthObject::Tis(Tisn(num(&out, create_tis_out::TISN)))
            }
            EthCreate::Sq(p) => {
                let (c, pas) = create_sq_cmd(&p, &caps)?;
                self.run("CREATE_SQ", &c, pas, &mut out)?;
                EthObject::Sq(Sqn(num(&out, create_sq_out::SQN)))
            }
            EthCreate::Rq(p) => {
                let (c, pas) = create_rq_cmd(&p, &caps)?;
                self.run("CREATE_RQ", &c, pas, &mut out)?;
                EthObject::Rq(Rqn(num(&out, create_rq_out::RQN)))
            }
            EthCreate::Tir { td, rq } => {
                self.run("CREATE_TIR", &create_tir_cmd(td, rq), Pas::None, &mut out)?;
                EthObject::Tir(Tirn(num(&out, create_tir_out::TIRN)))
            }
            EthCreate::FlowTable { level, log_size } => {
                let c = create_flow_table_cmd(level, log_size);
                self.run("CREATE_FLOW_TABLE", &c, Pas::None, &mut out)?;
                let id = num(&out, create_flow_table_out::TABLE_ID);
                EthObject::FlowTable(FlowTableId(id))
            }
            EthCreate::EthertypeGroup { table, start, end } => {
                let c = create_flow_group_cmd(table, start, end)?;
                self.run("CREATE_FLOW_GROUP", &c, Pas::None, &mut out)?;
                let group = FlowGroupId(num(&out, create_flow_group_out::GROUP_ID));
                EthObject::FlowGroup { table, group }
            }
            EthCreate::EthertypeEntry { table, group, index, ethertype, tir } => {
                let c = set_fte_cmd(table, group, index, ethertype, tir);
                self.run("SET_FLOW_TABLE_ENTRY", &c, Pas::None, &mut out)?;
                EthObject::FlowEntry { table, index }
            }
            EthCreate::Root(table) => {
                self.run("SET_FLOW_TABLE_ROOT", &set_root_cmd(Some(table)), Pas::None, &mut out)?;
                EthObject::Root(table)
            }
        })
    }

    fn eth_ready(&mut self, queue: EthObject) -> Result<(), Error> {
        let mut out = [0u8; 16];
        match queue {
            EthObject::Sq(sq) => {
                self.run("MODIFY_SQ", &eth::modify_sq_rdy_cmd(sq), Pas::None, &mut out)
            }
            EthObject::Rq(rq) => {
                self.run("MODIFY_RQ", &eth::modify_rq_rdy_cmd(rq), Pas::None, &mut out)
            }
            _ => Err(Error::InvalidArgument("only an SQ or an RQ becomes ready")),
        }
    }

    fn eth_destroy(&mut self, what: EthObject) -> Result<(), Error> {
        let (c, len) = eth::destroy_cmd(what);
        self.run(eth::destroy_step(what), &c[..len], Pas::None, &mut [0u8; 16])
    }
}

#[cfg(test)]
mod tests;
