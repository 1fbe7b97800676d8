//! The engine thread: executes send WQEs the way the HCA's send pipeline does.
//!
//! This module schedules; each stage of one WQE has its own module:
//!
//! | stage | module | what it does |
//! |---|---|---|
//! | fetch | `fetch` | reads the WQE's blocks from the ring (or takes the BlueFlame copy), compares the doorbell |
//! | validate | `validate` | checks every segment and each lkey |
//! | execute | `execute` | gathers the payload, hands it to the responder, applies its answer (ACK, RNR NAK, error) |
//! | complete | `complete` | writes the requester's CQE: success, or error and the QP to ERR |
//! | flush | `flush` | in ERR, one flush CQE per send WQE and per posted receive WQE |
//!
//! # Scheduling
//!
//! The thread spins briefly after work, then parks for at most [`PARK`]; a doorbell (or a
//! command that needs it) unparks it. Every [`PARK`] it also rescans for time-driven work
//! (RNR retries, receive queues of QPs in ERR), so an idle model costs a wake-up per
//! millisecond and no busy core.
//!
//! # Per doorbell
//!
//! Each doorbell carries the send counter that `dbrec[1]` held when it was rung. The engine
//! executes the WQEs from its own counter up to that value, in order:
//!
//! 1. fetch block 0 at slot `counter & (sq_cnt - 1)`, read DS, fetch the other
//!    `ceil(ds*16/64) - 1` blocks from the following slots (wrapping to slot 0);
//! 2. for the last WQE of the doorbell, compare its first 8 bytes with the doorbell, and for a
//!    BlueFlame doorbell execute the BlueFlame copy (and note if the ring differs);
//! 3. validate and gather the payload through the lkeys;
//! 4. deliver the message to the responder (same model, or across the [`Wire`](crate::Wire));
//! 5. complete: a `REQ` CQE if the WQE asked for one (`fm_ce_se & 0x08`), or an error CQE
//!    and the QP to ERR.
//!
//! In ERR every WQE on the wire (sent, not yet acknowledged), then every WQE up to each
//! doorbell's counter, gets a flush CQE (`REQ_ERR`, syndrome `WR_FLUSH_ERR`), one per WQE,
//! signaled or not, in the order posted; posted receive WQEs get `RESP_ERR` flushes.
//!
//! Steps 1 to 3 run under the device lock; step 4 runs with no lock held, and step 5 takes
//! the lock again and drops the result if the QP was reset or destroyed meanwhile.

mod complete;
mod execute;
mod fetch;
mod flush;
mod validate;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::counters::{bump, Reason};
use crate::model::Shared;
use crate::objects::QpState;
use crate::responder::Packet;
use crate::transport::{requester, Addr, Tx};

pub(crate) use complete::{fail_inflight, req_cqe};
pub(crate) use flush::flush_on_error;

/// Longest park of an idle engine.
pub const PARK: Duration = Duration::from_millis(1);
/// Spins after the last work before parking.
const SPINS: u32 = 256;
pub use crate::transport::timer::RNR_DELAY;

/// The thread's body.
pub(crate) fn run(sh: &Arc<Shared>) {
    let mut idle = 0u32;
    let mut last_scan = Instant::now();
    while !sh.stop.load(Ordering::Acquire) {
        let woke = sh.work.swap(false, Ordering::AcqRel);
        if woke || last_scan.elapsed() >= PARK {
            sh.busy.store(true, Ordering::Release);
            let progress = pass(sh);
            sh.busy.store(false, Ordering::Release);
            last_scan = Instant::now();
            if woke || progress {
                idle = 0;
                continue;
            }
        }
        idle = idle.saturating_add(1);
        if idle < SPINS {
            std::hint::spin_loop();
        } else {
            std::thread::park_timeout(PARK);
        }
    }
}

