//! `ModelControl`: the driver's [`Control`] seam implemented directly on a model, without a
//! firmware. It serves the driver's tests that need a device's objects but not its bring-up
//! (today the doc examples of the driver's `qp` module) and the model's own tests; the
//! driver's end-to-end tests and the demo bring the model up through the firmware command
//! interface ([`crate::fw`]) instead. Both paths
//! end in the same resource commands (the `commands` module), so an object is the same
//! object whichever path created it.
//!
//! This is the only module that knows the driver crate: it translates the driver's
//! parameters (`MkeyParams`, `CqParams`, `QpParams`, `Transition`) into the model's own
//! command types and back.

use std::sync::Arc;

use rdma_pmd::{Error, QpNum};
use rdma_pmd_mlx5::control::{
    Access, Control, CqParams, Cqn, DeviceCaps, Mkey, MkeyParams, Path, Pdn, QpParams, Transition,
    Translation, Uar,
};

use crate::commands::QpCmd;
use crate::model::{Model, Shared, UAR_PAGE};
use crate::objects::{self, QpSpec, QueueBuf, Rights, Route, Service, Xlate};

/// A [`Control`] that hands the command fields to a model. Cheap to clone; every clone talks
/// to the same device.
#[derive(Clone)]
pub struct ModelControl {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ModelControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ModelControl(model {})", self.shared.id)
    }
}

impl Model {
    /// The control path to this model.
    pub fn control(&self) -> ModelControl {
        ModelControl { shared: self.shared().clone() }
    }
}

fn rights(a: Access) -> Rights {
    Rights {
        local_write: a.contains(Access::LOCAL_WRITE),
        remote_write: a.contains(Access::REMOTE_WRITE),
        remote_read: a.contains(Access::REMOTE_READ),
        remote_atomic: a.contains(Access::REMOTE_ATOMIC),
    }
}

impl Control for ModelControl {
    fn caps(&self) -> DeviceCaps {
        let c = self.shared.dev().caps;
        DeviceCaps {
            log_max_qp_sz: c.log_max_qp_sz,
            log_max_cq_sz: c.log_max_cq_sz,
            max_wqe_sz_sq: c.max_wqe_sz_sq,
            log_bf_reg_size: c.log_bf_reg_size,
        }
    }

    fn alloc_uar(&mut self) -> Result<Uar, Error> {
        let index = self.shared.alloc_uar()?;
        Ok(Uar { index, bar_offset: index as usize * UAR_PAGE })
    }

    fn dealloc_uar(&mut self, uar: Uar) -> Result<(), Error> {
        if uar.bar_offset != uar.index as usize * UAR_PAGE {
            return Err(Error::InvalidArgument("UAR offset does not match its index"));
        }
        self.shared.dealloc_uar(uar.index)
    }

    fn alloc_pd(&mut self) -> Result<Pdn, Error> {
        self.shared.alloc_pd().map(Pdn)
    }

    fn dealloc_pd(&mut self, pd: Pdn) -> Result<(), Error> {
        self.shared.dealloc_pd(pd.0)
    }

    fn create_mkey(&mut self, p: &MkeyParams) -> Result<Mkey, Error> {
        let xlate = match p.translation {
            Translation::Mtt { base, page_shift } => Xlate::Mtt { base: base.0, page_shift },
            Translation::Physical => Xlate::Physical,
        };
        self.shared
            .create_mkey(objects::Mkey {
                pd: p.pd.0,
                start: p.start,
                len: p.len,
                rights: rights(p.access),
                xlate,
            })
            .map(Mkey)
    }

    fn destroy_mkey(&mut self, key: Mkey) -> Result<(), Error> {
        self.shared.destroy_mkey(key.0)
    }

    fn create_cq(&mut self, p: &CqParams) -> Result<Cqn, Error> {
        if p.uar.bar_offset != p.uar.index as usize * UAR_PAGE {
            return Err(Error::InvalidArgument("UAR offset does not match its index"));
        }
        self.shared
            .create_cq(p.log_size, QueueBuf::contiguous(p.buf.0), p.dbrec.0, p.uar.index)
            .map(Cqn)
    }

    fn destroy_cq(&mut self, cq: Cqn) -> Result<(), Error> {
        self.shared.destroy_cq(cq.0)
    }

    fn create_qp(&mut self, p: &QpParams) -> Result<QpNum, Error> {
        if p.uar.bar_offset != p.uar.index as usize * UAR_PAGE {
            return Err(Error::InvalidArgument("UAR offset does not match its index"));
        }
        self.shared
            .create_qp(QpSpec {
                service: match p.service {
                    rdma_pmd_mlx5::control::Service::Rc => Service::Rc,
                    rdma_pmd_mlx5::control::Service::Ud => Service::Ud,
                    rdma_pmd_mlx5::control::Service::Gsi => Service::Gsi,
                },
                pd: p.pd.0,
                send_cq: p.send_cq.0,
                recv_cq: p.recv_cq.0,
                log_sq_size: p.log_sq_size,
                log_rq_size: p.log_rq_size,
                log_rq_stride: p.log_rq_stride,
                buf: QueueBuf::contiguous(p.buf.0),
                dbrec: p.dbrec.0,
                uar: p.uar.index,
            })
            .map(QpNum)
    }

    fn modify_qp(&mut self, qp: QpNum, t: &Transition) -> Result<(), Error> {
        let cmd = match *t {
            Transition::RstToInit { port, access } => {
                QpCmd::RstToInit { port, rights: rights(access) }
            }
            Transition::InitToRtr { remote_qpn, path, mtu, rq_psn } => QpCmd::InitToRtr {
                remote_qpn: remote_qpn.0,
                route: match path {
                    Path::Loopback => Route::Loopback,
                    Path::RoceV2 {
                        dgid,
                        dmac,
                        sgid_index,
                        udp_sport,
                        hop_limit,
                        traffic_class,
                        flow_label,
                        ..
                    } => Route::RoceV2 {
                        dgid,
                        dmac,
                        sgid_index,
                        tclass: traffic_class,
                        hop_limit,
                        flow_label,
                        udp_sport,
                    },
                },
                mtu,
                rq_psn,
            },
            Transition::RtrToRts { sq_psn, timeout, retry_cnt, rnr_retry } => {
                QpCmd::RtrToRts { sq_psn, timeout, retry_cnt, rnr_retry }
            }
            Transition::ToErr => QpCmd::ToErr,
            Transition::ToRst => QpCmd::ToRst,
            Transition::RstToInitUd { port, qkey, .. } => QpCmd::RstToInitUd { port, qkey },
            Transition::InitToRtrUd { .. } => QpCmd::InitToRtrUd,
            Transition::RtrToRtsUd { sq_psn, .. } => QpCmd::RtrToRtsUd { sq_psn },
        };
        self.shared.modify_qp(qp.0, cmd)
    }

    fn destroy_qp(&mut self, qp: QpNum) -> Result<(), Error> {
        self.shared.destroy_qp(qp.0)
    }
}
