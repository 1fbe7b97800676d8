//! The base transport header and the opcode table.
//!
//! BTH layout, 12 bytes, big-endian (IBTA vol 1 §9.2; the kernel's `struct rxe_bth` and its
//! masks in `rxe_hdr.h`): opcode 0; byte 1: SE 0x80, MigReq 0x40, PadCnt 0x30, TVer 0x0f;
//! P_Key 2..4; the word at 4..8: FECN bit 31, BECN bit 30, 6 reserved bits, DestQP bits
//! 23:0; the word at 8..12: AckReq bit 31, 7 reserved bits, PSN bits 23:0.
//!
//! The opcode is a transport class in bits 7:5 (RC 0x00, UC 0x20, RD 0x40, UD 0x60, CNP
//! 0x80) and an operation in bits 4:0 (`include/rdma/ib_pack.h` `IB_OPCODE_*`). Which
//! extension headers follow, and whether a payload does, is [`Opcode::headers`], the table of
//! `rxe_opcode.c` (`rxe_opcode[]`: `RXE_*_MASK` and offsets) for RC, UC and UD. RD is not
//! modelled (no RoCE v2 device supports it); a CNP (0x81, RoCE v2 annex A17.9) carries 16
//! reserved bytes after the BTH.

use rdma_pmd::code_enum;

use super::ext;
use super::{need, Layer, Malformed};
use crate::be::{get16, get32, put16, put32};

/// Bytes of the BTH.
pub const LEN: usize = 12;

mod field {
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PKEY: usize = 2;
    pub const QPN_WORD: usize = 4;
    pub const PSN_WORD: usize = 8;
}

const SE: u8 = 0x80;
const MIG: u8 = 0x40;
const PAD_SHIFT: u8 = 4;
const PAD_MASK: u8 = 0x30;
const TVER_MASK: u8 = 0x0f;
const FECN: u32 = 1 << 31;
const BECN: u32 = 1 << 30;
const ACK_REQ: u32 = 1 << 31;
/// The 24-bit field mask of DestQP and PSN.
pub const MASK24: u32 = 0x00ff_ffff;

code_enum! {
    /// Opcode bits 7:5, the transport service (`IB_OPCODE_RC` …, `ib_pack.h`).
    Transport: u8 {
        /// Reliable connected.
        Rc = 0x00,
        /// Unreliable connected.
        Uc = 0x20,
        /// Reliable datagram (not modelled).
        Rd = 0x40,
        /// Unreliable datagram.
        Ud = 0x60,
        /// Congestion notification (RoCE v2).
        Cnp = 0x80,
    }
}

code_enum! {
    /// Opcode bits 4:0, the operation (`IB_OPCODE_*` in `ib_pack.h`).
    Operation: u8 {
        /// `SEND_FIRST`.
        SendFirst = 0x00,
        /// `SEND_MIDDLE`.
        SendMiddle = 0x01,
        /// `SEND_LAST`.
        SendLast = 0x02,
        /// `SEND_LAST_WITH_IMMEDIATE`.
        SendLastImm = 0x03,
        /// `SEND_ONLY`.
        SendOnly = 0x04,
        /// `SEND_ONLY_WITH_IMMEDIATE`.
        SendOnlyImm = 0x05,
        /// `RDMA_WRITE_FIRST`.
        WriteFirst = 0x06,
        /// `RDMA_WRITE_MIDDLE`.
        WriteMiddle = 0x07,
        /// `RDMA_WRITE_LAST`.
        WriteLast = 0x08,
        /// `RDMA_WRITE_LAST_WITH_IMMEDIATE`.
        WriteLastImm = 0x09,
        /// `RDMA_WRITE_ONLY`.
        WriteOnly = 0x0a,
        /// `RDMA_WRITE_ONLY_WITH_IMMEDIATE`.
        WriteOnlyImm = 0x0b,
        /// `RDMA_READ_REQUEST`.
        ReadRequest = 0x0c,
        /// `RDMA_READ_RESPONSE_FIRST`.
        ReadResponseFirst = 0x0d,
        /// `RDMA_READ_RESPONSE_MIDDLE`.
        ReadResponseMiddle = 0x0e,
        /// `RDMA_READ_RESPONSE_LAST`.
        ReadResponseLast = 0x0f,
        /// `RDMA_READ_RESPONSE_ONLY`.
        ReadResponseOnly = 0x10,
        /// `ACKNOWLEDGE`.
        Acknowledge = 0x11,
        /// `ATOMIC_ACKNOWLEDGE`.
        AtomicAcknowledge = 0x12,
        /// `COMPARE_SWAP`.
        CompareSwap = 0x13,
        /// `FETCH_ADD`.
        FetchAdd = 0x14,
        /// `SEND_LAST_WITH_INVALIDATE`.
        SendLastInv = 0x16,
        /// `SEND_ONLY_WITH_INVALIDATE`.
        SendOnlyInv = 0x17,
    }
}

