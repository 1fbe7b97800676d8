//! What the send ring keeps about each WQE slot, and the counts a push stamps into it.

use rdma_pmd::RegionUse;

/// What the driver keeps about the WQE starting at a slot, in one word written at every push:
/// `ds` in bits 0..6, "asked for a completion" in bit 6, "inline payload" in bit 13, "first
/// block of a WQE" in bit 14, then the push's [`Stamp`]: the blocks beyond the first of every
/// request committed before it in bits 16..32 (mod 2^16) and the signalled requests committed
/// before it in bits 48..64 (mod 2^16; bits 32..48 are unused). The other blocks of a WQE hold
/// [`Meta::INTERIOR`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Meta(u64);

impl Meta {
    const SIGNALED: u64 = 1 << 6;
    const INLINE: u64 = 1 << 13;
    const START: u64 = 1 << 14;
    /// The word of a block that is not the first of its WQE (nor, at first, of any).
    pub(super) const INTERIOR: Meta = Meta(0);

    #[inline(always)]
    pub(super) fn new(ds: u8, signaled: bool, stamp: Stamp) -> Meta {
        // `ds <= MAX_DS` (63): it fits its field.
        Meta((ds & 0x3f) as u64 | (signaled as u64) << 6 | Self::START | stamp.0)
    }

    /// Size in 16-byte units.
    #[inline(always)]
    pub(super) fn ds(self) -> u8 {
        (self.0 & 0x3f) as u8
    }

    /// Size in blocks, `ceil(ds / 4)` (as [`WqeShape::from_ds`](crate::datapath::wqe::WqeShape::from_ds)), worked out as
    /// `(ds - 1) / 4 + 1` in the 6 bits of the field: never zero, so that no walk over the ring
    /// can stand still (a `ds` of 0, which no push records, reads as 16 blocks).
    #[inline(always)]
    pub(super) fn wqebbs(self) -> u16 {
        (((self.0 as u16).wrapping_sub(1) & 0x3f) >> 2) + 1
    }

    #[inline(always)]
    pub(super) fn signaled(self) -> bool {
        self.0 & Self::SIGNALED != 0
    }

    /// The WQE carries its payload inline.
    #[inline(always)]
    pub(super) fn with_inline(self, inline: bool) -> Meta {
        Meta(self.0 | (inline as u64) << 13)
    }

    #[inline(always)]
    pub(super) fn inline(self) -> bool {
        self.0 & Self::INLINE != 0
    }

    /// Whether a WQE starts at this block.
    #[inline(always)]
    pub(super) fn is_start(self) -> bool {
        self.0 & Self::START != 0
    }

    /// Whether a WQE starts at this block with `sigs` signalled requests before it: one
    /// compare for the two tests of a CQE's common case.
    #[inline(always)]
    pub(super) fn starts_after(self, sigs: u16) -> bool {
        let mask = Self::START | (u16::MAX as u64) << Stamp::SIGS_SHIFT;
        self.0 & mask == Self::START | (sigs as u64) << Stamp::SIGS_SHIFT
    }

    /// The ordinal (requests committed before it, mod 2^16) of the request starting at
    /// counter `pi`: every block before it was the first of a request or one of the extra
    /// blocks counted in the stamp.
    #[inline(always)]
    pub(super) fn ord(self, pi: u16) -> u16 {
        pi.wrapping_sub(Stamp(self.0).extra())
    }

    /// Signalled requests committed before it, mod 2^16.
    #[inline(always)]
    pub(super) fn sigs_before(self) -> u16 {
        Stamp(self.0).sigs()
    }
}

/// The counts a push records in its [`Meta`]: the blocks beyond the first of the requests
/// before it (bits 16..32), from which its ordinal follows, and the signalled requests before
/// it (bits 48..64). A one-block request changes only the second, with one addition. A batch
/// holds at most `N <= 2^15` blocks, so the block count carries into the unused bits 32..48 at
/// most once per batch, and the signalled count's carry leaves the word;
/// [`SendRing::begin`](super::SendRing::begin) builds the stamp afresh from the ring's counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Stamp(u64);

impl Stamp {
    const EXTRA_SHIFT: u32 = 16;
    const SIGS_SHIFT: u32 = 48;

    #[inline(always)]
    pub(super) fn new(extra: u16, sigs: u16) -> Stamp {
        Stamp((extra as u64) << Self::EXTRA_SHIFT | (sigs as u64) << Self::SIGS_SHIFT)
    }

    /// Blocks beyond the first of each request before, mod 2^16.
    #[inline(always)]
    pub(super) fn extra(self) -> u16 {
        (self.0 >> Self::EXTRA_SHIFT) as u16
    }

    /// Signalled requests before, mod 2^16.
    #[inline(always)]
    pub(super) fn sigs(self) -> u16 {
        (self.0 >> Self::SIGS_SHIFT) as u16
    }

    /// Past one more request of `bbs` blocks, signalled or not.
    #[inline(always)]
    pub(super) fn advance(&mut self, signaled: bool, bbs: u16) {
        self.0 = self
            .0
            .wrapping_add(((bbs - 1) as u64) << Self::EXTRA_SHIFT)
            .wrapping_add((signaled as u64) << Self::SIGS_SHIFT);
    }
}

/// The key a run is told by: its region's address, 0 for requests that read none. The
/// [`RegionUse`] the push counted stands for its region, so that a push that extends the last
/// run needs no [`Released`](rdma_pmd::Released) reference at all.
#[inline(always)]
pub(super) fn run_key(r: Option<&RegionUse>) -> usize {
    r.map_or(0, |r| r as *const RegionUse as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datapath::wqe::WqeShape;

    #[test]
    fn a_slot_word_gives_the_blocks_of_every_size() {
        for ds in 0..=63u8 {
            let m = Meta::new(ds, ds % 2 == 0, Stamp::new(0xffff, 0xffff));
            let want = match ds {
                0 => 16,
                _ => WqeShape::from_ds(ds).wqebbs as u16,
            };
            assert_eq!(m.wqebbs(), want, "ds {ds}");
        }
    }
}
