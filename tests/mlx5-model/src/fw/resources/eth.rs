//! The Ethernet commands: transport domains, TISs, SQs, RQs, TIRs, NIC RX flow tables, flow
//! groups, flow table entries and the root. The objects live in the model's device tables
//! ([`crate::eth`]), which execute them.
//!
//! | command | checks (status) |
//! |---|---|
//! | `ALLOC_TRANSPORT_DOMAIN`, `CREATE_TIS/SQ/RQ/TIR/FLOW_TABLE` | count below `1 << log_max_*` (`EXCEED_LIM`) |
//! | `DEALLOC_*`, `DESTROY_*` | object exists (`BAD_RESOURCE`); not referenced: a domain by a TIS or TIR, a TIS by an SQ, an RQ by a TIR, a TIR by an entry, a table by groups (the root table may go: the type is then rootless), a group by entries (`RESOURCE_BUSY`) |
//! | `CREATE_TIS` | domain exists, PD exists if given (`BAD_RESOURCE`); no TLS, LAG affinity, underlay QP (`BAD_PARAM`) |
//! | `CREATE_SQ` | state RST; one TIS (`tis_lst_sz` 1); no hairpin, UMR, SWP, multi-packet WQEs, packet pacing, cross-channel; `min_wqe_inline_mode` ≤ TCP/UDP (`BAD_PARAM`); CQ, TIS, PD, UAR exist (`BAD_RESOURCE`); the WQ as below |
//! | `CREATE_RQ` | state RST; memory RQ, no RMP, delay drop, FCS scatter, hairpin, counter set (`BAD_PARAM`; a counter set: `BAD_RESOURCE`); CQ, PD exist; the WQ as below |
//! | WQ (`wq`) | cyclic, no signature, no end padding, no umem (`BAD_PARAM`); `page_offset` as for QPs; SQ stride 64 bytes, RQ stride 16..2048 (`BAD_PARAM`); `log_wq_sz` ≤ `log_max_qp_sz` (`BAD_SIZE`); PAS covers, each page aligned and translating, anywhere; doorbell record 8-aligned and translates (`BAD_PARAM`) |
//! | `MODIFY_SQ/RQ` | exists (`BAD_RESOURCE`); `*_state` is the current state (`BAD_RES_STATE`); RST→RDY, RDY→ERR, RDY/ERR→RST (`BAD_RES_STATE` otherwise); no `modify_bitmask` (`BAD_PARAM`); to RST the counter restarts at 0 |
//! | `CREATE_TIR` | direct dispatch, no LRO, TLS, tunnel offload, hash (`BAD_PARAM`); RQ and domain exist (`BAD_RESOURCE`) |
//! | flow steering (all) | own vport, NIC RX table type (`BAD_PARAM`); the table exists (`BAD_RESOURCE`) |
//! | `CREATE_FLOW_TABLE` | level ≤ `max_ft_level` (63), default miss action, no reformat, decap, SW ownership, termination (`BAD_PARAM`); `log_size` ≤ `log_max_ft_size` (`BAD_PARAM`) |
//! | `CREATE_FLOW_GROUP` | TCAM group, no definer; `start ≤ end` inside the table, no overlap; only outer headers enabled and criteria only on the fields the model matches (MACs, EtherType, first VLAN, C/S-VLAN tag, IP version and protocol, UDP ports) (`BAD_PARAM`) |
//! | `SET_FLOW_TABLE_ENTRY` | `op_mod` 0 (new entry); index inside the table, free, inside its group; action forward, one TIR destination, no counters, reformat, header rewrite, VLAN push; value only under the group's criteria (`BAD_PARAM`); group and TIR exist (`BAD_RESOURCE`) |
//! | `DELETE_FLOW_TABLE_ENTRY` | the entry exists (`BAD_RESOURCE`) |
//! | `SET_FLOW_TABLE_ROOT` | `op_mod` 0 sets `table_id` (which must exist), 1 disconnects; no other vport's table, no underlay QP (`BAD_PARAM`) |

