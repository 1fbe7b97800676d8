//! The Ethernet port over the scripted firmware (`testing::fw`): the commands it sends, in
//! order and naming the objects firmware answered, and the data path with the test playing
//! the device (frames written into receive buffers, CQEs into the rings).

use core::cell::Cell;
use std::sync::{Arc, Mutex};
use std::vec::Vec;

use rdma_pmd::{BusAddr, Errno};
use rdma_pmd_hal::mem::{HeapDma, MemBar};

use super::*;
use crate::control::bringup::{bitmap_words, Hca, HcaConfig, PagePool};
use crate::control::cmd::CmdConfig;
use crate::control::eth::CAP_INLINE_MODE_VPORT_CONTEXT;
use crate::control::fw::FwControl;
use crate::device::SharedDma;
use crate::layout::cqe::Cqe;
use crate::layout::ifc::{self, consts, generated::*};
use crate::net::arp::{ArpOp, ArpRepr};
use crate::testing::fw::{default_state, script, FakeFw, State};

const MAC: Mac = Mac([0x02, 0x4d, 0x11, 0x22, 0x33, 0x44]);
const PEER: Mac = Mac([0x02, 0x4d, 0x55, 0x66, 0x77, 0x88]);
const OUR_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const PEER_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);

/// A clock that moves 100 ms each time it is read.
struct Ticks(Cell<u64>);
impl Clock for Ticks {
    fn now_ns(&self) -> u64 {
        let t = self.0.get() + 100_000_000;
        self.0.set(t);
        t
    }
}

struct Rig {
    st: Arc<Mutex<State>>,
    fw: Arc<FakeFw>,
    bar: MemBar,
    dma: Arc<HeapDma>,
    clock: Ticks,
    bits: Vec<u64>,
}

fn rig() -> Rig {
    let st = default_state();
    {
        let mut s = st.lock().unwrap();
        s.vport_mac = MAC.0;
        s.eth_inline_cap = CAP_INLINE_MODE_VPORT_CONTEXT;
        s.vport_min_inline = 1;
    }
    let (fw, bar, dma) = script(st.clone());
    Rig { st, fw, bar, dma, clock: Ticks(Cell::new(0)), bits: vec![0u64; bitmap_words(512)] }
}

type Dev<'h, 'a> = Mlx5<&'a MemBar, SharedDma<Arc<HeapDma>>, FwControl<'h, 'a>>;

fn with_port(r: &mut Rig, f: impl FnOnce(&Dev<'_, '_>, &FakeFw, &HeapDma)) {
    let cfg = HcaConfig {
        cmd: CmdConfig { timeout_ns: 2_000_000, ..CmdConfig::default() },
        ..HcaConfig::default()
    };
    let pool = PagePool::new(&mut r.bits, 512);
    let mut hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, pool, cfg).unwrap();
    let dev = Mlx5::open(&r.bar, SharedDma(r.dma.clone()), FwControl::new(&mut hca)).unwrap();
    f(&dev, &r.fw, &r.dma);
}

fn seen(fw: &FakeFw, opcode: u16) -> Vec<u8> {
    let log = fw.log.lock().unwrap();
    log.iter().rev().find(|s| s.opcode == opcode).expect("command sent").input.clone()
}

fn g(b: &[u8], f: ifc::Field) -> u64 {
    ifc::get(b, f)
}

/// Play the device: write a received frame into receive buffer `slot` and its CQE at
/// consumer index `idx` of the receive CQ.
fn deliver<M: Mmio, D: Dma, C: Control>(
    p: &EthPort<'_, M, D, C>,
    dma: &HeapDma,
    slot: u16,
    idx: u32,
    frame: &[u8],
) {
    let tx_bytes = FRAME_BUF << p.tx.as_ref().unwrap().log_size();
    p.bufs.as_ref().unwrap().write(tx_bytes + slot as usize * FRAME_BUF, frame).unwrap();
    let (ring, _) = p.rx_cq.as_ref().unwrap();
    cqe(dma, ring, idx, 0x2, slot, frame.len() as u32);
}

