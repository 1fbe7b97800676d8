//! HCA bring-up and teardown over the command interface, for a driver that owns its function
//! (VFIO, bare metal): no kernel driver has initialized anything.
//!
//! The sequence is the kernel's (`drivers/net/ethernet/mellanox/mlx5/core/main.c`
//! `mlx5_function_setup` and `mlx5_load`) as rdma-core's VFIO provider does it
//! (`providers/mlx5/mlx5_vfio.c` `mlx5_vfio_setup_function`):
//!
//! 1. wait for firmware to clear `initializing` (bounded; a health syndrome ends it early);
//! 2. check the command interface revision (5), set up the command queue, and wait for
//!    `initializing` again (firmware initializes once it has the queue address);
//! 3. `ENABLE_HCA`;
//! 4. `QUERY_ISSI` / `SET_ISSI` (1, or 0 on firmware that knows nothing else);
//! 5. `QUERY_PAGES` (boot) and `MANAGE_PAGES` to give them;
//! 6. `ACCESS_REG` host endianness;
//! 7. `QUERY_HCA_CAP` / `SET_HCA_CAP`, general (command checksums off, 4 KiB UAR pages) and
//!    RoCE (software-chosen UDP source port) capabilities;
//! 8. `QUERY_PAGES` (init) and `MANAGE_PAGES`;
//! 9. `INIT_HCA`;
//! 10. `ALLOC_UAR` and two `CREATE_EQ`: an asynchronous EQ for page requests, command
//!     completions and port changes, serviced by [`Hca::poll_events`], and a completion EQ that
//!     CQs name;
//! 11. on an Ethernet port, `MODIFY_NIC_VPORT_CONTEXT` with `roce_en`.
//!
//! [`Hca::teardown`] undoes it in reverse: RoCE off, EQs and UAR, `TEARDOWN_HCA`, every page
//! reclaimed with `MANAGE_PAGES`, `DISABLE_HCA`, memory given back. A failed bring-up unwinds
//! the same way. Memory that firmware might still write (after a command that never completed,
//! or pages it never returned) is deliberately not given back.
//!
//! Firmware pages come from a [`PagePool`] whose size the caller chooses (no allocator):
//!
//! ```ignore
//! let mut bitmap = [0u64; bitmap_words(8192)];
//! let pool = PagePool::new(&mut bitmap, 8192);
//! let mut hca = Hca::bring_up(&bar, &dma, &clock, pool, HcaConfig::default())?;
//! println!("{}", hca.report());
//! let mut ctl = FwControl::new(&mut hca);
//! ```

pub mod eq;
mod error;
pub mod pages;
#[cfg(test)]
pub(crate) mod script_fw;
#[cfg(test)]
mod tests;

use core::fmt;

use rdma_pmd_hal::{Clock, Deadline, Dma, Mmio};

use crate::cmd::{CmdConfig, CmdError, CmdQueue, Pas, SLOT_CMD, SLOT_PAGES};
use crate::control::DeviceCaps;
use crate::ifc::{self, consts, generated::*};
use crate::init_seg::{FwVersion, InitSeg, InitWaitError, CMDIF_REV};
use eq::{decode, Event, EventQueue, EventType};
pub use error::HcaError;
pub use pages::{bitmap_words, PagePool, FW_PAGE};

/// `MLX5_REG_HOST_ENDIANNESS` (kernel `driver.h`).
const REG_HOST_ENDIANNESS: u64 = 0x7004;
/// `query_hca_cap_in.op_mod`: capability type `<< 1 |` 1 for current values, 0 for maximum.
const CAP_GENERAL: u16 = 0;
const CAP_ROCE: u16 = 4;
const CAP_CUR: u16 = 1;
const CAP_MAX: u16 = 0;
/// Pages per `MANAGE_PAGES` (also bounded by the mailboxes).
const PAGE_BATCH: usize = 128;
/// EQEs consumed before the consumer index must be reported (`MLX5_NUM_SPARE_EQE`).
const EQ_SPARE: u32 = 0x80;

/// How bring-up is bounded and what it sets up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HcaConfig {
    /// Command queue sizing and per-command bound.
    pub cmd: CmdConfig,
    /// Bound on firmware initialization (rdma-core allows 120 s).
    pub fw_init_timeout_ns: u64,
    /// Bound on getting every page back at teardown (the kernel allows 5 s without progress).
    pub reclaim_timeout_ns: u64,
    /// log2 of the asynchronous EQ's entries.
    pub async_eq_log_size: u8,
    /// log2 of the completion EQ's entries.
    pub comp_eq_log_size: u8,
    /// Enable RoCE on the vport when the port is Ethernet.
    pub enable_roce: bool,
}

impl Default for HcaConfig {
    fn default() -> Self {
        HcaConfig {
            cmd: CmdConfig::default(),
            fw_init_timeout_ns: 120_000_000_000,
            reclaim_timeout_ns: 5_000_000_000,
            async_eq_log_size: 7,
            comp_eq_log_size: 6,
            enable_roce: true,
        }
    }
}

/// Port type (`cmd_hca_cap.port_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortType {
    /// InfiniBand.
    Ib,
    /// Ethernet (RoCE).
    Ethernet,
    /// Another value.
    Unknown(u8),
}

