//! `ALLOC_UAR`, `DEALLOC_UAR`, `ALLOC_PD`, `DEALLOC_PD`.

use super::{busy, limit, model_err, no_such};
use crate::fw::codes::{syndrome as syn, CmdStatus};
use crate::fw::hca::{fail, Hca, Res};
use crate::fw::ifc::{self, cmd_hca_cap as gen};
use rdma_pmd_mlx5::control::{Control, Pdn};

impl Hca {
    pub(super) fn alloc_uar(&mut self, out: &mut [u8]) -> Res {
        let uar = self.control.alloc_uar().map_err(model_err)?;
        self.uars.insert(uar.index, uar);
        ifc::alloc_uar_out::UAR.set(out, u64::from(uar.index));
        Ok(())
    }

    pub(super) fn dealloc_uar(&mut self, inp: &[u8]) -> Res {
        let idx = ifc::dealloc_uar_in::UAR.get(inp) as u32;
        if idx >= self.shared.dev().uar_pages {
            return Err(fail(CmdStatus::BadIndex, syn::INDEX_RANGE));
        }
        let uar = *self.uars.get(&idx).ok_or_else(no_such)?;
        if self.cqs.values().any(|c| c.uar == idx)
            || self.qps.values().any(|q| q.uar == idx)
            || self.eqs.values().any(|e| e.uar == idx)
        {
            return Err(busy());
        }
        self.control.dealloc_uar(uar).map_err(model_err)?;
        self.uars.remove(&idx);
        Ok(())
    }

    pub(super) fn alloc_pd(&mut self, out: &mut [u8]) -> Res {
        limit(self.pds.len(), self.cap(gen::LOG_MAX_PD))?;
        let pd = self.control.alloc_pd().map_err(model_err)?;
        self.pds.insert(pd.0);
        ifc::alloc_pd_out::PD.set(out, u64::from(pd.0));
        Ok(())
    }

    pub(super) fn dealloc_pd(&mut self, inp: &[u8]) -> Res {
        let pd = ifc::dealloc_pd_in::PD.get(inp) as u32;
        if !self.pds.contains(&pd) {
            return Err(no_such());
        }
        if self.mkeys.values().any(|m| m.pd == pd) || self.qps.values().any(|q| q.pd == pd) {
            return Err(busy());
        }
        self.control.dealloc_pd(Pdn(pd)).map_err(model_err)?;
        self.pds.remove(&pd);
        Ok(())
    }
}
