//! The responder's parts: `check`, the RC responder's checks on one packet (the
//! transport's responder, [`crate::transport`], applies them); `ud`, a datagram reaching a
//! UD or GSI QP; `recv`, receive WQEs (reading, scattering, completing).
//!
//! A `Packet` is one message as the requester asked it (the transport cuts it into
//! packets) or one datagram as it arrived.

pub(crate) mod check;
pub(crate) mod recv;
pub(crate) mod ud;

use crate::grh::{GRH_LEN, L3};

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

/// One message as the requester asked it, or one datagram as it arrived.
#[derive(Clone, Debug)]
pub(crate) struct Packet {
    /// The BTH/DETH source QP (1 for a GSI QP's datagrams).
    pub src_qpn: u32,
    pub dst_qpn: u32,
    /// Requester path MTU in bytes.
    pub mtu: u32,
    pub op: Op,
    pub payload: Vec<u8>,
}