/// The `cmd_hca_cap` (and `roce_cap`) values bring-up read and the driver uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HcaCaps {
    /// `log_max_qp`.
    pub log_max_qp: u8,
    /// `log_max_qp_sz`.
    pub log_max_qp_sz: u8,
    /// `log_max_cq`.
    pub log_max_cq: u8,
    /// `log_max_cq_sz`.
    pub log_max_cq_sz: u8,
    /// `log_max_eq`.
    pub log_max_eq: u8,
    /// `log_max_eq_sz`.
    pub log_max_eq_sz: u8,
    /// `log_max_mkey`.
    pub log_max_mkey: u8,
    /// `log_max_pd`.
    pub log_max_pd: u8,
    /// `log_max_msg`.
    pub log_max_msg: u8,
    /// `log_max_ra_req_qp`.
    pub log_max_ra_req_qp: u8,
    /// `log_max_ra_res_qp`.
    pub log_max_ra_res_qp: u8,
    /// `num_ports`.
    pub num_ports: u8,
    /// `port_type`.
    pub port_type: PortType,
    /// `roce`: the function supports RoCE.
    pub roce: bool,
    /// `bf`: BlueFlame supported.
    pub bf: bool,
    /// `log_bf_reg_size`.
    pub log_bf_reg_size: u8,
    /// `max_wqe_sz_sq`.
    pub max_wqe_sz_sq: u16,
    /// `log_uar_page_sz` in effect.
    pub log_uar_page_sz: u16,
    /// `roce_cap.sw_r_roce_src_udp_port` in effect (the QP's `udp_sport` is honoured).
    pub roce_sw_udp_sport: bool,
    /// `roce_cap.qp_ts_format`.
    pub qp_ts_format: u8,
}

impl HcaCaps {
    fn from_general(cap: &[u8]) -> Self {
        let g = |f| ifc::get(cap, f) as u8;
        HcaCaps {
            log_max_qp: g(cmd_hca_cap::LOG_MAX_QP),
            log_max_qp_sz: g(cmd_hca_cap::LOG_MAX_QP_SZ),
            log_max_cq: g(cmd_hca_cap::LOG_MAX_CQ),
            log_max_cq_sz: g(cmd_hca_cap::LOG_MAX_CQ_SZ),
            log_max_eq: g(cmd_hca_cap::LOG_MAX_EQ),
            log_max_eq_sz: g(cmd_hca_cap::LOG_MAX_EQ_SZ),
            log_max_mkey: g(cmd_hca_cap::LOG_MAX_MKEY),
            log_max_pd: g(cmd_hca_cap::LOG_MAX_PD),
            log_max_msg: g(cmd_hca_cap::LOG_MAX_MSG),
            log_max_ra_req_qp: g(cmd_hca_cap::LOG_MAX_RA_REQ_QP),
            log_max_ra_res_qp: g(cmd_hca_cap::LOG_MAX_RA_RES_QP),
            num_ports: g(cmd_hca_cap::NUM_PORTS),
            port_type: match g(cmd_hca_cap::PORT_TYPE) {
                0 => PortType::Ib,
                v if v as u16 == consts::CAP_PORT_TYPE_ETH => PortType::Ethernet,
                v => PortType::Unknown(v),
            },
            roce: g(cmd_hca_cap::ROCE) != 0,
            bf: g(cmd_hca_cap::BF) != 0,
            log_bf_reg_size: g(cmd_hca_cap::LOG_BF_REG_SIZE),
            max_wqe_sz_sq: ifc::get(cap, cmd_hca_cap::MAX_WQE_SZ_SQ) as u16,
            log_uar_page_sz: ifc::get(cap, cmd_hca_cap::LOG_UAR_PAGE_SZ) as u16,
            roce_sw_udp_sport: false,
            qp_ts_format: 0,
        }
    }

    /// The limits the data path needs.
    pub fn device_caps(&self) -> DeviceCaps {
        DeviceCaps {
            log_max_qp_sz: self.log_max_qp_sz,
            log_max_cq_sz: self.log_max_cq_sz,
            max_wqe_sz_sq: self.max_wqe_sz_sq as u32,
            log_bf_reg_size: self.log_bf_reg_size,
        }
    }
}

/// What bring-up learned and did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BringupReport {
    /// Firmware version.
    pub fw: FwVersion,
    /// Command interface revision.
    pub cmdif_rev: u16,
    /// ISSI in use.
    pub issi: u16,
    /// Function id firmware gave pages for.
    pub func_id: u16,
    /// Pages firmware asked for at boot.
    pub boot_pages: u32,
    /// Pages firmware asked for at init.
    pub init_pages: u32,
    /// Pages lent when bring-up finished.
    pub pages_lent: usize,
    /// Pages in the pool.
    pub pool_pages: usize,
    /// Whether `SET_HCA_CAP` was sent for the general capabilities.
    pub set_general_caps: bool,
    /// Whether `SET_HCA_CAP` was sent for the RoCE capabilities.
    pub set_roce_caps: bool,
    /// Capabilities in effect.
    pub caps: HcaCaps,
    /// Whether RoCE was enabled on the vport.
    pub roce_enabled: bool,
    /// UAR index of the EQ doorbells.
    pub eq_uar: u32,
    /// Asynchronous EQ number.
    pub async_eqn: u8,
    /// Completion EQ number (CQs report to it).
    pub comp_eqn: u8,
}

