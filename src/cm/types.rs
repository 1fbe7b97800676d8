//! The CM's public types: configuration, connection parameters, handles, states, events
//! and counters.

use core::net::{IpAddr, SocketAddr};

use crate::addr::{Gid, Mac, QpNum};
use crate::error::{Errno, Error};

use super::cma::CMA_HDR_LEN;
use super::mad::RejReason;
use super::timing::*;
#[cfg(doc)]
use super::{Cm, MadPort};

/// A point in time, in microseconds from any fixed origin (a monotonic clock the application
/// reads; the CM only compares and adds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Micros(pub u64);

impl Micros {
    /// `ms` milliseconds later.
    pub const fn plus_ms(self, ms: u64) -> Micros {
        Micros(self.0.saturating_add(ms.saturating_mul(1000)))
    }
}

/// How the CM is set up. [`CmConfig::new`] gives rdma_cm's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmConfig {
    /// This CA's GUID, sent in every REQ and REP; must not be 0 (peers track connections by
    /// it and the QPN: `cm.c` `cm_insert_remote_id`, `cm_insert_remote_qpn`).
    pub ca_guid: u64,
    /// Seed of the communication IDs, transaction IDs and PSNs (see [`crate::psn`]).
    pub seed: u64,
    /// Physical port of QP1 and the data QPs.
    pub port: u8,
    /// Source GID index of every MAD and path.
    pub sgid_index: u8,
    /// CM response timeout sent in REQs ([`CMA_CM_RESPONSE_TIMEOUT`]).
    pub cm_response_timeout: u8,
    /// Retries of a REQ, REP or DREQ ([`CMA_MAX_CM_RETRIES`]).
    pub max_cm_retries: u8,
    /// Packet lifetime of the path ([`CMA_IBOE_PACKET_LIFETIME`]).
    pub packet_life_time: u8,
    /// This CA's ACK delay (`ib_device_attr.local_ca_ack_delay`): the REP's target ACK
    /// delay and an input of `cm_ack_timeout` (default 16).
    pub ack_delay: u8,
    /// IP hop limit of MADs and paths (64: the IPv4 default TTL).
    pub hop_limit: u8,
    /// Received MADs handled per [`Cm::poll`] (at least 1).
    pub budget: usize,
    /// Longest response timeout taken from a peer's REQ (`local_cm_response_timeout`, the
    /// wait of each REP try), as an exponent (4.096 µs × 2^t). Default 20 (4096 ms), the
    /// value rdma_cm sends ([`CMA_CM_RESPONSE_TIMEOUT`]): a peer asking for more gets its
    /// REP retries sooner, which costs it only duplicates.
    pub max_peer_response_timeout: u8,
    /// Longest service timeout taken from a peer's MRA, as an exponent. Default 24
    /// (65,536 ms), what rdma_cm's MRA asks ([`CMA_MRA_SERVICE_TIMEOUT`]).
    pub max_mra_service_timeout: u8,
    /// Most retries taken from a peer's REQ (`max_cm_retries`, for the REP). Default 15
    /// ([`CMA_MAX_CM_RETRIES`]; the field has four bits).
    pub max_peer_cm_retries: u8,
    /// Longest `av.timeout` a peer can set, as an exponent (4.096 µs × 2^t): it comes from
    /// the peer's ACK timeout (a REQ) or ACK delay (a REP), and it is the data QP's ACK
    /// timeout (each transport retry's wait), the timewait (`cm.c` waits
    /// `cm_convert_to_ms(av.timeout)`) and a term of an MRA's wait (`cm_mra_handler`).
    /// Default 19 (2048 ms): a RoCE path with rdma_cm's lifetime (16) and mlx5's ACK delay
    /// (16) has 17 or 18.
    pub max_ack_timeout: u8,
}

