//! The model's firmware: the initialization segment and the command interface.
//!
//! A driver brings a real mlx5 HCA up through BAR0 page 0 and a command queue in host memory;
//! [`Firmware`] plays the firmware's side so that a driver's bring-up code can be tested
//! against the model, and every object it creates is the same object the model's engine then
//! executes WQEs on.
//!
//! ```
//! use rdma_pmd_hal::Mmio;
//! use rdma_pmd_mlx5_model::fw::{init_seg, FwConfig, Firmware, HcaState};
//! use rdma_pmd_mlx5_model::Model;
//!
//! let model = Model::new();
//! let fw = Firmware::start(&model, FwConfig::default()).unwrap();
//! let bar = model.bar(); // BAR0: initialization segment + UAR pages (same as fw.bar())
//! assert_eq!(bar.read_be32(init_seg::CMDIF_REV_FW_SUB) >> 16, 5);
//! assert_eq!(bar.read_be32(init_seg::INITIALIZING) >> 31, 0);
//! assert_eq!(fw.state(), HcaState::Disabled);
//! ```
//!
//! ## BAR0
//!
//! Page 0 is the initialization segment ([`init_seg`]: firmware revision, command interface
//! revision 5, command queue address and size, command doorbell, `initializing`, health
//! buffer); the timer and health counter words at 0x1000..0x1014 are the firmware's too. Every
//! other offset belongs to the model's UAR pages (see the crate docs), except the EQ doorbells
//! at 0x40/0x48 of a UAR page ([`eq`]). Once a firmware is started, the model's BAR handler
//! hands it those accesses first.
//!
//! ## Command queue
//!
//! [`cmdq`]: `1 << log_cmdq_size` slots (default 32) of `1 << log_cmdq_stride` bytes (64) at
//! the address the driver stores in `cmdq_addr_h/l`. A store of bit *i* to `cmd_dbell` queues
//! slot *i* for the firmware thread, which sleeps on a condition variable while there is
//! nothing to do. Per slot: owner bit must be set (else the doorbell is counted as spurious),
//! `type` 7, lengths sane, mailboxes aligned, reachable, numbered 0, 1, … and carrying the
//! entry's token (else the delivery status says which); then the command executes, the output
//! is scattered, the delivery status is written and, after a release fence, the owner bit is
//! cleared. If an EQ subscribed to command events existed when the slot's doorbell rang, a
//! command completion EQE with `1 << slot` follows, and the EQ's MSI-X vector (`eqc.intr`)
//! is raised if the EQ is armed; an armed EQ fires once and stays quiet until the driver arms
//! it again (an arm doorbell over unconsumed EQEs fires at once). Page request EQEs interrupt
//! the same way.
//!
//! ## Commands
//!
//! `ENABLE_HCA`, `DISABLE_HCA`, `QUERY_ISSI`, `SET_ISSI` (ISSI 0 and 1), `QUERY_PAGES`
//! (boot/init/regular), `MANAGE_PAGES` (give/take/allocation-fail), `QUERY_HCA_CAP` and
//! `SET_HCA_CAP` (general and RoCE capabilities), `QUERY_ADAPTER`, `ACCESS_REG` (host
//! endianness; PTYS; NODE_DESC), `INIT_HCA`, `ALLOC_XRCD`, `DEALLOC_XRCD`,
//! `QUERY_HCA_VPORT_PKEY`, `MAD_IFC` (refused: an Ethernet port),
//! `TEARDOWN_HCA`, `ALLOC_UAR`, `DEALLOC_UAR`, `ALLOC_PD`, `DEALLOC_PD`, `CREATE_EQ`,
//! `DESTROY_EQ`, `CREATE_MKEY` (PA or MTT), `DESTROY_MKEY`, `CREATE_CQ`,
//! `DESTROY_CQ`, `CREATE_QP` (RC, UD, QP1), `DESTROY_QP`, `RST2INIT_QP`, `INIT2RTR_QP`, `RTR2RTS_QP`,
//! `2ERR_QP`, `2RST_QP`, `QUERY_QP`, `QUERY_NIC_VPORT_CONTEXT`, `MODIFY_NIC_VPORT_CONTEXT`
//! (`roce_en`, `mtu`), `QUERY_VPORT_STATE`, `QUERY_ROCE_ADDRESS` and `SET_ROCE_ADDRESS` (the
//! model's GID table, fixed by its configuration), `NOP`. Anything else: `BAD_OP`. The
//! life-cycle rules are in the `hca` module, the resource checks in the `resources` module;
//! syndromes in [`codes::syndrome`].
//!
//! ## Test hooks
//!
//! Faults: [`Firmware::fail_next`] (a command fails with a chosen status and syndrome),
//! [`Firmware::hang_next`] (a command is taken and never handed back),
//! [`Firmware::set_command_delay`] (a slow firmware),
//! [`Firmware::set_stuck_initializing`], [`Firmware::set_health_syndrome`] (a fatal error:
//! the health buffer reports it, the health counter stops, doorbells are ignored); and a
//! firmware that breaks the protocol: [`Firmware::refuse_next`] (a delivery status for a
//! well-formed entry), [`Firmware::answer_token_next`] (the answer carries another token),
//! [`Firmware::answer_field_next`] (an output field replaced by an absurd value),
//! [`Firmware::set_keep_pages`] (pages asked back are never returned).
//! Run-time pages: [`Firmware::request_pages`] posts a page request EQE. Observation:
//! [`Firmware::state`], [`Firmware::issi`], [`Firmware::pages`], [`Firmware::executed`],
//! [`Firmware::delivery_errors`], [`Firmware::hung_slots`], [`Firmware::spurious_doorbells`],
//! [`Firmware::live_objects`], [`Firmware::roce_enabled`], [`Firmware::eq_overruns`]; the
//! objects themselves are the model's ([`Model::qp_state`], …).