impl fmt::Display for BringupReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.caps;
        writeln!(f, "firmware {} (cmdif {}), ISSI {}", self.fw, self.cmdif_rev, self.issi)?;
        writeln!(
            f,
            "pages: {} boot + {} init requested, {} lent of {} in the pool (function {})",
            self.boot_pages, self.init_pages, self.pages_lent, self.pool_pages, self.func_id
        )?;
        writeln!(
            f,
            "caps: port {:?} x{}, RoCE {} (enabled {}), QP 2^{} of 2^{} WQEBBs, CQ 2^{} of 2^{}, \
             MKEY 2^{}, PD 2^{}, msg 2^{}, max SQ WQE {} B, BF reg 2^{}",
            c.port_type,
            c.num_ports,
            c.roce,
            self.roce_enabled,
            c.log_max_qp,
            c.log_max_qp_sz,
            c.log_max_cq,
            c.log_max_cq_sz,
            c.log_max_mkey,
            c.log_max_pd,
            c.log_max_msg,
            c.max_wqe_sz_sq,
            c.log_bf_reg_size
        )?;
        write!(
            f,
            "set caps: general {}, roce {}; EQs {} (async) {} (completion) on UAR {}",
            self.set_general_caps, self.set_roce_caps, self.async_eqn, self.comp_eqn, self.eq_uar
        )
    }
}

/// Events serviced by one [`Hca::poll_events`] call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventSummary {
    /// Page requests answered.
    pub page_requests: u32,
    /// Pages given in answer.
    pub pages_given: u32,
    /// Pages taken back in answer.
    pub pages_reclaimed: u32,
    /// Command completion events seen (completions themselves are polled on the entry).
    pub command_events: u32,
    /// Completion events of CQs.
    pub cq_events: u32,
    /// Port change events.
    pub port_changes: u32,
    /// Other events.
    pub other: u32,
}

/// What [`Hca::teardown`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TeardownReport {
    /// Pages firmware returned.
    pub pages_reclaimed: usize,
    /// Pages still lent (kept, not freed).
    pub pages_outstanding: usize,
}

#[derive(Clone, Copy, Debug, Default)]
struct Stage {
    enabled: bool,
    initialized: bool,
    roce: bool,
    /// A command never completed: the queue's memory must not be given back.
    cmd_stuck: bool,
}

/// A brought-up HCA: its command queue, firmware pages, event queues.
pub struct Hca<'a> {
    bar: &'a dyn Mmio,
    dma: &'a dyn Dma,
    clock: &'a dyn Clock,
    cfg: HcaConfig,
    cmd: CmdQueue<'a>,
    pages: PagePool<'a>,
    eq_uar: Option<u32>,
    async_eq: Option<EventQueue>,
    comp_eq: Option<EventQueue>,
    stage: Stage,
    report: BringupReport,
    reclaimed: usize,
    /// Events serviced while commands ran, and the first error doing so; handed out by the
    /// next [`Hca::poll_events`].
    carried: EventSummary,
    carried_error: Option<HcaError>,
}

fn input<const N: usize>(opcode: u16, op_mod: u16) -> [u8; N] {
    let mut b = [0u8; N];
    ifc::set(&mut b, enable_hca_in::OPCODE, opcode as u64);
    ifc::set(&mut b, enable_hca_in::OP_MOD, op_mod as u64);
    b
}

impl<'a> Hca<'a> {
    /// Bring the HCA behind `bar` up. See the module docs for the sequence.
    pub fn bring_up(
        bar: &'a dyn Mmio,
        dma: &'a dyn Dma,
        clock: &'a dyn Clock,
        pages: PagePool<'a>,
        cfg: HcaConfig,
    ) -> Result<Self, HcaError> {
        let seg = InitSeg::new(bar);
        seg.wait_initialized(clock, cfg.fw_init_timeout_ns).map_err(|e| match e {
            InitWaitError::Timeout { waited_ns } => HcaError::FwInitTimeout { waited_ns },
            InitWaitError::Health(h) => HcaError::Health(h),
        })?;
        let cmdif_rev = seg.cmdif_rev();
        if cmdif_rev != CMDIF_REV {
            return Err(HcaError::CmdifRev { found: cmdif_rev });
        }
        let cmd = CmdQueue::new(bar, dma, cfg.cmd)
            .map_err(|error| HcaError::Cmd { step: "command queue", error })?;
        // Firmware takes the queue address, then initializes again before accepting commands
        // (kernel `mlx5_function_setup`: the pre-init wait, `mlx5_cmd_init`, the init wait).
        if let Err(e) = seg.wait_initialized(clock, cfg.fw_init_timeout_ns) {
            // No command was posted: firmware does not use the queue's memory.
            cmd.release(dma);
            return Err(match e {
                InitWaitError::Timeout { waited_ns } => HcaError::FwInitTimeout { waited_ns },
                InitWaitError::Health(h) => HcaError::Health(h),
            });
        }
        let pool_pages = pages.capacity();
        let mut hca = Hca {
            bar,
            dma,
            clock,
            cfg,
            cmd,
            pages,
            eq_uar: None,
            async_eq: None,
            comp_eq: None,
            stage: Stage::default(),
            report: BringupReport {
                fw: seg.fw_version(),
                cmdif_rev,
                issi: 0,
                func_id: 0,
                boot_pages: 0,
                init_pages: 0,
                pages_lent: 0,
                pool_pages,
                set_general_caps: false,
                set_roce_caps: false,
                caps: HcaCaps::from_general(&[0u8; cmd_hca_cap::SIZE]),
                roce_enabled: false,
                eq_uar: 0,
                async_eqn: 0,
                comp_eqn: 0,
            },
            reclaimed: 0,
            carried: EventSummary::default(),
            carried_error: None,
        };
        match hca.setup() {
            Ok(()) => Ok(hca),
            Err(e) => {
                // Undo what was done; the first error is the one that matters.
                let _ = hca.unwind();
                hca.release_queue();
                Err(e)
            }
        }
    }

