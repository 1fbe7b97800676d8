//! ARP through the model's Ethernet path, driven only through its public surface: a small
//! command driver (command queue entries and mailboxes in DMA memory, the doorbell in BAR0,
//! the layouts from `fw::ifc`, which the crate checks against `mlx5_ifc.h`) brings the
//! function up and creates what mlx5e creates for one channel — transport domain, TIS, SQ,
//! RQ, TIR, a NIC RX root table with one group and entries — then:
//!
//! * the SQ sends an ARP request for 10.0.0.2, which a peer on the same [`Hub`] reads byte
//!   for byte;
//! * the peer answers; the reply, polled from the model's port, is steered by EtherType and
//!   destination MAC into the RQ, whose CQE says `RESP_SEND`, 42 bytes, WQE 0;
//! * a reply for another MAC, and an IPv4 frame, match nothing and are dropped and counted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_pmd::{BusAddr, Mac};
use rdma_pmd_hal::mem::{HeapDma, MemBar};
use rdma_pmd_hal::{Dma, DmaBuf, Mmio};
use rdma_pmd_mlx5_model::fw::cmdq::{entry, mailbox};
use rdma_pmd_mlx5_model::fw::codes::*;
use rdma_pmd_mlx5_model::fw::ifc::{self, Field};
use rdma_pmd_mlx5_model::fw::init_seg as seg;
use rdma_pmd_mlx5_model::fw::{Firmware, FwConfig};
use rdma_pmd_mlx5_model::roce::arp::{ArpOp, ArpPacket};
use rdma_pmd_mlx5_model::roce::ethernet::Frame;
use rdma_pmd_mlx5_model::roce::{Hub, Port};
use rdma_pmd_mlx5_model::{Model, UAR_PAGE};

const OUR_MAC: [u8; 6] = [0x02, 0x4d, 0, 0, 0, 0x0a];
const PEER_MAC: [u8; 6] = [0x02, 0x50, 0, 0, 0, 0x0b];
const VA: u64 = 0x7f00_0000_0000;

/// A driver of the command interface and nothing else.
struct Driver {
    model: Model,
    _fw: Firmware,
    bar: MemBar,
    dma: Arc<HeapDma>,
    q: DmaBuf,
    token: u8,
    keep: Vec<DmaBuf>,
}

impl Driver {
    fn new() -> Driver {
        let model = Model::new();
        let fw = Firmware::start(&model, FwConfig::default()).expect("firmware");
        let bar = fw.bar();
        let dma = model.dma();
        let q = dma.alloc(4096, 4096).expect("command queue");
        bar.write_be32(seg::CMDQ_ADDR_H, (q.bus().0 >> 32) as u32);
        bar.write_be32(seg::CMDQ_ADDR_L_SZ, q.bus().0 as u32);
        Driver { model, _fw: fw, bar, dma, q, token: 0, keep: Vec::new() }
    }

    fn alloc(&mut self, len: usize, align: usize) -> u64 {
        let b = self.dma.alloc(len, align).expect("DMA memory");
        let bus = b.bus().0;
        self.keep.push(b);
        bus
    }

    /// A mailbox chain carrying `data`, `n` blocks.
    fn chain(&mut self, data: &[u8], n: usize) -> Vec<u64> {
        let blocks: Vec<u64> = (0..n).map(|_| self.alloc(mailbox::SIZE, 1024)).collect();
        for (k, at) in blocks.iter().enumerate() {
            let mut b = [0u8; mailbox::SIZE];
            let chunk = data.get(k * mailbox::DATA..).unwrap_or(&[]);
            let m = chunk.len().min(mailbox::DATA);
            b[..m].copy_from_slice(&chunk[..m]);
            let next = blocks.get(k + 1).copied().unwrap_or(0);
            b[mailbox::NEXT..mailbox::NEXT + 8].copy_from_slice(&next.to_be_bytes());
            b[mailbox::BLOCK_NUM..mailbox::BLOCK_NUM + 4]
                .copy_from_slice(&(k as u32).to_be_bytes());
            b[mailbox::TOKEN] = self.token;
            assert!(self.dma.write(BusAddr(*at), &b));
        }
        blocks
    }

