//! Shared receive queues as `mlx5_ib` makes them at ISSI 1 (kernel 6.12
//! `drivers/infiniband/hw/mlx5/srq_cmd.c`): a basic SRQ is a receive memory pool
//! (`CREATE_RMP`, `MODIFY_RMP` to arm its limit, `QUERY_RMP`, `DESTROY_RMP`) whose context
//! carries a linked-list WQ (`set_wq`: `wq_type` 0, `log_wq_stride` = `wqe_shift + 4`); an
//! XRC SRQ is `CREATE_XRC_SRQ` with an `xrc_srqc` (`set_srqc`: `log_rq_stride` =
//! `wqe_shift`, the XRC domain, the CQ, the user index), with `QUERY/ARM/DESTROY_XRC_SRQ`.
//! `mlx5_ib_dev_res_srq_init` (`main.c`) creates one of each when port 1 opens.
//!
//! The model checks what hardware checks and keeps the context to answer queries; it does not
//! consume an SRQ's receive WQEs (no QP can be attached to one yet: `CREATE_QP` refuses
//! `rq_type` SRQ), and it raises no limit event.

use super::{limit, no_such, queue_pages, reachable, unsupported, Start};
use crate::fw::codes::{syndrome as syn, CmdStatus};
use crate::fw::hca::{fail, Hca, Res, SrqObj};
use crate::fw::ifc::{self, cmd_hca_cap as gen, rmpc, wq, xrc_srqc as xc, Field};

/// `rmpc.state` ready (`MLX5_RMPC_STATE_RDY`, mlx5_ifc.h).
pub(crate) const RMPC_STATE_RDY: u64 = 1;
/// `wq.wq_type` linked list (`MLX5_WQ_TYPE_LINKED_LIST`): SRQ WQEs are linked by their next
/// segment.
pub(crate) const WQ_TYPE_LINKED_LIST: u64 = 0;
/// `xrc_srqc.state` good (`MLX5_XRC_SRQC_STATE_GOOD`).
pub(crate) const XRC_SRQC_STATE_GOOD: u64 = 0;
/// `arm_xrc_srq_in.op_mod` (`MLX5_ARM_XRC_SRQ_IN_OP_MOD_XRC_SRQ`).
pub(crate) const ARM_XRC_SRQ_OP_MOD: u64 = 1;

impl Hca {
    /// The checks both kinds share: count, size, stride, PD, the buffer and the doorbell
    /// record. `log_stride` is log2 of the WQE stride in bytes.
    fn srq_common(&self, s: &SrqObj, pas: &crate::fw::decoded::Entries) -> Res {
        limit(self.srqs.len(), self.cap(gen::LOG_MAX_SRQ))?;
        if u64::from(s.log_size) > self.cap(gen::LOG_MAX_SRQ_SZ) {
            return Err(fail(CmdStatus::BadParam, syn::QUEUE_TOO_BIG));
        }
        // A WQE is at least one 16-byte segment and at most `max_wqe_sz_rq` bytes.
        let stride = 1u64 << s.log_stride.min(31);
        if s.log_stride < 4 || stride > self.cap(gen::MAX_WQE_SZ_RQ) {
            return Err(fail(CmdStatus::BadParam, syn::UNSUPPORTED_CONTEXT));
        }
        if u64::from(s.lwm) >= 1u64 << s.log_size {
            return Err(fail(CmdStatus::BadParam, syn::UNSUPPORTED_CONTEXT));
        }
        if !self.pds.contains(&s.pd) {
            return Err(no_such());
        }
        let shift = 12 + u32::from(s.log_page_size);
        let start = Start::new(s.page_offset, stride);
        queue_pages(self, pas, shift, start, 1u64 << (s.log_size + s.log_stride))?;
        reachable(self, s.dbrec, 4)
    }

    fn new_srqn(&self) -> Result<u32, crate::fw::hca::Fail> {
        (1..1u32 << 24)
            .find(|n| !self.srqs.contains_key(n))
            .ok_or_else(|| fail(CmdStatus::ExceedLim, syn::OBJECT_LIMIT))
    }

