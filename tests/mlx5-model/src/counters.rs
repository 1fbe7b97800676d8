//! What the model observed: counters, a log of every validation failure with its reason, and
//! asynchronous events. Tests read these to check that the driver did what it claims.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::codes::Syndrome;

/// Why the model refused or remarked on something the driver wrote.
///
/// Reasons marked *fatal* end the WQE with an error CQE (syndrome [`Reason::syndrome`]) and move
/// the QP to ERR, as the HCA does. The others are *notes*: hardware would carry on, so the model
/// does too, but a correct driver never triggers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Fatal: an opcode the QP's service does not execute (RC: WRITE 0x08, WRITE WITH IMM
    /// 0x09, SEND 0x0a, SEND WITH IMM 0x0b, READ 0x10, CAS 0x11, FAA 0x12; UD and GSI: SEND and
    /// SEND WITH IMM).
    UnsupportedOpcode {
        /// The opcode byte.
        opcode: u8,
    },
    /// Fatal: opmod must be 0 for RDMA operations.
    BadOpmod {
        /// The opmod byte.
        opmod: u8,
    },
    /// Fatal: the control segment's WQE index is not the send queue's counter.
    WrongWqeIndex {
        /// The counter the HCA was at.
        expected: u16,
        /// The index in the WQE.
        found: u16,
    },
    /// Fatal: the control segment names another QP.
    WrongQpn {
        /// This QP.
        expected: u32,
        /// The QPN in the WQE.
        found: u32,
    },
    /// Fatal: DS below 2 (control + remote address segments are mandatory for a write).
    DsTooSmall {
        /// The DS.
        ds: u8,
    },
    /// Fatal: the WQE is larger than `max_wqe_sz_sq` or than the send queue.
    WqeTooLarge {
        /// Bytes (DS × 16).
        bytes: u32,
    },
    /// Fatal: an inline segment's payload runs past DS.
    InlineOverrun {
        /// Inline length.
        len: u32,
        /// The WQE's DS.
        ds: u8,
    },
    /// Fatal: the WQE extends past the doorbell record's counter (the record was advanced by
    /// fewer WQEBBs than the WQE uses).
    WqePastDoorbellRecord {
        /// WQEBBs of the WQE.
        wqebbs: u32,
        /// WQEBBs the record still covered.
        covered: u32,
    },
    /// Fatal (syndrome 0x01): the gather list is longer than 2^31 bytes.
    MessageTooLong {
        /// Total length.
        len: u64,
    },
    /// Fatal (0x04): the lkey names no memory key.
    UnknownLkey {
        /// The lkey.
        lkey: u32,
    },
    /// Fatal (0x04): the lkey belongs to another protection domain.
    LkeyPdMismatch {
        /// The lkey.
        lkey: u32,
    },
    /// Fatal (0x04): the data segment is outside the lkey's range.
    LkeyOutOfBounds {
        /// The lkey.
        lkey: u32,
        /// Segment address.
        addr: u64,
        /// Segment length.
        len: u64,
    },
    /// Fatal: a bus address did not translate (IOMMU fault) while reading or writing data.
    DmaFault {
        /// The bus address.
        bus: u64,
        /// Bytes.
        len: u64,
    },
    /// Fatal (0x13): the rkey names no memory key on the target.
    UnknownRkey {
        /// The rkey.
        rkey: u32,
    },
    /// Fatal (0x13): the rkey's range did not translate on the target (IOMMU fault there).
    RemoteDmaFault {
        /// The bus address.
        bus: u64,
        /// Bytes.
        len: u64,
    },
    /// Fatal (0x14): the responder could not read its receive WQE (DMA fault).
    RecvWqeFault {
        /// The responder QP.
        qpn: u32,
    },
    /// Fatal (0x13): the rkey is in another PD than the target QP.
    RkeyPdMismatch {
        /// The rkey.
        rkey: u32,
    },
    /// Fatal (0x13): the rkey was not registered with REMOTE_WRITE.
    RkeyNoRemoteWrite {
        /// The rkey.
        rkey: u32,
    },
    /// Fatal (0x13): the target QP was not given REMOTE_WRITE in RST2INIT.
    QpNoRemoteWrite {
        /// The target QP.
        qpn: u32,
    },
    /// Fatal (0x13): the remote range is outside the rkey's range.
    RkeyOutOfBounds {
        /// The rkey.
        rkey: u32,
        /// Remote address.
        addr: u64,
        /// Length.
        len: u64,
    },
    /// Fatal (0x04): a READ or atomic result lands in a region registered without local
    /// write (`mkc.lw`).
    LkeyNoLocalWrite {
        /// The lkey.
        lkey: u32,
    },
    /// Fatal (0x02): an inline segment where the opcode scatters (READ, atomics).
    InlineNotAllowed {
        /// The opcode.
        opcode: u8,
    },
    /// Fatal (0x02): an atomic WQE without exactly one pointer segment for its result.
    AtomicSegments {
        /// Data segments found.
        count: u32,
    },
    /// Fatal (0x01): an atomic's result segment is not 8 bytes (`ibv_poll_cq(3)`: "an Atomic
    /// operation which its size is different than 8 bytes").
    AtomicLength {
        /// The segment's length.
        len: u64,
    },
    /// Fatal (0x01): a datagram longer than the path MTU of a UD QP.
    DatagramTooLong {
        /// Payload bytes.
        len: u64,
        /// The MTU.
        mtu: u32,
    },
    /// Fatal (0x02): the address vector names a source GID index outside the GID table.
    BadSgidIndex {
        /// The index (`grh_gid_fl` bits 27:20).
        index: u8,
    },
    /// Fatal (0x13): the rkey was not registered with REMOTE_READ.
    RkeyNoRemoteRead {
        /// The rkey.
        rkey: u32,
    },
    /// Fatal (0x13): the target QP was not given REMOTE_READ (`rre`) in RST2INIT.
    QpNoRemoteRead {
        /// The target QP.
        qpn: u32,
    },
    /// Fatal (0x13): the rkey was not registered with REMOTE_ATOMIC (`mkc.a`).
    RkeyNoRemoteAtomic {
        /// The rkey.
        rkey: u32,
    },
    /// Fatal (0x13): the target QP was not given remote atomics (`rae`) in RST2INIT.
    QpNoRemoteAtomic {
        /// The target QP.
        qpn: u32,
    },
    /// Fatal (0x12): an atomic's remote address is not 8-byte aligned; the responder NAKs
    /// "invalid request" and moves to ERR (rxe `check_rkey` → `RESPST_ERR_MISALIGNED_ATOMIC`,
    /// a class C error).
    AtomicMisaligned {
        /// The remote address.
        addr: u64,
    },
    /// Fatal (0x12 at the sender): the message is longer than the receive WQE's scatter list;
    /// the receive completes with `LOCAL_LENGTH_ERR` (rxe `RESPST_ERR_LENGTH`, class C).
    RecvTooShort {
        /// The receiving QP.
        qpn: u32,
        /// Bytes to place.
        len: u64,
        /// Bytes the scatter list holds.
        room: u64,
    },
    /// Fatal (0x14 at the sender): a receive scatter entry's lkey lacks local write; the
    /// receive completes with `LOCAL_PROT_ERR`.
    RecvNoLocalWrite {
        /// The receiving QP.
        qpn: u32,
        /// The lkey.
        lkey: u32,
    },
    /// Fatal (0x14 at the sender): a receive scatter entry's lkey is unknown, in another PD,
    /// exceeded, or does not translate; the receive completes with `LOCAL_PROT_ERR`.
    RecvBadLkey {
        /// The receiving QP.
        qpn: u32,
        /// The lkey.
        lkey: u32,
    },
    /// Fatal (0x14 at the sender): a receive scatter entry has bit 31 of its byte count set
    /// (receive WQEs have no inline data); the receive completes with `LOCAL_QP_OP_ERR`.
    RecvMalformed {
        /// The receiving QP.
        qpn: u32,
    },
    /// Fatal (0x15): the packet's transport (RC or UD) is not the target QP's: it is dropped
    /// silently, as rxe's `check_type_state` does.
    ServiceMismatch {
        /// The target QP.
        qpn: u32,
    },
    /// Note, datagram dropped: its Q_Key is not the receiving QP's.
    QkeyMismatch {
        /// The receiving QP.
        qpn: u32,
        /// The Q_Key the datagram carried.
        qkey: u32,
        /// The QP's Q_Key.
        expected: u32,
    },
    /// Note, datagram dropped: no receive WQE posted at the receiving QP (UD has no RNR).
    DatagramNoReceive {
        /// The receiving QP.
        qpn: u32,
    },
    /// Note, datagram dropped: no UD/GSI QP of that number in RTR or RTS on the port.
    DatagramNoQp {
        /// The destination QPN.
        qpn: u32,
    },
    /// Note, datagram dropped: the destination GID and MAC lead to no port.
    DatagramNoRoute,
    /// Fatal (0x15): the local ACK timer expired `retry_cnt` + 1 times (or sequence NAKs
    /// used the retries up) with no progress: the requests were never acknowledged.
    RetryExceeded {
        /// The remote QPN.
        qpn: u32,
    },
    /// Fatal (0x12): the responder answered NAK "invalid request".
    NakInvalidRequest {
        /// The NAK's PSN.
        psn: u32,
    },
    /// Fatal (0x13): the responder answered NAK "remote access error".
    NakRemoteAccess {
        /// The NAK's PSN.
        psn: u32,
    },
    /// Fatal (0x14): the responder answered NAK "remote operational error".
    NakRemoteOperational {
        /// The NAK's PSN.
        psn: u32,
    },
    /// Note at the responder: a request packet refused with an invalid request NAK (opcode
    /// sequence, length, no resources) and the QP moved to ERR.
    RequestRefused {
        /// The responder QP.
        qpn: u32,
        /// The packet's PSN.
        psn: u32,
        /// The check that failed.
        what: &'static str,
    },
    /// Fatal (0x16): no receive WQE at the responder and RNR retries ran out.
    RnrRetryExceeded {
        /// The responder QP.
        qpn: u32,
    },
    /// Note: the 8 doorbell bytes differ from the first 8 bytes of the WQE they name.
    DoorbellMismatch {
        /// WQE index the doorbell carried.
        index: u16,
    },
    /// Note: the doorbell's WQE is not the last one before the doorbell record.
    DoorbellNotLastWqe {
        /// WQE index the doorbell carried.
        index: u16,
    },
    /// Note: two successive doorbells on one UAR used the same BlueFlame half.
    DoorbellHalfRepeated {
        /// UAR index.
        uar: u32,
    },
    /// Note (doorbell dropped): rung on a UAR page that is not the QP's.
    DoorbellWrongUar {
        /// QP named.
        qpn: u32,
        /// UAR rung.
        uar: u32,
    },
    /// Note (doorbell dropped): the doorbell names no QP.
    DoorbellUnknownQp {
        /// QP named.
        qpn: u32,
    },
    /// Note (doorbell dropped): the QP is in RST, INIT or RTR.
    DoorbellQpNotReady {
        /// QP named.
        qpn: u32,
    },
    /// Note: the doorbell record did not move since the last doorbell.
    DoorbellNothingNew {
        /// QP.
        qpn: u32,
    },
    /// Note (doorbell dropped): the doorbell record moved backwards or by more than the ring.
    DoorbellRecordJump {
        /// Counter the HCA was at.
        from: u16,
        /// Counter in the record.
        to: u16,
    },
    /// Note: the doorbell record could not be read (DMA fault).
    DoorbellRecordFault {
        /// QP.
        qpn: u32,
    },
    /// Note: a BlueFlame copy whose DS is not in 2..=16 (treated as a plain doorbell).
    BlueFlameBadDs {
        /// DS in the copied control segment.
        ds: u8,
    },
    /// Note: BlueFlame blocks arrived out of order (dropped).
    BlueFlameOutOfOrder {
        /// Offset of the stray block in the UAR page.
        off: u32,
    },
    /// Note: the BlueFlame copy differs from the WQE in the ring.
    BlueFlameRingMismatch {
        /// WQE index.
        index: u16,
    },
    /// Note: reserved bits set (`what` names the field).
    Reserved {
        /// The field.
        what: &'static str,
    },
    /// Note: a CQ arm doorbell names no CQ, or a CQ on another UAR.
    CqArmBadCq {
        /// The CQN in the doorbell.
        cqn: u32,
    },
    /// A CQE could not be written: the CQ was full (or its memory faulted). The CQ is in error.
    CqOverflow {
        /// The CQ.
        cqn: u32,
    },
    /// Note: a store to a BAR offset that is no register.
    UnknownBarStore {
        /// Offset.
        off: u32,
        /// Width.
        len: u32,
    },
}