    /// Run one command in slot 0: its status, syndrome and output.
    fn run(&mut self, inp: &[u8], outlen: usize) -> (CmdStatus, u32, Vec<u8>) {
        self.token = self.token.wrapping_add(1).max(1);
        let tail = inp.get(entry::INLINE..).unwrap_or(&[]).to_vec();
        let ins = self.chain(&tail, tail.len().div_ceil(mailbox::DATA));
        let outs = self.chain(&[], outlen.saturating_sub(entry::INLINE).div_ceil(mailbox::DATA));
        let mut e = [0u8; entry::SIZE];
        e[entry::TYPE] = PCI_CMD_XPORT;
        e[entry::INLEN..entry::INLEN + 4].copy_from_slice(&(inp.len() as u32).to_be_bytes());
        e[entry::IN_PTR..entry::IN_PTR + 8]
            .copy_from_slice(&ins.first().copied().unwrap_or(0).to_be_bytes());
        let inline = inp.len().min(entry::INLINE);
        e[entry::IN..entry::IN + inline].copy_from_slice(&inp[..inline]);
        e[entry::OUT_PTR..entry::OUT_PTR + 8]
            .copy_from_slice(&outs.first().copied().unwrap_or(0).to_be_bytes());
        e[entry::OUTLEN..entry::OUTLEN + 4].copy_from_slice(&(outlen as u32).to_be_bytes());
        e[entry::TOKEN] = self.token;
        self.q.write_bytes(0, &e[..entry::STATUS_OWN]);
        rdma_pmd_hal::barrier::to_device();
        self.q.write_bytes(entry::STATUS_OWN, &[entry::OWNER_HW]);
        // The entry and its mailboxes before the doorbell.
        rdma_pmd_hal::barrier::to_device();
        self.bar.write_be32(seg::CMD_DBELL, 1);
        let end = Instant::now() + Duration::from_secs(5);
        loop {
            let mut b = [0u8; 1];
            self.q.read_bytes(entry::STATUS_OWN, &mut b);
            if b[0] & entry::OWNER_HW == 0 {
                assert_eq!(b[0] >> 1, 0, "delivery status");
                break;
            }
            assert!(Instant::now() < end, "the firmware hands the slot back");
            std::thread::sleep(Duration::from_micros(50));
        }
        rdma_pmd_hal::barrier::from_device();
        let mut out = vec![0u8; outlen];
        let inline = outlen.min(entry::INLINE);
        self.q.read_bytes(entry::OUT, &mut out[..inline]);
        for (k, at) in outs.iter().enumerate() {
            let s = entry::INLINE + k * mailbox::DATA;
            let e = (s + mailbox::DATA).min(outlen);
            assert!(self.dma.read(BusAddr(*at), &mut out[s..e]));
        }
        let st = CmdStatus::from(ifc::cmd_out::STATUS.get(&out) as u8);
        (st, ifc::cmd_out::SYNDROME.get(&out) as u32, out)
    }

    /// Run a command that must succeed; `f` of its output.
    fn ok(&mut self, inp: &[u8], outlen: usize, f: Field) -> u32 {
        let (st, syn, out) = self.run(inp, outlen);
        assert_eq!(
            st,
            CmdStatus::Ok,
            "opcode {:#x}: syndrome {syn:#x}",
            ifc::cmd_in::OPCODE.get(inp)
        );
        f.get(&out) as u32
    }

    fn give_pages(&mut self, stage: PagesStage) {
        let q = input(Opcode::QueryPages, stage.into(), 16);
        let n = self.ok(&q, 16, ifc::query_pages_out::NUM_PAGES) as usize;
        let mut inp = input(Opcode::ManagePages, ManagePagesMode::Give.into(), 16 + 8 * n);
        ifc::manage_pages_in::INPUT_NUM_ENTRIES.set(&mut inp, n as u64);
        for k in 0..n as u32 {
            let p = self.alloc(4096, 4096);
            ifc::manage_pages_in::PAS.index(k).set(&mut inp, p);
        }
        self.ok(&inp, 16, ifc::cmd_out::STATUS);
    }
}

fn input(op: Opcode, op_mod: u16, size: usize) -> Vec<u8> {
    let mut b = vec![0u8; size];
    ifc::cmd_in::OPCODE.set(&mut b, u64::from(u16::from(op)));
    ifc::cmd_in::OP_MOD.set(&mut b, u64::from(op_mod));
    b
}

fn mac_bits(m: [u8; 6]) -> u64 {
    u64::from_be_bytes([0, 0, m[0], m[1], m[2], m[3], m[4], m[5]])
}

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

/// What one Ethernet channel needs, created as mlx5e creates it.
struct Channel {
    uar: u32,
    key: u32,
    buf: u64,
    cq_buf: u64,
    sqn: u32,
    sq_ring: u64,
    sq_dbr: u64,
    rqn: u32,
    rq_ring: u64,
    rq_dbr: u64,
}

