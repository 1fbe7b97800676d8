//! The load generator against a software queue that performs each write at commit time and
//! completes it on the next poll: checks the loop's accounting and verification, not a device.

use std::cell::RefCell;
use std::ptr::NonNull;

use loadgen::{fill_pattern, Buffers, Host, Plan};
use rdma_pmd::post::SourceKind;
use rdma_pmd::region::{self, RegionUse};
use rdma_pmd::{
    Caps, Completion, Lkey, LocalBuf, QpNum, RemoteBuf, Result, Rkey, SendQueue, WcOpcode,
    WcStatus, WriteRequest,
};

struct Mem {
    bytes: RefCell<Vec<u8>>,
    use_: RegionUse,
}

impl Mem {
    fn new(len: usize) -> Self {
        Mem { bytes: RefCell::new(vec![0; len]), use_: RegionUse::new() }
    }
    fn buf(&self, off: usize, len: usize, lkey: u32) -> LocalBuf<'_> {
        let base = self.bytes.borrow_mut().as_mut_ptr();
        // SAFETY: the Vec is never resized, so the pointer stays valid while `self` lives.
        unsafe {
            LocalBuf::from_raw_parts(
                &self.use_,
                NonNull::new(base.add(off)).unwrap(),
                base as u64 + off as u64,
                len as u32,
                Lkey(lkey),
            )
        }
    }
}

/// A staged write: wr_id, signalled, payload, destination offset, regions held.
type Staged<'r> = (u64, bool, Vec<u8>, u64, Vec<&'r RegionUse>);

struct SoftQueue<'r> {
    dst: &'r Mem,
    staged: Vec<Staged<'r>>,
    done: Vec<Completion>,
    unsignaled: Vec<Vec<&'r RegionUse>>,
}

impl<'r> SendQueue<'r> for SoftQueue<'r> {
    type Cursor = ();
    fn caps(&self) -> Caps {
        Caps { max_send_wr: 64, max_sge: 8, max_inline: 128 }
    }
    fn qp_num(&self) -> QpNum {
        QpNum(1)
    }
    unsafe fn begin(&mut self) {
        // What a forgotten batch staged is never posted.
        // SAFETY: nothing staged reached the "device".
        unsafe { self.abort(()) };
    }
    unsafe fn push(&mut self, _: &mut (), req: &WriteRequest<'_, 'r>) -> Result<()> {
        req.check(&self.caps())?;
        let mut data = Vec::new();
        let mut held = Vec::new();
        match req.source.kind() {
            SourceKind::Sgl(sgl) => {
                region::acquire_all(sgl)?;
                region::for_each_run(sgl, |r| held.push(r));
                for b in sgl.iter() {
                    // SAFETY: LocalBuf's contract: ptr valid for len bytes.
                    data.extend_from_slice(unsafe {
                        std::slice::from_raw_parts(b.as_ptr(), b.len())
                    });
                }
            }
            SourceKind::Inline(pieces) => pieces.iter().for_each(|p| data.extend_from_slice(p)),
            _ => unreachable!("raw SGEs are not used by the load generator"),
        }
        let signaled = req.flags.contains(rdma_pmd::SendFlags::SIGNALED);
        let off = req.remote.addr - self.dst.bytes.borrow().as_ptr() as u64;
        self.staged.push((req.wr_id, signaled, data, off, held));
        Ok(())
    }
    fn pushed(&self, _: &()) -> u32 {
        self.staged.len() as u32
    }
    unsafe fn commit(&mut self, _: ()) {
        for (wr_id, signaled, data, off, held) in self.staged.drain(..) {
            let off = off as usize;
            self.dst.bytes.borrow_mut()[off..off + data.len()].copy_from_slice(&data);
            self.unsignaled.push(held);
            if signaled {
                for h in self.unsignaled.drain(..).flatten() {
                    // SAFETY: acquired by `push`; the "device" is done with these bytes.
                    unsafe { h.release() };
                }
                self.done.push(Completion::new(
                    wr_id,
                    WcStatus::Success,
                    WcOpcode::RdmaWrite,
                    QpNum(1),
                ));
            }
        }
    }
    unsafe fn abort(&mut self, _: ()) {
        for (.., held) in self.staged.drain(..) {
            // SAFETY: acquired by `push` for requests never posted.
            held.into_iter().for_each(|h| unsafe { h.release() });
        }
    }
    fn poll(&mut self, out: &mut [Completion]) -> Result<usize> {
        let n = self.done.len().min(out.len());
        for (o, c) in out.iter_mut().zip(self.done.drain(..n)) {
            *o = c;
        }
        Ok(n)
    }
    fn outstanding(&self) -> u32 {
        self.done.len() as u32
    }
}

