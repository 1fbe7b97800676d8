//! The control seam: how the driver obtains resources from an mlx5 device.
//!
//! Everything the data path needs from firmware, a UAR page, a protection domain, memory keys,
//! completion queues, queue pairs and their state transitions, goes through [`Control`]. Its
//! parameters are the fields the PRM's commands carry (`CREATE_CQ`, `CREATE_QP`, `CREATE_MKEY`,
//! `RST2INIT_QP`, `INIT2RTR_QP`, `RTR2RTS_QP`, `2ERR_QP`, `2RST_QP`; see the kernel's
//! `include/linux/mlx5/mlx5_ifc.h`), so an implementation either builds those commands and
//! posts them on the command queue (real hardware, VFIO, bare metal), or hands the same fields
//! to a device model directly.
//!
//! All memory handed over is described by bus addresses of device-visible memory the caller
//! allocated through the HAL and keeps alive until the matching destroy call has returned.

use core::net::IpAddr;

use rdma_pmd::{BusAddr, Error, Gid, Lkey, Mac, QpNum, Rkey};

pub use eth::{EthCreate, EthObject, InlineMode};
pub use port_addr::{MtuSource, PortMtu};

bitflags::bitflags! {
    /// Access rights of a memory key (`mkc.lw/lr/rw/rr/a` of `mlx5_ifc.h`'s `mkc` context).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct Access: u32 {
        /// Local write (`lw`): the HCA may write the region for local operations.
        const LOCAL_WRITE = 1 << 0;
        /// Remote write (`rw`): a peer's RDMA WRITE may target the region.
        const REMOTE_WRITE = 1 << 1;
        /// Remote read (`rr`): a peer's RDMA READ may read the region.
        const REMOTE_READ = 1 << 2;
        /// Remote atomic (`a`): a peer's compare-and-swap or fetch-and-add may target the
        /// region (8 bytes, 8-aligned).
        const REMOTE_ATOMIC = 1 << 3;
    }
}

/// A UAR page: the BAR page whose doorbell and BlueFlame registers a QP or CQ uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Uar {
    /// UAR index (`uar_page` / `uar_index` in command contexts).
    pub index: u32,
    /// Byte offset of the page within BAR0 (index × system page size).
    pub bar_offset: usize,
}

/// A protection domain number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pdn(pub u32);

/// A completion queue number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cqn(pub u32);

/// How a memory key translates its virtual range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Translation {
    /// MTT mode: the range `[start, start + len)` maps linearly onto bus-contiguous pages
    /// starting at `base` (each entry of the MTT is one page of `1 << page_shift` bytes).
    Mtt {
        /// Bus address of the first page.
        base: BusAddr,
        /// log2 of the page size.
        page_shift: u8,
    },
    /// Physical-address mode (`access_mode` PA): virtual address = bus address. For identity
    /// mapped bare metal.
    Physical,
}

/// `CREATE_MKEY` fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MkeyParams {
    /// Protection domain.
    pub pd: Pdn,
    /// Start of the key's virtual range (the addresses SGEs and remote addresses use).
    pub start: u64,
    /// Length of the range in bytes.
    pub len: u64,
    /// Rights granted.
    pub access: Access,
    /// Translation mode.
    pub translation: Translation,
}

/// A created memory key. mlx5 uses one value for both `lkey` and `rkey`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mkey(pub u32);

impl Mkey {
    /// As a local key.
    pub fn lkey(self) -> Lkey {
        Lkey(self.0)
    }
    /// As a remote key.
    pub fn rkey(self) -> Rkey {
        Rkey(self.0)
    }
}

/// `CREATE_CQ` fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqParams {
    /// log2 of the number of 64-byte CQEs.
    pub log_size: u8,
    /// Bus address of the CQE buffer (contiguous, page aligned, `64 << log_size` bytes).
    pub buf: BusAddr,
    /// Bus address of the CQ doorbell record (8 bytes: consumer index, arm).
    pub dbrec: BusAddr,
    /// The UAR page used to arm the CQ.
    pub uar: Uar,
}

/// `CREATE_QP` fields for an RC QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpParams {
    /// Transport service (`qpc.st`).
    pub service: Service,
    /// Protection domain.
    pub pd: Pdn,
    /// CQ for send completions.
    pub send_cq: Cqn,
    /// CQ for receive completions (used by WRITE WITH IMMEDIATE at the responder).
    pub recv_cq: Cqn,
    /// log2 of the send queue size in 64-byte WQE basic blocks.
    pub log_sq_size: u8,
    /// log2 of the receive queue size in WQEs; `None` for no receive queue.
    pub log_rq_size: Option<u8>,
    /// log2 of the receive WQE stride in bytes (16 per scatter entry).
    pub log_rq_stride: u8,
    /// Bus address of the work queue buffer: receive queue first, then send queue (PRM order).
    pub buf: BusAddr,
    /// Bus address of the QP doorbell record (`[0]` receive counter, `[1]` send counter).
    pub dbrec: BusAddr,
    /// The UAR page whose doorbell/BlueFlame registers the QP rings.
    pub uar: Uar,
}

