//! Firmware tests. A small hand-written "driver" built only from the PRM layouts (the
//! [`ifc`](crate::fw::ifc), [`cmdq`](crate::fw::cmdq) and [`init_seg`](crate::fw::init_seg)
//! constants, which the `header` tests check against the kernel headers) writes command
//! entries and mailboxes into DMA memory, rings the doorbell through the BAR, and polls the
//! owner bit with a deadline, as a driver would.

mod bringup;
mod clock;
mod datapath;
mod eth;
mod faults;
mod fuzz;
mod header;
mod kernel;
mod mad;
mod mkey;
mod rejections;
mod srq;
mod teardown;
mod umr_qp;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_pmd::BusAddr;
use rdma_pmd_hal::mem::{HeapDma, MemBar};
use rdma_pmd_hal::{Dma, DmaBuf, Mmio};

use crate::fw::cmdq::{entry, mailbox};
use crate::fw::codes::*;
use crate::fw::ifc::{self, Field};
use crate::fw::init_seg as seg;
use crate::fw::{Firmware, FwConfig};
use crate::Model;

/// How long the harness waits for the firmware to hand a slot back.
const WAIT: Duration = Duration::from_secs(5);

/// A command input of `size` bytes with opcode and op_mod set.
fn input(op: Opcode, op_mod: u16, size: usize) -> Vec<u8> {
    let mut b = vec![0u8; size];
    ifc::cmd_in::OPCODE.set(&mut b, u64::from(u16::from(op)));
    ifc::cmd_in::OP_MOD.set(&mut b, u64::from(op_mod));
    b
}

/// Set `f` of the context at `ctx` inside `buf`.
fn set_in(buf: &mut [u8], ctx: Field, f: Field, v: u64) {
    f.at(ctx).set(buf, v);
}

/// Ways to break an entry or its mailboxes.
#[derive(Clone, Copy, Default)]
struct Tweak {
    kind: Option<u8>,
    inlen: Option<u32>,
    bad_token_in_block: Option<usize>,
    bad_number_in_block: Option<usize>,
    misalign_in_ptr: bool,
    misalign_out_ptr: bool,
    no_owner: bool,
}

struct Posted {
    slot: u32,
    outlen: usize,
    out_blocks: Vec<u64>,
}

struct Dev {
    model: Model,
    fw: Firmware,
    bar: MemBar,
    dma: Arc<HeapDma>,
    q: DmaBuf,
    token: u8,
    /// Every DMA block the harness allocated (the crate forbids `unsafe`, so nothing is freed).
    keep: Vec<DmaBuf>,
    /// Pages given to the firmware and not taken back.
    lent: Vec<u64>,
    /// (buffer, doorbell record) of the last queue input built.
    last_queue: (u64, u64),
}

impl Dev {
    /// Post one send WQE the way a driver does: the WQE at `wqe_at`, a barrier, the send
    /// doorbell record at `dbr + 4` set to `count`, a barrier, the WQE's first 8 bytes to the
    /// UAR page's BlueFlame register.
    fn ring_send(&self, wqe_at: u64, wqe: &[u8; 64], dbr: u64, count: u32, uar: u32) {
        assert!(self.dma.write(BusAddr(wqe_at), wqe));
        rdma_pmd_hal::barrier::to_device();
        assert!(self.dma.write(BusAddr(dbr + 4), &count.to_be_bytes()));
        rdma_pmd_hal::barrier::to_device();
        let uar_off = uar as usize * crate::UAR_PAGE;
        self.bar.write_bytes8(uar_off + crate::uar::BF_BASE, wqe[..8].try_into().unwrap());
    }