fn bring_up(d: &mut Driver) -> Channel {
    let o = ifc::cmd_out::STATUS;
    d.ok(&input(Opcode::EnableHca, 0, 16), 16, o);
    d.give_pages(PagesStage::Boot);
    d.give_pages(PagesStage::Init);
    d.ok(&input(Opcode::InitHca, 0, ifc::init_hca_in::SIZE), 16, o);
    let uar = d.ok(&input(Opcode::AllocUar, 0, 16), 16, ifc::alloc_uar_out::UAR);
    let pd = d.ok(&input(Opcode::AllocPd, 0, 16), 16, ifc::alloc_pd_out::PD);
    // EQ of 16 entries (owner bits 1), command events only.
    let eq_buf = d.alloc(4096, 4096);
    assert!(d.dma.write(BusAddr(eq_buf), &[1u8; 64 * 16]));
    let mut inp = input(Opcode::CreateEq, 0, ifc::create_eq_in::SIZE + 8);
    ifc::eqc::LOG_EQ_SIZE.at(ifc::create_eq_in::EQ_CONTEXT).set(&mut inp, 4);
    ifc::eqc::UAR_PAGE.at(ifc::create_eq_in::EQ_CONTEXT).set(&mut inp, u64::from(uar));
    ifc::create_eq_in::PAS.set(&mut inp, eq_buf);
    let eqn = d.ok(&inp, 16, ifc::create_eq_out::EQ_NUMBER);
    // An MTT memory key over two pages at VA.
    let buf = d.alloc(8192, 4096);
    let mut inp = input(Opcode::CreateMkey, 0, ifc::create_mkey_in::SIZE);
    let mk = |b: &mut Vec<u8>, f: Field, v: u64| f.at(ifc::create_mkey_in::MKEY_CONTEXT).set(b, v);
    mk(&mut inp, ifc::mkc::ACCESS_MODE_1_0, u64::from(MKC_ACCESS_MODE_MTT));
    mk(&mut inp, ifc::mkc::LW, 1);
    mk(&mut inp, ifc::mkc::LR, 1);
    mk(&mut inp, ifc::mkc::PD, u64::from(pd));
    mk(&mut inp, ifc::mkc::START_ADDR, VA);
    mk(&mut inp, ifc::mkc::LEN, 8192);
    mk(&mut inp, ifc::mkc::MKEY_7_0, 0x42);
    mk(&mut inp, ifc::mkc::LOG_PAGE_SIZE, 12);
    mk(&mut inp, ifc::mkc::TRANSLATIONS_OCTWORD_SIZE, 1);
    ifc::create_mkey_in::TRANSLATIONS_OCTWORD_ACTUAL_SIZE.set(&mut inp, 1);
    inp.extend_from_slice(&(buf | 3).to_be_bytes());
    inp.extend_from_slice(&((buf + 4096) | 3).to_be_bytes());
    let key = d.ok(&inp, 16, ifc::create_mkey_out::MKEY_INDEX) << 8 | 0x42;
    // One CQ for both queues.
    let cq_buf = d.alloc(4096, 4096);
    for k in 0..16u64 {
        assert!(d.dma.write(BusAddr(cq_buf + 64 * k + 63), &[0xf1]));
    }
    let cq_dbr = d.alloc(64, 64);
    let mut inp = input(Opcode::CreateCq, 0, ifc::create_cq_in::SIZE + 8);
    let cc = |b: &mut Vec<u8>, f: Field, v: u64| f.at(ifc::create_cq_in::CQ_CONTEXT).set(b, v);
    cc(&mut inp, ifc::cqc::LOG_CQ_SIZE, 4);
    cc(&mut inp, ifc::cqc::UAR_PAGE, u64::from(uar));
    cc(&mut inp, ifc::cqc::C_EQN, u64::from(eqn));
    cc(&mut inp, ifc::cqc::DBR_ADDR, cq_dbr);
    ifc::create_cq_in::PAS.set(&mut inp, cq_buf);
    let cqn = d.ok(&inp, 16, ifc::create_cq_out::CQN);
    // Transport domain and TIS (`mlx5e_create_tdn`, `mlx5e_create_tis`).
    let td = d.ok(
        &input(Opcode::AllocTransportDomain, 0, 16),
        16,
        ifc::alloc_transport_domain_out::TRANSPORT_DOMAIN,
    );
    let mut inp = input(Opcode::CreateTis, 0, ifc::create_tis_in::SIZE);
    ifc::tisc::TRANSPORT_DOMAIN.at(ifc::create_tis_in::CTX).set(&mut inp, u64::from(td));
    let tisn = d.ok(&inp, 16, ifc::create_tis_out::TISN);
    // SQ of 64 WQEBBs, then RST → RDY (`mlx5e_create_sq`, `mlx5e_modify_sq`).
    let sq_ring = d.alloc(4096, 4096);
    let sq_dbr = d.alloc(64, 64);
    let mut inp = input(Opcode::CreateSq, 0, ifc::create_sq_in::SIZE + 8);
    let ctx = ifc::create_sq_in::CTX;
    let wq = ifc::sqc::WQ.at(ctx);
    for (f, v) in [
        (ifc::sqc::TIS_LST_SZ.at(ctx), 1),
        (ifc::sqc::TIS_NUM_0.at(ctx), u64::from(tisn)),
        (ifc::sqc::CQN.at(ctx), u64::from(cqn)),
        (ifc::wq::WQ_TYPE.at(wq), u64::from(WQ_TYPE_CYCLIC)),
        (ifc::wq::PD.at(wq), u64::from(pd)),
        (ifc::wq::UAR_PAGE.at(wq), u64::from(uar)),
        (ifc::wq::DBR_ADDR.at(wq), sq_dbr),
        (ifc::wq::LOG_WQ_STRIDE.at(wq), 6),
        (ifc::wq::LOG_WQ_SZ.at(wq), 6),
        (ifc::create_sq_in::PAS, sq_ring),
    ] {
        f.set(&mut inp, v);
    }
    let sqn = d.ok(&inp, 16, ifc::create_sq_out::SQN);
    let mut inp = input(Opcode::ModifySq, 0, ifc::modify_sq_in::SIZE);
    ifc::modify_sq_in::SQN.set(&mut inp, u64::from(sqn));
    ifc::modify_sq_in::SQ_STATE.set(&mut inp, u64::from(WQ_STATE_RST));
    ifc::sqc::STATE.at(ifc::modify_sq_in::CTX).set(&mut inp, u64::from(WQ_STATE_RDY));
    d.ok(&inp, 16, o);
    // RQ of 8 WQEs of one data segment (`mlx5e_create_rq`), RST → RDY.
    let rq_ring = d.alloc(4096, 4096);
    let rq_dbr = d.alloc(64, 64);
    let mut inp = input(Opcode::CreateRq, 0, ifc::create_rq_in::SIZE + 8);
    let ctx = ifc::create_rq_in::CTX;
    let wq = ifc::rqc::WQ.at(ctx);
    for (f, v) in [
        (ifc::rqc::VSD.at(ctx), 1),
        (ifc::rqc::CQN.at(ctx), u64::from(cqn)),
        (ifc::wq::WQ_TYPE.at(wq), u64::from(WQ_TYPE_CYCLIC)),
        (ifc::wq::PD.at(wq), u64::from(pd)),
        (ifc::wq::DBR_ADDR.at(wq), rq_dbr),
        (ifc::wq::LOG_WQ_STRIDE.at(wq), 4),
        (ifc::wq::LOG_WQ_SZ.at(wq), 3),
        (ifc::create_rq_in::PAS, rq_ring),
    ] {
        f.set(&mut inp, v);
    }
    let rqn = d.ok(&inp, 16, ifc::create_rq_out::RQN);
    let mut inp = input(Opcode::ModifyRq, 0, ifc::modify_rq_in::SIZE);
    ifc::modify_rq_in::RQN.set(&mut inp, u64::from(rqn));
    ifc::modify_rq_in::RQ_STATE.set(&mut inp, u64::from(WQ_STATE_RST));
    ifc::rqc::STATE.at(ifc::modify_rq_in::CTX).set(&mut inp, u64::from(WQ_STATE_RDY));
    d.ok(&inp, 16, o);
    // Direct TIR, NIC RX root table, a group on EtherType + destination MAC, and entries
    // for ARP to our MAC and to broadcast (mlx5e's L2 table: `mlx5e_add_l2_flow_rule`).
    let mut inp = input(Opcode::CreateTir, 0, ifc::create_tir_in::SIZE);
    ifc::tirc::INLINE_RQN.at(ifc::create_tir_in::CTX).set(&mut inp, u64::from(rqn));
    ifc::tirc::TRANSPORT_DOMAIN.at(ifc::create_tir_in::CTX).set(&mut inp, u64::from(td));
    let tirn = d.ok(&inp, 16, ifc::create_tir_out::TIRN);
    let mut inp = input(Opcode::CreateFlowTable, 0, ifc::create_flow_table_in::SIZE);
    ifc::flow_table_context::LOG_SIZE
        .at(ifc::create_flow_table_in::FLOW_TABLE_CONTEXT)
        .set(&mut inp, 3);
    let ft = d.ok(&inp, 16, ifc::create_flow_table_out::TABLE_ID);
    let mut inp = input(Opcode::CreateFlowGroup, 0, ifc::create_flow_group_in::SIZE);
    use ifc::create_flow_group_in as g;
    use ifc::fte_match_set_lyr_2_4 as m;
    g::TABLE_ID.set(&mut inp, u64::from(ft));
    g::END_FLOW_INDEX.set(&mut inp, 1);
    g::MATCH_CRITERIA_ENABLE.set(&mut inp, 1 << MATCH_CRITERIA_OUTER_HEADERS);
    let outer = ifc::fte_match_param::OUTER_HEADERS.at(g::MATCH_CRITERIA);
    for f in [m::ETHERTYPE, m::DMAC_47_16, m::DMAC_15_0] {
        f.at(outer).set(&mut inp, u64::MAX);
    }
    let fg = d.ok(&inp, 16, ifc::create_flow_group_out::GROUP_ID);
    for (index, dmac) in [(0u32, OUR_MAC), (1, [0xff; 6])] {
        use ifc::set_fte_in as s;
        let mut inp = input(Opcode::SetFlowTableEntry, 0, s::SIZE + 8);
        s::TABLE_ID.set(&mut inp, u64::from(ft));
        s::FLOW_INDEX.set(&mut inp, u64::from(index));
        let fc = s::FLOW_CONTEXT;
        ifc::flow_context::GROUP_ID.at(fc).set(&mut inp, u64::from(fg));
        ifc::flow_context::ACTION.at(fc).set(&mut inp, u64::from(FLOW_ACTION_FWD_DEST));
        ifc::flow_context::DESTINATION_LIST_SIZE.at(fc).set(&mut inp, 1);
        let v = ifc::fte_match_param::OUTER_HEADERS.at(ifc::flow_context::MATCH_VALUE.at(fc));
        m::ETHERTYPE.at(v).set(&mut inp, 0x0806);
        m::DMAC_47_16.at(v).set(&mut inp, mac_bits(dmac) >> 16);
        m::DMAC_15_0.at(v).set(&mut inp, mac_bits(dmac) & 0xffff);
        let dst = Field::new(s::DESTINATION.bit, 64);
        ifc::dest_format_struct::DESTINATION_TYPE
            .at(dst)
            .set(&mut inp, u64::from(FLOW_DEST_TYPE_TIR));
        ifc::dest_format_struct::DESTINATION_ID.at(dst).set(&mut inp, u64::from(tirn));
        d.ok(&inp, 16, o);
    }
    let mut inp = input(Opcode::SetFlowTableRoot, 0, ifc::set_flow_table_root_in::SIZE);
    ifc::set_flow_table_root_in::TABLE_ID.set(&mut inp, u64::from(ft));
    d.ok(&inp, 16, o);
    Channel { uar, key, buf, cq_buf, sqn, sq_ring, sq_dbr, rqn, rq_ring, rq_dbr }
}