/// Where an RC QP's peer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// RoCE v2: the peer's GID and MAC and the IP header fields, as the kernel's
    /// `mlx5_set_path` takes them from an `rdma_ah_attr` (see `drivers/mlx5/QPC.md`).
    RoceV2 {
        /// Destination GID (an IPv4-mapped address for IPv4 RoCE v2).
        dgid: [u8; 16],
        /// Destination MAC.
        dmac: [u8; 6],
        /// Index of our source GID.
        sgid_index: u8,
        /// UDP source port (entropy for ECMP); 0: derived as the kernel does, from the flow
        /// label, or when that is 0 from both QP numbers ([`udp_sport_for`]).
        udp_sport: u16,
        /// IP hop limit (TTL); 0: [`DEFAULT_HOP_LIMIT`].
        hop_limit: u8,
        /// IP traffic class (DSCP in the upper six bits, ECN in the lower two).
        traffic_class: u8,
        /// IPv6 flow label (20 bits); 0: none given.
        flow_label: u32,
        /// Service level; its low three bits are the 802.1p priority (`ads.eth_prio`).
        sl: u8,
    },
    /// The peer QP is on the same port (loopback).
    Loopback,
}

/// The hop limit a RoCE path gets when the caller gives none: 64, the IPv4 default TTL the
/// kernel's route lookup yields (`ip4_dst_hoplimit` with the default sysctl).
pub const DEFAULT_HOP_LIMIT: u8 = 64;

impl Path {
    /// A RoCE v2 path with the kernel's defaults: UDP source port derived, hop limit 64,
    /// traffic class, flow label and service level 0.
    pub const fn roce_v2(dgid: Gid, dmac: Mac, sgid_index: u8) -> Path {
        Path::RoceV2 {
            dgid: dgid.0,
            dmac: dmac.0,
            sgid_index,
            udp_sport: 0,
            hop_limit: 0,
            traffic_class: 0,
            flow_label: 0,
            sl: 0,
        }
    }
}

/// `rdma_calc_flow_label` (kernel `include/rdma/ib_verbs.h`): a 20-bit flow label both ends of
/// a connection compute alike from the two QP numbers.
pub const fn calc_flow_label(lqpn: u32, rqpn: u32) -> u32 {
    let mut v = lqpn as u64 * rqpn as u64;
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0xf_ffff) as u32
}

/// `rdma_flow_label_to_udp_sport` (kernel `include/rdma/ib_verbs.h`): the 20-bit label folded
/// to 14 bits, in the RoCE v2 source port range from 0xC000.
pub const fn flow_label_to_udp_sport(fl: u32) -> u16 {
    let low = fl & 0x3fff;
    let high = fl & 0xf_c000;
    ((low ^ (high >> 14)) as u16 & 0x3fff) | 0xc000
}

/// The UDP source port of an RC connection as `mlx5_set_path_udp_sport` chooses it: from the
/// flow label, or when that is 0 from [`calc_flow_label`] of the local and remote QP numbers.
pub const fn udp_sport_for(flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
    let fl = if flow_label == 0 { calc_flow_label(lqpn, rqpn) } else { flow_label };
    flow_label_to_udp_sport(fl)
}

/// The transport service of a QP (`qpc.st` of `mlx5_ifc.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Service {
    /// Reliable connected (`MLX5_QPC_ST_RC`).
    #[default]
    Rc,
    /// Unreliable datagram (`MLX5_QPC_ST_UD`).
    Ud,
    /// The port's general services QP, QP1 (`MLX5_QPC_ST_QP1`): a UD QP that the device
    /// reaches as destination QP 1, the one connection management talks to.
    Gsi,
}

