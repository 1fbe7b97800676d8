//! The Ethernet commands and their execution, driven through the firmware as mlx5e drives
//! them (`en_main.c` `mlx5e_create_sq`/`mlx5e_create_rq`, `en_common.c` `mlx5e_create_tis`,
//! `mlx5e_create_tdn`, `fs_cmd.c` `mlx5_cmd_create_flow_table`/`_create_flow_group`/
//! `_set_fte`/`_update_root_ft`): an ARP request leaves through an SQ onto a hub, an ARP
//! reply steered by EtherType and destination MAC lands in an RQ with its CQE, a frame that
//! matches nothing is dropped and counted, and bad inputs get their statuses.

use super::*;
use crate::eth::{Delivery, WqState};
use crate::fw::codes::syndrome as syn;
use crate::roce::{Hub, Port};
use rdma_pmd::Mac;

const VA: u64 = 0x7f00_0000_0000;
const OUR_MAC: [u8; 6] = [0x02, 0x4d, 0x00, 0x00, 0x00, 0x01];
const PEER_MAC: [u8; 6] = [0x02, 0x50, 0x00, 0x00, 0x00, 0x02];

/// A brought-up device with the objects every Ethernet queue needs.
struct Eth {
    d: Dev,
    uar: u32,
    pd: u32,
    key: u32,
    buf: u64,
    cq: u32,
    cq_buf: u64,
    cq_dbr: u64,
    td: u32,
}

/// An input for `op` of the size the firmware expects.
fn cmd(op: Opcode, size: usize) -> Vec<u8> {
    input(op, 0, size)
}

impl Eth {
    fn new() -> Eth {
        let mut d = up();
        let uar = d.alloc_uar();
        let (eqn, _) = d.create_eq(uar, 4, &[EventType::Cmd]);
        let pd = d.alloc_pd();
        let (inp, buf) = d.mkey_input(pd, 4 * 4096, 0x77);
        let out = d.ok(&inp, 16);
        let key = (ifc::create_mkey_out::MKEY_INDEX.get(&out) as u32) << 8 | 0x77;
        let cq = d.create_cq(uar, eqn, 4);
        let (cq_buf, cq_dbr) = d.last_queue;
        let out = d.ok(&cmd(Opcode::AllocTransportDomain, 16), 16);
        let td = ifc::alloc_transport_domain_out::TRANSPORT_DOMAIN.get(&out) as u32;
        Eth { d, uar, pd, key, buf, cq, cq_buf, cq_dbr, td }
    }

    fn tis_input(&self) -> Vec<u8> {
        let mut inp = cmd(Opcode::CreateTis, ifc::create_tis_in::SIZE);
        set_in(&mut inp, ifc::create_tis_in::CTX, ifc::tisc::TRANSPORT_DOMAIN, u64::from(self.td));
        inp
    }

    fn create_tis(&mut self) -> u32 {
        let inp = self.tis_input();
        ifc::create_tis_out::TISN.get(&self.d.ok(&inp, 16)) as u32
    }

    /// A `CREATE_SQ` input as mlx5e's `mlx5e_create_sq` fills it: `1 << log_size` WQEBBs.
    /// Also returns (ring, doorbell record).
    fn sq_input(&mut self, tisn: u32, log_size: u8) -> (Vec<u8>, u64, u64) {
        use ifc::create_sq_in as i;
        let ring = self.d.alloc(4096, 4096);
        let dbr = self.d.alloc(64, 64);
        let mut inp = cmd(Opcode::CreateSq, i::SIZE + 8);
        let sq = |b: &mut Vec<u8>, f: Field, v: u64| set_in(b, i::CTX, f, v);
        let wq = |b: &mut Vec<u8>, f: Field, v: u64| set_in(b, ifc::sqc::WQ.at(i::CTX), f, v);
        sq(&mut inp, ifc::sqc::FLUSH_IN_ERROR_EN, 1);
        sq(&mut inp, ifc::sqc::TIS_LST_SZ, 1);
        sq(&mut inp, ifc::sqc::TIS_NUM_0, u64::from(tisn));
        sq(&mut inp, ifc::sqc::CQN, u64::from(self.cq));
        wq(&mut inp, ifc::wq::WQ_TYPE, u64::from(WQ_TYPE_CYCLIC));
        wq(&mut inp, ifc::wq::PD, u64::from(self.pd));
        wq(&mut inp, ifc::wq::UAR_PAGE, u64::from(self.uar));
        wq(&mut inp, ifc::wq::DBR_ADDR, dbr);
        wq(&mut inp, ifc::wq::LOG_WQ_STRIDE, 6);
        wq(&mut inp, ifc::wq::LOG_WQ_SZ, u64::from(log_size));
        i::PAS.set(&mut inp, ring);
        (inp, ring, dbr)
    }

    /// `MODIFY_SQ`/`MODIFY_RQ` from `cur` to `next`.
    fn modify(&mut self, op: Opcode, n: u32, cur: u8, next: u8) -> (CmdStatus, u32) {
        use ifc::modify_sq_in as m;
        let mut inp = cmd(op, m::SIZE);
        m::SQ_STATE.set(&mut inp, u64::from(cur));
        m::SQN.set(&mut inp, u64::from(n));
        set_in(&mut inp, m::CTX, ifc::sqc::STATE, u64::from(next));
        self.d.status(&inp, 16)
    }

    /// An SQ in RDY: (sqn, ring, doorbell record).
    fn ready_sq(&mut self) -> (u32, u64, u64) {
        let tisn = self.create_tis();
        let (inp, ring, dbr) = self.sq_input(tisn, 6);
        let sqn = ifc::create_sq_out::SQN.get(&self.d.ok(&inp, 16)) as u32;
        assert_eq!(self.modify(Opcode::ModifySq, sqn, WQ_STATE_RST, WQ_STATE_RDY).0, CmdStatus::Ok);
        (sqn, ring, dbr)
    }

