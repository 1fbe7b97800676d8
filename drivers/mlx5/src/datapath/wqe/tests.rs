use super::*;
use crate::layout::wqe::{CtrlSeg, DataSeg, InlineSeg, RaddrSeg};
use core::ptr::NonNull;
use proptest::prelude::*;
use rdma_pmd::{Lkey, LocalBuf, RegionUse, Rkey, Source};
use std::vec;
use std::vec::Vec;

const POISON: u8 = 0xa5;
const REMOTE: RemoteBuf = RemoteBuf::new(0x7f00_1122_3344, Rkey(0xa1b2_c3d4));

/// A ring that records every store, for checking where the builder writes.
struct Recorder {
    mem: Vec<u8>,
    wqe_cnt: u32,
    offs: Vec<usize>,
}

impl Recorder {
    fn new(wqe_cnt: u32) -> Self {
        Recorder { mem: vec![POISON; wqe_cnt as usize * 64], wqe_cnt, offs: Vec::new() }
    }

    /// The WQE at `pi`, unwrapped.
    fn wqe(&self, pi: u16, wqebbs: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..wqebbs {
            let s = (pi as usize + i) & (self.wqe_cnt as usize - 1);
            out.extend_from_slice(&self.mem[s * 64..s * 64 + 64]);
        }
        out
    }
}

impl WqeSink for Recorder {
    fn wqe_cnt(&self) -> u32 {
        self.wqe_cnt
    }

    fn put8(&mut self, off: usize, bytes: [u8; 8]) {
        assert!(off & 7 == 0, "unaligned store at {off}");
        let off = off % self.mem.len();
        self.offs.push(off);
        self.mem[off..off + 8].copy_from_slice(&bytes);
    }

    fn put16(&mut self, off: usize, lo: [u8; 8], hi: [u8; 8]) {
        assert!(off & 15 == 0, "unaligned 16-byte store at {off}");
        self.put8(off, lo);
        self.put8(off + 8, hi);
    }

