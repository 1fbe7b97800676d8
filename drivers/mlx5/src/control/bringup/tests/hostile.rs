//! Hostile firmware: bring-up, event servicing and teardown against a firmware that answers
//! at random with absurd replies, driven from a seed.
//!
//! Each case draws a firmware from the seed: init-segment values (command interface revision,
//! queue geometry, `initializing` stuck, a health syndrome), and for every command either a
//! sane answer, one with a field replaced by an absurd value (UAR index, EQ number, page counts
//! and function ids, returned page addresses, capabilities), a garbage or empty output, a
//! random command or delivery status, another token, or no answer at all; and before answering,
//! events of every kind on the EQs (page requests with absurd counts or functions, port changes,
//! command completions for unknown slots, CQ errors and completions, unknown types, entries with
//! the wrong owner bit, floods longer than the ring).
//!
//! Invariants, per case: no panic (an MMIO access outside the BAR panics in [`MemBar`]), no
//! hang (a watchdog bounds each case), every outcome a typed value, and no memory firmware may
//! still own given back (what the firmware model holds — the command queue and mailboxes while
//! the function is enabled or a command hangs, live EQ rings, lent pages — must still be
//! mapped in [`HeapDma`] at the end).
//!
//! The CI run is [`CI_CASES`] cases; `RDMA_PMD_HOSTILE_CASES=100000` runs more and
//! `RDMA_PMD_HOSTILE_SEED` moves the first seed. Run with `--nocapture` for the figures.

use core::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::string::{String, ToString};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use std::vec::Vec;

use rdma_pmd::BusAddr;
use rdma_pmd_hal::mem::{HeapDma, MemBar};
use rdma_pmd_hal::{Clock, Mmio};

use super::super::*;
use crate::control::fw::FwControl;
use crate::control::Control;
use crate::layout::ifc::Field;
use crate::testing::fw::{general_caps, page_request, FakeFw, Reply, Ring, Seen, BAR_SIZE};
use crate::testing::seeded::{self, Rng};

/// Cases in the default (CI) run.
const CI_CASES: u64 = 300;
/// Longest a case may take before the watchdog calls it a hang.
const CASE_BOUND: Duration = Duration::from_secs(10);

/// 1 µs per reading.
struct Ticks(Cell<u64>);
impl Clock for Ticks {
    fn now_ns(&self) -> u64 {
        let t = self.0.get() + 1_000;
        self.0.set(t);
        t
    }
}

/// Capability fields a hostile firmware misreports.
const CAP_FIELDS: &[Field] = &[
    cmd_hca_cap::LOG_UAR_PAGE_SZ,
    cmd_hca_cap::LOG_MAX_QP_SZ,
    cmd_hca_cap::LOG_MAX_CQ_SZ,
    cmd_hca_cap::LOG_BF_REG_SIZE,
    cmd_hca_cap::LOG_MAX_EQ,
    cmd_hca_cap::LOG_MAX_EQ_SZ,
    cmd_hca_cap::LOG_MAX_MSG,
    cmd_hca_cap::LOG_PG_SZ,
    cmd_hca_cap::MAX_WQE_SZ_SQ,
    cmd_hca_cap::PORT_TYPE,
    cmd_hca_cap::ROCE,
    cmd_hca_cap::NUM_PORTS,
];

/// Absurd page counts (as firmware's signed 32-bit `num_pages`).
const PAGE_COUNTS: &[i32] = &[i32::MAX, i32::MIN, -1, 0, 1 << 20, -(1 << 20), 4096, -4096];

/// What the hostile firmware holds and has done: the reply function this suite gives the
/// scripted firmware ([`FakeFw`]) in place of the default script (`testing::fw::State`),
/// because every answer here is drawn from the seed (which fault, which field is absurd, and
/// the sane values themselves), and because it tracks exactly what memory firmware owns (pages
/// lent, live EQ rings, the command queue while enabled), which the invariants check. It
/// shares the script's EQ writer ([`Ring`]) and capability page ([`general_caps`]).
struct Fw {
    rng: Rng,
    /// How hostile this case is: each fault's rate is scaled by it (0: only events).
    level: u64,
    dma: Option<Arc<HeapDma>>,
    /// `ENABLE_HCA` executed, no `DISABLE_HCA` since.
    enabled: bool,
    /// A command was left unanswered.
    hung: bool,
    /// EQs created and not destroyed, oldest first: (eqn, ring); no number for a `CREATE_EQ`
    /// left unanswered (nothing can destroy it).
    eqs: Vec<(Option<u8>, Ring)>,
    /// Pages lent to firmware.
    held: BTreeSet<u64>,
    next_eqn: u8,
    /// `log_uar_page_sz` the driver set.
    uar_page_sz: u64,
    /// Posts into EQ rings that failed because the ring was no longer mapped.
    lost_posts: u64,
}