use super::{busy, limit, no_such, queue_pages, reachable, unsupported, Start};
use crate::eth::{FlowGroup, FlowTable, Fte, Rq, Sq, Tir, Tis, WqState};
use crate::fw::codes::{
    syndrome as syn, CmdStatus, FLOW_ACTION_FWD_DEST, FLOW_DEST_TYPE_TIR, FLOW_TABLE_TYPE_NIC_RX,
    INLINE_MODE_L2, INLINE_MODE_TCP_UDP, MATCH_CRITERIA_OUTER_HEADERS, TIRC_DISP_TYPE_DIRECT,
    WQ_STATE_ERR, WQ_STATE_RDY, WQ_STATE_RST, WQ_TYPE_CYCLIC,
};
use crate::fw::decoded::*;
use crate::fw::hca::{fail, Fail, Hca, Res};
use crate::fw::ifc::{
    self, cmd_hca_cap as gen, dest_format_struct as dest, fte_match_set_lyr_2_4 as m,
};
use crate::objects::QueueBuf;

use super::eth_caps::{LOG_MAX_FT_NUM, LOG_MAX_FT_SIZE, MAX_FT_LEVEL};

fn wq_state(raw: u8) -> Option<WqState> {
    match raw {
        WQ_STATE_RST => Some(WqState::Rst),
        WQ_STATE_RDY => Some(WqState::Rdy),
        WQ_STATE_ERR => Some(WqState::Err),
        _ => None,
    }
}

fn bad_transition() -> Fail {
    fail(CmdStatus::BadResState, syn::WQ_TRANSITION)
}

/// The next state of a `MODIFY_SQ/RQ` from `cur` (the state the command says the queue is
/// in, `now` the one it is in).
fn transition(now: WqState, cur: u8, next: u8, bitmask: u64) -> Result<WqState, Fail> {
    if bitmask != 0 {
        return Err(unsupported());
    }
    if wq_state(cur) != Some(now) {
        return Err(bad_transition());
    }
    use WqState::{Rdy, Rst};
    match (now, wq_state(next)) {
        (Rst, Some(Rdy))
        | (Rdy, Some(WqState::Err))
        | (Rdy, Some(Rst))
        | (WqState::Err, Some(Rst)) => Ok(wq_state(next).expect("matched")),
        _ => Err(bad_transition()),
    }
}

/// The mask of the outer-header fields the model's steering matches on.
fn supported_outer() -> [u8; m::SIZE] {
    let mut s = [0u8; m::SIZE];
    for f in [
        m::SMAC_47_16,
        m::SMAC_15_0,
        m::ETHERTYPE,
        m::DMAC_47_16,
        m::DMAC_15_0,
        m::FIRST_PRIO,
        m::FIRST_CFI,
        m::FIRST_VID,
        m::IP_PROTOCOL,
        m::CVLAN_TAG,
        m::SVLAN_TAG,
        m::IP_VERSION,
        m::UDP_SPORT,
        m::UDP_DPORT,
    ] {
        f.set(&mut s, u64::MAX);
    }
    s
}

/// The outer headers of a match parameter (`fte_match_param.outer_headers`), and whether
/// anything outside them is set.
fn outer(param: &[u8; ifc::fte_match_param::SIZE]) -> ([u8; m::SIZE], bool) {
    let at = ifc::fte_match_param::OUTER_HEADERS.byte();
    let mut o = [0u8; m::SIZE];
    o.copy_from_slice(&param[at..at + m::SIZE]);
    let rest = param.iter().enumerate().any(|(i, b)| !(at..at + m::SIZE).contains(&i) && *b != 0);
    (o, rest)
}

fn steering_target(other_vport: bool, vport: u16, table_type: u8) -> Res {
    if other_vport || vport != 0 || table_type != FLOW_TABLE_TYPE_NIC_RX {
        return Err(fail(CmdStatus::BadParam, syn::BAD_VPORT_OR_TABLE_TYPE));
    }
    Ok(())
}

/// What the model keeps of a WQ: (buffer, doorbell record) after the common checks.
struct WqPlace {
    buf: QueueBuf,
    dbrec: u64,
}

impl Hca {
    fn check_wq(
        &self,
        wq: &Wq,
        pas: &crate::fw::decoded::Entries,
        stride: u8,
    ) -> Result<WqPlace, Fail> {
        if wq.wq_type != WQ_TYPE_CYCLIC
            || wq.wq_signature
            || wq.end_padding_mode != 0
            || wq.cd_slave
            || wq.dbr_umem_valid
            || wq.wq_umem_valid
        {
            return Err(unsupported());
        }
        if u64::from(wq.log_wq_sz) > self.cap(gen::LOG_MAX_QP_SZ) {
            return Err(fail(CmdStatus::BadSize, syn::QUEUE_TOO_BIG));
        }
        if !self.pds.contains(&wq.pd) {
            return Err(no_such());
        }
        let bytes = (1u64 << stride) << wq.log_wq_sz;
        let start = Start::new(wq.page_offset, 1 << stride);
        let buf = queue_pages(self, pas, 12 + u32::from(wq.log_wq_pg_sz), start, bytes)?;
        if wq.dbr_addr % 8 != 0 {
            return Err(fail(CmdStatus::BadParam, syn::BAD_ADDRESS));
        }
        reachable(self, wq.dbr_addr, 8)?;
        Ok(WqPlace { buf, dbrec: wq.dbr_addr })
    }

