//! `CREATE_MKEY` (PA, MTT, or a free key for UMR to enable), `DESTROY_MKEY`.

use rdma_pmd::Error;

use super::{limit, model_err, no_such, pas_first, reachable, unsupported};
use crate::fw::codes::{
    syndrome as syn, CmdStatus, MKC_ACCESS_MODE_KSM, MKC_ACCESS_MODE_MTT, MKC_ACCESS_MODE_PA,
};
use crate::fw::decoded::{CreateMkey, DestroyMkey};
use crate::fw::hca::{fail, Hca, MkeyObj, Res};
use crate::fw::ifc::{self, cmd_hca_cap as gen};
use crate::model::Shared;
use crate::objects::{Mkey, Rights, Xlate};

impl Hca {
    pub(super) fn create_mkey(&mut self, d: &CreateMkey, out: &mut [u8]) -> Res {
        limit(self.mkeys.len(), self.cap(gen::LOG_MAX_MKEY))?;
        let m = &d.mkey_context;
        let pd = m.pd;
        if !self.pds.contains(&pd) {
            return Err(no_such());
        }
        if m.free {
            return self.create_free_mkey(d, out);
        }
        // `length64`: the key spans every address from `start_addr` on and `len` is ignored;
        // the model takes it for PA keys only (what a kernel-style DMA key uses).
        if m.length64 && m.access_mode() != MKC_ACCESS_MODE_PA {
            return Err(unsupported());
        }
        let (start, len) = if m.length64 {
            (m.start_addr, u64::MAX - m.start_addr)
        } else {
            (m.start_addr, m.len)
        };
        if len == 0 {
            return Err(fail(CmdStatus::BadParam, syn::EMPTY_RANGE));
        }
        let rights =
            Rights { local_write: m.lw, remote_write: m.rw, remote_read: m.rr, remote_atomic: m.a };
        let xlate = match m.access_mode() {
            MKC_ACCESS_MODE_PA => Xlate::Physical,
            MKC_ACCESS_MODE_MTT => {
                let shift = u32::from(m.log_page_size);
                if !(12..=30).contains(&shift) {
                    return Err(unsupported());
                }
                let pg = 1u64 << shift;
                // Two 64-bit MTT entries per octword.
                let octs = d.translations_octword_actual_size as usize;
                let list = pas_first(&d.klm_pas_mtt, 2 * octs)?;
                let Some(end) = (start & (pg - 1)).checked_add(len) else {
                    return Err(fail(CmdStatus::BadParam, syn::MODEL_REFUSED));
                };
                let need = end.div_ceil(pg) as usize;
                if list.len() < need {
                    return Err(fail(CmdStatus::BadParam, syn::PAS_TOO_SHORT));
                }
                // Low bits of an entry are flags (read/write present, kernel MLX5_IB_MTT_*).
                let pages: Vec<u64> = list[..need].iter().map(|e| e & !7).collect();
                if pages.iter().any(|a| a % pg != 0) {
                    return Err(fail(CmdStatus::BadParam, syn::BAD_ADDRESS));
                }
                // Each page anywhere (the kernel's and rdma-core's MTTs list pinned pages
                // wherever they lie); every byte of the range must translate.
                let first = start & (pg - 1);
                for (k, a) in pages.iter().enumerate() {
                    let lo = if k == 0 { first } else { 0 };
                    let hi = (end - k as u64 * pg).min(pg);
                    reachable(self, a + lo, hi - lo)?;
                }
                if pages.iter().enumerate().all(|(k, a)| *a == pages[0] + k as u64 * pg) {
                    Xlate::Mtt { base: pages[0], page_shift: shift as u8 }
                } else {
                    Xlate::Pages { pages: pages.into(), page_shift: shift as u8 }
                }
            }
            _ => return Err(unsupported()),
        };
        let key =
            self.shared.create_mkey(Mkey { pd, start, len, rights, xlate }).map_err(model_err)?;
        let key = match self.shared.fw_rekey_mkey(key, m.mkey_7_0) {
            Ok(k) => k,
            Err(e) => {
                let _ = self.shared.destroy_mkey(key);
                return Err(model_err(e));
            }
        };
        self.mkeys.insert(key >> 8, MkeyObj { key, pd });
        ifc::create_mkey_out::MKEY_INDEX.set(out, u64::from(key >> 8));
        Ok(())
    }

    /// A key created `free` (disabled): what mlx5_ib's MR cache makes (6.12 `mr.c`
    /// `set_cache_mkc`: `free` 1, `umr_en` 1, access mode MTT or KSM,
    /// `translations_octword_size` for the entries a later UMR loads, `qpn` 0xffffff, no
    /// page list). The key exists (its index is taken, `DESTROY_MKEY` frees it) but
    /// translates nothing until a UMR enables it; the model has no UMR, so every access
    /// through it fails: it covers no range the data path could name but one byte at 0, with
    /// no rights and an empty page list (a DMA fault there).
    fn create_free_mkey(&mut self, d: &CreateMkey, out: &mut [u8]) -> Res {
        let m = &d.mkey_context;
        let mode = m.access_mode();
        if (mode != MKC_ACCESS_MODE_MTT && mode != MKC_ACCESS_MODE_KSM) || m.length64 {
            return Err(unsupported());
        }
        if m.translations_octword_size == 0 {
            return Err(fail(CmdStatus::BadParam, syn::EMPTY_RANGE));
        }
        let key = self
            .shared
            .create_mkey(Mkey {
                pd: m.pd,
                start: 0,
                len: 1,
                rights: Rights::default(),
                xlate: Xlate::Pages { pages: Vec::new().into(), page_shift: 12 },
            })
            .map_err(model_err)?;
        let key = match self.shared.fw_rekey_mkey(key, m.mkey_7_0) {
            Ok(k) => k,
            Err(e) => {
                let _ = self.shared.destroy_mkey(key);
                return Err(model_err(e));
            }
        };
        self.mkeys.insert(key >> 8, MkeyObj { key, pd: m.pd });
        ifc::create_mkey_out::MKEY_INDEX.set(out, u64::from(key >> 8));
        Ok(())
    }

    pub(super) fn destroy_mkey(&mut self, d: &DestroyMkey) -> Res {
        let idx = d.mkey_index;
        let key = self.mkeys.get(&idx).ok_or_else(no_such)?.key;
        self.shared.destroy_mkey(key).map_err(model_err)?;
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
