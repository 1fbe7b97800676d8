//! Initial packet sequence numbers.
//!
//! A connection's first PSN should not be predictable: a stale or forged packet from an old
//! connection between the same QP numbers must not land inside the new one's window. The
//! kernel draws it from its random pool (`get_random_u32() & 0xffffff` in `cma.c` and
//! `cm.c`); a no_std driver has no such pool, so [`PsnGen`] mixes a seed the user supplies
//! (from a hardware RNG, a timestamp counter, a boot nonce) with a counter through a 64-bit
//! finaliser (SplitMix64's), keeping 24 bits. It is not a cryptographic generator: it is as
//! unpredictable as its seed.

/// A source of 24-bit initial PSNs. See the module docs.
#[derive(Clone, Debug)]
pub struct PsnGen {
    seed: u64,
    counter: u64,
}

/// The largest PSN (24 bits).
pub const PSN_MASK: u32 = 0xff_ffff;

impl PsnGen {
    /// A generator seeded with `seed`.
    pub const fn new(seed: u64) -> PsnGen {
        PsnGen { seed, counter: 0 }
    }

    /// The next initial PSN.
    pub fn next_psn(&mut self) -> u32 {
        self.counter = self.counter.wrapping_add(1);
        (mix(self.seed ^ self.counter.wrapping_mul(0x9e37_79b9_7f4a_7c15)) as u32) & PSN_MASK
    }
}

/// SplitMix64's finaliser: every input bit affects every output bit.
pub(crate) const fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psns_are_24_bit_spread_and_follow_their_seed() {
        let mut a = PsnGen::new(0x1234_5678_9abc_def0);
        let mut b = PsnGen::new(0x1234_5678_9abc_def0);
        let mut c = PsnGen::new(0x1234_5678_9abc_def1);
        let mut seen = [0u32; 64];
        for s in seen.iter_mut() {
            let p = a.next_psn();
            assert!(p <= PSN_MASK);
            assert_eq!(p, b.next_psn(), "the same seed gives the same sequence");
            *s = p;
        }
        // Distinct, and not a run of neighbours (a counter would be).
        for i in 0..seen.len() {
            for j in i + 1..seen.len() {
                assert_ne!(seen[i], seen[j]);
            }
        }
        let close = seen.windows(2).filter(|w| w[0].abs_diff(w[1]) < 0x1000).count();
        assert!(close < 2, "{close} consecutive PSNs within 4096 of each other");
        // A seed one bit apart gives another sequence; the high bits of the range are used.
        let other: [u32; 8] = core::array::from_fn(|_| c.next_psn());
        assert_ne!(&other[..], &seen[..8]);
        assert!(seen.iter().any(|p| p & 0x80_0000 != 0));
    }
}