    pub(super) fn alloc_transport_domain(&mut self, out: &mut [u8]) -> Res {
        let mut dev = self.shared.dev();
        limit(dev.eth.tds.len(), self.cap(gen::LOG_MAX_TRANSPORT_DOMAIN))?;
        let td = dev.eth.number();
        dev.eth.tds.insert(td);
        ifc::alloc_transport_domain_out::TRANSPORT_DOMAIN.set(out, u64::from(td));
        Ok(())
    }

    pub(super) fn dealloc_transport_domain(&mut self, d: &DeallocTransportDomain) -> Res {
        let mut dev = self.shared.dev();
        let td = d.transport_domain;
        if !dev.eth.tds.contains(&td) {
            return Err(no_such());
        }
        if dev.eth.tises.values().any(|t| t.td == td) || dev.eth.tirs.values().any(|t| t.td == td) {
            return Err(busy());
        }
        dev.eth.tds.remove(&td);
        Ok(())
    }

    pub(super) fn create_tis(&mut self, d: &CreateTis, out: &mut [u8]) -> Res {
        let c = &d.ctx;
        let mut dev = self.shared.dev();
        limit(dev.eth.tises.len(), self.cap(gen::LOG_MAX_TIS))?;
        if c.tls_en
            || c.strict_lag_tx_port_affinity
            || c.lag_tx_port_affinity > 1
            || c.underlay_qpn != 0
        {
            return Err(unsupported());
        }
        if !dev.eth.tds.contains(&c.transport_domain) || (c.pd != 0 && !self.pds.contains(&c.pd)) {
            return Err(no_such());
        }
        let tisn = dev.eth.number();
        dev.eth.tises.insert(tisn, Tis { td: c.transport_domain, prio: c.prio });
        ifc::create_tis_out::TISN.set(out, u64::from(tisn));
        Ok(())
    }

    pub(super) fn destroy_tis(&mut self, d: &DestroyTis) -> Res {
        let mut dev = self.shared.dev();
        if !dev.eth.tises.contains_key(&d.tisn) {
            return Err(no_such());
        }
        if dev.eth.sqs.values().any(|s| s.tisn == d.tisn) {
            return Err(busy());
        }
        dev.eth.tises.remove(&d.tisn);
        Ok(())
    }

    pub(super) fn create_sq(&mut self, d: &CreateSq, out: &mut [u8]) -> Res {
        let c = &d.ctx;
        limit(self.shared.dev().eth.sqs.len(), self.cap(gen::LOG_MAX_SQ))?;
        if c.state != WQ_STATE_RST {
            return Err(fail(CmdStatus::BadParam, syn::WQ_TRANSITION));
        }
        if c.cd_master
            || c.allow_multi_pkt_send_wqe
            || c.reg_umr
            || c.allow_swp
            || c.hairpin
            || c.packet_pacing_rate_limit_index != 0
            || c.tis_lst_sz != 1
            || c.min_wqe_inline_mode > INLINE_MODE_TCP_UDP
            || c.ts_format > 1
        {
            return Err(unsupported());
        }
        if !self.cqs.contains_key(&c.cqn) || !self.uars.contains(&c.wq.uar_page) {
            return Err(no_such());
        }
        if !self.shared.dev().eth.tises.contains_key(&c.tis_num_0) {
            return Err(no_such());
        }
        if c.wq.log_wq_stride != 6 {
            return Err(unsupported());
        }
        let place = self.check_wq(&c.wq, &d.pas, 6)?;
        let mut guard = self.shared.dev();
        let dev = &mut *guard;
        let sqn = dev.next_qpn;
        dev.next_qpn += 1;
        dev.eth.sqs.insert(
            sqn,
            Sq {
                state: WqState::Rst,
                cqn: c.cqn,
                tisn: c.tis_num_0,
                pd: c.wq.pd,
                uar: c.wq.uar_page,
                buf: place.buf,
                log_size: c.wq.log_wq_sz,
                dbrec: place.dbrec,
                // `wqe_inline_mode` is L2: the Ethernet header is inline whatever the SQ says.
                inline_mode: c.min_wqe_inline_mode.max(INLINE_MODE_L2),
                pc: 0,
            },
        );
        ifc::create_sq_out::SQN.set(out, u64::from(sqn));
        Ok(())
    }

