//! Resource commands: UARs, PDs, EQs, memory keys, CQs, QPs and their transitions, the NIC
//! vport context, the Ethernet objects (`eth.rs`), one module per object. Each decodes its whole PRM input into the
//! firmware's own types ([`super::decoded`], from the tables in [`super::ifc`]), applies the
//! firmware's checks with their PRM status, and then creates or changes the object through
//! the model's own resource commands (the `commands` module, which the direct control path
//! uses too), so what the engine executes afterwards is exactly what the command described.
//!
//! | command | checks (status) |
//! |---|---|
//! | `ALLOC_PD`, `CREATE_EQ/MKEY/CQ/QP` | count below `1 << log_max_*` (`EXCEED_LIM`) |
//! | `DEALLOC_*`, `DESTROY_*` | object exists (`BAD_RESOURCE`; `BAD_INDEX` for an EQ number or UAR index beyond the table); not referenced (`RESOURCE_BUSY`) |
//! | `CREATE_EQ` | `log_eq_size <= log_max_eq_sz` (`BAD_PARAM`); UAR allocated (`BAD_RESOURCE`); PAS covers the ring (`BAD_INPUT_LEN`) and translates (`BAD_PARAM`) |
//! | `CREATE_MKEY` | PD exists (`BAD_RESOURCE`); PA or MTT mode, not free, `length64` only with PA (`BAD_PARAM`); MTT: 4 KiB ≤ page ≤ 1 GiB, enough entries (`BAD_INPUT_LEN` / `BAD_PARAM`), each page aligned and anywhere, every byte of the range translates (`BAD_PARAM`) |
//! | `CREATE_CQ` | `log_cq_size <= log_max_cq_sz` (`BAD_SIZE`); 64-byte CQEs, no compression, no umem, `page_offset` 0 (`BAD_PARAM`); UAR and EQ exist (`BAD_RESOURCE`); PAS covers the ring (`BAD_INPUT_LEN`), each page aligned and translating, anywhere (`BAD_PARAM`); doorbell record translates (`BAD_PARAM`) |
//! | `CREATE_QP` | RC, UD, QP1 or REG_UMR (no PD or an existing one; zero-length RQ), has an SQ, regular or zero-length RQ (`BAD_PARAM`); PD, CQs, UAR exist (`BAD_RESOURCE`); queue sizes within `log_max_qp_sz` (`BAD_PARAM`); PAS as for CQs (a page list); the queue may start `page_offset` 64ths of a page into its first page, at an entry boundary (`BAD_PARAM`) |
//! | `RST2INIT/INIT2RTR/RTR2RTS_QP` | QP exists (`BAD_RESOURCE`); QP state is RST/INIT/RTR (`BAD_QP_STATE`); port 1, MTU 1..=5 (0 too for a UMR QP: no path) (`BAD_PARAM`); a RoCE path needs `roce_en` (`BAD_PARAM`; force-loopback does not: `fl_rc_qp_when_roce_disabled`) |
//! | `2ERR_QP`, `2RST_QP` | QP exists |
//! | `CREATE_RMP`, `CREATE_XRC_SRQ` (`srq.rs`) | count below `1 << log_max_srq` (`EXCEED_LIM`); RMP ready, linked-list WQ; XRC SRQ state good; no signature, cyclic format, umem, contiguous SRQ (`BAD_PARAM`); size within `log_max_srq_sz`, stride 16..=`max_wqe_sz_rq`, `lwm` below the size (`BAD_PARAM`); PD (and XRC domain, CQ) exist (`BAD_RESOURCE`); PAS as for CQs, `page_offset` as for QPs |
//! | `MODIFY_RMP`, `ARM_XRC_SRQ` | SRQ of that kind exists (`BAD_RESOURCE`); RDY to RDY / op_mod 1 (`BAD_PARAM`); `lwm` below the size (`BAD_PARAM`) |
//! | `MODIFY_NIC_VPORT_CONTEXT` | own vport only; `roce_en` only if the RoCE capability is on (`BAD_PARAM`) |
//! | `QUERY_QP` | QP exists; reports the model's state and the creation fields |
//! | `ALLOC_XRCD` | count below `1 << log_max_xrcd` (`EXCEED_LIM`) |
//! | `DEALLOC_XRCD` | domain exists (`BAD_RESOURCE`) |
//! | `QUERY_HCA_VPORT_PKEY` | own vport (`BAD_PARAM`), port 0 or 1 (`BAD_PARAM`), index below `128 << pkey_table_size` or 0xffff for all (`BAD_INDEX`), output long enough (`BAD_OUTPUT_LEN`); index 0 holds 0xffff, the rest 0 |
//! | `QUERY_VPORT_STATE` | own vport only; always up |
//! | `QUERY_ROCE_ADDRESS` | port 0 or 1 (`BAD_PARAM`); index below `roce_address_table_size` (`BAD_INDEX`); the model's GID table in the kernel's RoCE v2 form (an IPv4 GID as `::ffff:a.b.c.d`, L3 type IPv4), zeros past its end |
//! | `SET_ROCE_ADDRESS` | as `QUERY_ROCE_ADDRESS`; `roce_version` one the RoCE caps list, so not 0 (v1): `BAD_PARAM`, syndrome 0x12822d as real firmware; the entry must equal the model's configured one in that form, or past the table's end be the kernel's clear (no address or MAC, version 2, L3 type IPv6) (`BAD_PARAM`) |
//!
//! | Ethernet (`ALLOC_TRANSPORT_DOMAIN` … `SET_FLOW_TABLE_ROOT`) | see `eth.rs` |
//!
//! The model's own checks (see the `commands` module) run after these; a refusal there is
//! reported as `BAD_PARAM` (or `NO_RESOURCES` when the model is full).