impl Reason {
    /// The error syndrome a fatal reason completes the WQE with; `None` for notes.
    pub fn syndrome(&self) -> Option<Syndrome> {
        use Reason::*;
        Some(match self {
            UnsupportedOpcode { .. }
            | BadOpmod { .. }
            | WrongWqeIndex { .. }
            | WrongQpn { .. }
            | DsTooSmall { .. }
            | WqeTooLarge { .. }
            | InlineOverrun { .. }
            | WqePastDoorbellRecord { .. }
            | InlineNotAllowed { .. }
            | AtomicSegments { .. }
            | BadSgidIndex { .. } => Syndrome::LocalQpOp,
            MessageTooLong { .. } | AtomicLength { .. } | DatagramTooLong { .. } => {
                Syndrome::LocalLength
            }
            UnknownLkey { .. }
            | LkeyPdMismatch { .. }
            | LkeyOutOfBounds { .. }
            | LkeyNoLocalWrite { .. } => Syndrome::LocalProt,
            DmaFault { .. } => Syndrome::LocalProt,
            UnknownRkey { .. }
            | RkeyPdMismatch { .. }
            | RkeyNoRemoteWrite { .. }
            | QpNoRemoteWrite { .. }
            | RkeyOutOfBounds { .. }
            | RemoteDmaFault { .. }
            | RkeyNoRemoteRead { .. }
            | QpNoRemoteRead { .. }
            | RkeyNoRemoteAtomic { .. }
            | QpNoRemoteAtomic { .. } => Syndrome::RemoteAccess,
            AtomicMisaligned { .. } | RecvTooShort { .. } => Syndrome::RemoteInvalReq,
            RecvWqeFault { .. }
            | RecvNoLocalWrite { .. }
            | RecvBadLkey { .. }
            | RecvMalformed { .. } => Syndrome::RemoteOp,
            ServiceMismatch { .. } | RetryExceeded { .. } => Syndrome::TransportRetryExc,
            NakInvalidRequest { .. } => Syndrome::RemoteInvalReq,
            NakRemoteAccess { .. } => Syndrome::RemoteAccess,
            NakRemoteOperational { .. } => Syndrome::RemoteOp,
            RnrRetryExceeded { .. } => Syndrome::RnrRetryExc,
            _ => return None,
        })
    }