    pub(super) fn create_rmp(&mut self, inp: &[u8], out: &mut [u8]) -> Res {
        use crate::fw::decoded::{Decode, Entries};
        let ctx = ifc::create_rmp_in::CTX;
        let w = rmpc::WQ.at(ctx);
        let get = |f: Field| f.get(inp);
        let wget = |f: Field| f.at(w).get(inp);
        // The kernel creates it ready; a linked-list WQ without signatures, umem or
        // end padding; the cyclic receive WQE format is not offered.
        if get(rmpc::STATE.at(ctx)) != RMPC_STATE_RDY {
            return Err(fail(CmdStatus::BadParam, syn::UNSUPPORTED_CONTEXT));
        }
        if get(rmpc::BASIC_CYCLIC_RCV_WQE.at(ctx)) != 0
            || wget(wq::WQ_TYPE) != WQ_TYPE_LINKED_LIST
            || wget(wq::WQ_SIGNATURE) != 0
            || wget(wq::END_PADDING_MODE) != 0
            || wget(wq::CD_SLAVE) != 0
            || wget(wq::DBR_UMEM_VALID) != 0
            || wget(wq::WQ_UMEM_VALID) != 0
        {
            return Err(unsupported());
        }
        let s = SrqObj {
            xrc: false,
            pd: wget(wq::PD) as u32,
            xrcd: 0,
            cqn: 0,
            user_index: 0,
            log_size: wget(wq::LOG_WQ_SZ) as u8,
            log_stride: wget(wq::LOG_WQ_STRIDE) as u8,
            log_page_size: wget(wq::LOG_WQ_PG_SZ) as u8,
            page_offset: wget(wq::PAGE_OFFSET) as u8,
            lwm: wget(wq::LWM) as u16,
            dbrec: wget(wq::DBR_ADDR),
        };
        let pas = Entries::decode(inp, ifc::create_rmp_in::PAS);
        self.srq_common(&s, &pas)?;
        let n = self.new_srqn()?;
        self.srqs.insert(n, s);
        ifc::create_rmp_out::RMPN.set(out, u64::from(n));
        Ok(())
    }

    pub(super) fn create_xrc_srq(&mut self, inp: &[u8], out: &mut [u8]) -> Res {
        use crate::fw::decoded::{Decode, Entries};
        let ctx = ifc::create_xrc_srq_in::XRC_SRQ_CONTEXT_ENTRY;
        let get = |f: Field| f.at(ctx).get(inp);
        if get(xc::STATE) != XRC_SRQC_STATE_GOOD {
            return Err(fail(CmdStatus::BadParam, syn::UNSUPPORTED_CONTEXT));
        }
        // A contiguous SRQ (no PAS), signatures, the reserved-lkey mode, the cyclic format
        // and umem are not offered.
        if get(xc::CONT_SRQ) != 0
            || get(xc::WQ_SIGNATURE) != 0
            || get(xc::RLKY) != 0
            || get(xc::BASIC_CYCLIC_RCV_WQE) != 0
            || get(xc::DBR_UMEM_VALID) != 0
            || get(xc::USER_INDEX_EQUAL_XRC_SRQN) != 0
            || ifc::create_xrc_srq_in::XRC_SRQ_UMEM_VALID.get(inp) != 0
        {
            return Err(unsupported());
        }
        let s = SrqObj {
            xrc: true,
            pd: get(xc::PD) as u32,
            xrcd: get(xc::XRCD) as u32,
            cqn: get(xc::CQN) as u32,
            user_index: get(xc::USER_INDEX) as u32,
            log_size: get(xc::LOG_XRC_SRQ_SIZE) as u8,
            // `log_rq_stride` is log2(stride) - 4 here (kernel `set_srqc`: `wqe_shift`).
            log_stride: get(xc::LOG_RQ_STRIDE) as u8 + 4,
            log_page_size: get(xc::LOG_PAGE_SIZE) as u8,
            page_offset: get(xc::PAGE_OFFSET) as u8,
            lwm: get(xc::LWM) as u16,
            dbrec: get(xc::DB_RECORD_ADDR_H) << 32 | get(xc::DB_RECORD_ADDR_L) << 2,
        };
        if !self.xrcds.contains(&s.xrcd) || !self.cqs.contains_key(&s.cqn) {
            return Err(no_such());
        }
        let pas = Entries::decode(inp, ifc::create_xrc_srq_in::PAS);
        self.srq_common(&s, &pas)?;
        let n = self.new_srqn()?;
        self.srqs.insert(n, s);
        ifc::create_xrc_srq_out::XRC_SRQN.set(out, u64::from(n));
        Ok(())
    }

    /// The SRQ `n` of the kind the command names (`BAD_RESOURCE` otherwise).
    fn srq(&self, n: u32, xrc: bool) -> Result<&SrqObj, crate::fw::hca::Fail> {
        self.srqs.get(&n).filter(|s| s.xrc == xrc).ok_or_else(no_such)
    }

    pub(super) fn destroy_srq(&mut self, n: u32, xrc: bool) -> Res {
        self.srq(n, xrc)?;
        // An XRC SRQ holds its CQ and domain; nothing holds an SRQ in the model (no QP is
        // created on one), so a destroy of an existing one succeeds.
        self.srqs.remove(&n);
        Ok(())
    }

