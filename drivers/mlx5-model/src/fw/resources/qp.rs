//! `CREATE_QP`, `DESTROY_QP`, the state transitions (`RST2INIT_QP`, `INIT2RTR_QP`,
//! `RTR2RTS_QP`, `2ERR_QP`, `2RST_QP`) and `QUERY_QP`.

use rdma_pmd::{BusAddr, QpNum};
use rdma_pmd_mlx5::control::{Access, Control, Cqn, Path, Pdn, QpParams, Transition};

use super::{contiguous_queue, limit, model_err, no_such, reachable, unsupported};
use crate::fw::codes::{self, syndrome as syn, CmdStatus, Opcode, QPC_ST_RC, ZERO_LEN_RQ};
use crate::fw::hca::{fail, Hca, QpObj, Res};
use crate::fw::ifc::{self, ads, cmd_hca_cap as gen, qpc, Field};
use crate::objects::QpState;

impl Hca {
    pub(super) fn create_qp(&mut self, inp: &[u8], out: &mut [u8]) -> Res {
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

    pub(super) fn destroy_qp(&mut self, inp: &[u8]) -> Res {
        let qpn = ifc::destroy_qp_in::QPN.get(inp) as u32;
        if !self.qps.contains_key(&qpn) {
            return Err(no_such());
        }
        self.control.destroy_qp(QpNum(qpn)).map_err(model_err)?;
        self.qps.remove(&qpn);
        Ok(())
    }

    pub(super) fn modify_qp(&mut self, op: Opcode, inp: &[u8]) -> Res {
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

    pub(super) fn query_qp(&mut self, inp: &[u8], out: &mut [u8]) -> Res {
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
}
