//! `CREATE_QP`, `DESTROY_QP`, the state transitions (`RST2INIT_QP`, `INIT2RTR_QP`,
//! `RTR2RTS_QP`, `2ERR_QP`, `2RST_QP`) and `QUERY_QP`.

use super::{limit, model_err, no_such, queue_pages, reachable, unsupported, Start};
use crate::commands::QpCmd;
use crate::fw::codes::{
    self, syndrome as syn, CmdStatus, ATOMIC_MODE_MAX_8B, QPC_ST_QP1, QPC_ST_RC, QPC_ST_REG_UMR,
    QPC_ST_UD, ZERO_LEN_RQ,
};
use crate::fw::decoded::{
    CreateQp, DestroyQp, Init2RtrQp, Qp2Err, Qp2Rst, QueryQp, Rst2InitQp, Rtr2RtsQp,
};
use crate::fw::hca::{fail, Hca, QpObj, Res};
use crate::fw::ifc::{self, cmd_hca_cap as gen, qpc, Field};
use crate::objects::{QpSpec, QpState, Rights, Route, Service};

impl Hca {
    pub(super) fn create_qp(&mut self, d: &CreateQp, out: &mut [u8]) -> Res {
        limit(self.qps.len(), self.cap(gen::LOG_MAX_QP))?;
        let q = &d.qpc;
        // REG_UMR: the kernel's memory registration QP (`umr.c` `mlx5r_umr_resource_init`,
        // created before the first user MR by `mlx5_ib_reg_user_mr`): a send queue only, on
        // the device itself. The engine runs it as a loopback RC send queue; it executes no
        // UMR WQE (opcode 0x25 completes with `LOCAL_QP_OP_ERR`, as any opcode the model does
        // not execute), so the kernel must register memory with `CREATE_MKEY`.
        let umr = q.st == QPC_ST_REG_UMR;
        let service = match q.st {
            QPC_ST_RC | QPC_ST_REG_UMR => Service::Rc,
            QPC_ST_UD => Service::Ud,
            QPC_ST_QP1 => Service::Gsi,
            _ => return Err(unsupported()),
        };
        if umr && q.rq_type != ZERO_LEN_RQ {
            return Err(unsupported());
        }
        if q.no_sq {
            return Err(unsupported());
        }
        if d.wq_umem_valid {
            return Err(unsupported());
        }
        let (scq, rcq, uar) = (q.cqn_snd, q.cqn_rcv, q.uar_page);
        // The kernel gives a UMR QP no PD (6.12 `qp.c` `create_kernel_qp` sets `pd` only for
        // other types, `latency_sensitive` instead): UMR works on the function's memory keys
        // whatever their PD. The model's engine runs every QP in a PD, so the firmware gives
        // the UMR QP one of its own, which no driver command names, and frees it with the QP.
        if umr && q.pd != 0 && !self.pds.contains(&q.pd) {
            return Err(no_such());
        }
        if (!umr && !self.pds.contains(&q.pd))
            || !self.cqs.contains_key(&scq)
            || !self.cqs.contains_key(&rcq)
        {
            return Err(no_such());
        }
        if !self.uars.contains(&uar) {
            return Err(no_such());
        }
        let log_sq_size = q.log_sq_size;
        let log_rq_size = match q.rq_type {
            0 => Some(q.log_rq_size),
            ZERO_LEN_RQ => None,
            _ => return Err(unsupported()),
        };
        let max = self.cap(gen::LOG_MAX_QP_SZ);
        if u64::from(log_sq_size) > max || log_rq_size.is_some_and(|l| u64::from(l) > max) {
            return Err(fail(CmdStatus::BadParam, syn::QUEUE_TOO_BIG));
        }
        // qpc.log_rq_stride is log2(stride) - 4 (the stride is at least one 16-byte segment).
        let log_rq_stride = q.log_rq_stride + 4;
        let rq_bytes = log_rq_size.map_or(0, |l| 1u64 << (l + log_rq_stride));
        let bytes = rq_bytes + (64u64 << log_sq_size);
        let shift = 12 + u32::from(q.log_page_size);
        let start = Start::new(q.page_offset, 64u64.max(1 << log_rq_stride));
        let buf = queue_pages(self, &d.pas, shift, start, bytes)?;
        let dbrec = q.dbr_addr;
        reachable(self, dbrec, 8)?;
        let pd = if umr { self.shared.alloc_pd().map_err(model_err)? } else { q.pd };
        let spec = QpSpec {
            service,
            pd,
            send_cq: scq,
            recv_cq: rcq,
            log_sq_size,
            log_rq_size,
            log_rq_stride,
            buf,
            dbrec,
            uar,
        };
        let qpn = match self.shared.create_qp(spec) {
            Ok(n) => n,
            Err(e) => {
                if umr {
                    // Best effort: the PD was made for this QP alone.
                    let _ = self.shared.dealloc_pd(pd);
                }
                return Err(model_err(e));
            }
        };
        self.qps.insert(qpn, QpObj { pd, cqs: [scq, rcq], uar, umr });
        ifc::create_qp_out::QPN.set(out, u64::from(qpn));
        Ok(())
    }