    /// The syndrome of the receiver's `RESP_ERR` CQE when the reason is a fault of the
    /// receive WQE (the receive completes in error and the receiving QP moves to ERR).
    pub fn receiver_syndrome(&self) -> Option<Syndrome> {
        use Reason::*;
        Some(match self {
            RecvTooShort { .. } => Syndrome::LocalLength,
            RecvNoLocalWrite { .. } | RecvBadLkey { .. } => Syndrome::LocalProt,
            RecvMalformed { .. } => Syndrome::LocalQpOp,
            _ => return None,
        })
    }

    /// Whether the reason ends the WQE in error.
    pub fn is_fatal(&self) -> bool {
        self.syndrome().is_some()
    }

    /// The model's `vendor_err_synd` for an error CQE caused by this reason (a model-specific
    /// code, so a test can tell causes with the same syndrome apart).
    pub fn vendor_code(&self) -> u8 {
        use Reason::*;
        match self {
            UnsupportedOpcode { .. } => 0x01,
            BadOpmod { .. } => 0x02,
            WrongWqeIndex { .. } => 0x03,
            WrongQpn { .. } => 0x04,
            DsTooSmall { .. } => 0x05,
            WqeTooLarge { .. } => 0x06,
            InlineOverrun { .. } => 0x07,
            WqePastDoorbellRecord { .. } => 0x08,
            InlineNotAllowed { .. } => 0x09,
            AtomicSegments { .. } => 0x0a,
            BadSgidIndex { .. } => 0x0b,
            MessageTooLong { .. } => 0x10,
            AtomicLength { .. } => 0x11,
            DatagramTooLong { .. } => 0x12,
            UnknownLkey { .. } => 0x20,
            LkeyPdMismatch { .. } => 0x21,
            LkeyOutOfBounds { .. } => 0x22,
            LkeyNoLocalWrite { .. } => 0x23,
            DmaFault { .. } => 0x2f,
            UnknownRkey { .. } => 0x30,
            RkeyPdMismatch { .. } => 0x31,
            RkeyNoRemoteWrite { .. } => 0x32,
            QpNoRemoteWrite { .. } => 0x33,
            RkeyOutOfBounds { .. } => 0x34,
            RkeyNoRemoteRead { .. } => 0x35,
            QpNoRemoteRead { .. } => 0x36,
            RkeyNoRemoteAtomic { .. } => 0x37,
            QpNoRemoteAtomic { .. } => 0x39,
            AtomicMisaligned { .. } => 0x3a,
            RecvTooShort { .. } => 0x3b,
            RecvNoLocalWrite { .. } => 0x3c,
            RecvBadLkey { .. } => 0x3d,
            RecvMalformed { .. } => 0x3e,
            RemoteDmaFault { .. } => 0x3f,
            RecvWqeFault { .. } => 0x38,
            RetryExceeded { .. } => 0x40,
            NakInvalidRequest { .. } => 0x41,
            NakRemoteAccess { .. } => 0x42,
            NakRemoteOperational { .. } => 0x43,
            ServiceMismatch { .. } => 0x45,
            RnrRetryExceeded { .. } => 0x50,
            _ => 0,
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The Debug form names the reason and every field; that is what a test log needs.
        write!(f, "{self:?}")?;
        if let Some(s) = self.syndrome() {
            write!(f, " -> error CQE {s:?}")?;
        }
        Ok(())
    }
}

/// One entry of the validation log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The QP concerned (0 when none).
    pub qpn: u32,
    /// The WQE index concerned, if any.
    pub wqe_index: Option<u16>,
    /// What was wrong.
    pub reason: Reason,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "QP {:#x}", self.qpn)?;
        if let Some(i) = self.wqe_index {
            write!(f, " WQE {i}")?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// An asynchronous event, as the HCA would post on an event queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A CQE was written on an armed CQ (`MLX5_EVENT_TYPE_COMP`); the CQ is disarmed.
    Completion {
        /// The CQ.
        cqn: u32,
    },
    /// The CQ overflowed or its memory faulted (`MLX5_EVENT_TYPE_CQ_ERROR`); the CQ is in error.
    CqError {
        /// The CQ.
        cqn: u32,
    },
    /// A responder QP received an invalid request (a misaligned atomic) and moved to ERR
    /// (`MLX5_EVENT_TYPE_WQ_INVAL_REQ_ERROR`, `IBV_EVENT_QP_REQ_ERR`).
    QpRequestError {
        /// The QP.
        qpn: u32,
    },
    /// A responder QP saw a remote access violation and moved to ERR
    /// (`MLX5_EVENT_TYPE_WQ_ACCESS_ERROR`, `IBV_EVENT_QP_ACCESS_ERR`).
    QpAccessError {
        /// The QP.
        qpn: u32,
    },
}

