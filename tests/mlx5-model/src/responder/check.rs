//! The RC responder's checks on one request packet, in the order the kernel's rxe makes them
//! (`rxe_resp.c`: `check_psn`, `check_op_seq`, `check_op_valid`, `check_resource`,
//! `check_length`, `check_rkey`; IBTA vol 1 §9.7.5 "responder side behaviour"), as pure
//! functions of the packet's headers and the responder QP's state, so that each is tested on
//! its own and the transport applies them in one place.
//!
//! What a refusal does ([`Refusal::response`], rxe's `rxe_responder` error states):
//!
//! * a PSN ahead of the expected one is a class B error: one NAK "PSN sequence error"
//!   carrying the expected PSN, then silence until the expected PSN arrives (`sent_psn_nak`);
//! * a PSN behind it is a duplicate: re-acknowledged (SEND, WRITE), re-executed (READ) or
//!   answered from the saved result (atomic) by the transport;
//! * a missing FIRST or LAST, an operation the QP does not enable (`qp_access_flags`), no
//!   read/atomic resources, a bad length and a misaligned atomic are class C "invalid
//!   request" errors: NAK, and the responder QP moves to ERR;
//! * an R_Key that does not grant the access over the range is class C "remote access
//!   error": NAK, and the QP moves to ERR;
//! * no receive WQE for a SEND or WRITE WITH IMMEDIATE is class B: an RNR NAK with the
//!   packet's PSN; nothing is written.
//!
//! PSNs are 24-bit and compared modulo 2^24 with a signed 24-bit difference (rxe
//! `psn_compare`).

use crate::objects::{Mkey, Rights};
use crate::roce::bth::{Opcode, Operation, Position};
use crate::roce::ext::{AtomicEth, NakCode, Reth};

/// The 24 bits of a PSN.
pub const PSN_MASK: u32 = 0x00ff_ffff;
/// The largest RETH DMA length rxe accepts (`check_length`: `dmalen > (1 << 31)` fails).
pub const MAX_DMA_LEN: u32 = 1 << 31;

/// `a - b` as a signed 24-bit number: > 0 when `a` is after `b` (rxe `psn_compare`).
pub fn psn_diff(a: u32, b: u32) -> i32 {
    ((a.wrapping_sub(b) << 8) as i32) >> 8
}

/// `psn + n` modulo 2^24.
pub fn psn_add(psn: u32, n: u32) -> u32 {
    psn.wrapping_add(n) & PSN_MASK
}

/// The remote right an operation needs, on the QP (`qp_access_flags`) and on the R_Key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// RDMA WRITE (`IB_ACCESS_REMOTE_WRITE`).
    Write,
    /// RDMA READ (`IB_ACCESS_REMOTE_READ`).
    Read,
    /// Compare-and-swap, fetch-and-add (`IB_ACCESS_REMOTE_ATOMIC`).
    Atomic,
}

impl Access {
    /// Whether `r` grants this right.
    pub fn granted(self, r: &Rights) -> bool {
        match self {
            Access::Write => r.remote_write,
            Access::Read => r.remote_read,
            Access::Atomic => r.remote_atomic,
        }
    }
}

/// What an RC request opcode is, for the checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// SEND FIRST/MIDDLE/LAST/ONLY (with immediate or invalidate).
    Send,
    /// RDMA WRITE FIRST/MIDDLE/LAST/ONLY (with immediate).
    Write,
    /// RDMA READ request.
    Read,
    /// Compare-and-swap or fetch-and-add.
    Atomic,
}

impl Kind {
    /// The kind of an RC request opcode; `None` for a response, another transport or an
    /// unknown operation.
    pub fn of(op: Opcode) -> Option<Kind> {
        use Operation as O;
        if op.0 & 0xe0 != 0 {
            return None;
        }
        Some(match op.operation() {
            O::SendFirst
            | O::SendMiddle
            | O::SendLast
            | O::SendLastImm
            | O::SendOnly
            | O::SendOnlyImm
            | O::SendLastInv
            | O::SendOnlyInv => Kind::Send,
            O::WriteFirst
            | O::WriteMiddle
            | O::WriteLast
            | O::WriteLastImm
            | O::WriteOnly
            | O::WriteOnlyImm => Kind::Write,
            O::ReadRequest => Kind::Read,
            O::CompareSwap | O::FetchAdd => Kind::Atomic,
            _ => return None,
        })
    }

