//! The Ethernet path of the model: what a ConnectX does with the objects mlx5e creates —
//! send queues (SQ) behind transport interfaces for send (TIS), receive queues (RQ) behind
//! transport interfaces for receive (TIR), and the NIC receive flow tables that steer frames
//! to a TIR.
//!
//! | stage | module | what it does |
//! |---|---|---|
//! | objects | this module | `Tables`: transport domains, TISs, SQs, RQs, TIRs, flow tables (groups, entries), the NIC RX root |
//! | parse | `headers` | L2 (one VLAN tag), IPv4/IPv6, UDP/TCP: the match set, inline lengths, CQE header types |
//! | send | `send` | an SQ doorbell: fetch each Ethernet send WQE (control, eth segment with the inline headers, data segments by lkey), build the frame, send it out of the port, a `REQ` CQE when asked; a bad WQE completes in error and the SQ goes to ERR |
//! | receive | `recv` | `deliver`: a frame that is not RoCE v2 goes through the NIC RX root table; the first matching entry's TIR names the RQ, whose next WQE gets the frame and whose CQ a `RESP_SEND` CQE |
//!
//! The commands creating these objects are in `fw::resources::eth`; this
//! module only executes.
//!
//! # Hooks
//!
//! * Send: `bar::doorbell` hands a doorbell whose `qpn_ds` names an SQ to
//!   `send::doorbell` (SQ and QP numbers share one space, as on the HCA).
//! * Receive: `deliver` takes one frame. The engine receives every frame of the model's
//!   port and hands those that are not RoCE v2 ([`Headers::is_roce_v2`]) to it (the
//!   transport's `non_roce` hook); tests can hand frames in with [`Model::receive_frame`].
//! * Both directions use the model's one port, the RDMA transport's.
//!
//! # Modelling choices (not hardware facts)
//!
//! * SQ WQEs execute synchronously, inside the doorbell store.
//! * No loopback: an SQ's frames go to the port only, never to the model's own steering.
//! * No checksum or LSO offload (`csum_cap` and `max_lso_cap` are 0), no RSS (only direct
//!   TIRs), one flow table level (NIC RX, level 0, misses drop).
//! * A frame longer than the RQ WQE's buffers is dropped and counted, the WQE left posted.

pub mod headers;
mod recv;
pub(crate) mod send;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

pub use headers::{Headers, Tag, L4};
pub(crate) use recv::deliver;

use crate::fw::ifc::fte_match_set_lyr_2_4 as mset;
use crate::roce::Port;
use crate::Model;

/// What became of one received frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Written into RQ `rqn`'s WQE `wqe_counter`, `byte_cnt` bytes, CQE written.
    Received {
        /// The RQ.
        rqn: u32,
        /// The WQE's index (the CQE's `wqe_counter`).
        wqe_counter: u16,
        /// Bytes written (the CQE's `byte_cnt`).
        byte_cnt: u32,
    },
    /// RoCE v2 (UDP port 4791): for the RDMA transport, not touched here.
    Roce,
    /// Shorter than an Ethernet header.
    Runt,
    /// No NIC RX root table, or no entry of it matched: dropped.
    NoMatch,
    /// The TIR's RQ is not ready: dropped.
    RqNotReady {
        /// The RQ.
        rqn: u32,
    },
    /// The RQ had no posted WQE: dropped.
    NoWqe {
        /// The RQ.
        rqn: u32,
    },
    /// The RQ's next WQE cannot take the frame (too small, bad lkey, DMA fault): dropped.
    BadWqe {
        /// The RQ.
        rqn: u32,
    },
}

