//! `fw`: firmware command outputs and event queue entries, through bring-up.
//!
//! A fake firmware behind a BAR in memory answers the command doorbell the way the PRM
//! describes (reads the entry and the input mailboxes through heap DMA, writes the output
//! inline and into the output mailboxes, hands ownership back last), with a sane answer to
//! each command (pages, ISSI, capabilities, EQ numbers, UARs) that the script then perturbs:
//! a command status and syndrome, a delivery status, another token, bytes of the output
//! overwritten, or no answer at all. Before answering it may write event queue entries of any
//! type and content (page requests included) into the EQs the driver created. The driver
//! side is the real one: [`Hca::bring_up`] (command status, `QUERY_ISSI`, `QUERY_PAGES`,
//! `QUERY_HCA_CAP` and the capability checks, `ALLOC_UAR`, `CREATE_EQ`, page requests
//! serviced while commands wait), then [`Hca::poll_events`] (EQE decode), a device opened
//! over [`FwControl`] (vport context, RoCE address and port MTU queries, CQ and QP creation
//! outputs), and [`Hca::teardown`] (page reclaim).
//!
//! Checked besides "no panic, no hang" (each wait is bounded by a clock that advances on
//! every reading): after a successful teardown, with sane answers from the device's opening
//! on, no DMA block is left allocated.

use std::cell::Cell;
use std::sync::{Arc, Mutex};

use rdma_pmd::BusAddr;
use rdma_pmd_hal::mem::{BarHandler, BarMem, HeapDma, MemBar};
use rdma_pmd_hal::Clock;
use rdma_pmd_mlx5::control::bringup::{bitmap_words, eq, Hca, HcaConfig, PagePool};
use rdma_pmd_mlx5::control::cmd::CmdConfig;
use rdma_pmd_mlx5::control::fw::FwControl;
use rdma_pmd_mlx5::layout::cmd::{Entry, BLOCK_DATA, ENTRY_SIZE, INLINE};
use rdma_pmd_mlx5::layout::ifc::{self, consts, generated::*};
use rdma_pmd_mlx5::{Mlx5, QpConfig, SharedDma};

use crate::dma::TrackDma;
use crate::input::Writer;
use crate::Trace;

/// BAR0: the initialization segment, then UAR pages.
const BAR_SIZE: usize = 0x4000 + 64 * 4096;
/// Pages the driver may lend.
const POOL_PAGES: usize = 64;
/// Pages firmware asks for at boot and at init.
const BOOT_PAGES: u64 = 4;
const INIT_PAGES: u64 = 8;
/// Commands answered per input, so that an input's cost is bounded.
const MAX_COMMANDS: u32 = 400;
/// Bytes of a mailbox block before its `token` byte.
const BLOCK_TOKEN: u64 = 573;
/// Offset of an entry's output mailbox pointer, `outlen`, token and `status_own`.
const ENTRY_OUT: u64 = 32;
const ENTRY_TOKEN: u64 = 60;
const ENTRY_STATUS_OWN: u64 = 63;

/// Bits of a command's control byte (read before each answer).
pub mod ctl {
    /// The low 4 bits all set: no answer (the entry stays firmware's).
    pub const HANG: u8 = 0x0f;
    /// A command status byte and a `u32` syndrome follow.
    pub const STATUS: u8 = 0x10;
    /// A delivery status byte follows.
    pub const DELIVERY: u8 = 0x20;
    /// A token byte follows (written in the entry and every output mailbox).
    pub const TOKEN: u8 = 0x40;
    /// Patches follow: a count byte (mod 8), then per patch a `u16` offset (mod the output
    /// length) and a byte.
    pub const PATCH: u8 = 0x80;
}

/// An event queue the driver created: where, how large, entries written.
#[derive(Clone, Copy)]
struct Ring {
    bus: u64,
    log_size: u8,
    pi: u32,
}

/// The firmware's state.
struct State {
    script: Vec<u8>,
    at: usize,
    rings: Vec<Ring>,
    held: Vec<u64>,
    next_eqn: u64,
    answered: u32,
}

impl State {
    fn byte(&mut self) -> u8 {
        let b = self.script.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }
    fn done(&self) -> bool {
        self.at >= self.script.len()
    }
}

