//! The shared posting forms, over a fake queue that records what reaches the "device".
//!
//! `Fake` is the one software `SendQueue`: everything else that needs a queue (the load
//! generator's tests, the benchmarks) runs a real backend on a fake device instead.

use super::*;
use crate::addr::{Lkey, Rkey};
use crate::completion::{WcOpcode, WcStatus};
use crate::dest::{DestBuf, DestKind, DestSlot, QueueId, Retired, Side};
use crate::region::{self, RegionUse};
use core::cell::Cell;
use core::ptr::NonNull;

/// A queue of 8 slots that accepts requests of at most 4 SGEs / 32 inline bytes.
#[derive(Default)]
struct Fake<'r> {
    pushed: [(u64, u32); 8],
    staged: usize,
    committed: usize,
    doorbells: u32,
    held: [Option<&'r RegionUse>; 8],
    /// Requests the test declared retired.
    retired: u64,
    id: Option<QueueId>,
}

// SAFETY: the fake's device writes nothing; `retired` is whatever the test says executed, and
// never more than was committed (`retire` checks).
#[allow(unsafe_code)]
unsafe impl Retired for Fake<'_> {
    fn queue_id(&self) -> QueueId {
        self.id.expect("fake queues get an id in `new`")
    }
    fn retired(&self, side: Side) -> u64 {
        match side {
            Side::Send => self.retired,
            Side::Recv => 0,
        }
    }
}

impl Fake<'_> {
    fn new() -> Self {
        Fake { id: Some(QueueId::new()), ..Fake::default() }
    }
    /// The device "completed" the oldest `n` committed requests.
    fn retire(&mut self, n: u64) {
        assert!(self.retired + n <= self.committed as u64);
        self.retired += n;
    }
}

#[allow(unsafe_code)]
impl<'r> SendQueue<'r> for Fake<'r> {
    type Cursor = ();
    fn caps(&self) -> Caps {
        Caps { max_send_wr: 8, max_sge: 4, max_inline: 32 }
    }
    fn qp_num(&self) -> QpNum {
        QpNum(0x123)
    }
    /// A forgotten batch's requests are dropped (their region counts leak), as the contract
    /// says: the next batch starts where it did.
    unsafe fn begin(&mut self) {
        self.staged = self.committed;
    }
    unsafe fn push(&mut self, _: &mut (), req: &SendRequest<'_, 'r>) -> Result<()> {
        req.check(&self.caps())?;
        if self.staged == 8 {
            return Err(Error::QueueFull { needed: 1, free: 0 });
        }
        let len = match &req.op {
            SendOp::Write { source, .. } | SendOp::Send { source, .. } => {
                if let SourceKind::Sgl(sgl) = source.kind() {
                    region::acquire_all(sgl)?;
                    self.held[self.staged] = sgl.first().map(|b| b.region());
                }
                source.total_len().unwrap()
            }
            SendOp::Read { dest, .. } | SendOp::Atomic { dest, .. } => {
                if let DestKind::Bufs(b) = dest.kind() {
                    if let Some(d) = b.first() {
                        d.region().acquire()?;
                        self.held[self.staged] = Some(d.region());
                    }
                }
                dest.total_len().unwrap()
            }
        };
        self.pushed[self.staged] = (req.wr_id, len);
        self.staged += 1;
        Ok(())
    }
    fn pushed(&self, _: &()) -> u32 {
        (self.staged - self.committed) as u32
    }
    fn posted(&self) -> u64 {
        self.committed as u64
    }
    unsafe fn commit(&mut self, _: ()) {
        if self.staged == self.committed {
            return;
        }
        self.committed = self.staged;
        self.doorbells += 1;
    }
    unsafe fn abort(&mut self, _: ()) {
        for h in self.held[self.committed..self.staged].iter_mut() {
            if let Some(r) = h.take() {
                // SAFETY: acquired by `push` for a request that never reached a device.
                unsafe { r.release() };
            }
        }
        self.staged = self.committed;
    }
    fn poll(&mut self, out: &mut [Completion]) -> Result<usize> {
        if self.committed == 0 || out.is_empty() {
            return Ok(0);
        }
        out[0] =
            Completion::new(self.pushed[0].0, WcStatus::Success, WcOpcode::RdmaWrite, QpNum(0x123));
        Ok(1)
    }
    fn outstanding(&self) -> u32 {
        self.committed as u32
    }
}