    /// The CQE at `at`, once the HCA owns it no more (its opcode nibble left 0xf; first pass),
    /// read after the `from_device` barrier.
    fn wait_cqe(&self, at: u64) -> [u8; 64] {
        let end = Instant::now() + WAIT;
        let mut own = [0u8; 1];
        loop {
            assert!(self.dma.read(BusAddr(at + 63), &mut own));
            if own[0] >> 4 != 0xf {
                break;
            }
            assert!(Instant::now() < end, "no CQE at {at:#x}");
            std::thread::sleep(Duration::from_micros(50));
        }
        rdma_pmd_hal::barrier::from_device();
        let mut cqe = [0u8; 64];
        assert!(self.dma.read(BusAddr(at), &mut cqe));
        cqe
    }

    fn new(cfg: FwConfig) -> Dev {
        Dev::on(Model::new(), cfg)
    }

    fn on(model: Model, cfg: FwConfig) -> Dev {
        let fw = Firmware::start(&model, cfg).expect("firmware starts");
        let bar = fw.bar();
        let dma = model.dma();
        let q = dma.alloc(4096, 4096).expect("command queue");
        let base = q.bus().0;
        bar.write_be32(seg::CMDQ_ADDR_H, (base >> 32) as u32);
        bar.write_be32(seg::CMDQ_ADDR_L_SZ, base as u32);
        Dev {
            model,
            fw,
            bar,
            dma,
            q,
            token: 0,
            keep: Vec::new(),
            lent: Vec::new(),
            last_queue: (0, 0),
        }
    }

    fn alloc(&mut self, len: usize, align: usize) -> u64 {
        let b = self.dma.alloc(len, align).expect("DMA memory");
        let bus = b.bus().0;
        self.keep.push(b);
        bus
    }

    /// A chain of `n` mailboxes carrying `data` (512 bytes each), with `token`.
    fn chain(&mut self, data: &[u8], n: usize, token: u8, t: &Tweak) -> Vec<u64> {
        let blocks: Vec<u64> = (0..n).map(|_| self.alloc(mailbox::SIZE, 1024)).collect();
        for (k, at) in blocks.iter().enumerate() {
            let mut b = [0u8; mailbox::SIZE];
            let chunk = data.get(k * mailbox::DATA..).unwrap_or(&[]);
            let m = chunk.len().min(mailbox::DATA);
            b[..m].copy_from_slice(&chunk[..m]);
            let next = blocks.get(k + 1).copied().unwrap_or(0);
            b[mailbox::NEXT..mailbox::NEXT + 8].copy_from_slice(&next.to_be_bytes());
            let num = if t.bad_number_in_block == Some(k) { k as u32 + 7 } else { k as u32 };
            b[mailbox::BLOCK_NUM..mailbox::BLOCK_NUM + 4].copy_from_slice(&num.to_be_bytes());
            b[mailbox::TOKEN] = if t.bad_token_in_block == Some(k) { !token } else { token };
            assert!(self.dma.write(BusAddr(*at), &b));
        }
        blocks
    }

    fn post(&mut self, slot: u32, inp: &[u8], outlen: usize, t: Tweak) -> Posted {
        self.token = self.token.wrapping_add(1).max(1);
        let token = self.token;
        let in_tail = inp.get(entry::INLINE..).unwrap_or(&[]).to_vec();
        let in_blocks = self.chain(&in_tail, in_tail.len().div_ceil(mailbox::DATA), token, &t);
        let n_out = outlen.saturating_sub(entry::INLINE).div_ceil(mailbox::DATA);
        let no_tweak = Tweak::default();
        let out_blocks = self.chain(&[], n_out, token, &no_tweak);
        let mut e = [0u8; entry::SIZE];
        e[entry::TYPE] = t.kind.unwrap_or(PCI_CMD_XPORT);
        let inlen = t.inlen.unwrap_or(inp.len() as u32);
        e[entry::INLEN..entry::INLEN + 4].copy_from_slice(&inlen.to_be_bytes());
        let in_ptr = in_blocks.first().map_or(0, |a| a + if t.misalign_in_ptr { 8 } else { 0 });
        e[entry::IN_PTR..entry::IN_PTR + 8].copy_from_slice(&in_ptr.to_be_bytes());
        let inline = inp.len().min(entry::INLINE);
        e[entry::IN..entry::IN + inline].copy_from_slice(&inp[..inline]);
        let out_ptr = out_blocks.first().map_or(0, |a| a + if t.misalign_out_ptr { 8 } else { 0 });
        e[entry::OUT_PTR..entry::OUT_PTR + 8].copy_from_slice(&out_ptr.to_be_bytes());
        e[entry::OUTLEN..entry::OUTLEN + 4].copy_from_slice(&(outlen as u32).to_be_bytes());
        e[entry::TOKEN] = token;
        let slot_off = slot as usize * entry::SIZE;
        self.q.write_bytes(slot_off, &e[..entry::STATUS_OWN]);
        rdma_pmd_hal::barrier::to_device();
        self.q.write_bytes(
            slot_off + entry::STATUS_OWN,
            &[if t.no_owner { 0 } else { entry::OWNER_HW }],
        );
        // The entry and mailboxes before the doorbell.
        rdma_pmd_hal::barrier::to_device();
        self.bar.write_be32(seg::CMD_DBELL, 1 << slot);
        Posted { slot, outlen, out_blocks }
    }