/// What the Ethernet path did, for tests to assert on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EthCounters {
    /// Frames SQs sent out of the port.
    pub frames_sent: u64,
    /// Send WQEs completed in error.
    pub send_errors: u64,
    /// Frames the port refused (or no port attached).
    pub port_errors: u64,
    /// Frames handed to `deliver`.
    pub frames_received: u64,
    /// Frames written into an RQ.
    pub frames_delivered: u64,
    /// RoCE v2 frames passed back to the RDMA transport.
    pub roce_passed: u64,
    /// Runts dropped.
    pub dropped_runt: u64,
    /// Frames no steering entry matched (or no root table).
    pub dropped_no_match: u64,
    /// Frames for an RQ not in RDY.
    pub dropped_rq_not_ready: u64,
    /// Frames for an RQ with no posted WQE.
    pub dropped_no_wqe: u64,
    /// Frames the RQ's WQE could not take.
    pub dropped_bad_wqe: u64,
}

/// Why a send WQE or a receive WQE was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The control segment's opcode is not SEND (0x0a).
    Opcode(u8),
    /// The control segment's WQE index is not the SQ's counter.
    WqeIndex {
        /// The SQ's counter.
        want: u16,
        /// The WQE's.
        got: u16,
    },
    /// The control segment names another SQ.
    Sqn(u32),
    /// DS below 2 (control + eth segment) or beyond the WQE size, or the inline headers run
    /// past it.
    Ds(u8),
    /// Fewer inline header bytes than the SQ's `min_wqe_inline_mode` needs for this frame.
    InlineShort {
        /// Bytes the mode covers.
        need: usize,
        /// Bytes inline.
        got: usize,
    },
    /// An eth segment asks for an offload the model does not advertise (LSO `mss`,
    /// checksum `cs_flags`, software parser `swp_*`).
    Offload,
    /// A data segment of length 0.
    ZeroLength,
    /// An lkey that does not exist, is of another PD, lacks local write (receive) or does
    /// not cover the range.
    Lkey(u32),
    /// A DMA (IOMMU) fault at this bus address.
    Dma(u64),
    /// The frame is shorter than an Ethernet header or longer than the port carries.
    FrameLength(usize),
    /// The receive WQE's buffers are shorter than the frame.
    RecvTooSmall {
        /// Bytes of buffer.
        room: usize,
        /// Bytes of frame.
        len: usize,
    },
}

/// One refusal, with the queue and the WQE index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultEvent {
    /// SQ or RQ number.
    pub queue: u32,
    /// WQE index.
    pub wqe: u16,
    /// What was wrong.
    pub fault: Fault,
}

/// State of an SQ or RQ (`MLX5_SQC_STATE_*`, `MLX5_RQC_STATE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WqState {
    /// RST.
    Rst,
    /// RDY.
    Rdy,
    /// ERR.
    Err,
}

/// A transport interface send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tis {
    pub td: u32,
    pub prio: u8,
}

/// An Ethernet send queue: a cyclic ring of 64-byte WQEBBs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Sq {
    pub state: WqState,
    pub cqn: u32,
    pub tisn: u32,
    pub pd: u32,
    pub uar: u32,
    pub buf: crate::objects::QueueBuf,
    pub log_size: u8,
    pub dbrec: u64,
    /// `min_wqe_inline_mode` (`MLX5_INLINE_MODE_*`).
    pub inline_mode: u8,
    /// The HCA's counter: next WQEBB to execute.
    pub pc: u16,
}

/// An Ethernet receive queue: a cyclic ring of WQEs of `1 << log_stride` bytes, each a list
/// of data segments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Rq {
    pub state: WqState,
    pub cqn: u32,
    pub pd: u32,
    pub buf: crate::objects::QueueBuf,
    pub log_stride: u8,
    pub log_size: u8,
    pub dbrec: u64,
    /// `vsd`: VLAN stripping disabled.
    pub vsd: bool,
    /// The HCA's counter: next WQE to consume.
    pub ci: u16,
}

/// A transport interface receive with direct dispatch to one RQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tir {
    pub td: u32,
    pub rqn: u32,
}

/// A flow group: entries `start..=end` sharing the outer-header criteria.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FlowGroup {
    pub start: u32,
    pub end: u32,
    pub criteria: [u8; mset::SIZE],
}