/// Why [`CmConfig::check`] refused a configuration: the field, and the value given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// The CA GUID is 0.
    CaGuidZero,
    /// The budget is 0: [`Cm::poll`] would never receive.
    BudgetZero,
    /// The port number is 0 (physical ports count from 1).
    PortZero,
    /// A timeout exponent wider than its wire field (5 bits: at most 31), or a packet
    /// lifetime over 30 (the path's ACK timeout, lifetime + 1, has 5 bits).
    Timeout {
        /// The field's name.
        field: &'static str,
        /// The value given.
        value: u8,
    },
    /// A retry count wider than its wire field (4 bits: at most 15).
    Retries {
        /// The field's name.
        field: &'static str,
        /// The value given.
        value: u8,
    },
}

impl ConfigError {
    /// The name of the field at fault, as [`Error::InvalidArgument`] carries it.
    pub fn field(&self) -> &'static str {
        match self {
            ConfigError::CaGuidZero => "CmConfig::ca_guid is 0",
            ConfigError::BudgetZero => "CmConfig::budget is 0",
            ConfigError::PortZero => "CmConfig::port is 0",
            ConfigError::Timeout { field, .. } | ConfigError::Retries { field, .. } => field,
        }
    }
}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Error {
        Error::InvalidArgument(e.field())
    }
}

impl CmConfig {
    /// rdma_cm's defaults for a CA with GUID `ca_guid`, seeded with `seed`.
    pub const fn new(ca_guid: u64, seed: u64) -> CmConfig {
        CmConfig {
            ca_guid,
            seed,
            port: 1,
            sgid_index: 0,
            cm_response_timeout: CMA_CM_RESPONSE_TIMEOUT,
            max_cm_retries: CMA_MAX_CM_RETRIES,
            packet_life_time: CMA_IBOE_PACKET_LIFETIME,
            ack_delay: 16,
            hop_limit: 64,
            budget: 16,
            max_peer_response_timeout: CMA_CM_RESPONSE_TIMEOUT,
            max_mra_service_timeout: CMA_MRA_SERVICE_TIMEOUT,
            max_peer_cm_retries: CMA_MAX_CM_RETRIES,
            max_ack_timeout: 19,
        }
    }

    /// Check every field against the wire field it goes into: timeout exponents fit 5 bits
    /// (the packet lifetime 30, as the ACK timeout is one more), retry counts 4 bits, the
    /// GUID, port and budget non-zero. [`Cm::new`] refuses what this refuses.
    pub const fn check(&self) -> Result<(), ConfigError> {
        if self.ca_guid == 0 {
            return Err(ConfigError::CaGuidZero);
        }
        if self.budget == 0 {
            return Err(ConfigError::BudgetZero);
        }
        if self.port == 0 {
            return Err(ConfigError::PortZero);
        }
        let timeouts: [(&'static str, u8, u8); 6] = [
            ("CmConfig::cm_response_timeout over 31", self.cm_response_timeout, 31),
            ("CmConfig::packet_life_time over 30", self.packet_life_time, 30),
            ("CmConfig::ack_delay over 31", self.ack_delay, 31),
            ("CmConfig::max_peer_response_timeout over 31", self.max_peer_response_timeout, 31),
            ("CmConfig::max_mra_service_timeout over 31", self.max_mra_service_timeout, 31),
            ("CmConfig::max_ack_timeout over 31", self.max_ack_timeout, 31),
        ];
        let mut i = 0;
        while i < timeouts.len() {
            let (field, value, max) = timeouts[i];
            if value > max {
                return Err(ConfigError::Timeout { field, value });
            }
            i += 1;
        }
        if self.max_cm_retries > 15 {
            let field = "CmConfig::max_cm_retries over 15";
            return Err(ConfigError::Retries { field, value: self.max_cm_retries });
        }
        if self.max_peer_cm_retries > 15 {
            let field = "CmConfig::max_peer_cm_retries over 15";
            return Err(ConfigError::Retries { field, value: self.max_peer_cm_retries });
        }
        Ok(())
    }
}

/// The QP parameters a connection negotiates (`struct rdma_conn_param`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpParams {
    /// RDMA READs and atomics the peer may have outstanding at our QP.
    pub responder_resources: u8,
    /// RDMA READs and atomics our QP may have outstanding at the peer.
    pub initiator_depth: u8,
    /// Transport retries (at most 7).
    pub retry_count: u8,
    /// RNR retries (at most 7; 7 is infinite).
    pub rnr_retry_count: u8,
    /// Path MTU, an `ib_mtu` (1 = 256 ... 5 = 4096): the active side proposes it.
    pub mtu: u8,
}