    /// The remote right the kind needs (SEND needs none).
    pub fn access(self) -> Option<Access> {
        match self {
            Kind::Send => None,
            Kind::Write => Some(Access::Write),
            Kind::Read => Some(Access::Read),
            Kind::Atomic => Some(Access::Atomic),
        }
    }
}

/// Whether the opcode needs a receive WQE (rxe `RXE_RWR_MASK`): every SEND, and the packet
/// of a WRITE that carries the immediate.
pub fn needs_receive(op: Opcode) -> bool {
    use Operation as O;
    matches!(Kind::of(op), Some(Kind::Send))
        || matches!(op.operation(), O::WriteLastImm | O::WriteOnlyImm) && op.0 & 0xe0 == 0
}

/// The PSN check's verdict on an acceptable-so-far packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PsnClass {
    /// The expected PSN.
    Expected,
    /// Behind the expected PSN: a retransmission of something already executed.
    Duplicate,
}

/// Why the responder does not execute a packet, in check order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The PSN is ahead of the expected one (`RESPST_ERR_PSN_OUT_OF_SEQ`); `nak` is false
    /// when a sequence NAK was sent already and not yet cleared (then the packet is dropped).
    PsnAhead {
        /// Whether to send the sequence NAK.
        nak: bool,
    },
    /// A MIDDLE or LAST with no message in progress (`RESPST_ERR_MISSING_OPCODE_FIRST`).
    MissingFirst,
    /// A message in progress and a packet that does not continue it
    /// (`RESPST_ERR_MISSING_OPCODE_LAST_C`).
    MissingLast,
    /// The QP does not enable the operation (`RESPST_ERR_UNSUPPORTED_OPCODE`).
    NotEnabled(Access),
    /// A READ or atomic with no responder resources (`max_dest_rd_atomic` 0,
    /// `RESPST_ERR_TOO_MANY_RDMA_ATM_REQ`).
    NoReadAtomicResources,
    /// A SEND or WRITE WITH IMMEDIATE and no receive WQE (`RESPST_ERR_RNR`).
    NoReceive,
    /// The payload length does not fit the packet's position or the message
    /// (`RESPST_ERR_LENGTH`).
    Length(LengthError),
    /// The R_Key does not grant the access over the range (`RESPST_ERR_RKEY_VIOLATION`).
    Rkey(RkeyError),
    /// An atomic's address is not 8-byte aligned (`RESPST_ERR_MISALIGNED_ATOMIC`).
    MisalignedAtomic,
}

/// How the payload length broke the rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LengthError {
    /// An ONLY packet longer than the path MTU.
    OnlyOverMtu,
    /// A FIRST or MIDDLE packet not exactly the path MTU.
    NotMtu,
    /// A LAST packet empty or longer than the path MTU.
    LastSize,
    /// A RETH DMA length above 2^31.
    DmaLength,
    /// A WRITE packet whose payload does not match what is left of the message (more than
    /// an MTU left: exactly an MTU, no pad; else exactly what is left, with its pad).
    WriteResidual,
}

/// How the R_Key failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RkeyError {
    /// No such key.
    Unknown,
    /// The key is another PD's.
    Pd,
    /// The key does not grant the access.
    Rights,
    /// The range is outside the key.
    Bounds,
}

/// What the responder sends for a refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Response {
    /// Nothing: the packet is dropped.
    Drop,
    /// An RNR NAK with the packet's PSN.
    Rnr,
    /// A NAK with this code; `fatal` when the responder QP then moves to ERR (class C).
    Nak {
        /// The AETH NAK code.
        code: NakCode,
        /// Whether the QP moves to ERR.
        fatal: bool,
    },
}