fn cqe(dma: &HeapDma, ring: &CqRing, idx: u32, opcode: u8, counter: u16, len: u32) {
    let mut b = [0u8; 64];
    let mut c = Cqe::new_unchecked(&mut b[..]);
    c.set_wqe_counter(counter);
    c.set_byte_cnt(len);
    let owner = (idx & ring.size() != 0) as u8;
    c.set_op_own(opcode << 4 | owner);
    let at = ring.bus().add((idx & (ring.size() - 1)) as u64 * 64);
    assert!(dma.write(at, &b));
}

/// The frame the port posted in send slot `slot`, and its WQE.
fn sent<M: Mmio, D: Dma, C: Control>(
    p: &EthPort<'_, M, D, C>,
    dma: &HeapDma,
    slot: usize,
) -> ([u8; 60], [u8; 64]) {
    let mut f = [0u8; 60];
    p.bufs.as_ref().unwrap().read(slot * FRAME_BUF, &mut f).unwrap();
    let mut w = [0u8; 64];
    let (ring, _) = p.tx.as_ref().unwrap().bus();
    assert!(dma.read(BusAddr(ring.0 + slot as u64 * 64), &mut w));
    (f, w)
}

const UP: [u16; 15] = [
    0x754, // QUERY_NIC_VPORT_CONTEXT: the MAC
    0x100, // QUERY_HCA_CAP: Ethernet offloads
    0x754, // QUERY_NIC_VPORT_CONTEXT: min_wqe_inline_mode
    0x802, // ALLOC_UAR
    0x400, // CREATE_CQ (send)
    0x400, // CREATE_CQ (receive)
    0x200, // CREATE_MKEY: the frame buffers
    0x816, 0x912, 0x904, 0x905, 0x908, 0x909, 0x900, 0x930,
];

#[test]
fn the_port_is_built_and_torn_down_as_the_kernel_orders_it() {
    let mut r = rig();
    with_port(&mut r, |dev, fw, dma| {
        fw.log.lock().unwrap().clear();
        let p = dev.eth_port(&EthConfig::default()).unwrap();
        let ops = fw.opcodes();
        assert_eq!(ops[..15], UP);
        assert_eq!(ops[15..], [0x933, 0x936, 0x92f], "group, entry, root");
        assert_eq!(p.mac(), MAC);
        assert_eq!(p.objects().len(), 9);
        // Each command names what firmware answered before it.
        let tis = seen(fw, consts::CMD_OP_CREATE_TIS);
        assert_eq!(g(&tis, tisc::TRANSPORT_DOMAIN.within(create_tis_in::CTX)), 0x21);
        let sq = seen(fw, consts::CMD_OP_CREATE_SQ);
        let sqc_ = |f: ifc::Field| g(&sq, f.within(create_sq_in::CTX));
        assert_eq!(sqc_(sqc::TIS_NUM_0), 0x22);
        assert_eq!(sqc_(sqc::CQN), 7);
        assert_eq!(sqc_(sqc::MIN_WQE_INLINE_MODE), 1, "from the vport context");
        let wq_ = |f: ifc::Field| g(&sq, f.within(sqc::WQ).within(create_sq_in::CTX));
        assert_eq!(wq_(wq::PD), 3);
        assert_eq!(wq_(wq::UAR_PAGE), 1);
        let (ring, dbrec) = p.tx.as_ref().unwrap().bus();
        assert_eq!(wq_(wq::DBR_ADDR), dbrec.0);
        assert_eq!(g(&sq, ifc::Field::new(create_sq_in::SIZE as u32 * 8, 64)), ring.0, "pas[0]");
        assert_eq!(g(&seen(fw, consts::CMD_OP_MODIFY_SQ), modify_sq_in::SQN), 0x23);
        assert_eq!(g(&seen(fw, consts::CMD_OP_MODIFY_RQ), modify_rq_in::RQN), 0x24);
        let tir = seen(fw, consts::CMD_OP_CREATE_TIR);
        assert_eq!(g(&tir, tirc::INLINE_RQN.within(create_tir_in::CTX)), 0x24);
        let fte = seen(fw, consts::CMD_OP_SET_FLOW_TABLE_ENTRY);
        assert_eq!(g(&fte, set_fte_in::TABLE_ID), 0x26);
        let fc = set_fte_in::FLOW_CONTEXT;
        assert_eq!(g(&fte, flow_context::GROUP_ID.within(fc)), 0x27);
        let d = flow_context::DESTINATION.within(fc);
        assert_eq!(g(&fte, dest_format_struct::DESTINATION_ID.within(d)), 0x25);
        let root = seen(fw, consts::CMD_OP_SET_FLOW_TABLE_ROOT);
        assert_eq!(g(&root, set_flow_table_root_in::TABLE_ID), 0x26);
        // The receive ring is handed over whole once the RQ is ready.
        let (_, rq_dbrec) = p.rx.as_ref().unwrap().bus();
        let mut rec = [0u8; 4];
        assert!(dma.read(rq_dbrec, &mut rec));
        assert_eq!(u32::from_be_bytes(rec), 32);

        fw.log.lock().unwrap().clear();
        drop(p);
        assert_eq!(
            fw.opcodes(),
            [
                0x92f, 0x938, 0x934, 0x931, 0x902, 0x90a, 0x906, 0x914, 0x817, 0x202, 0x401, 0x401,
                0x803
            ],
            "reverse order; the key, the CQs and the UAR last"
        );
        let off = seen(fw, consts::CMD_OP_SET_FLOW_TABLE_ROOT);
        assert_eq!(g(&off, set_flow_table_root_in::OP_MOD), 1, "root disconnected");
        let del = seen(fw, consts::CMD_OP_DELETE_FLOW_TABLE_ENTRY);
        assert_eq!(g(&del, delete_fte_in::TABLE_ID), 0x26);
        assert_eq!(g(&seen(fw, consts::CMD_OP_DESTROY_SQ), destroy_sq_in::SQN), 0x23);
        assert!(fw.faults.lock().unwrap().is_empty());
    });
}

