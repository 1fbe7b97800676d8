//! `CREATE_EQ`, `DESTROY_EQ`.

use super::{busy, limit, no_such, pas_first, reachable, unsupported};
use crate::fw::codes::{syndrome as syn, CmdStatus};
use crate::fw::decoded::{CreateEq, DestroyEq};
use crate::fw::eq::Eq;
use crate::fw::hca::{fail, Hca, Res};
use crate::fw::ifc::{self, cmd_hca_cap as gen};

impl Hca {
    pub(super) fn create_eq(&mut self, d: &CreateEq, out: &mut [u8]) -> Res {
        limit(self.eqs().len(), self.cap(gen::LOG_MAX_EQ))?;
        let c = &d.eq_context;
        let log_size = c.log_eq_size;
        if u64::from(log_size) > self.cap(gen::LOG_MAX_EQ_SZ) {
            return Err(fail(CmdStatus::BadParam, syn::QUEUE_TOO_BIG));
        }
        let uar = c.uar_page;
        if !self.uars.contains(&uar) {
            return Err(no_such());
        }
        if c.page_offset != 0 {
            return Err(unsupported());
        }
        let shift = 12 + u32::from(c.log_page_size);
        if shift > 30 {
            return Err(unsupported());
        }
        let bytes = 64u64 << log_size;
        let pg = 1u64 << shift;
        let pages = pas_first(&d.pas, bytes.div_ceil(pg) as usize)?.to_vec();
        for p in &pages {
            if p % 4096 != 0 {
                return Err(fail(CmdStatus::BadParam, syn::BAD_ADDRESS));
            }
            reachable(self, *p, pg.min(bytes))?;
        }
        let eqn = (0..=u8::MAX)
            .find(|n| !self.eqs().contains_key(n))
            .ok_or_else(|| fail(CmdStatus::ExceedLim, syn::OBJECT_LIMIT))?;
        self.eqs().insert(
            eqn,
            Eq {
                eqn,
                log_size,
                page_shift: shift,
                pages,
                uar,
                mask: d.event_bitmask,
                producer: 0,
                consumer: None,
                armed: false,
                intr: c.intr,
                overruns: 0,
            },
        );
        ifc::create_eq_out::EQ_NUMBER.set(out, u64::from(eqn));
        Ok(())
    }

    pub(super) fn destroy_eq(&mut self, d: &DestroyEq) -> Res {
        let eqn = d.eq_number;
        if u64::from(eqn) >= 1u64 << self.cap(gen::LOG_MAX_EQ) {
            return Err(fail(CmdStatus::BadIndex, syn::INDEX_RANGE));
        }
        if !self.eqs().contains_key(&eqn) {
            return Err(no_such());
        }
        if self.cqs.values().any(|c| c.eqn == eqn) {
            return Err(busy());
        }
        self.eqs().remove(&eqn);
        Ok(())
    }
}
