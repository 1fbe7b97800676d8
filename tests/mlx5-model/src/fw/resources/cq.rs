//! `CREATE_CQ`, `DESTROY_CQ`.

use super::{busy, limit, model_err, no_such, queue_pages, reachable, unsupported, Start};
use crate::fw::codes::{syndrome as syn, CmdStatus};
use crate::fw::decoded::{CreateCq, DestroyCq};
use crate::fw::hca::{fail, CqObj, Hca, Res};
use crate::fw::ifc::{self, cmd_hca_cap as gen};

impl Hca {
    pub(super) fn create_cq(&mut self, d: &CreateCq, out: &mut [u8]) -> Res {
        limit(self.cqs.len(), self.cap(gen::LOG_MAX_CQ))?;
        let c = &d.cq_context;
        let log_size = c.log_cq_size;
        if u64::from(log_size) > self.cap(gen::LOG_MAX_CQ_SZ) {
            return Err(fail(CmdStatus::BadSize, syn::QUEUE_TOO_BIG));
        }
        // The PRM has a CQ start at its first page's first byte: 6.12 `mlx5_ib.h`
        // `mlx5_umem_find_best_cq_quantized_pgoff` ("PRM says page_offset must be 0 for CQ")
        // picks pages that make it 0, where QPs, SRQs and WQs may start inside a page.
        if c.cqe_sz != 0
            || c.cqe_comp_en
            || c.page_offset != 0
            || c.dbr_umem_valid
            || d.cq_umem_valid
        {
            return Err(unsupported());
        }
        let uar = c.uar_page;
        if !self.uars.contains(&uar) {
            return Err(no_such());
        }
        let Ok(eqn) = u8::try_from(c.c_eqn) else {
            return Err(fail(CmdStatus::BadIndex, syn::INDEX_RANGE));
        };
        if !self.eqs().contains_key(&eqn) {
            return Err(no_such());
        }
        let shift = 12 + u32::from(c.log_page_size);
        let buf = queue_pages(self, &d.pas, shift, Start::AT_PAGE, 64u64 << log_size)?;
        let dbrec = c.dbr_addr;
        reachable(self, dbrec, 8)?;
        let cqn = self.shared.create_cq(log_size, buf, dbrec, uar).map_err(model_err)?;
        // Its completion events go to that EQ (`comp_event`).
        if let Some(cq) = self.shared.dev().cqs.get_mut(&cqn) {
            cq.eqn = Some(eqn);
        }
        self.cqs.insert(cqn, CqObj { uar, eqn });
        ifc::create_cq_out::CQN.set(out, u64::from(cqn));
        Ok(())
    }

    pub(super) fn destroy_cq(&mut self, d: &DestroyCq) -> Res {
        let cqn = d.cqn;
        if !self.cqs.contains_key(&cqn) {
            return Err(no_such());
        }
        if self.qps.values().any(|q| q.cqs.contains(&cqn))
            || self.srq_holds_cq(cqn)
            || self.shared.dev().eth.uses_cq(cqn)
        {
            return Err(busy());
        }
        self.shared.destroy_cq(cqn).map_err(model_err)?;
        self.cqs.remove(&cqn);
        Ok(())
    }
}
