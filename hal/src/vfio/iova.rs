//! Choosing IOVAs: a pure allocator over the address ranges a device may use.
//!
//! Two limits apply. The device's DMA mask: a device that drives only 28 (or 32, 48...)
//! address lines never reaches above it, and QEMU's `edu` silently truncates the address. And
//! the IOMMU's valid ranges (`VFIO_IOMMU_GET_INFO`, capability `IOVA_RANGE`): its address
//! width, minus reserved windows such as the x86 MSI range `0xfee00000..=0xfeefffff`.
//!
//! Blocks are placed top-down, starting just below the mask: a driver whose mask is too wide
//! fails on its first DMA rather than only once memory grows. Nothing is placed in the first
//! [`IovaAllocator::FLOOR`] bytes, so a zero or small integer used as an address always faults.

use std::collections::BTreeMap;

use super::error::VfioError;
use rdma_pmd::BusAddr;

/// The highest address a device can generate, as a mask of its address lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaMask(u64);

impl DmaMask {
    /// A device with `bits` address lines (1..=64): `DMA_BIT_MASK(bits)`.
    pub const fn bits(bits: u32) -> Self {
        assert!(bits >= 1 && bits <= 64, "a DMA mask has 1 to 64 bits");
        DmaMask(if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 })
    }

    /// The mask as a number (the highest reachable address).
    pub const fn get(self) -> u64 {
        self.0
    }
}

/// An inclusive range of IOVAs, `start..=end` (the `vfio_iova_range` convention).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IovaRange {
    /// First address.
    pub start: u64,
    /// Last address (inclusive).
    pub end: u64,
}

/// Hands out aligned IOVA blocks inside the allowed ranges, each below the mask of the device
/// it is for. One per container: every device attached to it shares the address space.
#[derive(Clone, Debug)]
pub struct IovaAllocator {
    /// Allowed ranges, clipped to `FLOOR..`, sorted, non-overlapping.
    ranges: Vec<IovaRange>,
    /// Live blocks: start → length.
    used: BTreeMap<u64, u64>,
}

impl IovaAllocator {
    /// Nothing is handed out below this (1 MiB).
    pub const FLOOR: u64 = 1 << 20;

    /// An allocator for an IOMMU that accepts `ranges` (the whole 64-bit space if empty, as
    /// when the kernel does not report them).
    pub fn new(ranges: &[IovaRange]) -> Self {
        let all = [IovaRange { start: 0, end: u64::MAX }];
        let src = if ranges.is_empty() { &all[..] } else { ranges };
        let mut clipped: Vec<IovaRange> = src
            .iter()
            .filter_map(|r| {
                let start = r.start.max(Self::FLOOR);
                (start <= r.end).then_some(IovaRange { start, end: r.end })
            })
            .collect();
        clipped.sort_by_key(|r| r.start);
        let mut ranges: Vec<IovaRange> = Vec::with_capacity(clipped.len());
        for r in clipped {
            match ranges.last_mut() {
                Some(last) if r.start <= last.end.saturating_add(1) => {
                    last.end = last.end.max(r.end)
                }
                _ => ranges.push(r),
            }
        }
        IovaAllocator { ranges, used: BTreeMap::new() }
    }

    /// The usable ranges.
    pub fn ranges(&self) -> &[IovaRange] {
        &self.ranges
    }

    /// The usable ranges below `mask`.
    pub fn ranges_below(&self, mask: DmaMask) -> Vec<IovaRange> {
        self.ranges
            .iter()
            .filter(|r| r.start <= mask.get())
            .map(|r| IovaRange { start: r.start, end: r.end.min(mask.get()) })
            .collect()
    }

    /// A free block of `len` bytes (> 0) aligned to `align` (a power of two) that ends at or
    /// below `mask`: the highest such block in the usable ranges.
    pub fn alloc(&mut self, len: u64, align: u64, mask: DmaMask) -> Result<BusAddr, VfioError> {
        if len == 0 || !align.is_power_of_two() {
            return Err(VfioError::BadLayout { len: len as usize, align: align as usize });
        }
        for r in self.ranges_below(mask).iter().rev() {
            // Walk the gaps of this range from the top: [gap_lo, gap_hi] inclusive. Blocks
            // never straddle ranges, but one may straddle the mask: start the walk from every
            // block that begins at or below the clipped end.
            let mut gap_hi = r.end;
            let mut blocks = self.used.range(r.start..=r.end).rev().peekable();
            loop {
                let gap_lo = match blocks.peek() {
                    Some((s, l)) => s.saturating_add(**l),
                    None => r.start,
                };
                if let Some(start) = Self::fit(gap_lo, gap_hi, len, align) {
                    self.used.insert(start, len);
                    return Ok(BusAddr(start));
                }
                match blocks.next() {
                    Some((s, _)) if *s > r.start => gap_hi = s - 1,
                    _ => break,
                }
            }
        }
        Err(VfioError::IovaExhausted { len, mask: mask.get() })
    }

    /// The highest `align`ed start of `len` bytes inside `lo..=hi`.
    fn fit(lo: u64, hi: u64, len: u64, align: u64) -> Option<u64> {
        if lo > hi {
            return None;
        }
        let last_start = hi.checked_sub(len - 1)?;
        let start = last_start & !(align - 1);
        (start >= lo).then_some(start)
    }

    /// Give back the block starting at `iova`; returns its length, or `None` if no block
    /// starts there.
    pub fn free(&mut self, iova: BusAddr) -> Option<u64> {
        self.used.remove(&iova.0)
    }

