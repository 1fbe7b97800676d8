//! The event queues bring-up creates (`CREATE_EQ` / `DESTROY_EQ`) and the servicing of the
//! asynchronous one: page requests, command completions, port changes, and the asynchronous
//! error events (delivered typed in [`EventSummary::errors`]).

use crate::control::cmd::{Pas, SLOT_PAGES};
use crate::layout::ifc::{self, consts, generated::*};

use crate::control::Uar;

use super::eq::{async_event_mask, decode, Event, EventQueue, EventType, RELEASE_ALL_PAGES};
use super::{input, AsyncError, EventSummary, Hca, HcaError, FW_PAGE};

/// EQEs consumed before the consumer index must be reported (`MLX5_NUM_SPARE_EQE`).
const EQ_SPARE: u32 = 0x80;

impl Hca<'_> {
    pub(super) fn create_eqs(&mut self) -> Result<(), HcaError> {
        let a: [u8; alloc_uar_in::SIZE] = input(consts::CMD_OP_ALLOC_UAR, 0);
        let mut out = [0u8; alloc_uar_out::SIZE];
        self.exec("ALLOC_UAR", &a, Pas::None, &mut out)?;
        let index = ifc::get(&out, alloc_uar_out::UAR) as u32;
        // Firmware allocated it, whatever it is: the unwind deallocates it.
        self.eq_uar = Some(index);
        self.report.eq_uar = index;
        let uar = self.uar(index)?;

        let eq = self.create_eq(self.cfg.async_eq_log_size, uar, async_event_mask())?;
        self.report.async_eqn = eq.eqn();
        self.async_eq = Some(eq);
        let eq = self.create_eq(self.cfg.comp_eq_log_size, uar, 0)?;
        self.report.comp_eqn = eq.eqn();
        self.comp_eq = Some(eq);
        Ok(())
    }

    pub(super) fn create_eq(
        &mut self,
        log_size: u8,
        uar: Uar,
        mask: u64,
    ) -> Result<EventQueue, HcaError> {
        let mut eq = EventQueue::alloc(self.dma, log_size)?;
        let mut c: [u8; create_eq_in::SIZE] = input(consts::CMD_OP_CREATE_EQ, 0);
        let ctx = create_eq_in::EQ_CONTEXT_ENTRY;
        ifc::set(&mut c, eqc::LOG_EQ_SIZE.within(ctx), log_size as u64);
        ifc::set(&mut c, eqc::UAR_PAGE.within(ctx), uar.index as u64);
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
        if self.async_eq.as_ref().is_some_and(|a| a.eqn() == eqn) {
            // Two live EQs cannot share a number; which one a DESTROY_EQ would destroy is
            // unknown, so firmware may write this ring for good: keep it.
            eq.keep();
            let value = eqn.into();
            return Err(HcaError::BadFirmwareValue { field: "create_eq_out.eq_number", value });
        }
        eq.created(self.bar, eqn, uar.bar_offset);
        Ok(eq)
    }

    pub(super) fn destroy_eq(&mut self, eq: EventQueue) -> Result<(), HcaError> {
        let mut d: [u8; destroy_eq_in::SIZE] = input(consts::CMD_OP_DESTROY_EQ, 0);
        ifc::set(&mut d, destroy_eq_in::EQ_NUMBER, eq.eqn() as u64);
        let r = self.exec("DESTROY_EQ", &d, Pas::None, &mut [0u8; 16]);
        match r {
            Ok(()) => eq.release(self.dma),
            Err(_) => eq.keep(),
        }
        r
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
            // At most one ring's worth: firmware that keeps posting cannot hold the caller.
            let budget = 1u32 << eq.log_size();
            let mut n = 0;
            while n < budget && eq.next_eqe().is_some() {
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
    pub(super) fn drain_async(&mut self) {
        let mut s = core::mem::take(&mut self.carried);
        if let Err(e) = self.service_async(&mut s) {
            self.carried_error.get_or_insert(e);
        }
        self.carried = s;
    }

    pub(super) fn service_async(&mut self, s: &mut EventSummary) -> Result<(), HcaError> {
        let mut consumed = 0u32;
        let mut result = Ok(());
        // At most one ring's worth per call: each page request runs a command, and firmware
        // that answers every command with another request would otherwise never let go.
        let budget = self.async_eq.as_ref().map_or(0, |eq| 1u32 << eq.log_size());
        while consumed < budget {
            let Some(raw) = self.async_eq.as_mut().and_then(|eq| eq.next_eqe()) else { break };
            consumed += 1;
            match decode(&raw) {
                Event::PageRequest { func_id, num_pages, ec_function } => {
                    s.page_requests += 1;
                    // With `release_all_pages` set at bring-up, firmware may ask for every page
                    // of the function back at once (kernel `pagealloc.c` `release_all_pages`).
                    let num_pages = if ec_function & RELEASE_ALL_PAGES != 0 {
                        -(self.pages.in_use().min(i32::MAX as usize) as i32)
                    } else {
                        num_pages
                    };
                    let r = if func_id != self.report.func_id {
                        // Pages are lent to, and reclaimed from, this function only.
                        let value = func_id.into();
                        Err(HcaError::BadFirmwareValue { field: "page_request.func_id", value })
                    } else if num_pages < 0
                        && num_pages.unsigned_abs() as usize > self.pages.in_use()
                    {
                        // Firmware offers back more pages than it holds.
                        let value = num_pages as u32 as u64;
                        Err(HcaError::BadFirmwareValue { field: "page_request.num_pages", value })
                    } else if num_pages > 0 {
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
                Event::CqError { cqn, syndrome } => s.push_error(AsyncError::Cq { cqn, syndrome }),
                Event::Queue { ty, kind, num } => match ty {
                    EventType::WqCatasError
                    | EventType::WqInvalReqError
                    | EventType::WqAccessError
                    | EventType::PathMigFailed
                    | EventType::SrqCatasError => s.push_error(AsyncError::Queue { ty, kind, num }),
                    _ => s.queue_events += 1,
                },
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
}
