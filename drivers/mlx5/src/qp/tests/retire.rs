//! The send ring's one-step retirement (`datapath::send`: ordinals, runs of one region, the
//! tagged reference queue) against a plain reference model: a queue of outstanding requests,
//! each with the regions it counted, retired one by one as `cq.c` describes. Posts mix
//! signalled and unsignalled requests, one and several SGEs, the same region as the previous
//! request and others, inline payloads (no region, several blocks), committed and dropped
//! batches; CQEs name random outstanding requests, with success, error and flush syndromes,
//! and are reaped through completion arrays of 1 to 4 entries. Hostile counters (inside a
//! WQE, already retired, at or past `pi`) are refused with nothing retired or released.

use std::collections::VecDeque;
use std::vec::Vec;

use proptest::prelude::*;
use rdma_pmd::{Completion, Error, LocalBuf, Post, SendFlags, SendQueue, WcStatus};

use super::{connected, rig, REMOTE};
use crate::control::Access;
use crate::layout::codes::Syndrome;

const REGIONS: usize = 3;
const SQ: usize = 32;

/// One request: the region of each SGE (`None`: an inline payload instead of SGEs).
#[derive(Clone, Debug)]
struct PostSpec {
    signaled: bool,
    regions: Option<Vec<usize>>,
}

#[derive(Clone, Debug)]
enum Op {
    /// Requests in one batch, committed or dropped.
    Batch { posts: Vec<PostSpec>, commit: bool },
    /// A CQE for the outstanding request `pick % len`: 0 success, 1 error, 2 flush.
    Cqe { pick: usize, kind: u8 },
    /// A CQE whose counter no outstanding request starts at: 0 inside a WQE, 1 already
    /// retired, 2 at or past `pi`.
    Hostile { pick: u16, kind: u8 },
}

fn post_spec() -> impl Strategy<Value = PostSpec> {
    let regions = prop_oneof![
        4 => prop::collection::vec(0..REGIONS, 1..=6).prop_map(Some),
        1 => Just(None),
    ];
    (any::<bool>(), regions).prop_map(|(signaled, regions)| PostSpec { signaled, regions })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (prop::collection::vec(post_spec(), 1..6), prop::bool::weighted(0.9))
            .prop_map(|(posts, commit)| Op::Batch { posts, commit }),
        4 => (any::<usize>(), prop_oneof![8 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)])
            .prop_map(|(pick, kind)| Op::Cqe { pick, kind }),
        1 => (any::<u16>(), 0u8..3).prop_map(|(pick, kind)| Op::Hostile { pick, kind }),
    ]
}

/// An outstanding request of the model.
#[derive(Clone, Debug)]
struct Req {
    wr_id: u64,
    counter: u16,
    bbs: u16,
    signaled: bool,
    /// The regions it counted: one per run of equal regions in its SGE list.
    counted: Vec<usize>,
}

#[derive(Default)]
struct Model {
    outstanding: VecDeque<Req>,
    in_error: bool,
}

impl Model {
    fn in_flight(&self) -> [u32; REGIONS] {
        let mut n = [0; REGIONS];
        for r in &self.outstanding {
            for &g in &r.counted {
                n[g] += 1;
            }
        }
        n
    }

    /// Retire through request `k` for a CQE with `status`; the completions the user sees.
    fn cqe(&mut self, k: usize, status: WcStatus) -> Vec<(u64, WcStatus)> {
        let flush_skipped = status == WcStatus::WrFlushErr && self.in_error;
        let mut out = Vec::new();
        for _ in 0..k {
            let r = self.outstanding.pop_front().unwrap();
            if flush_skipped {
                out.push((r.wr_id, WcStatus::WrFlushErr));
            } else if r.signaled {
                out.push((r.wr_id, WcStatus::Success));
            }
        }
        let r = self.outstanding.pop_front().unwrap();
        if r.signaled || status != WcStatus::Success {
            out.push((r.wr_id, status));
        }
        if status != WcStatus::Success {
            self.in_error = true;
        }
        out
    }
}

fn runs(regions: &[usize]) -> Vec<usize> {
    let mut v: Vec<usize> = Vec::new();
    for &g in regions {
        if v.last() != Some(&g) {
            v.push(g);
        }
    }
    v
}

/// Blocks of a WRITE WQE: control and remote-address segments, then one data segment per SGE
/// or the inline payload (a 4-byte header and `INLINE` bytes, padded to 16).
fn bbs(spec: &PostSpec) -> u16 {
    let ds = match &spec.regions {
        Some(r) => 2 + r.len(),
        None => 2 + (4 + INLINE).div_ceil(16),
    };
    ds.div_ceil(4) as u16
}

const INLINE: usize = 100;