fn buf<'r>(r: &'r RegionUse, mem: &'r [Cell<u8>]) -> LocalBuf<'r> {
    // SAFETY: `mem` outlives 'r, and its cells allow the atomic reads an inline copy makes
    // through the buffer's pointer (a plain `&[u8]` would not: it is read-only).
    #[allow(unsafe_code)]
    unsafe {
        LocalBuf::from_raw_parts(r, NonNull::from(mem).cast(), 0x5000, mem.len() as u32, Lkey(1))
    }
}

const REMOTE: RemoteBuf = RemoteBuf::new(0x9000, Rkey(0xabc));

#[test]
fn single_post_rings_once_and_returns_context() {
    let r = RegionUse::new();
    let m = cells::<64>(0);
    let mut q = Fake::new();
    q.post_writev(42, &[buf(&r, &m)], SendFlags::SIGNALED, REMOTE).unwrap();
    assert_eq!(q.doorbells, 1);
    let mut wc = [Completion::default(); 4];
    assert_eq!(q.poll_bounded(&mut wc, 10).unwrap(), 1);
    assert_eq!(wc[0].wr_id, 42);
}

#[test]
fn limits_give_typed_errors_and_change_nothing() {
    let r = RegionUse::new();
    let m = cells::<64>(0);
    let b = buf(&r, &m);
    let mut q = Fake::new();
    let e = q.post_writev(1, &[b; 5], SendFlags::empty(), REMOTE).unwrap_err();
    assert_eq!(e, Error::TooManySges { given: 5, max: 4 });
    assert_eq!(e.errno().0, 12);
    let big = [0u8; 33];
    let e = q.post_write_inline(2, &[&big], SendFlags::empty(), REMOTE).unwrap_err();
    assert_eq!(e, Error::InlineTooLarge { len: 33, max: 32 });
    // registered bytes with INLINE obey the inline limit, not the SGE limit
    let e = q.post_writev(3, &[b], SendFlags::INLINE, REMOTE).unwrap_err();
    assert_eq!(e, Error::InlineTooLarge { len: 64, max: 32 });
    assert_eq!((q.staged, q.doorbells, r.in_flight()), (0, 0, 0));
}

#[test]
fn zero_sges_and_empty_inline_are_valid() {
    let mut q = Fake::new();
    q.post_writev(7, &[], SendFlags::SIGNALED, REMOTE).unwrap();
    q.post_write_inline(8, &[], SendFlags::empty(), REMOTE).unwrap();
    assert_eq!(q.pushed[0], (7, 0));
    assert_eq!(q.pushed[1], (8, 0));
}

#[test]
fn batch_commits_with_one_doorbell() {
    let r = RegionUse::new();
    let m = cells::<16>(0);
    let mut q = Fake::new();
    let mut b = q.batch();
    for i in 0..5 {
        b.post_writev(i, &[buf(&r, &m)], SendFlags::empty(), REMOTE).unwrap();
    }
    assert_eq!(b.commit(), 5);
    assert_eq!((q.committed, q.doorbells), (5, 1));
}

#[test]
fn dropped_batch_rolls_back() {
    let r = RegionUse::new();
    let m = cells::<16>(0);
    let mut q = Fake::new();
    {
        let mut b = q.batch();
        b.post_writev(1, &[buf(&r, &m)], SendFlags::empty(), REMOTE).unwrap();
        b.post_write_imm(2, &[buf(&r, &m)], SendFlags::empty(), REMOTE, 5).unwrap();
        assert_eq!(r.in_flight(), 2);
    }
    assert_eq!((q.staged, q.doorbells, r.in_flight()), (0, 0, 0));
}

#[test]
fn raw_posting_is_unsafe_but_available() {
    let mut q = Fake::new();
    let sges = [Sge::new(0x1000, 8, Lkey(3)), Sge::new(0x2000, 0, Lkey(3))];
    // SAFETY: the fake device never reads the addresses.
    #[allow(unsafe_code)]
    unsafe {
        q.post_writev_raw(9, &sges, SendFlags::SIGNALED, REMOTE, None).unwrap();
    }
    assert_eq!(q.pushed[0], (9, 8));
}

