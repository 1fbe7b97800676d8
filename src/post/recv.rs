//! The receive side of the posting API: `rdma_post_recvv` and its completions.

use super::{poll_until, slot_busy, Posted};
use crate::completion::Completion;
use crate::dest::{Dest, DestBuf, DestList, DestSlot, Pending, Refused, Retired, Side};
use crate::error::Result;
use crate::sge::Sge;

/// What a receive queue accepts, fixed when it is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RecvCaps {
    /// Receives posted at once (`ibv_qp_cap.max_recv_wr`).
    pub max_recv_wr: u32,
    /// Scatter elements per receive (`ibv_qp_cap.max_recv_sge`).
    pub max_recv_sge: u32,
}

/// A backend's receive queue: `rdma_post_recvv` and its completions.
///
/// Contract for implementors: [`push_recv`](RecvQueue::push_recv) either makes the whole
/// receive visible to the device (its regions counted busy) and numbers it
/// [`recv_posted`](RecvQueue::recv_posted) (then one more), or changes nothing and returns the
/// error; receives retire in order, each reported exactly once by
/// [`poll_recv`](RecvQueue::poll_recv) (success, error or flush), and
/// [`Retired::retired`]`(Side::Recv)` counts them.
pub trait RecvQueue<'r>: Retired {
    /// What the queue accepts.
    fn recv_caps(&self) -> RecvCaps;
    /// Receives posted so far (the number the next one gets).
    fn recv_posted(&self) -> u64;
    /// Post one receive scattering into `dest` (no elements: a receive for a WRITE WITH
    /// IMMEDIATE or an empty SEND).
    ///
    /// # Safety
    /// The memory of `dest` must not be read or written by the caller until the receive
    /// retires (the core moves owned buffers into a [`Pending`]; raw elements carry
    /// [`Dest::raw`]'s contract).
    #[allow(unsafe_code)]
    unsafe fn push_recv(&mut self, wr_id: u64, dest: Dest<'_, 'r>) -> Result<()>;
    /// Reap receive completions into `out`; returns how many were written. Never blocks.
    fn poll_recv(&mut self, out: &mut [Completion]) -> Result<usize>;
    /// Receives posted and not retired.
    fn recv_outstanding(&self) -> u32;

    /// `rdma_post_recvv`: a receive scattering into `bufs`, which come back from the
    /// [`Pending`] once it retires.
    #[inline]
    fn post_recvv<B: DestList<'r>>(&mut self, wr_id: u64, bufs: B) -> Posted<B> {
        let (queue, seq) = (self.queue_id(), self.recv_posted());
        // SAFETY: on success the buffers go into the `Pending`, which keeps them out of reach
        // until the receive retires; on failure the device never saw them.
        #[allow(unsafe_code)]
        let res = unsafe { self.push_recv(wr_id, Dest::bufs(bufs.bufs())) };
        match res {
            Ok(()) => Ok(Pending::new(bufs, queue, Side::Recv, seq)),
            Err(error) => Err(Refused { error, bufs }),
        }
    }

    /// `rdma_post_recvv` into the buffers of `slot`, in place: they stay out of reach until
    /// the receive retires ([`DestSlot::get`]). Refused, with the slot unchanged, if it is
    /// busy.
    #[inline]
    fn post_recvv_in<B: DestList<'r>>(&mut self, wr_id: u64, slot: &mut DestSlot<B>) -> Result<()> {
        if !slot.is_idle() {
            return Err(slot_busy());
        }
        let (queue, seq) = (self.queue_id(), self.recv_posted());
        // Busy before the receive can reach the device (see `DestSlot`).
        let dest = Dest::bufs(slot.lend(queue, Side::Recv, seq).bufs());
        // SAFETY: the buffers stay in the slot, which keeps them out of reach until the
        // receive retires; on failure the device never saw them.
        #[allow(unsafe_code)]
        let res = unsafe { self.push_recv(wr_id, dest) };
        if res.is_err() {
            slot.refused();
        }
        res
    }

    /// `rdma_post_recv`: one buffer.
    #[inline]
    fn post_recv(&mut self, wr_id: u64, buf: DestBuf<'r>) -> Posted<DestBuf<'r>> {
        self.post_recvv(wr_id, buf)
    }

    /// A receive with no buffer: what the target of a WRITE WITH IMMEDIATE (or of a
    /// zero-byte SEND) posts.
    #[inline]
    fn post_recv_empty(&mut self, wr_id: u64) -> Result<()> {
        // SAFETY: no memory is handed over.
        #[allow(unsafe_code)]
        unsafe {
            self.push_recv(wr_id, Dest::bufs(&[]))
        }
    }

    /// `rdma_post_recvv` with raw elements.
    ///
    /// # Safety
    /// As [`Dest::raw`].
    #[allow(unsafe_code)]
    unsafe fn post_recvv_raw(&mut self, wr_id: u64, sgl: &[Sge]) -> Result<()> {
        // SAFETY: forwarded to our caller.
        unsafe { self.push_recv(wr_id, Dest::raw(sgl)) }
    }

    /// Busy-poll the receive side until at least one completion arrives or `max_polls` polls
    /// found nothing.
    fn poll_recv_bounded(&mut self, out: &mut [Completion], max_polls: u64) -> Result<usize> {
        poll_until(|out| self.poll_recv(out), out, max_polls, "a receive completion")
    }
}
