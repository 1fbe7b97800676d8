//! Resource commands: UARs, PDs, EQs, memory keys, CQs, QPs and their transitions, the NIC
//! vport context. Each decodes its PRM input (offsets in [`super::ifc`]), applies the
//! firmware's checks with their PRM status, and then creates or changes the same object the
//! model's direct control path does (through [`ModelControl`](crate::direct::ModelControl)),
//! so what the engine executes afterwards is exactly what the command described.
//!
//! | command | checks (status) |
//! |---|---|
//! | `ALLOC_PD`, `CREATE_EQ/MKEY/CQ/QP` | count below `1 << log_max_*` (`EXCEED_LIM`) |
//! | `DEALLOC_*`, `DESTROY_*` | object exists (`BAD_RESOURCE`; `BAD_INDEX` for an EQ number or UAR index beyond the table); not referenced (`RESOURCE_BUSY`) |
//! | `CREATE_EQ` | `log_eq_size <= log_max_eq_sz` (`BAD_PARAM`); UAR allocated (`BAD_RESOURCE`); PAS covers the ring (`BAD_INPUT_LEN`) and translates (`BAD_PARAM`) |
//! | `CREATE_MKEY` | PD exists (`BAD_RESOURCE`); PA or MTT mode, not free, not `length64` (`BAD_PARAM`); MTT: 4 KiB ≤ page ≤ 1 GiB, enough entries (`BAD_INPUT_LEN` / `BAD_PARAM`), page aligned, contiguous, range translates (`BAD_PARAM`) |
//! | `CREATE_CQ` | `log_cq_size <= log_max_cq_sz` (`BAD_SIZE`); 64-byte CQEs, no compression, no umem, `page_offset` 0 (`BAD_PARAM`); UAR and EQ exist (`BAD_RESOURCE`); PAS covers, contiguous, translates; doorbell record translates (`BAD_PARAM`) |
//! | `CREATE_QP` | RC, has an SQ, regular or zero-length RQ (`BAD_PARAM`); PD, CQs, UAR exist (`BAD_RESOURCE`); queue sizes within `log_max_qp_sz` (`BAD_PARAM`); PAS as for CQs |
//! | `RST2INIT/INIT2RTR/RTR2RTS_QP` | QP exists (`BAD_RESOURCE`); QP state is RST/INIT/RTR (`BAD_QP_STATE`); port 1, MTU 1..=5 (`BAD_PARAM`); a RoCE path needs `roce_en` (`BAD_PARAM`; force-loopback does not: `fl_rc_qp_when_roce_disabled`) |
//! | `2ERR_QP`, `2RST_QP` | QP exists |
//! | `MODIFY_NIC_VPORT_CONTEXT` | own vport only; `roce_en` only if the RoCE capability is on (`BAD_PARAM`) |
//! | `QUERY_QP` | QP exists; reports the model's state and the creation fields |
//! | `QUERY_VPORT_STATE` | own vport only; always up |
//! | `QUERY_ROCE_ADDRESS` | port 0 or 1 (`BAD_PARAM`); index below `roce_address_table_size` (`BAD_INDEX`); the model's GID table, empty past its end |
//! | `SET_ROCE_ADDRESS` | as `QUERY_ROCE_ADDRESS`; the entry must equal the model's configured one (RoCE v2, no VLAN), or be all zero past the table's end (`BAD_PARAM`) |
//!
//! The model's own checks (see the `commands` module) run after these; a refusal there is
//! reported as `BAD_PARAM` (or `NO_RESOURCES` when the model is full).

use rdma_pmd::{BusAddr, Errno, Error, QpNum};
use rdma_pmd_mlx5::control::{
    Access, Control, CqParams, Cqn, Mkey, MkeyParams, Path, Pdn, QpParams, Transition, Translation,
};

use super::codes::{
    self, syndrome as syn, CmdStatus, Opcode, MKC_ACCESS_MODE_MTT, MKC_ACCESS_MODE_PA, QPC_ST_RC,
    ZERO_LEN_RQ,
};
use super::eq::Eq;
use super::hca::{fail, CqObj, Fail, Hca, MkeyObj, QpObj, Res};
use super::ifc::{
    self, ads, cmd_hca_cap as gen, cqc, eqc, mkc, nic_vport_context as nvc, qpc, Field,
};
use crate::model::Shared;
use crate::objects::QpState;