    pub(super) fn modify_sq(&mut self, d: &ModifySq) -> Res {
        let mut dev = self.shared.dev();
        let Some(sq) = dev.eth.sqs.get_mut(&d.sqn) else { return Err(no_such()) };
        let next = transition(sq.state, d.sq_state, d.ctx.state, d.modify_bitmask)?;
        sq.state = next;
        if next == WqState::Rst {
            sq.pc = 0;
        }
        Ok(())
    }

    pub(super) fn destroy_sq(&mut self, d: &DestroySq) -> Res {
        let mut dev = self.shared.dev();
        dev.eth.sqs.remove(&d.sqn).map(|_| ()).ok_or_else(no_such)
    }

    pub(super) fn create_rq(&mut self, d: &CreateRq, out: &mut [u8]) -> Res {
        let c = &d.ctx;
        limit(self.shared.dev().eth.rqs.len(), self.cap(gen::LOG_MAX_RQ))?;
        if c.state != WQ_STATE_RST {
            return Err(fail(CmdStatus::BadParam, syn::WQ_TRANSITION));
        }
        if c.mem_rq_type != 0
            || c.rmpn != 0
            || c.delay_drop_en
            || c.scatter_fcs
            || c.hairpin
            || c.ts_format > 1
        {
            return Err(unsupported());
        }
        if c.counter_set_id != 0 || !self.cqs.contains_key(&c.cqn) {
            return Err(no_such());
        }
        if !(4..=11).contains(&c.wq.log_wq_stride) {
            return Err(unsupported());
        }
        let place = self.check_wq(&c.wq, &d.pas, c.wq.log_wq_stride)?;
        let mut guard = self.shared.dev();
        let dev = &mut *guard;
        let rqn = dev.next_qpn;
        dev.next_qpn += 1;
        dev.eth.rqs.insert(
            rqn,
            Rq {
                state: WqState::Rst,
                cqn: c.cqn,
                pd: c.wq.pd,
                buf: place.buf,
                log_stride: c.wq.log_wq_stride,
                log_size: c.wq.log_wq_sz,
                dbrec: place.dbrec,
                vsd: c.vsd,
                ci: 0,
            },
        );
        ifc::create_rq_out::RQN.set(out, u64::from(rqn));
        Ok(())
    }

    pub(super) fn modify_rq(&mut self, d: &ModifyRq) -> Res {
        let mut dev = self.shared.dev();
        let Some(rq) = dev.eth.rqs.get_mut(&d.rqn) else { return Err(no_such()) };
        let next = transition(rq.state, d.rq_state, d.ctx.state, d.modify_bitmask)?;
        rq.state = next;
        if next == WqState::Rst {
            rq.ci = 0;
        }
        Ok(())
    }

    pub(super) fn destroy_rq(&mut self, d: &DestroyRq) -> Res {
        let mut dev = self.shared.dev();
        if !dev.eth.rqs.contains_key(&d.rqn) {
            return Err(no_such());
        }
        if dev.eth.tirs.values().any(|t| t.rqn == d.rqn) {
            return Err(busy());
        }
        dev.eth.rqs.remove(&d.rqn);
        Ok(())
    }

    pub(super) fn create_tir(&mut self, d: &CreateTir, out: &mut [u8]) -> Res {
        let c = &d.ctx;
        let mut dev = self.shared.dev();
        limit(dev.eth.tirs.len(), self.cap(gen::LOG_MAX_TIR))?;
        if c.disp_type != TIRC_DISP_TYPE_DIRECT
            || c.tls_en
            || c.packet_merge_mask != 0
            || c.lro_timeout_period_usecs != 0
            || c.lro_max_ip_payload_size != 0
            || c.tunneled_offload_en
            || c.rx_hash_symmetric
            || c.rx_hash_fn != 0
            || c.indirect_table != 0
        {
            return Err(unsupported());
        }
        if !dev.eth.rqs.contains_key(&c.inline_rqn) || !dev.eth.tds.contains(&c.transport_domain) {
            return Err(no_such());
        }
        let tirn = dev.eth.number();
        dev.eth.tirs.insert(tirn, Tir { td: c.transport_domain, rqn: c.inline_rqn });
        ifc::create_tir_out::TIRN.set(out, u64::from(tirn));
        Ok(())
    }

