//! The responder: what a message does when it reaches a QP of this model.
//!
//! A `Packet` carries one whole message (the model delivers messages, not the packets they
//! would be cut into; `npkts` says how many PSNs they take). RC messages go to `rc`, which
//! applies the IB responder checks (the IB spec's RC responder rules) in order; datagrams go to `ud`;
//! both place what arrives for a receive WQE through `recv`.
//!
//! The answer (`Resp`) is what the requester learns: an ACK, an ACK with data (an RDMA READ
//! response or an atomic's original value), an RNR NAK, or a failure that names its
//! `Reason` (a NAK, or a request that was never acknowledged). A datagram is always
//! answered with `Resp::Ack`: UD is unreliable, and the sender completes whether or not
//! the datagram was accepted; a drop is counted and logged at the receiving model.

pub(crate) mod check;
pub(crate) mod rc;
pub(crate) mod recv;
pub(crate) mod ud;

use crate::counters::Reason;
use crate::grh::{GRH_LEN, L3};
use crate::model::Shared;

/// The path MTU of a datagram QP, in bytes: a UD QP has no path of its own, and the model
/// takes the IB MTU of a RoCE port on a 1500-byte Ethernet link (what rxe and mlx5 report).
pub const UD_MTU: u32 = 1024;

/// An atomic operation on the responder's 8 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Atomic {
    /// Compare and swap: if the 8 bytes equal `compare`, they become `swap`.
    Cas { compare: u64, swap: u64 },
    /// Fetch and add: the 8 bytes become their sum with `add` (modulo 2^64).
    Faa { add: u64 },
}

/// What the message asks of the responder.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Op {
    /// RDMA WRITE (WITH IMMEDIATE): the payload goes to `raddr` under `rkey`.
    Write { raddr: u64, rkey: u32, imm: Option<[u8; 4]> },
    /// RC SEND (WITH IMMEDIATE): the payload goes to the next receive WQE.
    Send { imm: Option<[u8; 4]> },
    /// RDMA READ of `len` bytes at `raddr` under `rkey`.
    Read { raddr: u64, rkey: u32, len: u64 },
    /// An 8-byte atomic at `raddr` under `rkey`.
    Atomic { raddr: u64, rkey: u32, atomic: Atomic },
    /// A UD SEND (WITH IMMEDIATE): the DETH's Q_Key, and the network header the receiver
    /// finds in the first 40 bytes of its buffer.
    Datagram { qkey: u32, imm: Option<[u8; 4]>, grh: [u8; GRH_LEN], l3: L3 },
}

/// One message on the wire.
#[derive(Clone, Debug)]
pub(crate) struct Packet {
    pub src_model: u64,
    /// Source GID and MAC (RoCE v2); `None` for loopback.
    pub src_gid: Option<([u8; 16], [u8; 6])>,
    /// The BTH/DETH source QP (1 for a GSI QP's datagrams).
    pub src_qpn: u32,
    pub dst_qpn: u32,
    pub psn: u32,
    pub npkts: u32,
    /// Requester path MTU in bytes.
    pub mtu: u32,
    pub op: Op,
    pub payload: Vec<u8>,
}

/// What came back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Resp {
    Ack,
    /// ACK with data: READ response bytes, or an atomic's original value (8 bytes BE).
    Data(Vec<u8>),
    Rnr,
    Fail(Reason),
}

/// Run the responder of model `sh` on `p`.
pub(crate) fn respond(sh: &Shared, p: &Packet) -> Resp {
    let r = match p.op {
        Op::Datagram { .. } => ud::deliver(sh, p),
        _ => rc::respond(sh, p),
    };
    if let Resp::Fail(reason) = r {
        // The requester logs every failure; a responder on another model logs its side too,
        // so a test holding only that model sees why.
        if p.src_model != sh.id {
            sh.note(p.dst_qpn, None, reason);
        }
        // The responder QP may have gone to ERR: let its engine flush the receive queue.
        sh.kick();
    }
    r
}