    pub(super) fn modify_rmp(&mut self, inp: &[u8]) -> Res {
        use ifc::modify_rmp_in as m;
        let n = m::RMPN.get(inp) as u32;
        self.srq(n, false)?;
        // The RMP is ready and stays ready (`arm_rmp_cmd`): both states must say so.
        let ctx = m::CTX;
        if m::RMP_STATE.get(inp) != RMPC_STATE_RDY || rmpc::STATE.at(ctx).get(inp) != RMPC_STATE_RDY
        {
            return Err(fail(CmdStatus::BadParam, syn::UNSUPPORTED_CONTEXT));
        }
        if m::BITMASK_LWM.get(inp) == 1 {
            let lwm = wq::LWM.at(rmpc::WQ.at(ctx)).get(inp) as u16;
            self.set_lwm(n, lwm)?;
        }
        Ok(())
    }

    pub(super) fn arm_xrc_srq(&mut self, inp: &[u8]) -> Res {
        use ifc::arm_xrc_srq_in as a;
        if u64::from(super::ifc_op_mod(inp)) != ARM_XRC_SRQ_OP_MOD {
            return Err(fail(CmdStatus::BadParam, syn::BAD_OP_MOD));
        }
        let n = a::XRC_SRQN.get(inp) as u32;
        self.srq(n, true)?;
        self.set_lwm(n, a::LWM.get(inp) as u16)
    }

    /// The limit watermark must be below the queue's size (`BAD_PARAM`).
    fn set_lwm(&mut self, n: u32, lwm: u16) -> Res {
        let s = self.srqs.get_mut(&n).ok_or_else(no_such)?;
        if u64::from(lwm) >= 1u64 << s.log_size {
            return Err(fail(CmdStatus::BadParam, syn::UNSUPPORTED_CONTEXT));
        }
        s.lwm = lwm;
        Ok(())
    }

    pub(super) fn query_rmp(&mut self, inp: &[u8], out: &mut [u8]) -> Res {
        let n = ifc::query_rmp_in::RMPN.get(inp) as u32;
        let s = self.srq(n, false)?;
        let ctx = ifc::query_rmp_out::RMP_CONTEXT;
        let w = rmpc::WQ.at(ctx);
        rmpc::STATE.at(ctx).set(out, RMPC_STATE_RDY);
        let mut set = |f: Field, v: u64| f.at(w).set(out, v);
        set(wq::WQ_TYPE, WQ_TYPE_LINKED_LIST);
        set(wq::PD, u64::from(s.pd));
        set(wq::LWM, u64::from(s.lwm));
        set(wq::DBR_ADDR, s.dbrec);
        set(wq::LOG_WQ_STRIDE, u64::from(s.log_stride));
        set(wq::LOG_WQ_PG_SZ, u64::from(s.log_page_size));
        set(wq::PAGE_OFFSET, u64::from(s.page_offset));
        set(wq::LOG_WQ_SZ, u64::from(s.log_size));
        Ok(())
    }

    pub(super) fn query_xrc_srq(&mut self, inp: &[u8], out: &mut [u8]) -> Res {
        let n = ifc::query_xrc_srq_in::XRC_SRQN.get(inp) as u32;
        let s = self.srq(n, true)?;
        let ctx = ifc::query_xrc_srq_out::XRC_SRQ_CONTEXT_ENTRY;
        let mut set = |f: Field, v: u64| f.at(ctx).set(out, v);
        set(xc::STATE, XRC_SRQC_STATE_GOOD);
        set(xc::LOG_XRC_SRQ_SIZE, u64::from(s.log_size));
        set(xc::LOG_RQ_STRIDE, u64::from(s.log_stride - 4));
        set(xc::XRCD, u64::from(s.xrcd));
        set(xc::CQN, u64::from(s.cqn));
        set(xc::LOG_PAGE_SIZE, u64::from(s.log_page_size));
        set(xc::PAGE_OFFSET, u64::from(s.page_offset));
        set(xc::USER_INDEX, u64::from(s.user_index));
        set(xc::PD, u64::from(s.pd));
        set(xc::LWM, u64::from(s.lwm));
        set(xc::DB_RECORD_ADDR_H, s.dbrec >> 32);
        set(xc::DB_RECORD_ADDR_L, (s.dbrec & 0xffff_ffff) >> 2);
        Ok(())
    }
}

impl Hca {
    /// Whether an XRC SRQ holds CQ `cqn` (destroying it is then `RESOURCE_BUSY`).
    pub(crate) fn srq_holds_cq(&self, cqn: u32) -> bool {
        self.srqs.values().any(|s| s.xrc && s.cqn == cqn)
    }
}
