//! Resource commands with the checks firmware applies (PRM command semantics; the kernel's
//! `mlx5_ifc.h` layouts name the fields). A failed check returns an error with errno EINVAL,
//! as the kernel reports a firmware `BAD_PARAM`/`BAD_RES_STATE` status; running out of a
//! resource returns ENOMEM.
//!
//! | command | checks |
//! |---|---|
//! | `ALLOC_UAR` | an index in `1..uar_pages` is free (page 0 is the initialization segment) |
//! | `DEALLOC_UAR` | allocated; no CQ or QP uses it |
//! | `DEALLOC_PD` | allocated; no mkey or QP uses it |
//! | `CREATE_MKEY` | PD exists; `len > 0`; `start + len` does not overflow; MTT: `12 <= page_shift <= 30`, `base` page aligned |
//! | `CREATE_CQ` | `log_size <= log_max_cq_sz`; buffer 4 KiB aligned; doorbell record 8-byte aligned; UAR allocated |
//! | `DESTROY_CQ` | exists; no QP uses it |
//! | `CREATE_QP` | PD, CQs, UAR exist; `log_sq_size <= log_max_qp_sz`, `log_rq_size <= log_max_qp_sz`, `4 <= log_rq_stride <= 11`; buffer 4 KiB aligned; doorbell record 8-byte aligned |
//! | `CREATE_QP` (GSI) | no other GSI QP on the port (QP 1 is one QP per port) |
//! | `RST2INIT` | state RST; port 1; the transition's kind (RC, or UD/GSI with its Q_Key) matches the QP's service |
//! | `INIT2RTR` | state INIT; RC: MTU 1..=5; remote QPN and PSN within 24 bits; RoCE source GID index exists |
//! | `RTR2RTS` | state RTR; PSN within 24 bits; RC: timeout ≤ 31; retry and RNR retry ≤ 7 |
//! | `2ERR` | any state; flushes |
//! | `2RST` | any state; the QP's counters restart at 0 |
//! | `DESTROY_*` | the object exists |

use rdma_pmd::{Errno, Error};

use crate::engine::flush_on_error;
use crate::model::Shared;
use crate::objects::{
    Cq, Mkey, Qp, QpSpec, QpState, QueueBuf, Rights, Route, Service, UarState, Xlate,
};

fn inval(what: &'static str) -> Error {
    Error::InvalidArgument(what)
}

/// A QP state transition.
#[derive(Clone, Copy, Debug)]
pub(crate) enum QpCmd {
    RstToInit {
        port: u8,
        rights: Rights,
    },
    InitToRtr {
        remote_qpn: u32,
        route: Route,
        mtu: u8,
        rq_psn: u32,
    },
    RtrToRts {
        sq_psn: u32,
        timeout: u8,
        retry_cnt: u8,
        rnr_retry: u8,
    },
    /// RST2INIT of a UD or GSI QP: the port and the QP's Q_Key.
    RstToInitUd {
        port: u8,
        qkey: u32,
    },
    /// INIT2RTR of a UD or GSI QP: a datagram QP has no peer.
    InitToRtrUd,
    /// RTR2RTS of a UD or GSI QP.
    RtrToRtsUd {
        sq_psn: u32,
    },
    ToErr,
    ToRst,
}

impl Shared {
    pub(crate) fn alloc_uar(&self) -> Result<u32, Error> {
        let mut dev = self.dev();
        let idx = (1..dev.uar_pages)
            .find(|i| !dev.uars.contains_key(i))
            .ok_or(Error::Device(Errno::ENOMEM))?;
        dev.uars.insert(idx, UarState::default());
        Ok(idx)
    }

    pub(crate) fn dealloc_uar(&self, idx: u32) -> Result<(), Error> {
        let mut dev = self.dev();
        if !dev.uars.contains_key(&idx) {
            return Err(inval("unknown UAR"));
        }
        if dev.cqs.values().any(|c| c.uar == idx) || dev.qps.values().any(|q| q.spec.uar == idx) {
            return Err(inval("UAR still used by a CQ or QP"));
        }
        dev.uars.remove(&idx);
        Ok(())
    }