/// The fake firmware.
struct Fw {
    dma: Arc<HeapDma>,
    st: Mutex<State>,
}

impl Fw {
    fn read(&self, bus: u64, len: usize) -> Option<Vec<u8>> {
        let mut v = vec![0u8; len];
        self.dma.read(BusAddr(bus), &mut v).then_some(v)
    }

    /// Events before an answer, once an EQ exists: a byte; bit 0 set, `(b >> 1) % 4 + 1`
    /// entries on EQ `(b >> 3) & 1`, each a type, a sub-type, an owner-bit flip byte and 28
    /// data bytes.
    fn events(&self, st: &mut State) {
        if st.rings.is_empty() {
            return;
        }
        let b = st.byte();
        if b & 1 == 0 {
            return;
        }
        let which = usize::from((b >> 3) & 1) % st.rings.len();
        for _ in 0..(b >> 1) % 4 + 1 {
            let mut e = [0u8; 64];
            e[1] = st.byte();
            e[3] = st.byte();
            let flip = st.byte() & 1;
            for x in &mut e[32..60] {
                *x = st.byte();
            }
            let r = &mut st.rings[which];
            let at = r.bus + u64::from(r.pi & ((1 << r.log_size) - 1)) * 64;
            // The owner bit of the pass (0 on the first), written last.
            e[63] = ((r.pi >> r.log_size) & 1) as u8 ^ flip;
            let _ = eq::decode(&e);
            self.dma.write(BusAddr(at), &e[..63]);
            self.dma.write(BusAddr(at + 63), &e[63..]);
            r.pi = r.pi.wrapping_add(1);
        }
    }

    fn answer(&self, mem: &BarMem, slot: usize) {
        let mut st = self.st.lock().expect("not poisoned");
        st.answered += 1;
        if st.answered > MAX_COMMANDS {
            return;
        }
        let addr = (u64::from(u32::from_be(mem.read_u32(0x10))) << 32)
            | u64::from(u32::from_be(mem.read_u32(0x14)) & 0xffff_f000);
        let ent = addr + (slot as u64) * 64;
        let Some(raw) = self.read(ent, ENTRY_SIZE) else { return };
        let e = Entry::new_checked(&raw[..]).expect("a whole entry");
        let (inlen, outlen, token) = (e.inlen() as usize, e.outlen() as usize, e.token());
        // The input message: inline, then the mailbox chain.
        let mut input = e.inline_in().to_vec();
        let mut ptr = e.in_ptr();
        while input.len() < inlen && ptr != 0 {
            let Some(b) = self.read(ptr, 576) else { return };
            input.extend_from_slice(&b[..BLOCK_DATA]);
            ptr = u64::from_be_bytes(b[560..568].try_into().expect("8 bytes"));
        }
        input.resize(inlen.max(8), 0);
        let mut outb = Vec::new();
        let mut ptr = e.out_ptr();
        while INLINE + outb.len() * BLOCK_DATA < outlen && ptr != 0 {
            let Some(b) = self.read(ptr, 576) else { return };
            outb.push(ptr);
            ptr = u64::from_be_bytes(b[560..568].try_into().expect("8 bytes"));
        }

        self.events(&mut st);
        let mut out = vec![0u8; outlen.max(16)];
        sane(&mut st, &input, &mut out);
        let c = st.byte();
        if c & ctl::HANG == ctl::HANG && !st.done() {
            return;
        }
        if c & ctl::STATUS != 0 {
            out[0] = st.byte();
            let s = st.u32();
            out[4..8].copy_from_slice(&s.to_be_bytes());
        }
        let delivery = if c & ctl::DELIVERY != 0 { st.byte() } else { 0 };
        let tok = if c & ctl::TOKEN != 0 { Some(st.byte()) } else { None };
        if c & ctl::PATCH != 0 {
            for _ in 0..st.byte() % 8 {
                let at = usize::from(st.u16()) % out.len();
                out[at] = st.byte();
            }
        }
        drop(st);
        self.dma.write(BusAddr(ent + ENTRY_OUT), &out[..INLINE]);
        for (i, b) in outb.iter().enumerate() {
            let from = INLINE + i * BLOCK_DATA;
            let to = (from + BLOCK_DATA).min(out.len());
            if from < to {
                self.dma.write(BusAddr(*b), &out[from..to]);
            }
        }
        if let Some(t) = tok.filter(|&t| t != token) {
            self.dma.write(BusAddr(ent + ENTRY_TOKEN), &[t]);
            for b in &outb {
                self.dma.write(BusAddr(b + BLOCK_TOKEN), &[t]);
            }
        }
        // Ownership returns last.
        self.dma.write(BusAddr(ent + ENTRY_STATUS_OWN), &[delivery << 1]);
    }
}

