//! Requests posted with one doorbell.

use core::marker::PhantomData;

use super::{Post, SendQueue, SendRequest};
use crate::dest::QueueId;
use crate::error::Result;

/// Requests posted with a single doorbell (`ibv_wr_start` ... `ibv_wr_complete`): every
/// [`Post`] form appends to it.
///
/// Dropping the batch without [`commit`](Batch::commit) rolls it back (`ibv_wr_abort`): the
/// ring and the regions' in-flight counts return to where they were. Leaking it
/// (`mem::forget`) is safe but leaks too: its requests are never posted (the next batch or
/// post starts where it did and overwrites them), and the regions they acquired stay counted
/// busy for good, so those regions refuse deregistration and their memory is not freed.
pub struct Batch<'q, 'r, Q: SendQueue<'r> + ?Sized> {
    pub(super) q: &'q mut Q,
    pub(super) at: Q::Cursor,
    /// The queue's identity, read when the batch opens.
    pub(super) queue: QueueId,
    /// The number the next request appended gets (for its [`Pending`]): the queue's
    /// [`posted`](SendQueue::posted) when the batch opened, plus one per request appended
    /// since. Kept here, a local of the caller's loop, rather than worked out from the
    /// queue's fields on every request, which the ring's and the regions' stores force the
    /// compiler to reload (see the module docs).
    pub(super) next: u64,
    pub(super) done: bool,
    pub(super) _r: PhantomData<&'r ()>,
}

impl<'r, Q: SendQueue<'r> + ?Sized> Post<'r> for Batch<'_, 'r, Q> {
    /// Append one request. A refused request changes nothing; the earlier ones stay appended.
    #[inline(always)]
    fn post(&mut self, req: &SendRequest<'_, 'r>) -> Result<()> {
        // SAFETY: `at` is the live cursor of `q`'s latest `begin` (the batch holds `q`
        // exclusively since then) and is handed back only by `commit` or `drop`.
        #[allow(unsafe_code)]
        let res = unsafe { self.q.push(&mut self.at, req) };
        if res.is_ok() {
            self.next += 1;
        }
        res
    }

    #[inline]
    fn next_seq(&self) -> (QueueId, u64) {
        debug_assert_eq!(
            self.next,
            self.q.posted() + self.q.pushed(&self.at) as u64,
            "a push that succeeds appends exactly one request"
        );
        (self.queue, self.next)
    }
}

impl<'r, Q: SendQueue<'r> + ?Sized> Batch<'_, 'r, Q> {
    /// Requests appended so far.
    #[inline(always)]
    pub fn len(&self) -> u32 {
        self.q.pushed(&self.at)
    }

    /// Whether nothing was appended.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Ring one doorbell for every appended request; returns how many were posted.
    #[inline(always)]
    pub fn commit(mut self) -> u32 {
        self.done = true;
        let n = self.len();
        // SAFETY: as in `post`; `done` keeps `drop` from handing the cursor back again.
        #[allow(unsafe_code)]
        unsafe {
            self.q.commit(self.at)
        };
        n
    }
}

impl<'r, Q: SendQueue<'r> + ?Sized> Drop for Batch<'_, 'r, Q> {
    #[inline(always)]
    fn drop(&mut self) {
        if !self.done {
            // SAFETY: as in `post`; the batch was not committed, so the cursor is live.
            #[allow(unsafe_code)]
            unsafe {
                self.q.abort(self.at)
            };
        }
    }
}
