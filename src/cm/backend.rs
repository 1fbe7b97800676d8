//! What the CM needs from a backend: MADs on QP1 ([`MadPort`]), and the data QPs it moves
//! through their states ([`CmQp`], found in a [`QpSet`]).
//!
//! The two are separate because a data QP tracks its own state (posting checks that it is in
//! RTS): the CM moves it by calling the QP, never behind its back. The application owns its
//! QPs and lends them to [`super::Cm::poll`] (which may need to move one when a REP or DREQ
//! arrives) and to the calls that start or end a connection.

use crate::addr::{Gid, Mac, QpNum};
use crate::error::Result;

use super::mad::{GRH_LEN, MAD_LEN};

/// Where a MAD goes: the peer port's QP1 at this address, with the GSI Q_Key
/// ([`crate::GSI_QKEY`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MadAddr {
    /// Destination GID.
    pub dgid: Gid,
    /// Destination MAC (the peer's, or its next hop's).
    pub dmac: Mac,
    /// Source GID index.
    pub sgid_index: u8,
    /// IP hop limit.
    pub hop_limit: u8,
    /// IP traffic class.
    pub traffic_class: u8,
}

/// MADs on the port's GSI QP (QP1), and the neighbour table.
///
/// Contract for implementors: `send_mad` sends the 256 bytes as one UD SEND from QP1 to QP1
/// at `to` with Q_Key `0x80010000`, or fails without sending; `recv_mad` never blocks and
/// hands each received datagram over once, GRH first, as the UD receive wrote it.
///
/// [`Error::QueueFull`](crate::Error::QueueFull) from `send_mad` means "not now, try later"
/// (`ENOMEM` from a full send queue: mlx5's GSI queue holds about ten MADs): nothing was
/// sent, and the same send may succeed once earlier ones complete. The CM keeps such a MAD
/// and sends it on a later [`super::Cm::poll`] (an event that depends on it waits for it);
/// it is not a send error. Any other error is a hard failure: the CM counts it
/// ([`super::CmStats::send_errors`]) and treats the MAD as lost on the wire (its retry
/// timer, where it has one, covers it).
pub trait MadPort {
    /// Send one MAD.
    fn send_mad(&mut self, to: &MadAddr, mad: &[u8; MAD_LEN]) -> Result<()>;
    /// The next received datagram, copied into `buf` (the 40-byte GRH, then the MAD): its
    /// length, or `None` when nothing is waiting.
    fn recv_mad(&mut self, buf: &mut [u8; GRH_LEN + MAD_LEN]) -> Result<Option<usize>>;
    /// The MAC that reaches `gid` (a neighbour table or ARP cache), `None` if unknown.
    fn resolve(&mut self, gid: &Gid) -> Option<Mac>;
}

impl<P: MadPort + ?Sized> MadPort for &mut P {
    fn send_mad(&mut self, to: &MadAddr, mad: &[u8; MAD_LEN]) -> Result<()> {
        (**self).send_mad(to, mad)
    }
    fn recv_mad(&mut self, buf: &mut [u8; GRH_LEN + MAD_LEN]) -> Result<Option<usize>> {
        (**self).recv_mad(buf)
    }
    fn resolve(&mut self, gid: &Gid) -> Option<Mac> {
        (**self).resolve(gid)
    }
}

/// The remote access a connected QP grants (`qp_access_flags`, as `cm.c`
/// `cm_init_qp_init_attr` sets them: remote write always, read and atomics when the QP has
/// responder resources).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RemoteAccess {
    /// `IB_ACCESS_REMOTE_WRITE`.
    pub write: bool,
    /// `IB_ACCESS_REMOTE_READ`.
    pub read: bool,
    /// `IB_ACCESS_REMOTE_ATOMIC`.
    pub atomic: bool,
}

/// The peer's side of an RC path (the RTR address vector).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct QpPath {
    /// The peer's GID.
    pub dgid: Gid,
    /// The peer's MAC.
    pub dmac: Mac,
    /// Our source GID index.
    pub sgid_index: u8,
    /// IP hop limit.
    pub hop_limit: u8,
    /// IP traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Service level.
    pub sl: u8,
}

/// One state transition of a data QP, with what `ib_cm_init_qp_attr` gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpStep {
    /// RESET to INIT.
    Init {
        /// Physical port.
        port: u8,
        /// Remote access granted.
        access: RemoteAccess,
    },
    /// INIT to RTR, facing the peer.
    Rtr {
        /// The peer's QPN.
        remote_qpn: QpNum,
        /// The first PSN expected from the peer.
        rq_psn: u32,
        /// Path MTU, an `ib_mtu` (1 = 256 ... 5 = 4096).
        mtu: u8,
        /// The peer's address.
        path: QpPath,
        /// RDMA READs and atomics the peer may have outstanding here.
        max_dest_rd_atomic: u8,
    },
    /// RTR to RTS.
    Rts {
        /// The first PSN sent.
        sq_psn: u32,
        /// Local ACK timeout exponent (4.096 µs × 2^t).
        timeout: u8,
        /// Transport retries.
        retry_cnt: u8,
        /// RNR retries (7: infinite).
        rnr_retry: u8,
        /// RDMA READs and atomics this side may have outstanding.
        max_rd_atomic: u8,
    },
    /// Any state to ERR: outstanding work is flushed.
    Error,
}

/// A data QP the CM can move.
pub trait CmQp {
    /// Its number.
    fn qp_num(&self) -> QpNum;
    /// Make one transition.
    fn modify(&mut self, step: &QpStep) -> Result<()>;
}

impl<Q: CmQp + ?Sized> CmQp for &mut Q {
    fn qp_num(&self) -> QpNum {
        (**self).qp_num()
    }
    fn modify(&mut self, step: &QpStep) -> Result<()> {
        (**self).modify(step)
    }
}

/// The QPs the application lends to [`super::Cm::poll`], found by number.
pub trait QpSet {
    /// The QP numbered `qpn`, if lent.
    fn find(&mut self, qpn: QpNum) -> Option<&mut dyn CmQp>;
}

impl<Q: CmQp> QpSet for [Q] {
    fn find(&mut self, qpn: QpNum) -> Option<&mut dyn CmQp> {
        self.iter_mut().find(|q| q.qp_num() == qpn).map(|q| q as &mut dyn CmQp)
    }
}

/// No QPs lent.
pub struct NoQps;

impl QpSet for NoQps {
    fn find(&mut self, _: QpNum) -> Option<&mut dyn CmQp> {
        None
    }
}
