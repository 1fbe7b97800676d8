//! The capabilities bring-up reads and sets: `QUERY_HCA_CAP` / `SET_HCA_CAP` (general and
//! RoCE), and the values the driver keeps from them.

use crate::control::cmd::Pas;
use crate::control::DeviceCaps;
use crate::layout::ifc::{self, consts, generated::*};
use crate::layout::uar::BF_OFFSET;

use super::{input, Hca, HcaError};

/// `query_hca_cap_in.op_mod`: capability type `<< 1 |` 1 for current values, 0 for maximum.
const CAP_GENERAL: u16 = 0;
const CAP_ROCE: u16 = 4;
const CAP_CUR: u16 = 1;
const CAP_MAX: u16 = 0;

/// Port type (`cmd_hca_cap.port_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortType {
    /// InfiniBand.
    Ib,
    /// Ethernet (RoCE).
    Ethernet,
    /// Another value.
    Unknown(u8),
}

/// The `cmd_hca_cap` (and `roce_cap`) values bring-up read and the driver uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HcaCaps {
    /// `log_max_qp`.
    pub log_max_qp: u8,
    /// `log_max_qp_sz`.
    pub log_max_qp_sz: u8,
    /// `log_max_cq`.
    pub log_max_cq: u8,
    /// `log_max_cq_sz`.
    pub log_max_cq_sz: u8,
    /// `log_max_eq`.
    pub log_max_eq: u8,
    /// `log_max_eq_sz`.
    pub log_max_eq_sz: u8,
    /// `log_max_mkey`.
    pub log_max_mkey: u8,
    /// `log_max_pd`.
    pub log_max_pd: u8,
    /// `log_max_msg`.
    pub log_max_msg: u8,
    /// `log_max_ra_req_qp`.
    pub log_max_ra_req_qp: u8,
    /// `log_max_ra_res_qp`.
    pub log_max_ra_res_qp: u8,
    /// `num_ports`.
    pub num_ports: u8,
    /// `port_type`.
    pub port_type: PortType,
    /// `roce`: the function supports RoCE.
    pub roce: bool,
    /// `bf`: BlueFlame supported.
    pub bf: bool,
    /// `log_bf_reg_size`.
    pub log_bf_reg_size: u8,
    /// `max_wqe_sz_sq`.
    pub max_wqe_sz_sq: u16,
    /// `log_uar_page_sz` in effect.
    pub log_uar_page_sz: u16,
    /// `roce_cap.sw_r_roce_src_udp_port` in effect (the QP's `udp_sport` is honoured).
    pub roce_sw_udp_sport: bool,
    /// `roce_cap.qp_ts_format`.
    pub qp_ts_format: u8,
    /// `cmd_hca_cap.sq_ts_format` (the timestamp formats a QP may use when RoCE is off).
    pub sq_ts_format: u8,
    /// `cmd_hca_cap.rq_ts_format` (the timestamp formats an Ethernet RQ may use).
    pub rq_ts_format: u8,
    /// `cmd_hca_cap.cqe_version` in effect (1: CQEs carry the QP's `user_index`).
    pub cqe_version: u8,
    /// `cmd_hca_cap.num_vhca_ports`: non-zero when commands name a port (`vhca_port_num` of
    /// `SET_ROCE_ADDRESS`).
    pub num_vhca_ports: u8,
    /// `cmd_hca_cap.release_all_pages` in effect: firmware may ask for every page back at
    /// once (a page request with `RELEASE_ALL_PAGES_MASK`).
    pub release_all_pages: bool,
    /// Force loopback (`ads.fl`) is allowed on RC QPs while RoCE is enabled
    /// (`roce_cap.fl_rc_qp_when_roce_enabled`).
    pub fl_when_roce_enabled: bool,
    /// Force loopback is allowed while RoCE is disabled (`cmd_hca_cap` or
    /// `roce_cap.fl_rc_qp_when_roce_disabled`, either, as rdma-core's `dr_devx.c` reads it).
    pub fl_when_roce_disabled: bool,
    /// `roce_cap.roce_address_table_size`: entries of the GID table.
    pub gid_table_size: u16,
    /// `roce_cap.l3_type`: `MLX5_ROCE_L3_TYPE_IPV4_CAP` (bit 1) and `_IPV6_CAP` (bit 2).
    pub roce_l3_types: u8,
}