/// A snapshot of the model's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// 8-byte doorbells received.
    pub doorbells: u64,
    /// Complete BlueFlame copies received.
    pub blueflame: u64,
    /// WQEs executed from a BlueFlame copy instead of the ring.
    pub wqes_from_blueflame: u64,
    /// CQ arm doorbells received.
    pub cq_arms: u64,
    /// Send WQEs executed successfully.
    pub wqes_executed: u64,
    /// Send WQEs completed in error (not counting flushes).
    pub wqes_failed: u64,
    /// Send and receive WQEs flushed.
    pub wqes_flushed: u64,
    /// Successful requester CQEs written.
    pub req_cqes: u64,
    /// Successful responder CQEs written.
    pub resp_cqes: u64,
    /// Error CQEs written (flushes included).
    pub error_cqes: u64,
    /// Error CQEs by syndrome.
    pub errors_by_syndrome: BTreeMap<u8, u64>,
    /// Payload bytes written into target memory.
    pub bytes_written: u64,
    /// Receive WQEs consumed.
    pub recv_consumed: u64,
    /// RNR NAKs this model sent as responder (no receive WQE for a SEND or WRITE WITH IMM).
    pub rnr_naks: u64,
    /// Bytes this model read from its memory for RDMA READ responses.
    pub bytes_read: u64,
    /// Atomic operations this model executed as responder.
    pub atomics: u64,
    /// Datagrams (UD, GSI) placed into a receive WQE.
    pub datagrams_delivered: u64,
    /// Datagrams dropped at this model (Q_Key mismatch, no receive WQE, no such QP, no port);
    /// the log says why.
    pub datagrams_dropped: u64,
    /// DMA (IOMMU) faults.
    pub dma_faults: u64,
    /// CQEs dropped because the CQ was full or in error.
    pub cq_overflows: u64,
    /// Entries in the validation log (fatal and notes).
    pub validation_failures: u64,
    /// Doorbells ignored (QP not in RTS, unknown QP, wrong UAR).
    pub ignored_doorbells: u64,
    /// RoCE frames built and sent (loopback included).
    pub frames_sent: u64,
    /// Frames received from the port or the loopback queue.
    pub frames_received: u64,
    /// Frames dropped before or at a QP (malformed ones too; the link's drop counters say why).
    pub frames_dropped: u64,
    /// Frames that were not IPv4/IPv6 (left for the Ethernet receive path).
    pub frames_non_roce: u64,
    /// Packets that could not be built (a model bug if ever non-zero).
    pub frames_unbuildable: u64,
    /// Frames the port refused (or no port to send on).
    pub frames_send_failed: u64,
    /// Receive calls the port failed.
    pub frames_recv_failed: u64,
    /// RoCE frames not for one of this port's GIDs.
    pub drop_not_ours: u64,
    /// RoCE frames for no QP that could take them (DestQP, transport, state).
    pub drop_no_qp: u64,
    /// RC frames whose IP addresses are not the QP's path.
    pub drop_address: u64,
    /// Frames with a P_Key other than 0xffff.
    pub drop_pkey: u64,
    /// Responses for no outstanding request.
    pub drop_unexpected: u64,
    /// Request packets sent again (go-back-N after a NAK, a timeout or an RNR wait).
    pub retransmits: u64,
    /// Local ACK timeouts.
    pub ack_timeouts: u64,
    /// NAKs this model sent as responder (sequence, invalid request, remote access, remote operational).
    pub naks_sent: u64,
    /// Duplicate request packets this model received as responder.
    pub duplicates: u64,
}