/// Where a packet sits in its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Position {
    /// The first of several packets.
    First,
    /// Neither first nor last.
    Middle,
    /// The last of several packets.
    Last,
    /// A one-packet message.
    Only,
}

/// What follows the BTH for one opcode, in wire order: DETH, RETH, AtomicETH, AETH,
/// AtomicAckETH, ImmDt, IETH, then the payload (IBTA vol 1 §9.2, the `offset` columns of
/// `rxe_opcode.c`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Headers {
    /// Datagram ETH (UD).
    pub deth: bool,
    /// RDMA ETH.
    pub reth: bool,
    /// Atomic ETH.
    pub atomic_eth: bool,
    /// ACK ETH.
    pub aeth: bool,
    /// Atomic ACK ETH.
    pub atomic_ack: bool,
    /// Immediate data.
    pub immdt: bool,
    /// Invalidate ETH.
    pub ieth: bool,
    /// A payload may follow (`RXE_PAYLOAD_MASK`).
    pub payload: bool,
}

impl Headers {
    /// Bytes of the extension headers (after the BTH, before the payload).
    pub fn len(&self) -> usize {
        let f = |b: bool, n: usize| if b { n } else { 0 };
        f(self.deth, ext::DETH_LEN)
            + f(self.reth, ext::RETH_LEN)
            + f(self.atomic_eth, ext::ATOMIC_ETH_LEN)
            + f(self.aeth, ext::AETH_LEN)
            + f(self.atomic_ack, ext::ATOMIC_ACK_LEN)
            + f(self.immdt, ext::IMMDT_LEN)
            + f(self.ieth, ext::IETH_LEN)
    }