    fn put8x2(&mut self, off: usize, lo: [u8; 8], hi: [u8; 8]) {
        assert!(off & 15 == 0, "unaligned segment store at {off}");
        self.put8(off, lo);
        self.put8(off + 8, hi);
    }
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

#[test]
fn three_sges_match_the_public_vector() {
    // write_3sge_unsignaled from the public vector file (built with mlx5dv_set_*_seg).
    let want = hex(concat!(
        "0000010800012305000000000000000000007f0011224344a1b2c3d400000000",
        "000000400102030400007fab00001000000000800506070800007fab00002040",
        "000003e8090a0b0c00007fab000030c0",
    ));
    let sgl = [
        Sge::new(0x7fab_0000_1000, 64, Lkey(0x0102_0304)),
        Sge::new(0x7fab_0000_2040, 128, Lkey(0x0506_0708)),
        Sge::new(0x7fab_0000_30c0, 1000, Lkey(0x090a_0b0c)),
    ];
    let mut mem = [POISON; 64 * 64];
    let mut ring = SliceRing::new(&mut mem, 64).unwrap();
    let b = WqeBuilder::new(QpNum(0x123));
    let remote = RemoteBuf::new(0x7f00_1122_4344, Rkey(0xa1b2_c3d4));
    let info = b.write_sges(&mut ring, 1, 64, &sgl, SendFlags::empty(), remote, None).unwrap();
    assert_eq!((info.shape.ds, info.shape.wqebbs, info.next_pi()), (5, 2, 3));
    assert_eq!(&mem[64..64 + 80], &want[..]);
    // The tail of the last block (past ds * 16) and every other slot keep the poison.
    assert!(mem[64 + 80..64 + 128].iter().all(|b| *b == POISON));
    assert!(mem[..64].iter().chain(&mem[192..]).all(|b| *b == POISON));
}

#[test]
fn zero_length_sges_are_skipped() {
    let sgl =
        [Sge::new(0x1000, 0, Lkey(1)), Sge::new(0x2000, 8, Lkey(2)), Sge::new(0x3000, 0, Lkey(3))];
    let mut r = Recorder::new(8);
    let b = WqeBuilder::new(QpNum(7));
    let info = b.write_sges(&mut r, 0, 8, &sgl, SendFlags::SIGNALED, REMOTE, None).unwrap();
    assert_eq!(info.shape.ds, 3);
    let w = r.wqe(0, 1);
    assert_eq!(DataSeg::new_checked(&w[32..]).unwrap().sge(), sgl[1]);
    let none: [Sge; 0] = [];
    let info = b.write_sges(&mut r, 1, 7, &none, SendFlags::empty(), REMOTE, Some(5)).unwrap();
    assert_eq!((info.shape.ds, info.opcode), (2, SendOpcode::RdmaWriteImm));
}

#[test]
fn wqe_wraps_at_the_ring_end() {
    let sgl = [Sge::new(0x1000, 16, Lkey(1)); 5];
    let mut r = Recorder::new(64);
    let b = WqeBuilder::new(QpNum(0x123));
    let info = b.write_sges(&mut r, 0xffff, 64, &sgl, SendFlags::empty(), REMOTE, None).unwrap();
    assert_eq!((info.shape.ds, info.shape.wqebbs), (7, 2));
    assert_eq!((info.slot(0, 64), info.slot(1, 64)), (63, 0));
    assert_eq!(info.next_pi(), 1);
    let c = CtrlSeg::new_unchecked(&r.mem[63 * 64..]);
    assert_eq!(c.wqe_index(), 0xffff);
    // Data segments 2..5 are in slot 0.
    assert_eq!(DataSeg::new_checked(&r.mem[0..16]).unwrap().sge(), sgl[2]);
    assert!(r.mem[16 * 4 + 16..64 * 63].iter().all(|b| *b == POISON));
}

#[test]
fn inline_payload_crosses_blocks_and_wraps() {
    let payload: Vec<u8> = (0..100u8).collect();
    let pieces: [&[u8]; 3] = [&payload[..3], &payload[3..77], &payload[77..]];
    let req = SendRequest::write(
        0,
        Source::inline(&pieces),
        SendFlags::INLINE,
        REMOTE,
        Some(0xdead_beef),
    );
    let mut r = Recorder::new(4);
    let b = WqeBuilder::new(QpNum(1)).sq_sig_all(true);
    let info = b.write(&mut r, 3, 4, &req).unwrap();
    // ds = 2 + ceil(104 / 16) = 9, wqebbs = 3: slots 3, 0, 1.
    assert_eq!((info.shape.ds, info.shape.wqebbs), (9, 3));
    assert_eq!(info.fm_ce_se, FmCeSe::CQ_UPDATE);
    let w = r.wqe(3, 3);
    let s = InlineSeg::new_checked(&w[32..]).unwrap();
    assert!(s.is_inline());
    assert_eq!(s.payload(), &payload[..]);
    // Padding up to ds * 16 is zero; the ctrl imm is big-endian.
    assert!(w[136..144].iter().all(|b| *b == 0));
    assert_eq!(&w[12..16], &[0xde, 0xad, 0xbe, 0xef]);
    assert!(r.mem[2 * 64 + 16..3 * 64].iter().all(|b| *b == POISON));
}

#[test]
fn registered_and_raw_sources_can_be_inlined() {
    let region = RegionUse::new();
    let mem: Vec<u8> = (0..40u8).collect();
    // SAFETY: `mem` outlives the buffer and is never written while it is borrowed.
    let buf = unsafe {
        LocalBuf::from_raw_parts(&region, NonNull::from(&mem[..]).cast(), 0x1000, 40, Lkey(9))
    };
    let sgl = [buf.slice(0, 10).unwrap(), buf.slice(10, 30).unwrap()];
    let req = SendRequest::write(0, Source::sgl(&sgl), SendFlags::INLINE, REMOTE, None);
    let b = WqeBuilder::new(QpNum(1));
    let mut r = Recorder::new(8);
    let info = b.write(&mut r, 0, 8, &req).unwrap();
    assert_eq!(info.shape.ds, 2 + 3);
    assert_eq!(InlineSeg::new_checked(&r.wqe(0, 2)[32..]).unwrap().payload(), &mem[..]);

    // Without INLINE the same buffers become data segments.
    let req = SendRequest { flags: SendFlags::empty(), ..req };
    let info = b.write(&mut r, 2, 6, &req).unwrap();
    assert_eq!(info.shape.ds, 4);
    let w = r.wqe(2, 1);
    assert_eq!(DataSeg::new_checked(&w[48..]).unwrap().sge(), Sge::new(0x100a, 30, Lkey(9)));

    // Raw elements with INLINE are read at their CPU address.
    let raw = [Sge::new(mem.as_ptr() as u64 + 4, 6, Lkey(0))];
    // SAFETY: the address is readable for 6 bytes during the post (INLINE).
    let source = unsafe { Source::raw(&raw) };
    let req = SendRequest::write(0, source, SendFlags::INLINE, REMOTE, None);
    b.write(&mut r, 4, 4, &req).unwrap();
    assert_eq!(InlineSeg::new_checked(&r.wqe(4, 1)[32..]).unwrap().payload(), &mem[4..10]);
}

#[test]
fn refusals_leave_the_ring_untouched() {
    let b = WqeBuilder::new(QpNum(1)).max_sge(4).max_inline(64);
    let mut r = Recorder::new(4);
    let five = [Sge::new(0x1000, 1, Lkey(1)); 5];
    let e = b.write_sges(&mut r, 0, 4, &five, SendFlags::empty(), REMOTE, None).unwrap_err();
    assert_eq!(e, Error::TooManySges { given: 5, max: 4 });
    let b2 = WqeBuilder::new(QpNum(1));
    let many = [Sge::new(0x1000, 1, Lkey(1)); 62];
    let mut big = Recorder::new(64);
    let e = b2.write_sges(&mut big, 0, 64, &many, SendFlags::empty(), REMOTE, None).unwrap_err();
    assert_eq!(e, Error::TooManySges { given: 62, max: 61 });
    // ... but 62 with one empty fits (ds = 63, 16 blocks).
    let mut many = many;
    many[7].length = 0;
    let info = b2.write_sges(&mut big, 0, 64, &many, SendFlags::empty(), REMOTE, None).unwrap();
    assert_eq!((info.shape.ds, info.shape.wqebbs), (63, 16));
    let e = b2.write_sges(&mut r, 0, 4, &many, SendFlags::empty(), REMOTE, None).unwrap_err();
    assert_eq!(e, Error::QueueFull { needed: 16, free: 4 });
    let three = [Sge::new(0x1000, 1, Lkey(1)); 3];
    let e = b.write_sges(&mut r, 0, 1, &three, SendFlags::empty(), REMOTE, None).unwrap_err();
    assert_eq!(e, Error::QueueFull { needed: 2, free: 1 });
    let data = [0u8; 65];
    let pieces: [&[u8]; 1] = [&data];
    let req = SendRequest::write(0, Source::inline(&pieces), SendFlags::INLINE, REMOTE, None);
    assert_eq!(
        b.write(&mut r, 0, 4, &req).unwrap_err(),
        Error::InlineTooLarge { len: 65, max: 64 }
    );
    let small = [0u8; 1];
    let five_pieces: [&[u8]; 5] = [&small; 5];
    let req5 = SendRequest::write(0, Source::inline(&five_pieces), req.flags, REMOTE, None);
    let e = b.write(&mut r, 0, 4, &req5).unwrap_err();
    assert_eq!(e, Error::TooManySges { given: 5, max: 4 });
    assert!(r.offs.is_empty());
    assert_eq!(b.shape(&req).unwrap_err(), Error::InlineTooLarge { len: 65, max: 64 });
}

#[test]
fn fm_ce_se_follows_the_provider() {
    let b = WqeBuilder::new(QpNum(1));
    assert_eq!(b.fm_ce_se(SendFlags::empty()).bits(), 0);
    assert_eq!(b.fm_ce_se(SendFlags::SIGNALED).bits(), 0x08);
    assert_eq!(b.fm_ce_se(SendFlags::FENCE | SendFlags::SOLICITED).bits(), 0x82);
    assert_eq!(b.sq_sig_all(true).fm_ce_se(SendFlags::INLINE).bits(), 0x08);
}

fn sge_strategy() -> impl Strategy<Value = Sge> {
    (any::<u64>(), prop_oneof![Just(0u32), 1u32..=u32::MAX], any::<u32>())
        .prop_map(|(a, l, k)| Sge::new(a, l, Lkey(k)))
}

fn flags_strategy() -> impl Strategy<Value = SendFlags> {
    (0u32..16).prop_map(SendFlags::from_bits_truncate)
}

/// Where a WQE at `pi` of `ds` units may be written: ring offsets of its first `ds * 16`
/// bytes.
fn allowed(pi: u16, ds: u8, wqe_cnt: u32, off: usize) -> bool {
    let mask = wqe_cnt as usize * 64 - 1;
    let rel = off.wrapping_sub(pi as usize * 64) & mask;
    rel < ds as usize * 16
}

proptest! {
    #[test]
    fn gather_builds_are_exact(
        sgl in proptest::collection::vec(sge_strategy(), 0..70),
        pi in any::<u16>(),
        log_cnt in 0u32..9,
        room in 0u32..300,
        flags in flags_strategy(),
        sig_all in any::<bool>(),
        imm in proptest::option::of(any::<u32>()),
        qpn in any::<u32>(),
        max_sge in 0u32..80,
    ) {
        let wqe_cnt = 1u32 << log_cnt;
        let flags = flags - SendFlags::INLINE;
        let b = WqeBuilder::new(QpNum(qpn)).sq_sig_all(sig_all).max_sge(max_sge);
        let mut r = Recorder::new(wqe_cnt);
        let nz: Vec<Sge> = sgl.iter().copied().filter(|e| e.length != 0).collect();
        let ds = 2 + nz.len();
        let wqebbs = (ds * 16).div_ceil(64);
        let res = b.write_sges(&mut r, pi, room, &sgl, flags, REMOTE, imm);
        // SAFETY: the elements are only copied into the WQE (no INLINE).
        let req = SendRequest::write(0, unsafe { Source::raw(&sgl) }, flags, REMOTE, imm);
        let shape = b.shape(&req);
        if sgl.len() > max_sge as usize || ds > 63 {
            prop_assert!(matches!(res, Err(Error::TooManySges { .. })), "{:?}", res);
            prop_assert!(shape.is_err());
            prop_assert!(r.offs.is_empty());
            return Ok(());
        }
        if wqebbs > room.min(wqe_cnt) as usize {
            prop_assert!(matches!(res, Err(Error::QueueFull { .. })), "{:?}", res);
            prop_assert!(r.offs.is_empty());
            return Ok(());
        }
        let total: u64 = sgl.iter().map(|e| e.length as u64).sum();
        if total > 1 << 31 {
            // An RDMA message is at most 2^31 bytes: refused, with at most the data segments
            // written into the WQE's own free blocks, which nothing reads.
            prop_assert_eq!(res, Err(Error::InvalidArgument("message above 2 GiB")));
            prop_assert!(shape.is_err());
            for &off in &r.offs {
                prop_assert!(allowed(pi, ds as u8, wqe_cnt, off), "store at {} outside", off);
            }
            return Ok(());
        }
        let info = res.unwrap();
        prop_assert_eq!(shape.unwrap(), info.shape);
        prop_assert_eq!(info.shape.ds as usize, ds);
        prop_assert_eq!(info.shape.wqebbs as usize, wqebbs);
        prop_assert_eq!(info.next_pi(), pi.wrapping_add(wqebbs as u16));
        for i in 0..wqebbs as u32 {
            prop_assert_eq!(info.slot(i, wqe_cnt), (pi as u32 + i) % wqe_cnt);
        }
        for &off in &r.offs {
            prop_assert!(allowed(pi, info.shape.ds, wqe_cnt, off), "store at {} outside", off);
        }
        // Parse it back.
        let w = r.wqe(pi, wqebbs);
        let c = CtrlSeg::new_checked(&w[..]).unwrap();
        prop_assert_eq!(c.wqe_index(), pi);
        prop_assert_eq!(c.opcode(), if imm.is_some() { SendOpcode::RdmaWriteImm } else { SendOpcode::RdmaWrite });
        prop_assert_eq!(c.qpn(), QpNum(qpn & QpNum::MAX));
        prop_assert_eq!(c.ds() as usize, ds);
        prop_assert_eq!(c.fm_ce_se(), b.fm_ce_se(flags));
        prop_assert_eq!(c.imm(), imm.unwrap_or(0));
        prop_assert_eq!((c.signature(), c.dci_stream_channel_id()), (0, 0));
        prop_assert_eq!(&w[..8], &info.doorbell[..]);
        let ra = RaddrSeg::new_checked(&w[16..]).unwrap();
        prop_assert_eq!((ra.raddr(), ra.rkey(), ra.reserved()), (REMOTE.addr, REMOTE.rkey, 0));
        for (j, e) in nz.iter().enumerate() {
            prop_assert_eq!(DataSeg::new_checked(&w[32 + 16 * j..]).unwrap().sge(), *e);
        }
    }

    #[test]
    fn inline_builds_are_exact(
        pieces in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 0..6),
        pi in any::<u16>(),
        log_cnt in 0u32..6,
        max_inline in 0u32..1100,
        imm in proptest::option::of(any::<u32>()),
    ) {
        let wqe_cnt = 1u32 << log_cnt;
        let refs: Vec<&[u8]> = pieces.iter().map(|p| p.as_slice()).collect();
        let payload: Vec<u8> = pieces.concat();
        let req = SendRequest::write(0, Source::inline(&refs), SendFlags::INLINE, REMOTE, imm);
        let b = WqeBuilder::new(QpNum(5)).max_inline(max_inline);
        let mut r = Recorder::new(wqe_cnt);
        let res = b.write(&mut r, pi, u32::MAX, &req);
        let ds = 2 + if payload.is_empty() { 0 } else { (4 + payload.len()).div_ceil(16) };
        let wqebbs = (ds * 16).div_ceil(64);
        if payload.len() > max_inline.min(MAX_INLINE) as usize {
            prop_assert!(matches!(res, Err(Error::InlineTooLarge { .. })), "{:?}", res);
            prop_assert!(r.offs.is_empty());
            return Ok(());
        }
        if wqebbs > wqe_cnt as usize {
            prop_assert!(matches!(res, Err(Error::QueueFull { .. })), "{:?}", res);
            prop_assert!(r.offs.is_empty());
            return Ok(());
        }
        let info = res.unwrap();
        prop_assert_eq!((info.shape.ds as usize, info.shape.wqebbs as usize), (ds, wqebbs));
        for &off in &r.offs {
            prop_assert!(allowed(pi, info.shape.ds, wqe_cnt, off), "store at {} outside", off);
        }
        let w = r.wqe(pi, wqebbs);
        if !payload.is_empty() {
            let s = InlineSeg::new_checked(&w[32..]).unwrap();
            prop_assert!(s.is_inline());
            prop_assert_eq!(s.payload(), &payload[..]);
            prop_assert!(w[36 + payload.len()..ds * 16].iter().all(|b| *b == 0));
        }
    }
}

