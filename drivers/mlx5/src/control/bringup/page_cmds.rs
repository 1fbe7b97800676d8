//! Firmware pages over the command interface: `QUERY_PAGES` and `MANAGE_PAGES` (give, refuse,
//! reclaim), from and back to the [`PagePool`](super::PagePool).

use rdma_pmd_hal::Deadline;

use crate::control::cmd::{Pas, SLOT_CMD, SLOT_PAGES};
use crate::layout::be;
use crate::layout::ifc::{self, consts, generated::*};

use super::{input, Hca, HcaError};

/// Pages per `MANAGE_PAGES` (also bounded by the mailboxes).
const PAGE_BATCH: usize = 128;

impl Hca<'_> {
    pub(super) fn query_pages(&mut self, op_mod: u16) -> Result<(u16, u32), HcaError> {
        let mut q: [u8; query_pages_in::SIZE] = input(consts::CMD_OP_QUERY_PAGES, op_mod);
        ifc::set(&mut q, query_pages_in::FUNCTION_ID, 0);
        let mut out = [0u8; query_pages_out::SIZE];
        self.exec("QUERY_PAGES", &q, Pas::None, &mut out)?;
        let func_id = ifc::get(&out, query_pages_out::FUNCTION_ID) as u16;
        let raw = ifc::get(&out, query_pages_out::NUM_PAGES);
        // A signed count (kernel `mlx5_cmd_query_pages`); asking for fewer than none at boot or
        // init is nonsense. Too many is the pool's to refuse (`give_pages`).
        if (raw as u32 as i32) < 0 {
            return Err(HcaError::BadFirmwareValue {
                field: "query_pages_out.num_pages",
                value: raw,
            });
        }
        Ok((func_id, raw as u32))
    }

    pub(super) fn pages_per_cmd(&self, by_mailbox: usize) -> usize {
        PAGE_BATCH.min(by_mailbox / 8).max(1)
    }

    /// `MANAGE_PAGES` (give) `n` pages to `func_id`, in batches, on `slot`.
    pub(super) fn give_pages(
        &mut self,
        slot: usize,
        func_id: u16,
        n: u32,
    ) -> Result<u32, HcaError> {
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
    pub(super) fn refuse_pages(&mut self, func_id: u16) -> Result<(), HcaError> {
        let mut m: [u8; manage_pages_in::SIZE] =
            input(consts::CMD_OP_MANAGE_PAGES, consts::MANAGE_PAGES_IN_OP_MOD_ALLOCATION_FAIL);
        ifc::set(&mut m, manage_pages_in::FUNCTION_ID, func_id as u64);
        self.run(SLOT_PAGES, "MANAGE_PAGES", &m, Pas::None, 16, &mut [0u8; 16])
    }

    /// `MANAGE_PAGES` (take) up to `n` pages back from `func_id` on `slot`; returns how many
    /// firmware returned.
    pub(super) fn reclaim_pages(
        &mut self,
        slot: usize,
        func_id: u16,
        n: usize,
    ) -> Result<usize, HcaError> {
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
            let addr = be::get64(&a, 0);
            if !self.pages.give_back(addr) {
                return Err(HcaError::BadPageReturn { addr });
            }
        }
        self.reclaimed += got;
        Ok(got)
    }

    /// Take every lent page back (kernel `mlx5_reclaim_startup_pages`), within the bound.
    pub(super) fn reclaim_all(&mut self) -> Result<(), HcaError> {
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
}