/// What a working firmware answers (`out` zeroed, status OK).
fn sane(st: &mut State, input: &[u8], out: &mut [u8]) {
    let opcode = ifc::get(input, enable_hca_in::OPCODE) as u16;
    let op_mod = ifc::get(input, enable_hca_in::OP_MOD) as u16;
    let out_bits = out.len() * 8;
    let fits = |f: ifc::Field| (f.bit + f.width) as usize <= out_bits;
    match opcode {
        consts::CMD_OP_QUERY_ISSI if fits(query_issi_out::SUPPORTED_ISSI_DW0) => {
            ifc::set(out, query_issi_out::SUPPORTED_ISSI_DW0, 0b11)
        }
        consts::CMD_OP_QUERY_PAGES if fits(query_pages_out::NUM_PAGES) => {
            let n = if op_mod == consts::QUERY_PAGES_IN_OP_MOD_BOOT_PAGES {
                BOOT_PAGES
            } else if op_mod == consts::QUERY_PAGES_IN_OP_MOD_INIT_PAGES {
                INIT_PAGES
            } else {
                0
            };
            ifc::set(out, query_pages_out::NUM_PAGES, n);
        }
        consts::CMD_OP_MANAGE_PAGES => {
            let n = ifc::get(input, manage_pages_in::INPUT_NUM_ENTRIES) as u32;
            if op_mod == consts::MANAGE_PAGES_IN_OP_MOD_ALLOCATION_SUCCESS {
                for k in 0..n {
                    let f = manage_pages_in::PAS.at(k);
                    if (f.bit + f.width) as usize <= input.len() * 8 {
                        let a = ifc::get(input, f);
                        st.held.push(a);
                    }
                }
            } else if op_mod == consts::MANAGE_PAGES_IN_OP_MOD_HCA_RETURN_PAGES {
                let give = (n as usize).min(st.held.len());
                let back: Vec<u64> = st.held.drain(..give).collect();
                let mut k = 0;
                for a in back {
                    let f = manage_pages_out::PAS.at(k);
                    if !fits(f) {
                        st.held.push(a);
                        continue;
                    }
                    ifc::set(out, f, a);
                    k += 1;
                }
                if fits(manage_pages_out::OUTPUT_NUM_ENTRIES) {
                    ifc::set(out, manage_pages_out::OUTPUT_NUM_ENTRIES, u64::from(k));
                }
            }
        }
        consts::CMD_OP_QUERY_HCA_CAP => {
            let at = query_hca_cap_out::CAPABILITY.byte();
            if out.len() < at + cmd_hca_cap::SIZE {
                return;
            }
            let cap = &mut out[at..];
            match op_mod >> 1 {
                0 => {
                    for (f, v) in [
                        (cmd_hca_cap::LOG_MAX_QP_SZ, 15),
                        (cmd_hca_cap::LOG_MAX_QP, 18),
                        (cmd_hca_cap::LOG_MAX_CQ_SZ, 22),
                        (cmd_hca_cap::LOG_MAX_CQ, 24),
                        (cmd_hca_cap::LOG_MAX_MKEY, 24),
                        (cmd_hca_cap::LOG_MAX_PD, 23),
                        (cmd_hca_cap::LOG_MAX_MSG, 30),
                        (cmd_hca_cap::NUM_PORTS, 1),
                        (cmd_hca_cap::PORT_TYPE, 1),
                        (cmd_hca_cap::ROCE, 1),
                        (cmd_hca_cap::BF, 1),
                        (cmd_hca_cap::LOG_BF_REG_SIZE, 9),
                        (cmd_hca_cap::MAX_WQE_SZ_SQ, 1024),
                    ] {
                        ifc::set(cap, f, v);
                    }
                }
                4 => {
                    ifc::set(cap, roce_cap::SW_R_ROCE_SRC_UDP_PORT, u64::from(op_mod & 1 == 0));
                    ifc::set(cap, roce_cap::ROCE_VERSION, 2);
                    ifc::set(cap, roce_cap::ROCE_ADDRESS_TABLE_SIZE, 16);
                    ifc::set(cap, roce_cap::L3_TYPE, 0b110);
                }
                _ => {}
            }
        }
        consts::CMD_OP_ALLOC_UAR if fits(alloc_uar_out::UAR) => {
            ifc::set(out, alloc_uar_out::UAR, 1)
        }
        consts::CMD_OP_CREATE_EQ if fits(create_eq_out::EQ_NUMBER) => {
            st.next_eqn += 1;
            ifc::set(out, create_eq_out::EQ_NUMBER, st.next_eqn);
            let ctx = create_eq_in::EQ_CONTEXT_ENTRY;
            if (create_eq_in::PAS.bit + 64) as usize <= input.len() * 8 {
                let bus = ifc::get(input, create_eq_in::PAS);
                let log_size = ifc::get(input, eqc::LOG_EQ_SIZE.within(ctx)) as u8;
                st.rings.push(Ring { bus, log_size: log_size.min(12), pi: 0 });
            }
        }
        consts::CMD_OP_ALLOC_PD if fits(alloc_pd_out::PD) => ifc::set(out, alloc_pd_out::PD, 3),
        consts::CMD_OP_CREATE_MKEY if fits(create_mkey_out::MKEY_INDEX) => {
            ifc::set(out, create_mkey_out::MKEY_INDEX, 0x42)
        }
        consts::CMD_OP_CREATE_CQ if fits(create_cq_out::CQN) => {
            ifc::set(out, create_cq_out::CQN, 7)
        }
        consts::CMD_OP_CREATE_QP if fits(create_qp_out::QPN) => {
            ifc::set(out, create_qp_out::QPN, 0x99)
        }
        consts::CMD_OP_QUERY_NIC_VPORT_CONTEXT => {
            let x = query_nic_vport_context_out::NIC_VPORT_CONTEXT;
            let at = nic_vport_context::PERMANENT_ADDRESS.within(x).byte();
            if out.len() >= at + 8 {
                out[at + 2..at + 8].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
            }
        }
        _ => {}
    }
}