    /// A `CREATE_RQ` input: `1 << log_size` WQEs of one 16-byte data segment.
    fn rq_input(&mut self, log_size: u8) -> (Vec<u8>, u64, u64) {
        use ifc::create_rq_in as i;
        let ring = self.d.alloc(4096, 4096);
        let dbr = self.d.alloc(64, 64);
        let mut inp = cmd(Opcode::CreateRq, i::SIZE + 8);
        let wq = |b: &mut Vec<u8>, f: Field, v: u64| set_in(b, ifc::rqc::WQ.at(i::CTX), f, v);
        set_in(&mut inp, i::CTX, ifc::rqc::VSD, 1);
        set_in(&mut inp, i::CTX, ifc::rqc::CQN, u64::from(self.cq));
        wq(&mut inp, ifc::wq::WQ_TYPE, u64::from(WQ_TYPE_CYCLIC));
        wq(&mut inp, ifc::wq::PD, u64::from(self.pd));
        wq(&mut inp, ifc::wq::DBR_ADDR, dbr);
        wq(&mut inp, ifc::wq::LOG_WQ_STRIDE, 4);
        wq(&mut inp, ifc::wq::LOG_WQ_SZ, u64::from(log_size));
        i::PAS.set(&mut inp, ring);
        (inp, ring, dbr)
    }

    fn ready_rq(&mut self) -> (u32, u64, u64) {
        let (inp, ring, dbr) = self.rq_input(3);
        let rqn = ifc::create_rq_out::RQN.get(&self.d.ok(&inp, 16)) as u32;
        assert_eq!(self.modify(Opcode::ModifyRq, rqn, WQ_STATE_RST, WQ_STATE_RDY).0, CmdStatus::Ok);
        (rqn, ring, dbr)
    }

    fn tir_input(&self, rqn: u32) -> Vec<u8> {
        let mut inp = cmd(Opcode::CreateTir, ifc::create_tir_in::SIZE);
        let c = ifc::create_tir_in::CTX;
        set_in(&mut inp, c, ifc::tirc::INLINE_RQN, u64::from(rqn));
        set_in(&mut inp, c, ifc::tirc::TRANSPORT_DOMAIN, u64::from(self.td));
        inp
    }

    fn create_tir(&mut self, rqn: u32) -> u32 {
        let inp = self.tir_input(rqn);
        ifc::create_tir_out::TIRN.get(&self.d.ok(&inp, 16)) as u32
    }

    fn ft_input(log_size: u8) -> Vec<u8> {
        use ifc::create_flow_table_in as i;
        let mut inp = cmd(Opcode::CreateFlowTable, i::SIZE);
        i::TABLE_TYPE.set(&mut inp, u64::from(FLOW_TABLE_TYPE_NIC_RX));
        set_in(
            &mut inp,
            i::FLOW_TABLE_CONTEXT,
            ifc::flow_table_context::LOG_SIZE,
            u64::from(log_size),
        );
        inp
    }

    fn create_ft(&mut self) -> u32 {
        ifc::create_flow_table_out::TABLE_ID.get(&self.d.ok(&Eth::ft_input(4), 16)) as u32
    }

    /// A flow group of entries `start..=end` matching EtherType and destination MAC.
    fn fg_input(table: u32, start: u32, end: u32) -> Vec<u8> {
        use ifc::create_flow_group_in as i;
        use ifc::fte_match_set_lyr_2_4 as m;
        let mut inp = cmd(Opcode::CreateFlowGroup, i::SIZE);
        i::TABLE_TYPE.set(&mut inp, u64::from(FLOW_TABLE_TYPE_NIC_RX));
        i::TABLE_ID.set(&mut inp, u64::from(table));
        i::START_FLOW_INDEX.set(&mut inp, u64::from(start));
        i::END_FLOW_INDEX.set(&mut inp, u64::from(end));
        i::MATCH_CRITERIA_ENABLE.set(&mut inp, 1 << MATCH_CRITERIA_OUTER_HEADERS);
        let outer = ifc::fte_match_param::OUTER_HEADERS.at(i::MATCH_CRITERIA);
        for f in [m::ETHERTYPE, m::DMAC_47_16, m::DMAC_15_0] {
            f.at(outer).set(&mut inp, u64::MAX);
        }
        inp
    }

    fn create_fg(&mut self, table: u32, start: u32, end: u32) -> u32 {
        let inp = Eth::fg_input(table, start, end);
        ifc::create_flow_group_out::GROUP_ID.get(&self.d.ok(&inp, 16)) as u32
    }

    /// An entry forwarding `ethertype` frames to `dmac` to `tirn`.
    fn fte_input(
        table: u32,
        group: u32,
        index: u32,
        ethertype: u16,
        dmac: [u8; 6],
        tirn: u32,
    ) -> Vec<u8> {
        use ifc::fte_match_set_lyr_2_4 as m;
        use ifc::set_fte_in as i;
        let mut inp = cmd(Opcode::SetFlowTableEntry, i::SIZE + 8);
        i::TABLE_TYPE.set(&mut inp, u64::from(FLOW_TABLE_TYPE_NIC_RX));
        i::TABLE_ID.set(&mut inp, u64::from(table));
        i::FLOW_INDEX.set(&mut inp, u64::from(index));
        let fc = i::FLOW_CONTEXT;
        set_in(&mut inp, fc, ifc::flow_context::GROUP_ID, u64::from(group));
        set_in(&mut inp, fc, ifc::flow_context::ACTION, u64::from(FLOW_ACTION_FWD_DEST));
        set_in(&mut inp, fc, ifc::flow_context::DESTINATION_LIST_SIZE, 1);
        let outer = ifc::fte_match_param::OUTER_HEADERS.at(ifc::flow_context::MATCH_VALUE.at(fc));
        m::ETHERTYPE.at(outer).set(&mut inp, u64::from(ethertype));
        let mac = u64::from_be_bytes([0, 0, dmac[0], dmac[1], dmac[2], dmac[3], dmac[4], dmac[5]]);
        m::DMAC_47_16.at(outer).set(&mut inp, mac >> 16);
        m::DMAC_15_0.at(outer).set(&mut inp, mac & 0xffff);
        let d = Field::new(i::DESTINATION.bit, 64);
        ifc::dest_format_struct::DESTINATION_TYPE
            .at(d)
            .set(&mut inp, u64::from(FLOW_DEST_TYPE_TIR));
        ifc::dest_format_struct::DESTINATION_ID.at(d).set(&mut inp, u64::from(tirn));
        inp
    }

