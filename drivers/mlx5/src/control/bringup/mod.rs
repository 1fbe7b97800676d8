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
//! 6. `ACCESS_REG` host endianness, on a physical function only (the kernel's `set_hca_ctrl`
//!    skips it on a VF, which does not own the register: [`HcaConfig::function`]);
//! 7. `QUERY_HCA_CAP` / `SET_HCA_CAP`, general (command checksums off, the system page as UAR
//!    page, the kernel's QP count, cache line, page release: [`caps::general_cap_changes`])
//!    and RoCE (software-chosen UDP source port) capabilities;
//! 8. `QUERY_PAGES` (init) and `MANAGE_PAGES`;
//! 9. `INIT_HCA`;
//! 10. `ALLOC_UAR` and two `CREATE_EQ`: an asynchronous EQ for page requests, command
//!     completions, port changes and the kernel's asynchronous error events (CQ errors, work
//!     queue catastrophes and access errors, path migration), serviced by
//!     [`Hca::poll_events`], and a completion EQ that CQs name;
//! 11. on an Ethernet port, `MODIFY_NIC_VPORT_CONTEXT` with `roce_en`.
//!
//! [`Hca::teardown`] undoes it in reverse: RoCE off, EQs and UAR, `TEARDOWN_HCA`, every page
//! reclaimed with `MANAGE_PAGES`, `DISABLE_HCA`, memory given back. A failed bring-up unwinds
//! the same way. Memory that firmware might still write is deliberately not given back: the
//! command queue and its mailboxes after a command that never completed (or was answered with
//! another token) or while `DISABLE_HCA` has not succeeded; an EQ ring whose `DESTROY_EQ`
//! failed; pages it never returned. When `TEARDOWN_HCA` fails, nothing after it is attempted
//! (the kernel's `mlx5_function_close`: "tear_down_hca failed, skip cleanup").
//!
//! Firmware is not trusted with the driver's memory safety: every value it returns that is
//! used as an index, offset, shift, count or number (UAR index, `log_uar_page_sz`, the
//! `log_max_*` sizes, page counts and function ids, EQ numbers, tokens) is range-checked first,
//! and a bad one is [`HcaError::BadFirmwareValue`] (or [`CmdError::TokenMismatch`]); event
//! queues are serviced at most one ring's worth per call, so firmware that keeps posting
//! cannot hold the driver in a loop.
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

pub mod caps;
pub mod eq;
mod error;
mod events;
mod page_cmds;
pub mod pages;
mod report;
#[cfg(test)]
mod tests;

use rdma_pmd_hal::{Clock, Deadline, Dma, Mmio};

use crate::control::cmd::{CmdConfig, CmdError, CmdQueue, Pas, SLOT_CMD};
use crate::control::init_seg::{InitSeg, InitWaitError, CMDIF_REV};
use crate::control::Uar;
use crate::layout::ifc::{self, consts, generated::*};
use crate::layout::uar::uar_in_bar;
pub use caps::{HcaCaps, PortType};
use eq::EventQueue;
pub use error::HcaError;
pub use pages::{bitmap_words, PagePool, FW_PAGE};
pub use report::{AsyncError, BringupReport, EventSummary, TeardownReport};

/// `MLX5_REG_HOST_ENDIANNESS` (kernel `driver.h`).
const REG_HOST_ENDIANNESS: u64 = 0x7004;

/// The cache line [`HcaConfig::default`] assumes: 64 bytes on x86_64 and on most aarch64
/// cores (the kernel reads the real one; a 128-byte host should say so).
pub const DEFAULT_CACHE_LINE: u16 = 64;

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
    /// Which kind of PCI function the HCA is: a virtual function skips the host endianness
    /// register, as the kernel's `set_hca_ctrl` does (`mlx5_core_is_pf`).
    pub function: Function,
    /// The host's cache line in bytes (the kernel's `cache_line_size()`), for
    /// `cmd_hca_cap.cache_line_128byte`.
    pub cache_line: u16,
}