/// A refusal by the device model, as a command status.
fn model_err(e: Error) -> Fail {
    match e {
        Error::Device(Errno::ENOMEM) | Error::Device(Errno::ENOSPC) => {
            fail(CmdStatus::NoResources, syn::MODEL_FULL)
        }
        Error::Device(Errno::EBUSY) | Error::RegionBusy { .. } => {
            fail(CmdStatus::ResourceBusy, syn::OBJECT_IN_USE)
        }
        Error::Timeout(_) | Error::Device(_) => fail(CmdStatus::InternalError, syn::MODEL_REFUSED),
        _ => fail(CmdStatus::BadParam, syn::MODEL_REFUSED),
    }
}

fn no_such() -> Fail {
    fail(CmdStatus::BadResource, syn::NO_SUCH_OBJECT)
}

fn busy() -> Fail {
    fail(CmdStatus::ResourceBusy, syn::OBJECT_IN_USE)
}

fn limit(count: usize, log_max: u64) -> Res {
    if count as u64 >= 1u64 << log_max {
        return Err(fail(CmdStatus::ExceedLim, syn::OBJECT_LIMIT));
    }
    Ok(())
}

fn unsupported() -> Fail {
    fail(CmdStatus::BadParam, syn::UNSUPPORTED_CONTEXT)
}

/// Read `n` 64-bit PAS entries starting at `pas`.
fn pas_list(inp: &[u8], pas: Field, n: usize) -> Result<Vec<u64>, Fail> {
    if inp.len() < pas.byte() + 8 * n {
        return Err(fail(CmdStatus::BadInputLen, syn::PAS_TOO_SHORT));
    }
    Ok((0..n as u32).map(|k| pas.index(k).get(inp)).collect())
}

/// A queue buffer of `bytes` bytes in pages of `1 << shift` listed at `pas`: the model needs it
/// bus-contiguous. Returns its bus address.
fn contiguous_queue(
    hca: &Hca,
    inp: &[u8],
    pas: Field,
    shift: u32,
    bytes: u64,
) -> Result<u64, Fail> {
    if !(12..=30).contains(&shift) {
        return Err(unsupported());
    }
    let pg = 1u64 << shift;
    let list = pas_list(inp, pas, bytes.div_ceil(pg) as usize)?;
    let base = list[0];
    if base % pg != 0 {
        return Err(fail(CmdStatus::BadParam, syn::BAD_ADDRESS));
    }
    if list.iter().enumerate().any(|(k, a)| *a != base + k as u64 * pg) {
        return Err(fail(CmdStatus::BadParam, syn::PAS_NOT_CONTIGUOUS));
    }
    reachable(hca, base, bytes)?;
    Ok(base)
}

fn reachable(hca: &Hca, at: u64, len: u64) -> Res {
    if hca.shared.dma.translate(BusAddr(at), len as usize).is_none() {
        return Err(fail(CmdStatus::BadParam, syn::BAD_ADDRESS));
    }
    Ok(())
}

impl Hca {
    fn cap(&self, f: Field) -> u64 {
        f.get(&self.gen_cur)
    }

    pub(crate) fn resource_command(&mut self, op: Opcode, inp: &[u8], out: &mut [u8]) -> Res {
        use Opcode::*;
        match op {
            AllocUar => self.alloc_uar(out),
            DeallocUar => self.dealloc_uar(inp),
            AllocPd => self.alloc_pd(out),
            DeallocPd => self.dealloc_pd(inp),
            CreateEq => self.create_eq(inp, out),
            DestroyEq => self.destroy_eq(inp),
            CreateMkey => self.create_mkey(inp, out),
            DestroyMkey => self.destroy_mkey(inp),
            CreateCq => self.create_cq(inp, out),
            DestroyCq => self.destroy_cq(inp),
            CreateQp => self.create_qp(inp, out),
            DestroyQp => self.destroy_qp(inp),
            Rst2InitQp | Init2RtrQp | Rtr2RtsQp | ToErrQp | ToRstQp => self.modify_qp(op, inp),
            ModifyNicVportContext => self.modify_vport(inp),
            QueryNicVportContext => self.query_vport(inp, out),
            QueryQp => self.query_qp(inp, out),
            QueryVportState => self.query_vport_state(inp, out),
            QueryRoceAddress => self.query_roce_address(inp, out),
            SetRoceAddress => self.set_roce_address(inp),
            _ => Err(fail(CmdStatus::BadOp, syn::UNKNOWN_OPCODE)),
        }
    }

