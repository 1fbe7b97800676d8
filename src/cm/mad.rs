//! The MAD common header and the CM messages, as typed views over the 256 bytes of a MAD.
//!
//! Every layout is stated once, in a `cm_msg!` table whose rows are the
//! `CM_*` definitions of the kernel's `include/rdma/ibta_vol1_c12.h` (IBTA vol. 1 tables 106
//! to 113): byte offset after the MAD header, bit offset in `Byte[Bit]` notation, width. The
//! MAD header is `struct ib_mad_hdr` of `include/rdma/ib_mad.h`. All fields are big-endian.
//! A view is built with `new_checked`, which refuses a buffer shorter than [`MAD_LEN`]; after
//! that no accessor can fail or panic.

use super::field::{self, Field};
use crate::addr::Gid;

/// Bytes in a MAD (`IB_MGMT_MAD_SIZE`, `include/rdma/ib_mad.h`).
pub const MAD_LEN: usize = 256;
/// Bytes in the MAD common header (`IB_MGMT_MAD_HDR`), stated in [`field`], which measures
/// CM fields from the end of it.
pub use super::field::MAD_HDR_LEN;
/// Bytes of the global route header a UD receive carries before the MAD.
pub const GRH_LEN: usize = 40;
/// `IB_MGMT_BASE_VERSION`.
pub const BASE_VERSION: u8 = 1;
/// `IB_MGMT_CLASS_CM`: the communication management class.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// `IB_CM_CLASS_VERSION` (`drivers/infiniband/core/cm_msgs.h`: "IB specification 1.2").
pub const CM_CLASS_VERSION: u8 = 2;
/// `IB_MGMT_METHOD_SEND`: every CM message is sent with it (`cm.c` `cm_format_mad_hdr`).
pub const METHOD_SEND: u8 = 0x03;

crate::code_enum! {
    /// CM attribute IDs (`CM_*_ATTR_ID`, `include/rdma/ib_cm.h`).
    AttrId: u16 {
        /// Connection request.
        Req = 0x0010,
        /// Message receipt acknowledgement.
        Mra = 0x0011,
        /// Reject.
        Rej = 0x0012,
        /// Reply to a request.
        Rep = 0x0013,
        /// Ready to use.
        Rtu = 0x0014,
        /// Disconnection request.
        Dreq = 0x0015,
        /// Disconnection reply.
        Drep = 0x0016,
        /// Service ID resolution request (refused: UD service resolution is not supported).
        SidrReq = 0x0017,
        /// Service ID resolution reply (sent to refuse a SIDR_REQ).
        SidrRep = 0x0018,
        /// Load alternate path (not handled).
        Lap = 0x0019,
        /// Alternate path response (not handled).
        Apr = 0x001a,
    }
}

crate::code_enum! {
    /// What a REJ or MRA answers (`enum cm_msg_response`, `cm_msgs.h`).
    MsgResponse: u8 {
        /// The REQ.
        Req = 0,
        /// The REP.
        Rep = 1,
        /// Anything else (a LAP).
        Other = 2,
    }
}

crate::code_enum! {
    /// REJ reasons (`enum ib_cm_rej_reason`, `include/rdma/ib_cm.h`): those this CM sends or
    /// acts on are named; the rest are kept raw.
    RejReason: u16 {
        /// No QP available.
        NoQp = 1,
        /// No resources.
        NoResources = 3,
        /// The requester gave up (its ARI carries its CA GUID).
        Timeout = 4,
        /// Unsupported request.
        Unsupported = 5,
        /// Nobody listens on the service ID: what `cm_match_req` answers.
        InvalidServiceId = 8,
        /// Transport type not supported.
        InvalidTransportType = 9,
        /// The peer QP is still part of another connection (`cm_match_req`, `cm_rep_handler`).
        StaleConn = 10,
        /// The requester's GID cannot be reached.
        InvalidGid = 12,
        /// The application rejected (`rdma_reject`), or its CM failed the request.
        ConsumerDefined = 28,
    }
}