impl Counters {
    /// Error CQEs written with `s`.
    pub fn errors(&self, s: Syndrome) -> u64 {
        self.errors_by_syndrome.get(&u8::from(s)).copied().unwrap_or(0)
    }
}

/// Most log entries kept (the count keeps growing).
pub(crate) const LOG_CAP: usize = 4096;

/// The live counters.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub doorbells: AtomicU64,
    pub blueflame: AtomicU64,
    pub wqes_from_blueflame: AtomicU64,
    pub cq_arms: AtomicU64,
    pub wqes_executed: AtomicU64,
    pub wqes_failed: AtomicU64,
    pub wqes_flushed: AtomicU64,
    pub req_cqes: AtomicU64,
    pub resp_cqes: AtomicU64,
    pub error_cqes: AtomicU64,
    pub bytes_written: AtomicU64,
    pub recv_consumed: AtomicU64,
    pub rnr_naks: AtomicU64,
    pub bytes_read: AtomicU64,
    pub atomics: AtomicU64,
    pub datagrams_delivered: AtomicU64,
    pub datagrams_dropped: AtomicU64,
    pub dma_faults: AtomicU64,
    pub cq_overflows: AtomicU64,
    pub validation_failures: AtomicU64,
    pub ignored_doorbells: AtomicU64,
    pub frames_sent: AtomicU64,
    pub frames_received: AtomicU64,
    pub frames_dropped: AtomicU64,
    pub frames_non_roce: AtomicU64,
    pub frames_unbuildable: AtomicU64,
    pub frames_send_failed: AtomicU64,
    pub frames_recv_failed: AtomicU64,
    pub drop_not_ours: AtomicU64,
    pub drop_no_qp: AtomicU64,
    pub drop_address: AtomicU64,
    pub drop_pkey: AtomicU64,
    pub drop_unexpected: AtomicU64,
    pub retransmits: AtomicU64,
    pub ack_timeouts: AtomicU64,
    pub naks_sent: AtomicU64,
    pub duplicates: AtomicU64,
    pub by_syndrome: Mutex<BTreeMap<u8, u64>>,
    pub log: Mutex<Vec<Violation>>,
    pub events: Mutex<Vec<Event>>,
}

