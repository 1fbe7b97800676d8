//! The requester's timers: the local ACK timeout and the RNR wait.
//!
//! The QP's local ACK timeout is 4.096 µs × 2^`timeout` (IBTA vol 1 §9.7.6.1.3, the
//! `timeout` of `ibv_modify_qp(3)`; 0 means infinite); rxe (`rxe_qp.c`, its retransmit
//! timer's `qp_timeout_jiffies`, none for 0) and the hardware do not bound it. The model
//! bounds it to [`ACK_TIMEOUT_MIN`, `ACK_TIMEOUT_MAX`]; both are modelling choices, not
//! hardware values.
//!
//! * Up to `timeout` 14 (67.1 ms, the usual value of verbs programs and of the tests' QPs)
//!   the model waits the full value; only 1 to 11 (below 10 ms) are raised to the floor,
//!   which keeps a loaded test machine (the engines are threads that may wait for a core)
//!   from firing retransmissions, and using up `retry_cnt`, before an answer could be
//!   processed.
//! * The ceiling, 100 ms, applies to `timeout` 15 and above and to 0. It stays because the
//!   QPs the CM connects do not use 14: their timeout is the path's packet lifetime + 1,
//!   or `cm_ack_timeout` of the peer's ACK delay and that lifetime
//!   ([`rdma_pmd::cm::timing`]; the kernel's `CMA_IBOE_PACKET_LIFETIME` is 16), that is 17
//!   to 20 (0.54 to 4.3 s). Unbounded, every frame lost in a CM-connected test would cost
//!   that long and a retry-exceeded one (`retry_cnt` 7: eight timeouts) 4.3 to 34 s, past
//!   the tests' 30 s bounded waits; with the ceiling it costs at most 0.8 s. And `timeout`
//!   0 ("infinite") would leave a test whose peer vanished waiting forever instead of
//!   ending in 0x15. The ceiling was 40 ms when the packet transport came in (c9cf8ee),
//!   which cut 14 to 40 ms; 9ab5e37 raised it to 100 ms so that 14 is no longer cut.
//!
//! The timers are only looked at once every frame that arrived has been handled, so an
//! answer already queued is never taken for a lost one.

use std::time::Duration;

/// The shortest local ACK timeout the model waits.
pub const ACK_TIMEOUT_MIN: Duration = Duration::from_millis(10);
/// The longest local ACK timeout the model waits (also for `timeout` = 0, "infinite").
pub const ACK_TIMEOUT_MAX: Duration = Duration::from_millis(100);
/// The model's RNR wait (the responder's `min_rnr_timer` is not modelled).
pub const RNR_DELAY: Duration = Duration::from_millis(1);

/// The local ACK timeout for the QP field `timeout` (5 bits), bounded as the module says.
pub fn ack_timeout(timeout: u8) -> Duration {
    if timeout == 0 {
        return ACK_TIMEOUT_MAX;
    }
    let ns = 4096u64.checked_shl(u32::from(timeout.min(31))).unwrap_or(u64::MAX);
    Duration::from_nanos(ns).clamp(ACK_TIMEOUT_MIN, ACK_TIMEOUT_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_4_096_us_times_a_power_of_two_bounded() {
        assert_eq!(ack_timeout(0), ACK_TIMEOUT_MAX);
        assert_eq!(ack_timeout(1), ACK_TIMEOUT_MIN, "8.192 µs is below the floor");
        assert_eq!(ack_timeout(12), Duration::from_nanos(4096 << 12), "16.8 ms is in range");
        assert_eq!(ack_timeout(14), Duration::from_nanos(4096 << 14), "67.1 ms is in range");
        assert_eq!(ack_timeout(15), ACK_TIMEOUT_MAX);
        assert_eq!(ack_timeout(31), ACK_TIMEOUT_MAX);
    }
}