    /// No extension header.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A BTH opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Opcode(pub u8);

macro_rules! opcodes {
    ($($(#[$m:meta])* $name:ident = $v:expr;)*) => {
        impl Opcode {
            $($(#[$m])* pub const $name: Opcode = Opcode($v);)*
        }
    };
}

opcodes! {
    /// `IB_OPCODE_RC_SEND_FIRST`.
    RC_SEND_FIRST = 0x00;
    /// `IB_OPCODE_RC_SEND_MIDDLE`.
    RC_SEND_MIDDLE = 0x01;
    /// `IB_OPCODE_RC_SEND_LAST`.
    RC_SEND_LAST = 0x02;
    /// `IB_OPCODE_RC_SEND_LAST_WITH_IMMEDIATE`.
    RC_SEND_LAST_IMM = 0x03;
    /// `IB_OPCODE_RC_SEND_ONLY`.
    RC_SEND_ONLY = 0x04;
    /// `IB_OPCODE_RC_SEND_ONLY_WITH_IMMEDIATE`.
    RC_SEND_ONLY_IMM = 0x05;
    /// `IB_OPCODE_RC_RDMA_WRITE_FIRST`.
    RC_WRITE_FIRST = 0x06;
    /// `IB_OPCODE_RC_RDMA_WRITE_MIDDLE`.
    RC_WRITE_MIDDLE = 0x07;
    /// `IB_OPCODE_RC_RDMA_WRITE_LAST`.
    RC_WRITE_LAST = 0x08;
    /// `IB_OPCODE_RC_RDMA_WRITE_LAST_WITH_IMMEDIATE`.
    RC_WRITE_LAST_IMM = 0x09;
    /// `IB_OPCODE_RC_RDMA_WRITE_ONLY`.
    RC_WRITE_ONLY = 0x0a;
    /// `IB_OPCODE_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE`.
    RC_WRITE_ONLY_IMM = 0x0b;
    /// `IB_OPCODE_RC_RDMA_READ_REQUEST`.
    RC_READ_REQUEST = 0x0c;
    /// `IB_OPCODE_RC_RDMA_READ_RESPONSE_FIRST`.
    RC_READ_RESPONSE_FIRST = 0x0d;
    /// `IB_OPCODE_RC_RDMA_READ_RESPONSE_MIDDLE`.
    RC_READ_RESPONSE_MIDDLE = 0x0e;
    /// `IB_OPCODE_RC_RDMA_READ_RESPONSE_LAST`.
    RC_READ_RESPONSE_LAST = 0x0f;
    /// `IB_OPCODE_RC_RDMA_READ_RESPONSE_ONLY`.
    RC_READ_RESPONSE_ONLY = 0x10;
    /// `IB_OPCODE_RC_ACKNOWLEDGE`.
    RC_ACKNOWLEDGE = 0x11;
    /// `IB_OPCODE_RC_ATOMIC_ACKNOWLEDGE`.
    RC_ATOMIC_ACKNOWLEDGE = 0x12;
    /// `IB_OPCODE_RC_COMPARE_SWAP`.
    RC_COMPARE_SWAP = 0x13;
    /// `IB_OPCODE_RC_FETCH_ADD`.
    RC_FETCH_ADD = 0x14;
    /// `IB_OPCODE_RC_SEND_LAST_WITH_INVALIDATE`.
    RC_SEND_LAST_INV = 0x16;
    /// `IB_OPCODE_RC_SEND_ONLY_WITH_INVALIDATE`.
    RC_SEND_ONLY_INV = 0x17;
    /// `IB_OPCODE_UC_SEND_ONLY`.
    UC_SEND_ONLY = 0x24;
    /// `IB_OPCODE_UC_RDMA_WRITE_ONLY`.
    UC_WRITE_ONLY = 0x2a;
    /// `IB_OPCODE_UD_SEND_ONLY`.
    UD_SEND_ONLY = 0x64;
    /// `IB_OPCODE_UD_SEND_ONLY_WITH_IMMEDIATE`.
    UD_SEND_ONLY_IMM = 0x65;
    /// The RoCE v2 congestion notification packet.
    CNP = 0x81;
}

impl Opcode {
    /// Bits 7:5.
    pub fn transport(self) -> Transport {
        Transport::from(self.0 & 0xe0)
    }

    /// Bits 4:0.
    pub fn operation(self) -> Operation {
        Operation::from(self.0 & 0x1f)
    }

    /// The opcode of `op` on `t`.
    pub fn new(t: Transport, op: Operation) -> Opcode {
        Opcode(t.raw() | op.raw())
    }

    /// What follows the BTH, or `None` for an opcode this model does not know (RD,
    /// reserved values, an operation its transport does not have).
    pub fn headers(self) -> Option<Headers> {
        use Operation as O;
        let t = self.transport();
        let op = self.operation();
        let valid = match t {
            Transport::Rc => !matches!(op, O::Unknown(_)),
            Transport::Uc => matches!(self.0 & 0x1f, 0x00..=0x0b),
            Transport::Ud => matches!(op, O::SendOnly | O::SendOnlyImm),
            Transport::Cnp => self.0 == Opcode::CNP.0,
            _ => false,
        };
        if !valid {
            return None;
        }
        if t == Transport::Cnp {
            return Some(Headers { payload: true, ..Headers::default() });
        }
        let p = Headers { payload: true, ..Headers::default() };
        let mut h = match op {
            O::SendFirst | O::SendMiddle | O::SendLast | O::SendOnly => p,
            O::SendLastImm | O::SendOnlyImm => Headers { immdt: true, ..p },
            O::WriteFirst | O::WriteOnly => Headers { reth: true, ..p },
            O::WriteMiddle | O::WriteLast => p,
            O::WriteLastImm => Headers { immdt: true, ..p },
            O::WriteOnlyImm => Headers { reth: true, immdt: true, ..p },
            O::ReadRequest => Headers { reth: true, ..Headers::default() },
            O::ReadResponseFirst | O::ReadResponseLast | O::ReadResponseOnly => {
                Headers { aeth: true, ..p }
            }
            O::ReadResponseMiddle => p,
            O::Acknowledge => Headers { aeth: true, ..Headers::default() },
            O::AtomicAcknowledge => Headers { aeth: true, atomic_ack: true, ..Headers::default() },
            O::CompareSwap | O::FetchAdd => Headers { atomic_eth: true, ..Headers::default() },
            O::SendLastInv | O::SendOnlyInv => Headers { ieth: true, ..p },
            O::Unknown(_) => return None,
        };
        h.deth = t == Transport::Ud;
        Some(h)
    }

    /// Where the packet sits in its message (a request with no payload, an ACK or a CNP is
    /// `Only`).
    pub fn position(self) -> Position {
        use Operation as O;
        match self.operation() {
            O::SendFirst | O::WriteFirst | O::ReadResponseFirst => Position::First,
            O::SendMiddle | O::WriteMiddle | O::ReadResponseMiddle => Position::Middle,
            O::SendLast | O::SendLastImm | O::SendLastInv | O::WriteLast | O::WriteLastImm => {
                Position::Last
            }
            O::ReadResponseLast => Position::Last,
            _ => Position::Only,
        }
    }

    /// A request (sent by the requester: SEND, WRITE, READ request, atomic; `RXE_REQ_MASK`),
    /// as opposed to a response (READ response, ACK, atomic ACK; `RXE_ACK_MASK`) or a CNP.
    pub fn is_request(self) -> bool {
        use Operation as O;
        self.transport() != Transport::Cnp
            && !matches!(
                self.operation(),
                O::ReadResponseFirst
                    | O::ReadResponseMiddle
                    | O::ReadResponseLast
                    | O::ReadResponseOnly
                    | O::Acknowledge
                    | O::AtomicAcknowledge
            )
    }
}

/// A read/write view of a BTH.
#[derive(Debug, Clone)]
pub struct Bth<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Bth<T> {
    /// A view with no length check.
    pub fn new_unchecked(buffer: T) -> Bth<T> {
        Bth { buffer }
    }

    /// A view of a buffer of at least 12 bytes.
    pub fn new_checked(buffer: T) -> Result<Bth<T>, Malformed> {
        let b = Bth::new_unchecked(buffer);
        b.check_len()?;
        Ok(b)
    }

    /// The buffer holds 12 bytes.
    pub fn check_len(&self) -> Result<(), Malformed> {
        need(self.buffer.as_ref(), LEN, Layer::Bth)
    }

    fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    /// Opcode.
    pub fn opcode(&self) -> Opcode {
        Opcode(self.buffer.as_ref()[field::OPCODE])
    }
    /// Solicited event.
    pub fn solicited(&self) -> bool {
        self.flags() & SE != 0
    }
    /// MigReq.
    pub fn mig_req(&self) -> bool {
        self.flags() & MIG != 0
    }
    /// Pad count: bytes of pad after the payload (0..=3).
    pub fn pad_count(&self) -> u8 {
        (self.flags() & PAD_MASK) >> PAD_SHIFT
    }
    /// Transport header version (must be 0).
    pub fn tver(&self) -> u8 {
        self.flags() & TVER_MASK
    }
    /// Partition key (big-endian).
    pub fn pkey(&self) -> u16 {
        get16(self.buffer.as_ref(), field::PKEY)
    }
    fn qpn_word(&self) -> u32 {
        get32(self.buffer.as_ref(), field::QPN_WORD)
    }
    fn psn_word(&self) -> u32 {
        get32(self.buffer.as_ref(), field::PSN_WORD)
    }
    /// FECN (bit 31 of the big-endian word at 4).
    pub fn fecn(&self) -> bool {
        self.qpn_word() & FECN != 0
    }
    /// BECN (bit 30 of the word at 4).
    pub fn becn(&self) -> bool {
        self.qpn_word() & BECN != 0
    }
    /// Destination QP (bits 23:0 of the word at 4).
    pub fn dest_qp(&self) -> u32 {
        self.qpn_word() & MASK24
    }
    /// AckReq (bit 31 of the big-endian word at 8).
    pub fn ack_req(&self) -> bool {
        self.psn_word() & ACK_REQ != 0
    }
    /// PSN (bits 23:0 of the word at 8).
    pub fn psn(&self) -> u32 {
        self.psn_word() & MASK24
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    fn set_flag(&mut self, mask: u8, on: bool) {
        let b = &mut self.buffer.as_mut()[field::FLAGS];
        *b = (*b & !mask) | if on { mask } else { 0 };
    }
    /// Set the opcode.
    pub fn set_opcode(&mut self, op: Opcode) {
        self.buffer.as_mut()[field::OPCODE] = op.0;
    }
    /// Set SE.
    pub fn set_solicited(&mut self, on: bool) {
        self.set_flag(SE, on);
    }
    /// Set MigReq.
    pub fn set_mig_req(&mut self, on: bool) {
        self.set_flag(MIG, on);
    }
    /// Set the pad count (2 bits).
    pub fn set_pad_count(&mut self, pad: u8) {
        let b = &mut self.buffer.as_mut()[field::FLAGS];
        *b = (*b & !PAD_MASK) | ((pad << PAD_SHIFT) & PAD_MASK);
    }
    /// Set TVer (4 bits).
    pub fn set_tver(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::FLAGS];
        *b = (*b & !TVER_MASK) | (v & TVER_MASK);
    }
    /// Set the P_Key.
    pub fn set_pkey(&mut self, v: u16) {
        put16(self.buffer.as_mut(), field::PKEY, v);
    }
    /// Set FECN, BECN and DestQP (the reserved bits 0).
    pub fn set_qpn_word(&mut self, fecn: bool, becn: bool, qpn: u32) {
        let w = if fecn { FECN } else { 0 } | if becn { BECN } else { 0 } | (qpn & MASK24);
        put32(self.buffer.as_mut(), field::QPN_WORD, w);
    }
    /// Set AckReq and the PSN (the reserved bits 0).
    pub fn set_psn_word(&mut self, ack_req: bool, psn: u32) {
        let w = if ack_req { ACK_REQ } else { 0 } | (psn & MASK24);
        put32(self.buffer.as_mut(), field::PSN_WORD, w);
    }
}

/// A BTH as values. The pad count is not here: it follows from the payload's length
/// (`RocePacket` reports it, `RoceRepr::emit` writes it); TVer is always 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BthRepr {
    /// Opcode.
    pub opcode: Opcode,
    /// Solicited event.
    pub solicited: bool,
    /// MigReq.
    pub mig_req: bool,
    /// P_Key (the default partition, 0xffff).
    pub pkey: u16,
    /// FECN.
    pub fecn: bool,
    /// BECN.
    pub becn: bool,
    /// Destination QP (24 bits).
    pub dest_qp: u32,
    /// AckReq.
    pub ack_req: bool,
    /// PSN (24 bits).
    pub psn: u32,
}

impl BthRepr {
    /// The values of a checked view (TVer is checked by the packet parser).
    pub fn parse<T: AsRef<[u8]>>(b: &Bth<T>) -> BthRepr {
        BthRepr {
            opcode: b.opcode(),
            solicited: b.solicited(),
            mig_req: b.mig_req(),
            pkey: b.pkey(),
            fecn: b.fecn(),
            becn: b.becn(),
            dest_qp: b.dest_qp(),
            ack_req: b.ack_req(),
            psn: b.psn(),
        }
    }

    /// Write the 12 bytes with pad count `pad` and TVer 0.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, b: &mut Bth<T>, pad: u8) {
        b.set_opcode(self.opcode);
        b.buffer.as_mut()[field::FLAGS] = 0;
        b.set_solicited(self.solicited);
        b.set_mig_req(self.mig_req);
        b.set_pad_count(pad);
        b.set_tver(0);
        b.set_pkey(self.pkey);
        b.set_qpn_word(self.fecn, self.becn, self.dest_qp);
        b.set_psn_word(self.ack_req, self.psn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_from_known_bytes() {
        // RC SEND_ONLY_IMM, SE, MigReq, pad 2, P_Key 0xffff, BECN, QP 0x123456, AckReq,
        // PSN 0xabcdef: each bit where rxe_hdr.h's masks put it.
        let b = [0x05, 0xe0, 0xff, 0xff, 0x40, 0x12, 0x34, 0x56, 0x80, 0xab, 0xcd, 0xef];
        let v = Bth::new_checked(&b[..]).unwrap();
        assert_eq!(v.opcode(), Opcode::RC_SEND_ONLY_IMM);
        assert!(v.solicited() && v.mig_req());
        assert_eq!((v.pad_count(), v.tver(), v.pkey()), (2, 0, 0xffff));
        assert!(!v.fecn() && v.becn());
        assert_eq!((v.dest_qp(), v.ack_req(), v.psn()), (0x123456, true, 0xabcdef));
        let mut out = [0xa5u8; 12];
        BthRepr::parse(&v).emit(&mut Bth::new_unchecked(&mut out[..]), 2);
        assert_eq!(out, b);
    }

    #[test]
    fn opcode_table_follows_rxe() {
        let h = |o: u8| Opcode(o).headers();
        let p = Headers { payload: true, ..Headers::default() };
        assert_eq!(h(0x00), Some(p));
        assert_eq!(h(0x0b), Some(Headers { reth: true, immdt: true, ..p }));
        assert_eq!(h(0x0c).unwrap().len(), 16);
        assert_eq!(h(0x0e), Some(p));
        assert_eq!(h(0x12).unwrap().len(), 12);
        assert_eq!(h(0x13).unwrap().len(), 28);
        assert_eq!(h(0x17), Some(Headers { ieth: true, ..p }));
        assert_eq!(h(0x15), None, "0x15 is reserved in RC");
        assert_eq!(h(0x2b), Some(Headers { reth: true, immdt: true, ..p }));
        assert_eq!(h(0x2c), None, "UC has no READ");
        assert_eq!(h(0x64), Some(Headers { deth: true, ..p }));
        assert_eq!(h(0x65).unwrap().len(), 12);
        assert_eq!(h(0x60), None, "UD has only SEND_ONLY(_IMM)");
        assert_eq!(h(0x44), None, "RD is not modelled");
        assert_eq!(h(0x81).map(|x| x.len()), Some(0));
        let known = (0..=255u8).filter(|o| Opcode(*o).headers().is_some()).count();
        assert_eq!(known, 23 + 12 + 2 + 1);
    }

    #[test]
    fn positions() {
        assert_eq!(Opcode::RC_WRITE_FIRST.position(), Position::First);
        assert_eq!(Opcode(0x27).position(), Position::Middle);
        assert_eq!(Opcode::RC_SEND_LAST_INV.position(), Position::Last);
        assert_eq!(Opcode::RC_READ_RESPONSE_LAST.position(), Position::Last);
        assert_eq!(Opcode::UD_SEND_ONLY.position(), Position::Only);
        assert!(Opcode::RC_READ_REQUEST.is_request());
        assert!(!Opcode::RC_ACKNOWLEDGE.is_request());
    }
}