#[test]
fn a_failed_step_tears_down_what_was_built() {
    let mut r = rig();
    r.st.lock().unwrap().fail = Some((consts::CMD_OP_CREATE_TIR, 0x03));
    with_port(&mut r, |dev, fw, _| {
        fw.log.lock().unwrap().clear();
        let e = dev.eth_port(&EthConfig::default()).err().unwrap();
        assert!(matches!(e, Error::Firmware(f) if f.opcode == consts::CMD_OP_CREATE_TIR));
        let ops = fw.opcodes();
        let after = &ops[ops.iter().position(|&o| o == 0x900).unwrap() + 1..];
        assert_eq!(after, [0x90a, 0x906, 0x914, 0x817, 0x202, 0x401, 0x401, 0x803]);
    });
}

#[test]
fn requests_for_our_address_are_answered_through_the_rings() {
    let mut r = rig();
    with_port(&mut r, |dev, _, dma| {
        let mut p = dev.eth_port(&EthConfig::default()).unwrap();
        p.add_address(OUR_IP).unwrap();
        let mut req = [0u8; 60];
        ArpRepr::request(PEER, PEER_IP, OUR_IP).emit(&mut req).unwrap();
        deliver(&p, dma, 0, 0, &req);
        assert_eq!(p.poll_eth(0), Ok(1));
        let (f, w) = sent(&p, dma, 0);
        let reply = ArpRepr::parse(&f).unwrap();
        assert_eq!((reply.op, reply.eth_dst, reply.sender_mac), (ArpOp::Reply, PEER, MAC));
        assert_eq!((reply.sender_ip, reply.target_ip), (OUR_IP, PEER_IP));
        // SEND, counter 0, SQ 0x23, four units, the 18-byte L2 head inline.
        assert_eq!(w[0..8], [0, 0, 0, 0x0a, 0, 0, 0x23, 4]);
        assert_eq!(w[28..30], [0, 18]);
        assert_eq!(w[30..48], f[0..18]);
        // The doorbell: the WQE's first 8 bytes at the SQ's UAR page (index 1) + 0x800.
        assert_eq!(dev.mmio().read_u64(4096 + 0x800).to_ne_bytes(), w[0..8]);
        assert_eq!(p.arp().lookup(PEER_IP, 0), Some(PEER), "the requester learned");
        assert_eq!(p.stats().tx_frames, 1);
        // The buffer went back (receive counter 33), and the send completes.
        let (_, rq_dbrec) = p.rx.as_ref().unwrap().bus();
        let mut rec = [0u8; 4];
        assert!(dma.read(rq_dbrec, &mut rec));
        assert_eq!(u32::from_be_bytes(rec), 33);
        cqe(dma, &p.tx_cq.as_ref().unwrap().0, 0, 0x0, 0, 0);
        assert_eq!(p.poll_eth(1), Ok(0));
        assert_eq!(p.tx.as_ref().unwrap().outstanding(), 0);
        // A request for another address: dropped and counted, nothing sent.
        ArpRepr::request(PEER, PEER_IP, Ipv4Addr::new(192, 0, 2, 9)).emit(&mut req).unwrap();
        deliver(&p, dma, 1, 1, &req);
        assert_eq!(p.poll_eth(2), Ok(1));
        assert_eq!(p.arp_stats().not_for_us, 1);
        assert_eq!(p.stats().tx_frames, 1);
        // A frame the device reports too long is a typed fault, not a panic.
        cqe(dma, &p.rx_cq.as_ref().unwrap().0, 2, 0x2, 2, 9000);
        assert!(matches!(p.poll_eth(3), Err(Error::Fault(_))));
    });
}