    fn alloc_uar(&mut self, out: &mut [u8]) -> Res {
        let uar = self.control.alloc_uar().map_err(model_err)?;
        self.uars.insert(uar.index, uar);
        ifc::alloc_uar_out::UAR.set(out, u64::from(uar.index));
        Ok(())
    }

    fn dealloc_uar(&mut self, inp: &[u8]) -> Res {
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

    fn alloc_pd(&mut self, out: &mut [u8]) -> Res {
        limit(self.pds.len(), self.cap(gen::LOG_MAX_PD))?;
        let pd = self.control.alloc_pd().map_err(model_err)?;
        self.pds.insert(pd.0);
        ifc::alloc_pd_out::PD.set(out, u64::from(pd.0));
        Ok(())
    }

    fn dealloc_pd(&mut self, inp: &[u8]) -> Res {
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

    fn create_eq(&mut self, inp: &[u8], out: &mut [u8]) -> Res {
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

    fn destroy_eq(&mut self, inp: &[u8]) -> Res {
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

    fn create_mkey(&mut self, inp: &[u8], out: &mut [u8]) -> Res {
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

    fn destroy_mkey(&mut self, inp: &[u8]) -> Res {
        let idx = ifc::destroy_mkey_in::MKEY_INDEX.get(inp) as u32;
        let key = self.mkeys.get(&idx).ok_or_else(no_such)?.key;
        self.control.destroy_mkey(Mkey(key)).map_err(model_err)?;
        self.mkeys.remove(&idx);
        Ok(())
    }

    fn create_cq(&mut self, inp: &[u8], out: &mut [u8]) -> Res {
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

    fn destroy_cq(&mut self, inp: &[u8]) -> Res {
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

    fn create_qp(&mut self, inp: &[u8], out: &mut [u8]) -> Res {
        use ifc::create_qp_in as i;
        limit(self.qps.len(), self.cap(gen::LOG_MAX_QP))?;
        let q = |f: Field| f.at(i::QPC).get(inp);
        if q(qpc::ST) != u64::from(QPC_ST_RC) || q(qpc::NO_SQ) != 0 {
            return Err(unsupported());
        }
        if q(qpc::PAGE_OFFSET) != 0 || i::WQ_UMEM_VALID.get(inp) != 0 {
            return Err(unsupported());
        }
        let pd = q(qpc::PD) as u32;
        let (scq, rcq) = (q(qpc::CQN_SND) as u32, q(qpc::CQN_RCV) as u32);
        let uar_idx = q(qpc::UAR_PAGE) as u32;
        if !self.pds.contains(&pd) || !self.cqs.contains_key(&scq) || !self.cqs.contains_key(&rcq) {
            return Err(no_such());
        }
        let uar = *self.uars.get(&uar_idx).ok_or_else(no_such)?;
        let log_sq_size = q(qpc::LOG_SQ_SIZE) as u8;
        let log_rq_size = match q(qpc::RQ_TYPE) as u8 {
            0 => Some(q(qpc::LOG_RQ_SIZE) as u8),
            ZERO_LEN_RQ => None,
            _ => return Err(unsupported()),
        };
        let max = self.cap(gen::LOG_MAX_QP_SZ);
        if u64::from(log_sq_size) > max || log_rq_size.is_some_and(|l| u64::from(l) > max) {
            return Err(fail(CmdStatus::BadParam, syn::QUEUE_TOO_BIG));
        }
        // qpc.log_rq_stride is log2(stride) - 4 (the stride is at least one 16-byte segment).
        let log_rq_stride = q(qpc::LOG_RQ_STRIDE) as u8 + 4;
        let rq_bytes = log_rq_size.map_or(0, |l| 1u64 << (l + log_rq_stride));
        let bytes = rq_bytes + (64u64 << log_sq_size);
        let shift = 12 + q(qpc::LOG_PAGE_SIZE) as u32;
        let buf = contiguous_queue(self, inp, i::PAS, shift, bytes)?;
        let dbrec = q(qpc::DBR_ADDR);
        reachable(self, dbrec, 8)?;
        let p = QpParams {
            pd: Pdn(pd),
            send_cq: Cqn(scq),
            recv_cq: Cqn(rcq),
            log_sq_size,
            log_rq_size,
            log_rq_stride,
            buf: BusAddr(buf),
            dbrec: BusAddr(dbrec),
            uar,
        };
        let qpn = self.control.create_qp(&p).map_err(model_err)?;
        self.qps.insert(qpn.0, QpObj { pd, cqs: [scq, rcq], uar: uar_idx });
        ifc::create_qp_out::QPN.set(out, u64::from(qpn.0));
        Ok(())
    }

    fn destroy_qp(&mut self, inp: &[u8]) -> Res {
        let qpn = ifc::destroy_qp_in::QPN.get(inp) as u32;
        if !self.qps.contains_key(&qpn) {
            return Err(no_such());
        }
        self.control.destroy_qp(QpNum(qpn)).map_err(model_err)?;
        self.qps.remove(&qpn);
        Ok(())
    }

    fn modify_qp(&mut self, op: Opcode, inp: &[u8]) -> Res {
        use Opcode::*;
        let (qpn_f, qpc_f) = match op {
            Rst2InitQp => (ifc::rst2init_qp_in::QPN, Some(ifc::rst2init_qp_in::QPC)),
            Init2RtrQp => (ifc::init2rtr_qp_in::QPN, Some(ifc::init2rtr_qp_in::QPC)),
            Rtr2RtsQp => (ifc::rtr2rts_qp_in::QPN, Some(ifc::rtr2rts_qp_in::QPC)),
            ToErrQp => (ifc::qp_2err_in::QPN, None),
            _ => (ifc::qp_2rst_in::QPN, None),
        };
        let qpn = qpn_f.get(inp) as u32;
        if !self.qps.contains_key(&qpn) {
            return Err(no_such());
        }
        let state = self.shared.dev().qps.get(&qpn).map(|q| q.state);
        let from = match op {
            Rst2InitQp => Some(QpState::Reset),
            Init2RtrQp => Some(QpState::Init),
            Rtr2RtsQp => Some(QpState::Rtr),
            _ => None,
        };
        if from.is_some() && state != from {
            return Err(fail(CmdStatus::BadQpState, syn::QP_TRANSITION));
        }
        let q = |f: Field| qpc_f.map_or(0, |c| f.at(c).get(inp));
        let path = |f: Field| q(f.at(qpc::PRIMARY_ADDRESS_PATH));
        let t = match op {
            Rst2InitQp => {
                let port = path(ads::VHCA_PORT_NUM) as u8;
                if port != 1 {
                    return Err(fail(CmdStatus::BadParam, syn::BAD_PORT));
                }
                let mut access = Access::empty();
                access.set(Access::REMOTE_WRITE, q(qpc::RWE) == 1);
                access.set(Access::REMOTE_READ, q(qpc::RRE) == 1);
                Transition::RstToInit { port, access }
            }
            Init2RtrQp => {
                let mtu = q(qpc::MTU) as u8;
                if !(1..=5).contains(&mtu) {
                    return Err(fail(CmdStatus::BadParam, syn::BAD_MTU));
                }
                let path = if path(ads::FL) == 1 {
                    Path::Loopback
                } else {
                    if !self.roce_en {
                        return Err(fail(CmdStatus::BadParam, syn::ROCE_DISABLED));
                    }
                    let c = qpc::PRIMARY_ADDRESS_PATH.at(ifc::init2rtr_qp_in::QPC);
                    let mut dgid = [0u8; 16];
                    dgid.copy_from_slice(ads::RGID_RIP.at(c).slice(inp));
                    let mac = path(ads::RMAC_47_32) << 32 | path(ads::RMAC_31_0);
                    let mut dmac = [0u8; 6];
                    dmac.copy_from_slice(&mac.to_be_bytes()[2..]);
                    Path::RoceV2 {
                        dgid,
                        dmac,
                        sgid_index: path(ads::SRC_ADDR_INDEX) as u8,
                        udp_sport: path(ads::UDP_SPORT) as u16,
                    }
                };
                Transition::InitToRtr {
                    remote_qpn: QpNum(q(qpc::REMOTE_QPN) as u32),
                    path,
                    mtu,
                    rq_psn: q(qpc::NEXT_RCV_PSN) as u32,
                }
            }
            Rtr2RtsQp => Transition::RtrToRts {
                sq_psn: q(qpc::NEXT_SEND_PSN) as u32,
                timeout: path(ads::ACK_TIMEOUT) as u8,
                retry_cnt: q(qpc::RETRY_COUNT) as u8,
                rnr_retry: q(qpc::RNR_RETRY) as u8,
            },
            ToErrQp => Transition::ToErr,
            _ => Transition::ToRst,
        };
        self.control.modify_qp(QpNum(qpn), &t).map_err(model_err)
    }

    fn modify_vport(&mut self, inp: &[u8]) -> Res {
        use ifc::modify_nic_vport_context_in as i;
        if i::OTHER_VPORT.get(inp) != 0 || i::VPORT_NUMBER.get(inp) != 0 {
            return Err(fail(CmdStatus::BadParam, syn::BAD_FUNCTION));
        }
        let ctx = |f: Field| f.at(i::NIC_VPORT_CONTEXT).get(inp);
        if i::FIELD_SELECT_ROCE_EN.get(inp) == 1 {
            let on = ctx(nvc::ROCE_EN) == 1;
            if on && self.cap(gen::ROCE) == 0 {
                return Err(fail(CmdStatus::BadParam, syn::CAP_ABOVE_MAX));
            }
            self.roce_en = on;
        }
        if i::FIELD_SELECT_MTU.get(inp) == 1 {
            self.vport_mtu = ctx(nvc::MTU) as u16;
        }
        Ok(())
    }

    fn query_vport(&mut self, inp: &[u8], out: &mut [u8]) -> Res {
        use ifc::query_nic_vport_context_in as i;
        if i::OTHER_VPORT.get(inp) != 0 || i::VPORT_NUMBER.get(inp) != 0 {
            return Err(fail(CmdStatus::BadParam, syn::BAD_FUNCTION));
        }
        let at = ifc::query_nic_vport_context_out::NIC_VPORT_CONTEXT;
        nvc::ROCE_EN.at(at).set(out, u64::from(self.roce_en));
        nvc::MTU.at(at).set(out, u64::from(self.vport_mtu));
        if let Some(g) = self.shared.gids.first() {
            let mut m = [0u8; 8];
            m[2..].copy_from_slice(&g.mac);
            let mac = u64::from_be_bytes(m);
            nvc::MAC_47_32.at(at).set(out, mac >> 32);
            nvc::MAC_31_0.at(at).set(out, mac & 0xffff_ffff);
        }
        Ok(())
    }
}

impl Hca {
    fn query_qp(&mut self, inp: &[u8], out: &mut [u8]) -> Res {
        let qpn = ifc::query_qp_in::QPN.get(inp) as u32;
        if !self.qps.contains_key(&qpn) {
            return Err(no_such());
        }
        let dev = self.shared.dev();
        let q = dev.qps.get(&qpn).ok_or_else(no_such)?;
        let ctx = ifc::query_qp_out::QPC;
        let state = match q.state {
            QpState::Reset => codes::QpState::Rst,
            QpState::Init => codes::QpState::Init,
            QpState::Rtr => codes::QpState::Rtr,
            QpState::Rts => codes::QpState::Rts,
            QpState::Error => codes::QpState::Err,
        };
        let mut set = |f: Field, v: u64| f.at(ctx).set(out, v);
        set(qpc::STATE, u64::from(u8::from(state)));
        set(qpc::ST, u64::from(QPC_ST_RC));
        set(qpc::PD, u64::from(q.pd));
        set(qpc::UAR_PAGE, u64::from(q.uar));
        set(qpc::LOG_SQ_SIZE, u64::from(q.log_sq_size));
        match q.log_rq_size {
            Some(l) => set(qpc::LOG_RQ_SIZE, u64::from(l)),
            None => set(qpc::RQ_TYPE, u64::from(ZERO_LEN_RQ)),
        }
        set(qpc::LOG_RQ_STRIDE, u64::from(q.log_rq_stride.saturating_sub(4)));
        set(qpc::CQN_SND, u64::from(q.send_cq));
        set(qpc::CQN_RCV, u64::from(q.recv_cq));
        set(qpc::REMOTE_QPN, u64::from(q.remote_qpn));
        set(qpc::DBR_ADDR, q.dbrec);
        Ok(())
    }

    fn query_vport_state(&mut self, inp: &[u8], out: &mut [u8]) -> Res {
        use ifc::query_vport_state_in as i;
        if i::OTHER_VPORT.get(inp) != 0 || i::VPORT_NUMBER.get(inp) != 0 {
            return Err(fail(CmdStatus::BadParam, syn::BAD_FUNCTION));
        }
        let up = u64::from(codes::VPORT_STATE_UP);
        ifc::query_vport_state_out::STATE.set(out, up);
        ifc::query_vport_state_out::ADMIN_STATE.set(out, up);
        Ok(())
    }

    /// Check a GID table index (and port) against `roce_address_table_size`.
    fn gid_index(&self, index: u64, port: u64) -> Result<usize, Fail> {
        if port > 1 {
            return Err(fail(CmdStatus::BadParam, syn::BAD_PORT));
        }
        if index >= ifc::roce_cap::ROCE_ADDRESS_TABLE_SIZE.get(&self.roce_cur) {
            return Err(fail(CmdStatus::BadIndex, syn::INDEX_RANGE));
        }
        Ok(index as usize)
    }

    /// Entries past the model's GIDs, inside `roce_address_table_size`, read as empty.
    fn query_roce_address(&mut self, inp: &[u8], out: &mut [u8]) -> Res {
        use ifc::query_roce_address_in as i;
        let index = self.gid_index(i::ROCE_ADDRESS_INDEX.get(inp), i::VHCA_PORT_NUM.get(inp))?;
        let at = ifc::query_roce_address_out::ROCE_ADDRESS;
        let entry = roce_entry(self.shared.gids.get(index));
        out[at.byte()..at.byte() + entry.len()].copy_from_slice(&entry);
        Ok(())
    }

    /// The model's GID table is fixed by its configuration (the engine routes by it): a write
    /// must agree with it, and entries past its end may only be cleared.
    fn set_roce_address(&mut self, inp: &[u8]) -> Res {
        use ifc::set_roce_address_in as i;
        let index = self.gid_index(i::ROCE_ADDRESS_INDEX.get(inp), i::VHCA_PORT_NUM.get(inp))?;
        let want = roce_entry(self.shared.gids.get(index));
        let mut got = [0u8; ifc::roce_addr_layout::SIZE];
        got.copy_from_slice(i::ROCE_ADDRESS.slice(inp));
        // VLANs are not modelled; the vlan fields must be clear either way.
        if got != want {
            return Err(fail(CmdStatus::BadParam, syn::GID_MISMATCH));
        }
        Ok(())
    }
}

/// A `roce_addr_layout` for a GID table entry (zeros for an empty one).
fn roce_entry(g: Option<&crate::model::Gid>) -> [u8; ifc::roce_addr_layout::SIZE] {
    use ifc::roce_addr_layout as r;
    let mut e = [0u8; r::SIZE];
    let Some(g) = g else { return e };
    r::SOURCE_L3_ADDRESS.slice_mut(&mut e).copy_from_slice(&g.gid);
    let mut m = [0u8; 8];
    m[2..].copy_from_slice(&g.mac);
    let mac = u64::from_be_bytes(m);
    r::SOURCE_MAC_47_32.set(&mut e, mac >> 32);
    r::SOURCE_MAC_31_0.set(&mut e, mac & 0xffff_ffff);
    let v4 = g.gid[..10].iter().all(|b| *b == 0) && g.gid[10..12] == [0xff, 0xff];
    let l3 = if v4 { codes::ROCE_L3_TYPE_IPV4 } else { codes::ROCE_L3_TYPE_IPV6 };
    r::ROCE_L3_TYPE.set(&mut e, u64::from(l3));
    r::ROCE_VERSION.set(&mut e, u64::from(codes::ROCE_VERSION_2));
    e
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
