//! `ALLOC_UAR`, `DEALLOC_UAR`, `ALLOC_PD`, `DEALLOC_PD`.

use super::{busy, limit, model_err, no_such};
use crate::fw::codes::{syndrome as syn, CmdStatus};
use crate::fw::decoded::{DeallocPd, DeallocUar};
use crate::fw::hca::{fail, Hca, Res};
use crate::fw::ifc::{self, cmd_hca_cap as gen};

impl Hca {
    pub(super) fn alloc_uar(&mut self, out: &mut [u8]) -> Res {
        let idx = self.shared.alloc_uar().map_err(model_err)?;
        self.uars.insert(idx);
        ifc::alloc_uar_out::UAR.set(out, u64::from(idx));
        Ok(())
    }

    pub(super) fn dealloc_uar(&mut self, d: &DeallocUar) -> Res {
        let idx = d.uar;
        if idx >= self.shared.dev().uar_pages {
            return Err(fail(CmdStatus::BadIndex, syn::INDEX_RANGE));
        }
        if !self.uars.contains(&idx) {
            return Err(no_such());
        }
        // The EQ table's lock is a leaf: released before the device lock is taken.
        let eq_uses = self.eqs().values().any(|e| e.uar == idx);
        if self.cqs.values().any(|c| c.uar == idx)
            || self.qps.values().any(|q| q.uar == idx)
            || eq_uses
            || self.shared.dev().eth.uses_uar(idx)
        {
            return Err(busy());
        }
        self.shared.dealloc_uar(idx).map_err(model_err)?;
        self.uars.remove(&idx);
        Ok(())
    }

    pub(super) fn alloc_pd(&mut self, out: &mut [u8]) -> Res {
        limit(self.pds.len(), self.cap(gen::LOG_MAX_PD))?;
        let pd = self.shared.alloc_pd().map_err(model_err)?;
        self.pds.insert(pd);
        ifc::alloc_pd_out::PD.set(out, u64::from(pd));
        Ok(())
    }

    pub(super) fn dealloc_pd(&mut self, d: &DeallocPd) -> Res {
        let pd = d.pd;
        if !self.pds.contains(&pd) {
            return Err(no_such());
        }
        if self.mkeys.values().any(|m| m.pd == pd)
            || self.qps.values().any(|q| q.pd == pd)
            || self.shared.dev().eth.uses_pd(pd)
        {
            return Err(busy());
        }
        self.shared.dealloc_pd(pd).map_err(model_err)?;
        self.pds.remove(&pd);
        Ok(())
    }
}