impl Refusal {
    /// A short name for the log.
    pub fn name(self) -> &'static str {
        match self {
            Refusal::PsnAhead { .. } => "psn ahead",
            Refusal::MissingFirst => "missing first",
            Refusal::MissingLast => "missing last",
            Refusal::NotEnabled(_) => "operation not enabled",
            Refusal::NoReadAtomicResources => "no read/atomic resources",
            Refusal::NoReceive => "no receive wqe",
            Refusal::Length(_) => "length",
            Refusal::Rkey(_) => "rkey",
            Refusal::MisalignedAtomic => "misaligned atomic",
        }
    }

    /// What the responder answers (rxe `rxe_responder`'s error states, RC).
    pub fn response(self) -> Response {
        match self {
            Refusal::PsnAhead { nak: true } => {
                Response::Nak { code: NakCode::PsnSequence, fatal: false }
            }
            Refusal::PsnAhead { nak: false } => Response::Drop,
            Refusal::NoReceive => Response::Rnr,
            Refusal::Rkey(_) => Response::Nak { code: NakCode::RemoteAccess, fatal: true },
            Refusal::MissingFirst
            | Refusal::MissingLast
            | Refusal::NotEnabled(_)
            | Refusal::NoReadAtomicResources
            | Refusal::Length(_)
            | Refusal::MisalignedAtomic => {
                Response::Nak { code: NakCode::InvalidRequest, fatal: true }
            }
        }
    }
}

/// Step 1, `check_psn` (RC): the expected PSN, a duplicate, or ahead (`nak_sent`: a sequence
/// NAK is outstanding).
pub fn check_psn(psn: u32, epsn: u32, nak_sent: bool) -> Result<PsnClass, Refusal> {
    match psn_diff(psn, epsn) {
        d if d > 0 => Err(Refusal::PsnAhead { nak: !nak_sent }),
        d if d < 0 => Ok(PsnClass::Duplicate),
        _ => Ok(PsnClass::Expected),
    }
}

/// Step 2, `check_op_seq` (RC): `prev` is the opcode of the last packet of a message still
/// in progress (a SEND or WRITE FIRST or MIDDLE), `None` between messages.
pub fn check_op_seq(prev: Option<Opcode>, op: Opcode) -> Result<(), Refusal> {
    let continues = matches!(op.position(), Position::Middle | Position::Last);
    match prev.and_then(Kind::of) {
        Some(k @ (Kind::Send | Kind::Write)) => {
            if continues && Kind::of(op) == Some(k) {
                Ok(())
            } else {
                Err(Refusal::MissingLast)
            }
        }
        _ if continues && matches!(Kind::of(op), Some(Kind::Send | Kind::Write)) => {
            Err(Refusal::MissingFirst)
        }
        _ => Ok(()),
    }
}

/// Step 3, `check_op_valid` (RC): the QP enables the operation.
pub fn check_op_valid(op: Opcode, qp: &Rights) -> Result<(), Refusal> {
    match Kind::of(op).and_then(Kind::access) {
        Some(a) if !a.granted(qp) => Err(Refusal::NotEnabled(a)),
        _ => Ok(()),
    }
}

/// Step 4, `check_resource`: READ and atomics need responder resources
/// (`max_dest_rd_atomic` > 0); a SEND or WRITE WITH IMMEDIATE needs a receive WQE.
pub fn check_resource(op: Opcode, rd_atomic: u32, receive_posted: bool) -> Result<(), Refusal> {
    match Kind::of(op) {
        Some(Kind::Read | Kind::Atomic) if rd_atomic == 0 => Err(Refusal::NoReadAtomicResources),
        _ if needs_receive(op) && !receive_posted => Err(Refusal::NoReceive),
        _ => Ok(()),
    }
}