    /// The slot's `status_own` byte once the owner bit is clear, or None after `within`.
    fn wait(&self, slot: u32, within: Duration) -> Option<u8> {
        let end = Instant::now() + within;
        let at = slot as usize * entry::SIZE + entry::STATUS_OWN;
        loop {
            let mut b = [0u8; 1];
            self.q.read_bytes(at, &mut b);
            if b[0] & entry::OWNER_HW == 0 {
                rdma_pmd_hal::barrier::from_device();
                return Some(b[0]);
            }
            if Instant::now() >= end {
                return None;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    fn output(&self, p: &Posted) -> Vec<u8> {
        let mut out = vec![0u8; p.outlen];
        let inline = p.outlen.min(entry::INLINE);
        self.q.read_bytes(p.slot as usize * entry::SIZE + entry::OUT, &mut out[..inline]);
        for (k, at) in p.out_blocks.iter().enumerate() {
            let s = entry::INLINE + k * mailbox::DATA;
            let e = (s + mailbox::DATA).min(p.outlen);
            assert!(self.dma.read(BusAddr(*at), &mut out[s..e]));
        }
        out
    }

    /// Run a command in `slot` with tweaks; the delivery status and the output.
    fn run(&mut self, slot: u32, inp: &[u8], outlen: usize, t: Tweak) -> (DeliveryStatus, Vec<u8>) {
        let p = self.post(slot, inp, outlen, t);
        let own = self.wait(slot, WAIT).expect("the firmware hands the slot back");
        (DeliveryStatus::from(own >> 1), self.output(&p))
    }

    /// Run a command; its status and syndrome (delivery must succeed).
    fn status(&mut self, inp: &[u8], outlen: usize) -> (CmdStatus, u32) {
        let (d, out) = self.run(0, inp, outlen, Tweak::default());
        assert_eq!(d, DeliveryStatus::Ok);
        (
            CmdStatus::from(ifc::cmd_out::STATUS.get(&out) as u8),
            ifc::cmd_out::SYNDROME.get(&out) as u32,
        )
    }

    /// Run a command that must succeed; its output.
    fn ok(&mut self, inp: &[u8], outlen: usize) -> Vec<u8> {
        let (d, out) = self.run(0, inp, outlen, Tweak::default());
        assert_eq!(d, DeliveryStatus::Ok);
        let st = CmdStatus::from(ifc::cmd_out::STATUS.get(&out) as u8);
        let syn = ifc::cmd_out::SYNDROME.get(&out);
        assert_eq!(
            st,
            CmdStatus::Ok,
            "{:?} failed, syndrome {syn:#x}",
            ifc::cmd_in::OPCODE.get(inp)
        );
        out
    }

    fn simple(&mut self, op: Opcode, op_mod: u16) -> Vec<u8> {
        self.ok(&input(op, op_mod, 16), 16)
    }

    fn query_pages(&mut self, stage: PagesStage) -> i32 {
        let out = self.simple(Opcode::QueryPages, stage.into());
        ifc::query_pages_out::NUM_PAGES.get(&out) as u32 as i32
    }

    /// `MANAGE_PAGES` give of `n` fresh pages.
    fn give(&mut self, n: usize) -> Vec<u64> {
        let pages: Vec<u64> = (0..n).map(|_| self.alloc(4096, 4096)).collect();
        let mut inp = input(Opcode::ManagePages, ManagePagesMode::Give.into(), 16 + 8 * n);
        ifc::manage_pages_in::INPUT_NUM_ENTRIES.set(&mut inp, n as u64);
        for (k, p) in pages.iter().enumerate() {
            ifc::manage_pages_in::PAS.index(k as u32).set(&mut inp, *p);
        }
        self.ok(&inp, 16);
        self.lent.extend(&pages);
        pages
    }

    /// `MANAGE_PAGES` take of up to `n` pages; the pages returned.
    fn take(&mut self, n: usize) -> Vec<u64> {
        let mut inp = input(Opcode::ManagePages, ManagePagesMode::Take.into(), 16);
        ifc::manage_pages_in::INPUT_NUM_ENTRIES.set(&mut inp, n as u64);
        let out = self.ok(&inp, 16 + 8 * n);
        let got = ifc::manage_pages_out::OUTPUT_NUM_ENTRIES.get(&out) as usize;
        let pages: Vec<u64> =
            (0..got as u32).map(|k| ifc::manage_pages_out::PAS.index(k).get(&out)).collect();
        self.lent.retain(|p| !pages.contains(p));
        pages
    }

    /// Satisfy a stage's page demand.
    fn satisfy(&mut self, stage: PagesStage) {
        let n = self.query_pages(stage);
        assert!(n >= 0);
        if n > 0 {
            self.give(n as usize);
        }
    }

    fn query_caps(&mut self, ty: CapType, cur: bool) -> Vec<u8> {
        let op_mod = u16::from(ty) << 1 | u16::from(cur);
        let out = self.ok(&input(Opcode::QueryHcaCap, op_mod, 16), ifc::query_hca_cap_out::SIZE);
        out[ifc::query_hca_cap_out::CAPABILITY.byte()..].to_vec()
    }

    /// The kernel's bring-up order (`mlx5_function_setup`, `mlx5_load`) up to `INIT_HCA`,
    /// plus `roce_en`.
    fn up(&mut self) {
        self.simple(Opcode::EnableHca, 0);
        let out = self.ok(&input(Opcode::QueryIssi, 0, 16), ifc::query_issi_out::SIZE);
        assert_eq!(ifc::query_issi_out::SUPPORTED_ISSI_DW0.get(&out) & 2, 2);
        let mut inp = input(Opcode::SetIssi, 0, 16);
        ifc::set_issi_in::CURRENT_ISSI.set(&mut inp, 1);
        self.ok(&inp, 16);
        self.satisfy(PagesStage::Boot);
        let mut reg = input(Opcode::AccessReg, 0, 32);
        ifc::access_register_in::REGISTER_ID.set(&mut reg, u64::from(REG_HOST_ENDIANNESS));
        ifc::register_host_endianness::HE
            .at(ifc::access_register_in::REGISTER_DATA)
            .set(&mut reg, 1);
        self.ok(&reg, 16);
        let mut caps = self.query_caps(CapType::General, true);
        ifc::cmd_hca_cap::LOG_MAX_QP.set(&mut caps, 8);
        let mut set =
            input(Opcode::SetHcaCap, u16::from(CapType::General) << 1, ifc::set_hca_cap_in::SIZE);
        set[ifc::set_hca_cap_in::CAPABILITY.byte()..].copy_from_slice(&caps);
        self.ok(&set, 16);
        self.satisfy(PagesStage::Init);
        self.init_hca();
        self.set_roce(true);
    }

    fn init_hca(&mut self) {
        self.ok(&input(Opcode::InitHca, 0, ifc::init_hca_in::SIZE), 16);
    }

    fn set_roce(&mut self, on: bool) {
        use ifc::modify_nic_vport_context_in as m;
        let mut inp = input(Opcode::ModifyNicVportContext, 0, m::SIZE);
        m::FIELD_SELECT_ROCE_EN.set(&mut inp, 1);
        set_in(&mut inp, m::NIC_VPORT_CONTEXT, ifc::nic_vport_context::ROCE_EN, u64::from(on));
        self.ok(&inp, 16);
    }

    fn alloc_uar(&mut self) -> u32 {
        ifc::alloc_uar_out::UAR.get(&self.simple(Opcode::AllocUar, 0)) as u32
    }

    fn alloc_pd(&mut self) -> u32 {
        ifc::alloc_pd_out::PD.get(&self.simple(Opcode::AllocPd, 0)) as u32
    }

    /// A `CREATE_EQ` input for `1 << log_size` EQEs in one buffer, asking for `events`.
    fn eq_input(&mut self, uar: u32, log_size: u8, events: &[EventType]) -> (Vec<u8>, u64) {
        use ifc::create_eq_in as i;
        let bytes = 64usize << log_size;
        let buf = self.alloc(bytes.max(4096), 4096);
        // Every owner bit starts at 1 (kernel eq.c init_eq_buf).
        let init = vec![1u8; bytes];
        assert!(self.dma.write(BusAddr(buf), &init));
        let pages = bytes.div_ceil(4096);
        let mut inp = input(Opcode::CreateEq, 0, i::SIZE + 8 * pages);
        set_in(&mut inp, i::EQ_CONTEXT, ifc::eqc::LOG_EQ_SIZE, u64::from(log_size));
        set_in(&mut inp, i::EQ_CONTEXT, ifc::eqc::UAR_PAGE, u64::from(uar));
        for t in events {
            let bit = u8::from(*t) as u32;
            let w = Field::new(i::EVENT_BITMASK.bit + 64 * (bit / 64), 64);
            let v = w.get(&inp) | 1 << (bit % 64);
            w.set(&mut inp, v);
        }
        for k in 0..pages as u32 {
            i::PAS.index(k).set(&mut inp, buf + 4096 * u64::from(k));
        }
        (inp, buf)
    }

    fn create_eq(&mut self, uar: u32, log_size: u8, events: &[EventType]) -> (u8, u64) {
        let (inp, buf) = self.eq_input(uar, log_size, events);
        let out = self.ok(&inp, 16);
        (ifc::create_eq_out::EQ_NUMBER.get(&out) as u8, buf)
    }

    /// The EQE at index `n` of an EQ whose buffer is at `buf`.
    fn eqe(&self, buf: u64, log_size: u8, n: u32) -> [u8; 64] {
        let mut e = [0u8; 64];
        let at = buf + 64 * u64::from(n & ((1 << log_size) - 1));
        assert!(self.dma.read(BusAddr(at), &mut e));
        e
    }

    /// A `CREATE_CQ` input: `1 << log_size` CQEs.
    fn cq_input(&mut self, uar: u32, eqn: u8, log_size: u8) -> Vec<u8> {
        use ifc::cqc;
        use ifc::create_cq_in as i;
        let bytes = 64usize << log_size;
        let buf = self.alloc(bytes.max(4096), 4096);
        // Every CQE starts invalid: opcode 0xf, owner 1 (rdma-core `mlx5_alloc_cq_buf`).
        for k in 0..1u64 << log_size {
            assert!(self.dma.write(BusAddr(buf + 64 * k + 63), &[0xf1]));
        }
        let dbr = self.alloc(64, 64);
        self.last_queue = (buf, dbr);
        let pages = bytes.div_ceil(4096);
        let mut inp = input(Opcode::CreateCq, 0, i::SIZE + 8 * pages);
        set_in(&mut inp, i::CQ_CONTEXT, cqc::LOG_CQ_SIZE, u64::from(log_size));
        set_in(&mut inp, i::CQ_CONTEXT, cqc::UAR_PAGE, u64::from(uar));
        set_in(&mut inp, i::CQ_CONTEXT, cqc::C_EQN, u64::from(eqn));
        set_in(&mut inp, i::CQ_CONTEXT, cqc::DBR_ADDR, dbr);
        for k in 0..pages as u32 {
            i::PAS.index(k).set(&mut inp, buf + 4096 * u64::from(k));
        }
        inp
    }

    fn create_cq(&mut self, uar: u32, eqn: u8, log_size: u8) -> u32 {
        let inp = self.cq_input(uar, eqn, log_size);
        ifc::create_cq_out::CQN.get(&self.ok(&inp, 16)) as u32
    }

    /// A `CREATE_QP` input for an RC QP: `1 << log_sq` WQEBBs, 16 receive WQEs of 32 bytes.
    fn qp_input(&mut self, pd: u32, cq: u32, uar: u32, log_sq: u8) -> Vec<u8> {
        use ifc::create_qp_in as i;
        use ifc::qpc;
        let bytes = (16usize << 5) + (64usize << log_sq);
        let buf = self.alloc(bytes.next_multiple_of(4096), 4096);
        let dbr = self.alloc(64, 64);
        self.last_queue = (buf, dbr);
        let pages = bytes.div_ceil(4096);
        let mut inp = input(Opcode::CreateQp, 0, i::SIZE + 8 * pages);
        let q = |b: &mut Vec<u8>, f: Field, v: u64| set_in(b, i::QPC, f, v);
        q(&mut inp, qpc::ST, u64::from(QPC_ST_RC));
        q(&mut inp, qpc::PM_STATE, 3);
        q(&mut inp, qpc::PD, u64::from(pd));
        q(&mut inp, qpc::UAR_PAGE, u64::from(uar));
        q(&mut inp, qpc::LOG_SQ_SIZE, u64::from(log_sq));
        q(&mut inp, qpc::LOG_RQ_SIZE, 4);
        q(&mut inp, qpc::LOG_RQ_STRIDE, 5 - 4);
        q(&mut inp, qpc::CQN_SND, u64::from(cq));
        q(&mut inp, qpc::CQN_RCV, u64::from(cq));
        q(&mut inp, qpc::DBR_ADDR, dbr);
        for k in 0..pages as u32 {
            i::PAS.index(k).set(&mut inp, buf + 4096 * u64::from(k));
        }
        inp
    }

    fn create_qp(&mut self, pd: u32, cq: u32, uar: u32) -> u32 {
        let inp = self.qp_input(pd, cq, uar, 6);
        ifc::create_qp_out::QPN.get(&self.ok(&inp, 16)) as u32
    }

    /// A QP transition input.
    fn transition(&self, op: Opcode, qpn: u32) -> Vec<u8> {
        let size = match op {
            Opcode::ToErrQp | Opcode::ToRstQp => 16,
            _ => ifc::rst2init_qp_in::SIZE,
        };
        let mut inp = input(op, 0, size);
        ifc::rst2init_qp_in::QPN.set(&mut inp, u64::from(qpn));
        inp
    }

    /// RST→INIT→RTR→RTS over force-loopback to `remote`.
    fn connect(&mut self, qpn: u32, remote: u32) {
        self.connect_via(qpn, remote, None);
    }

    /// RST→INIT→RTR→RTS to `remote`, over force-loopback or (with `Some((gid, mac))`) a
    /// RoCE v2 path from our GID 0.
    fn connect_via(&mut self, qpn: u32, remote: u32, roce: Option<([u8; 16], [u8; 6])>) {
        use ifc::{ads, qpc};
        let ctx = ifc::rst2init_qp_in::QPC;
        let path = qpc::PRIMARY_ADDRESS_PATH.at(ctx);
        let mut inp = self.transition(Opcode::Rst2InitQp, qpn);
        ads::VHCA_PORT_NUM.at(path).set(&mut inp, 1);
        set_in(&mut inp, ctx, qpc::RWE, 1);
        self.ok(&inp, 16);
        let mut inp = self.transition(Opcode::Init2RtrQp, qpn);
        set_in(&mut inp, ctx, qpc::MTU, 5);
        set_in(&mut inp, ctx, qpc::REMOTE_QPN, u64::from(remote));
        set_in(&mut inp, ctx, qpc::NEXT_RCV_PSN, 0x100);
        match roce {
            None => ads::FL.at(path).set(&mut inp, 1),
            Some((gid, mac)) => {
                ads::GRH.at(path).set(&mut inp, 1);
                ads::HOP_LIMIT.at(path).set(&mut inp, 64);
                ads::SRC_ADDR_INDEX.at(path).set(&mut inp, 0);
                ads::UDP_SPORT.at(path).set(&mut inp, 0xc123);
                ads::RGID_RIP.at(path).slice_mut(&mut inp).copy_from_slice(&gid);
                let mut m = [0u8; 8];
                m[2..].copy_from_slice(&mac);
                let mac = u64::from_be_bytes(m);
                ads::RMAC_47_32.at(path).set(&mut inp, mac >> 32);
                ads::RMAC_31_0.at(path).set(&mut inp, mac & 0xffff_ffff);
            }
        }
        self.ok(&inp, 16);
        let mut inp = self.transition(Opcode::Rtr2RtsQp, qpn);
        set_in(&mut inp, ctx, qpc::NEXT_SEND_PSN, 0x100);
        set_in(&mut inp, ctx, qpc::RETRY_COUNT, 7);
        set_in(&mut inp, ctx, qpc::RNR_RETRY, 7);
        ads::ACK_TIMEOUT.at(path).set(&mut inp, 14);
        self.ok(&inp, 16);
    }

    /// A `CREATE_MKEY` input in MTT mode over a fresh buffer of `len` bytes.
    fn mkey_input(&mut self, pd: u32, len: usize, variant: u8) -> (Vec<u8>, u64) {
        use ifc::create_mkey_in as i;
        use ifc::mkc;
        let buf = self.alloc(len.next_multiple_of(4096), 4096);
        let pages = len.div_ceil(4096);
        let octs = pages.div_ceil(2);
        let mut inp = input(Opcode::CreateMkey, 0, i::SIZE + 16 * octs);
        let m = |b: &mut Vec<u8>, f: Field, v: u64| set_in(b, i::MKEY_CONTEXT, f, v);
        m(&mut inp, mkc::ACCESS_MODE_1_0, u64::from(MKC_ACCESS_MODE_MTT));
        m(&mut inp, mkc::LW, 1);
        m(&mut inp, mkc::LR, 1);
        m(&mut inp, mkc::RW, 1);
        m(&mut inp, mkc::PD, u64::from(pd));
        m(&mut inp, mkc::START_ADDR, 0x7f00_0000_0000);
        m(&mut inp, mkc::LEN, len as u64);
        m(&mut inp, mkc::MKEY_7_0, u64::from(variant));
        m(&mut inp, mkc::LOG_PAGE_SIZE, 12);
        m(&mut inp, mkc::TRANSLATIONS_OCTWORD_SIZE, octs as u64);
        i::TRANSLATIONS_OCTWORD_ACTUAL_SIZE.set(&mut inp, octs as u64);
        let mtt = Field::new(i::KLM_PAS_MTT.bit, 64);
        for k in 0..pages as u32 {
            // Entry flags: read | write present (kernel MLX5_IB_MTT_READ/WRITE).
            mtt.index(k).set(&mut inp, (buf + 4096 * u64::from(k)) | 3);
        }
        (inp, buf)
    }
}

/// A device brought up to `INIT_HCA` with the default configuration.
fn up() -> Dev {
    let mut d = Dev::new(FwConfig::default());
    d.up();
    d
}
