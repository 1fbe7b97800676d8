//! The requester's timers: the local ACK timeout and the RNR wait.
//!
//! The QP's local ACK timeout is 4.096 µs × 2^`timeout` (IBTA vol 1 §9.7.6.1.3, the
//! `timeout` of `ibv_modify_qp(3)`; 0 means infinite). The model bounds it to
//! [`ACK_TIMEOUT_MIN`, `ACK_TIMEOUT_MAX`] so that tests stay quick: with the usual 14
//! (67 ms) a lost packet costs [`ACK_TIMEOUT_MAX`] and a retry-exceeded test
//! (`retry_cnt` + 1 timeouts) under a second; the lower bound keeps a loaded test machine
//! (the engines are threads that may wait for a core) from firing retransmissions, and
//! using up `retry_cnt`, before an answer could be processed. Both are modelling choices,
//! not hardware values. The timers are only looked at once every frame that arrived has
//! been handled, so an answer already queued is never taken for a lost one.

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