impl Default for QpParams {
    /// One outstanding READ each way, 7 retries, infinite RNR retries, MTU 1024 (what rping
    /// asks for on a 1500-byte Ethernet).
    fn default() -> Self {
        QpParams {
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            mtu: 3,
        }
    }
}

/// What [`Cm::connect`] needs: both ends' addresses, the peer's GID and MAC.
#[derive(Clone, Copy, Debug)]
pub struct ConnectParams<'a> {
    /// Our address and port (the port goes into the `cma_hdr`).
    pub local: SocketAddr,
    /// The peer's address and the port it listens on.
    pub remote: SocketAddr,
    /// Our GID (the IPv4-mapped one of `local` for RoCE v2 over IPv4).
    pub local_gid: Gid,
    /// The peer's GID.
    pub remote_gid: Gid,
    /// The peer's MAC (or next hop's).
    pub remote_mac: Mac,
    /// Private data after the `cma_hdr`: at most [`REQ_USER_DATA`] bytes.
    pub private_data: &'a [u8],
    /// QP parameters.
    pub qp: QpParams,
}

/// Bytes of user private data a REQ carries after the `cma_hdr` (92 − 36, as
/// `rdma_connect` allows).
pub const REQ_USER_DATA: usize = 92 - CMA_HDR_LEN;
/// Bytes of private data a REP carries (`IB_CM_REP_PRIVATE_DATA_SIZE`).
pub const REP_USER_DATA: usize = 196;
/// Bytes of private data a REJ carries (`IB_CM_REJ_PRIVATE_DATA_SIZE`).
pub const REJ_USER_DATA: usize = 148;

/// Listening ports at most.
pub const MAX_LISTENERS: usize = 8;

/// A connection: its slot and the slot's generation. A slot's generation only grows (64
/// bits, one step per connection the slot held), and a slot whose generation would wrap is
/// retired instead of reused, so a handle names one connection for ever: once that
/// connection is gone the handle is refused, whatever the peers do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConnId {
    pub(super) slot: u16,
    pub(super) gen: u64,
}

/// Where a connection is (`enum ib_cm_state`, the states an RC connection passes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnState {
    /// REQ sent, waiting for REP.
    ReqSent,
    /// REQ sent, the peer asked for more time (MRA).
    MraReqRcvd,
    /// REQ received, the application has not answered ([`Cm::accept`], [`Cm::reject`]).
    ReqRcvd,
    /// As `ReqRcvd`, and an MRA went out for a repeated REQ.
    MraReqSent,
    /// REP sent, waiting for RTU.
    RepSent,
    /// REP sent, the peer asked for more time.
    MraRepRcvd,
    /// Connected.
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// Disconnected, waiting out stray packets before the QP numbers may be reused.
    TimeWait,
}

/// What happened to a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A REQ arrived for a listening port: [`Cm::get_request`] tells what it asks.
    ConnectRequest,
    /// The connection is up; its QP is in RTS.
    Established,
    /// The peer rejected the connection (`ECONNREFUSED`).
    Rejected {
        /// The REJ's reason.
        reason: RejReason,
    },
    /// The peer never answered within the retries (`ETIMEDOUT`).
    Unreachable,
    /// A connection step failed here (moving the QP, sending); the connection is gone.
    ConnectError(Error),
    /// The connection is down (DREQ received, DREP received, or DREQ unanswered).
    Disconnected,
    /// Timewait is over: the handle is released.
    TimewaitExit,
}