//!
//! ## Sources
//!
//! The kernel's `include/linux/mlx5/device.h` (`struct mlx5_init_seg`, `health_buffer`,
//! `mlx5_cmd_layout`, `mlx5_cmd_prot_block`, `MLX5_CMD_STAT_*`, event types), `driver.h`
//! (`CMD_OWNER_HW`, `MLX5_REG_HOST_ENDIANNESS`), `mlx5_ifc.h` (every command layout, checked
//! by the `header` test against the installed header), and `drivers/net/ethernet/mellanox/
//! mlx5/core/cmd.c` (`CMD_IF_REV`, delivery statuses, the queue protocol), `pagealloc.c` (page
//! stages), `eq.c` (EQE ownership), `main.c` (the bring-up order).
//!
//! ## Modelling choices (not hardware facts)
//!
//! * One physical function (function id 0), no VFs, one port (Ethernet, RoCE v2).
//! * Signatures are not checked (`cmdif_checksum` is 0); mailbox pointers need 512-byte
//!   alignment.
//! * Queue buffers (EQ, CQ, QP, SQ, RQ) and memory keys' MTTs are page lists as on hardware:
//!   each entry one page anywhere; the engine splits every access at page boundaries.
//! * `TEARDOWN_HCA` refuses while objects created through commands remain, and `DISABLE_HCA`
//!   while the firmware still holds pages, so that leaks show up as failures.
//! * Given pages are overwritten with `0xf5`, as firmware would use them. Before `INIT_HCA`
//!   every page may be taken back (the kernel's failed-bring-up path); from `INIT_HCA` to
//!   `TEARDOWN_HCA` boot + init + run-time pages are locked.
//! * `CREATE_CQ` needs an existing EQ (`c_eqn`), as on hardware. A CQE written to an armed
//!   CQ (CQ arm doorbell) posts a completion EQE (type 0, the CQ number) to that EQ with its
//!   vector, and disarms the CQ (`fw::comp_event`); a CQ overrun or memory fault posts a CQ
//!   error EQE to the EQ subscribed to CQ errors (`fw::cq_error_event`).
//! * `RST2INIT_QP` needs `primary_address_path.vhca_port_num` = 1.
//! * One firmware per model, for the model's life.
//! * A full EQ (once the driver has rung its doorbell) drops the event and counts an overrun.

pub mod cmdq;
pub mod codes;
pub mod decoded;
pub mod eq;
mod hca;
pub mod ifc;
pub mod init_seg;
pub mod pages;
mod resources;

#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdma_pmd::{Errno, Error};
use rdma_pmd_hal::mem::{BarMem, BusMemory, MemBar};

pub use codes::{CmdStatus, DeliveryStatus, Opcode};
pub use hca::{Executed, HcaState};
pub use pages::PageStats;

use crate::model::{Model, Shared};
use hca::Hca;