crate::code_enum! {
    /// SIDR_REP status (`enum ib_cm_sidr_status`, `include/rdma/ib_cm.h`).
    SidrStatus: u8 {
        /// The service was resolved.
        Success = 0,
        /// No such service: what `cm.c` `cm_sidr_req_handler` answers when nobody listens.
        Unsupported = 1,
        /// The service rejected the request.
        Reject = 2,
        /// No QP available.
        NoQp = 3,
        /// Redirect (the class port info says where).
        Redirect = 4,
        /// Unsupported class version.
        UnsupportedVersion = 5,
    }
}

/// Why a received MAD was refused before any connection looked at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MadError {
    /// Fewer bytes than a MAD (or than a GRH and a MAD).
    TooShort {
        /// Bytes received.
        len: usize,
    },
    /// The header is not a CM class-version-2 SEND (base version, class, version, method).
    NotCm {
        /// Base version, class, class version and method as received.
        hdr: [u8; 4],
    },
    /// An attribute this CM does not handle.
    Attr(AttrId),
    /// A GRH that is neither an IPv6 header nor the RoCE v2 IPv4 form.
    BadGrh,
}

/// Declare a typed view: its field table (the only statement of the layout), getters, `set_*`
/// setters and byte-array fields.
macro_rules! cm_msg {
    (
        $(#[$m:meta])* $name:ident, $ctor:path, $attr:expr, private: ($poff:expr, $plen:expr) {
            $( $(#[$fm:meta])* $get:ident / $set:ident : $t:ty = ($b:expr, $bit:expr, $w:expr); )*
        }
        bytes { $( $(#[$bm:meta])* $bget:ident / $bset:ident = ($bo:expr, $bl:expr); )* }
    ) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug)]
        pub struct $name<T> {
            buf: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// The attribute this message is sent with.
            pub const ATTR: Option<AttrId> = $attr;
            /// Offset of the private data from the start of the MAD.
            pub const PRIVATE_DATA_OFFSET: usize = MAD_HDR_LEN + $poff;
            /// Bytes of private data the message carries (`IB_CM_*_PRIVATE_DATA_SIZE`).
            pub const PRIVATE_DATA_LEN: usize = $plen;

            /// A view over `buf`, which must hold at least [`MAD_LEN`] bytes.
            pub fn new_checked(buf: T) -> Result<Self, MadError> {
                let len = buf.as_ref().len();
                if len < MAD_LEN {
                    return Err(MadError::TooShort { len });
                }
                Ok($name { buf })
            }

            /// The bytes viewed.
            pub fn into_inner(self) -> T {
                self.buf
            }

            /// The MAD header of the message.
            pub fn hdr(&self) -> MadHdr<&[u8]> {
                MadHdr { buf: self.buf.as_ref() }
            }

            /// The private data field (all of it: the length is not carried).
            pub fn private_data(&self) -> &[u8] {
                &self.buf.as_ref()[Self::PRIVATE_DATA_OFFSET..][..$plen]
            }

            $(
                $(#[$fm])*
                #[inline]
                pub fn $get(&self) -> $t {
                    field::get(self.buf.as_ref(), $ctor($b, $bit, $w)) as $t
                }
            )*

            $(
                $(#[$bm])*
                #[inline]
                pub fn $bget(&self) -> [u8; $bl] {
                    let mut out = [0u8; $bl];
                    out.copy_from_slice(&self.buf.as_ref()[MAD_HDR_LEN + $bo..][..$bl]);
                    out
                }
            )*
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            /// The MAD header, to write.
            pub fn hdr_mut(&mut self) -> MadHdr<&mut [u8]> {
                MadHdr { buf: self.buf.as_mut() }
            }

            /// Copy `data` to the start of the private data field and zero the rest; at most
            /// [`Self::PRIVATE_DATA_LEN`] bytes are taken.
            pub fn set_private_data(&mut self, data: &[u8]) {
                let pd = &mut self.buf.as_mut()[Self::PRIVATE_DATA_OFFSET..][..$plen];
                let n = data.len().min($plen);
                pd[..n].copy_from_slice(&data[..n]);
                pd[n..].fill(0);
            }

            $(
                #[doc = concat!("Set `", stringify!($get), "` (its low bits, as wide as the field).")]
                #[inline]
                pub fn $set(&mut self, v: $t) {
                    field::set(self.buf.as_mut(), $ctor($b, $bit, $w), v as u64)
                }
            )*

            $(
                #[doc = concat!("Set `", stringify!($bget), "`.")]
                #[inline]
                pub fn $bset(&mut self, v: &[u8; $bl]) {
                    self.buf.as_mut()[MAD_HDR_LEN + $bo..][..$bl].copy_from_slice(v);
                }
            )*
        }
    };
}

/// A field at a MAD offset (the header's).
const fn hdr_field(byte: usize, bit: u8, width: u8) -> Field {
    Field { byte, bit, width }
}

cm_msg! {
    /// The MAD common header (`struct ib_mad_hdr`, `include/rdma/ib_mad.h`). Its "private
    /// data" is the whole MAD after the header.
    MadHdr, hdr_field, None, private: (0, MAD_LEN - MAD_HDR_LEN) {
        /// `base_version`.
        base_version / set_base_version: u8 = (0, 0, 8);
        /// `mgmt_class`.
        mgmt_class / set_mgmt_class: u8 = (1, 0, 8);
        /// `class_version`.
        class_version / set_class_version: u8 = (2, 0, 8);
        /// `method`.
        method / set_method: u8 = (3, 0, 8);
        /// `status`.
        status / set_status: u16 = (4, 0, 16);
        /// `class_specific`.
        class_specific / set_class_specific: u16 = (6, 0, 16);
        /// `tid`: the transaction ID.
        tid / set_tid: u64 = (8, 0, 64);
        /// `attr_id`, raw (see [`MadHdr::attr`]).
        attr_id / set_attr_id: u16 = (16, 0, 16);
        /// `resv`.
        resv / set_resv: u16 = (18, 0, 16);
        /// `attr_mod`.
        attr_mod / set_attr_mod: u32 = (20, 0, 32);
    }
    bytes {}
}

impl<T: AsRef<[u8]>> MadHdr<T> {
    /// The attribute ID.
    pub fn attr(&self) -> AttrId {
        AttrId::from(self.attr_id())
    }

    /// Check that this is a CM MAD this CM speaks: base version 1, class CM, class version 2,
    /// method SEND (what `cm.c` `cm_format_mad_hdr` writes, and what the kernel's MAD agent
    /// for the CM class accepts).
    pub fn check_cm(&self) -> Result<AttrId, MadError> {
        let b = self.buf.as_ref();
        let hdr = [b[0], b[1], b[2], b[3]];
        if hdr != [BASE_VERSION, MGMT_CLASS_CM, CM_CLASS_VERSION, METHOD_SEND] {
            return Err(MadError::NotCm { hdr });
        }
        Ok(self.attr())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> MadHdr<T> {
    /// `cm_format_mad_hdr`: a CM SEND with `attr` and `tid`; status, class-specific, reserved
    /// and attribute modifier zero.
    pub fn emit_cm(&mut self, attr: AttrId, tid: u64) {
        self.buf.as_mut()[..MAD_HDR_LEN].fill(0);
        self.set_base_version(BASE_VERSION);
        self.set_mgmt_class(MGMT_CLASS_CM);
        self.set_class_version(CM_CLASS_VERSION);
        self.set_method(METHOD_SEND);
        self.set_attr_id(attr.raw());
        self.set_tid(tid);
    }
}

cm_msg! {
    /// REQ, IBTA table 106 (`CM_REQ_*`).
    Req, Field::cm, Some(AttrId::Req), private: (140, 92) {
        /// Local communication ID.
        local_comm_id / set_local_comm_id: u32 = (0, 0, 32);
        /// Service ID.
        service_id / set_service_id: u64 = (8, 0, 64);
        /// Local CA GUID.
        local_ca_guid / set_local_ca_guid: u64 = (16, 0, 64);
        /// Local Q_Key.
        local_qkey / set_local_qkey: u32 = (28, 0, 32);
        /// Local QPN.
        local_qpn / set_local_qpn: u32 = (32, 0, 24);
        /// Responder resources.
        responder_resources / set_responder_resources: u8 = (35, 0, 8);
        /// Local EECN.
        local_eecn / set_local_eecn: u32 = (36, 0, 24);
        /// Initiator depth.
        initiator_depth / set_initiator_depth: u8 = (39, 0, 8);
        /// Remote EECN.
        remote_eecn / set_remote_eecn: u32 = (40, 0, 24);
        /// Remote CM response timeout (4.096 µs × 2^t).
        remote_cm_response_timeout / set_remote_cm_response_timeout: u8 = (43, 0, 5);
        /// Transport service type (0 RC, 1 UC, 3 extended).
        transport_service_type / set_transport_service_type: u8 = (43, 5, 2);
        /// End-to-end flow control.
        end_to_end_flow_control / set_end_to_end_flow_control: u8 = (43, 7, 1);
        /// Starting PSN.
        starting_psn / set_starting_psn: u32 = (44, 0, 24);
        /// Local CM response timeout.
        local_cm_response_timeout / set_local_cm_response_timeout: u8 = (47, 0, 5);
        /// Retry count.
        retry_count / set_retry_count: u8 = (47, 5, 3);
        /// Partition key.
        partition_key / set_partition_key: u16 = (48, 0, 16);
        /// Path packet payload MTU (an `ib_mtu`: 1 = 256 ... 5 = 4096).
        path_mtu / set_path_mtu: u8 = (50, 0, 4);
        /// RDC exists.
        rdc_exists / set_rdc_exists: u8 = (50, 4, 1);
        /// RNR retry count.
        rnr_retry_count / set_rnr_retry_count: u8 = (50, 5, 3);
        /// Max CM retries.
        max_cm_retries / set_max_cm_retries: u8 = (51, 0, 4);
        /// SRQ.
        srq / set_srq: u8 = (51, 4, 1);
        /// Extended transport type.
        extended_transport_type / set_extended_transport_type: u8 = (51, 5, 3);
        /// Primary local port LID.
        primary_local_lid / set_primary_local_lid: u16 = (52, 0, 16);
        /// Primary remote port LID.
        primary_remote_lid / set_primary_remote_lid: u16 = (54, 0, 16);
        /// Primary flow label.
        primary_flow_label / set_primary_flow_label: u32 = (88, 0, 20);
        /// Primary packet rate.
        primary_packet_rate / set_primary_packet_rate: u8 = (91, 2, 6);
        /// Primary traffic class.
        primary_traffic_class / set_primary_traffic_class: u8 = (92, 0, 8);
        /// Primary hop limit.
        primary_hop_limit / set_primary_hop_limit: u8 = (93, 0, 8);
        /// Primary SL.
        primary_sl / set_primary_sl: u8 = (94, 0, 4);
        /// Primary subnet local.
        primary_subnet_local / set_primary_subnet_local: u8 = (94, 4, 1);
        /// Primary local ACK timeout.
        primary_local_ack_timeout / set_primary_local_ack_timeout: u8 = (95, 0, 5);
        /// Alternate local port LID.
        alternate_local_lid / set_alternate_local_lid: u16 = (96, 0, 16);
        /// Alternate remote port LID.
        alternate_remote_lid / set_alternate_remote_lid: u16 = (98, 0, 16);
        /// Alternate flow label.
        alternate_flow_label / set_alternate_flow_label: u32 = (132, 0, 20);
        /// Alternate packet rate.
        alternate_packet_rate / set_alternate_packet_rate: u8 = (135, 2, 6);
        /// Alternate traffic class.
        alternate_traffic_class / set_alternate_traffic_class: u8 = (136, 0, 8);
        /// Alternate hop limit.
        alternate_hop_limit / set_alternate_hop_limit: u8 = (137, 0, 8);
        /// Alternate SL.
        alternate_sl / set_alternate_sl: u8 = (138, 0, 4);
        /// Alternate subnet local.
        alternate_subnet_local / set_alternate_subnet_local: u8 = (138, 4, 1);
        /// Alternate local ACK timeout.
        alternate_local_ack_timeout / set_alternate_local_ack_timeout: u8 = (139, 0, 5);
        /// SAP supported.
        sap_supported / set_sap_supported: u8 = (139, 5, 1);
    }
    bytes {
        /// Primary local port GID (the requester's).
        primary_local_gid / set_primary_local_gid = (56, 16);
        /// Primary remote port GID (the responder's).
        primary_remote_gid / set_primary_remote_gid = (72, 16);
        /// Alternate local port GID.
        alternate_local_gid / set_alternate_local_gid = (100, 16);
        /// Alternate remote port GID.
        alternate_remote_gid / set_alternate_remote_gid = (116, 16);
    }
}

cm_msg! {
    /// MRA, IBTA table 107 (`CM_MRA_*`).
    Mra, Field::cm, Some(AttrId::Mra), private: (10, 222) {
        /// Local communication ID.
        local_comm_id / set_local_comm_id: u32 = (0, 0, 32);
        /// Remote communication ID.
        remote_comm_id / set_remote_comm_id: u32 = (4, 0, 32);
        /// Which message is acknowledged ([`MsgResponse`]).
        message_mraed / set_message_mraed: u8 = (8, 0, 2);
        /// Service timeout (4.096 µs × 2^t).
        service_timeout / set_service_timeout: u8 = (9, 0, 5);
    }
    bytes {}
}

cm_msg! {
    /// REJ, IBTA table 108 (`CM_REJ_*`).
    Rej, Field::cm, Some(AttrId::Rej), private: (84, 148) {
        /// Local communication ID.
        local_comm_id / set_local_comm_id: u32 = (0, 0, 32);
        /// Remote communication ID.
        remote_comm_id / set_remote_comm_id: u32 = (4, 0, 32);
        /// Which message is rejected ([`MsgResponse`]).
        message_rejected / set_message_rejected: u8 = (8, 0, 2);
        /// Bytes of additional rejection information.
        rejected_info_length / set_rejected_info_length: u8 = (9, 0, 7);
        /// Reason ([`RejReason`]).
        reason / set_reason: u16 = (10, 0, 16);
    }
    bytes {
        /// Additional rejection information.
        ari / set_ari = (12, 72);
    }
}

cm_msg! {
    /// REP, IBTA table 110 (`CM_REP_*`).
    Rep, Field::cm, Some(AttrId::Rep), private: (36, 196) {
        /// Local communication ID.
        local_comm_id / set_local_comm_id: u32 = (0, 0, 32);
        /// Remote communication ID.
        remote_comm_id / set_remote_comm_id: u32 = (4, 0, 32);
        /// Local Q_Key.
        local_qkey / set_local_qkey: u32 = (8, 0, 32);
        /// Local QPN.
        local_qpn / set_local_qpn: u32 = (12, 0, 24);
        /// Local EE context number.
        local_eecn / set_local_eecn: u32 = (16, 0, 24);
        /// Starting PSN.
        starting_psn / set_starting_psn: u32 = (20, 0, 24);
        /// Responder resources.
        responder_resources / set_responder_resources: u8 = (24, 0, 8);
        /// Initiator depth.
        initiator_depth / set_initiator_depth: u8 = (25, 0, 8);
        /// Target ACK delay.
        target_ack_delay / set_target_ack_delay: u8 = (26, 0, 5);
        /// Failover accepted.
        failover_accepted / set_failover_accepted: u8 = (26, 5, 2);
        /// End-to-end flow control.
        end_to_end_flow_control / set_end_to_end_flow_control: u8 = (26, 7, 1);
        /// RNR retry count.
        rnr_retry_count / set_rnr_retry_count: u8 = (27, 0, 3);
        /// SRQ.
        srq / set_srq: u8 = (27, 3, 1);
        /// Local CA GUID (only 4-byte aligned).
        local_ca_guid / set_local_ca_guid: u64 = (28, 0, 64);
    }
    bytes {}
}

cm_msg! {
    /// RTU, IBTA table 111 (`CM_RTU_*`).
    Rtu, Field::cm, Some(AttrId::Rtu), private: (8, 224) {
        /// Local communication ID.
        local_comm_id / set_local_comm_id: u32 = (0, 0, 32);
        /// Remote communication ID.
        remote_comm_id / set_remote_comm_id: u32 = (4, 0, 32);
    }
    bytes {}
}

cm_msg! {
    /// DREQ, IBTA table 112 (`CM_DREQ_*`).
    Dreq, Field::cm, Some(AttrId::Dreq), private: (12, 220) {
        /// Local communication ID.
        local_comm_id / set_local_comm_id: u32 = (0, 0, 32);
        /// Remote communication ID.
        remote_comm_id / set_remote_comm_id: u32 = (4, 0, 32);
        /// The receiver's QPN (or EECN).
        remote_qpn_eecn / set_remote_qpn_eecn: u32 = (8, 0, 24);
    }
    bytes {}
}

cm_msg! {
    /// DREP, IBTA table 113 (`CM_DREP_*`).
    Drep, Field::cm, Some(AttrId::Drep), private: (8, 224) {
        /// Local communication ID.
        local_comm_id / set_local_comm_id: u32 = (0, 0, 32);
        /// Remote communication ID.
        remote_comm_id / set_remote_comm_id: u32 = (4, 0, 32);
    }
    bytes {}
}

impl<T: AsRef<[u8]>> Req<T> {
    /// The requester's GID.
    pub fn local_gid(&self) -> Gid {
        Gid(self.primary_local_gid())
    }
    /// The responder's GID, as the requester addressed it.
    pub fn remote_gid(&self) -> Gid {
        Gid(self.primary_remote_gid())
    }
}

/// The source GID of a received datagram, from the 40 bytes before its MAD: an IPv6 header
/// (its source address), or for RoCE v2 over IPv4 20 unused bytes then the IPv4 header (its
/// source address, as an IPv4-mapped GID): how `ib_init_ah_attr_from_wc` reads the GRH
/// (`rdma_read_gid_hdr_type`, `ib_get_gids_from_rdma_hdr`, `drivers/infiniband/core/verbs.c`).
pub fn grh_source(grh: &[u8]) -> Result<Gid, MadError> {
    if grh.len() < GRH_LEN {
        return Err(MadError::TooShort { len: grh.len() });
    }
    if grh[20] >> 4 == 4 && grh[..20].iter().all(|&b| b == 0) {
        return Ok(Gid::from_ipv4([grh[32], grh[33], grh[34], grh[35]]));
    }
    if grh[0] >> 4 == 6 {
        let mut g = [0u8; 16];
        g.copy_from_slice(&grh[8..24]);
        return Ok(Gid(g));
    }
    Err(MadError::BadGrh)
}

cm_msg! {
    /// SIDR_REQ, IBTA table 119 (`CM_SIDR_REQ_*`).
    SidrReq, Field::cm, Some(AttrId::SidrReq), private: (16, 216) {
        /// Request ID.
        request_id / set_request_id: u32 = (0, 0, 32);
        /// Partition key.
        partition_key / set_partition_key: u16 = (4, 0, 16);
        /// Service ID.
        service_id / set_service_id: u64 = (8, 0, 64);
    }
    bytes {}
}

cm_msg! {
    /// SIDR_REP, IBTA table 120 (`CM_SIDR_REP_*`).
    SidrRep, Field::cm, Some(AttrId::SidrRep), private: (96, 136) {
        /// Request ID (the SIDR_REQ's).
        request_id / set_request_id: u32 = (0, 0, 32);
        /// Status ([`SidrStatus`]).
        status / set_status: u8 = (4, 0, 8);
        /// Bytes of additional information.
        additional_information_length / set_additional_information_length: u8 = (5, 0, 8);
        /// The UD QPN of the service.
        qpn / set_qpn: u32 = (8, 0, 24);
        /// Service ID.
        service_id / set_service_id: u64 = (12, 0, 64);
        /// Q_Key of the service's QP.
        q_key / set_q_key: u32 = (20, 0, 32);
    }
    bytes {
        /// Additional information (class port info for a redirect).
        additional_information / set_additional_information = (24, 72);
    }
}