/// A QP state transition and its fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// `RST2INIT_QP`.
    RstToInit {
        /// Physical port (1-based).
        port: u8,
        /// Remote access the QP grants as a responder.
        access: Access,
    },
    /// `INIT2RTR_QP`.
    InitToRtr {
        /// The peer's QP number.
        remote_qpn: QpNum,
        /// Where the peer is.
        path: Path,
        /// Path MTU as an `ibv_mtu` value (1 = 256 ... 5 = 4096).
        mtu: u8,
        /// Expected first receive PSN.
        rq_psn: u32,
    },
    /// `RTR2RTS_QP`.
    RtrToRts {
        /// First send PSN.
        sq_psn: u32,
        /// Local ACK timeout (4.096 µs × 2^timeout).
        timeout: u8,
        /// Transport retries.
        retry_cnt: u8,
        /// RNR retries.
        rnr_retry: u8,
    },
    /// `RST2INIT_QP` for a UD or GSI QP: its port and the Q_Key that incoming datagrams
    /// must carry (QP1: 0x80010000).
    RstToInitUd {
        /// Physical port (1-based).
        port: u8,
        /// The QP's Q_Key.
        qkey: u32,
        /// Whether the QP is the GSI QP (its MTU and message limit differ from UD's).
        gsi: bool,
    },
    /// `INIT2RTR_QP` for a UD or GSI QP: a datagram QP has no peer.
    InitToRtrUd {
        /// Whether the QP is the GSI QP.
        gsi: bool,
    },
    /// `RTR2RTS_QP` for a UD or GSI QP.
    RtrToRtsUd {
        /// First send PSN.
        sq_psn: u32,
        /// Whether the QP is the GSI QP.
        gsi: bool,
    },
    /// `2ERR_QP`: flush everything outstanding.
    ToErr,
    /// `2RST_QP`: back to reset (after which the rings may be reused).
    ToRst,
}

/// Device limits the data path must respect (from `QUERY_HCA_CAP`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceCaps {
    /// log2 of the largest QP (WQE basic blocks).
    pub log_max_qp_sz: u8,
    /// log2 of the largest CQ.
    pub log_max_cq_sz: u8,
    /// Largest send WQE in bytes (`max_wqe_sz_sq`).
    pub max_wqe_sz_sq: u32,
    /// log2 of the BlueFlame register size (`log_bf_reg_size`); each register has two halves.
    pub log_bf_reg_size: u8,
}

/// What the driver needs from firmware. See the module docs.
pub trait Control {
    /// Device limits.
    fn caps(&self) -> DeviceCaps;
    /// `ALLOC_UAR`.
    fn alloc_uar(&mut self) -> Result<Uar, Error>;
    /// `DEALLOC_UAR`.
    fn dealloc_uar(&mut self, uar: Uar) -> Result<(), Error>;
    /// `ALLOC_PD`.
    fn alloc_pd(&mut self) -> Result<Pdn, Error>;
    /// `DEALLOC_PD`.
    fn dealloc_pd(&mut self, pd: Pdn) -> Result<(), Error>;
    /// `CREATE_MKEY`.
    fn create_mkey(&mut self, p: &MkeyParams) -> Result<Mkey, Error>;
    /// `DESTROY_MKEY`.
    fn destroy_mkey(&mut self, key: Mkey) -> Result<(), Error>;
    /// `CREATE_CQ`.
    fn create_cq(&mut self, p: &CqParams) -> Result<Cqn, Error>;
    /// `DESTROY_CQ`.
    fn destroy_cq(&mut self, cq: Cqn) -> Result<(), Error>;
    /// `CREATE_QP` (RC). The QP starts in RESET.
    fn create_qp(&mut self, p: &QpParams) -> Result<QpNum, Error>;
    /// The `*_QP` state-transition commands.
    fn modify_qp(&mut self, qp: QpNum, t: &Transition) -> Result<(), Error>;
    /// `DESTROY_QP`.
    fn destroy_qp(&mut self, qp: QpNum) -> Result<(), Error>;
    /// The port's MAC (`QUERY_NIC_VPORT_CONTEXT` `permanent_address`). A seam without
    /// firmware (the device model's direct control) has none to tell: `Unsupported`.
    fn mac(&mut self) -> Result<Mac, Error> {
        Err(Error::Unsupported("port MAC on this control seam"))
    }
    /// Program GID table entry `index` with `addr` and our MAC (`SET_ROCE_ADDRESS`, RoCE v2).
    fn set_gid(&mut self, index: u16, addr: IpAddr) -> Result<(), Error> {
        let _ = (index, addr);
        Err(Error::Unsupported("GID table on this control seam"))
    }
    /// Clear GID table entry `index`.
    fn clear_gid(&mut self, index: u16) -> Result<(), Error> {
        let _ = index;
        Err(Error::Unsupported("GID table on this control seam"))
    }
    /// The RoCE v2 GID and MAC in table entry `index` (`QUERY_ROCE_ADDRESS`); `None` if empty.
    fn gid(&mut self, index: u16) -> Result<Option<(Gid, Mac)>, Error> {
        let _ = index;
        Err(Error::Unsupported("GID table on this control seam"))
    }
    /// The port's RoCE path MTU and where it came from.
    fn port_mtu(&mut self) -> Result<PortMtu, Error> {
        Err(Error::Unsupported("port MTU on this control seam"))
    }
    /// The inline mode an Ethernet SQ must honour, and the capability it came from
    /// (`per_protocol_networking_offload_caps.wqe_inline_mode`, then the NIC vport context's
    /// `min_wqe_inline_mode` where that capability defers to it).
    fn eth_inline(&mut self) -> Result<(u64, InlineMode), Error> {
        Err(Error::Unsupported("Ethernet path on this control seam"))
    }
    /// Create one object of the Ethernet (raw packet) path ([`eth`]).
    fn eth_create(&mut self, what: &EthCreate) -> Result<EthObject, Error> {
        let _ = what;
        Err(Error::Unsupported("Ethernet path on this control seam"))
    }
    /// Move an Ethernet SQ or RQ from RST to RDY (`MODIFY_SQ` / `MODIFY_RQ`).
    fn eth_ready(&mut self, queue: EthObject) -> Result<(), Error> {
        let _ = queue;
        Err(Error::Unsupported("Ethernet path on this control seam"))
    }
    /// Destroy an Ethernet-path object (a root is disconnected).
    fn eth_destroy(&mut self, what: EthObject) -> Result<(), Error> {
        let _ = what;
        Err(Error::Unsupported("Ethernet path on this control seam"))
    }
}