mod cq;
mod eq;
mod eth;
pub(crate) mod eth_caps;
mod ib;
mod mkey;
mod qp;
mod srq;
mod uar_pd;
mod vport;

use rdma_pmd::{BusAddr, Errno, Error};

use super::codes::{syndrome as syn, CmdStatus, Opcode};
use super::decoded::{decode, Entries};
use super::hca::{fail, Fail, Hca, Res};
use super::ifc::{self, Field};
use crate::objects::QueueBuf;

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

fn ifc_op_mod(inp: &[u8]) -> u16 {
    super::ifc::cmd_in::OP_MOD.get(inp) as u16
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

/// The first `n` entries of a PAS list; a shorter list is `BAD_INPUT_LEN`.
fn pas_first(list: &Entries, n: usize) -> Result<&[u64], Fail> {
    list.first(n).ok_or(fail(CmdStatus::BadInputLen, syn::PAS_TOO_SHORT))
}

/// Where a queue starts inside the first page its PAS lists: the context's `page_offset`
/// counts quanta of one 64th of a page (the kernel's `mlx5_umem_find_best_quantized_pgoff`
/// with scale 64, for the user QP, SRQ and WQ buffers of `mlx5_ib`; a CQ starts at its first
/// page's first byte). `stride` is the queue's largest entry: the model reads an entry from
/// one page, so a start that would split an entry across two pages is refused (`BAD_PARAM`,
/// `QUEUE_START`), a limit of the model (rdma-core's provider allocates page-aligned queue
/// buffers; one placed by an application's allocator may start anywhere the kernel accepts).
#[derive(Clone, Copy)]
struct Start {
    quanta: u64,
    stride: u64,
}

impl Start {
    /// The queue starts at the first byte of its first page.
    const AT_PAGE: Start = Start { quanta: 0, stride: 1 };

    fn new(page_offset: u8, stride: u64) -> Start {
        Start { quanta: u64::from(page_offset), stride: stride.max(1) }
    }
}

/// A queue buffer of `bytes` bytes in pages of `1 << shift` bytes listed in `pas`, starting
/// `start` into the first: each entry one page, page aligned, anywhere in bus memory (PRM PAS;
/// the kernel's CQ, EQ and WQ buffers are fragmented page lists). Every page must translate
/// for the bytes the queue uses of it.
fn queue_pages(
    hca: &Hca,
    pas: &Entries,
    shift: u32,
    start: Start,
    bytes: u64,
) -> Result<QueueBuf, Fail> {
    if !(12..=30).contains(&shift) {
        return Err(unsupported());
    }
    let pg = 1u64 << shift;
    let first = start.quanta * (pg / 64);
    if first % start.stride != 0 {
        return Err(fail(CmdStatus::BadParam, syn::QUEUE_START));
    }
    let span = first + bytes;
    let list = pas_first(pas, span.div_ceil(pg) as usize)?;
    for (k, a) in list.iter().enumerate() {
        if a % pg != 0 {
            return Err(fail(CmdStatus::BadParam, syn::BAD_ADDRESS));
        }
        reachable(hca, *a, pg.min(span - k as u64 * pg))?;
    }
    Ok(QueueBuf::pages(list, shift, first))
}

fn reachable(hca: &Hca, at: u64, len: u64) -> Res {
    if !hca.shared.dma.mapped(BusAddr(at), len as usize) {
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
            DeallocUar => self.dealloc_uar(&decode(inp)),
            AllocPd => self.alloc_pd(out),
            DeallocPd => self.dealloc_pd(&decode(inp)),
            CreateEq => self.create_eq(&decode(inp), out),
            DestroyEq => self.destroy_eq(&decode(inp)),
            CreateMkey => self.create_mkey(&decode(inp), out),
            DestroyMkey => self.destroy_mkey(&decode(inp)),
            CreateCq => self.create_cq(&decode(inp), out),
            DestroyCq => self.destroy_cq(&decode(inp)),
            CreateQp => self.create_qp(&decode(inp), out),
            DestroyQp => self.destroy_qp(&decode(inp)),
            Rst2InitQp => self.rst2init_qp(&decode(inp)),
            Init2RtrQp => self.init2rtr_qp(&decode(inp)),
            Rtr2RtsQp => self.rtr2rts_qp(&decode(inp)),
            ToErrQp => self.qp_2err(&decode(inp)),
            ToRstQp => self.qp_2rst(&decode(inp)),
            ModifyNicVportContext => self.modify_vport(&decode(inp)),
            QueryNicVportContext => self.query_vport(&decode(inp), out),
            QueryQp => self.query_qp(&decode(inp), out),
            QueryVportState => self.query_vport_state(&decode(inp), out),
            QueryRoceAddress => self.query_roce_address(&decode(inp), out),
            SetRoceAddress => self.set_roce_address(&decode(inp)),
            AllocTransportDomain => self.alloc_transport_domain(out),
            DeallocTransportDomain => self.dealloc_transport_domain(&decode(inp)),
            CreateTis => self.create_tis(&decode(inp), out),
            DestroyTis => self.destroy_tis(&decode(inp)),
            CreateSq => self.create_sq(&decode(inp), out),
            ModifySq => self.modify_sq(&decode(inp)),
            DestroySq => self.destroy_sq(&decode(inp)),
            CreateRq => self.create_rq(&decode(inp), out),
            ModifyRq => self.modify_rq(&decode(inp)),
            DestroyRq => self.destroy_rq(&decode(inp)),
            CreateTir => self.create_tir(&decode(inp), out),
            DestroyTir => self.destroy_tir(&decode(inp)),
            CreateFlowTable => self.create_flow_table(&decode(inp), out),
            DestroyFlowTable => self.destroy_flow_table(&decode(inp)),
            CreateFlowGroup => self.create_flow_group(&decode(inp), out),
            DestroyFlowGroup => self.destroy_flow_group(&decode(inp)),
            SetFlowTableEntry => self.set_fte(ifc_op_mod(inp), &decode(inp)),
            DeleteFlowTableEntry => self.delete_fte(&decode(inp)),
            SetFlowTableRoot => self.set_flow_table_root(ifc_op_mod(inp), &decode(inp)),
            AllocXrcd => self.alloc_xrcd(out),
            DeallocXrcd => self.dealloc_xrcd(inp),
            QueryHcaVportPkey => self.query_hca_vport_pkey(inp, out),
            CreateRmp => self.create_rmp(inp, out),
            ModifyRmp => self.modify_rmp(inp),
            DestroyRmp => self.destroy_srq(ifc::destroy_rmp_in::RMPN.get(inp) as u32, false),
            QueryRmp => self.query_rmp(inp, out),
            CreateXrcSrq => self.create_xrc_srq(inp, out),
            DestroyXrcSrq => {
                self.destroy_srq(ifc::destroy_xrc_srq_in::XRC_SRQN.get(inp) as u32, true)
            }
            QueryXrcSrq => self.query_xrc_srq(inp, out),
            ArmXrcSrq => self.arm_xrc_srq(inp),
            _ => Err(fail(CmdStatus::BadOp, syn::UNKNOWN_OPCODE)),
        }
    }
}