/// Step 5, `check_length`: an ONLY payload at most the MTU, FIRST and MIDDLE exactly the
/// MTU, LAST 1..=MTU; a RETH length at most 2^31. Requests without payload (READ, atomics)
/// are `Only` with payload 0.
pub fn check_length(
    op: Opcode,
    payload: u32,
    mtu: u32,
    reth: Option<&Reth>,
) -> Result<(), Refusal> {
    let carries = matches!(Kind::of(op), Some(Kind::Send | Kind::Write));
    if carries {
        match op.position() {
            Position::Only if payload > mtu => {
                return Err(Refusal::Length(LengthError::OnlyOverMtu))
            }
            Position::First | Position::Middle if payload != mtu => {
                return Err(Refusal::Length(LengthError::NotMtu))
            }
            Position::Last if payload == 0 || payload > mtu => {
                return Err(Refusal::Length(LengthError::LastSize))
            }
            _ => {}
        }
    }
    match reth {
        Some(r) if r.dma_len > MAX_DMA_LEN => Err(Refusal::Length(LengthError::DmaLength)),
        _ => Ok(()),
    }
}

/// The remote range a request packet works on, and what is left of a WRITE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// R_Key.
    pub rkey: u32,
    /// Virtual address of this packet's bytes (a WRITE MIDDLE/LAST: where the last packet
    /// stopped).
    pub va: u64,
    /// Bytes left of the message from `va` (8 for an atomic).
    pub resid: u32,
}

impl Target {
    /// The range of a packet that starts an operation: the RETH's, or the AtomicETH's 8
    /// bytes.
    pub fn start(reth: Option<&Reth>, atomic: Option<&AtomicEth>) -> Option<Target> {
        match (reth, atomic) {
            (Some(r), _) => Some(Target { rkey: r.rkey, va: r.va, resid: r.dma_len }),
            (None, Some(a)) => Some(Target { rkey: a.rkey, va: a.va, resid: 8 }),
            (None, None) => None,
        }
    }
}

