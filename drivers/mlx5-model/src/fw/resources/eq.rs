//! `CREATE_EQ`, `DESTROY_EQ`.

use super::{busy, limit, no_such, pas_list, reachable, unsupported};
use crate::fw::codes::{syndrome as syn, CmdStatus};
use crate::fw::eq::Eq;
use crate::fw::hca::{fail, Hca, Res};
use crate::fw::ifc::{self, cmd_hca_cap as gen, eqc, Field};

impl Hca {
    pub(super) fn create_eq(&mut self, inp: &[u8], out: &mut [u8]) -> Res {
        use ifc::create_eq_in as i;
        limit(self.eqs.len(), self.cap(gen::LOG_MAX_EQ))?;
        let c = |f: Field| f.at(i::EQ_CONTEXT).get(inp);
        let log_size = c(eqc::LOG_EQ_SIZE) as u8;
        if u64::from(log_size) > self.cap(gen::LOG_MAX_EQ_SZ) {
            return Err(fail(CmdStatus::BadParam, syn::QUEUE_TOO_BIG));
        }
        let uar = c(eqc::UAR_PAGE) as u32;
        if !self.uars.contains_key(&uar) {
            return Err(no_such());
        }
        if c(eqc::PAGE_OFFSET) != 0 {
            return Err(unsupported());
        }
        let shift = 12 + c(eqc::LOG_PAGE_SIZE) as u32;
        if shift > 30 {
            return Err(unsupported());
        }
        let bytes = 64u64 << log_size;
        let pg = 1u64 << shift;
        let pages = pas_list(inp, i::PAS, bytes.div_ceil(pg) as usize)?;
        for p in &pages {
            if p % 4096 != 0 {
                return Err(fail(CmdStatus::BadParam, syn::BAD_ADDRESS));
            }
            reachable(self, *p, pg.min(bytes))?;
        }
        let mut mask = [0u64; 4];
        for (k, m) in mask.iter_mut().enumerate() {
            *m = Field::new(i::EVENT_BITMASK.bit + 64 * k as u32, 64).get(inp);
        }
        let eqn = (0..=u8::MAX)
            .find(|n| !self.eqs.contains_key(n))
            .ok_or_else(|| fail(CmdStatus::ExceedLim, syn::OBJECT_LIMIT))?;
        self.eqs.insert(
            eqn,
            Eq {
                eqn,
                log_size,
                page_shift: shift,
                pages,
                uar,
                mask,
                producer: 0,
                consumer: None,
                armed: false,
                overruns: 0,
            },
        );
        ifc::create_eq_out::EQ_NUMBER.set(out, u64::from(eqn));
        Ok(())
    }

    pub(super) fn destroy_eq(&mut self, inp: &[u8]) -> Res {
        let eqn = ifc::destroy_eq_in::EQ_NUMBER.get(inp) as u8;
        if u64::from(eqn) >= 1u64 << self.cap(gen::LOG_MAX_EQ) {
            return Err(fail(CmdStatus::BadIndex, syn::INDEX_RANGE));
        }
        if !self.eqs.contains_key(&eqn) {
            return Err(no_such());
        }
        if self.cqs.values().any(|c| c.eqn == eqn) {
            return Err(busy());
        }
        self.eqs.remove(&eqn);
        Ok(())
    }
}