#[test]
fn resolution_asks_learns_and_gives_up() {
    let mut r = rig();
    with_port(&mut r, |dev, _, dma| {
        let mut p = dev.eth_port(&EthConfig::default()).unwrap();
        assert!(p.poll_resolve(PEER_IP, 0).is_err(), "no address to ask from");
        p.add_address(OUR_IP).unwrap();
        assert_eq!(p.poll_resolve(PEER_IP, 0), Ok(None));
        let (f, _) = sent(&p, dma, 0);
        let ask = ArpRepr::parse(&f).unwrap();
        assert_eq!(ask, ArpRepr::request(MAC, OUR_IP, PEER_IP));
        assert_eq!(p.poll_resolve(PEER_IP, 1), Ok(None), "pending: nothing more sent");
        assert_eq!(p.stats().tx_frames, 1);
        let mut reply = [0u8; 60];
        ask.reply_from(PEER).emit(&mut reply).unwrap();
        deliver(&p, dma, 0, 0, &reply);
        p.poll_eth(2).unwrap();
        assert_eq!(p.poll_resolve(PEER_IP, 3), Ok(Some(PEER)));
        let clock = Ticks(Cell::new(0));
        assert_eq!(p.resolve(PEER_IP, &clock), Ok(PEER));

        // Nobody answers 192.0.2.3: three requests, then EHOSTUNREACH.
        let lost = Ipv4Addr::new(192, 0, 2, 3);
        let e = p.resolve(lost, &clock).unwrap_err();
        assert_eq!(e, Error::Unreachable(core::net::IpAddr::V4(lost)));
        assert_eq!(e.errno(), Errno::EHOSTUNREACH);
        assert_eq!(p.stats().tx_frames, 4);
        assert_eq!(p.arp_stats().unreachable, 1);
        // A static neighbour needs no wire.
        p.set_static(lost, PEER).unwrap();
        assert_eq!(p.resolve(lost, &clock), Ok(PEER));
    });
}

#[test]
fn a_seam_without_the_ethernet_path_says_so() {
    let dma = HeapDma::new();
    let dev = Mlx5::open(
        MemBar::new(0x4000 + 64 * 4096),
        SharedDma(dma.clone()),
        crate::testing::NullControl::with_bf(9),
    )
    .unwrap();
    assert!(matches!(dev.eth_port(&EthConfig::default()), Err(Error::Unsupported(_))));
}