    /// Blocks handed out and not freed.
    pub fn live(&self) -> usize {
        self.used.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    #[test]
    fn masks_are_dma_bit_masks() {
        assert_eq!(DmaMask::bits(28).get(), 0x0fff_ffff);
        assert_eq!(DmaMask::bits(32).get(), 0xffff_ffff);
        assert_eq!(DmaMask::bits(64).get(), u64::MAX);
    }

    const M28: DmaMask = DmaMask::bits(28);

    #[test]
    fn blocks_stay_below_the_mask_aligned_and_disjoint() {
        let mut a = IovaAllocator::new(&[]);
        let mut got = Vec::new();
        for (len, align) in
            [(4096, 4096), (100, 64), (2 * MB, 2 * MB), (5000, 4096), (2 * MB, 2 * MB)]
        {
            let b = a.alloc(len, align, M28).unwrap();
            assert!(b.is_aligned(align), "{b} not aligned to {align:#x}");
            assert!(b.0 + len - 1 <= 0x0fff_ffff, "{b} + {len:#x} crosses the 28-bit mask");
            assert!(b.0 >= IovaAllocator::FLOOR);
            got.push((b.0, len));
        }
        got.sort();
        for w in got.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "overlap: {w:?}");
        }
        // Top-down: the first 4 KiB block is the last page below 2^28.
        assert!(got.iter().any(|(s, _)| *s == 0x0fff_f000));
    }

    #[test]
    fn devices_with_different_masks_share_one_space() {
        let mut a = IovaAllocator::new(&[IovaRange { start: 0, end: (1 << 39) - 1 }]);
        let wide = a.alloc(4096, 4096, DmaMask::bits(64)).unwrap();
        assert_eq!(wide.0, (1 << 39) - 4096, "bounded by the IOMMU's width");
        let narrow = a.alloc(4096, 4096, M28).unwrap();
        assert_eq!(narrow.0, (1 << 28) - 4096);
        // A block straddling a narrower mask blocks the space below it for that mask.
        let mut b = IovaAllocator::new(&[]);
        let straddle = b.alloc(2 * MB, MB, DmaMask::bits(64)).unwrap();
        assert_eq!(straddle.0, u64::MAX - 2 * MB + 1);
        let mut c = IovaAllocator::new(&[]);
        let x = c.alloc(2 * MB, MB, DmaMask::bits(29)).unwrap(); // [2^29 - 2M, 2^29)
        assert_eq!(x.0, (1 << 29) - 2 * MB);
        let y = c.alloc(MB, MB, DmaMask::bits(29)).unwrap();
        assert_eq!(y.0, (1 << 29) - 3 * MB, "below the first, no overlap");
        let z = c.alloc(4096, 4096, M28).unwrap();
        assert_eq!(z.0, (1 << 28) - 4096);
    }

    #[test]
    fn honours_reported_ranges_and_skips_reserved_windows() {
        // An Intel IOMMU with a 39-bit address width and the MSI window reserved.
        let ranges = [
            IovaRange { start: 0, end: 0xfedf_ffff },
            IovaRange { start: 0xfef0_0000, end: (1 << 39) - 1 },
        ];
        let mut a = IovaAllocator::new(&ranges);
        assert_eq!(a.ranges().len(), 2);
        let m32 = DmaMask::bits(32);
        let first = a.alloc(MB, MB, m32).unwrap();
        assert_eq!(first.0, 0xfff0_0000, "the top MiB below 4 GiB");
        // 32 MiB no longer fits between the MSI window and 4 GiB: it goes below the window.
        let big = a.alloc(32 * MB, MB, m32).unwrap();
        assert_eq!(big.0, 0xfce0_0000);
        assert!(big.0 + 32 * MB <= 0xfee0_0000, "not inside the reserved window");
        assert_eq!(
            a.ranges_below(m32),
            vec![
                IovaRange { start: MB, end: 0xfedf_ffff },
                IovaRange { start: 0xfef0_0000, end: 0xffff_ffff }
            ]
        );
    }

    #[test]
    fn freed_blocks_are_reused_and_exhaustion_is_reported() {
        // Room for exactly three 1 MiB blocks between the 1 MiB floor and a 22-bit (4 MiB) mask.
        let m22 = DmaMask::bits(22);
        let mut a = IovaAllocator::new(&[]);
        let x = a.alloc(MB, MB, m22).unwrap();
        let y = a.alloc(MB, MB, m22).unwrap();
        let z = a.alloc(MB, MB, m22).unwrap();
        assert_eq!((x.0, y.0, z.0), (3 * MB, 2 * MB, MB));
        let e = a.alloc(4096, 4096, m22).unwrap_err();
        assert_eq!(e, VfioError::IovaExhausted { len: 4096, mask: 0x3f_ffff });
        assert_eq!(a.free(y), Some(MB));
        assert_eq!(a.free(y), None);
        assert_eq!(a.alloc(4096, 4096, m22).unwrap().0, 3 * MB - 4096);
        assert_eq!(a.live(), 3);
        assert!(matches!(a.alloc(0, 1, m22), Err(VfioError::BadLayout { .. })));
        assert!(matches!(a.alloc(1, 3, m22), Err(VfioError::BadLayout { .. })));
    }

    #[test]
    fn mask_below_the_floor_leaves_nothing() {
        let mut a = IovaAllocator::new(&[]);
        assert!(a.ranges_below(DmaMask::bits(16)).is_empty());
        assert!(a.alloc(1, 1, DmaMask::bits(16)).is_err());
    }

    #[test]
    fn overlapping_and_unsorted_ranges_are_merged() {
        let r = [
            IovaRange { start: 8 * MB, end: 12 * MB - 1 },
            IovaRange { start: 2 * MB, end: 9 * MB },
            IovaRange { start: 12 * MB, end: 13 * MB - 1 },
        ];
        let a = IovaAllocator::new(&r);
        assert_eq!(a.ranges(), &[IovaRange { start: 2 * MB, end: 13 * MB - 1 }]);
    }
}
