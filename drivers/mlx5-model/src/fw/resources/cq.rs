//! `CREATE_CQ`, `DESTROY_CQ`.

use rdma_pmd::BusAddr;
use rdma_pmd_mlx5::control::{Control, CqParams, Cqn};

use super::{busy, contiguous_queue, limit, model_err, no_such, reachable, unsupported};
use crate::fw::codes::{syndrome as syn, CmdStatus};
use crate::fw::hca::{fail, CqObj, Hca, Res};
use crate::fw::ifc::{self, cmd_hca_cap as gen, cqc, Field};

impl Hca {
    pub(super) fn create_cq(&mut self, inp: &[u8], out: &mut [u8]) -> Res {
        use ifc::create_cq_in as i;
        limit(self.cqs.len(), self.cap(gen::LOG_MAX_CQ))?;
        let c = |f: Field| f.at(i::CQ_CONTEXT).get(inp);
        let log_size = c(cqc::LOG_CQ_SIZE) as u8;
        if u64::from(log_size) > self.cap(gen::LOG_MAX_CQ_SZ) {
            return Err(fail(CmdStatus::BadSize, syn::QUEUE_TOO_BIG));
        }
        if c(cqc::CQE_SZ) != 0
            || c(cqc::CQE_COMP_EN) != 0
            || c(cqc::PAGE_OFFSET) != 0
            || c(cqc::DBR_UMEM_VALID) != 0
            || i::CQ_UMEM_VALID.get(inp) != 0
        {
            return Err(unsupported());
        }
        let uar_idx = c(cqc::UAR_PAGE) as u32;
        let uar = *self.uars.get(&uar_idx).ok_or_else(no_such)?;
        let eqn = c(cqc::C_EQN);
        if eqn > u64::from(u8::MAX) {
            return Err(fail(CmdStatus::BadIndex, syn::INDEX_RANGE));
        }
        let eqn = eqn as u8;
        if !self.eqs.contains_key(&eqn) {
            return Err(no_such());
        }
        let shift = 12 + c(cqc::LOG_PAGE_SIZE) as u32;
        let buf = contiguous_queue(self, inp, i::PAS, shift, 64u64 << log_size)?;
        let dbrec = c(cqc::DBR_ADDR);
        reachable(self, dbrec, 8)?;
        let p = CqParams { log_size, buf: BusAddr(buf), dbrec: BusAddr(dbrec), uar };
        let cqn = self.control.create_cq(&p).map_err(model_err)?;
        self.cqs.insert(cqn.0, CqObj { uar: uar_idx, eqn });
        ifc::create_cq_out::CQN.set(out, u64::from(cqn.0));
        Ok(())
    }

    pub(super) fn destroy_cq(&mut self, inp: &[u8]) -> Res {
        let cqn = ifc::destroy_cq_in::CQN.get(inp) as u32;
        if !self.cqs.contains_key(&cqn) {
            return Err(no_such());
        }
        if self.qps.values().any(|q| q.cqs.contains(&cqn)) {
            return Err(busy());
        }
        self.control.destroy_cq(Cqn(cqn)).map_err(model_err)?;
        self.cqs.remove(&cqn);
        Ok(())
    }
}