impl Fw {
    fn post_events(&mut self) {
        let Some(dma) = self.dma.clone() else { return };
        if self.eqs.is_empty() {
            return;
        }
        let flood = self.rng.chance(10);
        let n = if flood { 300 } else { 1 + self.rng.below(3) };
        for _ in 0..n {
            let k = self.rng.below(self.eqs.len() as u64) as usize;
            let mut data = [0u8; 28];
            for b in data.iter_mut() {
                *b = self.rng.next() as u8;
            }
            let (ty, sub) = match self.rng.below(8) {
                0 | 1 => {
                    let func = if self.rng.chance(900) { 0 } else { self.rng.next() as u16 };
                    let count = if self.rng.chance(700) {
                        self.rng.below(17) as i32 - 8
                    } else {
                        self.rng.pick(PAGE_COUNTS)
                    };
                    data[..8].copy_from_slice(&page_request(func, count));
                    (0x0b, 0)
                }
                2 => (0x09, self.rng.next() as u8), // port change
                3 => (0x0a, 0),                     // command completion, any vector
                4 => (0x04, 0),                     // CQ error
                5 => (0x00, 0),                     // completion, any cqn
                6 => (self.rng.next() as u8, self.rng.next() as u8), // anything
                _ => (0x0b, 0),
            };
            let ring = &mut self.eqs[k].1;
            let before = ring.pi;
            if self.rng.chance(50) {
                // The wrong owner bit: the driver must take it for an entry not yet written.
                let owner = (((ring.pi >> ring.log_size) & 1) ^ 1) as u8;
                ring.post_with_owner(&dma, ty, sub, &data, owner);
            } else {
                ring.post(&dma, ty, sub, &data);
            }
            let at = ring.bus + (before & ((1 << ring.log_size) - 1)) as u64 * 64;
            if dma.translate(BusAddr(at), 64).is_none() {
                self.lost_posts += 1;
            }
        }
    }

    fn answer(&mut self, s: &Seen) -> Reply {
        if self.rng.chance(150) {
            self.post_events();
        }
        // Per-mille rates at level 1: hang 1, delivery 2, status 5, token 2, garbage 3, empty 2;
        // a higher level multiplies them, level 0 has none.
        let roll = match self.level {
            0 => u64::MAX,
            l => self.rng.below(1000) / l,
        };
        if roll < 1 {
            // Unanswered: firmware may go on to do it, so what the command handed over is
            // firmware's from now on.
            self.hung = true;
            let i = &s.input;
            if s.opcode == consts::CMD_OP_MANAGE_PAGES
                && s.op_mod == consts::MANAGE_PAGES_IN_OP_MOD_ALLOCATION_SUCCESS
            {
                for k in 0..ifc::get(i, manage_pages_in::INPUT_NUM_ENTRIES) as u32 {
                    self.held.insert(ifc::get(i, manage_pages_in::PAS.at(k)));
                }
            }
            if s.opcode == consts::CMD_OP_CREATE_EQ {
                self.eqs.push((None, ring_of(i)));
            }
            return Reply { hang: true, ..Default::default() };
        }
        if roll < 3 {
            return Reply { delivery: 1 + self.rng.below(0x7f) as u8, ..Default::default() };
        }
        if roll < 8 {
            return Reply::fail(1 + self.rng.below(255) as u8, self.rng.next() as u32);
        }
        // From here firmware executed the command (status 0); what it says may still be absurd.
        let mut r = self.execute(s);
        if roll < 10 {
            r.token = Some(self.rng.next() as u8);
        } else if roll < 13 {
            r.body = (0..s.outlen.saturating_sub(8)).map(|_| self.rng.next() as u8).collect();
            self.effects_of_garbage(s, &r);
        } else if roll < 15 {
            r.body.clear();
            self.effects_of_garbage(s, &r);
        }
        r
    }