impl HcaCaps {
    pub(super) fn from_general(cap: &[u8]) -> Self {
        let g = |f| ifc::get(cap, f) as u8;
        HcaCaps {
            log_max_qp: g(cmd_hca_cap::LOG_MAX_QP),
            log_max_qp_sz: g(cmd_hca_cap::LOG_MAX_QP_SZ),
            log_max_cq: g(cmd_hca_cap::LOG_MAX_CQ),
            log_max_cq_sz: g(cmd_hca_cap::LOG_MAX_CQ_SZ),
            log_max_eq: g(cmd_hca_cap::LOG_MAX_EQ),
            log_max_eq_sz: g(cmd_hca_cap::LOG_MAX_EQ_SZ),
            log_max_mkey: g(cmd_hca_cap::LOG_MAX_MKEY),
            log_max_pd: g(cmd_hca_cap::LOG_MAX_PD),
            log_max_msg: g(cmd_hca_cap::LOG_MAX_MSG),
            log_max_ra_req_qp: g(cmd_hca_cap::LOG_MAX_RA_REQ_QP),
            log_max_ra_res_qp: g(cmd_hca_cap::LOG_MAX_RA_RES_QP),
            num_ports: g(cmd_hca_cap::NUM_PORTS),
            port_type: match g(cmd_hca_cap::PORT_TYPE) {
                0 => PortType::Ib,
                v if v as u16 == consts::CAP_PORT_TYPE_ETH => PortType::Ethernet,
                v => PortType::Unknown(v),
            },
            roce: g(cmd_hca_cap::ROCE) != 0,
            bf: g(cmd_hca_cap::BF) != 0,
            log_bf_reg_size: g(cmd_hca_cap::LOG_BF_REG_SIZE),
            max_wqe_sz_sq: ifc::get(cap, cmd_hca_cap::MAX_WQE_SZ_SQ) as u16,
            log_uar_page_sz: ifc::get(cap, cmd_hca_cap::LOG_UAR_PAGE_SZ) as u16,
            roce_sw_udp_sport: false,
            qp_ts_format: 0,
            sq_ts_format: g(cmd_hca_cap::SQ_TS_FORMAT),
            rq_ts_format: g(cmd_hca_cap::RQ_TS_FORMAT),
            cqe_version: g(cmd_hca_cap::CQE_VERSION),
            num_vhca_ports: g(cmd_hca_cap::NUM_VHCA_PORTS),
            release_all_pages: g(cmd_hca_cap::RELEASE_ALL_PAGES) != 0,
            fl_when_roce_enabled: false,
            fl_when_roce_disabled: g(cmd_hca_cap::FL_RC_QP_WHEN_ROCE_DISABLED) != 0,
            gid_table_size: 0,
            roce_l3_types: 0,
        }
    }

    /// Refuse values the driver would use as shifts or bounds beyond what they can mean:
    /// `log_uar_page_sz` other than the one bring-up set (UAR offsets are shifted by it), QP
    /// and CQ size maxima wider than the context fields the sizes travel in (`qpc.log_sq_size`,
    /// `cqc.log_cq_size`: a larger maximum would let through a size no command can carry),
    /// and a BlueFlame register that does not fit its UAR page after [`BF_OFFSET`].
    pub(super) fn check(&self, log_uar_page_sz: u16) -> Result<(), HcaError> {
        let bad = |field, value: u64| Err(HcaError::BadFirmwareValue { field, value });
        if self.log_uar_page_sz != log_uar_page_sz {
            return bad("cmd_hca_cap.log_uar_page_sz", self.log_uar_page_sz.into());
        }
        if u64::from(self.log_max_qp_sz) > qpc::LOG_SQ_SIZE.max() {
            return bad("cmd_hca_cap.log_max_qp_sz", self.log_max_qp_sz.into());
        }
        if u64::from(self.log_max_cq_sz) > cqc::LOG_CQ_SIZE.max() {
            return bad("cmd_hca_cap.log_max_cq_sz", self.log_max_cq_sz.into());
        }
        // `log_bf_reg_size` is 5 bits wide and `log_uar_page_sz` (checked equal to the page
        // shift bring-up set, from a `usize` page size) at most 51: no overflow in u64.
        let uar_page = 4096u64 << log_uar_page_sz;
        if BF_OFFSET as u64 + (1u64 << self.log_bf_reg_size) > uar_page {
            return bad("cmd_hca_cap.log_bf_reg_size", self.log_bf_reg_size.into());
        }
        Ok(())
    }