    pub(crate) fn alloc_pd(&self) -> Result<u32, Error> {
        let mut dev = self.dev();
        let pd = dev.next_pd;
        dev.next_pd += 1;
        dev.pds.insert(pd);
        Ok(pd)
    }

    pub(crate) fn dealloc_pd(&self, pd: u32) -> Result<(), Error> {
        let mut dev = self.dev();
        if !dev.pds.contains(&pd) {
            return Err(inval("unknown PD"));
        }
        if dev.mkeys.values().any(|m| m.pd == pd) || dev.qps.values().any(|q| q.spec.pd == pd) {
            return Err(inval("PD still used by a memory key or QP"));
        }
        dev.pds.remove(&pd);
        Ok(())
    }

    pub(crate) fn create_mkey(&self, mk: Mkey) -> Result<u32, Error> {
        let mut dev = self.dev();
        if !dev.pds.contains(&mk.pd) {
            return Err(inval("unknown PD"));
        }
        if mk.len == 0 || mk.start.checked_add(mk.len).is_none() {
            return Err(inval("memory key range empty or overflowing"));
        }
        if let Xlate::Mtt { base, page_shift } = mk.xlate {
            if !(12..=30).contains(&page_shift) {
                return Err(inval("MTT page size outside 4 KiB..1 GiB"));
            }
            if base & ((1u64 << page_shift) - 1) != 0 {
                return Err(inval("MTT base not page aligned"));
            }
        }
        if dev.next_mkey > 0x00ff_ffff {
            return Err(Error::Device(Errno::ENOMEM));
        }
        // mkey = index << 8 | variant; the variant changes on every creation so a stale key
        // does not name a new region. Never MLX5_INVALID_LKEY (0x100).
        let mut key;
        loop {
            key = (dev.next_mkey << 8) | u32::from(dev.mkey_variant);
            dev.mkey_variant = dev.mkey_variant.wrapping_add(0x11);
            dev.next_mkey += 1;
            if key != 0x100 && !dev.mkeys.contains_key(&key) {
                break;
            }
        }
        dev.mkeys.insert(key, mk);
        Ok(key)
    }

    pub(crate) fn destroy_mkey(&self, key: u32) -> Result<(), Error> {
        self.dev().mkeys.remove(&key).map(|_| ()).ok_or(inval("unknown memory key"))
    }

    pub(crate) fn create_cq(
        &self,
        log_size: u8,
        buf: QueueBuf,
        dbrec: u64,
        uar: u32,
    ) -> Result<u32, Error> {
        let mut dev = self.dev();
        if log_size > dev.caps.log_max_cq_sz {
            return Err(inval("CQ larger than log_max_cq_sz"));
        }
        if buf.base() & 0xfff != 0 {
            return Err(inval("CQ buffer not page aligned"));
        }
        if dbrec & 7 != 0 {
            return Err(inval("CQ doorbell record not 8-byte aligned"));
        }
        if !dev.uars.contains_key(&uar) {
            return Err(inval("unknown UAR"));
        }
        let cqn = dev.next_cqn;
        if cqn > 0x00ff_ffff {
            return Err(Error::Device(Errno::ENOMEM));
        }
        dev.next_cqn += 1;
        dev.cqs.insert(
            cqn,
            Cq { log_size, buf, dbrec, uar, pi: 0, armed: false, eqn: None, error: false },
        );
        Ok(cqn)
    }

    pub(crate) fn destroy_cq(&self, cqn: u32) -> Result<(), Error> {
        let mut dev = self.dev();
        if !dev.cqs.contains_key(&cqn) {
            return Err(inval("unknown CQ"));
        }
        if dev.qps.values().any(|q| q.spec.send_cq == cqn || q.spec.recv_cq == cqn) {
            return Err(inval("CQ still used by a QP"));
        }
        dev.cqs.remove(&cqn);
        Ok(())
    }

