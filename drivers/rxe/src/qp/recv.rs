//! The receive direction: posting receives and reaping their completions, each exactly
//! once and in order.

use super::*;

impl<'r> RecvQueue<'r> for RxeQp<'r> {
    fn recv_caps(&self) -> RecvCaps {
        self.recv_caps
    }

    fn recv_posted(&self) -> u64 {
        self.recv_tail
    }

    /// `ibv_post_recv` of one receive, refused as rxe's provider refuses it: with `ENOMEM`
    /// ([`Error::QueueFull`]) when the queue holds `max_recv_wr`, with `EINVAL` when it has
    /// more elements than `max_recv_sge`. Allowed before the connection is up.
    unsafe fn push_recv(&mut self, wr_id: u64, dest: Dest<'_, 'r>) -> Result<()> {
        if self.recv_tail - self.recv_head >= self.recv_caps.max_recv_wr as u64 {
            return Err(Error::QueueFull { needed: 1, free: 0 });
        }
        if dest.count() > self.recv_caps.max_recv_sge as usize {
            let max = self.recv_caps.max_recv_sge as usize;
            return Err(Error::TooManyRecvSges { given: dest.count(), max });
        }
        if dest.total_len().is_none() {
            return Err(Error::InvalidArgument("message above 2 GiB"));
        }
        let seq = self.recv_tail;
        let s = self.rq.index(seq);
        let mut sge = [Sge::new(0, 0, rdma_pmd::Lkey(0)); MAX_SGE as usize];
        let (first, runs) = match *dest.kind() {
            DestKind::Bufs(bufs) => {
                let held = self.rq.hold(s, bufs.iter().map(|b| b.region()))?;
                for (e, b) in sge.iter_mut().zip(bufs) {
                    *e = b.sge();
                }
                held
            }
            DestKind::Raw(sges) => {
                sge[..sges.len()].copy_from_slice(sges);
                (None, 0)
            }
        };
        let mut wr = ffi::ibv_recv_wr {
            wr_id: seq,
            next: ptr::null_mut(),
            sg_list: sge.as_mut_ptr(),
            num_sge: dest.count() as c_int,
        };
        let mut bad = ptr::null_mut();
        // SAFETY: a live QP; `wr` and `sge` outlive the call (the provider copies them); the
        // buffers stay registered, and out of the caller's reach, until the completion is
        // reaped (held above; the caller's contract).
        let rc = unsafe { ffi::rxe_shim_post_recv(self.qp.as_ptr(), &mut wr, &mut bad) };
        if rc != 0 {
            // SAFETY: held above for a receive the provider refused.
            unsafe { self.rq.release_runs(s, first, runs) };
            return Err(device_error(rc));
        }
        self.rq.slots[s] = Slot { wr_id, runs, first };
        self.recv_done[s] = false;
        self.recv_tail = seq + 1;
        Ok(())
    }

    /// Reap receive completions (sends, writes with immediate, their errors and flushes);
    /// never blocks.
    fn poll_recv(&mut self, out: &mut [Completion]) -> Result<usize> {
        let n = self.poll_into(self.recv_cq, out.len())?;
        for (i, o) in out.iter_mut().enumerate().take(n) {
            let wc = self.wcs[i];
            let seq = wc.wr_id;
            let s = self.rq.index(seq);
            if seq < self.recv_head || seq >= self.recv_tail || self.recv_done[s] {
                // Not a receive we have outstanding: counting it would retire another one.
                let fault = if self.recv_head == self.recv_tail {
                    DeviceFault::NoReceivePosted
                } else {
                    DeviceFault::NotOutstanding { counter: seq as u16 }
                };
                if i == 0 {
                    return Err(Error::Fault(fault));
                }
                self.deferred_recv(fault);
                return Ok(i);
            }
            // SAFETY: this receive's completion was reaped: the device no longer writes it.
            let wr_id = unsafe { self.rq.release(seq) };
            self.recv_done[s] = true;
            while self.recv_head < self.recv_tail && self.recv_done[self.rq.index(self.recv_head)] {
                self.recv_done[self.rq.index(self.recv_head)] = false;
                self.recv_head += 1;
            }
            *o = completion(&wc, wr_id);
        }
        Ok(n)
    }

    fn recv_outstanding(&self) -> u32 {
        (self.recv_tail - self.recv_head) as u32
    }
}