impl EventKind {
    /// The errno librdmacm's synchronous calls report for this event (`ucma_complete`):
    /// `ECONNREFUSED` for a REJ, `ETIMEDOUT` for no answer; `None` for the others.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            EventKind::Rejected { .. } => Some(Errno::ECONNREFUSED),
            EventKind::Unreachable => Some(Errno::ETIMEDOUT),
            EventKind::ConnectError(e) => Some(e.errno()),
            _ => None,
        }
    }
}

/// An event: which connection and what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// The connection.
    pub id: ConnId,
    /// What happened.
    pub kind: EventKind,
}

/// Counters of what the CM received and sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmStats {
    /// Datagrams received.
    pub received: u64,
    /// Dropped as malformed: short, bad GRH, not a CM MAD, a REQ with a bad `cma_hdr`.
    pub malformed: u64,
    /// Well-formed but for no connection, or not for its state, or unsupported (SIDR, LAP).
    pub unexpected: u64,
    /// Duplicates (`cm.c`'s `CM_RECV_DUPLICATES` cases).
    pub duplicates: u64,
    /// MADs sent.
    pub sent: u64,
    /// Of which retransmissions after a timeout.
    pub retransmits: u64,
    /// Sends the port refused.
    pub send_errors: u64,
    /// REQs dropped because the table was full (the peer retries, as with `cm.c` out of
    /// memory).
    pub table_full: u64,
    /// Answers not sent because the peer's MAC is unknown.
    pub unresolved: u64,
    /// Receives the port failed ([`MadPort::recv_mad`] returned an error).
    pub port_errors: u64,
    /// Sends the port could not take yet ([`crate::Error::QueueFull`]): kept and sent on a
    /// later [`Cm::poll`] (or by the MAD's own retry timer).
    pub send_deferred: u64,
    /// MADs dropped because the port's queue was full and nothing could keep them: answers
    /// to MADs that match no connection, answers to a peer's retry (its next retry gets one
    /// again), the last word of a connection already freed, or what was still waiting when
    /// the connection's time ran out.
    pub send_dropped: u64,
    /// REQs and REPs that named an established connection's peer (CA GUID and QPN) from
    /// another GID: rejected, the connection left alone.
    pub spoofed: u64,
    /// SIDR requests refused with a SIDR_REP (UD service resolution is not supported).
    pub sidr_refused: u64,
    /// Slots retired because their generation reached its end.
    pub retired: u64,
    /// Peer-chosen timers and retry counts cut to the configured bounds.
    pub clamped: u64,
}

/// A connection request: what [`Cm::get_request`] shows.
#[derive(Clone, Copy, Debug)]
pub struct ConnRequest<'a> {
    /// The requester's address and port (from the `cma_hdr`).
    pub peer: SocketAddr,
    /// The address it connected to.
    pub local: IpAddr,
    /// The listening port.
    pub port: u16,
    /// The requester's GID.
    pub peer_gid: Gid,
    /// The requester's QPN.
    pub peer_qpn: QpNum,
    /// Private data after the `cma_hdr` (all [`REQ_USER_DATA`] bytes; the length is not
    /// carried).
    pub private_data: &'a [u8],
    /// READs the requester may have outstanding here: its initiator depth (the REQ's fields
    /// swapped, as `cm_format_req_event`).
    pub responder_resources: u8,
    /// READs we may have outstanding there: its responder resources.
    pub initiator_depth: u8,
}

/// What [`Cm::accept`] sends.
#[derive(Clone, Copy, Debug, Default)]
pub struct AcceptParams<'a> {
    /// Private data of the REP (at most [`REP_USER_DATA`] bytes).
    pub private_data: &'a [u8],
    /// READs the peer may have outstanding here (0: the request's).
    pub responder_resources: u8,
    /// READs we may have outstanding there (0: the request's).
    pub initiator_depth: u8,
}