/// How the firmware behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FwConfig {
    /// Firmware revision: major, minor, subminor.
    pub fw_rev: (u16, u16, u16),
    /// Pages needed after `ENABLE_HCA`.
    pub boot_pages: u32,
    /// Further pages needed before `INIT_HCA`.
    pub init_pages: u32,
    /// How long `initializing` stays set after the firmware starts.
    pub init_delay: Duration,
    /// log2 of the number of command slots (at most 5).
    pub log_cmdq_size: u8,
    /// log2 of the bytes per slot (at least 6).
    pub log_cmdq_stride: u8,
    /// `cmd_exec_to` reported in the initialization segment (ms).
    pub cmd_exec_timeout_ms: u32,
    /// `log_max_qp`.
    pub log_max_qp: u8,
    /// `log_max_cq`.
    pub log_max_cq: u8,
    /// `log_max_eq`.
    pub log_max_eq: u8,
    /// `log_max_eq_sz`.
    pub log_max_eq_sz: u8,
    /// `log_max_mkey`.
    pub log_max_mkey: u8,
    /// `log_max_pd`.
    pub log_max_pd: u8,
}

impl Default for FwConfig {
    fn default() -> Self {
        FwConfig {
            fw_rev: (16, 35, 1012),
            boot_pages: 4,
            init_pages: 16,
            init_delay: Duration::ZERO,
            log_cmdq_size: 5,
            log_cmdq_stride: 6,
            cmd_exec_timeout_ms: 60_000,
            log_max_qp: 10,
            log_max_cq: 10,
            // A ConnectX-5's numbers: 128 EQs of up to 4M entries. The kernel's async EQ
            // alone is 4096 + 128 entries, rounded up to 8192 (kernel 6.12 `eq.c`
            // `MLX5_NUM_ASYNC_EQE`, `MLX5_NUM_SPARE_EQE`, `create_map_eq`).
            log_max_eq: 7,
            log_max_eq_sz: 22,
            log_max_mkey: 12,
            log_max_pd: 10,
        }
    }
}

/// How many times the firmware executed one kind of command with one outcome
/// ([`Model::command_log`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandRecord {
    /// Opcode.
    pub opcode: Opcode,
    /// `op_mod`.
    pub op_mod: u16,
    /// Commands with this opcode, op_mod and status.
    pub count: u64,
    /// Status written.
    pub status: CmdStatus,
}

impl Model {
    /// Commands the model's firmware executed (or failed), counted by opcode, op_mod and
    /// status, in that order; empty without a firmware. Commands refused at delivery are not
    /// here ([`Firmware::delivery_errors`]).
    pub fn command_log(&self) -> Vec<CommandRecord> {
        let Some(fw) = self.shared().fw.get().and_then(Weak::upgrade) else { return Vec::new() };
        let hca = fw.hca();
        hca.counts
            .iter()
            .map(|(&(op, op_mod, st), &count)| CommandRecord {
                opcode: Opcode::from(op),
                op_mod,
                count,
                status: CmdStatus::from(st),
            })
            .collect()
    }

    /// Pages the driver has given the firmware through `MANAGE_PAGES`, and pages the firmware
    /// has handed back, over the firmware's life: `(given, reclaimed)`. Equal once every page
    /// came back. `(0, 0)` without a firmware.
    pub fn fw_pages(&self) -> (u64, u64) {
        let Some(fw) = self.shared().fw.get().and_then(Weak::upgrade) else { return (0, 0) };
        let st = fw.hca().pages.stats();
        (st.total_given, st.total_taken)
    }
}

/// Why a test hook could not act.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FwError {
    /// The HCA is not initialized (run-time page requests need `INIT_HCA`).
    NotInitialized,
    /// No EQ asked for this kind of event.
    NoEventQueue,
    /// The EQ's memory did not translate.
    DmaFault,
    /// The EQ is full: the driver has not consumed its entries.
    EqOverrun,
}

impl fmt::Display for FwError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FwError::NotInitialized => f.write_str("the HCA is not initialized"),
            FwError::NoEventQueue => f.write_str("no event queue subscribed to the event"),
            FwError::DmaFault => f.write_str("event queue memory did not translate"),
            FwError::EqOverrun => f.write_str("event queue full"),
        }
    }
}

impl std::error::Error for FwError {}

/// A delivery failure the firmware reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeliveryError {
    /// Command slot.
    pub slot: u32,
    /// What was wrong.
    pub status: DeliveryStatus,
}

/// How an injected answer breaks the protocol.
#[derive(Clone, Copy)]
enum Misanswer {
    /// Hand the entry back unexecuted, with this delivery status.
    Refuse(DeliveryStatus),
    /// Execute, then hand the entry back carrying this token.
    Token(u8),
    /// Execute, then replace this output field with this value.
    Field(ifc::Field, u64),
}