    /// The limits the data path needs.
    pub fn device_caps(&self) -> DeviceCaps {
        DeviceCaps {
            log_max_qp_sz: self.log_max_qp_sz,
            log_max_cq_sz: self.log_max_cq_sz,
            max_wqe_sz_sq: self.max_wqe_sz_sq as u32,
            log_bf_reg_size: self.log_bf_reg_size,
        }
    }
}

/// The kernel's default profile asks for at most 2^18 QPs (`main.c` `handle_hca_cap`:
/// `LOG_MAX_SUPPORTED_QPS` becomes `min(18, max log_max_qp)`).
pub const PROFILE_LOG_MAX_QP: u8 = 18;

/// The driver's changes to the current general capabilities before `SET_HCA_CAP`, as the
/// kernel's `handle_hca_cap` (`drivers/net/ethernet/mellanox/mlx5/core/main.c`) makes them
/// where this driver has the same needs; `cap` holds the current values, `max` the maximum.
///
/// * `cmdif_checksum` 0 (the driver does not checksum commands);
/// * `log_uar_page_sz`: the system page, `page_shift` over 4 KiB;
/// * `log_max_qp`: `min(18, max)`, the default profile (`MLX5_PROF_MASK_QP_SIZE`);
/// * `cache_line_128byte` where the device can change it: 1 when the host's cache line is
///   128 bytes or more (`cache_line_size() >= 128`), so that the device pads CQEs and
///   scatters to the host's line;
/// * `release_all_pages` where offered: firmware may then ask for every page back with one
///   page request, which [`Hca::poll_events`] answers.
///
/// Left as firmware had them, and why: `pkey_table_size` (the kernel limits it to 128
/// entries; a RoCE port has one P_Key), `uar_4k` (the kernel sets it only on pages larger
/// than 4 KiB; `log_uar_page_sz` covers this driver's pages), `dct`, `num_vhca_ports`,
/// `mkey_by_name`, the PCIe reset and update events, `roce` and `abs_native_port_num`
/// (features this driver does not use).
pub fn general_cap_changes(cap: &mut [u8], max: &[u8], page_shift: u32, cache_line: u16) {
    ifc::set(cap, cmd_hca_cap::CMDIF_CHECKSUM, 0);
    ifc::set(cap, cmd_hca_cap::LOG_UAR_PAGE_SZ, page_shift as u64);
    let log_max_qp = (ifc::get(max, cmd_hca_cap::LOG_MAX_QP) as u8).min(PROFILE_LOG_MAX_QP);
    ifc::set(cap, cmd_hca_cap::LOG_MAX_QP, log_max_qp as u64);
    if ifc::get(max, cmd_hca_cap::CACHE_LINE_128BYTE) != 0 {
        ifc::set(cap, cmd_hca_cap::CACHE_LINE_128BYTE, (cache_line >= 128) as u64);
    }
    if ifc::get(max, cmd_hca_cap::RELEASE_ALL_PAGES) != 0 {
        ifc::set(cap, cmd_hca_cap::RELEASE_ALL_PAGES, 1);
    }
}

