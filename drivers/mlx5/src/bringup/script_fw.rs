//! Scripted firmware answers for bring-up unit tests: enough state (pages lent, objects
//! numbered, capabilities) to drive the sequence, plus injected faults. The transport is
//! [`crate::cmd::fake_fw`]; the PRM device model lives in its own crate.

use std::sync::{Arc, Mutex};
use std::vec::Vec;

use rdma_pmd_hal::mem::{HeapDma, MemBar};

use crate::cmd::fake_fw::{FakeFw, Reply, Seen};
use crate::ifc::{self, consts, generated::*};

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
}

/// A fake firmware running the script; returns it with its BAR and DMA space.
pub fn script(st: Arc<Mutex<State>>) -> (Arc<FakeFw>, MemBar, Arc<HeapDma>) {
    FakeFw::new(move |s| answer(&mut st.lock().unwrap(), s))
}

/// The default script: Ethernet port with RoCE, 40 boot pages, 300 init pages.
pub fn default_state() -> Arc<Mutex<State>> {
    Arc::new(Mutex::new(State {
        boot_pages: 40,
        init_pages: 300,
        port_type: 1,
        next_eqn: 4,
        ..Default::default()
    }))
}

fn reply(outlen: usize, fill: impl FnOnce(&mut [u8])) -> Reply {
    let mut out = vec![0u8; outlen.max(16)];
    fill(&mut out);
    Reply::ok(out[8..].to_vec())
}

fn general_caps(cap: &mut [u8], port_type: u64) {
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
            reply(s.outlen, |o| {
                let cap = &mut o[query_hca_cap_out::CAPABILITY.byte()..];
                if ty == 0 {
                    general_caps(cap, pt);
                } else if ty == 4 {
                    // RoCE: software UDP source port supported (max) but off (cur).
                    ifc::set(cap, roce_cap::SW_R_ROCE_SRC_UDP_PORT, (cur == 0) as u64);
                    ifc::set(cap, roce_cap::ROCE_VERSION, 2);
                }
            })
        }
        op if op == consts::CMD_OP_ALLOC_UAR => {
            reply(s.outlen, |o| ifc::set(o, alloc_uar_out::UAR, 1))
        }
        op if op == consts::CMD_OP_CREATE_EQ => {
            st.next_eqn += 1;
            let eqn = st.next_eqn;
            let pas = ifc::get(i, create_eq_in::PAS);
            st.eqs.push((eqn, pas, ifc::get(i, create_eq_in::EVENT_BITMASK)));
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
        _ => reply(s.outlen, |_| {}),
    }
}