#[test]
fn poll_bounded_times_out() {
    let mut q = Fake::new();
    let mut wc = [Completion::default(); 1];
    assert_eq!(q.poll_bounded(&mut wc, 100), Err(Error::Timeout("a completion")));
}

/// The bounded wait polls at most `max_polls` times (once for 0), stops at the first poll
/// that finds something, and passes a poll's error on.
#[test]
fn poll_until_is_bounded_and_stops_at_the_first_completion() {
    let mut wc = [Completion::default(); 2];
    for (max, finds_at, want_calls, want) in [
        (0, None, 1, Err(Error::Timeout("x"))),
        (5, None, 5, Err(Error::Timeout("x"))),
        (5, Some(3), 3, Ok(2)),
        (5, Some(1), 1, Ok(2)),
    ] {
        let mut calls = 0;
        let poll = |_: &mut [Completion]| {
            calls += 1;
            Ok(if Some(calls) == finds_at { 2 } else { 0 })
        };
        assert_eq!(super::poll_until(poll, &mut wc, max, "x"), want, "{max} {finds_at:?}");
        assert_eq!(calls, want_calls, "{max} {finds_at:?}");
    }
    let failing = |_: &mut [Completion]| Err(Error::NotConnected);
    assert_eq!(super::poll_until(failing, &mut wc, 5, "x"), Err(Error::NotConnected));
}

/// `check_message`'s one compare says what its two rules say, at and around every edge: the
/// length limit, a range ending at 2^64 - 1, address 0 (2^64 bytes to the top).
#[test]
fn message_check_matches_its_two_rules() {
    let rules = |len: u64, addr: u64| {
        if len > MAX_MESSAGE {
            return Err(Error::InvalidArgument("message above 2 GiB"));
        }
        let (end, wrapped) = addr.overflowing_add(len);
        if wrapped && end != 0 {
            return Err(Error::InvalidArgument("remote range wraps past 2^64"));
        }
        Ok(())
    };
    let edges = [0, 1, 2, 7, 16, 17, MAX_MESSAGE - 1, MAX_MESSAGE, MAX_MESSAGE + 1];
    let lens = edges.iter().copied().chain([u32::MAX as u64, 1 << 32, 63 << 32, u64::MAX]);
    for len in lens {
        let near = |x: u64| [x.wrapping_sub(1), x, x.wrapping_add(1)];
        let tops = edges.iter().flat_map(|&k| near(0u64.wrapping_sub(k)));
        for addr in tops.chain(near(0)).chain(near(1 << 63)).chain([0x1000, 1 << 40]) {
            let remote = RemoteBuf::new(addr, Rkey(1));
            assert_eq!(check_message(len, remote), rules(len, addr), "len {len:#x} addr {addr:#x}");
        }
    }
}

#[test]
fn messages_past_2_gib_or_wrapping_the_remote_range_are_refused() {
    assert_eq!(check_message(MAX_MESSAGE, REMOTE), Ok(()));
    assert_eq!(
        check_message(MAX_MESSAGE + 1, REMOTE),
        Err(Error::InvalidArgument("message above 2 GiB"))
    );
    let top = RemoteBuf::new(u64::MAX - 15, Rkey(1));
    assert_eq!(check_message(17, top), Err(Error::InvalidArgument("remote range wraps past 2^64")));
    assert_eq!(check_message(16, top), Ok(()), "the last byte at 2^64 - 1");
    assert_eq!(check_message(0, RemoteBuf::new(u64::MAX, Rkey(1))), Ok(()));
    let mut q = Fake::new();
    let data = [0u8; 17];
    let e = q.post_write_inline(1, &[&data], SendFlags::empty(), top).unwrap_err();
    assert_eq!(e.errno(), crate::Errno::EINVAL);
    assert_eq!(q.staged, 0);
}

#[test]
fn inline_chunks_carry_every_byte_in_order() {
    let r = RegionUse::new();
    let mem: [Cell<u8>; 200] = core::array::from_fn(|i| Cell::new(i as u8));
    let b = buf(&r, &mem);
    let pieces = [b.slice(0, 10).unwrap(), b.slice(10, 190).unwrap()];
    let (mut got, mut n) = ([0u8; 200], 0);
    Source::sgl(&pieces).for_each_inline_chunk(|c| {
        assert!(c.len() <= INLINE_CHUNK);
        got[n..n + c.len()].copy_from_slice(c);
        n += c.len();
    });
    assert_eq!((n, got), (200, mem.map(Cell::into_inner)));
    let (mut got, mut n) = ([0u8; 5], 0);
    Source::inline(&[b"ab", b"", b"cde"]).for_each_inline_chunk(|c| {
        got[n..n + c.len()].copy_from_slice(c);
        n += c.len();
    });
    assert_eq!(&got, b"abcde");
}

