//! The UAR page as the driver uses it: where its BlueFlame (doorbell) register sits, how big
//! each half of that register is, and which of the page's registers must lie inside the BAR.
//! Both the data path (the send doorbell) and control (bring-up's EQ doorbell page, the
//! capability checks) read it from here.

/// Byte offset of the first BlueFlame (doorbell) register in a UAR page (`MLX5_BF_OFFSET`).
pub const BF_OFFSET: usize = 0x800;

/// `(1 << log_bf_reg_size) / 2`: one half of the BlueFlame register; 0 when the register size
/// is 0 or 1 byte (no BlueFlame) or too large to be real.
pub const fn bf_half(log_bf_reg_size: u8) -> usize {
    if log_bf_reg_size == 0 || log_bf_reg_size >= 16 {
        0
    } else {
        (1usize << log_bf_reg_size) / 2
    }
}

/// Whether every register of the UAR page at `bar_offset` that the driver touches lies inside
/// a BAR of `bar_size` bytes: the EQ doorbells at `0x40`/`0x48` and the CQ doorbell below the
/// BlueFlame registers, and the BlueFlame register (both halves) at [`BF_OFFSET`]. The one
/// check for every UAR, the data path's and bring-up's EQ doorbell page.
pub fn uar_in_bar(bar_size: usize, bar_offset: usize, log_bf_reg_size: u8) -> bool {
    let end = bar_offset
        .checked_add(BF_OFFSET)
        .and_then(|o| o.checked_add((2 * bf_half(log_bf_reg_size)).max(8)));
    matches!(end, Some(end) if end <= bar_size)
}