    pub(crate) fn create_qp(&self, s: QpSpec) -> Result<u32, Error> {
        let mut dev = self.dev();
        if !dev.pds.contains(&s.pd) {
            return Err(inval("unknown PD"));
        }
        if !dev.cqs.contains_key(&s.send_cq) || !dev.cqs.contains_key(&s.recv_cq) {
            return Err(inval("unknown CQ"));
        }
        if !dev.uars.contains_key(&s.uar) {
            return Err(inval("unknown UAR"));
        }
        if s.log_sq_size > dev.caps.log_max_qp_sz {
            return Err(inval("send queue larger than log_max_qp_sz"));
        }
        if s.log_rq_size.is_some_and(|l| l > dev.caps.log_max_qp_sz) {
            return Err(inval("receive queue larger than log_max_qp_sz"));
        }
        if !(4..=11).contains(&s.log_rq_stride) {
            return Err(inval("receive WQE stride outside 16..2048 bytes"));
        }
        if s.buf.base() & 0xfff != 0 {
            return Err(inval("QP buffer not page aligned"));
        }
        if s.dbrec & 7 != 0 {
            return Err(inval("QP doorbell record not 8-byte aligned"));
        }
        if s.service == Service::Gsi && dev.qps.values().any(|q| q.spec.service == Service::Gsi) {
            return Err(inval("the port already has its GSI QP"));
        }
        let qpn = dev.next_qpn;
        if qpn > 0x00ff_ffff {
            return Err(Error::Device(Errno::ENOMEM));
        }
        dev.next_qpn += 1;
        let gen = dev.next_gen;
        dev.next_gen += 1;
        dev.qps.insert(
            qpn,
            Qp {
                spec: s,
                state: QpState::Reset,
                rights: Rights::default(),
                remote_qpn: 0,
                route: Route::Loopback,
                qkey: 0,
                mtu: 256,
                epsn: 0,
                npsn: 0,
                retry_cnt: 0,
                rnr_retry: 0,
                ack_timeout: 0,
                req: Default::default(),
                resp: Default::default(),
                sq_pi: 0,
                rq_ci: 0,
                pending: Default::default(),
                gen,
            },
        );
        Ok(qpn)
    }