#[derive(Default)]
struct Faults {
    fail: VecDeque<(Opcode, CmdStatus, u32)>,
    misanswer: VecDeque<(Opcode, Misanswer)>,
    hang: VecDeque<Opcode>,
    stuck_initializing: bool,
    health: (u8, u16),
    delay: Duration,
}

#[derive(Default)]
struct Regs {
    cmdq_base: u64,
    health_counter: u32,
    faults: Faults,
    spurious_doorbells: u64,
    ignored_stores: u64,
    bad_eq_doorbells: u64,
    delivery_errors: Vec<DeliveryError>,
    hung: Vec<u32>,
}

#[derive(Default)]
struct Bell {
    pending: u32,
    /// Slots whose doorbell rang while an EQ subscribed to command completions existed:
    /// those complete with an EQE (and its interrupt), the others by the owner bit alone.
    events: u32,
    stop: bool,
}

pub(crate) struct FwShared {
    hca: Mutex<Hca>,
    /// The same table as `Hca::eqs`, reachable without the firmware's lock.
    eqs: eq::EqTable,
    /// The model (its MSI-X sink).
    model: Arc<Shared>,
    regs: Mutex<Regs>,
    bell: Mutex<Bell>,
    wake: Condvar,
    dma: Arc<dyn BusMemory>,
    cfg: FwConfig,
    start: Instant,
}