    /// A garbage or empty output replaces the sane one: what firmware did follows what it
    /// now says (an EQ under the number it reported).
    fn effects_of_garbage(&mut self, s: &Seen, r: &Reply) {
        if s.opcode == consts::CMD_OP_CREATE_EQ {
            let mut out = vec![0u8; s.outlen.max(16)];
            let n = r.body.len().min(out.len() - 8);
            out[8..8 + n].copy_from_slice(&r.body[..n]);
            if let Some(last) = self.eqs.last_mut() {
                last.0 = Some(ifc::get(&out, create_eq_out::EQ_NUMBER) as u8);
            }
        }
    }

    /// Execute `s` (firmware state changes) and answer it, sanely or with one absurd field.
    fn execute(&mut self, s: &Seen) -> Reply {
        let i = &s.input;
        let absurd = self.rng.chance(10 * self.level);
        let mut out = vec![0u8; s.outlen.max(16)];
        match s.opcode {
            op if op == consts::CMD_OP_ENABLE_HCA => self.enabled = true,
            op if op == consts::CMD_OP_DISABLE_HCA => {
                // A disabled function's memory is no longer firmware's.
                self.enabled = false;
                self.eqs.clear();
                self.held.clear();
            }
            op if op == consts::CMD_OP_QUERY_ISSI => {
                let v = if absurd { self.rng.next() & 0xffff_ffff } else { 0b11 };
                ifc::set(&mut out, query_issi_out::SUPPORTED_ISSI_DW0, v);
            }
            op if op == consts::CMD_OP_QUERY_PAGES => {
                let n = if absurd {
                    self.rng.pick(PAGE_COUNTS) as u32
                } else {
                    self.rng.below(40) as u32
                };
                ifc::set(&mut out, query_pages_out::NUM_PAGES, n.into());
                if self.rng.chance(20) {
                    ifc::set(&mut out, query_pages_out::FUNCTION_ID, self.rng.next() & 0xffff);
                }
            }
            op if op == consts::CMD_OP_MANAGE_PAGES => self.manage_pages(s, absurd, &mut out),
            op if op == consts::CMD_OP_QUERY_HCA_CAP => {
                let cap = &mut out[query_hca_cap_out::CAPABILITY.byte()..];
                if s.op_mod >> 1 == 0 {
                    let mut o = vec![(cmd_hca_cap::LOG_UAR_PAGE_SZ, self.uar_page_sz)];
                    if absurd {
                        let f = self.rng.pick(CAP_FIELDS);
                        o.push((f, self.rng.next() & f.max()));
                    }
                    general_caps(cap, 1, &o);
                } else {
                    ifc::set(cap, roce_cap::SW_R_ROCE_SRC_UDP_PORT, self.rng.below(2));
                }
            }
            op if op == consts::CMD_OP_SET_HCA_CAP && s.op_mod >> 1 == 0 => {
                let cap = &i[set_hca_cap_in::CAPABILITY.byte()..];
                self.uar_page_sz = ifc::get(cap, cmd_hca_cap::LOG_UAR_PAGE_SZ);
            }
            op if op == consts::CMD_OP_ALLOC_UAR => {
                let v = if absurd { self.rng.next() & 0xff_ffff } else { 1 + self.rng.below(66) };
                ifc::set(&mut out, alloc_uar_out::UAR, v);
            }
            op if op == consts::CMD_OP_CREATE_EQ => {
                self.next_eqn = self.next_eqn.wrapping_add(1);
                // Absurd: the number of a live EQ, or any.
                let eqn = if absurd {
                    self.eqs.iter().find_map(|e| e.0).unwrap_or(self.rng.next() as u8)
                } else {
                    self.next_eqn
                };
                self.eqs.push((Some(eqn), ring_of(i)));
                ifc::set(&mut out, create_eq_out::EQ_NUMBER, eqn.into());
            }
            op if op == consts::CMD_OP_DESTROY_EQ => {
                let eqn = ifc::get(i, destroy_eq_in::EQ_NUMBER) as u8;
                // The oldest live EQ of that number (of two with one number, which one firmware
                // destroys cannot be known; the driver keeps the second ring).
                if let Some(k) = self.eqs.iter().position(|e| e.0 == Some(eqn)) {
                    self.eqs.remove(k);
                }
            }
            op if op == consts::CMD_OP_ALLOC_PD => {
                ifc::set(&mut out, alloc_pd_out::PD, self.rng.next() & 0xff_ffff);
            }
            _ => {}
        }
        Reply::ok(out[8..].to_vec())
    }

