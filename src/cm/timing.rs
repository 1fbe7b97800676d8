//! CM timeouts and the defaults rdma_cm uses, each from the kernel function that sets it.

/// `CMA_CM_RESPONSE_TIMEOUT` (`cma.c`): the CM response timeout rdma_cm puts in both of a
/// REQ's timeout fields (`cma_connect_ib`), 4.096 µs × 2^20 ≈ 4.3 s. (A later kernel patch
/// lowers it to 18; the value used is [`super::CmConfig::cm_response_timeout`].)
pub const CMA_CM_RESPONSE_TIMEOUT: u8 = 20;
/// `CMA_MAX_CM_RETRIES` (`cma.c`): how often a REQ, REP or DREQ is sent again.
pub const CMA_MAX_CM_RETRIES: u8 = 15;
/// `CMA_IBOE_PACKET_LIFETIME` (`cma.c`): the packet lifetime of a RoCE path
/// (`cma_resolve_iboe_route`). It was 18 until the patch "RDMA/cma: change the
/// CMA_IBOE_PACKET_LIFETIME to 16"; current kernels have 16.
pub const CMA_IBOE_PACKET_LIFETIME: u8 = 16;
/// The service timeout of the MRA rdma_cm sends for a REQ its user has not answered yet:
/// `CMA_CM_MRA_SETTING` is `IB_CM_MRA_FLAG_DELAY | 24` (`cma.c` `cma_req_handler`), so the
/// MRA goes out only when the REQ comes again (`cm.c` `cm_dup_req_handler`).
pub const CMA_MRA_SERVICE_TIMEOUT: u8 = 24;
/// `IB_LID_PERMISSIVE`: the LIDs of a routed (RoCE) path in a REQ (`cm.c` `cm_format_req`).
pub const LID_PERMISSIVE: u16 = 0xffff;

/// `cm_convert_to_ms` (`cm.c`): 4.096 µs × 2^t, approximated as 2^(t − 8) ms.
///
/// Total: every timeout field on the wire has 5 bits, so `t` above 31 is read as 31
/// (2^23 ms), never shifted out of range.
pub const fn convert_to_ms(t: u8) -> u64 {
    let t = if t > MAX_TIMEOUT { MAX_TIMEOUT } else { t };
    1u64 << t.saturating_sub(8)
}

/// The largest timeout exponent a CM field carries (5 bits).
pub const MAX_TIMEOUT: u8 = 31;

/// `cm_ack_timeout` (`cm.c`): the local ACK timeout for a path of `packet_life_time`
/// through a CA whose ACK delay is `ca_ack_delay` (4.096 µs × 2^t each), 2 × lifetime +
/// delay rounded to a power of two, at most 31.
pub const fn ack_timeout(ca_ack_delay: u8, packet_life_time: u8) -> u8 {
    let d = ca_ack_delay as i32;
    let mut t = packet_life_time as i32 + 1;
    if t >= d {
        t += (d >= t - 1) as i32;
    } else {
        t = d + (t >= d - 1) as i32;
    }
    if t > 31 {
        31
    } else {
        t as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_convert_as_cm_c_does() {
        assert_eq!(convert_to_ms(0), 1);
        assert_eq!(convert_to_ms(8), 1);
        assert_eq!(convert_to_ms(20), 4096);
        assert_eq!(convert_to_ms(24), 65536);
        // Total: beyond the 5-bit field it saturates instead of overflowing the shift.
        assert_eq!(convert_to_ms(31), 1 << 23);
        for t in 32..=u8::MAX {
            assert_eq!(convert_to_ms(t), 1 << 23, "t = {t}");
        }
        // cm_ack_timeout: the larger of delay and lifetime + 1, one more when within 50 %.
        assert_eq!(ack_timeout(15, 16), 17);
        assert_eq!(ack_timeout(16, 16), 18);
        assert_eq!(ack_timeout(20, 16), 20);
        assert_eq!(ack_timeout(18, 16), 19);
        assert_eq!(ack_timeout(0, 31), 31);
    }
}