    fn set_root(&mut self, table: u32) {
        use ifc::set_flow_table_root_in as i;
        let mut inp = cmd(Opcode::SetFlowTableRoot, i::SIZE);
        i::TABLE_TYPE.set(&mut inp, u64::from(FLOW_TABLE_TYPE_NIC_RX));
        i::TABLE_ID.set(&mut inp, u64::from(table));
        self.d.ok(&inp, 16);
    }

    /// The steering mlx5e sets up for ARP: root table, one group, one entry to a TIR on a
    /// ready RQ. Returns (rqn, ring, doorbell record, table).
    fn arp_steering(&mut self) -> (u32, u64, u64, u32) {
        let (rqn, ring, dbr) = self.ready_rq();
        let tirn = self.create_tir(rqn);
        let ft = self.create_ft();
        let fg = self.create_fg(ft, 0, 3);
        self.d.ok(&Eth::fte_input(ft, fg, 0, 0x0806, OUR_MAC, tirn), 16);
        self.set_root(ft);
        (rqn, ring, dbr, ft)
    }

    /// The CQE at `n`, once its owner says it was written for lap 0.
    fn cqe(&self, n: u64) -> [u8; 64] {
        let mut cqe = [0u8; 64];
        let end = Instant::now() + WAIT;
        loop {
            assert!(self.d.dma.read(BusAddr(self.cq_buf + 64 * n), &mut cqe));
            if cqe[63] >> 4 != 0xf {
                return cqe;
            }
            assert!(Instant::now() < end, "no CQE");
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// An ARP request for 10.0.0.2 from `OUR_MAC`/10.0.0.1 (RFC 826 layout), 42 bytes.
fn arp(op: u16, src: [u8; 6], dst: [u8; 6], spa: [u8; 4], tpa: [u8; 4]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0x00, 6, 4]);
    f.extend_from_slice(&op.to_be_bytes());
    f.extend_from_slice(&src);
    f.extend_from_slice(&spa);
    f.extend_from_slice(&if op == 1 { [0; 6] } else { dst });
    f.extend_from_slice(&tpa);
    f
}

/// Post one send WQE at `pc` as mlx5e's `mlx5e_sq_xmit_wqe` lays it out: `inline` bytes of
/// the frame in the eth segment, the rest by a data segment from the mkey's buffer, and ring.
fn post_send(e: &mut Eth, sqn: u32, ring: u64, dbr: u64, pc: u16, frame: &[u8], inline: usize) {
    let units = 1 + inline.saturating_sub(2).div_ceil(16);
    let ds = 1 + units + usize::from(frame.len() > inline);
    let mut wqe = vec![0u8; (ds * 16).next_multiple_of(64)];
    wqe[0..4].copy_from_slice(&(u32::from(pc) << 8 | 0x0a).to_be_bytes());
    wqe[4..8].copy_from_slice(&(sqn << 8 | ds as u32).to_be_bytes());
    wqe[11] = 0x08;
    wqe[28..30].copy_from_slice(&(inline as u16).to_be_bytes());
    wqe[30..30 + inline].copy_from_slice(&frame[..inline]);
    if frame.len() > inline {
        let rest = &frame[inline..];
        assert!(e.d.dma.write(BusAddr(e.buf + 512), rest));
        let at = 16 + 16 * units;
        wqe[at..at + 4].copy_from_slice(&(rest.len() as u32).to_be_bytes());
        wqe[at + 4..at + 8].copy_from_slice(&e.key.to_be_bytes());
        wqe[at + 8..at + 16].copy_from_slice(&(VA + 512).to_be_bytes());
    }
    assert!(e.d.dma.write(BusAddr(ring + 64 * u64::from(pc & 63)), &wqe));
    rdma_pmd_hal::barrier::to_device();
    let next = pc + (wqe.len() / 64) as u16;
    assert!(e.d.dma.write(BusAddr(dbr + 4), &u32::from(next).to_be_bytes()));
    rdma_pmd_hal::barrier::to_device();
    let uar_off = e.uar as usize * crate::UAR_PAGE;
    e.d.bar.write_bytes8(uar_off + crate::uar::BF_BASE, wqe[..8].try_into().unwrap());
}

/// Post `n` receive WQEs (one 256-byte buffer each, at `VA + 4096 + 256 k`).
fn post_recv(e: &mut Eth, ring: u64, dbr: u64, n: u16) {
    for k in 0..n {
        let mut seg = [0u8; 16];
        seg[0..4].copy_from_slice(&256u32.to_be_bytes());
        seg[4..8].copy_from_slice(&e.key.to_be_bytes());
        seg[8..16].copy_from_slice(&(VA + 4096 + 256 * u64::from(k)).to_be_bytes());
        assert!(e.d.dma.write(BusAddr(ring + 16 * u64::from(k)), &seg));
    }
    rdma_pmd_hal::barrier::to_device();
    assert!(e.d.dma.write(BusAddr(dbr), &u32::from(n).to_be_bytes()));
}

#[test]
fn ethernet_capabilities_are_advertised() {
    let mut d = up();
    let gen = d.query_caps(CapType::General, true);
    assert_eq!(ifc::cmd_hca_cap::ETH_NET_OFFLOADS.get(&gen), 1);
    assert_eq!(ifc::cmd_hca_cap::NIC_FLOW_TABLE.get(&gen), 1);
    assert!(ifc::cmd_hca_cap::LOG_MAX_SQ.get(&gen) > 0);
    let eth = d.query_caps(CapType::EthernetOffloads, false);
    use ifc::per_protocol_networking_offload_caps as p;
    assert_eq!(p::WQE_INLINE_MODE.get(&eth), u64::from(CAP_INLINE_MODE_L2));
    assert_eq!(p::CSUM_CAP.get(&eth), 0);
    let ft = d.query_caps(CapType::FlowTable, true);
    let rx = ifc::flow_table_nic_cap::FLOW_TABLE_PROPERTIES_NIC_RECEIVE;
    use ifc::flow_table_prop_layout as l;
    assert_eq!(l::FT_SUPPORT.at(rx).get(&ft), 1);
    assert_eq!(l::MODIFY_ROOT.at(rx).get(&ft), 1);
    assert!(l::LOG_MAX_FT_SIZE.at(rx).get(&ft) >= 4);
}

#[test]
fn an_sq_sends_an_arp_request_onto_a_hub() {
    let mut e = Eth::new();
    let hub = Hub::new();
    e.d.model.attach_eth_port(Box::new(hub.port(Mac(OUR_MAC))));
    let mut peer = hub.port(Mac(PEER_MAC));
    let (sqn, ring, dbr) = e.ready_sq();
    assert_eq!(e.d.model.sq_state(sqn), Some(WqState::Rdy));
    let req = arp(1, OUR_MAC, [0xff; 6], [10, 0, 0, 1], [10, 0, 0, 2]);
    post_send(&mut e, sqn, ring, dbr, 0, &req, 18);
    let cqe = e.cqe(0);
    assert_eq!(cqe[63], 0x00, "MLX5_CQE_REQ, owner 0");
    assert_eq!(u32::from_be_bytes(cqe[56..60].try_into().unwrap()), 0x0a << 24 | sqn);
    assert_eq!(u16::from_be_bytes([cqe[60], cqe[61]]), 0, "wqe_counter");
    assert_eq!(peer.recv().unwrap(), Some(req.clone()), "the frame, byte for byte");
    assert_eq!(e.d.model.eth_counters().frames_sent, 1);
    // A second one, all of it inline.
    post_send(&mut e, sqn, ring, dbr, 1, &req, req.len());
    assert_eq!(e.cqe(1)[63], 0x00, "REQ, owner 0");
    assert_eq!(peer.recv().unwrap(), Some(req));
    assert!(e.d.model.eth_faults().is_empty());
}

#[test]
fn a_send_wqe_without_the_l2_header_inline_completes_in_error() {
    let mut e = Eth::new();
    let hub = Hub::new();
    e.d.model.attach_eth_port(Box::new(hub.port(Mac(OUR_MAC))));
    let (sqn, ring, dbr) = e.ready_sq();
    let req = arp(1, OUR_MAC, [0xff; 6], [10, 0, 0, 1], [10, 0, 0, 2]);
    post_send(&mut e, sqn, ring, dbr, 0, &req, 6);
    let cqe = e.cqe(0);
    assert_eq!(cqe[63] >> 4, 0xd, "MLX5_CQE_REQ_ERR");
    assert_eq!(cqe[55], 0x02, "LOCAL_QP_OP_ERR");
    assert_eq!(e.d.model.sq_state(sqn), Some(WqState::Err));
    let f = e.d.model.eth_faults();
    assert_eq!(f[0].fault, crate::eth::Fault::InlineShort { need: 14, got: 6 });
    assert_eq!(hub.stats().sent, 0);
    // Recovery as mlx5e does it: ERR → RST → RDY, the counter back at 0.
    assert_eq!(e.modify(Opcode::ModifySq, sqn, WQ_STATE_ERR, WQ_STATE_RST).0, CmdStatus::Ok);
    assert_eq!(e.modify(Opcode::ModifySq, sqn, WQ_STATE_RST, WQ_STATE_RDY).0, CmdStatus::Ok);
    post_send(&mut e, sqn, ring, dbr, 0, &req, 18);
    assert_eq!(e.cqe(1)[63], 0x00, "then a REQ CQE, owner 0 (lap 0)");
}

#[test]
fn an_rq_receives_a_steered_arp_reply_and_its_cqe() {
    let mut e = Eth::new();
    let (rqn, ring, dbr, _) = e.arp_steering();
    post_recv(&mut e, ring, dbr, 2);
    let reply = arp(2, PEER_MAC, OUR_MAC, [10, 0, 0, 2], [10, 0, 0, 1]);
    let got = e.d.model.receive_frame(&reply);
    assert_eq!(got, Delivery::Received { rqn, wqe_counter: 0, byte_cnt: 42 });
    let cqe = e.cqe(0);
    assert_eq!(cqe[63], 0x20, "MLX5_CQE_RESP_SEND, owner 0");
    assert_eq!(u32::from_be_bytes(cqe[44..48].try_into().unwrap()), 42, "byte_cnt");
    assert_eq!(u16::from_be_bytes([cqe[60], cqe[61]]), 0, "wqe_counter");
    assert_eq!(cqe[29], 0, "no L3, no L4, no VLAN");
    assert_eq!(u32::from_be_bytes(cqe[56..60].try_into().unwrap()) & 0xff_ffff, rqn);
    let mut buf = vec![0u8; 42];
    assert!(e.d.dma.read(BusAddr(e.buf + 4096), &mut buf));
    assert_eq!(buf, reply);
    // The next one takes the next WQE; a third finds none and is dropped.
    assert_eq!(
        e.d.model.receive_frame(&reply),
        Delivery::Received { rqn, wqe_counter: 1, byte_cnt: 42 }
    );
    assert_eq!(e.d.model.receive_frame(&reply), Delivery::NoWqe { rqn });
    let c = e.d.model.eth_counters();
    assert_eq!((c.frames_delivered, c.dropped_no_wqe), (2, 1));
    let _ = e.cq_dbr;
}

#[test]
fn a_frame_matching_no_rule_is_dropped_and_counted() {
    let mut e = Eth::new();
    let (_, ring, dbr, _) = e.arp_steering();
    post_recv(&mut e, ring, dbr, 2);
    // Another destination MAC; an IPv4 EtherType; RoCE v2 is not ours at all.
    let other = arp(2, PEER_MAC, [0x02, 0, 0, 0, 0, 9], [10, 0, 0, 2], [10, 0, 0, 1]);
    assert_eq!(e.d.model.receive_frame(&other), Delivery::NoMatch);
    let mut ip = arp(2, PEER_MAC, OUR_MAC, [10, 0, 0, 2], [10, 0, 0, 1]);
    ip[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    assert_eq!(e.d.model.receive_frame(&ip), Delivery::NoMatch);
    assert_eq!(e.d.model.receive_frame(&[0u8; 10]), Delivery::Runt);
    let c = e.d.model.eth_counters();
    assert_eq!((c.frames_received, c.dropped_no_match, c.dropped_runt), (3, 2, 1));
    assert_eq!(c.frames_delivered, 0);
}

/// The model's engine receives the port's frames: an ARP reply goes through the
/// transport's `non_roce` hook to the steered RQ, with no call from the test.
#[test]
fn an_arp_frame_arriving_at_the_port_reaches_the_steered_rq() {
    let mut e = Eth::new();
    let hub = Hub::new();
    e.d.model.attach_eth_port(Box::new(hub.port(Mac(OUR_MAC))));
    let mut peer = hub.port(Mac(PEER_MAC));
    let (rqn, ring, dbr, _) = e.arp_steering();
    post_recv(&mut e, ring, dbr, 1);
    let reply = arp(2, PEER_MAC, OUR_MAC, [10, 0, 0, 2], [10, 0, 0, 1]);
    peer.send(&reply).unwrap();
    let cqe = e.cqe(0);
    assert_eq!(cqe[63], 0x20, "MLX5_CQE_RESP_SEND, owner 0");
    assert_eq!(u32::from_be_bytes(cqe[56..60].try_into().unwrap()) & 0xff_ffff, rqn);
    let mut buf = vec![0u8; 42];
    assert!(e.d.dma.read(BusAddr(e.buf + 4096), &mut buf));
    assert_eq!(buf, reply);
    // A second finds no WQE: dropped, counted by the Ethernet path and the hook.
    peer.send(&reply).unwrap();
    let end = Instant::now() + WAIT;
    while e.d.model.eth_counters().dropped_no_wqe == 0 {
        assert!(Instant::now() < end, "the second frame was not received");
        std::thread::sleep(Duration::from_micros(50));
    }
    let c = e.d.model.eth_counters();
    assert_eq!((c.frames_received, c.frames_delivered, c.dropped_no_wqe), (2, 1, 1));
    assert_eq!(e.d.model.counters().frames_non_roce, 2);
}

#[test]
fn without_vsd_a_vlan_tag_is_stripped_and_reported_and_a_short_wqe_drops() {
    let mut e = Eth::new();
    let (inp, ring, dbr) = e.rq_input(3);
    let mut inp = inp;
    set_in(&mut inp, ifc::create_rq_in::CTX, ifc::rqc::VSD, 0);
    let rqn = ifc::create_rq_out::RQN.get(&e.d.ok(&inp, 16)) as u32;
    assert_eq!(e.modify(Opcode::ModifyRq, rqn, WQ_STATE_RST, WQ_STATE_RDY).0, CmdStatus::Ok);
    let tirn = e.create_tir(rqn);
    let ft = e.create_ft();
    let fg = e.create_fg(ft, 0, 0);
    e.d.ok(&Eth::fte_input(ft, fg, 0, 0x0806, OUR_MAC, tirn), 16);
    e.set_root(ft);
    post_recv(&mut e, ring, dbr, 1);
    // A tagged ARP reply (VID 7, priority 3): steering sees the EtherType after the tag.
    let plain = arp(2, PEER_MAC, OUR_MAC, [10, 0, 0, 2], [10, 0, 0, 1]);
    let mut tagged = plain[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0x60, 0x07]);
    tagged.extend_from_slice(&plain[12..]);
    let got = e.d.model.receive_frame(&tagged);
    assert_eq!(got, Delivery::Received { rqn, wqe_counter: 0, byte_cnt: 42 });
    let cqe = e.cqe(0);
    assert_eq!(cqe[29], 0x01, "VLAN stripped, no L3/L4");
    assert_eq!(u16::from_be_bytes([cqe[30], cqe[31]]), 0x6007, "vlan_info");
    let mut buf = vec![0u8; 42];
    assert!(e.d.dma.read(BusAddr(e.buf + 4096), &mut buf));
    assert_eq!(buf, plain, "written without its tag");
    // A 300-byte frame does not fit a 256-byte WQE: dropped, the WQE left posted.
    let mut seg = [0u8; 16];
    seg[0..4].copy_from_slice(&256u32.to_be_bytes());
    seg[4..8].copy_from_slice(&e.key.to_be_bytes());
    seg[8..16].copy_from_slice(&(VA + 4096).to_be_bytes());
    assert!(e.d.dma.write(BusAddr(ring + 16), &seg));
    assert!(e.d.dma.write(BusAddr(dbr), &2u32.to_be_bytes()));
    let mut big = plain.clone();
    big.resize(300, 0);
    assert_eq!(e.d.model.receive_frame(&big), Delivery::BadWqe { rqn });
    let f = e.d.model.eth_faults();
    assert_eq!(f[0].fault, crate::eth::Fault::RecvTooSmall { room: 256, len: 300 });
    assert_eq!(
        e.d.model.receive_frame(&plain),
        Delivery::Received { rqn, wqe_counter: 1, byte_cnt: 42 },
        "the WQE the long frame could not use takes the next one"
    );
}

#[test]
fn a_send_wqe_naming_a_bad_lkey_or_another_sq_fails() {
    let mut e = Eth::new();
    let hub = Hub::new();
    e.d.model.attach_eth_port(Box::new(hub.port(Mac(OUR_MAC))));
    let (sqn, ring, dbr) = e.ready_sq();
    let req = arp(1, OUR_MAC, [0xff; 6], [10, 0, 0, 1], [10, 0, 0, 2]);
    let key = e.key;
    e.key = 0xdead_0077;
    post_send(&mut e, sqn, ring, dbr, 0, &req, 18);
    let cqe = e.cqe(0);
    assert_eq!((cqe[63] >> 4, cqe[55]), (0xd, 0x04), "REQ_ERR, LOCAL_PROT_ERR");
    assert_eq!(e.d.model.eth_faults()[0].fault, crate::eth::Fault::Lkey(0xdead_0077));
    e.key = key;
    // Recover, then a WQE whose control segment names another SQ.
    assert_eq!(e.modify(Opcode::ModifySq, sqn, WQ_STATE_ERR, WQ_STATE_RST).0, CmdStatus::Ok);
    assert_eq!(e.modify(Opcode::ModifySq, sqn, WQ_STATE_RST, WQ_STATE_RDY).0, CmdStatus::Ok);
    post_send(&mut e, sqn + 1, ring, dbr, 0, &req, 18);
    // That doorbell named SQ + 1, which does not exist: ignored. Rung for the right SQ,
    // the WQE's control segment still names the other one.
    assert_eq!(e.d.model.eth_counters().send_errors, 1);
    let mut head = [0u8; 8];
    head[0..4].copy_from_slice(&0x0au32.to_be_bytes());
    head[4..8].copy_from_slice(&(sqn << 8 | 4).to_be_bytes());
    e.d.bar.write_bytes8(e.uar as usize * crate::UAR_PAGE + crate::uar::BF_BASE, head);
    let cqe = e.cqe(1);
    assert_eq!((cqe[63] >> 4, cqe[55]), (0xd, 0x02), "REQ_ERR, LOCAL_QP_OP_ERR");
    assert_eq!(e.d.model.eth_faults()[1].fault, crate::eth::Fault::Sqn(sqn + 1));
    assert_eq!(hub.stats().sent, 0);
}

#[test]
fn a_send_wqe_gathering_more_than_a_jumbo_frame_fails_with_local_length() {
    let mut e = Eth::new();
    let (sqn, ring, dbr) = e.ready_sq();
    let mut big = arp(1, OUR_MAC, [0xff; 6], [10, 0, 0, 1], [10, 0, 0, 2]);
    big.resize(crate::eth::send::MAX_FRAME + 1, 0x5a);
    post_send(&mut e, sqn, ring, dbr, 0, &big, 18);
    let cqe = e.cqe(0);
    assert_eq!((cqe[63] >> 4, cqe[55]), (0xd, 0x01), "REQ_ERR, LOCAL_LENGTH_ERR");
    let f = e.d.model.eth_faults()[0].fault;
    assert_eq!(f, crate::eth::Fault::FrameLength(crate::eth::send::MAX_FRAME + 1));
}

/// One command with one field changed: the status and syndrome it gets.
fn with(e: &mut Eth, mut inp: Vec<u8>, f: Field, v: u64) -> (CmdStatus, u32) {
    f.set(&mut inp, v);
    e.d.status(&inp, 16)
}

#[test]
fn bad_sq_rq_and_tir_inputs_are_refused() {
    use ifc::{create_sq_in as s, sqc, wq};
    let mut e = Eth::new();
    let tisn = e.create_tis();
    let bad = (CmdStatus::BadParam, syn::UNSUPPORTED_CONTEXT);
    let none = (CmdStatus::BadResource, syn::NO_SUCH_OBJECT);
    let w = |f: Field| f.at(sqc::WQ.at(s::CTX));
    let (inp, ..) = e.sq_input(tisn, 6);
    assert_eq!(with(&mut e, inp.clone(), sqc::TIS_NUM_0.at(s::CTX), 0x999), none);
    assert_eq!(with(&mut e, inp.clone(), sqc::CQN.at(s::CTX), 0x999), none);
    assert_eq!(with(&mut e, inp.clone(), w(wq::UAR_PAGE), 0x33), none);
    assert_eq!(with(&mut e, inp.clone(), w(wq::PD), 0x999), none);
    assert_eq!(with(&mut e, inp.clone(), sqc::TIS_LST_SZ.at(s::CTX), 2), bad);
    assert_eq!(with(&mut e, inp.clone(), sqc::HAIRPIN.at(s::CTX), 1), bad);
    assert_eq!(with(&mut e, inp.clone(), sqc::MIN_WQE_INLINE_MODE.at(s::CTX), 5), bad);
    assert_eq!(with(&mut e, inp.clone(), w(wq::WQ_TYPE), 0), bad);
    assert_eq!(with(&mut e, inp.clone(), w(wq::LOG_WQ_STRIDE), 5), bad);
    assert_eq!(
        with(&mut e, inp.clone(), w(wq::LOG_WQ_SZ), 20),
        (CmdStatus::BadSize, syn::QUEUE_TOO_BIG)
    );
    assert_eq!(
        with(&mut e, inp.clone(), w(wq::DBR_ADDR), 0x4),
        (CmdStatus::BadParam, syn::BAD_ADDRESS)
    );
    assert_eq!(
        with(&mut e, inp.clone(), sqc::STATE.at(s::CTX), u64::from(WQ_STATE_RDY)),
        (CmdStatus::BadParam, syn::WQ_TRANSITION)
    );
    // The PAS must cover the ring: a 128-WQEBB ring is two pages, the input lists one.
    assert_eq!(
        with(&mut e, inp.clone(), w(wq::LOG_WQ_SZ), 7),
        (CmdStatus::BadInputLen, syn::PAS_TOO_SHORT)
    );
    let sqn = ifc::create_sq_out::SQN.get(&e.d.ok(&inp, 16)) as u32;
    // Transitions: the stated current state must be the real one; RST → ERR is not one.
    let bad_state = (CmdStatus::BadResState, syn::WQ_TRANSITION);
    assert_eq!(e.modify(Opcode::ModifySq, sqn, WQ_STATE_RDY, WQ_STATE_ERR), bad_state);
    assert_eq!(e.modify(Opcode::ModifySq, sqn, WQ_STATE_RST, WQ_STATE_ERR), bad_state);
    assert_eq!(e.modify(Opcode::ModifySq, sqn + 1000, WQ_STATE_RST, WQ_STATE_RDY), none);
    // The TIS and CQ are in use while the SQ lives.
    let mut inp = cmd(Opcode::DestroyTis, 16);
    ifc::destroy_tis_in::TISN.set(&mut inp, u64::from(tisn));
    assert_eq!(e.d.status(&inp, 16), (CmdStatus::ResourceBusy, syn::OBJECT_IN_USE));
    let mut dcq = cmd(Opcode::DestroyCq, 16);
    ifc::destroy_cq_in::CQN.set(&mut dcq, u64::from(e.cq));
    assert_eq!(e.d.status(&dcq, 16), (CmdStatus::ResourceBusy, syn::OBJECT_IN_USE));
    let mut dsq = cmd(Opcode::DestroySq, 16);
    ifc::destroy_sq_in::SQN.set(&mut dsq, u64::from(sqn));
    e.d.ok(&dsq, 16);
    assert_eq!(e.d.status(&dsq, 16), none);
    e.d.ok(&inp, 16);

    // RQ: a counter set the model has none of, memory RQ type, FCS scatter.
    use ifc::{create_rq_in as r, rqc};
    let (rin, ..) = e.rq_input(3);
    assert_eq!(with(&mut e, rin.clone(), rqc::COUNTER_SET_ID.at(r::CTX), 3), none);
    assert_eq!(with(&mut e, rin.clone(), rqc::MEM_RQ_TYPE.at(r::CTX), 1), bad);
    assert_eq!(with(&mut e, rin.clone(), rqc::SCATTER_FCS.at(r::CTX), 1), bad);
    assert_eq!(with(&mut e, rin.clone(), ifc::wq::LOG_WQ_STRIDE.at(rqc::WQ.at(r::CTX)), 12), bad);
    let rqn = ifc::create_rq_out::RQN.get(&e.d.ok(&rin, 16)) as u32;

    // TIR: indirect dispatch, LRO, an RQ or domain that does not exist.
    use ifc::{create_tir_in as t, tirc};
    let tin = e.tir_input(rqn);
    assert_eq!(with(&mut e, tin.clone(), tirc::DISP_TYPE.at(t::CTX), 1), bad);
    assert_eq!(with(&mut e, tin.clone(), tirc::PACKET_MERGE_MASK.at(t::CTX), 1), bad);
    assert_eq!(with(&mut e, tin.clone(), tirc::INLINE_RQN.at(t::CTX), 0x999), none);
    assert_eq!(with(&mut e, tin.clone(), tirc::TRANSPORT_DOMAIN.at(t::CTX), 0x999), none);
    let tirn = ifc::create_tir_out::TIRN.get(&e.d.ok(&tin, 16)) as u32;
    let mut drq = cmd(Opcode::DestroyRq, 16);
    ifc::destroy_rq_in::RQN.set(&mut drq, u64::from(rqn));
    assert_eq!(e.d.status(&drq, 16), (CmdStatus::ResourceBusy, syn::OBJECT_IN_USE));
    let mut dtd = cmd(Opcode::DeallocTransportDomain, 16);
    ifc::dealloc_transport_domain_in::TRANSPORT_DOMAIN.set(&mut dtd, u64::from(e.td));
    assert_eq!(e.d.status(&dtd, 16), (CmdStatus::ResourceBusy, syn::OBJECT_IN_USE));
    let mut dtir = cmd(Opcode::DestroyTir, 16);
    ifc::destroy_tir_in::TIRN.set(&mut dtir, u64::from(tirn));
    e.d.ok(&dtir, 16);
    e.d.ok(&drq, 16);
    e.d.ok(&dtd, 16);
    assert_eq!(e.d.status(&dtd, 16), none);
}

#[test]
fn bad_flow_steering_inputs_are_refused() {
    let mut e = Eth::new();
    let (rqn, ..) = e.ready_rq();
    let tirn = e.create_tir(rqn);
    let bad = (CmdStatus::BadParam, syn::UNSUPPORTED_CONTEXT);
    let none = (CmdStatus::BadResource, syn::NO_SUCH_OBJECT);
    let target = (CmdStatus::BadParam, syn::BAD_VPORT_OR_TABLE_TYPE);
    use ifc::{create_flow_table_in as t, flow_table_context as c};
    let tin = Eth::ft_input(4);
    assert_eq!(with(&mut e, tin.clone(), t::TABLE_TYPE, 1), target, "NIC TX");
    assert_eq!(with(&mut e, tin.clone(), t::VPORT_NUMBER, 1), target);
    assert_eq!(with(&mut e, tin.clone(), c::LEVEL.at(t::FLOW_TABLE_CONTEXT), 64), bad);
    assert_eq!(with(&mut e, tin.clone(), c::LOG_SIZE.at(t::FLOW_TABLE_CONTEXT), 20), bad);
    assert_eq!(with(&mut e, tin.clone(), c::TABLE_MISS_ACTION.at(t::FLOW_TABLE_CONTEXT), 1), bad);
    let ft = e.create_ft();

    use ifc::create_flow_group_in as g;
    let match_bad = (CmdStatus::BadParam, syn::UNSUPPORTED_MATCH);
    let index_bad = (CmdStatus::BadParam, syn::FLOW_INDEX);
    let gin = Eth::fg_input(ft, 0, 3);
    assert_eq!(with(&mut e, gin.clone(), g::TABLE_ID, 0x999), none);
    assert_eq!(with(&mut e, gin.clone(), g::END_FLOW_INDEX, 16), index_bad, "outside 16 entries");
    assert_eq!(with(&mut e, gin.clone(), g::START_FLOW_INDEX, 4), index_bad, "start after end");
    assert_eq!(with(&mut e, gin.clone(), g::MATCH_CRITERIA_ENABLE, 0b11), match_bad, "misc too");
    assert_eq!(with(&mut e, gin.clone(), g::MATCH_CRITERIA_ENABLE, 0), match_bad, "outer unused");
    let outer = ifc::fte_match_param::OUTER_HEADERS.at(g::MATCH_CRITERIA);
    let tcp = ifc::fte_match_set_lyr_2_4::IP_PROTOCOL.at(outer);
    let ttl = Field::new(outer.bit + 0xd8, 8);
    assert_eq!(with(&mut e, gin.clone(), ttl, 0xff), match_bad, "ttl_hoplimit is not matched");
    let misc = Field::new(g::MATCH_CRITERIA.bit + 0x200, 8);
    assert_eq!(with(&mut e, gin.clone(), misc, 0xff), match_bad, "misc_parameters");
    assert_eq!(with(&mut e, gin.clone(), tcp, 0xff).0, CmdStatus::Ok, "ip_protocol is");
    let fg = e.create_fg(ft, 4, 7);
    assert_eq!(
        with(&mut e, Eth::fg_input(ft, 6, 9), g::TABLE_ID, u64::from(ft)),
        index_bad,
        "overlap"
    );

    use ifc::{flow_context as fc, set_fte_in as s};
    let fin = Eth::fte_input(ft, fg, 4, 0x0806, OUR_MAC, tirn);
    let action_bad = (CmdStatus::BadParam, syn::UNSUPPORTED_ACTION);
    assert_eq!(with(&mut e, fin.clone(), s::FLOW_INDEX, 8), index_bad, "outside the group");
    assert_eq!(with(&mut e, fin.clone(), fc::ACTION.at(s::FLOW_CONTEXT), 0x2), action_bad, "drop");
    assert_eq!(
        with(&mut e, fin.clone(), fc::DESTINATION_LIST_SIZE.at(s::FLOW_CONTEXT), 2),
        action_bad
    );
    assert_eq!(with(&mut e, fin.clone(), fc::GROUP_ID.at(s::FLOW_CONTEXT), 0x999), none);
    let dest = Field::new(s::DESTINATION.bit, 64);
    let id = ifc::dest_format_struct::DESTINATION_ID.at(dest);
    let ty = ifc::dest_format_struct::DESTINATION_TYPE.at(dest);
    assert_eq!(with(&mut e, fin.clone(), id, 0x999), none, "no such TIR");
    assert_eq!(with(&mut e, fin.clone(), ty, 1), action_bad, "a flow table destination");
    let mv = ifc::fte_match_param::OUTER_HEADERS.at(fc::MATCH_VALUE.at(s::FLOW_CONTEXT));
    let vid = ifc::fte_match_set_lyr_2_4::FIRST_VID.at(mv);
    assert_eq!(
        with(&mut e, fin.clone(), vid, 5),
        (CmdStatus::BadParam, syn::VALUE_OUTSIDE_CRITERIA),
        "a VLAN the group does not match on"
    );
    let mut op1 = fin.clone();
    ifc::cmd_in::OP_MOD.set(&mut op1, 1);
    assert_eq!(e.d.status(&op1, 16), action_bad, "modify an entry");
    e.d.ok(&fin, 16);
    assert_eq!(e.d.status(&fin, 16), index_bad, "the index is taken");

    // In use: the TIR by the entry, the group by the entry, the table by the group and root.
    let mut dtir = cmd(Opcode::DestroyTir, 16);
    ifc::destroy_tir_in::TIRN.set(&mut dtir, u64::from(tirn));
    assert_eq!(e.d.status(&dtir, 16), (CmdStatus::ResourceBusy, syn::OBJECT_IN_USE));
    let mut dfg = cmd(Opcode::DestroyFlowGroup, ifc::destroy_flow_group_in::SIZE);
    ifc::destroy_flow_group_in::TABLE_ID.set(&mut dfg, u64::from(ft));
    ifc::destroy_flow_group_in::GROUP_ID.set(&mut dfg, u64::from(fg));
    let in_use = (CmdStatus::ResourceBusy, syn::TABLE_IN_USE);
    assert_eq!(e.d.status(&dfg, 16), in_use);
    let mut root = cmd(Opcode::SetFlowTableRoot, ifc::set_flow_table_root_in::SIZE);
    ifc::set_flow_table_root_in::TABLE_ID.set(&mut root, 0x999);
    assert_eq!(e.d.status(&root, 16), none);
    ifc::set_flow_table_root_in::UNDERLAY_QPN.set(&mut root, 5);
    assert_eq!(e.d.status(&root, 16), bad);
    e.set_root(ft);
    let mut dft = cmd(Opcode::DestroyFlowTable, ifc::destroy_flow_table_in::SIZE);
    ifc::destroy_flow_table_in::TABLE_ID.set(&mut dft, u64::from(ft));
    assert_eq!(e.d.status(&dft, 16), in_use);

    // Teardown in the kernel's order: entry, groups, root off, table.
    let mut del = cmd(Opcode::DeleteFlowTableEntry, ifc::delete_fte_in::SIZE);
    ifc::delete_fte_in::TABLE_ID.set(&mut del, u64::from(ft));
    ifc::delete_fte_in::FLOW_INDEX.set(&mut del, 4);
    e.d.ok(&del, 16);
    assert_eq!(e.d.status(&del, 16), none);
    e.d.ok(&dfg, 16);
    let mut off = input(Opcode::SetFlowTableRoot, 1, ifc::set_flow_table_root_in::SIZE);
    ifc::set_flow_table_root_in::TABLE_ID.set(&mut off, u64::from(ft));
    e.d.ok(&off, 16);
    assert_eq!(e.d.status(&dft, 16), in_use, "the ip_protocol group is still there");
    let before = e.d.fw.live_objects();
    assert!(before > 0);
}

/// The flow table capabilities tell one story: NIC RX `ft_support` with a `max_ft_level` of at
/// least the kernel's ANCHOR priority (6.12 `fs_core.c`: `ANCHOR_MIN_LEVEL` 39; priorities
/// above `max_ft_level` are left out of the tree and the anchor table then has no namespace),
/// and CREATE_FLOW_TABLE takes every level up to it: the kernel's anchor table (level 10 in a
/// tree without the chaining priorities: its kernel priority's 3 + 7 levels come first) and
/// the deepest level, but not one beyond.
#[test]
fn flow_table_levels_reach_the_kernels_anchor() {
    let mut e = Eth::new();
    let caps = e.d.query_caps(CapType::FlowTable, true);
    let rx = ifc::flow_table_nic_cap::FLOW_TABLE_PROPERTIES_NIC_RECEIVE;
    use ifc::flow_table_prop_layout as prop;
    assert_eq!(prop::FT_SUPPORT.at(rx).get(&caps), 1);
    let max = prop::MAX_FT_LEVEL.at(rx).get(&caps);
    assert!(max >= 39, "max_ft_level {max} below the kernel's anchor");
    // Without flow_modify_en the kernel leaves its chaining priorities out (FS_CHAINING_CAPS).
    assert_eq!(prop::FLOW_MODIFY_EN.at(rx).get(&caps), 0);
    use ifc::{create_flow_table_in as t, flow_table_context as c};
    let level = c::LEVEL.at(t::FLOW_TABLE_CONTEXT);
    for l in [10, 39, max] {
        let mut tin = Eth::ft_input(0);
        level.set(&mut tin, l);
        e.d.ok(&tin, 16);
    }
    let mut tin = Eth::ft_input(0);
    level.set(&mut tin, max + 1);
    assert_eq!(e.d.status(&tin, 16), (CmdStatus::BadParam, syn::UNSUPPORTED_CONTEXT));
}