    fn manage_pages(&mut self, s: &Seen, absurd: bool, out: &mut [u8]) {
        let i = &s.input;
        let n = ifc::get(i, manage_pages_in::INPUT_NUM_ENTRIES) as u32;
        if s.op_mod == consts::MANAGE_PAGES_IN_OP_MOD_ALLOCATION_SUCCESS {
            for k in 0..n {
                self.held.insert(ifc::get(i, manage_pages_in::PAS.at(k)));
            }
        } else if s.op_mod == consts::MANAGE_PAGES_IN_OP_MOD_HCA_RETURN_PAGES {
            let room = (s.outlen.saturating_sub(manage_pages_out::SIZE) / 8) as u32;
            let mut back: Vec<u64> = self.held.iter().take(n.min(room) as usize).copied().collect();
            let mut count = None;
            if absurd {
                match self.rng.below(4) {
                    0 => back.push(self.rng.next() & !0xfff), // a page never lent
                    1 => {
                        if let Some(p) = back.first().copied() {
                            back.push(p); // the same page twice
                        }
                    }
                    2 => count = Some(self.rng.next() & 0xffff_ffff), // any count
                    _ => back.clear(),                                // none, ever
                }
            }
            let count = count.unwrap_or(back.len() as u64);
            let fits = back.len().min(room as usize);
            for (k, a) in back.iter().take(fits).enumerate() {
                ifc::set(out, manage_pages_out::PAS.at(k as u32), *a);
                self.held.remove(a);
            }
            ifc::set(out, manage_pages_out::OUTPUT_NUM_ENTRIES, count);
        }
    }
}

/// The ring a `CREATE_EQ` input hands over.
fn ring_of(i: &[u8]) -> Ring {
    let ctx = create_eq_in::EQ_CONTEXT_ENTRY;
    Ring {
        bus: ifc::get(i, create_eq_in::PAS),
        log_size: ifc::get(i, eqc::LOG_EQ_SIZE.within(ctx)) as u8,
        pi: 0,
    }
}

/// How one case ended, by kind.
fn kind(e: &HcaError) -> String {
    match e {
        HcaError::Cmd { error, .. } => {
            let d = std::format!("{error:?}");
            std::format!("Cmd::{}", d.split([' ', '(', '{']).next().unwrap_or(""))
        }
        HcaError::BadFirmwareValue { field, .. } => std::format!("BadFirmwareValue({field})"),
        other => {
            let d = std::format!("{other:?}");
            d.split([' ', '(', '{']).next().unwrap_or("").to_string()
        }
    }
}

