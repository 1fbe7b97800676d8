//! The packet transport: what the model puts on its port and what it does with what arrives.
//!
//! Every model owns a `Link`: a [`Port`] (the in-process [`crate::Wire`]'s hub, any port
//! given in [`crate::ModelConfig::port`], or none) and a loopback queue for frames addressed
//! to the model itself (a QP connected to a QP of the same port, as a NIC loops them back
//! inside). The engine thread sends through it and drains it on every pass (`drain`).
//!
//! * `requester`: cuts each RC message into RoCE v2 packets by the path MTU and keeps the
//!   sent WQEs until they are acknowledged; retransmits (go-back-N) on a sequence NAK, on
//!   the local ACK timeout ([`timer`]) and after an RNR wait.
//! * `ack`: what the requester does with ACK, NAK, READ RESPONSE and ATOMIC ACKNOWLEDGE
//!   packets.
//! * `responder`: the RC responder on each request packet, with the checks of
//!   `crate::responder::check`, and the UD/GSI receiver.
//!
//! A frame that does not parse ([`crate::roce::RocePacket::parse`]) is dropped and counted
//! in the link's [`DropCounters`]; a frame that is not RoCE v2 at all (ARP, another
//! EtherType, IP protocol or UDP port) goes to `non_roce` and on to the model's Ethernet
//! receive queues (`eth::deliver`). The Ethernet SQs send out of the same port
//! (`eth::send`).

pub(crate) mod ack;
pub(crate) mod requester;
pub(crate) mod responder;
pub mod timer;

use std::collections::VecDeque;
use std::sync::Arc;

use rdma_pmd::Mac;

use crate::counters::bump;
use crate::model::Shared;
use crate::roce::bth::BthRepr;
use crate::roce::ext::ExtRepr;
use crate::roce::{DropCounters, IpRepr, Malformed, Port, RocePacket, RoceRepr};

pub(crate) use requester::ReqState;
pub(crate) use responder::RespState;

/// Frames drained from the port per engine pass, so that sending is not starved.
const DRAIN_BUDGET: usize = 512;

/// A model's attachment to the network.
#[derive(Default)]
pub(crate) struct Link {
    pub port: Option<Box<dyn Port>>,
    /// Frames the model sent to itself, not yet received.
    pub local: VecDeque<Vec<u8>>,
    /// Frames dropped before reaching a QP, by reason.
    pub drops: DropCounters,
    /// Frames that were not RoCE v2, handed to the Ethernet receive path.
    pub non_roce: u64,
    /// Of those, the ones it placed in no RQ (no steering match, no RQ ready, no WQE).
    pub non_roce_dropped: u64,
}

/// Where a packet goes and comes from: the addresses of one side of a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Addr {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
    pub tclass: u8,
    pub hop_limit: u8,
    pub flow_label: u32,
    pub udp_sport: u16,
}

impl Addr {
    /// Whether the frame stays in this model (its destination is one of our GIDs with our
    /// MAC).
    pub fn is_local(&self, sh: &Shared) -> bool {
        sh.own_gid(&self.dgid) == Some(self.dst_mac)
    }
}

/// The kernel's UDP source port convention for RoCE v2: 0xC000 | 14 bits of a flow hash
/// (`rdma_flow_label_to_udp_sport`); the model hashes both QPNs.
pub(crate) fn udp_sport(a: u32, b: u32) -> u16 {
    let h = (u64::from(a) * 0x9e37_79b9) ^ u64::from(b).rotate_left(17);
    0xc000 | ((h ^ (h >> 14) ^ (h >> 28)) as u16 & 0x3fff)
}

/// Frames built under the device lock, sent after it is released.
#[derive(Default)]
pub(crate) struct Tx {
    frames: Vec<(Vec<u8>, bool)>,
}

