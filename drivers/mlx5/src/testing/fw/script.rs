//! The default script of [`FakeFw`]: enough state (pages lent, objects numbered,
//! capabilities) to drive the bring-up sequence and the firmware-backed control seam, plus
//! injected faults.

use std::sync::{Arc, Mutex};
use std::vec::Vec;

use rdma_pmd_hal::mem::{HeapDma, MemBar};

use super::{FakeFw, Reply, Seen};
use crate::control::bringup::{HcaCaps, PortType};
use crate::layout::ifc::{self, consts, generated::*, Field};

/// An event queue ring firmware writes: where it is, its size, the next entry to write.
#[derive(Debug, Clone, Copy)]
pub struct Ring {
    /// Bus address of entry 0.
    pub bus: u64,
    /// log2 of the number of entries.
    pub log_size: u8,
    /// Producer index: entries written so far.
    pub pi: u32,
}

impl Ring {
    /// Write the next entry (type `ty`, event data `data` at bytes 32..) with the owner bit of
    /// its pass (`MLX5_EQE_OWNER_INIT_VAL` is 1, so pass 0 writes 0), owner byte last.
    pub fn post(&mut self, dma: &HeapDma, ty: u8, sub_type: u8, data: &[u8]) {
        let owner = ((self.pi >> self.log_size) & 1) as u8;
        self.post_with_owner(dma, ty, sub_type, data, owner);
    }

    /// As [`post`](Self::post) with an explicit owner byte (a bad one is firmware's mistake).
    pub fn post_with_owner(&mut self, dma: &HeapDma, ty: u8, sub_type: u8, data: &[u8], owner: u8) {
        let at = self.bus + ((self.pi & ((1 << self.log_size) - 1)) as u64) * 64;
        let mut e = [0u8; 64];
        e[1] = ty;
        e[3] = sub_type;
        let n = data.len().min(28);
        e[32..32 + n].copy_from_slice(&data[..n]);
        dma.write(rdma_pmd::BusAddr(at), &e[..63]);
        dma.write(rdma_pmd::BusAddr(at + 63), &[owner]);
        self.pi = self.pi.wrapping_add(1);
    }
}

/// Event data of a page request (`struct mlx5_eqe_page_req`).
pub fn page_request(func_id: u16, num_pages: i32) -> [u8; 8] {
    let mut d = [0u8; 8];
    d[2..4].copy_from_slice(&func_id.to_be_bytes());
    d[4..8].copy_from_slice(&num_pages.to_be_bytes());
    d
}

/// What the script does and has seen.
#[derive(Debug, Default)]
pub struct State {
    /// Pages firmware asks for at boot / init.
    pub boot_pages: u32,
    /// Init pages.
    pub init_pages: u32,
    /// Pages firmware holds.
    pub held: Vec<u64>,
    /// Fail this opcode with this status (once `fail_after` earlier matches passed).
    pub fail: Option<(u16, u8)>,
    /// Never complete this opcode.
    pub hang: Option<u16>,
    /// Port type to report (1: Ethernet).
    pub port_type: u64,
    /// Keep pages on MANAGE_PAGES take (firmware that never returns them).
    pub keep_pages: bool,
    /// EQ rings created: (eqn, bus address of the first page, event bitmask).
    pub eqs: Vec<(u8, u64, u64)>,
    next_eqn: u8,
    /// The same rings, for firmware to write events into.
    pub rings: Vec<Ring>,
    /// UAR index `ALLOC_UAR` answers.
    pub uar_index: u32,
    /// Give every EQ this number instead of counting.
    pub eqn_fixed: Option<u8>,
    /// General capability fields to report differently (maximum and current).
    pub caps: Vec<(Field, u64)>,
    /// RoCE capability fields to report differently (maximum and current).
    pub roce_caps: Vec<(Field, u64)>,
    /// The `roce_addr_layout` every `QUERY_ROCE_ADDRESS` answers (empty: a zeroed entry).
    pub roce_address: Vec<u8>,
    /// The permanent MAC and `min_wqe_inline_mode` `QUERY_NIC_VPORT_CONTEXT` answers.
    pub vport_mac: [u8; 6],
    /// `min_wqe_inline_mode` of the NIC vport context.
    pub vport_min_inline: u8,
    /// `wqe_inline_mode` of the Ethernet offload capabilities.
    pub eth_inline_cap: u64,
    /// After each `MANAGE_PAGES`, ask for one page, then offer one back, forever.
    pub ping_pong: bool,
    /// The DMA space (set by [`script`]), for writing events.
    pub dma: Option<Arc<HeapDma>>,
}