    fn setup(&mut self) -> Result<(), HcaError> {
        self.pages.reserve(self.dma)?;

        let mut out = [0u8; 16];
        let mut en: [u8; enable_hca_in::SIZE] = input(consts::CMD_OP_ENABLE_HCA, 0);
        ifc::set(&mut en, enable_hca_in::FUNCTION_ID, 0);
        self.exec("ENABLE_HCA", &en, Pas::None, &mut out)?;
        self.stage.enabled = true;

        self.set_issi()?;

        let (func_id, boot) = self.query_pages(consts::QUERY_PAGES_IN_OP_MOD_BOOT_PAGES)?;
        self.report.func_id = func_id;
        self.report.boot_pages = boot;
        self.give_pages(SLOT_CMD, func_id, boot)?;

        self.set_host_endianness()?;
        self.handle_caps()?;

        let (func_id, init) = self.query_pages(consts::QUERY_PAGES_IN_OP_MOD_INIT_PAGES)?;
        self.report.init_pages = init;
        self.give_pages(SLOT_CMD, func_id, init)?;

        let ini: [u8; init_hca_in::SIZE] = input(consts::CMD_OP_INIT_HCA, 0);
        self.exec("INIT_HCA", &ini, Pas::None, &mut out)?;
        self.stage.initialized = true;

        self.create_eqs()?;

        if self.report.caps.port_type == PortType::Ethernet
            && self.report.caps.roce
            && self.cfg.enable_roce
        {
            self.set_roce(true)?;
            self.stage.roce = true;
            self.report.roce_enabled = true;
        }
        self.report.pages_lent = self.pages.in_use();
        Ok(())
    }

    /// What bring-up learned.
    pub fn report(&self) -> &BringupReport {
        &self.report
    }

    /// Capabilities in effect.
    pub fn caps(&self) -> &HcaCaps {
        &self.report.caps
    }

    /// The completion EQ's number (`cqc.c_eqn`).
    pub fn comp_eqn(&self) -> u8 {
        self.report.comp_eqn
    }

    /// The health buffer's report, if firmware set a syndrome (check it when commands time
    /// out or the heartbeat stops).
    pub fn health(&self) -> Option<crate::init_seg::Health> {
        InitSeg::new(self.bar).health()
    }

    /// Firmware heartbeat (`health_counter`); it advances while firmware runs.
    pub fn heartbeat(&self) -> u32 {
        InitSeg::new(self.bar).health_counter()
    }

    /// Pages lent to firmware now.
    pub fn pages_lent(&self) -> usize {
        self.pages.in_use()
    }