/// One pass over every QP with work. True if anything happened.
fn pass(sh: &Arc<Shared>) -> bool {
    let qpns: Vec<u32> = {
        let dev = sh.dev();
        let mut v: Vec<u32> = dev.ready.iter().copied().collect();
        v.extend(
            dev.qps
                .iter()
                .filter(|(n, q)| {
                    !dev.ready.contains(n)
                        && q.state == QpState::Error
                        && (q.spec.log_rq_size.is_some() || !q.req.inflight.is_empty())
                })
                .map(|(n, _)| *n),
        );
        v
    };
    let mut progress = crate::transport::drain(sh);
    for qpn in qpns {
        progress |= service(sh, qpn);
    }
    progress | crate::transport::drain(sh)
}

/// One doorbell is done with: the model's count of outstanding doorbells drops.
fn done_doorbell(sh: &Shared) {
    sh.outstanding.fetch_sub(1, Ordering::AcqRel);
}

/// A WQE ready to go on the wire.
#[derive(Debug)]
pub(crate) struct Request {
    pub idx: u16,
    pub wqebbs: u32,
    pub opcode: u8,
    pub signaled: bool,
    pub gen: u64,
    /// The packets' addresses (the QP's path, or a datagram's address vector).
    pub addr: Addr,
    /// The requester CQE's `byte_cnt`: bytes sent, read, or 8 for an atomic.
    pub byte_cnt: u32,
    /// Where a READ's data or an atomic's original value goes: (bus address, length).
    pub scatter: Vec<(u64, u64)>,
    pub packet: Packet,
}

/// What fetching and validating the WQE at the QP's counter gave.
enum Prepared {
    /// Completed in error already.
    Failed,
    Send(Box<Request>),
}

/// Run QP `qpn` as far as it goes now.
fn service(sh: &Arc<Shared>, qpn: u32) -> bool {
    let mut progress = false;
    loop {
        let prepared = {
            let mut guard = sh.dev();
            let dev = &mut *guard;
            let Some(qp) = dev.qps.get_mut(&qpn) else {
                dev.ready.remove(&qpn);
                return progress;
            };
            match qp.state {
                QpState::Error => {
                    progress |= flush::flush(sh, dev, qpn);
                    return progress;
                }
                QpState::Rts => {}
                _ => {
                    let n = qp.pending.len();
                    qp.pending.clear();
                    dev.ready.remove(&qpn);
                    drop(guard);
                    for _ in 0..n {
                        done_doorbell(sh);
                        bump(&sh.stats.ignored_doorbells);
                        sh.note(qpn, None, Reason::DoorbellQpNotReady { qpn });
                    }
                    return progress;
                }
            }
            let Some(db) = qp.pending.front() else {
                dev.ready.remove(&qpn);
                return progress;
            };
            let covered = u32::from(db.target.wrapping_sub(qp.sq_pi));
            if covered == 0 && !qp.req.inflight.is_empty() && qp.pending.len() == 1 {
                // Everything under the last doorbell is on the wire: it stays outstanding
                // (the model is not quiet) until the acknowledgements complete its WQEs.
                return progress;
            }
            if covered == 0 {
                let db = qp.pending.pop_front().expect("front exists");
                drop(guard);
                done_doorbell(sh);
                if !db.synthetic && !db.touched {
                    sh.note(qpn, None, Reason::DoorbellNothingNew { qpn });
                }
                progress = true;
                continue;
            }
            if covered > qp.sq_cnt() {
                let from = qp.sq_pi;
                let db = qp.pending.pop_front().expect("front exists");
                drop(guard);
                done_doorbell(sh);
                bump(&sh.stats.ignored_doorbells);
                sh.note(qpn, None, Reason::DoorbellRecordJump { from, to: db.target });
                progress = true;
                continue;
            }
            if !qp.req.may_start() {
                return progress;
            }
            let mut tx = Tx::default();
            if let Prepared::Send(req) = fetch::prepare(sh, dev, qpn, covered) {
                requester::post(sh, dev, qpn, *req, &mut tx);
            }
            tx
        };
        progress = true;
        prepared.flush(sh);
    }
}