/// A fake firmware running the script; returns it with its BAR and DMA space.
pub fn script(st: Arc<Mutex<State>>) -> (Arc<FakeFw>, MemBar, Arc<HeapDma>) {
    let st2 = st.clone();
    let (fw, bar, dma) = FakeFw::new(move |s| answer(&mut st2.lock().unwrap(), s));
    st.lock().unwrap().dma = Some(dma.clone());
    (fw, bar, dma)
}

/// The default script: Ethernet port with RoCE, 40 boot pages, 300 init pages.
pub fn default_state() -> Arc<Mutex<State>> {
    Arc::new(Mutex::new(State {
        boot_pages: 40,
        init_pages: 300,
        port_type: 1,
        next_eqn: 4,
        uar_index: 1,
        ..Default::default()
    }))
}

fn reply(outlen: usize, fill: impl FnOnce(&mut [u8])) -> Reply {
    let mut out = vec![0u8; outlen.max(16)];
    fill(&mut out);
    Reply::ok(out[8..].to_vec())
}

/// The script's general capabilities, with `overrides` applied.
pub fn general_caps(cap: &mut [u8], port_type: u64, overrides: &[(Field, u64)]) {
    ifc::set(cap, cmd_hca_cap::LOG_MAX_QP_SZ, 15);
    ifc::set(cap, cmd_hca_cap::LOG_MAX_QP, 18);
    ifc::set(cap, cmd_hca_cap::LOG_MAX_CQ_SZ, 22);
    ifc::set(cap, cmd_hca_cap::LOG_MAX_CQ, 24);
    ifc::set(cap, cmd_hca_cap::LOG_MAX_MKEY, 24);
    ifc::set(cap, cmd_hca_cap::LOG_MAX_PD, 23);
    ifc::set(cap, cmd_hca_cap::LOG_MAX_MSG, 30);
    ifc::set(cap, cmd_hca_cap::LOG_MAX_RA_REQ_QP, 4);
    ifc::set(cap, cmd_hca_cap::LOG_MAX_RA_RES_QP, 4);
    ifc::set(cap, cmd_hca_cap::NUM_PORTS, 1);
    ifc::set(cap, cmd_hca_cap::PORT_TYPE, port_type);
    ifc::set(cap, cmd_hca_cap::ROCE, 1);
    ifc::set(cap, cmd_hca_cap::BF, 1);
    ifc::set(cap, cmd_hca_cap::LOG_BF_REG_SIZE, 9);
    ifc::set(cap, cmd_hca_cap::MAX_WQE_SZ_SQ, 1024);
    ifc::set(cap, cmd_hca_cap::CMDIF_CHECKSUM, 3);
    for (f, v) in overrides {
        ifc::set(cap, *f, *v);
    }
}