/// `N` bytes of `v` that a [`LocalBuf`] may read through its pointer.
fn cells<const N: usize>(v: u8) -> [Cell<u8>; N] {
    core::array::from_fn(|_| Cell::new(v))
}

/// A destination buffer over `mem` (the fake device never touches it).
fn dest<'r>(r: &'r RegionUse, mem: &'r mut [u8]) -> DestBuf<'r> {
    // SAFETY: `mem` is borrowed exclusively for 'r and reached only through the result.
    #[allow(unsafe_code)]
    unsafe {
        let len = mem.len() as u32;
        DestBuf::from_raw_parts(r, NonNull::from(mem).cast(), 0x6000, len, Lkey(2))
    }
}

#[test]
fn a_read_hands_its_buffer_back_only_once_it_retired() {
    let r = RegionUse::new();
    let mut m = [0u8; 32];
    let mut q = Fake::new();
    q.post_write_inline(1, &[b"x"], SendFlags::empty(), REMOTE).unwrap();
    let p = q.post_read(2, dest(&r, &mut m), SendFlags::SIGNALED, REMOTE).unwrap();
    assert_eq!(p.seq(), 1);
    assert_eq!(r.in_flight(), 1);
    q.retire(1);
    // Only the write before it retired: the READ may still write.
    let p = p.reclaim(&q).unwrap_err();
    q.retire(1);
    let mut back = p.reclaim(&q).unwrap();
    back.write(0, b"mine again").unwrap();
    let mut out = [0u8; 10];
    back.read(0, &mut out).unwrap();
    assert_eq!(&out, b"mine again");
}

#[test]
fn a_pending_of_one_queue_is_not_reclaimed_by_another() {
    let r = RegionUse::new();
    let mut m = [0u8; 8];
    let mut a = Fake::new();
    let mut b = Fake::new();
    let p = a.post_faa(7, dest(&r, &mut m), SendFlags::SIGNALED, REMOTE, 1).unwrap();
    b.post_write_inline(1, &[b"y"], SendFlags::empty(), REMOTE).unwrap();
    b.retire(1);
    let p = p.reclaim(&b).unwrap_err();
    a.retire(1);
    assert!(p.reclaim(&a).is_ok());
}

#[test]
fn refused_requests_give_their_buffers_back() {
    let r = RegionUse::new();
    let mut m = [0u8; 16];
    let mut q = Fake::new();
    // An atomic needs one buffer of at least 8 bytes.
    let mut whole = dest(&r, &mut m);
    let tail = whole.split_off(4).unwrap();
    assert_eq!((whole.len(), tail.len()), (4, 12));
    let refused = q.post_cas(1, whole, SendFlags::SIGNALED, REMOTE, 0, 1).unwrap_err();
    assert_eq!(refused.error.errno(), crate::Errno::EINVAL);
    assert_eq!(refused.bufs.len(), 4);
    // A READ cannot be inline; one above the queue's SGE limit is refused.
    let refused = q.post_read(2, tail, SendFlags::INLINE, REMOTE).unwrap_err();
    assert!(matches!(refused.error, Error::InvalidArgument(_)));
    assert_eq!(r.in_flight(), 0);
    assert_eq!(q.doorbells, 0);
}

#[test]
fn a_batch_mixes_reads_writes_and_atomics_under_one_doorbell() {
    let r = RegionUse::new();
    let (mut m1, mut m2) = ([0u8; 64], [0u8; 8]);
    let src = cells::<16>(7);
    let mut q = Fake::new();
    let mut b = q.batch();
    b.post_writev(1, &[buf(&r, &src)], SendFlags::empty(), REMOTE).unwrap();
    let p1 = b.post_readv(2, [dest(&r, &mut m1)], SendFlags::empty(), REMOTE).unwrap();
    let p2 = b.post_cas(3, dest(&r, &mut m2), SendFlags::SIGNALED, REMOTE, 5, 6).unwrap();
    assert_eq!((p1.seq(), p2.seq()), (1, 2));
    assert_eq!(b.commit(), 3);
    assert_eq!(q.doorbells, 1);
    q.retire(3);
    let [d1] = p1.reclaim(&q).unwrap();
    assert_eq!(d1.len(), 64);
    assert!(p2.reclaim(&q).is_ok());
}