/// A control seam lent by exclusive reference, so its owner keeps it (and what it recorded)
/// after the device that used it is gone.
impl<C: Control + ?Sized> Control for &mut C {
    fn caps(&self) -> DeviceCaps {
        (**self).caps()
    }
    fn alloc_uar(&mut self) -> Result<Uar, Error> {
        (**self).alloc_uar()
    }
    fn dealloc_uar(&mut self, uar: Uar) -> Result<(), Error> {
        (**self).dealloc_uar(uar)
    }
    fn alloc_pd(&mut self) -> Result<Pdn, Error> {
        (**self).alloc_pd()
    }
    fn dealloc_pd(&mut self, pd: Pdn) -> Result<(), Error> {
        (**self).dealloc_pd(pd)
    }
    fn create_mkey(&mut self, p: &MkeyParams) -> Result<Mkey, Error> {
        (**self).create_mkey(p)
    }
    fn destroy_mkey(&mut self, key: Mkey) -> Result<(), Error> {
        (**self).destroy_mkey(key)
    }
    fn create_cq(&mut self, p: &CqParams) -> Result<Cqn, Error> {
        (**self).create_cq(p)
    }
    fn destroy_cq(&mut self, cq: Cqn) -> Result<(), Error> {
        (**self).destroy_cq(cq)
    }
    fn create_qp(&mut self, p: &QpParams) -> Result<QpNum, Error> {
        (**self).create_qp(p)
    }
    fn modify_qp(&mut self, qp: QpNum, t: &Transition) -> Result<(), Error> {
        (**self).modify_qp(qp, t)
    }
    fn destroy_qp(&mut self, qp: QpNum) -> Result<(), Error> {
        (**self).destroy_qp(qp)
    }
    fn mac(&mut self) -> Result<Mac, Error> {
        (**self).mac()
    }
    fn set_gid(&mut self, index: u16, addr: IpAddr) -> Result<(), Error> {
        (**self).set_gid(index, addr)
    }
    fn clear_gid(&mut self, index: u16) -> Result<(), Error> {
        (**self).clear_gid(index)
    }
    fn gid(&mut self, index: u16) -> Result<Option<(Gid, Mac)>, Error> {
        (**self).gid(index)
    }
    fn port_mtu(&mut self) -> Result<PortMtu, Error> {
        (**self).port_mtu()
    }
    fn eth_inline(&mut self) -> Result<(u64, InlineMode), Error> {
        (**self).eth_inline()
    }
    fn eth_create(&mut self, what: &EthCreate) -> Result<EthObject, Error> {
        (**self).eth_create(what)
    }
    fn eth_ready(&mut self, queue: EthObject) -> Result<(), Error> {
        (**self).eth_ready(queue)
    }
    fn eth_destroy(&mut self, what: EthObject) -> Result<(), Error> {
        (**self).eth_destroy(what)
    }
}

pub mod bringup;
pub mod cmd;
pub mod eth;
pub mod fw;
pub mod init_seg;
pub mod port_addr;