fn answer(st: &mut State, s: &Seen) -> Reply {
    if st.hang == Some(s.opcode) {
        return Reply { hang: true, ..Default::default() };
    }
    if let Some((op, status)) = st.fail {
        if op == s.opcode {
            return Reply::fail(status, 0x00c0_ffee);
        }
    }
    let i = &s.input;
    match s.opcode {
        op if op == consts::CMD_OP_QUERY_ISSI => reply(s.outlen, |o| {
            ifc::set(o, query_issi_out::SUPPORTED_ISSI_DW0, 0b11);
        }),
        op if op == consts::CMD_OP_QUERY_PAGES => {
            let n = if s.op_mod == consts::QUERY_PAGES_IN_OP_MOD_BOOT_PAGES {
                st.boot_pages
            } else if s.op_mod == consts::QUERY_PAGES_IN_OP_MOD_INIT_PAGES {
                st.init_pages
            } else {
                0
            };
            reply(s.outlen, |o| ifc::set(o, query_pages_out::NUM_PAGES, n as u64))
        }
        op if op == consts::CMD_OP_MANAGE_PAGES => {
            if st.ping_pong {
                let n = if st.rings[0].pi.is_multiple_of(2) { 1 } else { -1 };
                let dma = st.dma.clone().expect("dma");
                st.rings[0].post(&dma, 0x0b, 0, &page_request(0, n));
            }
            let n = ifc::get(i, manage_pages_in::INPUT_NUM_ENTRIES) as u32;
            if s.op_mod == consts::MANAGE_PAGES_IN_OP_MOD_ALLOCATION_SUCCESS {
                for k in 0..n {
                    st.held.push(ifc::get(i, manage_pages_in::PAS.at(k)));
                }
                reply(s.outlen, |_| {})
            } else if s.op_mod == consts::MANAGE_PAGES_IN_OP_MOD_HCA_RETURN_PAGES {
                let give = if st.keep_pages { 0 } else { (n as usize).min(st.held.len()) };
                let back: Vec<u64> = st.held.drain(..give).collect();
                reply(s.outlen, |o| {
                    ifc::set(o, manage_pages_out::OUTPUT_NUM_ENTRIES, back.len() as u64);
                    for (k, a) in back.iter().enumerate() {
                        ifc::set(o, manage_pages_out::PAS.at(k as u32), *a);
                    }
                })
            } else {
                reply(s.outlen, |_| {})
            }
        }
        op if op == consts::CMD_OP_QUERY_HCA_CAP => {
            let (ty, cur) = (s.op_mod >> 1, s.op_mod & 1);
            let pt = st.port_type;
            let overrides = st.caps.clone();
            let roce_overrides = st.roce_caps.clone();
            let eth_inline = st.eth_inline_cap;
            reply(s.outlen, |o| {
                let cap = &mut o[query_hca_cap_out::CAPABILITY.byte()..];
                if ty == 0 {
                    general_caps(cap, pt, &overrides);
                } else if ty == 4 {
                    // RoCE: software UDP source port supported (max) but off (cur); force-loopback.
                    ifc::set(cap, roce_cap::SW_R_ROCE_SRC_UDP_PORT, (cur == 0) as u64);
                    ifc::set(cap, roce_cap::ROCE_VERSION, 2);
                    ifc::set(cap, roce_cap::FL_RC_QP_WHEN_ROCE_ENABLED, 1);
                    for &(f, v) in &roce_overrides {
                        ifc::set(cap, f, v);
                    }
                } else if ty == 1 {
                    let f = per_protocol_networking_offload_caps::WQE_INLINE_MODE;
                    ifc::set(cap, f, eth_inline);
                }
            })
        }
        op if op == consts::CMD_OP_QUERY_NIC_VPORT_CONTEXT => {
            let (mac, min_inline) = (st.vport_mac, st.vport_min_inline);
            reply(s.outlen, |o| {
                let x = query_nic_vport_context_out::NIC_VPORT_CONTEXT;
                let at = nic_vport_context::PERMANENT_ADDRESS.within(x).byte();
                o[at + 2..at + 8].copy_from_slice(&mac);
                ifc::set(o, nic_vport_context::MIN_WQE_INLINE_MODE.within(x), min_inline as u64);
            })
        }
        // The Ethernet path's objects get fixed numbers, one per kind, so a test can tell
        // which object a later command names.
        op if op == consts::CMD_OP_ALLOC_TRANSPORT_DOMAIN => {
            reply(s.outlen, |o| ifc::set(o, alloc_transport_domain_out::TRANSPORT_DOMAIN, 0x21))
        }
        op if op == consts::CMD_OP_CREATE_TIS => {
            reply(s.outlen, |o| ifc::set(o, create_tis_out::TISN, 0x22))
        }
        op if op == consts::CMD_OP_CREATE_SQ => {
            reply(s.outlen, |o| ifc::set(o, create_sq_out::SQN, 0x23))
        }
        op if op == consts::CMD_OP_CREATE_RQ => {
            reply(s.outlen, |o| ifc::set(o, create_rq_out::RQN, 0x24))
        }
        op if op == consts::CMD_OP_CREATE_TIR => {
            reply(s.outlen, |o| ifc::set(o, create_tir_out::TIRN, 0x25))
        }
        op if op == consts::CMD_OP_CREATE_FLOW_TABLE => {
            reply(s.outlen, |o| ifc::set(o, create_flow_table_out::TABLE_ID, 0x26))
        }
        op if op == consts::CMD_OP_CREATE_FLOW_GROUP => {
            reply(s.outlen, |o| ifc::set(o, create_flow_group_out::GROUP_ID, 0x27))
        }
        op if op == consts::CMD_OP_ALLOC_UAR => {
            let uar = st.uar_index;
            reply(s.outlen, |o| ifc::set(o, alloc_uar_out::UAR, uar as u64))
        }
        op if op == consts::CMD_OP_CREATE_EQ => {
            st.next_eqn += 1;
            let eqn = st.eqn_fixed.unwrap_or(st.next_eqn);
            let pas = ifc::get(i, create_eq_in::PAS);
            st.eqs.push((eqn, pas, ifc::get(i, create_eq_in::EVENT_BITMASK)));
            let log_size = ifc::get(i, eqc::LOG_EQ_SIZE.within(create_eq_in::EQ_CONTEXT_ENTRY));
            st.rings.push(Ring { bus: pas, log_size: log_size as u8, pi: 0 });
            reply(s.outlen, |o| ifc::set(o, create_eq_out::EQ_NUMBER, eqn as u64))
        }
        op if op == consts::CMD_OP_ALLOC_PD => {
            reply(s.outlen, |o| ifc::set(o, alloc_pd_out::PD, 3))
        }
        op if op == consts::CMD_OP_CREATE_MKEY => {
            reply(s.outlen, |o| ifc::set(o, create_mkey_out::MKEY_INDEX, 0x42))
        }
        op if op == consts::CMD_OP_CREATE_CQ => {
            reply(s.outlen, |o| ifc::set(o, create_cq_out::CQN, 7))
        }
        op if op == consts::CMD_OP_CREATE_QP => {
            reply(s.outlen, |o| ifc::set(o, create_qp_out::QPN, 0x99))
        }
        op if op == consts::CMD_OP_QUERY_ROCE_ADDRESS => {
            let entry = st.roce_address.clone();
            reply(s.outlen, |o| {
                let at = query_roce_address_out::ROCE_ADDRESS.byte();
                o[at..at + entry.len()].copy_from_slice(&entry);
            })
        }
        _ => reply(s.outlen, |_| {}),
    }
}

/// A ConnectX-like capability set (Ethernet, RoCE v2 over IPv4 and IPv6, CQE version 1,
/// software UDP source port, force-loopback), for tests of the command builders.
pub fn example_caps() -> HcaCaps {
    HcaCaps {
        log_max_qp: 18,
        log_max_qp_sz: 15,
        log_max_cq: 24,
        log_max_cq_sz: 22,
        log_max_eq: 8,
        log_max_eq_sz: 22,
        log_max_mkey: 24,
        log_max_pd: 23,
        log_max_msg: 30,
        log_max_ra_req_qp: 4,
        log_max_ra_res_qp: 4,
        num_ports: 1,
        port_type: PortType::Ethernet,
        roce: true,
        bf: true,
        log_bf_reg_size: 9,
        max_wqe_sz_sq: 1024,
        log_uar_page_sz: 0,
        roce_sw_udp_sport: true,
        qp_ts_format: 0,
        sq_ts_format: 0,
        rq_ts_format: 0,
        cqe_version: 1,
        num_vhca_ports: 0,
        release_all_pages: false,
        fl_when_roce_enabled: true,
        fl_when_roce_disabled: true,
        gid_table_size: 16,
        roce_l3_types: 0b110,
    }
}