    pub(super) fn destroy_qp(&mut self, d: &DestroyQp) -> Res {
        let qpn = d.qpn;
        if !self.qps.contains_key(&qpn) {
            return Err(no_such());
        }
        self.shared.destroy_qp(qpn).map_err(model_err)?;
        if let Some(o) = self.qps.remove(&qpn) {
            if o.umr {
                // The UMR QP's own PD (see `create_qp`).
                self.shared.dealloc_pd(o.pd).map_err(model_err)?;
            }
        }
        Ok(())
    }

    /// The QP exists (`BAD_RESOURCE`) and, for a transition that starts from one, is in state
    /// `from` (`BAD_QP_STATE`).
    fn transition_from(&self, qpn: u32, from: Option<QpState>) -> Res {
        if !self.qps.contains_key(&qpn) {
            return Err(no_such());
        }
        let state = self.shared.dev().qps.get(&qpn).map(|q| q.state);
        if from.is_some() && state != from {
            return Err(fail(CmdStatus::BadQpState, syn::QP_TRANSITION));
        }
        Ok(())
    }

    pub(super) fn rst2init_qp(&mut self, d: &Rst2InitQp) -> Res {
        self.transition_from(d.qpn, Some(QpState::Reset))?;
        let port = d.qpc.primary_address_path.vhca_port_num;
        if port != 1 {
            return Err(fail(CmdStatus::BadParam, syn::BAD_PORT));
        }
        if self.service(d.qpn).datagram() {
            // UD/GSI: the Q_Key is the one field of the context that matters (the kernel's
            // `__mlx5_ib_modify_qp` sets it, with the P_Key index, for these types).
            let cmd = QpCmd::RstToInitUd { port, qkey: d.qpc.q_key };
            return self.shared.modify_qp(d.qpn, cmd).map_err(model_err);
        }
        if self.is_umr(d.qpn) {
            // No remote access: UMR works on the device's own keys.
            let rights = Rights::default();
            return self
                .shared
                .modify_qp(d.qpn, QpCmd::RstToInit { port, rights })
                .map_err(model_err);
        }
        // `rae` grants remote atomics in the mode `atomic_mode` names; the model executes the
        // 8-byte ones (IB-compatible, CX, 8B) and refuses the extended sizes.
        if d.qpc.rae && d.qpc.atomic_mode > ATOMIC_MODE_MAX_8B {
            return Err(fail(CmdStatus::BadParam, syn::MODEL_REFUSED));
        }
        let rights = Rights {
            local_write: false,
            remote_write: d.qpc.rwe,
            remote_read: d.qpc.rre,
            remote_atomic: d.qpc.rae,
        };
        self.shared.modify_qp(d.qpn, QpCmd::RstToInit { port, rights }).map_err(model_err)
    }

    /// Whether QP `qpn` was created as a REG_UMR QP.
    fn is_umr(&self, qpn: u32) -> bool {
        self.qps.get(&qpn).is_some_and(|q| q.umr)
    }

    /// The service type QP `qpn` was created with (the caller checked it exists).
    fn service(&self, qpn: u32) -> Service {
        self.shared.dev().qps.get(&qpn).map_or(Service::Rc, |q| q.spec.service)
    }