    /// The BAR.
    pub fn bar(&self) -> &'a dyn Mmio {
        self.bar
    }

    /// Byte offset in BAR0 of UAR page `index`: UAR pages are `4 KiB << log_uar_page_sz`
    /// (bring-up sets `log_uar_page_sz` to the system page size).
    pub fn uar_offset(&self, index: u32) -> usize {
        (index as usize) << (12 + self.report.caps.log_uar_page_sz as usize)
    }

    /// Largest input a command may carry (bytes).
    pub fn max_cmd_in(&self) -> usize {
        self.cmd.max_in()
    }

    /// Run a command on the command slot: post it, then poll until it completes, servicing
    /// page requests meanwhile (firmware may need pages to finish it). `out.len()` is the
    /// output length.
    pub fn exec(
        &mut self,
        step: &'static str,
        head: &[u8],
        pas: Pas<'_>,
        out: &mut [u8],
    ) -> Result<(), HcaError> {
        self.run(SLOT_CMD, step, head, pas, out.len(), out)
    }

    fn fail(&mut self, step: &'static str, error: CmdError) -> HcaError {
        if matches!(error, CmdError::Timeout { .. } | CmdError::Health { .. }) {
            self.stage.cmd_stuck = true;
        }
        HcaError::Cmd { step, error }
    }

    fn run(
        &mut self,
        slot: usize,
        step: &'static str,
        head: &[u8],
        pas: Pas<'_>,
        outlen: usize,
        out: &mut [u8],
    ) -> Result<(), HcaError> {
        if let Err(e) = self.cmd.post(slot, head, pas, outlen) {
            return Err(self.fail(step, e));
        }
        let timeout = self.cmd.config().timeout_ns;
        if slot == SLOT_CMD {
            let deadline = Deadline::after(self.clock, timeout);
            loop {
                if let Some(r) = self.cmd.poll(slot) {
                    if let Err(e) = r {
                        return Err(self.fail(step, e));
                    }
                    break;
                }
                if deadline.expired(self.clock) {
                    let e = self.cmd.timeout_error(slot, timeout);
                    return Err(self.fail(step, e));
                }
                if self.async_eq.is_some() {
                    self.drain_async();
                }
                core::hint::spin_loop();
            }
        } else if let Err(e) = self.cmd.wait(slot, self.clock, timeout) {
            return Err(self.fail(step, e));
        }
        self.cmd.read_out(slot, 0, out);
        if slot == SLOT_CMD && self.async_eq.is_some() {
            // Every command may add a command-completion event: drain them (and anything
            // else) now, so that a caller issuing many commands cannot overrun the EQ.
            self.drain_async();
        }
        Ok(())
    }

    fn set_issi(&mut self) -> Result<(), HcaError> {
        let q: [u8; query_issi_in::SIZE] = input(consts::CMD_OP_QUERY_ISSI, 0);
        let mut out = [0u8; query_issi_out::SIZE];
        match self.exec("QUERY_ISSI", &q, Pas::None, &mut out) {
            Ok(()) => {}
            // Firmware that predates ISSI answers BAD_OP: it speaks ISSI 0 (kernel
            // `mlx5_core_set_issi`).
            Err(HcaError::Cmd {
                error: CmdError::Failed { status: crate::cmd::CmdStatus::BadOp, .. },
                ..
            }) => {
                self.report.issi = 0;
                return Ok(());
            }
            Err(e) => return Err(e),
        }
        let supported = ifc::get(&out, query_issi_out::SUPPORTED_ISSI_DW0) as u32;
        if supported & (1 << 1) != 0 {
            let mut s: [u8; set_issi_in::SIZE] = input(consts::CMD_OP_SET_ISSI, 0);
            ifc::set(&mut s, set_issi_in::CURRENT_ISSI, 1);
            self.exec("SET_ISSI", &s, Pas::None, &mut [0u8; 16])?;
            self.report.issi = 1;
            Ok(())
        } else if supported & 1 != 0 {
            self.report.issi = 0;
            Ok(())
        } else {
            Err(HcaError::Issi { supported })
        }
    }

    fn query_pages(&mut self, op_mod: u16) -> Result<(u16, u32), HcaError> {
        let mut q: [u8; query_pages_in::SIZE] = input(consts::CMD_OP_QUERY_PAGES, op_mod);
        ifc::set(&mut q, query_pages_in::FUNCTION_ID, 0);
        let mut out = [0u8; query_pages_out::SIZE];
        self.exec("QUERY_PAGES", &q, Pas::None, &mut out)?;
        let func_id = ifc::get(&out, query_pages_out::FUNCTION_ID) as u16;
        let n = ifc::get(&out, query_pages_out::NUM_PAGES) as u32 as i32;
        Ok((func_id, n.max(0) as u32))
    }

    fn pages_per_cmd(&self, by_mailbox: usize) -> usize {
        PAGE_BATCH.min(by_mailbox / 8).max(1)
    }

    /// `MANAGE_PAGES` (give) `n` pages to `func_id`, in batches, on `slot`.
    fn give_pages(&mut self, slot: usize, func_id: u16, n: u32) -> Result<u32, HcaError> {
        let per = self.pages_per_cmd(self.cmd.max_in() - manage_pages_in::SIZE);
        // All or nothing, as the kernel's `give_pages` allocates every page before the command:
        // firmware gets the whole request or a refusal, never part of it.
        if self.pages.free() < n as usize {
            return Err(HcaError::PagePoolExhausted { requested: n, free: self.pages.free() });
        }
        let mut left = n as usize;
        while left > 0 {
            let k = left.min(per);
            let mut addrs = [0u64; PAGE_BATCH];
            for a in addrs.iter_mut().take(k) {
                *a = self.pages.take().expect("free pages counted above");
            }
            let mut m: [u8; manage_pages_in::SIZE] = input(
                consts::CMD_OP_MANAGE_PAGES,
                consts::MANAGE_PAGES_IN_OP_MOD_ALLOCATION_SUCCESS,
            );
            ifc::set(&mut m, manage_pages_in::FUNCTION_ID, func_id as u64);
            ifc::set(&mut m, manage_pages_in::INPUT_NUM_ENTRIES, k as u64);
            let r = self.run(slot, "MANAGE_PAGES", &m, Pas::List(&addrs[..k]), 16, &mut [0u8; 16]);
            if let Err(e) = r {
                // Refused pages stay ours; after a lost command firmware may hold them.
                if !self.stage.cmd_stuck {
                    for a in &addrs[..k] {
                        self.pages.give_back(*a);
                    }
                }
                return Err(e);
            }
            left -= k;
        }
        Ok(n)
    }

    /// Tell firmware no pages can be given (`MANAGE_PAGES` op_mod `ALLOCATION_FAIL`).
    fn refuse_pages(&mut self, func_id: u16) -> Result<(), HcaError> {
        let mut m: [u8; manage_pages_in::SIZE] =
            input(consts::CMD_OP_MANAGE_PAGES, consts::MANAGE_PAGES_IN_OP_MOD_ALLOCATION_FAIL);
        ifc::set(&mut m, manage_pages_in::FUNCTION_ID, func_id as u64);
        self.run(SLOT_PAGES, "MANAGE_PAGES", &m, Pas::None, 16, &mut [0u8; 16])
    }

    /// `MANAGE_PAGES` (take) up to `n` pages back from `func_id` on `slot`; returns how many
    /// firmware returned.
    fn reclaim_pages(&mut self, slot: usize, func_id: u16, n: usize) -> Result<usize, HcaError> {
        let k = n.min(self.pages_per_cmd(self.cmd.max_out() - manage_pages_out::SIZE));
        let mut m: [u8; manage_pages_in::SIZE] =
            input(consts::CMD_OP_MANAGE_PAGES, consts::MANAGE_PAGES_IN_OP_MOD_HCA_RETURN_PAGES);
        ifc::set(&mut m, manage_pages_in::FUNCTION_ID, func_id as u64);
        ifc::set(&mut m, manage_pages_in::INPUT_NUM_ENTRIES, k as u64);
        let mut out = [0u8; manage_pages_out::SIZE];
        let outlen = manage_pages_out::SIZE + 8 * k;
        self.run(slot, "MANAGE_PAGES", &m, Pas::None, outlen, &mut out)?;
        let got = ifc::get(&out, manage_pages_out::OUTPUT_NUM_ENTRIES) as usize;
        if got > k {
            return Err(HcaError::BadPageReturn { addr: got as u64 });
        }
        for i in 0..got {
            let mut a = [0u8; 8];
            self.cmd.read_out(slot, manage_pages_out::PAS.at(i as u32).byte(), &mut a);
            let addr = u64::from_be_bytes(a);
            if !self.pages.give_back(addr) {
                return Err(HcaError::BadPageReturn { addr });
            }
        }
        self.reclaimed += got;
        Ok(got)
    }

    fn set_host_endianness(&mut self) -> Result<(), HcaError> {
        const LEN: usize = access_register_in::SIZE + register_host_endianness::SIZE;
        let mut a: [u8; LEN] = input(consts::CMD_OP_ACCESS_REG, 0); // op_mod 0: write
        ifc::set(&mut a, access_register_in::REGISTER_ID, REG_HOST_ENDIANNESS);
        let data = access_register_in::REGISTER_DATA;
        // he = 0: the host is little-endian as the PRM defines it for this register
        // (`MLX5_SET_HOST_ENDIANNESS`), the same on every host the kernel supports.
        ifc::set(&mut a, register_host_endianness::HE.within(data), 0);
        self.exec("ACCESS_REG", &a, Pas::None, &mut [0u8; 16 + register_host_endianness::SIZE])
    }

    fn query_cap(
        &mut self,
        ty: u16,
        mode: u16,
        out: &mut [u8; query_hca_cap_out::SIZE],
    ) -> Result<(), HcaError> {
        let q: [u8; query_hca_cap_in::SIZE] = input(consts::CMD_OP_QUERY_HCA_CAP, ty << 1 | mode);
        self.exec("QUERY_HCA_CAP", &q, Pas::None, out)
    }

    fn handle_caps(&mut self) -> Result<(), HcaError> {
        let cap_at = query_hca_cap_out::CAPABILITY.byte();
        let mut max = [0u8; query_hca_cap_out::SIZE];
        let mut cur = [0u8; query_hca_cap_out::SIZE];
        self.query_cap(CAP_GENERAL, CAP_MAX, &mut max)?;
        self.query_cap(CAP_GENERAL, CAP_CUR, &mut cur)?;

        // SET_HCA_CAP carries the current values with the driver's changes (kernel
        // `handle_hca_cap`, rdma-core `handle_hca_cap`); its op_mod is the capability type
        // shifted left by one, as for QUERY_HCA_CAP (kernel `set_caps`).
        let mut set: [u8; set_hca_cap_in::SIZE] =
            input(consts::CMD_OP_SET_HCA_CAP, consts::SET_HCA_CAP_OP_MOD_GENERAL_DEVICE << 1);
        let at = set_hca_cap_in::CAPABILITY.byte();
        set[at..at + cmd_hca_cap::SIZE].copy_from_slice(&cur[cap_at..cap_at + cmd_hca_cap::SIZE]);
        let cap = &mut set[at..];
        ifc::set(cap, cmd_hca_cap::CMDIF_CHECKSUM, 0);
        let page_shift = self.dma.page_size().trailing_zeros().saturating_sub(12);
        ifc::set(cap, cmd_hca_cap::LOG_UAR_PAGE_SZ, page_shift as u64);
        self.exec("SET_HCA_CAP", &set, Pas::None, &mut [0u8; 16])?;
        self.report.set_general_caps = true;

        self.query_cap(CAP_GENERAL, CAP_CUR, &mut cur)?;
        let mut caps = HcaCaps::from_general(&cur[cap_at..]);

        if caps.roce {
            let mut rmax = [0u8; query_hca_cap_out::SIZE];
            let mut rcur = [0u8; query_hca_cap_out::SIZE];
            self.query_cap(CAP_ROCE, CAP_MAX, &mut rmax)?;
            self.query_cap(CAP_ROCE, CAP_CUR, &mut rcur)?;
            let sport = roce_cap::SW_R_ROCE_SRC_UDP_PORT;
            let have = ifc::get(&rcur[cap_at..], sport) != 0;
            if !have && ifc::get(&rmax[cap_at..], sport) != 0 {
                let mut set: [u8; set_hca_cap_in::SIZE] =
                    input(consts::CMD_OP_SET_HCA_CAP, consts::SET_HCA_CAP_OP_MOD_ROCE << 1);
                set[at..at + roce_cap::SIZE]
                    .copy_from_slice(&rcur[cap_at..cap_at + roce_cap::SIZE]);
                ifc::set(&mut set[at..], sport, 1);
                self.exec("SET_HCA_CAP", &set, Pas::None, &mut [0u8; 16])?;
                self.report.set_roce_caps = true;
                caps.roce_sw_udp_sport = true;
            } else {
                caps.roce_sw_udp_sport = have;
            }
            caps.qp_ts_format = ifc::get(&rcur[cap_at..], roce_cap::QP_TS_FORMAT) as u8;
        }
        self.report.caps = caps;
        Ok(())
    }

    fn create_eqs(&mut self) -> Result<(), HcaError> {
        let a: [u8; alloc_uar_in::SIZE] = input(consts::CMD_OP_ALLOC_UAR, 0);
        let mut out = [0u8; alloc_uar_out::SIZE];
        self.exec("ALLOC_UAR", &a, Pas::None, &mut out)?;
        let uar = ifc::get(&out, alloc_uar_out::UAR) as u32;
        self.eq_uar = Some(uar);
        self.report.eq_uar = uar;

        let mask = (1u64 << EventType::PageRequest.raw())
            | (1u64 << EventType::Command.raw())
            | (1u64 << EventType::PortChange.raw());
        let eq = self.create_eq(self.cfg.async_eq_log_size, uar, mask)?;
        self.report.async_eqn = eq.eqn();
        self.async_eq = Some(eq);
        let eq = self.create_eq(self.cfg.comp_eq_log_size, uar, 0)?;
        self.report.comp_eqn = eq.eqn();
        self.comp_eq = Some(eq);
        Ok(())
    }

    fn create_eq(&mut self, log_size: u8, uar: u32, mask: u64) -> Result<EventQueue, HcaError> {
        let mut eq = EventQueue::alloc(self.dma, log_size)?;
        let mut c: [u8; create_eq_in::SIZE] = input(consts::CMD_OP_CREATE_EQ, 0);
        let ctx = create_eq_in::EQ_CONTEXT_ENTRY;
        ifc::set(&mut c, eqc::LOG_EQ_SIZE.within(ctx), log_size as u64);
        ifc::set(&mut c, eqc::UAR_PAGE.within(ctx), uar as u64);
        ifc::set(&mut c, eqc::INTR.within(ctx), 0);
        ifc::set(&mut c, eqc::LOG_PAGE_SIZE.within(ctx), 0); // 4 KiB pages, relative to 4 KiB
        ifc::set(&mut c, create_eq_in::EVENT_BITMASK, mask);
        let pas = Pas::Linear { base: eq.buf().bus().0, step: FW_PAGE as u64, count: eq.pages() };
        let mut out = [0u8; create_eq_out::SIZE];
        if let Err(e) = self.exec("CREATE_EQ", &c, pas, &mut out) {
            if !self.stage.cmd_stuck {
                eq.release(self.dma);
            }
            return Err(e);
        }
        let eqn = ifc::get(&out, create_eq_out::EQ_NUMBER) as u8;
        eq.created(self.bar, eqn, self.uar_offset(uar));
        Ok(eq)
    }

    fn destroy_eq(&mut self, eq: EventQueue) -> Result<(), HcaError> {
        let mut d: [u8; destroy_eq_in::SIZE] = input(consts::CMD_OP_DESTROY_EQ, 0);
        ifc::set(&mut d, destroy_eq_in::EQ_NUMBER, eq.eqn() as u64);
        let r = self.exec("DESTROY_EQ", &d, Pas::None, &mut [0u8; 16]);
        if r.is_ok() {
            eq.release(self.dma);
        }
        r
    }

    fn set_roce(&mut self, on: bool) -> Result<(), HcaError> {
        let mut m: [u8; modify_nic_vport_context_in::SIZE] =
            input(consts::CMD_OP_MODIFY_NIC_VPORT_CONTEXT, 0);
        let sel = modify_nic_vport_context_in::FIELD_SELECT;
        let ctx = modify_nic_vport_context_in::NIC_VPORT_CONTEXT;
        ifc::set(&mut m, modify_nic_vport_field_select::ROCE_EN.within(sel), 1);
        ifc::set(&mut m, nic_vport_context::ROCE_EN.within(ctx), on as u64);
        self.exec("MODIFY_NIC_VPORT_CONTEXT", &m, Pas::None, &mut [0u8; 16])
    }

    /// Service the event queues: answer page requests (give or take pages with
    /// `MANAGE_PAGES`), note command, CQ and port events. Call it from the poll loop; firmware
    /// that wants pages stalls until it is called.
    pub fn poll_events(&mut self) -> Result<EventSummary, HcaError> {
        let mut s = core::mem::take(&mut self.carried);
        if let Some(e) = self.carried_error.take() {
            return Err(e);
        }
        self.service_async(&mut s)?;
        if let Some(eq) = self.comp_eq.as_mut() {
            let mut n = 0;
            while eq.next_eqe().is_some() {
                s.cq_events += 1;
                n += 1;
            }
            if n > 0 {
                eq.update_ci(self.bar, true);
            }
        }
        Ok(s)
    }

    /// Service the asynchronous EQ from inside a command wait; the outcome is kept for the
    /// next [`poll_events`](Self::poll_events).
    fn drain_async(&mut self) {
        let mut s = core::mem::take(&mut self.carried);
        if let Err(e) = self.service_async(&mut s) {
            self.carried_error.get_or_insert(e);
        }
        self.carried = s;
    }

    fn service_async(&mut self, s: &mut EventSummary) -> Result<(), HcaError> {
        let mut consumed = 0u32;
        let mut result = Ok(());
        while let Some(raw) = self.async_eq.as_mut().and_then(|eq| eq.next_eqe()) {
            consumed += 1;
            match decode(&raw) {
                Event::PageRequest { func_id, num_pages } => {
                    s.page_requests += 1;
                    let r = if num_pages > 0 {
                        match self.give_pages(SLOT_PAGES, func_id, num_pages as u32) {
                            Err(e @ HcaError::PagePoolExhausted { .. }) => {
                                let _ = self.refuse_pages(func_id);
                                Err(e)
                            }
                            r => r.map(|n| s.pages_given += n),
                        }
                    } else {
                        let want = num_pages.unsigned_abs() as usize;
                        let mut got = 0;
                        let mut r = Ok(());
                        while got < want {
                            match self.reclaim_pages(SLOT_PAGES, func_id, want - got) {
                                Ok(0) => break,
                                Ok(n) => got += n,
                                Err(e) => {
                                    r = Err(e);
                                    break;
                                }
                            }
                        }
                        s.pages_reclaimed += got as u32;
                        r
                    };
                    if let Err(e) = r {
                        result = Err(e);
                        break;
                    }
                }
                Event::Command { .. } => s.command_events += 1,
                Event::PortChange { .. } => s.port_changes += 1,
                Event::Completion { .. } => s.cq_events += 1,
                Event::Other { .. } => s.other += 1,
            }
            if consumed.is_multiple_of(EQ_SPARE) {
                if let Some(eq) = self.async_eq.as_ref() {
                    eq.update_ci(self.bar, false);
                }
            }
        }
        if consumed > 0 {
            if let Some(eq) = self.async_eq.as_ref() {
                eq.update_ci(self.bar, true);
            }
        }
        result
    }

    /// Undo bring-up as far as it went; returns the first error and the pages still lent.
    fn unwind(&mut self) -> Result<usize, HcaError> {
        let mut first: Option<HcaError> = None;
        let mut note = |r: Result<(), HcaError>| {
            if let Err(e) = r {
                first.get_or_insert(e);
            }
        };
        if self.stage.roce {
            note(self.set_roce(false));
            self.stage.roce = false;
        }
        for eq in [self.comp_eq.take(), self.async_eq.take()].into_iter().flatten() {
            note(self.destroy_eq(eq));
        }
        if let Some(uar) = self.eq_uar.take() {
            let mut d: [u8; dealloc_uar_in::SIZE] = input(consts::CMD_OP_DEALLOC_UAR, 0);
            ifc::set(&mut d, dealloc_uar_in::UAR, uar as u64);
            note(self.exec("DEALLOC_UAR", &d, Pas::None, &mut [0u8; 16]));
        }
        if self.stage.initialized {
            let mut t: [u8; teardown_hca_in::SIZE] = input(consts::CMD_OP_TEARDOWN_HCA, 0);
            ifc::set(
                &mut t,
                teardown_hca_in::PROFILE,
                consts::TEARDOWN_HCA_IN_PROFILE_GRACEFUL_CLOSE.into(),
            );
            note(self.exec("TEARDOWN_HCA", &t, Pas::None, &mut [0u8; 16]));
            self.stage.initialized = false;
        }
        if self.stage.enabled {
            note(self.reclaim_all());
            let mut d: [u8; disable_hca_in::SIZE] = input(consts::CMD_OP_DISABLE_HCA, 0);
            ifc::set(&mut d, disable_hca_in::FUNCTION_ID, 0);
            note(self.exec("DISABLE_HCA", &d, Pas::None, &mut [0u8; 16]));
            self.stage.enabled = false;
        }
        let outstanding = self.pages.release(self.dma);
        match first {
            Some(e) => Err(e),
            None if outstanding > 0 => Err(HcaError::PagesNotReturned { outstanding }),
            None => Ok(outstanding),
        }
    }

    /// Take every lent page back (kernel `mlx5_reclaim_startup_pages`), within the bound.
    fn reclaim_all(&mut self) -> Result<(), HcaError> {
        if self.stage.cmd_stuck {
            return Err(HcaError::PagesNotReturned { outstanding: self.pages.in_use() });
        }
        let func_id = self.report.func_id;
        let mut deadline = Deadline::after(self.clock, self.cfg.reclaim_timeout_ns);
        while self.pages.in_use() > 0 {
            let n = self.reclaim_pages(SLOT_CMD, func_id, self.pages.in_use())?;
            if n > 0 {
                // Progress restarts the bound, as the kernel's reclaim loop does.
                deadline = Deadline::after(self.clock, self.cfg.reclaim_timeout_ns);
            } else if deadline.expired(self.clock) {
                return Err(HcaError::PagesNotReturned { outstanding: self.pages.in_use() });
            }
        }
        Ok(())
    }

    /// Tear the HCA down (see the module docs). Every resource made through
    /// [`FwControl`](crate::fw_control::FwControl) must have been destroyed first.
    pub fn teardown(mut self) -> Result<TeardownReport, HcaError> {
        let before = self.reclaimed;
        let r = self.unwind();
        let report = TeardownReport {
            pages_reclaimed: self.reclaimed - before,
            pages_outstanding: self.pages.in_use(),
        };
        self.release_queue();
        r.map(|_| report)
    }

    /// Give the command queue's memory back, unless a command never completed (firmware may
    /// still write its entry and mailboxes).
    fn release_queue(self) {
        let Hca { cmd, stage, dma, .. } = self;
        if !stage.cmd_stuck {
            cmd.release(dma);
        }
    }
}
