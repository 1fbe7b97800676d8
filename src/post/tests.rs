//! The shared posting forms, over a fake queue that records what reaches the "device".
//!
//! `Fake` is the one software `SendQueue`: everything else that needs a queue (the load
//! generator's tests, the benchmarks) runs a real backend on a fake device instead.

use super::*;
use crate::addr::{Lkey, Rkey};
use crate::completion::{WcOpcode, WcStatus};
use crate::region::{self, RegionUse};
use core::ptr::NonNull;

/// A queue of 8 slots that accepts requests of at most 4 SGEs / 32 inline bytes.
#[derive(Default)]
struct Fake<'r> {
    pushed: [(u64, u32); 8],
    staged: usize,
    committed: usize,
    doorbells: u32,
    held: [Option<&'r RegionUse>; 8],
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
    unsafe fn begin(&mut self) {}
    unsafe fn push(&mut self, _: &mut (), req: &WriteRequest<'_, 'r>) -> Result<()> {
        req.check(&self.caps())?;
        if self.staged == 8 {
            return Err(Error::QueueFull { needed: 1, free: 0 });
        }
        if let SourceKind::Sgl(sgl) = req.source.kind() {
            region::acquire_all(sgl)?;
            self.held[self.staged] = sgl.first().map(|b| b.region());
        }
        self.pushed[self.staged] = (req.wr_id, req.source.total_len().unwrap());
        self.staged += 1;
        Ok(())
    }
    fn pushed(&self, _: &()) -> u32 {
        (self.staged - self.committed) as u32
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

fn buf<'r>(r: &'r RegionUse, mem: &'r [u8]) -> LocalBuf<'r> {
    // SAFETY: `mem` outlives 'r and the fake device never dereferences it.
    #[allow(unsafe_code)]
    unsafe {
        LocalBuf::from_raw_parts(r, NonNull::from(mem).cast(), 0x5000, mem.len() as u32, Lkey(1))
    }
}

const REMOTE: RemoteBuf = RemoteBuf::new(0x9000, Rkey(0xabc));

#[test]
fn single_post_rings_once_and_returns_context() {
    let r = RegionUse::new();
    let m = [0u8; 64];
    let mut q = Fake::default();
    q.post_writev(42, &[buf(&r, &m)], SendFlags::SIGNALED, REMOTE).unwrap();
    assert_eq!(q.doorbells, 1);
    let mut wc = [Completion::default(); 4];
    assert_eq!(q.poll_bounded(&mut wc, 10).unwrap(), 1);
    assert_eq!(wc[0].wr_id, 42);
}

#[test]
fn limits_give_typed_errors_and_change_nothing() {
    let r = RegionUse::new();
    let m = [0u8; 64];
    let b = buf(&r, &m);
    let mut q = Fake::default();
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
    let mut q = Fake::default();
    q.post_writev(7, &[], SendFlags::SIGNALED, REMOTE).unwrap();
    q.post_write_inline(8, &[], SendFlags::empty(), REMOTE).unwrap();
    assert_eq!(q.pushed[0], (7, 0));
    assert_eq!(q.pushed[1], (8, 0));
}

#[test]
fn batch_commits_with_one_doorbell() {
    let r = RegionUse::new();
    let m = [0u8; 16];
    let mut q = Fake::default();
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
    let m = [0u8; 16];
    let mut q = Fake::default();
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
    let mut q = Fake::default();
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
    let mut q = Fake::default();
    let mut wc = [Completion::default(); 1];
    assert_eq!(q.poll_bounded(&mut wc, 100), Err(Error::Timeout("a completion")));
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
    let mut q = Fake::default();
    let data = [0u8; 17];
    let e = q.post_write_inline(1, &[&data], SendFlags::empty(), top).unwrap_err();
    assert_eq!(e.errno(), crate::Errno::EINVAL);
    assert_eq!(q.staged, 0);
}

#[test]
fn inline_chunks_carry_every_byte_in_order() {
    let r = RegionUse::new();
    let mut mem = [0u8; 200];
    mem.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
    let b = buf(&r, &mem);
    let pieces = [b.slice(0, 10).unwrap(), b.slice(10, 190).unwrap()];
    let (mut got, mut n) = ([0u8; 200], 0);
    Source::sgl(&pieces).for_each_inline_chunk(|c| {
        assert!(c.len() <= INLINE_CHUNK);
        got[n..n + c.len()].copy_from_slice(c);
        n += c.len();
    });
    assert_eq!((n, got), (200, mem));
    let (mut got, mut n) = ([0u8; 5], 0);
    Source::inline(&[b"ab", b"", b"cde"]).for_each_inline_chunk(|c| {
        got[n..n + c.len()].copy_from_slice(c);
        n += c.len();
    });
    assert_eq!(&got, b"abcde");
}