    pub(super) fn init2rtr_qp(&mut self, d: &Init2RtrQp) -> Res {
        self.transition_from(d.qpn, Some(QpState::Init))?;
        if self.service(d.qpn).datagram() {
            return self.shared.modify_qp(d.qpn, QpCmd::InitToRtrUd).map_err(model_err);
        }
        let q = &d.qpc;
        let path = &q.primary_address_path;
        // A UMR QP has no peer and sends no packet: the kernel moves it to RTR with the state
        // alone (`umr.c` `mlx5r_umr_qp_rst2rts`, mask `IB_QP_STATE`: no path, MTU 0); it stays
        // on the device, connected to itself, with the smallest MTU (256, code 1) the engine
        // keeps for it.
        let umr = self.is_umr(d.qpn);
        let mtu = if umr && q.mtu == 0 { 1 } else { q.mtu };
        if !(1..=5).contains(&mtu) {
            return Err(fail(CmdStatus::BadParam, syn::BAD_MTU));
        }
        let route = if path.fl || umr {
            Route::Loopback
        } else {
            if !self.roce_en {
                return Err(fail(CmdStatus::BadParam, syn::ROCE_DISABLED));
            }
            Route::RoceV2 {
                dgid: path.rgid_rip,
                dmac: path.rmac(),
                sgid_index: path.src_addr_index,
                tclass: path.tclass,
                hop_limit: path.hop_limit,
                flow_label: path.flow_label,
                udp_sport: path.udp_sport,
            }
        };
        let cmd = QpCmd::InitToRtr {
            remote_qpn: if umr { d.qpn } else { q.remote_qpn },
            route,
            mtu,
            rq_psn: q.next_rcv_psn,
        };
        self.shared.modify_qp(d.qpn, cmd).map_err(model_err)
    }

    pub(super) fn rtr2rts_qp(&mut self, d: &Rtr2RtsQp) -> Res {
        self.transition_from(d.qpn, Some(QpState::Rtr))?;
        let q = &d.qpc;
        if self.service(d.qpn).datagram() {
            let cmd = QpCmd::RtrToRtsUd { sq_psn: q.next_send_psn };
            return self.shared.modify_qp(d.qpn, cmd).map_err(model_err);
        }
        let cmd = QpCmd::RtrToRts {
            sq_psn: q.next_send_psn,
            timeout: q.primary_address_path.ack_timeout,
            retry_cnt: q.retry_count,
            rnr_retry: q.rnr_retry,
        };
        self.shared.modify_qp(d.qpn, cmd).map_err(model_err)
    }

    pub(super) fn qp_2err(&mut self, d: &Qp2Err) -> Res {
        self.transition_from(d.qpn, None)?;
        self.shared.modify_qp(d.qpn, QpCmd::ToErr).map_err(model_err)
    }

    pub(super) fn qp_2rst(&mut self, d: &Qp2Rst) -> Res {
        self.transition_from(d.qpn, None)?;
        self.shared.modify_qp(d.qpn, QpCmd::ToRst).map_err(model_err)
    }

    pub(super) fn query_qp(&mut self, d: &QueryQp, out: &mut [u8]) -> Res {
        let qpn = d.qpn;
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
        let umr = self.qps.get(&qpn).is_some_and(|o| o.umr);
        let st = match q.spec.service {
            Service::Rc if umr => QPC_ST_REG_UMR,
            Service::Rc => QPC_ST_RC,
            Service::Ud => QPC_ST_UD,
            Service::Gsi => QPC_ST_QP1,
        };
        set(qpc::ST, u64::from(st));
        if q.spec.service.datagram() {
            set(qpc::Q_KEY, u64::from(q.qkey));
        }
        // A UMR QP's PD is the firmware's own: the driver gave none.
        set(qpc::PD, if umr { 0 } else { u64::from(q.spec.pd) });
        set(qpc::UAR_PAGE, u64::from(q.spec.uar));
        set(qpc::LOG_SQ_SIZE, u64::from(q.spec.log_sq_size));
        match q.spec.log_rq_size {
            Some(l) => set(qpc::LOG_RQ_SIZE, u64::from(l)),
            None => set(qpc::RQ_TYPE, u64::from(ZERO_LEN_RQ)),
        }
        set(qpc::LOG_RQ_STRIDE, u64::from(q.spec.log_rq_stride.saturating_sub(4)));
        set(qpc::CQN_SND, u64::from(q.spec.send_cq));
        set(qpc::CQN_RCV, u64::from(q.spec.recv_cq));
        set(qpc::REMOTE_QPN, u64::from(q.remote_qpn));
        set(qpc::DBR_ADDR, q.spec.dbrec);
        Ok(())
    }
}