impl BarHandler for Fw {
    fn on_write(&self, mem: &BarMem, off: usize, _len: usize) {
        match off {
            // The geometry bits of `cmdq_addr_l_sz` are firmware's.
            0x14 => {
                let v = u32::from_be(mem.read_u32(0x14));
                mem.write_u32(0x14, ((v & 0xffff_f000) | 0x56).to_be());
            }
            0x18 => {
                let mask = u32::from_be(mem.read_u32(0x18));
                for slot in 0..2 {
                    if mask & (1 << slot) != 0 {
                        self.answer(mem, slot);
                    }
                }
            }
            _ => {}
        }
    }
}

thread_local! {
    /// Script bytes the last successful bring-up consumed (for building seeds).
    static BRINGUP_AT: Cell<usize> = const { Cell::new(0) };
}

/// 1 µs per reading: every bounded wait ends after a bounded number of polls.
struct Ticks(Cell<u64>);

impl Clock for Ticks {
    fn now_ns(&self) -> u64 {
        let t = self.0.get() + 1_000;
        self.0.set(t);
        t
    }
}

/// Bring-up, events, a device over the firmware seam, teardown, against firmware driven by
/// `data` (see the module docs).
pub fn run(data: &[u8]) -> Trace {
    let mut t = Trace::new();
    let dma = TrackDma::new();
    let fw = Arc::new(Fw {
        dma: dma.heap.clone(),
        st: Mutex::new(State {
            script: data.to_vec(),
            at: 0,
            rings: Vec::new(),
            held: Vec::new(),
            next_eqn: 4,
            answered: 0,
        }),
    });
    let bar = MemBar::with_handler(BAR_SIZE, fw.clone());
    let m = bar.mem();
    m.write_u32(0x0, 0x001c_0010u32.to_be());
    m.write_u32(0x4, 0x0005_03eau32.to_be());
    m.write_u32(0x14, 0x56u32.to_be());
    let clock = Ticks(Cell::new(0));
    let cfg = HcaConfig {
        cmd: CmdConfig { timeout_ns: 2_000_000, ..CmdConfig::default() },
        fw_init_timeout_ns: 1_000_000,
        reclaim_timeout_ns: 2_000_000,
        async_eq_log_size: 3,
        comp_eq_log_size: 2,
        ..HcaConfig::default()
    };
    let mut bitmap = [0u64; bitmap_words(POOL_PAGES)];
    let pool = PagePool::new(&mut bitmap, POOL_PAGES);
    let up = Hca::bring_up(&bar, &dma, &clock, pool, cfg);
    if let Err(e) = &up {
        if std::env::var_os("FUZZ_DEBUG").is_some() {
            eprintln!("bring-up refused: {e:?}");
        }
        t.insert("bringup-refused");
    }
    if let Ok(mut hca) = up {
        t.insert("bringup-ok");
        BRINGUP_AT.with(|a| a.set(fw.st.lock().expect("not poisoned").at));
        if hca.report().pages_lent > 0 {
            t.insert("pages-lent");
        }
        let _ = (hca.report(), hca.caps().device_caps(), hca.health(), hca.heartbeat());
        for _ in 0..4 {
            // Events between commands, as firmware raises them at any time.
            {
                let mut st = fw.st.lock().expect("not poisoned");
                if st.done() {
                    break;
                }
                fw.events(&mut st);
            }
            if let Ok(e) = hca.poll_events() {
                if e.page_requests > 0 {
                    t.insert("page-request");
                }
                if e.port_changes > 0 {
                    t.insert("port-change");
                }
            }
        }
        if fw.st.lock().expect("not poisoned").done() {
            t.insert("sane-after-bringup");
        }
        {
            let ctl = FwControl::new(&mut hca);
            if let Ok(dev) = Mlx5::open(bar.clone(), SharedDma(&dma), ctl) {
                t.insert("device-open");
                let _ = (dev.mac(), dev.gid(0), dev.port_mtu());
                if let Ok(qp) = dev.create_qp::<16, 16>(&QpConfig::default()) {
                    t.insert("qp-created");
                    drop(qp);
                }
            }
        }
        let _ = hca.poll_events();
        if hca.teardown().is_ok() {
            t.insert("teardown-ok");
        }
    }
    // A teardown that succeeded, with every answer since the device was opened a sane one,
    // leaves firmware nothing: every block is back. (After a refused destroy the driver keeps
    // the object's memory on purpose.)
    if t.contains("teardown-ok") && t.contains("sane-after-bringup") {
        assert_eq!(dma.live_blocks(), 0, "DMA blocks still allocated after a clean teardown");
    }
    drop(bar);
    drop(fw);
    // SAFETY: the firmware and the driver's objects are gone: nobody reaches the blocks.
    unsafe { dma.reclaim() };
    t
}