#[test]
fn a_rolled_back_batch_keeps_its_buffers_out_of_reach_and_its_numbers_are_given_again() {
    let r = RegionUse::new();
    let (mut m1, mut m2) = ([0u8; 8], [0u8; 8]);
    let mut q = Fake::new();
    let early = {
        let mut b = q.batch();
        b.post_read(1, dest(&r, &mut m1), SendFlags::SIGNALED, REMOTE).unwrap()
        // dropped: rolled back
    };
    assert_eq!(r.in_flight(), 0);
    let late = q.post_read(2, dest(&r, &mut m2), SendFlags::SIGNALED, REMOTE).unwrap();
    assert_eq!((early.seq(), late.seq()), (0, 0));
    q.retire(1);
    // The rolled-back request's buffer never reached the device: reclaiming it with the
    // retirement of the request that took its number is harmless.
    assert!(early.reclaim(&q).is_ok());
    assert!(late.reclaim(&q).is_ok());
}

#[test]
fn dest_buf_copies_are_bounded() {
    let r = RegionUse::new();
    let mut m = [0u8; 8];
    let mut d = dest(&r, &mut m);
    assert_eq!(d.write(4, &[1; 5]), Err(Error::OutOfBounds));
    assert_eq!(d.read(usize::MAX, &mut [0; 1]), Err(Error::OutOfBounds));
    assert_eq!(d.fill(0, 9, 0), Err(Error::OutOfBounds));
    assert!(d.split_off(9).is_err());
    let tail = d.split_off(8).unwrap();
    assert!(tail.is_empty());
    d.fill(0, 8, 0xaa).unwrap();
    let mut out = [0u8; 8];
    d.read(0, &mut out).unwrap();
    assert_eq!(out, [0xaa; 8]);
}

#[test]
fn a_forgotten_batch_with_a_read_leaks_the_count_and_keeps_the_buffer_out_of_reach() {
    let r = RegionUse::new();
    let mut m = [0u8; 8];
    let mut q = Fake::new();
    let p = {
        let mut b = q.batch();
        let p = b.post_read(1, dest(&r, &mut m), SendFlags::SIGNALED, REMOTE).unwrap();
        core::mem::forget(b);
        p
    };
    // Never posted, never released: the region stays busy (a leak), and the buffer stays in
    // its Pending until a request with its number retires.
    assert_eq!(r.in_flight(), 1);
    let p = p.reclaim(&q).unwrap_err();
    q.post_write_inline(2, &[b"z"], SendFlags::SIGNALED, REMOTE).unwrap();
    q.retire(1);
    assert!(p.reclaim(&q).is_ok());
    assert_eq!(r.in_flight(), 1, "the forgotten request's count is leaked, not shifted");
}

#[test]
fn a_batch_numbers_only_the_requests_it_accepts() {
    let r = RegionUse::new();
    let (mut m1, mut m2, mut m3) = ([0u8; 8], [0u8; 8], [0u8; 8]);
    let mut q = Fake::new();
    q.post_write_inline(1, &[b"w"], SendFlags::empty(), REMOTE).unwrap();
    let mut b = q.batch();
    let p1 = b.post_read(2, dest(&r, &mut m1), SendFlags::empty(), REMOTE).unwrap();
    // Refused (a READ cannot be inline): it takes no number, the next request gets it.
    let refused = b.post_read(3, dest(&r, &mut m2), SendFlags::INLINE, REMOTE).unwrap_err();
    b.post_write_inline(4, &[b"x"], SendFlags::empty(), REMOTE).unwrap();
    let p3 = b.post_read(5, dest(&r, &mut m3), SendFlags::SIGNALED, REMOTE).unwrap();
    assert_eq!((p1.seq(), p3.seq()), (1, 3));
    assert_eq!(refused.bufs.len(), 8);
    assert_eq!(b.commit(), 3);
    q.retire(3);
    // Through the write after `p1`: `p1` is back, `p3` still out of reach.
    let p3 = p3.reclaim(&q).unwrap_err();
    assert!(p1.reclaim(&q).is_ok());
    q.retire(1);
    assert!(p3.reclaim(&q).is_ok());
}