impl FwShared {
    fn hca(&self) -> MutexGuard<'_, Hca> {
        self.hca.lock().expect("firmware state poisoned")
    }

    fn eqs(&self) -> MutexGuard<'_, std::collections::BTreeMap<u8, eq::Eq>> {
        self.eqs.lock().expect("event queues poisoned")
    }

    fn regs(&self) -> MutexGuard<'_, Regs> {
        self.regs.lock().expect("firmware registers poisoned")
    }

    fn registers(&self, r: &Regs) -> init_seg::Registers {
        let initializing =
            r.faults.stuck_initializing || self.start.elapsed() < self.cfg.init_delay;
        init_seg::Registers {
            fw_rev: self.cfg.fw_rev,
            cmdif_rev: codes::CMD_IF_REV,
            log_cmdq_size: self.cfg.log_cmdq_size,
            log_cmdq_stride: self.cfg.log_cmdq_stride,
            nic_interface: 0,
            initializing,
            health_syndrome: r.faults.health.0,
            health_ext_syndrome: r.faults.health.1,
            cmd_exec_timeout_ms: self.cfg.cmd_exec_timeout_ms,
            cmd_q_init_timeout_ms: self.cfg.init_delay.as_millis().min(u128::from(u32::MAX)) as u32,
            timer_ns: self.start.elapsed().as_nanos() as u64,
            health_counter: r.health_counter,
        }
    }

    /// A driver store to a firmware register.
    fn on_write(&self, mem: &BarMem, off: usize, len: usize) {
        match (off, len) {
            (init_seg::CMD_DBELL, 4) => {
                let bits = init_seg::doorbell(mem);
                // Whether the command gets an EQE is decided when it is issued: the kernel
                // issues the CREATE_EQ that makes its command EQ in polling mode, and only
                // then switches to events (6.12 `eq.c` `create_async_eqs`,
                // `mlx5_cmd_use_events`; `cmd.c` `mlx5_cmd_comp_handler`).
                let events = self.eqs().values().any(|e| e.wants(codes::EventType::Cmd));
                let mut b = self.bell.lock().expect("doorbell poisoned");
                b.pending |= bits;
                if events {
                    b.events |= bits;
                } else {
                    b.events &= !bits;
                }
                drop(b);
                self.wake.notify_one();
            }
            (init_seg::CMDQ_ADDR_H, 4) | (init_seg::CMDQ_ADDR_L_SZ, 4) => {
                self.regs().cmdq_base = init_seg::cmdq_address(mem);
            }
            _ => self.regs().ignored_stores += 1,
        }
    }

    /// A store to an EQ doorbell of UAR page `page`.
    fn eq_doorbell(&self, mem: &BarMem, page: u32, off: usize) {
        let v = u32::from_be(mem.read_u32(off));
        let (eqn, ci) = ((v >> 24) as u8, v & 0x00ff_ffff);
        let arm = off % crate::UAR_PAGE == eq::DOORBELL_ARM;
        let mut eqs = self.eqs();
        match eqs.get_mut(&eqn).filter(|e| e.uar == page) {
            Some(e) => {
                e.consumer = Some(ci);
                e.armed = arm;
                // Arming an EQ that holds unconsumed entries fires it at once (PRM "EQ
                // arming"): no event is left without its interrupt.
                let fire = (arm && e.producer & 0x00ff_ffff != ci).then(|| e.signal()).flatten();
                if let Some(v) = fire {
                    self.model.raise(v);
                }
            }
            None => {
                drop(eqs);
                self.regs().bad_eq_doorbells += 1;
            }
        }
    }

    /// A driver load from a firmware register: make every firmware register current.
    fn on_read(&self, mem: &BarMem, off: usize, _len: usize) {
        let mut r = self.regs();
        if off == init_seg::HEALTH_COUNTER && r.faults.health.0 == 0 {
            r.health_counter = r.health_counter.wrapping_add(1);
        }
        self.registers(&r).store(mem);
    }

    /// Execute the command in `slot`, if the firmware can.
    fn run_slot(&self, slot: u32, event: bool) {
        let (base, dead, initializing) = {
            let r = self.regs();
            let regs = self.registers(&r);
            (r.cmdq_base, r.faults.health.0 != 0, regs.initializing)
        };
        let hung = self.regs().hung.contains(&slot);
        if base == 0 || dead || initializing || hung || slot >= 1 << self.cfg.log_cmdq_size {
            self.regs().spurious_doorbells += 1;
            return;
        }
        let Some((at, entry)) = cmdq::read_entry(&*self.dma, base, self.cfg.log_cmdq_stride, slot)
        else {
            self.regs().spurious_doorbells += 1;
            return;
        };
        if !entry.hw_owned() {
            self.regs().spurious_doorbells += 1;
            return;
        }
        let d = match cmdq::deliver(&*self.dma, &entry) {
            Ok(d) => d,
            Err(status) => {
                self.regs().delivery_errors.push(DeliveryError { slot, status });
                cmdq::complete(&*self.dma, at, status);
                self.post_cmd_event(slot, event);
                return;
            }
        };
        let op = Opcode::from(ifc::cmd_in::OPCODE.get(&d.input) as u16);
        let op_mod = ifc::cmd_in::OP_MOD.get(&d.input) as u16;
        let (injected, misanswer) = {
            let mut r = self.regs();
            if let Some(i) = r.faults.hang.iter().position(|h| *h == op) {
                r.faults.hang.remove(i);
                r.hung.push(slot);
                return;
            }
            let i = r.faults.fail.iter().position(|f| f.0 == op);
            let fail = i.and_then(|i| r.faults.fail.remove(i));
            let i = r.faults.misanswer.iter().position(|m| m.0 == op);
            (fail, i.and_then(|i| r.faults.misanswer.remove(i)).map(|m| m.1))
        };
        if let Some(Misanswer::Refuse(status)) = misanswer {
            cmdq::complete(&*self.dma, at, status);
            self.post_cmd_event(slot, event);
            return;
        }
        let delay = self.regs().faults.delay;
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        let mut out = {
            let mut hca = self.hca();
            match injected {
                Some((_, status, syndrome)) => {
                    let mut out = vec![0u8; d.outlen];
                    hca.finish(op, op_mod, Err(hca::fail(status, syndrome)), &mut out);
                    out
                }
                None => hca.execute(&d.input, d.outlen),
            }
        };
        if let Some(Misanswer::Field(field, value)) = misanswer {
            // A field the output does not reach is left alone (the driver asked for less).
            if (field.bit + field.width).div_ceil(8) as usize <= out.len() {
                field.set(&mut out, value);
            }
        }
        cmdq::scatter(&*self.dma, at, &d.out_blocks, &out);
        if let Some(Misanswer::Token(token)) = misanswer {
            self.dma.write(at.add(cmdq::entry::TOKEN as u64), &[token]);
        }
        cmdq::complete(&*self.dma, at, DeliveryStatus::Ok);
        self.post_cmd_event(slot, event);
    }

    /// The command completion EQE of `slot`, if it was issued while a command EQ existed
    /// (`event`), with the EQ's interrupt if the EQ is armed.
    fn post_cmd_event(&self, slot: u32, event: bool) {
        if !event {
            return;
        }
        let mut eqs = self.eqs();
        if let Some(eq) = eqs.values_mut().find(|e| e.wants(codes::EventType::Cmd)) {
            // A full EQ drops the event (counted in the EQ's overruns).
            let _ = eq.post(&*self.dma, codes::EventType::Cmd, &eq::cmd_event(1 << slot));
            if let Some(v) = eq.signal() {
                self.model.raise(v);
            }
        }
    }

    fn run(&self) {
        loop {
            let bits = {
                let mut b = self.bell.lock().expect("doorbell poisoned");
                while b.pending == 0 && !b.stop {
                    b = self.wake.wait(b).expect("doorbell poisoned");
                }
                if b.stop {
                    return;
                }
                (std::mem::take(&mut b.pending), std::mem::take(&mut b.events))
            };
            let (bits, events) = bits;
            for slot in 0..32 {
                if bits & (1 << slot) != 0 {
                    self.run_slot(slot, events & (1 << slot) != 0);
                }
            }
        }
    }
}