struct SoftHost<'a> {
    stamps: &'a Mem,
    dst: &'a Mem,
}

impl Host for SoftHost<'_> {
    fn write_stamp(&mut self, cell: usize, value: u64) {
        self.stamps.bytes.borrow_mut()[cell * 8..cell * 8 + 8]
            .copy_from_slice(&value.to_le_bytes());
    }
    fn read_dest(&mut self, off: usize, out: &mut [u8]) {
        out.copy_from_slice(&self.dst.bytes.borrow()[off..off + out.len()]);
    }
}

#[test]
fn every_write_lands_and_is_verified() {
    let stamps = Mem::new(32 * 8);
    let pieces = Mem::new(4 * 64);
    for p in 0..4 {
        fill_pattern(p, &mut pieces.bytes.borrow_mut()[p * 64..p * 64 + 64]);
    }
    let dst = Mem::new(16 * 512);
    let bufs = Buffers {
        stamps: (0..32).map(|c| stamps.buf(c * 8, 8, 1)).collect(),
        pieces: (0..4).map(|p| pieces.buf(p * 64, 64, 2)).collect(),
        remote: RemoteBuf::new(dst.bytes.borrow().as_ptr() as u64, Rkey(3)),
        slots: 16,
        slot_len: 512,
    };
    let mut q = SoftQueue { dst: &dst, staged: vec![], done: vec![], unsignaled: vec![] };
    let mut host = SoftHost { stamps: &stamps, dst: &dst };
    let plan = Plan { writes: 10_000, batch: 7, signal_every: 3, ..Plan::default() };
    let rep = loadgen::run(&mut q, &bufs, &mut host, &plan).unwrap();
    assert_eq!(rep.writes, 10_000);
    assert_eq!(rep.verified, 10_000);
    assert!(rep.inline > 0);
    assert_eq!(stamps.use_.in_flight() + pieces.use_.in_flight(), 0);
}

#[test]
fn a_wrong_destination_byte_is_caught() {
    struct Liar<'a>(SoftHost<'a>);
    impl Host for Liar<'_> {
        fn write_stamp(&mut self, cell: usize, value: u64) {
            self.0.write_stamp(cell, value)
        }
        fn read_dest(&mut self, off: usize, out: &mut [u8]) {
            self.0.read_dest(off, out);
            if out.len() > 20 {
                out[20] ^= 1;
            }
        }
    }
    let stamps = Mem::new(8 * 8);
    let pieces = Mem::new(2 * 64);
    fill_pattern(0, &mut pieces.bytes.borrow_mut()[..64]);
    let dst = Mem::new(8 * 128);
    let bufs = Buffers {
        stamps: (0..8).map(|c| stamps.buf(c * 8, 8, 1)).collect(),
        pieces: vec![pieces.buf(0, 64, 2)],
        remote: RemoteBuf::new(dst.bytes.borrow().as_ptr() as u64, Rkey(3)),
        slots: 8,
        slot_len: 128,
    };
    let mut q = SoftQueue { dst: &dst, staged: vec![], done: vec![], unsignaled: vec![] };
    let mut host = Liar(SoftHost { stamps: &stamps, dst: &dst });
    let plan = Plan { writes: 100, pieces: vec![1], inline_every: 0, ..Plan::default() };
    assert!(loadgen::run(&mut q, &bufs, &mut host, &plan).is_err());
}