fn cqe(d: &Driver, c: &Channel, n: u64) -> [u8; 64] {
    let mut e = [0u8; 64];
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        assert!(d.dma.read(BusAddr(c.cq_buf + 64 * n), &mut e));
        if e[63] >> 4 != 0xf {
            rdma_pmd_hal::barrier::from_device();
            assert!(d.dma.read(BusAddr(c.cq_buf + 64 * n), &mut e));
            return e;
        }
        assert!(Instant::now() < end, "no CQE {n}");
        std::thread::sleep(Duration::from_micros(50));
    }
}

#[test]
fn arp_request_out_and_reply_in_through_an_sq_and_a_steered_rq() {
    let mut d = Driver::new();
    let c = bring_up(&mut d);
    let hub = Hub::new();
    d.model.attach_eth_port(Box::new(hub.port(Mac(OUR_MAC))));
    let mut peer = hub.port(Mac(PEER_MAC));

    // Post one receive buffer (256 bytes at VA + 4096).
    let mut seg = [0u8; 16];
    seg[0..4].copy_from_slice(&256u32.to_be_bytes());
    seg[4..8].copy_from_slice(&c.key.to_be_bytes());
    seg[8..16].copy_from_slice(&(VA + 4096).to_be_bytes());
    assert!(d.dma.write(BusAddr(c.rq_ring), &seg));
    rdma_pmd_hal::barrier::to_device();
    assert!(d.dma.write(BusAddr(c.rq_dbr), &1u32.to_be_bytes()));

    // The request: 18 bytes inline (MLX5E_MIN_INLINE), 24 by a data segment.
    let req = arp(1, OUR_MAC, [0xff; 6], [10, 0, 0, 1], [10, 0, 0, 2]);
    assert!(d.dma.write(BusAddr(c.buf), &req[18..]));
    let mut wqe = [0u8; 64];
    wqe[0..4].copy_from_slice(&0x0000_000au32.to_be_bytes());
    wqe[4..8].copy_from_slice(&(c.sqn << 8 | 4).to_be_bytes());
    wqe[11] = 0x08;
    wqe[28..30].copy_from_slice(&18u16.to_be_bytes());
    wqe[30..48].copy_from_slice(&req[..18]);
    wqe[48..52].copy_from_slice(&24u32.to_be_bytes());
    wqe[52..56].copy_from_slice(&c.key.to_be_bytes());
    wqe[56..64].copy_from_slice(&VA.to_be_bytes());
    assert!(d.dma.write(BusAddr(c.sq_ring), &wqe));
    rdma_pmd_hal::barrier::to_device();
    assert!(d.dma.write(BusAddr(c.sq_dbr + 4), &1u32.to_be_bytes()));
    rdma_pmd_hal::barrier::to_device();
    d.bar.write_bytes8(c.uar as usize * UAR_PAGE + 0x800, wqe[..8].try_into().unwrap());
    let sent = cqe(&d, &c, 0);
    assert_eq!(sent[63], 0x00, "REQ, owner 0");
    assert_eq!(u32::from_be_bytes(sent[56..60].try_into().unwrap()), 0x0a << 24 | c.sqn);

    // The peer sees the request and answers.
    let got = peer.recv().unwrap().expect("the request reached the peer");
    assert_eq!(got, req);
    // Read back with the crate's own ARP view: a request for 10.0.0.2 from our MAC.
    let frame = Frame::new_checked(&got[..]).unwrap();
    assert_eq!(frame.dst_addr(), Mac([0xff; 6]));
    let a = ArpPacket::new_checked(frame.payload()).unwrap();
    assert_eq!(a.operation(), ArpOp::Request);
    assert_eq!((a.sender_mac(), a.target_ip()), (Mac(OUR_MAC), [10, 0, 0, 2].into()));
    let reply = arp(2, PEER_MAC, OUR_MAC, [10, 0, 0, 2], [10, 0, 0, 1]);
    peer.send(&reply).unwrap();
    let other = arp(2, PEER_MAC, [0x02, 0, 0, 0, 0, 0x99], [10, 0, 0, 2], [10, 0, 0, 3]);
    peer.send(&other).unwrap();
    let mut ip = reply.clone();
    ip[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    peer.send(&ip).unwrap();
    // The model's engine receives them: the reply through the transport's non-RoCE hook to
    // the steered RQ; the frame for another MAC never reaches our port; the IPv4 EtherType
    // over an ARP body is a broken IPv4 header, dropped before steering.

    let rx = cqe(&d, &c, 1);
    assert_eq!(rx[63], 0x20, "RESP_SEND, owner 0");
    assert_eq!(u32::from_be_bytes(rx[44..48].try_into().unwrap()), 42);
    assert_eq!(u16::from_be_bytes([rx[60], rx[61]]), 0);
    assert_eq!(u32::from_be_bytes(rx[56..60].try_into().unwrap()) & 0xff_ffff, c.rqn, "the RQ");
    let mut data = vec![0u8; 42];
    assert!(d.dma.read(BusAddr(c.buf + 4096), &mut data));
    assert_eq!(data, reply);
    let end = Instant::now() + Duration::from_secs(5);
    while d.model.counters().frames_received < 2 {
        assert!(Instant::now() < end, "the model did not receive both frames");
        std::thread::sleep(Duration::from_micros(50));
    }
    let n = d.model.eth_counters();
    assert_eq!((n.frames_sent, n.frames_delivered, n.dropped_no_match), (1, 1, 0));
    assert_eq!(d.model.counters().frames_non_roce, 1, "the IPv4 one is no ARP for steering");
    assert_eq!(hub.stats().unknown_dst, 1, "the reply to another MAC never left the hub");
}