/// A completion event for CQ `cqn` on EQ `eqn` (the CQ's `c_eqn`): a COMP EQE (type 0, the
/// CQ number in its data) and the EQ's vector if the EQ is armed. Called by the model when a
/// CQE lands in an armed CQ (or the CQ is armed over waiting CQEs), with the device lock
/// held: the EQ table's lock is a leaf. Completion events go to the CQ's EQ whatever its
/// event mask (kernel `eq.c` `mlx5_eq_comp_int`; completion EQs ask for no async events).
pub(crate) fn comp_event(sh: &Shared, eqn: u8, cqn: u32) {
    let Some(fw) = sh.fw.get().and_then(Weak::upgrade) else { return };
    let mut eqs = fw.eqs();
    let Some(eq) = eqs.get_mut(&eqn) else { return };
    // A full EQ drops the event (counted in the EQ's overruns).
    let _ = eq.post(&*fw.dma, codes::EventType::Completion, &eq::comp_event(cqn));
    if let Some(v) = eq.signal() {
        sh.raise(v);
    }
}

/// A CQ error event for CQ `cqn` with `syndrome` (overrun 1, access violation 2) on the EQ
/// subscribed to CQ errors (the kernel's async EQ, `MLX5_EVENT_TYPE_CQ_ERROR`; `eq.c`
/// `cq_err_event_notifier` reads `cq_err.cqn` and `syndrome`), with its vector if armed. Called
/// with the device lock held: the EQ table's lock is a leaf.
pub(crate) fn cq_error_event(sh: &Shared, cqn: u32, syndrome: u8) {
    let Some(fw) = sh.fw.get().and_then(Weak::upgrade) else { return };
    let t = codes::EventType::CqError;
    let mut eqs = fw.eqs();
    let Some(eq) = eqs.values_mut().find(|e| e.wants(t)) else { return };
    let _ = eq.post(&*fw.dma, t, &eq::cq_error_event(cqn, syndrome));
    if let Some(v) = eq.signal() {
        sh.raise(v);
    }
}

/// Whether the firmware of the model behind `sh` handles a BAR access (called by the model's
/// BAR handler first): firmware registers (page 0, timer and health counter) and EQ doorbells
/// (0x40/0x48 of a UAR page, 4-byte stores). Without a running firmware the model handles
/// everything as before.
pub(crate) fn claims(sh: &Shared, mem: &BarMem, off: usize, len: usize, write: bool) -> bool {
    let o = off % crate::UAR_PAGE;
    let register = init_seg::is_firmware_register(off, len);
    let eq_doorbell = write
        && len == 4
        && off >= crate::UAR_PAGE
        && (o == eq::DOORBELL_ARM || o == eq::DOORBELL_UPDATE);
    if !register && !eq_doorbell {
        return false;
    }
    let Some(fw) = sh.fw.get().and_then(Weak::upgrade) else { return false };
    match (register, write) {
        (true, true) => fw.on_write(mem, off, len),
        (true, false) => fw.on_read(mem, off, len),
        _ => fw.eq_doorbell(mem, (off / crate::UAR_PAGE) as u32, off),
    }
    true
}

/// The firmware of one [`Model`]: its thread and its test hooks. Once started, the model's BAR
/// ([`Model::bar`]) has the initialization segment in page 0 and the EQ doorbells. One
/// firmware per model. Dropping it stops the thread (commands in flight are abandoned).
pub struct Firmware {
    shared: Arc<FwShared>,
    bar: MemBar,
    thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for Firmware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Firmware({:?})", self.state())
    }
}