#[test]
fn a_slot_is_posted_in_place_and_reachable_only_once_its_read_retired() {
    let r = RegionUse::new();
    let (mut m1, mut m2) = ([0u8; 16], [0u8; 16]);
    let mut q = Fake::new();
    let mut slot = DestSlot::new([dest(&r, &mut m1), dest(&r, &mut m2)]);
    assert_eq!((slot.is_idle(), slot.seq()), (true, None));
    slot.get_idle().unwrap()[0].write(0, b"before").unwrap();
    q.post_write_inline(1, &[b"x"], SendFlags::empty(), REMOTE).unwrap();
    q.post_readv_in(2, &mut slot, SendFlags::SIGNALED, REMOTE).unwrap();
    assert_eq!((slot.seq(), q.pushed[1]), (Some(1), (2, 32)));
    // Busy: no access, and no second request from it.
    assert!(slot.get_idle().is_none());
    assert!(slot.get(&q).is_none());
    let e = q.post_readv_in(3, &mut slot, SendFlags::SIGNALED, REMOTE).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)));
    assert_eq!((q.doorbells, r.in_flight()), (2, 1));
    q.retire(1);
    assert!(slot.get(&q).is_none(), "only the write before it retired");
    q.retire(1);
    slot.get(&q).unwrap()[1].write(0, b"mine").unwrap();
    assert!(slot.is_idle());
    // Again, in place; then out of the slot once it retired.
    q.post_readv_in(4, &mut slot, SendFlags::SIGNALED, REMOTE).unwrap();
    assert_eq!(slot.seq(), Some(2));
    let slot = slot.into_inner(&q).unwrap_err();
    q.retire(1);
    let [d1, d2] = slot.into_inner(&q).unwrap();
    let (mut o1, mut o2) = ([0u8; 6], [0u8; 4]);
    d1.read(0, &mut o1).unwrap();
    d2.read(0, &mut o2).unwrap();
    assert_eq!((&o1, &o2), (b"before", b"mine"));
}

#[test]
fn a_refused_post_leaves_its_slot_idle_and_only_its_own_queue_frees_it() {
    let r = RegionUse::new();
    let mut m = [0u8; 8];
    let (mut a, mut b) = (Fake::new(), Fake::new());
    let mut slot = DestSlot::new(dest(&r, &mut m));
    let e = a.post_readv_in(1, &mut slot, SendFlags::INLINE, REMOTE).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)));
    assert!(slot.get_idle().is_some());
    assert_eq!((a.doorbells, r.in_flight()), (0, 0));
    // Rolled back with its batch: busy until a request with its number retires (harmless: the
    // device never had it).
    {
        let mut batch = a.batch();
        let add = AtomicOp::FetchAdd { add: 1 };
        batch
            .post_dest_in(&mut slot, |dest| SendRequest {
                wr_id: 2,
                flags: SendFlags::SIGNALED,
                op: SendOp::Atomic { dest, remote: REMOTE, op: add },
            })
            .unwrap();
    }
    assert_eq!((slot.seq(), r.in_flight()), (Some(0), 0));
    assert!(slot.get(&a).is_none());
    b.post_write_inline(3, &[b"y"], SendFlags::SIGNALED, REMOTE).unwrap();
    b.retire(1);
    assert!(slot.get(&b).is_none(), "another queue's retirement frees nothing");
    a.post_write_inline(4, &[b"z"], SendFlags::SIGNALED, REMOTE).unwrap();
    a.retire(1);
    assert!(slot.get(&a).is_some());
}

#[test]
fn a_pending_becomes_a_busy_slot() {
    let r = RegionUse::new();
    let mut m = [0u8; 8];
    let mut q = Fake::new();
    let p = q.post_read(1, dest(&r, &mut m), SendFlags::SIGNALED, REMOTE).unwrap();
    let mut slot = DestSlot::from(p);
    assert_eq!(slot.seq(), Some(0));
    assert!(q.post_readv_in(2, &mut slot, SendFlags::SIGNALED, REMOTE).is_err());
    assert!(slot.get(&q).is_none());
    q.retire(1);
    assert_eq!(slot.get(&q).map(|d| d.len()), Some(8));
}