/// Seed scripts: a clean bring-up (every answer sane, no events); one with a page request
/// and a port change on the async EQ; one where `QUERY_ISSI` fails with `BAD_OP` (pre-ISSI
/// firmware); one where a command comes back with another token.
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();
    out.push(("clean", vec![0u8; 64]));

    // A clean bring-up (as many plain answers as it takes), then two events on the async
    // EQ: a page request for 2 pages, a port change (type 0x09, sub-type 1: port down).
    run(&[0u8; 4096]);
    let clean = BRINGUP_AT.with(Cell::get);
    let mut w = Writer::default();
    w.put(&vec![0u8; clean]);
    w.byte(1 | (1 << 1));
    w.byte(0x0b).byte(0).byte(0).put(&[0, 0, 0, 0, 0, 0, 0, 2]).put(&[0; 20]);
    w.byte(0x09).byte(1).byte(0).put(&[0; 28]);
    w.byte(0);
    out.push(("page-request-port-change", w.bytes.clone()));

    // No EQ yet: one control byte per command.
    let mut w = Writer::default();
    w.byte(0); // ENABLE_HCA
    w.byte(ctl::STATUS).byte(0x02).u32(0x1234); // QUERY_ISSI: BAD_OP
    out.push(("pre-issi", w.bytes.clone()));

    let mut w = Writer::default();
    w.byte(0);
    w.byte(ctl::TOKEN).byte(0x77);
    out.push(("token-mismatch", w.bytes.clone()));
    out
}