impl Firmware {
    /// Start the firmware of `model`. Its objects are created on the model by the same
    /// resource commands [`Model::control`] reaches.
    pub fn start(model: &Model, cfg: FwConfig) -> Result<Firmware, Error> {
        if cfg.log_cmdq_size > 5 || cfg.log_cmdq_stride < 6 {
            return Err(Error::InvalidArgument("command queue of more than 32 slots or <64 B"));
        }
        if u32::from(cfg.log_cmdq_size) + u32::from(cfg.log_cmdq_stride) > 12 {
            return Err(Error::InvalidArgument("command queue larger than a page"));
        }
        let shared = model.shared().clone();
        let hca = Hca::new(cfg.clone(), shared.clone());
        let fw = Arc::new(FwShared {
            eqs: hca.eqs.clone(),
            model: shared.clone(),
            hca: Mutex::new(hca),
            regs: Mutex::new(Regs::default()),
            bell: Mutex::new(Bell::default()),
            wake: Condvar::new(),
            dma: shared.dma.clone(),
            cfg,
            start: Instant::now(),
        });
        shared
            .fw
            .set(Arc::downgrade(&fw))
            .map_err(|_| Error::InvalidArgument("the model already has a firmware"))?;
        let bar = model.bar();
        let t = fw.clone();
        let thread = std::thread::Builder::new()
            .name(format!("mlx5-model-fw-{}", shared.id))
            .spawn(move || t.run())
            .map_err(|_| Error::Device(Errno::EAGAIN))?;
        Ok(Firmware { shared: fw, bar, thread: Some(thread) })
    }

    /// BAR0 as the driver maps it (the model's BAR): the initialization segment in page 0, the
    /// UAR pages after it.
    pub fn bar(&self) -> MemBar {
        self.bar.clone()
    }

    /// The HCA's state.
    pub fn state(&self) -> HcaState {
        self.shared.hca().state
    }

    /// The ISSI the driver chose.
    pub fn issi(&self) -> u16 {
        self.shared.hca().issi
    }

    /// Page accounting.
    pub fn pages(&self) -> PageStats {
        self.shared.hca().pages.stats()
    }

    /// Every command executed (or failed by injection), oldest first.
    pub fn executed(&self) -> Vec<Executed> {
        self.shared.hca().log.clone()
    }

    /// Commands refused at delivery (bad entry or mailbox), oldest first.
    pub fn delivery_errors(&self) -> Vec<DeliveryError> {
        self.shared.regs().delivery_errors.clone()
    }

    /// Slots taken by a hung command ([`hang_next`](Self::hang_next)).
    pub fn hung_slots(&self) -> Vec<u32> {
        self.shared.regs().hung.clone()
    }

    /// Doorbells that found nothing to execute (slot not owned by hardware, queue not set,
    /// firmware initializing or dead).
    pub fn spurious_doorbells(&self) -> u64 {
        self.shared.regs().spurious_doorbells
    }

    /// Stores to firmware registers that are not writable.
    pub fn ignored_stores(&self) -> u64 {
        self.shared.regs().ignored_stores
    }

    /// EQ doorbells that named no EQ of their UAR page.
    pub fn bad_eq_doorbells(&self) -> u64 {
        self.shared.regs().bad_eq_doorbells
    }

    /// Events dropped because an EQ was full, over all live EQs.
    pub fn eq_overruns(&self) -> u64 {
        self.shared.eqs().values().map(|e| e.overruns).sum()
    }

    /// Objects created through commands and not yet destroyed.
    pub fn live_objects(&self) -> usize {
        self.shared.hca().live_objects()
    }

    /// Whether `roce_en` is set in the NIC vport context.
    pub fn roce_enabled(&self) -> bool {
        self.shared.hca().roce_en
    }

    /// The host endianness register as last written (`he` is bit 0 of byte 0's MSB).
    pub fn host_endianness(&self) -> [u8; 16] {
        self.shared.hca().host_endianness
    }

    /// The next command with `opcode` completes with `status` and `syndrome` instead of
    /// executing. Calls queue up.
    pub fn fail_next(&self, opcode: Opcode, status: CmdStatus, syndrome: u32) {
        self.shared.regs().faults.fail.push_back((opcode, status, syndrome));
    }

    /// The next command with `opcode` is handed back unexecuted with delivery `status`, as if
    /// its entry or mailboxes were malformed (they need not be). Calls queue up, with those of
    /// [`answer_token_next`](Self::answer_token_next) and
    /// [`answer_field_next`](Self::answer_field_next).
    pub fn refuse_next(&self, opcode: Opcode, status: DeliveryStatus) {
        self.shared.regs().faults.misanswer.push_back((opcode, Misanswer::Refuse(status)));
    }

