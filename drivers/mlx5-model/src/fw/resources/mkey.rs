//! `CREATE_MKEY` (PA or contiguous MTT), `DESTROY_MKEY`.

use rdma_pmd::{BusAddr, Error};
use rdma_pmd_mlx5::control::{Access, Control, Mkey, MkeyParams, Pdn, Translation};

use super::{limit, model_err, no_such, pas_list, reachable, unsupported};
use crate::fw::codes::{syndrome as syn, CmdStatus, MKC_ACCESS_MODE_MTT, MKC_ACCESS_MODE_PA};
use crate::fw::hca::{fail, Hca, MkeyObj, Res};
use crate::fw::ifc::{self, cmd_hca_cap as gen, mkc, Field};
use crate::model::Shared;

impl Hca {
    pub(super) fn create_mkey(&mut self, inp: &[u8], out: &mut [u8]) -> Res {
        use ifc::create_mkey_in as i;
        limit(self.mkeys.len(), self.cap(gen::LOG_MAX_MKEY))?;
        let m = |f: Field| f.at(i::MKEY_CONTEXT).get(inp);
        let pd = m(mkc::PD) as u32;
        if !self.pds.contains(&pd) {
            return Err(no_such());
        }
        if m(mkc::FREE) == 1 || m(mkc::LENGTH64) == 1 {
            return Err(unsupported());
        }
        let (start, len) = (m(mkc::START_ADDR), m(mkc::LEN));
        if len == 0 {
            return Err(fail(CmdStatus::BadParam, syn::EMPTY_RANGE));
        }
        let mut access = Access::empty();
        access.set(Access::LOCAL_WRITE, m(mkc::LW) == 1);
        access.set(Access::REMOTE_WRITE, m(mkc::RW) == 1);
        access.set(Access::REMOTE_READ, m(mkc::RR) == 1);
        let mode = (m(mkc::ACCESS_MODE_4_2) << 2 | m(mkc::ACCESS_MODE_1_0)) as u8;
        let translation = match mode {
            MKC_ACCESS_MODE_PA => Translation::Physical,
            MKC_ACCESS_MODE_MTT => {
                let shift = m(mkc::LOG_PAGE_SIZE) as u32;
                if !(12..=30).contains(&shift) {
                    return Err(unsupported());
                }
                let pg = 1u64 << shift;
                let octs = i::TRANSLATIONS_OCTWORD_ACTUAL_SIZE.get(inp) as usize;
                // Two 64-bit MTT entries per octword; `klm_pas_mtt` counts 32-bit units.
                let mtt = Field::new(i::KLM_PAS_MTT.bit, 64);
                let list = pas_list(inp, mtt, 2 * octs)?;
                let Some(end) = (start & (pg - 1)).checked_add(len) else {
                    return Err(fail(CmdStatus::BadParam, syn::MODEL_REFUSED));
                };
                let need = end.div_ceil(pg) as usize;
                if list.len() < need {
                    return Err(fail(CmdStatus::BadParam, syn::PAS_TOO_SHORT));
                }
                // Low bits of an entry are flags (read/write present, kernel MLX5_IB_MTT_*).
                let pages: Vec<u64> = list[..need].iter().map(|e| e & !7).collect();
                if pages[0] % pg != 0 {
                    return Err(fail(CmdStatus::BadParam, syn::BAD_ADDRESS));
                }
                if pages.iter().enumerate().any(|(k, a)| *a != pages[0] + k as u64 * pg) {
                    return Err(fail(CmdStatus::BadParam, syn::PAS_NOT_CONTIGUOUS));
                }
                reachable(self, pages[0] + (start & (pg - 1)), len)?;
                Translation::Mtt { base: BusAddr(pages[0]), page_shift: shift as u8 }
            }
            _ => return Err(unsupported()),
        };
        let p = MkeyParams { pd: Pdn(pd), start, len, access, translation };
        let key = self.control.create_mkey(&p).map_err(model_err)?;
        let variant = m(mkc::MKEY_7_0) as u8;
        let key = match self.shared.fw_rekey_mkey(key.0, variant) {
            Ok(k) => k,
            Err(e) => {
                let _ = self.control.destroy_mkey(key);
                return Err(model_err(e));
            }
        };
        self.mkeys.insert(key >> 8, MkeyObj { key, pd });
        ifc::create_mkey_out::MKEY_INDEX.set(out, u64::from(key >> 8));
        Ok(())
    }

    pub(super) fn destroy_mkey(&mut self, inp: &[u8]) -> Res {
        let idx = ifc::destroy_mkey_in::MKEY_INDEX.get(inp) as u32;
        let key = self.mkeys.get(&idx).ok_or_else(no_such)?.key;
        self.control.destroy_mkey(Mkey(key)).map_err(model_err)?;
        self.mkeys.remove(&idx);
        Ok(())
    }
}

impl Shared {
    /// Give memory key `key` the variant byte `variant` the driver chose (`mkc.mkey_7_0`): the
    /// command interface's key is `mkey_index << 8 | mkey_7_0`, the direct path's variant is
    /// the model's own. Returns the new key.
    pub(crate) fn fw_rekey_mkey(&self, key: u32, variant: u8) -> Result<u32, Error> {
        let new = (key & !0xff) | u32::from(variant);
        if new == key {
            return Ok(key);
        }
        let mut dev = self.dev();
        if dev.mkeys.contains_key(&new) {
            return Err(Error::InvalidArgument("memory key already exists"));
        }
        let mk = dev.mkeys.remove(&key).ok_or(Error::InvalidArgument("unknown memory key"))?;
        dev.mkeys.insert(new, mk);
        Ok(new)
    }
}