/// A flow table entry forwarding to a TIR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fte {
    pub group: u32,
    pub value: [u8; mset::SIZE],
    pub tirn: u32,
}

/// A NIC RX flow table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FlowTable {
    pub log_size: u8,
    /// `flow_table_context.level` (only the root table steers; the level is kept as given).
    #[allow(dead_code)]
    pub level: u8,
    pub groups: BTreeMap<u32, FlowGroup>,
    /// By flow index: the first match in index order wins.
    pub entries: BTreeMap<u32, Fte>,
}

/// The Ethernet objects of one model, under the device lock.
#[derive(Debug, Default)]
pub(crate) struct Tables {
    pub tds: BTreeSet<u32>,
    pub tises: BTreeMap<u32, Tis>,
    pub sqs: BTreeMap<u32, Sq>,
    pub rqs: BTreeMap<u32, Rq>,
    pub tirs: BTreeMap<u32, Tir>,
    pub fts: BTreeMap<u32, FlowTable>,
    /// The NIC RX root table.
    pub root: Option<u32>,
    pub counters: EthCounters,
    pub faults: Vec<FaultEvent>,
    next: u32,
}

impl Tables {
    /// A fresh number for a transport domain, TIS, TIR, flow table or group (SQs and RQs
    /// take QP numbers).
    pub fn number(&mut self) -> u32 {
        self.next += 1;
        self.next
    }

    /// Objects alive.
    pub fn count(&self) -> usize {
        self.tds.len()
            + self.tises.len()
            + self.sqs.len()
            + self.rqs.len()
            + self.tirs.len()
            + self.fts.len()
            + self.fts.values().map(|t| t.groups.len()).sum::<usize>()
    }

    /// Whether an SQ or RQ reports to CQ `cqn`.
    pub fn uses_cq(&self, cqn: u32) -> bool {
        self.sqs.values().any(|s| s.cqn == cqn) || self.rqs.values().any(|r| r.cqn == cqn)
    }

    /// Whether an SQ rings on UAR `uar`.
    pub fn uses_uar(&self, uar: u32) -> bool {
        self.sqs.values().any(|s| s.uar == uar)
    }

    /// Whether an SQ, RQ or TIS is in PD `pd`.
    pub fn uses_pd(&self, pd: u32) -> bool {
        self.sqs.values().any(|s| s.pd == pd) || self.rqs.values().any(|r| r.pd == pd)
    }

    pub(crate) fn fault(&mut self, queue: u32, wqe: u16, fault: Fault) {
        self.faults.push(FaultEvent { queue, wqe, fault });
    }
}

impl Model {
    /// Attach the model's port (the one [`crate::ModelConfig::with_port`] gives, shared by
    /// the RDMA transport and the Ethernet SQs), replacing any before. Frames arriving there
    /// are received by the model's engine: RoCE v2 by the transport, the others by
    /// `deliver`.
    pub fn attach_eth_port(&self, port: Box<dyn Port>) {
        self.shared().link().port = Some(port);
    }

    /// Hand one received frame to the Ethernet receive path (`deliver`) directly, as if it
    /// had arrived at the port.
    pub fn receive_frame(&self, frame: &[u8]) -> Delivery {
        deliver(self.shared(), frame)
    }

    /// The Ethernet path's counters.
    pub fn eth_counters(&self) -> EthCounters {
        self.shared().dev().eth.counters
    }

    /// Every send or receive WQE the Ethernet path refused, oldest first.
    pub fn eth_faults(&self) -> Vec<FaultEvent> {
        self.shared().dev().eth.faults.clone()
    }

    /// The state of SQ `sqn`, if it exists.
    pub fn sq_state(&self, sqn: u32) -> Option<WqState> {
        self.shared().dev().eth.sqs.get(&sqn).map(|s| s.state)
    }

    /// The state of RQ `rqn`, if it exists.
    pub fn rq_state(&self, rqn: u32) -> Option<WqState> {
        self.shared().dev().eth.rqs.get(&rqn).map(|r| r.state)
    }
}