/// One case: the outcome of bring-up and of teardown (or of the run in between), and the
/// invariant violations found.
fn case(seed: u64) -> (String, Vec<String>) {
    let mut rng = Rng(seed);
    let level = rng.pick(&[0, 1, 1, 3, 10, 30]);
    let fw = Arc::new(Mutex::new(Fw {
        rng: Rng(rng.next()),
        level,
        dma: None,
        enabled: false,
        hung: false,
        eqs: Vec::new(),
        held: BTreeSet::new(),
        next_eqn: 0,
        uar_page_sz: 0,
        lost_posts: 0,
    }));
    let f2 = fw.clone();
    let (fake, bar, dma): (Arc<FakeFw>, MemBar, Arc<HeapDma>) =
        FakeFw::new(move |s| f2.lock().unwrap().answer(s));
    fw.lock().unwrap().dma = Some(dma.clone());
    assert_eq!(bar.size(), BAR_SIZE);
    // The init segment (its faults scale with the level too).
    let rate = 4 * level;
    if rng.chance(rate) {
        bar.mem().write_u32(0x4, ((rng.next() as u32) & 0xffff_0000).to_be());
    }
    if rng.chance(rate) {
        fake.set_geometry(&bar, rng.below(16) as u8, rng.below(16) as u8);
    }
    if rng.chance(rate / 2) {
        bar.mem().write_u32(0x1fc, 0x8000_0000u32.to_be());
    }
    if rng.chance(rate / 2) {
        fake.init_after_addr.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    if rng.chance(rate) {
        bar.mem().write_u32(0x23c, ((rng.next() as u32) | 0x0001_0000).to_be());
    }
    let cfg = HcaConfig {
        cmd: CmdConfig { in_blocks: 16, out_blocks: 16, timeout_ns: 200_000 },
        fw_init_timeout_ns: 100_000,
        reclaim_timeout_ns: 100_000,
        ..HcaConfig::default()
    };
    let pool_pages = rng.pick(&[0usize, 8, 512, 512, 512, 512, 512, 512]);
    let mut bits = vec![0u64; bitmap_words(pool_pages)];
    let clock = Ticks(Cell::new(0));
    let outcome =
        match Hca::bring_up(&bar, &*dma, &clock, PagePool::new(&mut bits, pool_pages), cfg) {
            Err(e) => std::format!("bring-up: {}", kind(&e)),
            Ok(mut hca) => {
                let mut run = String::new();
                for _ in 0..rng.below(4) {
                    if rng.chance(500) {
                        fw.lock().unwrap().post_events();
                    }
                    let r = match rng.below(3) {
                        0 => hca.poll_events().map(|_| ()).map_err(|e| kind(&e)),
                        1 => {
                            let mut ctl = FwControl::new(&mut hca);
                            ctl.alloc_uar().and_then(|u| ctl.dealloc_uar(u)).map_err(|e| {
                                let d = std::format!("{e:?}");
                                std::format!(
                                    "FwControl {}",
                                    d.split([' ', '(', '{']).next().unwrap_or("")
                                )
                            })
                        }
                        _ => {
                            let q: [u8; alloc_pd_in::SIZE] = input(consts::CMD_OP_ALLOC_PD, 0);
                            hca.exec("ALLOC_PD", &q, Pas::None, &mut [0u8; alloc_pd_out::SIZE])
                                .map_err(|e| kind(&e))
                        }
                    };
                    if let Err(e) = r {
                        run = std::format!(", run: {e}");
                    }
                }
                match hca.teardown() {
                    Ok(_) => std::format!("up{run}, teardown: ok"),
                    Err(e) => std::format!("up{run}, teardown: {}", kind(&e)),
                }
            }
        };
    let found = violations(&fw.lock().unwrap(), &bar, &dma, &fake);
    (outcome, found)
}

/// What firmware may still own that is no longer mapped.
fn violations(fw: &Fw, bar: &MemBar, dma: &HeapDma, fake: &FakeFw) -> Vec<String> {
    let mut v = Vec::new();
    let mapped = |a: u64, len: usize| dma.translate(BusAddr(a), len).is_some();
    if fw.hung || fw.enabled {
        let q = (u64::from(bar.read_be32(0x10)) << 32) | u64::from(bar.read_be32(0x14) & !0xfff);
        if q != 0 && !mapped(q, 4096) {
            v.push(std::format!(
                "command queue {q:#x} freed (hung {}, enabled {})",
                fw.hung,
                fw.enabled
            ));
        }
    }
    for (eqn, ring) in &fw.eqs {
        if !mapped(ring.bus, 64 << ring.log_size) {
            v.push(std::format!("EQ {eqn:?} ring {:#x} freed while live", ring.bus));
        }
    }
    if let Some(p) = fw.held.iter().find(|p| !mapped(**p, 4096)) {
        v.push(std::format!("page {p:#x} freed while lent ({} lent)", fw.held.len()));
    }
    if fw.lost_posts > 0 {
        v.push(std::format!("{} events posted into freed rings", fw.lost_posts));
    }
    let faults = fake.faults.lock().unwrap();
    if !faults.is_empty() {
        v.push(std::format!("malformed commands: {:?}", &faults[..faults.len().min(3)]));
    }
    v
}

#[test]
fn hostile_firmware_never_panics_hangs_or_frees_memory_it_owns() {
    let (cases, first) = seeded::plan(CI_CASES, 0x5eed);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for seed in first..first + cases {
            let r = std::panic::catch_unwind(|| case(seed));
            let failed = r.is_err();
            if tx.send((seed, r.map_err(|_| ()))).is_err() || failed {
                return;
            }
        }
    });
    let started = Instant::now();
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    for _ in 0..cases {
        let (seed, r) = rx.recv_timeout(CASE_BOUND).unwrap_or_else(|_| {
            panic!("a case ran past {CASE_BOUND:?} (seeds from {first}): hang")
        });
        let Ok((outcome, violations)) = r else {
            panic!("seed {seed} panicked (RDMA_PMD_HOSTILE_SEED={seed} RDMA_PMD_HOSTILE_CASES=1)")
        };
        assert!(violations.is_empty(), "seed {seed} ({outcome}): {violations:?}");
        *outcomes.entry(outcome).or_default() += 1;
    }
    std::println!("{cases} hostile-firmware cases in {:?}:", started.elapsed());
    for (k, n) in &outcomes {
        std::println!("{n:>8}  {k}");
    }
}