    pub(super) fn destroy_tir(&mut self, d: &DestroyTir) -> Res {
        let mut dev = self.shared.dev();
        if !dev.eth.tirs.contains_key(&d.tirn) {
            return Err(no_such());
        }
        if dev.eth.fts.values().any(|t| t.entries.values().any(|e| e.tirn == d.tirn)) {
            return Err(busy());
        }
        dev.eth.tirs.remove(&d.tirn);
        Ok(())
    }

    pub(super) fn create_flow_table(&mut self, d: &CreateFlowTable, out: &mut [u8]) -> Res {
        steering_target(d.other_vport, d.vport_number, d.table_type)?;
        let c = &d.flow_table_context;
        let mut dev = self.shared.dev();
        limit(dev.eth.fts.len(), u64::from(LOG_MAX_FT_NUM))?;
        if c.reformat_en
            || c.decap_en
            || c.sw_owner
            || c.termination_table
            || c.table_miss_action != 0
            || c.table_miss_id != 0
            || c.lag_master_next_table_id != 0
            || c.level > MAX_FT_LEVEL
            || c.log_size > LOG_MAX_FT_SIZE
        {
            return Err(unsupported());
        }
        let id = dev.eth.number();
        let table = FlowTable { log_size: c.log_size, level: c.level, ..Default::default() };
        dev.eth.fts.insert(id, table);
        ifc::create_flow_table_out::TABLE_ID.set(out, u64::from(id));
        Ok(())
    }

    pub(super) fn destroy_flow_table(&mut self, d: &DestroyFlowTable) -> Res {
        steering_target(d.other_vport, d.vport_number, d.table_type)?;
        let mut dev = self.shared.dev();
        let Some(t) = dev.eth.fts.get(&d.table_id) else { return Err(no_such()) };
        if !t.groups.is_empty() {
            return Err(fail(CmdStatus::ResourceBusy, syn::TABLE_IN_USE));
        }
        // The root may go: when the root table has no successor the kernel destroys it
        // without moving the root first (6.12 `fs_core.c` `update_root_ft_destroy`: no next
        // table, `root_ft = NULL`, no command), so the firmware leaves the type rootless.
        if dev.eth.root == Some(d.table_id) {
            dev.eth.root = None;
        }
        dev.eth.fts.remove(&d.table_id);
        Ok(())
    }

    pub(super) fn create_flow_group(&mut self, d: &CreateFlowGroup, out: &mut [u8]) -> Res {
        steering_target(d.other_vport, d.vport_number, d.table_type)?;
        let mut guard = self.shared.dev();
        let eth = &mut guard.eth;
        let Some(t) = eth.fts.get(&d.table_id) else { return Err(no_such()) };
        if d.group_type != 0 || d.match_definer_id != 0 || d.source_eswitch_owner_vhca_id_valid {
            return Err(unsupported());
        }
        let (start, end) = (d.start_flow_index, d.end_flow_index);
        if start > end
            || u64::from(end) >= 1u64 << t.log_size
            || t.groups.values().any(|g| start <= g.end && g.start <= end)
        {
            return Err(fail(CmdStatus::BadParam, syn::FLOW_INDEX));
        }
        let (criteria, rest) = outer(&d.match_criteria);
        let outer_on = d.match_criteria_enable & 1 << MATCH_CRITERIA_OUTER_HEADERS != 0;
        let others = d.match_criteria_enable & !(1 << MATCH_CRITERIA_OUTER_HEADERS) != 0;
        let sup = supported_outer();
        let beyond = criteria.iter().zip(sup.iter()).any(|(c, s)| c & !s != 0);
        let idle = !outer_on && criteria.iter().any(|b| *b != 0);
        if others || rest || beyond || idle {
            return Err(fail(CmdStatus::BadParam, syn::UNSUPPORTED_MATCH));
        }
        let id = eth.number();
        eth.fts
            .get_mut(&d.table_id)
            .expect("looked up above")
            .groups
            .insert(id, FlowGroup { start, end, criteria });
        ifc::create_flow_group_out::GROUP_ID.set(out, u64::from(id));
        Ok(())
    }