fn run(ops: &[Op]) {
    let r = rig(9);
    let regions: [_; REGIONS] =
        core::array::from_fn(|_| r.dev.reg(4096, Access::LOCAL_WRITE).unwrap());
    let bufs: [LocalBuf<'_>; REGIONS] = core::array::from_fn(|g| regions[g].as_buf().unwrap());
    let payload = [0x5au8; INLINE];
    {
        let (mut qp, mut hw) = connected::<SQ>(&r);
        let mut m = Model::default();
        let mut next_id = 0u64;
        let mut polls = 0usize;
        for op in ops {
            match op {
                Op::Batch { posts, commit } => {
                    let pi0 = qp.sq_pi();
                    let mut pending = Vec::new();
                    let mut pi = pi0;
                    {
                        let mut b = qp.batch();
                        for spec in posts {
                            let flags = if spec.signaled {
                                SendFlags::SIGNALED
                            } else {
                                SendFlags::empty()
                            };
                            let wr_id = next_id;
                            next_id += 1;
                            let res = match &spec.regions {
                                Some(rs) => {
                                    let sgl: Vec<LocalBuf<'_>> = rs
                                        .iter()
                                        .enumerate()
                                        .map(|(k, &g)| bufs[g].slice(k * 64, 64).unwrap())
                                        .collect();
                                    b.post_writev(wr_id, &sgl, flags, REMOTE)
                                }
                                None => b.post_write_inline(wr_id, &[&payload], flags, REMOTE),
                            };
                            match res {
                                Ok(()) => {
                                    assert!(!m.in_error, "a post accepted in error");
                                    let req = Req {
                                        wr_id,
                                        counter: pi,
                                        bbs: bbs(spec),
                                        signaled: spec.signaled,
                                        counted: spec
                                            .regions
                                            .as_deref()
                                            .map(runs)
                                            .unwrap_or_default(),
                                    };
                                    pi = pi.wrapping_add(req.bbs);
                                    pending.push(req);
                                }
                                Err(Error::NotConnected) => assert!(m.in_error),
                                Err(Error::QueueFull { .. }) => {
                                    let used: u32 =
                                        m.outstanding.iter().map(|r| r.bbs as u32).sum::<u32>()
                                            + pending.iter().map(|r| r.bbs as u32).sum::<u32>();
                                    assert!(
                                        used + bbs(spec) as u32 > SQ as u32,
                                        "refused with room"
                                    );
                                }
                                Err(e) => panic!("post: {e:?}"),
                            }
                        }
                        if *commit {
                            b.commit();
                        }
                    }
                    if *commit {
                        m.outstanding.extend(pending);
                    }
                    assert_eq!(qp.sq_pi(), if *commit { pi } else { pi0 });
                }
                Op::Cqe { pick, kind } => {
                    if m.outstanding.is_empty() {
                        continue;
                    }
                    let k = pick % m.outstanding.len();
                    let counter = m.outstanding[k].counter;
                    let (err, status) = match kind {
                        0 => (None, WcStatus::Success),
                        1 => (Some((Syndrome::RemoteAccessErr, 0x88)), WcStatus::RemAccessErr),
                        _ => (Some((Syndrome::WrFlushErr, 0)), WcStatus::WrFlushErr),
                    };
                    hw.send_cqe(counter, err);
                    let want = m.cqe(k, status);
                    let mut got = Vec::new();
                    loop {
                        polls += 1;
                        let mut out = [Completion::default(); 4];
                        let n = qp.poll(&mut out[..1 + polls % 4]).unwrap();
                        if n == 0 {
                            break;
                        }
                        got.extend(out[..n].iter().map(|c| (c.wr_id, c.status)));
                    }
                    assert_eq!(got, want, "completions of the CQE for {counter}");
                }
                Op::Hostile { pick, kind } => {
                    let tail = m.outstanding.front().map(|r| r.counter).unwrap_or(qp.sq_pi());
                    let counter = match kind {
                        0 => match m.outstanding.iter().find(|r| r.bbs > 1) {
                            Some(r) => r.counter.wrapping_add(1 + pick % (r.bbs - 1)),
                            None => continue,
                        },
                        1 => tail.wrapping_sub(1 + pick % 8),
                        _ => qp.sq_pi().wrapping_add(pick % 8),
                    };
                    let before =
                        (qp.outstanding(), regions.each_ref().map(|g| g.usage().in_flight()));
                    hw.send_cqe(counter, None);
                    let mut out = [Completion::default(); 4];
                    assert!(matches!(qp.poll(&mut out), Err(Error::Fault(_))), "counter {counter}");
                    assert_eq!(qp.poll(&mut out), Ok(0));
                    let after =
                        (qp.outstanding(), regions.each_ref().map(|g| g.usage().in_flight()));
                    assert_eq!(before, after, "a refused CQE retired or released something");
                }
            }
            assert_eq!(qp.outstanding() as usize, m.outstanding.len());
            let in_flight = regions.each_ref().map(|g| g.usage().in_flight());
            assert_eq!(in_flight, m.in_flight(), "regions' in-flight counts");
        }
    }
    for g in &regions {
        assert_eq!(g.usage().in_flight(), 0, "released at the QP's drop");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn one_step_retirement_matches_the_model(ops in prop::collection::vec(op(), 1..80)) {
        run(&ops);
    }
}

/// The 16-bit ordinals and counts wrap: many laps of a small ring, with CQEs retiring from
/// one to a batch of requests, runs of one region and of alternating ones.
#[test]
fn ordinals_wrap_past_2_16() {
    let mut ops = Vec::new();
    for lap in 0..9000usize {
        let one = lap % 3 == 0;
        let posts = (0..8)
            .map(|k| PostSpec {
                signaled: k == 7 || lap % 5 == 0,
                regions: Some(if one { std::vec![0] } else { std::vec![k % REGIONS, 0] }),
            })
            .collect();
        ops.push(Op::Batch { posts, commit: true });
        ops.push(Op::Cqe { pick: usize::MAX, kind: 0 });
    }
    // `pick % len` of usize::MAX: 8 outstanding, so the last of the batch.
    run(&ops);
}