    /// The next command with `opcode` executes and is handed back with `token` in its entry in
    /// place of the one the driver posted.
    pub fn answer_token_next(&self, opcode: Opcode, token: u8) {
        self.shared.regs().faults.misanswer.push_back((opcode, Misanswer::Token(token)));
    }

    /// The next command with `opcode` executes, then its output's `field` reads `value` (a
    /// UAR index outside the BAR, a page that was never lent, ...). What the command did
    /// stands: the object firmware made is still there.
    pub fn answer_field_next(&self, opcode: Opcode, field: ifc::Field, value: u64) {
        self.shared.regs().faults.misanswer.push_back((opcode, Misanswer::Field(field, value)));
    }

    /// While `keep` is set, `MANAGE_PAGES` asking for pages back returns none: a firmware that
    /// never gives its pages back.
    pub fn set_keep_pages(&self, keep: bool) {
        self.shared.hca().keep_pages = keep;
    }

    /// The next command with `opcode` is taken and never handed back (its owner bit stays set).
    pub fn hang_next(&self, opcode: Opcode) {
        self.shared.regs().faults.hang.push_back(opcode);
    }

    /// Keep `initializing` set (doorbells are ignored meanwhile), or let it follow
    /// [`FwConfig::init_delay`] again.
    pub fn set_stuck_initializing(&self, stuck: bool) {
        self.shared.regs().faults.stuck_initializing = stuck;
    }

    /// Take `delay` over every command from now on (a slow firmware: the driver's bounded
    /// waits must allow for it). Commands run one at a time, so later slots wait too.
    pub fn set_command_delay(&self, delay: Duration) {
        self.shared.regs().faults.delay = delay;
    }

    /// Report a fatal error in the health buffer (`synd`, `ext_synd`); while `synd` is non-zero
    /// the health counter stops and doorbells are ignored. `(0, 0)` clears it.
    pub fn set_health_syndrome(&self, synd: u8, ext_synd: u16) {
        self.shared.regs().faults.health = (synd, ext_synd);
    }

    /// Report that port 1 went down (`up` false) or became active (`up` true) with a port
    /// change EQE (sub-type `MLX5_PORT_CHANGE_SUBTYPE_DOWN` / `_ACTIVE`) on the EQ subscribed
    /// to port changes, and its vector if armed: what firmware sends on a link transition
    /// (kernel 6.12 `events.c` `port_change`, mlx5_ib's port event handling). The model's link
    /// itself does not change; a server or test calls this when it changes the link.
    pub fn port_change(&self, up: bool) -> Result<(), FwError> {
        if self.shared.hca().state != HcaState::Initialized {
            return Err(FwError::NotInitialized);
        }
        let t = codes::EventType::PortChange;
        let sub = if up { codes::PORT_CHANGE_ACTIVE } else { codes::PORT_CHANGE_DOWN };
        let mut eqs = self.shared.eqs();
        let eq = eqs.values_mut().find(|e| e.wants(t)).ok_or(FwError::NoEventQueue)?;
        eq.post_sub(&*self.shared.dma, t, sub, &eq::port_event(1))?;
        if let Some(v) = eq.signal() {
            self.shared.model.raise(v);
        }
        Ok(())
    }

    /// Ask the driver for `n` more pages (negative: offer `-n` back) with a page request EQE
    /// on the first EQ subscribed to page requests. The driver answers with `MANAGE_PAGES`.
    pub fn request_pages(&self, n: i32) -> Result<(), FwError> {
        let mut hca = self.shared.hca();
        if hca.state != HcaState::Initialized {
            return Err(FwError::NotInitialized);
        }
        let t = codes::EventType::PageRequest;
        let dma = self.shared.dma.clone();
        {
            let mut eqs = self.shared.eqs();
            let eq = eqs.values_mut().find(|e| e.wants(t)).ok_or(FwError::NoEventQueue)?;
            eq.post(&*dma, t, &eq::page_event(0, n))?;
            if let Some(v) = eq.signal() {
                self.shared.model.raise(v);
            }
        }
        hca.pages.runtime += i64::from(n);
        Ok(())
    }
}

impl Drop for Firmware {
    fn drop(&mut self) {
        self.shared.bell.lock().expect("doorbell poisoned").stop = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