impl Hca<'_> {
    pub(super) fn query_cap(
        &mut self,
        ty: u16,
        mode: u16,
        out: &mut [u8; query_hca_cap_out::SIZE],
    ) -> Result<(), HcaError> {
        let q: [u8; query_hca_cap_in::SIZE] = input(consts::CMD_OP_QUERY_HCA_CAP, ty << 1 | mode);
        self.exec("QUERY_HCA_CAP", &q, Pas::None, out)
    }

    pub(super) fn handle_caps(&mut self) -> Result<(), HcaError> {
        let cap_at = query_hca_cap_out::CAPABILITY.byte();
        let mut max = [0u8; query_hca_cap_out::SIZE];
        let mut cur = [0u8; query_hca_cap_out::SIZE];
        self.query_cap(CAP_GENERAL, CAP_MAX, &mut max)?;
        self.query_cap(CAP_GENERAL, CAP_CUR, &mut cur)?;

        // SET_HCA_CAP carries the current values with the driver's changes (kernel
        // `handle_hca_cap`, rdma-core `handle_hca_cap`); its op_mod is the capability type
        // shifted left by one, as for QUERY_HCA_CAP (kernel `set_caps`).
        let mut set: [u8; set_hca_cap_in::SIZE] =
            input(consts::CMD_OP_SET_HCA_CAP, consts::SET_HCA_CAP_OP_MOD_GENERAL_DEVICE << 1);
        let at = set_hca_cap_in::CAPABILITY.byte();
        set[at..at + cmd_hca_cap::SIZE].copy_from_slice(&cur[cap_at..cap_at + cmd_hca_cap::SIZE]);
        let page_shift = self.dma.page_size().trailing_zeros().saturating_sub(12);
        general_cap_changes(&mut set[at..], &max[cap_at..], page_shift, self.cfg.cache_line);
        self.exec("SET_HCA_CAP", &set, Pas::None, &mut [0u8; 16])?;
        self.report.set_general_caps = true;

        self.query_cap(CAP_GENERAL, CAP_CUR, &mut cur)?;
        let mut caps = HcaCaps::from_general(&cur[cap_at..]);
        caps.check(page_shift as u16)?;

        if caps.roce {
            let mut rmax = [0u8; query_hca_cap_out::SIZE];
            let mut rcur = [0u8; query_hca_cap_out::SIZE];
            self.query_cap(CAP_ROCE, CAP_MAX, &mut rmax)?;
            self.query_cap(CAP_ROCE, CAP_CUR, &mut rcur)?;
            let sport = roce_cap::SW_R_ROCE_SRC_UDP_PORT;
            let have = ifc::get(&rcur[cap_at..], sport) != 0;
            if !have && ifc::get(&rmax[cap_at..], sport) != 0 {
                let mut set: [u8; set_hca_cap_in::SIZE] =
                    input(consts::CMD_OP_SET_HCA_CAP, consts::SET_HCA_CAP_OP_MOD_ROCE << 1);
                set[at..at + roce_cap::SIZE]
                    .copy_from_slice(&rcur[cap_at..cap_at + roce_cap::SIZE]);
                ifc::set(&mut set[at..], sport, 1);
                self.exec("SET_HCA_CAP", &set, Pas::None, &mut [0u8; 16])?;
                self.report.set_roce_caps = true;
                caps.roce_sw_udp_sport = true;
            } else {
                caps.roce_sw_udp_sport = have;
            }
            let r = &rcur[cap_at..];
            caps.qp_ts_format = ifc::get(r, roce_cap::QP_TS_FORMAT) as u8;
            caps.fl_when_roce_enabled = ifc::get(r, roce_cap::FL_RC_QP_WHEN_ROCE_ENABLED) != 0;
            caps.fl_when_roce_disabled |= ifc::get(r, roce_cap::FL_RC_QP_WHEN_ROCE_DISABLED) != 0;
            caps.gid_table_size = ifc::get(r, roce_cap::ROCE_ADDRESS_TABLE_SIZE) as u16;
            caps.roce_l3_types = ifc::get(r, roce_cap::L3_TYPE) as u8;
        }
        self.report.caps = caps;
        Ok(())
    }
}
