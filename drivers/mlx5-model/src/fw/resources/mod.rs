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

mod cq;
mod eq;
mod mkey;
mod qp;
mod uar_pd;
mod vport;

use rdma_pmd::{BusAddr, Errno, Error};

use super::codes::{syndrome as syn, CmdStatus, Opcode};
use super::hca::{fail, Fail, Hca, Res};
use super::ifc::Field;

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
}