/// Step 6, `check_rkey`: for a WRITE, READ or atomic, the key exists, is in the QP's PD,
/// grants the access and covers `[va, va + resid)`; a zero-length READ or WRITE is not
/// checked (it need not name an address or key). Then a WRITE packet's payload must match
/// what is left: more than an MTU left, exactly an MTU and no pad; else exactly what is left
/// and its pad. An atomic's address must be 8-byte aligned (rxe checks that after the key:
/// `atomic_reply`).
#[allow(clippy::too_many_arguments)]
pub fn check_rkey(
    kind: Kind,
    starts: bool,
    t: &Target,
    key: Option<&Mkey>,
    pd: u32,
    payload: u32,
    pad: u8,
    mtu: u32,
) -> Result<(), Refusal> {
    let Some(access) = kind.access() else { return Ok(()) };
    if starts && kind != Kind::Atomic && t.resid == 0 {
        return Ok(());
    }
    let k = key.ok_or(Refusal::Rkey(RkeyError::Unknown))?;
    if k.pd != pd {
        return Err(Refusal::Rkey(RkeyError::Pd));
    }
    if !access.granted(&k.rights) {
        return Err(Refusal::Rkey(RkeyError::Rights));
    }
    if !k.covers(t.va, u64::from(t.resid)) {
        return Err(Refusal::Rkey(RkeyError::Bounds));
    }
    if kind == Kind::Write {
        let ok = if t.resid > mtu {
            payload == mtu && pad == 0
        } else {
            payload == t.resid && u32::from(pad) == (t.resid.wrapping_neg() & 3)
        };
        if !ok {
            return Err(Refusal::Length(LengthError::WriteResidual));
        }
    }
    if kind == Kind::Atomic && t.va & 7 != 0 {
        return Err(Refusal::MisalignedAtomic);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::Xlate;

    const ALL: Rights =
        Rights { local_write: true, remote_write: true, remote_read: true, remote_atomic: true };

    fn key(pd: u32, rights: Rights) -> Mkey {
        Mkey { pd, start: 0x1000, len: 0x1000, rights, xlate: Xlate::Physical }
    }

    #[test]
    fn psn_compares_modulo_2_24() {
        assert_eq!(psn_diff(5, 5), 0);
        assert_eq!(psn_diff(0, PSN_MASK), 1, "0 follows 0xffffff");
        assert_eq!(psn_diff(PSN_MASK, 0), -1);
        assert_eq!(psn_diff(0x80_0000, 0), -0x80_0000, "half way is behind");
        assert_eq!(psn_add(PSN_MASK, 2), 1);
        assert_eq!(check_psn(7, 7, true), Ok(PsnClass::Expected));
        assert_eq!(check_psn(6, 7, false), Ok(PsnClass::Duplicate));
        assert_eq!(check_psn(8, 7, false), Err(Refusal::PsnAhead { nak: true }));
        assert_eq!(check_psn(8, 7, true), Err(Refusal::PsnAhead { nak: false }));
        assert_eq!(Refusal::PsnAhead { nak: false }.response(), Response::Drop);
        assert_eq!(
            Refusal::PsnAhead { nak: true }.response(),
            Response::Nak { code: NakCode::PsnSequence, fatal: false }
        );
    }

    #[test]
    fn opcode_sequence_as_rxe() {
        let o = Opcode;
        // Between messages: FIRST/ONLY/READ/atomics fine, MIDDLE/LAST are missing a FIRST.
        for op in [0x00, 0x04, 0x06, 0x0a, 0x0b, 0x0c, 0x13, 0x14] {
            assert_eq!(check_op_seq(None, o(op)), Ok(()), "{op:#x}");
        }
        for op in [0x01, 0x02, 0x03, 0x07, 0x08, 0x09, 0x16] {
            assert_eq!(check_op_seq(None, o(op)), Err(Refusal::MissingFirst), "{op:#x}");
        }
        // Inside a SEND: only SEND MIDDLE/LAST continue it.
        for prev in [0x00, 0x01] {
            for op in [0x01, 0x02, 0x03, 0x16] {
                assert_eq!(check_op_seq(Some(o(prev)), o(op)), Ok(()));
            }
            for op in [0x00, 0x04, 0x07, 0x08, 0x0c, 0x13] {
                assert_eq!(check_op_seq(Some(o(prev)), o(op)), Err(Refusal::MissingLast));
            }
        }
        // Inside a WRITE: only WRITE MIDDLE/LAST.
        assert_eq!(check_op_seq(Some(o(0x06)), o(0x09)), Ok(()));
        assert_eq!(check_op_seq(Some(o(0x07)), o(0x02)), Err(Refusal::MissingLast));
        assert_eq!(check_op_seq(Some(o(0x06)), o(0x06)), Err(Refusal::MissingLast));
        assert_eq!(
            Refusal::MissingLast.response(),
            Response::Nak { code: NakCode::InvalidRequest, fatal: true }
        );
    }

    #[test]
    fn the_qp_must_enable_the_operation() {
        let none = Rights::default();
        assert_eq!(check_op_valid(Opcode(0x04), &none), Ok(()), "SEND needs no right");
        assert_eq!(check_op_valid(Opcode(0x0a), &none), Err(Refusal::NotEnabled(Access::Write)));
        assert_eq!(check_op_valid(Opcode(0x0c), &none), Err(Refusal::NotEnabled(Access::Read)));
        assert_eq!(check_op_valid(Opcode(0x14), &none), Err(Refusal::NotEnabled(Access::Atomic)));
        assert_eq!(check_op_valid(Opcode(0x13), &ALL), Ok(()));
        // rxe answers a disabled operation with "invalid request", not "remote access".
        assert_eq!(
            Refusal::NotEnabled(Access::Read).response(),
            Response::Nak { code: NakCode::InvalidRequest, fatal: true }
        );
    }

    #[test]
    fn receive_wqes_and_read_resources() {
        assert_eq!(check_resource(Opcode(0x00), 1, false), Err(Refusal::NoReceive));
        assert_eq!(check_resource(Opcode(0x01), 1, false), Err(Refusal::NoReceive));
        assert_eq!(check_resource(Opcode(0x0b), 1, false), Err(Refusal::NoReceive));
        assert_eq!(check_resource(Opcode(0x09), 1, false), Err(Refusal::NoReceive));
        assert_eq!(check_resource(Opcode(0x06), 1, false), Ok(()), "plain WRITE needs none");
        assert_eq!(check_resource(Opcode(0x04), 1, true), Ok(()));
        assert_eq!(check_resource(Opcode(0x0c), 0, true), Err(Refusal::NoReadAtomicResources));
        assert_eq!(check_resource(Opcode(0x0c), 1, false), Ok(()));
        assert_eq!(Refusal::NoReceive.response(), Response::Rnr);
    }

    #[test]
    fn lengths_by_position() {
        let mtu = 1024;
        let l = |op, n| check_length(Opcode(op), n, mtu, None);
        assert_eq!(l(0x04, 0), Ok(()), "an empty ONLY");
        assert_eq!(l(0x04, 1024), Ok(()));
        assert_eq!(l(0x04, 1025), Err(Refusal::Length(LengthError::OnlyOverMtu)));
        assert_eq!(l(0x00, 1024), Ok(()));
        assert_eq!(l(0x00, 1000), Err(Refusal::Length(LengthError::NotMtu)));
        assert_eq!(l(0x07, 1028), Err(Refusal::Length(LengthError::NotMtu)));
        assert_eq!(l(0x02, 1), Ok(()));
        assert_eq!(l(0x08, 0), Err(Refusal::Length(LengthError::LastSize)));
        assert_eq!(l(0x03, 1025), Err(Refusal::Length(LengthError::LastSize)));
        assert_eq!(l(0x0c, 0), Ok(()), "a READ request carries no payload");
        let big = Reth { va: 0, rkey: 1, dma_len: MAX_DMA_LEN + 1 };
        assert_eq!(
            check_length(Opcode(0x0c), 0, mtu, Some(&big)),
            Err(Refusal::Length(LengthError::DmaLength))
        );
        let edge = Reth { dma_len: MAX_DMA_LEN, ..big };
        assert_eq!(check_length(Opcode(0x0c), 0, mtu, Some(&edge)), Ok(()));
    }

    #[test]
    fn rkeys_rights_bounds_and_residuals() {
        let k = key(3, ALL);
        let t = |va, resid| Target { rkey: 9, va, resid };
        let w = |t: &Target, key, pd, payload, pad| {
            check_rkey(Kind::Write, true, t, key, pd, payload, pad, 1024)
        };
        assert_eq!(w(&t(0x1000, 100), Some(&k), 3, 100, 0), Ok(()));
        assert_eq!(w(&t(0x1000, 100), None, 3, 100, 0), Err(Refusal::Rkey(RkeyError::Unknown)));
        assert_eq!(w(&t(0x1000, 100), Some(&k), 4, 100, 0), Err(Refusal::Rkey(RkeyError::Pd)));
        assert_eq!(w(&t(0x1f00, 0x200), Some(&k), 3, 0, 0), Err(Refusal::Rkey(RkeyError::Bounds)));
        assert_eq!(w(&t(0, 0), None, 3, 0, 0), Ok(()), "zero length: no key needed");
        let ro = key(3, Rights { remote_read: true, ..Rights::default() });
        assert_eq!(w(&t(0x1000, 8), Some(&ro), 3, 8, 0), Err(Refusal::Rkey(RkeyError::Rights)));
        // More than an MTU left: exactly an MTU, no pad; else exactly the rest and its pad.
        assert_eq!(w(&t(0x1000, 2000), Some(&k), 3, 1024, 0), Ok(()));
        assert_eq!(
            w(&t(0x1000, 2000), Some(&k), 3, 1000, 0),
            Err(Refusal::Length(LengthError::WriteResidual))
        );
        assert_eq!(w(&t(0x1000, 7), Some(&k), 3, 7, 1), Ok(()));
        assert_eq!(
            w(&t(0x1000, 7), Some(&k), 3, 7, 0),
            Err(Refusal::Length(LengthError::WriteResidual))
        );
        let a = |va| check_rkey(Kind::Atomic, true, &t(va, 8), Some(&k), 3, 0, 0, 1024);
        assert_eq!(a(0x1008), Ok(()));
        assert_eq!(a(0x1004), Err(Refusal::MisalignedAtomic));
        assert_eq!(
            Refusal::Rkey(RkeyError::Bounds).response(),
            Response::Nak { code: NakCode::RemoteAccess, fatal: true }
        );
        assert_eq!(check_rkey(Kind::Send, true, &t(0, 0), None, 3, 5, 3, 1024), Ok(()));
    }
}