/// The kind of PCI function (the kernel's `MLX5_PCI_DEV_IS_VF` flag of its device table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Function {
    /// A physical function.
    #[default]
    Physical,
    /// An SR-IOV virtual function (for instance one passed through to a guest with VFIO).
    Virtual,
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
            function: Function::Physical,
            cache_line: DEFAULT_CACHE_LINE,
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Stage {
    /// `ENABLE_HCA` succeeded and no `DISABLE_HCA` has since: firmware may use the queue.
    enabled: bool,
    /// `INIT_HCA` succeeded and no `TEARDOWN_HCA` has since.
    initialized: bool,
    roce: bool,
    /// A command never completed (or came back with another token): firmware may still write
    /// the queue, its mailboxes, and whatever that command handed over.
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

/// A zeroed command input of `N` bytes with its opcode and op_mod.
pub(crate) fn input<const N: usize>(opcode: u16, op_mod: u16) -> [u8; N] {
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
                set_host_endianness: false,
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

        if self.cfg.function == Function::Physical {
            self.set_host_endianness()?;
            self.report.set_host_endianness = true;
        }
        self.handle_caps()?;

        let (func_id, init) = self.query_pages(consts::QUERY_PAGES_IN_OP_MOD_INIT_PAGES)?;
        if func_id != self.report.func_id {
            // Pages go back at teardown from the function that got them: one function.
            let value = func_id.into();
            return Err(HcaError::BadFirmwareValue { field: "query_pages_out.function_id", value });
        }
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
    pub fn health(&self) -> Option<crate::control::init_seg::Health> {
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

    /// UAR page `index`, as `ALLOC_UAR` returned it, with its byte offset in BAR0: UAR pages
    /// are `4 KiB << log_uar_page_sz` (bring-up sets `log_uar_page_sz` to the system page size
    /// and checks that firmware took it). An index whose page does not lie inside the BAR
    /// (doorbells and BlueFlame register) is firmware's error.
    pub fn uar(&self, index: u32) -> Result<Uar, HcaError> {
        let bad = HcaError::BadFirmwareValue { field: "alloc_uar_out.uar", value: index.into() };
        let page = 1usize.checked_shl(12 + u32::from(self.report.caps.log_uar_page_sz));
        let bar_offset = page.and_then(|p| (index as usize).checked_mul(p)).ok_or(bad)?;
        let uar = Uar { index, bar_offset };
        if uar_in_bar(
            self.bar.size(),
            uar.bar_offset,
            self.report.caps.device_caps().log_bf_reg_size,
        ) {
            Ok(uar)
        } else {
            Err(bad)
        }
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
        if matches!(
            error,
            CmdError::Timeout { .. } | CmdError::Health { .. } | CmdError::TokenMismatch { .. }
        ) {
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
                error: CmdError::Failed { status: crate::control::cmd::CmdStatus::BadOp, .. },
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

    fn set_roce(&mut self, on: bool) -> Result<(), HcaError> {
        let mut m: [u8; modify_nic_vport_context_in::SIZE] =
            input(consts::CMD_OP_MODIFY_NIC_VPORT_CONTEXT, 0);
        let sel = modify_nic_vport_context_in::FIELD_SELECT;
        let ctx = modify_nic_vport_context_in::NIC_VPORT_CONTEXT;
        ifc::set(&mut m, modify_nic_vport_field_select::ROCE_EN.within(sel), 1);
        ifc::set(&mut m, nic_vport_context::ROCE_EN.within(ctx), on as u64);
        self.exec("MODIFY_NIC_VPORT_CONTEXT", &m, Pas::None, &mut [0u8; 16])
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
            let r = self.exec("TEARDOWN_HCA", &t, Pas::None, &mut [0u8; 16]);
            // Only a torn-down HCA is left alone by firmware; otherwise (kernel
            // `mlx5_function_close`) skip the cleanup: no reclaim, no DISABLE_HCA, and the
            // queue and pages stay firmware's.
            self.stage.initialized = r.is_err();
            note(r);
        }
        if self.stage.enabled && !self.stage.initialized {
            note(self.reclaim_all());
            let mut d: [u8; disable_hca_in::SIZE] = input(consts::CMD_OP_DISABLE_HCA, 0);
            ifc::set(&mut d, disable_hca_in::FUNCTION_ID, 0);
            let r = self.exec("DISABLE_HCA", &d, Pas::None, &mut [0u8; 16]);
            // Firmware that refused to disable the function may still use the queue.
            self.stage.enabled = r.is_err();
            note(r);
        }
        let outstanding = self.pages.release(self.dma);
        match first {
            Some(e) => Err(e),
            None if outstanding > 0 => Err(HcaError::PagesNotReturned { outstanding }),
            None => Ok(outstanding),
        }
    }

    /// Tear the HCA down (see the module docs). Every resource made through
    /// [`FwControl`](crate::control::fw::FwControl) must have been destroyed first.
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

    /// Give the command queue's memory back, unless firmware may still write its entries and
    /// mailboxes: a command never completed, or the function is still enabled (`DISABLE_HCA`
    /// failed or was never reached). Then it is kept for good.
    fn release_queue(self) {
        let Hca { cmd, stage, dma, .. } = self;
        if !stage.cmd_stuck && !stage.enabled {
            cmd.release(dma);
        }
    }
}
