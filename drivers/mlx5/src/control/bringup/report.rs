//! What bring-up, event servicing and teardown report.

use core::fmt;

use crate::control::init_seg::FwVersion;

use super::eq::{EventType, QueueKind};
use super::HcaCaps;

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
    /// Whether the host endianness register was written (physical functions only).
    pub set_host_endianness: bool,
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

/// An asynchronous error event firmware reported: before the async EQ subscribed to them these
/// failures were silent (a QP went to error, a CQ overran, and nothing said so).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncError {
    /// `MLX5_EVENT_TYPE_CQ_ERROR`: CQ `cqn` overran (syndrome 1) or saw an access violation
    /// (2); its QPs are in error.
    Cq {
        /// The CQ.
        cqn: u32,
        /// `mlx5_eqe_cq_err.syndrome`.
        syndrome: u8,
    },
    /// A work-queue error event: `WQ_CATAS_ERROR`, `WQ_INVAL_REQ_ERROR`, `WQ_ACCESS_ERROR`,
    /// `PATH_MIG_FAILED`, `SRQ_CATAS_ERROR`. The queue is in error.
    Queue {
        /// Which event.
        ty: EventType,
        /// What `num` names.
        kind: QueueKind,
        /// The QP (or SRQ, RQ, SQ) number.
        num: u32,
    },
}

impl fmt::Display for AsyncError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AsyncError::Cq { cqn, syndrome } => {
                write!(f, "CQ {cqn:#x} error, syndrome {syndrome:#x}")
            }
            AsyncError::Queue { ty, kind, num } => write!(f, "{ty:?} on {kind:?} {num:#x}"),
        }
    }
}

/// How many [`AsyncError`]s one [`EventSummary`] keeps (the rest are counted).
pub const ASYNC_ERRORS_KEPT: usize = 4;

/// Events serviced by one [`Hca::poll_events`](super::Hca::poll_events) call.
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
    /// Informational work-queue events (communication established, path migrated, SQ
    /// drained, SRQ last WQE and limit).
    pub queue_events: u32,
    /// The first `ASYNC_ERRORS_KEPT` (4) error events, in order.
    pub errors: [Option<AsyncError>; ASYNC_ERRORS_KEPT],
    /// Error events seen, kept or not.
    pub error_count: u32,
    /// Other events.
    pub other: u32,
}

impl EventSummary {
    /// Record an error event (kept while there is room, always counted).
    pub fn push_error(&mut self, e: AsyncError) {
        if let Some(slot) = self.errors.iter_mut().find(|s| s.is_none()) {
            *slot = Some(e);
        }
        self.error_count = self.error_count.saturating_add(1);
    }

    /// The error events kept.
    pub fn errors(&self) -> impl Iterator<Item = AsyncError> + '_ {
        self.errors.iter().flatten().copied()
    }
}

/// What [`Hca::teardown`](super::Hca::teardown) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TeardownReport {
    /// Pages firmware returned.
    pub pages_reclaimed: usize,
    /// Pages still lent (kept, not freed).
    pub pages_outstanding: usize,
}
