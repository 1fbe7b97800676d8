//! The send direction: posting into the send queue (WRITE, READ, SEND, atomics; RC and UD)
//! and reaping its completions, retiring requests in order.

use super::*;

impl<'r> SendQueue<'r> for RxeQp<'r> {
    type Cursor = ();

    #[inline]
    fn caps(&self) -> Caps {
        self.caps
    }

    fn qp_num(&self) -> QpNum {
        self.qpn
    }

    /// Requests a forgotten batch pushed (`mem::forget`) are rolled back here, so they are
    /// never posted and their regions are released.
    #[inline]
    unsafe fn begin(&mut self) {
        if self.tail != self.committed {
            self.rollback();
        }
    }

    #[inline]
    unsafe fn push(&mut self, _: &mut (), req: &SendRequest<'_, 'r>) -> Result<()> {
        if !self.connected {
            return Err(Error::NotConnected);
        }
        req.check(&self.caps)?;
        let cap = self.caps.max_send_wr as u64;
        let free = (cap - (self.tail - self.head)) as u32;
        if free == 0 {
            return Err(Error::QueueFull { needed: 1, free });
        }
        // The service's rules (rdma-core's rxe provider refuses the same with EINVAL): a UD
        // queue pair only sends, and only to a destination; a connected one never to one.
        let ah = match (&req.op, self.ud.is_some()) {
            (SendOp::Send { ud: Some(d), .. }, true) => {
                Some((self.ah(&d.addr)?, d.qpn.get(), d.qkey))
            }
            (SendOp::Send { ud: None, .. }, true) => {
                return Err(Error::InvalidArgument("a UD send needs a destination"))
            }
            (_, true) => return Err(Error::InvalidArgument("a UD queue pair only sends")),
            (SendOp::Send { ud: Some(_), .. }, false) => {
                return Err(Error::InvalidArgument("a datagram destination on a connected QP"))
            }
            _ => None,
        };
        let seq = self.tail;
        let idx = (seq - self.committed) as usize;
        let s = self.sq.index(seq);
        // Everything fallible is above or in the staging call, which holds nothing on failure.
        let ((num_sge, first, runs), opcode, imm, wr) = match &req.op {
            SendOp::Write { source, remote, imm } => (
                self.stage_source(idx, s, req, source)?,
                if imm.is_some() {
                    ffi::IBV_WR_RDMA_WRITE_WITH_IMM
                } else {
                    ffi::IBV_WR_RDMA_WRITE
                },
                *imm,
                ffi::ibv_send_wr_wr {
                    rdma: ffi::ibv_wr_rdma { remote_addr: remote.addr, rkey: remote.rkey.get() },
                },
            ),
            SendOp::Send { source, imm, .. } => (
                self.stage_source(idx, s, req, source)?,
                if imm.is_some() { ffi::IBV_WR_SEND_WITH_IMM } else { ffi::IBV_WR_SEND },
                *imm,
                match ah {
                    Some((ah, remote_qpn, remote_qkey)) => ffi::ibv_send_wr_wr {
                        ud: ffi::ibv_wr_ud { ah: ah.as_ptr(), remote_qpn, remote_qkey },
                    },
                    None => ffi::ibv_send_wr::ZERO.wr,
                },
            ),
            SendOp::Read { dest, remote } => (
                self.stage_dest(idx, s, dest, false)?,
                ffi::IBV_WR_RDMA_READ,
                None,
                ffi::ibv_send_wr_wr {
                    rdma: ffi::ibv_wr_rdma { remote_addr: remote.addr, rkey: remote.rkey.get() },
                },
            ),
            SendOp::Atomic { dest, remote, op } => {
                if remote.addr % u64::from(ATOMIC_LEN) != 0 {
                    // rdma-core's rxe provider refuses it in ibv_post_send (EINVAL).
                    return Err(Error::InvalidArgument("an atomic's remote word is not 8-aligned"));
                }
                let (opcode, compare_add, swap) = match *op {
                    rdma_pmd::AtomicOp::CompareSwap { compare, swap } => {
                        (ffi::IBV_WR_ATOMIC_CMP_AND_SWP, compare, swap)
                    }
                    rdma_pmd::AtomicOp::FetchAdd { add } => {
                        (ffi::IBV_WR_ATOMIC_FETCH_AND_ADD, add, 0)
                    }
                };
                (
                    self.stage_dest(idx, s, dest, true)?,
                    opcode,
                    None,
                    ffi::ibv_send_wr_wr {
                        atomic: ffi::ibv_wr_atomic {
                            remote_addr: remote.addr,
                            compare_add,
                            swap,
                            rkey: remote.rkey.get(),
                        },
                    },
                )
            }
        };
        let mut flags = req.flags;
        if req.is_inline() {
            flags |= SendFlags::INLINE;
        }
        let st = &mut self.staged(idx).wr;
        st.wr_id = seq;
        st.num_sge = num_sge as c_int;
        st.opcode = opcode;
        st.send_flags = flags.bits();
        st.imm_data = imm.unwrap_or(0).to_be();
        st.wr = wr;
        self.sq.slots[s] = Slot { wr_id: req.wr_id, runs, first };
        self.tail = seq + 1;
        Ok(())
    }

    #[inline]
    fn pushed(&self, _: &()) -> u32 {
        (self.tail - self.committed) as u32
    }

    #[inline]
    fn posted(&self) -> u64 {
        self.committed
    }

    #[inline]
    unsafe fn commit(&mut self, _: ()) {
        let n = (self.tail - self.committed) as usize;
        if n == 0 {
            return;
        }
        // Chain the staged requests, last to first, pointing each at its own list.
        let mut head: *mut ffi::ibv_send_wr = ptr::null_mut();
        for i in (0..n).rev() {
            let st = self.staged(i);
            st.wr.sg_list = st.sge.as_mut_ptr();
            st.wr.next = head;
            head = &mut st.wr;
        }
        let mut bad: *mut ffi::ibv_send_wr = ptr::null_mut();
        // SAFETY: the provider's post_send for this live QP (what ibv_post_send calls); the
        // chain lives in `self` until the call returns; every request's SGEs name memory
        // acquired until its completion, or inline bytes staged in `inline` (copied by the
        // provider during this call); address handles live until the QP is destroyed.
        let rc = unsafe { (self.post_send)(self.qp.as_ptr(), head, &mut bad) };
        if rc == 0 {
            self.committed = self.tail;
            return;
        }
        // Requests before `bad` were posted; `bad` and later ones were not (rdma-core leaves
        // `bad` null when it refused the whole list).
        let posted = (0..n).find(|&i| ptr::eq(&self.staged(i).wr, bad)).unwrap_or(0) as u64;
        self.committed += posted;
        self.rollback();
        self.deferred = Some(device_error(rc));
    }

    unsafe fn abort(&mut self, _: ()) {
        self.rollback();
    }

    #[inline]
    fn poll(&mut self, out: &mut [Completion]) -> Result<usize> {
        if let Some(e) = self.deferred.take() {
            return Err(e);
        }
        let n = self.poll_into(self.send_cq, out.len())?;
        for (i, o) in out.iter_mut().enumerate().take(n) {
            let wc = self.wcs[i];
            let seq = wc.wr_id;
            let wr_id = self.sq.slots[self.sq.index(seq)].wr_id;
            if seq >= self.head && seq < self.committed {
                while self.head <= seq {
                    // SAFETY: the completion of `seq`, or of a later request, was reaped: the
                    // send queue completes in order, so the device is done with it.
                    unsafe { self.sq.release(self.head) };
                    self.head += 1;
                }
            }
            *o = completion(&wc, wr_id);
        }
        Ok(n)
    }

    #[inline]
    fn outstanding(&self) -> u32 {
        (self.committed - self.head) as u32
    }
}