    pub(super) fn destroy_flow_group(&mut self, d: &DestroyFlowGroup) -> Res {
        steering_target(d.other_vport, d.vport_number, d.table_type)?;
        let mut dev = self.shared.dev();
        let Some(t) = dev.eth.fts.get_mut(&d.table_id) else { return Err(no_such()) };
        if !t.groups.contains_key(&d.group_id) {
            return Err(no_such());
        }
        if t.entries.values().any(|e| e.group == d.group_id) {
            return Err(fail(CmdStatus::ResourceBusy, syn::TABLE_IN_USE));
        }
        t.groups.remove(&d.group_id);
        Ok(())
    }

    pub(super) fn set_fte(&mut self, op_mod: u16, d: &SetFte) -> Res {
        steering_target(d.other_vport, d.vport_number, d.table_type)?;
        let c = &d.flow_context;
        let mut guard = self.shared.dev();
        let eth = &mut guard.eth;
        if !eth.fts.contains_key(&d.table_id) {
            return Err(no_such());
        }
        if op_mod != 0 || d.modify_enable_mask != 0 {
            return Err(fail(CmdStatus::BadParam, syn::UNSUPPORTED_ACTION));
        }
        if c.action != FLOW_ACTION_FWD_DEST
            || c.destination_list_size != 1
            || c.extended_destination
            || c.flow_counter_list_size != 0
            || c.packet_reformat_id != 0
            || c.modify_header_id != 0
            || c.push_vlan != 0
        {
            return Err(fail(CmdStatus::BadParam, syn::UNSUPPORTED_ACTION));
        }
        let Some(&word) = d.destination.0.first() else {
            return Err(fail(CmdStatus::BadInputLen, syn::INPUT_TOO_SHORT));
        };
        let entry = word.to_be_bytes();
        let (ty, tirn) =
            (dest::DESTINATION_TYPE.get(&entry) as u8, dest::DESTINATION_ID.get(&entry) as u32);
        if ty != FLOW_DEST_TYPE_TIR {
            return Err(fail(CmdStatus::BadParam, syn::UNSUPPORTED_ACTION));
        }
        if !eth.tirs.contains_key(&tirn) {
            return Err(no_such());
        }
        let t = eth.fts.get_mut(&d.table_id).expect("looked up above");
        let Some(g) = t.groups.get(&c.group_id) else { return Err(no_such()) };
        let idx = d.flow_index;
        if !(g.start..=g.end).contains(&idx) || t.entries.contains_key(&idx) {
            return Err(fail(CmdStatus::BadParam, syn::FLOW_INDEX));
        }
        let (value, rest) = outer(&c.match_value);
        if rest || value.iter().zip(g.criteria.iter()).any(|(v, m)| v & !m != 0) {
            return Err(fail(CmdStatus::BadParam, syn::VALUE_OUTSIDE_CRITERIA));
        }
        t.entries.insert(idx, Fte { group: c.group_id, value, tirn });
        Ok(())
    }

    pub(super) fn delete_fte(&mut self, d: &DeleteFte) -> Res {
        steering_target(d.other_vport, d.vport_number, d.table_type)?;
        let mut dev = self.shared.dev();
        let Some(t) = dev.eth.fts.get_mut(&d.table_id) else { return Err(no_such()) };
        t.entries.remove(&d.flow_index).map(|_| ()).ok_or_else(no_such)
    }

    pub(super) fn set_flow_table_root(&mut self, op_mod: u16, d: &SetFlowTableRoot) -> Res {
        steering_target(d.other_vport, d.vport_number, d.table_type)?;
        if d.table_of_other_vport
            || d.table_vport_number != 0
            || d.underlay_qpn != 0
            || d.table_eswitch_owner_vhca_id_valid
        {
            return Err(unsupported());
        }
        let mut dev = self.shared.dev();
        match op_mod {
            0 => {
                if !dev.eth.fts.contains_key(&d.table_id) {
                    return Err(no_such());
                }
                dev.eth.root = Some(d.table_id);
            }
            // MLX5_SET_FLOW_TABLE_ROOT_OP_MOD_DISCONNECT (fs_cmd.c): no root.
            1 => dev.eth.root = None,
            _ => return Err(fail(CmdStatus::BadOp, syn::BAD_OP_MOD)),
        }
        Ok(())
    }
}