    pub(crate) fn modify_qp(&self, qpn: u32, cmd: QpCmd) -> Result<(), Error> {
        let mut guard = self.dev();
        let dev = &mut *guard;
        let next_gen = dev.next_gen;
        let Some(qp) = dev.qps.get_mut(&qpn) else { return Err(inval("unknown QP")) };
        let bad = || Err(inval("QP state transition not allowed from the current state"));
        let datagram_cmd = matches!(
            cmd,
            QpCmd::RstToInitUd { .. } | QpCmd::InitToRtrUd | QpCmd::RtrToRtsUd { .. }
        );
        let rc_cmd = matches!(
            cmd,
            QpCmd::RstToInit { .. } | QpCmd::InitToRtr { .. } | QpCmd::RtrToRts { .. }
        );
        if (datagram_cmd && !qp.spec.service.datagram()) || (rc_cmd && qp.spec.service.datagram()) {
            return Err(inval("transition fields of another QP service type"));
        }
        match cmd {
            QpCmd::RstToInitUd { port, qkey } => {
                if qp.state != QpState::Reset {
                    return bad();
                }
                if port != 1 {
                    return Err(inval("no such port"));
                }
                qp.qkey = qkey;
                qp.state = QpState::Init;
            }
            QpCmd::InitToRtrUd => {
                if qp.state != QpState::Init {
                    return bad();
                }
                qp.mtu = crate::responder::UD_MTU;
                qp.state = QpState::Rtr;
            }
            QpCmd::RtrToRtsUd { sq_psn } => {
                if qp.state != QpState::Rtr {
                    return bad();
                }
                if sq_psn > 0x00ff_ffff {
                    return Err(inval("PSN wider than 24 bits"));
                }
                qp.npsn = sq_psn;
                qp.state = QpState::Rts;
            }
            QpCmd::RstToInit { port, rights } => {
                if qp.state != QpState::Reset {
                    return bad();
                }
                if port != 1 {
                    return Err(inval("no such port"));
                }
                qp.rights = rights;
                qp.state = QpState::Init;
            }
            QpCmd::InitToRtr { remote_qpn, route, mtu, rq_psn } => {
                if qp.state != QpState::Init {
                    return bad();
                }
                if !(1..=5).contains(&mtu) {
                    return Err(inval("path MTU outside 256..4096"));
                }
                if remote_qpn > 0x00ff_ffff || rq_psn > 0x00ff_ffff {
                    return Err(inval("remote QPN or PSN wider than 24 bits"));
                }
                if let Route::RoceV2 { sgid_index, .. } = route {
                    if usize::from(sgid_index) >= self.gids.len() {
                        return Err(inval("source GID index not in the GID table"));
                    }
                }
                qp.remote_qpn = remote_qpn;
                qp.route = route;
                qp.mtu = 128 << mtu;
                qp.epsn = rq_psn;
                qp.resp = Default::default();
                qp.state = QpState::Rtr;
            }
            QpCmd::RtrToRts { sq_psn, timeout, retry_cnt, rnr_retry } => {
                if qp.state != QpState::Rtr {
                    return bad();
                }
                if sq_psn > 0x00ff_ffff || timeout > 31 || retry_cnt > 7 || rnr_retry > 7 {
                    return Err(inval("PSN, timeout or retry count out of range"));
                }
                qp.npsn = sq_psn;
                qp.retry_cnt = retry_cnt;
                qp.rnr_retry = rnr_retry;
                qp.ack_timeout = timeout;
                qp.req = Default::default();
                qp.req.una = sq_psn;
                qp.state = QpState::Rts;
            }
            QpCmd::ToErr => {
                qp.state = QpState::Error;
                flush_on_error(self, qp, qpn, &mut dev.ready);
                drop(guard);
                self.kick();
            }
            QpCmd::ToRst => {
                let dropped = qp.pending.len() as u64;
                qp.pending.clear();
                qp.state = QpState::Reset;
                qp.sq_pi = 0;
                qp.rq_ci = 0;
                qp.req = Default::default();
                qp.resp = Default::default();
                qp.rights = Rights::default();
                qp.qkey = 0;
                qp.gen = next_gen;
                dev.next_gen += 1;
                dev.ready.remove(&qpn);
                self.outstanding.fetch_sub(dropped, std::sync::atomic::Ordering::AcqRel);
            }
        }
        Ok(())
    }

    pub(crate) fn destroy_qp(&self, qpn: u32) -> Result<(), Error> {
        let mut dev = self.dev();
        let qp = dev.qps.remove(&qpn).ok_or(inval("unknown QP"))?;
        dev.ready.remove(&qpn);
        self.outstanding.fetch_sub(qp.pending.len() as u64, std::sync::atomic::Ordering::AcqRel);
        Ok(())
    }
}

/// Hooks for the vector tests, which replay WQEs whose keys, QPN and counter are fixed.
#[cfg(test)]
impl Shared {
    /// Create a memory key with a chosen value.
    pub(crate) fn test_mkey_with_key(&self, key: u32, mk: Mkey) {
        assert!(self.dev().mkeys.insert(key, mk).is_none(), "key {key:#x} exists");
    }

    /// Give QP `old` the number `new`.
    pub(crate) fn test_renumber_qp(&self, old: u32, new: u32) {
        let mut dev = self.dev();
        let qp = dev.qps.remove(&old).expect("QP exists");
        assert!(dev.qps.insert(new, qp).is_none(), "QPN {new:#x} exists");
    }

    /// Start the QP's send counter at `pi` (as if `pi` WQEBBs had been executed).
    pub(crate) fn test_set_sq_counter(&self, qpn: u32, pi: u16) {
        self.dev().qps.get_mut(&qpn).expect("QP exists").sq_pi = pi;
    }
}