#[test]
fn sinks_mask_offsets() {
    let mut buf = [0u8; 128];
    let mut s = SliceRing::new(&mut buf, 2).unwrap();
    s.put8(128 + 8, [1; 8]);
    assert_eq!(s.bytes()[8..16], [1; 8]);
    assert!(SliceRing::new(&mut [0u8; 64], 2).is_err());
    assert!(SliceRing::new(&mut [0u8; 192], 3).is_err());

    #[repr(align(16))]
    struct Words([u64; 16]);
    let mut words = Words([0; 16]);
    let base = NonNull::new(words.0.as_mut_ptr().cast::<u8>()).unwrap();
    // Misaligned for the 16-byte stores: refused.
    // SAFETY: not used to write (`new` fails).
    assert!(unsafe { RawRing::new(base.add(8), 1) }.is_err());
    {
        // SAFETY: `words` outlives `r`, is 16-aligned and 128 bytes; no reference is used
        // while `r` writes.
        let mut r = unsafe { RawRing::new(base, 2) }.unwrap();
        r.put8(128 + 64, 0x0102_0304_0506_0708u64.to_be_bytes());
        r.put16(3 * 128 + 112, [9; 8], [10; 8]);
    }
    let words = words.0;
    assert_eq!(words[8].to_ne_bytes(), [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!((words[14].to_ne_bytes(), words[15].to_ne_bytes()), ([9; 8], [10; 8]));
    let mut buf = [0u8; 64];
    let mut s = SliceRing::new(&mut buf, 1).unwrap();
    s.put16(64 * 7 + 48, [3; 8], [4; 8]);
    assert_eq!(&buf[48..], &[[3u8; 8], [4u8; 8]].concat()[..]);
}

#[test]
fn a_fixed_ring_stores_a_segment_as_two_words_at_the_wrapped_offset() {
    #[repr(align(16))]
    struct Words([u64; 16]);
    let mut words = Words([0; 16]);
    let base = NonNull::new(words.0.as_mut_ptr().cast::<u8>()).unwrap();
    {
        // SAFETY: `words` outlives the ring, is 16-aligned and 128 bytes; no reference is
        // used while the ring writes.
        let raw = unsafe { RawRing::new(base, 2) }.unwrap();
        let mut ring = FixedRing::<2>::new(raw).unwrap();
        let mut v = ring.view();
        // Three laps past the ring's start, into the second slot's third segment.
        v.put8x2(3 * 128 + 64 + 32, [5; 8], [6; 8]);
        // The same bytes as the 16-byte store, one segment further.
        v.put16(64 + 48, [5; 8], [6; 8]);
    }
    let words = words.0;
    assert_eq!((words[12].to_ne_bytes(), words[13].to_ne_bytes()), ([5; 8], [6; 8]));
    assert_eq!((words[14].to_ne_bytes(), words[15].to_ne_bytes()), ([5; 8], [6; 8]));
    assert!(words[..12].iter().all(|&w| w == 0));
}

#[test]
fn short_loads_keep_memory_order() {
    let bytes: [u8; 7] = [0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77];
    for n in 1..8 {
        let mut word = [0u8; 8];
        word[..n].copy_from_slice(&bytes[..n]);
        assert_eq!(
            super::inline::load_le_short(&bytes[..n]),
            u64::from_le_bytes(word),
            "{n} bytes"
        );
    }
}

/// The inline writer's 16-byte path: a piece that starts right after the header goes a whole
/// unit per store, and one that starts half a unit later (after an 8-byte piece) takes the
/// word path (the recorder refuses a 16-byte store off a unit's start); the bytes are the
/// payload's either way, zero-padded, for every length around the unit sizes.
#[test]
fn inline_units_and_words_carry_the_payload() {
    let payload: Vec<u8> = (1..=120u8).collect();
    for len in 0..=100usize {
        for split in [None, Some(8), Some(3), Some(12)] {
            let (a, b) = match split {
                Some(k) if k <= len => (&payload[..k], &payload[k..len]),
                _ => (&payload[..len], &payload[len..len]),
            };
            let pieces: [&[u8]; 2] = [a, b];
            let req =
                SendRequest::write(0, Source::inline(&pieces), SendFlags::INLINE, REMOTE, None);
            let mut r = Recorder::new(4);
            let b = WqeBuilder::new(QpNum(1)).max_inline(512);
            let info = b.write(&mut r, 3, 4, &req).unwrap();
            let ds = 2 + if len == 0 { 0 } else { (4 + len).div_ceil(16) };
            assert_eq!(info.shape.ds as usize, ds, "{len} {split:?}");
            let w = r.wqe(3, info.shape.wqebbs as usize);
            if len != 0 {
                let s = InlineSeg::new_checked(&w[32..]).unwrap();
                assert_eq!(s.payload(), &payload[..len], "{len} {split:?}");
                assert!(w[36 + len..ds * 16].iter().all(|b| *b == 0), "{len} {split:?}");
            }
        }
    }
}
