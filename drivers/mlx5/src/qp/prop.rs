//! Property test of the send ring's bookkeeping: random posts (gather lists over three
//! regions, inline, batches kept or dropped) against a device played by the test, which
//! completes like hardware (one CQE per signalled WQE; on an error, the failing WQE and one
//! flush per later WQE). A reference model predicts every completion, the free space and each
//! region's in-flight count after every step.

use std::collections::VecDeque;
use std::vec::Vec;

use proptest::prelude::*;
use rdma_pmd::{Completion, Error, LocalBuf, PostWrite, SendFlags, SendQueue, WcStatus};

use super::tests::{connected, rig, Hw, REMOTE};
use crate::control::Access;
use crate::layout::codes::Syndrome;

const SQ: usize = 16;

/// One request: buffers as (region, length), signalled, inline.
type Req = (Vec<(u8, u8)>, bool, bool);

#[derive(Clone, Debug)]
enum Op {
    /// Requests in one batch; dropped or rung.
    Post(Vec<Req>, bool),
    /// The device executes everything rung and reports the signalled requests.
    Complete,
    /// The device fails the oldest request not executed and flushes the rest.
    Fail,
}

fn op() -> impl Strategy<Value = Op> {
    let buf = (0u8..3, prop_oneof![Just(0u8), 1u8..40]);
    let req = (proptest::collection::vec(buf, 0..7), any::<bool>(), proptest::bool::weighted(0.15));
    prop_oneof![
        6 => (proptest::collection::vec(req, 1..4), proptest::bool::weighted(0.2))
            .prop_map(|(r, d)| Op::Post(r, d)),
        3 => Just(Op::Complete),
        1 => Just(Op::Fail),
    ]
}

/// A request as the reference sees it.
#[derive(Clone, Debug)]
struct Wr {
    id: u64,
    counter: u16,
    blocks: u16,
    signaled: bool,
    /// Region indices held (one per run of non-empty buffers from the same region).
    holds: Vec<usize>,
}

fn shape(bufs: &[(u8, u8)], inline: bool) -> (u16, Vec<usize>) {
    let nonempty: Vec<_> = bufs.iter().filter(|b| b.1 != 0).collect();
    let ds = if inline {
        let len: usize = bufs.iter().map(|b| b.1 as usize).sum();
        2 + if len == 0 { 0 } else { (4 + len).div_ceil(16) }
    } else {
        2 + nonempty.len()
    };
    let mut holds = Vec::new();
    if !inline {
        for b in &nonempty {
            if holds.last() != Some(&(b.0 as usize)) {
                holds.push(b.0 as usize);
            }
        }
    }
    (ds.div_ceil(4) as u16, holds)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn every_request_completes_as_predicted(ops in proptest::collection::vec(op(), 1..40)) {
        let r = rig(9);
        let regions = [
            r.dev.reg(4096, Access::LOCAL_WRITE).unwrap(),
            r.dev.reg(4096, Access::LOCAL_WRITE).unwrap(),
            r.dev.reg(4096, Access::LOCAL_WRITE).unwrap(),
        ];
        let (mut qp, mut hw): (_, Hw) = connected::<SQ>(&r);
        let mut next_id = 0u64;
        // Rung requests the driver has not retired, oldest first; `executed` of them ran.
        let mut live: VecDeque<Wr> = VecDeque::new();
        let mut executed = 0usize;
        let mut in_error = false;
        let mut out = [Completion::default(); 4];
        for op in ops {
            let mut expect: Vec<(u64, WcStatus)> = Vec::new();
            match op {
                Op::Post(reqs, drop_it) => {
                    let mut pi = qp.sq_pi();
                    let mut b = qp.batch();
                    let mut pushed = Vec::new();
                    for (bufs, signaled, inline) in reqs {
                        let sgl: Vec<LocalBuf<'_>> = bufs
                            .iter()
                            .map(|&(g, len)| regions[g as usize].slice(0, len as usize).unwrap())
                            .collect();
                        let id = next_id;
                        next_id += 1;
                        let mut flags = if signaled { SendFlags::SIGNALED } else { SendFlags::empty() };
                        if inline {
                            flags |= SendFlags::INLINE;
                        }
                        let (blocks, holds) = shape(&bufs, inline);
                        let used: u16 = live.iter().chain(pushed.iter()).map(|w: &Wr| w.blocks).sum();
                        let res = b.post_writev(id, &sgl, flags, REMOTE);
                        if in_error {
                            prop_assert_eq!(res, Err(Error::NotConnected));
                            continue;
                        }
                        if blocks > SQ as u16 - used {
                            let want = Error::QueueFull { needed: blocks as u32, free: (SQ as u16 - used) as u32 };
                            prop_assert_eq!(res, Err(want));
                            continue;
                        }
                        prop_assert_eq!(res, Ok(()));
                        pushed.push(Wr { id, counter: pi, blocks, signaled, holds });
                        pi = pi.wrapping_add(blocks);
                    }
                    if drop_it {
                        drop(b);
                    } else {
                        b.commit();
                        live.extend(pushed);
                    }
                }
                Op::Complete if !in_error => {
                    for w in live.iter().skip(executed) {
                        if w.signaled {
                            hw.send_cqe(w.counter, None);
                        }
                    }
                    executed = live.len();
                    // Everything up to the last signalled request retires; only signalled report.
                    if let Some(last) = live.iter().rposition(|w| w.signaled) {
                        for w in live.drain(..=last) {
                            if w.signaled {
                                expect.push((w.id, WcStatus::Success));
                            }
                        }
                        executed -= last + 1;
                    }
                }
                Op::Fail if !in_error && executed < live.len() => {
                    // Requests before the failing one executed; their CQEs are already out.
                    let first = executed;
                    let fail = &live[first];
                    hw.send_cqe(fail.counter, Some((Syndrome::RemoteAccessErr, 0x42)));
                    for w in live.iter().skip(first + 1) {
                        hw.send_cqe(w.counter, Some((Syndrome::WrFlushErr, 0)));
                    }
                    for (k, w) in live.drain(..).enumerate() {
                        if k == first {
                            expect.push((w.id, WcStatus::RemAccessErr));
                        } else if k > first {
                            expect.push((w.id, WcStatus::WrFlushErr));
                        }
                    }
                    executed = 0;
                    in_error = true;
                }
                _ => {}
            }
            let mut got = Vec::new();
            loop {
                let n = qp.poll(&mut out).unwrap();
                if n == 0 {
                    break;
                }
                got.extend(out[..n].iter().map(|c| (c.wr_id, c.status)));
            }
            prop_assert_eq!(&got, &expect);
            prop_assert_eq!(qp.outstanding() as usize, live.len());
            for (g, region) in regions.iter().enumerate() {
                let held = live.iter().map(|w| w.holds.iter().filter(|h| **h == g).count()).sum::<usize>();
                prop_assert_eq!(region.usage().in_flight() as usize, held, "region {}", g);
            }
        }
        drop(qp);
        for region in &regions {
            prop_assert_eq!(region.usage().in_flight(), 0);
        }
    }
}