/// Add one.
pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Stats {
    pub fn violation(&self, qpn: u32, wqe_index: Option<u16>, reason: Reason) {
        bump(&self.validation_failures);
        if matches!(reason, Reason::DmaFault { .. } | Reason::RemoteDmaFault { .. }) {
            bump(&self.dma_faults);
        }
        let mut log = self.log.lock().expect("log poisoned");
        if log.len() < LOG_CAP {
            log.push(Violation { qpn, wqe_index, reason });
        }
    }

    pub fn error_cqe(&self, s: Syndrome) {
        bump(&self.error_cqes);
        *self.by_syndrome.lock().expect("stats poisoned").entry(u8::from(s)).or_default() += 1;
    }

    pub fn event(&self, e: Event) {
        let mut ev = self.events.lock().expect("events poisoned");
        if ev.len() < LOG_CAP {
            ev.push(e);
        }
    }

    pub fn snapshot(&self) -> Counters {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Counters {
            doorbells: g(&self.doorbells),
            blueflame: g(&self.blueflame),
            wqes_from_blueflame: g(&self.wqes_from_blueflame),
            cq_arms: g(&self.cq_arms),
            wqes_executed: g(&self.wqes_executed),
            wqes_failed: g(&self.wqes_failed),
            wqes_flushed: g(&self.wqes_flushed),
            req_cqes: g(&self.req_cqes),
            resp_cqes: g(&self.resp_cqes),
            error_cqes: g(&self.error_cqes),
            errors_by_syndrome: self.by_syndrome.lock().expect("stats poisoned").clone(),
            bytes_written: g(&self.bytes_written),
            recv_consumed: g(&self.recv_consumed),
            rnr_naks: g(&self.rnr_naks),
            bytes_read: g(&self.bytes_read),
            atomics: g(&self.atomics),
            datagrams_delivered: g(&self.datagrams_delivered),
            datagrams_dropped: g(&self.datagrams_dropped),
            dma_faults: g(&self.dma_faults),
            cq_overflows: g(&self.cq_overflows),
            validation_failures: g(&self.validation_failures),
            ignored_doorbells: g(&self.ignored_doorbells),
            frames_sent: g(&self.frames_sent),
            frames_received: g(&self.frames_received),
            frames_dropped: g(&self.frames_dropped),
            frames_non_roce: g(&self.frames_non_roce),
            frames_unbuildable: g(&self.frames_unbuildable),
            frames_send_failed: g(&self.frames_send_failed),
            frames_recv_failed: g(&self.frames_recv_failed),
            drop_not_ours: g(&self.drop_not_ours),
            drop_no_qp: g(&self.drop_no_qp),
            drop_address: g(&self.drop_address),
            drop_pkey: g(&self.drop_pkey),
            drop_unexpected: g(&self.drop_unexpected),
            retransmits: g(&self.retransmits),
            ack_timeouts: g(&self.ack_timeouts),
            naks_sent: g(&self.naks_sent),
            duplicates: g(&self.duplicates),
        }
    }
}
