//! Doorbell values: what the data path stores after writing WQEs, and after consuming CQEs.
//!
//! The order is rdma-core's `providers/mlx5/qp.c` `post_send_db`:
//!
//! 1. WQEs in the send ring;
//! 2. `udma_to_device_barrier()` (the ring stores before the doorbell record);
//! 3. `dbrec[SND_DBR] = htobe32(cur_post & 0xffff)` ([`sq_dbrec`]);
//! 4. either a BlueFlame copy of [`bf_len`] bytes of the last WQE, in 64-byte chunks, or one
//!    64-bit store of the last WQE's first 8 bytes ([`crate::datapath::wqe::WqeInfo::doorbell`]) to the
//!    UAR;
//! 5. `mmio_flush_writes()`; then the BlueFlame offset alternates between the two halves of
//!    the register (`bf->offset ^= bf->buf_size`).
//!
//! The CQ side (`cq.c` `update_cons_index`) stores [`cq_ci_dbrec`] at `dbrec[CQ_SET_CI]`.

use crate::layout::codes::{SEND_WQE_BB, SEND_WQE_DS};

/// Index (in 32-bit words) of the receive queue's doorbell record (`MLX5_RCV_DBR`).
pub const RCV_DBR: usize = 0;
/// Index (in 32-bit words) of the send queue's doorbell record (`MLX5_SND_DBR`): byte offset 4
/// of `mlx5dv_qp.dbrec`.
pub const SND_DBR: usize = 1;
/// Index of a CQ's consumer-index doorbell record (`MLX5_CQ_SET_CI`).
pub const CQ_SET_CI: usize = 0;
/// Index of a CQ's arm doorbell record (`MLX5_CQ_ARM_DB`).
pub const CQ_ARM_DB: usize = 1;

/// The 4 bytes (memory order) to store at `dbrec[SND_DBR]` once the WQE counter is `pi`:
/// `htobe32(pi & 0xffff)`.
#[inline]
pub const fn sq_dbrec(pi: u16) -> [u8; 4] {
    (pi as u32).to_be_bytes()
}

/// The 4 bytes (memory order) to store at `dbrec[CQ_SET_CI]` once the consumer index is `ci`:
/// `htobe32(ci & 0xffffff)`.
#[inline]
pub const fn cq_ci_dbrec(ci: u32) -> [u8; 4] {
    (ci & 0x00ff_ffff).to_be_bytes()
}

/// How many bytes of the last WQE to copy to the BlueFlame register, or 0 for the plain
/// 8-byte doorbell.
///
/// `nreq` is the number of WQEs rung by this doorbell, `ds` the last WQE's size, `bf_size` the
/// size of one half of the BlueFlame register (`mlx5dv_qp.bf.size`; 0 when the QP has none).
/// rdma-core uses BlueFlame only for a single WQE with `1 < ds <= bf_size / 16`, and then
/// copies `align(ds * 16, 64)` bytes.
#[inline]
pub const fn bf_len(nreq: u32, ds: u8, bf_size: u32) -> usize {
    let bytes = ds as usize * SEND_WQE_DS;
    if nreq == 1 && ds > 1 && bytes <= bf_size as usize {
        bytes.next_multiple_of(SEND_WQE_BB)
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_follow_the_provider() {
        assert_eq!(sq_dbrec(1), [0, 0, 0, 1]);
        assert_eq!(sq_dbrec(0xffff), [0, 0, 0xff, 0xff]);
        assert_eq!(cq_ci_dbrec(0x0123_4567), [0, 0x23, 0x45, 0x67]);
        assert_eq!(bf_len(1, 3, 256), 64);
        assert_eq!(bf_len(1, 5, 256), 128);
        assert_eq!(bf_len(1, 16, 256), 256);
        assert_eq!(bf_len(1, 17, 256), 0);
        assert_eq!(bf_len(1, 1, 256), 0);
        assert_eq!(bf_len(2, 3, 256), 0);
        assert_eq!(bf_len(1, 3, 0), 0);
    }
}