impl Tx {
    /// Build one packet; a packet that cannot be built is counted and not sent.
    pub fn push(&mut self, sh: &Shared, a: &Addr, bth: BthRepr, ext: ExtRepr, payload: &[u8]) {
        let mut ip = IpRepr::between(a.sgid, a.dgid, a.tclass, a.hop_limit);
        if let IpRepr::V6(r) = &mut ip {
            r.flow_label = a.flow_label & 0x000f_ffff;
        }
        let repr = RoceRepr {
            dst_mac: Mac(a.dst_mac),
            src_mac: Mac(a.src_mac),
            vlan: None,
            ip,
            udp_src_port: a.udp_sport,
            bth,
            ext,
        };
        match repr.to_frame(payload) {
            Ok(f) => {
                bump(&sh.stats.frames_sent);
                self.frames.push((f, a.is_local(sh)));
            }
            Err(_) => bump(&sh.stats.frames_unbuildable),
        }
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Send everything: local frames to the loopback queue, the others to the port. Call
    /// with no device lock held.
    pub fn flush(self, sh: &Shared) {
        if self.frames.is_empty() {
            return;
        }
        let mut link = sh.link();
        for (f, local) in self.frames {
            if local {
                link.local.push_back(f);
                continue;
            }
            match link.port.as_mut() {
                Some(p) => {
                    if p.send(&f).is_err() {
                        bump(&sh.stats.frames_send_failed);
                    }
                }
                None => bump(&sh.stats.frames_send_failed),
            }
        }
        drop(link);
        if let Some(w) = &sh.wire {
            w.kick_others(sh.id);
        }
    }
}

/// One engine pass over the port: receive and handle up to [`DRAIN_BUDGET`] frames, then,
/// if none is left waiting, the requester's timers (an answer already queued is not a lost
/// one). True if anything arrived or fired.
pub(crate) fn drain(sh: &Arc<Shared>) -> bool {
    let mut did = false;
    let mut emptied = false;
    for _ in 0..DRAIN_BUDGET {
        let next = {
            let mut link = sh.link();
            match link.local.pop_front() {
                Some(f) => Some((f, true)),
                None => match link.port.as_mut().map(|p| p.recv()) {
                    Some(Ok(Some(f))) => Some((f, false)),
                    Some(Err(_)) => {
                        bump(&sh.stats.frames_recv_failed);
                        None
                    }
                    _ => None,
                },
            }
        };
        let Some((frame, local)) = next else {
            emptied = true;
            break;
        };
        did = true;
        receive(sh, &frame, local);
    }
    did | (emptied && requester::timers(sh))
}

/// Handle one received frame.
fn receive(sh: &Shared, frame: &[u8], local: bool) {
    bump(&sh.stats.frames_received);
    let pkt = match RocePacket::parse(frame) {
        Ok(p) => p,
        // Not RoCE v2 at all (another EtherType, IP protocol or UDP port): the Ethernet
        // receive path's. A frame that claims RoCE v2 and is broken stays a RoCE drop.
        Err(Malformed::EtherType(_) | Malformed::IpProtocol(_) | Malformed::UdpPort(_)) => {
            return non_roce(sh, frame)
        }
        Err(m) => {
            sh.link().drops.count(&m);
            bump(&sh.stats.frames_dropped);
            return;
        }
    };
    // rxe_recv.c: the destination IP must be a RoCE v2 GID of this port (the IP stack
    // already took only frames for our MAC).
    let dgid = pkt.ip.dst_gid();
    match sh.own_gid(&dgid) {
        Some(mac) if mac == pkt.eth.dst.0 || pkt.eth.dst.0 == [0xff; 6] => {}
        _ => return dropped(sh, Drop::NotOurs),
    }
    let mut tx = Tx::default();
    if pkt.bth.opcode.is_request() {
        responder::request(sh, &pkt, frame, local, &mut tx);
    } else {
        ack::response(sh, &pkt, local, &mut tx);
    }
    tx.flush(sh);
}

/// Why a well-formed RoCE packet was dropped before or at a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Drop {
    /// Not addressed to one of our GIDs (or our MAC).
    NotOurs,
    /// DestQP 0, or no such QP, or one of another transport or not in a state that
    /// receives.
    NoQp,
    /// An RC packet whose IP addresses are not the QP's path (`rxe_recv.c` `check_addr`).
    Address,
    /// P_Key other than the default 0xffff.
    Pkey,
    /// A response for no outstanding request (or a stale one).
    Unexpected,
}

/// Count a drop.
pub(crate) fn dropped(sh: &Shared, why: Drop) {
    bump(&sh.stats.frames_dropped);
    let c = match why {
        Drop::NotOurs => &sh.stats.drop_not_ours,
        Drop::NoQp => &sh.stats.drop_no_qp,
        Drop::Address => &sh.stats.drop_address,
        Drop::Pkey => &sh.stats.drop_pkey,
        Drop::Unexpected => &sh.stats.drop_unexpected,
    };
    bump(c);
}

/// Frames that are not RoCE v2 (ARP, other EtherTypes, other IP traffic) go to the
/// Ethernet receive path ([`crate::eth::deliver`]: NIC RX flow table → TIR → RQ); what it
/// does not place in an RQ is counted here as well as by reason in its counters.
pub(crate) fn non_roce(sh: &Shared, frame: &[u8]) {
    bump(&sh.stats.frames_non_roce);
    let d = crate::eth::deliver(sh, frame);
    let mut link = sh.link();
    link.non_roce += 1;
    if !matches!(d, crate::eth::Delivery::Received { .. }) {
        link.non_roce_dropped += 1;
    }
}
